//! Report: The totals of a `zcnet bench tcp|udp` run over its rounds, a row per API, mode and size, and auto
//! against the better of copy and zerocopy of its own round (the median of the rounds' ratios).

use serde_json::{Value, json};

use crate::bench::plan;
use crate::bench::report::latency;
use crate::bench::report::streams;
use crate::report::{self, Column, Row, object, print_rows};

/// The totals over every round of each api and mode, and auto against the better of copy and
/// zerocopy of the same api.
pub(crate) fn totals(rows: &[Row]) -> Vec<Row> {
    let mut groups: Vec<(&Value, &str, &Value)> = Vec::new();
    for row in rows {
        if let Some(mode) = row.get("mode").and_then(Value::as_str) {
            let group = (&row["api"], mode, &row["size"]);
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
    }
    let num = |row: &Row, key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let mut out: Vec<Row> = groups
        .iter()
        .map(|&(api, mode, size)| {
            let of_group = rows
                .iter()
                .filter(|r| r["api"] == *api && r["mode"] == mode && r["size"] == *size);
            let (mut bytes, mut seconds, mut cpu) = (0.0, 0.0, 0.0);
            for r in of_group {
                bytes += num(r, "bytes");
                seconds += num(r, "seconds");
                cpu += num(r, "cpu_user_s") + num(r, "cpu_sys_s");
            }
            object(json!({
                "total": true,
                "bench": rows[0]["bench"],
                "path": rows[0]["path"],
                "api": api,
                "mode": mode,
                "size": size,
                "bytes": bytes as u64,
                "seconds": seconds,
                "gbit_per_s": if seconds > 0.0 { bytes * 8.0 / seconds / 1e9 } else { 0.0 },
                "cpu_us_per_mb": if bytes > 0.0 { cpu * 1e6 / (bytes / 1e6) } else { 0.0 },
            }))
        })
        .collect();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for (api, _, size) in groups.iter().filter(|(_, mode, _)| *mode == "auto") {
        let total = |m: &str| {
            out.iter()
                .find(|r| r["api"] == **api && r["mode"] == m && r["size"] == **size)
        };
        let (Some(auto), Some(copy), Some(zc)) = (total("auto"), total("copy"), total("zerocopy"))
        else {
            continue;
        };
        let best_rate = num(copy, "gbit_per_s").max(num(zc, "gbit_per_s"));
        let best_cost = num(copy, "cpu_us_per_mb").min(num(zc, "cpu_us_per_mb"));
        let vs_best_gbit = ratio(num(auto, "gbit_per_s"), best_rate);
        let vs_best_cpu = ratio(num(auto, "cpu_us_per_mb"), best_cost);
        let (rate, cost) = auto_vs_best_per_round(rows, api, size);
        let row = out
            .iter_mut()
            .find(|r| r["api"] == **api && r["mode"] == "auto" && r["size"] == **size)
            .expect("found above");
        row.insert("auto_vs_best_gbit".into(), json!(vs_best_gbit));
        row.insert("auto_vs_best_cpu".into(), json!(vs_best_cpu));
        row.insert("auto_vs_best_gbit_median".into(), json!(median(rate)));
        row.insert("auto_vs_best_cpu_median".into(), json!(median(cost)));
    }
    out
}

/// Auto rows of `api` and `size` against the better of copy and zerocopy of the same round, api and
/// size, round by round: its throughput over the higher one, its CPU per MB over the lower one.
fn auto_vs_best_per_round(rows: &[Row], api: &Value, size: &Value) -> (Vec<f64>, Vec<f64>) {
    let num = |row: &Row, key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let (mut rate, mut cost) = (Vec::new(), Vec::new());
    for auto in rows
        .iter()
        .filter(|r| r["mode"] == "auto" && r["api"] == *api && r["size"] == *size)
    {
        let of = |mode: &str| {
            rows.iter().find(|r| {
                r["mode"] == mode
                    && r.get("round") == auto.get("round")
                    && r["api"] == auto["api"]
                    && r["size"] == auto["size"]
            })
        };
        let (Some(copy), Some(zc)) = (of("copy"), of("zerocopy")) else {
            continue;
        };
        let best_rate = num(copy, "gbit_per_s").max(num(zc, "gbit_per_s"));
        let best_cost = num(copy, "cpu_us_per_mb").min(num(zc, "cpu_us_per_mb"));
        if best_rate > 0.0 && best_cost > 0.0 {
            rate.push(num(auto, "gbit_per_s") / best_rate);
            cost.push(num(auto, "cpu_us_per_mb") / best_cost);
        }
    }
    (rate, cost)
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// The columns of a run's row.
const COLUMNS: &[Column] = &[
    ("path", "path"),
    ("round", "round"),
    ("api", "api"),
    ("mode", "mode"),
    ("size", "size"),
    ("huge_pages", "huge pages"),
    ("gbit_per_s", "Gbit/s"),
    ("calls", "calls"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("cpu_ns_per_packet", "CPU ns/pkt"),
    ("zc_ids", "zc ids"),
    ("copied_ids", "copied ids"),
    ("notifications", "notifs"),
    ("enobufs", "ENOBUFS"),
    ("fallbacks", "fallbacks"),
    ("rx_cpu_us_per_mb", "rx us/MB"),
    ("kernel_copied_per_byte", "kernel copied/B"),
    ("lost", "lost"),
    ("data_errors", "data errors"),
    ("why", "why"),
];

const TOTAL_COLUMNS: &[Column] = &[
    ("path", "path"),
    ("api", "api"),
    ("mode", "total of rounds"),
    ("size", "size"),
    ("bytes", "bytes"),
    ("gbit_per_s", "Gbit/s"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("auto_vs_best_gbit", "auto/best Gbit/s"),
    ("auto_vs_best_cpu", "auto/best CPU per MB"),
    (
        "auto_vs_best_gbit_median",
        "median of rounds: auto/best Gbit/s",
    ),
    ("auto_vs_best_cpu_median", "CPU per MB"),
];

/// What the summary shows, from the flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown {
    /// `--json`.
    pub(crate) json: bool,
    /// More than one round (`--rounds`): totals follow the rows.
    pub(crate) rounds: bool,
    /// A sweep (`--sizes`): each auto line names its size.
    pub(crate) sweep: bool,
    /// Parallel streams (`-P`): the table names each row's stream, and totals are of the sums.
    pub(crate) streams: bool,
}

/// Prints the rows of a run, their totals over rounds, and the lines that say why auto chose as
/// it did and what kept a run from sending zero-copy.
pub(crate) fn print_summary(rows: &[Row], shown: Shown) {
    if shown.streams {
        let mut columns = COLUMNS.to_vec();
        columns.insert(2, ("stream", "stream"));
        print_rows(rows, &columns, shown.json);
    } else {
        print_rows(rows, COLUMNS, shown.json);
    }
    if !shown.json {
        latency::print_table(rows);
    }
    let runs = streams::runs(rows);
    if shown.rounds && !runs.is_empty() {
        print_rows(&totals(&runs), TOTAL_COLUMNS, shown.json);
    }
    if !shown.json {
        for row in rows {
            if let Some(why) = row.get("auto_reason").and_then(Value::as_str) {
                // A sweep names the size each line is about.
                let at = match row.get("size").and_then(Value::as_u64) {
                    Some(size) if shown.sweep => format!(" at {}", plan::human(size)),
                    _ => String::new(),
                };
                let of = match row.get("stream").and_then(Value::as_u64) {
                    Some(n) => format!(" (stream {n})"),
                    None => String::new(),
                };
                report::emit(&format!("auto{at}{of}: {why}\n"));
            }
        }
    }
    // A run whose output's reader went away ends quietly: no rows were read, so no note about them.
    if report::output_closed() {
        return;
    }
    // Said once even under --json: a run that copied for want of locked memory must not pass for
    // a zero-copy one.
    for reason in ["memlock_reason", "enobufs_reason", "kernel_copied_reason"] {
        report::say_once(rows, reason);
    }
    // Nor a run whose peer took less than was sent.
    for row in rows {
        if let Some(why) = row.get("slow_peer").and_then(Value::as_str) {
            let name = |key| row.get(key).and_then(Value::as_str).unwrap_or("?");
            eprintln!(
                "zcnet: {} {} {}: {why}",
                name("bench"),
                name("api"),
                name("mode")
            );
        }
    }
    // Nor may io_uring sends from unregistered buffers pass for fixed sends.
    if let Some(why) = rows
        .iter()
        .find_map(|row| row.get("registered").and_then(Value::as_str))
    {
        eprintln!("zcnet: io_uring sent from unregistered buffers: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::object;
    use serde_json::json;

    fn run(round: u32, mode: &str, gbit: f64, cpu: f64) -> Row {
        object(
            json!({"round": round, "api": "sendmsg", "mode": mode, "size": 1024,
                      "gbit_per_s": gbit, "cpu_us_per_mb": cpu}),
        )
    }

    #[test]
    fn auto_is_compared_with_the_best_of_its_own_round() {
        let rows = vec![
            run(1, "copy", 10.0, 100.0),
            run(1, "zerocopy", 8.0, 120.0),
            run(1, "auto", 9.0, 110.0),
            run(2, "auto", 12.0, 90.0),
            run(2, "zerocopy", 6.0, 150.0),
            run(2, "copy", 8.0, 100.0),
            // A round cut short (Ctrl-C) before copy and zerocopy ran is left out.
            run(3, "auto", 1.0, 1000.0),
        ];
        let (rate, cost) = auto_vs_best_per_round(&rows, &json!("sendmsg"), &json!(1024));
        assert_eq!(rate, vec![0.9, 1.5]);
        assert_eq!(cost, vec![1.1, 0.9]);
        assert_eq!(median(rate), Some(1.2));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }
}
