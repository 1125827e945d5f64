//! The receiver's auto mode: mapped receive or plain `recv`, whichever costs the receiving thread less
//! CPU time per byte on this stream, measured on the stream itself.
//!
//! Mapping a page saves its copy but costs page-table work: installing the page, zapping it once read,
//! flushing the TLB. Where page tables are virtualised (a VM) that work can cost more than the copy:
//! on a 2-vCPU VM the kernel's own `tcp_mmap -s -z` spent ~1.7x the CPU per MB of plain `tcp_mmap -s`,
//! and on bare metal the opposite. So [`RxMode::Auto`] maps first, cuts the stream it hands out into
//! windows of [`AutoConfig::window_bytes`], and compares windows of each way with the comparison the
//! sender's auto mode uses (`crate::cost`): order *kept, other, other, kept*, a switch only when the
//! other way is ~3% cheaper in two comparisons in a row, re-comparisons at doubling intervals.
//! Where mapping cannot work at all (the socket refuses it, or nothing of the first
//! [`RxConfig::give_up_after`] bytes maps) it copies for good and says why.
//!
//! The receiver changes way only between two chunks (the previous chunk dropped, its pages released
//! or left for [`Release::Lazy`]) and with no copybuf bytes pending, so that every byte is handed out
//! once and in order whichever way it arrives.
//!
//! [`RxMode::Auto`]: super::RxMode::Auto
//! [`RxConfig::give_up_after`]: super::RxConfig::give_up_after
//! [`Release::Lazy`]: super::Release::Lazy

use super::RxMode;
use crate::cost::{CostProbe, CpuStamp, Side, WindowMeter};

/// Tuning of [`RxMode::Auto`]'s measurement, in windows of bytes handed out.
///
/// Start from [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoConfig {
    /// Bytes per measured window (default 4 MiB); 0 turns the measurement off: the receiver then maps
    /// (falling back to copying only where mapping cannot work).
    pub window_bytes: u64,
    /// Windows between comparisons after one that changed the way (default 16); doubles after every
    /// comparison that keeps it, up to [`AutoConfig::max_compare_every`].
    pub compare_every: u64,
    /// Upper bound of the windows between comparisons (default 1024).
    pub max_compare_every: u64,
}

impl Default for AutoConfig {
    fn default() -> Self {
        AutoConfig {
            window_bytes: 4 << 20,
            compare_every: 16,
            max_compare_every: 1024,
        }
    }
}

/// What [`RxMode::Auto`] does, and why ([`RxStats::auto`](super::RxStats::auto)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoChoice {
    /// [`RxMode::ZeroCopy`] (mapped receive) or [`RxMode::Copy`] (plain `recv`).
    pub mode: RxMode,
    /// Why.
    pub reason: AutoReason,
}

/// Why [`RxMode::Auto`] receives the way it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AutoReason {
    /// The socket could not be mapped or `TCP_ZEROCOPY_RECEIVE` was refused: copying for good
    /// ([`Receiver::zerocopy_status`](super::Receiver::zerocopy_status) names the call and errno).
    Refused,
    /// None of the first [`RxConfig::give_up_after`](super::RxConfig::give_up_after) bytes mapped (the
    /// sender's segments do not carry whole pages): copying for good.
    NothingMapped,
    /// No comparison of costs finished yet (or measuring is off): mapping.
    Unmeasured,
    /// The last comparison: the receiving thread's CPU time per kilobyte (10^3 bytes, the same figure
    /// as microseconds per megabyte) of each way. The way in use changes only when the other was more
    /// than ~3% cheaper in two comparisons in a row.
    CheaperPerByte {
        /// Mapped receive's cost, in nanoseconds per kilobyte.
        zc_ns_per_kb: u64,
        /// Plain `recv`'s cost, in nanoseconds per kilobyte.
        copy_ns_per_kb: u64,
    },
    /// The receiver uses io_uring zero-copy receive ([`RxPath::Zcrx`](super::RxPath::Zcrx)); it
    /// counts as copying once the kernel says it copied bytes into the area (a device-less
    /// instance, a flow the queue did not get), as zero-copy otherwise.
    Zcrx {
        /// Bytes the kernel copied into the area.
        copied_bytes: u64,
        /// Bytes received.
        bytes: u64,
    },
}

/// The auto mode's state in a receiver: the comparison, the window being measured, and the reason it
/// stopped mapping for good, if it did.
#[derive(Debug, Clone)]
pub(super) struct AutoProbe {
    probe: CostProbe,
    meter: WindowMeter,
    measuring: bool,
    /// Bytes handed out in copy windows: they say nothing about whether pages map.
    copied_aside: u64,
    gave_up: Option<AutoReason>,
}

impl AutoProbe {
    pub(super) fn new(config: AutoConfig) -> Self {
        AutoProbe {
            probe: CostProbe::new(config.compare_every, config.max_compare_every),
            meter: WindowMeter::new(config.window_bytes, Side::ZeroCopy),
            measuring: config.window_bytes > 0,
            copied_aside: 0,
            gave_up: None,
        }
    }

    /// Whether the current window reads with plain `recv` (a copy window of a comparison, or copy
    /// measured cheaper). After giving up mapping the receiver copies whatever this says.
    pub(super) fn copying(&self) -> bool {
        self.meter.side == Side::Copy
    }

    /// Counts a chunk of `bytes` handed out.
    pub(super) fn on_chunk(&mut self, bytes: usize) {
        if self.copying() {
            self.copied_aside += bytes as u64;
        }
        if self.measuring {
            self.meter.count(true, bytes);
        }
    }

    /// Bytes handed out in copy windows.
    pub(super) fn copied_aside(&self) -> u64 {
        self.copied_aside
    }

    /// Whether the window is full (or none is open yet): the receiver then reads the clock at its next
    /// clean boundary and calls [`AutoProbe::close`].
    pub(super) fn due(&self) -> bool {
        self.measuring && self.gave_up.is_none() && self.meter.due()
    }

    /// Ends the window at `now`, takes it into the comparison and opens the next, of the side the
    /// comparison asks for.
    pub(super) fn close(&mut self, now: Option<CpuStamp>) {
        if let Some(window) = self.meter.close(now) {
            self.probe.on_window(window);
        }
        self.meter.side = self.probe.side();
    }

    /// Mapping cannot work: copy from now on, for `reason`.
    pub(super) fn give_up(&mut self, reason: AutoReason) {
        self.gave_up = Some(reason);
        self.meter.side = Side::Copy;
    }

    /// Comparisons finished.
    pub(super) fn comparisons(&self) -> u64 {
        self.probe.comparisons()
    }

    /// What the receiver does between comparisons, and why.
    pub(super) fn choice(&self) -> AutoChoice {
        if let Some(reason) = self.gave_up {
            return AutoChoice {
                mode: RxMode::Copy,
                reason,
            };
        }
        let mode = match self.probe.settled() {
            Side::ZeroCopy => RxMode::ZeroCopy,
            Side::Copy => RxMode::Copy,
        };
        let reason = match self.probe.last() {
            Some(c) => AutoReason::CheaperPerByte {
                zc_ns_per_kb: c.zc_ns_per_kb,
                copy_ns_per_kb: c.copy_ns_per_kb,
            },
            None => AutoReason::Unmeasured,
        };
        AutoChoice { mode, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MB: u64 = 1_000_000;

    /// A receiver's view of the probe with a synthetic clock: each window hands out 1 MB in chunks of
    /// 250 kB and costs the CPU time `cost` gives for its way, in microseconds per MB.
    struct Stream {
        auto: AutoProbe,
        cpu: Duration,
    }

    impl Stream {
        fn new(compare_every: u64, max_compare_every: u64) -> Self {
            let mut auto = AutoProbe::new(AutoConfig {
                window_bytes: MB,
                compare_every,
                max_compare_every,
            });
            assert!(auto.due(), "the first window opens at the first receive");
            auto.close(CpuStamp::at(Duration::ZERO));
            Stream {
                auto,
                cpu: Duration::ZERO,
            }
        }

        /// Receives `windows` windows; returns whether each was mapped.
        fn run(&mut self, windows: usize, zc_us: u64, copy_us: u64) -> Vec<bool> {
            (0..windows)
                .map(|_| {
                    let copying = self.auto.copying();
                    for _ in 0..4 {
                        assert!(!self.auto.due());
                        self.auto.on_chunk(250_000);
                    }
                    assert!(self.auto.due());
                    self.cpu += Duration::from_micros(if copying { copy_us } else { zc_us });
                    self.auto.close(CpuStamp::at(self.cpu));
                    !copying
                })
                .collect()
        }
    }

    fn measured(mode: RxMode, zc: u64, copy: u64) -> AutoChoice {
        AutoChoice {
            mode,
            reason: AutoReason::CheaperPerByte {
                zc_ns_per_kb: zc,
                copy_ns_per_kb: copy,
            },
        }
    }

    #[test]
    fn chooses_copying_where_mapping_costs_more() {
        // This VM's figures: mapped ~140 us/MB, recv ~80.
        let mut s = Stream::new(16, 1024);
        assert_eq!(s.auto.choice().reason, AutoReason::Unmeasured);
        let mapped = s.run(9, 140, 80);
        // One start-up window, then kept, other, other, kept — twice, the second confirming.
        let (m, c) = (true, false);
        assert_eq!(mapped, vec![m, m, c, c, m, m, c, c, m]);
        assert_eq!(s.auto.choice(), measured(RxMode::Copy, 140, 80));
        assert_eq!(s.auto.comparisons(), 2);
        assert!(s.auto.copying());
        assert_eq!(s.auto.copied_aside(), 4 * MB);
    }

    #[test]
    fn keeps_mapping_where_mapping_costs_less() {
        // Bare metal's: mapped ~45 us/MB, recv ~120.
        let mut s = Stream::new(16, 1024);
        let mapped = s.run(200, 45, 120);
        assert_eq!(s.auto.choice(), measured(RxMode::ZeroCopy, 45, 120));
        let copies = mapped.iter().filter(|&&m| !m).count();
        assert!(copies * 20 <= mapped.len(), "{copies} copy windows");
        assert!(!s.auto.copying());
    }

    #[test]
    fn one_noisy_comparison_does_not_switch() {
        let mut s = Stream::new(16, 1024);
        // The first comparison sees copying far cheaper, the confirming one does not.
        s.run(5, 140, 80);
        assert_eq!(s.auto.choice().mode, RxMode::ZeroCopy);
        s.run(4, 140, 150);
        assert_eq!(s.auto.choice(), measured(RxMode::ZeroCopy, 140, 150));
        assert_eq!(s.auto.comparisons(), 2);
        // Within the margin (~3%) is no gain either.
        let mut s = Stream::new(16, 1024);
        s.run(9, 1000, 970);
        assert_eq!(s.auto.choice().mode, RxMode::ZeroCopy);
    }

    #[test]
    fn re_compares_at_doubling_intervals_up_to_the_cap() {
        let mut s = Stream::new(4, 32);
        let mapped = s.run(300, 140, 80);
        assert_eq!(s.auto.choice().mode, RxMode::Copy);
        // Settled on copying after 9 windows; then comparisons (copy, map, map, copy) start 4, 8, 16,
        // 32, 32 kept windows apart.
        let starts: Vec<usize> = mapped
            .windows(2)
            .enumerate()
            .filter(|(i, w)| *i >= 9 && !w[0] && w[1])
            .map(|(i, _)| i + 1)
            .collect();
        let gaps: Vec<usize> = starts.windows(2).map(|s| s[1] - s[0]).collect();
        assert_eq!(&gaps[..5], &[12, 20, 36, 36, 36]);
        let dear = mapped[9..].iter().filter(|&&m| m).count();
        assert!(dear * 10 <= mapped.len(), "{dear} mapped windows");
    }

    #[test]
    fn follows_the_stream_when_costs_change() {
        let mut s = Stream::new(2, 8);
        s.run(40, 140, 80);
        assert_eq!(s.auto.choice().mode, RxMode::Copy);
        s.run(40, 40, 80);
        assert_eq!(s.auto.choice(), measured(RxMode::ZeroCopy, 40, 80));
    }

    #[test]
    fn giving_up_copies_for_good_and_stops_measuring() {
        let mut s = Stream::new(16, 1024);
        s.auto.give_up(AutoReason::NothingMapped);
        assert!(s.auto.copying());
        s.auto.on_chunk(10 * MB as usize);
        assert!(!s.auto.due());
        assert_eq!(
            s.auto.choice(),
            AutoChoice {
                mode: RxMode::Copy,
                reason: AutoReason::NothingMapped
            }
        );
    }

    #[test]
    fn measuring_off_maps_and_never_reads_the_clock() {
        let mut auto = AutoProbe::new(AutoConfig {
            window_bytes: 0,
            ..AutoConfig::default()
        });
        auto.on_chunk(1 << 30);
        assert!(!auto.due());
        assert!(!auto.copying());
        assert_eq!(auto.choice().reason, AutoReason::Unmeasured);
    }
}
