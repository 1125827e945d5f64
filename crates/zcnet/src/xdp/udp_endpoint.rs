//! A UDP endpoint on AF_XDP: one local address and port served from one or more queues of an
//! interface, the datagrams' payloads read straight from the UMEM frames they arrived in.
//!
//! # Kernel behaviour relied on
//! - The redirect program ([`FrameMatch::UdpPort`]) hands the sockets only unfragmented UDP
//!   datagrams to the endpoint's port (IPv4 without options, IPv6 with UDP as the first next
//!   header, untagged Ethernet); every other frame — ARP, neighbour discovery, ICMP, other ports —
//!   goes on to the kernel's stack (`XDP_PASS`), so the interface keeps working for everything else.
//! - A datagram a peer fragmented (over the MTU, don't-fragment off) goes to the stack too, every
//!   fragment of it: the stack reassembles it and delivers it to a kernel UDP socket on the port,
//!   when the application keeps one (the endpoint alone would see a first fragment it cannot
//!   complete).
//! - A frame redirected to an AF_XDP socket never reaches the stack: the kernel's own UDP sockets on
//!   that port see nothing, and nothing answers ICMP port unreachable for it.
//! - AF_XDP delivers no checksum status with a frame, so the endpoint verifies every checksum
//!   itself. A sender on the same host whose device offloads transmit checksums (veth by default)
//!   sends datagrams carrying only the pseudo-header sum (`CHECKSUM_PARTIAL`), which the endpoint
//!   counts as bad checksums; turn transmit checksum offload off on such a sender
//!   (`ethtool -K IF tx off`).
//! - UDP checksums of sent datagrams are offloaded through AF_XDP TX metadata where the sending
//!   socket's bound mode gets them computed ([`TxMetadata`]: copy mode on a kernel that registers a
//!   UMEM with TX metadata room; zero-copy mode on a driver whose `xsk-features` name tx-checksum):
//!   the frame carries the pseudo-header sum and a `struct xsk_tx_metadata` checksum request 16
//!   bytes before the packet, sent with `XDP_TX_METADATA`. In copy mode the kernel makes a
//!   `CHECKSUM_PARTIAL` skb of it, which a veth peer delivers to local sockets as is (they trust
//!   it) and a real device completes. Elsewhere, or with [`Checksums::Software`], the endpoint
//!   computes them.
//! - Each queue's frames come back to that queue's fill ring (see [`Socket`]).
//! - An endpoint sends through the socket of its first queue. To spread sending over the queues,
//!   bind one endpoint per queue ([`UdpEndpoint::bind_each_queue`]), each driven by a thread or
//!   task of its own. The kernel's route and neighbour tables say
//!   where (see the `route` module: next hops are looked up over route netlink and cached until
//!   the kernel announces a change, or for a second at most, and an unresolved neighbour is an
//!   error, never an ARP request of the endpoint's own).
//!   Datagrams are sent with don't-fragment and never larger than the interface MTU. The MTU and
//!   the interface's Ethernet address are read at bind (`RTM_GETLINK`) and again when the kernel
//!   announces a change (`RTMGRP_LINK`): a send batch built after the change follows it (and
//!   [`UdpEndpoint::max_payload`] says so from then on).

use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::frame_match::FrameMatch;
use super::headers::{self, ETH_HLEN, Malformed, Path, UdpFrame};
use super::mode::Mode;
use super::program::{AttachMode, XdpLink, XdpProgram, interface_index};
use super::route::Routes;
use super::send_error::SendError;
use super::socket::{BusyPoll, Socket};
use super::tx_metadata::TxMetadata;
use super::umem::{Frame, Umem, UmemConfig};
use crate::sys::socket::{poll_any, poll_timeout};

/// How to build a [`UdpEndpoint`].
///
/// Start from [`EndpointConfig::with_queues`] or [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointConfig {
    /// The queues of the interface to serve (one AF_XDP socket each, sharing one UMEM). Datagrams
    /// that arrive on other queues go to the stack.
    pub queues: Vec<u32>,
    /// Zero-copy, copy, or zero-copy falling back to copy.
    pub mode: Mode,
    /// How the redirect program is attached.
    pub attach: AttachMode,
    /// Preferred busy polling on every socket ([`Socket::set_busy_poll`]): `None` leaves the sockets
    /// interrupt-driven.
    pub busy_poll: Option<BusyPoll>,
    /// The UMEM shared by every queue. Each queue's fill ring is filled to its size at bind, so
    /// `frame_count` must exceed `fill_size` times the number of queues.
    pub umem: UmemConfig,
    /// Who computes the UDP checksums of sent datagrams.
    pub checksums: Checksums,
}

/// Who computes the UDP checksums of the datagrams an endpoint sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checksums {
    /// The kernel or the device, through AF_XDP TX metadata, where the bound mode gets them
    /// computed ([`TxMetadata::checksum`], probed at bind); the endpoint elsewhere.
    #[default]
    Offload,
    /// Always the endpoint (no TX metadata room is reserved in the UMEM).
    Software,
}

impl EndpointConfig {
    /// The default configuration on `queues`, with a UMEM of the default frame and ring sizes holding
    /// as many frames as the queues' fill rings take at bind, and as many again to send with.
    pub fn with_queues(queues: Vec<u32>) -> EndpointConfig {
        let umem = UmemConfig::default();
        EndpointConfig {
            umem: UmemConfig {
                frame_count: umem.fill_size * (queues.len() as u32 + 1),
                ..umem
            },
            queues,
            ..EndpointConfig::default()
        }
    }
}

impl Default for EndpointConfig {
    fn default() -> EndpointConfig {
        EndpointConfig {
            queues: vec![0],
            mode: Mode::Auto,
            attach: AttachMode::Driver,
            busy_poll: None,
            umem: UmemConfig::default(),
            checksums: Checksums::Offload,
        }
    }
}

/// What the endpoint counted since it was bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Datagrams delivered by [`UdpEndpoint::receive`].
    pub received: u64,
    /// Frames dropped as malformed: short, not IP, IPv4 options, not UDP, bad lengths. (IPv4
    /// fragments would be too, but the redirect program leaves them to the stack.)
    pub malformed: u64,
    /// Frames dropped for a bad IPv4 header or UDP checksum.
    pub bad_checksum: u64,
    /// Well-formed datagrams dropped because they were addressed to another address or port.
    pub not_for_us: u64,
    /// Datagrams handed to the kernel for sending (less those it dropped, `tx_dropped`).
    pub sent: u64,
    /// Datagrams the kernel took from the tx ring and dropped unsent: in copy mode the device
    /// refused them (a wakeup's `EBUSY`, see [`crate::xdp::Socket::wake_tx`]).
    pub tx_dropped: u64,
    /// Descriptors the rx rings carried that named no frame lent to the kernel (never delivered).
    pub invalid_descs: u64,
    /// Datagrams built and then dropped unsent because the tx ring stayed full: those a
    /// [`SendBatch::flush`] reported in [`SendError::TxRingFull`], and those of a [`SendBatch`]
    /// dropped without a flush (whose drop has no caller to tell).
    pub unsent: u64,
}

add_counters! {
    /// The counts of several endpoints (one per queue, [`UdpEndpoint::bind_each_queue`]) added up.
    EndpointStats {
        received,
        malformed,
        bad_checksum,
        not_for_us,
        sent,
        tx_dropped,
        invalid_descs,
        unsent,
    }
}

/// A UDP endpoint on AF_XDP: a local address and port served from queues of an interface.
///
/// Binding attaches a redirect program for the port ([`FrameMatch::UdpPort`]), binds one socket per
/// queue with a shared UMEM and fills each queue's fill ring. Dropping the endpoint detaches the
/// program (traffic to the port goes back to the stack) and closes the sockets.
///
/// An echo server (payloads are read in the UMEM, copied once into the answer's frame):
///
/// ```no_run
/// use zcnet::xdp::{EndpointConfig, UdpEndpoint};
/// let mut endpoint = UdpEndpoint::bind("veth0", "10.0.0.1:9000".parse()?, EndpointConfig::default())?;
/// let mut answers = Vec::new();
/// loop {
///     endpoint.wait(None)?;
///     let batch = endpoint.receive(64)?;
///     answers.extend(batch.iter().map(|d| (d.source, d.payload.to_vec())));
///     drop(batch); // the frames go back to the fill ring
///     let mut send = endpoint.send_batch();
///     for (to, payload) in answers.drain(..) {
///         send.push(to, payload.len(), |buf| buf.copy_from_slice(&payload))?;
///     }
///     send.flush()?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct UdpEndpoint {
    // Fields drop in order (after `drop` emptied this endpoint's XSKMAP slots): the redirect first,
    // so that (when this endpoint holds its last reference) the program is detached before any
    // socket closes.
    redirect: Arc<Redirect>,
    sockets: Vec<Socket>,
    umem: Umem,
    local: SocketAddr,
    stats: EndpointStats,
    /// Frames taken from the rx rings, reused across calls.
    scratch: Vec<Frame>,
    /// Frames on their way back to a fill ring, reused across calls.
    returning: Vec<Frame>,
    /// Accepted datagrams: socket index, frame, parsed headers; reused across calls.
    accepted: Vec<(usize, Frame, UdpFrame)>,
    routes: Routes,
    mtu: usize,
    mac: [u8; 6],
    /// The next IPv4 identification.
    next_id: u16,
    /// Built datagrams waiting for the tx ring.
    pending: Vec<Frame>,
    /// What TX metadata the interface's sockets get (`None`: not probed, or the probe failed).
    tx_metadata: Option<TxMetadata>,
    /// Whether sent datagrams carry a checksum request instead of their checksum.
    offload_checksums: bool,
}

impl UdpEndpoint {
    /// Binds `local` (address and port; an unspecified address takes datagrams to any address of
    /// either family) on `iface` in the calling thread's network namespace: one socket per queue
    /// of `config.queues`, sharing one UMEM, served together by this endpoint. Needs CAP_NET_RAW,
    /// CAP_BPF and CAP_NET_ADMIN.
    ///
    /// # Errors
    ///
    /// [`Error`] naming the refused step and its errno: no queue in `config.queues`, no such
    /// interface (`ENODEV`) or one without an Ethernet address, a missing privilege (`EPERM`),
    /// a queue already bound (`EBUSY`), a program refused by the verifier or the driver, fewer
    /// UMEM frames than the fill rings take. The type's example binds.
    pub fn bind(iface: &str, local: SocketAddr, config: EndpointConfig) -> Result<UdpEndpoint> {
        let Some(&highest) = config.queues.iter().max() else {
            return Err(no_queue(iface));
        };
        let device = Device::read(iface, config.queues.len(), &config)?;
        let mut umem = device.umem(&config)?;
        let sockets = config
            .queues
            .iter()
            .map(|&queue| open_queue(&mut umem, iface, queue, &config))
            .collect::<Result<Vec<_>>>()?;
        let redirect = Redirect::attach(iface, highest, local.port(), &sockets, config.attach)?;
        Ok(UdpEndpoint::new(
            Arc::new(redirect),
            sockets,
            umem,
            local,
            device,
        ))
    }

    /// Binds `local` on `iface` as [`UdpEndpoint::bind`] does, but as one endpoint per queue of
    /// `config.queues`, each with its own socket and its own UMEM of `config.umem` (so each must
    /// hold more frames than one fill ring), all behind one redirect program. Each endpoint
    /// receives what arrives on its queue and sends through its queue's socket, so each can be
    /// driven by a thread or task of its own, with nothing shared between them but the program.
    /// The program stays attached until the last of them drops; dropping one closes its socket,
    /// which the kernel takes out of the program's map, and what arrives on its queue then goes to
    /// the stack.
    pub fn bind_each_queue(
        iface: &str,
        local: SocketAddr,
        config: EndpointConfig,
    ) -> Result<Vec<UdpEndpoint>> {
        let Some(&highest) = config.queues.iter().max() else {
            return Err(no_queue(iface));
        };
        // The interface is read and probed once; each endpoint has a route cache of its own.
        let read = Device::read(iface, 1, &config)?;
        let mut opened = Vec::with_capacity(config.queues.len());
        for &queue in &config.queues {
            let device = read.again()?;
            let mut umem = device.umem(&config)?;
            let socket = open_queue(&mut umem, iface, queue, &config)?;
            opened.push((socket, umem, device));
        }
        let sockets = opened.iter().map(|(socket, _, _)| socket);
        let redirect = Redirect::attach(iface, highest, local.port(), sockets, config.attach)?;
        let redirect = Arc::new(redirect);
        Ok(opened
            .into_iter()
            .map(|(socket, umem, device)| {
                UdpEndpoint::new(Arc::clone(&redirect), vec![socket], umem, local, device)
            })
            .collect())
    }

    fn new(
        redirect: Arc<Redirect>,
        sockets: Vec<Socket>,
        umem: Umem,
        local: SocketAddr,
        device: Device,
    ) -> UdpEndpoint {
        // Checksums are offloaded when the UMEM has TX metadata room and the mode of the socket
        // that sends gets them computed.
        let offload_checksums = umem.tx_metadata_len() > 0
            && device
                .tx_metadata
                .as_ref()
                .is_some_and(|t| t.checksum(sockets[0].mode()));
        UdpEndpoint {
            redirect,
            sockets,
            umem,
            local,
            stats: EndpointStats::default(),
            scratch: Vec::new(),
            returning: Vec::new(),
            accepted: Vec::new(),
            routes: device.routes,
            mtu: device.mtu,
            mac: device.mac,
            next_id: 0,
            pending: Vec::new(),
            tx_metadata: device.tx_metadata,
            offload_checksums,
        }
    }

    /// The local address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        self.redirect.link.interface()
    }

    /// The sockets, one per queue (for their mode, fallback and kernel statistics).
    pub fn sockets(&self) -> &[Socket] {
        &self.sockets
    }

    /// Whether sent datagrams have their UDP checksums computed by the kernel or the device (AF_XDP
    /// TX metadata) rather than by the endpoint.
    pub fn offloads_checksums(&self) -> bool {
        self.offload_checksums
    }

    /// What AF_XDP TX metadata the interface's sockets get, as probed at bind (`None` with
    /// [`Checksums::Software`], or when the probe could not run).
    pub fn tx_metadata(&self) -> Option<&TxMetadata> {
        self.tx_metadata.as_ref()
    }

    /// What the endpoint counted so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// The loaded redirect program.
    pub fn program(&self) -> &XdpProgram {
        &self.redirect.program
    }

    /// Waits up to `timeout` (`None`: no limit; `Some(Duration::ZERO)`: only looks) until a frame
    /// is ready on any queue; returns whether one is. The `poll` also wakes the driver when a fill
    /// ring asked for it.
    ///
    /// # Errors
    ///
    /// The `poll` fails (`EINTR` when a signal interrupts it).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let fds: Vec<_> = self.sockets.iter().map(Socket::fd).collect();
        poll_any(&fds, libc::POLLIN, poll_timeout(timeout)).map_err(|e| {
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
    ///
    /// # Errors
    ///
    /// A ring operation fails (an [`Error`] naming it). Malformed frames are counted, not errors.
    /// The type's example receives.
    pub fn receive(&mut self, max: usize) -> Result<Received<'_>> {
        let outcome = self.take(max);
        let batch = self.taken();
        outcome.map(|()| batch)
    }

    /// Moves up to `max` datagrams from the rx rings to the batch [`UdpEndpoint::taken`] hands
    /// out (see [`UdpEndpoint::receive`]); on an error, what was taken before it stays there.
    pub(crate) fn take(&mut self, max: usize) -> Result<()> {
        let mut frames = mem::take(&mut self.scratch);
        let mut rejected = mem::take(&mut self.returning);
        let mut outcome = Ok(());
        for index in 0..self.sockets.len() {
            let left = max.saturating_sub(self.accepted.len());
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
            for frame in frames.drain(..) {
                match headers::parse(self.umem.bytes(&frame)) {
                    Ok(udp) if self.accepts(udp.dst) => {
                        self.accepted.push((index, frame, udp));
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
            self.refill(index, &mut rejected);
        }
        self.scratch = frames;
        self.returning = rejected;
        outcome
    }

    /// Whether [`UdpEndpoint::take`] took a datagram not yet handed out.
    #[cfg(feature = "tokio")]
    pub(crate) fn has_taken(&self) -> bool {
        !self.accepted.is_empty()
    }

    /// The datagrams taken so far, as a batch that gives their frames back when it drops.
    pub(crate) fn taken(&mut self) -> Received<'_> {
        let datagrams = mem::take(&mut self.accepted);
        self.stats.received += datagrams.len() as u64;
        Received {
            endpoint: self,
            datagrams,
        }
    }

    /// The longest payload one datagram to `to`'s family carries: the interface MTU less the IP
    /// and UDP headers, and no more than a UMEM frame holds.
    pub fn max_payload(&self, to: IpAddr) -> usize {
        let headers = headers::headers_len(to);
        let by_mtu = (self.mtu + ETH_HLEN).saturating_sub(headers);
        let room = self.umem.frame_size() - self.umem.tx_metadata_len();
        let by_frame = (room as usize).saturating_sub(headers);
        by_mtu.min(by_frame)
    }

    /// Sends one datagram of `len` payload bytes to `to`; `write` fills the payload in place, in the
    /// UMEM frame that goes to the kernel (no copy). A batch of one ([`UdpEndpoint::send_batch`]).
    ///
    /// # Errors
    ///
    /// [`SendError`]: the payload is too long ([`UdpEndpoint::max_payload`]), `to` is of the
    /// other family, has no route through this interface or no resolved neighbour yet
    /// (`Unresolved`: retry in a moment), every frame is in use (`NoFrame`: reclaim and retry),
    /// or the tx ring stayed full (`TxRingFull`).
    ///
    /// ```no_run
    /// use zcnet::xdp::{EndpointConfig, UdpEndpoint};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut endpoint = UdpEndpoint::bind("eth1", "10.0.0.1:9000".parse()?, EndpointConfig::default())?;
    /// endpoint.send("10.0.0.2:9000".parse()?, 5, |payload| payload.copy_from_slice(b"hello"))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn send(
        &mut self,
        to: SocketAddr,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> std::result::Result<(), SendError> {
        let mut batch = self.send_batch();
        batch.push(to, len, write)?;
        batch.flush().map(drop)
    }

    /// A batch of datagrams to send: each [`SendBatch::push`] builds one in a frame, and
    /// [`SendBatch::flush`] (or dropping the batch) hands them all to the tx ring with one wakeup.
    pub fn send_batch(&mut self) -> SendBatch<'_> {
        SendBatch {
            endpoint: self,
            refreshed: false,
        }
    }

    /// Takes back the frames the kernel finished sending (every queue's completion ring); returns
    /// how many.
    ///
    /// # Errors
    ///
    /// A completion ring operation fails.
    pub fn reclaim(&mut self) -> Result<u32> {
        let mut frames = 0;
        for socket in &mut self.sockets {
            frames += socket.reclaim(&mut self.umem, u32::MAX)?.frames;
        }
        Ok(frames)
    }

    /// A free frame, reclaiming sent ones when the free list is empty.
    fn free_frame(&mut self) -> std::result::Result<Frame, SendError> {
        if let Some(frame) = self.umem.alloc() {
            return Ok(frame);
        }
        self.reclaim()?;
        self.umem.alloc().ok_or(SendError::NoFrame)
    }

    /// Builds a datagram to `to` in a frame, from `from` when given (else the bound address, or the
    /// route's source), and queues it for [`UdpEndpoint::flush`].
    pub(crate) fn build(
        &mut self,
        (from, to): (Option<IpAddr>, SocketAddr),
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> std::result::Result<(), SendError> {
        let bound = self.local.ip();
        let local = match from {
            Some(from) if !bound.is_unspecified() && from != bound => {
                return Err(SendError::SourceMismatch { local: bound, from });
            }
            Some(from) => from,
            None => bound,
        };
        if !local.is_unspecified() && local.is_ipv4() != to.is_ipv4() {
            return Err(SendError::FamilyMismatch { local, to: to.ip() });
        }
        let max = self.max_payload(to.ip());
        if len > max {
            return Err(SendError::TooLong { len, max });
        }
        let hop = self.routes.hop(to.ip(), Instant::now())?;
        let src = match (local.is_unspecified(), hop.src) {
            (false, _) => local,
            (true, Some(src)) => src,
            (true, None) => {
                return Err(SendError::NoRoute {
                    to: to.ip(),
                    source: std::io::Error::from_raw_os_error(libc::EADDRNOTAVAIL),
                });
            }
        };
        let path = Path {
            src_mac: self.mac,
            dst_mac: hop.mac,
            src: SocketAddr::new(src, self.local.port()),
            dst: to,
        };
        let mut frame = self.free_frame()?;
        let buffer = self.umem.buffer_mut(&mut frame);
        let hlen = headers::headers_len(to.ip());
        // A writer that panics must not take the frame with it: a dropped token is never reused,
        // and every panic caught by the caller would leave one frame fewer to send with.
        if let Err(panic) =
            panic::catch_unwind(AssertUnwindSafe(|| write(&mut buffer[hlen..hlen + len])))
        {
            self.umem.release(frame);
            panic::resume_unwind(panic);
        }
        self.next_id = self.next_id.wrapping_add(1);
        let write_headers = match self.offload_checksums {
            true => headers::write_udp_for_offload,
            false => headers::write_udp,
        };
        let built = write_headers(buffer, &path, len, self.next_id)
            .map(|frame_len| frame.set_len(frame_len as u32));
        // The sum runs from the UDP header to the frame's end and goes to the header's offset 6.
        let requested = !self.offload_checksums
            || self
                .umem
                .request_tx_checksum(&mut frame, headers::udp_offset(to.ip()) as u16, 6);
        if built != Ok(true) || !requested {
            self.umem.release(frame);
            return Err(SendError::TooLong { len, max });
        }
        self.pending.push(frame);
        Ok(())
    }

    /// Reads the link, route and neighbour changes the kernel announced (before a batch is
    /// built): a changed MTU or Ethernet address of the interface applies from this batch on.
    pub(crate) fn refresh_routes(&mut self) -> std::result::Result<(), SendError> {
        if let Some(link) = self.routes.refresh()? {
            self.mtu = link.mtu as usize;
            self.mac = link.mac.unwrap_or(self.mac);
        }
        Ok(())
    }

    /// Whether built datagrams wait for room in the tx ring.
    #[cfg(feature = "tokio")]
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether the sending socket's tx ring holds descriptors the kernel takes only when woken
    /// again.
    #[cfg(feature = "tokio")]
    pub(crate) fn tx_waits_for_wakeup(&mut self) -> bool {
        let socket = &mut self.sockets[0];
        socket.tx_untaken() > 0 && socket.tx_needs_wakeup()
    }

    /// One try at handing the queued datagrams to the first queue's tx ring: as many as fit go,
    /// the kernel is woken until it takes them (see [`Socket::wake_tx_until_taken`]), and sent
    /// frames are reclaimed when some are left; returns how many went. What did not fit stays
    /// queued.
    pub(crate) fn transmit_pending(&mut self) -> std::result::Result<usize, SendError> {
        let queued = self.pending.len();
        let socket = &mut self.sockets[0];
        socket.transmit(&mut self.umem, &mut self.pending)?;
        let dropped = socket.wake_tx_until_taken()?;
        if !self.pending.is_empty() {
            socket.reclaim(&mut self.umem, u32::MAX)?;
        }
        let sent = queued - self.pending.len();
        self.stats.sent += sent as u64;
        self.count_tx_dropped(dropped);
        Ok(sent)
    }

    /// Wakes the kernel for what the first queue's tx ring holds (see [`Socket::wake_tx`]).
    #[cfg(feature = "tokio")]
    pub(crate) fn wake_tx(&mut self) -> std::result::Result<(), SendError> {
        let dropped = self.sockets[0].wake_tx()?;
        self.count_tx_dropped(dropped);
        Ok(())
    }

    /// Moves `dropped` datagrams, counted as sent when they went to the tx ring, to `tx_dropped`.
    fn count_tx_dropped(&mut self, dropped: u32) {
        let dropped = u64::from(dropped);
        self.stats.sent -= dropped.min(self.stats.sent);
        self.stats.tx_dropped += dropped;
    }

    /// Hands the queued datagrams to the first queue's tx ring and wakes the kernel; when the ring
    /// is full, reclaims and wakes again, a bounded number of times. Returns how many went.
    fn flush(&mut self) -> std::result::Result<usize, SendError> {
        let mut sent = 0;
        for _ in 0..FLUSH_ATTEMPTS {
            sent += self.transmit_pending()?;
            if self.pending.is_empty() {
                return Ok(sent);
            }
        }
        let dropped = self.pending.len();
        for frame in self.pending.drain(..) {
            self.umem.release(frame);
        }
        self.stats.unsent += dropped as u64;
        Err(SendError::TxRingFull { sent, dropped })
    }

    /// Gives `frames` (emptied) back to the fill ring of socket `index`'s queue, and wakes the
    /// kernel when the ring asks for it (need_wakeup). The ring has room for every frame the queue
    /// lent (it is as large as the frames filled at bind), so none is left over; should one be (a
    /// bug), it goes to the free list rather than leak.
    fn refill(&mut self, index: usize, frames: &mut Vec<Frame>) {
        if frames.is_empty() {
            return;
        }
        let socket = &mut self.sockets[index];
        let _ = socket.fill_with(&mut self.umem, frames);
        if socket.fill_needs_wakeup() {
            // A failed wakeup leaves the flag set: the next `wait` polls again.
            let _ = socket.wait_rx(Some(Duration::ZERO));
        }
        for frame in frames.drain(..) {
            self.umem.release(frame);
        }
    }
}

impl Drop for UdpEndpoint {
    /// Hands this endpoint's queues back to the stack before its sockets close: their XSKMAP slots
    /// are emptied (the program, shared with other queues' endpoints, passes what they receive to the
    /// stack from now on), and with the last endpoint the program is detached. Closing the sockets
    /// alone would not do it while a child forked meanwhile holds duplicates of their descriptors.
    fn drop(&mut self) {
        let Some(map) = self.redirect.program.xsk_map() else {
            return;
        };
        for socket in &self.sockets {
            // The slot holds this socket (bind filled it); emptying it fails only for a slot past
            // the map, which bind never fills.
            let _ = map.remove(socket.queue());
        }
    }
}

/// The redirect program of one or more endpoints on an interface, attached while any of them lives.
#[derive(Debug)]
struct Redirect {
    // Fields drop in order: the link first, so no frame is redirected to a closing socket.
    link: XdpLink,
    program: XdpProgram,
}

impl Redirect {
    /// Loads a program steering UDP datagrams to `port` to `sockets` (one per queue, the highest
    /// being `highest`), and attaches it to `iface`.
    fn attach<'s>(
        iface: &str,
        highest: u32,
        port: u16,
        sockets: impl IntoIterator<Item = &'s Socket>,
        attach: AttachMode,
    ) -> Result<Redirect> {
        let program = XdpProgram::redirect_to_xsk(highest + 1, FrameMatch::UdpPort(port))?;
        let map = program.xsk_map().expect("a redirect program has an XSKMAP");
        for socket in sockets {
            map.insert(socket.queue(), socket)?;
        }
        let link = program.attach_to(iface, attach)?;
        Ok(Redirect { link, program })
    }
}

/// What an endpoint reads of its interface at bind, and its route and neighbour cache.
struct Device {
    ifindex: u32,
    routes: Routes,
    mtu: usize,
    mac: [u8; 6],
    /// What the interface does with AF_XDP TX metadata, when `config.checksums` asks to offload
    /// and the probe could run.
    tx_metadata: Option<TxMetadata>,
}

impl Device {
    /// Reads `iface` for an endpoint serving `queues` queues from one UMEM of `config.umem`, after
    /// checking that UMEM leaves frames to send with.
    fn read(iface: &str, queues: usize, config: &EndpointConfig) -> Result<Device> {
        let filled = u64::from(config.umem.fill_size) * queues as u64;
        if u64::from(config.umem.frame_count) <= filled {
            return Err(Error::usage(format!(
                "a UMEM of {} frames for {queues} queue(s) whose fill rings take {} each leaves \
                 none to send: give it more frames",
                config.umem.frame_count, config.umem.fill_size
            )));
        }
        let ifindex = interface_index(iface)?.get();
        let mut routes = Routes::open(ifindex)?;
        let link = routes.link(iface)?;
        let Some(mac) = link.mac else {
            return Err(Error::usage(format!(
                "{iface} has no Ethernet address: a UDP endpoint needs an Ethernet interface"
            )));
        };
        // A probe that cannot run (no privilege for a throwaway socket) leaves checksums to us.
        let tx_metadata = match config.checksums {
            Checksums::Offload => TxMetadata::probe(iface).ok(),
            Checksums::Software => None,
        };
        Ok(Device {
            ifindex,
            routes,
            mtu: link.mtu as usize,
            mac,
            tx_metadata,
        })
    }

    /// What this read found, with a route and neighbour cache of its own (for another endpoint on
    /// the same interface).
    fn again(&self) -> Result<Device> {
        Ok(Device {
            routes: Routes::open(self.ifindex)?,
            tx_metadata: self.tx_metadata.clone(),
            ..*self
        })
    }

    /// A UMEM of `config.umem`, with TX metadata room before each frame to send when the kernel
    /// registers one so.
    fn umem(&self, config: &EndpointConfig) -> Result<Umem> {
        let mut umem = Umem::new(config.umem)?;
        if self.tx_metadata.as_ref().is_some_and(|t| t.umem.is_ok()) {
            umem.reserve_tx_metadata();
        }
        Ok(umem)
    }
}

/// The error of an endpoint given no queue.
fn no_queue(iface: &str) -> Error {
    Error::usage(format!(
        "a UDP endpoint on {iface} needs at least one queue"
    ))
}

/// Binds a socket of `umem` to `queue` of `iface` as `config` says, and fills its fill ring.
fn open_queue(umem: &mut Umem, iface: &str, queue: u32, config: &EndpointConfig) -> Result<Socket> {
    let mut socket = Socket::bind(umem, iface, queue, config.mode)?;
    socket.fill(umem, config.umem.fill_size)?;
    if let Some(busy_poll) = config.busy_poll {
        socket.set_busy_poll(busy_poll)?;
    }
    Ok(socket)
}

/// How often [`UdpEndpoint::flush`] tries a full tx ring before it gives up.
const FLUSH_ATTEMPTS: usize = 64;

/// Datagrams built for sending ([`UdpEndpoint::send_batch`]), handed to the kernel by
/// [`SendBatch::flush`] or when the batch drops.
///
/// # Drop
///
/// A batch dropped without [`SendBatch::flush`] flushes itself, but has no caller to return an
/// error to: datagrams it drops because the tx ring stayed full are counted in
/// [`EndpointStats::unsent`] (flush to get them as [`SendError::TxRingFull`] instead), and after
/// any other failure (a wakeup the kernel refused) what it built stays queued in the endpoint for
/// the next batch.
#[derive(Debug)]
#[must_use = "a batch sends when flushed or dropped"]
pub struct SendBatch<'e> {
    endpoint: &'e mut UdpEndpoint,
    /// Whether the route and neighbour changes announced before the batch were read.
    refreshed: bool,
}

impl SendBatch<'_> {
    /// Builds a datagram of `len` payload bytes to `to` in a UMEM frame: `write` fills the payload
    /// in place, then the Ethernet, IP and UDP headers and checksums are written in front of it.
    /// Refuses (and builds nothing) what cannot be sent: a payload over
    /// [`UdpEndpoint::max_payload`], no route, a route through another interface, an unresolved
    /// next hop, a destination of the other family, or no free frame. When `write` panics, its
    /// frame goes back to the free list before the panic goes on, and nothing is queued.
    pub fn push(
        &mut self,
        to: SocketAddr,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> std::result::Result<(), SendError> {
        self.push_with((None, to), len, write)
    }

    /// [`SendBatch::push`] from source address `from`: an endpoint bound to an unspecified address
    /// sends from whichever of its addresses a datagram names (an answer from the address the
    /// question was sent to; without it, the route's source address); one bound to an address
    /// refuses any other ([`SendError::SourceMismatch`]). The address is not checked against the
    /// interface's: a peer's answers to one it does not hold go elsewhere.
    pub fn push_from(
        &mut self,
        from: IpAddr,
        to: SocketAddr,
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> std::result::Result<(), SendError> {
        self.push_with((Some(from), to), len, write)
    }

    fn push_with(
        &mut self,
        ends: (Option<IpAddr>, SocketAddr),
        len: usize,
        write: impl FnOnce(&mut [u8]),
    ) -> std::result::Result<(), SendError> {
        if !self.refreshed {
            self.endpoint.refresh_routes()?;
            self.refreshed = true;
        }
        self.endpoint.build(ends, len, write)
    }

    /// Hands every built datagram to the tx ring and wakes the kernel; returns how many went. When
    /// the ring stays full the rest are dropped (their frames freed) and the error is
    /// [`SendError::TxRingFull`].
    ///
    /// # Errors
    ///
    /// [`SendError::TxRingFull`] (counted in [`EndpointStats::unsent`]), or a ring operation
    /// failed ([`SendError::Xdp`]).
    pub fn flush(self) -> std::result::Result<usize, SendError> {
        self.endpoint.flush()
    }
}

impl Drop for SendBatch<'_> {
    fn drop(&mut self) {
        if !self.endpoint.pending.is_empty() {
            // Dropping without flush sends what was built. A full ring's drops are counted in
            // `stats.unsent` by flush; any other failure leaves the datagrams queued (see `# Drop`).
            let _ = self.endpoint.flush();
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
        // The datagrams are grouped by queue, in queue order (as `receive` took them).
        let mut datagrams = mem::take(&mut self.datagrams);
        let mut frames = mem::take(&mut self.endpoint.returning);
        let mut queue = None;
        for (index, frame, _) in datagrams.drain(..) {
            if let Some(previous) = queue.filter(|&q| q != index) {
                self.endpoint.refill(previous, &mut frames);
            }
            queue = Some(index);
            frames.push(frame);
        }
        if let Some(last) = queue {
            self.endpoint.refill(last, &mut frames);
        }
        self.endpoint.returning = frames;
        self.endpoint.accepted = datagrams;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_umem_with_no_frame_left_to_send_is_refused_before_anything_is_bound() {
        let config = EndpointConfig {
            queues: vec![0, 1],
            umem: UmemConfig {
                frame_count: 128,
                fill_size: 64,
                ..UmemConfig::default()
            },
            ..EndpointConfig::default()
        };
        let err = UdpEndpoint::bind("lo", "127.0.0.1:9".parse().unwrap(), config).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        assert!(err.to_string().contains("leaves none to send"), "{err}");
    }
}
