//! Run: the runs of a bench of sends in the order of its plan ([`crate::bench::plan::sends`]), each
//! row kept for the report, stopping at the first run that did not go its whole way.

use anyhow::Result;
use serde_json::{Value, json};
use zcnet::tx::Mode;

use crate::bench::args::Common;
use crate::bench::args::api::Api;
use crate::bench::plan;
use crate::bench::run::send::{cut_short_by, is_interrupted};
use crate::live;
use crate::report::Row;

/// The rows of a bench's runs, each with its round, and how the runs ended.
pub(crate) struct Rounds {
    pub(crate) rows: Vec<Row>,
    /// Every run of the plan ran its whole way.
    pub(crate) whole: bool,
    /// A run that ended in an error without a row (a peer that refuses the connection): the rows
    /// before it are reported, then the bench fails with it.
    pub(crate) error: Option<anyhow::Error>,
    /// Why the bench fails once every row is reported: the last run stopped before its duration (it
    /// stalled, or a send failed), or runs asked to verify did not arrive whole.
    pub(crate) failed: Option<String>,
}

/// Runs `one_run` for every (round, size, mode, api) of the [`plan::sends`] of `sizes`, stopping after a
/// run that was interrupted, stalled or failed (or before the next run once Ctrl-C came or the
/// output closed).
pub(crate) fn run_rounds(
    (common, sizes): (&Common, &[usize]),
    mut one_run: impl FnMut(usize, Mode, Api) -> Result<Row>,
) -> Rounds {
    let mut rounds = Rounds {
        rows: Vec::new(),
        whole: true,
        error: None,
        failed: None,
    };
    for (round, size, mode, api) in plan::sends(common.rounds, sizes, &common.mode, common.apis()) {
        // Ctrl-C, or an output whose reader is gone, that came after a run's end: no more runs.
        if live::interrupted() {
            rounds.whole = false;
            break;
        }
        let mut row = match one_run(size, mode, api) {
            Ok(row) => row,
            Err(e) => {
                rounds.error = Some(e);
                return rounds;
            }
        };
        row.insert("round".into(), json!(round));
        let stop = is_interrupted(&row) || cut_short_by(&row).is_some();
        rounds.rows.push(row);
        if stop {
            rounds.whole = false;
            break;
        }
    }
    if let Some(row) = rounds.rows.last()
        && let Some(why) = cut_short_by(row)
    {
        let name = |key| row.get(key).and_then(Value::as_str).unwrap_or("?");
        rounds.failed = Some(format!(
            "the {} {} run stopped after {} bytes: {why}",
            name("api"),
            name("mode"),
            row.get("bytes").and_then(Value::as_u64).unwrap_or(0)
        ));
    }
    rounds
}
