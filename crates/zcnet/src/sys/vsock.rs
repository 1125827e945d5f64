//! AF_VSOCK sockets (linux/vm_sockets.h): creation, `sockaddr_vm`, bind/connect/listen/accept, and the
//! constants of its MSG_ZEROCOPY completions.
//!
//! Kernel behaviour relied on: AF_VSOCK accepts `SO_ZEROCOPY` since Linux 6.7; completions arrive on the
//! error queue as `SOL_VSOCK/VSOCK_RECVERR` control messages with the same `sock_extended_err` as IP.
//! Without a loopback transport (`vsock_loopback`), binding to `VMADDR_CID_LOCAL` fails with
//! `EADDRNOTAVAIL`; [`loopback_available`] uses that to decide without connecting anywhere.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `SOL_VSOCK` (linux/socket.h): the control-message level of vsock completions.
pub const SOL_VSOCK: i32 = 287;
/// `VSOCK_RECVERR` (linux/vm_sockets.h): the control-message type of vsock error-queue entries.
pub const VSOCK_RECVERR: i32 = 1;
/// `VMADDR_CID_LOCAL` (linux/vm_sockets.h): the local context id of the loopback transport.
pub const VMADDR_CID_LOCAL: u32 = 1;
/// `VMADDR_CID_HOST` (linux/vm_sockets.h): the host, seen from a guest.
pub const VMADDR_CID_HOST: u32 = 2;
/// `VMADDR_CID_ANY` (linux/vm_sockets.h): bind to any local context id.
pub const VMADDR_CID_ANY: u32 = u32::MAX;
/// `VMADDR_PORT_ANY` (linux/vm_sockets.h): let the kernel pick a port.
pub const VMADDR_PORT_ANY: u32 = u32::MAX;

/// `struct sockaddr_vm` (linux/vm_sockets.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockaddrVm {
    /// `AF_VSOCK`.
    pub svm_family: u16,
    /// Reserved, zero.
    pub svm_reserved1: u16,
    /// Port.
    pub svm_port: u32,
    /// Context id.
    pub svm_cid: u32,
    /// `svm_flags` (VMADDR_FLAG_TO_HOST) and padding, zero.
    pub svm_zero: [u8; 4],
}

const _: () = assert!(mem::size_of::<SockaddrVm>() == 16);

impl SockaddrVm {
    /// The address `cid:port`.
    pub fn new(cid: u32, port: u32) -> Self {
        SockaddrVm {
            svm_family: libc::AF_VSOCK as u16,
            svm_port: port,
            svm_cid: cid,
            ..Default::default()
        }
    }
}

/// The two connection-oriented vsock socket types that support MSG_ZEROCOPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VsockType {
    /// `SOCK_STREAM`: a byte stream.
    Stream,
    /// `SOCK_SEQPACKET`: message boundaries preserved.
    Seqpacket,
}

/// Creates a close-on-exec AF_VSOCK socket of `ty`. Fails with `EAFNOSUPPORT` when the vsock module
/// is not loaded.
pub fn socket(ty: VsockType) -> io::Result<OwnedFd> {
    let t = match ty {
        VsockType::Stream => libc::SOCK_STREAM,
        VsockType::Seqpacket => libc::SOCK_SEQPACKET,
    };
    super::socket::socket(libc::AF_VSOCK, t, 0)
}

/// `bind(fd, cid:port)`.
pub fn bind(fd: BorrowedFd<'_>, addr: SockaddrVm) -> io::Result<()> {
    // SAFETY: `addr` is a live `sockaddr_vm` and the length passed is its size.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const SockaddrVm).cast(),
        mem::size_of::<SockaddrVm>() as libc::socklen_t
    ))
    .map(drop)
}

/// `connect(fd, cid:port)` (blocking, as the socket is).
pub fn connect(fd: BorrowedFd<'_>, addr: SockaddrVm) -> io::Result<()> {
    super::retry_if_interrupted(|| {
        // SAFETY: `addr` is a live `sockaddr_vm` and the length passed is its size.
        syscall!(connect(
            fd.as_raw_fd(),
            (&addr as *const SockaddrVm).cast(),
            mem::size_of::<SockaddrVm>() as libc::socklen_t
        ))
    })
    .map(drop)
}

/// `listen(fd, backlog)`.
pub fn listen(fd: BorrowedFd<'_>, backlog: i32) -> io::Result<()> {
    // SAFETY: plain listen(2) on a borrowed, open fd.
    syscall!(listen(fd.as_raw_fd(), backlog)).map(drop)
}

/// `accept4(fd, SOCK_CLOEXEC)`: the connected socket.
pub fn accept(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let new = super::retry_if_interrupted(|| {
        // SAFETY: no address buffer is requested (null, null).
        syscall!(accept4(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC
        ))
    })?;
    // SAFETY: `new` was just returned by accept4 and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `recv(fd, buf, 0)`: bytes received, 0 at end of stream.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let n = super::retry_if_interrupted(|| {
        // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes for the duration of the call.
        syscall!(recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0))
    })?;
    Ok(n as usize)
}

/// `send(fd, data, MSG_NOSIGNAL)` of one whole SOCK_SEQPACKET message, without `MSG_DONTWAIT`:
/// returns `data.len()` once the kernel enqueued all of it.
///
/// Kernel behaviour relied on (`vsock_connectible_sendmsg`, net/vmw_vsock/af_vsock.c, 6.12 and
/// later): the call enqueues as much of the message as the peer has credit for
/// (`seqpacket_enqueue` → `virtio_transport_stream_enqueue`), then sleeps for more credit, up to the
/// socket's `SO_SNDTIMEO`, until the whole message is enqueued, and only the last piece carries the
/// end-of-message mark (`VIRTIO_VSOCK_SEQ_EOM`, set when `msg_data_left` is 0). When it stops
/// partway — timeout (`EAGAIN`), signal (`EINTR`, or `ERESTARTSYS` without a send timeout, which a
/// restarting signal handler turns into the same call again from the message's first byte), an
/// allocation or socket error — it returns the error, not the count: a SOCK_SEQPACKET call returns
/// bytes only when the whole message went (`sk_type == SOCK_STREAM || total_written == len`). The
/// pieces already enqueued stay in the peer's queue with no end mark, so the peer would read them
/// merged with the next message. An error therefore may have cut the message, and it is not
/// retried here: not on `EINTR` either.
pub fn send_whole_message(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is a live slice of `data.len()` bytes that the kernel reads during the call
    // only (no MSG_ZEROCOPY).
    let n = syscall!(send(
        fd.as_raw_fd(),
        data.as_ptr().cast(),
        data.len(),
        libc::MSG_NOSIGNAL
    ))?;
    Ok(n as usize)
}

/// The longest `SO_SNDTIMEO` zcnet sets (a year): finite, so that a signal during the wait ends the
/// call with `EINTR` (`sock_intr_errno`) instead of restarting it from the message's first byte.
pub const LONGEST_SEND_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Sets `SO_SNDTIMEO`, the longest a blocking send sleeps for room (see [`send_whole_message`]),
/// to `timeout` (whole microseconds, at least one) capped at [`LONGEST_SEND_TIMEOUT`]; never to
/// zero, which the kernel takes as "no limit" (`sock_set_timeout`, net/core/sock.c).
pub fn set_send_timeout(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    let t = timeout.clamp(Duration::from_micros(1), LONGEST_SEND_TIMEOUT);
    SavedSendTimeout(libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    })
    .restore(fd)
}

/// A socket's `SO_SNDTIMEO` as the kernel holds it (zero: no limit), read to be put back as it was.
#[derive(Debug, Clone, Copy)]
pub struct SavedSendTimeout(libc::timeval);

impl SavedSendTimeout {
    /// Reads `fd`'s `SO_SNDTIMEO`.
    pub fn read(fd: BorrowedFd<'_>) -> io::Result<SavedSendTimeout> {
        // SAFETY: `timeval` is two integers: every bit pattern is valid.
        let (tv, _) = unsafe {
            super::socket::get_struct_option::<libc::timeval>(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDTIMEO,
            )
        }?;
        Ok(SavedSendTimeout(tv))
    }

    /// Sets it on `fd` (as it was read, or as [`set_send_timeout`] made it).
    pub fn restore(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: `self.0` is a live `timeval` and the length passed is exactly its size.
        syscall!(setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&self.0 as *const libc::timeval).cast(),
            mem::size_of::<libc::timeval>() as libc::socklen_t
        ))
        .map(drop)
    }
}

/// The socket's bound address (`getsockname`).
pub fn local_addr(fd: BorrowedFd<'_>) -> io::Result<SockaddrVm> {
    let mut addr = SockaddrVm::default();
    let mut len = mem::size_of::<SockaddrVm>() as libc::socklen_t;
    // SAFETY: `addr` and `len` are live locals; the kernel writes at most `len` bytes.
    syscall!(getsockname(
        fd.as_raw_fd(),
        (&mut addr as *mut SockaddrVm).cast(),
        &mut len
    ))?;
    Ok(addr)
}

/// `IOCTL_VM_SOCKETS_GET_LOCAL_CID` (linux/vm_sockets.h): `_IO(7, 0xb9)` on `/dev/vsock`.
const IOCTL_VM_SOCKETS_GET_LOCAL_CID: libc::c_ulong = 0x7b9;

/// This host's vsock context id, read from `/dev/vsock` (`IOCTL_VM_SOCKETS_GET_LOCAL_CID`).
/// `ENOENT` when the vsock core module is not loaded.
pub fn local_cid() -> io::Result<u32> {
    let dev = std::fs::File::open("/dev/vsock")?;
    let mut cid: u32 = 0;
    // SAFETY: the ioctl writes one u32 through the pointer, which points at a live local.
    syscall!(ioctl(
        dev.as_raw_fd(),
        IOCTL_VM_SOCKETS_GET_LOCAL_CID,
        &mut cid as *mut u32
    ))?;
    Ok(cid)
}

/// Whether a vsock loopback transport exists, decided without connecting: binding a stream socket to
/// `VMADDR_CID_LOCAL` succeeds only with one. `Err` carries the reason (errno name) when vsock is
/// unusable: `EAFNOSUPPORT` (no vsock module), `EADDRNOTAVAIL` (no loopback transport).
pub fn loopback_available() -> Result<(), String> {
    let fd = socket(VsockType::Stream)
        .map_err(|e| format!("socket(AF_VSOCK): {}", super::errno::error_name(&e)))?;
    bind(fd.as_fd(), SockaddrVm::new(VMADDR_CID_LOCAL, VMADDR_PORT_ANY)).map_err(|e| {
        format!(
            "bind(AF_VSOCK, VMADDR_CID_LOCAL): {} (no vsock loopback transport: load vsock_loopback)",
            super::errno::error_name(&e)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    // Offsets from linux/vm_sockets.h `struct sockaddr_vm`.
    #[test]
    fn sockaddr_vm_layout_matches_uapi() {
        assert_eq!(offset_of!(SockaddrVm, svm_family), 0);
        assert_eq!(offset_of!(SockaddrVm, svm_reserved1), 2);
        assert_eq!(offset_of!(SockaddrVm, svm_port), 4);
        assert_eq!(offset_of!(SockaddrVm, svm_cid), 8);
        assert_eq!(offset_of!(SockaddrVm, svm_zero), 12);
        assert_eq!(
            mem::size_of::<SockaddrVm>(),
            mem::size_of::<libc::sockaddr_vm>()
        );
        assert_eq!(VMADDR_CID_LOCAL, libc::VMADDR_CID_LOCAL);
        assert_eq!(VMADDR_CID_ANY, libc::VMADDR_CID_ANY);
    }
}
