//! The verdict of `zcnet probe --measure` on one path: whether its zero-copy mode spends less CPU per
//! unit moved (per MB, or per packet) than its copying counterpart, by more than [`MARGIN_PCT`].
//! Computed from the bench rows alone, so that whoever holds the rows can check it.

use serde_json::{Value, json};

use crate::report::Row;

/// How much cheaper (or dearer) per unit zero-copy must be for the difference to count.
pub const MARGIN_PCT: f64 = 5.0;

/// Which rows of a path are compared, and by which of their fields.
#[derive(Debug, Clone, Copy)]
pub struct Comparison {
    /// The row field that names the mode (`mode`; `path` for `bench xdp`).
    pub mode_field: &'static str,
    /// Its value on the copying rows.
    pub copy: &'static str,
    /// Its value on the zero-copy rows.
    pub zerocopy: &'static str,
    /// The row's cost per unit, as the bench reports it (`cpu_us_per_mb`).
    pub metric: &'static str,
    /// The units the row moved, which weight its cost (`bytes`, `packets`).
    pub weight: &'static str,
    /// The metric's unit (`us/MB`).
    pub unit: &'static str,
    /// What one unit is, in a sentence (`MB`, `packet`).
    pub per: &'static str,
}

/// Whether zero-copy pays on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pays {
    /// At least [`MARGIN_PCT`] cheaper per unit.
    Yes,
    /// At least [`MARGIN_PCT`] dearer per unit.
    No,
    /// Within the margin either way.
    Unclear,
}

impl Pays {
    /// The answer as printed and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Pays::Yes => "yes",
            Pays::No => "no",
            Pays::Unclear => "no clear difference",
        }
    }
}

/// The two costs of a path and what they say.
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    pub pays: Pays,
    pub copy_cost: f64,
    pub zerocopy_cost: f64,
    /// Zero-copy's cost against copy's, in percent (negative: cheaper).
    pub change_pct: f64,
}

/// The comparison of `bench tcp|udp|rx` rows: the sending (or receiving) thread's CPU per MB.
pub const PER_MB: Comparison = Comparison {
    mode_field: "mode",
    copy: "copy",
    zerocopy: "zerocopy",
    metric: "cpu_us_per_mb",
    weight: "bytes",
    unit: "us/MB",
    per: "MB",
};

impl Comparison {
    /// The cost per unit of `mode` over all its rows together: the sum of each row's cost times its
    /// units over the sum of the units (the CPU time of every row over everything they moved, as
    /// `bench tcp`'s totals compute it). `None` when no row of `mode` moved anything.
    pub fn cost(&self, rows: &[Row], mode: &str) -> Option<f64> {
        let (mut spent, mut units) = (0.0, 0.0);
        for row in rows
            .iter()
            .filter(|r| r.get(self.mode_field).and_then(Value::as_str) == Some(mode))
        {
            let (Some(cost), Some(moved)) = (
                row.get(self.metric).and_then(Value::as_f64),
                row.get(self.weight).and_then(Value::as_f64),
            ) else {
                continue;
            };
            spent += cost * moved;
            units += moved;
        }
        (units > 0.0).then(|| spent / units)
    }

    /// The verdict of `rows`; `None` when either mode has no rows that moved anything.
    pub fn verdict(&self, rows: &[Row]) -> Option<Verdict> {
        let copy_cost = self.cost(rows, self.copy)?;
        let zerocopy_cost = self.cost(rows, self.zerocopy)?;
        if copy_cost <= 0.0 {
            return None;
        }
        let change_pct = (zerocopy_cost / copy_cost - 1.0) * 100.0;
        let pays = if change_pct <= -MARGIN_PCT {
            Pays::Yes
        } else if change_pct >= MARGIN_PCT {
            Pays::No
        } else {
            Pays::Unclear
        };
        Some(Verdict {
            pays,
            copy_cost,
            zerocopy_cost,
            change_pct,
        })
    }

    /// `zero-copy pays here: no, 62% more CPU per MB (368.7 vs 226.9 us/MB)`.
    pub fn sentence(&self, v: &Verdict) -> String {
        let more = if v.change_pct < 0.0 { "less" } else { "more" };
        let within = match v.pays {
            Pays::Unclear => format!(", within the {MARGIN_PCT}% margin"),
            Pays::Yes | Pays::No => String::new(),
        };
        format!(
            "zero-copy pays here: {}, {:.0}% {more} CPU per {} ({} {:.1} vs {} {:.1} {}{within})",
            v.pays.name(),
            v.change_pct.abs(),
            self.per,
            self.zerocopy,
            v.zerocopy_cost,
            self.copy,
            v.copy_cost,
            self.unit,
        )
    }

    /// What was compared, for JSON: enough to recompute the verdict from the rows.
    pub fn json(&self) -> Value {
        json!({
            "mode_field": self.mode_field,
            "copy": self.copy,
            "zerocopy": self.zerocopy,
            "metric": self.metric,
            "weight": self.weight,
            "unit": self.unit,
        })
    }
}

impl Verdict {
    /// The figures, for JSON.
    pub fn json(&self) -> Value {
        json!({
            "pays": self.pays.name(),
            "copy_cost": self.copy_cost,
            "zerocopy_cost": self.zerocopy_cost,
            "change_pct": self.change_pct,
            "margin_pct": MARGIN_PCT,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::object;

    fn row(mode: &str, cost: f64, bytes: u64) -> Row {
        object(json!({"mode": mode, "cpu_us_per_mb": cost, "bytes": bytes}))
    }

    #[test]
    fn each_mode_costs_its_cpu_over_all_it_moved() {
        let rows = vec![
            row("copy", 100.0, 3_000),
            row("zerocopy", 50.0, 1_000),
            row("copy", 200.0, 1_000),
            // A row without its cost (an interval line, say) is not counted.
            object(json!({"mode": "copy", "bytes": 5_000})),
        ];
        assert_eq!(PER_MB.cost(&rows, "copy"), Some(125.0));
        assert_eq!(PER_MB.cost(&rows, "zerocopy"), Some(50.0));
        assert_eq!(PER_MB.cost(&rows, "auto"), None);
        assert_eq!(PER_MB.cost(&[row("copy", 10.0, 0)], "copy"), None);
    }

    #[test]
    fn only_a_difference_beyond_the_margin_decides() {
        let pays = |zc: f64| {
            PER_MB
                .verdict(&[row("copy", 100.0, 10), row("zerocopy", zc, 10)])
                .map(|v| v.pays)
        };
        assert_eq!(pays(80.0), Some(Pays::Yes));
        assert_eq!(pays(95.0), Some(Pays::Yes));
        assert_eq!(pays(96.0), Some(Pays::Unclear));
        assert_eq!(pays(104.0), Some(Pays::Unclear));
        assert_eq!(pays(105.0), Some(Pays::No));
        assert_eq!(pays(170.0), Some(Pays::No));
        assert!(PER_MB.verdict(&[row("copy", 100.0, 10)]).is_none());
    }

    #[test]
    fn the_sentence_gives_the_share_and_both_costs() {
        let v = PER_MB
            .verdict(&[row("copy", 200.0, 10), row("zerocopy", 300.0, 10)])
            .unwrap();
        assert_eq!(
            PER_MB.sentence(&v),
            "zero-copy pays here: no, 50% more CPU per MB (zerocopy 300.0 vs copy 200.0 us/MB)"
        );
        let v = PER_MB
            .verdict(&[row("copy", 100.0, 10), row("zerocopy", 98.0, 10)])
            .unwrap();
        assert_eq!(
            PER_MB.sentence(&v),
            "zero-copy pays here: no clear difference, 2% less CPU per MB (zerocopy 98.0 vs copy \
             100.0 us/MB, within the 5% margin)"
        );
    }
}
