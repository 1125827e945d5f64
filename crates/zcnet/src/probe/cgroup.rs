//! The memory cgroup's room for pinned pages: pages zero-copy pins (sends in flight, UMEMs,
//! registered buffers) are the process's own memory, charged to its memory cgroup, and a pinned page
//! cannot be reclaimed; `RLIMIT_MEMLOCK` bounds them per user, the cgroup bounds them with
//! everything else the container holds.
//!
//! Kernel behaviour relied on (Documentation/admin-guide/cgroup-v2.rst, cgroup-v1/memory.rst):
//! - `/proc/self/cgroup` names the process's cgroup: `0::<path>` in the unified (v2) hierarchy,
//!   `<n>:memory:<path>` in a v1 memory hierarchy. Inside a cgroup namespace the path is relative to
//!   the namespace's root, which is where the container's hierarchy is mounted.
//! - v2: `memory.max` (`max` = none) and `memory.current` in each cgroup directory; the root has
//!   neither. v1: `memory.limit_in_bytes` (a huge value = none) and `memory.usage_in_bytes`.
//! - Every ancestor's limit applies: the room is the smallest of each level's limit less its use.

use std::path::{Path, PathBuf};

use super::remedy::Remedy;
use super::{Finding, Support};

/// The tightest memory limit over the process's cgroup and its ancestors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupMemory {
    /// The directory whose limit leaves the least room.
    pub dir: PathBuf,
    /// Its limit and use in bytes.
    pub limit: u64,
    pub current: u64,
}

impl CgroupMemory {
    /// Bytes left before the limit.
    pub(crate) fn room(&self) -> u64 {
        self.limit.saturating_sub(self.current)
    }
}

/// v1 writes this (or a value near `i64::MAX`, page-aligned) for "no limit".
const V1_UNLIMITED: u64 = 1 << 62;

/// The tightest limit of the hierarchy mounted at `mount`, from the process's cgroup `path` up to
/// the hierarchy's root; `None` when no level has one.
fn tightest(mount: &Path, path: &str, v2: bool) -> Option<CgroupMemory> {
    let (max, current) = if v2 {
        ("memory.max", "memory.current")
    } else {
        ("memory.limit_in_bytes", "memory.usage_in_bytes")
    };
    let read = |dir: &Path, file: &str| {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let mut best: Option<CgroupMemory> = None;
    let mut dir = mount.join(path.trim_start_matches('/'));
    loop {
        if let (Some(limit), Some(current)) = (read(&dir, max), read(&dir, current))
            && limit < V1_UNLIMITED
        {
            let level = CgroupMemory {
                dir: dir.clone(),
                limit,
                current,
            };
            if best.as_ref().is_none_or(|b| level.room() < b.room()) {
                best = Some(level);
            }
        }
        if dir == mount || !dir.pop() || !dir.starts_with(mount) {
            return best;
        }
    }
}

/// The process's memory cgroup limit: the unified hierarchy's when it has the memory controller,
/// else the v1 memory hierarchy's.
pub(crate) fn memory_limit() -> (Option<CgroupMemory>, &'static str) {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let root = Path::new("/sys/fs/cgroup");
    for line in cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if controllers.is_empty() && root.join("cgroup.controllers").exists() {
            return (tightest(root, path, true), "cgroup v2");
        }
        if controllers.split(',').any(|c| c == "memory") {
            return (tightest(&root.join("memory"), path, false), "cgroup v1");
        }
    }
    (None, "no memory cgroup")
}

/// The row: the room the cgroup leaves, against the locked-memory budget's.
pub(super) fn row() -> Finding {
    let (memory, kind) = memory_limit();
    let kib = |v: u64| format!("{} KiB", v >> 10);
    let Some(m) = memory else {
        return Finding::new(
            "limit.cgroup_memory",
            Support::Yes,
            format!("{kind}: no memory limit on this process's cgroup or its ancestors"),
        );
    };
    let budget = crate::tx::MemlockBudget::global().usable();
    let tight = budget.is_none_or(|b| m.room() < b);
    let what = format!(
        "{kind} {}: limit {}, in use {}, room {} for pinned pages",
        m.dir.display(),
        kib(m.limit),
        kib(m.current),
        kib(m.room())
    );
    if tight {
        Finding::new(
            "limit.cgroup_memory",
            Support::Partial,
            format!(
                "{what}: less than the locked-memory budget allows, so the cgroup, not \
                 RLIMIT_MEMLOCK, bounds what zero-copy may pin (past it the kernel reclaims, then \
                 kills); {}",
                Remedy::cgroup_memory()
            ),
        )
    } else {
        Finding::new("limit.cgroup_memory", Support::Yes, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_level_of_a_v2_hierarchy_is_found() {
        let dir = std::env::temp_dir().join(format!("zcnet-cgroup-{}", std::process::id()));
        let leaf = dir.join("pod/ctr");
        std::fs::create_dir_all(&leaf).unwrap();
        let write = |d: &Path, max: &str, cur: &str| {
            std::fs::write(d.join("memory.max"), max).unwrap();
            std::fs::write(d.join("memory.current"), cur).unwrap();
        };
        write(&leaf, "max\n", "1000\n");
        write(&dir.join("pod"), "1048576\n", "1000000\n");
        let got = tightest(&dir, "/pod/ctr", true).unwrap();
        assert_eq!(got.dir, dir.join("pod"));
        assert_eq!(got.room(), 48576);
        write(&leaf, "40000\n", "1000\n");
        assert_eq!(tightest(&dir, "/pod/ctr", true).unwrap().room(), 39000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
