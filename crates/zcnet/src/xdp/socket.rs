//! AF_XDP sockets: binding a UMEM to one queue of an interface in zero-copy or copy mode, with the
//! rx and tx rings, wakeups and statistics.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::program::interface_index;
use super::ring::{Consumer, Desc, Producer};
use super::stats::Statistics;
use super::umem::{Frame, FrameSize, Umem, UmemConfig, XSK_PRIVILEGE};
use crate::fallback::Fallback;
use crate::sys::socket::set_int_option;
use crate::sys::xdp::{
    self as sys, RingKind, RingMmap, XDP_COPY, XDP_SHARED_UMEM, XDP_USE_NEED_WAKEUP, XDP_ZEROCOPY,
};

/// Which data path to ask the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Try zero-copy; when the driver refuses, bind in copy mode and record why.
    Auto,
    /// Copy mode (`XDP_COPY`): the kernel copies each frame between its buffers and the UMEM. Works on
    /// every interface with XDP.
    Copy,
    /// Zero-copy (`XDP_ZEROCOPY`): the driver receives into and sends from the UMEM directly. Fails with
    /// `EOPNOTSUPP` when the driver lacks it (veth does).
    ZeroCopy,
}

/// The data path a socket actually got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundMode {
    /// The kernel copies frames.
    Copy,
    /// The driver uses the UMEM directly.
    ZeroCopy,
}

impl BoundMode {
    /// `"copy"` or `"zerocopy"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BoundMode::Copy => "copy",
            BoundMode::ZeroCopy => "zerocopy",
        }
    }
}

impl fmt::Display for BoundMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Rings and options of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketConfig {
    /// Rx ring entries (power of two; 0 = no rx ring).
    pub rx_size: u32,
    /// Tx ring entries (power of two; 0 = no tx ring).
    pub tx_size: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP`: the kernel flags the rings when it needs a syscall to make
    /// progress, so busy loops can skip syscalls otherwise.
    pub need_wakeup: bool,
}

impl Default for SocketConfig {
    fn default() -> SocketConfig {
        SocketConfig {
            rx_size: 2048,
            tx_size: 2048,
            need_wakeup: true,
        }
    }
}

/// An AF_XDP socket bound to one queue of one interface.
///
/// Frames reach its rx ring only when an XDP program redirects them to it: attach
/// [`crate::xdp::XdpProgram::redirect_to_xsk`] and insert the socket into its map at the queue index.
#[derive(Debug)]
pub struct Socket {
    fd: Arc<OwnedFd>,
    rx: Option<Consumer<Desc>>,
    tx: Option<Producer<Desc>>,
    iface: String,
    queue: u32,
    mode: BoundMode,
    fallback: Option<Fallback>,
    need_wakeup: bool,
    shares_umem: bool,
    /// The UMEM whose frames this socket's rings carry.
    umem: u64,
    /// Fill and completion rings of a socket sharing its UMEM on another queue.
    fill: Option<Producer<u64>>,
    completion: Option<Consumer<u64>>,
}

fn bind_hint(errno: Option<i32>, flags: u16) -> &'static str {
    match errno {
        Some(libc::EOPNOTSUPP) if flags & XDP_ZEROCOPY != 0 => {
            "the driver has no AF_XDP zero-copy: bound in copy mode (Mode::Copy or Mode::Auto)"
        }
        Some(libc::EBUSY) => {
            "the queue already has an AF_XDP socket (or a closed one's rings are still mapped)"
        }
        Some(libc::EINVAL) => {
            "queue id beyond the interface's queues, or a shared UMEM bound on another queue"
        }
        Some(libc::ENETDOWN) => "the interface is down",
        _ => "",
    }
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

fn flag_names(flags: u16) -> String {
    let names = [
        (XDP_SHARED_UMEM, "XDP_SHARED_UMEM"),
        (XDP_COPY, "XDP_COPY"),
        (XDP_ZEROCOPY, "XDP_ZEROCOPY"),
        (XDP_USE_NEED_WAKEUP, "XDP_USE_NEED_WAKEUP"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| *n)
        .collect();
    set.join("|")
}

impl Socket {
    /// Binds `umem` to queue `queue` of `iface` (in the calling thread's network namespace) with rx and
    /// tx rings of 2048 entries and need_wakeup. The first socket of a UMEM uses the socket the UMEM
    /// was registered on; later ones share it (`XDP_SHARED_UMEM`) and inherit its mode and need_wakeup.
    /// On the same interface and queue they share its fill and completion rings too; on another queue
    /// (or interface) each gets fill and completion rings of its own, as the kernel requires — use
    /// [`Socket::fill`], [`Socket::fill_with`] and [`Socket::reclaim`] for those.
    pub fn bind(umem: &mut Umem, iface: &str, queue: u32, mode: Mode) -> Result<Socket> {
        Socket::bind_with(umem, iface, queue, mode, SocketConfig::default())
    }

    /// [`Socket::bind`] with explicit ring sizes and options.
    pub fn bind_with(
        umem: &mut Umem,
        iface: &str,
        queue: u32,
        mode: Mode,
        config: SocketConfig,
    ) -> Result<Socket> {
        let ifindex = interface_index(iface)?;
        let shares_umem = umem.owner.is_some();
        // On another queue (or interface) than the UMEM's first socket, the kernel wants a fill and a
        // completion ring per socket.
        let own_rings = umem.owner.is_some_and(|o| o != (ifindex, queue));
        let fd = if shares_umem {
            Arc::new(
                sys::socket()
                    .map_err(|e| Error::from_errno("create AF_XDP socket", e, XSK_PRIVILEGE, ""))?,
            )
        } else {
            umem.shared_fd()
        };
        let setup = |what: &str, e| {
            Error::from_errno(
                format!("{what} of AF_XDP socket for {iface}"),
                e,
                XSK_PRIVILEGE,
                "",
            )
        };
        let (fill_size, completion_size) = match own_rings {
            true => umem.ring_sizes(),
            false => (0, 0),
        };
        // The UMEM's own socket keeps the rx and tx rings an earlier failed bind sized.
        let sized = if shares_umem { None } else { umem.sized_rings };
        if let Some((rx, tx)) = sized
            && (rx, tx) != (config.rx_size, config.tx_size)
        {
            return Err(Error::usage(format!(
                "bind on {iface}: an earlier failed bind of this UMEM sized its rings rx {rx}, tx \
                 {tx}; bind with those sizes or use a new Umem"
            )));
        }
        for (kind, size) in [
            (RingKind::Rx, config.rx_size),
            (RingKind::Tx, config.tx_size),
            (RingKind::Fill, fill_size),
            (RingKind::Completion, completion_size),
        ] {
            let already = sized.is_some() && matches!(kind, RingKind::Rx | RingKind::Tx);
            if size > 0 && !already {
                sys::set_ring_size(fd.as_fd(), kind, size)
                    .map_err(|e| setup(&format!("set {kind:?} ring size {size}"), e))?;
            }
        }
        if !shares_umem {
            umem.sized_rings = Some((config.rx_size, config.tx_size));
        }
        let offsets = sys::mmap_offsets(fd.as_fd()).map_err(|e| setup("read ring offsets", e))?;
        let rx = match config.rx_size {
            0 => None,
            n => Some(Consumer::new(Arc::new(
                RingMmap::map(fd.as_fd(), RingKind::Rx, &offsets, n)
                    .map_err(|e| setup("map rx ring", e))?,
            ))),
        };
        let tx = match config.tx_size {
            0 => None,
            n => Some(Producer::new(Arc::new(
                RingMmap::map(fd.as_fd(), RingKind::Tx, &offsets, n)
                    .map_err(|e| setup("map tx ring", e))?,
            ))),
        };
        let fill = match fill_size {
            0 => None,
            n => Some(Producer::new(Arc::new(
                RingMmap::map(fd.as_fd(), RingKind::Fill, &offsets, n)
                    .map_err(|e| setup("map fill ring", e))?,
            ))),
        };
        let completion = match completion_size {
            0 => None,
            n => Some(Consumer::new(Arc::new(
                RingMmap::map(fd.as_fd(), RingKind::Completion, &offsets, n)
                    .map_err(|e| setup("map completion ring", e))?,
            ))),
        };
        let wake = if config.need_wakeup {
            XDP_USE_NEED_WAKEUP
        } else {
            0
        };
        let bind = |flags: u16| {
            let shared = shares_umem.then(|| umem.as_fd());
            bind_retrying_busy(|| sys::bind(fd.as_fd(), ifindex, queue, flags, shared)).map_err(
                |e| {
                    let hint = bind_hint(e.raw_os_error(), flags);
                    Error::from_errno(
                        format!("bind {} on {iface} queue {queue}", flag_names(flags)),
                        e,
                        XSK_PRIVILEGE,
                        hint,
                    )
                },
            )
        };
        let (bound, fallback) = if shares_umem {
            bind(XDP_SHARED_UMEM)?;
            (umem.bound_mode.unwrap_or(BoundMode::Copy), None)
        } else {
            match mode {
                Mode::ZeroCopy => (
                    bind(XDP_ZEROCOPY | wake).map(|_| BoundMode::ZeroCopy)?,
                    None,
                ),
                Mode::Copy => (
                    bind(XDP_COPY | wake).map(|_| BoundMode::Copy)?,
                    Some(Fallback::requested(
                        "bind with Mode::Auto or Mode::ZeroCopy for zero-copy",
                    )),
                ),
                Mode::Auto => match bind(XDP_ZEROCOPY | wake) {
                    Ok(()) => (BoundMode::ZeroCopy, None),
                    Err(zc) => {
                        bind(XDP_COPY | wake)?;
                        let errno = zc.errno().unwrap_or(0);
                        let remedy = match bind_hint(Some(errno), XDP_ZEROCOPY) {
                            "" => "bound in copy mode",
                            hint => hint,
                        };
                        let fallback = Fallback::refused("bind XDP_ZEROCOPY", errno, remedy);
                        (BoundMode::Copy, Some(fallback))
                    }
                },
            }
        };
        if umem.owner.is_none() {
            umem.owner = Some((ifindex, queue));
            umem.bound_mode = Some(bound);
        }
        Ok(Socket {
            fd,
            rx,
            tx,
            iface: iface.to_string(),
            queue,
            mode: bound,
            fallback,
            need_wakeup: config.need_wakeup,
            shares_umem,
            umem: umem.id(),
            fill,
            completion,
        })
    }

    /// The data path the kernel gave this socket.
    pub fn mode(&self) -> BoundMode {
        self.mode
    }

    /// Why the socket copies: [`Mode::Copy`] was asked for, or the zero-copy bind of [`Mode::Auto`] was
    /// refused (`bind XDP_ZEROCOPY: EOPNOTSUPP (…)`, with its errno). `None` in zero-copy mode, and
    /// for a socket sharing another's UMEM (its mode is that socket's).
    pub fn fallback(&self) -> Option<&Fallback> {
        self.fallback.as_ref()
    }

    /// Whether the socket was bound with `XDP_USE_NEED_WAKEUP`.
    pub fn uses_need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    /// The interface name.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The queue.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether this socket shares another socket's UMEM (`XDP_SHARED_UMEM`).
    pub fn shares_umem(&self) -> bool {
        self.shares_umem
    }

    /// Takes up to `max` received frames from the rx ring, appending their tokens to `out`; returns
    /// how many descriptors were rejected (outside one frame of `umem`, or naming a frame the kernel
    /// was not lent: never a second token for one frame). Recycle the frames with
    /// [`Umem::fill_with`], send them with [`Socket::transmit`] or free them with [`Umem::release`].
    pub fn receive(&mut self, umem: &mut Umem, max: u32, out: &mut Vec<Frame>) -> Result<u32> {
        self.check_umem(umem)?;
        let rx = self.rx.as_mut().ok_or_else(|| no_ring("rx", &self.iface))?;
        Ok(umem.receive(rx, max, out))
    }

    /// Lends frames from the front of `frames` to the kernel through the tx ring and removes them from
    /// `frames`; returns how many (those that do not fit stay). They come back to `umem`'s free list
    /// through the completion ring ([`Umem::reclaim`]). Call [`Socket::wake_tx`] to have them sent.
    pub fn transmit(&mut self, umem: &mut Umem, frames: &mut Vec<Frame>) -> Result<u32> {
        self.check_umem(umem)?;
        let tx = self.tx.as_mut().ok_or_else(|| no_ring("tx", &self.iface))?;
        Ok(umem.transmit(tx, frames))
    }

    /// Moves up to `max` free frames of `umem` onto the fill ring that serves this socket's queue:
    /// its own when it shares the UMEM on another queue than the UMEM's first socket, else the UMEM's
    /// ([`Umem::fill`]). Returns how many.
    pub fn fill(&mut self, umem: &mut Umem, max: u32) -> Result<u32> {
        self.check_umem(umem)?;
        Ok(umem.fill_via(self.fill.as_mut(), max))
    }

    /// [`Umem::fill_with`] through the fill ring that serves this socket's queue (see
    /// [`Socket::fill`]).
    pub fn fill_with(&mut self, umem: &mut Umem, frames: &mut Vec<Frame>) -> Result<u32> {
        self.check_umem(umem)?;
        Ok(umem.fill_with_via(self.fill.as_mut(), frames))
    }

    /// [`Umem::reclaim`] from the completion ring that serves this socket's queue (see
    /// [`Socket::fill`]): its own frames back onto the free list once the kernel sent them.
    pub fn reclaim(&mut self, umem: &mut Umem, max: u32) -> Result<(u32, u32)> {
        self.check_umem(umem)?;
        Ok(umem.reclaim_via(self.completion.as_mut(), max))
    }

    /// Whether this socket has fill and completion rings of its own (it shares its UMEM on another
    /// queue or interface than the UMEM's first socket).
    pub fn has_own_fill_ring(&self) -> bool {
        self.fill.is_some()
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

    /// Makes the kernel process the tx ring when it needs a syscall for that: always without
    /// need_wakeup, else when the tx ring carries `XDP_RING_NEED_WAKEUP` (in copy mode the `sendto` is
    /// what transmits). Transient refusals (`EAGAIN`, `EBUSY`, `ENOBUFS`) are not errors: the frames
    /// stay queued for the next call.
    pub fn wake_tx(&self) -> Result<()> {
        let needed = !self.need_wakeup || self.tx.as_ref().is_some_and(Producer::needs_wakeup);
        if !needed {
            return Ok(());
        }
        match sys::kick_tx(self.fd.as_fd()) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)
                ) =>
            {
                Ok(())
            }
            other => other.map_err(|e| {
                Error::from_errno(format!("wake tx on {}", self.iface), e, XSK_PRIVILEGE, "")
            }),
        }
    }

    /// Waits up to `timeout_ms` (-1 = no limit) for received frames; returns whether some are ready.
    /// The `poll` also wakes the driver when the fill ring asked for it.
    pub fn wait_rx(&self, timeout_ms: i32) -> Result<bool> {
        crate::sys::socket::poll(self.fd.as_fd(), libc::POLLIN, timeout_ms)
            .map(|revents| revents & libc::POLLIN != 0)
            .map_err(|e| Error::new(format!("poll AF_XDP socket on {}", self.iface), e, ""))
    }

    /// Enables preferred busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` = `usecs`,
    /// `SO_BUSY_POLL_BUDGET` = `budget`, kernel 5.11+): `poll` and `sendto` then run the driver's
    /// NAPI loop in this thread instead of waiting for interrupts. `SO_BUSY_POLL_BUDGET` above 8 needs
    /// CAP_NET_ADMIN.
    pub fn set_busy_poll(&self, usecs: i32, budget: i32) -> Result<()> {
        for (name, label, value) in [
            (libc::SO_PREFER_BUSY_POLL, "SO_PREFER_BUSY_POLL", 1),
            (libc::SO_BUSY_POLL, "SO_BUSY_POLL", usecs),
            (libc::SO_BUSY_POLL_BUDGET, "SO_BUSY_POLL_BUDGET", budget),
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
    pub fn statistics(&self) -> Result<Statistics> {
        sys::statistics(self.fd.as_fd())
            .map(Statistics::from)
            .map_err(|e| Error::new("read XDP_STATISTICS", e, ""))
    }
}

impl AsFd for Socket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether an AF_XDP socket binds in zero-copy mode on queue `queue` of `iface`: `Ok(None)` when it
/// does, `Ok(Some(errno))` with the kernel's refusal (`EOPNOTSUPP`: the driver lacks zero-copy), `Err`
/// when the question cannot be asked (no privilege, no such interface).
///
/// The socket is closed right away and no XDP program is attached, so no traffic is diverted; on
/// drivers with zero-copy support the bind does reconfigure that queue for a moment.
pub fn probe_zero_copy(iface: &str, queue: u32) -> Result<Option<i32>> {
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
        need_wakeup: true,
    };
    match Socket::bind_with(&mut umem, iface, queue, Mode::ZeroCopy, config) {
        Ok(_) => Ok(None),
        Err(e)
            if e.errno()
                .is_some_and(|n| n != libc::EPERM && n != libc::ENODEV) =>
        {
            Ok(e.errno())
        }
        Err(e) => Err(e),
    }
}
