//! UDP datagrams received in batches, copying only what the caller looks at.
//!
//! A [`DatagramBatch`] takes every datagram already queued on a [`UdpSocket`] (up to its capacity)
//! with one `recvmmsg(2)` call and copies at most `keep` bytes of each; the kernel still reports
//! each datagram's full length (`MSG_TRUNC`, udp(7)) and discards the rest without copying it. A
//! receiver that only counts (a benchmark's sink) keeps a few bytes; one that checks every byte
//! keeps 65535.
//!
//! Kernel behaviour relied on: see the `sys::datagram` module — `MSG_TRUNC` reports the real length,
//! `MSG_WAITFORONE` waits for the first datagram only (as the socket's timeout and non-blocking mode
//! say), `UDP_GRO` datagrams carry their segment size, `SO_RXQ_OVFL` the socket's drop counter.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use crate::sys::datagram::{self, CONTROL_WORDS, MAX_BATCH, MAX_DATAGRAM, Received};
use crate::sys::socket::set_int_option;

/// Buffers for receiving up to `capacity` datagrams per call, keeping at most `keep` bytes of each.
#[derive(Debug)]
pub struct DatagramBatch {
    keep: usize,
    data: Vec<u8>,
    control: Vec<u64>,
    got: Vec<Received>,
    filled: usize,
}

impl DatagramBatch {
    /// Room for `capacity` datagrams per [`recv`](Self::recv), copying at most `keep` bytes of each
    /// (0: none; 65535: every UDP datagram whole).
    ///
    /// Both are capped at what the kernel can use: `capacity` to 1 ..= 1024 (`recvmmsg` takes at
    /// most `UIO_MAXIOV` messages per call) and `keep` to 65535 (no UDP datagram is longer), so the
    /// buffers are at most 64 MiB whatever the arguments; [`capacity`](Self::capacity) and
    /// [`keep`](Self::keep) say what was granted.
    pub fn new(capacity: usize, keep: usize) -> DatagramBatch {
        let capacity = capacity.clamp(1, MAX_BATCH);
        let keep = keep.min(MAX_DATAGRAM);
        let bytes = capacity
            .checked_mul(keep)
            .expect("at most MAX_BATCH * MAX_DATAGRAM bytes");
        DatagramBatch {
            keep,
            data: vec![0; bytes],
            control: vec![0; capacity * CONTROL_WORDS],
            got: vec![Received::default(); capacity],
            filled: 0,
        }
    }

    /// Bytes kept of each datagram.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// Most datagrams one [`recv`](Self::recv) takes.
    pub fn capacity(&self) -> usize {
        self.got.len()
    }

    /// Receives the next batch: waits for one datagram as the socket says (its read timeout, or not at
    /// all when non-blocking: `WouldBlock`/`TimedOut` then; a signal gives `Interrupted`), then takes
    /// every datagram already queued, up to the capacity. Returns how many arrived (at least one);
    /// [`iter`](Self::iter) yields them.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.filled = 0;
        let n = datagram::recv_batch(
            socket.as_fd(),
            &mut self.data,
            self.keep,
            &mut self.control,
            &mut self.got,
        )?;
        self.filled = n;
        Ok(n)
    }

    /// The datagrams of the last [`recv`](Self::recv), in arrival order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Datagram<'_>> + '_ {
        self.got[..self.filled].iter().enumerate().map(|(i, r)| {
            let slot = datagram::slot(&self.data, self.keep, i).unwrap_or_default();
            Datagram {
                bytes: &slot[..r.len.min(slot.len())],
                received: *r,
            }
        })
    }
}

/// One datagram of a [`DatagramBatch`]: its kept bytes and what the kernel said about it.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    bytes: &'a [u8],
    received: Received,
}

impl<'a> Datagram<'a> {
    /// The bytes copied: the first `min(len, keep)` bytes of the datagram.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The datagram's full length, copied or not.
    pub fn len(&self) -> usize {
        self.received.len
    }

    /// Whether the datagram has no payload.
    pub fn is_empty(&self) -> bool {
        self.received.len == 0
    }

    /// Whether every byte was copied ([`bytes`](Self::bytes) is the whole datagram).
    pub fn is_whole(&self) -> bool {
        self.bytes.len() == self.received.len
    }

    /// The segment size when the datagram holds several segments coalesced by GRO (only on a socket
    /// with [`set_gro`] on): every segment but the last is this long.
    pub fn segment_size(&self) -> Option<usize> {
        self.received.segment_size
    }

    /// How many datagrams the sender sent to make this one: 1, or its GRO segments.
    pub fn segments(&self) -> u64 {
        match self.received.segment_size {
            Some(size) => self.received.len.div_ceil(size).max(1) as u64,
            None => 1,
        }
    }

    /// Where the datagram came from.
    pub fn source(&self) -> Option<SocketAddr> {
        self.received.source
    }

    /// The local address the datagram was sent to (only on a socket with [`record_destination`]
    /// on): on a socket bound to every address, the one an answer must come from for a sender
    /// connected to it to take it ([`send_from`]).
    pub fn destination(&self) -> Option<IpAddr> {
        self.received.destination
    }

    /// The socket's count of dropped datagrams when this one was queued (only on a socket with
    /// [`count_drops`] on; 0 otherwise, and until the first drop). The kernel counts what it
    /// dropped as it was queued: a GRO-coalesced datagram (a whole GSO send on loopback) dropped
    /// counts once, however many datagrams it held.
    pub fn drops(&self) -> u32 {
        self.received.drops
    }
}

/// Turns UDP receive coalescing on or off (`UDP_GRO`): with it on, the kernel may deliver several
/// datagrams of one flow as one, with [`Datagram::segment_size`] telling where they split (a GSO send
/// over loopback arrives whole, instead of segmented one datagram at a time).
pub fn set_gro(socket: &UdpSocket, on: bool) -> io::Result<()> {
    set_int_option(socket.as_fd(), libc::SOL_UDP, libc::UDP_GRO, i32::from(on))
}

/// Has the kernel report the socket's drop counter with each datagram (`SO_RXQ_OVFL`), read with
/// [`Datagram::drops`]: datagrams (coalesced ones counting once) dropped because the receive
/// buffer was full, among others.
pub fn count_drops(socket: &UdpSocket) -> io::Result<()> {
    set_int_option(socket.as_fd(), libc::SOL_SOCKET, datagram::SO_RXQ_OVFL, 1)
}

/// Has the kernel report with each datagram the address it was sent to (`IP_PKTINFO` on an IPv4
/// socket, `IPV6_RECVPKTINFO` on an IPv6 one), read with [`Datagram::destination`].
pub fn record_destination(socket: &UdpSocket) -> io::Result<()> {
    let (level, name) = match socket.local_addr()? {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_PKTINFO),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO),
    };
    set_int_option(socket.as_fd(), level, name, 1)
}

/// Sends `data` to `to` from the local address `from` on `socket`, whatever address it is bound
/// to: an answer to a datagram that arrived at `from` ([`Datagram::destination`]), which a sender
/// connected to `from` takes (one from another local address it does not). Copied during the call;
/// never waits. Returns the bytes the kernel took.
pub fn send_from(
    socket: &UdpSocket,
    data: &[u8],
    to: SocketAddr,
    from: IpAddr,
) -> io::Result<usize> {
    datagram::send_from(socket.as_fd(), data, to, from)
}
