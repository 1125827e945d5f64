//! Removing namespaces that dead processes left behind.

use std::io;
use std::path::Path;

use crate::command::run_checked;

/// Deletes every `/run/netns/zc<pid>-…` whose `<pid>` no longer runs, and returns their names.
/// Namespaces of live processes (other tests running now) are left alone.
pub fn sweep() -> io::Result<Vec<String>> {
    let dir = match std::fs::read_dir("/run/netns") {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for entry in dir {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner_pid(&name) else {
            continue;
        };
        if !process_exists(pid) {
            match run_checked("ip", &["netns", "del", &name]) {
                Ok(_) => removed.push(name),
                // Another sweep (a test setting up its own harness at the same moment) got there first.
                Err(_) if !Path::new("/run/netns").join(&name).exists() => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// The pid in a name of the form `zc<pid>-<rest>`, if the name has that form.
fn owner_pid(name: &str) -> Option<i32> {
    let (pid, _) = name.strip_prefix("zc")?.split_once('-')?;
    pid.parse().ok()
}

/// Whether process `pid` still exists (`kill(pid, 0)`; EPERM means it exists but is not ours).
fn process_exists(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

#[cfg(test)]
mod tests {
    use super::owner_pid;

    #[test]
    fn only_zc_names_with_a_pid_are_ours() {
        assert_eq!(owner_pid("zc4242-1a"), Some(4242));
        assert_eq!(owner_pid("zc-1a"), None);
        assert_eq!(owner_pid("zcx-1a"), None);
        assert_eq!(owner_pid("blue"), None);
        assert_eq!(owner_pid("zc77"), None);
    }
}
