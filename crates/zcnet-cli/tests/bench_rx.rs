//! `zcnet bench rx` end to end: one JSON row per receive mode with every field, the whole stream
//! received, and the byte accounting adding up (no timing is asserted).

mod common;

use std::process::Command;

use common::{ZCNET, json_rows, stdout_of, u};
use serde_json::Value;

fn bench_rows(args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", "rx", "--json"]).args(args);
    json_rows(&stdout_of(&mut cmd, &format!("zcnet bench rx {args:?}")))
}

fn check_rows(rows: &[Value], path: &str, bytes: u64) {
    assert_eq!(rows.len(), 2);
    for (row, mode) in rows.iter().zip(["copy", "zerocopy"]) {
        for field in [
            "bench",
            "path",
            "mode",
            "sender_mode",
            "bytes",
            "seconds",
            "gbit_per_s",
            "cpu_user_s",
            "cpu_sys_s",
            "cpu_us_per_mb",
            "mapped_bytes",
            "copied_bytes",
            "mapped_pct",
            "ctx_switches",
        ] {
            assert!(row.get(field).is_some(), "no {field} in {row}");
        }
        assert_eq!(row["bench"], "rx");
        assert_eq!(row["path"], path);
        assert_eq!(row["mode"], mode);
        assert_eq!(row["bytes"], bytes);
        let mapped = row["mapped_bytes"].as_u64().unwrap();
        assert_eq!(mapped + row["copied_bytes"].as_u64().unwrap(), bytes);
    }
    assert_eq!(rows[0]["mapped_bytes"], 0, "copy mode maps nothing");
}

#[test]
fn loopback_rows_for_both_modes() {
    let rows = bench_rows(&["--mib", "8", "--rounds", "1", "--sender", "copy"]);
    check_rows(&rows, "loopback", 8 << 20);
    // A plain sender's pages do not map on this kernel.
    assert_eq!(rows[1]["mapped_pct"], 0.0);
}

#[test]
fn zerocopy_sender_pages_map_on_loopback() {
    let rows = bench_rows(&["--mib", "8", "--rounds", "2", "--sender", "zerocopy"]);
    check_rows(&rows, "loopback", 16 << 20);
    assert_eq!(rows[1]["sender_mode"], "zerocopy");
    let pct = rows[1]["mapped_pct"].as_f64().unwrap();
    assert!(
        pct > 90.0,
        "only {pct}% mapped with MSS 4096 and a MSG_ZEROCOPY sender"
    );
}

#[test]
fn veth_rows_for_both_modes_v6() {
    if !testnet::privileged("veth_rows_for_both_modes_v6") {
        return;
    }
    let rows = bench_rows(&["--mib", "8", "--rounds", "1", "--netns", "--ipv6"]);
    check_rows(&rows, "veth", 8 << 20);
    assert!(rows[1]["mapped_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn auto_rows_say_what_auto_chose_and_why() {
    // A plain sender's pages never map: auto gives up mapping after 4 MiB and says so.
    let rows = bench_rows(&[
        "--mode", "auto", "--mib", "8", "--rounds", "1", "--sender", "copy",
    ]);
    assert_eq!(rows[0]["mode"], "auto");
    assert_eq!(rows[0]["bytes"], 8 << 20);
    assert_eq!(
        rows[0]["auto_choice"]["reason"], "nothing_mapped",
        "{}",
        rows[0]
    );
    assert_eq!(rows[0]["why"], "copy: nothing mapped");
    // A MSG_ZEROCOPY sender's do: 32 MiB is eight windows of 4 MiB, enough for one comparison.
    let rows = bench_rows(&[
        "--mode", "auto", "--mib", "32", "--rounds", "1", "--sender", "zerocopy",
    ]);
    let row = &rows[0];
    assert_eq!(row["auto_choice"]["reason"], "cheaper_per_byte", "{row}");
    assert!(row["cost_comparisons"].as_u64().unwrap() >= 1, "{row}");
    assert!(row["mapped_bytes"].as_u64().unwrap() > 0, "{row}");
    let why = row["why"].as_str().unwrap();
    assert!(
        why.starts_with("zerocopy: zc ") || why.starts_with("copy: zc "),
        "{why}"
    );
}

/// A stream shorter than one write maps no more than the stream: under a 768 MiB address-space
/// limit, 1 MiB sent in writes of 64 MiB (whose 16 buffers took 1 GiB) runs whole.
#[test]
fn a_short_stream_of_large_writes_holds_no_more_than_it_sends() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", r#"ulimit -v 786432 && exec "$0" "$@""#])
        .arg(ZCNET)
        .args([
            "bench",
            "rx",
            "--write-kib",
            "65536",
            "--mib",
            "1",
            "--rounds",
            "1",
        ])
        .args(["--json", "--interval", "0"]);
    let rows = json_rows(&stdout_of(&mut cmd, "bench rx --write-kib 65536 --mib 1"));
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(u(row, "bytes"), 1 << 20, "{row}");
    }
}

/// `--api socket,zcrx`: a row per mode and API. Where the kernel refuses device-less zcrx (this
/// host's 6.18: `EINVAL`, `NoDeviceless`; without `CAP_NET_ADMIN`: `EPERM`, `NotPermitted`), the zcrx
/// rows say so with zcnet's reason, not measured, the socket rows still receive every byte, and the
/// bench fails naming the refusal; where it takes it, the zcrx rows received every byte, each
/// copied by the kernel into the area.
#[test]
fn zcrx_rows_beside_the_socket_modes() {
    let out = Command::new(ZCNET)
        .args(["bench", "rx", "--json", "--interval", "0"])
        .args(["--api", "socket,zcrx", "--mode", "copy,zerocopy"])
        .args(["--mib", "4", "--rounds", "1"])
        .output()
        .unwrap();
    let rows = json_rows(&String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let legs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["mode"].as_str().unwrap(), r["api"].as_str().unwrap()))
        .collect();
    assert_eq!(
        legs,
        [
            ("copy", "socket"),
            ("copy", "zcrx"),
            ("zerocopy", "socket"),
            ("zerocopy", "zcrx")
        ],
        "{rows:?}\n{stderr}"
    );
    let bytes = 4 << 20;
    for row in rows.iter().filter(|r| r["api"] == "socket") {
        assert_eq!(u(row, "bytes"), bytes, "{row}");
        assert_eq!(row["verified"], true, "{row}");
        assert_eq!(u(row, "zcrx_bytes"), 0, "{row}");
    }
    let zcrx: Vec<&Value> = rows.iter().filter(|r| r["api"] == "zcrx").collect();
    match zcrx[0].get("not_measured").and_then(Value::as_str) {
        Some(why) => {
            let refusal = ["NoDeviceless", "NotPermitted", "KernelTooOld", "Invalid"]
                .iter()
                .find(|name| why.contains(&format!("({name}: ")));
            assert!(
                why.starts_with("setting up io_uring zero-copy receive: E") && refusal.is_some(),
                "{why}"
            );
            println!("zcrx refused here: {why}");
            for row in &zcrx {
                assert_eq!(row["not_measured"].as_str(), Some(why), "{row}");
                assert_eq!(u(row, "bytes"), 0, "{row}");
            }
            assert!(!out.status.success(), "a refused zcrx must fail the bench");
            assert!(
                stderr.contains(&format!("zcrx not measured: {why}")),
                "{stderr}"
            );
        }
        None => {
            assert!(out.status.success(), "{stderr}");
            for row in &zcrx {
                assert_eq!(u(row, "bytes"), bytes, "{row}");
                // The receiver's count also has the bench's header ahead of the payload.
                assert!(u(row, "zcrx_bytes") > bytes, "{row}");
                assert_eq!(
                    u(row, "zcrx_copied_bytes"),
                    u(row, "zcrx_bytes"),
                    "device-less copies all: {row}"
                );
                assert_eq!(row["verified"], true, "{row}");
            }
        }
    }
}
