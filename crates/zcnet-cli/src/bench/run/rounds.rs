//! Run: the runs of a bench of sends in the order of its plan ([`crate::bench::plan::sends`]), each
//! row kept for the report, stopping at the first run that did not go its whole way.

use anyhow::Result;
use serde_json::{Value, json};
use zcnet::tx::Mode;

use crate::bench::args::Common;
use crate::bench::args::api::Api;
use crate::bench::plan;
use crate::bench::run::copies::KernelCopies;
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
    /// stalled, or a send failed: the first such stream's), or runs asked to verify did not arrive
    /// whole.
    pub(crate) failed: Option<String>,
}

/// Runs `one_run` for every (round, size, mode, api) of the [`plan::sends`] of `sizes` (its rows: one,
/// or a row per stream with `-P`), stopping after a run of which a stream was interrupted, stalled or
/// failed (or before the next run once Ctrl-C came or the output closed).
pub(crate) fn run_rounds(
    (common, sizes): (&Common, &[usize]),
    mut one_run: impl FnMut(usize, Mode, Api) -> Result<Vec<Row>>,
) -> Rounds {
    let mut rounds = Rounds {
        rows: Vec::new(),
        whole: true,
        error: None,
        failed: None,
    };
    let copies = KernelCopies::after_sends();
    for (round, size, mode, api) in plan::sends(common.rounds, sizes, &common.mode, common.apis()) {
        // Ctrl-C, or an output whose reader is gone, that came after a run's end: no more runs.
        if live::interrupted() {
            rounds.whole = false;
            break;
        }
        let before = copies.so_far();
        let mut streams = match one_run(size, mode, api) {
            Ok(streams) => streams,
            Err(e) => {
                rounds.error = Some(e);
                return rounds;
            }
        };
        copies.record(before, &mut streams);
        let stop = streams
            .iter()
            .any(|row| is_interrupted(row) || cut_short_by(row).is_some());
        rounds.failed = streams.iter().find_map(stopped_early);
        for mut row in streams {
            row.insert("round".into(), json!(round));
            rounds.rows.push(row);
        }
        if stop {
            rounds.whole = false;
            break;
        }
    }
    rounds
}

/// Why the stream of `row` stopped before its duration, in a sentence, if it did.
fn stopped_early(row: &Row) -> Option<String> {
    let why = cut_short_by(row)?;
    let name = |key| row.get(key).and_then(Value::as_str).unwrap_or("?");
    let stream = match row.get("stream").and_then(Value::as_u64) {
        Some(n) => format!("stream {n} of "),
        None => String::new(),
    };
    Some(format!(
        "{stream}the {} {} run stopped after {} bytes: {why}",
        name("api"),
        name("mode"),
        row.get("bytes").and_then(Value::as_u64).unwrap_or(0)
    ))
}
