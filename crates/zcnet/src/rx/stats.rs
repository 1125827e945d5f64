//! Receive counters: how many bytes arrived mapped and how many copied, the calls it took, and what
//! the auto mode chose.

use super::AutoChoice;

/// What a [`Receiver`](super::Receiver) has received and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RxStats {
    /// Bytes received as pages mapped into the window (no copy).
    pub mapped_bytes: u64,
    /// Bytes the kernel copied into the copy buffer during `TCP_ZEROCOPY_RECEIVE` (copybuf).
    pub copybuf_bytes: u64,
    /// Bytes read with `recv`.
    pub recv_bytes: u64,
    /// `TCP_ZEROCOPY_RECEIVE` calls.
    pub zerocopy_calls: u64,
    /// `recv` calls.
    pub recv_calls: u64,
    /// `poll` calls made while waiting for data.
    pub polls: u64,
    /// Mapped ranges released with `madvise(MADV_DONTNEED)`.
    pub zaps: u64,
    /// Chunks handed out.
    pub chunks: u64,
    /// Comparisons of the CPU cost per byte of mapped receive and `recv` that
    /// [`RxMode::Auto`](super::RxMode::Auto) finished.
    pub cost_comparisons: u64,
    /// What [`RxMode::Auto`](super::RxMode::Auto) does and why (`None` in the other modes).
    pub auto: Option<AutoChoice>,
    /// Bytes received through io_uring zero-copy receive ([`RxPath::Zcrx`](super::RxPath::Zcrx)),
    /// zero-copied or not.
    pub zcrx_bytes: u64,
    /// Of those, the bytes the kernel copied into the area instead of the NIC writing them there:
    /// its own statistics (`zcrx_stats.copy_bytes`, Linux 7.2), or every byte of a device-less
    /// instance on a kernel without them.
    pub zcrx_copied_bytes: u64,
    /// The kernel's count of copies into the area (`zcrx_stats.copy_count`; pieces it copied, not
    /// completions).
    pub zcrx_copy_count: u64,
    /// Copy events the kernel posted (`ZCRX_EVENT_COPY`, each re-armed at once).
    pub zcrx_copy_events: u64,
    /// Allocation-failure events (`ZCRX_EVENT_ALLOC_FAIL`: the NIC queue's page pool found no free
    /// buffer in the area and the device dropped packets until chunks came back).
    pub zcrx_alloc_failures: u64,
    /// Events that could not be re-armed (the event stays silent; the statistics still count).
    pub zcrx_rearm_failures: u64,
    /// Receives that ended because the area was exhausted (`-ENOMEM`); each was re-armed once the
    /// chunks came back, losing nothing.
    pub zcrx_exhausted: u64,
    /// Multishot `RECV_ZC` requests submitted.
    pub zcrx_arms: u64,
}

impl RxStats {
    /// All bytes received.
    pub fn bytes(&self) -> u64 {
        self.mapped_bytes + self.copybuf_bytes + self.recv_bytes + self.zcrx_bytes
    }

    /// Bytes that were copied (copybuf, recv, and what a zcrx instance copied).
    pub fn copied_bytes(&self) -> u64 {
        self.copybuf_bytes + self.recv_bytes + self.zcrx_copied_bytes
    }

    /// Share of the bytes that arrived mapped, in percent (tcp_mmap's "% mmap'ed"); 0 before any byte.
    pub fn mapped_pct(&self) -> f64 {
        match self.bytes() {
            0 => 0.0,
            total => self.mapped_bytes as f64 * 100.0 / total as f64,
        }
    }
}

impl std::ops::AddAssign for RxStats {
    /// Adds another receiver's counters (e.g. to total several connections); its auto choice, if it has
    /// one, replaces this one's.
    fn add_assign(&mut self, other: RxStats) {
        self.mapped_bytes += other.mapped_bytes;
        self.copybuf_bytes += other.copybuf_bytes;
        self.recv_bytes += other.recv_bytes;
        self.zerocopy_calls += other.zerocopy_calls;
        self.recv_calls += other.recv_calls;
        self.polls += other.polls;
        self.zaps += other.zaps;
        self.chunks += other.chunks;
        self.cost_comparisons += other.cost_comparisons;
        self.auto = other.auto.or(self.auto);
        self.zcrx_bytes += other.zcrx_bytes;
        self.zcrx_copied_bytes += other.zcrx_copied_bytes;
        self.zcrx_copy_count += other.zcrx_copy_count;
        self.zcrx_copy_events += other.zcrx_copy_events;
        self.zcrx_alloc_failures += other.zcrx_alloc_failures;
        self.zcrx_rearm_failures += other.zcrx_rearm_failures;
        self.zcrx_exhausted += other.zcrx_exhausted;
        self.zcrx_arms += other.zcrx_arms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        let stats = RxStats {
            mapped_bytes: 3_000_000,
            copybuf_bytes: 500_000,
            recv_bytes: 500_000,
            ..RxStats::default()
        };
        assert_eq!(stats.bytes(), 4_000_000);
        assert_eq!(stats.copied_bytes(), 1_000_000);
        assert_eq!(stats.mapped_pct(), 75.0);
        assert_eq!(RxStats::default().mapped_pct(), 0.0);
        let mut twice = stats;
        twice += stats;
        assert_eq!(twice.bytes(), 8_000_000);
        assert_eq!(twice.mapped_pct(), 75.0);
        let zcrx = RxStats {
            zcrx_bytes: 1000,
            zcrx_copied_bytes: 1000,
            ..RxStats::default()
        };
        assert_eq!(
            (zcrx.bytes(), zcrx.copied_bytes(), zcrx.mapped_pct()),
            (1000, 1000, 0.0)
        );
    }
}
