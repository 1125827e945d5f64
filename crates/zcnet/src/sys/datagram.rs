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
//! - With `IP_PKTINFO` (ip(7)) or `IPV6_RECVPKTINFO` (ipv6(7)) set, each datagram comes with an
//!   `IPPROTO_IP/IP_PKTINFO` `in_pktinfo` whose `ipi_addr` is the destination address of its IP
//!   header, or an `IPPROTO_IPV6/IPV6_PKTINFO` `in6_pktinfo` whose `ipi6_addr` is (an IPv4 datagram
//!   on an IPv6 socket gets its address v4-mapped).
//! - On a send, an `IP_PKTINFO` whose `ipi_spec_dst` is a local address, or an `IPV6_PKTINFO`
//!   whose `ipi6_addr` is (v4-mapped for an IPv4 destination of an IPv6 socket: `ip_cmsg_send`),
//!   with interface index 0, makes it the source address of that datagram, whatever address the
//!   socket is bound to (`ip_cmsg_send`, `ip6_datagram_send_ctl`).

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

use super::errqueue::{self, ControlBuf, ControlMessages, SockAddr};

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
    /// The address it was sent to (`IP_PKTINFO`/`IPV6_PKTINFO`; `None` when absent).
    pub destination: Option<IpAddr>,
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

/// Where `ipi_addr` (the header's destination address) lies in an `in_pktinfo`.
const IPI_ADDR: usize = mem::offset_of!(libc::in_pktinfo, ipi_addr);
/// Where `ipi_spec_dst` (the source address a send asks for) lies in an `in_pktinfo`.
const IPI_SPEC_DST: usize = mem::offset_of!(libc::in_pktinfo, ipi_spec_dst);
/// Where `ipi6_addr` lies in an `in6_pktinfo`.
const IPI6_ADDR: usize = mem::offset_of!(libc::in6_pktinfo, ipi6_addr);

/// Decodes one message's control data (`SOL_UDP/UDP_GRO`, `SOL_SOCKET/SO_RXQ_OVFL`,
/// `IP_PKTINFO`, `IPV6_PKTINFO`) into `r`.
fn decode_control(control: &[u8], r: &mut Received) {
    for m in ControlMessages::new(control) {
        match (m.level, m.ty) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                if let Some(b) = m.data.get(IPI_ADDR..IPI_ADDR + 4) {
                    let octets: [u8; 4] = b.try_into().expect("four bytes");
                    r.destination = Some(Ipv4Addr::from(octets).into());
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                if let Some(b) = m.data.get(IPI6_ADDR..IPI6_ADDR + 16) {
                    let octets: [u8; 16] = b.try_into().expect("sixteen bytes");
                    r.destination = Some(Ipv6Addr::from(octets).into());
                }
            }
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

/// The control message that makes `from` the source address of a send (`IP_PKTINFO` with
/// `ipi_spec_dst`, or `IPV6_PKTINFO` with `ipi6_addr`; interface index 0: the route decides).
fn source_control(from: IpAddr) -> io::Result<ControlBuf> {
    let mut control = ControlBuf::default();
    match from {
        IpAddr::V4(a) => {
            let mut info = [0u8; mem::size_of::<libc::in_pktinfo>()];
            info[IPI_SPEC_DST..IPI_SPEC_DST + 4].copy_from_slice(&a.octets());
            control.push(libc::IPPROTO_IP, libc::IP_PKTINFO, &info)?;
        }
        IpAddr::V6(a) => {
            let mut info = [0u8; mem::size_of::<libc::in6_pktinfo>()];
            info[IPI6_ADDR..IPI6_ADDR + 16].copy_from_slice(&a.octets());
            control.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &info)?;
        }
    }
    Ok(control)
}

/// Sends `data` to `to` from the local address `from` (see [`source_control`]), copied during the
/// call. Returns the bytes the kernel took.
pub fn send_from(
    fd: BorrowedFd<'_>,
    data: &[u8],
    to: SocketAddr,
    from: IpAddr,
) -> io::Result<usize> {
    errqueue::send_copy(fd, data, Some(&SockAddr::from(to)), &source_control(from)?)
}

/// The longest UDP datagram (its 16-bit length field): no slot needs more room.
pub const MAX_DATAGRAM: usize = 65_535;

/// Most messages one `recvmmsg` takes (`UIO_MAXIOV`: the kernel cuts a longer vector to this).
pub const MAX_BATCH: usize = 1024;

/// Slot `i` of `data` cut into slots of `room` bytes: `data[i * room..(i + 1) * room]`, computed
/// with checked arithmetic: `None` for a slot that would end past `data` (or past `usize::MAX`).
pub fn slot(data: &[u8], room: usize, i: usize) -> Option<&[u8]> {
    let start = i.checked_mul(room)?;
    data.get(start..start.checked_add(room)?)
}

/// Whether `len` holds `count` slots of `per` (checked: an overflowing product does not fit).
fn fits(len: usize, count: usize, per: usize) -> bool {
    count.checked_mul(per).is_some_and(|need| need <= len)
}

/// Receives up to `got.len()` datagrams on `fd` with one `recvmmsg(MSG_TRUNC | MSG_WAITFORONE)`:
/// datagram `i` copies at most `room` bytes into `data[i * room..]` and its control messages into
/// `control[i * CONTROL_WORDS..]`; `got[i]` says what arrived. Returns how many datagrams arrived
/// (at least one), or the error of the wait for the first (`EAGAIN` when the socket's timeout
/// passed or it is non-blocking, `EINTR` when a signal arrived). A message whose control data the
/// kernel had to cut (`MSG_CTRUNC`) fails the call, since its segment size may be lost.
///
/// Sizes are checked here, not trusted: `InvalidInput` when `got` is empty or longer than
/// [`MAX_BATCH`], or when `data` or `control` is shorter than `got.len()` slots (the products
/// computed with `checked_mul`, so no wrapped size ever reaches the kernel).
pub fn recv_batch(
    fd: BorrowedFd<'_>,
    data: &mut [u8],
    room: usize,
    control: &mut [u64],
    got: &mut [Received],
) -> io::Result<usize> {
    let count = got.len();
    if count == 0
        || count > MAX_BATCH
        || !fits(data.len(), count, room)
        || !fits(control.len(), count, CONTROL_WORDS)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "recvmmsg: {count} slots of {room} bytes do not fit {} bytes of data and {} \
                 control words (1 to {MAX_BATCH} slots)",
                data.len(),
                control.len()
            ),
        ));
    }
    // One iovec per slot, each over its own disjoint part of `data` (empty ones at its start when
    // `room` is 0); `fits` guarantees `count` of them.
    let mut iov: Vec<libc::iovec> = match room {
        0 => vec![
            libc::iovec {
                iov_base: data.as_mut_ptr().cast(),
                iov_len: 0,
            };
            count
        ],
        _ => data
            .chunks_exact_mut(room)
            .take(count)
            .map(|slot| libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            })
            .collect(),
    };
    // SAFETY: `sockaddr_storage` is plain old data; all-zero is valid.
    let mut names: Vec<libc::sockaddr_storage> = vec![unsafe { mem::zeroed() }; count];
    let mut hdrs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .zip(names.iter_mut())
        .zip(control.chunks_exact_mut(CONTROL_WORDS))
        .map(|((v, name), words)| {
            // SAFETY: `msghdr` is plain old data; all-zero is valid.
            let mut h: libc::msghdr = unsafe { mem::zeroed() };
            h.msg_name = (name as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = v;
            h.msg_iovlen = 1;
            h.msg_control = words.as_mut_ptr().cast();
            h.msg_controllen = mem::size_of_val(words) as _;
            libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            }
        })
        .collect();
    // The kernel reads `count` headers: there must be that many (`fits` guarantees it).
    assert_eq!(hdrs.len(), count, "one header per slot");
    // SAFETY: every header points at one live iovec covering `iov_len` writable bytes inside
    // `data`, at `CONTROL_WORDS * 8` writable, `cmsghdr`-aligned bytes inside `control` and at one
    // writable `sockaddr_storage` of `names` (its size in `msg_namelen`); all outlive the call, and
    // `count` (at most `MAX_BATCH`) is the number of headers.
    let n = syscall!(recvmmsg(
        fd.as_raw_fd(),
        hdrs.as_mut_ptr(),
        count as libc::c_uint,
        libc::MSG_TRUNC | libc::MSG_WAITFORONE,
        std::ptr::null_mut(),
    ))? as usize;
    let n = n.min(count);
    for (((r, h), name), words) in got
        .iter_mut()
        .zip(&hdrs[..n])
        .zip(&names)
        .zip(control.chunks_exact(CONTROL_WORDS))
    {
        if h.msg_hdr.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other(
                "recvmmsg: MSG_CTRUNC (the socket has more control messages enabled than a \
                 datagram batch has room for)",
            ));
        }
        *r = Received {
            len: h.msg_len as usize,
            source: source_of(name, h.msg_hdr.msg_namelen),
            ..Received::default()
        };
        // SAFETY: `words` is `CONTROL_WORDS` initialised u64s borrowed for this statement; u8 has
        // no alignment or validity requirements.
        let bytes = unsafe {
            std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), mem::size_of_val(words))
        };
        let len = h.msg_hdr.msg_controllen.min(bytes.len());
        decode_control(&bytes[..len], r);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::errqueue::ControlBuf;
    use std::os::fd::AsFd;

    /// A bound, non-blocking UDP socket with nothing queued.
    fn idle_socket() -> std::net::UdpSocket {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind loopback");
        s.set_nonblocking(true).expect("non-blocking");
        s
    }

    proptest::proptest! {
        /// Slots never overlap, never reach past the data and never wrap, whatever the room.
        #[test]
        fn slots_stay_inside_the_data(
            len in 0usize..4096,
            room in proptest::prop_oneof![
                0usize..600,
                proptest::prelude::Just(usize::MAX),
                proptest::prelude::Just(1usize << 62),
                proptest::prelude::Just((1usize << 62) + 8),
                proptest::prelude::Just(usize::MAX / 2 + 1),
            ],
        ) {
            let data = vec![0u8; len];
            // Every index names an empty slot when `room` is 0.
            let whole = len.checked_div(room);
            let k = whole.unwrap_or(7);
            for i in [0, 1, 2, k.saturating_sub(1), k, usize::MAX / 2, usize::MAX] {
                let got = slot(&data, room, i);
                proptest::prop_assert_eq!(got.is_some(), whole.is_none_or(|w| i < w), "slot {}", i);
                if let Some(got) = got {
                    proptest::prop_assert_eq!(got.len(), room);
                    let start = got.as_ptr() as usize - data.as_ptr() as usize;
                    proptest::prop_assert_eq!(start, i * room);
                }
            }
        }

        /// Hostile slot counts and sizes are refused before any pointer is made: a clean
        /// `InvalidInput`, never a wrapped size, a panic or a write past the buffers.
        #[test]
        fn hostile_sizes_are_refused(
            count in proptest::prop_oneof![0usize..4, proptest::prelude::Just(MAX_BATCH + 1)],
            room in proptest::prop_oneof![
                proptest::prelude::Just(usize::MAX),
                proptest::prelude::Just(1usize << 62),
                proptest::prelude::Just((1usize << 62) + 8),
                proptest::prelude::Just(usize::MAX / 3 + 1),
                65usize..100_000,
            ],
            data_len in 0usize..64,
            control_short in proptest::prelude::any::<bool>(),
        ) {
            let socket = idle_socket();
            let mut data = vec![0u8; data_len];
            let words = if control_short { count.saturating_sub(1) } else { count };
            let mut control = vec![0u64; words * CONTROL_WORDS];
            let mut got = vec![Received::default(); count];
            let err = recv_batch(socket.as_fd(), &mut data, room, &mut control, &mut got)
                .expect_err("no room for the slots");
            proptest::prop_assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn sizes_that_fit_reach_the_kernel() {
        // The checks refuse only what does not fit: an empty, idle socket then says EAGAIN.
        let socket = idle_socket();
        for (count, room) in [(1, 0), (4, 16), (MAX_BATCH, 1)] {
            let mut data = vec![0u8; count * room];
            let mut control = vec![0u64; count * CONTROL_WORDS];
            let mut got = vec![Received::default(); count];
            let err = recv_batch(socket.as_fd(), &mut data, room, &mut control, &mut got)
                .expect_err("nothing queued");
            assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{count} x {room}");
        }
    }

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

    #[test]
    fn control_data_decodes_the_destination_address() {
        let mut v4 = [0u8; mem::size_of::<libc::in_pktinfo>()];
        // ipi_spec_dst (the route's source) differs from ipi_addr (the header's destination).
        v4[IPI_SPEC_DST..IPI_SPEC_DST + 4].copy_from_slice(&[127, 0, 0, 1]);
        v4[IPI_ADDR..IPI_ADDR + 4].copy_from_slice(&[127, 0, 0, 2]);
        let mut buf = ControlBuf::default();
        buf.push(libc::IPPROTO_IP, libc::IP_PKTINFO, &v4).unwrap();
        let mut r = Received::default();
        decode_control(buf.as_bytes(), &mut r);
        assert_eq!(r.destination, Some(Ipv4Addr::new(127, 0, 0, 2).into()));
        let v6: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut info = [0u8; mem::size_of::<libc::in6_pktinfo>()];
        info[IPI6_ADDR..IPI6_ADDR + 16].copy_from_slice(&v6.octets());
        let mut buf = ControlBuf::default();
        buf.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &info)
            .unwrap();
        let mut r = Received::default();
        decode_control(buf.as_bytes(), &mut r);
        assert_eq!(r.destination, Some(v6.into()));
    }

    /// A datagram sent to 127.0.0.2 on a socket bound to every address says so, and an answer
    /// sent from that address reaches a sender connected to it (one from the route's 127.0.0.1
    /// would not).
    #[test]
    fn an_answer_leaves_from_the_address_the_datagram_was_sent_to() {
        let receiver = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let fd = receiver.as_fd();
        crate::sys::socket::set_int_option(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1).unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let port = receiver.local_addr().unwrap().port();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.connect(("127.0.0.2", port)).unwrap();
        sender
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        sender.send(b"hello").unwrap();
        let (mut data, mut control) = (vec![0u8; 16], vec![0u64; CONTROL_WORDS]);
        let mut got = [Received::default()];
        assert_eq!(
            recv_batch(fd, &mut data, 16, &mut control, &mut got).unwrap(),
            1
        );
        let [r] = got;
        assert_eq!(r.destination, Some(Ipv4Addr::new(127, 0, 0, 2).into()));
        let to = r.source.unwrap();
        assert_eq!(
            send_from(fd, b"answer", to, r.destination.unwrap()).unwrap(),
            6
        );
        let mut buf = [0u8; 16];
        let n = sender.recv(&mut buf).expect("the answer, from 127.0.0.2");
        assert_eq!(&buf[..n], b"answer");
    }
}
