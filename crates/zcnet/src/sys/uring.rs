//! io_uring: which zero-copy send opcodes the kernel has, and what one `IORING_OP_SEND_ZC` reports.
//!
//! A zero-copy send completes twice: first the result CQE (bytes sent, with `IORING_CQE_F_MORE` set
//! when a notification will follow), then a notification CQE (`IORING_CQE_F_NOTIF`) once the kernel no
//! longer references the buffer. With `IORING_SEND_ZC_REPORT_USAGE` (kernel 6.2) the notification's
//! `res` has `IORING_NOTIF_USAGE_ZC_COPIED` set when the kernel copied the data after all.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{IoUring, Probe, cqueue, opcode, types};

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h), in the SQE's `ioprio`.
pub const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: bit of a notification's `res` meaning "the data was copied".
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// Zero-copy send opcodes the running kernel accepts (`IORING_REGISTER_PROBE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcOpcodes {
    /// `IORING_OP_SEND_ZC` (kernel 6.0).
    pub send_zc: bool,
    /// `IORING_OP_SENDMSG_ZC` (kernel 6.1).
    pub sendmsg_zc: bool,
}

/// Sets up a small ring and asks the kernel which zero-copy send opcodes it supports.
/// `ENOSYS` or `EPERM` (io_uring disabled by `kernel.io_uring_disabled`) come back as errors.
pub fn zero_copy_opcodes() -> io::Result<ZcOpcodes> {
    let ring = IoUring::new(2)?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    Ok(ZcOpcodes {
        send_zc: probe.is_supported(opcode::SendZc::CODE),
        sendmsg_zc: probe.is_supported(opcode::SendMsgZc::CODE),
    })
}

/// What one `IORING_OP_SEND_ZC` with `IORING_SEND_ZC_REPORT_USAGE` reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendZcReport {
    /// Bytes the result CQE says were sent.
    pub sent: usize,
    /// Whether the notification said the kernel copied the data (`IORING_NOTIF_USAGE_ZC_COPIED`).
    pub copied: bool,
}

/// Sends `buf` once on connected socket `fd` with `IORING_OP_SEND_ZC` and `REPORT_USAGE`, waiting for
/// both the result and the notification CQE. A kernel without `REPORT_USAGE` fails the send with
/// `EINVAL`, returned as the error.
pub fn send_zc_reporting_usage(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<SendZcReport> {
    let mut ring = IoUring::new(4)?;
    let len = u32::try_from(buf.len()).map_err(|_| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
    let sqe = opcode::SendZc::new(types::Fd(fd.as_raw_fd()), buf.as_ptr(), len)
        .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
        .build()
        .user_data(1);
    // SAFETY: `buf` outlives the ring: this function waits below until the kernel has posted the
    // notification CQE (it no longer references the buffer) or the result CQE without F_MORE (it never
    // took a reference), and the ring is dropped before returning in every other case.
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    let mut sent = None;
    let mut copied = None;
    while copied.is_none() {
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            let flags = cqe.flags();
            if cqueue::notif(flags) {
                copied = Some(cqe.result() as u32 & IORING_NOTIF_USAGE_ZC_COPIED != 0);
            } else if cqe.result() < 0 {
                return Err(io::Error::from_raw_os_error(-cqe.result()));
            } else {
                sent = Some(cqe.result() as usize);
                if !cqueue::more(flags) {
                    copied = Some(true);
                }
            }
        }
    }
    Ok(SendZcReport {
        sent: sent.unwrap_or(0),
        copied: copied.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn send_zc_over_loopback_arrives_and_reports_usage() {
        let ops = match zero_copy_opcodes() {
            Ok(ops) if ops.send_zc => ops,
            other => {
                let reason = format!("io_uring SEND_ZC unavailable: {other:?}");
                testnet::skip("send_zc_over_loopback_arrives_and_reports_usage", &reason);
                return;
            }
        };
        assert!(ops.send_zc);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let report = send_zc_reporting_usage(client.as_fd(), &data).unwrap();
        assert_eq!(report.sent, data.len());
        // Loopback delivers to a local socket: the kernel copies (kernel-facts.md).
        assert!(report.copied);
        let mut got = vec![0u8; data.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, data);
    }
}
