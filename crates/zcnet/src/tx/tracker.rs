//! The completion tracker: which MSG_ZEROCOPY ids are still owned by the kernel, and which buffers
//! their completions release.
//!
//! It knows nothing about sockets: it consumes [`Completion`] ranges with a copied flag, whatever
//! produced them (an `IP_RECVERR`/`IPV6_RECVERR`/`VSOCK_RECVERR` control message decoded by
//! [`crate::sys::errqueue::decode`], or an io_uring notification turned into a one-id range).
//!
//! Kernel behaviour relied on: ids are a per-socket u32 counter starting at 0, taken by each
//! successful zero-copy send that carries data; completion ranges are inclusive, may cover many ids
//! (coalesced), may wrap around u32, and may arrive in any order. A completion can only name ids the
//! kernel handed out: one naming an id at or after the tracker's next id (never registered) proves the
//! tracker's numbering differs from the kernel's, and from then on the tracker releases nothing
//! (its items stay lent until [`CompletionTracker::abandon`]) and reports [`CompletionTracker::unregistered_id`].

use std::collections::VecDeque;

pub use crate::sys::errqueue::ZerocopyCompletion as Completion;

/// Counters of a [`CompletionTracker`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrackerCounts {
    /// Completion ranges consumed.
    pub notifications: u64,
    /// Ids completed without a copy (the kernel really sent from the lent pages).
    pub zc_ids: u64,
    /// Ids completed with `SO_EE_CODE_ZEROCOPY_COPIED` (the kernel copied after all).
    pub copied_ids: u64,
    /// Ids in completion ranges that matched nothing outstanding (a duplicate, or an id never lent).
    pub ignored_ids: u64,
    /// Ids in completion ranges at or after the next id, which the tracker never registered (its
    /// numbering is lost; see the module docs). Also counted in `ignored_ids`.
    pub unregistered_ids: u64,
}

/// Outstanding zero-copy sends keyed by id, each holding the item (a buffer loan) that must not be
/// released before the kernel reports the id complete.
#[derive(Debug)]
pub struct CompletionTracker<T> {
    /// Id of `slots[0]`.
    base: u32,
    /// One slot per id from `base`; `None` once completed (kept until every earlier id is done).
    slots: VecDeque<Option<T>>,
    outstanding: usize,
    counts: TrackerCounts,
    /// The first id a completion named that was never registered.
    unregistered: Option<u32>,
}

impl<T> CompletionTracker<T> {
    /// A tracker whose next id is `first_id` (0 for a fresh socket, which is where the kernel starts).
    pub fn new(first_id: u32) -> Self {
        CompletionTracker {
            base: first_id,
            slots: VecDeque::new(),
            outstanding: 0,
            counts: TrackerCounts::default(),
            unregistered: None,
        }
    }

    /// The id the next registered send will get.
    pub fn next_id(&self) -> u32 {
        self.base.wrapping_add(self.slots.len() as u32)
    }

    /// Records a zero-copy send that took the next id, keeping `item` until that id completes.
    pub fn register(&mut self, item: T) -> u32 {
        let id = self.next_id();
        self.slots.push_back(Some(item));
        self.outstanding += 1;
        id
    }

    /// Takes back the most recent registration when the kernel turned out not to consume its id (the
    /// send failed before taking one). Returns the item, or `None` — changing nothing — if that id
    /// already completed (the kernel did take it) or nothing is registered.
    pub fn cancel_last(&mut self) -> Option<T> {
        let item = self.slots.back_mut()?.take()?;
        self.slots.pop_back();
        self.outstanding -= 1;
        Some(item)
    }

    /// Takes back the item of outstanding `id` without counting a completion: for a request the
    /// kernel finished without ever taking the buffer (an io_uring result without `F_MORE`).
    #[cfg(feature = "io-uring")]
    pub(crate) fn withdraw(&mut self, id: u32) -> Option<T> {
        let off = id.wrapping_sub(self.base) as usize;
        let item = self.slots.get_mut(off)?.take()?;
        self.outstanding -= 1;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        Some(item)
    }

    /// Whether `id` is registered and not yet completed.
    pub fn is_outstanding(&self, id: u32) -> bool {
        let off = id.wrapping_sub(self.base) as usize;
        self.slots.get(off).is_some_and(Option::is_some)
    }

    /// Ids registered and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// The counters so far.
    pub fn counts(&self) -> TrackerCounts {
        self.counts
    }

    /// The first id a completion named that was never registered (at or after the next id): the
    /// tracker then releases nothing more. `None` while the numbering matches the kernel's.
    pub fn unregistered_id(&self) -> Option<u32> {
        self.unregistered
    }

    /// Consumes one completion range: every outstanding id in `lo..=hi` (wrapping) hands its item to
    /// `release`; ids that match nothing are counted as ignored. A range naming an id never registered
    /// releases nothing, now or later (see [`CompletionTracker::unregistered_id`]). Returns the number
    /// of ids released.
    pub fn complete(&mut self, c: Completion, mut release: impl FnMut(T)) -> u64 {
        self.counts.notifications += 1;
        let span = u64::from(c.hi.wrapping_sub(c.lo)) + 1;
        let len = self.slots.len() as u64;
        let start = u64::from(c.lo.wrapping_sub(self.base));
        // Ids at or after the next id, up to half the id space ahead (further is read as behind `base`:
        // an old, already completed id).
        let ahead: u64 = [0u64, 1 << 32]
            .iter()
            .map(|w| overlap(start..start + span, w + len..w + (1 << 31)))
            .sum();
        if ahead > 0 {
            self.counts.unregistered_ids += ahead;
            let lo_ahead = (len..1 << 31).contains(&start);
            let first = if lo_ahead { c.lo } else { self.next_id() };
            self.unregistered.get_or_insert(first);
        }
        if self.unregistered.is_some() {
            self.counts.ignored_ids += span;
            return 0;
        }
        // Offsets of the range in id space, relative to `base`; the window is 0..len (and its image
        // 2^32 higher, for a range that starts before `base` and wraps into the window).
        let mut matched = 0u64;
        for window in [0u64, 1 << 32] {
            let lo = start.max(window);
            let hi = (start + span).min(window + len);
            for off in lo..hi.max(lo) {
                if let Some(item) = self.slots[(off - window) as usize].take() {
                    matched += 1;
                    release(item);
                }
            }
        }
        self.outstanding -= matched as usize;
        if c.copied {
            self.counts.copied_ids += matched;
        } else {
            self.counts.zc_ids += matched;
        }
        self.counts.ignored_ids += span - matched;
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        matched
    }

    /// Removes every outstanding item without a completion, for a caller that must keep them from
    /// reuse forever (the kernel may still read them): they are returned, not released.
    pub fn abandon(&mut self) -> Vec<T> {
        self.base = self.next_id();
        let items: Vec<T> = self.slots.drain(..).flatten().collect();
        self.outstanding = 0;
        items
    }
}

/// How many values two half-open ranges share.
fn overlap(a: std::ops::Range<u64>, b: std::ops::Range<u64>) -> u64 {
    a.end.min(b.end).saturating_sub(a.start.max(b.start))
}

/// The tracker keeps a registered item until the completion of its id consumes it, or hands it back
/// through [`CompletionTracker::abandon`] (whose items the sender leaks) or
/// [`CompletionTracker::cancel_last`] (used only when the kernel took no id).
impl<T> crate::sys::errqueue::LoanKeeper<T> for CompletionTracker<T> {
    fn keep(&mut self, loan: T) -> u32 {
        self.register(loan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn range(lo: u32, hi: u32, copied: bool) -> Completion {
        Completion { lo, hi, copied }
    }

    #[test]
    fn coalesced_and_out_of_order_ranges() {
        let mut t = CompletionTracker::new(0);
        for i in 0..6u32 {
            assert_eq!(t.register(i), i);
        }
        let mut got = Vec::new();
        assert_eq!(t.complete(range(3, 4, true), |i| got.push(i)), 2);
        assert_eq!(t.complete(range(0, 1, false), |i| got.push(i)), 2);
        assert_eq!(t.complete(range(0, 1, false), |i| got.push(i)), 0);
        assert_eq!(got, vec![3, 4, 0, 1]);
        assert_eq!(t.outstanding(), 2);
        assert!(t.is_outstanding(2) && t.is_outstanding(5) && !t.is_outstanding(3));
        assert_eq!(t.complete(range(2, 5, false), |i| got.push(i)), 2);
        let c = t.counts();
        assert_eq!(
            (c.zc_ids, c.copied_ids, c.ignored_ids, c.notifications),
            (4, 2, 4, 4)
        );
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.next_id(), 6);
    }

    #[test]
    fn wraps_around_u32() {
        let mut t = CompletionTracker::new(u32::MAX - 1);
        let ids: Vec<u32> = (0..4).map(|i| t.register(i)).collect();
        assert_eq!(ids, vec![u32::MAX - 1, u32::MAX, 0, 1]);
        let mut got = Vec::new();
        assert_eq!(t.complete(range(u32::MAX, 0, false), |i| got.push(i)), 2);
        assert_eq!(
            t.complete(range(u32::MAX - 3, 1, false), |i| got.push(i)),
            2
        );
        assert_eq!(got, vec![1, 2, 0, 3]);
        assert_eq!(t.counts().ignored_ids, 2 + 2);
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn cancel_last_gives_back_an_unconsumed_id() {
        let mut t = CompletionTracker::new(10);
        t.register('a');
        t.register('b');
        assert_eq!(t.cancel_last(), Some('b'));
        assert_eq!(t.next_id(), 11);
        t.complete(range(10, 10, false), drop);
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.register('c'), 11);
    }

    #[test]
    fn cancel_last_leaves_a_completed_id_taken() {
        let mut t = CompletionTracker::new(0);
        t.register('a');
        t.register('b');
        t.complete(range(1, 1, false), drop);
        assert_eq!(t.cancel_last(), None);
        assert_eq!(
            t.next_id(),
            2,
            "id 1 was taken by the kernel: never handed out again"
        );
        assert_eq!(t.register('c'), 2);
        assert_eq!(t.outstanding(), 2);
    }

    #[test]
    #[cfg(feature = "io-uring")]
    fn withdraw_takes_an_id_back_uncounted() {
        let mut t = CompletionTracker::new(5);
        t.register('a');
        t.register('b');
        assert_eq!(t.withdraw(5), Some('a'));
        assert_eq!(t.withdraw(5), None);
        assert_eq!(t.withdraw(9), None);
        assert_eq!((t.outstanding(), t.next_id()), (1, 7));
        assert_eq!(t.counts(), TrackerCounts::default());
    }

    #[test]
    fn abandon_returns_everything_outstanding() {
        let mut t = CompletionTracker::new(0);
        t.register(1);
        t.register(2);
        t.register(3);
        t.complete(range(1, 1, true), drop);
        assert_eq!(t.abandon(), vec![1, 3]);
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.next_id(), 3, "ids already taken are not handed out again");
    }

    #[test]
    fn a_completion_naming_an_unregistered_id_stops_every_release() {
        let mut t = CompletionTracker::new(7);
        for i in 0..3 {
            t.register(i);
        }
        // The kernel numbered one more send than the tracker registered: ids 7..=10 for 7..=9.
        let mut got = Vec::new();
        assert_eq!(t.complete(range(8, 10, false), |i| got.push(i)), 0);
        assert_eq!(t.unregistered_id(), Some(10));
        assert_eq!(t.complete(range(7, 7, false), |i| got.push(i)), 0);
        assert!(got.is_empty(), "released {got:?} after losing track");
        assert_eq!(t.outstanding(), 3);
        assert_eq!(t.counts().unregistered_ids, 1);
        assert_eq!(t.abandon(), vec![0, 1, 2]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Send,
        Complete {
            lo_back: u32,
            len: u32,
            copied: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Send),
            2 => (0u32..40, 0u32..12, any::<bool>())
                .prop_map(|(lo_back, len, copied)| Op::Complete { lo_back, len, copied }),
        ]
    }

    proptest! {
        // The model: a map from id to item for every id sent and not yet completed.
        #[test]
        fn matches_a_simple_model(first in any::<u32>(), ops in proptest::collection::vec(op(), 0..200)) {
            let mut t = CompletionTracker::new(first);
            let mut model: BTreeMap<u32, u64> = BTreeMap::new();
            let mut next = first;
            let mut item = 0u64;
            let (mut zc, mut copied, mut ignored) = (0u64, 0u64, 0u64);
            let mut lost: Option<u32> = None;
            for op in ops {
                match op {
                    Op::Send => {
                        prop_assert_eq!(t.register(item), next);
                        model.insert(next, item);
                        next = next.wrapping_add(1);
                        item += 1;
                    }
                    Op::Complete { lo_back, len, copied: c } => {
                        let lo = next.wrapping_sub(lo_back);
                        let hi = lo.wrapping_add(len);
                        // An id at or after `next` was never registered: from then on, nothing
                        // is released.
                        if len >= lo_back && lost.is_none() {
                            lost = Some(next);
                        }
                        let mut expect: Vec<u64> = Vec::new();
                        if lost.is_some() {
                            ignored += u64::from(len) + 1;
                        } else {
                            for k in 0..=len {
                                match model.remove(&lo.wrapping_add(k)) {
                                    Some(v) => expect.push(v),
                                    None => ignored += 1,
                                }
                            }
                        }
                        if c { copied += expect.len() as u64 } else { zc += expect.len() as u64 }
                        let mut got = Vec::new();
                        t.complete(Completion { lo, hi, copied: c }, |v| got.push(v));
                        got.sort_unstable();
                        expect.sort_unstable();
                        prop_assert_eq!(got, expect);
                        prop_assert_eq!(t.unregistered_id(), lost);
                    }
                }
                prop_assert_eq!(t.outstanding(), model.len());
                prop_assert_eq!(t.next_id(), next);
            }
            let c = t.counts();
            prop_assert_eq!((c.zc_ids, c.copied_ids, c.ignored_ids), (zc, copied, ignored));
            let mut rest = t.abandon();
            rest.sort_unstable();
            prop_assert_eq!(rest, model.into_values().collect::<Vec<_>>());
        }
    }
}
