//! Report: the end of a `zcnet bench vsock` sender — the table (or JSON) of its rows, and with
//! `--sizes` the crossover and the `--plot`.

use anyhow::Result;

use crate::bench::args::vsock::VsockArgs;
use crate::bench::report::crossover::Swept;
use crate::bench::report::sweep;
use crate::bench::run::vsock::VsockRuns;
use crate::report::{Column, print_rows};

/// Prints `runs`' rows as `args` asks.
pub(crate) fn finish(runs: VsockRuns, args: &VsockArgs) -> Result<()> {
    let rows = &runs.rows;
    print_rows(rows, COLUMNS, args.json);
    if !args.sizes.is_empty() {
        let path = rows.first().and_then(|r| r["path"].as_str()).unwrap_or("?");
        let swept = Swept {
            bench: "vsock",
            path,
            size_means: "bytes per send",
        };
        sweep::finish(rows, &swept, args.json, (args.plot.as_deref(), runs.whole))?;
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
    ("cpu_us_per_mb", "CPU US/MB"),
];
