//! The public sender: one type, one contract, over the submission path its config chooses —
//! `sendmsg(MSG_ZEROCOPY)` ([`super::sendmsg`]) or io_uring `SEND_ZC` (`super::uring`, feature
//! `io-uring`). Each path owns its mechanism; this file only picks one and hands calls to it.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::buffer::SendBuf;
use super::erased::UnsentBuf;
use super::error::TxError;
use super::policy::{Mode, PolicyConfig};
use super::pool::{BufferPool, PooledBuf};
use super::reaper::Reaped;
use super::sendmsg::SendmsgPath;
use super::socket::ZcSocket;
use super::stats::TxStats;
use super::unsent::{SendError, TrySendError, Unsent};
#[cfg(feature = "io-uring")]
use super::uring::UringPath;
use crate::Fallback;
#[cfg(feature = "io-uring")]
use crate::sys::uring::MAX_RING_ENTRIES;

/// The longest a dropped sender waits for the kernel to take the sends it still holds when
/// [`SenderConfig::send_timeout`] is unset: a peer that stopped reading holds the dropping thread
/// that long, not for good.
pub(crate) const DROP_WAIT: Duration = Duration::from_secs(60);

/// How a [`Sender`] behaves.
///
/// Start from [`SenderConfig::with_mode`] or [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SenderConfig {
    /// The zero-copy policy.
    pub policy: PolicyConfig,
    /// How sends reach the kernel (default [`SendPath::SENDMSG`]): the one field to change to
    /// switch from `sendmsg` to io_uring.
    pub path: SendPath,
    /// Longest wait for send-buffer space (`sendmsg`) or for the kernel to take queued sends
    /// (io_uring) before a send fails with a timeout (default: none, like a blocking socket). On an
    /// AF_VSOCK seqpacket socket it becomes the socket's `SO_SNDTIMEO`, which bounds the one call
    /// that sends a whole message (none: a year; see [`crate::tx::vsock`]). A timeout too long for
    /// the clock (`Duration::MAX`) is the same as none.
    pub send_timeout: Option<Duration>,
    /// Per-send latency (default off): the sender turns on the kernel's transmit timestamps
    /// (`SO_TIMESTAMPING` keyed by `SOF_TIMESTAMPING_OPT_ID`: scheduled, handed to the device,
    /// acknowledged) and joins them and each zero-copy completion to the send they belong to, into
    /// [`TxStats::latency`](crate::tx::TxStats::latency). The `sendmsg` path reads them from the
    /// error queue (about three more entries per send); the io_uring path through a
    /// `SOCKET_URING_OP_TX_TIMESTAMP` command on a small ring of its own (Linux 6.17; on an older
    /// kernel its latency stays empty), a request being one send there. A socket that refuses
    /// them leaves the latency empty.
    pub timestamps: bool,
}

impl SenderConfig {
    /// The default configuration with `mode`.
    pub fn with_mode(mode: Mode) -> Self {
        SenderConfig {
            policy: PolicyConfig::with_mode(mode),
            ..Default::default()
        }
    }
}

/// How a [`Sender`]'s sends reach the kernel. Both paths share the policy, the completion tracker,
/// the statistics and the contract of [`Sender`]; they differ in cost and in what they can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendPath {
    /// One `sendmsg(MSG_ZEROCOPY)` per send (per piece of a stream send the kernel takes part
    /// of), completions read from the socket's error queue.
    Sendmsg {
        /// Drain the error queue after this many sends even when nothing forces it (default 32),
        /// and in any case once 256 KiB went out zero-copy since the last drain: a buffer comes
        /// back only once its completion is read.
        drain_every: u32,
    },
    /// io_uring `IORING_OP_SEND_ZC` / `IORING_OP_SENDMSG_ZC` (feature `io-uring`, kernel 6.0+):
    /// sends are queued and submitted as linked chains, notifications come as CQEs, and a
    /// registered [`BufferPool`] ([`Sender::register_pool`]) sends without pinning pages per
    /// request. On TCP it turns Nagle's algorithm off (`TCP_NODELAY`) while it owns the socket and
    /// back on when [`Sender::close`] hands the socket back: it gathers sends itself, and each
    /// chain's last segment leaves at once. When the ring cannot be set up the sender uses
    /// [`SendPath::SENDMSG`] instead and [`Sender::path_status`] says why. On AF_VSOCK it pays only
    /// while the peer has credit for whole requests: the virtio transport copies a request longer
    /// than the credit at its first try (and each later piece of it) yet completes it as
    /// zero-copied, so [`TxStats::zc_ids`](crate::tx::TxStats::zc_ids) then counts copies; the
    /// `sendmsg` path reports each such copy.
    #[cfg(feature = "io-uring")]
    IoUring {
        /// Sends queued before they are submitted as one linked chain (default 32; a chain also
        /// stops at 512 KiB past its first send, and is submitted once that much waits); on a
        /// stream also the most buffers one request carries (up to 256 KiB and 1024 buffers).
        batch: u32,
        /// Submission queue entries (default 256; at most 32768, the kernel's
        /// `IORING_MAX_ENTRIES`): also the most requests in flight, results and notifications
        /// together.
        ring_entries: u32,
    },
}

/// The `sendmsg` path's default [`SendPath::Sendmsg::drain_every`].
const DRAIN_EVERY: u32 = 32;

impl SendPath {
    /// `sendmsg(MSG_ZEROCOPY)` with its defaults.
    pub const SENDMSG: SendPath = SendPath::Sendmsg {
        drain_every: DRAIN_EVERY,
    };
    /// io_uring with its defaults.
    #[cfg(feature = "io-uring")]
    pub const IO_URING: SendPath = SendPath::IoUring {
        batch: 32,
        ring_entries: 256,
    };

    /// The path's name, as rows and messages print it (`sendmsg`, `io_uring`).
    pub fn name(&self) -> &'static str {
        match self {
            SendPath::Sendmsg { .. } => "sendmsg",
            #[cfg(feature = "io-uring")]
            SendPath::IoUring { .. } => "io_uring",
        }
    }
}

impl Default for SendPath {
    fn default() -> Self {
        SendPath::SENDMSG
    }
}

/// The path a sender uses. Both variants are large (a control buffer, a ring and its queue) and
/// of similar size; one lives in each sender, so neither is boxed.
#[allow(clippy::large_enum_variant)]
enum Path<S: ZcSocket> {
    Sendmsg(SendmsgPath<S>),
    #[cfg(feature = "io-uring")]
    IoUring(UringPath<S>),
}

/// Runs `$body` with `$p` bound to the path in use.
macro_rules! on_path {
    ($path:expr, $p:ident => $body:expr) => {
        match $path {
            Path::Sendmsg($p) => $body,
            #[cfg(feature = "io-uring")]
            Path::IoUring($p) => $body,
        }
    };
}

/// A zero-copy sender owning socket `S` (see [`crate::tx`]), over the submission path its
/// [`SenderConfig::path`] chooses.
///
/// # Contract, on either path
///
/// - [`Sender::send`] takes the buffer and lends it to the kernel until the completions covering
///   it arrive; it waits (bounded by [`SenderConfig::send_timeout`]) for the kernel to take it —
///   send-buffer space for `sendmsg`, the previous chain for io_uring, which queues sends and
///   submits them `batch` at a time. [`Sender::try_send`] never waits and hands the buffer back
///   ([`TrySendError::WouldBlock`]) when the kernel would not take it now.
/// - A failed or refused send hands back what was not sent: its own buffer, in the
///   [`SendError`]; and on io_uring, where a send may report the failure of an earlier queued
///   request, every earlier buffer not wholly sent, in order, inside the error
///   ([`TxError::unsent`]). No byte is sent twice, nothing after a failed request goes out (a
///   stream would skip bytes), and the sender goes on with the buffers given from then on.
/// - [`Sender::flush`] submits what is queued and waits until every buffer is back; after any
///   error it succeeds or returns, once, every buffer still queued. [`Sender::close`] flushes and
///   returns the socket.
/// - Nothing queued is ever dropped silently, not even by dropping the sender. What `send`
///   accepted is delivered as a socket's close delivers its send buffer: on `sendmsg` the kernel
///   holds it already; on io_uring the reaper submits what is queued (see below). When that
///   fails (a send error, the reaper's bound), or a [`Sender::close`] failed and handed buffers
///   back, a TCP stream is reset (`SO_LINGER` 0), so that its peer never takes a stream cut short
///   for a whole one.
///
/// # Drop
///
/// | end | waits | what is still lent | connection |
/// |---|---|---|---|
/// | [`Sender::close`]`(timeout)` | for every completion, up to `timeout` | given back (or leaked and named in the error) | closed, or reset if bytes are missing |
/// | [`Sender::abort`] | never | leaked, counted in [`crate::tx::leaked`] | reset |
/// | dropping it | never: the reaper waits, bounded | given back as completions arrive, the rest leaked when the bound passes | closed once all is back, or reset if bytes are missing |
///
/// A sender dropped with buffers lent, or (io_uring) sends queued, hands its socket, ring and
/// loans to the reaper: one background thread for the whole process, which submits what is
/// queued, reads the completions and releases each buffer they cover (a pooled one goes back to
/// its pool) as the live sender would, then closes the socket. The drop itself reads the
/// completions already queued (`sendmsg`) and returns; it never waits for the kernel or the
/// peer. (The kernel ties an io_uring request to the thread that submitted it, and cancels the
/// requests still waiting for socket space when that thread exits — the reaper then resets the
/// stream: a thread that exits right after dropping an io_uring sender whose last sends may still
/// wait for the peer should [`Sender::close`] it instead. What the drop left queued is submitted
/// by the reaper's thread.) The reaper's bounds:
///
/// - it holds a dropped sender for at most [`SenderConfig::send_timeout`] (60 s when it is unset)
///   from the drop; then what io_uring had not submitted is never sent (a TCP stream is reset),
///   and the buffers still lent are leaked — never freed or reused, since the kernel may still
///   read them — and counted in [`crate::tx::leaked`];
/// - it holds at most 1024 senders at once: a sender dropped while it is full
///   ends there as [`Sender::abort`] ends one, except that a `sendmsg` stream is not reset (the
///   kernel holds its bytes already).
///
/// So [`crate::tx::leaked`] counts exactly the buffers still lent when their sender stopped
/// tracking them: at an abort, a failed close, a drop the reaper refused, or the reaper's bound;
/// a buffer whose completions reach the reaper in time is released, not counted. Leaked buffers'
/// locked-memory charges go back to [`crate::tx::MemlockBudget`]. [`crate::tx::reaping`] counts
/// what the reaper holds and how each sender it took ended; a server that drops connections on
/// error paths reads both to see what that costs. While the thread unwinds from a panic, the
/// drop ends the sender at once (the reaper is not involved).
///
/// On the `sendmsg` path one sender owns a kernel socket: a second `sendmsg` sender on the same
/// socket (another descriptor of it, from `try_clone` or `dup`) sends by copy and never reads the
/// socket's error queue, and its [`Sender::zerocopy_status`] says so
/// ([`crate::Cause::SocketInUse`]). io_uring senders claim nothing: their notifications come on
/// their own ring, not on the socket's error queue, so several may share a socket (each keeps its
/// own order; interleaving them is the application's business).
///
/// # The socket: lent, never handed over mutably
///
/// [`Sender::get_ref`] lends the socket (to set an option, read its address); [`Sender::close`]
/// gives it back once every loan is home. There is deliberately no `get_mut`: a `&mut S` can
/// replace the socket (`std::mem::replace`), while the sender's state belongs to the one it
/// wraps — the completion ids the kernel numbers per socket, the error queue they arrive on, the
/// io_uring requests queued for its descriptor, the loans the kernel still reads. Completions of
/// the old socket would then be looked for on the new one, and buffers released while the kernel
/// still reads them.
pub struct Sender<S: ZcSocket> {
    /// Present until [`Sender::close`] or [`Sender::abort`] takes it, or the drop hands it to the
    /// reaper.
    path: Option<Path<S>>,
    /// Whether the configured path is the one used, or why not.
    path_status: Result<(), Fallback>,
}

impl<S: ZcSocket> Sender<S> {
    fn engine(&self) -> &Path<S> {
        self.path.as_ref().expect(PRESENT)
    }

    fn engine_mut(&mut self) -> &mut Path<S> {
        self.path.as_mut().expect(PRESENT)
    }

    /// Wraps `socket`, sending on `config.path`.
    ///
    /// On the `sendmsg` path the sender first claims the kernel socket (no other sender of this
    /// process may hold it); then, unless the mode is [`Mode::Copy`], sets `SO_ZEROCOPY`. When
    /// either fails the sender copies and [`Sender::zerocopy_status`] says why. Completion ids are
    /// a per-socket counter the kernel never resets, and a sender numbers its sends from 0: a
    /// socket that already has `SO_ZEROCOPY` on may have taken ids already (wrapped before, for
    /// example a socket a [`Sender::close`] returned, or a clone of one), so the sender never sends
    /// it with MSG_ZEROCOPY (it copies, and the status says why) rather than misattribute a
    /// completion — unless the kernel shows that nothing was ever sent on it: a TCP socket
    /// accepted from a listener with `SO_ZEROCOPY` inherits the option, with its counter at 0
    /// (`sk_clone_lock` resets it), and is sent zero-copy as long as it is wrapped before anything
    /// is sent on it.
    ///
    /// On the io_uring path it sets up a ring; zero-copy needs `IORING_OP_SEND_ZC`, without which
    /// the sender copies (`IORING_OP_SEND`) and [`Sender::zerocopy_status`] says why. When the ring
    /// cannot be set up at all (`io_uring_setup`: `EPERM` or `ENOSYS` from a seccomp filter — as
    /// Docker's and containerd's default profiles refuse io_uring —, `EPERM` under
    /// `kernel.io_uring_disabled` or outside `kernel.io_uring_group`, `ENOSYS` from a kernel without
    /// io_uring, `ENOMEM` when locked memory is used up, `EINVAL` for more `ring_entries` than a ring
    /// takes; a filter refusing the `io_uring_register` calls that probe, restrict and enable the new
    /// ring fails the setup too) the sender sends on
    /// [`SendPath::SENDMSG`] instead — every send still goes out, with MSG_ZEROCOPY — and
    /// [`Sender::path_status`] says which of those refused it and what to do (for a container: the
    /// `docker run` flag and the Kubernetes `securityContext`).
    ///
    /// Infallible: what the kernel refuses makes the sender copy or use the other path, and
    /// [`Sender::zerocopy_status`] and [`Sender::path_status`] say why.
    ///
    /// ```
    /// use std::time::Duration;
    /// use zcnet::tx::{SenderConfig, TcpSender};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// # let (mut peer, _) = listener.accept()?;
    /// # let reader = std::thread::spawn(move || {
    /// #     let mut got = Vec::new();
    /// #     std::io::Read::read_to_end(&mut peer, &mut got).map(|_| got)
    /// # });
    /// let mut tx = TcpSender::new(stream, SenderConfig::default());
    /// tx.send(vec![7u8; 1 << 20])?; // lent to the kernel, not copied
    /// tx.send(b"and a tail".to_vec())?;
    /// let stream = tx.close(Duration::from_secs(5))?; // every buffer is back
    /// drop(stream);
    /// # let got = reader.join().expect("reader")?;
    /// # assert_eq!(got.len(), (1 << 20) + 10);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(socket: S, config: SenderConfig) -> Self {
        match config.path {
            SendPath::Sendmsg { drain_every } => Sender {
                path: Some(Path::Sendmsg(SendmsgPath::new(
                    socket,
                    &config,
                    drain_every,
                ))),
                path_status: Ok(()),
            },
            #[cfg(feature = "io-uring")]
            SendPath::IoUring {
                batch,
                ring_entries,
            } => {
                if socket.cuts_messages() {
                    return Sender {
                        path: Some(Path::Sendmsg(SendmsgPath::new(
                            socket,
                            &config,
                            DRAIN_EVERY,
                        ))),
                        path_status: Err(whole_messages_fallback()),
                    };
                }
                // The ring is set up first: on failure the socket is still here for sendmsg.
                match UringPath::<S>::ring(ring_entries) {
                    Ok(ring) => Sender {
                        path: Some(Path::IoUring(UringPath::new(socket, ring, &config, batch))),
                        path_status: Ok(()),
                    },
                    Err(e) => {
                        let path = SendmsgPath::new(socket, &config, DRAIN_EVERY);
                        Sender {
                            path: Some(Path::Sendmsg(path)),
                            path_status: Err(ring_setup_fallback(&e, ring_entries)),
                        }
                    }
                }
            }
        }
    }

    /// The path sends take: the configured one, or [`SendPath::SENDMSG`] after a fallback (see
    /// [`Sender::path_status`]).
    pub fn path(&self) -> SendPath {
        match self.engine() {
            Path::Sendmsg(p) => SendPath::Sendmsg {
                drain_every: p.drain_every(),
            },
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.send_path(),
        }
    }

    /// Whether sends take the configured path, or why they fell back to `sendmsg`.
    pub fn path_status(&self) -> Result<(), &Fallback> {
        self.path_status.as_ref().map(|_| ())
    }

    /// The socket. On io_uring, sends still queued ([`Sender::queued`]) reach the kernel when they
    /// are submitted and go out under the socket's state then: [`Sender::flush`] before changing
    /// it through this reference (a UDP socket's `connect`, its TTL, a TCP socket's
    /// `TCP_NODELAY`), or the sends queued before the change go out under it;
    /// [`Sender::set_cork`] and [`Sender::set_gso_segment`] settle the queue themselves.
    pub fn get_ref(&self) -> &S {
        on_path!(self.engine(), p => p.get_ref())
    }

    /// Whether zero-copy is used, or why not: refused by the kernel, copy requested, or given up
    /// after a completion named an id the sender never registered.
    pub fn zerocopy_status(&self) -> Result<(), &Fallback> {
        on_path!(self.engine(), p => p.zerocopy_status())
    }

    /// The counters so far (on io_uring, an id is a zero-copy request).
    pub fn stats(&self) -> &TxStats {
        on_path!(self.engine(), p => p.stats())
    }

    /// Zero-copy ids sent and not yet completed (their buffers are still lent).
    pub fn outstanding(&self) -> usize {
        on_path!(self.engine(), p => p.outstanding())
    }

    /// Buffers queued and not yet wholly taken by the kernel (io_uring; always 0 on `sendmsg`,
    /// which sends in the call).
    pub fn queued(&self) -> usize {
        match self.engine() {
            Path::Sendmsg(_) => 0,
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.queued(),
        }
    }

    /// Registers `pool`'s buffers for fixed sends (io_uring: `IORING_REGISTER_BUFFERS`), so that
    /// its buffers go out without pinning pages per request. On failure — `ENOMEM` when the pinned
    /// pages exceed `RLIMIT_MEMLOCK` — the reason names the limit and what to raise, and sends go
    /// on with unregistered buffers. A pool on huge pages is declined ([`crate::Cause::Declined`]):
    /// the kernel charges a fixed send from a huge page up to the whole page, which stalls the
    /// socket; its sends go unregistered. The `sendmsg` path has no registered buffers (the kernel pins
    /// each send's pages): it answers [`crate::Cause::Requested`], naming the io_uring path.
    ///
    /// # Errors
    ///
    /// The [`Fallback`] saying why the pool's sends stay unregistered; they still go out. Where
    /// registration is required, `?` passes it on (it is an `Error`):
    ///
    /// ```
    /// use zcnet::tx::{BufferPool, PoolConfig, SendPath, SenderConfig, UdpSender};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = BufferPool::new(PoolConfig::new(4096, 8))?;
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// let mut tx = UdpSender::new(socket, SenderConfig::default());
    /// if let Err(why) = tx.register_pool(&pool) {
    ///     println!("unregistered sends: {why}"); // on the sendmsg path: use SendPath::IO_URING
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn register_pool(&mut self, pool: &BufferPool) -> Result<(), Fallback> {
        match self.engine_mut() {
            Path::Sendmsg(_) => {
                let _ = pool;
                Err(no_registration())
            }
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.register_pool(pool),
        }
    }

    /// Whether a pool is registered (fixed sends), or why not.
    pub fn registration_status(&self) -> Result<(), Fallback> {
        match self.engine() {
            Path::Sendmsg(_) => Err(no_registration()),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.registration_status().map_err(Clone::clone),
        }
    }

    /// Sends all of `buf`: on a stream socket as one run of bytes, in order (in as many calls or
    /// requests as the kernel needs); on a message socket as one message (datagram). Waits for the
    /// kernel to take it, up to [`SenderConfig::send_timeout`]. The buffer stays lent until the
    /// completions covering it arrive. On failure the error hands back the part not sent (see the
    /// type's contract).
    ///
    /// # Errors
    ///
    /// [`SendError`], holding the part of `buf` not sent ([`SendError::unsent`]): the socket's
    /// error (`ConnectionReset`, `BrokenPipe`), no room within the send timeout (`TimedOut`), a
    /// message too long for the socket (`EMSGSIZE`). The [`Sender::new`] example sends.
    pub fn send<B: SendBuf>(&mut self, buf: B) -> Result<(), SendError<B>> {
        self.send_unsent(Unsent::new(Arc::new(buf), 0))
    }

    /// [`Sender::send`] for the part of a buffer an earlier send did not take.
    pub fn send_unsent<B: SendBuf>(&mut self, unsent: Unsent<B>) -> Result<(), SendError<B>> {
        match self.engine_mut() {
            Path::Sendmsg(p) => p.send_unsent(unsent),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.queue_unsent(unsent, true).map_err(|e| match e {
                TrySendError::Failed(e) => e,
                TrySendError::WouldBlock(_) => unreachable!("a waiting send never would block"),
            }),
        }
    }

    /// Sends `buf` without waiting: when the kernel would not take it now (`sendmsg`: the socket's
    /// send buffer is full; io_uring: `batch` sends wait for the previous chain), returns
    /// [`TrySendError::WouldBlock`] with the part not sent — all of a datagram, the rest of a
    /// stream — to pass to [`Sender::try_send_unsent`] once the sender's descriptor ([`AsFd`]) is
    /// ready. On failure the error hands back the unsent part too.
    ///
    /// # Errors
    ///
    /// [`TrySendError::WouldBlock`] with the part not sent when the kernel would not take it now;
    /// [`TrySendError::Failed`] as [`Sender::send`] fails.
    ///
    /// ```
    /// use zcnet::tx::{SenderConfig, TrySendError, UdpSender};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// socket.connect(peer.local_addr()?)?;
    /// let mut tx = UdpSender::new(socket, SenderConfig::default());
    /// match tx.try_send(vec![1u8; 1000]) {
    ///     Ok(()) => {}
    ///     Err(TrySendError::WouldBlock(unsent)) => {
    ///         // wait until the sender's descriptor is writable, then:
    ///         tx.try_send_unsent(unsent)?;
    ///     }
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # let mut got = [0u8; 2000];
    /// # assert_eq!(peer.recv(&mut got)?, 1000);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_send<B: SendBuf>(&mut self, buf: B) -> Result<(), TrySendError<B>> {
        self.try_send_unsent(Unsent::new(Arc::new(buf), 0))
    }

    /// [`Sender::try_send`] for the part of a buffer an earlier send did not take.
    pub fn try_send_unsent<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
    ) -> Result<(), TrySendError<B>> {
        match self.engine_mut() {
            Path::Sendmsg(p) => p.try_send_unsent(unsent),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.queue_unsent(unsent, false),
        }
    }

    /// Reads the completions queued now (without waiting) and, on io_uring, submits what it can;
    /// returns the number of ids released.
    ///
    /// # Errors
    ///
    /// [`TxError`]: reading the error queue or the ring failed, a completion named an id the
    /// sender never registered ([`TxError::LostTrack`]), or (io_uring) a submitted send failed.
    pub fn poll_completions(&mut self) -> Result<u64, TxError> {
        on_path!(self.engine_mut(), p => p.poll_completions())
    }

    /// Waits up to `timeout` for at least one completion when ids are outstanding (for example when
    /// a [`BufferPool`] ran dry); returns the number of ids released. A timeout too long for the
    /// clock (`Duration::MAX`) waits without a deadline.
    ///
    /// # Errors
    ///
    /// As [`Sender::poll_completions`], and the failed wait (`poll`, `io_uring_enter`).
    pub fn wait_completions(&mut self, timeout: Duration) -> Result<u64, TxError> {
        on_path!(self.engine_mut(), p => p.wait_completions(timeout))
    }

    /// A free buffer of `pool`, reading completions (and, on io_uring, submitting queued sends)
    /// while the pool is dry: each completion that releases one of the pool's buffers puts it back.
    /// Waits at most `timeout`; fails with [`TxError::Timeout`] then, and at once when this sender
    /// holds none of its buffers — none queued, none lent — (every buffer is held elsewhere, so
    /// waiting on this sender cannot bring one back).
    ///
    /// # Errors
    ///
    /// [`TxError::Timeout`] as said above, or the error a completion read failed with.
    ///
    /// ```
    /// use std::time::Duration;
    /// use zcnet::tx::{BufferPool, PoolConfig, SenderConfig, TcpSender};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// # let (mut peer, _) = listener.accept()?;
    /// # let reader = std::thread::spawn(move || {
    /// #     let mut got = Vec::new();
    /// #     std::io::Read::read_to_end(&mut peer, &mut got).map(|_| got)
    /// # });
    /// let pool = BufferPool::new(PoolConfig::new(64 << 10, 4))?;
    /// let mut tx = TcpSender::new(stream, SenderConfig::default());
    /// for i in 0..16u8 {
    ///     // Four buffers serve sixteen sends: each comes back as its completion arrives.
    ///     let mut buf = tx.take_from(&pool, Duration::from_secs(5))?;
    ///     buf.fill_with(64 << 10, |bytes| bytes.fill(i));
    ///     tx.send(buf)?;
    /// }
    /// drop(tx.close(Duration::from_secs(5))?);
    /// # assert_eq!(reader.join().expect("reader")?.len(), 16 << 16);
    /// # Ok(())
    /// # }
    /// ```
    pub fn take_from(
        &mut self,
        pool: &BufferPool,
        timeout: Duration,
    ) -> Result<PooledBuf, TxError> {
        let start = Instant::now();
        loop {
            if let Some(buf) = pool.take() {
                return Ok(buf);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() || self.holds_nothing() {
                return Err(TxError::Timeout {
                    what: "a free pool buffer",
                    outstanding: self.outstanding(),
                    waited: start.elapsed(),
                });
            }
            self.wait_completions(left)?;
        }
    }

    /// io_uring CQEs handled so far (0 on `sendmsg`): what an event loop compares to tell whether a
    /// poll made progress.
    #[cfg(feature = "tokio")]
    pub(crate) fn ring_cqes(&self) -> u64 {
        match self.engine() {
            Path::Sendmsg(_) => 0,
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.cqes(),
        }
    }

    /// Whether no buffer sent through this sender is still queued or lent.
    pub(crate) fn holds_nothing(&self) -> bool {
        match self.engine() {
            Path::Sendmsg(p) => p.outstanding() == 0,
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.idle(),
        }
    }

    /// Submits what is queued and waits, up to `timeout`, until every request finished and every
    /// lent buffer is released. Fails with the first send error on the way (which hands back every
    /// buffer not sent), at once with the socket's error when `POLLERR` comes from a socket error
    /// (`sendmsg`: `SO_ERROR`, read and cleared) rather than a completion, and with
    /// [`TxError::LostTrack`] once a completion named an id the sender never registered (the
    /// buffers still lent then stay lent).
    ///
    /// # Errors
    ///
    /// [`TxError`]: a send error (its [`TxError::unsent`] buffers), the socket's error,
    /// [`TxError::Timeout`] when `timeout` passes first, [`TxError::LostTrack`].
    pub fn flush(&mut self, timeout: Duration) -> Result<(), TxError> {
        on_path!(self.engine_mut(), p => p.flush(timeout))
    }

    /// Ends the connection now, waiting for nothing: a TCP stream is reset (`SO_LINGER` 0), what
    /// io_uring still queued is dropped unsent, and the buffers still lent are leaked (counted in
    /// [`crate::tx::leaked`]). For a connection that has failed, or a peer not worth waiting for;
    /// [`Sender::close`] delivers what was sent and gives every buffer back.
    ///
    /// ```
    /// use zcnet::tx::{SenderConfig, TcpSender};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// # let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    /// # let _peer = listener.accept()?;
    /// let mut tx = TcpSender::new(stream, SenderConfig::default());
    /// tx.send(vec![0u8; 4096])?;
    /// tx.abort(); // the peer sees a reset; anything still lent is counted in tx::leaked()
    /// # Ok(())
    /// # }
    /// ```
    pub fn abort(mut self) {
        self.cut_short();
        self.end_now();
    }

    /// Flushes (bounded by `timeout`) and returns the socket, no longer owned by a sender. On
    /// failure the buffers still lent are leaked — never reused — and the error says how many; the
    /// ones still queued on io_uring, never submitted, come back inside it ([`TxError::Stopped`],
    /// [`TxError::unsent`]), and a TCP stream that then misses bytes is reset when the socket
    /// closes (`SO_LINGER` 0), never ended cleanly. A socket from the `sendmsg` path keeps
    /// `SO_ZEROCOPY` on, so a sender wrapping it again on that path copies (see [`Sender::new`]).
    ///
    /// # Errors
    ///
    /// As [`Sender::flush`]; the socket is then closed, not returned. The [`Sender::new`] example
    /// closes.
    pub fn close(mut self, timeout: Duration) -> Result<S, TxError> {
        if let Err(e) = self.flush(timeout) {
            let e = self.give_up(e);
            self.end_now();
            return Err(e);
        }
        let path = self.path.take().expect(PRESENT);
        Ok(on_path!(path, p => p.into_socket()))
    }

    /// Whether sends are queued and not cut short (io_uring; `sendmsg` queues nothing).
    fn unsent_queued(&self) -> bool {
        match self.engine() {
            Path::Sendmsg(_) => false,
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.unsent_queued(),
        }
    }

    /// How long a drop may wait for what is still queued, all of it together: the send timeout, or
    /// [`DROP_WAIT`] when it is unset.
    #[cfg(feature = "tokio")]
    pub(crate) fn drop_wait(&self) -> Duration {
        on_path!(self.engine(), p => p.send_timeout()).unwrap_or(DROP_WAIT)
    }

    /// The descriptor and events whose readiness means progress for what this sender holds (see
    /// the reaper).
    #[cfg(feature = "tokio")]
    pub(crate) fn reap_interest(&self) -> (BorrowedFd<'_>, i16) {
        self.engine().interest()
    }

    /// Reads completions and submits what is queued, without waiting; whether nothing is held.
    #[cfg(feature = "tokio")]
    pub(crate) fn reap_progress(&mut self) -> bool {
        self.engine_mut().progress()
    }

    /// Marks the stream as missing bytes the application gave (a dropped async sender could not
    /// send them): its close resets the connection ([`ZcSocket::reset_on_close`]), and the drop no
    /// longer waits for what is queued.
    pub(crate) fn cut_short(&mut self) {
        match self.engine_mut() {
            Path::Sendmsg(p) => {
                let _ = p.get_ref().reset_on_close();
            }
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.cut_short(),
        }
    }

    /// Ends the sender here, without the reaper: what io_uring still queues is never sent (a
    /// stream then missing bytes is reset), and what is lent is leaked.
    pub(crate) fn end_now(&mut self) {
        drop(self.path.take());
    }

    /// Ends a close whose flush failed with `e`: hands back, inside the error, the buffers queued
    /// and not yet submitted too (io_uring; `sendmsg` queues nothing). A stream that then misses
    /// bytes — those handed back, or what the ring has not sent yet — is cut short (see
    /// `cut_short`): the sender is being dropped, and its peer must not see a clean end.
    pub(crate) fn give_up(&mut self, e: TxError) -> TxError {
        let unsubmitted = self.take_unsubmitted();
        let e = e.handing_back(unsubmitted, []);
        if !e.unsent().is_empty() || self.unsent_queued() {
            self.cut_short();
        }
        e
    }

    /// Takes the buffers queued and not yet submitted (io_uring; none on `sendmsg`, which queues
    /// nothing), in order.
    fn take_unsubmitted(&mut self) -> Vec<UnsentBuf> {
        match self.engine_mut() {
            Path::Sendmsg(_) => Vec::new(),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.take_unsubmitted(),
        }
    }
}

const PRESENT: &str = "the path is present until the sender is closed, aborted or dropped";

impl<S: ZcSocket> Drop for Sender<S> {
    /// Hands what is still in flight to the reaper (see `# Drop` on [`Sender`]); ends it here,
    /// without waiting, when the reaper is full, and while unwinding from a panic.
    fn drop(&mut self) {
        let Some(mut path) = self.path.take() else {
            return;
        };
        // While unwinding, anything more could panic again, and abort. The io_uring path submits
        // nothing here: the kernel ties a request to the thread that submits it and cancels the
        // requests still waiting for the socket when that thread exits, so what is queued is
        // submitted by the reaper's thread, which lives as long as the process.
        let done = match &mut path {
            _ if std::thread::panicking() => true,
            Path::Sendmsg(p) => p.reap_step(),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.finished(),
        };
        if done {
            return;
        }
        // A refused hand-over gives the path back, to be dropped here.
        let _ = super::reaper::hand_over(Box::new(path));
    }
}

impl<S: ZcSocket> Reaped for Path<S> {
    fn interest(&self) -> (BorrowedFd<'_>, i16) {
        match self {
            // POLLERR (completions, a socket error) comes unasked.
            Path::Sendmsg(p) => (p.get_ref().fd(), 0),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => (p.ring_fd(), libc::POLLIN),
        }
    }

    fn progress(&mut self) -> bool {
        on_path!(self, p => p.reap_step())
    }

    fn bound(&self) -> Duration {
        on_path!(self, p => p.send_timeout()).unwrap_or(DROP_WAIT)
    }
}

/// Why a socket that cuts messages (AF_VSOCK seqpacket) is not sent on io_uring: io_uring makes
/// each send without waiting first (`IO_URING_F_NONBLOCK`), and such a call may enqueue part of a
/// message and fail (see [`ZcSocket::cuts_messages`]).
#[cfg(feature = "io-uring")]
fn whole_messages_fallback() -> Fallback {
    Fallback::declined(
        "io_uring tries each send without waiting first, and an AF_VSOCK seqpacket send that does \
         not wait may enqueue part of a message and fail",
        "sending with sendmsg, one call per message that waits in the kernel until the whole \
         message is enqueued",
    )
}

/// Why the sender fell back to `sendmsg`: the ring of `ring_entries` entries could not be set up.
#[cfg(feature = "io-uring")]
fn ring_setup_fallback(e: &std::io::Error, ring_entries: u32) -> Fallback {
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    let why = match errno {
        libc::EINVAL if ring_entries > MAX_RING_ENTRIES => format!(
            "SendPath::IoUring ring_entries {ring_entries} is more than a ring takes \
             ({MAX_RING_ENTRIES}, IORING_MAX_ENTRIES): choose at most that"
        ),
        // The rings are charged to the locked-memory limit of a user without CAP_IPC_LOCK, and
        // setup fails with ENOMEM when it is used up.
        libc::ENOMEM => "the rings are charged to locked memory and RLIMIT_MEMLOCK is used up: \
                         raise it (`ulimit -l`, limits.conf memlock) or run with CAP_IPC_LOCK"
            .to_string(),
        _ => {
            crate::probe::seccomp::io_uring_refusal("io_uring_setup", errno).unwrap_or_else(|| {
                "no io_uring here: kernel 6.0+ with kernel.io_uring_disabled=0 is needed"
                    .to_string()
            })
        }
    };
    // The remedy only: that sends go out through sendmsg is the fallback itself
    // (`Sender::path_status`), which a caller that refuses it (a bench measuring io_uring) must
    // not be made to claim.
    Fallback::refused("io_uring_setup", errno, why)
}

/// The `sendmsg` path's answer to a pool registration.
fn no_registration() -> Fallback {
    Fallback::requested(
        "the sendmsg path has no registered buffers (the kernel pins each send's pages): choose \
         SendPath::IoUring for fixed sends",
    )
}

impl<S: ZcSocket> AsFd for Sender<S> {
    /// The descriptor whose readiness means the sender can make progress, for an event loop to
    /// poll. `sendmsg`: the socket — `POLLOUT` says [`Sender::try_send`] may take more, `POLLERR`
    /// that completions (or a socket error) are queued for [`Sender::poll_completions`]. io_uring:
    /// the ring — `POLLIN` says CQEs (results, notifications) wait for
    /// [`Sender::poll_completions`], which also submits what is queued.
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self.engine() {
            Path::Sendmsg(p) => p.get_ref().fd(),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.ring_fd(),
        }
    }
}

impl<S: ZcSocket + std::fmt::Debug> std::fmt::Debug for Sender<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("path", &self.path())
            .field("path_status", &self.path_status)
            .field("socket", self.get_ref())
            .field("queued", &self.queued())
            .field("outstanding", &self.outstanding())
            .field("zerocopy", &self.zerocopy_status())
            .field("registration", &self.registration_status())
            .field("stats", self.stats())
            .finish()
    }
}

impl Sender<UdpSocket> {
    /// Corks the socket (`UDP_CORK`): the following sends append to one datagram, sent when the
    /// socket is uncorked (`false`). Zero-copy and copied pieces mix freely; each zero-copy piece
    /// still takes its own completion id. On io_uring, corking or uncorking first submits the
    /// queued sends and waits (bounded by the send timeout) until the kernel took them, so that
    /// each lands in the datagram it was sent for; a send error on the way is returned (handing
    /// back the buffers not sent) and the option left as it was.
    ///
    /// # Errors
    ///
    /// [`TxError`]: `setsockopt UDP_CORK` refused, or a queued send failed on the way.
    pub fn set_cork(&mut self, cork: bool) -> Result<(), TxError> {
        #[cfg(feature = "io-uring")]
        if let Path::IoUring(p) = self.engine_mut() {
            p.settle()?;
        }
        crate::sys::socket::set_int_option(
            self.get_ref().fd(),
            libc::SOL_UDP,
            libc::UDP_CORK,
            i32::from(cork),
        )
        .map_err(|source| TxError::SocketOption {
            option: "UDP_CORK",
            source,
        })?;
        match self.engine_mut() {
            Path::Sendmsg(p) => p.corked(cork),
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.corked(cork),
        }
        Ok(())
    }

    /// Sets the GSO segment size: every datagram longer than one segment — sent from now on — goes
    /// out as a train of up to 64 segments, split by the stack or the device (`sendmsg`: a
    /// `UDP_SEGMENT` control message on each send; io_uring: the `UDP_SEGMENT` socket option).
    /// `None` turns it off. Without it a datagram larger than the path MTU is fragmented, and the
    /// kernel copies it even with zero-copy (it zero-copies only data the device checksums).
    ///
    /// The kernel reads the socket option when a request is issued, so on io_uring this first
    /// submits the queued sends and waits (bounded by the send timeout) until the kernel took
    /// them, as [`Sender::set_cork`] does: each datagram goes out under the segment size in force
    /// when it was sent. A send error on the way is returned (handing back the buffers not sent)
    /// and the option left as it was.
    ///
    /// # Errors
    ///
    /// Only on io_uring ([`TxError::SocketOption`]: `setsockopt UDP_SEGMENT` refused, or a queued
    /// send failed on the way); on `sendmsg` the size rides on each send, and a size the kernel
    /// refuses fails those sends (`EINVAL`).
    pub fn set_gso_segment(&mut self, segment: Option<u16>) -> Result<(), TxError> {
        match self.engine_mut() {
            Path::Sendmsg(p) => {
                p.set_gso_segment(segment);
                Ok(())
            }
            #[cfg(feature = "io-uring")]
            Path::IoUring(p) => p.set_gso_segment(segment),
        }
    }

    /// Sends `buf` as one datagram (or one GSO train) to `dest`, on an unconnected socket; waits
    /// like [`Sender::send`]. The `sendmsg` path only: on io_uring it is refused with
    /// [`TxError::Unsupported`], and `buf` handed back.
    ///
    /// # Errors
    ///
    /// As [`Sender::send`]; [`TxError::Unsupported`] on the io_uring path.
    ///
    /// ```
    /// use zcnet::tx::{SenderConfig, UdpSender};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// # let dest = peer.local_addr()?;
    /// let mut tx = UdpSender::new(std::net::UdpSocket::bind("127.0.0.1:0")?, SenderConfig::default());
    /// tx.send_to(b"one datagram".to_vec(), dest)?;
    /// # let mut got = [0u8; 64];
    /// # let n = peer.recv(&mut got)?;
    /// # assert_eq!(&got[..n], b"one datagram");
    /// # Ok(())
    /// # }
    /// ```
    pub fn send_to<B: SendBuf>(&mut self, buf: B, dest: SocketAddr) -> Result<(), SendError<B>> {
        match self.engine_mut() {
            Path::Sendmsg(p) => p.send_to(buf, dest),
            #[cfg(feature = "io-uring")]
            Path::IoUring(_) => Err(no_send_to(Unsent::new(Arc::new(buf), 0))),
        }
    }

    /// [`Sender::send_to`] without waiting: when the socket's send buffer would not take the
    /// datagram now, hands it back ([`TrySendError::WouldBlock`]) to try again once the sender's
    /// descriptor ([`AsFd`]) is writable. The `sendmsg` path only, as `send_to`.
    ///
    /// # Errors
    ///
    /// As [`Sender::try_send`]; [`TxError::Unsupported`] on the io_uring path.
    pub fn try_send_to<B: SendBuf>(
        &mut self,
        buf: B,
        dest: SocketAddr,
    ) -> Result<(), TrySendError<B>> {
        self.try_send_datagram_to(Unsent::new(Arc::new(buf), 0), dest)
    }

    /// [`Sender::try_send_to`] of a datagram, as handed back by an earlier try.
    pub(crate) fn try_send_datagram_to<B: SendBuf>(
        &mut self,
        datagram: Unsent<B>,
        dest: SocketAddr,
    ) -> Result<(), TrySendError<B>> {
        match self.engine_mut() {
            Path::Sendmsg(p) => p.try_send_to(datagram, dest),
            #[cfg(feature = "io-uring")]
            Path::IoUring(_) => Err(TrySendError::Failed(no_send_to(datagram))),
        }
    }
}

/// The io_uring path's answer to a `send_to`: refused, the buffer handed back.
#[cfg(feature = "io-uring")]
fn no_send_to<B: SendBuf>(datagram: Unsent<B>) -> SendError<B> {
    SendError::new(
        TxError::Unsupported {
            what: "send_to",
            remedy: "connect the socket and send, or use SendPath::Sendmsg",
        },
        datagram,
    )
}
