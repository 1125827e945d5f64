//! A UDP endpoint on AF_XDP: one local address and port served from one or more queues of an
//! interface, the datagrams' payloads read straight from the UMEM frames they arrived in.
//!
//! # Kernel behaviour relied on
//! - The redirect program ([`FrameMatch::UdpPort`]) hands the sockets only UDP datagrams to the
//!   endpoint's port (IPv4 without options and not a later fragment, IPv6 with UDP as the first next
//!   header, untagged Ethernet); every other frame — ARP, neighbour discovery, ICMP, other ports —
//!   goes on to the kernel's stack (`XDP_PASS`), so the interface keeps working for everything else.
//! - A frame redirected to an AF_XDP socket never reaches the stack: the kernel's own UDP sockets on
//!   that port see nothing, and nothing answers ICMP port unreachable for it.
//! - AF_XDP delivers no checksum status with a frame, so the endpoint verifies every checksum
//!   itself. A sender on the same host whose device offloads transmit checksums (veth by default)
//!   sends datagrams carrying only the pseudo-header sum (`CHECKSUM_PARTIAL`), which the endpoint
//!   counts as bad checksums; turn transmit checksum offload off on such a sender
//!   (`ethtool -K IF tx off`).
//! - Each queue's frames come back to that queue's fill ring (see [`Socket`]).

use std::mem;
use std::net::SocketAddr;

use super::error::{Error, Result};
use super::frame_match::FrameMatch;
use super::headers::{self, Malformed, UdpFrame};
use super::mode::Mode;
use super::program::{AttachMode, XdpLink, XdpProgram};
use super::socket::Socket;
use super::umem::{Frame, Umem, UmemConfig};
use crate::sys::socket::poll_any;

/// How to build a [`UdpEndpoint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// The queues of the interface to serve (one AF_XDP socket each, sharing one UMEM). Datagrams
    /// that arrive on other queues go to the stack.
    pub queues: Vec<u32>,
    /// Zero-copy, copy, or zero-copy falling back to copy.
    pub mode: Mode,
    /// How the redirect program is attached.
    pub attach: AttachMode,
    /// The UMEM shared by every queue. Each queue's fill ring is filled to its size at bind, so
    /// `frame_count` must exceed `fill_size` times the number of queues.
    pub umem: UmemConfig,
}

impl Default for EndpointConfig {
    fn default() -> EndpointConfig {
        EndpointConfig {
            queues: vec![0],
            mode: Mode::Auto,
            attach: AttachMode::Driver,
            umem: UmemConfig::default(),
        }
    }
}

/// What the endpoint counted since it was bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Datagrams delivered by [`UdpEndpoint::receive`].
    pub received: u64,
    /// Frames dropped as malformed: short, not IP, IPv4 options, fragments, not UDP, bad lengths.
    pub malformed: u64,
    /// Frames dropped for a bad IPv4 header or UDP checksum.
    pub bad_checksum: u64,
    /// Well-formed datagrams dropped because they were addressed to another address or port.
    pub not_for_us: u64,
    /// Descriptors the rx rings carried that named no frame lent to the kernel (never delivered).
    pub invalid_descs: u64,
}

/// A UDP endpoint on AF_XDP: a local address and port served from queues of an interface.
///
/// Binding attaches a redirect program for the port ([`FrameMatch::UdpPort`]), binds one socket per
/// queue with a shared UMEM and fills each queue's fill ring. Dropping the endpoint detaches the
/// program (traffic to the port goes back to the stack) and closes the sockets.
#[derive(Debug)]
pub struct UdpEndpoint {
    // Fields drop in order: the link first, so no frame is redirected to a closing socket.
    link: XdpLink,
    program: XdpProgram,
    sockets: Vec<Socket>,
    umem: Umem,
    local: SocketAddr,
    stats: EndpointStats,
    /// Frames taken from the rx rings, reused across calls.
    scratch: Vec<Frame>,
    /// Accepted datagrams: socket index, frame, parsed headers; reused across calls.
    accepted: Vec<(usize, Frame, UdpFrame)>,
}

impl UdpEndpoint {
    /// Binds `local` (address and port; an unspecified address takes datagrams to any address of
    /// either family) on `iface` in the calling thread's network namespace. Needs CAP_NET_RAW,
    /// CAP_BPF and CAP_NET_ADMIN.
    pub fn bind(iface: &str, local: SocketAddr, config: EndpointConfig) -> Result<UdpEndpoint> {
        let Some(&highest) = config.queues.iter().max() else {
            return Err(Error::usage(format!(
                "a UDP endpoint on {iface} needs at least one queue"
            )));
        };
        let mut umem = Umem::new(config.umem)?;
        let mut sockets = Vec::with_capacity(config.queues.len());
        for &queue in &config.queues {
            let mut socket = Socket::bind(&mut umem, iface, queue, config.mode)?;
            socket.fill(&mut umem, config.umem.fill_size)?;
            sockets.push(socket);
        }
        let program = XdpProgram::redirect_to_xsk(highest + 1, FrameMatch::UdpPort(local.port()))?;
        let map = program.xsk_map().expect("a redirect program has an XSKMAP");
        for socket in &sockets {
            map.insert(socket.queue(), socket)?;
        }
        let link = program.attach_to(iface, config.attach)?;
        Ok(UdpEndpoint {
            link,
            program,
            sockets,
            umem,
            local,
            stats: EndpointStats::default(),
            scratch: Vec::new(),
            accepted: Vec::new(),
        })
    }

    /// The local address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        self.link.interface()
    }

    /// The sockets, one per queue (for their mode, fallback and kernel statistics).
    pub fn sockets(&self) -> &[Socket] {
        &self.sockets
    }

    /// What the endpoint counted so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// The loaded redirect program.
    pub fn program(&self) -> &XdpProgram {
        &self.program
    }

    /// Waits up to `timeout_ms` (-1 = no limit) until a frame is ready on any queue; returns whether
    /// one is. The `poll` also wakes the driver when a fill ring asked for it.
    pub fn wait(&self, timeout_ms: i32) -> Result<bool> {
        let fds: Vec<_> = self.sockets.iter().map(Socket::fd).collect();
        poll_any(&fds, libc::POLLIN, timeout_ms).map_err(|e| {
            Error::new(
                format!("poll the AF_XDP sockets of {}", self.interface()),
                e,
                "",
            )
        })
    }

    /// Whether `dst` is this endpoint's address and port.
    fn accepts(&self, dst: SocketAddr) -> bool {
        dst.port() == self.local.port()
            && (self.local.ip().is_unspecified() || dst.ip() == self.local.ip())
    }

    /// Takes up to `max` datagrams from the queues' rx rings, without waiting. Frames that are not
    /// well-formed UDP datagrams to this endpoint are counted ([`UdpEndpoint::stats`]) and go back
    /// to their fill ring at once; the datagrams' frames go back when the returned batch drops.
    pub fn receive(&mut self, max: usize) -> Result<Received<'_>> {
        let mut frames = mem::take(&mut self.scratch);
        let mut accepted = mem::take(&mut self.accepted);
        let mut outcome = Ok(());
        for index in 0..self.sockets.len() {
            let left = max.saturating_sub(accepted.len());
            if left == 0 {
                break;
            }
            let want = u32::try_from(left).unwrap_or(u32::MAX);
            let socket = &mut self.sockets[index];
            match socket.receive(&mut self.umem, want, &mut frames) {
                Ok(invalid) => self.stats.invalid_descs += u64::from(invalid),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
            let mut rejected = Vec::new();
            for frame in frames.drain(..) {
                match headers::parse(self.umem.bytes(&frame)) {
                    Ok(udp) if self.accepts(udp.dst) => {
                        accepted.push((index, frame, udp));
                    }
                    Ok(_) => {
                        self.stats.not_for_us += 1;
                        rejected.push(frame);
                    }
                    Err(Malformed::BadIpChecksum | Malformed::BadUdpChecksum) => {
                        self.stats.bad_checksum += 1;
                        rejected.push(frame);
                    }
                    Err(_) => {
                        self.stats.malformed += 1;
                        rejected.push(frame);
                    }
                }
            }
            self.refill(index, rejected);
        }
        self.stats.received += accepted.len() as u64;
        self.scratch = frames;
        let batch = Received {
            endpoint: self,
            datagrams: accepted,
        };
        outcome.map(|()| batch)
    }

    /// Gives `frames` back to the fill ring of socket `index`'s queue. The ring has room for every
    /// frame the queue lent (it is as large as the frames filled at bind), so none is left over;
    /// should one be (a bug), it goes to the free list rather than leak.
    fn refill(&mut self, index: usize, mut frames: Vec<Frame>) {
        if frames.is_empty() {
            return;
        }
        let _ = self.sockets[index].fill_with(&mut self.umem, &mut frames);
        for frame in frames {
            self.umem.release(frame);
        }
    }
}

/// One datagram of a [`Received`] batch: its payload (in the UMEM frame it arrived in) and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The payload.
    pub payload: &'a [u8],
    /// The sender's address and port.
    pub source: SocketAddr,
    /// The address and port it was sent to (the endpoint's, or one of its addresses when bound to
    /// an unspecified one).
    pub destination: SocketAddr,
}

/// Datagrams taken by [`UdpEndpoint::receive`]. Their payloads stay in the UMEM frames they arrived
/// in; dropping the batch gives every frame back to its queue's fill ring.
#[derive(Debug)]
#[must_use = "a batch holds its frames until it drops"]
pub struct Received<'e> {
    endpoint: &'e mut UdpEndpoint,
    datagrams: Vec<(usize, Frame, UdpFrame)>,
}

impl Received<'_> {
    /// Number of datagrams.
    pub fn len(&self) -> usize {
        self.datagrams.len()
    }

    /// Whether the batch has no datagram.
    pub fn is_empty(&self) -> bool {
        self.datagrams.is_empty()
    }

    /// Datagram `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        let (_, frame, udp) = self.datagrams.get(i)?;
        Some(self.datagram(frame, udp))
    }

    /// The datagrams, in the order they were taken.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Datagram<'_>> + '_ {
        self.datagrams
            .iter()
            .map(|(_, frame, udp)| self.datagram(frame, udp))
    }

    fn datagram(&self, frame: &Frame, udp: &UdpFrame) -> Datagram<'_> {
        Datagram {
            payload: &self.endpoint.umem.bytes(frame)[udp.payload_range()],
            source: udp.src,
            destination: udp.dst,
        }
    }
}

impl Drop for Received<'_> {
    fn drop(&mut self) {
        let mut datagrams = mem::take(&mut self.datagrams);
        let mut by_queue: Vec<Vec<Frame>> = (0..self.endpoint.sockets.len())
            .map(|_| Vec::new())
            .collect();
        for (index, frame, _) in datagrams.drain(..) {
            by_queue[index].push(frame);
        }
        for (index, frames) in by_queue.into_iter().enumerate() {
            self.endpoint.refill(index, frames);
        }
        self.endpoint.accepted = datagrams;
    }
}
