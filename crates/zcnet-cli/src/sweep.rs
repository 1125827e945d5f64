//! Size sweeps of `zcnet bench tcp|udp|rx|vsock --sizes`: the order the runs go in, the figures of
//! each mode at each size, and the size from which zero-copy costs less CPU per MB than copying
//! (the crossover), printed after the table and drawn by `--plot` ([`crate::plot`]).
//!
//! Each bench runs its modes at every size as it runs them at one; this file only decides the order
//! (the modes reversed from one size, and one round, to the next, so that no mode always runs first
//! and a host getting busier or quieter during the sweep hits every mode alike) and reads the rows.

use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};

use crate::flags::UsageError;
use crate::plot;
use crate::report::{self, Row};

/// The most sizes one sweep takes: a sweep runs every mode at each, so it stays minutes long.
pub const MAX_SIZES: usize = 64;

/// The sizes a bench runs: every size of `--sizes`, each checked by `check` under that flag's name
/// (as the bench checks its single-size flag), none twice; or, without `--sizes`, the one `single`
/// size, checked under `single_flag`.
pub fn sizes(
    listed: &[usize],
    (single, single_flag): (usize, &str),
    check: impl Fn(&str, usize) -> Result<()>,
) -> Result<Vec<usize>> {
    if listed.is_empty() {
        check(single_flag, single)?;
        return Ok(vec![single]);
    }
    if listed.len() > MAX_SIZES {
        return Err(UsageError(format!(
            "--sizes lists {} sizes; at most {MAX_SIZES}",
            listed.len()
        ))
        .into());
    }
    for (i, &size) in listed.iter().enumerate() {
        if listed[..i].contains(&size) {
            return Err(UsageError(format!("--sizes lists {} twice", human(size as u64))).into());
        }
        check("--sizes", size)?;
    }
    Ok(listed.to_vec())
}

/// Refuses a `--plot` file that cannot be written, before the sweep runs rather than after it (a
/// file created to find out is removed again), and anything but a regular file: opening a FIFO
/// waits for a reader, and a device such as `/dev/full` takes the open and fails the write.
pub fn check_plot(plot: Option<&Path>) -> Result<()> {
    let Some(path) = plot else {
        return Ok(());
    };
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err(UsageError(format!(
            "--plot {}: not a regular file (a directory, FIFO or device): the picture is written \
             as a file",
            path.display()
        ))
        .into());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| UsageError(format!("--plot {}: cannot write it: {e}", path.display())))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// One step of a sweep: its round (from 1), its size, and its modes in the order they run.
pub type Step<M> = (u32, usize, Vec<M>);

/// Every size of every round, in order, each with `modes` in the order they run: `modes` as given
/// on the first step, reversed on the next, and so on across sizes and rounds. With one size this
/// is the benches' order of rounds: reversed on even rounds. Each step is made when it is due, so
/// that `--rounds 4294967295` costs no memory before its first run.
pub fn schedule<'a, M: Clone>(
    rounds: u32,
    sizes: &'a [usize],
    modes: &'a [M],
) -> impl Iterator<Item = Step<M>> + 'a {
    let steps = (1..=rounds).flat_map(|round| sizes.iter().map(move |&size| (round, size)));
    steps.enumerate().map(|(k, (round, size))| {
        let mut order = modes.to_vec();
        if k % 2 == 1 {
            order.reverse();
        }
        (round, size, order)
    })
}

/// A size as its flag would take it: `16K`, `1M`, or bytes when not a whole number of KiB.
pub fn human(size: u64) -> String {
    match size {
        0 => "0".into(),
        s if s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s if s % (1 << 10) == 0 => format!("{}K", s >> 10),
        s => s.to_string(),
    }
}

/// One line of the picture: a mode (of one send API, when rows name theirs) at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The row's `api`, if it has one.
    pub api: Option<String>,
    pub mode: String,
    pub size: u64,
    /// The mean of the rows' `gbit_per_s` at this size (one row per round).
    pub gbit_per_s: f64,
    /// The mean of the rows' `cpu_us_per_mb` at this size.
    pub cpu_us_per_mb: f64,
}

impl Point {
    /// The legend's name of its line: the mode, after the API when the sweep compared several.
    pub fn series(&self, several_apis: bool) -> String {
        match (&self.api, several_apis) {
            (Some(api), true) => format!("{api} {}", self.mode),
            _ => self.mode.clone(),
        }
    }
}

/// The points of `rows` (those with a mode, a size and both figures, and not interrupted), one per
/// API, mode and size, in the order first seen, sorted by size.
pub fn points(rows: &[Row]) -> Vec<Point> {
    let mut groups: Vec<(Point, u32)> = Vec::new();
    for row in rows {
        if row.get("interrupted").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let (Some(mode), Some(size), Some(gbit), Some(cpu)) = (
            row.get("mode").and_then(Value::as_str),
            row.get("size").and_then(Value::as_u64),
            row.get("gbit_per_s").and_then(Value::as_f64),
            row.get("cpu_us_per_mb").and_then(Value::as_f64),
        ) else {
            continue;
        };
        let api = row.get("api").and_then(Value::as_str).map(str::to_string);
        match groups
            .iter_mut()
            .find(|(p, _)| p.api == api && p.mode == mode && p.size == size)
        {
            Some((p, n)) => {
                p.gbit_per_s += gbit;
                p.cpu_us_per_mb += cpu;
                *n += 1;
            }
            None => groups.push((
                Point {
                    api,
                    mode: mode.to_string(),
                    size,
                    gbit_per_s: gbit,
                    cpu_us_per_mb: cpu,
                },
                1,
            )),
        }
    }
    let mut out: Vec<Point> = groups
        .into_iter()
        .map(|(mut p, n)| {
            p.gbit_per_s /= f64::from(n);
            p.cpu_us_per_mb /= f64::from(n);
            p
        })
        .collect();
    out.sort_by_key(|p| p.size);
    out
}

/// Where zero-copy starts to cost less CPU per MB than copying, for one send API (or the bench's
/// only one).
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    pub api: Option<String>,
    /// The smallest size from which zero-copy's CPU per MB is below copy's at that size and at every
    /// larger size of the sweep; `None` when it is not below at the largest.
    pub from: Option<u64>,
}

impl Crossover {
    /// The sentence the table, the JSON and the picture say; `of_api` names the API (for a sweep
    /// of several).
    pub fn sentence(&self, of_api: bool) -> String {
        let api = match (&self.api, of_api) {
            (Some(api), true) => format!(" ({api})"),
            _ => String::new(),
        };
        match self.from {
            Some(size) => format!("zero-copy cheaper from {}{api}", human(size)),
            None => format!("zero-copy never cheaper on this path{api}"),
        }
    }
}

/// The crossover of each API whose sweep ran both copy and zerocopy at some size (compared at the
/// sizes where both ran).
pub fn crossovers(points: &[Point]) -> Vec<Crossover> {
    let mut apis: Vec<Option<String>> = Vec::new();
    for p in points {
        if !apis.contains(&p.api) {
            apis.push(p.api.clone());
        }
    }
    apis.into_iter()
        .filter_map(|api| {
            let cost = |mode: &str, size: u64| {
                points
                    .iter()
                    .find(|p| p.api == api && p.mode == mode && p.size == size)
                    .map(|p| p.cpu_us_per_mb)
            };
            let mut sizes: Vec<u64> = points.iter().map(|p| p.size).collect();
            sizes.dedup();
            // (size, zero-copy below copy) wherever both ran, smallest size first.
            let compared: Vec<(u64, bool)> = sizes
                .into_iter()
                .filter_map(|s| Some((s, cost("zerocopy", s)? < cost("copy", s)?)))
                .collect();
            if compared.is_empty() {
                return None;
            }
            let from = compared
                .iter()
                .rposition(|&(_, cheaper)| !cheaper)
                .map_or(Some(0), |i| (i + 1 < compared.len()).then_some(i + 1))
                .map(|i| compared[i].0);
            Some(Crossover { api, from })
        })
        .collect()
}

/// What a sweep ran over, for the crossover's JSON and the picture's title.
pub struct Swept<'a> {
    /// `tcp`, `udp`, `rx` or `vsock`.
    pub bench: &'a str,
    /// The path of its rows (`loopback`, `xdp-drop`, `remote`…).
    pub path: &'a str,
    /// What a size is in this bench, for the x axis (`bytes per send`).
    pub size_means: &'a str,
}

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
        plot::draw(file, swept, &points, &crossovers)?;
        if !json {
            report::emit(&format!("plot: {}\n", file.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::object;

    #[test]
    fn modes_alternate_from_one_size_and_round_to_the_next() {
        let steps: Vec<_> = schedule(2, &[1024, 4096], &["copy", "zerocopy", "auto"]).collect();
        let orders: Vec<(u32, usize, &str)> =
            steps.iter().map(|(r, s, m)| (*r, *s, m[0])).collect();
        assert_eq!(
            orders,
            vec![
                (1, 1024, "copy"),
                (1, 4096, "auto"),
                (2, 1024, "copy"),
                (2, 4096, "auto")
            ]
        );
        // One size: reversed on even rounds.
        let one: Vec<_> = schedule(3, &[64], &[1, 2]).collect();
        assert_eq!(
            one.iter().map(|s| s.2.clone()).collect::<Vec<_>>(),
            vec![vec![1, 2], vec![2, 1], vec![1, 2]]
        );
    }

    #[test]
    fn the_largest_round_count_is_scheduled_step_by_step() {
        let first: Vec<_> = schedule(u32::MAX, &[1024, 4096], &[1, 2]).take(3).collect();
        assert_eq!(
            first,
            vec![
                (1, 1024, vec![1, 2]),
                (1, 4096, vec![2, 1]),
                (2, 1024, vec![1, 2])
            ]
        );
    }

    #[test]
    fn sizes_are_checked_under_the_flag_given() {
        let limit = |flag: &str, s: usize| crate::flags::at_most(flag, s as u64, 8192, "test");
        assert_eq!(sizes(&[], (4096, "--size"), limit).unwrap(), vec![4096]);
        assert!(
            sizes(&[], (9000, "--size"), limit)
                .unwrap_err()
                .to_string()
                .starts_with("--size 9000")
        );
        assert!(
            sizes(&[1024, 9000], (0, "--size"), limit)
                .unwrap_err()
                .to_string()
                .starts_with("--sizes 9000")
        );
        assert_eq!(
            sizes(&[1024, 2048, 1024], (0, "--size"), limit)
                .unwrap_err()
                .to_string(),
            "--sizes lists 1K twice"
        );
    }

    fn row(mode: &str, size: u64, cpu: f64) -> Row {
        object(json!({"mode": mode, "size": size, "gbit_per_s": 1.0, "cpu_us_per_mb": cpu}))
    }

    fn from(rows: &[Row]) -> Option<u64> {
        let c = crossovers(&points(rows));
        assert_eq!(c.len(), 1);
        c[0].from
    }

    #[test]
    fn crossover_is_where_zerocopy_stays_cheaper() {
        let mut rows = vec![
            row("copy", 1024, 10.0),
            row("zerocopy", 1024, 20.0),
            row("copy", 4096, 10.0),
            row("zerocopy", 4096, 9.0),
            row("copy", 16384, 10.0),
            row("zerocopy", 16384, 11.0),
            row("copy", 65536, 10.0),
            row("zerocopy", 65536, 5.0),
        ];
        // Cheaper at 4K but not at 16K: it pays from 64K only.
        assert_eq!(from(&rows), Some(65536));
        rows.push(row("zerocopy", 65536, 25.0));
        // The mean of two rounds at 64K (15) is above copy's: never.
        assert_eq!(from(&rows), None);
        assert_eq!(
            from(&[row("copy", 1024, 2.0), row("zerocopy", 1024, 1.0)]),
            Some(1024)
        );
        assert!(crossovers(&points(&[row("copy", 1024, 2.0)])).is_empty());
        assert_eq!(
            Crossover {
                api: None,
                from: Some(16384)
            }
            .sentence(false),
            "zero-copy cheaper from 16K"
        );
    }

    #[test]
    fn sizes_read_as_flags_take_them() {
        assert_eq!(human(1 << 20), "1M");
        assert_eq!(human(256 << 10), "256K");
        assert_eq!(human(1400), "1400");
    }
}
