//! `zcnet observe` against the kernel's own reference tools (tools/testing/selftests/net of Debian's
//! linux-source-6.12, built outside the repository by `scripts/compare/lib.sh`'s `refs_build` and run
//! as external programs), inside a network namespace of the test's own: for a `msg_zerocopy -z`
//! sender observed by pid, its sends, completions and copied completions equal the tool's own
//! `tx=… txc=… zc=…` line within 1% (TCP and UDP); for a `tcp_mmap -s -z` server, the bytes it
//! mapped equal the total times the mapped percentage it prints, within 1%.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::observing::{start_observer, totals_of, within_one_percent};
use common::{Reaped, ZCNET, sigint, u};
use serde_json::Value;

/// The directory of the reference tools' binaries: `refs_build` run from the repository root (it
/// fetches and builds them once, into the user's cache). Its failure fails the test, with its output.
fn reference_tools() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .args(["-c", "source scripts/compare/lib.sh && refs_build"])
        .current_dir(&root)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "refs_build: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
    for tool in ["msg_zerocopy", "tcp_mmap"] {
        assert!(
            bin.join(tool).is_file(),
            "refs_build built no {tool}: {stdout}"
        );
    }
    bin
}

/// Waits until process `pid` (started as `child`) has a socket on local port `port` in state
/// `state` in its network namespace (`/proc/<pid>/net/<table>`; TCP listening is `0A`, a bound UDP
/// socket `07`). Fails if the process ends first, or after a minute.
fn wait_for_socket(child: &mut Reaped, table: &str, port: u16, state: &str) {
    let pid = child.pid();
    let local = format!(":{port:04X}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!(
                "pid {pid} ended ({status}) before binding: {}",
                child.stderr()
            );
        }
        let sockets =
            std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        let bound = sockets.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&local) && f[3] == state
        });
        if bound {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "pid {pid} has no {table} socket on port {port}"
        );
        sleep(Duration::from_millis(20));
    }
}

/// Sends SIGINT to an observer and returns the rest of its output: its summary.
fn summary_of(observer: &Reaped, mut stdout: impl Read) -> String {
    sigint(&observer.0);
    let mut summary = String::new();
    stdout.read_to_string(&mut summary).unwrap();
    summary
}

/// What `msg_zerocopy`'s sender says at its end: `tx=%lu (%lu MB) txc=%lu zc=%c` on stderr.
#[derive(Debug)]
struct MsgZerocopyReport {
    /// `sendmsg` calls that sent.
    tx: u64,
    /// The bytes they sent, in whole MiB.
    mib: u64,
    /// Send ids its completions covered.
    txc: u64,
    /// `zc=y`: the completions said not copied.
    zerocopied: bool,
}

fn msg_zerocopy_report(stderr: &str) -> MsgZerocopyReport {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("tx="))
        .unwrap_or_else(|| panic!("no tx= line from msg_zerocopy: {stderr}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    let number = |token: Option<&&str>, prefix: &str| -> u64 {
        token
            .and_then(|t| t.strip_prefix(prefix))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} in {line:?}"))
    };
    let zc = f.get(4).and_then(|t| t.strip_prefix("zc="));
    assert!(
        f.len() == 5 && f[2] == "MB)" && matches!(zc, Some("y" | "n")),
        "msg_zerocopy's line {line:?}"
    );
    MsgZerocopyReport {
        tx: number(f.first(), "tx="),
        mib: number(f.get(1), "("),
        txc: number(f.get(3), "txc="),
        zerocopied: zc == Some("y"),
    }
}

/// Port of the `msg_zerocopy` pair (its default).
const MSG_ZEROCOPY_PORT: u16 = 8000;

/// Runs `msg_zerocopy -4 -r PROTO` and a `msg_zerocopy -4 -z -t 2 PROTO` sender to it on loopback
/// in `ns`, the sender observed by pid from before it starts; returns what the sender printed on
/// stderr and the observer's totals for it.
fn observed_msg_zerocopy(ns: &testnet::Netns, tool: &Path, proto: &str) -> (String, Value) {
    let port = MSG_ZEROCOPY_PORT.to_string();
    let table = if proto == "tcp" { "tcp" } else { "udp" };
    // The receiver runs long (its own timer) and is killed once the sender is done.
    let mut receiver = Reaped(
        ns.command(tool.to_str().unwrap())
            .args(["-4", "-r", "-p", &port, "-t", "600", proto])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start msg_zerocopy -r"),
    );
    let listening = if proto == "tcp" { "0A" } else { "07" };
    wait_for_socket(&mut receiver, table, MSG_ZEROCOPY_PORT, listening);
    // The sender's shell says its pid, waits for a line, then becomes msg_zerocopy (same pid).
    let mut sender = Reaped(
        ns.command("sh")
            .args(["-c", "echo $$; read go; exec \"$0\" \"$@\""])
            .arg(tool)
            .args(["-4", "-z", "-t", "2", "-p", &port, "-D", "127.0.0.1", proto])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start msg_zerocopy -z"),
    );
    let mut out = BufReader::new(sender.0.stdout.take().unwrap());
    let mut pid = String::new();
    out.read_line(&mut pid).unwrap();
    let pid: u32 = pid.trim().parse().expect("the sender's pid");
    assert_eq!(pid, sender.pid(), "the sender runs as the child itself");
    let (observer, _, observed) = start_observer(&["--pid", &pid.to_string()]);
    writeln!(sender.0.stdin.take().unwrap(), "go").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let stderr = sender.stderr();
    let status = sender.0.wait().unwrap();
    if !status.success() {
        // The receiver's stderr ends once it is killed.
        let _ = receiver.0.kill();
        panic!(
            "msg_zerocopy -z {proto}: {status}\n{rest}{stderr}\nreceiver: {}",
            receiver.stderr()
        );
    }
    let summary = summary_of(&observer, observed);
    (stderr, totals_of(&summary, u64::from(pid)))
}

/// Checks observe's totals for a `msg_zerocopy -z` sender against the sender's own line.
fn agrees_with_msg_zerocopy(proto: &str, stderr: &str, seen: &Value) {
    let report = msg_zerocopy_report(stderr);
    eprintln!("msg_zerocopy -z {proto}: {report:?}; observe: {seen}");
    within_one_percent(
        &format!("{proto} zc_sends against tx"),
        u(seen, "zc_sends"),
        report.tx,
    );
    within_one_percent(
        &format!("{proto} completions against txc"),
        u(seen, "completions"),
        report.txc,
    );
    if report.zerocopied {
        assert_eq!(
            u(seen, "copied_completions"),
            0,
            "{proto}: msg_zerocopy said zc=y, observe saw copies: {seen}"
        );
    } else {
        within_one_percent(
            &format!("{proto} copied_completions against txc (zc=n)"),
            u(seen, "copied_completions"),
            report.txc,
        );
    }
    // Its MB figure is the bytes sent shifted right by 20.
    let mib = u(seen, "zc_bytes") as f64 / f64::from(1 << 20);
    let slack = (report.mib as f64 * 0.01).max(1.0);
    assert!(
        (mib - report.mib as f64).abs() <= slack,
        "{proto}: observe saw {mib:.1} MiB sent, msg_zerocopy {} MB",
        report.mib
    );
}

#[test]
fn observe_pid_equals_what_msg_zerocopy_reports() {
    let test = "observe_pid_equals_what_msg_zerocopy_reports";
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    let tool = reference_tools().join("msg_zerocopy");
    let ns = testnet::Netns::create("mzc").expect("namespace");
    for proto in ["tcp", "udp"] {
        let (stderr, seen) = observed_msg_zerocopy(&ns, &tool, proto);
        agrees_with_msg_zerocopy(proto, &stderr, &seen);
    }
}

/// Port of `tcp_mmap -s`.
const TCP_MMAP_PORT: u16 = 8787;
/// MiB the bounded sender writes to `tcp_mmap -s -z` (its own client always writes 32 GiB).
const TCP_MMAP_MIB: u64 = 256;

/// `tcp_mmap`'s server line for a connection, `received %g MB (%g %% mmap'ed) in …`: the MiB
/// received and the percentage mapped.
fn tcp_mmap_received(line: &str) -> (f64, f64) {
    let f: Vec<&str> = line.split_whitespace().collect();
    let parse = |s: Option<&str>| -> f64 {
        s.and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("tcp_mmap's line {line:?}"))
    };
    assert!(
        f.len() > 4 && f[0] == "received" && f[2] == "MB" && f[4] == "%",
        "tcp_mmap's line {line:?}"
    );
    (
        parse(f.get(1).copied()),
        parse(f.get(3).and_then(|p| p.strip_prefix('('))),
    )
}

#[test]
fn observe_pid_mapped_bytes_equal_what_tcp_mmap_prints() {
    let test = "observe_pid_mapped_bytes_equal_what_tcp_mmap_prints";
    if !testnet::may_trace(test) || !testnet::privileged(test) {
        return;
    }
    let tool = reference_tools().join("tcp_mmap");
    let ns = testnet::Netns::create("mmap").expect("namespace");
    let port = TCP_MMAP_PORT.to_string();
    // Line-buffered, so that its line for the connection comes while it keeps serving. MSS 4108:
    // one 4096-byte page of payload per segment (plus 12 bytes of timestamps), so that pages map
    // over loopback.
    let mut server = Reaped(
        ns.command("stdbuf")
            .args(["-oL", tool.to_str().unwrap()])
            .args(["-4", "-s", "-z", "-M", "4108", "-p", &port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tcp_mmap -s -z"),
    );
    wait_for_socket(&mut server, "tcp", TCP_MMAP_PORT, "0A");
    let pid = server.pid();
    let (observer, _, observed) = start_observer(&["--pid", &pid.to_string()]);
    let (lines, from_server) = mpsc::channel();
    let stdout = BufReader::new(server.0.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // zcnet's MSG_ZEROCOPY sender from page-aligned buffers, --raw (no header): TCP_MMAP_MIB MiB,
    // then it closes, and tcp_mmap's thread ends the connection at the end of the stream.
    let mut sender = Reaped(
        ns.command(ZCNET)
            .args([
                "bench",
                "rx",
                "--connect",
                &format!("127.0.0.1:{port}"),
                "--raw",
            ])
            .args([
                "--sender", "zerocopy", "--mode", "zerocopy", "--rounds", "1",
            ])
            .args(["--mib", &TCP_MMAP_MIB.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the sender"),
    );
    let status = sender.0.wait().unwrap();
    assert!(status.success(), "sender: {status}: {}", sender.stderr());
    let received = loop {
        match from_server.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.starts_with("received") => break line,
            Ok(_) => {}
            Err(e) => panic!(
                "tcp_mmap printed no line for the connection ({e}): {}",
                server.stderr()
            ),
        }
    };
    let summary = summary_of(&observer, observed);
    let seen = totals_of(&summary, u64::from(pid));
    let (mib, percent) = tcp_mmap_received(&received);
    eprintln!("tcp_mmap -s -z: {received}; observe: {seen}");
    assert_eq!(
        mib, TCP_MMAP_MIB as f64,
        "tcp_mmap received other than was sent: {received}"
    );
    let total = mib * f64::from(1 << 20);
    let mapped = (total * percent / 100.0).round() as u64;
    assert!(mapped > 0, "tcp_mmap mapped nothing: {received}");
    within_one_percent(
        "rx_mapped_bytes against tcp_mmap's total × mapped %",
        u(&seen, "rx_mapped_bytes"),
        mapped,
    );
    // What it did not map it read: observe's copied receive bytes make up the rest.
    within_one_percent(
        "rx_mapped_bytes + rx_copied_bytes against tcp_mmap's total",
        u(&seen, "rx_mapped_bytes") + u(&seen, "rx_copied_bytes"),
        total as u64,
    );
}
