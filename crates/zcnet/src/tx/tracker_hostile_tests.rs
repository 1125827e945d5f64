//! The completion tracker fed hostile completions: any `lo..=hi` (up to the whole u32 id space,
//! wrapping), from any starting id. Whatever arrives, a loan is released only by a range that names
//! its id, a range naming an id never registered stops all releases, and the counts stay exact.

use std::collections::VecDeque;

use super::tracker::{Completion, CompletionTracker};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Register,
    /// A completion relative to the tracker's ids (`lo` this far behind the next id), or absolute.
    Near {
        back: u32,
        span: u32,
        copied: bool,
    },
    Anywhere {
        lo: u32,
        hi: u32,
        copied: bool,
    },
    Cancel,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Register),
        3 => (0u32..70, 0u32..70, any::<bool>())
            .prop_map(|(back, span, copied)| Op::Near { back, span, copied }),
        1 => (any::<u32>(), any::<u32>(), any::<bool>())
            .prop_map(|(lo, hi, copied)| Op::Anywhere { lo, hi, copied }),
        1 => Just(Op::Cancel),
    ]
}

/// Whether `id` lies in the wrapping range `lo..=hi`.
fn in_range(id: u32, lo: u32, hi: u32) -> bool {
    id.wrapping_sub(lo) <= hi.wrapping_sub(lo)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn hostile_ranges_release_only_what_they_name(
        first in prop_oneof![any::<u32>(), (u32::MAX - 80)..=u32::MAX, Just(0u32)],
        ops in proptest::collection::vec(op(), 0..250),
    ) {
        let mut t = CompletionTracker::new(first);
        // Outstanding (id, item) in registration order; ids completed are removed.
        let mut model: VecDeque<(u32, u64)> = VecDeque::new();
        let mut next = first;
        let mut item = 0u64;
        let mut lost = false;
        let (mut zc, mut copied_ids) = (0u64, 0u64);
        for op in ops {
            let (lo, hi, copied) = match op {
                Op::Register => {
                    prop_assert_eq!(t.register(item), next);
                    model.push_back((next, item));
                    next = next.wrapping_add(1);
                    item += 1;
                    continue;
                }
                Op::Cancel => {
                    let last = model.back().copied().filter(|&(id, _)| id == next.wrapping_sub(1));
                    let got = t.cancel_last();
                    if got.is_some() {
                        prop_assert_eq!(got, last.map(|(_, it)| it));
                        model.pop_back();
                        next = next.wrapping_sub(1);
                    }
                    continue;
                }
                Op::Near { back, span, copied } => {
                    let lo = next.wrapping_sub(back);
                    (lo, lo.wrapping_add(span), copied)
                }
                Op::Anywhere { lo, hi, copied } => (lo, hi, copied),
            };
            // The ids registered and not given back: from the oldest outstanding to the next.
            let base = model.front().map_or(next, |&(id, _)| id);
            let window = next.wrapping_sub(base);
            let within = lo.wrapping_sub(base) < window
                && u64::from(lo.wrapping_sub(base)) + u64::from(hi.wrapping_sub(lo)) < u64::from(window);
            let names_next = in_range(next, lo, hi);
            let mut released = Vec::new();
            let n = t.complete(Completion { lo, hi, copied }, |v| released.push(v));
            prop_assert_eq!(n, released.len() as u64);
            let now_lost = t.unregistered_id().is_some();
            // The next id was never registered: a range naming it proves the numbering lost, for good.
            prop_assert!(now_lost || !names_next, "a range naming the next id was accepted");
            prop_assert!(now_lost || !lost, "the lost numbering was forgotten");
            // Only a range reaching past the registered ids can lose it.
            prop_assert!(!now_lost || lost || !within, "a range of registered ids lost the numbering");
            lost = now_lost;
            let expect: Vec<u64> = model
                .iter()
                .filter(|&&(id, _)| in_range(id, lo, hi))
                .map(|&(_, it)| it)
                .collect();
            if lost {
                prop_assert!(released.is_empty(), "released {:?} after losing track", released);
            } else if within {
                let mut got = released.clone();
                got.sort_unstable();
                prop_assert_eq!(&got, &expect);
            }
            for v in &released {
                prop_assert!(expect.contains(v), "released {} which the range does not name", v);
            }
            model.retain(|(_, it)| !released.contains(it));
            if copied { copied_ids += n } else { zc += n }
            prop_assert_eq!(t.outstanding(), model.len());
            prop_assert_eq!(t.next_id(), next);
            for &(id, _) in &model {
                prop_assert!(t.is_outstanding(id));
            }
        }
        let c = t.counts();
        prop_assert_eq!((c.zc_ids, c.copied_ids), (zc, copied_ids));
        let mut rest = t.abandon();
        rest.sort_unstable();
        let mut left: Vec<u64> = model.into_iter().map(|(_, it)| it).collect();
        left.sort_unstable();
        prop_assert_eq!(rest, left);
        prop_assert_eq!(t.outstanding(), 0);
    }
}
