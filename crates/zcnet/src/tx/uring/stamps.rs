//! The io_uring path's per-send latency ([`crate::tx::SenderConfig::timestamps`]): the socket's
//! transmit timestamps, taken off its error queue by a `SOCKET_URING_OP_TX_TIMESTAMP` command on a
//! ring of their own ([`TimestampRing`]), joined to each request and its notification by the same
//! [`TimestampJoin`] the `sendmsg` path uses. A request is one send here: on a stream it may carry
//! several buffers.
//!
//! Kernel behaviour relied on: a request's timestamps are queued on the error queue before its
//! notification is posted (as for an error-queue completion: see [`super::super::timestamps`]), and
//! the command posts them from task work of this thread, which entering its ring runs. So the
//! notifications of one reap are joined after the timestamps reaped after them. The command's
//! ring takes them off the queue: it is the one reader of the socket's error queue, which the
//! io_uring path does not read (its completions are CQEs). Linux 6.17 has the command; an older
//! kernel ends it at once (`EINVAL`, `EOPNOTSUPP`) and the latency stays empty.

use super::super::latency::{TxLatency, now_ns};
use super::super::timestamps::{Keys, TimestampJoin};
use crate::sys::timestamping;
use crate::sys::uring_timestamps::{RingEvent, TimestampRing};
use crate::tx::{Completion, ZcSocket};

/// The timestamps of one socket on the io_uring path.
#[derive(Debug)]
pub(super) struct Stamps {
    /// `None` once the kernel ended the command for good.
    ring: Option<TimestampRing>,
    join: TimestampJoin,
    /// Notifications of this reap, joined after its timestamps.
    completed: Vec<Completion>,
    /// When the chain in flight was submitted: the queued time of its requests.
    queued: u64,
}

impl Stamps {
    /// Turns timestamps on for `socket` and starts the command; `None` when either fails.
    pub(super) fn new<S: ZcSocket>(socket: &S) -> Option<Stamps> {
        timestamping::enable_tx(socket.fd(), socket.is_stream()).ok()?;
        let ring = TimestampRing::new(socket.fd()).ok()?;
        let keys = if socket.is_stream() {
            Keys::Bytes
        } else {
            Keys::Datagrams
        };
        Some(Stamps {
            ring: Some(ring),
            join: TimestampJoin::new(keys),
            completed: Vec::new(),
            queued: 0,
        })
    }

    /// A chain is submitted now.
    pub(super) fn submitting(&mut self) {
        self.queued = now_ns();
    }

    /// A request of the chain sent `n` bytes, zero-copy under `id` when a notification follows.
    pub(super) fn sent(&mut self, n: usize, id: Option<u32>, latency: &mut TxLatency) {
        self.join
            .sent(self.queued, n, id, &mut |j| latency.record(&j));
    }

    /// The socket was corked or uncorked (see [`TimestampJoin::corked`]).
    pub(super) fn corked(&mut self, corked: bool) {
        self.join.corked(corked);
    }

    /// A notification of this reap.
    pub(super) fn completed(&mut self, c: Completion) {
        self.completed.push(c);
    }

    /// Joins the timestamps posted now, then the notifications of this reap.
    pub(super) fn settle(&mut self, latency: &mut TxLatency) {
        let mut record = |j| latency.record(&j);
        let mut ended = None;
        if let Some(ring) = &mut self.ring {
            let join = &mut self.join;
            ring.reap(|event| match event {
                RingEvent::Stamp(s) => join.stamp(s.kind, s.key, s.at, &mut record),
                RingEvent::Ended(errno) => ended = Some(errno),
            });
        }
        // A kernel without the command refuses it; any other end is re-armed once.
        if let Some(errno) = ended
            && (matches!(errno, libc::EINVAL | libc::EOPNOTSUPP)
                || self.ring.as_mut().is_some_and(|r| r.arm().is_err()))
        {
            self.ring = None;
        }
        let at = now_ns();
        for c in self.completed.drain(..) {
            self.join.completed(c, at, &mut record);
        }
        latency.unmatched = self.join.unmatched;
    }
}
