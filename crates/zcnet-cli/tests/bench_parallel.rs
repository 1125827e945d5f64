//! `-P N` in `zcnet bench tcp|udp|rx` (and `bench tcp|udp|rx` apart): a run's N streams side by side, each on a thread with its own
//! sender (and, on this host, its own receiver process), a row per stream and a sum row, every
//! stream's bytes verified by its receiver as a single stream's are.

mod common;

use std::io::BufRead;
use std::process::Command;

use common::{
    ZCNET, interrupt_and_finish, json_rows, listen_command, next_rows, rx_modes_of_whole,
    start_listener, stdout_of,
};
use serde_json::Value;

fn u(row: &Value, key: &str) -> u64 {
    row[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {row}"))
}

/// The stream rows of `rows` (numbered 1 to `n`, in order) and their sum row, checked to add up.
fn streams_and_sum(rows: &[Value], n: u64) -> (Vec<&Value>, &Value) {
    assert_eq!(rows.len() as u64, n + 1, "{rows:#?}");
    let (streams, sum) = rows.split_at(n as usize);
    let sum = &sum[0];
    for (i, row) in streams.iter().enumerate() {
        assert_eq!(row["stream"], i as u64 + 1, "{row}");
        assert!(u(row, "bytes") > 0, "{row}");
    }
    assert_eq!(sum["stream"], "sum", "{sum}");
    assert_eq!(u(sum, "streams"), n, "{sum}");
    let total: u64 = streams.iter().map(|r| u(r, "bytes")).sum();
    assert_eq!(u(sum, "bytes"), total, "{sum}");
    (streams.iter().collect(), sum)
}

/// The JSON rows of a half-second zero-copy `bench tcp` of `n` streams with `extra` flags.
fn tcp_zerocopy(extra: &[&str], n: u64) -> Vec<Value> {
    let out = stdout_of(
        Command::new(ZCNET)
            .args(["bench", "tcp", "-P", &n.to_string(), "--mode", "zerocopy"])
            .args(["--duration", "0.5", "--json", "--interval", "0"])
            .args(extra),
        "bench tcp -P",
    );
    json_rows(&out)
}

#[test]
fn tcp_runs_four_streams_each_verified_and_a_sum() {
    let rows = tcp_zerocopy(&[], 4);
    let (streams, sum) = streams_and_sum(&rows, 4);
    for row in streams {
        // Each stream's receiver took every byte sent and found none wrong.
        assert_eq!(u(row, "received_bytes"), u(row, "bytes"), "{row}");
        assert_eq!(u(row, "data_errors"), 0, "{row}");
    }
    assert_eq!(u(sum, "received_bytes"), u(sum, "bytes"), "{sum}");
    assert_eq!(u(sum, "data_errors"), 0, "{sum}");

    // The table names each row's stream, the sum last.
    let table = stdout_of(
        Command::new(ZCNET).args([
            "bench",
            "tcp",
            "-P",
            "2",
            "--mode",
            "copy",
            "--duration",
            "0.3",
            "--interval",
            "0",
        ]),
        "bench tcp -P 2",
    );
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("stream"), "{table}");
    let stream_of = |line: &str| line.split_whitespace().nth(2).map(str::to_string);
    let named: Vec<Option<String>> = lines[1..4].iter().map(|l| stream_of(l)).collect();
    assert_eq!(
        named,
        [Some("1".into()), Some("2".into()), Some("sum".into())],
        "{table}"
    );
}

/// A half-second `bench udp --mode copy` run's flags, rows as JSON.
const UDP_HALF_SECOND: &[&str] = &[
    "--mode",
    "copy",
    "--duration",
    "0.5",
    "--json",
    "--interval",
    "0",
];

#[test]
fn udp_runs_four_streams_each_verified_and_a_sum() {
    let out = Command::new(ZCNET)
        .args(["bench", "udp", "-P", "4"])
        .args(UDP_HALF_SECOND)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Four floods into four receivers may outrun one: the bench then fails naming the loss.
    assert!(
        out.status.success() || stderr.contains("datagrams lost"),
        "{}\n{stderr}",
        out.status
    );
    let rows = json_rows(&String::from_utf8_lossy(&out.stdout));
    let (streams, sum) = streams_and_sum(&rows, 4);
    for row in streams {
        // Every datagram sent arrived or is counted lost, and what arrived is the pattern.
        assert_eq!(
            u(row, "received_datagrams") + u(row, "lost"),
            u(row, "sent_datagrams") + u(row, "duplicated"),
            "{row}"
        );
        assert_eq!(u(row, "data_errors"), 0, "{row}");
    }
    assert_eq!(u(sum, "data_errors"), 0, "{sum}");
}

#[test]
fn rx_receives_four_streams_each_whole_and_a_sum() {
    let out = stdout_of(
        Command::new(ZCNET)
            .args(["bench", "rx", "-P", "4", "--rounds", "1", "--mib", "16"])
            .args(["--json", "--interval", "0"]),
        "bench rx -P 4",
    );
    let rows = json_rows(&out);
    // A row per stream and a sum for each receive mode.
    assert_eq!(rows.len(), 10, "{rows:#?}");
    for mode in rows.chunks(5) {
        let (streams, sum) = streams_and_sum(mode, 4);
        for row in streams {
            // Each stream's receiver took the whole --mib (16 MiB), every byte checked.
            assert_eq!(u(row, "bytes"), 16 << 20, "{row}");
            assert_eq!(row["verified"], true, "{row}");
            assert_eq!(row["mode"], sum["mode"], "{row}");
        }
        assert_eq!(u(sum, "bytes"), 64 << 20, "{sum}");
    }
}

#[test]
fn tcp_apart_sends_two_streams_that_the_receiver_verifies() {
    let (mut listener, addr, mut stdout) = start_listener(&mut listen_command("tcp"));
    let rows = tcp_zerocopy(&["--connect", &addr.to_string()], 2);
    let (streams, _) = streams_and_sum(&rows, 2);
    let mut sent: Vec<u64> = streams.iter().map(|r| u(r, "bytes")).collect();
    let mut received = Vec::new();
    let mut line = String::new();
    while received.len() < 2 {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the receiver ended"
        );
        let row: Value = serde_json::from_str(&line).unwrap();
        if row["role"] == "receiver" {
            assert_eq!(row["complete"], true, "{row}");
            assert_eq!(u(&row, "data_errors"), 0, "{row}");
            received.push(u(&row, "bytes"));
        }
    }
    listener.kill().unwrap();
    listener.wait().unwrap();
    sent.sort_unstable();
    received.sort_unstable();
    assert_eq!(sent, received);
}

/// `bench udp --connect -P 2` sends two streams side by side to one `--listen` receiver, which
/// takes both as one run's streams and reports each: what each stream sent arrived or is counted
/// lost, the pattern intact, and the receiver's counts are the sender's.
#[test]
fn udp_apart_sends_two_streams_that_one_receiver_takes_and_counts() {
    let (mut listener, addr, mut stdout) = start_listener(&mut listen_command("udp"));
    let out = stdout_of(
        Command::new(ZCNET)
            .args(["bench", "udp", "--connect", &addr.to_string(), "-P", "2"])
            .args(UDP_HALF_SECOND),
        "bench udp --connect -P 2",
    );
    let rows = json_rows(&out);
    let (streams, _) = streams_and_sum(&rows, 2);
    let mut received = next_rows(&mut stdout, 2);
    listener.kill().unwrap();
    listener.wait().unwrap();
    assert_eq!(received.len(), 2, "{received:#?}");
    received.sort_by_key(|r| u(r, "stream"));
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for (n, row) in received.iter().enumerate() {
        assert_eq!(row["role"], "receiver", "{row}");
        assert_eq!(
            (u(row, "stream"), u(row, "streams")),
            (n as u64 + 1, 2),
            "{row}"
        );
        assert_eq!(row["end"], "end datagram", "{row}");
        assert_eq!((u(row, "foreign"), u(row, "rejected")), (0, 0), "{row}");
        assert_eq!(row["verified"], true, "{row}");
        assert_eq!(u(row, "data_errors"), 0, "{row}");
        assert_eq!(
            u(row, "datagrams") + u(row, "lost"),
            u(row, "sent_datagrams") + u(row, "duplicated"),
            "{row}"
        );
        counts.push((u(row, "sent_datagrams"), u(row, "sent_bytes")));
    }
    // The receiver numbers the streams as their headers arrive: each is one of the sender's.
    let mut sent: Vec<(u64, u64)> = streams
        .iter()
        .map(|r| (u(r, "datagrams"), u(r, "bytes")))
        .collect();
    sent.sort_unstable();
    counts.sort_unstable();
    assert_eq!(sent, counts);
}

/// `bench rx --connect -P 2` sends each mode's connection as two streams side by side, and a
/// `--listen -P 2` receiver takes both in that mode's turn, each whole and verified.
#[test]
fn rx_apart_sends_two_streams_per_mode_that_the_receiver_takes_whole() {
    let (listener, addr, mut stdout) = start_listener(listen_command("rx").args(["-P", "2"]));
    let out = stdout_of(
        Command::new(ZCNET)
            .args(["bench", "rx", "--connect", &addr.to_string(), "-P", "2"])
            .args(["--rounds", "1", "--mib", "4", "--json"]),
        "bench rx --connect -P 2",
    );
    let received = next_rows(&mut stdout, 4);
    interrupt_and_finish(listener, stdout);
    let sent = json_rows(&out);
    // Each mode's two streams (the default --mode copy,zerocopy) and their sum.
    assert_eq!(sent.len(), 6, "{sent:#?}");
    for mode in sent.chunks(3) {
        let (streams, sum) = streams_and_sum(mode, 2);
        for row in streams {
            assert_eq!(u(row, "bytes"), 4 << 20, "{row}");
            assert_eq!(row["role"], "sender", "{row}");
        }
        assert_eq!(u(sum, "bytes"), 8 << 20, "{sum}");
    }
    assert_eq!(
        rx_modes_of_whole(&received, 4 << 20),
        ["copy", "copy", "zerocopy", "zerocopy"],
        "{received:?}"
    );
}

#[test]
fn streams_beyond_the_limit_or_on_a_listener_are_usage_errors() {
    for args in [
        &["bench", "tcp", "-P", "0"][..],
        &["bench", "tcp", "-P", "65"],
        &["bench", "udp", "-P", "65", "--connect", "127.0.0.1:9"],
        &["bench", "tcp", "-P", "2", "--listen", "127.0.0.1:0"],
        &["bench", "rx", "-P", "65"],
        // (bench vsock -P runs in the guest suite: no vsock is connected to here.)
        &["bench", "vsock", "-P", "65"],
        &["bench", "vsock", "-P", "2", "--listen"],
    ] {
        let out = Command::new(ZCNET).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}
