//! `zcnet::observe`'s kprobe counters against an independent reference: Debian's bpftrace
//! (bookworm's 0.17, packed with its libraries into the observe run's initramfs by vm/run-suite),
//! with programs of its own on the same kernel functions.
//!
//! bpftrace runs the observed command itself (`-c`): it starts the command only once every probe
//! of its program is attached, and ends when the command exits. zcnet's observer of every task is
//! attached before bpftrace starts. Both count for the command's process (`cpid`, its tgid: what
//! zcnet keys its counters by) from before its first instruction to its exit, so their totals must
//! be equal, not merely close. A copy the kernel makes in softirq context is counted against the
//! task it interrupted, by both alike.
//!
//! Here: `kprobe:skb_copy_ubufs` (the pages of a zero-copy send copied at local delivery), with the
//! zero-copy `sendmsg`/`sendto` calls of the system call tracepoints beside it, for `zcnet bench
//! tcp --mode zerocopy` over loopback, where every send is copied again on delivery.
//! `observe_zcrx` uses the same runner for `kretprobe:io_zcrx_copy_chunk`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::observe::{Counter, Counters, Observer};

use crate::observe::everyone;
use crate::observe_reference::Reaped;
use crate::outcome::Outcome;

/// Where vm/run-suite packs Debian's bpftrace.
const BPFTRACE: &str = "/bin/bpftrace";
/// How long one traced command may take, bpftrace's start (LLVM under emulation) included.
const DEADLINE: Duration = Duration::from_secs(150);

/// Every program opens with this: bpftrace prints the command's pid (the command is created before
/// BEGIN runs, and held until every other probe is attached).
const CHILD_PID: &str = "BEGIN { printf(\"child %d\\n\", cpid); }\n";

/// The late-copy reference. A send's entry remembers, per thread, whether it asked for
/// `MSG_ZEROCOPY` (0x4000000); its exit counts the call and its bytes when it returned > 0. The
/// kprobe counts each call of `skb_copy_ubufs(skb, gfp)` and the skb's paged bytes (`data_len`),
/// read through the kernel's BTF by bpftrace itself, for every task and for the command's process.
/// Map names are zcnet's counter names (`every_` for every task).
const LATE_COPIES: &str = r#"
tracepoint:syscalls:sys_enter_sendmsg,
tracepoint:syscalls:sys_enter_sendto
/pid == cpid/
{
    @zerocopy[tid] = (args->flags & 0x4000000) != 0;
}

tracepoint:syscalls:sys_exit_sendmsg,
tracepoint:syscalls:sys_exit_sendto
/pid == cpid/
{
    if (@zerocopy[tid] && args->ret > 0) {
        @zc_sends = count();
        @zc_bytes = sum(args->ret);
    }
    delete(@zerocopy[tid]);
}

kprobe:skb_copy_ubufs
{
    @every_late_copies = count();
    @every_late_copied_bytes = sum(((struct sk_buff *)arg0)->data_len);
    if (pid == cpid) {
        @late_copies = count();
        @late_copied_bytes = sum(((struct sk_buff *)arg0)->data_len);
    }
}

END { clear(@zerocopy); }
"#;

/// What bpftrace and the command it ran printed.
pub(crate) struct Traced {
    /// The command's pid.
    pub pid: u32,
    /// bpftrace's maps at its end: name (without `@`) to value, a map never written absent.
    pub maps: BTreeMap<String, u64>,
    /// The command's standard output lines (bpftrace's own lines taken out).
    pub output: Vec<String>,
}

impl Traced {
    /// bpftrace's count for the command under zcnet's name of `counter` (0 when never written).
    pub fn get(&self, counter: Counter) -> u64 {
        self.maps.get(counter.name()).copied().unwrap_or(0)
    }

    /// bpftrace's count for every task (`@every_<name>`; 0 when never written).
    fn every(&self, counter: Counter) -> u64 {
        let name = format!("every_{}", counter.name());
        self.maps.get(&name).copied().unwrap_or(0)
    }
}

/// Runs `command` under bpftrace's `program` for `check`; `None` when that cannot be: bpftrace is
/// not in the initramfs (`check` SKIPs) or did not run to the end (`check` FAILs), saying why.
pub(crate) fn traced(
    out: &mut Outcome,
    check: &str,
    program: &str,
    command: &str,
) -> Option<Traced> {
    if !Path::new(BPFTRACE).exists() {
        out.skip(
            check,
            "Debian's bpftrace is not in the initramfs (vm/run-suite could not pack it)",
        );
        return None;
    }
    trace(program, command)
        .map_err(|e| out.fail(check, &format!("{e:#}")))
        .ok()
}

/// Runs `command` (bpftrace's `-c` splits it at spaces, quotes or not) under bpftrace's `program`
/// (after [`CHILD_PID`]), waits for both to end, and returns what they printed.
fn trace(program: &str, command: &str) -> anyhow::Result<Traced> {
    let mut child = Reaped(
        Command::new(BPFTRACE)
            .args(["-B", "line", "-e", &format!("{CHILD_PID}{program}")])
            .args(["-c", command])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("start bpftrace")?,
    );
    let stdout = read_all(child.0.stdout.take().context("bpftrace's stdout")?);
    let stderr = read_all(child.0.stderr.take().context("bpftrace's stderr")?);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait()? {
            break status;
        }
        // (Not waiting for its output: the command, which bpftrace does not kill, may hold it.)
        anyhow::ensure!(
            started.elapsed() < DEADLINE,
            "bpftrace -c {command:?} did not end in {DEADLINE:?}"
        );
        thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    );
    anyhow::ensure!(
        status.success(),
        "bpftrace -c {command:?}: {status}: {stdout}{stderr}"
    );
    parse(&stdout).with_context(|| format!("bpftrace printed {stdout:?}, {stderr:?}"))
}

/// A thread reading `from` to its end.
fn read_all(mut from: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        text
    })
}

/// Splits bpftrace's standard output (shared with the command's) into the pid line, its maps
/// (`@name: value`) and the rest, which the command printed.
fn parse(stdout: &str) -> anyhow::Result<Traced> {
    let mut pid = None;
    let mut maps = BTreeMap::new();
    let mut output = Vec::new();
    for line in stdout.lines() {
        if let Some(p) = line.strip_prefix("child ") {
            pid = Some(p.trim().parse().context("the child's pid")?);
        } else if let Some((name, value)) = line.strip_prefix('@').and_then(|l| l.split_once(": "))
        {
            let value = value.trim().parse().with_context(|| format!("{line:?}"))?;
            maps.insert(name.to_string(), value);
        } else if !line.starts_with("Attaching ") && !line.is_empty() {
            output.push(line.to_string());
        }
    }
    Ok(Traced {
        pid: pid.context("no child line")?,
        maps,
        output,
    })
}

/// The value of `"key":N` in a JSON line (`None` when absent or not a number).
pub(crate) fn json_u64(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(&format!("\"{key}\":"))? + key.len() + 3..];
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// Side by side: each counter as zcnet counted it and as bpftrace did; whether all are equal.
pub(crate) fn side_by_side(seen: &Counters, traced: &Traced, which: &[Counter]) -> (bool, String) {
    let equal = which.iter().all(|&c| seen.get(c) == traced.get(c));
    let text: Vec<String> = which
        .iter()
        .map(|&c| format!("{c} {} (bpftrace {})", seen.get(c), traced.get(c)))
        .collect();
    (equal, text.join(", "))
}

/// The check: `zcnet bench tcp --mode zerocopy` over loopback under bpftrace's [`LATE_COPIES`].
/// What `all` counted for the bench's process equals bpftrace's counts, and its late copies are not
/// none; its zero-copy sends are the ones its own row reports. For every task, from before bpftrace
/// started to after it ended (nothing else in the guest sends zero-copy meanwhile), both counted
/// the same late copies too, and they hold every byte of those sends once, as a receive-path copy
/// does (a retransmitted segment a few percent more).
pub fn late_copies(out: &mut Outcome, all: &Observer) -> anyhow::Result<()> {
    let check = "bpftrace late copies";
    let before = everyone(all)?;
    let command = "zcnet bench tcp --mode zerocopy --duration 1 --interval 0 --json";
    let Some(traced) = traced(out, check, LATE_COPIES, command) else {
        return Ok(());
    };
    let every = everyone(all)?.since(&before);
    let seen = all.process_totals(traced.pid)?;
    let (equal, text) = side_by_side(
        &seen,
        &traced,
        &[
            Counter::LateCopies,
            Counter::LateCopiedBytes,
            Counter::ZcSends,
            Counter::ZcBytes,
        ],
    );
    let row = traced
        .output
        .iter()
        .find(|l| l.contains("\"role\":\"sender\""));
    let reported = row.map(|r| (json_u64(r, "zc_calls"), json_u64(r, "bytes")));
    let sent = seen.get(Counter::ZcBytes);
    let (copies, copied) = (Counter::LateCopies, Counter::LateCopiedBytes);
    out.check(
        check,
        equal
            && seen.get(copies) > 0
            && reported == Some((Some(seen.get(Counter::ZcSends)), Some(sent)))
            && every.get(copies) == traced.every(copies)
            && every.get(copied) == traced.every(copied)
            && (sent..=sent + sent / 20).contains(&every.get(copied)),
        &format!(
            "zcnet bench tcp --mode zerocopy over loopback (pid {}) under bpftrace's \
             kprobe:skb_copy_ubufs and send tracepoints: {text}; the sender's row: zc_calls, \
             bytes {reported:?}; every task: {copies} {} (bpftrace {}), {copied} {} (bpftrace {})",
            traced.pid,
            every.get(copies),
            traced.every(copies),
            every.get(copied),
            traced.every(copied),
        ),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_maps_and_the_commands_lines_are_told_apart() {
        let t = parse(
            "Attaching 5 probes...\nchild 321\n{\"role\":\"sender\",\"bytes\":12}\n\n\
             @late_copied_bytes: 4096\n@late_copies: 2\n\n",
        )
        .unwrap();
        assert_eq!(t.pid, 321);
        assert_eq!(t.get(Counter::LateCopies), 2);
        assert_eq!(t.get(Counter::LateCopiedBytes), 4096);
        assert_eq!(t.get(Counter::ZcSends), 0);
        assert_eq!(t.output, ["{\"role\":\"sender\",\"bytes\":12}"]);
        assert!(parse("@late_copies: 2\n").is_err(), "no pid line");
    }

    #[test]
    fn json_numbers_by_key() {
        let line = r#"{"bytes":1475084288,"calls":7,"received_bytes":3,"zc_calls":22994}"#;
        assert_eq!(json_u64(line, "bytes"), Some(1475084288));
        assert_eq!(json_u64(line, "zc_calls"), Some(22994));
        assert_eq!(json_u64(line, "missing"), None);
        assert_eq!(json_u64(r#"{"bytes":null}"#, "bytes"), None);
    }
}
