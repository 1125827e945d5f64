//! Batched datagram receive: `recvmmsg(2)` that copies at most a fixed prefix of each datagram and
//! reports its full length, with the per-datagram control data a UDP receiver needs.
//!
//! Kernel behaviour relied on:
//! - `udp_recvmsg` with `MSG_TRUNC` returns the datagram's real length even when it is longer than
//!   the buffer (udp(7)); the rest of the datagram is discarded, never copied, and `msg_flags` gets
//!   `MSG_TRUNC`. `recvmmsg` stores each message's return value in `msg_len`.
//! - `MSG_WAITFORONE`: the call waits (as the socket's `SO_RCVTIMEO` and `O_NONBLOCK` say) for the first
//!   datagram only, then takes what is already queued, up to the batch size.
//! - With `UDP_GRO` set (linux/udp.h), a datagram may hold several segments coalesced by GRO (or a
//!   whole GSO send delivered on loopback): `udp_cmsg_recv` then adds a `SOL_UDP/UDP_GRO` control
//!   message whose `int` is the segment size; every segment but the last has that size.
//! - With `SO_RXQ_OVFL` set (asm-generic/socket.h), `sock_recv_drops` adds a `SOL_SOCKET/SO_RXQ_OVFL`
//!   `u32`: the socket's drop counter (`sk_drops`) when the datagram was queued — only when nonzero.
//!   It counts socket buffers, not datagrams: a coalesced GRO datagram dropped whole counts once.
//! - `recvmmsg` writes each datagram's source address into `msg_name` (a `sockaddr_in` or
//!   `sockaddr_in6`, per the socket's family) and its length into `msg_namelen`.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

use super::errqueue::ControlMessages;

/// `SO_RXQ_OVFL` (asm-generic/socket.h): report the socket's drop counter with each datagram.
pub const SO_RXQ_OVFL: i32 = 40;

/// `u64` words of control data per message: room for `SO_RXQ_OVFL`, `UDP_GRO`, a
/// `SCM_TIMESTAMPING` (three timespecs) and an `IPV6_PKTINFO`, so that the ones zcnet reads are not cut.
pub const CONTROL_WORDS: usize = 24;

const _: () = assert!(
    2 * super::errqueue::cmsg_space(4)
        + super::errqueue::cmsg_space(3 * mem::size_of::<libc::timespec>())
        + super::errqueue::cmsg_space(mem::size_of::<libc::in6_pktinfo>())
        <= CONTROL_WORDS * 8
);

/// What the kernel reported for one received datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// The datagram's full length (`MSG_TRUNC`), of which at most the slot's room was copied.
    pub len: usize,
    /// The GRO segment size (`UDP_GRO` control message), when the datagram holds coalesced segments.
    pub segment_size: Option<usize>,
    /// The socket's drop counter when the datagram was queued (`SO_RXQ_OVFL`; 0 when absent).
    pub drops: u32,
    /// Where the datagram came from (`msg_name`).
    pub source: Option<SocketAddr>,
}

/// The address in `name` (`len` bytes of it written by the kernel), when it is IPv4 or IPv6.
fn source_of(name: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(name.ss_family) {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a `sockaddr_in` (family AF_INET, length checked) at the start
            // of the storage, which is larger than and aligned for it.
            let sin =
                unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into(),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a `sockaddr_in6` (family AF_INET6, length checked).
            let sin6 =
                unsafe { &*(name as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Decodes one message's control data (`SOL_UDP/UDP_GRO`, `SOL_SOCKET/SO_RXQ_OVFL`) into `r`.
fn decode_control(control: &[u8], r: &mut Received) {
    for m in ControlMessages::new(control) {
        match (m.level, m.ty) {
            (libc::SOL_UDP, libc::UDP_GRO) => {
                if let Some(b) = m.data.get(..4) {
                    let size = i32::from_ne_bytes(b.try_into().expect("four bytes"));
                    r.segment_size = usize::try_from(size).ok().filter(|&s| s > 0);
                }
            }
            (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
                if let Some(b) = m.data.get(..4) {
                    r.drops = u32::from_ne_bytes(b.try_into().expect("four bytes"));
                }
            }
            _ => {}
        }
    }
}

/// Receives up to `got.len()` datagrams on `fd` with one `recvmmsg(MSG_TRUNC | MSG_WAITFORONE)`:
/// datagram `i` copies at most `room` bytes into `data[i * room..]` and its control messages into
/// `control[i * CONTROL_WORDS..]`; `got[i]` says what arrived. Returns how many datagrams arrived
/// (at least one), or the error of the wait for the first (`EAGAIN` when the socket's timeout
/// passed or it is non-blocking, `EINTR` when a signal arrived). A message whose control data the
/// kernel had to cut (`MSG_CTRUNC`) fails the call, since its segment size may be lost.
///
/// Panics when `data` or `control` is shorter than `got.len()` slots.
pub fn recv_batch(
    fd: BorrowedFd<'_>,
    data: &mut [u8],
    room: usize,
    control: &mut [u64],
    got: &mut [Received],
) -> io::Result<usize> {
    let count = got.len();
    assert!(data.len() >= count * room && control.len() >= count * CONTROL_WORDS);
    let data_base = data.as_mut_ptr();
    let control_base = control.as_mut_ptr();
    // SAFETY: `sockaddr_storage` is plain old data; all-zero is valid.
    let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { mem::zeroed() }; count];
    let mut iov: Vec<libc::iovec> = (0..count)
        .map(|i| libc::iovec {
            // SAFETY: `i * room` is at most `data.len()` (asserted above): in bounds or one past.
            iov_base: unsafe { data_base.add(i * room) }.cast(),
            iov_len: room,
        })
        .collect();
    let mut hdrs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .zip(names.iter_mut())
        .enumerate()
        .map(|(i, (v, name))| {
            // SAFETY: `msghdr` is plain old data; all-zero is valid.
            let mut h: libc::msghdr = unsafe { mem::zeroed() };
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = v;
            h.msg_iovlen = 1;
            // SAFETY: `i * CONTROL_WORDS` is inside `control` (asserted above).
            h.msg_control = unsafe { control_base.add(i * CONTROL_WORDS) }.cast();
            h.msg_controllen = (CONTROL_WORDS * 8) as _;
            libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            }
        })
        .collect();
    // SAFETY: every header points at one live iovec covering `room` writable bytes of `data`, at
    // `CONTROL_WORDS * 8` writable, `cmsghdr`-aligned bytes of `control` and at one writable
    // `sockaddr_storage` of `names` (its size in `msg_namelen`); all outlive the call, and
    // `count` is the number of headers.
    let n = syscall!(recvmmsg(
        fd.as_raw_fd(),
        hdrs.as_mut_ptr(),
        count as libc::c_uint,
        libc::MSG_TRUNC | libc::MSG_WAITFORONE,
        std::ptr::null_mut(),
    ))? as usize;
    for (i, (r, h)) in got.iter_mut().zip(&hdrs[..n]).enumerate() {
        if h.msg_hdr.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other(
                "recvmmsg: MSG_CTRUNC (the socket has more control messages enabled than a \
                 datagram batch has room for)",
            ));
        }
        *r = Received {
            len: h.msg_len as usize,
            source: source_of(&names[i], h.msg_hdr.msg_namelen),
            ..Received::default()
        };
        let words = &control[i * CONTROL_WORDS..(i + 1) * CONTROL_WORDS];
        // SAFETY: `words` is `CONTROL_WORDS` initialised u64s borrowed for this statement; u8 has
        // no alignment or validity requirements.
        let bytes =
            unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 8 * words.len()) };
        let len = h.msg_hdr.msg_controllen.min(bytes.len());
        decode_control(&bytes[..len], r);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::errqueue::ControlBuf;

    #[test]
    fn control_data_decodes_segment_size_and_drops() {
        let mut buf = ControlBuf::default();
        buf.push(libc::SOL_SOCKET, SO_RXQ_OVFL, &7u32.to_ne_bytes())
            .unwrap();
        buf.push(libc::SOL_UDP, libc::UDP_GRO, &1400i32.to_ne_bytes())
            .unwrap();
        buf.push(libc::SOL_IP, libc::IP_TOS, &[0]).unwrap();
        let mut r = Received::default();
        decode_control(buf.as_bytes(), &mut r);
        assert_eq!((r.segment_size, r.drops), (Some(1400), 7));
        let mut plain = Received::default();
        decode_control(&[], &mut plain);
        assert_eq!((plain.segment_size, plain.drops), (None, 0));
    }
}
