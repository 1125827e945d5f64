//! `zcnet dp show` over a datapath deleted while it is being read: it says so and goes on.
//!
//! The deletion falls between the listing and the reading, without any timing: `zcnet dp show`
//! writes to a pipe that is already full, so that it stops in its first write, after listing the
//! datapaths; the second datapath is deleted while it waits there, then the pipe is drained.
//! Datapaths are listed in the order they were created (the kernel appends each new one to its
//! list), so the first one listed is the first created here unless an older one is left over, and
//! the second is deleted after the listing either way.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::ovs::{Datapath, DatapathConfig, UpcallSocket};

use crate::outcome::Outcome;

/// Longest wait for `zcnet dp show` to reach its first write.
const REACH_WRITE: Duration = Duration::from_secs(120);

/// Runs the check.
pub fn run(outcome: &mut Outcome) -> anyhow::Result<()> {
    let upcalls = UpcallSocket::open()?;
    let first = format!("zc{}-s", std::process::id());
    let second = format!("zc{}-t", std::process::id());
    let _first = Datapath::create(&first, DatapathConfig::default(), &upcalls)?;
    let vanishing = Datapath::create(&second, DatapathConfig::default(), &upcalls)?;

    let (mut reader, mut writer) = std::io::pipe()?;
    let capacity = rustix::pipe::fcntl_getpipe_size(&writer)?;
    // Exactly the pipe's capacity fits without blocking; the next byte written waits for a reader.
    writer.write_all(&vec![b'#'; capacity])?;
    let mut child = {
        let mut cmd = Command::new("zcnet");
        cmd.args(["dp", "show"])
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped());
        cmd.spawn().context("run zcnet dp show")?
    };
    let blocked = wait_in_write(&mut child)?;
    vanishing.delete()?;
    let mut out = Vec::new();
    reader.read_to_end(&mut out)?;
    let status = child.wait()?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err)?;
    }
    let shown = String::from_utf8_lossy(&out[capacity.min(out.len())..]).into_owned();
    let first_shown = shown.contains(&format!("system@{first}:"))
        && shown.contains(&format!("port 0: {first} (internal)"));
    let vanished_said = shown
        .lines()
        .any(|l| l.contains(&second) && l.contains("vanished"));
    outcome.check(
        "show-vanished",
        blocked && status.success() && first_shown && vanished_said,
        &format!(
            "zcnet dp show, stopped in its first write ({blocked}) while {second} was deleted, exited {status}: {first} shown with its port {first_shown}, {second} said to have vanished {vanished_said}; output `{}`; stderr `{}`",
            shown.trim().replace('\n', "; "),
            err.trim()
        ),
    );
    Ok(())
}

/// Waits until `child` sits in a `write` (or `writev`) system call — its output pipe is full — and
/// returns true, or false when it exits first or [`REACH_WRITE`] passes.
fn wait_in_write(child: &mut std::process::Child) -> anyhow::Result<bool> {
    let path = format!("/proc/{}/syscall", child.id());
    let start = Instant::now();
    while start.elapsed() < REACH_WRITE {
        if child.try_wait()?.is_some() {
            return Ok(false);
        }
        let call = std::fs::read_to_string(&path).unwrap_or_default();
        // x86-64 numbers: write 1, writev 20; the first argument is the descriptor (stdout, 1).
        let mut fields = call.split_whitespace();
        if matches!(fields.next(), Some("1" | "20")) && fields.next() == Some("0x1") {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(false)
}
