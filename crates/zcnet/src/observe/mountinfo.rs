//! Where a file system is mounted, as the calling thread sees the mounts (a thread may have a mount
//! namespace of its own): `/proc/thread-self/mountinfo`, whose lines end with ` - <type> <source>
//! <options>` and give the mount point as their fifth field.

use std::fs;
use std::path::PathBuf;

/// The mount point of the first mount of file system type `fstype` (`tracefs`, `cgroup2`).
pub(super) fn mount_of(fstype: &str) -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
    mountinfo.lines().find_map(|line| mounted_at(line, fstype))
}

/// The mount point of a `mountinfo` line when its file system type is `fstype`.
fn mounted_at(line: &str, fstype: &str) -> Option<PathBuf> {
    let (left, right) = line.split_once(" - ")?;
    if right.split(' ').next()? != fstype {
        return None;
    }
    left.split(' ').nth(4).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_point_is_found_by_type() {
        let tracefs = "38 24 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:14 - tracefs tracefs rw";
        assert_eq!(
            mounted_at(tracefs, "tracefs"),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        assert_eq!(mounted_at(tracefs, "cgroup2"), None);
        let cgroup = "35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(
            mounted_at(cgroup, "cgroup2"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let sysfs = "22 28 0:20 / /sys rw,nosuid shared:7 - sysfs sysfs rw";
        assert_eq!(mounted_at(sysfs, "tracefs"), None);
    }
}
