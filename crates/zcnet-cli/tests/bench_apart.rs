//! `zcnet bench tcp|udp|rx --listen` in one process and `--connect` in another, over loopback and
//! across the veth harness's two namespaces, every byte verified; Ctrl-C mid-run; a closed stdout.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    ZCNET, interrupt_and_finish, json_rows, listen_command, next_rows, rx_modes_of_whole,
    start_listener, start_reading, stdout_of, succeeded,
};
use serde_json::Value;
use testnet::{VethConfig, VethPair};

/// A `--listen --once` receiver and the address it announced.
struct Listener {
    child: Child,
    addr: String,
}

fn listen(mut cmd: Command, bench: &str, addr: &str, extra: &[&str]) -> Listener {
    let mut child = cmd
        .args([
            "bench",
            bench,
            "--listen",
            addr,
            "--once",
            "--json",
            "--interval",
            "0",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the receiver");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let announced: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line:?}"));
    Listener {
        child,
        addr: announced["listening"].as_str().unwrap().to_string(),
    }
}

impl Listener {
    /// The receiver's row; it exits 0, or 1 naming the loss when a UDP run it was asked to verify
    /// lost datagrams (a flood sender may outrun it).
    fn report(self) -> Value {
        let out = self.child.wait_with_output().unwrap();
        let rows = json_rows(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(rows.len(), 1, "{rows:?}");
        let row = rows.into_iter().next().unwrap();
        if row["complete"] == false {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{row}\n{stderr}");
            assert!(stderr.contains("datagrams lost"), "{row}\n{stderr}");
        } else {
            succeeded(&out, "the receiver");
        }
        row
    }
}

fn send(mut cmd: Command, bench: &str, addr: &str, extra: &[&str]) -> Vec<Value> {
    cmd.args(["bench", bench, "--connect", addr, "--json"])
        .args(extra);
    json_rows(&stdout_of(&mut cmd, "the sender"))
}

/// One `bench` stream apart: a receiver started by `listener` on `addr` (with `listen_args`, and
/// `--ipv6` when the sender has it), then a sender started by `sender` (with `send_args`). Returns
/// the sender's rows and the receiver's.
fn run_apart(
    (listener, sender): (Command, Command),
    bench: &str,
    addr: &str,
    listen_args: &[&str],
    send_args: &[&str],
) -> (Vec<Value>, Value) {
    let ipv6 = send_args.contains(&"--ipv6").then_some("--ipv6");
    let listen_args: Vec<&str> = listen_args.iter().copied().chain(ipv6).collect();
    let l = listen(listener, bench, addr, &listen_args);
    let sent = send(sender, bench, &l.addr, send_args);
    (sent, l.report())
}

/// [`run_apart`], checked by [`check_pair`]; returns the receiver's row.
fn apart(
    commands: (Command, Command),
    bench: &str,
    addr: &str,
    listen_args: &[&str],
    send_args: &[&str],
) -> Value {
    let (sent, received) = run_apart(commands, bench, addr, listen_args, send_args);
    check_pair(bench, &sent, &received);
    received
}

/// One stream each way the two sides can meet; the receiver verified every byte it got.
fn check_pair(bench: &str, sent: &[Value], received: &Value) {
    assert_eq!(received["verified"], true, "{received}");
    assert_eq!(received["data_errors"], 0, "{received}");
    assert_eq!(received["zcnet_header"], true, "{received}");
    let got = received["bytes"].as_u64().unwrap();
    assert!(got > 0, "{received}");
    if bench == "udp" {
        let sent_bytes = sent[0]["bytes"].as_u64().unwrap();
        assert!(got <= sent_bytes, "more arrived than was sent: {received}");
        // The end datagram carries the sender's count; on a host loaded enough to drop all of its
        // repeats the receiver ends the run after two silent seconds instead.
        match received["sent_bytes"].as_u64() {
            Some(reported) => assert_eq!(reported, sent_bytes),
            None => eprintln!("note: no end datagram arrived: {received}"),
        }
    } else if bench == "tcp" {
        assert_eq!(
            got,
            sent[0]["bytes"].as_u64().unwrap(),
            "every byte arrived"
        );
    }
}

fn here() -> Command {
    Command::new(ZCNET)
}

#[test]
fn tcp_udp_and_rx_apart_over_loopback() {
    let streams = [
        ("tcp", "--mode zerocopy --duration 0.3"),
        ("udp", "--mode copy --duration 0.2"),
        ("udp", "--mode zerocopy --duration 0.2 --gso 1200 --ipv6"),
    ];
    for (bench, args) in streams {
        let args: Vec<&str> = args.split_whitespace().collect();
        let addr = if args.contains(&"--ipv6") {
            "[::1]:0"
        } else {
            "127.0.0.1:0"
        };
        apart((here(), here()), bench, addr, &[], &args);
    }
    let received = apart(
        (here(), here()),
        "rx",
        "127.0.0.1:0",
        &["--mode", "zerocopy"],
        &["--mib", "8", "--rounds", "1", "--mode", "zerocopy"],
    );
    assert_eq!(received["bytes"], 8 << 20);
    // Under a locked-memory limit the sender keeps only as many sends in flight as it can pin.
    let mapped = received["mapped_pct"].as_f64().unwrap();
    assert!(mapped > 90.0, "{received}");
}

/// `bench rx --connect` sends what the one-process run receives, a stream per `--mode` in each of
/// `--rounds` rounds, and a `--listen` receiver with the same `--mode` takes each in its mode's turn.
#[test]
fn the_rx_sender_sends_a_stream_per_mode_in_each_round() {
    let modes = ["--mode", "copy,zerocopy"];
    let (child, addr, mut stdout) = start_listener(listen_command("rx").args(modes));
    let extra = [&["--mib", "1", "--rounds", "2"][..], &modes].concat();
    let sent = send(here(), "rx", &addr.to_string(), &extra);
    // A row per stream sent (the listener goes on until interrupted, so no more are waited for),
    // and the listener ended before any assertion can leave it running.
    let received = next_rows(&mut stdout, sent.len());
    interrupt_and_finish(child, stdout);
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(
        rx_modes_of_whole(&received, 1 << 20),
        ["copy", "zerocopy", "copy", "zerocopy"],
        "{received:?}"
    );
}

/// `bench tcp --listen` reads with recv whatever the sender's mode, and its row says so without
/// sending the user to a `--mode` the receiver refuses.
#[test]
fn the_tcp_receiver_says_why_it_copies_without_naming_a_flag_it_refuses() {
    let args = ["--mode", "zerocopy", "--duration", "0.2"];
    let received = apart((here(), here()), "tcp", "127.0.0.1:0", &[], &args);
    let fallback = received["fallback"].as_str().unwrap_or_default();
    assert!(fallback.contains("reads with recv"), "{received}");
    assert!(!fallback.contains("--mode"), "{received}");
}

/// `bench rx --connect` without `--json` prints a table of what it sent, as the other benches do, and
/// with it a JSON line.
#[test]
fn the_rx_sender_prints_a_table_in_text() {
    for json in [false, true] {
        let l = listen(here(), "rx", "127.0.0.1:0", &[]);
        let mut send = here();
        send.args([
            "bench",
            "rx",
            "--connect",
            &l.addr,
            "--mib",
            "1",
            "--rounds",
            "1",
        ]);
        send.args(["--mode", "copy"]);
        if json {
            send.arg("--json");
        }
        let out = stdout_of(&mut send, "the sender");
        l.report();
        let mut lines = out.lines();
        let first = lines.next().unwrap_or_default();
        if json {
            let row: Value = serde_json::from_str(first).unwrap_or_else(|_| panic!("{out}"));
            assert_eq!(row["bytes"], 1 << 20, "{out}");
        } else {
            assert!(
                first.starts_with("sender") && first.contains("zc calls"),
                "{out}"
            );
            let row = lines.next().unwrap_or_default();
            assert!(row.contains(&(1u64 << 20).to_string()), "{out}");
        }
    }
}

#[test]
fn tcp_udp_and_rx_apart_across_namespaces() {
    let test = "tcp_udp_and_rx_apart_across_namespaces";
    if !testnet::privileged(test) {
        return;
    }
    let pair = VethPair::new(VethConfig {
        mtu: 4168,
        ..VethConfig::default()
    })
    .expect("veth harness");
    let b4 = format!("{}:0", pair.b_v4);
    let b6 = format!("[{}]:0", pair.b_v6);
    let b_to_a = || (pair.b.command(ZCNET), pair.a.command(ZCNET));
    let streams = [
        ("tcp", "--mode zerocopy --duration 0.3"),
        ("tcp", "--mode auto --duration 0.3 --ipv6"),
        ("udp", "--mode zerocopy --duration 0.2 --gso 1400 --ipv6"),
        ("udp", "--mode copy --duration 0.2"),
    ];
    for (bench, args) in streams {
        let args: Vec<&str> = args.split_whitespace().collect();
        let addr = if args.contains(&"--ipv6") { &b6 } else { &b4 };
        apart(b_to_a(), bench, addr, &[], &args);
    }
    let received = apart(
        b_to_a(),
        "rx",
        &b6,
        &["--mode", "zerocopy"],
        &[
            "--mib", "8", "--ipv6", "--rounds", "1", "--mode", "zerocopy",
        ],
    );
    assert_eq!(received["bytes"], 8 << 20);
    assert!(received["mapped_bytes"].as_u64().unwrap() > 0, "{received}");
}

/// Checks a UDP run's accounting: the end datagram's totals are the sender's; every byte that did
/// not arrive belongs to whole sends of `size` bytes (`segments` datagrams each) that the kernel
/// dropped — counted by the receiving socket on loopback, where each send is one queued datagram;
/// what arrived was verified when asked.
fn check_udp_counts(
    sent: &Value,
    received: &Value,
    size: u64,
    segments: u64,
    verify: bool,
    loopback: bool,
) {
    let num = |v: &Value, key: &str| v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"));
    let sent_bytes = num(sent, "bytes");
    assert_eq!(num(received, "sent_bytes"), sent_bytes, "{received}");
    assert_eq!(
        num(received, "sent_datagrams"),
        sent_bytes / size * segments
    );
    assert_eq!(sent_bytes % size, 0, "{sent}");
    let got = num(received, "bytes");
    assert!(got > 0 && got <= sent_bytes, "{received}");
    let lost = sent_bytes - got;
    assert_eq!(lost % size, 0, "only whole sends go missing: {received}");
    let lost_sends = lost / size;
    assert_eq!(
        num(received, "datagrams"),
        (sent_bytes / size - lost_sends) * segments,
        "{received}"
    );
    // Loss is counted in datagrams, each GSO segment one.
    assert_eq!(num(received, "lost"), lost_sends * segments, "{received}");
    assert_eq!(
        received["complete"],
        !verify || lost_sends == 0,
        "{received}"
    );
    if loopback {
        // Besides data, only repeats of the header and end datagrams (3 and 6) may be dropped.
        let drops = num(received, "socket_drops");
        assert!(
            (lost_sends..=lost_sends + 9).contains(&drops),
            "{lost_sends} sends missing, {drops} dropped: {received}"
        );
    }
    assert_eq!(received["verified"], verify, "{received}");
    if verify {
        assert_eq!(received["data_errors"], 0, "{received}");
    }
}

/// One `bench udp` run apart (receiver started by `listener`, sender by `sender`) with `args`.
fn udp_run(listener: Command, sender: Command, addr: &str, args: &[&str], loopback: bool) {
    let (sent, received) = run_apart((listener, sender), "udp", addr, &[], args);
    let value = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .map(|i| args[i + 1].parse::<u64>().unwrap())
    };
    let gso = value("--gso");
    // The default sizes: 1400-byte datagrams, or 40 segments per GSO send.
    let size = value("--size").unwrap_or(gso.map_or(1400, |seg| seg * 40));
    let segments = gso.map_or(1, |seg| size.div_ceil(seg));
    let verify = !args.contains(&"--no-verify");
    eprintln!("udp {args:?}: {received}");
    check_udp_counts(&sent[0], &received, size, segments, verify, loopback);
}

#[test]
fn udp_apart_counts_every_byte_with_and_without_verification() {
    for (addr, ip) in [("127.0.0.1:0", None), ("[::1]:0", Some("--ipv6"))] {
        for gso in [None, Some("1400")] {
            for (mode, verify) in [("copy", None), ("zerocopy", Some("--no-verify"))] {
                let mut args = vec!["--mode", mode, "--duration", "0.3"];
                args.extend(ip.into_iter().chain(verify));
                if let Some(seg) = gso {
                    args.extend(["--gso", seg]);
                }
                udp_run(here(), here(), addr, &args, true);
            }
        }
        // A send that is not a whole number of segments ends with a shorter datagram.
        let mut args = vec!["--mode", "zerocopy", "--duration", "0.3"];
        args.extend(ip.into_iter().chain(["--gso", "1400", "--size", "15000"]));
        udp_run(here(), here(), addr, &args, true);
    }
}

#[test]
fn udp_apart_across_namespaces_counts_every_byte() {
    let test = "udp_apart_across_namespaces_counts_every_byte";
    if !testnet::privileged(test) {
        return;
    }
    let pair = VethPair::new(VethConfig::default()).expect("veth harness");
    // Without neighbour discovery, whose queue would drop the first datagrams (the header) while
    // a GSO flood waits for the answer.
    pair.pin_b_neighbours().expect("static neighbours");
    let b4 = format!("{}:0", pair.b_v4);
    let b6 = format!("[{}]:0", pair.b_v6);
    let a = || pair.a.command(ZCNET);
    let b = || pair.b.command(ZCNET);
    // GRO on the veth coalesces plain datagrams; unverified, only their first bytes are read.
    let args = ["--mode", "copy", "--duration", "0.3", "--no-verify"];
    udp_run(b(), a(), &b4, &args, false);
    let args = [
        "--mode",
        "zerocopy",
        "--duration",
        "0.3",
        "--ipv6",
        "--gso",
        "1200",
    ];
    udp_run(b(), a(), &b6, &args, false);
}

/// Processes (other than this test) whose environment carries `tag`.
fn processes_tagged(tag: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|kv| kv == tag.as_bytes()) {
            found.push(name);
        }
    }
    found
}

/// Starts a bench, waits for its first interval line, sends SIGINT, and returns its rows and pid.
fn interrupt(args: &[&str], tag: &str) -> (Vec<Value>, u32) {
    let (key, value) = tag.split_once('=').unwrap();
    let (child, first, stdout) = start_reading(
        Command::new(ZCNET)
            .args(args)
            .args(["--json", "--interval", "0.2"])
            .env(key, value),
    );
    assert!(first.contains("\"interval\":true"), "{first:?}");
    let pid = child.id();
    let rest = interrupt_and_finish(child, stdout);
    (json_rows(&rest), pid)
}

fn check_interrupted(rows: &[Value], tag: &str) {
    assert_eq!(rows.len(), 1, "only the mode that ran: {rows:?}");
    assert_eq!(rows[0]["interrupted"], true, "{}", rows[0]);
    assert!(rows[0]["bytes"].as_u64().unwrap() > 0);
    let deadline = Instant::now() + Duration::from_secs(2);
    while !processes_tagged(tag).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(processes_tagged(tag), Vec::<String>::new(), "left running");
}

#[test]
fn sigint_mid_run_prints_the_summary_and_leaves_nothing() {
    let tag = format!("ZCNET_TEST_RUN=sigint-{}", std::process::id());
    let args = [
        "bench",
        "tcp",
        "--duration",
        "30",
        "--mode",
        "copy,zerocopy",
    ];
    let (rows, _) = interrupt(&args, &tag);
    check_interrupted(&rows, &tag);
    assert_eq!(
        rows[0]["received_bytes"], rows[0]["bytes"],
        "every byte sent arrived"
    );

    let args = ["bench", "rx", "--mib", "100000", "--rounds", "1"];
    let (rows, _) = interrupt(&args, &tag);
    check_interrupted(&rows, &tag);

    let test = "sigint_mid_run_prints_the_summary_and_leaves_nothing (veth, XDP)";
    if !testnet::privileged(test) {
        return;
    }
    for args in [
        &["bench", "udp", "--sink", "xdp-drop", "--duration", "30"][..],
        &["bench", "tcp", "--netns", "--duration", "30"][..],
    ] {
        let (rows, pid) = interrupt(args, &tag);
        check_interrupted(&rows, &tag);
        // The bench's namespaces (and with them its veth pair and XDP program) are gone.
        let left = namespaces_of(pid);
        assert!(left.is_empty(), "{args:?} left namespaces {left:?}");
    }
}

/// The harness's namespaces that process `pid` made (testnet names them `zc<pid>-…`).
fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("zc{pid}-");
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn a_closed_stdout_is_no_panic() {
    let mut child = Command::new(ZCNET)
        .args([
            "bench",
            "tcp",
            "--duration",
            "1",
            "--interval",
            "0.1",
            "--mode",
            "copy",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty());
    drop(child.stdout.take()); // as `| head -1` does
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

/// Waits for `child` (this test's) to exit, at most `limit`; kills it if it did not. Its status
/// and standard error.
fn exit_within(mut child: Child, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    (status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A receiver whose output's reader is gone (`zcnet bench … --listen --json | head -c5`) ends,
/// quietly and with exit status 0, at the first row it cannot write, instead of receiving streams
/// for ever with nobody to read them. (It is given a minute; it ends within a second.)
#[test]
fn a_listener_ends_at_the_first_row_its_closed_output_cannot_take() {
    for (bench, send_args) in [
        ("tcp", "--mode copy --duration 0.2 --interval 0"),
        // Unverified: datagrams a normal user's small socket buffer drops would fail the run,
        // which is not what this test is about.
        ("udp", "--mode copy --duration 0.2 --interval 0 --no-verify"),
        ("rx", "--mib 1 --rounds 1 --mode copy"),
    ] {
        let (mut child, line, stdout) = start_reading(
            here()
                .args(["bench", bench, "--listen", "127.0.0.1:0", "--json"])
                .args(["--interval", "0"]),
        );
        let announced: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{line:?}"));
        let addr = announced["listening"].as_str().unwrap().to_string();
        drop(stdout); // as `| head -c5` does, once it has its bytes
        drop(child.stdout.take());
        let args: Vec<&str> = send_args.split_whitespace().collect();
        send(here(), bench, &addr, &args);
        let (status, stderr) = exit_within(child, Duration::from_secs(60));
        let status = status.unwrap_or_else(|| panic!("{bench} --listen went on: {stderr}"));
        assert!(status.success(), "{bench} --listen: {status}: {stderr}");
        assert!(stderr.is_empty(), "{bench} --listen: {stderr}");
    }
}

/// A bench whose output's reader is gone stops at the first write that finds it so — an interval
/// line — and runs no further mode: an hour-long run of three modes ends at once, quietly and with
/// exit status 0, its receiver process gone with it. (It is given a minute.)
#[test]
fn a_bench_ends_at_the_first_write_its_closed_output_cannot_take() {
    let (mut child, first, stdout) = start_reading(here().args([
        "bench",
        "tcp",
        "--mode",
        "copy,zerocopy,auto",
        "--duration",
        "3600",
        "--interval",
        "0.1",
        "--json",
    ]));
    assert!(first.contains("\"interval\":true"), "{first:?}");
    let receiver = common::only_child(child.id());
    drop(stdout);
    drop(child.stdout.take());
    let (status, stderr) = exit_within(child, Duration::from_secs(60));
    let status = status.unwrap_or_else(|| panic!("the bench went on: {stderr}"));
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let stat = std::fs::read_to_string(format!("/proc/{receiver}/stat"));
    assert!(
        stat.as_ref().map_or(true, |s| s.contains(") Z")),
        "the receiver process is left: {stat:?}"
    );
}
