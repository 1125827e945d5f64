//! `zcnet::observe` against the kernel's own MSG_ZEROCOPY sender, `msg_zerocopy -z`
//! (tools/testing/selftests/net/msg_zerocopy.c from Debian's linux-source-6.12, built statically and
//! packed into the initramfs by vm/run-suite): over loopback TCP, into `msg_zerocopy -r`, what the
//! observer counts for the sender's process equals what the tool prints at its end — `tx=` sends that
//! sent something, `txc=` completed send ids, all of them copied when it says `zc=n` — and the kprobe
//! on `skb_copy_ubufs` shows the bytes the kernel copied at local delivery, as for zcnet's sender.
//! And against the kernel's TCP zero-copy receiver, `tcp_mmap -s -z` (tcp_mmap.c, built the same
//! way), fed by zcnet's zero-copy sender: the bytes the observer counts mapped for its process equal
//! its total times the share it says it mapped, and mapped plus copied its total.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::observe::{Counter, Observer};

use crate::observe::{agree, counting_retransmits, everyone, late_copies};
use crate::outcome::Outcome;

const TOOL: &str = "/bin/msg_zerocopy";
/// The receiver's port (the tool's default), and as `/proc/net/tcp` writes it.
const PORT: &str = "8000";
const PORT_HEX: &str = ":1F40";
const TCP_MMAP: &str = "/bin/tcp_mmap";
/// `tcp_mmap -s`'s port (the tool's default), and as `/proc/net/tcp` writes it.
const TCP_MMAP_PORT: &str = "8787";
const TCP_MMAP_PORT_HEX: &str = ":2253";
/// MiB zcnet's sender writes to `tcp_mmap -s -z`.
const TCP_MMAP_MIB: u64 = 64;

/// Kills and reaps the child when dropped, whatever happened before.
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until a socket listens on the port written `port_hex` (state 0A in `/proc/net/tcp`).
fn wait_listening(port_hex: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let table = fs::read_to_string("/proc/net/tcp")?;
        let listening = table.lines().any(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.len() > 3 && fields[1].ends_with(port_hex) && fields[3] == "0A"
        });
        if listening {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "nothing listened on port {port_hex} (hex) in a minute"
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
    wait_listening(PORT_HEX)?;
    let before = everyone(all)?;
    let ((pid, done), retransmits) = counting_retransmits(|| {
        let sender = Command::new(TOOL)
            .args(["-4", "-z", "-t", "1", "-p", PORT, "-D", "127.0.0.1", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("start msg_zerocopy -z")?;
        Ok((sender.id(), sender.wait_with_output()?))
    })?;
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
        (seen.get(Counter::ZcBytes), retransmits),
        false,
    );
    Ok(())
}

/// `tcp_mmap`'s line for a connection, `received %g MB (%g %% mmap'ed) in …`: MiB and % mapped.
fn tcp_mmap_received(line: &str) -> anyhow::Result<(f64, f64)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    anyhow::ensure!(
        f.len() > 4 && f[0] == "received" && f[2] == "MB" && f[4] == "%",
        "tcp_mmap's line {line:?}"
    );
    let mib = f[1].parse().with_context(|| format!("{line:?}"))?;
    let percent = f[3].trim_start_matches('(').parse();
    Ok((mib, percent.with_context(|| format!("{line:?}"))?))
}

/// Runs the tcp_mmap check, or skips it when vm/run-suite could not pack the tool.
pub fn tcp_mmap(out: &mut Outcome, all: &Observer) -> anyhow::Result<()> {
    if !Path::new(TCP_MMAP).exists() {
        out.skip(
            "tcp-mmap mapped bytes",
            "the kernel's tcp_mmap is not in the initramfs (vm/run-suite could not build it)",
        );
        return Ok(());
    }
    // MSS 4108: one 4096-byte page of payload per segment (and 12 bytes of timestamps), so that
    // pages map over loopback.
    let mut server = Reaped(
        Command::new(TCP_MMAP)
            .args(["-4", "-s", "-z", "-M", "4108", "-p", TCP_MMAP_PORT])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("start tcp_mmap -s -z")?,
    );
    wait_listening(TCP_MMAP_PORT_HEX)?;
    let pid = server.0.id();
    let (lines, from_server) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(server.0.stdout.take().context("its stdout")?);
    thread::spawn(move || {
        use std::io::BufRead;
        for line in stdout.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // zcnet's MSG_ZEROCOPY sender, --raw (no header): the stream tcp_mmap expects.
    let sent = Command::new("zcnet")
        .args([
            "bench",
            "rx",
            "--connect",
            &format!("127.0.0.1:{TCP_MMAP_PORT}"),
        ])
        .args(["--raw", "--sender", "zerocopy", "--mode", "zerocopy"])
        .args(["--rounds", "1", "--mib", &TCP_MMAP_MIB.to_string()])
        .stdout(Stdio::null())
        .output()
        .context("run zcnet's sender")?;
    anyhow::ensure!(
        sent.status.success(),
        "zcnet's sender: {}: {}",
        sent.status,
        String::from_utf8_lossy(&sent.stderr)
    );
    let line = loop {
        let line = from_server
            .recv_timeout(Duration::from_secs(60))
            .context("tcp_mmap printed no line for the connection in a minute")?;
        if line.starts_with("received") {
            break line;
        }
    };
    let (mib, percent) = tcp_mmap_received(&line)?;
    let total = mib * f64::from(1 << 20);
    let mapped = (total * percent / 100.0).round() as u64;
    let seen = all.process_totals(pid)?;
    let (seen_mapped, seen_copied) = (
        seen.get(Counter::RxMappedBytes),
        seen.get(Counter::RxCopiedBytes),
    );
    let near = |a: u64, b: u64| a.abs_diff(b) as f64 <= b as f64 / 100.0;
    out.check(
        "tcp-mmap mapped bytes",
        mib == TCP_MMAP_MIB as f64
            && mapped > 0
            && near(seen_mapped, mapped)
            && near(seen_mapped + seen_copied, total as u64),
        &format!(
            "tcp_mmap -s -z printed {line:?}: {mapped} bytes mapped of {total}; observed \
             rx_mapped_bytes {seen_mapped} in {} calls, rx_copied_bytes {seen_copied}",
            seen.get(Counter::RxZcCalls)
        ),
    );
    Ok(())
}
