//! Without locked memory (RLIMIT_MEMLOCK 0 and no CAP_IPC_LOCK) no MSG_ZEROCOPY send fits the
//! locked-memory budget and the sender copies: `probe` and `bench tcp` say so, naming the limit and
//! its remedy, and every byte still arrives.

mod common;

use std::process::{Command, Output};

use common::{ZCNET, json_rows, u};

/// Runs zcnet with `args` under RLIMIT_MEMLOCK 0 and without CAP_IPC_LOCK.
fn without_locked_memory(args: &[&str]) -> Output {
    with_locked_memory_kib(0, args)
}

/// Runs zcnet with `args` under RLIMIT_MEMLOCK `kib` KiB and without CAP_IPC_LOCK (root drops it
/// from its bounding set with setpriv; a normal user has none).
fn with_locked_memory_kib(kib: u32, args: &[&str]) -> Output {
    let script = format!(r#"ulimit -l {kib} && exec "$0" "$@""#);
    let mut cmd = if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set=-ipc_lock", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    cmd.arg(ZCNET).args(args).output().expect("run zcnet")
}

/// The line of `zcnet probe`'s table for `feature`.
fn probe_row<'a>(table: &'a str, feature: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.starts_with(feature))
        .unwrap_or_else(|| panic!("no {feature} line: {table}"))
}

#[test]
fn refused_zero_copy_names_the_locked_memory_limit() {
    let out = without_locked_memory(&["probe"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = probe_row(&text, "tcp.msg_zerocopy_loopback");
    assert!(
        line.contains("RLIMIT_MEMLOCK (0 KiB here") && line.contains("ulimit -l"),
        "{line}"
    );
    assert!(!line.contains("TxStats"), "a debug dump: {line}");
    // Mapped receive needs a zero-copy sender: with none, the finding says it measured nothing and
    // why, rather than that nothing maps.
    let line = probe_row(&text, "tcp.zerocopy_receive");
    assert!(
        line.contains("not measured: the MSG_ZEROCOPY sender copied all 8 sends")
            && line.contains("RLIMIT_MEMLOCK (0 KiB here"),
        "{line}"
    );
    // Its verdict is neither yes nor no: the table's SUPPORT column (no IFACE on this row).
    assert_eq!(line.split_whitespace().nth(2), Some("unknown"), "{line}");

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

#[test]
fn mapped_receive_is_measured_over_the_sends_that_went_out_zero_copy() {
    // 128 KiB leaves room for one 64 KiB send's pinned pages in flight: the probe's other sends
    // are copied, into pages no receiver can map, and the share is taken over the rest.
    let out = with_locked_memory_kib(128, &["probe"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = probe_row(&text, "tcp.zerocopy_receive");
    assert!(
        line.contains("% of bytes mapped with a MSG_ZEROCOPY sender (of the ")
            && line.contains("sends that went out zero-copy whole;")
            && line.contains("RLIMIT_MEMLOCK (128 KiB here"),
        "{line}"
    );
    // Before, the copied sends counted against the share: one of eight sends mapped read as 12.5%.
    let mapped: f64 = line
        .split_whitespace()
        .find_map(|w| w.strip_suffix('%')?.parse().ok())
        .unwrap_or_else(|| panic!("no share in {line}"));
    assert!(mapped > 50.0, "{line}");
}

/// An io_uring run whose ring the locked-memory limit refuses (rings are charged to it without
/// CAP_IPC_LOCK) is not measured: the bench says so and exits 1, and does not claim to be sending
/// another way (before, its line said "sending with sendmsg (MSG_ZEROCOPY) instead" as it exited 1).
#[test]
fn a_refused_io_uring_ring_is_not_measured_and_says_so() {
    let out = without_locked_memory(&[
        "bench",
        "tcp",
        "--api",
        "io_uring",
        "--mode",
        "zerocopy",
        "--duration",
        "0.3",
        "--interval",
        "0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.contains("io_uring_setup: ENOMEM") {
        // A kernel without io_uring (or a filter refusing it): no locked-memory refusal to word.
        testnet::skip(
            "a_refused_io_uring_ring_is_not_measured_and_says_so",
            &format!("io_uring_setup was not refused for locked memory here: {err}"),
        );
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("io_uring not measured") && err.contains("RLIMIT_MEMLOCK"),
        "{err}"
    );
    assert!(!err.contains("instead"), "{err}");
}
