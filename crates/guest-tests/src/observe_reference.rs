//! `zcnet::observe` against the kernel's own MSG_ZEROCOPY sender, `msg_zerocopy -z`
//! (tools/testing/selftests/net/msg_zerocopy.c from Debian's linux-source-6.12, built statically and
//! packed into the initramfs by vm/run-suite): over loopback TCP, into `msg_zerocopy -r`, what the
//! observer counts for the sender's process equals what the tool prints at its end — `tx=` sends that
//! sent something, `txc=` completed send ids, all of them copied when it says `zc=n` — and the kprobe
//! on `skb_copy_ubufs` shows the bytes the kernel copied at local delivery, as for zcnet's sender.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::observe::{Counter, Observer};

use crate::observe::{agree, everyone, late_copies};
use crate::outcome::Outcome;

const TOOL: &str = "/bin/msg_zerocopy";
/// The receiver's port (the tool's default), and as `/proc/net/tcp` writes it.
const PORT: &str = "8000";
const PORT_HEX: &str = ":1F40";

/// Kills and reaps the child when dropped, whatever happened before.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until a socket listens on [`PORT`] (state 0A in `/proc/net/tcp`).
fn wait_listening() -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let table = fs::read_to_string("/proc/net/tcp")?;
        let listening = table.lines().any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.len() > 3 && fields[1].ends_with(PORT_HEX) && fields[3] == "0A"
        });
        if listening {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "msg_zerocopy -r never listened on port {PORT}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The `tx=N (M MB) txc=C zc=Z` line the sender prints last, and (N, C, Z).
fn parse(stderr: &str) -> anyhow::Result<(&str, u64, u64, char)> {
    let line = stderr
        .lines()
        .rfind(|l| l.starts_with("tx="))
        .with_context(|| format!("no tx= line in {stderr:?}"))?;
    let field = |key: &str| -> anyhow::Result<&str> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .with_context(|| format!("no {key} in {line:?}"))
    };
    let zc = field("zc=")?.chars().next().context("an empty zc=")?;
    Ok((line, field("tx=")?.parse()?, field("txc=")?.parse()?, zc))
}

/// Runs the check, or skips it when vm/run-suite could not pack the tool.
pub fn msg_zerocopy(out: &mut Outcome, all: &Observer) -> anyhow::Result<()> {
    if !Path::new(TOOL).exists() {
        out.skip(
            "msg-zerocopy totals",
            "the kernel's msg_zerocopy is not in the initramfs (vm/run-suite could not build it)",
        );
        return Ok(());
    }
    let _receiver = Reaped(
        Command::new(TOOL)
            .args(["-4", "-r", "-t", "4", "-p", PORT, "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start msg_zerocopy -r")?,
    );
    wait_listening()?;
    let before = everyone(all)?;
    let sender = Command::new(TOOL)
        .args(["-4", "-z", "-t", "1", "-p", PORT, "-D", "127.0.0.1", "tcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start msg_zerocopy -z")?;
    let pid = sender.id();
    let done = sender.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&done.stderr);
    anyhow::ensure!(
        done.status.success(),
        "msg_zerocopy -z: {}: {stderr}",
        done.status
    );
    let (line, tx, txc, zc) = parse(&stderr)?;
    let seen = all.process_totals(pid)?;
    let since = everyone(all)?.since(&before);
    // Over loopback every completion says copied (delivery to a local socket copies).
    let copied = if zc == 'n' { txc } else { 0 };
    agree(
        out,
        &format!("msg-zerocopy totals (it printed {line:?})"),
        &seen,
        &[
            (Counter::ZcSends, tx),
            (Counter::Completions, txc),
            (Counter::CopiedCompletions, copied),
        ],
    );
    late_copies(
        out,
        "msg-zerocopy",
        &seen,
        &since,
        seen.get(Counter::ZcBytes),
        false,
    );
    Ok(())
}
