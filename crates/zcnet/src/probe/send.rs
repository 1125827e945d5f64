//! Send-side findings: SO_ZEROCOPY per protocol, what MSG_ZEROCOPY completions say over loopback, and
//! io_uring's zero-copy send.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::Duration;

use super::tcp_loopback::tcp_loopback_check;
use super::{Finding, Support, refusal};
use crate::sys;
use crate::tx::{Mode, SenderConfig, TxStats, UdpSender};

pub(super) fn so_zerocopy(feature: &str, domain: i32, kind: i32) -> Finding {
    let result = sys::socket::socket(domain, kind, 0).and_then(|fd| {
        sys::socket::set_int_option(fd.as_fd(), libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)
    });
    Finding::from_result(feature, result, |_| {
        "setsockopt(SO_ZEROCOPY) accepted".into()
    })
}
/// Sends this many MSG_ZEROCOPY writes over loopback and reads their completions.
pub(super) const LOOPBACK_SENDS: usize = 8;
/// Bytes per loopback write: far above any copy threshold.
pub(super) const LOOPBACK_SEND_SIZE: usize = 64 * 1024;
/// A verdict on zero-copy sends from the completions they produced.
pub(super) fn loopback_send(feature: &str, stats: Result<TxStats, String>) -> Finding {
    match stats {
        Err(reason) => Finding::new(feature, Support::No, reason),
        Ok(s) if s.zc_ids > 0 => Finding::new(
            feature,
            Support::Yes,
            format!("{} ids zero-copied, {} copied", s.zc_ids, s.copied_ids),
        ),
        Ok(s) if s.copied_ids > 0 => Finding::new(
            feature,
            Support::Partial,
            format!(
                "every completion copied ({} ids, SO_EE_CODE_ZEROCOPY_COPIED): delivery to a local socket copies",
                s.copied_ids
            ),
        ),
        Ok(s) if let Some((copied, why)) = pin_refusal(&s) => Finding::new(
            feature,
            Support::No,
            format!(
                "no zero-copy send happened ({copied} of {} sends copied): {why}",
                s.calls
            ),
        ),
        Ok(s) => Finding::new(
            feature,
            Support::No,
            format!(
                "no zero-copy send happened ({} of {} sends copied, none refused)",
                s.copy_calls, s.calls
            ),
        ),
    }
}

/// Why a sender copied sends whose pages could not be pinned, from its statistics: how many it
/// copied for that and the remedy — the locked-memory budget had no room, else the kernel answered
/// `ENOBUFS`; `None` when neither happened.
pub(super) fn pin_refusal(s: &TxStats) -> Option<(u64, String)> {
    if s.copy_memlock > 0 {
        Some((s.copy_memlock, crate::tx::budget::memlock_reason()))
    } else if s.copy_enobufs > 0 {
        Some((s.copy_enobufs, crate::tx::error::enobufs_reason()))
    } else {
        None
    }
}

/// One MSG_ZEROCOPY write of [`LOOPBACK_SENDS`] x [`LOOPBACK_SEND_SIZE`] bytes over TCP loopback.
pub(super) fn tcp_zerocopy_stats() -> Result<TxStats, String> {
    let check = tcp_loopback_check(LOOPBACK_SENDS * LOOPBACK_SEND_SIZE, Duration::from_secs(5))
        .map_err(|e| refusal(&e))?;
    check.zerocopy.map_err(|f| f.to_string())?;
    Ok(check.stats)
}

/// Sends [`LOOPBACK_SENDS`] zero-copy datagrams to a local UDP socket.
pub(super) fn udp_zerocopy_stats() -> Result<TxStats, String> {
    let io = |e: io::Error| refusal(&e);
    let receiver = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
    let sender = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
    sender
        .connect(receiver.local_addr().map_err(io)?)
        .map_err(io)?;
    let mut tx = UdpSender::new(sender, SenderConfig::with_mode(Mode::ZeroCopy));
    tx.zerocopy_status().map_err(|f| f.to_string())?;
    for _ in 0..LOOPBACK_SENDS {
        tx.send(vec![0x5a; 8 * 1024]).map_err(|e| e.to_string())?;
    }
    tx.flush(Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    Ok(tx.stats().clone())
}
/// The rows [`uring`] gives.
pub(super) const URING_FEATURES: [&str; 2] = ["io_uring.send_zc", "io_uring.send_zc_report_usage"];

#[cfg(feature = "io-uring")]
pub(super) fn uring() -> Vec<Finding> {
    let ops = match sys::uring::zero_copy_opcodes() {
        Ok(ops) => ops,
        Err(e) => {
            // Name who refused the ring (a filter, a sysctl, the kernel), not just the errno.
            let why = e
                .raw_os_error()
                .and_then(|errno| super::seccomp::io_uring_refusal("io_uring_setup", errno));
            let reason = match why {
                Some(why) => format!("{}: {why}", refusal(&e)),
                None => refusal(&e),
            };
            return vec![
                Finding::new("io_uring.send_zc", Support::No, reason.clone()),
                Finding::new("io_uring.send_zc_report_usage", Support::No, reason),
            ];
        }
    };
    let send_zc = if ops.send_zc {
        Finding::new(
            "io_uring.send_zc",
            Support::Yes,
            format!("opcode supported; sendmsg_zc: {}", ops.sendmsg_zc),
        )
    } else {
        Finding::new(
            "io_uring.send_zc",
            Support::No,
            "opcode not supported by IORING_REGISTER_PROBE",
        )
    };
    let usage = if !ops.send_zc {
        Finding::new("io_uring.send_zc_report_usage", Support::No, "no SEND_ZC")
    } else {
        let sent = (|| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let client = std::net::TcpStream::connect(listener.local_addr()?)?;
            let _server = listener.accept()?;
            sys::uring::send_zc_reporting_usage(client.as_fd(), &[0x5a; 16384])
        })();
        match sent {
            Ok(r) if r.copied => Finding::new(
                "io_uring.send_zc_report_usage",
                Support::Yes,
                "notification reports usage; loopback send was copied (local delivery)",
            ),
            Ok(_) => Finding::new(
                "io_uring.send_zc_report_usage",
                Support::Yes,
                "notification reports usage; loopback send was not copied",
            ),
            Err(e) => Finding::new("io_uring.send_zc_report_usage", Support::No, refusal(&e)),
        }
    };
    vec![send_zc, usage]
}

#[cfg(not(feature = "io-uring"))]
pub(super) fn uring() -> Vec<Finding> {
    vec![Finding::new(
        "io_uring.send_zc",
        Support::No,
        "zcnet built without the io-uring feature",
    )]
}
