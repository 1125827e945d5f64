//! MSG_ZEROCOPY plumbing: opting a socket in (`SO_ZEROCOPY`), sending with `sendmsg` (flags, a
//! destination, `UDP_SEGMENT` control messages) and reading completions from the socket's error queue
//! (`recvmsg(MSG_ERRQUEUE)`).
//!
//! Kernel behaviour relied on (Documentation/networking/msg_zerocopy.rst): every successful
//! `sendmsg(MSG_ZEROCOPY)` that carries data on a socket with `SO_ZEROCOPY` set takes the next value of a
//! per-socket 32-bit counter; completions arrive on the error queue as one control message per
//! `recvmsg(MSG_ERRQUEUE)` carrying a [`SockExtendedErr`] with `ee_origin == SO_EE_ORIGIN_ZEROCOPY`
//! and the inclusive id range `[ee_info, ee_data]`; `ee_code == SO_EE_CODE_ZEROCOPY_COPIED` says the
//! kernel copied the data after all. The control message is `SOL_IP/IP_RECVERR` for IPv4,
//! `SOL_IPV6/IPV6_RECVERR` for IPv6 and `SOL_VSOCK/VSOCK_RECVERR` for AF_VSOCK.
//!
//! Control messages are encoded and decoded as plain bytes in the layout of `struct cmsghdr`
//! (linux/socket.h), so that [`decode`] and [`ControlMessages`] are pure and testable on synthetic buffers.

use std::io::{self, IoSlice};
use std::mem;
use std::net::SocketAddr;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use super::vsock::{SOL_VSOCK, VSOCK_RECVERR};

/// `SO_EE_ORIGIN_ZEROCOPY` (linux/errqueue.h): the error-queue entry is a MSG_ZEROCOPY completion.
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (linux/errqueue.h): the kernel copied the data of the completed range.
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// `struct sock_extended_err` (linux/errqueue.h), as the kernel writes it into an `*_RECVERR` control
/// message.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockExtendedErr {
    /// Error number; 0 for a zero-copy completion.
    pub ee_errno: u32,
    /// Which subsystem queued the entry (`SO_EE_ORIGIN_*`).
    pub ee_origin: u8,
    /// Type (ICMP type for ICMP errors).
    pub ee_type: u8,
    /// Code; [`SO_EE_CODE_ZEROCOPY_COPIED`] for a copied zero-copy completion.
    pub ee_code: u8,
    /// Padding.
    pub ee_pad: u8,
    /// First id of a zero-copy completion range.
    pub ee_info: u32,
    /// Last id (inclusive) of a zero-copy completion range.
    pub ee_data: u32,
}

const _: () = assert!(mem::size_of::<SockExtendedErr>() == 16);

impl SockExtendedErr {
    /// Reads the struct from the first 16 bytes of a control message payload (native byte order, as
    /// the kernel wrote it). `None` when the payload is shorter.
    pub fn from_bytes(data: &[u8]) -> Option<SockExtendedErr> {
        let u32_at =
            |o: usize| u32::from_ne_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
        (data.len() >= mem::size_of::<SockExtendedErr>()).then(|| SockExtendedErr {
            ee_errno: u32_at(0),
            ee_origin: data[4],
            ee_type: data[5],
            ee_code: data[6],
            ee_pad: data[7],
            ee_info: u32_at(8),
            ee_data: u32_at(12),
        })
    }

    /// The struct's bytes in native order (how the kernel lays it out in a control message).
    #[cfg(feature = "bench-internals")]
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[0..4].copy_from_slice(&self.ee_errno.to_ne_bytes());
        out[4] = self.ee_origin;
        out[5] = self.ee_type;
        out[6] = self.ee_code;
        out[7] = self.ee_pad;
        out[8..12].copy_from_slice(&self.ee_info.to_ne_bytes());
        out[12..16].copy_from_slice(&self.ee_data.to_ne_bytes());
        out
    }
}

/// One MSG_ZEROCOPY completion: ids `lo..=hi` (wrapping u32) are done, and the kernel no longer
/// references their pages. `copied` is set when the kernel copied the data instead (for example when
/// the packets were delivered to a local socket or the device lacks scatter-gather).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZerocopyCompletion {
    /// First completed id.
    pub lo: u32,
    /// Last completed id, inclusive (may be numerically below `lo` after u32 wrap-around).
    pub hi: u32,
    /// The kernel copied the data of these sends (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied: bool,
}

/// What one error-queue control message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrqueueMessage {
    /// A MSG_ZEROCOPY completion range.
    Zerocopy(ZerocopyCompletion),
    /// Any other extended error (an ICMP error, a local error), with its fields.
    Error(SockExtendedErr),
}

/// Decodes one control message of level `level` and type `ty` with payload `data`. Returns `None` for
/// control messages that are not `IP_RECVERR`, `IPV6_RECVERR` or `VSOCK_RECVERR`, or whose payload is
/// too short to hold a `sock_extended_err`. Pure: tested on synthetic buffers.
pub fn decode(level: i32, ty: i32, data: &[u8]) -> Option<ErrqueueMessage> {
    let is_recverr = matches!(
        (level, ty),
        (libc::SOL_IP, libc::IP_RECVERR)
            | (libc::SOL_IPV6, libc::IPV6_RECVERR)
            | (SOL_VSOCK, VSOCK_RECVERR)
    );
    if !is_recverr {
        return None;
    }
    let ee = SockExtendedErr::from_bytes(data)?;
    if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
        Some(ErrqueueMessage::Zerocopy(ZerocopyCompletion {
            lo: ee.ee_info,
            hi: ee.ee_data,
            copied: ee.ee_code == SO_EE_CODE_ZEROCOPY_COPIED,
        }))
    } else {
        Some(ErrqueueMessage::Error(ee))
    }
}

/// Size of `struct cmsghdr` (linux/socket.h): `size_t cmsg_len; int cmsg_level; int cmsg_type;`.
const CMSG_HDR: usize = mem::size_of::<libc::cmsghdr>();
const _: () = assert!(CMSG_HDR == 2 * mem::size_of::<usize>());

/// `CMSG_ALIGN`: control messages are padded to the alignment of `size_t`.
const fn cmsg_align(len: usize) -> usize {
    (len + mem::size_of::<usize>() - 1) & !(mem::size_of::<usize>() - 1)
}

/// Bytes a control message with `payload` bytes occupies (`CMSG_SPACE`).
pub const fn cmsg_space(payload: usize) -> usize {
    CMSG_HDR + cmsg_align(payload)
}

// One errqueue entry's control messages fit: an IPv6 completion (sock_extended_err + sockaddr_in6),
// SCM_TIMESTAMPNS (a timespec), SCM_TIMESTAMPING (three timespecs) and IPV6_PKTINFO (in6_pktinfo).
const _: () = assert!(
    cmsg_space(mem::size_of::<SockExtendedErr>() + mem::size_of::<libc::sockaddr_in6>())
        + cmsg_space(mem::size_of::<libc::timespec>())
        + cmsg_space(3 * mem::size_of::<libc::timespec>())
        + cmsg_space(mem::size_of::<libc::in6_pktinfo>())
        <= ControlBuf::CAPACITY
);

/// A control-message buffer with the alignment of `struct cmsghdr`, large enough for the messages zcnet
/// sends (`UDP_SEGMENT`) and receives (a `*_RECVERR` with its offender address).
#[derive(Debug, Clone, Default)]
pub struct ControlBuf {
    words: [u64; ControlBuf::WORDS],
    len: usize,
}

impl ControlBuf {
    /// Capacity in bytes.
    pub const CAPACITY: usize = Self::WORDS * 8;
    /// `u64` words of the buffer: room for the largest entry one `recvmsg(MSG_ERRQUEUE)` returns — an
    /// `IPV6_RECVERR` with its `sockaddr_in6` offender — together with the timestamps and packet info
    /// a caller may have enabled on the socket (`SCM_TIMESTAMPNS`, `SCM_TIMESTAMPING`, `IPV6_PKTINFO`), so that
    /// `MSG_CTRUNC` never drops a completion.
    const WORDS: usize = 32;

    /// The bytes written so far (encoded, or filled by the kernel).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes()[..self.len]
    }

    fn bytes(&self) -> &[u8] {
        let ptr = self.words.as_ptr().cast::<u8>();
        // SAFETY: `words` is `CAPACITY` initialised bytes borrowed for the returned lifetime; u8 has no
        // alignment or validity requirements.
        unsafe { std::slice::from_raw_parts(ptr, Self::CAPACITY) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let ptr = self.words.as_mut_ptr().cast::<u8>();
        // SAFETY: `words` is `CAPACITY` initialised bytes owned by `self`, borrowed mutably for the
        // returned lifetime; u8 has no alignment or validity requirements.
        unsafe { std::slice::from_raw_parts_mut(ptr, Self::CAPACITY) }
    }

    /// Clears the buffer.
    #[cfg(feature = "bench-internals")]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends one control message (`level`, `ty`, `data`) in `struct cmsghdr` layout. Fails with
    /// `InvalidInput` when it does not fit.
    pub fn push(&mut self, level: i32, ty: i32, data: &[u8]) -> io::Result<()> {
        let start = self.len;
        let end = start + cmsg_space(data.len());
        if end > Self::CAPACITY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "control message buffer full",
            ));
        }
        let cmsg_len = CMSG_HDR + data.len();
        let buf = self.bytes_mut();
        buf[start..end].fill(0);
        let s = mem::size_of::<usize>();
        buf[start..start + s].copy_from_slice(&cmsg_len.to_ne_bytes());
        buf[start + s..start + s + 4].copy_from_slice(&level.to_ne_bytes());
        buf[start + s + 4..start + s + 8].copy_from_slice(&ty.to_ne_bytes());
        buf[start + CMSG_HDR..start + cmsg_len].copy_from_slice(data);
        self.len = end;
        Ok(())
    }

    /// Takes what one `recvmsg` wrote into the buffer: `controllen` bytes of control messages, and the
    /// call's `msg_flags`. With `MSG_CTRUNC` the kernel had more control messages than room (`put_cmsg`
    /// cuts the one that does not fit and drops those after it; `ip_recv_error` and `ipv6_recv_error`
    /// write the `*_RECVERR` completion last, after any timestamps): that is an error, and the buffer is
    /// left empty, since the entry it came from is gone from the queue.
    fn set_received(&mut self, controllen: usize, msg_flags: i32) -> io::Result<()> {
        if msg_flags & libc::MSG_CTRUNC != 0 {
            self.len = 0;
            return Err(io::Error::other(
                "recvmsg(MSG_ERRQUEUE): MSG_CTRUNC (control message truncated, a completion was lost)",
            ));
        }
        self.len = controllen.min(Self::CAPACITY);
        Ok(())
    }

    /// Iterates over the control messages in the buffer.
    pub fn messages(&self) -> ControlMessages<'_> {
        ControlMessages::new(self.as_bytes())
    }
}

/// One control message: level, type and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMessage<'a> {
    /// `cmsg_level`.
    pub level: i32,
    /// `cmsg_type`.
    pub ty: i32,
    /// The payload (`cmsg_len` minus the header).
    pub data: &'a [u8],
}

/// Iterator over control messages laid out as the kernel writes them (`CMSG_FIRSTHDR`/`CMSG_NXTHDR`).
/// Stops at the first malformed header (length shorter than the header or past the end).
#[derive(Debug, Clone)]
pub struct ControlMessages<'a> {
    rest: &'a [u8],
}

impl<'a> ControlMessages<'a> {
    /// Iterates over `bytes` (the `msg_control` area, `msg_controllen` long).
    pub fn new(bytes: &'a [u8]) -> Self {
        ControlMessages { rest: bytes }
    }
}

impl<'a> Iterator for ControlMessages<'a> {
    type Item = ControlMessage<'a>;

    fn next(&mut self) -> Option<ControlMessage<'a>> {
        if self.rest.len() < CMSG_HDR {
            return None;
        }
        let s = mem::size_of::<usize>();
        let len = usize::from_ne_bytes(self.rest[..s].try_into().ok()?);
        let level = i32::from_ne_bytes(self.rest[s..s + 4].try_into().ok()?);
        let ty = i32::from_ne_bytes(self.rest[s + 4..s + 8].try_into().ok()?);
        if len < CMSG_HDR || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let data = &self.rest[CMSG_HDR..len];
        self.rest = &self.rest[cmsg_align(len).min(self.rest.len())..];
        Some(ControlMessage { level, ty, data })
    }
}

/// Whether `SO_ZEROCOPY` is on for the socket.
pub fn zerocopy_enabled(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(super::socket::get_int_option(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY)? != 0)
}

/// Sets `SO_ZEROCOPY` on a socket: without it the kernel ignores `MSG_ZEROCOPY`. Fails with
/// `ENOPROTOOPT`/`EOPNOTSUPP` on protocols and kernels without zero-copy send.
pub fn enable_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    super::socket::set_int_option(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)
}

/// Reads one entry of the error queue (`recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)`) into `control`.
/// Returns `Ok(false)` when the queue is empty (`EAGAIN`). A truncated control message (`MSG_CTRUNC`)
/// is an error, since the completion it carried is lost to the caller.
pub fn recv_errqueue(fd: BorrowedFd<'_>, control: &mut ControlBuf) -> io::Result<bool> {
    // SAFETY: `msghdr` is plain old data; all-zero (no name, no iovec) is valid.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_control = control.bytes_mut().as_mut_ptr().cast();
    msg.msg_controllen = ControlBuf::CAPACITY as _;
    let res = super::retry_if_interrupted(|| {
        // SAFETY: `msg` points at `control`'s buffer of `msg_controllen` writable bytes, which outlives
        // the call; no iovec and no name buffer are given.
        syscall!(recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT
        ))
    });
    match res {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            control.len = 0;
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    control.set_received(msg.msg_controllen as usize, msg.msg_flags)?;
    Ok(true)
}

/// A socket address in the kernel's `sockaddr_in`/`sockaddr_in6` layout, for `sendmsg`'s `msg_name`.
#[derive(Clone, Copy)]
pub struct SockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl std::fmt::Debug for SockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SockAddr")
            .field("family", &self.storage.ss_family)
            .field("len", &self.len)
            .finish()
    }
}

impl From<SocketAddr> for SockAddr {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: `sockaddr_storage` is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: `sockaddr_storage` is larger than and suitably aligned for `sockaddr_in`.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin)
                };
                mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: `sockaddr_storage` is larger than and suitably aligned for `sockaddr_in6`.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6)
                };
                mem::size_of::<libc::sockaddr_in6>()
            }
        };
        SockAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }
}

/// `sendmsg(fd, {dest, data, control}, flags | MSG_NOSIGNAL)` without MSG_ZEROCOPY: the kernel copies
/// `data` during the call. Returns the bytes it took; a closed peer gives `EPIPE` rather than `SIGPIPE`.
pub fn send_copy(
    fd: BorrowedFd<'_>,
    data: &[u8],
    dest: Option<&SockAddr>,
    control: &ControlBuf,
) -> io::Result<usize> {
    // SAFETY: without MSG_ZEROCOPY the kernel reads `data` only during the call.
    unsafe { send_msg(fd, data, dest, control, libc::MSG_DONTWAIT) }
}

/// A loan whose bytes stay allocated and unchanged as long as it lives (moving it moves no byte).
pub(crate) trait StableBytes {
    /// The loan's bytes.
    fn stable_bytes(&self) -> &[u8];
}

/// Where [`send_lent`] leaves a loan: the keeper holds it — and so its bytes — until the kernel's
/// completion of the id it returns, the id the send takes (MSG_ZEROCOPY numbers sends in order).
pub(crate) trait LoanKeeper<L> {
    /// Keeps `loan` under the id the next zero-copy send on the socket takes; returns that id.
    fn keep(&mut self, loan: L) -> u32;
}

/// `sendmsg(MSG_ZEROCOPY)` of `loan.stable_bytes()[range]`, the loan first handed to `keeper` under
/// the id the send takes. Returns that id and the kernel's answer; on failure the loan stays with the
/// keeper for the caller to settle (a failed call may or may not have taken the id).
///
/// The kernel reads the pages after the call returns, until the id's completion: that is sound
/// because a [`StableBytes`] loan's bytes cannot change or move while it lives, and a
/// [`LoanKeeper`] keeps it until the completion of that id (or until the caller knows the kernel took
/// no id).
///
/// The call never waits (`MSG_DONTWAIT`, whatever the socket's `O_NONBLOCK`), and that is part of
/// why it takes one id: on an AF_VSOCK stream a call that waits for the peer's credit enqueues
/// again, in the same call, under an id of its own, while a call that does not wait enqueues once
/// (the `tx::vsock` module cites the kernel functions). Callers keep each AF_VSOCK piece within
/// one virtio vsock packet (64 KiB, `ZcSocket::max_zerocopy_piece`).
pub(crate) fn send_lent<L: StableBytes>(
    fd: BorrowedFd<'_>,
    keeper: &mut impl LoanKeeper<L>,
    loan: L,
    range: Range<usize>,
    dest: Option<&SockAddr>,
    control: &ControlBuf,
) -> (u32, io::Result<usize>) {
    let data: *const [u8] = &loan.stable_bytes()[range];
    let id = keeper.keep(loan);
    // SAFETY: `data` points into the loan's bytes, which stay allocated and unchanged while the keeper
    // holds the loan (see above), that is until the completion of `id`.
    let res = unsafe {
        send_msg(
            fd,
            &*data,
            dest,
            control,
            libc::MSG_DONTWAIT | libc::MSG_ZEROCOPY,
        )
    };
    (id, res)
}

/// `sendmsg(fd, {dest, data, control}, flags | MSG_NOSIGNAL)`.
///
/// # Safety
///
/// With `MSG_ZEROCOPY` in `flags` on a socket with `SO_ZEROCOPY`, the kernel keeps reading `data`'s
/// pages after the call returns: the caller must keep those bytes allocated and unchanged until the
/// completion of the id the call took arrives on the error queue.
unsafe fn send_msg(
    fd: BorrowedFd<'_>,
    data: &[u8],
    dest: Option<&SockAddr>,
    control: &ControlBuf,
    flags: i32,
) -> io::Result<usize> {
    let iov = [IoSlice::new(data)];
    // SAFETY: `msghdr` is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    // `IoSlice` is guaranteed ABI-compatible with `struct iovec` on Unix.
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    if let Some(dest) = dest {
        msg.msg_name = (&dest.storage as *const libc::sockaddr_storage) as *mut libc::c_void;
        msg.msg_namelen = dest.len;
    }
    if control.len > 0 {
        msg.msg_control = control.words.as_ptr() as *mut libc::c_void;
        msg.msg_controllen = control.len as _;
    }
    // SAFETY: every pointer in `msg` refers to a live borrowed buffer of the stated length (iovec,
    // address, control bytes) that the kernel reads during the call; what it reads after the call
    // (MSG_ZEROCOPY) the caller keeps alive and unchanged, per this function's contract.
    let sent = syscall!(sendmsg(fd.as_raw_fd(), &msg, flags | libc::MSG_NOSIGNAL))?;
    Ok(sent as usize)
}

/// What [`poll_socket`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    /// `POLLOUT`: send buffer space is available.
    pub writable: bool,
    /// `POLLERR`: the error queue holds entries (completions) or a socket error is pending.
    pub error: bool,
    /// `POLLHUP`: the connection is shut down.
    pub hangup: bool,
}

/// Waits up to `timeout` for error-queue entries (`POLLERR`, always reported) or, with `writable`, for
/// send-buffer space (`POLLOUT`). Returns all-false on timeout.
pub fn poll_socket(fd: BorrowedFd<'_>, writable: bool, timeout: Duration) -> io::Result<Readiness> {
    let events = if writable { libc::POLLOUT } else { 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let revents = super::socket::poll(fd, events, ms)?;
    Ok(Readiness {
        writable: revents & libc::POLLOUT != 0,
        error: revents & libc::POLLERR != 0,
        hangup: revents & libc::POLLHUP != 0,
    })
}

/// The pending socket error (`SO_ERROR`), cleared by reading it; `None` when there is none.
pub fn take_socket_error(fd: BorrowedFd<'_>) -> io::Result<Option<io::Error>> {
    let err = super::socket::get_int_option(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    // Offsets from linux/errqueue.h `struct sock_extended_err`.
    #[test]
    fn sock_extended_err_layout_matches_uapi() {
        assert_eq!(offset_of!(SockExtendedErr, ee_errno), 0);
        assert_eq!(offset_of!(SockExtendedErr, ee_origin), 4);
        assert_eq!(offset_of!(SockExtendedErr, ee_type), 5);
        assert_eq!(offset_of!(SockExtendedErr, ee_code), 6);
        assert_eq!(offset_of!(SockExtendedErr, ee_pad), 7);
        assert_eq!(offset_of!(SockExtendedErr, ee_info), 8);
        assert_eq!(offset_of!(SockExtendedErr, ee_data), 12);
        assert_eq!(
            mem::size_of::<SockExtendedErr>(),
            mem::size_of::<libc::sock_extended_err>()
        );
    }

    fn completion_cmsg(level: i32, ty: i32, lo: u32, hi: u32, code: u8) -> ControlBuf {
        let ee = SockExtendedErr {
            ee_origin: SO_EE_ORIGIN_ZEROCOPY,
            ee_code: code,
            ee_info: lo,
            ee_data: hi,
            ..Default::default()
        };
        let mut buf = ControlBuf::default();
        // The kernel appends the offender address (a zeroed sockaddr) after the struct.
        let mut payload = ee.to_bytes().to_vec();
        payload.extend_from_slice(&[0u8; 16]);
        buf.push(level, ty, &payload).unwrap();
        buf
    }

    #[test]
    fn decodes_synthetic_ipv4_ipv6_and_vsock_completions() {
        for (level, ty) in [
            (libc::SOL_IP, libc::IP_RECVERR),
            (libc::SOL_IPV6, libc::IPV6_RECVERR),
            (SOL_VSOCK, VSOCK_RECVERR),
        ] {
            let buf = completion_cmsg(level, ty, 7, 12, SO_EE_CODE_ZEROCOPY_COPIED);
            let msgs: Vec<_> = buf.messages().collect();
            assert_eq!(msgs.len(), 1);
            assert_eq!(
                decode(msgs[0].level, msgs[0].ty, msgs[0].data),
                Some(ErrqueueMessage::Zerocopy(ZerocopyCompletion {
                    lo: 7,
                    hi: 12,
                    copied: true
                }))
            );
            let buf = completion_cmsg(level, ty, u32::MAX, 1, 0);
            let m = buf.messages().next().unwrap();
            assert_eq!(
                decode(m.level, m.ty, m.data),
                Some(ErrqueueMessage::Zerocopy(ZerocopyCompletion {
                    lo: u32::MAX,
                    hi: 1,
                    copied: false
                }))
            );
        }
    }

    #[test]
    fn other_messages_are_not_completions() {
        assert_eq!(decode(libc::SOL_IP, libc::IP_TTL, &[0; 16]), None);
        assert_eq!(decode(libc::SOL_IP, libc::IP_RECVERR, &[0; 8]), None);
        let icmp = SockExtendedErr {
            ee_errno: libc::ECONNREFUSED as u32,
            ee_origin: 2,
            ..Default::default()
        };
        assert_eq!(
            decode(libc::SOL_IP, libc::IP_RECVERR, &icmp.to_bytes()),
            Some(ErrqueueMessage::Error(icmp))
        );
    }

    #[test]
    fn encoder_layout_matches_cmsg_macros() {
        let mut buf = ControlBuf::default();
        buf.push(libc::SOL_UDP, libc::UDP_SEGMENT, &1400u16.to_ne_bytes())
            .unwrap();
        buf.push(libc::SOL_IP, libc::IP_TOS, &5i32.to_ne_bytes())
            .unwrap();
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let (space2, len2) = unsafe { (libc::CMSG_SPACE(2), libc::CMSG_LEN(2)) };
        // SAFETY: as above.
        let space4 = unsafe { libc::CMSG_SPACE(4) };
        assert_eq!(cmsg_space(2), space2 as usize);
        assert_eq!(buf.as_bytes().len(), (space2 + space4) as usize);
        let got: Vec<_> = buf.messages().collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].level, libc::SOL_UDP);
        assert_eq!(got[0].ty, libc::UDP_SEGMENT);
        assert_eq!(got[0].data, &1400u16.to_ne_bytes());
        assert_eq!(CMSG_HDR + got[0].data.len(), len2 as usize);
        assert_eq!(got[1].data, &5i32.to_ne_bytes());
    }

    #[test]
    fn iterator_stops_on_malformed_length() {
        let mut buf = ControlBuf::default();
        buf.push(libc::SOL_IP, libc::IP_RECVERR, &[0; 16]).unwrap();
        let mut bytes = buf.as_bytes().to_vec();
        bytes[..mem::size_of::<usize>()].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(ControlMessages::new(&bytes).count(), 0);
        bytes[..mem::size_of::<usize>()].copy_from_slice(&3usize.to_ne_bytes());
        assert_eq!(ControlMessages::new(&bytes).count(), 0);
        assert_eq!(ControlMessages::new(&bytes[..5]).count(), 0);
    }

    /// What `ip_recv_error` writes for one completion on a socket with `SO_TIMESTAMPNS` and
    /// `SO_TIMESTAMPING` (software) on: `SCM_TIMESTAMPNS`, `SCM_TIMESTAMPING`, then the
    /// `IPV6_RECVERR` completion (`sock_extended_err` and a `sockaddr_in6` offender).
    fn timestamped_ipv6_completion(lo: u32, hi: u32) -> ControlBuf {
        let mut buf = ControlBuf::default();
        buf.push(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &[1; 16])
            .expect("SCM_TIMESTAMPNS fits");
        buf.push(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &[2; 48])
            .expect("SCM_TIMESTAMPING fits");
        let ee = SockExtendedErr {
            ee_origin: SO_EE_ORIGIN_ZEROCOPY,
            ee_info: lo,
            ee_data: hi,
            ..Default::default()
        };
        let mut payload = ee.to_bytes().to_vec();
        payload.extend_from_slice(&[0; mem::size_of::<libc::sockaddr_in6>()]);
        buf.push(libc::SOL_IPV6, libc::IPV6_RECVERR, &payload)
            .expect("the completion fits after the timestamps");
        buf
    }

    fn completions(buf: &ControlBuf) -> Vec<ErrqueueMessage> {
        buf.messages()
            .filter_map(|m| decode(m.level, m.ty, m.data))
            .collect()
    }

    #[test]
    fn timestamped_completion_is_received_whole() {
        let sent = timestamped_ipv6_completion(3, 9);
        let mut received = ControlBuf {
            words: sent.words,
            len: 0,
        };
        received
            .set_received(sent.as_bytes().len(), libc::MSG_ERRQUEUE)
            .expect("not truncated");
        assert_eq!(
            completions(&received),
            [ErrqueueMessage::Zerocopy(ZerocopyCompletion {
                lo: 3,
                hi: 9,
                copied: false
            })]
        );
    }

    /// The same entry read into 128 bytes of room: `put_cmsg` writes the timestamps, cuts the
    /// completion's header to what is left and sets `MSG_CTRUNC`. The read must fail and yield no
    /// message, even though the cut header still parses.
    #[test]
    fn truncated_entry_is_rejected() {
        let room = 128;
        let sent = timestamped_ipv6_completion(3, 9);
        let mut received = ControlBuf {
            words: sent.words,
            len: 0,
        };
        let last = cmsg_space(16) + cmsg_space(48);
        let cut = room - last;
        received.bytes_mut()[last..last + mem::size_of::<usize>()]
            .copy_from_slice(&cut.to_ne_bytes());
        received.len = room;
        assert_eq!(received.messages().count(), 3, "the cut header parses");
        let err = received
            .set_received(room, libc::MSG_ERRQUEUE | libc::MSG_CTRUNC)
            .expect_err("MSG_CTRUNC must be an error");
        assert!(err.to_string().contains("MSG_CTRUNC"), "{err}");
        assert!(received.as_bytes().is_empty());
        assert!(completions(&received).is_empty());
    }

    #[test]
    fn push_rejects_overflow() {
        let mut buf = ControlBuf::default();
        assert!(buf.push(0, 0, &[0; ControlBuf::CAPACITY]).is_err());
        assert!(buf.as_bytes().is_empty());
    }
}
