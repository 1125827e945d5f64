//! Report: the end of a `zcnet bench vsock` sender — the table (or JSON) of its rows (a sum row after
//! the streams of each run of `-P N`), and with
//! `--sizes` the crossover and the `--plot`.

use anyhow::{Result, bail};
use serde_json::Value;

use crate::bench::args::vsock::VsockArgs;
use crate::bench::report::crossover::Swept;
use crate::bench::report::{streams, sweep};
use crate::bench::run::vsock::VsockRuns;
use crate::report::{self, Column, print_rows};

/// Prints `runs`' rows as `args` asks (a sum row after the streams of each run of several), then
/// fails when a stream ended without its figures.
pub(crate) fn finish(runs: VsockRuns, args: &VsockArgs) -> Result<()> {
    let shown = &streams::with_sums(&runs.rows);
    let columns = if args.parallel > 1 {
        [&[("stream", "STREAM")], COLUMNS].concat()
    } else {
        COLUMNS.to_vec()
    };
    print_rows(shown, &columns, args.json);
    report::say_once(shown, "kernel_copied_reason");
    let rows = &streams::runs(shown);
    if !args.sizes.is_empty() {
        let path = rows.first().and_then(|r| r["path"].as_str()).unwrap_or("?");
        let swept = Swept {
            bench: "vsock",
            path,
            size_means: "bytes per send",
        };
        sweep::finish(rows, &swept, args.json, (args.plot.as_deref(), runs.whole))?;
    }
    let failed = runs.rows.iter().find_map(|r| {
        let why = r.get("failed").and_then(Value::as_str)?;
        Some(format!(
            "stream {}: {why}",
            r.get("stream").unwrap_or(&Value::Null)
        ))
    });
    if let Some(why) = failed {
        bail!("{why}");
    }
    Ok(())
}

/// The columns of a sender's row.
const COLUMNS: &[Column] = &[
    ("type", "TYPE"),
    ("api", "API"),
    ("mode", "MODE"),
    ("buf_size", "BUF"),
    ("bytes", "BYTES"),
    ("tx_gbit_per_s", "TX GBIT/S (IN SEND)"),
    ("gbit_per_s", "TOTAL GBIT/S"),
    ("calls", "CALLS"),
    ("notifications", "NOTIFS"),
    ("zc_ids", "ZC IDS"),
    ("copied_ids", "COPIED IDS"),
    ("kernel_copied_per_byte", "KERNEL COPIED/B"),
    ("cpu_us_per_mb", "CPU US/MB"),
];
