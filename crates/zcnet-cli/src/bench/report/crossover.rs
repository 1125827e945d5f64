//! Report: What the rows of a size sweep say: the figures of each mode at each size, and the size from
//! which zero-copy costs less CPU per MB than copying (the crossover).

use serde_json::Value;

use crate::bench::plan::human;
use crate::report::Row;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::object;
    use serde_json::json;

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
}
