//! What a running AF_XDP application prints as it goes: `zcnet xdp`'s per-second lines, as xdpsock
//! prints them (received and sent packets per second, and what the kernel's counters —
//! `XDP_STATISTICS` — added in that second: frames dropped, invalid descriptors, and how often it found
//! the fill ring or the tx ring empty), or `zcnet bench xdp`'s interval lines, which every bench prints
//! the same way ([`Ticker`]).

use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use zcnet::xdp::{Socket, Statistics};

use crate::live::Ticker;
use crate::report::emit;

/// Prints a running application's progress.
#[derive(Debug)]
pub enum Meter {
    /// xdpsock's per-second statistics (`zcnet xdp`).
    Statistics(StatisticsMeter),
    /// A bench's interval lines, counting frames in one direction.
    Interval {
        /// The interval printer.
        ticker: Ticker,
        /// Bytes per frame, for the lines' byte counts.
        frame_bytes: u64,
        /// Which count the lines show.
        counted: Counted,
    },
}

/// The frames a bench's interval lines count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Frames received.
    Received,
    /// Frames sent (completed).
    Sent,
}

impl Meter {
    /// xdpsock's per-second lines starting now, from `socket`'s current counters; `json` prints JSON
    /// lines.
    pub fn statistics(socket: &Socket, json: bool) -> Result<Meter> {
        let now = Instant::now();
        Ok(Meter::Statistics(StatisticsMeter {
            json,
            start: now,
            last_at: now,
            last_rx: 0,
            last_tx: 0,
            last: socket.statistics()?,
        }))
    }

    /// Takes in the packets received (`rx`) and sent (`tx`) so far; prints a line when one is due.
    pub fn tick(&mut self, socket: &Socket, rx: u64, tx: u64) -> Result<()> {
        match self {
            Meter::Statistics(meter) => meter.tick(socket, rx, tx),
            Meter::Interval {
                ticker,
                frame_bytes,
                counted,
            } => {
                let frames = match counted {
                    Counted::Received => rx,
                    Counted::Sent => tx,
                };
                ticker.tick_with(frames * *frame_bytes, || vec![("packets", frames)]);
                Ok(())
            }
        }
    }
}

/// xdpsock's per-second lines.
#[derive(Debug)]
pub struct StatisticsMeter {
    json: bool,
    start: Instant,
    last_at: Instant,
    last_rx: u64,
    last_tx: u64,
    last: Statistics,
}

impl StatisticsMeter {
    /// Prints a line when a second or more has passed since the last one; `rx` and `tx` are the
    /// packets received and sent so far.
    fn tick(&mut self, socket: &Socket, rx: u64, tx: u64) -> Result<()> {
        let now = Instant::now();
        let seconds = (now - self.last_at).as_secs_f64();
        if seconds < 1.0 {
            return Ok(());
        }
        let stats = socket.statistics()?;
        let (rx_packets, tx_packets) = (rx - self.last_rx, tx - self.last_tx);
        let delta = |f: fn(&Statistics) -> u64| f(&stats) - f(&self.last);
        let rx_dropped = delta(|s| s.rx_dropped + s.rx_ring_full);
        let invalid = delta(Statistics::invalid_descs);
        let fill_empty = delta(|s| s.rx_fill_ring_empty_descs);
        let tx_empty = delta(|s| s.tx_ring_empty_descs);
        let (rx_pps, tx_pps) = (rx_packets as f64 / seconds, tx_packets as f64 / seconds);
        let at = (now - self.start).as_secs_f64();
        if self.json {
            let line = json!({
                "interval": true,
                "t": at,
                "seconds": seconds,
                "rx_packets": rx_packets,
                "rx_pps": rx_pps,
                "tx_packets": tx_packets,
                "tx_pps": tx_pps,
                "rx_dropped": rx_dropped,
                "invalid_descs": invalid,
                "fill_ring_empty": fill_empty,
                "tx_ring_empty": tx_empty,
            });
            emit(&format!("{line}\n"));
        } else {
            emit(&format!(
                "{at:7.2}s  rx {rx_pps:>12.0} pps  tx {tx_pps:>12.0} pps  rx_dropped {rx_dropped}  \
                 invalid {invalid}  fill_ring_empty {fill_empty}  tx_ring_empty {tx_empty}\n"
            ));
        }
        (self.last_at, self.last_rx, self.last_tx, self.last) = (now, rx, tx, stats);
        Ok(())
    }
}
