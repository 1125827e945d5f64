//! The receiving side of `zcnet bench tcp|rx --listen` (UDP's is [`crate::bench_listen_udp`]): accepts
//! one stream after another (until Ctrl-C, or after one with `--once`) and reports what arrived —
//! bytes, % mapped for rx, CPU per MB, and bytes that differ from the pattern when the sender asked
//! for verification.
//!
//! TCP streams are read with [`zcnet::rx::Receiver`] (plain `recv` for `bench tcp`, zero-copy receive
//! for `bench rx`) with `SO_RCVLOWAT`, so that a wake-up brings a batch of bytes rather than a few
//! segments: a blocking read per segment costs several times the CPU per MB and would cap the sender.
//! A stream that does not open with zcnet's header (tcp_mmap, msg_zerocopy) is counted, not verified.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::rx::{Receiver, RxConfig, RxStats};

use crate::live::{Ticker, interrupted};
use crate::report::{Row, cpu_us_per_mb, emit, gbit_per_s, object};
use crate::wire::{self, HEADER_LEN, Header, Verifier};

/// How often a blocked receiver looks at the interruption flag.
pub(crate) const WAKE: Duration = Duration::from_millis(200);

/// Whether a receive ended only because [`WAKE`] passed or a signal arrived (look at the
/// interruption flag, then receive again).
pub(crate) fn woke_up(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Announces where a listener listens: a JSON line (the one-process mode reads it) or a text line.
pub fn announce(addr: SocketAddr, json: bool) {
    if json {
        emit(&format!("{}\n", json!({ "listening": addr.to_string() })));
    } else {
        emit(&format!("listening on {addr} (Ctrl-C to stop)\n"));
    }
}

/// Waits for the next connection, or `None` once interrupted.
pub fn accept(listener: &TcpListener) -> Result<Option<TcpStream>> {
    listener.set_nonblocking(true)?;
    loop {
        if interrupted() {
            return Ok(None);
        }
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(Some(stream));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e).context("accept"),
        }
    }
}

/// What one received TCP stream brought.
#[derive(Debug)]
pub struct StreamReport {
    /// The zcnet header, or `None` for a foreign sender.
    pub header: Option<Header>,
    /// Payload bytes (after the header).
    pub bytes: u64,
    /// The receiver's counters (header included).
    pub stats: RxStats,
    /// From accept to end of stream.
    pub seconds: f64,
    /// CPU time of the receiving thread.
    pub usage: ResourceUsage,
    /// Bytes that differed from the pattern (`None`: not verified).
    pub data_errors: Option<u64>,
    /// Payload offset of the first differing byte.
    pub first_error: Option<u64>,
    /// Why the receiver read with plain `recv`, if it did.
    pub fallback: Option<String>,
    /// Whether Ctrl-C cut the stream short.
    pub interrupted: bool,
}

/// Reads one stream to its end with `config`, printing interval lines through `ticker`.
pub fn receive_stream(
    stream: TcpStream,
    config: RxConfig,
    ticker: &mut Ticker,
) -> Result<StreamReport> {
    stream.set_read_timeout(Some(WAKE))?;
    ticker.restart();
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    let mut rx = Receiver::new(stream, config).context("setting up the receiver")?;
    let mut opening = Vec::with_capacity(HEADER_LEN);
    let mut header = None;
    let mut decided = false;
    let mut verifier: Option<Verifier> = None;
    let mut payload = 0u64;
    let mut cut_short = false;
    loop {
        let chunk = match rx.recv() {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) if woke_up(e.kind()) => {
                if interrupted() {
                    cut_short = true;
                    break;
                }
                continue;
            }
            Err(e) => return Err(e).context("receiving the bench stream"),
        };
        let mut data: &[u8] = &chunk;
        if !decided {
            let take = (HEADER_LEN - opening.len()).min(data.len());
            opening.extend_from_slice(&data[..take]);
            let seen = opening.len().min(wire::MAGIC.len());
            if opening.len() < HEADER_LEN && opening[..seen] == wire::MAGIC[..seen] {
                continue;
            }
            decided = true;
            header = Header::decode(&opening);
            match header {
                Some(h) => {
                    data = &data[take..];
                    if h.verify {
                        verifier = Some(Verifier::new(h.unit as usize));
                    }
                }
                // A foreign stream: what looked like a header is payload.
                None => payload += (opening.len() - take) as u64,
            }
        }
        if let Some(v) = verifier.as_mut() {
            v.check_stream(payload, data);
        }
        payload += data.len() as u64;
        drop(chunk);
        ticker.tick(payload);
        if interrupted() {
            cut_short = true;
            break;
        }
    }
    if !decided {
        payload += opening.len() as u64;
    }
    let seconds = start.elapsed().as_secs_f64();
    let usage = resource_usage(UsageOf::Thread)?.since(&before);
    Ok(StreamReport {
        header,
        bytes: payload,
        stats: *rx.stats(),
        seconds,
        usage,
        data_errors: verifier.as_ref().map(|v| v.errors),
        first_error: verifier.as_ref().and_then(|v| v.first_error),
        fallback: rx.fallback().map(|f| f.to_string()),
        interrupted: cut_short,
    })
}

/// The receiver's row for one stream.
pub fn stream_row(bench: &str, peer: SocketAddr, r: &StreamReport) -> Row {
    object(json!({
        "bench": bench,
        "role": "receiver",
        "peer": peer.to_string(),
        "ip": if peer.is_ipv6() { "v6" } else { "v4" },
        "sender_mode": r.header.map(|h| h.mode_name()),
        "zcnet_header": r.header.is_some(),
        "bytes": r.bytes,
        "seconds": r.seconds,
        "gbit_per_s": gbit_per_s(r.bytes, r.seconds),
        "cpu_user_s": r.usage.user.as_secs_f64(),
        "cpu_sys_s": r.usage.system.as_secs_f64(),
        "cpu_us_per_mb": cpu_us_per_mb(&r.usage, r.bytes),
        "ctx_switches": r.usage.context_switches(),
        "mapped_bytes": r.stats.mapped_bytes,
        "mapped_pct": mapped_pct(r.stats.mapped_bytes, r.bytes),
        "fallback": r.fallback,
        "verified": r.data_errors.is_some(),
        "data_errors": r.data_errors,
        "first_error": r.first_error,
        "interrupted": r.interrupted,
    }))
}

/// Percentage of the payload that was mapped (the zcnet header is never mapped and not payload).
pub fn mapped_pct(mapped: u64, payload: u64) -> f64 {
    if payload == 0 {
        return 0.0;
    }
    100.0 * mapped as f64 / payload as f64
}
