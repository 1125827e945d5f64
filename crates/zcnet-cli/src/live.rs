//! Live output of a running bench: one line per interval (as iperf3 and xdpsock print), and Ctrl-C
//! (SIGINT/SIGTERM) — or an output whose reader is gone (`zcnet … | head`) — turned into "stop now
//! and print the summary of what ran".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};

use crate::report::{self, emit, object};

/// Starts turning SIGINT and SIGTERM into a flag that [`interrupted`] reads (a second signal ends the
/// process the default way).
pub fn watch_interrupts() -> anyhow::Result<()> {
    termination_flag().map(|_| ())
}

/// Whether SIGINT or SIGTERM arrived since [`watch_interrupts`], or a write found the output's reader
/// gone ([`report::output_closed`]): either way the run stops where Ctrl-C stops it.
pub fn interrupted() -> bool {
    report::output_closed() || termination_flag().is_ok_and(|flag| flag.load(Ordering::Relaxed))
}

/// What [`run_until_failure`] measured: wall time, the calling thread's CPU time, the system calls
/// its steps counted, and whether Ctrl-C ended it early.
#[derive(Debug)]
pub struct Timed {
    pub seconds: f64,
    pub usage: ResourceUsage,
    pub calls: u64,
    pub interrupted: bool,
}

/// Runs `step` over and over for `duration`, or until Ctrl-C (each step returns the system calls
/// it made); a step that fails ends the run: what ran until then, with the error that ended it.
pub fn run_until_failure<E>(
    duration: Duration,
    mut step: impl FnMut() -> Result<u64, E>,
) -> anyhow::Result<(Timed, Option<E>)> {
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    let mut calls = 0;
    let mut stopped = false;
    let mut failed = None;
    while start.elapsed() < duration {
        if interrupted() {
            stopped = true;
            break;
        }
        match step() {
            Ok(n) => calls += n,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let timed = Timed {
        seconds: start.elapsed().as_secs_f64(),
        usage: resource_usage(UsageOf::Thread)?.since(&before),
        calls,
        interrupted: stopped,
    };
    Ok((timed, failed))
}

fn termination_flag() -> anyhow::Result<&'static AtomicBool> {
    Ok(benchnet::termination_flag()?)
}

/// Prints a line each time an interval of `every` ends, with the bytes moved in it.
#[derive(Debug)]
pub struct Ticker {
    every: Option<Duration>,
    start: Instant,
    next: Instant,
    last_bytes: u64,
    /// Other running totals at the last line, by name ([`Ticker::tick_with`]).
    last_counts: Vec<(&'static str, u64)>,
    /// Fields every line starts with (bench, mode, …).
    label: serde_json::Map<String, Value>,
    json: bool,
}

impl Ticker {
    /// A ticker of `seconds` (0: prints nothing) whose lines carry `label`'s fields.
    pub fn new(seconds: f64, label: Value, json: bool) -> Ticker {
        let every = (seconds > 0.0).then(|| Duration::from_secs_f64(seconds));
        let start = Instant::now();
        Ticker {
            every,
            start,
            next: start + every.unwrap_or_default(),
            last_bytes: 0,
            last_counts: Vec::new(),
            label: object(label),
            json,
        }
    }

    /// Starts the first interval now (when the measured activity begins, e.g. at accept).
    pub fn restart(&mut self) {
        self.start = Instant::now();
        self.next = self.start + self.every.unwrap_or_default();
        self.last_bytes = 0;
        self.last_counts.clear();
    }

    /// Takes in the running byte total; prints a line when an interval has ended. Cheap enough to call
    /// after every send or receive.
    pub fn tick(&mut self, bytes: u64) {
        self.tick_with(bytes, Vec::new);
    }

    /// Like [`tick`](Self::tick), with other running totals (name, total: upcalls, misses, …) of which
    /// each line gives the growth in its interval; `counts` is called only when a line is due.
    pub fn tick_with(&mut self, bytes: u64, counts: impl FnOnce() -> Vec<(&'static str, u64)>) {
        let Some(every) = self.every else { return };
        let now = Instant::now();
        if now < self.next {
            return;
        }
        let from = (self.next - every - self.start).as_secs_f64();
        let to = (now - self.start).as_secs_f64();
        let grown = growth(&mut self.last_counts, counts());
        self.line(from, to, bytes - self.last_bytes.min(bytes), &grown);
        self.last_bytes = bytes;
        while self.next <= now {
            self.next += every;
        }
    }

    fn line(&self, from: f64, to: f64, bytes: u64, counts: &[(&str, u64)]) {
        let gbit = if to > from {
            bytes as f64 * 8.0 / (to - from) / 1e9
        } else {
            0.0
        };
        if self.json {
            let mut row = self.label.clone();
            row.insert("interval".into(), json!(true));
            row.insert("start_s".into(), json!(from));
            row.insert("end_s".into(), json!(to));
            row.insert("bytes".into(), json!(bytes));
            row.insert("gbit_per_s".into(), json!(gbit));
            for &(name, n) in counts {
                row.insert(name.into(), json!(n));
            }
            emit(&format!("{}\n", Value::Object(row)));
            return;
        }
        let label: Vec<String> = self
            .label
            .values()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let counts: String = counts
            .iter()
            .map(|(name, n)| format!("  {n:>8} {name}"))
            .collect();
        emit(&format!(
            "[{from:6.2}-{to:6.2} s] {}  {:>10.1} MB  {gbit:8.3} Gbit/s{counts}\n",
            label.join(" "),
            bytes as f64 / 1e6,
        ));
    }
}

/// Each running total's growth since the totals recorded in `last` (by name; 0 when a total went
/// down), recording the new totals there.
fn growth(
    last: &mut Vec<(&'static str, u64)>,
    totals: Vec<(&'static str, u64)>,
) -> Vec<(&'static str, u64)> {
    totals
        .into_iter()
        .map(|(name, total)| {
            let before = match last.iter_mut().find(|(n, _)| *n == name) {
                Some((_, recorded)) => std::mem::replace(recorded, total),
                None => {
                    last.push((name, total));
                    0
                }
            };
            (name, total - before.min(total))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::growth;

    #[test]
    fn counts_grow_by_name_across_intervals() {
        let mut last = Vec::new();
        assert_eq!(
            growth(&mut last, vec![("upcalls", 5), ("lost", 2)]),
            [("upcalls", 5), ("lost", 2)]
        );
        // A total missing from one interval keeps its record; one that went down grew by nothing.
        assert_eq!(growth(&mut last, vec![("upcalls", 9)]), [("upcalls", 4)]);
        assert_eq!(
            growth(&mut last, vec![("lost", 7), ("upcalls", 3)]),
            [("lost", 5), ("upcalls", 0)]
        );
    }
}
