//! `zcnet iperf3` against Debian's stock iperf3, across the veth harness's two namespaces: zcnet's
//! server with iperf3's client and iperf3's server with zcnet's client, each with TCP, UDP, `-R`,
//! `--bidir` and `-P 4`, both sides' `--json` compared stream by stream; and zcnet's server going on
//! serving after a client killed mid-test, a stream with a bad cookie, malformed parameter blocks and
//! a client turned away as busy.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{ZCNET, succeeded};
use serde_json::Value;
use testnet::{Netns, VethConfig, VethPair};

/// The port both servers listen on (each test has namespaces of its own).
const PORT: u16 = 5201;
const PORT_ARG: &str = "5201";

/// Whether Debian's iperf3 is here to test against; [`testnet::skip`]s `test` when it is not.
fn iperf3_present(test: &str) -> bool {
    let found = Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        testnet::skip(
            test,
            "iperf3 is not installed (scripts/install-deps installs it)",
        );
    }
    found
}

/// The harness, when this process may build it and iperf3 is installed.
fn harness(test: &str) -> Option<VethPair> {
    if !testnet::privileged(test) || !iperf3_present(test) {
        return None;
    }
    Some(VethPair::new(VethConfig::default()).expect("veth harness"))
}

/// Waits until something in `ns` listens on TCP [`PORT`] (probing with a connection would start a
/// test on iperf3's server).
fn wait_listening(ns: &Netns, server: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = ns
            .exec("ss", &["-Hltn", &format!("sport = :{PORT}")])
            .unwrap_or_default();
        if !out.trim().is_empty() {
            return;
        }
        if let Ok(Some(status)) = server.try_wait() {
            panic!("the server exited before it listened: {status}");
        }
        assert!(Instant::now() < deadline, "nothing listens on port {PORT}");
        sleep(Duration::from_millis(20));
    }
}

/// The test cases: iperf3's flags for each, on both sides.
const CASES: &[(&str, &[&str])] = &[
    ("tcp", &["-t", "1"]),
    ("udp", &["-u", "-b", "20M", "-t", "1"]),
    ("tcp -R", &["-R", "-t", "1"]),
    ("tcp --bidir", &["--bidir", "-t", "1"]),
    ("tcp -P 4", &["-P", "4", "-t", "1"]),
    (
        "udp -R -P 4",
        &["-u", "-b", "10M", "-R", "-P", "4", "-t", "1"],
    ),
];

fn parse(out: &Output, what: &str) -> Value {
    succeeded(out, what);
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"));
    assert!(
        v.get("error").is_none(),
        "{what} reports an error: {}",
        v["error"]
    );
    v
}

/// Checks that the two reports of one test agree stream by stream: every byte count a side
/// measured itself (iperf3's server leaves the other side's at 0) is the same in the other's report,
/// and a TCP stream zcnet received holds every byte its sender sent.
fn agree(case: &str, iperf3: &Value, zcnet: &Value) {
    let theirs = iperf3["end"]["streams"]
        .as_array()
        .expect("iperf3's streams");
    let ours = zcnet["end"]["streams"].as_array().expect("zcnet's streams");
    assert_eq!(theirs.len(), ours.len(), "{case}: streams");
    assert!(!ours.is_empty(), "{case}: no streams");
    let udp = case.starts_with("udp");
    let num = |v: &Value, what: &str| {
        v.as_u64()
            .unwrap_or_else(|| panic!("{case}: {what} is not a count: {v}"))
    };
    for (i, (t, o)) in theirs.iter().zip(ours).enumerate() {
        let role = if udp { "udp" } else { "sender" };
        // Whether iperf3's side sends this stream.
        let iperf3_sends = t[role]["sender"] == true;
        assert_eq!(
            o[role]["sender"] == true,
            !iperf3_sends,
            "{case} stream {i}: one side sends it: {t} {o}"
        );
        if udp {
            let (tu, ou) = (&t["udp"], &o["udp"]);
            if num(&tu["bytes"], "udp bytes") > 0 {
                assert_eq!(tu["bytes"], ou["bytes"], "{case} stream {i}: udp bytes");
                assert_eq!(
                    tu["packets"], ou["packets"],
                    "{case} stream {i}: udp packets"
                );
            }
            continue;
        }
        let bytes = |v: &Value, side: &str| num(&v[side]["bytes"], side);
        let (iperf3_side, zcnet_side) = if iperf3_sends {
            ("sender", "receiver")
        } else {
            ("receiver", "sender")
        };
        assert!(
            bytes(t, iperf3_side) > 0,
            "{case} stream {i}: iperf3 moved nothing: {t}"
        );
        assert_eq!(
            bytes(t, iperf3_side),
            bytes(o, iperf3_side),
            "{case} stream {i}: iperf3's {iperf3_side} bytes"
        );
        if bytes(t, zcnet_side) > 0 {
            assert_eq!(
                bytes(t, zcnet_side),
                bytes(o, zcnet_side),
                "{case} stream {i}: zcnet's {zcnet_side} bytes"
            );
        }
        if iperf3_sends {
            // zcnet received it: to the last byte iperf3 sent.
            assert_eq!(
                bytes(o, "receiver"),
                bytes(o, "sender"),
                "{case} stream {i}: zcnet lost bytes"
            );
        }
    }
    for sum in ["sum_sent", "sum_received"] {
        let t = num(&iperf3["end"][sum]["bytes"], sum);
        if t > 0 {
            assert_eq!(t, num(&zcnet["end"][sum]["bytes"], sum), "{case}: {sum}");
        }
    }
    let zc = &zcnet["end"]["zcnet"];
    assert!(
        zc["cpu_us_per_mb"].as_f64().is_some_and(|c| c > 0.0),
        "{case}: {zc}"
    );
    for s in zc["streams"].as_array().unwrap() {
        let moved = if s["sender"] == true {
            num(&s["zc_calls"], "zc_calls") + num(&s["copy_calls"], "copy_calls")
        } else {
            num(&s["copied_bytes"], "copied_bytes") + s["mapped_bytes"].as_u64().unwrap_or(0)
        };
        assert!(moved > 0, "{case}: a zcnet stream moved nothing: {s}");
    }
}

#[test]
fn zcnet_server_serves_stock_iperf3_clients() {
    let test = "zcnet_server_serves_stock_iperf3_clients";
    let Some(pair) = harness(test) else { return };
    let server_ip = pair.b_v4.to_string();
    for (case, args) in CASES {
        let mut server = pair
            .b
            .command(ZCNET)
            .args(["iperf3", "-s", "-1", "--json", "-i", "0", "-p", PORT_ARG])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start zcnet iperf3 -s");
        wait_listening(&pair.b, &mut server);
        let client = pair
            .a
            .command("iperf3")
            .args(["-c", &server_ip, "-p", PORT_ARG, "--json"])
            .args(*args)
            .output()
            .expect("run iperf3 -c");
        let iperf3 = parse(&client, &format!("iperf3 -c ({case})"));
        let zcnet = parse(
            &server.wait_with_output().unwrap(),
            &format!("zcnet iperf3 -s ({case})"),
        );
        agree(case, &iperf3, &zcnet);
    }
}

#[test]
fn stock_iperf3_server_serves_the_zcnet_client() {
    let test = "stock_iperf3_server_serves_the_zcnet_client";
    let Some(pair) = harness(test) else { return };
    let server_ip = pair.b_v4.to_string();
    for (case, args) in CASES {
        let mut server = pair
            .b
            .command("iperf3")
            .args(["-s", "-1", "--json", "-p", PORT_ARG])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start iperf3 -s");
        wait_listening(&pair.b, &mut server);
        let client = pair
            .a
            .command(ZCNET)
            .args([
                "iperf3", "-c", &server_ip, "-p", PORT_ARG, "--json", "-i", "0",
            ])
            .args(*args)
            .output()
            .expect("run zcnet iperf3 -c");
        let zcnet = parse(&client, &format!("zcnet iperf3 -c ({case})"));
        let iperf3 = parse(
            &server.wait_with_output().unwrap(),
            &format!("iperf3 -s ({case})"),
        );
        agree(case, &iperf3, &zcnet);
    }
}

/// A stock client's one-second test against the server at `ip`, which must succeed.
fn stock_client_succeeds(pair: &VethPair, ip: &str, why: &str) {
    let out = pair
        .a
        .command("iperf3")
        .args(["-c", ip, "-p", PORT_ARG, "--json", "-t", "1"])
        .output()
        .expect("run iperf3 -c");
    let report = parse(&out, &format!("iperf3 -c after {why}"));
    assert!(
        report["end"]["sum_received"]["bytes"]
            .as_u64()
            .is_some_and(|b| b > 0),
        "after {why}: {report}"
    );
}

/// Opens a control connection from `a` to `server`, sends a cookie and reads the server's first
/// state byte (PARAM_EXCHANGE, 9).
fn open_control(server: SocketAddr, cookie: &[u8; 37]) -> TcpStream {
    let mut ctrl = TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
    ctrl.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    ctrl.write_all(cookie).unwrap();
    let mut state = [0u8];
    ctrl.read_exact(&mut state).unwrap();
    assert_eq!(state[0], 9, "PARAM_EXCHANGE");
    ctrl
}

/// Sends `block` as the parameter block and returns the server's answer: its state byte, and what
/// followed it until the server closed.
fn send_params(server: SocketAddr, block: &[u8]) -> Vec<u8> {
    let mut ctrl = open_control(server, &[b'x'; 37]);
    ctrl.write_all(block).unwrap();
    let mut answer = Vec::new();
    let _ = ctrl.read_to_end(&mut answer);
    answer
}

#[test]
fn zcnet_server_survives_killed_hostile_and_busy_clients() {
    let test = "zcnet_server_survives_killed_hostile_and_busy_clients";
    let Some(pair) = harness(test) else { return };
    let ip = pair.b_v4.to_string();
    let server_addr = SocketAddr::from((pair.b_v4, PORT));
    let mut server = pair
        .b
        .command(ZCNET)
        .args(["iperf3", "-s", "-i", "0", "-p", PORT_ARG])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zcnet iperf3 -s");
    wait_listening(&pair.b, &mut server);

    // A client killed (SIGKILL) in the middle of a test, sending and receiving.
    for reverse in [&[][..], &["-R"][..]] {
        let mut victim = pair
            .a
            .command("iperf3")
            .args(["-c", &ip, "-p", PORT_ARG, "-t", "30"])
            .args(reverse)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start iperf3 -c");
        sleep(Duration::from_millis(1500));
        // `ip netns exec` execs iperf3, so the child is iperf3 itself.
        victim.kill().expect("SIGKILL the client");
        victim.wait().unwrap();
        stock_client_succeeds(&pair, &ip, "a client killed mid-test");
    }

    // A stream that brings another cookie than its test's is turned away (ACCESS_DENIED, -1); the
    // test it tried to join never starts and is ended when its client leaves.
    let denied = pair.a.run(|| {
        let mut ctrl = open_control(server_addr, &[b'a'; 37]);
        let params = br#"{"tcp":true,"time":1,"parallel":1,"len":131072}"#;
        ctrl.write_all(&(params.len() as u32).to_be_bytes())
            .unwrap();
        ctrl.write_all(params).unwrap();
        let mut state = [0u8];
        ctrl.read_exact(&mut state).unwrap();
        assert_eq!(state[0], 10, "CREATE_STREAMS");
        let mut stream = TcpStream::connect(server_addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(&[b'b'; 37]).unwrap();
        let mut answer = [0u8];
        stream.read_exact(&mut answer).unwrap();
        answer[0]
    });
    assert_eq!(
        denied, 0xff,
        "a stream with a bad cookie is answered ACCESS_DENIED"
    );
    stock_client_succeeds(&pair, &ip, "a stream with a bad cookie");

    // Parameter blocks: one claiming 4 GiB, one not JSON, one asking for 100000 streams. Each is
    // answered SERVER_ERROR (-2) with iperf3's "unable to receive parameters" (114).
    for block in [
        &[0xff, 0xff, 0xff, 0xff][..],
        &[0, 0, 0, 5, b'{', b'"', b'x', b'!', b'}'][..],
        &[&[0u8, 0, 0, 19][..], br#"{"parallel":100000}"#].concat()[..],
    ] {
        let answer = pair.a.run(|| send_params(server_addr, block));
        assert_eq!(
            answer.first(),
            Some(&0xfe),
            "SERVER_ERROR for {block:?}: {answer:?}"
        );
        assert_eq!(
            answer.get(1..5),
            Some(&114i32.to_be_bytes()[..]),
            "{answer:?}"
        );
        stock_client_succeeds(&pair, &ip, "a malformed parameter block");
    }

    // A second client while a test runs is turned away as busy; the first test completes.
    let first = pair
        .a
        .command("iperf3")
        .args(["-c", &ip, "-p", PORT_ARG, "-t", "3", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start iperf3 -c");
    sleep(Duration::from_millis(1000));
    let second = pair
        .a
        .command("iperf3")
        .args(["-c", &ip, "-p", PORT_ARG, "-t", "1"])
        .output()
        .expect("run iperf3 -c");
    assert!(
        !second.status.success(),
        "a second client ran beside the first"
    );
    let said = String::from_utf8_lossy(&second.stdout).to_string()
        + &String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("busy"), "{said}");
    parse(&first.wait_with_output().unwrap(), "the first client");
    stock_client_succeeds(&pair, &ip, "a busy answer");

    server.kill().unwrap();
    let out = server.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "the client closed the control connection mid-test",
        "answered busy",
        "claims 4294967295 bytes",
        "malformed JSON block",
        "100000 streams",
    ] {
        assert!(
            lines.contains(expected),
            "no line saying {expected:?}:\n{lines}"
        );
    }
}
