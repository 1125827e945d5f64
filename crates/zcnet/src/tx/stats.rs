//! Counters of everything a sender decided and everything the kernel reported.

use super::latency::TxLatency;
use super::policy::{AutoChoice, CopyReason, Decision};
use super::tracker::TrackerCounts;

/// What a sender did: sends by kind, why sends were copied, and the completions that came back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxStats {
    /// Successful `sendmsg` calls.
    pub calls: u64,
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Calls made with MSG_ZEROCOPY (each took one completion id).
    pub zc_calls: u64,
    /// Calls made by copy.
    pub copy_calls: u64,
    /// Copied because of [`crate::tx::Mode::Copy`].
    pub copy_mode: u64,
    /// Copied because there was nothing to send.
    pub copy_empty: u64,
    /// Copied because below the size threshold.
    pub copy_small: u64,
    /// Copied because recent completions said the kernel copies anyway.
    pub copy_copied: u64,
    /// Copied while backing off after `ENOBUFS` (`ENOMEM` on AF_VSOCK), including the resend of
    /// the refused bytes.
    pub copy_enobufs: u64,
    /// Copied because the locked-memory budget had no room for the send's pages (see
    /// [`crate::tx::memlock_reason`]).
    pub copy_memlock: u64,
    /// Copied because the socket does not support zero-copy.
    pub copy_unsupported: u64,
    /// Copied because the auto mode measured copying to cost less CPU per byte.
    pub copy_cheaper: u64,
    /// Zero-copy sends refused for want of notification or locked memory — `ENOBUFS`, or `ENOMEM`
    /// on an AF_VSOCK stream — and sent again by copy.
    pub enobufs: u64,
    /// Switches of the auto policy to copying after copied completions.
    pub policy_switches: u64,
    /// Comparisons of the CPU cost per byte of zero-copy and copy that the auto policy finished.
    pub cost_comparisons: u64,
    /// What the auto policy chose for sends at or above its threshold, and why (`None` in the other
    /// modes).
    pub auto: Option<AutoChoice>,
    /// Stream sends the kernel took only partly (the rest followed in order).
    pub partial_sends: u64,
    /// Waits for send-buffer space (`EAGAIN`).
    pub waits: u64,
    /// Chains the io_uring path held back on TCP because the bytes lent already filled the
    /// connection's congestion window (see [`crate::tx::SendPath::IoUring`]).
    pub window_waits: u64,
    /// Error-queue reads that returned a completion.
    pub notifications: u64,
    /// Completion ids the kernel reported sent from the lent pages.
    ///
    /// On the `sendmsg` path the split between this and [`TxStats::copied_ids`] is per
    /// notification, not per id: the kernel extends a queued completion range with the next ids
    /// without comparing their copied flag (`skb_zerocopy_notify_extend`), so a merged range counts
    /// as the first of its sends went. Where copied and zero-copied sends alternate, either count
    /// can be off by the ids merged across a change. io_uring notifies each request alone, but on
    /// AF_VSOCK it reports as zero-copied a request the transport copied because the peer lacked
    /// credit for all of it (see [`crate::tx::SendPath::IoUring`]).
    pub zc_ids: u64,
    /// Completion ids the kernel copied (`SO_EE_CODE_ZEROCOPY_COPIED`; see [`TxStats::zc_ids`] for
    /// how merged ranges count).
    pub copied_ids: u64,
    /// Completion ids that matched nothing outstanding (duplicates).
    pub ignored_ids: u64,
    /// Completion ids never registered (the id mapping was lost: see
    /// [`crate::tx::Sender::zerocopy_status`]); also counted in `ignored_ids`.
    pub unregistered_ids: u64,
    /// Error-queue entries that were not completions (ICMP or local errors).
    pub queue_errors: u64,
    /// Per-send latency, with [`crate::tx::SenderConfig::timestamps`] on (empty otherwise).
    pub latency: TxLatency,
}

impl TxStats {
    /// Sends copied although the mode would have used zero-copy: after copied completions, during
    /// `ENOBUFS` back-off, for want of locked memory, or because the socket lacks zero-copy.
    pub fn fallbacks(&self) -> u64 {
        self.copy_copied + self.copy_enobufs + self.copy_memlock + self.copy_unsupported
    }

    /// Counts one send call (or io_uring request) that took `n` bytes, decided so.
    pub(crate) fn count_send(&mut self, decision: Decision, n: usize) {
        self.calls += 1;
        self.bytes += n as u64;
        match decision {
            Decision::ZeroCopy => self.zc_calls += 1,
            Decision::Copy(reason) => {
                self.copy_calls += 1;
                self.count_copy(reason);
            }
        }
    }

    pub(crate) fn count_copy(&mut self, reason: CopyReason) {
        let counter = match reason {
            CopyReason::Mode => &mut self.copy_mode,
            CopyReason::Empty => &mut self.copy_empty,
            CopyReason::Small => &mut self.copy_small,
            CopyReason::Copied => &mut self.copy_copied,
            CopyReason::Enobufs => &mut self.copy_enobufs,
            CopyReason::Memlock => &mut self.copy_memlock,
            CopyReason::Unsupported => &mut self.copy_unsupported,
            CopyReason::Cheaper => &mut self.copy_cheaper,
        };
        *counter += 1;
    }

    pub(crate) fn set_tracker(&mut self, c: TrackerCounts) {
        self.notifications = c.notifications;
        self.zc_ids = c.zc_ids;
        self.copied_ids = c.copied_ids;
        self.ignored_ids = c.ignored_ids;
        self.unregistered_ids = c.unregistered_ids;
    }
}

/// Sums the counters of several senders (connections): `total += tx.stats().clone()`. `auto`, a
/// choice rather than a count, is the last one added that has one.
impl std::ops::AddAssign for TxStats {
    fn add_assign(&mut self, other: TxStats) {
        // Destructured, so that a counter added to the struct cannot be left out here.
        let TxStats {
            calls,
            bytes,
            zc_calls,
            copy_calls,
            copy_mode,
            copy_empty,
            copy_small,
            copy_copied,
            copy_enobufs,
            copy_memlock,
            copy_unsupported,
            copy_cheaper,
            enobufs,
            policy_switches,
            cost_comparisons,
            partial_sends,
            waits,
            window_waits,
            notifications,
            zc_ids,
            copied_ids,
            ignored_ids,
            unregistered_ids,
            queue_errors,
            auto,
            latency,
        } = other;
        self.calls += calls;
        self.bytes += bytes;
        self.zc_calls += zc_calls;
        self.copy_calls += copy_calls;
        self.copy_mode += copy_mode;
        self.copy_empty += copy_empty;
        self.copy_small += copy_small;
        self.copy_copied += copy_copied;
        self.copy_enobufs += copy_enobufs;
        self.copy_memlock += copy_memlock;
        self.copy_unsupported += copy_unsupported;
        self.copy_cheaper += copy_cheaper;
        self.enobufs += enobufs;
        self.policy_switches += policy_switches;
        self.cost_comparisons += cost_comparisons;
        self.partial_sends += partial_sends;
        self.waits += waits;
        self.window_waits += window_waits;
        self.notifications += notifications;
        self.zc_ids += zc_ids;
        self.copied_ids += copied_ids;
        self.ignored_ids += ignored_ids;
        self.unregistered_ids += unregistered_ids;
        self.queue_errors += queue_errors;
        self.latency += &latency;
        if auto.is_some() {
            self.auto = auto;
        }
    }
}

impl std::ops::AddAssign<&TxStats> for TxStats {
    fn add_assign(&mut self, other: &TxStats) {
        *self += other.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_several_senders_sum() {
        let mut total = TxStats::default();
        let one = TxStats {
            calls: 2,
            bytes: 100,
            zc_ids: 1,
            queue_errors: 1,
            ..TxStats::default()
        };
        total += &one;
        total += one.clone();
        assert_eq!(
            (total.calls, total.bytes, total.zc_ids, total.queue_errors),
            (4, 200, 2, 2)
        );
        assert_eq!(total.auto, None);
    }
}
