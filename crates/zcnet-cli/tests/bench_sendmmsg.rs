//! `zcnet bench udp --api sendmmsg`: the batched copy sender beside sendmsg in one run, every
//! datagram it counted as sent accounted for by the receiver (arrived, verified, or counted lost),
//! and beside the AF_XDP endpoint into the XDP drop sink, counted by the receiving veth end. Rates
//! are only checked to be positive.

mod common;

use std::process::Command;

use common::{ZCNET, modes_and_apis, u, udp_rows_allowing_loss};
use serde_json::Value;

/// Runs `zcnet bench udp ARGS`; a verified run that the flood outran exits non-zero naming the
/// loss, after its rows (as the sendmsg runs do): the rows are returned either way.
fn bench(args: &[&str]) -> Vec<Value> {
    udp_rows_allowing_loss(Command::new(ZCNET).args(["bench", "udp"]).args(args).args([
        "--duration",
        "0.3",
        "--json",
        "--interval",
        "0",
    ]))
}

/// The sendmmsg row of `rows`: its sends, calls and batch agree, and every datagram the receiver
/// saw is accounted for against what the sender counted.
fn check_sendmmsg_row(row: &Value, size: u64, batch: u64) {
    assert_eq!(row["mode"], "copy", "{row}");
    assert_eq!(u(row, "batch"), batch, "{row}");
    let datagrams = u(row, "datagrams");
    assert!(datagrams > 0, "{row}");
    assert_eq!(u(row, "bytes"), datagrams * size, "{row}");
    // Each call takes at most a batch; whole batches go out until the run ends.
    assert!(u(row, "calls") * batch >= datagrams, "{row}");
    assert_eq!(datagrams % batch, 0, "only whole batches are sent: {row}");
    assert!(row["cpu_ns_per_packet"].as_f64().unwrap() > 0.0, "{row}");
    // The receiver's side, end to end.
    assert_eq!(u(row, "sent_datagrams"), datagrams, "{row}");
    assert_eq!(u(row, "data_errors"), 0, "{row}");
    let received = u(row, "received_datagrams") - u(row, "duplicated");
    assert!(received > 0, "nothing arrived: {row}");
    assert_eq!(u(row, "lost"), datagrams - received, "{row}");
    assert_eq!(
        u(row, "received_bytes"),
        u(row, "received_datagrams") * size,
        "{row}"
    );
}

#[test]
fn sendmmsg_rows_beside_sendmsg_every_datagram_accounted_for() {
    let rows = bench(&[
        "--api",
        "sendmsg,sendmmsg",
        "--mode",
        "copy,zerocopy",
        "--size",
        "64",
    ]);
    // sendmmsg always copies: no zerocopy row of it.
    assert_eq!(
        modes_and_apis(&rows),
        [
            ("copy", "sendmsg"),
            ("copy", "sendmmsg"),
            ("zerocopy", "sendmsg")
        ]
    );
    check_sendmmsg_row(&rows[1], 64, 32);
}

#[test]
fn sendmmsg_over_ipv6_with_a_batch_of_seven_at_1400_bytes() {
    let rows = bench(&[
        "--api", "sendmmsg", "--mode", "copy", "--size", "1400", "--ipv6", "--batch", "7",
    ]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["ip"], "v6", "{}", rows[0]);
    check_sendmmsg_row(&rows[0], 1400, 7);
}

#[test]
fn sendmmsg_beside_af_xdp_into_the_xdp_drop_sink() {
    if !testnet::privileged("sendmmsg_beside_af_xdp_into_the_xdp_drop_sink") {
        return;
    }
    let rows = bench(&[
        "--sink",
        "xdp-drop",
        "--api",
        "sendmmsg,af_xdp",
        "--mode",
        "copy",
        "--size",
        "64",
    ]);
    let apis: Vec<&str> = rows.iter().map(|r| r["api"].as_str().unwrap()).collect();
    assert_eq!(apis, ["sendmmsg", "af_xdp"], "{rows:?}");
    for row in &rows {
        assert_eq!(row["path"], "xdp-drop", "{row}");
        assert!(u(row, "datagrams") > 0, "{row}");
        assert_eq!(u(row, "bytes"), u(row, "datagrams") * 64, "{row}");
        assert!(row["cpu_ns_per_packet"].as_f64().unwrap() > 0.0, "{row}");
    }
}

/// A send the kernel refuses ends the run with its row marked `failed` in the bench's words and the
/// bench failing, on the batched sender as on sendmsg: datagrams to a loopback port nothing listens
/// on draw ICMP port unreachable, and the connected sender's next call fails with ECONNREFUSED.
#[test]
fn a_refused_send_marks_the_run_failed() {
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .unwrap()
        .to_string();
    for api in ["sendmsg", "sendmmsg"] {
        let out = Command::new(ZCNET)
            .args(["bench", "udp", "--connect", &closed, "--raw", "--api", api])
            .args(["--mode", "copy", "--batch", "1", "--duration", "5"])
            .args(["--interval", "0", "--json"])
            .output()
            .unwrap();
        let (stdout, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{api}: {stdout}{err}");
        let rows = common::json_rows(&stdout);
        assert_eq!(rows.len(), 1, "{api}: {stdout}{err}");
        assert_eq!(rows[0]["api"], api, "{}", rows[0]);
        let failed = rows[0]["failed"]
            .as_str()
            .unwrap_or_else(|| panic!("{api}: not marked failed: {}", rows[0]));
        assert!(failed.contains("ECONNREFUSED"), "{api}: {failed}");
        let stopped = format!("the {api} copy run stopped after");
        assert!(
            err.contains(&stopped) && err.contains(failed),
            "{api}: {err}"
        );
    }
}
