//! `zcnet observe` as the tests run it: started with tracefs reachable, its first line checked, and
//! the totals of one process read from its summary.

use std::io::{BufReader, Read};
use std::process::ChildStdout;

use serde_json::Value;

use super::{Reaped, ZCNET, json_lines, start_reading};

/// `zcnet observe ARGS --json` with tracefs reachable, started; returns it (killed if the test ends
/// before it, so that a failed test leaves nothing attached), the program ids its first line
/// announced and the rest of its stdout.
pub fn start_observer(args: &[&str]) -> (Reaped, Vec<u64>, BufReader<ChildStdout>) {
    let mut cmd = testnet::with_tracefs(ZCNET);
    cmd.arg("observe").args(args).arg("--json");
    if !args.contains(&"--interval") {
        cmd.args(["--interval", "0"]);
    }
    let (mut child, line, stdout) = start_reading(&mut cmd);
    let attached: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).ok();
        panic!("observe's first line {line:?}, stderr {err}")
    });
    assert_eq!(attached["event"], "attached", "{attached}");
    // The late copies are either counted through the kprobe or named as not seen, with the reason.
    let kprobe = attached["tracepoints"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t == "kprobe:skb_copy_ubufs");
    let said_why = attached["not_seen"].as_array().unwrap().iter().any(|b| {
        b["what"]
            .as_str()
            .unwrap()
            .starts_with("bytes copied after a zero-copy send")
            && b["why"].as_str().unwrap().contains("skb_copy_ubufs")
    });
    assert!(
        kprobe != said_why,
        "late copies neither attached nor explained: {attached}"
    );
    let ids = attached["programs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    (Reaped(child), ids, stdout)
}

/// Asserts `seen` is within 1% of `reported`, which must be non-zero.
pub fn within_one_percent(what: &str, seen: u64, reported: u64) {
    assert!(reported > 0, "{what}: the program reported 0");
    let diff = seen.abs_diff(reported) as f64 / reported as f64;
    assert!(
        diff <= 0.01,
        "{what}: observe saw {seen}, the program reported {reported}"
    );
}

/// The counters of the `process` line of `pid` in an observer's summary.
pub fn totals_of(summary: &str, pid: u64) -> Value {
    json_lines(summary)
        .into_iter()
        .find(|v| v["event"] == "process" && v["pid"] == pid)
        .unwrap_or_else(|| panic!("no totals for pid {pid} in {summary}"))["counters"]
        .clone()
}
