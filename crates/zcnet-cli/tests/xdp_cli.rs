//! `zcnet xdp rxdrop` stops cleanly on SIGINT (summary printed, program detached) and leaves no XDP
//! program behind when killed with SIGKILL either: the kernel closes the BPF link descriptor with the
//! process. Runs the `zcnet` binary inside a testnet namespace on its veth end. Also: `zcnet bench xdp
//! --json` prints one row per path, interval lines as it runs, and stops cleanly on SIGINT.

mod common;

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{ZCNET, interrupt_and_finish, json_lines, json_rows, sigint, stdout_of, succeeded};
use serde_json::Value;
use testnet::VethPair;

fn attached(pair: &VethPair) -> bool {
    pair.a
        .ip(&["-d", "link", "show", &pair.a_if])
        .expect("ip -d link")
        .contains("prog/xdp")
}

/// Starts `zcnet xdp rxdrop` (with `extra` arguments) on `a_if` and waits until its program shows on
/// the interface.
fn start_rxdrop(pair: &VethPair, extra: &[&str]) -> Child {
    let mut child = pair
        .a
        .command(ZCNET)
        .args([
            "xdp",
            "rxdrop",
            "--iface",
            &pair.a_if,
            "--duration",
            "60",
            "--poll",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zcnet");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !attached(pair) {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("zcnet xdp rxdrop exited early: {status}: {err}");
        }
        assert!(Instant::now() < deadline, "program never showed up");
        thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Interrupts `child` and waits for it.
fn interrupt(child: Child) -> Output {
    sigint(&child);
    child.wait_with_output().expect("wait")
}

/// Runs `zcnet xdp rxdrop --port PORT --json` on `a_if` while `traffic` runs, then interrupts it;
/// it must exit 0. Returns its stdout.
fn rxdrop_during(pair: &VethPair, port: u16, traffic: impl FnOnce()) -> String {
    let child = start_rxdrop(pair, &["--port", &port.to_string(), "--json"]);
    traffic();
    thread::sleep(Duration::from_millis(300));
    let out = interrupt(child);
    succeeded(&out, "zcnet xdp rxdrop");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `zcnet bench xdp` with `args`; it must exit 0 (else the panic names `what`). Returns its
/// stdout.
fn bench_xdp(args: &[&str], what: &str) -> String {
    stdout_of(Command::new(ZCNET).args(["bench", "xdp"]).args(args), what)
}

#[test]
fn killed_rxdrop_leaves_no_program() {
    if !testnet::privileged("killed_rxdrop_leaves_no_program") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");

    let out = interrupt(start_rxdrop(&pair, &[]));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "SIGINT ends the run cleanly: {}",
        out.status
    );
    assert!(
        summary.contains("rxdrop"),
        "summary printed on SIGINT: {summary}"
    );
    assert!(!attached(&pair), "program left after SIGINT");

    let mut child = start_rxdrop(&pair, &[]);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert!(!attached(&pair), "program left after SIGKILL");
}

/// Both feeds (XDP frames redirected from a second pair, and skbs), each path's row with every field.
#[test]
fn bench_xdp_json_has_a_row_per_path_with_every_field() {
    if !testnet::privileged("bench_xdp_json_has_a_row_per_path_with_every_field") {
        return;
    }
    for feed in ["xdp", "skb"] {
        check_rows_of_feed(feed);
    }
}

fn check_rows_of_feed(feed: &str) {
    let stdout = bench_xdp(&["--json", "--duration", "0.3", "--feed", feed], feed);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for (line, path) in lines.iter().zip(["af_xdp", "tpacket_v3", "recvmmsg"]) {
        assert!(line.contains(&format!("\"path\":\"{path}\"")), "{line}");
        assert!(line.contains(&format!("\"feed\":\"{feed}\"")), "{line}");
        let row: Value = serde_json::from_str(line).expect("JSON row");
        assert!(row["packets"].as_u64().is_some_and(|p| p > 0), "{line}");
        for field in [
            "bench",
            "path",
            "mode",
            "packets",
            "seconds",
            "mpps",
            "cpu_user_s",
            "cpu_sys_s",
            "sys_cpu_ns_per_packet",
            "app_cpu_ns_per_packet",
            "app_threads_ns_per_packet",
            "app_cpu",
            "generator_cpu",
            "generator_mpps",
            "rx_dropped",
            "veth_dropped",
            "invalid_descs",
            "interrupted",
        ] {
            assert!(
                line.contains(&format!("\"{field}\":")),
                "{field} missing: {line}"
            );
        }
        let reason = row["kernel_copied_reason"].as_str().unwrap_or("");
        if path == "recvmmsg" {
            // Each datagram's payload is copied once into the receiver's buffers, and the socket
            // layer's tracepoint counts it: the figure is 1, whatever the feed (the bench's own
            // interface reads are a few hundred bytes against megabytes).
            let per_byte = row["kernel_copied_per_byte"].as_f64();
            assert!(
                per_byte.is_some_and(|b| (0.99..1.01).contains(&b)),
                "{line}"
            );
        } else {
            // No tracepoint shows these paths' copies: no figure, and the reason (never a 0).
            assert!(
                row["kernel_copied_per_byte"].is_null() && reason.starts_with("not counted: "),
                "{line}"
            );
        }
    }
}

/// On an interface with an address, rxdrop takes only UDP to its port: a ping through the interface
/// works during the run, and the datagrams to the port are counted.
#[test]
fn rxdrop_on_an_interface_with_an_address_passes_other_traffic() {
    if !testnet::privileged("rxdrop_on_an_interface_with_an_address_passes_other_traffic") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let a = pair.a_v4.to_string();
    const DATAGRAMS: usize = 200;
    let mut ping = None;
    let stdout = rxdrop_during(&pair, 7009, || {
        ping = Some(
            pair.b
                .exec("ping", &["-c", "3", "-i", "0.2", "-W", "2", &a]),
        );
        pair.b.run(|| {
            let sock = UdpSocket::bind((pair.b_v4, 0)).expect("bind sender");
            for i in 0..DATAGRAMS {
                sock.send_to(&[i as u8; 32], (pair.a_v4, 7009))
                    .expect("send");
            }
        });
    });
    let ping = ping
        .expect("ping ran")
        .expect("ping through the interface during rxdrop");
    assert!(ping.contains("3 received"), "{ping}");
    let last = stdout.lines().last().expect("a summary line");
    let row: serde_json::Value = serde_json::from_str(last).expect("a JSON summary");
    assert_eq!(row["match"], "udp port 7009", "{row}");
    assert_eq!(
        row["packets"], DATAGRAMS as u64,
        "every datagram to the port, nothing else: {row}"
    );
}

/// `--match all` and txpush on an interface with an address are refused (exit 2, saying why) unless
/// `--force` is given; nothing is attached.
#[test]
fn taking_a_whole_queue_of_a_used_interface_needs_force() {
    if !testnet::privileged("taking_a_whole_queue_of_a_used_interface_needs_force") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let zcnet = |args: &[&str]| {
        pair.a
            .command(ZCNET)
            .args(args)
            .args(["--iface", &pair.a_if, "--duration", "0.3"])
            .output()
            .expect("run zcnet")
    };
    for args in [
        &["xdp", "rxdrop", "--match", "all"][..],
        &["xdp", "txpush"][..],
    ] {
        let out = zcnet(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--force") && stderr.contains(&pair.a_v4.to_string()),
            "{args:?} says why and how: {stderr}"
        );
        assert!(!attached(&pair));
        let forced = zcnet(&[args, &["--force"][..]].concat());
        assert!(
            forced.status.success(),
            "{args:?} --force: {}",
            String::from_utf8_lossy(&forced.stderr)
        );
    }
}

/// Every application of `zcnet bench xdp`, five runs in a row: none may fail (a kick refused with
/// ENOBUFS, a full device queue on the generator, a busy queue right after the previous run).
#[test]
fn bench_xdp_every_app_passes_five_runs_in_a_row() {
    if !testnet::privileged("bench_xdp_every_app_passes_five_runs_in_a_row") {
        return;
    }
    for run in 1..=5 {
        let args = [
            "--app",
            "rxdrop,txpush,l2fwd",
            "--duration",
            "0.3",
            "--json",
        ];
        let stdout = bench_xdp(&args, &format!("run {run}"));
        assert_eq!(stdout.lines().count(), 8, "run {run}: {stdout}");
        for line in stdout.lines() {
            let row: serde_json::Value = serde_json::from_str(line).expect("JSON row");
            assert!(
                row["packets"].as_u64().is_some_and(|p| p > 0),
                "run {run}: {line}"
            );
        }
    }
}

/// `zcnet xdp rxdrop --json` prints a line of statistics every second, then its summary: the
/// per-second packet counts add up to the summary's, and every counter is there.
#[test]
fn rxdrop_prints_statistics_every_second() {
    if !testnet::privileged("rxdrop_prints_statistics_every_second") {
        return;
    }
    let pair = VethPair::one_queue().expect("veth pair");
    let stdout = rxdrop_during(&pair, 7010, || {
        pair.b.run(|| {
            let sock = UdpSocket::bind((pair.b_v4, 0)).expect("bind sender");
            // About 2.5 s of traffic: 50 datagrams every 50 ms.
            for i in 0..50u32 {
                for _ in 0..50 {
                    sock.send_to(&i.to_le_bytes(), (pair.a_v4, 7010))
                        .expect("send");
                }
                thread::sleep(Duration::from_millis(50));
            }
        })
    });
    let rows = json_lines(&stdout);
    let (summary, seconds) = rows.split_last().expect("a summary");
    assert!(seconds.len() >= 2, "a line per second: {stdout}");
    let mut counted = 0;
    for line in seconds {
        assert_eq!(line["interval"], true, "{line}");
        for field in [
            "rx_pps",
            "tx_pps",
            "rx_dropped",
            "invalid_descs",
            "fill_ring_empty",
            "tx_ring_empty",
        ] {
            assert!(line[field].is_number(), "{field} missing: {line}");
        }
        counted += line["rx_packets"].as_u64().expect("rx_packets");
    }
    let total = summary["packets"].as_u64().expect("packets");
    assert_eq!(total, 2500, "{summary}");
    assert!(counted <= total && counted > 0, "{counted} of {total}");
}

/// `zcnet bench xdp` for 30 s with `extra`, interval objects every 0.2 s: the child, its pid and its
/// standard output.
fn bench_xdp_json(
    extra: &[&str],
) -> (
    std::process::Child,
    u32,
    BufReader<std::process::ChildStdout>,
) {
    let mut child = Command::new(ZCNET)
        .args([
            "bench",
            "xdp",
            "--duration",
            "30",
            "--json",
            "--interval",
            "0.2",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zcnet bench xdp");
    let pid = child.id();
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    (child, pid, stdout)
}

/// `zcnet bench xdp --json` prints interval objects while a path runs (the frames of each interval,
/// adding up to no more than the path's row), and Ctrl-C mid-run stops it: exit 0, the row of the path that ran
/// marked interrupted, no row of a path that did not, and nothing left behind — the process is gone,
/// and with its namespaces the veth pairs and the XDP programs attached to them.
#[test]
fn bench_xdp_prints_intervals_and_stops_cleanly_on_sigint() {
    if !testnet::privileged("bench_xdp_prints_intervals_and_stops_cleanly_on_sigint") {
        return;
    }
    let (child, pid, mut stdout) = bench_xdp_json(&["--app", "rxdrop,txpush"]);
    let mut intervals = Vec::new();
    while intervals.len() < 3 {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read a line");
        assert!(!line.is_empty(), "bench ended before three intervals");
        let row: Value = serde_json::from_str(&line).expect("JSON line");
        assert_eq!(row["interval"], true, "{row}");
        assert_eq!(row["path"], "af_xdp", "{row}");
        intervals.push(row["packets"].as_u64().expect("packets"));
    }
    let rest = interrupt_and_finish(child, stdout);
    let rows = json_rows(&rest);
    assert_eq!(rows.len(), 1, "only the path that ran: {rest}");
    let row = &rows[0];
    assert_eq!(row["path"], "af_xdp", "{row}");
    assert_eq!(row["interrupted"], true, "{row}");
    let total = row["packets"].as_u64().expect("packets");
    let counted: u64 = intervals.iter().sum();
    assert!(counted > 0 && counted <= total, "{counted} of {total}");
    let prefix = format!("zc{pid}-");
    let namespaces = testnet::run_checked("ip", &["netns", "list"]).expect("ip netns list");
    assert!(
        !namespaces.lines().any(|l| l.starts_with(&prefix)),
        "namespaces left: {namespaces}"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process left"
    );
}

/// A second Ctrl-C right after the first ends `bench xdp` at once and still removes its namespaces.
#[test]
fn bench_xdp_second_sigint_leaves_no_namespace() {
    if !testnet::privileged("bench_xdp_second_sigint_leaves_no_namespace") {
        return;
    }
    let (mut child, pid, mut stdout) =
        bench_xdp_json(&["--app", "rxdrop", "--coalesce-us", "1000000"]);
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read a line");
    assert!(!line.is_empty(), "bench ended before its first interval");
    sigint(&child);
    // Apart, so that the two are not merged into one pending signal.
    std::thread::sleep(std::time::Duration::from_millis(100));
    sigint(&child);
    child.wait().expect("wait");
    let prefix = format!("zc{pid}-");
    let namespaces = testnet::run_checked("ip", &["netns", "list"]).expect("ip netns list");
    assert!(
        !namespaces.lines().any(|l| l.starts_with(&prefix)),
        "namespaces left: {namespaces}"
    );
}
