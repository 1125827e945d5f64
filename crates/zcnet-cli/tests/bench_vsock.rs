//! `zcnet bench vsock` end to end. Where the kernel has a vsock loopback transport (vm/run-suite's
//! guest), one JSON row per mode with its completions; elsewhere (this host) a failure that says why.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{ZCNET, json_lines, succeeded};
use zcnet::tx::vsock::{VMADDR_CID_ANY, VMADDR_PORT_ANY, VsockSocket, VsockType};

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(ZCNET)
        .args(["bench", "vsock"])
        .args(args)
        .output()
        .expect("run zcnet bench vsock")
}

#[test]
fn runs_every_mode_or_says_there_is_no_vsock_transport() {
    let out = bench(&[
        "--buf-size",
        "64K",
        "--bytes",
        "1M",
        "--mode",
        "copy,zerocopy",
        "--json",
    ]);
    if zcnet::tx::vsock::loopback_available().is_err() {
        assert!(!out.status.success(), "succeeded without a vsock transport");
        let err = String::from_utf8_lossy(&out.stderr);
        for part in ["no vsock transport", "EADDRNOTAVAIL", "vsock_loopback"] {
            assert!(err.contains(part), "{part:?} missing in: {err}");
        }
        return;
    }
    succeeded(&out, "zcnet bench vsock");
    let rows = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rows.len(), 2, "{rows:?}");
    let [copy, zc] = [&rows[0], &rows[1]];
    assert_eq!(
        (copy["mode"].as_str(), zc["mode"].as_str()),
        (Some("copy"), Some("zerocopy"))
    );
    for row in [copy, zc] {
        assert_eq!(row["bytes"], 1 << 20, "{row}");
        assert!(
            row["tx_gbit_per_s"].as_f64().is_some_and(|g| g > 0.0),
            "{row}"
        );
    }
    assert_eq!(copy["zc_calls"], 0, "{copy}");
    let completed = zc["zc_ids"].as_u64().unwrap() + zc["copied_ids"].as_u64().unwrap();
    assert_eq!(Some(completed), zc["zc_calls"].as_u64(), "{zc}");
}

#[test]
fn rejects_byte_counts_it_cannot_read() {
    let out = bench(&["--buf-size", "12Q"]);
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--buf-size"));
}

#[test]
fn listen_and_sender_are_exclusive_and_connections_needs_listen() {
    let out = bench(&["--listen", "--sender", "3"]);
    assert_eq!(out.status.code(), Some(2), "--listen with --sender");
    let out = bench(&["--connections", "2"]);
    assert_eq!(out.status.code(), Some(2), "--connections without --listen");
}

/// A vsock listener this test holds on a port the kernel chose, and that port: a `--listen` given
/// it fails at once (EADDRINUSE) instead of waiting for a sender, should a flag be let through.
/// Where this host cannot listen on vsock at all, no listener and a fixed port: such a `--listen`
/// fails at once too.
fn held_port() -> (Option<VsockSocket>, String) {
    let held = VsockSocket::listen(VsockType::Stream, VMADDR_CID_ANY, VMADDR_PORT_ANY).ok();
    let port = held
        .as_ref()
        .and_then(|l| l.local_port().ok())
        .unwrap_or(1234);
    (held, port.to_string())
}

/// A flag of the other side is a usage error naming it and the side's flag: the sender's on
/// `--listen`, the receiver's on `--sender`.
#[test]
fn a_flag_of_the_other_side_is_a_usage_error() {
    let (held, port) = held_port();
    let mut failures = Vec::new();
    let listener = [
        "--mode copy",
        "--api io_uring",
        "--bytes 1M",
        "--buf-size 4K",
        "--interval 2",
    ];
    let cases = listener
        .iter()
        .map(|other| ("--listen", vec!["--listen", "--port", &port], *other))
        .chain([("--sender", vec!["--sender", "2"], "--connections 2")])
        .chain([(
            "--listen",
            vec!["--listen", "--port", &port],
            "--plot x.svg",
        )]);
    for (role, mut args, other) in cases {
        args.extend(other.split_whitespace());
        let out = bench(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = other.split_whitespace().next().unwrap();
        if out.status.code() != Some(2) || !err.contains(flag) || !err.contains(role) {
            failures.push(format!("{args:?}: {} {err}", out.status));
        }
    }
    drop(held);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The port and context ids that name no peer (VMADDR_PORT_ANY, VMADDR_CID_ANY: u32::MAX) are
/// usage errors naming the flag where the sender would connect to them, and `--port` is one of
/// `--listen` and `--sender` (the loopback run listens on a port the kernel chooses).
#[test]
fn ports_and_context_ids_that_name_no_peer_are_usage_errors() {
    for (args, flag) in [
        (&["--sender", "4294967295"][..], "--sender"),
        (&["--sender", "2", "--port", "4294967295"], "--port"),
        (&["--port", "5000"], "--port"),
    ] {
        let out = bench(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// `--listen --port 4294967295` (VMADDR_PORT_ANY) listens on a port the kernel chooses, and says
/// which.
#[test]
fn listen_on_any_port_names_the_port_bound() {
    if let Err(why) = VsockSocket::listen(VsockType::Stream, VMADDR_CID_ANY, VMADDR_PORT_ANY) {
        let reason = format!("this host cannot listen on vsock (no AF_VSOCK?): {why}");
        testnet::skip("listen_on_any_port_names_the_port_bound", &reason);
        return;
    }
    let mut child = Command::new(ZCNET)
        .args(["bench", "vsock", "--listen", "--port", "4294967295"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zcnet bench vsock --listen");
    let first = child
        .stderr
        .take()
        .map(BufReader::new)
        .map(|e| e.lines().next());
    // The listener is this test's: stop it by its pid.
    let _ = child.kill();
    let _ = child.wait();
    let line = first.flatten().and_then(Result::ok).unwrap_or_default();
    let port: u32 = line
        .strip_prefix("zcnet: listening on vsock port ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    assert_ne!(port, VMADDR_PORT_ANY, "{line}");
}
