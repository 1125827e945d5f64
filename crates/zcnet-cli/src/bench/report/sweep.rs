//! Report: After a sweep's table: its crossover, as a line or a JSON object, and its picture
//! (`--plot`, [`crate::bench::report::svg`]).

use std::path::Path;

use anyhow::Result;
use serde_json::json;

use crate::bench::report::crossover::{Swept, crossovers, points};
use crate::bench::report::svg;
use crate::report::{self, Row};

/// After a sweep's table: prints each crossover (a line, or a JSON object with `--json`) and, with
/// `plot`, draws the picture there. A sweep that stopped before its end (`whole` false: Ctrl-C, or a
/// run cut short) has neither: part of a sweep decides nothing, and says so instead.
pub fn finish(
    rows: &[Row],
    swept: &Swept<'_>,
    json: bool,
    (plot, whole): (Option<&Path>, bool),
) -> Result<()> {
    if !whole {
        const WHY: &str = "the sweep stopped before its end: no crossover and no plot from part \
                           of it";
        report::emit(&if json {
            format!(
                "{}\n",
                json!({"sweep": "cut short", "bench": swept.bench, "path": swept.path, "why": WHY})
            )
        } else {
            format!("{WHY}\n")
        });
        return Ok(());
    }
    let points = points(rows);
    let crossovers = crossovers(&points);
    let several = crossovers.len() > 1;
    for c in &crossovers {
        if json {
            report::emit(&format!(
                "{}\n",
                json!({"crossover": c.sentence(several), "bench": swept.bench, "path": swept.path,
                       "api": c.api, "zerocopy_cheaper_from": c.from})
            ));
        } else {
            report::emit(&format!(
                "{} (zerocopy's CPU per MB against copy's, size by size)\n",
                c.sentence(several)
            ));
        }
    }
    if let Some(file) = plot {
        svg::draw(file, swept, &points, &crossovers)?;
        if !json {
            report::emit(&format!("plot: {}\n", file.display()));
        }
    }
    Ok(())
}
