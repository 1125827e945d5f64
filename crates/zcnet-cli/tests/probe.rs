//! `zcnet probe` end to end: valid JSON, the findings this kernel is known for, exit statuses.

use std::process::{Command, Output};

use serde_json::Value;

fn zcnet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
}

/// Runs a probe holding the user's locked-memory budget ([`testnet::memlock_turn`]): every probe
/// sends MSG_ZEROCOPY, and the pages each pins count against the one budget all of a normal
/// user's processes share, so that probes run side by side by this binary's tests could leave
/// one of them copying (`ENOBUFS`) instead of measuring what zero-copy does.
fn probe_output(cmd: &mut Command) -> Output {
    let _turn = testnet::memlock_turn();
    cmd.output().expect("run zcnet probe")
}

/// [`probe_output`] of a `--json` probe, parsed.
fn probe_json(cmd: &mut Command) -> Value {
    let out = probe_output(cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("probe --json prints one JSON object")
}

fn finding<'a>(report: &'a Value, feature: &str, iface: Option<&str>) -> &'a Value {
    report["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["feature"] == feature && f["iface"].as_str() == iface)
        .unwrap_or_else(|| panic!("no {feature} row in {report}"))
}

#[test]
fn json_names_the_kernel_and_every_host_feature() {
    let report = probe_json(zcnet().args(["probe", "--json", "--iface", "lo"]));
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(report["kernel"], release.trim());
    assert_eq!(finding(&report, "tcp.so_zerocopy", None)["support"], "yes");
    assert_eq!(finding(&report, "udp.so_zerocopy", None)["support"], "yes");
    let optmem = finding(&report, "limit.optmem_max", None);
    assert!(
        optmem["reason"]
            .as_str()
            .unwrap()
            .contains("net.core.optmem_max")
    );
    let budget = finding(&report, "limit.memlock_budget", None);
    let reason = budget["reason"].as_str().unwrap();
    assert!(
        reason.contains("in use") && reason.contains("256 connections with 256 KiB in flight"),
        "{budget}"
    );
    let lo = finding(&report, "iface", Some("lo"));
    assert!(lo["reason"].as_str().unwrap().contains("mtu 65536"), "{lo}");
    for row in report["features"].as_array().unwrap() {
        assert!(
            ["yes", "no", "partial", "unknown"].contains(&row["support"].as_str().unwrap()),
            "{row}"
        );
        assert!(!row["reason"].as_str().unwrap().is_empty(), "{row}");
    }
}

#[test]
fn missing_interface_is_a_finding_not_a_failure() {
    let report = probe_json(zcnet().args(["probe", "--json", "--iface", "zcnope0"]));
    let row = finding(&report, "iface", Some("zcnope0"));
    assert_eq!(row["support"], "no");
    assert!(row["reason"].as_str().unwrap().starts_with("ENODEV"));
}

#[test]
fn usage_errors_exit_non_zero() {
    let out = zcnet().args(["probe", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = zcnet().args(["probe", "--try-xsk-bind"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--try-xsk-bind needs --iface");
}

#[test]
fn table_has_a_row_per_feature() {
    let out = probe_output(zcnet().args(["probe", "--iface", "lo"]));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("FEATURE"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("tcp.so_zerocopy") && l.contains("yes")),
        "{text}"
    );
}

#[test]
fn loopback_zero_copy_sends_complete_as_copied() {
    let report = probe_json(zcnet().args(["probe", "--json", "--iface", "lo"]));
    for feature in ["tcp.msg_zerocopy_loopback", "udp.msg_zerocopy_loopback"] {
        let row = finding(&report, feature, None);
        assert_eq!(row["support"], "partial", "{row}");
        assert!(row["reason"].as_str().unwrap().contains("copied"), "{row}");
    }
}

#[test]
fn vsock_loopback_is_reported_unavailable_without_connecting() {
    let report = probe_json(zcnet().args(["probe", "--json", "--iface", "lo"]));
    let row = finding(&report, "vsock.loopback", None);
    if std::path::Path::new("/sys/module/vsock_loopback").exists() {
        assert_eq!(row["support"], "yes", "{row}");
    } else {
        assert_eq!(row["support"], "no", "{row}");
    }
}

#[test]
fn xsk_zero_copy_bind_on_veth_is_refused() {
    if !testnet::privileged("xsk_zero_copy_bind_on_veth_is_refused") {
        return;
    }
    let pair = testnet::VethPair::new(testnet::VethConfig::default()).unwrap();
    let report = probe_json(pair.a.command(env!("CARGO_BIN_EXE_zcnet")).args([
        "probe",
        "--json",
        "--iface",
        &pair.a_if,
        "--try-xsk-bind",
    ]));
    let bind = finding(&report, "xdp.xsk_zerocopy_bind", Some(&pair.a_if));
    assert_eq!(bind["support"], "no", "{bind}");
    assert!(
        bind["reason"].as_str().unwrap().starts_with("EOPNOTSUPP"),
        "{bind}"
    );
    let features = finding(&report, "xdp.features", Some(&pair.a_if));
    assert!(
        features["reason"].as_str().unwrap().contains("redirect"),
        "{features}"
    );
    assert!(
        !features["reason"]
            .as_str()
            .unwrap()
            .contains("xsk-zerocopy,"),
        "{features}"
    );
    let link = pair.a.ip(&["-d", "link", "show", &pair.a_if]).unwrap();
    assert!(
        !link.contains("prog/xdp"),
        "probe left an XDP program: {link}"
    );
}

#[test]
fn zero_copy_receive_maps_pages_from_a_zero_copy_sender_only() {
    let report = probe_json(zcnet().args(["probe", "--json", "--iface", "lo"]));
    let row = finding(&report, "tcp.zerocopy_receive", None);
    let reason = row["reason"].as_str().unwrap();
    let pcts: Vec<f64> = reason
        .split_whitespace()
        .filter_map(|w| w.strip_suffix('%')?.parse().ok())
        .collect();
    assert_eq!(pcts.len(), 2, "{row}");
    // kernel-facts.md: a MSG_ZEROCOPY sender at MSS 4096 maps (nearly) everything, a plain one nothing.
    assert!(pcts[0] >= 99.0, "{row}");
    assert_eq!(pcts[1], 0.0, "{row}");
    assert_eq!(row["support"], "yes", "{row}");
}

#[test]
fn tx_metadata_row_says_what_each_mode_gets() {
    let report = probe_json(zcnet().args(["probe", "--json", "--iface", "lo"]));
    let row = finding(&report, "xdp.tx_metadata", Some("lo"));
    let reason = row["reason"].as_str().unwrap();
    // Loopback has no AF_XDP zero-copy, so no driver TX metadata either.
    assert!(
        reason.ends_with("zero-copy: none (no xsk zero-copy)"),
        "{row}"
    );
    // Copy mode's answer is the kernel's registration of a UMEM with TX metadata room.
    match zcnet::xdp::probe_tx_metadata_umem() {
        Ok(None) => {
            assert_eq!(row["support"], "partial", "{row}");
            assert!(reason.starts_with("copy mode: a UMEM with tx_metadata_len 16 registers"));
        }
        Ok(Some(_)) => {
            assert_eq!(row["support"], "no", "{row}");
            assert!(reason.contains("refused"), "{row}");
        }
        Err(_) => {
            assert_eq!(row["support"], "no", "{row}");
            assert!(reason.starts_with("copy mode: not probed"), "{row}");
        }
    }
}
