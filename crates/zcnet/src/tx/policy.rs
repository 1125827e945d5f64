//! When to send with MSG_ZEROCOPY and when to copy.
//!
//! Zero-copy saves the copy but costs page pinning and a completion; it pays above roughly 10 KiB
//! (msg_zerocopy.rst) and never pays when the kernel copies anyway (a local receiver, a device without
//! scatter-gather: the completions then carry `SO_EE_CODE_ZEROCOPY_COPIED`). [`Policy`] copies small
//! sends, switches to copying after a run of copied completions and probes again later with a growing
//! interval, and backs off after `ENOBUFS` (the optmem or locked-memory limit was hit).

/// Which sends use MSG_ZEROCOPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Never (plain `sendmsg`).
    Copy,
    /// Every send that carries data, except while backing off after `ENOBUFS`.
    ZeroCopy,
    /// Zero-copy at or above the size threshold, unless completions say the kernel copies anyway.
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
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "copy" => Ok(Mode::Copy),
            "zerocopy" | "zc" => Ok(Mode::ZeroCopy),
            "auto" => Ok(Mode::Auto),
            other => Err(format!(
                "unknown mode {other:?}: use copy, zerocopy or auto"
            )),
        }
    }
}

/// Tuning of a [`Policy`]. Intervals are counted in sends, so behaviour does not depend on timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
pub enum CopyReason {
    /// [`Mode::Copy`].
    Mode,
    /// Nothing to send (the kernel takes no id for an empty send).
    Empty,
    /// Below the size threshold.
    Small,
    /// Recent completions said the kernel copies anyway.
    Copied,
    /// Backing off after `ENOBUFS`.
    Enobufs,
    /// The socket does not support zero-copy (`SO_ZEROCOPY` failed).
    Unsupported,
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
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Times [`Mode::Auto`] switched to copying after a run of copied completions.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Decides how to send `len` bytes; advances the policy's clock by one send.
    pub fn decide(&mut self, len: usize) -> Decision {
        self.now += 1;
        match self.config.mode {
            Mode::Copy => Decision::Copy(CopyReason::Mode),
            _ if len == 0 => Decision::Copy(CopyReason::Empty),
            Mode::Auto if len < self.config.threshold => Decision::Copy(CopyReason::Small),
            _ if self.now <= self.copy_until => Decision::Copy(self.copy_reason),
            _ => Decision::ZeroCopy,
        }
    }

    /// Takes in a completion of `ids` ids, copied or not.
    pub fn on_completion(&mut self, copied: bool, ids: u64) {
        if self.config.mode != Mode::Auto || ids == 0 {
            return;
        }
        if !copied {
            self.copied_run = 0;
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
            self.copy_until = self.now + self.interval;
            self.copy_reason = CopyReason::Copied;
            self.interval = (self.interval * 2).min(self.config.max_reprobe.max(1));
        }
    }

    /// Takes in an `ENOBUFS` from a zero-copy send: copy for the back-off interval.
    pub fn on_enobufs(&mut self) {
        let until = self.now + self.config.enobufs_backoff;
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
        assert_eq!(p.switches(), 4);
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
        // Copied completions do not switch modes outside Auto.
        p.on_completion(true, 1000);
        assert_eq!(p.decide(100), Decision::ZeroCopy);
    }

    #[test]
    fn mode_names_round_trip() {
        for m in [Mode::Copy, Mode::ZeroCopy, Mode::Auto] {
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
        assert!("fast".parse::<Mode>().is_err());
    }
}
