//! TCP senders against peers and paths that stop taking data: a peer that never reads, a DROP rule
//! in the middle of a stream, a SYN that is dropped, Ctrl-C while a send or a connect blocks, and
//! the one-process `bench rx` whose sender process is stopped or killed, a `bench tcp|udp` sender whose
//! receiver dies in its second mode. Each must end within a generous bound (these check that nothing
//! hangs; the figures are not timed) with a reason naming what was seen.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use common::{
    ZCNET, json_lines, json_rows, listen_command, nft_usable, only_child, sigint, start_listener,
};
use testnet::{VethConfig, VethPair};

/// Far above every timeout the tests pass (1 to 2 s): only a hang reaches it.
const HANG: Duration = Duration::from_secs(40);

/// A listener that accepts connections and never reads them (held until the test ends).
fn deaf_listener() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    addr
}

/// A listener that reads and discards everything from each connection.
fn draining_listener(listener: TcpListener) {
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream: TcpStream = stream;
                let mut buf = vec![0u8; 1 << 16];
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
}

/// A listener that reads 512 bytes of each connection every 50 ms (10 KB/s) until the peer ends it.
fn slow_listener() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream: TcpStream = stream;
                let mut buf = [0u8; 512];
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                    sleep(Duration::from_millis(50));
                }
            });
        }
    });
    addr
}

/// Waits for `child` at most [`HANG`] (killing it, this test's own, if it is still running), and
/// returns its output with how long it took.
fn finish_within(mut child: Child, what: &str) -> (Output, Duration) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > HANG {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} still running after {HANG:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), start.elapsed())
}

fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `zcnet bench tcp --connect` and `zcnet bench rx --connect` to `addr`, with `extra` flags.
fn senders(addr: SocketAddr, extra: &[&str]) -> [(&'static str, Vec<String>); 2] {
    let args = |bench: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["bench"]
            .iter()
            .chain(bench)
            .map(|s| s.to_string())
            .collect();
        v.extend(["--connect".into(), addr.to_string()]);
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    [
        (
            "bench tcp",
            args(&["tcp", "--mode", "copy", "--duration", "60", "--json"]),
        ),
        ("bench rx", args(&["rx", "--mib", "100000", "--json"])),
    ]
}

/// The summary a stopped sender prints: the rows of `bench tcp --json`, the line of `bench rx
/// --connect`; the last one's field `field`.
fn summary_field(out: &Output, field: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = json_lines(&stdout);
    let last = lines
        .last()
        .unwrap_or_else(|| panic!("no summary: {stdout}"));
    last[field].clone()
}

#[test]
fn a_peer_that_never_reads_ends_the_send_with_zero_window() {
    let addr = deaf_listener();
    for (what, args) in senders(addr, &["--send-timeout", "1"]) {
        let (out, _) = finish_within(spawn(Command::new(ZCNET).args(&args)), what);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("zero window"), "{what}: {err}");
        let stalled = summary_field(&out, "stalled");
        assert!(
            stalled.as_str().is_some_and(|s| s.contains("zero window")),
            "{what}: {stalled}"
        );
    }
}

#[test]
fn sigint_ends_a_send_blocked_on_a_deaf_peer_with_a_summary() {
    let addr = deaf_listener();
    for (what, args) in senders(addr, &["--send-timeout", "60"]) {
        let child = spawn(Command::new(ZCNET).args(&args));
        // Long enough for the socket buffers to fill and the send to block.
        sleep(Duration::from_millis(1500));
        sigint(&child);
        let (out, took) = finish_within(child, what);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {err}");
        assert_eq!(summary_field(&out, "interrupted"), true, "{what}");
        // A bound for a hang, far above the expected quarter of a second.
        assert!(took < Duration::from_secs(10), "{what} took {took:?}");
    }
}

#[test]
fn a_run_ends_at_its_duration_against_a_slow_reader() {
    // Every ACK of a slow reader is progress: no send timeout fires, and a send (or the flush of
    // zero-copy completions) blocks past the run's duration unless the watch ends it.
    let addr = slow_listener();
    for api in ["sendmsg", "io_uring"] {
        for mode in ["copy", "zerocopy", "auto"] {
            let what = format!("{api} {mode}");
            let child = spawn(Command::new(ZCNET).args([
                "bench",
                "tcp",
                "--connect",
                &addr.to_string(),
                "--api",
                api,
                "--mode",
                mode,
                "--duration",
                "2",
                "--interval",
                "0",
                "--json",
            ]));
            let (out, took) = finish_within(child, &what);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{what}: {err}");
            assert!(took < Duration::from_secs(5), "{what} took {took:?}");
            let rows = json_rows(&String::from_utf8_lossy(&out.stdout));
            assert_eq!(rows.len(), 1, "{what}: {rows:?}");
            let row = &rows[0];
            let slow = row["slow_peer"].as_str();
            assert!(
                slow.is_some_and(|s| s.contains("the peer was slow")),
                "{what}: {row}"
            );
            assert!(err.contains("the peer was slow"), "{what}: {err}");
            let n = |key: &str| row[key].as_u64().unwrap_or_else(|| panic!("{what}: {row}"));
            assert!(n("in_flight_bytes") > 0, "{what}: {row}");
            assert_eq!(
                n("delivered_bytes") + n("in_flight_bytes"),
                n("bytes"),
                "{what}: {row}"
            );
        }
    }
}

/// A veth pair and a listener in its receiving namespace, when `test` may use nft (else it skips).
fn pair_with_listener(test: &str) -> Option<(VethPair, TcpListener)> {
    if !nft_usable(test) {
        return None;
    }
    let pair = VethPair::new(VethConfig::default()).expect("veth harness");
    let ip = pair.b_v4;
    let listener = pair.b.run(|| TcpListener::bind((ip, 0))).unwrap();
    Some((pair, listener))
}

/// An nftables table in `pair`'s receiving namespace that drops the TCP segments `what` matches.
fn drop_tcp(pair: &VethPair, what: &str) {
    let nft = |rule: &str| pair.b.exec("nft", &[rule]).expect("nft");
    nft("add table inet zcnet_hole");
    nft("add chain inet zcnet_hole input { type filter hook input priority 0; }");
    nft(&format!(
        "add rule inet zcnet_hole input {what} counter drop"
    ));
}

#[test]
fn a_drop_rule_mid_stream_ends_the_send_with_no_ack_progress() {
    let Some((pair, listener)) =
        pair_with_listener("a_drop_rule_mid_stream_ends_the_send_with_no_ack_progress")
    else {
        return;
    };
    let addr = listener.local_addr().unwrap();
    draining_listener(listener);
    for (what, args) in senders(addr, &["--send-timeout", "2"]) {
        let child = spawn(pair.a.command(ZCNET).args(&args));
        sleep(Duration::from_millis(700));
        drop_tcp(&pair, "meta l4proto tcp");
        let (out, _) = finish_within(child, what);
        pair.b
            .exec("nft", &["delete table inet zcnet_hole"])
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains("no ACK") && err.contains("black hole"),
            "{what}: {err}"
        );
        assert!(summary_field(&out, "stalled").is_string(), "{what}");
    }
}

#[test]
fn a_black_holed_syn_ends_the_connect_at_its_timeout_or_at_ctrl_c() {
    let Some((pair, listener)) =
        pair_with_listener("a_black_holed_syn_ends_the_connect_at_its_timeout_or_at_ctrl_c")
    else {
        return;
    };
    let addr = listener.local_addr().unwrap();
    drop_tcp(&pair, "tcp flags & (syn | ack) == syn");
    for (what, args) in senders(addr, &["--connect-timeout", "1"]) {
        let (out, _) = finish_within(spawn(pair.a.command(ZCNET).args(&args)), what);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("--connect-timeout 1"), "{what}: {err}");
    }
    for (what, args) in senders(addr, &["--connect-timeout", "60"]) {
        let child = spawn(pair.a.command(ZCNET).args(&args));
        // Long enough for the first SYN and its first retransmission to be dropped.
        sleep(Duration::from_millis(1500));
        sigint(&child);
        let (out, took) = finish_within(child, what);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("interrupted (Ctrl-C)"), "{what}: {err}");
        // A bound for a hang, far below the 60 s connect timeout.
        assert!(took < Duration::from_secs(10), "{what} took {took:?}");
    }
    drop(listener);
}

/// Runs the one-process `zcnet bench ARGS --interval 0`, sends `signal` to its other side (the
/// child process) 300 ms in, and returns the bench's output once it ended, and the child's pid.
fn signal_the_other_side(args: &[&str], signal: &str) -> (Output, u32) {
    let child = spawn(
        Command::new(ZCNET)
            .arg("bench")
            .args(args)
            .args(["--interval", "0"]),
    );
    let other = only_child(child.id());
    sleep(Duration::from_millis(300));
    testnet::run_checked("kill", &[signal, &other.to_string()]).expect("kill");
    (finish_within(child, args[0]).0, other)
}

/// Checks that process `pid` (`what`) is gone, or a zombie.
fn assert_gone(pid: u32, what: &str) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    assert!(
        stat.as_ref().map_or(true, |s| s.contains(") Z")),
        "{what} is left: {stat:?}"
    );
}

#[test]
fn a_stopped_or_killed_sender_process_ends_the_one_process_bench_rx() {
    for (signal, expect) in [("-STOP", "stopped"), ("-KILL", "SIGKILL")] {
        let args = ["rx", "--mode", "copy", "--rounds", "1", "--mib", "1000000"];
        let (out, sender) = signal_the_other_side(&args, signal);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{signal}: {err}");
        assert!(
            err.contains("the sender process") && err.contains(expect),
            "{signal}: {err}"
        );
        assert_gone(sender, "the sender process");
    }
}

/// Runs the one-process `zcnet bench ARGS`, stops its receiver process, and checks that the bench
/// fails with its one row, marked failed for the stopped receiver, which is gone.
fn stop_the_receiver(args: &[&str]) {
    let (out, receiver) = signal_the_other_side(args, "-STOP");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the receiver process was stopped"), "{err}");
    let rows = json_rows(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows.len(), 1, "{rows:?} {err}");
    assert!(
        rows[0]["failed"]
            .as_str()
            .is_some_and(|why| why.contains("receiver process was stopped")),
        "{}",
        rows[0]
    );
    assert_gone(receiver, "the receiver process");
}

#[test]
fn a_stopped_receiver_process_ends_the_one_process_bench_tcp() {
    // A receiver that stops reading makes the sender wait; without a watch on the receiver
    // process that wait lasts the send timeout (10 s), far past the run's own duration.
    stop_the_receiver(&["tcp", "--mode", "copy", "--duration", "3600", "--json"]);
}

#[test]
fn a_stopped_receiver_process_ends_the_one_process_bench_udp_with_its_row() {
    // UDP sends on whatever the receiver does: the run ends at its duration, and the receiver's
    // report never comes.
    stop_the_receiver(&["udp", "--mode", "copy", "--duration", "1", "--json"]);
}

/// Runs the sender `cmd` (`--mode copy,zerocopy --json` with interval lines) until its first interval
/// line of the zerocopy mode, then ends its receiver with `kill` (given the sender's pid), and returns
/// the sender's output: its copy mode finished whole, its zerocopy mode was cut short.
fn kill_receiver_in_second_mode(cmd: &mut Command, kill: impl FnOnce(u32)) -> Output {
    let mut child = spawn(cmd);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).unwrap();
        assert!(
            n > 0,
            "the sender ended before its zerocopy mode ran: {seen}"
        );
        seen.push_str(&line);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["interval"] == true && v["mode"] == "zerocopy" {
            break;
        }
    }
    kill(child.id());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let (mut out, _) = finish_within(child, "the sender");
    out.stdout = [seen.into_bytes(), rest.into_bytes()].concat();
    out
}

/// The sender's output once its receiver died in the zerocopy mode: exit 1, the copy row whole, the
/// zerocopy row marked `failed` with `why`, and the error said once on standard error in the
/// bench's words.
fn check_cut_short(out: &Output, what: &str, why: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}{stdout}");
    let rows = json_rows(&stdout);
    let modes: Vec<_> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["copy", "zerocopy"], "{what}: {stdout}{err}");
    assert!(rows[0]["failed"].is_null(), "{what}: {}", rows[0]);
    assert!(
        rows[0]["bytes"].as_u64().unwrap() > 0,
        "{what}: {}",
        rows[0]
    );
    let failed = rows[1]["failed"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: {}", rows[1]));
    assert!(why.iter().any(|w| failed.contains(w)), "{what}: {failed}");
    let errors: Vec<_> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{what}: {err}");
    assert!(
        errors[0].contains("the sendmsg zerocopy run stopped after") && errors[0].contains(failed),
        "{what}: {err}"
    );
    assert!(!err.contains("flush() or close()"), "{what}: {err}");
}

/// The sender flags of a two-mode run whose receiver the test ends in the second mode.
const TWO_MODES: [&str; 8] = [
    "--mode",
    "copy,zerocopy",
    "--duration",
    "3",
    "--interval",
    "0.1",
    "--json",
    "--no-verify",
];

/// A `bench BENCH --listen` receiver, and the command of a two-mode sender to it.
///
/// The listener's output stays open while its reader (returned too) lives: a listener whose output
/// closed takes no more streams.
fn listener_and_sender(bench: &str) -> (Child, impl std::io::Read, Command) {
    let (listener, addr, output) = start_listener(&mut listen_command(bench));
    let mut sender = Command::new(ZCNET);
    sender
        .args(["bench", bench, "--connect", &addr.to_string()])
        .args(TWO_MODES);
    (listener, output, sender)
}

#[test]
fn a_tcp_or_udp_sender_whose_listener_dies_keeps_the_finished_rows() {
    // TCP: SIGKILL, and Ctrl-C (the listener then ends its streams the same way): a reset. UDP: the
    // datagrams are refused once the listener's socket is gone.
    for (bench, signal, why) in [
        ("tcp", "-KILL", &["the peer reset", "the peer closed"][..]),
        ("tcp", "-INT", &["the peer reset", "the peer closed"]),
        ("udp", "-KILL", &["ECONNREFUSED"]),
    ] {
        let (listener, _output, mut sender) = listener_and_sender(bench);
        let out = kill_receiver_in_second_mode(&mut sender, |_| {
            testnet::run_checked("kill", &[signal, &listener.id().to_string()]).expect("kill");
        });
        let _ = finish_within(listener, "the listener");
        check_cut_short(&out, &format!("{bench} {signal}"), why);
    }
}

#[test]
fn the_one_process_bench_tcp_whose_receiver_is_killed_keeps_the_finished_rows() {
    let mut bench = Command::new(ZCNET);
    bench.args(["bench", "tcp"]).args(TWO_MODES);
    let out = kill_receiver_in_second_mode(&mut bench, |pid| {
        // The receiver process of the zerocopy mode: the copy mode's was waited for.
        let receiver = only_child(pid);
        testnet::run_checked("kill", &["-KILL", &receiver.to_string()]).expect("kill");
    });
    check_cut_short(&out, "one-process", &["the peer reset", "the peer closed"]);
}
