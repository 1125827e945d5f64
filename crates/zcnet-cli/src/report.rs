//! Benchmark and probe output: a human table, or one JSON object per line with `--json`.
//!
//! Every bench builds its rows as JSON objects (so the field names of the JSON output are the single
//! source of truth) and hands them here with the columns the table shows.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};
use zcnet::probe::ResourceUsage;

/// One output row: field name to value, in insertion order of the JSON object.
pub type Row = Map<String, Value>;

/// The row a `json!({ … })` object literal builds (any other value gives an empty row).
pub fn object(value: Value) -> Row {
    match value {
        Value::Object(map) => map,
        _ => Row::new(),
    }
}

/// Says on standard error, once, the first of `rows`' text fields `field` (a reason that applies to
/// every row, such as why a figure is missing), even under `--json`.
pub fn say_once(rows: &[Row], field: &str) {
    if let Some(why) = rows
        .iter()
        .find_map(|row| row.get(field).and_then(Value::as_str))
    {
        eprintln!("zcnet: {why}");
    }
}

/// A table column: the row field it shows and its heading.
pub type Column = (&'static str, &'static str);

/// Prints `rows` as JSON lines (`json`) or as an aligned table of `columns`.
pub fn print_rows(rows: &[Row], columns: &[Column], json: bool) {
    if json {
        for row in rows {
            emit(&format!("{}\n", Value::Object(row.clone())));
        }
        return;
    }
    emit(&table(rows, columns));
}

/// Whether writing the output failed (not counting a closed pipe).
static OUTPUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether a write found the output's reader gone (`EPIPE`).
static OUTPUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output and flushes it. A closed pipe (`zcnet … | head`) is not an error
/// but the end of the run: from the first write that finds it ([`output_closed`]) nothing more is
/// written, and the run stops as on Ctrl-C ([`crate::live::interrupted`]), cleans up and exits
/// quietly. Other write errors (a full disk, `> /dev/full`) are reported once on standard error, and
/// the run then exits 1 (see [`output_failed`]).
pub fn emit(text: &str) {
    if output_closed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            OUTPUT_CLOSED.store(true, Ordering::Relaxed);
        }
        Err(e) => {
            if !OUTPUT_FAILED.swap(true, Ordering::Relaxed) {
                eprintln!("zcnet: error: writing the output: {e}");
            }
        }
    }
}

/// Whether the output's reader is gone: the run is to stop, as on Ctrl-C.
pub fn output_closed() -> bool {
    OUTPUT_CLOSED.load(Ordering::Relaxed)
}

/// `println!` through [`emit`]: a failed write is reported and fails the run, never a panic.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::report::emit(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// Whether a write of [`emit`] failed: the run's figures did not all reach their reader.
pub fn output_failed() -> bool {
    OUTPUT_FAILED.load(Ordering::Relaxed)
}

/// Renders an aligned text table; numbers are right-aligned, floats shown with 3 significant decimals.
pub fn table(rows: &[Row], columns: &[Column]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| columns.iter().map(|(key, _)| cell(row.get(*key))).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, head))| {
            cells
                .iter()
                .map(|r| r[i].len())
                .chain([head.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, fields: Vec<&str>, numeric: &dyn Fn(usize) -> bool| {
        let parts: Vec<String> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if numeric(i) {
                    format!("{f:>w$}", w = widths[i])
                } else {
                    format!("{f:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    let is_numeric = |i: usize| {
        rows.iter()
            .all(|r| matches!(r.get(columns[i].0), Some(Value::Number(_)) | None))
    };
    line(
        &mut out,
        columns.iter().map(|(_, h)| *h).collect(),
        &is_numeric,
    );
    for row in &cells {
        line(
            &mut out,
            row.iter().map(String::as_str).collect(),
            &is_numeric,
        );
    }
    out
}

fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f != 0.0 && f.abs() < 0.01 {
                format!("{f:.5}")
            } else {
                format!("{f:.3}")
            }
        }
        Some(other) => other.to_string(),
    }
}

/// Library type names in error messages, and the command-line flags that mean the same.
const FLAG_WORDS: &[(&str, &str)] = &[
    ("AttachMode::Generic", "--attach generic"),
    ("AttachMode::Driver", "--attach driver"),
    ("RxMode::Copy", "--mode copy"),
    ("RxMode::ZeroCopy", "--mode zerocopy"),
    ("Mode::ZeroCopy", "--mode zerocopy"),
    ("Mode::Copy", "--mode copy"),
    ("Mode::Auto", "--mode auto"),
];

/// An error message as a command-line user reads it: the library's type names (`use Mode::Copy`)
/// become the flags that choose them (`use --mode copy`).
pub fn in_flag_words(message: &str) -> String {
    FLAG_WORDS
        .iter()
        .fold(message.to_string(), |m, (library, flag)| {
            m.replace(library, flag)
        })
}

/// The share of the run's wall time the sending thread spent on a CPU: below 1 when it waited (for
/// buffer space or completions) or, on a busy host, when other tasks had the CPU. Throughput is this
/// share over the CPU time per byte, so rates of modes that ran with different shares differ by it.
pub fn cpu_share(usage: &ResourceUsage, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    (usage.user + usage.system).as_secs_f64() / seconds
}

/// CPU microseconds spent per megabyte (10^6 bytes) moved — the "usec per MB" of tcp_mmap and
/// msg_zerocopy: lower is cheaper.
pub fn cpu_us_per_mb(usage: &ResourceUsage, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    let cpu_us = (usage.user + usage.system).as_secs_f64() * 1e6;
    cpu_us / (bytes as f64 / 1e6)
}

/// Gigabits per second for `bytes` in `seconds`.
pub fn gbit_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    bytes as f64 * 8.0 / seconds / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn row(v: Value) -> Row {
        object(v)
    }

    #[test]
    fn table_aligns_text_left_and_numbers_right() {
        let rows = vec![
            row(json!({"mode": "copy", "gbit_per_s": 12.5, "calls": 10})),
            row(json!({"mode": "zerocopy", "gbit_per_s": 3.25, "calls": 1000})),
        ];
        let t = table(
            &rows,
            &[
                ("mode", "mode"),
                ("gbit_per_s", "Gbit/s"),
                ("calls", "calls"),
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "mode      Gbit/s  calls");
        assert_eq!(lines[1], "copy      12.500     10");
        assert_eq!(lines[2], "zerocopy   3.250   1000");
    }

    #[test]
    fn errors_name_flags_not_library_types() {
        assert_eq!(
            in_flag_words("driver has no zero-copy support: use Mode::Copy or Mode::Auto"),
            "driver has no zero-copy support: use --mode copy or --mode auto"
        );
        assert_eq!(
            in_flag_words("the driver has no native XDP: use AttachMode::Generic"),
            "the driver has no native XDP: use --attach generic"
        );
        assert_eq!(
            in_flag_words("ENOPROTOOPT (use RxMode::Copy to receive with plain recv)"),
            "ENOPROTOOPT (use --mode copy to receive with plain recv)"
        );
        assert_eq!(
            in_flag_words("copied: choose RxMode::ZeroCopy to map received pages"),
            "copied: choose --mode zerocopy to map received pages"
        );
    }

    #[test]
    fn rates_and_costs() {
        let usage = ResourceUsage {
            user: Duration::from_millis(500),
            system: Duration::from_millis(500),
            ..Default::default()
        };
        assert_eq!(cpu_us_per_mb(&usage, 1_000_000_000), 1000.0);
        assert_eq!(gbit_per_s(1_000_000_000, 8.0), 1.0);
        assert_eq!(cpu_us_per_mb(&usage, 0), 0.0);
    }
}
