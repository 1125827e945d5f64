//! Running the iproute2 / ethtool commands that build topologies, with errors that show the command.

use std::io;
use std::process::Command;

/// The directories system tools live in on Debian (ethtool in `/usr/sbin`), which a normal user's
/// `PATH` lacks.
const SYSTEM_DIRS: [&str; 3] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// A `Command` for the system tool `program` whose `PATH` (used to find `program`, and by `ip netns
/// exec` to find what it runs) is the caller's followed by [`SYSTEM_DIRS`] it lacks.
pub(crate) fn system_command(program: &str) -> Command {
    let path = std::env::var("PATH").unwrap_or_default();
    let mut dirs: Vec<&str> = path.split(':').filter(|d| !d.is_empty()).collect();
    for dir in SYSTEM_DIRS {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let mut cmd = Command::new(program);
    cmd.env("PATH", dirs.join(":"));
    cmd
}

/// Runs `program args…` (found on `PATH` or in `/usr/sbin`, `/sbin`), returning its standard output,
/// or an error that names the command, its exit status and what it printed on standard error. A
/// missing program says which package provides it.
pub fn run_checked(program: &str, args: &[&str]) -> io::Result<String> {
    let out = system_command(program).args(args).output().map_err(|e| {
        let hint = match program {
            "ip" => " (install iproute2)",
            "ethtool" => " (install ethtool)",
            _ => "",
        };
        io::Error::new(
            e.kind(),
            format!("cannot run `{program}` from PATH, /usr/sbin or /sbin{hint}: {e}"),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
