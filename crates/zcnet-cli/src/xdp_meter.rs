//! `zcnet xdp`'s per-second lines, as xdpsock prints them: received and sent packets per second, and
//! what the kernel's counters (`XDP_STATISTICS`) added in that second: frames dropped, invalid
//! descriptors, and how often it found the fill ring or the tx ring empty.

use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use zcnet::xdp::{Socket, Statistics};

/// Prints one line per second of a running application.
#[derive(Debug)]
pub struct Meter {
    json: bool,
    start: Instant,
    last_at: Instant,
    last_rx: u64,
    last_tx: u64,
    last: Statistics,
}

impl Meter {
    /// A meter starting now, from `socket`'s current counters; `json` prints JSON lines.
    pub fn new(socket: &Socket, json: bool) -> Result<Meter> {
        let now = Instant::now();
        Ok(Meter {
            json,
            start: now,
            last_at: now,
            last_rx: 0,
            last_tx: 0,
            last: socket.statistics()?,
        })
    }

    /// Prints a line when a second or more has passed since the last one; `rx` and `tx` are the
    /// packets received and sent so far.
    pub fn tick(&mut self, socket: &Socket, rx: u64, tx: u64) -> Result<()> {
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
            println!("{line}");
        } else {
            println!(
                "{at:7.2}s  rx {rx_pps:>12.0} pps  tx {tx_pps:>12.0} pps  rx_dropped {rx_dropped}  \
                 invalid {invalid}  fill_ring_empty {fill_empty}  tx_ring_empty {tx_empty}"
            );
        }
        (self.last_at, self.last_rx, self.last_tx, self.last) = (now, rx, tx, stats);
        Ok(())
    }
}
