//! `zcnet bench udp --api af_xdp`: rows of the AF_XDP UDP endpoint beside sendmsg and io_uring in
//! one run into the XDP drop sink, every datagram the endpoint sent counted by the receiving veth
//! end, and a per-packet CPU cost on every row. Rates are only checked to be positive.

mod common;

use std::process::Command;

use common::{ZCNET, json_rows, stdout_of, u};
use serde_json::Value;

/// Frames the receiving end may count beyond the bench's datagrams: what the sending namespace's
/// own stack sends while a run lasts (IPv6 router solicitations, MLD reports).
const STRAY_FRAMES: u64 = 16;

fn bench(args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", "udp", "--sink", "xdp-drop"])
        .args(args)
        .args(["--duration", "0.3", "--json", "--interval", "0"]);
    json_rows(&stdout_of(&mut cmd, &format!("zcnet bench udp {args:?}")))
}

/// Checks every row of a run of `size`-byte datagrams; returns the af_xdp rows.
fn check_rows(rows: &[Value], size: u64) -> Vec<&Value> {
    for row in rows {
        assert_eq!(row["path"], "xdp-drop", "{row}");
        assert!(u(row, "datagrams") > 0, "{row}");
        assert_eq!(u(row, "bytes"), u(row, "datagrams") * size, "{row}");
        assert!(row["cpu_ns_per_packet"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["cpu_us_per_mb"].as_f64().unwrap() > 0.0, "{row}");
    }
    let af_xdp: Vec<&Value> = rows.iter().filter(|r| r["api"] == "af_xdp").collect();
    for row in &af_xdp {
        let (sent, seen) = (u(row, "datagrams"), u(row, "sink_frames"));
        assert!(
            seen >= sent && seen <= sent + STRAY_FRAMES,
            "the sink counted {seen} frames for {sent} datagrams: {row}"
        );
        assert_eq!(u(row, "lost"), 0, "{row}");
        // veth has no AF_XDP zero-copy (kernel-facts.md): every mode binds in copy mode.
        assert_eq!(row["xdp_mode"], "copy", "{row}");
    }
    af_xdp
}

#[test]
fn af_xdp_rows_beside_the_socket_apis_every_datagram_counted() {
    if !testnet::privileged("af_xdp_rows_beside_the_socket_apis_every_datagram_counted") {
        return;
    }
    let rows = bench(&[
        "--api",
        "sendmsg,io_uring,af_xdp",
        "--mode",
        "copy,zerocopy",
        "--size",
        "64",
    ]);
    let apis: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["mode"].as_str().unwrap(), r["api"].as_str().unwrap()))
        .collect();
    assert_eq!(
        apis,
        [
            ("copy", "sendmsg"),
            ("copy", "io_uring"),
            ("copy", "af_xdp"),
            ("zerocopy", "sendmsg"),
            ("zerocopy", "io_uring"),
            ("zerocopy", "af_xdp"),
        ]
    );
    let af_xdp = check_rows(&rows, 64);
    // Zero-copy was asked for and refused: the row says why.
    let why = af_xdp[1]["why"].as_str().unwrap();
    assert!(why.contains("XDP_ZEROCOPY"), "{}", af_xdp[1]);
}

#[test]
fn af_xdp_over_ipv6_at_1400_bytes() {
    if !testnet::privileged("af_xdp_over_ipv6_at_1400_bytes") {
        return;
    }
    let rows = bench(&[
        "--api", "af_xdp", "--mode", "copy", "--size", "1400", "--ipv6",
    ]);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["ip"], "v6", "{}", rows[0]);
    check_rows(&rows, 1400);
}
