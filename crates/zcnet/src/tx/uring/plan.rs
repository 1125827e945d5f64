//! Which bytes of the queued sends each request of the next chain carries: a pure function of the
//! bytes left in each send and how each is decided, so its limits can be checked for any sizes.
//!
//! Kernel behaviour relied on: `IORING_OP_SEND_ZC`/`IORING_OP_SEND` take a 32-bit length, and
//! every send request is cut to `MAX_RW_COUNT` bytes without an error; with `MSG_WAITALL` the cut
//! request then counts as complete, so its link does not break and the next request of the chain
//! would send the following buffer before the rest of this one. A request therefore carries at most
//! [`MAX_REQUEST_LEN`] bytes (see `sys::uring`). `sendmsg` refuses more than `UIO_MAXIOV`
//! ([`MAX_PARTS`]) iovecs.

use std::ops::Range;

pub(crate) use crate::sys::uring::{MAX_PARTS, MAX_REQUEST_LEN};

/// The most bytes a stream request gathers from several buffers: one result and one notification
/// for up to four 64 KiB sends or 64 of 4 KiB. It relies on Nagle's algorithm being off (the
/// path turns it off on a TCP socket it owns): with it on, the gathered request's short last
/// segment waited for an ACK, and under bbr four 65435-byte sends to a request ran at 0.77x the
/// rate of one request each. With it off, over loopback under bbr on a VM, gathering up to 256 KiB
/// instead of 64 KiB took 65435-byte sends from a median 0.926x-0.952x `io_uring_zerocopy_tx`'s
/// rate per paired trial to 1.045x-1.051x, and 4096-byte ones from 1.134x to 1.436x (a pool's:
/// 1.026x to 1.327x); gathering up to 512 KiB, one request per chain, fell to 0.879x.
pub(crate) const GATHER_BYTES: usize = 256 << 10;

/// A queued send as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Part {
    /// Bytes not yet taken by the kernel.
    pub left: usize,
    /// Decided zero-copy (requests never mix zero-copy and copied sends).
    pub zc: bool,
}

/// One request of a chain: the parts `parts`, each from its first unsent byte; all of each but the
/// last, and `last_take` bytes of the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// Indices of the parts carried, in order.
    pub parts: Range<usize>,
    /// Bytes of the last part carried (all of its `left` unless the request splits it).
    pub last_take: usize,
}

/// Plans up to `max_requests` requests over `parts`, in order, into `planned` (emptied first: the
/// sender keeps one vector for every chain). A stream request gathers consecutive
/// parts decided alike, up to [`GATHER_BYTES`] and [`MAX_PARTS`]; with `last_apart`, never the
/// last of `parts` with any before it (it goes in a request of its own). A part longer than
/// [`MAX_REQUEST_LEN`] goes out alone, cut to that length, and ends the chain (the rest goes in the
/// next one, after the kernel took this). On a datagram socket every part is one request, whole:
/// the sender refuses longer datagrams before queueing them.
pub(crate) fn plan(
    parts: &[Part],
    stream: bool,
    last_apart: bool,
    max_requests: usize,
    planned: &mut Vec<Planned>,
) {
    planned.clear();
    // Where gathering stops: before the last part when it goes apart.
    let gather_end = match parts.len() {
        n if last_apart && n > 1 => n - 1,
        n => n,
    };
    let mut start = 0;
    while start < parts.len() && planned.len() < max_requests {
        let first = parts[start];
        if !stream {
            planned.push(Planned {
                parts: start..start + 1,
                last_take: first.left,
            });
            start += 1;
            continue;
        }
        if first.left > MAX_REQUEST_LEN {
            planned.push(Planned {
                parts: start..start + 1,
                last_take: MAX_REQUEST_LEN,
            });
            break;
        }
        let mut end = start + 1;
        let mut bytes = first.left;
        while end < gather_end && end - start < MAX_PARTS && parts[end].zc == first.zc {
            match bytes.checked_add(parts[end].left) {
                Some(sum) if sum <= GATHER_BYTES => bytes = sum,
                _ => break,
            }
            end += 1;
        }
        planned.push(Planned {
            parts: start..end,
            last_take: parts[end - 1].left,
        });
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Lengths a caller can ask for, hostile ones included (none is allocated).
    fn hostile_len() -> impl Strategy<Value = usize> {
        prop_oneof![
            Just(0usize),
            Just(1),
            Just(u32::MAX as usize),
            Just(u32::MAX as usize + 1),
            Just(usize::MAX),
            Just(usize::MAX - 1),
            Just(MAX_REQUEST_LEN),
            Just(MAX_REQUEST_LEN + 1),
            Just(GATHER_BYTES),
            Just(GATHER_BYTES + 1),
            0usize..(1 << 20),
            any::<usize>(),
        ]
    }

    fn parts() -> impl Strategy<Value = Vec<Part>> {
        proptest::collection::vec(
            (hostile_len(), any::<bool>()).prop_map(|(left, zc)| Part { left, zc }),
            0..1500,
        )
    }

    /// Checks every promise of [`plan`] for one input.
    fn check(
        parts: &[Part],
        stream: bool,
        last_apart: bool,
        max_requests: usize,
    ) -> Result<(), TestCaseError> {
        let mut planned = Vec::new();
        plan(parts, stream, last_apart, max_requests, &mut planned);
        prop_assert!(planned.len() <= max_requests);
        if max_requests > 0 && !parts.is_empty() {
            prop_assert!(!planned.is_empty(), "no progress");
        }
        let mut next = 0;
        for (k, request) in planned.iter().enumerate() {
            let last = k + 1 == planned.len();
            // Contiguous, in order, none skipped or repeated.
            prop_assert_eq!(request.parts.start, next);
            prop_assert!(request.parts.end > request.parts.start);
            prop_assert!(request.parts.end <= parts.len());
            next = request.parts.end;
            let carried = &parts[request.parts.clone()];
            prop_assert!(carried.len() <= MAX_PARTS);
            prop_assert!(carried.iter().all(|p| p.zc == carried[0].zc));
            let tail = carried[carried.len() - 1];
            prop_assert!(request.last_take <= tail.left);
            if request.last_take < tail.left {
                // Only the chain's last request may split a part.
                prop_assert!(last && stream && carried.len() == 1);
            }
            if !stream {
                prop_assert_eq!(carried.len(), 1);
                continue;
            }
            let mut whole = carried[..carried.len() - 1].iter().map(|p| p.left);
            let bytes = whole
                .try_fold(request.last_take, |sum, left| sum.checked_add(left))
                .expect("a request's bytes fit a usize");
            prop_assert!(bytes <= MAX_REQUEST_LEN, "{bytes} bytes in one request");
            prop_assert!(u32::try_from(bytes).is_ok());
            if carried.len() > 1 {
                prop_assert!(bytes <= GATHER_BYTES);
                if last_apart {
                    prop_assert!(request.parts.end < parts.len(), "the last part gathered");
                }
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn every_request_is_one_the_kernel_takes_whole(
            parts in parts(),
            stream in any::<bool>(),
            last_apart in any::<bool>(),
            max_requests in prop_oneof![Just(0usize), 1usize..300, Just(usize::MAX)],
        ) {
            check(&parts, stream, last_apart, max_requests)?;
        }
    }

    #[test]
    fn a_part_over_4_gib_goes_out_in_requests_of_at_most_1_gib() {
        let huge = Part {
            left: (4 << 30) + 1,
            zc: true,
        };
        let after = Part { left: 10, zc: true };
        let mut planned = Vec::new();
        plan(&[huge, after], true, false, 64, &mut planned);
        assert_eq!(
            planned,
            [Planned {
                parts: 0..1,
                last_take: MAX_REQUEST_LEN
            }]
        );
    }

    #[test]
    fn many_small_parts_gather_at_most_uio_maxiov_per_request() {
        let parts = vec![Part { left: 1, zc: true }; 3000];
        let mut planned = Vec::new();
        plan(&parts, true, false, usize::MAX, &mut planned);
        assert_eq!(planned.len(), 3);
        assert_eq!(planned[0].parts, 0..MAX_PARTS);
        assert_eq!(planned[2].parts, 2 * MAX_PARTS..3000);
    }

    #[test]
    fn the_last_part_goes_apart_when_asked() {
        let parts = [Part {
            left: 4096,
            zc: true,
        }; 4];
        let mut planned = Vec::new();
        plan(&parts, true, true, 64, &mut planned);
        let ranges: Vec<_> = planned.iter().map(|p| p.parts.clone()).collect();
        assert_eq!(ranges, [0..3, 3..4]);
        plan(&parts[..1], true, true, 64, &mut planned);
        assert_eq!(planned.len(), 1);
        plan(&parts, true, false, 64, &mut planned);
        assert_eq!(planned.len(), 1);
    }
}
