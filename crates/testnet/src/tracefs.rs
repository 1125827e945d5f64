//! Reading the kernel's tracepoints from a test: tracefs mounted where the observer looks for it.

use std::process::Command;

/// A `Command` for `program` that can read the kernel's tracepoints: `program` itself when tracefs
/// is mounted at `/sys/kernel/tracing`, else `program` in a private mount namespace (`unshare -m`,
/// whose mounts do not propagate back) where tracefs is mounted first. Needs root for the latter.
pub fn with_tracefs(program: &str) -> Command {
    if std::path::Path::new("/sys/kernel/tracing/events").is_dir() {
        return Command::new(program);
    }
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-m",
        "sh",
        "-c",
        "mount -t tracefs nodev /sys/kernel/tracing && exec \"$0\" \"$@\"",
        program,
    ]);
    cmd
}
