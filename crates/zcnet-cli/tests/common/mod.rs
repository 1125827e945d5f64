//! What the CLI tests share: the `zcnet` binary built with them, a run that must succeed, and the
//! JSON lines it prints (rows, and interval lines while a bench runs).
#![allow(dead_code)]

pub mod observing;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `zcnet` binary built with these tests.
pub const ZCNET: &str = env!("CARGO_BIN_EXE_zcnet");

/// Runs `cmd` to its end; it must exit 0 (else the panic names `what` and shows its output).
/// Returns its stdout.
pub fn stdout_of(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    succeeded(&out, what);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks that a finished run exited 0 (else the panic names `what` and shows its output).
pub fn succeeded(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every line of `text`, each one JSON object.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object: {l:?}: {e}"))
        })
        .collect()
}

/// The lines of `text` that are rows: every JSON line but the interval lines.
pub fn json_rows(text: &str) -> Vec<Value> {
    json_lines(text)
        .into_iter()
        .filter(|row| row.get("interval").is_none())
        .collect()
}

/// The next `n` rows a `--listen` receiver prints on `stdout` (fewer if it ends first).
pub fn next_rows(stdout: &mut impl BufRead, n: usize) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut line = String::new();
    while rows.len() < n && stdout.read_line(&mut line).unwrap_or(0) > 0 {
        rows.extend(json_rows(&line));
        line.clear();
    }
    rows
}

/// The modes of `bench rx --listen` rows, in order, each row checked to have taken `bytes`, every
/// byte verified and right.
pub fn rx_modes_of_whole(rows: &[Value], bytes: u64) -> Vec<&str> {
    for row in rows {
        assert_eq!(row["bytes"], bytes, "{row}");
        assert_eq!(row["verified"], true, "{row}");
        assert_eq!(row["data_errors"], 0, "{row}");
    }
    rows.iter().map(|r| r["mode"].as_str().unwrap()).collect()
}

/// Each row's (mode, api), in order.
pub fn modes_and_apis(rows: &[Value]) -> Vec<(&str, &str)> {
    rows.iter()
        .map(|r| (r["mode"].as_str().unwrap(), r["api"].as_str().unwrap()))
        .collect()
}

/// Runs a verified UDP bench `cmd` and returns its rows. A run that the flood outran exits non-zero
/// naming the loss, after its rows: that is accepted (the rows account for it), any other failure
/// is not.
pub fn udp_rows_allowing_loss(cmd: &mut Command) -> Vec<Value> {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("datagrams lost"),
        "{}: {stderr}",
        out.status
    );
    json_rows(&String::from_utf8_lossy(&out.stdout))
}

/// A row's unsigned field.
pub fn u(row: &Value, field: &str) -> u64 {
    row[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {row}"))
}

/// Sends SIGINT to `child`, as Ctrl-C does.
pub fn sigint(child: &Child) {
    testnet::run_checked("kill", &["-INT", &child.id().to_string()]).expect("kill -INT");
}

/// Sends SIGINT to `child`, whose stdout is read through `stdout`, reads that to its end and waits
/// for the child, which must exit 0. Returns the rest of its stdout.
pub fn interrupt_and_finish(child: Child, mut stdout: impl Read) -> String {
    sigint(&child);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("read the rest");
    let out = child.wait_with_output().expect("wait");
    succeeded(&out, "the interrupted run");
    rest
}

/// `zcnet bench BENCH --listen 127.0.0.1:0 --json --interval 0`: a receiver on loopback, for
/// [`start_listener`].
pub fn listen_command(bench: &str) -> Command {
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", bench, "--listen", "127.0.0.1:0"])
        .args(["--json", "--interval", "0"]);
    cmd
}

/// Starts `cmd` with its stdout and stderr piped; returns it, its first line of stdout and the rest
/// of its stdout.
pub fn start_reading(cmd: &mut Command) -> (Child, String, BufReader<ChildStdout>) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zcnet");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    (child, line, stdout)
}

/// Starts a `--listen … --json` receiver with `cmd`; returns it, the address it announced on its
/// first line, and the rest of its stdout.
pub fn start_listener(cmd: &mut Command) -> (Child, SocketAddr, BufReader<ChildStdout>) {
    let (child, line, stdout) = start_reading(cmd);
    let announced: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line:?}"));
    let addr = announced["listening"].as_str().unwrap().parse().unwrap();
    (child, addr, stdout)
}

/// The only child process of process `parent` (a one-process bench's other side), once started.
pub fn only_child(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_dir(format!("/proc/{parent}/task"))
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|c| {
                c.split_whitespace()
                    .map(|p| p.parse::<u32>().unwrap())
                    .collect::<Vec<_>>()
            })
            .next();
        if let Some(pid) = children {
            return pid;
        }
        assert!(Instant::now() < deadline, "no child process started");
        sleep(Duration::from_millis(10));
    }
}

/// A `bench tcp --listen … --once` receiver in a namespace and a `bench tcp --connect` sender to it,
/// the sender held before its first system call so that an observer can attach to its pid first.
pub struct HeldSender {
    pub listener: Child,
    pub sender: Child,
    /// The sender's pid, the bench's once released.
    pub pid: u32,
    /// A line written here releases the sender.
    pub go: ChildStdin,
    /// The sender's stdout after its pid: the bench's `--json` lines.
    pub stdout: BufReader<ChildStdout>,
}

/// Starts a [`HeldSender`] in `ns`: the sender runs `bench tcp --connect ADDR --json --interval 0
/// --duration 1 ARGS`, its shell saying its pid, waiting for a line, then becoming the bench (same
/// pid).
pub fn held_sender(ns: &testnet::Netns, args: &[&str]) -> HeldSender {
    held_sender_as(ns, "", "", args)
}

/// [`held_sender`] whose shell runs `setup` first and execs the sender through `exec_through` (a
/// command such as `setpriv --reuid 65534`, which keeps the pid).
pub fn held_sender_as(
    ns: &testnet::Netns,
    setup: &str,
    exec_through: &str,
    args: &[&str],
) -> HeldSender {
    let mut listen = ns.command(ZCNET);
    listen
        .args([
            "bench",
            "tcp",
            "--listen",
            "127.0.0.1:0",
            "--once",
            "--json",
        ])
        .args(["--interval", "0"]);
    let (listener, addr, _) = start_listener(&mut listen);
    let mut sender = ns
        .command("sh")
        .args([
            "-c",
            &format!("{setup} echo $$; read go; exec {exec_through} \"$0\" \"$@\""),
            ZCNET,
        ])
        .args(["bench", "tcp", "--connect", &addr.to_string(), "--json"])
        .args(["--interval", "0", "--duration", "1"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the sender");
    let mut stdout = BufReader::new(sender.stdout.take().unwrap());
    let go = sender.stdin.take().unwrap();
    let mut pid = String::new();
    stdout.read_line(&mut pid).unwrap();
    let pid = pid.trim().parse().expect("the sender's pid");
    HeldSender {
        listener,
        sender,
        pid,
        go,
        stdout,
    }
}

/// The last `"role":"sender"` row of a bench's `--json` output.
pub fn sender_row(rows: &str) -> Value {
    json_lines(rows)
        .into_iter()
        .rfind(|r| r["role"] == "sender")
        .unwrap_or_else(|| panic!("no sender row in {rows}"))
}

/// Whether `test` may change a namespace's firewall: privileged (else it skips), and nft installed.
pub fn nft_usable(test: &str) -> bool {
    if !testnet::privileged(test) {
        return false;
    }
    if !["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        testnet::skip(test, "nft (the nftables package) is not installed");
        return false;
    }
    true
}

/// A process the test started, killed (SIGKILL to its pid) and reaped when dropped if it is still
/// running: a test that fails midway leaves nothing of its own behind.
pub struct Reaped(pub Child);

impl Reaped {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Its standard error so far, to the end once it has exited (empty if not piped).
    pub fn stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            pipe.read_to_string(&mut err).ok();
        }
        err
    }

    /// Waits for the process to end; it must exit 0 (else the panic names `what` and adds `more`).
    pub fn wait_success(&mut self, what: &str, more: &str) {
        let status = self
            .0
            .wait()
            .unwrap_or_else(|e| panic!("wait for {what}: {e}"));
        assert!(status.success(), "{what}: {status}\n{more}");
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
