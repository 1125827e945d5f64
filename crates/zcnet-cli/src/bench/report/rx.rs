//! Report: the end of a one-process `zcnet bench rx` — the table (or JSON) of its rows, tcp_mmap's
//! summary line for each (a sum row after the parallel streams of each mode), with `--sizes` the crossover and the `--plot`, then the bench's failure when
//! the kernel refused zcrx; and the rows of a `--connect -P N` sender's streams, a sum row after
//! each connection's.

use anyhow::bail;
use serde_json::Value;

use crate::bench::args::rx::RxArgs;
use crate::bench::plan;
use crate::bench::report::crossover::Swept;
use crate::bench::report::{streams, sweep};
use crate::bench::run::rx::RxRuns;
use crate::bench::run::rx::RxSent;
use crate::report::{self, Row, print_rows};

/// Prints `runs`' rows as `args` asks, then fails when zcrx was not measured.
pub(crate) fn finish(runs: RxRuns, args: &RxArgs) -> anyhow::Result<()> {
    let rows = &streams::with_sums(&runs.rows);
    print_rows(rows, &runs.columns, args.json);
    if !args.json {
        for row in rows {
            report::emit(&format!("{}\n", tcp_mmap_line(row, !args.sizes.is_empty())));
        }
    }
    report::say_once(rows, "kernel_copied_reason");
    if !args.sizes.is_empty() {
        let swept = Swept {
            bench: "rx",
            path: runs.path,
            size_means: "bytes per write of the sender",
        };
        let rows = &streams::runs(rows);
        sweep::finish(rows, &swept, args.json, (args.plot.as_deref(), runs.whole))?;
    }
    if let Some(why) = runs.failed {
        bail!("{why}");
    }
    if let Some(why) = runs.refused {
        // As a send API the kernel refuses fails `bench tcp`: the run did not measure all it was asked.
        bail!("zcrx not measured: {why}");
    }
    Ok(())
}

/// Prints a `--connect -P N` sender's streams, a sum row after each connection's, then fails when a
/// stream stopped early.
pub(crate) fn sent(sent: RxSent, args: &RxArgs) -> anyhow::Result<()> {
    let rows: Vec<Row> = sent
        .runs
        .iter()
        .flat_map(|r| streams::with_sums(r))
        .collect();
    print_rows(&rows, &sent.columns, args.json);
    let cut = sent.runs.iter().flatten().find_map(|r| {
        let why = ["stalled", "failed"]
            .iter()
            .find_map(|k| r.get(*k).and_then(Value::as_str))?;
        Some(format!(
            "stream {} of round {}: {why}",
            r.get("stream").unwrap_or(&Value::Null),
            r.get("round").unwrap_or(&Value::Null)
        ))
    });
    if let Some(why) = cut {
        bail!("a stream stopped early: {why}");
    }
    Ok(())
}

/// tcp_mmap's summary line for one row (naming the sender's write size in a sweep).
fn tcp_mmap_line(row: &Row, sweep: bool) -> String {
    let num = |key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let writes = match row.get("size").and_then(Value::as_u64) {
        Some(size) if sweep => format!(" ({} writes)", plan::human(size)),
        _ => String::new(),
    };
    let label = match row.get("api").and_then(Value::as_str) {
        Some(api) => format!(
            "{} {api}",
            row.get("mode").and_then(Value::as_str).unwrap_or("?")
        ),
        None => row
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string(),
    };
    let label = match row.get("stream") {
        Some(Value::Number(n)) => format!("{label} (stream {n})"),
        Some(Value::String(sum)) => format!("{label} ({sum})"),
        _ => label,
    };
    if let Some(why) = row.get("not_measured").and_then(Value::as_str) {
        return format!("{label}{writes} receive: not measured: {why}");
    }
    format!(
        "{label}{writes} receive: received {:.0} MB ({:.4} % mmap'ed) in {:.4} s, {:.4} Gbit/s, cpu usage user:{:.3} \
         sys:{:.3}, {:.2} usec per MB, {} c-switches",
        num("bytes") / (1 << 20) as f64,
        num("mapped_pct"),
        num("seconds"),
        num("gbit_per_s"),
        num("cpu_user_s"),
        num("cpu_sys_s"),
        num("cpu_us_per_mb"),
        num("ctx_switches"),
    )
}
