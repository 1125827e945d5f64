//! The per-send latency table of `zcnet bench tcp|udp --latency`: under the rows, each step's p50,
//! p99 and max from the `latency` object the run put in each row ([`crate::bench::run::latency`]).

use serde_json::json;

use crate::report::{Column, Row, object, print_rows};

const COLUMNS: &[Column] = &[
    ("path", "path"),
    ("round", "round"),
    ("api", "api"),
    ("mode", "mode"),
    ("size", "size"),
    ("step", "send call to"),
    ("count", "sends"),
    ("p50_us", "p50 us"),
    ("p99_us", "p99 us"),
    ("max_us", "max us"),
];

/// A table row per row with a `latency` object and per step that some send reached.
fn step_rows(rows: &[Row]) -> Vec<Row> {
    let mut out = Vec::new();
    for row in rows {
        let Some(latency) = row.get("latency") else {
            continue;
        };
        for name in ["scheduled", "sent", "acked", "freed"] {
            let step = &latency[name];
            if step["count"].as_u64().unwrap_or(0) == 0 {
                continue;
            }
            let mut r = json!({"step": name});
            for key in ["path", "round", "stream", "api", "mode", "size"] {
                if let Some(v) = row.get(key) {
                    r[key] = v.clone();
                }
            }
            for key in ["count", "p50_us", "p99_us", "max_us"] {
                r[key] = step[key].clone();
            }
            out.push(object(r));
        }
    }
    out
}

/// Prints the latency table of `rows` when any has a `latency` object; with parallel streams (`-P`)
/// each line names its stream.
pub(crate) fn print_table(rows: &[Row]) {
    let steps = step_rows(rows);
    if !rows.iter().any(|r| r.contains_key("latency")) {
        return;
    }
    if steps.iter().any(|r| r.contains_key("stream")) {
        let mut columns = COLUMNS.to_vec();
        columns.insert(2, ("stream", "stream"));
        print_rows(&steps, &columns, false);
    } else {
        print_rows(&steps, COLUMNS, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_per_step_reached() {
        let latency = json!({
            "sends": 2, "unmatched": 0,
            "scheduled": {"count": 2, "p50_us": 1.0, "p99_us": 2.0, "max_us": 2.0},
            "sent": {"count": 2, "p50_us": 3.0, "p99_us": 4.0, "max_us": 4.0},
            "acked": {"count": 0, "p50_us": null, "p99_us": null, "max_us": null},
            "freed": {"count": 1, "p50_us": 9.0, "p99_us": 9.0, "max_us": 9.0},
        });
        let row =
            object(json!({"api": "sendmsg", "mode": "zerocopy", "stream": 2, "latency": latency}));
        let plain = object(json!({"api": "sendmsg", "mode": "copy"}));
        let steps = step_rows(&[row, plain]);
        let names: Vec<_> = steps.iter().map(|r| r["step"].as_str().unwrap()).collect();
        assert_eq!(names, ["scheduled", "sent", "freed"]);
        assert_eq!(steps[2]["p99_us"], 9.0);
        assert_eq!(steps[1]["mode"], "zerocopy");
        assert_eq!(steps[0]["stream"], 2, "a parallel stream's steps name it");
    }
}
