//! What the observer counts, per process or per socket: one `u64` per [`Counter`], in the order the
//! BPF programs store them (the value of the kernel map is `[u64; Counter::ALL.len()]`).

use std::fmt;

/// One thing the observer counts. Its [`Counter::name`] is the field name in `zcnet observe --json`
/// and, prefixed with `zcnet_`, the Prometheus metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
#[non_exhaustive]
pub enum Counter {
    /// `sendmsg`/`sendto` calls with `MSG_ZEROCOPY` that sent something.
    ZcSends,
    /// Bytes those calls sent.
    ZcBytes,
    /// `sendmsg`/`sendto` calls without `MSG_ZEROCOPY` that sent something.
    CopySends,
    /// Bytes those calls sent.
    CopyBytes,
    /// MSG_ZEROCOPY completion notifications the process read from its error queue.
    Notifications,
    /// Send ids those notifications completed (the ranges' lengths).
    Completions,
    /// Notifications flagged `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied those sends.
    CopiedNotifications,
    /// Send ids in copied notifications.
    CopiedCompletions,
    /// io_uring `SEND_ZC` and `SENDMSG_ZC` requests submitted.
    UringZcRequests,
    /// Bytes their results reported sent.
    UringZcBytes,
    /// io_uring zero-copy notifications (`IORING_CQE_F_NOTIF`) posted.
    UringNotifications,
    /// Notifications whose result had the copied bit (`IORING_NOTIF_USAGE_ZC_COPIED`, present with
    /// `IORING_SEND_ZC_REPORT_USAGE`).
    UringCopiedNotifications,
    /// `TCP_ZEROCOPY_RECEIVE` calls that succeeded.
    RxZcCalls,
    /// Bytes those calls mapped into the process.
    RxMappedBytes,
    /// Bytes those calls copied into their copy buffer (`copybuf_len`).
    RxCopybufBytes,
    /// Bytes socket receives copied to the process (`skb_copy_datagram_iovec`), copy buffers
    /// included.
    RxCopiedBytes,
    /// Times the kernel copied the lent pages of a zero-copy packet after the send
    /// (`skb_copy_ubufs`), counted against the task the kernel copied in.
    LateCopies,
    /// The bytes of those packets' pages (the packets' `data_len`).
    LateCopiedBytes,
    /// Of those, bytes copied on the receive path (`__netif_receive_skb_core`,
    /// `ip_local_deliver_finish`, `ip6_input_finish`): delivery to a local socket, or a packet socket
    /// tapping the receiving interface.
    LateCopiedReceiveBytes,
    /// Of those, bytes copied for a packet socket tapping the sending interface (a clone in
    /// `dev_queue_xmit_nit`).
    LateCopiedTapBytes,
    /// Pieces io_uring zero-copy receive (zcrx) copied into its area instead of a NIC writing them
    /// there (`io_zcrx_copy_chunk`): every piece of a device-less instance.
    ZcrxCopies,
    /// The bytes of those pieces.
    ZcrxCopiedBytes,
}

impl Counter {
    /// Every counter, in map order.
    pub const ALL: [Counter; 22] = [
        Counter::ZcSends,
        Counter::ZcBytes,
        Counter::CopySends,
        Counter::CopyBytes,
        Counter::Notifications,
        Counter::Completions,
        Counter::CopiedNotifications,
        Counter::CopiedCompletions,
        Counter::UringZcRequests,
        Counter::UringZcBytes,
        Counter::UringNotifications,
        Counter::UringCopiedNotifications,
        Counter::RxZcCalls,
        Counter::RxMappedBytes,
        Counter::RxCopybufBytes,
        Counter::RxCopiedBytes,
        Counter::LateCopies,
        Counter::LateCopiedBytes,
        Counter::LateCopiedReceiveBytes,
        Counter::LateCopiedTapBytes,
        Counter::ZcrxCopies,
        Counter::ZcrxCopiedBytes,
    ];

    /// Its name in snake case (`zc_sends`).
    pub fn name(self) -> &'static str {
        match self {
            Counter::ZcSends => "zc_sends",
            Counter::ZcBytes => "zc_bytes",
            Counter::CopySends => "copy_sends",
            Counter::CopyBytes => "copy_bytes",
            Counter::Notifications => "notifications",
            Counter::Completions => "completions",
            Counter::CopiedNotifications => "copied_notifications",
            Counter::CopiedCompletions => "copied_completions",
            Counter::UringZcRequests => "uring_zc_requests",
            Counter::UringZcBytes => "uring_zc_bytes",
            Counter::UringNotifications => "uring_notifications",
            Counter::UringCopiedNotifications => "uring_copied_notifications",
            Counter::RxZcCalls => "rx_zc_calls",
            Counter::RxMappedBytes => "rx_mapped_bytes",
            Counter::RxCopybufBytes => "rx_copybuf_bytes",
            Counter::RxCopiedBytes => "rx_copied_bytes",
            Counter::LateCopies => "late_copies",
            Counter::LateCopiedBytes => "late_copied_bytes",
            Counter::LateCopiedReceiveBytes => "late_copied_receive_bytes",
            Counter::LateCopiedTapBytes => "late_copied_tap_bytes",
            Counter::ZcrxCopies => "zcrx_copies",
            Counter::ZcrxCopiedBytes => "zcrx_copied_bytes",
        }
    }

    /// One line saying what it counts.
    pub fn help(self) -> &'static str {
        match self {
            Counter::ZcSends => "sendmsg/sendto calls with MSG_ZEROCOPY that sent bytes",
            Counter::ZcBytes => "bytes sent by sendmsg/sendto calls with MSG_ZEROCOPY",
            Counter::CopySends => "sendmsg/sendto calls without MSG_ZEROCOPY that sent bytes",
            Counter::CopyBytes => "bytes sent by sendmsg/sendto calls without MSG_ZEROCOPY",
            Counter::Notifications => {
                "MSG_ZEROCOPY completion notifications read from the error queue"
            }
            Counter::Completions => "MSG_ZEROCOPY send ids completed",
            Counter::CopiedNotifications => "MSG_ZEROCOPY notifications saying the kernel copied",
            Counter::CopiedCompletions => "MSG_ZEROCOPY send ids the kernel copied",
            Counter::UringZcRequests => "io_uring SEND_ZC and SENDMSG_ZC requests submitted",
            Counter::UringZcBytes => "bytes io_uring zero-copy sends reported sent",
            Counter::UringNotifications => "io_uring zero-copy notifications posted",
            Counter::UringCopiedNotifications => "io_uring zero-copy notifications saying copied",
            Counter::RxZcCalls => "successful TCP_ZEROCOPY_RECEIVE calls",
            Counter::RxMappedBytes => "bytes TCP_ZEROCOPY_RECEIVE mapped",
            Counter::RxCopybufBytes => "bytes TCP_ZEROCOPY_RECEIVE copied into its copy buffer",
            Counter::RxCopiedBytes => "bytes socket receives copied to user space",
            Counter::LateCopies => "zero-copy packets whose pages the kernel copied after the send",
            Counter::LateCopiedBytes => {
                "bytes of zero-copy packets the kernel copied after the send"
            }
            Counter::LateCopiedReceiveBytes => {
                "of those, bytes copied on the receive path (local delivery or a receive tap)"
            }
            Counter::LateCopiedTapBytes => {
                "of those, bytes copied for a packet socket tapping the sending interface"
            }
            Counter::ZcrxCopies => "pieces io_uring zero-copy receive copied into its area",
            Counter::ZcrxCopiedBytes => "bytes io_uring zero-copy receive copied into its area",
        }
    }

    /// Whether it counts bytes (otherwise calls, notifications or ids).
    pub fn is_bytes(self) -> bool {
        self.name().ends_with("_bytes")
    }
}

impl fmt::Display for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One value per [`Counter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters([u64; Counter::ALL.len()]);

impl Counters {
    /// The value of `counter`.
    pub fn get(&self, counter: Counter) -> u64 {
        self.0[counter as usize]
    }

    /// Every counter with its value, in [`Counter::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c, self.get(c)))
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&v| v == 0)
    }

    /// Adds `other` to these counters.
    pub fn add(&mut self, other: &Counters) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.wrapping_add(b);
        }
    }

    /// What grew since `earlier` (a counter that went down, as when its key was evicted, gives 0).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(earlier.0) {
            *a = a.saturating_sub(b);
        }
        out
    }

    /// Sums the per-CPU values of one map entry, each `Counter::ALL.len()` native-endian `u64`s.
    pub(super) fn from_per_cpu(values: &[Vec<u8>]) -> Counters {
        let mut out = Counters::default();
        for cpu in values {
            for (slot, word) in out.0.iter_mut().zip(cpu.chunks_exact(8)) {
                *slot = slot.wrapping_add(u64::from_ne_bytes(word.try_into().expect("8 bytes")));
            }
        }
        out
    }

    /// Bytes of one CPU's value in the kernel map.
    pub(super) const SIZE: usize = Counter::ALL.len() * 8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_in_map_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn per_cpu_values_are_summed() {
        let mut values = vec![vec![0u8; Counters::SIZE]; 2];
        values[0][8..16].copy_from_slice(&5u64.to_ne_bytes());
        values[1][8..16].copy_from_slice(&7u64.to_ne_bytes());
        let c = Counters::from_per_cpu(&values);
        assert_eq!(c.get(Counter::ZcBytes), 12);
        assert_eq!(c.get(Counter::ZcSends), 0);
        assert_eq!(c.since(&c), Counters::default());
    }
}
