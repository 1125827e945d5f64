//! `zcnet bench tcp|udp --api sendmsg,io_uring`: one row per api and mode, side by side, each with its
//! api named; io_uring rows count ids through REPORT_USAGE (copied over loopback, not copied into the
//! XDP drop sink) and register the pool for fixed sends — except a pool on huge pages, which is sent
//! unregistered, saying why. By default only the sendmsg API's pool is on huge pages, as the rows and
//! the table say.

mod common;

use std::process::Command;

use common::{ZCNET, json_lines, stdout_of, u};
use serde_json::{Value, json};
use zcnet::tx::{BufferPool, PoolConfig};

fn bench(args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(ZCNET);
    cmd.arg("bench")
        .args(args)
        .args(["--api", "sendmsg,io_uring", "--duration", "0.3", "--json"]);
    json_lines(&stdout_of(&mut cmd, &format!("zcnet bench {args:?}")))
}

#[test]
fn tcp_loopback_rows_per_api_and_mode() {
    let rows = bench(&["tcp", "--mode", "zerocopy,copy", "--size", "16384"]);
    let pairs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["api"].as_str().unwrap(), r["mode"].as_str().unwrap()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("sendmsg", "zerocopy"),
            ("io_uring", "zerocopy"),
            ("sendmsg", "copy"),
            ("io_uring", "copy")
        ]
    );
    let uring = &rows[1];
    assert!(u(uring, "bytes") > 0, "{uring}");
    assert_eq!(uring["registered"], true, "{uring}");
    assert_eq!(uring["zerocopy"], true, "{uring}");
    // Every request notified after the flush; a local receiver makes the kernel copy each one.
    assert_eq!(u(uring, "copied_ids"), u(uring, "zc_calls"), "{uring}");
    assert_eq!(u(uring, "zc_ids"), 0, "{uring}");
    assert_eq!(rows[0]["registered"], Value::Null);
}

#[test]
fn totals_of_rounds_are_per_api_and_mode() {
    let rows = bench(&[
        "tcp",
        "--mode",
        "copy,zerocopy",
        "--rounds",
        "2",
        "--interval",
        "0",
    ]);
    let (totals, runs): (Vec<&Value>, Vec<&Value>) = rows.iter().partition(|r| r["total"] == true);
    assert_eq!(runs.len(), 8, "{rows:?}");
    let mut groups: Vec<(&str, &str)> = totals
        .iter()
        .map(|r| (r["api"].as_str().unwrap(), r["mode"].as_str().unwrap()))
        .collect();
    groups.sort_unstable();
    assert_eq!(
        groups,
        [
            ("io_uring", "copy"),
            ("io_uring", "zerocopy"),
            ("sendmsg", "copy"),
            ("sendmsg", "zerocopy")
        ]
    );
    for total in totals {
        let of_group = runs
            .iter()
            .filter(|r| r["api"] == total["api"] && r["mode"] == total["mode"]);
        assert_eq!(
            of_group.map(|r| u(r, "bytes")).sum::<u64>(),
            u(total, "bytes"),
            "{total}"
        );
    }
}

#[test]
fn udp_into_an_xdp_drop_sink_io_uring_is_not_copied() {
    if !testnet::privileged("udp_into_an_xdp_drop_sink_io_uring_is_not_copied") {
        return;
    }
    let rows = bench(&[
        "udp", "--sink", "xdp-drop", "--mode", "zerocopy", "--size", "4096", "--gso", "1024",
    ]);
    for row in &rows {
        assert_eq!(row["path"], "xdp-drop", "{row}");
        assert!(u(row, "zc_ids") > 0, "{row}");
        assert_eq!(u(row, "copied_ids"), 0, "{row}");
        assert_eq!(u(row, "zc_ids"), u(row, "zc_calls"), "{row}");
    }
    assert_eq!(rows[1]["api"], "io_uring");
}

#[test]
fn a_pool_on_huge_pages_is_sent_unregistered_and_says_why() {
    let out = Command::new(ZCNET)
        .args(["bench", "tcp", "--mode", "zerocopy", "--size", "64K"])
        .args([
            "--api",
            "io_uring",
            "--pages",
            "huge",
            "--duration",
            "0.3",
            "--json",
        ])
        .output()
        .expect("run zcnet");
    common::succeeded(&out, "zcnet bench tcp --api io_uring --pages huge");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("--pages huge: the send buffers are on small pages") {
        testnet::skip(
            "a_pool_on_huge_pages_is_sent_unregistered_and_says_why",
            &stderr,
        );
        return;
    }
    let rows = json_lines(&String::from_utf8_lossy(&out.stdout));
    let row = rows.last().expect("a row");
    let why = row["registered"]
        .as_str()
        .unwrap_or_else(|| panic!("{row}"));
    assert!(why.contains("huge pages"), "{why}");
    assert!(u(row, "bytes") > 0, "{row}");
    assert_eq!(row["zerocopy"], true, "{row}");
    assert!(
        stderr.contains("io_uring sent from unregistered buffers: a pool on huge pages"),
        "{stderr}"
    );
}

/// Where the kernel gives transparent huge pages, `--pages auto` (the
/// default) puts the sendmsg API's pool on them and keeps io_uring's on small, registered pages;
/// `--pages small` keeps both on small pages.
#[test]
fn by_default_only_the_sendmsg_pool_is_on_huge_pages() {
    const TEST: &str = "by_default_only_the_sendmsg_pool_is_on_huge_pages";
    // The library's own answer, which the bench's rows report.
    let probe = BufferPool::new({
        let mut config = PoolConfig::default();
        config.buf_size = 4096;
        config.count = 1;
        config.huge_pages = true;
        config
    })
    .expect("a one-buffer pool");
    if let Err(why) = probe.huge_pages() {
        testnet::skip(TEST, &format!("no transparent huge pages here: {why}"));
        return;
    }
    // Per row: the api, whether its pool is on huge pages, and whether io_uring registered it.
    let pools = |pages: &[&str]| -> Vec<Value> {
        let mut args = vec!["tcp", "--mode", "zerocopy", "--size", "64K"];
        args.extend_from_slice(pages);
        bench(&args)
            .iter()
            .map(|r| json!([r["api"], r["huge_pages"], r["registered"]]))
            .collect()
    };
    assert_eq!(
        pools(&[]),
        [
            json!(["sendmsg", true, null]),
            json!(["io_uring", false, true])
        ]
    );
    assert_eq!(
        pools(&["--pages", "small"]),
        [
            json!(["sendmsg", false, null]),
            json!(["io_uring", false, true])
        ]
    );
    // The table says it too, in its `huge pages` column: one line per api, in the JSON's order.
    let mut cmd = Command::new(ZCNET);
    cmd.args(["bench", "tcp", "--mode", "zerocopy", "--size", "64K"])
        .args([
            "--api",
            "sendmsg,io_uring",
            "--duration",
            "0.3",
            "--interval",
            "0",
        ]);
    let table = stdout_of(&mut cmd, "zcnet bench tcp (table)");
    let mut lines = table.lines();
    let header = lines.next().expect("a header line");
    let at = header
        .find("huge pages")
        .unwrap_or_else(|| panic!("no huge pages column: {header}"));
    let cells: Vec<(&str, &str)> = lines
        .map(|l| {
            let api = l.split_whitespace().nth(2).unwrap_or("");
            let cell = l.get(at..).and_then(|c| c.split_whitespace().next());
            (api, cell.unwrap_or(""))
        })
        .collect();
    assert_eq!(
        cells,
        [("sendmsg", "true"), ("io_uring", "false")],
        "{table}"
    );
}
