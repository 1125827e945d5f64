//! The reaper: one background thread for the whole process that finishes what dropped senders
//! left in flight, so that no drop waits for the kernel.
//!
//! A [`Sender`](super::Sender) dropped while the kernel still holds its loans (or, on io_uring,
//! while sends are queued) must not free them: the kernel may still read them. Its drop hands the
//! sender's path — socket, ring, loans, queue — to the reaper and returns. The reaper waits on
//! all it holds at once: it submits what io_uring still queued, reads completions, releases each
//! buffer whose completions arrive (a pooled one goes back to its pool) exactly as a live sender
//! does, and once nothing is lent it drops the path, which closes the socket. A dropped
//! `aio::AsyncSender` hands over the rests of its dropped send futures with its sender: the
//! reaper sends them first, in order, as the socket (or the ring) has room.
//!
//! Two bounds keep it from holding anything for good:
//!
//! - **time**: a dropped sender is held for at most its [`SenderConfig::send_timeout`] (60 s when
//!   it is unset), counted from the drop. Then the reaper stops waiting: what io_uring had not
//!   submitted is never sent and a TCP stream missing it is reset (`SO_LINGER` 0), and the
//!   buffers still lent are leaked — never freed, never reused — and counted in
//!   [`super::leaked`].
//! - **number**: at most [`MOST_HELD`] senders at once (each holds a socket, on io_uring a ring,
//!   and what the kernel lets it lend: its send buffer's worth). A sender dropped while the
//!   reaper is full ends there, as [`Sender::abort`](super::Sender::abort) ends one, without
//!   waiting: what io_uring queued is not sent, a TCP stream missing bytes is reset, the loans
//!   are leaked and counted.
//!
//! [`reaping`] counts what the reaper holds and how each sender it took ended. The thread starts
//! with the first sender handed to it and lives as long as the process; at the process's exit the
//! kernel closes what it still holds, as it closes any socket.
//!
//! Kernel behaviour relied on: `poll(2)` reports `POLLERR` on a socket while its error queue holds
//! entries (MSG_ZEROCOPY completions) or a socket error is pending, and `POLLHUP` once it is shut
//! down both ways (reported at once from then on); an io_uring's descriptor polls readable while
//! CQEs wait, and a request submitted by another thread still posts its CQEs to the ring.
//!
//! [`SenderConfig::send_timeout`]: super::SenderConfig::send_timeout

use std::os::fd::BorrowedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread;
use std::time::{Duration, Instant};

use crate::sys::socket::poll_each;

/// The most dropped senders the reaper holds at once.
pub(crate) const MOST_HELD: usize = 1024;

/// Longest single wait, so that deadlines and newly handed senders are looked at.
const SLICE: Duration = Duration::from_millis(50);

/// Pause before looking again at a sender whose descriptor reported `POLLHUP` (a connection shut
/// down both ways): `poll` reports it at once from then on, and the completions still due come
/// when the device frees the packets.
const HANGUP_PAUSE: Duration = Duration::from_millis(10);

static HELD: AtomicUsize = AtomicUsize::new(0);
static DRAINED: AtomicU64 = AtomicU64::new(0);
static EXPIRED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// What the reaper holds now, and how the dropped senders handed to it ended, in this process so
/// far (the reaper: see `# Drop` on [`crate::tx::Sender`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reaping {
    /// Dropped senders held now, waiting for their completions (at most 1024).
    pub held: usize,
    /// Senders that got every loan back and were closed.
    pub drained: u64,
    /// Senders whose bound passed with loans still out: those were leaked (counted in
    /// [`crate::tx::leaked`]).
    pub expired: u64,
    /// Senders dropped while the reaper was full: they ended at once, leaking their loans.
    pub refused: u64,
}

/// What the reaper holds and how the senders handed to it ended, so far in this process.
pub fn reaping() -> Reaping {
    Reaping {
        held: HELD.load(Ordering::Relaxed),
        drained: DRAINED.load(Ordering::Relaxed),
        expired: EXPIRED.load(Ordering::Relaxed),
        refused: REFUSED.load(Ordering::Relaxed),
    }
}

/// A dropped sender's remains, which the reaper drives to the end without waiting on any one.
pub(crate) trait Reaped: Send {
    /// The descriptor whose readiness means progress, and the `poll` events to ask for
    /// (`POLLERR` and `POLLHUP` come whatever is asked).
    fn interest(&self) -> (BorrowedFd<'_>, i16);

    /// Reads the completions queued now and submits what is queued, without waiting; whether
    /// nothing is left in flight. A failure on the way ends what is queued (the stream is reset)
    /// and the wait goes on for what is lent.
    fn progress(&mut self) -> bool;

    /// How long, from the drop, to wait at most. Dropped before it is done, it sends nothing
    /// more (a stream then missing bytes is reset at the close) and leaks what is lent.
    fn bound(&self) -> Duration;
}

/// Hands `remains` to the reaper; gives it back when the reaper is full (or cannot be started),
/// for the caller to drop at once.
pub(crate) fn hand_over(remains: Box<dyn Reaped>) -> Result<(), Box<dyn Reaped>> {
    let Some(reaper) = reaper() else {
        REFUSED.fetch_add(1, Ordering::Relaxed);
        return Err(remains);
    };
    let room = HELD.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
        (held < MOST_HELD).then_some(held + 1)
    });
    if room.is_err() {
        REFUSED.fetch_add(1, Ordering::Relaxed);
        return Err(remains);
    }
    let deadline = Instant::now().checked_add(remains.bound());
    reaper.try_send(Held::new(remains, deadline)).map_err(|e| {
        HELD.fetch_sub(1, Ordering::Relaxed);
        REFUSED.fetch_add(1, Ordering::Relaxed);
        match e {
            mpsc::TrySendError::Full(held) | mpsc::TrySendError::Disconnected(held) => held.remains,
        }
    })
}

/// The way to the reaper thread, started by the first call; `None` when it could not be started.
fn reaper() -> Option<&'static SyncSender<Held>> {
    static REAPER: OnceLock<Option<SyncSender<Held>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            // The channel holds at most what the reaper may: HELD is reserved before a send.
            let (to_reaper, from_drops) = mpsc::sync_channel(MOST_HELD);
            thread::Builder::new()
                .name("zcnet-reaper".into())
                .spawn(move || run(from_drops))
                .ok()
                .map(|_| to_reaper)
        })
        .as_ref()
}

/// One dropped sender the reaper holds.
struct Held {
    remains: Box<dyn Reaped>,
    /// When to stop waiting (`None`: a bound beyond what the clock holds).
    deadline: Option<Instant>,
    /// Not polled before this (its descriptor reported `POLLHUP`).
    quiet_until: Option<Instant>,
    /// Not looked at yet: what io_uring queued is submitted at once (until then nothing makes the
    /// ring readable).
    fresh: bool,
}

impl Held {
    fn new(remains: Box<dyn Reaped>, deadline: Option<Instant>) -> Held {
        Held {
            remains,
            deadline,
            quiet_until: None,
            fresh: true,
        }
    }
}

/// The reaper thread: takes what drops hand over and drives it all until each is done or
/// expires.
fn run(from_drops: Receiver<Held>) {
    let mut held: Vec<Held> = Vec::new();
    loop {
        if held.is_empty() {
            match from_drops.recv() {
                Ok(new) => held.push(new),
                Err(_) => return,
            }
        }
        held.extend(from_drops.try_iter());
        let now = Instant::now();
        let timeout = held
            .iter()
            .flat_map(|h| [h.deadline, h.quiet_until])
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .fold(SLICE, Duration::min);
        let wanted: Vec<_> = held
            .iter()
            .map(|h| match h.quiet_until {
                Some(until) if until > now => None,
                _ => Some(h.remains.interest()),
            })
            .collect();
        // A failed poll (no memory for the table) looks at each as if it were ready.
        let ready = poll_each(&wanted, timeout.as_millis() as i32)
            .unwrap_or_else(|_| vec![libc::POLLIN; wanted.len()]);
        drop(wanted);
        let now = Instant::now();
        let ended: Vec<bool> = held
            .iter_mut()
            .zip(ready)
            .map(|(h, revents)| h.step(revents, now))
            .collect();
        let mut ended = ended.into_iter();
        held.retain(|_| {
            let end = ended.next().unwrap_or(false);
            if end {
                HELD.fetch_sub(1, Ordering::Relaxed);
            }
            !end
        });
    }
}

impl Held {
    /// Makes progress when there may be some — its descriptor reported `revents`, it is new, its
    /// pause or its bound is over —; whether it ended (drained, or expired), to be dropped.
    fn step(&mut self, revents: i16, now: Instant) -> bool {
        let expired = self.deadline.is_some_and(|d| d <= now);
        let paused = self.quiet_until.is_some_and(|until| until > now);
        if !(self.fresh || revents != 0 || expired || self.quiet_until.is_some() && !paused) {
            return false;
        }
        self.fresh = false;
        if self.remains.progress() {
            DRAINED.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if expired {
            EXPIRED.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.quiet_until = (revents & libc::POLLHUP != 0).then(|| now + HANGUP_PAUSE);
        false
    }
}
