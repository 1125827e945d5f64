//! The `sendmsg(MSG_ZEROCOPY)` submission path of [`super::Sender`], one engine for every socket
//! kind: decide, send, track, drain the error queue, flush.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::budget::MemlockBudget;
use super::buffer::{Lent, Loan, SendBuf};
use super::claim::{Claim, Refused};
use super::error::TxError;
use super::latency::now_ns;
use super::policy::{CopyReason, Decision, Policy};
use super::sender::SenderConfig;
use super::socket::{ZcSocket, present};
use super::stats::TxStats;
use super::timestamps::{Keys, TimestampJoin};
use super::tracker::CompletionTracker;
use super::unsent::{SendError, TrySendError, Unsent};
use crate::Fallback;
use crate::sys::errqueue::{self, ControlBuf, ErrqueueMessage, SockAddr};
use crate::sys::timestamping;
use crate::sys::vsock::{self, LONGEST_SEND_TIMEOUT, SavedSendTimeout};

/// Longest single `poll` while waiting, so that deadlines are checked.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// Pause of [`SendmsgPath::flush`] when the connection is shut down and no completion came: the ids left
/// may still complete (a device can hold a freed packet for a while), but `poll` returns at once.
const HANGUP_PAUSE: Duration = Duration::from_millis(10);

/// Pause of a sender that does not own the socket's error queue while it waits for send-buffer
/// space and `POLLERR` stays up: the entries are the owner's to read, and `poll` returns at once
/// until it does.
const FOREIGN_QUEUE_PAUSE: Duration = Duration::from_millis(1);

/// Whether a send may wait for send-buffer space, and until when.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Return [`Stop::WouldBlock`] on `EAGAIN`.
    Never,
    /// Wait on `EAGAIN`, up to the deadline if there is one.
    Until(Option<Instant>),
}

/// Why a send stopped before its buffer was all taken.
#[derive(Debug)]
enum Stop {
    WouldBlock,
    Failed(TxError),
}

impl From<TxError> for Stop {
    fn from(e: TxError) -> Stop {
        Stop::Failed(e)
    }
}

/// Zero-copy bytes sent after which the error queue is drained even before `drain_every` sends:
/// a completion releases its buffer only once read, and a buffer not released cannot be reused
/// while it is still in the CPU's cache. Over loopback (where the kernel copies what it delivers,
/// and the ACK that completes a send comes at once) on a VM, 65435-byte sends from a 64-buffer
/// pool ran at a median 1.06x `msg_zerocopy -z`'s rate per paired trial draining every 32 sends,
/// 1.17x every 8, 1.21x-1.24x every 2 and 1.34x every 4 (a drain is one more system call); at 4096
/// bytes every 32 sends ran at 1.60x, every 4 or 8 at 1.48x. So: every 32 sends or 256 KiB.
const DRAIN_BYTES: usize = 256 << 10;

/// The MSG_ZEROCOPY path owning socket `S` (see [`crate::tx`]). Sends never block on completions:
/// completions are drained when the socket is not writable, every `drain_every` sends or
/// [`DRAIN_BYTES`] lent while any id is outstanding, when the socket reports `POLLERR`, and in
/// [`SendmsgPath::poll_completions`] / [`SendmsgPath::flush`].
///
/// [`SendmsgPath::send`] waits for send-buffer space (whatever the socket's `O_NONBLOCK`);
/// [`SendmsgPath::try_send`] never waits and hands the unsent part back on `EAGAIN`, for an event loop that
/// polls the sender's file descriptor ([`AsFd`]).
///
/// One sender owns a kernel socket: a second sender on the same socket (another descriptor of it,
/// from `try_clone` or `dup`) sends by copy and never reads the socket's error queue, and its
/// [`SendmsgPath::zerocopy_status`] says so ([`crate::Cause::SocketInUse`]). The owner keeps the socket
/// until it is dropped (or [`SendmsgPath::close`]d).
///
/// Dropping a sender with ids outstanding keeps their buffers lent forever (they are leaked, never
/// reused, since the kernel may still read them): call [`SendmsgPath::flush`] or [`SendmsgPath::close`] first.
pub(crate) struct SendmsgPath<S: ZcSocket> {
    /// Present until [`SendmsgPath::close`] takes it.
    socket: Option<S>,
    tracker: CompletionTracker<Lent>,
    policy: Policy,
    stats: TxStats,
    control: ControlBuf,
    zerocopy: Result<(), Fallback>,
    drain_every: u32,
    send_timeout: Option<Duration>,
    since_drain: u32,
    /// Bytes sent zero-copy since the last drain.
    lent_since_drain: usize,
    gso_segment: Option<u16>,
    /// The socket's claim: only its holder numbers zero-copy sends and reads the error queue.
    claim: Option<Claim>,
    /// On a socket that cuts messages: whether `SO_SNDTIMEO` was set, or its errno.
    timeout_set: Result<(), i32>,
    /// The socket's own `SO_SNDTIMEO` from before, put back when [`SendmsgPath::into_socket`]
    /// hands the socket back.
    timeout_before: Option<SavedSendTimeout>,
    /// On a socket that cuts messages: the errno of the failed send that may have cut a message,
    /// after which nothing is sent.
    cut: Option<i32>,
    /// With [`SenderConfig::timestamps`] on a socket that took them: the join of its transmit
    /// timestamps and completions to its sends.
    join: Option<TimestampJoin>,
}

impl<S: ZcSocket> SendmsgPath<S> {
    /// Wraps `socket`. First claims the kernel socket for this sender (no other sender of this
    /// process may hold it: see [`Sender`]); then, unless the mode is [`super::Mode::Copy`], sets
    /// `SO_ZEROCOPY`. When either fails the sender copies and [`SendmsgPath::zerocopy_status`] says why.
    ///
    /// Completion ids are a per-socket counter the kernel never resets, and a sender numbers its sends
    /// from 0: a socket that already has `SO_ZEROCOPY` on may have taken ids already (wrapped before,
    /// for example a socket a [`SendmsgPath::close`] returned, or a clone of one), so the sender never
    /// sends it with MSG_ZEROCOPY (it copies, and the status says why) rather than misattribute a
    /// completion — unless the kernel shows that nothing was ever sent on it: a TCP socket accepted
    /// from a listener with `SO_ZEROCOPY` inherits the option, with its counter at 0
    /// (`sk_clone_lock` resets it), and is sent zero-copy as long as it is wrapped before anything
    /// is sent on it.
    pub(crate) fn new(socket: S, config: &SenderConfig, drain_every: u32) -> Self {
        let claim = Claim::take(socket.fd());
        let zerocopy = match &claim {
            _ if config.policy.mode == super::Mode::Copy => Err(Fallback::requested(
                "choose Mode::ZeroCopy or Mode::Auto to send with MSG_ZEROCOPY",
            )),
            _ if socket.cuts_messages() => Err(seqpacket_declined()),
            Ok(_) => enable_zerocopy_once(&socket),
            Err(Refused::InUse) => Err(Fallback::socket_in_use(
                "another sender in this process owns this socket (reached through another descriptor \
                 of it: try_clone, dup): use that sender, or one sender per socket; sends here are \
                 copied and never read the socket's completions",
            )),
            Err(Refused::Identity(e)) => Err(Fallback::refused(
                "fstat",
                e.raw_os_error().unwrap_or(0),
                "the socket cannot be told apart from others: sends are copied",
            )),
        };
        let (timeout_set, timeout_before) = if socket.cuts_messages() {
            let before = SavedSendTimeout::read(socket.fd()).ok();
            let timeout = config.send_timeout.unwrap_or(LONGEST_SEND_TIMEOUT);
            let set = vsock::set_send_timeout(socket.fd(), timeout)
                .map_err(|e| e.raw_os_error().unwrap_or(0));
            (set, before)
        } else {
            (Ok(()), None)
        };
        let join = (config.timestamps && claim.is_ok() && !socket.cuts_messages())
            .then(|| timestamping::enable_tx(socket.fd(), socket.is_stream()).ok())
            .flatten()
            .map(|()| {
                TimestampJoin::new(if socket.is_stream() {
                    Keys::Bytes
                } else {
                    Keys::Datagrams
                })
            });
        SendmsgPath {
            socket: Some(socket),
            tracker: CompletionTracker::new(0),
            policy: Policy::new(config.policy),
            stats: TxStats::default(),
            control: ControlBuf::default(),
            zerocopy,
            drain_every,
            send_timeout: config.send_timeout,
            since_drain: 0,
            lent_since_drain: 0,
            gso_segment: None,
            claim: claim.ok(),
            timeout_set,
            timeout_before,
            cut: None,
            join,
        }
    }

    /// Sends between unforced drains of the error queue.
    pub(crate) fn drain_every(&self) -> u32 {
        self.drain_every
    }

    /// The bound of a send's waits, when there is one.
    pub(crate) fn send_timeout(&self) -> Option<Duration> {
        self.send_timeout
    }

    /// The socket.
    pub(crate) fn get_ref(&self) -> &S {
        present(&self.socket)
    }

    /// Whether zero-copy is used on the socket, or why not: refused by the kernel, copy requested, or
    /// given up after a completion named an id the sender never registered.
    pub(crate) fn zerocopy_status(&self) -> Result<(), &Fallback> {
        self.zerocopy.as_ref().map(|_| ())
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> &TxStats {
        &self.stats
    }

    /// Zero-copy ids sent and not yet completed (their buffers are still lent).
    pub(crate) fn outstanding(&self) -> usize {
        self.tracker.outstanding()
    }

    /// Sends the rest of `unsent` (see [`super::Sender::send`]).
    pub(crate) fn send_unsent<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
    ) -> Result<(), SendError<B>> {
        self.send_blocking(unsent, None)
    }

    /// Sends the rest of `unsent`, waiting for send-buffer space up to the configured send timeout.
    fn send_blocking<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
        dest: Option<&SockAddr>,
    ) -> Result<(), SendError<B>> {
        // A timeout too long for the clock to reach has no deadline.
        let deadline = self
            .send_timeout
            .and_then(|t| Instant::now().checked_add(t));
        self.send_rest(unsent, dest, Wait::Until(deadline))
            .map_err(|(stop, unsent)| {
                let error = match stop {
                    Stop::Failed(e) => e,
                    // Not returned while waiting is allowed; kept as the errno it stands for.
                    Stop::WouldBlock => self.send_error(
                        false,
                        unsent.sent(),
                        unsent.buf().as_bytes().len(),
                        io::Error::from_raw_os_error(libc::EAGAIN),
                    ),
                };
                SendError::new(error, unsent)
            })
    }

    /// Sends the rest of `unsent` without waiting (see [`super::Sender::try_send`]).
    pub(crate) fn try_send_unsent<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
    ) -> Result<(), TrySendError<B>> {
        self.try_send_rest(unsent, None)
    }

    /// Sends the rest of `unsent` (to `dest`, on an unconnected datagram socket) without waiting.
    fn try_send_rest<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
        dest: Option<&SockAddr>,
    ) -> Result<(), TrySendError<B>> {
        self.send_rest(unsent, dest, Wait::Never)
            .map_err(|(stop, unsent)| match stop {
                Stop::WouldBlock => TrySendError::WouldBlock(unsent),
                Stop::Failed(e) => TrySendError::Failed(SendError::new(e, unsent)),
            })
    }

    /// Sends `unsent`'s remaining bytes; stops with the part not sent.
    fn send_rest<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
        dest: Option<&SockAddr>,
        wait: Wait,
    ) -> Result<(), (Stop, Unsent<B>)> {
        if self.get_ref().cuts_messages() {
            return self.send_whole(unsent, wait);
        }
        let (buf, mut off) = unsent.into_parts();
        let len = buf.as_bytes().len();
        let stream = self.get_ref().is_stream();
        loop {
            if stream && off >= len {
                return Ok(());
            }
            if off > 0 {
                self.stats.partial_sends += 1;
            }
            match self.send_piece(&buf, off, dest, wait) {
                Ok(n) => off += n,
                Err(stop) => return Err((stop, Unsent::new(buf, off))),
            }
            if (self.since_drain >= self.drain_every || self.lent_since_drain >= DRAIN_BYTES)
                && let Err(e) = self.drain_lent()
            {
                return Err((Stop::Failed(e), Unsent::new(buf, off)));
            }
            if !stream {
                return Ok(());
            }
        }
    }

    /// Sends `unsent`'s buffer as one whole message on a socket that cuts messages
    /// ([`ZcSocket::cuts_messages`]): one copying call that waits in the kernel, up to the send
    /// timeout (`SO_SNDTIMEO`, set in [`SendmsgPath::new`]), until all of it is enqueued. A failed
    /// call may have cut the message ([`TxError::MessageCut`]): it is never made again, and no
    /// later message is sent. Refused when `wait` forbids waiting: a call that does not wait stops
    /// at the peer's credit, which may be partway through the message.
    fn send_whole<B: SendBuf>(
        &mut self,
        unsent: Unsent<B>,
        wait: Wait,
    ) -> Result<(), (Stop, Unsent<B>)> {
        let (buf, _) = unsent.into_parts();
        let len = buf.as_bytes().len();
        let refused = |e: TxError, buf: Arc<B>| Err((Stop::Failed(e), Unsent::new(buf, 0)));
        if let Some(errno) = self.cut {
            let source = io::Error::from_raw_os_error(errno);
            return refused(cut_error(S::NAME, len, source, true), buf);
        }
        if let Err(errno) = self.timeout_set {
            let source = io::Error::from_raw_os_error(errno);
            let e = TxError::SocketOption {
                option: "SO_SNDTIMEO",
                source,
            };
            return refused(e, buf);
        }
        if let Wait::Never = wait {
            let e = TxError::Unsupported {
                what: "a send that never waits (try_send, AsyncSender) on an AF_VSOCK seqpacket socket",
                remedy: "use send, which waits in the kernel until the whole message is enqueued \
                         (bounded by the send timeout), on a thread that may block",
            };
            return refused(e, buf);
        }
        // Zero-copy is declined on such a socket ([`seqpacket_declined`]): this decides a copy.
        let decision = self.decide(len);
        match vsock::send_whole_message(self.get_ref().fd(), buf.as_bytes()) {
            Ok(n) => {
                self.count_send(decision, n);
                Ok(())
            }
            Err(e) => {
                self.cut = Some(e.raw_os_error().unwrap_or(libc::EIO));
                refused(cut_error(S::NAME, len, e, false), buf)
            }
        }
    }

    fn decide(&mut self, len: usize) -> Decision {
        match self.policy.decide(len) {
            Decision::ZeroCopy if self.zerocopy.is_err() => Decision::Copy(CopyReason::Unsupported),
            Decision::ZeroCopy
                if !self.get_ref().is_stream() && len > self.get_ref().max_zerocopy_piece() =>
            {
                Decision::Copy(CopyReason::Unsupported)
            }
            d => d,
        }
    }

    /// One `sendmsg` of `buf[off..]` (retried on `EINTR`, on `EAGAIN` as `wait` allows, resent by copy on
    /// a zero-copy send's [`refused_for_memory`]); returns the bytes the kernel took.
    fn send_piece<B: SendBuf>(
        &mut self,
        buf: &Arc<B>,
        off: usize,
        dest: Option<&SockAddr>,
        wait: Wait,
    ) -> Result<usize, Stop> {
        let total = buf.as_bytes().len();
        let mut forced: Option<CopyReason> = None;
        loop {
            let data = &buf.as_bytes()[off..];
            let decision = match forced {
                Some(reason) => Decision::Copy(reason),
                None => self.decide(data.len()),
            };
            let mut piece = if decision == Decision::ZeroCopy && self.get_ref().is_stream() {
                data.len().min(self.get_ref().max_zerocopy_piece())
            } else {
                data.len()
            };
            let charge = match decision {
                Decision::ZeroCopy => MemlockBudget::global().try_charge(piece),
                Decision::Copy(_) => None,
            };
            let decision = match (decision, &charge) {
                (Decision::ZeroCopy, None) => {
                    piece = data.len();
                    Decision::Copy(CopyReason::Memlock)
                }
                (d, _) => d,
            };
            let zc = decision == Decision::ZeroCopy;
            let mut control = ControlBuf::default();
            if let Some(seg) = self.gso_segment.filter(|&s| piece > usize::from(s)) {
                control
                    .push(libc::SOL_UDP, libc::UDP_SEGMENT, &seg.to_ne_bytes())
                    .expect("one UDP_SEGMENT fits the control buffer");
            }
            let fd = self.socket.as_ref().expect("present until close()").fd();
            let queued = self.join.as_ref().map(|_| now_ns());
            let (id, res) = if let Some(charge) = charge {
                let loan: Loan = Arc::clone(buf) as Loan;
                let (id, res) = errqueue::send_lent(
                    fd,
                    &mut self.tracker,
                    (loan, charge),
                    off..off + piece,
                    dest,
                    &control,
                );
                (Some(id), res)
            } else {
                let res = errqueue::send_copy(fd, &data[..piece], dest, &control);
                (None, res)
            };
            match res {
                Ok(n) => {
                    self.count_send(decision, n);
                    if let (Some(join), Some(queued)) = (&mut self.join, queued) {
                        let latency = &mut self.stats.latency;
                        join.sent(queued, n, id, &mut |j| latency.record(&j));
                    }
                    return Ok(n);
                }
                Err(e) => {
                    if let Some(id) = id {
                        self.settle_failed_id(id)?;
                    }
                    match e.raw_os_error() {
                        Some(libc::EAGAIN) => match wait {
                            Wait::Never => return Err(Stop::WouldBlock),
                            Wait::Until(deadline) => self.wait_writable(deadline, off, total)?,
                        },
                        Some(libc::EINTR) => {}
                        Some(errno) if zc && refused_for_memory(errno) => {
                            self.stats.enobufs += 1;
                            self.policy.on_enobufs();
                            forced = Some(CopyReason::Enobufs);
                        }
                        _ => return Err(Stop::Failed(self.send_error(zc, off, total, e))),
                    }
                }
            }
        }
    }

    /// Settles the id registered for a zero-copy `sendmsg` that failed, from what the kernel does:
    /// a failed stream send takes no id (TCP aborts the uarg, which rolls the socket's counter back);
    /// a datagram freed inside a failed call took its id, and the skb's release queued its completion
    /// before the call returned. So: drain, and give the id back unless that completion came. Should
    /// the kernel ever have taken the id without completing it yet, its completion would later name
    /// an id this sender never registered, which stops all releases (see [`SendmsgPath::zerocopy_status`]).
    fn settle_failed_id(&mut self, id: u32) -> Result<(), TxError> {
        self.drain()?;
        if self.tracker.is_outstanding(id) {
            self.tracker.cancel_last();
        }
        Ok(())
    }

    fn count_send(&mut self, decision: Decision, n: usize) {
        self.policy.on_sent(decision, n);
        self.stats.count_send(decision, n);
        self.since_drain += 1;
        if decision == Decision::ZeroCopy {
            self.lent_since_drain += n;
        }
    }

    fn send_error(&self, zerocopy: bool, sent: usize, len: usize, source: io::Error) -> TxError {
        TxError::Send {
            call: "sendmsg",
            socket: S::NAME,
            zerocopy,
            sent,
            len,
            source,
            unsent: Vec::new(),
        }
    }

    /// Waits for send-buffer space, draining completions on `POLLERR`; a pending socket error (a reset)
    /// becomes the send's error.
    fn wait_writable(
        &mut self,
        deadline: Option<Instant>,
        sent: usize,
        len: usize,
    ) -> Result<(), TxError> {
        self.stats.waits += 1;
        loop {
            let slice = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let e = io::Error::from_raw_os_error(libc::ETIMEDOUT);
                        return Err(self.send_error(false, sent, len, e));
                    }
                    left.min(POLL_SLICE)
                }
                None => POLL_SLICE,
            };
            let ready = errqueue::poll_socket(self.get_ref().fd(), true, slice)
                .map_err(|e| self.queue_error(e))?;
            if ready.error
                && self.drain()? == 0
                && let Some(e) = self.take_socket_error()?
            {
                return Err(self.send_error(false, sent, len, e));
            }
            if ready.writable || ready.hangup {
                return Ok(());
            }
            if ready.error && self.claim.is_none() {
                std::thread::sleep(FOREIGN_QUEUE_PAUSE);
            }
        }
    }

    fn take_socket_error(&self) -> Result<Option<io::Error>, TxError> {
        errqueue::take_socket_error(self.get_ref().fd()).map_err(|e| self.queue_error(e))
    }

    fn queue_error(&self, source: io::Error) -> TxError {
        TxError::Errqueue {
            socket: S::NAME,
            source,
        }
    }

    /// [`SendmsgPath::drain`] when an id is outstanding or timestamps are on; otherwise nothing can
    /// be queued (a copying sender never reads the error queue on the way), and only the counts
    /// start again.
    fn drain_lent(&mut self) -> Result<u64, TxError> {
        if self.tracker.outstanding() > 0 || self.join.is_some() {
            return self.drain();
        }
        self.since_drain = 0;
        self.lent_since_drain = 0;
        Ok(0)
    }

    /// Reads every completion queued now, releasing the buffers they cover; returns the ids released.
    /// A truncated entry (`MSG_CTRUNC`) or a failed read is an error: the completion it carried is lost.
    /// A sender that does not own the socket reads nothing (the entries are the owner's).
    fn drain(&mut self) -> Result<u64, TxError> {
        self.since_drain = 0;
        self.lent_since_drain = 0;
        if self.claim.is_none() {
            return Ok(0);
        }
        let mut released = 0;
        loop {
            let socket = self
                .socket
                .as_ref()
                .expect("the socket is present until close()");
            match errqueue::recv_errqueue(socket.fd(), &mut self.control) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    self.stats.set_tracker(self.tracker.counts());
                    return Err(self.queue_error(e));
                }
            }
            // A timestamp's time comes in the entry's SCM_TIMESTAMPING, before its key.
            let mut stamped = None;
            let latency = &mut self.stats.latency;
            let mut record = |j| latency.record(&j);
            for m in self.control.messages() {
                if let Some(at) = timestamping::software_time(m.level, m.ty, m.data) {
                    stamped = Some(at);
                    continue;
                }
                match errqueue::decode(m.level, m.ty, m.data) {
                    Some(ErrqueueMessage::Zerocopy(c)) => {
                        let ids = self.tracker.complete(c, drop);
                        self.policy.on_completion(c.copied, ids);
                        released += ids;
                        if let Some(join) = &mut self.join {
                            join.completed(c, now_ns(), &mut record);
                        }
                    }
                    Some(ErrqueueMessage::Error(ee))
                        if ee.ee_origin == timestamping::SO_EE_ORIGIN_TIMESTAMPING =>
                    {
                        if let (Some(join), Some(at)) = (&mut self.join, stamped) {
                            join.stamp(ee.ee_info, ee.ee_data, at, &mut record);
                        }
                    }
                    Some(ErrqueueMessage::Error(_)) => self.stats.queue_errors += 1,
                    None => {}
                }
            }
        }
        if let Some(join) = &self.join {
            self.stats.latency.unmatched = join.unmatched;
        }
        if self.tracker.outstanding() == 0 {
            self.policy.on_drained();
        }
        if let Some(id) = self.tracker.unregistered_id()
            && self.zerocopy.is_ok()
        {
            self.zerocopy = Err(lost_track(id));
        }
        self.stats.set_tracker(self.tracker.counts());
        self.policy.report(&mut self.stats);
        Ok(released)
    }

    /// Sends what the socket holds back (Nagle's algorithm) before a wait for completions. A lent
    /// buffer comes back once its bytes are acknowledged; with the algorithm on, a send shorter than
    /// the MSS waits while an earlier segment is unacknowledged, and a peer acknowledges a lone
    /// segment only when its delayed-ACK timer fires (40 ms or more on Linux). A sender whose
    /// buffers are all lent would otherwise wait that long for each one it gets back.
    pub(crate) fn push_held(&self) {
        // A failure leaves the segment held until the peer's ACK: a slower wait, not a wrong one.
        let _ = self.get_ref().push_held();
    }

    /// One step of a dropped sender's wait in the reaper, never waiting: sends what Nagle's
    /// algorithm holds back, reads the completions queued now and, when none came, clears the
    /// socket error that may have raised `POLLERR` (a reset: the completions still come as the
    /// kernel frees the packets); whether nothing is lent anymore. A failed read leaves the rest
    /// to the reaper's bound.
    pub(crate) fn reap_step(&mut self) -> bool {
        if self.socket.is_none() {
            return true;
        }
        self.push_held();
        if let Ok(0) = self.drain() {
            let _ = self.take_socket_error();
        }
        self.outstanding() == 0
    }

    /// Reads the completions queued now (without waiting); returns the number of ids released.
    pub(crate) fn poll_completions(&mut self) -> Result<u64, TxError> {
        self.drain()
    }

    /// Waits up to `timeout` for at least one completion when ids are outstanding (for example when a
    /// [`super::BufferPool`] ran dry); returns the number of ids released.
    pub(crate) fn wait_completions(&mut self, timeout: Duration) -> Result<u64, TxError> {
        let released = self.drain()?;
        if released > 0 || self.outstanding() == 0 {
            return Ok(released);
        }
        self.push_held();
        errqueue::poll_socket(self.get_ref().fd(), false, timeout)
            .map_err(|e| self.queue_error(e))?;
        self.drain()
    }

    /// Waits, up to `timeout`, until every outstanding id completed and every lent buffer is released.
    /// Fails at once with the socket's error when `POLLERR` comes from a socket error (`SO_ERROR`, read
    /// and cleared) rather than a completion, and with [`TxError::LostTrack`] once a completion named an
    /// id the sender never registered (the buffers still lent then stay lent).
    pub(crate) fn flush(&mut self, timeout: Duration) -> Result<(), TxError> {
        let start = Instant::now();
        loop {
            let released = self.drain()?;
            if self.outstanding() == 0 {
                return Ok(());
            }
            if let Some(id) = self.tracker.unregistered_id() {
                return Err(TxError::LostTrack {
                    id,
                    outstanding: self.outstanding(),
                });
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(TxError::Timeout {
                    what: "flush",
                    outstanding: self.outstanding(),
                    waited: start.elapsed(),
                });
            }
            if released == 0
                && let Some(e) = self.take_socket_error()?
            {
                return Err(TxError::Socket {
                    socket: S::NAME,
                    outstanding: self.outstanding(),
                    source: e,
                });
            }
            self.push_held();
            let ready = errqueue::poll_socket(self.get_ref().fd(), false, left.min(POLL_SLICE))
                .map_err(|e| self.queue_error(e))?;
            if ready.hangup && !ready.error {
                std::thread::sleep(left.min(HANGUP_PAUSE));
            }
        }
    }

    /// The socket, no longer owned (for [`super::Sender::close`], after a flush), with the
    /// `SO_SNDTIMEO` it had before the sender set its own (a failure to put it back leaves the
    /// sender's, a finite wait), and transmit timestamps off if the sender turned them on.
    pub(crate) fn into_socket(mut self) -> S {
        let socket = self.socket.take().expect("taken once");
        if let Some(before) = self.timeout_before {
            let _ = before.restore(socket.fd());
        }
        if self.join.is_some() {
            // A failure leaves stamps coming to an error queue nobody reads but the caller.
            let _ = timestamping::disable(socket.fd());
        }
        socket
    }
}

/// Sets `SO_ZEROCOPY` on a socket the sender just claimed, unless it was on already and sends made
/// before may have taken completion ids (see [`SendmsgPath::new`]).
fn enable_zerocopy_once<S: ZcSocket>(socket: &S) -> Result<(), Fallback> {
    let name = S::NAME;
    match errqueue::zerocopy_enabled(socket.fd()) {
        Ok(true) => {
            return match socket.nothing_sent() {
                // The kernel's counter stands at 0: the ids are the sender's to number.
                Ok(Some(true)) => Ok(()),
                Ok(Some(false)) => Err(Fallback::unknown_ids(
                    format!(
                        "SO_ZEROCOPY was already on for this {name} socket and data was sent on \
                         it: sends made before may have taken completion ids"
                    ),
                    "wrap the socket before anything is sent on it (a socket accepted from a listener \
                     with SO_ZEROCOPY inherits the option and is sent zero-copy if wrapped first), or \
                     leave SO_ZEROCOPY off: the sender sets it; sends on this one are copied",
                )),
                Ok(None) => Err(Fallback::unknown_ids(
                    format!(
                        "SO_ZEROCOPY was already on for this {name} socket: it may have taken \
                         completion ids before"
                    ),
                    "wrap a socket no sender has used, and leave SO_ZEROCOPY off: the sender sets \
                     it; sends on this one are copied so that no completion is misattributed",
                )),
                Err(e) => Err(Fallback::refused(
                    "getsockopt TCP_INFO",
                    e.raw_os_error().unwrap_or(0),
                    "SO_ZEROCOPY was already on and whether anything was sent is unknown: sends \
                     are copied",
                )),
            };
        }
        Ok(false) => {}
        Err(e) => {
            return Err(Fallback::refused(
                "getsockopt SO_ZEROCOPY",
                e.raw_os_error().unwrap_or(0),
                "sends are copied",
            ));
        }
    }
    errqueue::enable_zerocopy(socket.fd()).map_err(|e| {
        Fallback::refused(
            "setsockopt SO_ZEROCOPY",
            e.raw_os_error().unwrap_or(0),
            format!("no zero-copy send for this {name} socket: sends are copied"),
        )
    })
}

/// Why a sender on a socket that cuts messages (AF_VSOCK seqpacket) copies.
fn seqpacket_declined() -> Fallback {
    Fallback::declined(
        "AF_VSOCK seqpacket: a message the peer lacks credit for is enqueued in pieces, each with a \
         completion id of its own (virtio_transport_send_pkt_info takes one per enqueue), so one \
         send may take several ids and later completions would release buffers the kernel still \
         reads",
        "messages are copied; send on a stream socket for zero-copy",
    )
}

/// Whether a zero-copy `sendmsg` failed for want of the memory a zero-copy send needs — its
/// notification (`optmem_max`) or its pinned pages (`RLIMIT_MEMLOCK`) — and sent nothing, so that
/// the same bytes go again by copy: `ENOBUFS` from TCP and UDP (`msg_zerocopy_realloc` failed), and
/// `ENOMEM` from an AF_VSOCK stream, whose virtio transport reports that same failure so
/// (`virtio_transport_send_pkt_info`; it enqueues nothing, and a call that enqueued nothing returns
/// the error, not a count). A datagram or stream call that fails with either took nothing.
fn refused_for_memory(errno: i32) -> bool {
    matches!(errno, libc::ENOBUFS | libc::ENOMEM)
}

/// The error of a whole-message send that failed (`earlier`: of a later one, not tried).
fn cut_error(socket: &'static str, len: usize, source: io::Error, earlier: bool) -> TxError {
    TxError::MessageCut {
        socket,
        len,
        source,
        earlier,
    }
}

/// The reason a sender gives up zero-copy when a completion names id `id`, which it never registered.
fn lost_track(id: u32) -> Fallback {
    Fallback::observed(
        format!(
            "a completion named id {id}, which this sender never registered: the kernel numbered \
             its sends differently, so which buffer a completion releases is unknown"
        ),
        "buffers still lent stay lent (leaked, never reused) and the socket sends by copy from now on",
    )
}

impl<S: ZcSocket> Drop for SendmsgPath<S> {
    fn drop(&mut self) {
        if self.socket.is_some() {
            let _ = self.drain();
        }
        // The kernel may still read what is lent: never free or reuse it (counted in
        // `tx::leaked`). Its locked-memory charge goes back to the budget, which would otherwise
        // shrink for good with every sender dropped so; the kernel un-accounts the pages when it
        // frees the socket's packets (at the close, or its reset), and an ENOBUFS before then is
        // copied and backs off.
        let (loans, charges): (Vec<_>, Vec<_>) = self.tracker.abandon().into_iter().unzip();
        super::leak::leak(loans);
        drop(charges);
    }
}

impl SendmsgPath<UdpSocket> {
    /// The socket was corked or uncorked: its timestamp keys count datagrams, not calls.
    pub(crate) fn corked(&mut self, corked: bool) {
        if let Some(join) = &mut self.join {
            join.corked(corked);
        }
    }

    /// Sets the GSO segment size (`UDP_SEGMENT` control message on each send longer than one segment):
    /// one call then carries up to 64 segments, split by the stack or the device. `None` turns it off.
    /// Without it a datagram larger than the path MTU is fragmented, and the kernel copies it even
    /// with MSG_ZEROCOPY (it zero-copies only data the device checksums; completions say copied).
    pub(crate) fn set_gso_segment(&mut self, segment: Option<u16>) {
        self.gso_segment = segment;
    }

    /// Sends `buf` as one datagram (or one GSO train) to `dest`, on an unconnected socket; waits for
    /// send-buffer space like [`SendmsgPath::send`].
    pub(crate) fn send_to<B: SendBuf>(
        &mut self,
        buf: B,
        dest: SocketAddr,
    ) -> Result<(), SendError<B>> {
        let dest = SockAddr::from(dest);
        self.send_blocking(Unsent::new(Arc::new(buf), 0), Some(&dest))
    }

    /// [`SendmsgPath::send_to`] without waiting: hands the datagram back
    /// ([`TrySendError::WouldBlock`]) when the send buffer would not take it now.
    pub(crate) fn try_send_to<B: SendBuf>(
        &mut self,
        datagram: Unsent<B>,
        dest: SocketAddr,
    ) -> Result<(), TrySendError<B>> {
        let dest = SockAddr::from(dest);
        self.try_send_rest(datagram, Some(&dest))
    }
}
