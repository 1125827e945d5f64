//! `zcnet switch`, `zcnet bench upcall` and `zcnet dp` end to end on this host: without the
//! openvswitch module they stop with the reason and the remedy (the guest suite runs them against a
//! datapath, beside Open vSwitch's `ovs-dpctl`, and interrupts the bench mid-run); with it, the bench
//! prints interval lines and its four rows. `zcnet dp add-flow` refuses bad flow text, naming where,
//! before it opens anything.

use std::process::Command;

fn zcnet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(args)
        .output()
        .expect("run zcnet")
}

/// The probe's `ovs.datapath` row: (support, reason).
fn datapath_row() -> (String, String) {
    let out = zcnet(&["probe", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["feature"] == "ovs.datapath")
        .expect("an ovs.datapath row")
        .clone();
    (
        row["support"].as_str().unwrap().to_string(),
        row["reason"].as_str().unwrap().to_string(),
    )
}

#[test]
fn switch_needs_a_port() {
    let out = zcnet(&["switch"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

#[test]
fn without_the_module_the_commands_say_why_and_with_it_the_bench_has_four_rows() {
    let (support, reason) = datapath_row();
    if reason.starts_with("no ovs_datapath family") {
        assert_eq!(support, "no");
        for args in [
            &["switch", "--port", "lo", "--duration", "1"][..],
            &["bench", "upcall", "--duration", "1"][..],
            &["bench", "upcall", "--interval", "0.2", "--json"][..],
            &["dp", "show"][..],
            &["dp", "dump-flows", "zcnone"][..],
        ] {
            let out = zcnet(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(
                err.contains("ENOENT") && err.contains("openvswitch kernel module"),
                "{args:?}: {err}"
            );
        }
        return;
    }
    if support != "yes" {
        return testnet::skip(
            "without_the_module_the_commands_say_why_and_with_it_the_bench_has_four_rows",
            &reason,
        );
    }
    let out = zcnet(&[
        "bench",
        "upcall",
        "--duration",
        "1",
        "--interval",
        "0.25",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (intervals, rows): (Vec<serde_json::Value>, Vec<serde_json::Value>) =
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .partition(|r| r["interval"] == true);
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["missed"].as_u64() > Some(0)));
    assert!(intervals.len() >= 4, "{intervals:?}");
    assert!(intervals.iter().all(|r| r["upcalls"].is_u64()));
}

#[test]
fn dp_reads_flow_text_before_opening_anything() {
    let out = zcnet(&[
        "dp",
        "add-flow",
        "zcnone",
        "in_port(1),eth(),eth_type(0x0800),ipv4(src=10.0.0.300)",
        "2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("flow text at byte") && err.contains("10.0.0.300"),
        "{err}"
    );
    let out = zcnet(&["dp", "add-flow", "zcnone", "in_port(1)", "frobnicate(3)"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown action"), "{err}");
}
