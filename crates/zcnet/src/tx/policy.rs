//! When to send with MSG_ZEROCOPY and when to copy.
//!
//! Zero-copy saves the copy but costs page pinning and a completion; it pays above roughly 10 KiB
//! (msg_zerocopy.rst) and never pays when the kernel copies anyway (a local receiver, a device without
//! scatter-gather: the completions then carry `SO_EE_CODE_ZEROCOPY_COPIED`). [`Policy`] copies small
//! sends, switches to copying after a run of copied completions and probes again later with a growing
//! interval, and backs off after `ENOBUFS` (the optmem or locked-memory limit was hit). Where the
//! completions are not copied, [`Mode::Auto`] also measures: it compares the sending thread's CPU
//! time per byte of each mode in windows and keeps the cheaper (see [`crate::cost`]);
//! [`Policy::choice`] says what it chose and why.

use super::stats::TxStats;
use crate::cost::{CostProbe, CpuStamp, Side, WindowMeter};

/// Which sends use MSG_ZEROCOPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Never (plain `sendmsg`).
    Copy,
    /// Every send that carries data, except while backing off after `ENOBUFS`.
    ZeroCopy,
    /// Zero-copy at or above the size threshold, unless completions say the kernel copies anyway or
    /// copying was measured to cost less CPU per byte.
    Auto,
}

impl Mode {
    /// The mode's name as the CLI and JSON output spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::ZeroCopy => "zerocopy",
            Mode::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = ParseModeError;
    fn from_str(s: &str) -> Result<Mode, ParseModeError> {
        match s {
            "copy" => Ok(Mode::Copy),
            "zerocopy" | "zc" => Ok(Mode::ZeroCopy),
            "auto" => Ok(Mode::Auto),
            other => Err(ParseModeError {
                text: other.to_string(),
            }),
        }
    }
}

/// Text that names no [`Mode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseModeError {
    text: String,
}

impl ParseModeError {
    /// The text that was read.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for ParseModeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown mode {:?}: use copy, zerocopy or auto",
            self.text
        )
    }
}

impl std::error::Error for ParseModeError {}

crate::error::own_error!(ParseModeError, InvalidInput);

/// Tuning of a sender's zero-copy policy. The copied-completion and `ENOBUFS` intervals are counted in sends; the
/// measured comparison of [`Mode::Auto`] in windows of bytes, whose CPU time is the policy's only
/// input that depends on timing.
///
/// Start from [`PolicyConfig::with_mode`] or [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyConfig {
    /// Which sends may use zero-copy.
    pub mode: Mode,
    /// In [`Mode::Auto`], sends shorter than this many bytes are copied (default 10 KiB).
    pub threshold: usize,
    /// In [`Mode::Auto`], this many copied completion ids in a row switch to copying (default 16).
    pub copied_run: u64,
    /// Sends to copy after the first switch before probing zero-copy again (default 256); doubles on
    /// every switch that follows a copied probe, up to [`PolicyConfig::max_reprobe`].
    pub reprobe: u64,
    /// Upper bound of the re-probe interval in sends (default 65536).
    pub max_reprobe: u64,
    /// Sends to copy after an `ENOBUFS` before trying zero-copy again (default 64).
    pub enobufs_backoff: u64,
    /// In [`Mode::Auto`], bytes per measured window (default 8 MiB); 0 turns the measurement off,
    /// leaving the size threshold and the copied-completion rule.
    pub window_bytes: u64,
    /// Windows between cost comparisons after one that changed mode (default 16); doubles after every
    /// comparison that keeps the mode, up to [`PolicyConfig::max_compare_every`].
    pub compare_every: u64,
    /// Upper bound of the windows between comparisons (default 1024).
    pub max_compare_every: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            mode: Mode::Auto,
            threshold: 10 << 10,
            copied_run: 16,
            reprobe: 256,
            max_reprobe: 65536,
            enobufs_backoff: 64,
            window_bytes: 8 << 20,
            compare_every: 16,
            max_compare_every: 1024,
        }
    }
}

impl PolicyConfig {
    /// The default tuning with `mode`.
    pub fn with_mode(mode: Mode) -> Self {
        PolicyConfig {
            mode,
            ..Default::default()
        }
    }
}

/// What the policy decided for one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send with MSG_ZEROCOPY.
    ZeroCopy,
    /// Copy, for the given reason.
    Copy(CopyReason),
}

/// Why a send is copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CopyReason {
    /// [`Mode::Copy`].
    Mode,
    /// Nothing to send (the kernel takes no id for an empty send).
    Empty,
    /// Below the size threshold.
    Small,
    /// Recent completions said the kernel copies anyway.
    Copied,
    /// Backing off after `ENOBUFS` (on an AF_VSOCK stream, `ENOMEM`): the kernel had no memory
    /// for a zero-copy send's notification or pinned pages.
    Enobufs,
    /// The process's locked-memory budget ([`crate::tx::MemlockBudget`]) had no room for the send's
    /// pages: copied instead of being refused with `ENOBUFS` ([`crate::tx::memlock_reason`]).
    Memlock,
    /// The socket does not support zero-copy (`SO_ZEROCOPY` failed).
    Unsupported,
    /// [`Mode::Auto`] measured copying to cost less CPU per byte than zero-copy.
    Cheaper,
}

/// What [`Mode::Auto`] does with sends at or above the threshold, and why ([`TxStats::auto`](crate::tx::TxStats::auto)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoChoice {
    /// [`Mode::ZeroCopy`] or [`Mode::Copy`].
    pub mode: Mode,
    /// Why.
    pub reason: AutoReason,
}

/// Why [`Mode::Auto`] chose its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AutoReason {
    /// No send reached the size threshold: everything was copied.
    BelowThreshold,
    /// The sender could not send zero-copy (the socket refused `SO_ZEROCOPY`, or a send was larger
    /// than one zero-copy send may be).
    Refused,
    /// Completions said the kernel copied the sends anyway (a local receiver): zero-copy is pure
    /// overhead. This rule overrides the measurement.
    CopiedCompletions,
    /// Completions were not copied, and no comparison of costs finished yet (or measuring is off).
    Unmeasured,
    /// The last comparison: the sending thread's CPU time per kilobyte (10^3 bytes, the same figure as
    /// microseconds per megabyte) of each mode. The mode in use changes only when the other was more
    /// than ~3% cheaper in two comparisons in a row.
    CheaperPerByte {
        /// Zero-copy's cost, in nanoseconds per kilobyte.
        zc_ns_per_kb: u64,
        /// Copying's cost, in nanoseconds per kilobyte.
        copy_ns_per_kb: u64,
    },
}

/// Whether a send decided as `decision` belongs in a measured window of `side`: the side's own sends
/// and those both sides copy alike (small, empty); a send copied for another reason (copied
/// completions, `ENOBUFS`, no zero-copy) spoils the window.
fn admits(side: Side, decision: Decision) -> bool {
    match decision {
        Decision::ZeroCopy => side == Side::ZeroCopy,
        Decision::Copy(CopyReason::Cheaper) => side == Side::Copy,
        Decision::Copy(CopyReason::Small | CopyReason::Empty) => true,
        Decision::Copy(_) => false,
    }
}

/// The per-sender decision state.
#[derive(Debug, Clone)]
pub struct Policy {
    config: PolicyConfig,
    /// Sends decided so far: the policy's clock.
    now: u64,
    copy_until: u64,
    copy_reason: CopyReason,
    copied_run: u64,
    interval: u64,
    switches: u64,
    /// The copied-completion rule fired and no completion since said otherwise.
    kernel_copies: bool,
    /// A send reached the threshold.
    large_seen: bool,
    /// A send the policy wanted zero-copy went by copy because zero-copy was refused.
    refused: bool,
    cost: CostProbe,
    meter: WindowMeter,
}

impl Policy {
    /// A policy with `config`.
    pub fn new(config: PolicyConfig) -> Self {
        Policy {
            config,
            now: 0,
            copy_until: 0,
            copy_reason: CopyReason::Copied,
            copied_run: 0,
            interval: config.reprobe.max(1),
            switches: 0,
            kernel_copies: false,
            large_seen: false,
            refused: false,
            cost: CostProbe::new(config.compare_every, config.max_compare_every),
            meter: WindowMeter::new(config.window_bytes, Side::ZeroCopy),
        }
    }

    /// Decides how to send `len` bytes; advances the policy's clock by one send.
    pub fn decide(&mut self, len: usize) -> Decision {
        self.now += 1;
        match self.config.mode {
            Mode::Copy => return Decision::Copy(CopyReason::Mode),
            _ if len == 0 => return Decision::Copy(CopyReason::Empty),
            Mode::Auto if len < self.config.threshold => return Decision::Copy(CopyReason::Small),
            _ => self.large_seen = true,
        }
        if self.now <= self.copy_until {
            Decision::Copy(self.copy_reason)
        } else if self.measuring() && self.cost.side() == Side::Copy {
            Decision::Copy(CopyReason::Cheaper)
        } else {
            Decision::ZeroCopy
        }
    }

    fn measuring(&self) -> bool {
        self.config.mode == Mode::Auto && self.config.window_bytes > 0
    }

    /// Takes in a send of `bytes` bytes that went as `decision` (which may differ from what
    /// [`Policy::decide`] said: a sender copies when zero-copy is refused). In [`Mode::Auto`] this
    /// times the windows of the cost comparison, reading the calling thread's CPU clock once per
    /// window.
    pub fn on_sent(&mut self, decision: Decision, bytes: usize) {
        if self.config.mode != Mode::Auto {
            return;
        }
        self.refused |= decision == Decision::Copy(CopyReason::Unsupported);
        if self.measuring() && self.meter.count(admits(self.meter.side, decision), bytes) {
            if let Some(window) = self.meter.close(CpuStamp::now()) {
                self.cost.on_window(window);
            }
            self.meter.side = self.cost.side();
        }
    }

    /// In [`Mode::Auto`], what the policy does with sends at or above the threshold now, and why.
    pub fn choice(&self) -> Option<AutoChoice> {
        if self.config.mode != Mode::Auto {
            return None;
        }
        let (mode, reason) = if self.refused {
            (Mode::Copy, AutoReason::Refused)
        } else if self.kernel_copies {
            (Mode::Copy, AutoReason::CopiedCompletions)
        } else if !self.large_seen {
            (Mode::Copy, AutoReason::BelowThreshold)
        } else {
            let mode = match self.cost.settled() {
                Side::ZeroCopy => Mode::ZeroCopy,
                Side::Copy => Mode::Copy,
            };
            let reason = match self.cost.last() {
                Some(c) => AutoReason::CheaperPerByte {
                    zc_ns_per_kb: c.zc_ns_per_kb,
                    copy_ns_per_kb: c.copy_ns_per_kb,
                },
                None => AutoReason::Unmeasured,
            };
            (mode, reason)
        };
        Some(AutoChoice { mode, reason })
    }

    /// Copies the policy's counters and choice into `stats`.
    pub(crate) fn report(&self, stats: &mut TxStats) {
        stats.policy_switches = self.switches;
        stats.cost_comparisons = self.cost.comparisons();
        stats.auto = self.choice();
    }

    /// Takes in a completion of `ids` ids, copied or not.
    pub fn on_completion(&mut self, copied: bool, ids: u64) {
        if self.config.mode != Mode::Auto || ids == 0 {
            return;
        }
        if !copied {
            self.copied_run = 0;
            self.kernel_copies = false;
            self.interval = self.config.reprobe.max(1);
            return;
        }
        if self.now <= self.copy_until {
            return;
        }
        self.copied_run += ids;
        if self.copied_run >= self.config.copied_run {
            self.copied_run = 0;
            self.switches += 1;
            self.kernel_copies = true;
            self.copy_until = self.now.saturating_add(self.interval);
            self.copy_reason = CopyReason::Copied;
            self.interval = self
                .interval
                .saturating_mul(2)
                .min(self.config.max_reprobe.max(1));
        }
    }

    /// Takes in that every zero-copy send completed (no pages are pinned any more): an `ENOBUFS`
    /// back-off ends, since the locked memory and notification memory it ran out of are free again.
    pub fn on_drained(&mut self) {
        if self.copy_reason == CopyReason::Enobufs {
            self.copy_until = self.copy_until.min(self.now);
        }
    }

    /// Takes in an `ENOBUFS` from a zero-copy send: copy for the back-off interval, or until
    /// [`Policy::on_drained`].
    pub fn on_enobufs(&mut self) {
        let until = self.now.saturating_add(self.config.enobufs_backoff);
        if until > self.copy_until {
            self.copy_until = until;
            self.copy_reason = CopyReason::Enobufs;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_boundary_and_modes() {
        let mut p = Policy::new(PolicyConfig::default());
        assert_eq!(p.decide(10 * 1024 - 1), Decision::Copy(CopyReason::Small));
        assert_eq!(p.decide(10 * 1024), Decision::ZeroCopy);
        assert_eq!(p.decide(0), Decision::Copy(CopyReason::Empty));
        let mut z = Policy::new(PolicyConfig::with_mode(Mode::ZeroCopy));
        assert_eq!(z.decide(1), Decision::ZeroCopy);
        let mut c = Policy::new(PolicyConfig::with_mode(Mode::Copy));
        assert_eq!(c.decide(1 << 20), Decision::Copy(CopyReason::Mode));
    }

    #[test]
    fn copied_run_switches_to_copy_and_reprobes_with_growing_interval() {
        let cfg = PolicyConfig {
            copied_run: 4,
            reprobe: 10,
            max_reprobe: 40,
            ..Default::default()
        };
        let mut p = Policy::new(cfg);
        let mut intervals = Vec::new();
        for _ in 0..4 {
            assert_eq!(p.decide(1 << 16), Decision::ZeroCopy);
            p.on_completion(true, 4);
            let mut copies = 0;
            while p.decide(1 << 16) == Decision::Copy(CopyReason::Copied) {
                copies += 1;
            }
            intervals.push(copies);
        }
        assert_eq!(intervals, vec![10, 20, 40, 40]);
        assert_eq!(p.switches, 4);
        // A zero-copied completion resets the interval.
        p.on_completion(false, 1);
        p.on_completion(true, 4);
        let mut copies = 0;
        while p.decide(1 << 16) != Decision::ZeroCopy {
            copies += 1;
        }
        assert_eq!(copies, 10);
    }

    #[test]
    fn enobufs_backs_off_in_zerocopy_mode_too() {
        let mut p = Policy::new(PolicyConfig {
            enobufs_backoff: 3,
            ..PolicyConfig::with_mode(Mode::ZeroCopy)
        });
        assert_eq!(p.decide(100), Decision::ZeroCopy);
        p.on_enobufs();
        for _ in 0..3 {
            assert_eq!(p.decide(100), Decision::Copy(CopyReason::Enobufs));
        }
        assert_eq!(p.decide(100), Decision::ZeroCopy);
        // The back-off ends once every loan completed.
        p.on_enobufs();
        assert_eq!(p.decide(100), Decision::Copy(CopyReason::Enobufs));
        p.on_drained();
        assert_eq!(p.decide(100), Decision::ZeroCopy);
        // Copied completions do not switch modes outside Auto.
        p.on_completion(true, 1000);
        assert_eq!(p.decide(100), Decision::ZeroCopy);
    }

    /// Intervals as long as `u64::MAX` sends saturate: the policy copies for the rest of the run
    /// (or until drained, after `ENOBUFS`), never wraps back to zero-copy.
    #[test]
    fn the_longest_intervals_saturate() {
        let mut p = Policy::new(PolicyConfig {
            enobufs_backoff: u64::MAX,
            ..PolicyConfig::with_mode(Mode::ZeroCopy)
        });
        assert_eq!(p.decide(100), Decision::ZeroCopy);
        p.on_enobufs();
        for _ in 0..1000 {
            assert_eq!(p.decide(100), Decision::Copy(CopyReason::Enobufs));
        }
        p.on_drained();
        assert_eq!(p.decide(100), Decision::ZeroCopy);
        let mut p = Policy::new(PolicyConfig {
            copied_run: 1,
            reprobe: u64::MAX,
            max_reprobe: u64::MAX,
            ..Default::default()
        });
        assert_eq!(p.decide(1 << 16), Decision::ZeroCopy);
        p.on_completion(true, 1);
        for _ in 0..1000 {
            assert_eq!(p.decide(1 << 16), Decision::Copy(CopyReason::Copied));
            p.on_completion(true, 1);
        }
    }

    /// Sends `n` buffers of `len` bytes as the policy decides, as a sender would.
    fn send(p: &mut Policy, n: usize, len: usize) -> Vec<Decision> {
        (0..n)
            .map(|_| {
                let d = p.decide(len);
                p.on_sent(d, len);
                d
            })
            .collect()
    }

    #[test]
    fn auto_choice_says_why() {
        let cfg = PolicyConfig {
            copied_run: 2,
            ..Default::default()
        };
        let mut p = Policy::new(cfg);
        send(&mut p, 3, 100);
        let copy = |reason| {
            Some(AutoChoice {
                mode: Mode::Copy,
                reason,
            })
        };
        assert_eq!(p.choice(), copy(AutoReason::BelowThreshold));
        send(&mut p, 3, 1 << 16);
        assert_eq!(
            p.choice(),
            Some(AutoChoice {
                mode: Mode::ZeroCopy,
                reason: AutoReason::Unmeasured
            })
        );
        p.on_completion(true, 2);
        assert_eq!(p.choice(), copy(AutoReason::CopiedCompletions));
        assert_eq!(
            send(&mut p, 1, 1 << 16),
            vec![Decision::Copy(CopyReason::Copied)]
        );
        // A completion that was not copied lifts the rule.
        p.on_completion(false, 1);
        assert_eq!(p.choice().map(|c| c.reason), Some(AutoReason::Unmeasured));
        // A sender that could not send zero-copy says so.
        p.on_sent(Decision::Copy(CopyReason::Unsupported), 1 << 16);
        assert_eq!(p.choice(), copy(AutoReason::Refused));
        assert_eq!(
            Policy::new(PolicyConfig::with_mode(Mode::ZeroCopy)).choice(),
            None
        );
    }

    #[test]
    fn auto_compares_windows_and_sends_the_settled_mode() {
        // Windows of 4 sends; the CPU time is the real clock's (the decision may go either way).
        let cfg = PolicyConfig {
            window_bytes: 4 << 16,
            compare_every: 2,
            max_compare_every: 4,
            ..Default::default()
        };
        let mut p = Policy::new(cfg);
        let decisions = send(&mut p, 400, 1 << 16);
        let mut stats = TxStats::default();
        p.report(&mut stats);
        assert!(stats.cost_comparisons >= 10, "{stats:?}");
        let Some(AutoChoice {
            mode,
            reason: AutoReason::CheaperPerByte { .. },
        }) = stats.auto
        else {
            panic!("{:?}", stats.auto);
        };
        // Every comparison tried both modes, and the last decision is the settled mode.
        assert!(decisions.contains(&Decision::ZeroCopy));
        assert!(decisions.contains(&Decision::Copy(CopyReason::Cheaper)));
        let expected = match mode {
            Mode::ZeroCopy => Decision::ZeroCopy,
            _ => Decision::Copy(CopyReason::Cheaper),
        };
        let settled = p.cost.side() == p.cost.settled();
        assert!(!settled || p.decide(1 << 16) == expected);
        // Measuring off: zero-copy throughout.
        let mut off = Policy::new(PolicyConfig {
            window_bytes: 0,
            ..cfg
        });
        assert!(
            send(&mut off, 400, 1 << 16)
                .iter()
                .all(|d| *d == Decision::ZeroCopy)
        );
    }

    #[test]
    fn windows_admit_their_own_sends_and_those_both_sides_copy() {
        use CopyReason::*;
        for side in [Side::ZeroCopy, Side::Copy] {
            assert!(admits(side, Decision::Copy(Small)));
            assert!(admits(side, Decision::Copy(Empty)));
            for spoiler in [Copied, Enobufs, Memlock, Unsupported, Mode] {
                assert!(!admits(side, Decision::Copy(spoiler)), "{spoiler:?}");
            }
        }
        assert!(admits(Side::ZeroCopy, Decision::ZeroCopy));
        assert!(!admits(Side::Copy, Decision::ZeroCopy));
        assert!(admits(Side::Copy, Decision::Copy(Cheaper)));
        assert!(!admits(Side::ZeroCopy, Decision::Copy(Cheaper)));
    }

    #[test]
    fn mode_names_round_trip() {
        for m in [Mode::Copy, Mode::ZeroCopy, Mode::Auto] {
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert!("fast".parse::<Mode>().is_err());
    }
}
