//! Report: the sum row of a run's parallel streams (`-P N`), as iperf3 and neper print one after
//! the streams: bytes, calls, CPU time and the counters summed, the rate of all bytes over the
//! longest stream's time, CPU per MB of all of them, and whether each stream was whole.

use serde_json::{Value, json};

use crate::report::{Row, gbit_per_s};

/// Counts that add up over streams.
const SUMMED: &[&str] = &[
    "bytes",
    "calls",
    "cpu_user_s",
    "cpu_sys_s",
    "zc_ids",
    "copied_ids",
    "notifications",
    "enobufs",
    "fallbacks",
    "zc_calls",
    "copy_small",
    "policy_switches",
    "received_bytes",
    "received_datagrams",
    "sent_datagrams",
    "data_errors",
    "rx_socket_drops",
    "lost",
    "duplicated",
    "reordered",
    "delivered_bytes",
    "in_flight_bytes",
    "mapped_bytes",
    "copied_bytes",
    "zerocopy_calls",
    "copy_calls",
    "recv_calls",
    "sender_zerocopy_calls",
    "sender_copy_calls",
    "ctx_switches",
    "zcrx_bytes",
    "zcrx_copied_bytes",
];

/// Fields every stream of a run shares, taken from the first.
const SHARED: &[&str] = &[
    "bench",
    "role",
    "path",
    "ip",
    "api",
    "mode",
    "sender_mode",
    "size",
    "type",
    "buf_size",
    "round",
    "rounds",
    "verified",
    // The kernel's copies are counted for the process: each stream's row has the run's figure.
    "kernel_copied_per_byte",
    "kernel_copied_reason",
];

/// Whether `row` is one stream of a run of several.
fn is_stream(row: &Row) -> bool {
    row.get("stream").is_some_and(Value::is_u64)
}

/// `rows` with a sum row after the streams of each run of several.
pub(crate) fn with_sums(rows: &[Row]) -> Vec<Row> {
    let mut out = Vec::with_capacity(rows.len());
    let mut at = 0;
    while at < rows.len() {
        if !is_stream(&rows[at]) {
            out.push(rows[at].clone());
            at += 1;
            continue;
        }
        let same_run = |r: &Row| {
            is_stream(r)
                && ["round", "size", "mode", "api"]
                    .iter()
                    .all(|k| r.get(*k) == rows[at].get(*k))
        };
        let end = at + rows[at..].iter().take_while(|r| same_run(r)).count();
        out.extend(rows[at..end].iter().cloned());
        out.push(sum(&rows[at..end]));
        at = end;
    }
    out
}

/// The rows that stand for a whole run: a single stream's, or the sum of several.
pub(crate) fn runs(rows: &[Row]) -> Vec<Row> {
    rows.iter().filter(|r| !is_stream(r)).cloned().collect()
}

/// The sum row of `streams` (one run's, at least one).
fn sum(streams: &[Row]) -> Row {
    let mut row = Row::new();
    for key in SHARED {
        if let Some(v) = streams[0].get(*key) {
            row.insert((*key).into(), v.clone());
        }
    }
    row.insert("stream".into(), json!("sum"));
    row.insert("streams".into(), json!(streams.len()));
    let num = |r: &Row, key: &str| r.get(key).and_then(Value::as_f64);
    let seconds = streams
        .iter()
        .filter_map(|r| num(r, "seconds"))
        .fold(0.0, f64::max);
    row.insert("seconds".into(), json!(seconds));
    for key in SUMMED {
        if streams
            .iter()
            .any(|r| r.get(*key).is_some_and(Value::is_number))
        {
            let total: f64 = streams.iter().filter_map(|r| num(r, key)).sum();
            let value = if streams
                .iter()
                .all(|r| r.get(*key).is_none_or(Value::is_u64))
            {
                json!(total as u64)
            } else {
                json!(total)
            };
            row.insert((*key).into(), value);
        }
    }
    let bytes = row.get("bytes").and_then(Value::as_u64).unwrap_or(0);
    // A slow peer's stream is rated by what it delivered.
    let rated = streams
        .iter()
        .map(|r| {
            r.get("delivered_bytes")
                .or_else(|| r.get("bytes"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        })
        .sum();
    row.insert("gbit_per_s".into(), json!(gbit_per_s(rated, seconds)));
    let cpu = num(&row, "cpu_user_s").unwrap_or(0.0) + num(&row, "cpu_sys_s").unwrap_or(0.0);
    let per_mb = if bytes == 0 {
        0.0
    } else {
        cpu * 1e6 / (bytes as f64 / 1e6)
    };
    row.insert("cpu_us_per_mb".into(), json!(per_mb));
    // The receivers' CPU per MB, over every byte they took.
    let received: f64 = streams
        .iter()
        .filter_map(|r| num(r, "received_bytes"))
        .sum();
    if received > 0.0 {
        let rx_us: f64 = streams
            .iter()
            .filter_map(|r| Some(num(r, "rx_cpu_us_per_mb")? * num(r, "received_bytes")?))
            .sum();
        row.insert("rx_cpu_us_per_mb".into(), json!(rx_us / received));
    }
    // The share of received bytes mapped (bench rx).
    if let Some(mapped) = row.get("mapped_bytes").and_then(Value::as_u64) {
        let pct = if bytes == 0 {
            0.0
        } else {
            mapped as f64 * 100.0 / bytes as f64
        };
        row.insert("mapped_pct".into(), json!(pct));
    }
    let any = |key: &str| {
        streams
            .iter()
            .any(|r| r.get(key).and_then(Value::as_bool) == Some(true))
    };
    row.insert("interrupted".into(), json!(any("interrupted")));
    row.insert(
        "huge_pages".into(),
        json!(
            streams
                .iter()
                .all(|r| r.get("huge_pages").and_then(Value::as_bool) == Some(true))
        ),
    );
    let cut: Vec<u64> = streams
        .iter()
        .filter(|r| {
            ["stalled", "failed"]
                .iter()
                .any(|k| r.get(*k).is_some_and(Value::is_string))
        })
        .filter_map(|r| r.get("stream").and_then(Value::as_u64))
        .collect();
    row.insert("streams_cut_short".into(), json!(cut));
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::object;

    fn stream(n: u32, bytes: u64, seconds: f64) -> Row {
        object(
            json!({"round": 1, "api": "sendmsg", "mode": "zerocopy", "size": 65536,
            "stream": n, "bytes": bytes, "seconds": seconds, "cpu_user_s": 0.1, "cpu_sys_s": 0.4,
            "received_bytes": bytes, "rx_cpu_us_per_mb": 100.0, "data_errors": 0}),
        )
    }

    #[test]
    fn the_sum_adds_the_streams_and_rates_them_over_the_longest() {
        let rows = vec![stream(1, 1_000_000, 2.0), stream(2, 3_000_000, 1.0)];
        let shown = with_sums(&rows);
        assert_eq!(shown.len(), 3);
        let sum = &shown[2];
        assert_eq!(sum["stream"], "sum");
        assert_eq!(sum["bytes"], 4_000_000);
        assert_eq!(sum["received_bytes"], 4_000_000);
        assert_eq!(sum["seconds"], 2.0);
        assert_eq!(sum["gbit_per_s"], gbit_per_s(4_000_000, 2.0));
        assert_eq!(sum["rx_cpu_us_per_mb"], 100.0);
        assert_eq!(runs(&shown).len(), 1);
        // A single stream's row stands for its run as it is.
        let single = object(json!({"round": 1, "bytes": 5}));
        assert_eq!(with_sums(std::slice::from_ref(&single)), vec![single]);
    }
}
