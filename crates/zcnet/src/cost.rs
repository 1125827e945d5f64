//! The measured choice between zero-copy and copy, shared by the sender's and the receiver's auto
//! modes: which of the two costs the thread doing the I/O less CPU time per byte on this path, now.
//!
//! Whether zero-copy pays depends on the host, not only on what the kernel allows: pinning or mapping
//! pages, reading completions and flushing TLBs can cost more than the copy they save (a fast memcpy,
//! page tables virtualised by a hypervisor). So an auto mode cuts its stream into windows of about
//! `window_bytes` bytes, times each with the thread's CPU clock ([`WindowMeter`]), and now and then
//! compares two windows of each mode in the order *settled, other, other, settled* (so that a steady
//! drift of the host's load weighs on both alike) ([`CostProbe`]). The mode in use is kept unless the
//! other costs at least a [`MARGIN_DIVISOR`]th less in two comparisons in a row (the second follows
//! the first at once, so that one burst of noise on a shared host does not move it); after a
//! comparison that keeps the mode the next comes twice as many windows later (up to
//! `max_compare_every`), so probing the dearer mode costs little on a steady path.
//!
//! What a window holds is the caller's business: the sender's windows are bytes sent
//! ([`crate::tx::PolicyConfig`]), the receiver's bytes handed out ([`crate::rx::AutoConfig`]); a window
//! the caller marks unsound is thrown away.
//!
//! Kernel behaviour relied on: `CLOCK_THREAD_CPUTIME_ID` counts the calling thread's time in user mode
//! and in system calls — the transmit work the kernel does inside `sendmsg` (and, on a local path, the
//! receive work it runs on the way), the page mapping and zapping of `TCP_ZEROCOPY_RECEIVE` and
//! `madvise`, the copy of `recv` — but not the time it sleeps waiting for data; it is brought up to
//! date when read. The thread's other work between two readings (another connection served by the
//! same thread) counts too, alike for both modes on a steady load.

use std::thread::{self, ThreadId};
use std::time::Duration;

/// The other mode is taken when it costs less than `1 - 1/MARGIN_DIVISOR` of the settled one (~3%):
/// closer figures are within the noise of a shared host, and staying then costs less than the margin.
pub(crate) const MARGIN_DIVISOR: u64 = 32;

/// The two ways to move the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    ZeroCopy,
    Copy,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::ZeroCopy => Side::Copy,
            Side::Copy => Side::ZeroCopy,
        }
    }
}

/// A reading of the calling thread's CPU clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuStamp {
    thread: ThreadId,
    cpu: Duration,
}

impl CpuStamp {
    /// The calling thread's CPU time now; `None` if the clock cannot be read.
    pub(crate) fn now() -> Option<CpuStamp> {
        let cpu = crate::sys::socket::thread_cpu_time().ok()?;
        Some(CpuStamp {
            thread: thread::current().id(),
            cpu,
        })
    }

    /// A reading of `cpu` on the calling thread: a synthetic clock for tests.
    #[cfg(test)]
    pub(crate) fn at(cpu: Duration) -> Option<CpuStamp> {
        Some(CpuStamp {
            thread: thread::current().id(),
            cpu,
        })
    }
}

/// One measured window: the CPU time the thread spent on `bytes` bytes moved one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) side: Side,
    pub(crate) bytes: u64,
    pub(crate) cpu: Duration,
}

/// Cuts the stream into windows of about `window_bytes` bytes and times each with the CPU clock read
/// at its two ends. A window is thrown away when the caller counted bytes in it that do not belong to
/// its side, when its two readings come from different threads (the sender or receiver moved) or when
/// a reading failed.
#[derive(Debug, Clone)]
pub(crate) struct WindowMeter {
    window_bytes: u64,
    start: Option<CpuStamp>,
    /// The side the window's bytes are meant to take (set by the caller when a window opens).
    pub(crate) side: Side,
    bytes: u64,
    spoiled: bool,
}

impl WindowMeter {
    pub(crate) fn new(window_bytes: u64, side: Side) -> Self {
        WindowMeter {
            window_bytes,
            start: None,
            side,
            bytes: 0,
            spoiled: false,
        }
    }

    /// Counts `bytes` moved, `admitted` if they went the window's side (or a way both sides go
    /// alike); returns [`WindowMeter::due`].
    pub(crate) fn count(&mut self, admitted: bool, bytes: usize) -> bool {
        if self.start.is_some() {
            self.spoiled |= !admitted;
            self.bytes += bytes as u64;
        }
        self.due()
    }

    /// `true` when the window is full — and before the very first window, or after a failed
    /// reading — so the caller reads the clock and calls [`WindowMeter::close`].
    pub(crate) fn due(&self) -> bool {
        self.start.is_none() || self.bytes >= self.window_bytes
    }

    /// Ends the window at `now` (and opens the next there); returns it if it is sound.
    pub(crate) fn close(&mut self, now: Option<CpuStamp>) -> Option<Window> {
        let window = match (self.start, now) {
            (Some(start), Some(end)) if !self.spoiled && start.thread == end.thread => {
                Some(Window {
                    side: self.side,
                    bytes: self.bytes,
                    cpu: end.cpu.saturating_sub(start.cpu),
                })
            }
            _ => None,
        };
        self.start = now;
        self.bytes = 0;
        self.spoiled = false;
        window.filter(|w| w.bytes > 0)
    }
}

/// The CPU cost per byte of each mode in the last comparison, in nanoseconds per kilobyte (10^3 bytes),
/// which is the same figure as microseconds per megabyte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Costs {
    pub(crate) zc_ns_per_kb: u64,
    pub(crate) copy_ns_per_kb: u64,
}

/// CPU time and bytes of one side's windows in a comparison.
#[derive(Debug, Clone, Copy, Default)]
struct Spent {
    cpu_ns: u128,
    bytes: u128,
}

impl Spent {
    fn ns_per_kb(self) -> u64 {
        (self.cpu_ns * 1000)
            .checked_div(self.bytes)
            .map_or(0, |v| v.min(u128::from(u64::MAX)) as u64)
    }
}

/// In a comparison, whether each window takes the other side (the settled side's windows come first
/// and last).
const COMPARISON: [bool; 4] = [false, true, true, false];

/// The comparison state machine, fed with sound windows only.
#[derive(Debug, Clone)]
pub(crate) struct CostProbe {
    settled: Side,
    /// The step of [`COMPARISON`] under way, if comparing.
    step: Option<usize>,
    zero_copy: Spent,
    copy: Spent,
    /// Windows of the settled side until the next comparison.
    windows_left: u64,
    interval: u64,
    first_interval: u64,
    max_interval: u64,
    last: Option<Costs>,
    comparisons: u64,
    /// The last comparison found the other side cheaper: one more in a row switches.
    other_was_cheaper: bool,
}

impl CostProbe {
    /// Starts on zero-copy; the first comparison follows one window (which absorbs the start-up).
    pub(crate) fn new(compare_every: u64, max_compare_every: u64) -> Self {
        let first_interval = compare_every.max(1);
        CostProbe {
            settled: Side::ZeroCopy,
            step: None,
            zero_copy: Spent::default(),
            copy: Spent::default(),
            windows_left: 1,
            interval: first_interval,
            first_interval,
            max_interval: max_compare_every.max(first_interval),
            last: None,
            comparisons: 0,
            other_was_cheaper: false,
        }
    }

    /// The side the next window takes.
    pub(crate) fn side(&self) -> Side {
        match self.step {
            Some(i) if COMPARISON[i] => self.settled.other(),
            _ => self.settled,
        }
    }

    /// The side kept between comparisons.
    pub(crate) fn settled(&self) -> Side {
        self.settled
    }

    /// The figures of the last comparison, if any finished.
    pub(crate) fn last(&self) -> Option<Costs> {
        self.last
    }

    /// Comparisons finished.
    pub(crate) fn comparisons(&self) -> u64 {
        self.comparisons
    }

    /// Takes in a sound window (one of another side than [`CostProbe::side`] is ignored).
    pub(crate) fn on_window(&mut self, w: Window) {
        if w.side != self.side() {
            return;
        }
        let Some(step) = self.step else {
            self.windows_left = self.windows_left.saturating_sub(1);
            if self.windows_left == 0 {
                self.step = Some(0);
                self.zero_copy = Spent::default();
                self.copy = Spent::default();
            }
            return;
        };
        let spent = match w.side {
            Side::ZeroCopy => &mut self.zero_copy,
            Side::Copy => &mut self.copy,
        };
        spent.cpu_ns += w.cpu.as_nanos();
        spent.bytes += u128::from(w.bytes);
        if step + 1 < COMPARISON.len() {
            self.step = Some(step + 1);
        } else {
            self.finish();
        }
    }

    fn finish(&mut self) {
        let (settled, other) = match self.settled {
            Side::ZeroCopy => (self.zero_copy, self.copy),
            Side::Copy => (self.copy, self.zero_copy),
        };
        // other/other_bytes < (1 - 1/M) * settled/settled_bytes, without division.
        let m = u128::from(MARGIN_DIVISOR);
        let cheaper = other.cpu_ns * settled.bytes * m < settled.cpu_ns * other.bytes * (m - 1);
        self.last = Some(Costs {
            zc_ns_per_kb: self.zero_copy.ns_per_kb(),
            copy_ns_per_kb: self.copy.ns_per_kb(),
        });
        self.comparisons += 1;
        self.zero_copy = Spent::default();
        self.copy = Spent::default();
        match (cheaper, self.other_was_cheaper) {
            (true, false) => {
                // Confirm at once with another comparison.
                self.other_was_cheaper = true;
                self.step = Some(0);
                return;
            }
            (true, true) => {
                self.settled = self.settled.other();
                self.interval = self.first_interval;
            }
            (false, _) => self.interval = (self.interval * 2).min(self.max_interval),
        }
        self.other_was_cheaper = false;
        self.windows_left = self.interval;
        self.step = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    /// A window of 1 MB that cost `us_per_mb` microseconds.
    fn window(side: Side, us_per_mb: u64) -> Window {
        Window {
            side,
            bytes: MB,
            cpu: Duration::from_micros(us_per_mb),
        }
    }

    /// Feeds the probe windows of the side it asks for, costing what `cost` says; returns the sides
    /// taken, window by window.
    fn run(probe: &mut CostProbe, windows: usize, cost: impl Fn(Side) -> u64) -> Vec<Side> {
        (0..windows)
            .map(|_| {
                let side = probe.side();
                probe.on_window(window(side, cost(side)));
                side
            })
            .collect()
    }

    fn price(zc: u64, copy: u64) -> impl Fn(Side) -> u64 {
        move |side| match side {
            Side::ZeroCopy => zc,
            Side::Copy => copy,
        }
    }

    #[test]
    fn settles_on_copy_when_copying_costs_clearly_less() {
        let mut p = CostProbe::new(4, 64);
        let sides = run(&mut p, 9, price(680, 620));
        use Side::{Copy as C, ZeroCopy as Z};
        // One start-up window, then settled, other, other, settled — twice, the second confirming.
        assert_eq!(sides, vec![Z, Z, C, C, Z, Z, C, C, Z]);
        assert_eq!(p.settled(), Side::Copy);
        assert_eq!(
            p.last(),
            Some(Costs {
                zc_ns_per_kb: 680,
                copy_ns_per_kb: 620
            })
        );
        assert_eq!(p.comparisons(), 2);
        // Settled on copy, it compares again after `compare_every` windows, copy first.
        assert_eq!(
            run(&mut p, 8, price(680, 620)),
            vec![C, C, C, C, C, Z, Z, C]
        );
    }

    #[test]
    fn one_noisy_comparison_does_not_switch() {
        let mut p = CostProbe::new(4, 64);
        // The first comparison sees copy far cheaper, the confirming one does not.
        run(&mut p, 5, price(680, 500));
        assert_eq!(p.settled(), Side::ZeroCopy);
        run(&mut p, 4, price(680, 700));
        assert_eq!(p.settled(), Side::ZeroCopy);
        assert_eq!(p.comparisons(), 2);
        // And the interval grew as after any comparison that kept the mode.
        let sides = run(&mut p, 9, price(680, 700));
        assert_eq!(sides[..8], [Side::ZeroCopy; 8]);
        assert_eq!(sides[8], Side::ZeroCopy);
        assert_eq!(p.side(), Side::Copy);
    }

    #[test]
    fn keeps_zero_copy_when_it_is_cheaper_or_within_the_margin() {
        for copy in [900, 690, 679] {
            let mut p = CostProbe::new(4, 64);
            run(&mut p, 9, price(680, copy));
            assert_eq!(p.settled(), Side::ZeroCopy, "copy at {copy} us/MB");
        }
        // 3% less is beyond the margin of 1/32.
        let mut p = CostProbe::new(4, 64);
        run(&mut p, 9, price(1000, 969));
        assert_eq!(p.settled(), Side::ZeroCopy);
        let mut p = CostProbe::new(4, 64);
        run(&mut p, 9, price(1000, 968));
        assert_eq!(p.settled(), Side::Copy);
    }

    #[test]
    fn probing_backs_off_while_the_choice_holds() {
        let mut p = CostProbe::new(4, 64);
        let sides = run(&mut p, 400, price(600, 700));
        // Comparisons (4 windows) at growing intervals: 8, 16, 32, 64, 64 settled windows apart.
        let starts: Vec<usize> = sides
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0] == Side::ZeroCopy && w[1] == Side::Copy)
            .map(|(i, _)| i + 1)
            .collect();
        let gaps: Vec<usize> = starts.windows(2).map(|s| s[1] - s[0]).collect();
        assert_eq!(&gaps[..5], &[12, 20, 36, 68, 68]);
        let other = sides.iter().filter(|&&s| s == Side::Copy).count();
        assert!(
            other * 20 <= sides.len(),
            "{other} of {} windows",
            sides.len()
        );
        assert_eq!(p.settled(), Side::ZeroCopy);
    }

    #[test]
    fn follows_the_path_when_costs_change() {
        let mut p = CostProbe::new(2, 8);
        run(&mut p, 40, price(600, 700));
        assert_eq!(p.settled(), Side::ZeroCopy);
        // Zero-copy becomes the dearer mode: the next comparison moves to copy, and the interval
        // starts again from the first.
        run(&mut p, 20, price(900, 700));
        assert_eq!(p.settled(), Side::Copy);
        let sides = run(&mut p, 6, price(900, 700));
        assert!(sides.contains(&Side::ZeroCopy), "{sides:?}");
        assert_eq!(p.settled(), Side::Copy);
    }

    #[test]
    fn windows_of_the_wrong_side_are_ignored() {
        let mut p = CostProbe::new(1, 1);
        p.on_window(window(Side::ZeroCopy, 100));
        assert_eq!(p.side(), Side::ZeroCopy);
        p.on_window(window(Side::ZeroCopy, 100));
        assert_eq!(p.side(), Side::Copy);
        p.on_window(window(Side::ZeroCopy, 1));
        assert_eq!(p.side(), Side::Copy);
        assert_eq!(p.comparisons(), 0);
    }

    fn stamp(cpu_us: u64) -> Option<CpuStamp> {
        CpuStamp::at(Duration::from_micros(cpu_us))
    }

    #[test]
    fn meter_cuts_windows_by_bytes_and_times_them() {
        let mut m = WindowMeter::new(100, Side::ZeroCopy);
        // Due before the first window; bytes counted before it opens are not in it.
        assert!(m.due());
        assert!(m.count(true, 60));
        assert_eq!(m.close(stamp(10)), None);
        assert!(!m.count(true, 60));
        assert!(m.count(true, 60));
        assert_eq!(
            m.close(stamp(35)),
            Some(Window {
                side: Side::ZeroCopy,
                bytes: 120,
                cpu: Duration::from_micros(25)
            })
        );
        assert!(!m.due());
    }

    #[test]
    fn meter_drops_spoiled_windows() {
        let mut m = WindowMeter::new(100, Side::Copy);
        m.count(true, 1);
        m.close(stamp(0));
        m.count(false, 1);
        assert!(m.count(true, 100));
        assert_eq!(m.close(stamp(5)), None, "spoiled");
        // The next window is sound again.
        assert!(m.count(true, 100));
        assert!(m.close(stamp(9)).is_some());
        // A window that ends on another thread, or whose clock failed, is dropped.
        assert!(m.count(true, 100));
        let elsewhere = thread::spawn(|| stamp(20)).join().unwrap();
        assert_eq!(m.close(elsewhere), None);
        assert!(m.count(true, 100));
        assert_eq!(m.close(None), None);
        assert!(m.due(), "due again after a failed reading");
        assert!(m.count(true, 100));
        assert_eq!(m.close(stamp(30)), None, "no start after a failed reading");
    }

    #[test]
    fn cpu_stamp_reads_this_threads_clock() {
        let a = CpuStamp::now().expect("CLOCK_THREAD_CPUTIME_ID");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = CpuStamp::now().expect("CLOCK_THREAD_CPUTIME_ID");
        assert_eq!(a.thread, b.thread);
        assert!(b.cpu > a.cpu, "{a:?} then {b:?}");
    }
}
