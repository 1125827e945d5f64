//! Report: the end of a bench of sends (`bench tcp`, `bench udp`) — the summary of its rows
//! ([`summary`]) with a sum row after each run's parallel streams ([`streams`]), with `--sizes` the crossover and the `--plot` ([`sweep`]), then the bench's
//! failure when a run ended without its row or was cut short.

use anyhow::Result;

use crate::bench::args::Common;
use crate::bench::report::crossover::Swept;
use crate::bench::report::summary::{self, Shown};
use crate::bench::report::{streams, sweep};
use crate::bench::run::rounds::Rounds;

/// Prints the summary of `ended`'s rows (each with its round) — with `--sizes`, then the crossover
/// and the `--plot`; a run cut short (or runs that did not arrive whole) then fails the bench with what was seen. A run that ended in
/// an error without a row still gets the rows of the runs before it printed, then fails the bench.
pub(crate) fn finish(ended: Rounds, common: &Common, bench: &str) -> Result<()> {
    let shown_rows = streams::with_sums(&ended.rows);
    summary::print_summary(&shown_rows, shown(common));
    if let Some(e) = ended.error {
        return Err(e);
    }
    if !common.sizes.is_empty() {
        let rows = &streams::runs(&shown_rows);
        let path = rows.first().and_then(|r| r["path"].as_str()).unwrap_or("?");
        let swept = Swept {
            bench,
            path,
            size_means: "bytes per send",
        };
        sweep::finish(
            rows,
            &swept,
            common.json,
            (common.plot.as_deref(), ended.whole),
        )?;
    }
    match ended.failed {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// What the summary of `common`'s runs shows.
fn shown(common: &Common) -> Shown {
    Shown {
        json: common.json,
        rounds: common.rounds > 1,
        sweep: !common.sizes.is_empty(),
        streams: common.parallel > 1,
    }
}
