//! Without locked memory (RLIMIT_MEMLOCK 0 and no CAP_IPC_LOCK) no MSG_ZEROCOPY send fits the
//! locked-memory budget and the sender copies: `probe` and `bench tcp` say so, naming the limit and
//! its remedy, and every byte still arrives.

mod common;

use std::process::{Command, Output};

use common::{ZCNET, json_rows, u};

/// Runs zcnet with `args` under RLIMIT_MEMLOCK 0 and without CAP_IPC_LOCK (root drops it from its
/// bounding set with setpriv; a normal user has none).
fn without_locked_memory(args: &[&str]) -> Output {
    let script = r#"ulimit -l 0 && exec "$0" "$@""#;
    let mut cmd = if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set=-ipc_lock", "sh", "-c", script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    };
    cmd.arg(ZCNET).args(args).output().expect("run zcnet")
}

#[test]
fn refused_zero_copy_names_the_locked_memory_limit() {
    let out = without_locked_memory(&["probe"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("tcp.msg_zerocopy_loopback"))
        .unwrap_or_else(|| panic!("no tcp.msg_zerocopy_loopback line: {text}"));
    assert!(
        line.contains("RLIMIT_MEMLOCK (0 KiB here") && line.contains("ulimit -l"),
        "{line}"
    );
    assert!(!line.contains("TxStats"), "a debug dump: {line}");
    // Mapped receive needs a zero-copy sender: with none, the finding says it measured nothing and
    // why, rather than that nothing maps.
    let line = text
        .lines()
        .find(|l| l.starts_with("tcp.zerocopy_receive"))
        .unwrap_or_else(|| panic!("no tcp.zerocopy_receive line: {text}"));
    assert!(
        line.contains("not measured: the MSG_ZEROCOPY sender copied all 8 sends")
            && line.contains("RLIMIT_MEMLOCK (0 KiB here"),
        "{line}"
    );

    let out = without_locked_memory(&[
        "bench",
        "tcp",
        "--mode",
        "zerocopy",
        "--duration",
        "0.3",
        "--json",
        "--interval",
        "0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("RLIMIT_MEMLOCK"), "{err}");
    let rows = json_rows(&String::from_utf8_lossy(&out.stdout));
    let row = &rows[0];
    assert_eq!(u(row, "zc_ids"), 0, "{row}");
    assert_eq!(u(row, "data_errors"), 0, "{row}");
    assert!(row["memlock_reason"].is_string(), "{row}");
}
