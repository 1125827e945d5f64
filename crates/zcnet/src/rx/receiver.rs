//! The receiver: one connected TCP stream, a mapped window, a copy buffer, and the order in which the
//! kernel's answers become chunks.

use std::io::{self, BufRead, Read};
use std::mem;
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};

#[cfg(feature = "io-uring")]
use super::AutoChoice;
#[cfg(feature = "io-uring")]
use super::ZcrxConfig;
use super::auto::{AutoConfig, AutoProbe, AutoReason};
#[cfg(feature = "io-uring")]
use super::zcrx_path::{ZStep, ZcrxPath};
use super::{Chunk, ChunkKind, RxError, RxOp, RxStats};
use crate::Fallback;
use crate::cost::CpuStamp;
use crate::sys::socket::{self, set_int_option};
use crate::sys::tcp_zc::{
    self, SocketMapping, TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT, ZerocopyOutcome,
};

/// Whether a [`Receiver`] maps received pages, copies them, or measures which costs less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxMode {
    /// Map pages with `TCP_ZEROCOPY_RECEIVE`, copying only what cannot be mapped.
    ZeroCopy,
    /// Plain `recv` into the copy buffer (the baseline).
    Copy,
    /// Map or copy, whichever costs the receiving thread less CPU time per byte, measured on the
    /// stream ([`RxConfig::auto`], [`super::AutoChoice`]); copy where mapping cannot work. Mapping is
    /// not always cheaper: where page tables are virtualised (a VM) mapping and zapping pages can cost
    /// more than copying them.
    Auto,
}

impl RxMode {
    /// The mode's name as the CLI and JSON output spell it.
    pub fn name(self) -> &'static str {
        match self {
            RxMode::Copy => "copy",
            RxMode::ZeroCopy => "zerocopy",
            RxMode::Auto => "auto",
        }
    }
}

/// How a [`Receiver`] takes bytes from the kernel: the socket's own receive calls (mapped pages or
/// `recv`, as [`RxMode`] says), or io_uring zero-copy receive into a registered area. Every path
/// hands out the same [`Chunk`]s and counts into the same [`RxStats`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RxPath {
    /// `TCP_ZEROCOPY_RECEIVE` and `recv` on the socket (the default).
    #[default]
    Socket,
    /// io_uring zero-copy receive (zcrx, feature `io-uring`): a multishot `IORING_OP_RECV_ZC` whose
    /// completions hand out buffers of a registered area ([`ChunkKind::Zcrx`]), bound to a NIC
    /// queue (Linux 6.15, a NIC with header split) or to no device (Linux 7.1, every byte copied).
    /// [`RxMode`] only decides what [`RxMode::Auto`] reports ([`AutoReason::Zcrx`]). A kernel or
    /// device that refuses it fails [`Receiver::new`] with [`RxError::zcrx_refusal`] saying why.
    /// The kernel ties the ring to the thread that set it up (`IORING_SETUP_SINGLE_ISSUER`): the
    /// receiver must receive on that thread (another gets `EEXIST`); on tokio, drive its
    /// `AsyncReceiver` from a current-thread runtime or a `LocalSet`.
    #[cfg(feature = "io-uring")]
    Zcrx(ZcrxConfig),
}

/// What happens to mapped pages when their [`Chunk`] is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Zap them at once (`madvise(MADV_DONTNEED)`), returning their memory to the socket layer; the next
    /// receive then tells the kernel the window is clean (`TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT`).
    Zap,
    /// Leave them mapped; the next receive zaps and replaces them (one syscall fewer per chunk, but the
    /// pages stay charged to the socket until then).
    Lazy,
}

/// How a [`Receiver`] is set up.
///
/// Start from [`Default`] or [`RxConfig::bulk`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RxConfig {
    /// Zero-copy, plain copies, or measured (default [`RxMode::Auto`]).
    pub mode: RxMode,
    /// The measurement of [`RxMode::Auto`].
    pub auto: AutoConfig,
    /// Size of the mapped window in bytes, rounded up to whole pages: the most one call can map.
    pub window: usize,
    /// Size of the copy buffer that `recv` reads into, in bytes.
    pub copy_buffer: usize,
    /// Let the kernel copy unmappable bytes into the copy buffer during `TCP_ZEROCOPY_RECEIVE`
    /// (copybuf, Linux 5.11+), up to one page less one byte per call, instead of a separate `recv`.
    pub copybuf: bool,
    /// What dropping a mapped chunk does.
    pub release: Release,
    /// `SO_RCVLOWAT` to set: a blocking receive then waits until this many bytes are queued (or the
    /// stream ends), so each wake-up maps a whole window instead of a few segments (on loopback this
    /// halves the CPU per MB). Only for bulk streams: a peer that sends less and then waits for an
    /// answer would stall, so the default is `None` ([`RxConfig::bulk`] sets one window).
    pub low_water: Option<usize>,
    /// Give up zero-copy and use plain `recv` once this many bytes arrived without a single page mapped
    /// (`None`: never give up). A sender whose pages cannot map costs an extra call per read otherwise.
    pub give_up_after: Option<u64>,
    /// How bytes are taken from the kernel (default [`RxPath::Socket`]).
    pub path: RxPath,
}

impl Default for RxConfig {
    /// Auto with a 512 KiB window (tcp_mmap's), no low-water mark (a receive returns what is
    /// queued, so a request/response exchange of small messages never waits for bytes that will not
    /// come), a 256 KiB copy buffer, copybuf off (as in tcp_mmap: measured on loopback with one page
    /// per segment, copybuf copied ~0.1% of a stream the next call would have mapped; unaligned bytes
    /// are read with `recv` instead), pages zapped on release, and a fallback to `recv` after 4 MiB
    /// with nothing mapped. [`RxMode::Auto`] measures in windows of 4 MiB ([`AutoConfig::default`]).
    fn default() -> RxConfig {
        RxConfig {
            mode: RxMode::Auto,
            auto: AutoConfig::default(),
            window: 512 << 10,
            copy_buffer: 256 << 10,
            copybuf: false,
            release: Release::Zap,
            low_water: None,
            give_up_after: Some(4 << 20),
            path: RxPath::Socket,
        }
    }
}

impl RxConfig {
    /// The default with tcp_mmap's low-water mark of one window (512 KiB), for a stream known to be
    /// bulk (the sender keeps sending until it ends): the kernel then wakes the receiver once per
    /// window. Never for a request/response protocol, whose receiver would wait for 512 KiB that
    /// never come.
    pub fn bulk() -> RxConfig {
        let config = RxConfig::default();
        RxConfig {
            low_water: Some(config.window),
            ..config
        }
    }

    /// This configuration with `path`.
    pub fn with_path(self, path: RxPath) -> RxConfig {
        RxConfig { path, ..self }
    }
}

#[cfg(feature = "io-uring")]
/// What [`RxMode::Auto`] reports on the zcrx path: copying when the kernel says it copied.
fn zcrx_choice(stats: &RxStats) -> AutoChoice {
    AutoChoice {
        mode: if stats.zcrx_copied_bytes > 0 {
            RxMode::Copy
        } else {
            RxMode::ZeroCopy
        },
        reason: AutoReason::Zcrx {
            copied_bytes: stats.zcrx_copied_bytes,
            bytes: stats.zcrx_bytes,
        },
    }
}

/// What to do when zero-copy receive is refused.
const REFUSED_REMEDY: &str =
    "this kernel or socket has no TCP zero-copy receive: bytes are read with recv";

/// Why the kernel's copy buffer is not used: it refused to write it with `errno`.
fn copybuf_refused(errno: i32) -> Fallback {
    Fallback::refused(
        "getsockopt TCP_ZEROCOPY_RECEIVE with copybuf",
        errno,
        "unaligned bytes are read with a separate recv",
    )
}

/// Why a receiver gave up after `bytes` arrived and none could be mapped.
fn nothing_mapped(bytes: u64) -> Fallback {
    Fallback::observed(
        format!("none of the first {bytes} bytes could be mapped"),
        "the sender's segments do not carry whole pages: use a MSG_ZEROCOPY sender with an MSS of \
         one page; bytes are read with recv",
    )
}

/// A TCP zero-copy receiver over one connected stream (IPv4 or IPv6, blocking or not).
///
/// [`Receiver::recv`] returns the stream as [`Chunk`]s, in order, each byte exactly once, ending with
/// `Ok(None)` at end of stream. On a non-blocking socket an empty queue is an error of kind
/// `WouldBlock`; a reset is `ConnectionReset`, after the bytes that arrived before it. Whether the
/// socket is non-blocking is read from the descriptor when the receiver would wait, so it may be
/// switched through [`Receiver::get_ref`] at any time.
///
/// It is also a [`BufRead`]: `fill_buf` lends the next chunk in place and `consume` advances
/// through it, so a framed protocol parses headers and takes payloads in parts without copying
/// (`Read` copies, and says so).
///
/// Urgent data (`MSG_OOB`) is delivered in line, in stream order, on every path: the receiver sets
/// `SO_OOBINLINE`, since pages mapped by `TCP_ZEROCOPY_RECEIVE` hold the urgent byte where it was sent
/// while a plain `recv` would otherwise skip it.
///
/// # The stream: lent, never handed over mutably
///
/// [`Receiver::get_ref`] lends the stream (to write answers, shut it down, switch it to
/// non-blocking); [`Receiver::into_inner`] gives it back once nothing received is left unread.
/// There is deliberately no `get_mut`: a `&mut TcpStream` can replace the stream, while the
/// pages mapped for it, the copybuf bytes and the bytes the kernel said to skip belong to the one
/// it wraps — the next receive would map one connection and `recv` another, losing bytes of both.
/// (Reading through `get_ref()` is possible, as `&TcpStream` is `Read`, and takes bytes out of
/// the stream this receiver hands out: read through the receiver, which is itself `Read`.)
#[derive(Debug)]
pub struct Receiver {
    // Declared before `stream`: the window is unmapped before the socket is closed.
    window: Option<SocketMapping>,
    /// The io_uring zero-copy receive path, when [`RxPath::Zcrx`] chose it.
    #[cfg(feature = "io-uring")]
    zcrx: Option<ZcrxPath>,
    stream: TcpStream,
    config: RxConfig,
    buf: Vec<u8>,
    copybuf_len: usize,
    /// Bytes the kernel put into the copy buffer that are not handed out yet.
    pending: Range<usize>,
    /// Bytes the kernel said must be read with `recv` before the next mappable page.
    skip: usize,
    offset: u64,
    eof: bool,
    window_clean: bool,
    /// The last receive left less than the low-water mark queued: wait for the socket to be readable
    /// (which honours `SO_RCVLOWAT`) before mapping again, so the next call maps a whole window.
    wait_first: bool,
    socket_error: Option<i32>,
    /// The error that ended the connection (a reset, a timeout), returned again by every later
    /// receive: the kernel reports it once, and a stream cut short must never read as complete.
    ended_by: Option<(RxOp, i32)>,
    fallback: Option<Fallback>,
    /// The rest of a chunk [`BufRead::fill_buf`] lent and [`BufRead::consume`] has not consumed
    /// yet: handed out before anything else, its mapped pages held until it is consumed.
    unconsumed: Option<(ChunkKind, Range<usize>)>,
    /// Why unaligned bytes are read with a separate `recv` rather than in the mapping call's copy
    /// buffer: not asked for, or refused by the kernel.
    copybuf_fallback: Option<Fallback>,
    /// The kernel refused the copybuf and flags fields (before 5.11) or could not write the copy
    /// buffer: later calls leave them zero.
    extensions_refused: bool,
    /// [`RxMode::Auto`]'s measurement.
    auto: Option<AutoProbe>,
    stats: RxStats,
}

enum Step {
    Chunk(ChunkKind, Range<usize>),
    Again,
    End,
}

impl AsFd for Receiver {
    /// The socket's descriptor, for an event loop to poll for `POLLIN` before [`Receiver::recv`].
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl Receiver {
    /// Sets up a receiver on a connected stream: maps the window and sets `SO_RCVLOWAT` as configured.
    /// When the socket cannot be mapped, the receiver falls back to `recv` and records why.
    ///
    /// # Errors
    ///
    /// [`RxError`] when the socket cannot be set up ([`RxOp::Setup`]: a window too large to
    /// address, `SO_OOBINLINE` refused, a zcrx path that cannot be built). A kernel without
    /// zero-copy receive is not an error: the receiver reads with `recv` and
    /// [`Receiver::zerocopy_status`] says why.
    pub fn new(stream: TcpStream, config: RxConfig) -> Result<Receiver, RxError> {
        #[cfg(feature = "io-uring")]
        let zcrx = match &config.path {
            RxPath::Zcrx(zcrx) => Some(ZcrxPath::new(zcrx)?),
            RxPath::Socket => None,
        };
        Receiver::build(
            stream,
            config,
            #[cfg(feature = "io-uring")]
            zcrx,
        )
    }

    /// Sets up a receiver on a connected stream that receives through a zcrx instance a broker
    /// registered for this process ([`ZcrxGrant`](super::ZcrxGrant)), as [`RxPath::Zcrx`] does
    /// with one of its own; `config`'s path is not used. The calling thread enables the instance's
    /// ring and becomes its only issuer: receive on this thread.
    ///
    /// # Errors
    ///
    /// [`RxError`] with [`RxOp::ZcrxSetup`] when what the broker sent cannot be mapped or the
    /// ring cannot be enabled (another process enabled it first: `EBADFD`), or as
    /// [`Receiver::new`].
    #[cfg(feature = "io-uring")]
    pub fn with_zcrx_grant(
        stream: TcpStream,
        config: RxConfig,
        grant: super::ZcrxGrant,
    ) -> Result<Receiver, RxError> {
        let zcrx = ZcrxPath::granted(grant)?;
        Receiver::build(stream, config, Some(zcrx))
    }

    fn build(
        stream: TcpStream,
        config: RxConfig,
        #[cfg(feature = "io-uring")] zcrx: Option<ZcrxPath>,
    ) -> Result<Receiver, RxError> {
        let setup = |e| RxError::new(RxOp::Setup, e);
        set_int_option(stream.as_fd(), libc::SOL_SOCKET, libc::SO_OOBINLINE, 1).map_err(setup)?;
        if let Some(low) = config.low_water {
            let low = i32::try_from(low.max(1)).unwrap_or(i32::MAX);
            set_int_option(stream.as_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, low)
                .map_err(setup)?;
        }
        let page = tcp_zc::page_size();
        #[cfg(feature = "io-uring")]
        let socket_path = zcrx.is_none();
        #[cfg(not(feature = "io-uring"))]
        let socket_path = true;
        let (window, fallback) = match config.mode {
            _ if !socket_path => (None, None),
            RxMode::Copy => (
                None,
                Some(Fallback::requested(
                    "choose RxMode::ZeroCopy to map received pages",
                )),
            ),
            RxMode::ZeroCopy | RxMode::Auto => {
                let len = config
                    .window
                    .max(1)
                    .checked_next_multiple_of(page)
                    .ok_or_else(|| {
                        setup(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("a window of {} bytes is not addressable", config.window),
                        ))
                    })?;
                match SocketMapping::new(stream.as_fd(), len) {
                    Ok(window) => (Some(window), None),
                    Err(e) => (
                        None,
                        Some(Fallback::refused(
                            "mmap of the socket",
                            e.raw_os_error().unwrap_or(0),
                            REFUSED_REMEDY,
                        )),
                    ),
                }
            }
        };
        let rx_copybuf = config.copybuf;
        let copybuf_len = if rx_copybuf { page - 1 } else { 0 };
        let buf = vec![0u8; config.copy_buffer.max(copybuf_len).max(1)];
        let auto =
            (config.mode == RxMode::Auto && socket_path).then(|| AutoProbe::new(config.auto));
        let mut rx = Receiver {
            window,
            #[cfg(feature = "io-uring")]
            zcrx,
            stream,
            config,
            buf,
            copybuf_len,
            pending: 0..0,
            skip: 0,
            offset: 0,
            eof: false,
            window_clean: true,
            wait_first: false,
            socket_error: None,
            ended_by: None,
            fallback,
            unconsumed: None,
            copybuf_fallback: (!rx_copybuf).then(|| {
                Fallback::requested(
                    "set RxConfig::copybuf to have unaligned bytes copied in the mapping call",
                )
            }),
            extensions_refused: false,
            auto,
            stats: RxStats::default(),
        };
        if rx.window.is_none()
            && let Some(auto) = rx.auto.as_mut()
        {
            auto.give_up(AutoReason::Refused);
        }
        rx.report_auto();
        Ok(rx)
    }

    /// The next chunk of the stream, `Ok(None)` at its end. Blocks on a blocking socket until data
    /// arrives; never blocks on a non-blocking one.
    ///
    /// An error that ends the connection (`ConnectionReset`, `TimedOut`, …) comes after every byte
    /// that arrived before it, and again from every later call. While the receiver maps pages, a
    /// connection that ended without a FIN after its error was read elsewhere (`SO_ERROR`, a read
    /// of [`Receiver::get_ref`]) is reported as `ECONNRESET`; reading with `recv`
    /// ([`RxMode::Copy`], a fallback), such an end reads as the stream's end, as it does for any
    /// socket.
    ///
    /// After [`BufRead::fill_buf`], the chunk is what it lent and [`BufRead::consume`] left.
    ///
    /// # Errors
    ///
    /// [`RxError`]: a reset (`ConnectionReset`) or timeout after the bytes that arrived before it,
    /// and again on every later call; `WouldBlock` on a non-blocking socket with nothing queued;
    /// a failed kernel call ([`RxError::op`] names it).
    ///
    /// ```
    /// use zcnet::rx::{Receiver, RxConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let mut peer = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// # std::io::Write::write_all(&mut peer, &[9u8; 100_000])?;
    /// # drop(peer);
    /// # let (stream, _) = listener.accept()?;
    /// let mut rx = Receiver::new(stream, RxConfig::default())?;
    /// let mut total = 0;
    /// while let Some(chunk) = rx.recv()? {
    ///     total += chunk.len(); // the bytes, in place; mapped pages go back on drop
    /// }
    /// assert_eq!(total, 100_000);
    /// # Ok(())
    /// # }
    /// ```
    pub fn recv(&mut self) -> Result<Option<Chunk<'_>>, RxError> {
        if let Some((kind, range)) = self.unconsumed.take() {
            return Ok(Some(self.hand_out(kind, range)));
        }
        match self.next_chunk()? {
            Some((kind, range)) => Ok(Some(self.hand_out(kind, range))),
            None => Ok(None),
        }
    }

    /// The bytes of the next chunk (counted as received, not yet handed out), `None` at the end.
    fn next_chunk(&mut self) -> Result<Option<(ChunkKind, Range<usize>)>, RxError> {
        if let Some((op, errno)) = self.ended_by {
            return Err(RxError::new(op, io::Error::from_raw_os_error(errno)));
        }
        self.auto_boundary();
        loop {
            match self.step().map_err(|e| self.record_end(e))? {
                Step::Chunk(kind, range) => {
                    self.stats.chunks += 1;
                    if let Some(auto) = self.auto.as_mut() {
                        auto.on_chunk(range.len());
                    }
                    return Ok(Some((kind, range)));
                }
                Step::Again => continue,
                Step::End => return Ok(None),
            }
        }
    }

    fn step(&mut self) -> Result<Step, RxError> {
        #[cfg(feature = "io-uring")]
        if let Some(zcrx) = self.zcrx.as_mut() {
            let step = zcrx.next(&self.stream, &mut self.stats)?;
            if self.config.mode == RxMode::Auto {
                self.stats.auto = Some(zcrx_choice(&self.stats));
            }
            return Ok(match step {
                ZStep::Data(range) => Step::Chunk(ChunkKind::Zcrx, range),
                ZStep::End => {
                    self.eof = true;
                    Step::End
                }
            });
        }
        if !self.pending.is_empty() {
            Ok(Step::Chunk(
                ChunkKind::Copybuf,
                mem::replace(&mut self.pending, 0..0),
            ))
        } else if self.eof {
            Ok(Step::End)
        } else if self.skip > 0 || self.window.is_none() || self.auto_copies() {
            self.read_copy()
        } else {
            self.zerocopy()
        }
    }

    /// Remembers `e` when it ends the connection: a pending socket error (TCP sets one only for
    /// a reset, a timeout or an unreachable peer), or a call that failed with one.
    pub(crate) fn record_end(&mut self, e: RxError) -> RxError {
        let ends = matches!(
            e.raw_os_error(),
            Some(
                libc::ECONNRESET
                    | libc::ECONNABORTED
                    | libc::ECONNREFUSED
                    | libc::EPIPE
                    | libc::ETIMEDOUT
                    | libc::EHOSTUNREACH
                    | libc::ENETUNREACH
                    | libc::ENOTCONN
            )
        );
        if let Some(errno) = e.raw_os_error()
            && (ends || e.op() == RxOp::Socket)
        {
            self.ended_by = Some((e.op(), errno));
        }
        e
    }

    /// Whether the next [`Receiver::recv`] returns without reading the socket: copied bytes not handed
    /// out yet, or the end of the stream (or the error that ended it) already seen.
    #[cfg(feature = "tokio")]
    pub(crate) fn has_buffered(&self) -> bool {
        self.unconsumed.is_some() || !self.pending.is_empty() || self.eof || self.ended_by.is_some()
    }

    /// On the zcrx path, an eventfd the kernel signals when the ring has work (for a reactor to
    /// wait on before [`Receiver::zcrx_ready`]); `None` on the socket path.
    #[cfg(all(feature = "tokio", feature = "io-uring"))]
    pub(crate) fn zcrx_eventfd(&mut self) -> Option<io::Result<std::os::fd::OwnedFd>> {
        self.zcrx.as_mut().map(ZcrxPath::eventfd)
    }

    /// On the zcrx path: whether the next [`Receiver::recv`] returns without waiting (it runs the
    /// ring's deferred work, taking nothing from the stream).
    #[cfg(all(feature = "tokio", feature = "io-uring"))]
    pub(crate) fn zcrx_ready(&mut self) -> Result<bool, RxError> {
        match self.zcrx.as_mut() {
            Some(zcrx) => zcrx
                .ready(&self.stream, &mut self.stats)
                .map_err(|e| self.record_end(e)),
            None => Ok(true),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> &RxStats {
        &self.stats
    }

    /// Bytes of the stream handed out so far (the offset of the next chunk).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// `Ok` while this receiver may map pages, or why it reads with plain `recv` for good (in
    /// [`RxMode::Auto`], [`RxStats::auto`] says which way it measured cheaper). The same question
    /// as [`crate::tx::Sender::zerocopy_status`] and [`crate::xdp::Socket::zerocopy_status`].
    pub fn zerocopy_status(&self) -> Result<(), &Fallback> {
        self.fallback.as_ref().map_or(Ok(()), Err)
    }

    /// `Ok` while the kernel copies the bytes it cannot map into this receiver's buffer in the
    /// mapping call itself (copybuf, [`RxConfig::copybuf`]), or why they are read with a separate
    /// `recv` instead: not asked for ([`crate::fallback::Cause::Requested`]), or refused by the
    /// kernel (`Refused`, with the errno: `EINVAL` before Linux 5.11). Either way every byte
    /// arrives; this says how many calls it takes.
    ///
    /// ```
    /// # use std::net::{TcpListener, TcpStream};
    /// use zcnet::rx::{Receiver, RxConfig};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let listener = TcpListener::bind("127.0.0.1:0")?;
    /// # let _peer = TcpStream::connect(listener.local_addr()?)?;
    /// # let (stream, _) = listener.accept()?;
    /// let rx = Receiver::new(stream, RxConfig::default())?;
    /// // Off by default: unaligned bytes are read with recv.
    /// let why = rx.copybuf_status().expect_err("copybuf is off by default");
    /// assert_eq!(why.raw_os_error(), None);
    /// # Ok(())
    /// # }
    /// ```
    pub fn copybuf_status(&self) -> Result<(), &Fallback> {
        self.copybuf_fallback.as_ref().map_or(Ok(()), Err)
    }

    /// The stream, e.g. to write answers, shut it down or switch it to non-blocking.
    pub fn get_ref(&self) -> &TcpStream {
        &self.stream
    }

    /// Unmaps the window and gives the stream back, or the receiver itself while it still holds
    /// bytes it received and has not handed out (the rest of a chunk [`BufRead::fill_buf`] lent,
    /// copybuf bytes): read them first, so that no byte is lost.
    pub fn into_inner(self) -> Result<TcpStream, Box<Receiver>> {
        if self.unconsumed.is_some() || !self.pending.is_empty() {
            return Err(Box::new(self));
        }
        let Receiver { window, stream, .. } = self;
        drop(window);
        Ok(stream)
    }

    /// Switches the socket between blocking and non-blocking receives (as
    /// `self.get_ref().set_nonblocking(…)` does).
    ///
    /// # Errors
    ///
    /// The `fcntl` that sets `O_NONBLOCK` fails.
    pub fn set_nonblocking(&mut self, nonblocking: bool) -> io::Result<()> {
        self.stream.set_nonblocking(nonblocking)
    }

    fn mapped_pages(&self) -> &[u8] {
        self.window.as_ref().map_or(&[], SocketMapping::mapped)
    }

    pub(super) fn zcrx_bytes(&self, range: Range<usize>) -> &[u8] {
        #[cfg(feature = "io-uring")]
        if let Some(zcrx) = &self.zcrx {
            return zcrx.bytes(range);
        }
        let _ = range;
        &[]
    }

    pub(super) fn zcrx_released(&mut self, range: Range<usize>) {
        #[cfg(feature = "io-uring")]
        if let Some(zcrx) = self.zcrx.as_mut() {
            zcrx.give_back(range);
        }
        let _ = range;
    }

    pub(super) fn chunk_released(&mut self) {
        if self.config.release == Release::Zap
            && let Some(window) = self.window.as_mut()
        {
            // A failed zap leaves the pages for the next receive to replace: the window is then just
            // not known to be clean, which costs the kernel a zap but loses nothing.
            self.window_clean = window.release().is_ok();
            self.stats.zaps += 1;
        }
    }

    /// The bytes `range` of the mapped window or the copy buffer, as `kind` says.
    pub(super) fn chunk_bytes(&self, kind: ChunkKind, range: Range<usize>) -> &[u8] {
        match kind {
            ChunkKind::Mapped => &self.mapped_pages()[range],
            ChunkKind::Copybuf | ChunkKind::Recv => &self.buf[range],
            ChunkKind::Zcrx => self.zcrx_bytes(range),
        }
    }

    fn hand_out(&mut self, kind: ChunkKind, range: Range<usize>) -> Chunk<'_> {
        let offset = self.offset;
        self.offset += range.len() as u64;
        Chunk {
            rx: self,
            kind,
            range,
            offset,
        }
    }

    /// Reads with `recv`: the bytes the kernel said to skip (already queued, so without waiting), or
    /// anything after a fallback (waiting as the socket's mode says).
    fn read_copy(&mut self) -> Result<Step, RxError> {
        let (want, flags) = match self.skip {
            0 => (self.buf.len(), 0),
            skip => (skip.min(self.buf.len()), libc::MSG_DONTWAIT),
        };
        self.stats.recv_calls += 1;
        match tcp_zc::recv(self.stream.as_fd(), &mut self.buf[..want], flags) {
            Ok(0) => self.end_of_stream(),
            Ok(n) => {
                self.skip = self.skip.saturating_sub(n);
                self.stats.recv_bytes += n as u64;
                Ok(Step::Chunk(ChunkKind::Recv, 0..n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.skip > 0 => {
                self.skip = 0;
                Ok(Step::Again)
            }
            Err(e) => Err(RxError::new(RxOp::Recv, e)),
        }
    }

    /// The receive side ended with nothing queued and no FIN seen by `TCP_ZEROCOPY_RECEIVE`: a
    /// closed socket was reset (or timed out), one still open was shut down for reading.
    fn ended_without_data(&mut self) -> Result<Step, RxError> {
        // A socket without TCP_INFO (not TCP) reads as shut down.
        let closed = socket::tcp_closed(self.stream.as_fd()).unwrap_or(false);
        if closed && self.socket_error.is_none() {
            self.socket_error = Some(libc::ECONNRESET);
        }
        self.end_of_stream()
    }

    fn end_of_stream(&mut self) -> Result<Step, RxError> {
        if let Some(errno) = self.socket_error.take() {
            return Err(RxError::new(
                RxOp::Socket,
                io::Error::from_raw_os_error(errno),
            ));
        }
        self.eof = true;
        Ok(Step::End)
    }

    /// Whether [`RxMode::Auto`] reads the current window with plain `recv`.
    fn auto_copies(&self) -> bool {
        self.auto.as_ref().is_some_and(AutoProbe::copying)
    }

    /// Between two chunks: closes [`RxMode::Auto`]'s window if it is full and takes the way the next
    /// one asks for. A chunk borrows the receiver, so none is outstanding here; the boundary waits for
    /// the copybuf bytes pending to be handed out. Bytes the kernel said to skip are read with `recv`
    /// whichever way comes next, and a `recv` that ends inside a page makes the next
    /// `TCP_ZEROCOPY_RECEIVE` map nothing and say how many bytes to skip: the stream stays in order.
    fn auto_boundary(&mut self) {
        let Some(auto) = self.auto.as_mut() else {
            return;
        };
        if !auto.due() || !self.pending.is_empty() || self.unconsumed.is_some() {
            return;
        }
        let was_copying = auto.copying();
        auto.close(CpuStamp::now());
        if !was_copying && auto.copying() {
            // Pages a lazily released chunk left mapped are zapped now rather than held through the
            // copy windows; a blocking `recv` honours SO_RCVLOWAT by itself.
            self.wait_first = false;
            if !self.window_clean
                && let Some(window) = self.window.as_mut()
            {
                self.window_clean = window.release().is_ok();
                self.stats.zaps += 1;
            }
        }
        self.report_auto();
    }

    fn report_auto(&mut self) {
        if let Some(auto) = &self.auto {
            self.stats.auto = Some(auto.choice());
            self.stats.cost_comparisons = auto.comparisons();
        }
    }

    fn fall_back(&mut self, why: Fallback, reason: AutoReason) {
        self.fallback = Some(why);
        self.window = None;
        if let Some(auto) = self.auto.as_mut() {
            auto.give_up(reason);
        }
        self.report_auto();
    }

    fn zerocopy(&mut self) -> Result<Step, RxError> {
        // Bytes read while mapping was tried (not those of RxMode::Auto's copy windows).
        let aside = self.auto.as_ref().map_or(0, AutoProbe::copied_aside);
        let tried = self.stats.copied_bytes().saturating_sub(aside);
        if let Some(limit) = self.config.give_up_after
            && self.stats.mapped_bytes == 0
            && tried >= limit
        {
            self.fall_back(nothing_mapped(tried), AutoReason::NothingMapped);
            return Ok(Step::Again);
        }
        let use_extensions = !self.extensions_refused;
        let copybuf =
            (use_extensions && self.copybuf_len > 0).then(|| &mut self.buf[..self.copybuf_len]);
        let flags = if use_extensions && self.window_clean {
            TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT
        } else {
            0
        };
        if mem::take(&mut self.wait_first)
            && !tcp_zc::is_nonblocking(self.stream.as_fd())
                .map_err(|e| RxError::new(RxOp::Poll, e))?
        {
            self.stats.polls += 1;
            tcp_zc::wait_readable(self.stream.as_fd()).map_err(|e| RxError::new(RxOp::Poll, e))?;
        }
        let Some(window) = self.window.as_mut() else {
            return Ok(Step::Again);
        };
        self.stats.zerocopy_calls += 1;
        match tcp_zc::zerocopy_receive(self.stream.as_fd(), window, copybuf, flags) {
            Ok(outcome) => self.account(outcome),
            Err(e) => match e.raw_os_error() {
                // Kernels before 5.11 know neither copybuf nor flags and reject non-zero fields.
                Some(libc::EINVAL) if use_extensions && (self.copybuf_len > 0 || flags != 0) => {
                    self.extensions_refused = true;
                    self.copybuf_fallback = Some(copybuf_refused(libc::EINVAL));
                    Ok(Step::Again)
                }
                Some(errno @ (libc::ENOPROTOOPT | libc::EOPNOTSUPP | libc::EINVAL)) => {
                    self.fall_back(
                        Fallback::refused("getsockopt TCP_ZEROCOPY_RECEIVE", errno, REFUSED_REMEDY),
                        AutoReason::Refused,
                    );
                    Ok(Step::Again)
                }
                // Nothing queued and no more will come; `recv` tells a clean end from a reset.
                Some(libc::EIO) => {
                    self.skip = 0;
                    self.stats.recv_calls += 1;
                    match tcp_zc::recv(self.stream.as_fd(), &mut self.buf, libc::MSG_DONTWAIT) {
                        Ok(0) => self.end_of_stream(),
                        Ok(n) => {
                            self.stats.recv_bytes += n as u64;
                            Ok(Step::Chunk(ChunkKind::Recv, 0..n))
                        }
                        Err(e) => Err(RxError::new(RxOp::Recv, e)),
                    }
                }
                _ => Err(RxError::new(RxOp::ZerocopyReceive, e)),
            },
        }
    }

    fn account(&mut self, outcome: ZerocopyOutcome) -> Result<Step, RxError> {
        if outcome.mapped > 0 {
            self.window_clean = false;
        }
        if outcome.socket_error != 0 {
            self.socket_error = Some(outcome.socket_error);
        }
        self.stats.mapped_bytes += outcome.mapped as u64;
        self.stats.copybuf_bytes += outcome.copied as u64;
        self.pending = 0..outcome.copied;
        self.skip = outcome.skip_hint;
        if outcome.copybuf_error != 0 {
            // The kernel could not write the copy buffer; those bytes stay queued for `recv`.
            self.extensions_refused = true;
            self.copybuf_fallback = Some(copybuf_refused(outcome.copybuf_error));
        }
        if outcome.mapped > 0 {
            self.wait_first = outcome.skip_hint == 0
                && self.config.low_water.is_some_and(|low| outcome.inq < low);
            return Ok(Step::Chunk(ChunkKind::Mapped, 0..outcome.mapped));
        }
        if outcome.copied > 0 || outcome.skip_hint > 0 {
            return Ok(Step::Again);
        }
        if let Some(errno) = self.socket_error.take() {
            return Err(RxError::new(
                RxOp::Socket,
                io::Error::from_raw_os_error(errno),
            ));
        }
        if outcome.copybuf_error != 0 {
            return Ok(Step::Again);
        }
        // Nothing queued. A FIN makes the next call fail with EIO, but a reset whose error was read
        // elsewhere (SO_ERROR, a read of the stream) or a shutdown(SHUT_RD) leaves the kernel mapping
        // nothing and `poll` saying readable at once: a one-byte peek tells data, an end and an
        // empty queue apart.
        self.stats.recv_calls += 1;
        match tcp_zc::recv(
            self.stream.as_fd(),
            &mut self.buf[..1],
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        ) {
            Ok(0) => return self.ended_without_data(),
            Ok(_) => return Ok(Step::Again),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(RxError::new(RxOp::Recv, e)),
        }
        let nonblocking =
            tcp_zc::is_nonblocking(self.stream.as_fd()).map_err(|e| RxError::new(RxOp::Poll, e))?;
        if nonblocking {
            return Err(RxError::new(
                RxOp::ZerocopyReceive,
                io::Error::from_raw_os_error(libc::EAGAIN),
            ));
        }
        self.stats.polls += 1;
        tcp_zc::wait_readable(self.stream.as_fd()).map_err(|e| RxError::new(RxOp::Poll, e))?;
        Ok(Step::Again)
    }
}

/// Zero-copy reads in place: [`BufRead::fill_buf`] lends the next chunk's bytes (mapped pages,
/// copybuf or `recv` bytes, as [`Receiver::recv`] would return them), [`BufRead::consume`] advances
/// through them, and a mapped chunk's pages go back (zapped under [`Release::Zap`]) once it is
/// consumed to its end. A frame header read with `fill_buf` and a payload taken in parts never
/// copies a byte; a frame cut across two chunks is the caller's to join (the second `fill_buf`
/// comes only after the first chunk is consumed). An empty slice is the end of the stream; on a
/// non-blocking socket with nothing queued `fill_buf` fails with `WouldBlock`; errors convert from
/// [`RxError`] (`downcast` gives it back).
impl BufRead for Receiver {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.unconsumed.is_none() {
            self.unconsumed = self.next_chunk()?;
        }
        Ok(match self.unconsumed.clone() {
            Some((kind, range)) => self.chunk_bytes(kind, range),
            None => &[],
        })
    }

    /// Consumes `amt` bytes of what [`BufRead::fill_buf`] lent (at most all of it).
    fn consume(&mut self, amt: usize) {
        let Some((kind, range)) = self.unconsumed.as_mut() else {
            return;
        };
        let amt = amt.min(range.len());
        range.start += amt;
        self.offset += amt as u64;
        if range.start == range.end {
            let (kind, end) = (*kind, range.end);
            self.unconsumed = None;
            match kind {
                ChunkKind::Mapped => self.chunk_released(),
                // The buffer is named by an offset inside it: the chunk's last byte (its start has
                // moved to its end, which may be the next buffer's first byte).
                ChunkKind::Zcrx => self.zcrx_released(end - 1..end),
                ChunkKind::Copybuf | ChunkKind::Recv => {}
            }
        }
    }
}

/// Reads by copying out of the chunks: each byte is copied once, from the mapped pages or the copy
/// buffer into `buf`. The zero-copy way is [`BufRead`] (or [`Receiver::recv`]); `Read` is for
/// code that wants bytes in its own buffer anyway (`read_exact` of a small header, `io::copy`).
impl Read for Receiver {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let lent = self.fill_buf()?;
        let n = lent.len().min(buf.len());
        buf[..n].copy_from_slice(&lent[..n]);
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_reasons_say_what_to_do() {
        let unavailable = Fallback::refused("mmap of the socket", libc::ENODEV, REFUSED_REMEDY);
        assert_eq!(
            unavailable.to_string(),
            "mmap of the socket: ENODEV (this kernel or socket has no TCP zero-copy receive: bytes \
             are read with recv)"
        );
        let nothing = nothing_mapped(4096);
        assert!(
            nothing.to_string().contains("MSG_ZEROCOPY sender"),
            "{nothing}"
        );
    }

    #[test]
    fn window_is_rounded_up_to_whole_pages() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let config = RxConfig {
            window: 5000,
            ..RxConfig::default()
        };
        let rx = Receiver::new(stream, config).unwrap();
        let window = rx.window.as_ref().expect("TCP sockets map");
        assert_eq!(window.len(), 2 * tcp_zc::page_size());
        assert!(rx.zerocopy_status().is_ok());
    }
}
