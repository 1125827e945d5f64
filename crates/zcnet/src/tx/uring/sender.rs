//! The io_uring submission path of [`crate::tx::Sender`]: queue sends, decide each, submit them as
//! linked batches, and turn CQEs into completions of the shared tracker.

use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasherDefault;
use std::io;
use std::net::UdpSocket;
use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::plan::{MAX_REQUEST_LEN, Part, Planned, plan};
use super::stamps::Stamps;
use crate::Fallback;
use crate::sys::errqueue::enable_zerocopy;
use crate::sys::socket::{TcpSendState, get_int_option, set_int_option, tcp_send_state};
use crate::sys::uring::{
    MAX_REGISTERED_BYTES, SendEvent, SendKind, SendRequest, SendRing, Sequence, UserDataHasher,
    memlock_limit,
};
use crate::tx::budget::Charge;
use crate::tx::erased::{Erased, Queued, UnsentBuf};
use crate::tx::socket::present;
use crate::tx::{
    BufferPool, Completion, CompletionTracker, CopyReason, Decision, MemlockBudget, Mode, Policy,
    SendBuf, SendPath, SenderConfig, TxError, TxStats, ZcSocket,
};
use crate::tx::{SendError, TrySendError, Unsent};

/// The most bytes one chain submits (a single larger send goes alone), as the kernel's
/// io_uring_zerocopy_tx submits eight 64 KiB requests at a time. A chain of `batch` large sends
/// would lend that many buffers at once, and the next chain waits for the whole of it; over
/// loopback, where the kernel copies what it delivers, fewer lent buffers also stay in the CPU's
/// cache. Small sends (32 of 4 KiB) stay well below it. Sends queued behind the chain in flight
/// are submitted once they reach it too (see [`UringPath::next_chain_full`]).
const CHAIN_BYTES: usize = 512 << 10;

/// On TCP, a request ends a record (`MSG_EOR`) once this many bytes were submitted since the last
/// record end while at least as many are lent (their notifications not in). A request's bytes that
/// join the unsent segment of an earlier one stack its notification onto that request's (kernel
/// 6.10 and later), and a stacked run notifies only when its last skb is freed: without record
/// ends a sender keeping the socket busy would get its buffers back only when the socket drains.
/// A run of stacked notifications is all lent, so while less than this is lent no run holds more
/// back, and no record end is needed; once this much is lent, one ends the record at least every
/// this many bytes, and buffers come back at least that many at a time.
///
/// Each record end costs: over loopback under bbr on a VM, 65435-byte sends of one request each
/// ran at 0.47x `io_uring_zerocopy_tx` (in the same run) with one on every request, at 0.88x-0.90x
/// with one every MiB, and at 0.95x-0.97x with none. Over loopback, where delivery copies the data
/// and frees the sender's pages at once, notifications keep up and less than a MiB is lent.
const RECORD_BYTES: usize = 1 << 20;

/// `user_data` bit of copy requests; zero-copy requests carry their tracker id.
const COPY_TAG: u64 = 1 << 63;
/// Longest single wait, so that deadlines are checked.
const WAIT_SLICE: Duration = Duration::from_millis(100);

fn bytes_of(buf: &dyn Erased) -> &[u8] {
    buf.as_bytes()
}

/// One buffer queued for sending, until the kernel took all of it.
struct Pending {
    buf: Queued,
    /// The buffer's length, read once (its bytes cannot change while it is queued).
    len: usize,
    /// Bytes the kernel has taken.
    sent: usize,
    /// Copy the next request, for this reason (the kernel refused a zero-copy one).
    forced: Option<CopyReason>,
    /// How its next request sends, once decided.
    decision: Option<Decision>,
    /// The request in flight: its `user_data` and how it sends.
    request: Option<(u64, SendKind)>,
    done: bool,
}

impl Pending {
    /// `buf`, of `len` bytes, `sent` of them taken already.
    fn new(buf: Queued, len: usize, sent: usize) -> Self {
        Pending {
            len,
            buf,
            sent,
            forced: None,
            decision: None,
            request: None,
            done: false,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Bytes the kernel has not taken yet.
    fn left(&self) -> usize {
        self.len - self.sent
    }
}

/// What one zero-copy request holds until its notification besides its buffers, which the ring
/// keeps until the request's last CQE: the locked memory charged for its pages (none for a fixed
/// send) and how many bytes it sends.
struct Lending {
    /// Held, never read: dropping it gives the pages back to the budget.
    _charge: Option<Charge<'static>>,
    bytes: usize,
}

/// A failed request, and what the error hands back once its chain has finished.
struct Failure {
    zerocopy: bool,
    sent: usize,
    len: usize,
    errno: i32,
    unsent: Vec<UnsentBuf>,
}

/// The vectors one chain is planned in, kept by the sender from one chain to the next so that
/// starting a chain allocates only what borrows the queue.
#[derive(Default)]
struct Scratch {
    /// Each queued send of the chain as the planner sees it.
    parts: Vec<Part>,
    /// The chain's requests.
    planned: Vec<Planned>,
    /// Per request: its `user_data`, how it sends, whether it ends a record, and its parts' range.
    heads: Vec<(u64, SendKind, bool, Range<usize>)>,
}

/// What a wait loop waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Goal {
    /// Room for more sends: those queued behind the last chain no longer fill the next one.
    Room,
    /// Every queued send taken whole by the kernel (its result in; notifications may follow).
    Taken,
    /// Every request finished and every buffer back.
    Idle,
}

/// The io_uring path owning socket `S` (see [`super`]).
///
/// Sends are queued and submitted a chain at a time, `batch` sends or [`CHAIN_BYTES`] (and by
/// [`UringPath::poll_completions`], [`UringPath::wait_completions`], [`UringPath::flush`]). A request that fails ends the chain:
/// nothing queued after it is sent, and the error — from the next call, once the chain has finished
/// — hands back every buffer not wholly sent, in order ([`TxError::unsent`]); sends go on after
/// it with the buffers given from then on. No buffer is ever dropped unsent or sent twice.
///
/// Dropping a sender first hands the kernel what is still queued, waiting as a send does (see
/// the `Drop` impl); buffers still lent then stay lent forever (leaked, never reused, since the
/// kernel may still read them).
pub(crate) struct UringPath<S: ZcSocket> {
    ring: SendRing<dyn Erased>,
    /// Present until [`UringPath::close`] takes it.
    socket: Option<S>,
    /// One id per zero-copy request, holding what it lends.
    tracker: CompletionTracker<Lending>,
    /// Bytes of the zero-copy requests whose notification has not arrived.
    lent_bytes: usize,
    /// On TCP, the congestion window in bytes as last read (0 before the first read, `usize::MAX`
    /// once a read failed): a chain that would take the bytes lent past it reads it again, and is
    /// cut or waits if it still would ([`UringPath::window_room`]).
    window: usize,
    /// The next chain is held back for the window (counted once in [`TxStats::window_waits`]).
    window_held: bool,
    policy: Policy,
    stats: TxStats,
    batch: usize,
    send_timeout: Option<Duration>,
    zerocopy: Result<(), Fallback>,
    registration: Result<(), Fallback>,
    report_usage: bool,
    vectored_fixed: bool,
    /// A TCP socket: a request ends a record (`MSG_EOR`) every [`RECORD_BYTES`].
    tcp: bool,
    /// The path turned Nagle's algorithm off (`TCP_NODELAY`) and turns it on again when it hands
    /// the socket back.
    nagle_was_on: bool,
    /// Bytes submitted on TCP since the last request that ended a record.
    unrecorded: usize,
    /// Buffers not yet wholly taken, in order; the first `chain_len` were in the last chain.
    queue: VecDeque<Pending>,
    chain_len: usize,
    /// Bytes left in the buffers queued behind the last chain (`queue[chain_len..]`).
    waiting_bytes: usize,
    /// Requests of the last chain whose result has not arrived.
    chain_pending: usize,
    next_copy: u64,
    /// Ids of zero-copy requests that failed and will still notify: their notification releases the
    /// buffer without counting as a completion.
    failed: HashSet<u32, BuildHasherDefault<UserDataHasher>>,
    /// The CQEs of the last [`UringPath::reap`], kept for the next one's (empty between them).
    events: Vec<SendEvent>,
    /// The vectors [`UringPath::start_chain`] fills for each chain, kept for the next one.
    scratch: Scratch,
    /// The first request of the chain that failed: set from its result, handed out (with every
    /// buffer not sent) once the chain has finished.
    failure: Option<Failure>,
    /// The stream misses bytes given to the sender ([`UringPath::cut_short`]): the drop does not
    /// wait for the queue, and the socket's close resets the connection.
    cut_short: bool,
    /// With [`SenderConfig::timestamps`], where the socket and the kernel take them: the
    /// socket's transmit timestamps joined to its requests.
    stamps: Option<Stamps>,
    /// CQEs handled so far: an event loop's measure of progress.
    #[cfg(feature = "tokio")]
    cqes: u64,
}

impl<S: ZcSocket> UringPath<S> {
    /// A new ring of `ring_entries` submission entries (at least 2) for [`UringPath::new`]; fails
    /// when io_uring itself is unavailable.
    pub(crate) fn ring(ring_entries: u32) -> io::Result<SendRing<dyn Erased>> {
        SendRing::new(ring_entries.max(2), bytes_of)
    }

    /// Wraps connected `socket` with `ring`. Unless the mode is [`Mode::Copy`], zero-copy needs
    /// `IORING_OP_SEND_ZC`, and on a socket that asks for it (AF_VSOCK,
    /// [`ZcSocket::send_zc_needs_so_zerocopy`]) `SO_ZEROCOPY`; without them the path copies and
    /// [`UringPath::zerocopy_status`] says why.
    pub(crate) fn new(
        socket: S,
        ring: SendRing<dyn Erased>,
        config: &SenderConfig,
        batch: u32,
    ) -> Self {
        let zerocopy = if config.policy.mode == Mode::Copy {
            Err(Fallback::requested("choose mode zerocopy or auto"))
        } else {
            match ring.zero_copy_opcodes() {
                Ok(ops) if ops.send_zc => Ok(()),
                Ok(_) => Err(Fallback::observed(
                    "IORING_OP_SEND_ZC is missing from IORING_REGISTER_PROBE",
                    "kernel 6.0 or later has it: sending by copy",
                )),
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    let why = crate::probe::seccomp::io_uring_refusal("io_uring_register", errno);
                    Err(Fallback::refused(
                        "io_uring_register IORING_REGISTER_PROBE",
                        errno,
                        why.map_or("sending by copy".into(), |why| {
                            format!("{why}; sending by copy")
                        }),
                    ))
                }
            }
        };
        // The socket's own opt-in, where the kernel asks for it (AF_VSOCK): io_uring's requests
        // carry their notification, so no error-queue completion follows from it.
        let zerocopy = match zerocopy {
            Ok(()) if socket.send_zc_needs_so_zerocopy() => {
                enable_zerocopy(socket.fd()).map_err(|e| {
                    Fallback::refused(
                        "setsockopt SO_ZEROCOPY",
                        e.raw_os_error().unwrap_or(libc::EIO),
                        "sending by copy",
                    )
                })
            }
            other => other,
        };
        let tcp = get_int_option(socket.fd(), libc::SOL_SOCKET, libc::SO_PROTOCOL)
            .is_ok_and(|protocol| protocol == libc::IPPROTO_TCP);
        // Nagle's algorithm off while the path owns a TCP socket (see the module docs), and back on
        // when it hands the socket back, if it was on.
        let nagle_was_on = tcp
            && get_int_option(socket.fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY)
                .is_ok_and(|on| on == 0)
            && set_int_option(socket.fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1).is_ok();
        let stamps = config.timestamps.then(|| Stamps::new(&socket)).flatten();
        UringPath {
            ring,
            socket: Some(socket),
            tracker: CompletionTracker::new(0),
            lent_bytes: 0,
            window: 0,
            window_held: false,
            policy: Policy::new(config.policy),
            stats: TxStats::default(),
            batch: batch.max(1) as usize,
            send_timeout: config.send_timeout,
            zerocopy,
            registration: Err(Fallback::requested(
                "register a BufferPool (register_pool) for fixed sends",
            )),
            report_usage: true,
            vectored_fixed: true,
            tcp,
            nagle_was_on,
            unrecorded: 0,
            queue: VecDeque::new(),
            chain_len: 0,
            waiting_bytes: 0,
            chain_pending: 0,
            next_copy: 0,
            failed: HashSet::default(),
            events: Vec::new(),
            scratch: Scratch::default(),
            failure: None,
            cut_short: false,
            stamps,
            #[cfg(feature = "tokio")]
            cqes: 0,
        }
    }

    /// The socket.
    pub(crate) fn get_ref(&self) -> &S {
        present(&self.socket)
    }

    /// Whether zero-copy requests are used, or why not.
    pub(crate) fn zerocopy_status(&self) -> Result<(), &Fallback> {
        self.zerocopy.as_ref().map(|_| ())
    }

    /// This path as configured.
    pub(crate) fn send_path(&self) -> SendPath {
        SendPath::IoUring {
            batch: self.batch as u32,
            ring_entries: self.ring.entries() as u32,
        }
    }

    /// The ring's descriptor (readable while CQEs wait).
    pub(crate) fn ring_fd(&self) -> BorrowedFd<'_> {
        self.ring.fd()
    }

    /// CQEs handled so far.
    #[cfg(feature = "tokio")]
    pub(crate) fn cqes(&self) -> u64 {
        self.cqes
    }

    /// Buffers queued and not yet wholly taken.
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Nothing queued, nothing lent.
    pub(crate) fn idle(&self) -> bool {
        self.queue.is_empty() && self.tracker.outstanding() == 0
    }

    /// Whether a pool is registered (fixed sends), or why not.
    pub(crate) fn registration_status(&self) -> Result<(), &Fallback> {
        self.registration.as_ref().map(|_| ())
    }

    /// The counters so far (ids are zero-copy requests; copied ones per `REPORT_USAGE`).
    pub(crate) fn stats(&self) -> &TxStats {
        &self.stats
    }

    /// Zero-copy ids whose notification has not arrived (their buffers are lent).
    pub(crate) fn outstanding(&self) -> usize {
        self.tracker.outstanding()
    }

    /// Registers `pool`'s buffers with the ring (`IORING_REGISTER_BUFFERS`): its buffers then go out as
    /// fixed sends, without pinning pages per request. On failure — `ENOMEM` when the pinned pages
    /// exceed `RLIMIT_MEMLOCK` — the reason names the limit and what to raise, and sends go on with
    /// unregistered buffers (copied when the kernel refuses them).
    ///
    /// A pool on huge pages is declined, and its sends go unregistered: the kernel registers a
    /// huge page as one piece, and a fixed send from it charges the socket (`io_sg_from_iter`) the
    /// bytes from the page's start to the send's end, page-aligned, instead of the bytes sent. A
    /// 64 KiB send 2 MiB into a huge page is charged about 2 MiB, so the socket's send buffer
    /// holds two or three sends, and the sender stalls on it (over loopback on kernel 6.18, 64 KiB
    /// sends from such a pool ran at 0.077x `io_uring_zerocopy_tx` registered, 0.866x declined).
    /// An unregistered send pins the pages it covers and is charged its own bytes.
    pub(crate) fn register_pool(&mut self, pool: &BufferPool) -> Result<(), Fallback> {
        if pool.huge_pages().is_ok() {
            self.registration = Err(Fallback::declined(
                "a pool on huge pages is not registered: a fixed send from a huge page is \
                 charged to the socket from the page's start, up to 2 MiB for 64 KiB, which \
                 stalls the sender on its send buffer",
                "sending from unregistered buffers, pinned per send; for fixed sends, build the \
                 pool without huge_pages",
            ));
            return self.registration.clone();
        }
        self.registration = match self.ring.register(pool.arena()) {
            Ok(()) => Ok(()),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                let pool_kib = (pool.buf_size() * pool.capacity()) >> 10;
                let remedy = match errno {
                    libc::ENOMEM => format!(
                        "pinning the pool's {pool_kib} KiB exceeds RLIMIT_MEMLOCK ({}): raise it \
                         (ulimit -l, LimitMEMLOCK= in a systemd unit, memlock in \
                         /etc/security/limits.conf) or grant CAP_IPC_LOCK; sending from \
                         unregistered buffers, by copy when the kernel refuses them",
                        describe_memlock()
                    ),
                    libc::EBUSY => "a pool is registered already".to_string(),
                    libc::EINVAL => format!(
                        "at most {} MiB register as one buffer: use a smaller pool",
                        MAX_REGISTERED_BYTES >> 20
                    ),
                    _ => "sending from unregistered buffers".to_string(),
                };
                Err(Fallback::refused(
                    "io_uring_register IORING_REGISTER_BUFFERS",
                    errno,
                    remedy,
                ))
            }
        };
        self.registration.clone()
    }

    /// Queues the rest of `unsent` for sending: on a stream socket as one byte run in order (one
    /// longer than a request carries goes out in several, in order), on a datagram socket as one
    /// datagram (or one GSO train). The buffer stays lent until the kernel took it and, for a
    /// zero-copy request, until its notification. Submits when the sends waiting fill a chain
    /// (`batch` sends or [`CHAIN_BYTES`], [`UringPath::next_chain_full`]); with `wait`, waits
    /// (bounded by the send timeout) for the previous chain to finish first, until they no longer
    /// do, without it stops with [`TrySendError::WouldBlock`] when a chain's worth waits already.
    ///
    /// Every error hands the buffer back, not queued: the error of an earlier request (with the
    /// earlier buffers not wholly sent inside it, [`TxError::unsent`]), a datagram longer than one
    /// request carries ([`TxError::TooLong`]), a timeout or a failed `io_uring_enter` while it was
    /// still waiting to be submitted. Once submitted it is taken: a later failure of its request
    /// hands it back from a later call.
    pub(crate) fn queue_unsent<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
        wait: bool,
    ) -> Result<(), TrySendError<B>> {
        let (buf, sent) = unsent.into_parts();
        if !wait {
            self.reap();
        }
        if let Some(failure) = self.take_failure() {
            let e = SendError::new(self.send_error(failure), Unsent::new(buf, sent));
            return Err(TrySendError::Failed(e));
        }
        let len = buf.as_bytes().len();
        if !self.get_ref().is_stream() && len > MAX_REQUEST_LEN {
            let e = TxError::TooLong {
                len,
                max: MAX_REQUEST_LEN,
            };
            return Err(TrySendError::Failed(SendError::new(
                e,
                Unsent::new(buf, sent),
            )));
        }
        if !wait && self.next_chain_full() {
            if let Err(e) = self.start_chain() {
                return Err(TrySendError::Failed(SendError::new(
                    e,
                    Unsent::new(buf, sent),
                )));
            }
            if self.next_chain_full() {
                return Err(TrySendError::WouldBlock(Unsent::new(buf, sent)));
            }
        }
        // Moved, not cloned (a reference count costs two atomic operations per send): a failure
        // below finds it again by its address.
        let address = Arc::as_ptr(&buf).cast::<()>();
        let pending = Pending::new(buf as Queued, len, sent);
        self.waiting_bytes = self.waiting_bytes.saturating_add(pending.left());
        self.queue.push_back(pending);
        if !self.next_chain_full() {
            return Ok(());
        }
        let result = if wait {
            self.run_until(Goal::Room, self.send_timeout, "send")
        } else {
            self.start_chain()
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) => match self.hand_back::<B>(e, address) {
                Some((e, unsent)) => Err(TrySendError::Failed(SendError::new(e, unsent))),
                // Submitted: the kernel has it; the queue entries left unsubmitted by a failed
                // `io_uring_enter` are submitted by the next call.
                None => Ok(()),
            },
        }
    }

    /// Takes the last buffer queued, a `B` at `address`, back out of the queue — or out of `error`,
    /// which gathered it with the other buffers a failed chain left unsent — unless it was
    /// submitted; returns the error (without it) and the buffer with the bytes of it sent.
    fn hand_back<B: SendBuf>(
        &mut self,
        mut error: TxError,
        address: *const (),
    ) -> Option<(TxError, Unsent<B>)> {
        let ours = |q: &Queued| std::ptr::addr_eq(Arc::as_ptr(q), address);
        let last = if self.queue.len() > self.chain_len
            && let Some(last) = self.queue.back()
            && ours(&last.buf)
            && last.request.is_none()
        {
            let last = self.queue.pop_back().expect("the last buffer");
            self.waiting_bytes = self.waiting_bytes.saturating_sub(last.left());
            UnsentBuf::new(last.buf, last.sent)
        } else if let TxError::Send { unsent, .. } = &mut error
            && unsent.last().is_some_and(|u| ours(u.queued()))
        {
            unsent.pop().expect("the last buffer")
        } else {
            return None;
        };
        let unsent = last
            .downcast::<B>()
            .unwrap_or_else(|_| unreachable!("the buffer at that address is a B"));
        Some((error, unsent))
    }

    /// Submits every queued send and waits, bounded by the send timeout, until the kernel took
    /// each (its result arrived); returns the first send error on the way.
    pub(crate) fn settle(&mut self) -> Result<(), TxError> {
        self.run_until(Goal::Taken, self.send_timeout, "send")
    }

    /// Reads the completions queued now (without waiting) and submits what it can; returns the
    /// number of ids released.
    pub(crate) fn poll_completions(&mut self) -> Result<u64, TxError> {
        let released = self.reap();
        self.start_chain()?;
        match self.take_failure() {
            Some(failure) => Err(self.send_error(failure)),
            None => Ok(released),
        }
    }

    /// One step of a dropped sender's wait in the reaper, never waiting: reads the CQEs queued now
    /// and submits what is queued; whether nothing is queued or in flight anymore. A failed send
    /// ends the stream there: what it hands back was never submitted and is dropped, and the
    /// socket's close resets the connection; the wait goes on for what is in flight.
    pub(crate) fn reap_step(&mut self) -> bool {
        if self.poll_completions().is_err() {
            self.cut_short();
        }
        self.finished()
    }

    /// Nothing queued, no request in flight.
    pub(crate) fn finished(&self) -> bool {
        self.queue.is_empty() && self.ring.in_flight() == 0
    }

    /// Submits what is queued and waits up to `timeout` until at least one id is released (for
    /// example when a [`BufferPool`] ran dry) or nothing is lent; returns the number released.
    pub(crate) fn wait_completions(&mut self, timeout: Duration) -> Result<u64, TxError> {
        // A timeout too long for the clock to reach has no deadline.
        let deadline = Instant::now().checked_add(timeout);
        let mut released = 0;
        loop {
            released += self.reap();
            self.start_chain()?;
            if let Some(failure) = self.take_failure() {
                return Err(self.send_error(failure));
            }
            let idle = self.idle();
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            if released > 0 || idle || left.is_zero() {
                return Ok(released);
            }
            self.ring
                .wait(1, Some(left.min(WAIT_SLICE)))
                .map_err(|source| TxError::Enter { source })?;
        }
    }

    /// Submits everything and waits, up to `timeout`, until every request finished and every lent
    /// buffer is released; returns the first send error seen on the way.
    pub(crate) fn flush(&mut self, timeout: Duration) -> Result<(), TxError> {
        self.run_until(Goal::Idle, Some(timeout), "flush")
    }

    /// Takes the buffers queued and not yet submitted out of the queue, in order (for a close whose
    /// flush failed, which hands them back rather than dropping them with the sender).
    pub(crate) fn take_unsubmitted(&mut self) -> Vec<UnsentBuf> {
        self.waiting_bytes = 0;
        self.queue
            .drain(self.chain_len..)
            .map(|p| UnsentBuf::new(p.buf, p.sent))
            .collect()
    }

    /// The bound of a send's waits, when there is one.
    pub(crate) fn send_timeout(&self) -> Option<Duration> {
        self.send_timeout
    }

    /// Whether sends are queued on a stream not yet cut short: dropping the path now would leave
    /// them unsent (see the `Drop` impl).
    pub(crate) fn unsent_queued(&self) -> bool {
        self.socket.is_some() && !self.queue.is_empty() && !self.cut_short
    }

    /// Marks the stream as missing bytes given to the sender: the drop no longer waits for what is
    /// queued, and the socket's close tells the peer the stream was cut
    /// ([`ZcSocket::reset_on_close`]; a failure to set that leaves a clean close).
    pub(crate) fn cut_short(&mut self) {
        self.cut_short = true;
        if let Some(socket) = &self.socket {
            let _ = socket.reset_on_close();
        }
    }

    /// The socket, no longer owned (for [`crate::tx::Sender::close`], after a flush), with Nagle's
    /// algorithm on again if it was when the path took it, and transmit timestamps off if the
    /// path turned them on.
    pub(crate) fn into_socket(mut self) -> S {
        // The command names the socket's descriptor: it ends before the socket is handed back.
        let stamped = self.stamps.take().is_some();
        let socket = self.socket.take().expect("taken once");
        if stamped {
            // A failure leaves stamps coming to an error queue nobody reads but the caller.
            let _ = crate::sys::timestamping::disable(socket.fd());
        }
        if self.nagle_was_on {
            // Everything was flushed: nothing is left for the option to delay. A failure leaves
            // Nagle's algorithm off, which only sends short segments sooner.
            let _ = set_int_option(socket.fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 0);
        }
        socket
    }

    fn run_until(
        &mut self,
        goal: Goal,
        timeout: Option<Duration>,
        what: &'static str,
    ) -> Result<(), TxError> {
        // The clock is read once there is something to wait for: most calls reach their goal
        // without waiting, or after one wait.
        let mut started: Option<Instant> = None;
        loop {
            self.reap();
            self.start_chain()?;
            let failed = self.failure.is_some() && self.chain_pending == 0;
            let reached = match goal {
                Goal::Room => !self.next_chain_full() || failed,
                Goal::Taken => self.queue.is_empty() || failed,
                Goal::Idle => self.queue.is_empty() && self.ring.in_flight() == 0,
            };
            if reached {
                return match self.take_failure() {
                    Some(failure) => Err(self.send_error(failure)),
                    None => Ok(()),
                };
            }
            let slice = match timeout {
                Some(t) => {
                    let waited = match started {
                        Some(start) => start.elapsed(),
                        None => {
                            started = Some(Instant::now());
                            Duration::ZERO
                        }
                    };
                    let left = t.saturating_sub(waited);
                    if left.is_zero() {
                        return Err(TxError::Timeout {
                            what,
                            outstanding: self.ring.in_flight(),
                            waited,
                        });
                    }
                    left.min(WAIT_SLICE)
                }
                None => WAIT_SLICE,
            };
            self.ring
                .wait(1, Some(slice))
                .map_err(|source| TxError::Enter { source })?;
        }
    }

    fn decide(policy: &mut Policy, zerocopy: &Result<(), Fallback>, len: usize) -> Decision {
        match policy.decide(len) {
            Decision::ZeroCopy if zerocopy.is_err() => Decision::Copy(CopyReason::Unsupported),
            d => d,
        }
    }

    /// The failure of the last chain, once that chain has finished (its buffers then gathered).
    fn take_failure(&mut self) -> Option<Failure> {
        if self.chain_pending > 0 {
            return None;
        }
        self.failure.take()
    }

    fn send_error(&self, failure: Failure) -> TxError {
        TxError::Send {
            call: if failure.zerocopy {
                "IORING_OP_SEND_ZC"
            } else {
                "IORING_OP_SEND"
            },
            socket: S::NAME,
            zerocopy: failure.zerocopy,
            sent: failure.sent,
            len: failure.len,
            source: io::Error::from_raw_os_error(failure.errno),
            unsent: failure.unsent,
        }
    }

    /// Submits the next chain of queued sends when the last chain has finished and none failed. Up
    /// to `batch` sends are decided, and [`plan`] cuts them into requests the kernel takes whole (a
    /// stream request gathers a run of sends decided alike; a send longer than a request carries is
    /// split, ending the chain); the requests are linked, so they run in order, as many as the
    /// submission queue and the completion queue's room allow. They are queued all or none: a
    /// refused chain leaves no request queued and no id taken.
    fn start_chain(&mut self) -> Result<(), TxError> {
        if self.chain_pending > 0 || self.failure.is_some() {
            return Ok(());
        }
        let chain_bytes = match self.window_room() {
            Some(0) => return Ok(()),
            Some(room) => room.min(CHAIN_BYTES),
            None => CHAIN_BYTES,
        };
        // A chain short of a full one goes out because the caller waits (for a pool buffer, a
        // flush): its last send goes in a request of its own. A request's one notification comes
        // once its last segment is acknowledged, and a receiver may hold the ACK of a lone short
        // segment until its delayed-ACK timer fires (40 ms or more): a small pool gathered whole
        // into one request got its buffers back that late, every time it ran dry. Ended apart,
        // the buffers before the last come back once the segments after them arrive, which a
        // receiver acknowledges at once.
        let last_apart = !self.next_chain_full();
        let room = self
            .ring
            .entries()
            .saturating_sub(self.ring.in_flight())
            .min(self.ring.sq_space());
        // Up to `batch` sends, and no more than `chain_bytes` of them past the first.
        let mut bytes = 0usize;
        let take = self
            .queue
            .iter()
            .take(self.batch)
            .take_while(|p| {
                let first = bytes == 0;
                bytes = bytes.saturating_add(p.left());
                first || bytes <= chain_bytes
            })
            .count();
        for p in self.queue.range_mut(..take) {
            if p.decision.is_none() {
                let left = p.left();
                let decision = match p.forced.take() {
                    Some(reason) => Decision::Copy(reason),
                    None => Self::decide(&mut self.policy, &self.zerocopy, left),
                };
                p.decision = Some(decision);
            }
        }
        let socket = self
            .socket
            .as_ref()
            .expect("the socket is present until close()");
        let Scratch {
            parts,
            planned,
            heads,
        } = &mut self.scratch;
        parts.clear();
        parts.extend(self.queue.range(..take).map(|p| Part {
            left: p.left(),
            zc: p.decision == Some(Decision::ZeroCopy),
        }));
        plan(parts, socket.is_stream(), last_apart, room, planned);
        let Some(last) = planned.last() else {
            return Ok(());
        };
        let chain_len = last.parts.end;
        heads.clear();
        // The parts of every request, one after the other.
        let mut ranges: Vec<(&Queued, Range<usize>)> = Vec::with_capacity(chain_len);
        let mut unrecorded = self.unrecorded;
        let mut lent_bytes = self.lent_bytes;
        let mut memlock_copies = Vec::new();
        let zero_copy = SendKind::ZeroCopy {
            report_usage: self.report_usage,
            vectored_fixed: self.vectored_fixed,
        };
        for request in planned.iter() {
            let last_index = request.parts.end - 1;
            let first = ranges.len();
            ranges.extend((request.parts.clone()).map(|i| {
                let p = &self.queue[i];
                let end = if i == last_index {
                    p.sent + request.last_take
                } else {
                    p.len()
                };
                (&p.buf, p.sent..end)
            }));
            let range = &ranges[first..];
            let bytes = range.iter().map(|(_, r)| r.len()).sum::<usize>();
            // A fixed send pins nothing more; any other takes its pages from the budget, or is
            // copied when the budget has no room for them.
            let lending = if !parts[request.parts.start].zc {
                None
            } else if self.ring.sends_fixed(range, zero_copy) {
                Some(Lending {
                    _charge: None,
                    bytes,
                })
            } else {
                let charge = MemlockBudget::global().try_charge(bytes);
                if charge.is_none() {
                    memlock_copies.push(request.parts.clone());
                }
                charge.map(|charge| Lending {
                    _charge: Some(charge),
                    bytes,
                })
            };
            let (user_data, kind) = match lending {
                Some(lending) => {
                    lent_bytes += bytes;
                    (u64::from(self.tracker.register(lending)), zero_copy)
                }
                None => {
                    self.next_copy += 1;
                    (COPY_TAG | self.next_copy, SendKind::Copy)
                }
            };
            unrecorded += bytes;
            let end_of_record =
                self.tcp && unrecorded >= RECORD_BYTES && lent_bytes >= RECORD_BYTES;
            if end_of_record {
                unrecorded = 0;
            }
            heads.push((user_data, kind, end_of_record, first..ranges.len()));
        }
        let requests: Vec<SendRequest<'_, dyn Erased>> = heads
            .iter()
            .enumerate()
            .map(|(k, (user_data, kind, end_of_record, parts))| SendRequest {
                user_data: *user_data,
                parts: &ranges[parts.clone()],
                kind: *kind,
                sequence: Sequence {
                    link: k + 1 < planned.len(),
                    end_of_record: *end_of_record,
                },
            })
            .collect();
        if let Some(stamps) = &mut self.stamps {
            stamps.submitting();
        }
        if let Err(source) = self.ring.push_chain(socket.fd(), &requests) {
            // Nothing was queued: give the ids back, newest first (their charges go back to the
            // budget, and the next chain charges again).
            for &(user_data, ..) in heads.iter().rev() {
                if user_data & COPY_TAG == 0 {
                    self.tracker.cancel_last();
                }
            }
            return Err(TxError::Enter { source });
        }
        drop(requests);
        drop(ranges);
        for parts in memlock_copies {
            for p in self.queue.range_mut(parts) {
                p.decision = Some(Decision::Copy(CopyReason::Memlock));
            }
        }
        for (request, &(user_data, kind, ..)) in planned.iter().zip(heads.iter()) {
            for p in self.queue.range_mut(request.parts.clone()) {
                p.request = Some((user_data, kind));
            }
        }
        self.chain_pending = planned.len();
        self.unrecorded = unrecorded;
        self.lent_bytes = lent_bytes;
        self.chain_len = chain_len;
        self.count_waiting();
        match self.ring.submit() {
            Ok(_) => {}
            // The completion queue is backed up: the entries stay queued for the next enter.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {}
            Err(source) => return Err(TxError::Enter { source }),
        }
        Ok(())
    }

    /// Handles every CQE queued now; returns the ids released.
    fn reap(&mut self) -> u64 {
        let mut events = std::mem::take(&mut self.events);
        self.ring.reap(|e| events.push(e));
        #[cfg(feature = "tokio")]
        {
            self.cqes += events.len() as u64;
        }
        let mut released = 0;
        for event in events.drain(..) {
            match event {
                SendEvent::Notif { user_data, copied } if user_data & COPY_TAG == 0 => {
                    let id = user_data as u32;
                    if self.failed.remove(&id) {
                        // A failed request sent nothing from its pages: release, count nothing.
                        released += u64::from(self.withdraw(id));
                        continue;
                    }
                    let mut returned = 0;
                    let ids = self.tracker.complete(
                        Completion {
                            lo: id,
                            hi: id,
                            copied,
                        },
                        |lending| returned += lending.bytes,
                    );
                    self.lent_bytes -= returned;
                    self.policy.on_completion(copied, ids);
                    released += ids;
                    if let Some(stamps) = &mut self.stamps {
                        stamps.completed(Completion {
                            lo: id,
                            hi: id,
                            copied,
                        });
                    }
                }
                SendEvent::Notif { .. } => {}
                SendEvent::Result {
                    user_data,
                    res,
                    notif_follows,
                } => self.on_result(user_data, res, notif_follows),
            }
        }
        self.events = events;
        if let Some(stamps) = &mut self.stamps {
            stamps.settle(&mut self.stats.latency);
        }
        if self.chain_pending == 0 && self.chain_len > 0 {
            // The sends taken whole lead the queue (a request that came up short cancelled those
            // after it): pop them, and drop any other only if one exists.
            let mut chain_left = self.chain_len;
            while self.queue.front().is_some_and(|p| p.done) {
                self.queue.pop_front();
                chain_left -= 1;
            }
            if self.queue.range(..chain_left).any(|p| p.done) {
                self.queue.retain(|p| !p.done);
            }
            if let Some(failure) = &mut self.failure {
                // A request failed: the rest of its chain was cancelled, and nothing after it may
                // go out (a stream would skip its unsent bytes). Every buffer not wholly sent goes
                // back with the error, in order.
                let unsent = self.queue.drain(..).map(|p| UnsentBuf::new(p.buf, p.sent));
                failure.unsent.extend(unsent);
            }
            self.chain_len = 0;
            self.count_waiting();
        }
        if self.tracker.outstanding() == 0 {
            self.policy.on_drained();
        }
        self.stats.set_tracker(self.tracker.counts());
        self.policy.report(&mut self.stats);
        released
    }

    fn on_result(&mut self, user_data: u64, res: Result<usize, i32>, notif_follows: bool) {
        let zc = user_data & COPY_TAG == 0;
        if zc && !notif_follows {
            // The kernel never took the pages. (A request refused at submission may still post a
            // notification; it then matches nothing and counts as an ignored id.)
            self.withdraw(user_data as u32);
        } else if zc && res.is_err() {
            self.failed.insert(user_data as u32);
        }
        let ours = |p: &Pending| p.request.is_some_and(|(u, _)| u == user_data);
        let Some(first) = self.queue.iter().take(self.chain_len).position(ours) else {
            return;
        };
        let parts = first..first + self.queue.range(first..).take_while(|p| ours(p)).count();
        self.chain_pending -= 1;
        let decision = self.queue[first]
            .decision
            .expect("a submitted send was decided");
        let kind = self.queue[first].request.map(|(_, kind)| kind);
        for p in self.queue.range_mut(parts.clone()) {
            p.request = None;
            // Whatever is left is decided again when it is resubmitted.
            p.decision = None;
        }
        let mut forced = None;
        match res {
            Ok(n) => {
                self.count_send(decision, n);
                if let Some(stamps) = &mut self.stamps {
                    // A request whose pages the kernel never took notifies nothing.
                    let id = (zc && notif_follows).then_some(user_data as u32);
                    stamps.sent(n, id, &mut self.stats.latency);
                }
                let mut left = n;
                for p in self.queue.range_mut(parts.clone()) {
                    let took = p.left().min(left);
                    p.sent += took;
                    left -= took;
                    p.done = p.sent == p.len();
                }
                if !self.queue[parts.end - 1].done {
                    self.stats.partial_sends += 1;
                }
            }
            Err(libc::ECANCELED) => {}
            Err(libc::ENOBUFS | libc::ENOMEM) if zc => {
                forced = Some(CopyReason::Enobufs);
                self.stats.enobufs += 1;
                self.policy.on_enobufs();
            }
            Err(libc::EOPNOTSUPP) if zc => {
                forced = Some(CopyReason::Unsupported);
                self.zerocopy = Err(Fallback::refused(
                    "IORING_OP_SEND_ZC",
                    libc::EOPNOTSUPP,
                    "this socket has no zero-copy send: sending by copy",
                ));
            }
            // A kernel before 6.15 refuses fixed vectored sends: send them unregistered. (Each
            // request of a chain refused at submission says so, all asked the same way.)
            Err(libc::EINVAL)
                if parts.len() > 1
                    && matches!(
                        kind,
                        Some(SendKind::ZeroCopy {
                            vectored_fixed: true,
                            ..
                        })
                    ) =>
            {
                self.vectored_fixed = false;
            }
            // A kernel before 6.2 refuses IORING_SEND_ZC_REPORT_USAGE: go on without it.
            Err(libc::EINVAL)
                if matches!(
                    kind,
                    Some(SendKind::ZeroCopy {
                        report_usage: true,
                        ..
                    })
                ) =>
            {
                self.report_usage = false;
            }
            Err(errno) => {
                let p = &self.queue[first];
                let failure = Failure {
                    zerocopy: zc,
                    sent: p.sent,
                    len: p.len(),
                    errno,
                    unsent: Vec::new(),
                };
                self.failure.get_or_insert(failure);
            }
        }
        if forced.is_some() {
            for p in self.queue.range_mut(parts) {
                p.forced = forced;
            }
        }
    }

    /// On TCP while something is in flight, the bytes the next chain may carry so that what is
    /// lent stays within the connection's congestion window (see [`super`]); 0 holds the chain
    /// back until notifications bring the lent bytes down (one is due) or the window grows. `None`
    /// when nothing limits the chain but [`CHAIN_BYTES`]: not TCP, nothing in flight, or the
    /// peer's receive window is what limits the connection (`tcpi_snd_wnd` below the congestion
    /// window), where the socket's send buffer holds what the peer is not yet reading, as it
    /// does for any writer (a sender held to the window would wait for a peer that does not read
    /// until it has written too). A chain is cut to the room left rather than held whole, so a
    /// window smaller than a chain never leaves the path sending a chain at a time.
    ///
    /// Holding to twice the window lost what holding to it gains: in the same paired trials,
    /// 65435-byte sends ran at 0.89x the selftest from one buffer and 0.82x from a pool so, and at
    /// 1.10x and 1.00x held to the window.
    ///
    /// The window is read (`TCP_INFO`) only when the last value read would cut or hold the chain,
    /// so a sender well inside it makes no extra system call. A failed read limits nothing. Each
    /// chain held back counts once in [`TxStats::window_waits`].
    fn window_room(&mut self) -> Option<usize> {
        let room = self.room_in_window();
        let held = room == Some(0);
        if held && !self.window_held {
            self.stats.window_waits += 1;
        }
        self.window_held = held;
        room
    }

    /// [`UringPath::window_room`] without the counting.
    fn room_in_window(&mut self) -> Option<usize> {
        if !self.tcp || self.ring.in_flight() == 0 {
            return None;
        }
        let wanted = self
            .lent_bytes
            .saturating_add(self.waiting_bytes.min(CHAIN_BYTES));
        if wanted > self.window {
            let socket = self
                .socket
                .as_ref()
                .expect("the socket is present until close()");
            let state = tcp_send_state(socket.fd()).ok();
            self.window = state.map_or(usize::MAX, |state| {
                usize::try_from(state.congestion_window).unwrap_or(usize::MAX)
            });
            let peer_limited = |state: TcpSendState| {
                state
                    .snd_wnd
                    .is_some_and(|w| u64::from(w) < state.congestion_window)
            };
            if state.is_none_or(peer_limited) {
                return None;
            }
        }
        Some(self.window.saturating_sub(self.lent_bytes))
    }

    /// Whether the sends queued behind the last chain fill the next one: `batch` sends, or
    /// [`CHAIN_BYTES`] (a chain takes no more). Large sends are then submitted as soon as a
    /// chain's worth waits, not once `batch` of them are out of the caller's hands: 64 KiB sends
    /// keep at most two chains' worth queued (16 buffers) instead of `batch` and a chain (40), so a
    /// pool runs dry later and the kernel has the bytes sooner.
    fn next_chain_full(&self) -> bool {
        debug_assert_eq!(self.waiting_bytes, self.sum_waiting());
        self.queue.len() - self.chain_len >= self.batch || self.waiting_bytes >= CHAIN_BYTES
    }

    /// Counts the bytes left behind the last chain again, once it has changed (a chain submitted
    /// or finished), so that each send checks [`UringPath::next_chain_full`] in constant time.
    fn count_waiting(&mut self) {
        self.waiting_bytes = self.sum_waiting();
    }

    fn sum_waiting(&self) -> usize {
        self.queue
            .range(self.chain_len..)
            .fold(0, |sum, p| sum.saturating_add(p.left()))
    }

    /// Releases what request `id` lent, without counting a completion; whether it was lent.
    fn withdraw(&mut self, id: u32) -> bool {
        let lending = self.tracker.withdraw(id);
        if let Some(lending) = &lending {
            self.lent_bytes -= lending.bytes;
        }
        lending.is_some()
    }

    fn count_send(&mut self, decision: Decision, n: usize) {
        self.policy.on_sent(decision, n);
        self.stats.count_send(decision, n);
    }
}

fn describe_memlock() -> String {
    match memlock_limit() {
        Ok(u64::MAX) => "unlimited".to_string(),
        Ok(limit) => format!("{} KiB", limit >> 10),
        Err(e) => format!("unknown: {e}"),
    }
}

impl<S: ZcSocket> Drop for UringPath<S> {
    /// A path is dropped once nothing more will be sent on it: by the reaper, done or past its
    /// bound, or at once ([`crate::tx::Sender::abort`], a failed close, a full reaper, a panic).
    /// Sends still queued are then never sent, and the stream is cut short: the peer is told by
    /// a reset, never shown an end that looks whole.
    fn drop(&mut self) {
        if self.unsent_queued() {
            self.cut_short();
        }
        self.reap();
        // The kernel may still read what requests in flight lend: leak it (counted in
        // `tx::leaked`). The charges go back to the budget, as on the sendmsg path.
        crate::tx::leak::leak(self.ring.abandon());
        drop(self.tracker.abandon());
    }
}

impl UringPath<UdpSocket> {
    /// The socket was corked or uncorked (its queued sends settled): its timestamp keys count
    /// datagrams, not requests.
    pub(crate) fn corked(&mut self, corked: bool) {
        if let Some(stamps) = &mut self.stamps {
            stamps.corked(corked);
        }
    }

    /// Sets the GSO segment size on the socket (`UDP_SEGMENT` socket option): every datagram longer
    /// than one segment goes out as a train of up to 64 segments. `None` turns it off. The kernel
    /// reads the option when a request is issued, so the queued sends are settled first: each
    /// datagram goes out under the size in force when it was sent.
    pub(crate) fn set_gso_segment(&mut self, segment: Option<u16>) -> Result<(), TxError> {
        self.settle()?;
        set_int_option(
            self.get_ref().fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            i32::from(segment.unwrap_or(0)),
        )
        .map_err(|source| TxError::SocketOption {
            option: "UDP_SEGMENT",
            source,
        })
    }
}
