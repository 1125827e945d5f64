//! Per-send latency ([`TxLatency`]): how long after its send call each send reached each point of
//! its way, as fixed-size log-linear histograms ([`Histogram`]) that record without allocating and
//! add up across senders.

use std::time::{Duration, SystemTime};

/// Sub-buckets per power of two: 2^3 = 8, so a bucket is at most 1/8 (12.5%) of its lower bound wide.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets for every `u64` of nanoseconds: `SUB` exact ones below `SUB`, then `SUB` per power of two.
const BUCKETS: usize = ((64 - SUB_BITS + 1) * SUB as u32) as usize;

/// A latency histogram of nanoseconds in log-linear buckets (8 per power of two: a quantile is
/// exact to within 12.5%, the maximum exactly). Recording does not allocate; `+=` adds another.
#[derive(Clone, PartialEq, Eq)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            max_ns: 0,
        }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count)
            .field("p50", &self.p50())
            .field("p99", &self.p99())
            .field("max", &self.max())
            .finish()
    }
}

/// The bucket of `ns`.
fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros();
    let sub = (ns >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The largest value of bucket `i`.
fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let exp = (i / SUB) as u32 + SUB_BITS - 1;
    let lower = (SUB + i % SUB) << (exp - SUB_BITS);
    lower + ((1u64 << (exp - SUB_BITS)) - 1)
}

impl Histogram {
    /// Records one value.
    pub(crate) fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0.0..=1.0): the upper end of the bucket holding it, never above the
    /// maximum; `None` when nothing was recorded.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_nanos(upper(i).min(self.max_ns)));
            }
        }
        self.max()
    }

    /// The median.
    pub fn p50(&self) -> Option<Duration> {
        self.quantile(0.5)
    }

    /// The 99th percentile.
    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }

    /// The largest value recorded.
    pub fn max(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_nanos(self.max_ns))
    }
}

impl std::ops::AddAssign<&Histogram> for Histogram {
    fn add_assign(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.max_ns = self.max_ns.max(other.max_ns);
    }
}

/// Now on the clock the kernel's software timestamps use (`CLOCK_REALTIME`), in nanoseconds since
/// the epoch.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One send's way as the kernel reported it, joined by [`super::timestamps`]: the time of the send
/// call and, where they came, the times of each later point (nanoseconds of `CLOCK_REALTIME`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Joined {
    /// The send call (the sender's clock, just before it).
    pub(crate) queued: u64,
    /// Entered the device's queueing discipline (`SCM_TSTAMP_SCHED`).
    pub(crate) scheduled: Option<u64>,
    /// Handed to the device driver (`SCM_TSTAMP_SND`).
    pub(crate) sent: Option<u64>,
    /// Every byte acknowledged by the peer (`SCM_TSTAMP_ACK`, TCP).
    pub(crate) acked: Option<u64>,
    /// The buffer came back: the sender read the zero-copy completion covering the send.
    pub(crate) freed: Option<u64>,
}

/// Per-send latency of a sender with [`crate::tx::SenderConfig::timestamps`] on: for each step, the
/// time from the send call to the kernel's report of it. Empty when timestamps are off (or the
/// socket refused them).
///
/// A send here is one system call (a stream send the kernel took in parts is several). The
/// kernel's times are software timestamps (`CLOCK_REALTIME`, as the sender's clock): `scheduled`
/// when the packet entered the device's queueing discipline, `sent` when it was handed to the
/// driver, `acked` when the peer acknowledged its last byte (TCP only), `freed` when the sender
/// read the zero-copy completion that gave its buffer back (zero-copy sends only; read when the
/// sender drains its error queue, so it includes that wait). On TCP the kernel stamps only the
/// last send of a socket buffer that several sends filled: the earlier ones take its times,
/// which their bytes shared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxLatency {
    /// Send call → queueing discipline.
    pub scheduled: Histogram,
    /// Send call → device driver.
    pub sent: Histogram,
    /// Send call → acknowledged by the peer (TCP).
    pub acked: Histogram,
    /// Send call → buffer back (zero-copy completion read).
    pub freed: Histogram,
    /// Sends whose timestamps were joined (each counted once all it could get came).
    pub sends: u64,
    /// Timestamps whose key matched no send waiting for one (a retransmission's, or a key the
    /// kernel numbered differently).
    pub unmatched: u64,
}

impl TxLatency {
    /// The steps by name, in the order a send takes them: `scheduled`, `sent`, `acked`, `freed`.
    pub fn steps(&self) -> [(&'static str, &Histogram); 4] {
        [
            ("scheduled", &self.scheduled),
            ("sent", &self.sent),
            ("acked", &self.acked),
            ("freed", &self.freed),
        ]
    }

    /// Records the steps of one joined send.
    pub(crate) fn record(&mut self, j: &Joined) {
        self.sends += 1;
        let steps = [
            (&mut self.scheduled, j.scheduled),
            (&mut self.sent, j.sent),
            (&mut self.acked, j.acked),
            (&mut self.freed, j.freed),
        ];
        for (h, at) in steps {
            if let Some(at) = at {
                // A clock stepped back between the call and the stamp reads as no wait.
                h.record(at.saturating_sub(j.queued));
            }
        }
    }
}

impl std::ops::AddAssign<&TxLatency> for TxLatency {
    fn add_assign(&mut self, other: &TxLatency) {
        let TxLatency {
            scheduled,
            sent,
            acked,
            freed,
            sends,
            unmatched,
        } = other;
        self.scheduled += scheduled;
        self.sent += sent;
        self.acked += acked;
        self.freed += freed;
        self.sends += sends;
        self.unmatched += unmatched;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let b = bucket(ns);
            assert!(b < BUCKETS, "{ns}");
            assert!(b >= last || ns > 100_000, "buckets rise with the value");
            last = b;
            assert!(upper(b) >= ns, "{ns} within bucket {b}");
            if b > 0 {
                assert!(upper(b - 1) < ns, "{ns} above the bucket before");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(upper(BUCKETS - 1), u64::MAX);
    }

    #[test]
    fn quantiles_are_within_a_bucket_and_the_max_is_exact() {
        let mut h = Histogram::default();
        assert_eq!((h.p50(), h.max()), (None, None));
        for us in 1..=1000u64 {
            h.record(us * 1000);
        }
        let p50 = h.p50().unwrap().as_nanos() as f64;
        let p99 = h.p99().unwrap().as_nanos() as f64;
        assert!((500_000.0..=500_000.0 * 1.125).contains(&p50), "{p50}");
        assert!((990_000.0..=1_000_000.0).contains(&p99), "{p99}");
        assert_eq!(h.max(), Some(Duration::from_micros(1000)));
        assert_eq!(h.count(), 1000);
    }

    #[test]
    fn latencies_of_several_senders_sum() {
        let mut a = TxLatency::default();
        let mut b = TxLatency::default();
        let send = |queued, acked| Joined {
            queued,
            acked: Some(acked),
            ..Joined::default()
        };
        a.record(&send(100, 1_100));
        b.record(&send(100, 9_100));
        b.unmatched = 2;
        a += &b;
        assert_eq!((a.sends, a.unmatched, a.acked.count()), (2, 2, 2));
        assert_eq!(a.acked.max(), Some(Duration::from_nanos(9_000)));
        assert_eq!(a.sent.count(), 0);
    }
}
