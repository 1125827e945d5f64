//! AF_XDP sockets: one kernel socket each, bound to one queue of an interface in zero-copy or copy
//! mode, with its rx and tx rings, the queue's fill and completion rings (shared by every socket of
//! its UMEM there), wakeups and statistics.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::mode::{BoundMode, Mode};
use super::packet::Packet;
use super::program::interface_index;
use super::queue::{Queue, Through};
use super::ring::{Consumer, Desc, Producer};
use super::stats::Statistics;
use super::umem::{
    Frame, FrameSize, Inherited, QueuePlace, Reclaimed, Sharing, Umem, UmemConfig, XSK_PRIVILEGE,
};
use crate::fallback::Fallback;
use crate::sys::socket::set_int_option;
use crate::sys::xdp::{
    self as sys, RingKind, RingMmap, RingWord, XDP_COPY, XDP_SHARED_UMEM, XDP_USE_NEED_WAKEUP,
    XDP_USE_SG, XDP_ZEROCOPY, xdp_mmap_offsets,
};

/// Preferred busy polling of a socket ([`Socket::set_busy_poll`],
/// [`EndpointConfig::busy_poll`](super::EndpointConfig::busy_poll)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusyPoll {
    /// How long one `poll` or `sendto` runs the driver's NAPI loop for packets (`SO_BUSY_POLL`,
    /// whole microseconds).
    pub timeout: Duration,
    /// Packets one NAPI poll may process (`SO_BUSY_POLL_BUDGET`; above 8 needs CAP_NET_ADMIN).
    pub budget: u16,
}

impl BusyPoll {
    /// Busy polling for `timeout` per call with `budget` packets per NAPI poll.
    ///
    /// ```
    /// use std::time::Duration;
    /// let busy_poll = zcnet::xdp::BusyPoll::new(Duration::from_micros(20), 64);
    /// assert_eq!(busy_poll.budget, 64);
    /// ```
    pub fn new(timeout: Duration, budget: u16) -> BusyPoll {
        BusyPoll { timeout, budget }
    }
}

/// Rings and options of a socket.
///
/// Start from [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketConfig {
    /// Rx ring entries (power of two; 0 = no rx ring).
    pub rx_size: u32,
    /// Tx ring entries (power of two; 0 = no tx ring).
    pub tx_size: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP`: the kernel flags the rings when it needs a syscall to make
    /// progress, so busy loops can skip syscalls otherwise.
    pub need_wakeup: bool,
    /// Bind with `XDP_USE_SG` (multi-buffer, kernel 6.6+): a packet larger than a frame arrives, and
    /// may be sent, as several frames in a row ([`Frame::continues`], [`Socket::receive_packets`]).
    /// Copy mode always allows it; in zero-copy mode the driver must (`EOPNOTSUPP` otherwise, and
    /// [`Mode::Auto`] falls back to copy mode). The redirect program must be one for multi-buffer
    /// ([`crate::xdp::XdpProgram::redirect_to_xsk_multi_buffer`]) for larger packets to reach the
    /// socket.
    pub multi_buffer: bool,
}

impl Default for SocketConfig {
    fn default() -> SocketConfig {
        SocketConfig {
            rx_size: 2048,
            tx_size: 2048,
            need_wakeup: true,
            multi_buffer: false,
        }
    }
}

/// An AF_XDP socket bound to one queue of one interface: the only owner of its kernel socket. Dropping
/// it closes the socket and unmaps its rings, which unbinds it from its queue (the kernel frees the
/// queue for a new bind a moment later, once no socket of its UMEM is bound there).
///
/// Every socket of a UMEM on a queue shares the queue's fill and completion rings (the kernel gives a
/// queue one pool): any of them fills ([`Socket::fill`], [`Socket::fill_with`]) and reclaims
/// ([`Socket::reclaim`]) for all, and the rings stay open while any of them lives, whichever closes
/// first. Once every socket of a queue has closed, the frames lent there come back to the UMEM's
/// free list when the UMEM binds that queue again (the bind succeeding proves that the kernel let go
/// of them).
///
/// Frames reach its rx ring only when an XDP program redirects them to it: attach
/// [`crate::xdp::XdpProgram::redirect_to_xsk`] and insert the socket into its map at the queue index.
#[derive(Debug)]
pub struct Socket {
    // Fields drop in order: the ring mappings and the descriptor go first, which releases the kernel
    // socket, and only then the queue, whose last holder closes the queue's rings.
    rx: Option<Consumer<Desc>>,
    tx: Option<Producer<Desc>>,
    fd: OwnedFd,
    queue_rings: Arc<Queue>,
    iface: String,
    queue: u32,
    mode: BoundMode,
    fallback: Option<Fallback>,
    need_wakeup: bool,
    multi_buffer: bool,
    shares_umem: bool,
    /// The UMEM whose frames this socket's rings carry.
    umem: u64,
    /// For a socket a broker handed out: the connection to it, whose closing tells the broker that
    /// this worker is gone.
    _lease: Option<OwnedFd>,
}

/// How a socket on `iface` is named in errors.
fn socket_name(iface: &str) -> String {
    format!("AF_XDP socket for {iface}")
}

/// A socket's rx and tx rings, each optional.
type RxTx = (Option<Consumer<Desc>>, Option<Producer<Desc>>);

/// Maps the rx and tx rings of `config`'s sizes (none for 0) of socket `fd` (named `name` in
/// errors), whose ring offsets are `offsets`.
fn map_rx_tx(
    fd: BorrowedFd<'_>,
    name: &str,
    offsets: &xdp_mmap_offsets,
    config: SocketConfig,
) -> Result<RxTx> {
    let setup = |what: &str, e| setup_error(name, what, e);
    let rx = map_ring(fd, RingKind::Rx, offsets, config.rx_size)
        .map_err(|e| setup("map rx ring", e))?
        .map(Consumer::new);
    let tx = map_ring(fd, RingKind::Tx, offsets, config.tx_size)
        .map_err(|e| setup("map tx ring", e))?
        .map(Producer::new);
    Ok((rx, tx))
}

fn bind_hint(errno: Option<i32>, flags: u16) -> &'static str {
    match errno {
        Some(libc::EOPNOTSUPP) if flags & XDP_ZEROCOPY != 0 && flags & XDP_USE_SG != 0 => {
            "the driver has no AF_XDP zero-copy, or none for multi-buffer (xdp_zc_max_segs 1): \
             bind without multi-buffer, or in copy mode"
        }
        Some(libc::EOPNOTSUPP) if flags & XDP_ZEROCOPY != 0 => {
            "the driver has no AF_XDP zero-copy: bind in copy mode (or auto mode, which falls back \
             to it)"
        }
        Some(libc::EBUSY) => {
            "the queue already has an AF_XDP socket (or a closed one's rings are still mapped)"
        }
        Some(libc::EINVAL) => {
            "queue id beyond the interface's queues, a frame smaller than the MTU (zero-copy without \
             multi-buffer), or a kernel without the flags asked for (multi-buffer needs 6.6)"
        }
        Some(libc::ENETDOWN) => "the interface is down",
        _ => "",
    }
}

/// Why [`Mode::Auto`] copies after the zero-copy bind with `flags` failed with `errno`.
pub(super) fn copy_remedy(errno: i32, flags: u16) -> &'static str {
    match errno {
        libc::EOPNOTSUPP if flags & XDP_USE_SG != 0 => {
            "the driver has no AF_XDP zero-copy, or none for multi-buffer: bound in copy mode"
        }
        libc::EOPNOTSUPP => "the driver has no AF_XDP zero-copy: bound in copy mode",
        _ => match bind_hint(Some(errno), flags) {
            "" => "bound in copy mode",
            hint => hint,
        },
    }
}

/// Maps ring `kind` of `entries` slots (none for 0).
pub(super) fn map_ring<S: RingWord>(
    fd: BorrowedFd<'_>,
    kind: RingKind,
    offsets: &xdp_mmap_offsets,
    entries: u32,
) -> std::io::Result<Option<Arc<RingMmap<S>>>> {
    match entries {
        0 => Ok(None),
        n => RingMmap::map(fd, kind, offsets, n).map(|ring| Some(Arc::new(ring))),
    }
}

/// Sizes `rings` on the fresh AF_XDP socket `fd` (a ring of size 0 is left out) and reads where they
/// map; a failure says which step failed on which socket (`socket`, e.g. "AF_XDP socket for veth0").
pub(super) fn size_rings(
    fd: BorrowedFd<'_>,
    socket: &str,
    rings: &[(RingKind, u32)],
) -> Result<xdp_mmap_offsets> {
    for &(kind, size) in rings.iter().filter(|(_, size)| *size > 0) {
        sys::set_ring_size(fd, kind, size)
            .map_err(|e| setup_error(socket, &format!("set {kind:?} ring size {size}"), e))?;
    }
    sys::mmap_offsets(fd).map_err(|e| setup_error(socket, "read ring offsets", e))
}

/// The error of setup step `what` of `socket`.
pub(super) fn setup_error(socket: &str, what: &str, e: std::io::Error) -> Error {
    Error::from_errno(format!("{what} of {socket}"), e, XSK_PRIVILEGE, "")
}

fn no_ring(ring: &str, iface: &str) -> Error {
    Error::usage(format!(
        "the AF_XDP socket on {iface} has no {ring} ring (SocketConfig::{ring}_size 0)"
    ))
}

/// How long a bind keeps retrying `EBUSY`.
const BUSY_PATIENCE: Duration = Duration::from_secs(1);

/// Runs `bind`, retrying `EBUSY` for up to [`BUSY_PATIENCE`]: the kernel releases the queue of a closed
/// AF_XDP socket from a workqueue, and a veth queue that just came up is briefly busy too, so a bind
/// right after either fails with `EBUSY` although the queue is free a moment later. A queue held by a
/// live socket still fails, after the wait.
fn bind_retrying_busy(mut bind: impl FnMut() -> std::io::Result<()>) -> std::io::Result<()> {
    let deadline = Instant::now() + BUSY_PATIENCE;
    loop {
        match bind() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Binds `fd` to queue `queue` of `iface` (index `ifindex`) with `flags` (and the socket `shared`
/// names, with `XDP_SHARED_UMEM`), retrying `EBUSY` for a moment; the error names the flags and what
/// the errno usually means.
pub(super) fn bind_on_queue(
    fd: BorrowedFd<'_>,
    iface: &str,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared: Option<BorrowedFd<'_>>,
) -> Result<()> {
    bind_retrying_busy(|| sys::bind(fd, ifindex, queue, flags, shared)).map_err(|e| {
        let hint = bind_hint(e.raw_os_error(), flags);
        Error::from_errno(
            format!("bind {} on {iface} queue {queue}", flag_names(flags)),
            e,
            XSK_PRIVILEGE,
            hint,
        )
    })
}

/// A new, unbound AF_XDP socket.
pub(super) fn create_socket() -> Result<OwnedFd> {
    sys::socket().map_err(|e| {
        Error::from_errno(
            "create AF_XDP socket",
            e,
            XSK_PRIVILEGE,
            "the kernel lacks AF_XDP (CONFIG_XDP_SOCKETS)",
        )
    })
}

fn flag_names(flags: u16) -> String {
    let names = [
        (XDP_SHARED_UMEM, "XDP_SHARED_UMEM"),
        (XDP_COPY, "XDP_COPY"),
        (XDP_ZEROCOPY, "XDP_ZEROCOPY"),
        (XDP_USE_NEED_WAKEUP, "XDP_USE_NEED_WAKEUP"),
        (XDP_USE_SG, "XDP_USE_SG"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| *n)
        .collect();
    set.join("|")
}

impl Socket {
    /// Binds a new socket with `umem` to queue `queue` of `iface` (in the calling thread's network
    /// namespace) with rx and tx rings of 2048 entries and need_wakeup. The first socket of a UMEM
    /// registers it; later ones share it (`XDP_SHARED_UMEM`) and inherit its mode, need_wakeup and
    /// multi-buffer setting. The first socket of the UMEM on a queue opens that queue's fill and
    /// completion rings ([`Socket::fill`], [`Socket::fill_with`], [`Socket::reclaim`]); later ones on
    /// that queue share them.
    ///
    /// # Errors
    ///
    /// [`Error`] naming the refused step and its errno: no such interface (`ENODEV`), no
    /// privilege for an AF_XDP socket (`EPERM`: CAP_NET_RAW), the queue already bound (`EBUSY`),
    /// zero-copy refused by the driver in [`Mode::ZeroCopy`] (`EOPNOTSUPP`; [`Mode::Auto`] binds
    /// in copy mode instead and says why in [`Socket::zerocopy_status`]), locked memory used up
    /// for the rings (`ENOMEM`).
    ///
    /// A reflector on queue 0 of `eth1` (root; frames go back out as they came, a real one swaps
    /// their addresses first):
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use zcnet::xdp::{AttachMode, FrameMatch, Mode, Socket, Umem, UmemConfig, XdpProgram};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut umem = Umem::new(UmemConfig::default())?;
    /// let mut socket = Socket::bind(&mut umem, "eth1", 0, Mode::Auto)?;
    /// let program = XdpProgram::redirect_to_xsk(1, FrameMatch::UdpPort(9000))?;
    /// program.xsk_map().expect("a redirect program has a map").insert(0, &socket)?;
    /// let _link = program.attach_to("eth1", AttachMode::Generic)?;
    /// socket.fill(&mut umem, u32::MAX)?;
    /// let mut frames = Vec::new();
    /// while socket.wait_rx(Some(Duration::from_secs(1)))? {
    ///     socket.receive(&mut umem, 64, &mut frames)?;
    ///     socket.transmit(&mut umem, &mut frames)?; // the received frames, in place
    ///     socket.wake_tx()?;
    ///     socket.reclaim(&mut umem, u32::MAX)?; // sent frames back to the free list
    ///     socket.fill(&mut umem, u32::MAX)?; // and lent again for receiving
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn bind(umem: &mut Umem, iface: &str, queue: u32, mode: Mode) -> Result<Socket> {
        Socket::bind_with(umem, iface, queue, mode, SocketConfig::default())
    }

    /// [`Socket::bind`] with explicit ring sizes and options. A failed bind closes the sockets it
    /// created and leaves `umem` as it was.
    ///
    /// # Errors
    ///
    /// As [`Socket::bind`], and ring sizes the kernel refuses (`EINVAL`: not a power of two).
    pub fn bind_with(
        umem: &mut Umem,
        iface: &str,
        queue: u32,
        mode: Mode,
        config: SocketConfig,
    ) -> Result<Socket> {
        let ifindex = interface_index(iface)?.get();
        let place = QueuePlace::here(ifindex, queue);
        let sharing = umem.sharing_for(place);
        let shares_umem = !matches!(sharing, Sharing::Register);
        let (queue_rings, opened) = match sharing {
            Sharing::Queue(open) => (open, false),
            Sharing::Share { with } => {
                let through = Through::Share(&with);
                let at = (iface, ifindex, queue, place);
                let opened =
                    Queue::open(umem, through, at, config.need_wakeup, config.multi_buffer);
                (Arc::new(opened?), true)
            }
            Sharing::Register => {
                let at = (iface, ifindex, queue, place);
                let through = Through::Register(mode);
                let opened =
                    Queue::open(umem, through, at, config.need_wakeup, config.multi_buffer);
                (Arc::new(opened?), true)
            }
        };
        let fd = create_socket()?;
        let name = socket_name(iface);
        let rings = [
            (RingKind::Rx, config.rx_size),
            (RingKind::Tx, config.tx_size),
        ];
        let offsets = size_rings(fd.as_fd(), &name, &rings)?;
        let (rx, tx) = map_rx_tx(fd.as_fd(), &name, &offsets, config)?;
        bind_on_queue(
            fd.as_fd(),
            iface,
            ifindex,
            queue,
            XDP_SHARED_UMEM,
            Some(queue_rings.fd()),
        )?;
        if opened {
            umem.opened(&queue_rings);
        }
        let fallback = match opened && !shares_umem {
            true => queue_rings.fallback().cloned(),
            false => None,
        };
        let umem = umem.id();
        let at = (iface, queue);
        Ok(Socket::assemble(
            ((rx, tx), fd),
            queue_rings,
            at,
            (fallback, shares_umem),
            umem,
            None,
        ))
    }

    /// The socket `fd` that another process (a [`Broker`](crate::xdp::Broker)) bound with `umem`'s
    /// memory to queue `queue` of `iface` (index `ifindex` there), with the rings `config` sizes, and the queue it opened
    /// there (`anchor`, bound as `inherited` says, copying for `fallback`): the rings mapped here.
    /// `lease`, the connection to that process, stays open exactly as long as the socket.
    pub(crate) fn adopt(
        umem: &mut Umem,
        (fd, anchor): (OwnedFd, OwnedFd),
        (iface, ifindex, queue): (&str, u32, u32),
        (inherited, fallback): (Inherited, Option<Fallback>),
        config: SocketConfig,
        lease: OwnedFd,
    ) -> Result<Socket> {
        let place = QueuePlace::here(ifindex, queue);
        let queue_rings = Queue::adopt(umem, anchor, (iface, queue, place), inherited, fallback)?;
        let queue_rings = Arc::new(queue_rings);
        let name = socket_name(iface);
        let offsets = sys::mmap_offsets(fd.as_fd())
            .map_err(|e| setup_error(&name, "read ring offsets", e))?;
        let (rx, tx) = map_rx_tx(fd.as_fd(), &name, &offsets, config)?;
        umem.opened(&queue_rings);
        let fallback = queue_rings.fallback().cloned();
        let (umem, at) = (umem.id(), (iface, queue));
        let lease = Some(lease);
        Ok(Socket::assemble(
            ((rx, tx), fd),
            queue_rings,
            at,
            (fallback, false),
            umem,
            lease,
        ))
    }

    /// The socket `fd` with its mapped rings, bound to `queue` of `iface` whose rings are
    /// `queue_rings` (whose UMEM settings it inherits), with `umem`'s id.
    fn assemble(
        ((rx, tx), fd): (RxTx, OwnedFd),
        queue_rings: Arc<Queue>,
        (iface, queue): (&str, u32),
        (fallback, shares_umem): (Option<Fallback>, bool),
        umem: u64,
        lease: Option<OwnedFd>,
    ) -> Socket {
        let inherited = queue_rings.inherited();
        Socket {
            rx,
            tx,
            fd,
            fallback,
            queue_rings,
            iface: iface.to_string(),
            queue,
            mode: inherited.mode,
            need_wakeup: inherited.need_wakeup,
            multi_buffer: inherited.multi_buffer,
            shares_umem,
            umem,
            _lease: lease,
        }
    }

    /// The descriptors of the socket and of its queue's anchor (which owns the fill and completion
    /// rings), for a [`Broker`](crate::xdp::Broker) to hand them to a worker.
    pub(crate) fn fds(&self) -> (BorrowedFd<'_>, BorrowedFd<'_>) {
        (self.fd.as_fd(), self.queue_rings.fd())
    }

    /// The data path the kernel gave this socket.
    pub fn mode(&self) -> BoundMode {
        self.mode
    }

    /// `Ok` in zero-copy mode (and for a socket sharing another's UMEM: its mode is that
    /// socket's), or why the socket copies: copy mode was asked for, or the zero-copy bind of
    /// [`Mode::Auto`] was refused (`bind XDP_ZEROCOPY: EOPNOTSUPP (…)`, with its errno). The same
    /// question as [`crate::tx::Sender::zerocopy_status`] and
    /// [`crate::rx::Receiver::zerocopy_status`].
    pub fn zerocopy_status(&self) -> std::result::Result<(), &Fallback> {
        self.fallback.as_ref().map_or(Ok(()), Err)
    }

    /// Whether the socket was bound with `XDP_USE_NEED_WAKEUP` (for a socket sharing a UMEM: whether
    /// the socket it shares through was).
    pub fn uses_need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    /// Whether the socket carries multi-buffer packets (`XDP_USE_SG`; for a socket sharing a UMEM:
    /// whether its first socket was bound so).
    pub fn uses_multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// The interface name.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The queue.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether this socket shares its UMEM with a socket bound before it (`XDP_SHARED_UMEM`).
    pub fn shares_umem(&self) -> bool {
        self.shares_umem
    }

    /// Takes up to `max` received frames from the rx ring, appending their tokens to `out`; returns
    /// how many descriptors were rejected (outside one frame of `umem`, or naming a frame the kernel
    /// was not lent on this queue: never a second token for one frame). With multi-buffer, a packet
    /// may span several frames in a row ([`Frame::continues`]; [`Socket::receive_packets`] groups
    /// them). Recycle the frames with [`Socket::fill_with`], send them with [`Socket::transmit`] or
    /// free them with [`Umem::release`].
    ///
    /// # Errors
    ///
    /// `umem` is not the one this socket was bound with, or the socket has no rx ring
    /// ([`SocketConfig::rx_size`] 0). The [`Socket::bind`] example receives.
    pub fn receive(&mut self, umem: &mut Umem, max: u32, out: &mut Vec<Frame>) -> Result<u32> {
        self.check_umem(umem)?;
        let rx = self.rx.as_mut().ok_or_else(|| no_ring("rx", &self.iface))?;
        Ok(umem.receive(rx, self.queue_rings.tag(), max, out))
    }

    /// Takes whole received packets from the rx ring, up to `max` frames (more when the first packet
    /// alone is longer), appending them to `out`; returns how many descriptors were rejected (a
    /// packet with a rejected descriptor is dropped, its other frames freed). The frames of a packet
    /// whose last descriptor has not arrived stay in the ring for the next call.
    pub fn receive_packets(
        &mut self,
        umem: &mut Umem,
        max: u32,
        out: &mut Vec<Packet>,
    ) -> Result<u32> {
        self.check_umem(umem)?;
        let rx = self.rx.as_mut().ok_or_else(|| no_ring("rx", &self.iface))?;
        Ok(umem.receive_packets(rx, self.queue_rings.tag(), max, out))
    }

    /// Lends frames from the front of `frames` to the kernel through the tx ring and removes them from
    /// `frames`; returns how many (those that do not fit stay). Only whole packets go: a frame that
    /// [continues](Frame::continues) goes with the rest of its packet or not at all (multi-buffer, see
    /// [`Packet::new`]). The frames come back to `umem`'s free list through the queue's completion
    /// ring ([`Socket::reclaim`]). Call [`Socket::wake_tx`] to have them sent.
    ///
    /// # Errors
    ///
    /// `umem` is not the one this socket was bound with, or the socket has no tx ring
    /// ([`SocketConfig::tx_size`] 0). The [`Socket::bind`] example transmits.
    pub fn transmit(&mut self, umem: &mut Umem, frames: &mut Vec<Frame>) -> Result<u32> {
        self.check_umem(umem)?;
        let tx = self.tx.as_mut().ok_or_else(|| no_ring("tx", &self.iface))?;
        Ok(umem.transmit(tx, self.queue_rings.tag(), frames))
    }

    /// Moves up to `max` free frames of `umem` onto this queue's fill ring (shared by every socket of
    /// the UMEM on the queue) for the kernel to receive into; returns how many.
    ///
    /// # Errors
    ///
    /// `umem` is not the one this socket was bound with.
    pub fn fill(&mut self, umem: &mut Umem, max: u32) -> Result<u32> {
        self.check_umem(umem)?;
        let tag = self.queue_rings.tag();
        Ok(umem.fill_via(&mut self.queue_rings.fill(), tag, max))
    }

    /// Lends frames from the front of `frames` to the kernel through this queue's fill ring (a
    /// forwarder recycling what it received) and removes them from `frames`; returns how many. Those
    /// that do not fit stay in `frames`.
    ///
    /// # Panics
    /// When a frame belongs to another UMEM.
    pub fn fill_with(&mut self, umem: &mut Umem, frames: &mut Vec<Frame>) -> Result<u32> {
        self.check_umem(umem)?;
        let tag = self.queue_rings.tag();
        Ok(umem.fill_with_via(&mut self.queue_rings.fill(), tag, frames))
    }

    /// Takes up to `max` frames the kernel finished sending on this queue (its completion ring, shared
    /// by every socket of the UMEM on the queue: it returns what any of them sent) back onto `umem`'s
    /// free list, and counts the completion entries that did not name a frame lent on this queue.
    ///
    /// # Errors
    ///
    /// `umem` is not the one this socket was bound with.
    pub fn reclaim(&mut self, umem: &mut Umem, max: u32) -> Result<Reclaimed> {
        self.check_umem(umem)?;
        let tag = self.queue_rings.tag();
        Ok(umem.reclaim_via(&mut self.queue_rings.completion(), tag, max))
    }

    /// Whether the queue's fill ring asks for a wakeup (`poll`/`recvfrom`) before the kernel will use
    /// it.
    pub fn fill_needs_wakeup(&self) -> bool {
        self.queue_rings.fill().needs_wakeup()
    }

    fn check_umem(&self, umem: &Umem) -> Result<()> {
        if umem.id() == self.umem {
            Ok(())
        } else {
            Err(Error::usage(format!(
                "the AF_XDP socket on {} queue {} was bound with another UMEM",
                self.iface, self.queue
            )))
        }
    }

    /// The socket's descriptor, for the XSKMAP. Not public: a duplicate of it would keep the kernel
    /// socket bound, writing frames, after its owner closed it.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Makes the kernel process the tx ring when it needs a syscall for that: always without
    /// need_wakeup, else when the tx ring carries `XDP_RING_NEED_WAKEUP` (in copy mode the `sendto` is
    /// what transmits). Returns how many frames the kernel took from the ring and dropped unsent
    /// (0 or 1): in copy mode `EBUSY` means the device refused the last frame it took
    /// (`NET_XMIT_DROP`: for example a link without carrier); the frame's address still comes back
    /// on the completion ring, as a sent one's does. `EAGAIN` and `ENOBUFS` are not errors: the
    /// frames the kernel did not take stay queued for the next call.
    pub fn wake_tx(&self) -> Result<u32> {
        if !self.tx_needs_wakeup() {
            return Ok(0);
        }
        match sys::kick_tx(self.fd.as_fd()) {
            Ok(()) => Ok(0),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(1),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => Ok(0),
            Err(e) => Err(Error::from_errno(
                format!("wake tx on {}", self.iface),
                e,
                XSK_PRIVILEGE,
                "",
            )),
        }
    }

    /// Whether the kernel takes tx descriptors only when woken: always without need_wakeup, else
    /// while the tx ring carries `XDP_RING_NEED_WAKEUP` (always so in copy mode).
    pub(crate) fn tx_needs_wakeup(&self) -> bool {
        !self.need_wakeup || self.tx.as_ref().is_some_and(Producer::needs_wakeup)
    }

    /// Tx descriptors published and not yet taken by the kernel.
    pub(crate) fn tx_untaken(&mut self) -> u32 {
        self.tx.as_mut().map_or(0, Producer::outstanding)
    }

    /// [`Socket::wake_tx`] again while the kernel takes descriptors and some are left: in copy mode
    /// one `sendto` transmits a bounded batch (`__xsk_generic_xmit` stops after 32 frames with
    /// `EAGAIN`) and leaves the rest in the ring until the next. Stops when the ring is empty or a
    /// wakeup took nothing (the device or the socket's send buffer is full; the kernel wakes the
    /// socket's writers as it frees them). Returns how many frames the kernel dropped unsent (see
    /// [`Socket::wake_tx`]).
    pub(crate) fn wake_tx_until_taken(&mut self) -> Result<u32> {
        let mut dropped = 0;
        let mut left = self.tx_untaken();
        while left > 0 && self.tx_needs_wakeup() {
            dropped += self.wake_tx()?;
            let now = self.tx_untaken();
            if now >= left {
                break;
            }
            left = now;
        }
        Ok(dropped)
    }

    /// Waits up to `timeout` (`None`: no limit; `Some(Duration::ZERO)`: only looks) for received
    /// frames; returns whether some are ready. The `poll` also wakes the driver when the fill ring
    /// asked for it.
    ///
    /// # Errors
    ///
    /// The `poll` fails (`EINTR` when a signal interrupts it). The [`Socket::bind`] example waits.
    pub fn wait_rx(&self, timeout: Option<Duration>) -> Result<bool> {
        let ms = crate::sys::socket::poll_timeout(timeout);
        crate::sys::socket::poll(self.fd.as_fd(), libc::POLLIN, ms)
            .map(|revents| revents & libc::POLLIN != 0)
            .map_err(|e| Error::new(format!("poll AF_XDP socket on {}", self.iface), e, ""))
    }

    /// Enables preferred busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` and
    /// `SO_BUSY_POLL_BUDGET` from `busy_poll`, kernel 5.11+): `poll` and `sendto` then run the
    /// driver's NAPI loop in this thread instead of waiting for interrupts. A budget above 8 needs
    /// CAP_NET_ADMIN.
    ///
    /// # Errors
    ///
    /// An option refused: `EPERM` for a budget above 8 without CAP_NET_ADMIN, `ENOPROTOOPT` on a
    /// kernel before 5.11.
    pub fn set_busy_poll(&self, busy_poll: BusyPoll) -> Result<()> {
        let usecs = i32::try_from(busy_poll.timeout.as_micros()).unwrap_or(i32::MAX);
        for (name, label, value) in [
            (libc::SO_PREFER_BUSY_POLL, "SO_PREFER_BUSY_POLL", 1),
            (libc::SO_BUSY_POLL, "SO_BUSY_POLL", usecs),
            (
                libc::SO_BUSY_POLL_BUDGET,
                "SO_BUSY_POLL_BUDGET",
                i32::from(busy_poll.budget),
            ),
        ] {
            set_int_option(self.fd.as_fd(), libc::SOL_SOCKET, name, value).map_err(|e| {
                Error::from_errno(
                    format!("set {label} on {}", self.iface),
                    e,
                    "CAP_NET_ADMIN",
                    "the kernel lacks preferred busy polling (5.11+)",
                )
            })?;
        }
        Ok(())
    }

    /// The kernel's counters for this socket (`XDP_STATISTICS`).
    ///
    /// # Errors
    ///
    /// `getsockopt XDP_STATISTICS` fails.
    pub fn statistics(&self) -> Result<Statistics> {
        sys::statistics(self.fd.as_fd())
            .map(Statistics::from)
            .map_err(|e| Error::new("read XDP_STATISTICS", e, ""))
    }
}

/// Whether an AF_XDP socket binds in zero-copy mode on queue `queue` of `iface`: `Ok(Ok(()))` when
/// it does, `Ok(Err(fallback))` with the kernel's refusal (the same [`Fallback`] a
/// [`Mode::Auto`] bind reports in [`Socket::zerocopy_status`]: `EOPNOTSUPP` when the driver lacks
/// zero-copy), `Err` when the question cannot be asked.
///
/// The socket is closed right away and no XDP program is attached, so no traffic is diverted; on
/// drivers with zero-copy support the bind does reconfigure that queue for a moment.
///
/// # Errors
///
/// [`Error`] when no AF_XDP socket can be made (`EPERM`: CAP_NET_RAW is needed) or `iface` does
/// not exist (`ENODEV`), or the UMEM cannot be allocated.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// match zcnet::xdp::probe_zero_copy("eth1", 0)? {
///     Ok(()) => println!("eth1 queue 0 binds zero-copy"),
///     Err(why) => println!("copy mode only: {why}"),
/// }
/// # Ok(())
/// # }
/// ```
pub fn probe_zero_copy(iface: &str, queue: u32) -> Result<std::result::Result<(), Fallback>> {
    let mut umem = Umem::new(UmemConfig {
        frame_size: FrameSize::Page,
        frame_count: 64,
        fill_size: 64,
        completion_size: 64,
        headroom: 0,
        huge_pages: false,
    })?;
    let config = SocketConfig {
        rx_size: 64,
        tx_size: 0,
        ..SocketConfig::default()
    };
    match Socket::bind_with(&mut umem, iface, queue, Mode::ZeroCopy, config) {
        Ok(_) => Ok(Ok(())),
        Err(e) => match e.raw_os_error() {
            Some(errno) if errno != libc::EPERM && errno != libc::ENODEV => Ok(Err(
                Fallback::refused("bind XDP_ZEROCOPY", errno, copy_remedy(errno, 0)),
            )),
            _ => Err(e),
        },
    }
}
