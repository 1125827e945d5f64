//! AF_XDP socket counters (`XDP_STATISTICS`).

use crate::sys::xdp::xdp_statistics;

/// The kernel's per-socket counters (`struct xdp_statistics`, fully filled since kernel 5.9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Statistics {
    /// Frames dropped for reasons other than invalid descriptors (e.g. no rx ring room, frame too big).
    pub rx_dropped: u64,
    /// Fill ring descriptors the kernel rejected.
    pub rx_invalid_descs: u64,
    /// Tx ring descriptors the kernel rejected.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the tx ring empty.
    pub tx_ring_empty_descs: u64,
}

impl Statistics {
    /// Invalid descriptors in both directions.
    pub fn invalid_descs(&self) -> u64 {
        self.rx_invalid_descs + self.tx_invalid_descs
    }

    /// What grew since `earlier` (0 for a counter that did not).
    pub fn since(&self, earlier: &Statistics) -> Statistics {
        Statistics {
            rx_dropped: self.rx_dropped.saturating_sub(earlier.rx_dropped),
            rx_invalid_descs: self
                .rx_invalid_descs
                .saturating_sub(earlier.rx_invalid_descs),
            tx_invalid_descs: self
                .tx_invalid_descs
                .saturating_sub(earlier.tx_invalid_descs),
            rx_ring_full: self.rx_ring_full.saturating_sub(earlier.rx_ring_full),
            rx_fill_ring_empty_descs: self
                .rx_fill_ring_empty_descs
                .saturating_sub(earlier.rx_fill_ring_empty_descs),
            tx_ring_empty_descs: self
                .tx_ring_empty_descs
                .saturating_sub(earlier.tx_ring_empty_descs),
        }
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        *self == Statistics::default()
    }

    /// The same counters as the kernel's socket diagnostics give them (`struct xdp_diag_stats`,
    /// filled from the socket fields `XDP_STATISTICS` reads), in that struct's order: `n_rx_dropped`,
    /// `n_rx_invalid`, `n_rx_full`, `n_fill_ring_empty`, `n_tx_invalid`, `n_tx_ring_empty`.
    pub(crate) fn from_diag(
        [
            rx_dropped,
            rx_invalid_descs,
            rx_ring_full,
            rx_fill_ring_empty_descs,
            tx_invalid_descs,
            tx_ring_empty_descs,
        ]: [u64; 6],
    ) -> Statistics {
        Statistics {
            rx_dropped,
            rx_invalid_descs,
            tx_invalid_descs,
            rx_ring_full,
            rx_fill_ring_empty_descs,
            tx_ring_empty_descs,
        }
    }
}

add_counters! {
    /// The counters of several sockets (one per queue) added up.
    Statistics {
        rx_dropped,
        rx_invalid_descs,
        tx_invalid_descs,
        rx_ring_full,
        rx_fill_ring_empty_descs,
        tx_ring_empty_descs,
    }
}

impl From<xdp_statistics> for Statistics {
    fn from(s: xdp_statistics) -> Statistics {
        Statistics {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    /// Also the test of `add_counters!`, which sums every stats and counters type but `TxStats`.
    fn sockets_add_up_field_by_field() {
        let one = Statistics {
            rx_dropped: 1,
            rx_invalid_descs: 2,
            tx_invalid_descs: 3,
            rx_ring_full: 4,
            rx_fill_ring_empty_descs: 5,
            tx_ring_empty_descs: 6,
        };
        let mut total = one;
        total += one;
        assert_eq!(
            total,
            Statistics {
                rx_dropped: 2,
                rx_invalid_descs: 4,
                tx_invalid_descs: 6,
                rx_ring_full: 8,
                rx_fill_ring_empty_descs: 10,
                tx_ring_empty_descs: 12,
            }
        );
        assert_eq!(total.invalid_descs(), 10);
    }

    #[test]
    fn stats_grow_by_counter() {
        let a = Statistics {
            rx_dropped: 5,
            rx_fill_ring_empty_descs: 7,
            ..Statistics::default()
        };
        let b = Statistics {
            rx_dropped: 9,
            rx_fill_ring_empty_descs: 7,
            tx_ring_empty_descs: 1,
            ..Statistics::default()
        };
        let d = b.since(&a);
        assert_eq!(
            (
                d.rx_dropped,
                d.rx_fill_ring_empty_descs,
                d.tx_ring_empty_descs
            ),
            (4, 0, 1)
        );
        assert!(a.since(&b).since(&a).is_zero());
        let mut sum = a;
        sum += d;
        assert_eq!(sum, b);
    }
}
