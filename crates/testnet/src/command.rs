//! Running the iproute2 / ethtool commands that build topologies, with errors that show the command.

use std::io;
use std::process::Command;

/// Runs `program args…`, returning its standard output, or an error that names the command, its exit
/// status and what it printed on standard error. A missing program says which package provides it.
pub fn run_checked(program: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        let hint = match program {
            "ip" => " (install iproute2)",
            "ethtool" => " (install ethtool)",
            _ => "",
        };
        io::Error::new(e.kind(), format!("cannot run `{program}`{hint}: {e}"))
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
