//! `zcnet::observe` on the calling process, through the `observe_prometheus` example: what the
//! kernel's tracepoints counted for its sender's socket equals the sender's own `TxStats`, on the
//! `sendmsg` path and on io_uring.

use std::collections::HashMap;

/// Runs the example (with `path`) where tracefs is reachable; returns the sender's figures from its
/// `# sender:` comment and the process's samples (summed over its sockets), by metric name.
fn run_example(path: &str) -> (HashMap<String, u64>, HashMap<String, u64>) {
    let out = testnet::with_tracefs(env!("CARGO"))
        .args(["run", "--quiet", "--release", "-p", "zcnet", "--example"])
        .args(["observe_prometheus", "--", path])
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "example failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sender_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# sender: "))
        .expect("a # sender: line");
    let words: Vec<&str> = sender_line.split_whitespace().collect();
    let sender = words
        .chunks_exact(2)
        .filter_map(|kv| Some((kv[0].to_string(), kv[1].parse().ok()?)))
        .collect();
    let mut samples: HashMap<String, u64> = HashMap::new();
    for line in stdout.lines().filter(|l| l.starts_with("zcnet_")) {
        let (name, value) = line.rsplit_once(' ').expect("a sample");
        let metric = name.split('{').next().unwrap().to_string();
        *samples.entry(metric).or_default() += value.parse::<u64>().expect("a count");
    }
    (sender, samples)
}

#[test]
fn own_process_counters_equal_the_senders_stats() {
    let test = "own_process_counters_equal_the_senders_stats";
    if !testnet::privileged(test) {
        return;
    }
    let (sender, seen) = run_example("sendmsg");
    assert_eq!(seen["zcnet_zc_sends_total"], sender["zc_calls"]);
    assert_eq!(seen["zcnet_zc_bytes_total"], sender["bytes"]);
    assert_eq!(seen["zcnet_notifications_total"], sender["notifications"]);
    assert_eq!(seen["zcnet_copied_completions_total"], sender["copied_ids"]);
    // Its own receiver copied every byte out of the socket.
    assert_eq!(seen["zcnet_rx_copied_bytes_total"], sender["bytes"]);

    let (sender, seen) = run_example("io_uring");
    assert_eq!(seen["zcnet_uring_zc_requests_total"], sender["zc_calls"]);
    assert_eq!(seen["zcnet_uring_zc_bytes_total"], sender["bytes"]);
    assert_eq!(
        seen["zcnet_uring_notifications_total"],
        sender["notifications"]
    );
    assert_eq!(
        seen["zcnet_uring_copied_notifications_total"],
        sender["copied_ids"]
    );
    assert_eq!(seen["zcnet_zc_sends_total"], 0);
}
