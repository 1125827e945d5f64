//! `zcnet bench vsock` end to end. Where the kernel has a vsock loopback transport (vm/run-suite's
//! guest), one JSON row per mode with its completions; elsewhere (this host) a failure that says why.

mod common;

use std::process::Command;

use common::{ZCNET, json_lines, succeeded};

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
