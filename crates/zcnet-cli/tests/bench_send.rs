//! `zcnet bench tcp|udp` end to end: one JSON row per mode with every field the benchmark promises,
//! counters that agree with each other, and the XDP drop sink where zero-copy sends are not copied.
//! Rates are only checked to be positive: performance is compared from one run's rows, never asserted.

use std::process::Command;

use serde_json::Value;

const FIELDS: [&str; 17] = [
    "bench",
    "path",
    "ip",
    "mode",
    "size",
    "seconds",
    "bytes",
    "gbit_per_s",
    "calls",
    "cpu_user_s",
    "cpu_sys_s",
    "cpu_us_per_mb",
    "zc_ids",
    "copied_ids",
    "notifications",
    "enobufs",
    "fallbacks",
];

fn bench(args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .arg("bench")
        .args(args)
        .args(["--duration", "0.3", "--json"])
        .output()
        .expect("run zcnet bench");
    assert!(
        out.status.success(),
        "zcnet bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    for row in &rows {
        for field in FIELDS {
            assert!(row.get(field).is_some(), "{field} missing: {row}");
        }
        assert!(row["gbit_per_s"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["bytes"].as_u64().unwrap() > 0, "{row}");
    }
    rows
}

fn u(row: &Value, field: &str) -> u64 {
    row[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {row}"))
}

#[test]
fn tcp_loopback_rows_per_mode_and_every_id_completes() {
    let rows = bench(&["tcp", "--mode", "copy,zerocopy,auto"]);
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["copy", "zerocopy", "auto"]);
    let (copy, zc) = (&rows[0], &rows[1]);
    assert_eq!(u(copy, "zc_ids") + u(copy, "copied_ids"), 0, "{copy}");
    assert_eq!(
        u(zc, "zc_ids") + u(zc, "copied_ids"),
        u(zc, "zc_calls"),
        "every zero-copy send completes after the flush: {zc}"
    );
    // Loopback delivers to a local socket: every completion says copied (kernel-facts.md).
    assert_eq!(u(zc, "zc_ids"), 0, "{zc}");
    assert_eq!(rows[0]["path"], "loopback");
}

#[test]
fn udp_gso_rows_over_loopback_v6() {
    let rows = bench(&[
        "udp", "--mode", "zerocopy", "--size", "14000", "--gso", "1400", "--ipv6",
    ]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["ip"], "v6");
    assert_eq!(rows[0]["gso"], 1400);
}

#[test]
fn udp_into_an_xdp_drop_sink_is_not_copied() {
    if !testnet::privileged("udp_into_an_xdp_drop_sink_is_not_copied") {
        return;
    }
    let rows = bench(&["udp", "--sink", "xdp-drop", "--mode", "zerocopy"]);
    let row = &rows[0];
    assert_eq!(row["path"], "xdp-drop", "{row}");
    assert!(u(row, "zc_ids") > 0, "{row}");
    assert_eq!(u(row, "copied_ids"), 0, "{row}");
    assert_eq!(u(row, "zc_ids"), u(row, "zc_calls"), "{row}");
}

#[test]
fn tcp_over_the_veth_harness() {
    if !testnet::privileged("tcp_over_the_veth_harness") {
        return;
    }
    let rows = bench(&["tcp", "--netns", "--mode", "copy,zerocopy"]);
    let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["veth", "veth"], "{rows:?}");
}
