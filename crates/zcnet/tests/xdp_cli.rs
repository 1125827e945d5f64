//! `zcnet xdp rxdrop` leaves no XDP program behind when it is killed (SIGINT, SIGKILL): the kernel
//! closes the BPF link descriptor with the process. Runs the built `zcnet` binary inside a testnet
//! namespace on its veth end.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testnet::{VethConfig, VethPair};

/// The `zcnet` binary of the same build as this test (`target/<profile>/zcnet`), built by
/// `cargo test --workspace`.
fn zcnet_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir.join("zcnet");
    bin.exists().then_some(bin)
}

fn attached(pair: &VethPair) -> bool {
    pair.a
        .ip(&["-d", "link", "show", &pair.a_if])
        .expect("ip -d link")
        .contains("prog/xdp")
}

/// Starts `zcnet xdp rxdrop` on `a_if` and waits until its program shows on the interface.
fn start_rxdrop(pair: &VethPair, bin: &Path) -> Child {
    let mut child = pair
        .a
        .command(bin.to_str().expect("utf-8 path"))
        .args([
            "xdp",
            "rxdrop",
            "--iface",
            &pair.a_if,
            "--duration",
            "60",
            "--poll",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zcnet");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !attached(pair) {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("zcnet xdp rxdrop exited early: {status}: {err}");
        }
        assert!(Instant::now() < deadline, "program never showed up");
        thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn killed_rxdrop_leaves_no_program() {
    if !testnet::privileged("killed_rxdrop_leaves_no_program") {
        return;
    }
    let Some(bin) = zcnet_binary() else {
        testnet::skip(
            "killed_rxdrop_leaves_no_program",
            "zcnet binary not built (run cargo test --workspace)",
        );
        return;
    };
    let pair = VethPair::new(VethConfig {
        queues: 1,
        ..VethConfig::default()
    })
    .expect("veth pair");

    let mut child = start_rxdrop(&pair, &bin);
    testnet::run_checked("kill", &["-INT", &child.id().to_string()]).expect("kill -INT");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "SIGINT ends it: {status}");
    assert!(!attached(&pair), "program left after SIGINT");

    let mut child = start_rxdrop(&pair, &bin);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    assert!(!attached(&pair), "program left after SIGKILL");
}

#[test]
fn bench_xdp_json_has_a_row_per_path_with_every_field() {
    if !testnet::privileged("bench_xdp_json_has_a_row_per_path_with_every_field") {
        return;
    }
    let Some(bin) = zcnet_binary() else {
        testnet::skip(
            "bench_xdp_json_has_a_row_per_path_with_every_field",
            "zcnet binary not built (run cargo test --workspace)",
        );
        return;
    };
    let out = std::process::Command::new(&bin)
        .args(["bench", "xdp", "--json", "--duration", "0.3"])
        .output()
        .expect("run zcnet bench xdp");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for (line, path) in lines.iter().zip(["af_xdp", "tpacket_v3", "recvmmsg"]) {
        assert!(line.contains(&format!("\"path\":\"{path}\"")), "{line}");
        for field in [
            "bench",
            "path",
            "mode",
            "packets",
            "seconds",
            "mpps",
            "cpu_user_s",
            "cpu_sys_s",
            "sys_cpu_ns_per_packet",
            "generator_mpps",
            "rx_dropped",
            "invalid_descs",
        ] {
            assert!(
                line.contains(&format!("\"{field}\":")),
                "{field} missing: {line}"
            );
        }
    }
}
