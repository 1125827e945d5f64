//! Live output of a running bench: one line per interval (as iperf3 and xdpsock print), and Ctrl-C
//! (SIGINT/SIGTERM) turned into "stop now and print the summary of what ran".

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::report::{emit, object};

/// Starts turning SIGINT and SIGTERM into a flag that [`interrupted`] reads (a second signal ends the
/// process the default way).
pub fn watch_interrupts() -> anyhow::Result<()> {
    termination_flag().map(|_| ())
}

/// Whether SIGINT or SIGTERM arrived since [`watch_interrupts`].
pub fn interrupted() -> bool {
    termination_flag().is_ok_and(|flag| flag.load(Ordering::Relaxed))
}

fn termination_flag() -> anyhow::Result<&'static AtomicBool> {
    Ok(testnet::termination_flag()?)
}

/// Prints a line each time an interval of `every` ends, with the bytes moved in it.
#[derive(Debug)]
pub struct Ticker {
    every: Option<Duration>,
    start: Instant,
    next: Instant,
    last_bytes: u64,
    last_frames: u64,
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
            last_frames: 0,
            label: object(label),
            json,
        }
    }

    /// Starts the first interval now (when the measured activity begins, e.g. at accept).
    pub fn restart(&mut self) {
        self.start = Instant::now();
        self.next = self.start + self.every.unwrap_or_default();
        self.last_bytes = 0;
        self.last_frames = 0;
    }

    /// Takes in the running byte total; prints a line when an interval has ended. Cheap enough to call
    /// after every send or receive.
    pub fn tick(&mut self, bytes: u64) {
        self.advance(bytes, None);
    }

    /// As [`Ticker::tick`], for a bench that counts frames (packets) too: its lines add the frames of
    /// the interval and their rate (`packets`, `mpps`).
    pub fn tick_frames(&mut self, bytes: u64, frames: u64) {
        self.advance(bytes, Some(frames));
    }

    fn advance(&mut self, bytes: u64, frames: Option<u64>) {
        let Some(every) = self.every else { return };
        let now = Instant::now();
        if now < self.next {
            return;
        }
        let from = (self.next - every - self.start).as_secs_f64();
        let to = (now - self.start).as_secs_f64();
        let new_frames = frames.map(|f| f - self.last_frames.min(f));
        self.line(from, to, bytes - self.last_bytes.min(bytes), new_frames);
        self.last_bytes = bytes;
        self.last_frames = frames.unwrap_or(0);
        while self.next <= now {
            self.next += every;
        }
    }

    fn line(&self, from: f64, to: f64, bytes: u64, frames: Option<u64>) {
        let per_second = |n: f64| if to > from { n / (to - from) } else { 0.0 };
        let gbit = per_second(bytes as f64 * 8.0) / 1e9;
        let mpps = frames.map(|f| per_second(f as f64) / 1e6);
        if self.json {
            let mut row = self.label.clone();
            row.insert("interval".into(), json!(true));
            row.insert("start_s".into(), json!(from));
            row.insert("end_s".into(), json!(to));
            row.insert("bytes".into(), json!(bytes));
            row.insert("gbit_per_s".into(), json!(gbit));
            if let (Some(frames), Some(mpps)) = (frames, mpps) {
                row.insert("packets".into(), json!(frames));
                row.insert("mpps".into(), json!(mpps));
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
        let rate = mpps.map_or(String::new(), |m| format!("  {m:8.3} Mpps"));
        emit(&format!(
            "[{from:6.2}-{to:6.2} s] {}  {:>10.1} MB  {gbit:8.3} Gbit/s{rate}\n",
            label.join(" "),
            bytes as f64 / 1e6,
        ));
    }
}
