//! Run: One received TCP stream of `zcnet bench tcp|rx --listen` (UDP's runs are
//! [`crate::bench::run::listen_udp`]; the accept loop that runs streams side by side is
//! [`crate::bench::run::serve`]): what arrived — bytes, % mapped for rx, CPU per MB, bytes that differ from
//! the pattern when the sender asked for verification — and how the stream ended.
//!
//! TCP streams are read with [`zcnet::rx::Receiver`] (plain `recv` for `bench tcp`, zero-copy receive
//! for `bench rx`) with `SO_RCVLOWAT`, so that a wake-up brings a batch of bytes rather than a few
//! segments: a blocking read per segment costs several times the CPU per MB and would cap the sender.
//!
//! A stream that does not open with zcnet's magic (tcp_mmap, msg_zerocopy) is counted, not verified.
//! One that opens with it but whose header is out of bounds ([`Header::decode`]) is malformed: it is
//! ended before anything is sized by it. Nothing a peer does ends more than its own stream: a reset,
//! a malformed or truncated header, silence past the idle timeout each end the stream with
//! [`Ended`] and a reason.

use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::rx::{Receiver, RxConfig, RxStats};

use crate::bench::run::why;
use crate::bench::run::wire::{
    self, Finish, HEADER_LEN, Header, Rejected, STREAM_END_LEN, Verifier,
};
use crate::live::{Ticker, interrupted};
use crate::report::{Row, cpu_us_per_mb, emit, gbit_per_s, in_flag_words, object};

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

/// How a received stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The peer closed it (FIN) after everything its header announced.
    Closed,
    /// The peer closed it within its header, or before the bytes its header announced.
    Truncated,
    /// The peer reset it (`ECONNRESET`, or `ENOTCONN` for a connection reset before it was read).
    Reset,
    /// The peer stopped answering TCP keepalive probes (`ETIMEDOUT`): it vanished.
    Keepalive,
    /// No bytes arrived for the idle timeout.
    Idle,
    /// It opened with zcnet's magic but its header was out of bounds.
    Malformed,
    /// Ctrl-C, here or (its end mark says so) at the sender.
    Interrupted,
    /// Refused at accept: the receiver already took its most streams at once.
    Refused,
    /// Any other error of the receiving socket.
    Error,
}

impl Ended {
    /// The name rows carry.
    pub fn name(self) -> &'static str {
        match self {
            Ended::Closed => "closed",
            Ended::Truncated => "truncated",
            Ended::Reset => "reset",
            Ended::Keepalive => "keepalive",
            Ended::Idle => "idle",
            Ended::Malformed => "malformed",
            Ended::Interrupted => "interrupted",
            Ended::Refused => "refused",
            Ended::Error => "error",
        }
    }

    /// How a receive error ended a stream.
    fn of_error(kind: ErrorKind) -> Ended {
        match kind {
            ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::BrokenPipe => Ended::Reset,
            ErrorKind::TimedOut => Ended::Keepalive,
            _ => Ended::Error,
        }
    }
}

/// What one received TCP stream brought.
#[derive(Debug, Default)]
pub struct StreamReport {
    /// The zcnet header, or `None` for a foreign sender (or a stream that ended before one).
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
    /// How the stream ended (`None` only before it is received).
    pub ended: Option<Ended>,
    /// Why it ended otherwise than closed whole, in words.
    pub reason: Option<String>,
}

impl StreamReport {
    /// A stream that ended before it was read (refused, or its socket could not be set up).
    pub fn ended_early(ended: Ended, reason: String) -> StreamReport {
        StreamReport {
            ended: Some(ended),
            reason: Some(reason),
            ..StreamReport::default()
        }
    }

    /// Whether Ctrl-C cut the stream short.
    pub fn interrupted(&self) -> bool {
        self.ended == Some(Ended::Interrupted)
    }

    /// Whether the stream arrived whole: closed by its peer after every byte its header announced
    /// (a header that announces none: a duration-bound sender, whose end mark — checked by
    /// [`Reading::closed`] — or, from a sender with an unmarked header, close is its end).
    pub fn complete(&self) -> bool {
        self.ended == Some(Ended::Closed)
            && self
                .header
                .is_none_or(|h| h.bytes == 0 || h.bytes == self.bytes)
    }

    /// Why a stream whose sender asked for verification did not verify (it did not arrive whole, or
    /// bytes differ); `None` for one that did, one not asked to verify, or one cut short by Ctrl-C.
    pub fn failure(&self) -> Option<String> {
        if !self.header.is_some_and(|h| h.verify) || self.interrupted() {
            return None;
        }
        if !self.complete() {
            let ended = self.ended.map_or("?", Ended::name);
            return Some(match &self.reason {
                Some(why) => format!("ended {ended}: {why}"),
                None => format!("ended {ended}"),
            });
        }
        match self.data_errors {
            Some(n) if n > 0 => Some(format!(
                "{n} bytes differ from what was sent, the first at offset {}",
                self.first_error.unwrap_or(0)
            )),
            _ => None,
        }
    }
}

/// The opening of a stream and its payload so far: the header once decided, then the pattern
/// checked when asked. Of a stream whose header says it ends with the sender's end mark
/// ([`wire::MAGIC_MARKED`]), the last [`STREAM_END_LEN`] bytes are held back until it ends.
#[derive(Default)]
struct Reading {
    /// The first bytes, up to [`HEADER_LEN`], until the header is decided.
    opening: Vec<u8>,
    decided: bool,
    header: Option<Header>,
    verifier: Option<Verifier>,
    payload: u64,
    /// The last bytes of a marked stream, at most [`STREAM_END_LEN`]: its end mark, once it ends.
    held: Vec<u8>,
}

impl Reading {
    /// Takes in the next bytes of the stream; fails with the reason when its header is malformed.
    fn take(&mut self, chunk: &[u8]) -> Result<(), String> {
        let mut data = chunk;
        if !self.decided {
            let take = (HEADER_LEN - self.opening.len()).min(data.len());
            self.opening.extend_from_slice(&data[..take]);
            if self.opening.len() < HEADER_LEN && Header::may_open(&self.opening) {
                return Ok(());
            }
            self.decided = true;
            match Header::decode(&self.opening) {
                Ok(h) => {
                    data = &data[take..];
                    if h.verify {
                        self.verifier = Some(Verifier::new(h.unit as usize));
                    }
                    self.header = Some(h);
                }
                // A foreign stream: what looked like a header is payload.
                Err(Rejected::Foreign) => self.payload += (self.opening.len() - take) as u64,
                Err(Rejected::Malformed(why)) => return Err(why),
            }
        }
        if !self.header.is_some_and(|h| h.marked) {
            self.pay(data);
            return Ok(());
        }
        // Pass on all but the last STREAM_END_LEN bytes seen: those may be the end mark.
        let out = (self.held.len() + data.len()).saturating_sub(STREAM_END_LEN);
        let from_held = out.min(self.held.len());
        let released: Vec<u8> = self.held.drain(..from_held).collect();
        self.pay(&released);
        let (now, later) = data.split_at(out - from_held);
        self.pay(now);
        self.held.extend_from_slice(later);
        Ok(())
    }

    /// Takes in payload bytes: checked when asked, and counted.
    fn pay(&mut self, data: &[u8]) {
        if let Some(v) = self.verifier.as_mut() {
            v.check_stream(self.payload, data);
        }
        self.payload += data.len() as u64;
    }

    /// At the end of the stream: the sender's end mark, when the bytes held back are one; otherwise
    /// they are payload, taken in here.
    fn end_mark(&mut self) -> Option<(u64, Finish)> {
        let held = std::mem::take(&mut self.held);
        let mark = wire::decode_stream_end(&held);
        if mark.is_none() {
            self.pay(&held);
        }
        mark
    }

    /// Bytes received so far, header included.
    fn received(&self) -> u64 {
        let header = if self.header.is_some() { HEADER_LEN } else { 0 };
        let opening = self.opening.len() * usize::from(!self.decided);
        self.payload + (header + opening + self.held.len()) as u64
    }

    /// How a stream the peer closed ended: truncated within its header, before what its header
    /// announced, or (a marked stream) without its sender's end mark; interrupted when the end mark
    /// says Ctrl-C stopped the sender; otherwise closed.
    fn closed(&mut self) -> (Ended, Option<String>) {
        if !self.decided && !self.opening.is_empty() {
            return (
                Ended::Truncated,
                Some(format!(
                    "closed within its {HEADER_LEN}-byte header, after {} bytes",
                    self.opening.len()
                )),
            );
        }
        if self.header.is_some_and(|h| h.marked) {
            return match self.end_mark() {
                Some((sent, _)) if sent != self.payload => (
                    Ended::Truncated,
                    Some(format!(
                        "{} bytes arrived, but the sender's end mark says it sent {sent}",
                        self.payload
                    )),
                ),
                Some((_, Finish::Done)) => (Ended::Closed, None),
                Some((sent, Finish::Interrupted)) => (
                    Ended::Interrupted,
                    Some(format!("Ctrl-C stopped the sender after {sent} bytes")),
                ),
                None => (
                    Ended::Truncated,
                    Some(format!(
                        "closed after {} bytes without the sender's end mark: the sender stopped \
                         before it finished (killed, or its connection cut)",
                        self.payload
                    )),
                ),
            };
        }
        match self.header.map(|h| h.bytes) {
            Some(announced) if announced != 0 && self.payload < announced => (
                Ended::Truncated,
                Some(format!(
                    "closed after {} of the {announced} bytes its header announced",
                    self.payload
                )),
            ),
            Some(announced) if announced != 0 && self.payload > announced => (
                Ended::Closed,
                Some(format!(
                    "{} bytes arrived, more than the {announced} its header announced",
                    self.payload
                )),
            ),
            _ => (Ended::Closed, None),
        }
    }
}

/// Reads one stream to its end with `config`, printing interval lines through `ticker`. Whatever the
/// peer does ends only this stream, reported in [`StreamReport::ended`]: a `watch` (kept by the
/// accept loop) ends it from outside when it stays idle or on Ctrl-C, even while the receiver waits
/// in `poll` for a zero-copy receive.
pub fn receive_stream(
    stream: TcpStream,
    config: RxConfig,
    ticker: &mut Ticker,
    watch: Option<&Watch>,
) -> StreamReport {
    ticker.restart();
    let before = resource_usage(UsageOf::Thread).unwrap_or_default();
    let start = Instant::now();
    let mut reading = Reading::default();
    let mut report = StreamReport::default();
    let setup = stream
        .set_read_timeout(Some(WAKE))
        .map_err(|e| (e.kind(), e.to_string()))
        .and_then(|()| {
            Receiver::new(stream, config).map_err(|e| (e.kind(), in_flag_words(&e.to_string())))
        });
    let (ended, reason) = match setup {
        Err((kind, why)) => (
            Ended::of_error(kind),
            Some(format!("setting up the receiver: {why}")),
        ),
        Ok(mut rx) => {
            let end = read_to_end(&mut rx, &mut reading, ticker, watch);
            // Bytes held back for an end mark that did not come are payload.
            reading.end_mark();
            report.stats = *rx.stats();
            report.fallback = rx
                .zerocopy_status()
                .err()
                .map(|f| in_flag_words(&f.to_string()));
            end
        }
    };
    report.seconds = start.elapsed().as_secs_f64();
    report.usage = resource_usage(UsageOf::Thread)
        .map(|u| u.since(&before))
        .unwrap_or_default();
    report.header = reading.header;
    report.bytes = reading.payload;
    report.data_errors = reading.verifier.as_ref().map(|v| v.errors);
    report.first_error = reading.verifier.as_ref().and_then(|v| v.first_error);
    report.ended = Some(ended);
    report.reason = reason;
    report
}

/// Receives until the stream ends, saying how and why.
fn read_to_end(
    rx: &mut Receiver,
    reading: &mut Reading,
    ticker: &mut Ticker,
    watch: Option<&Watch>,
) -> (Ended, Option<String>) {
    // What the watch decided comes first: the socket it shut down then reads as closed.
    let stopped = || watch.and_then(Watch::stopped);
    loop {
        let chunk = match rx.recv() {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return stopped().unwrap_or_else(|| reading.closed()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                if let Some(end) = stopped() {
                    return end;
                }
                if interrupted() {
                    return (Ended::Interrupted, None);
                }
                continue;
            }
            Err(e) => {
                let why = format!(
                    "{} after {} bytes",
                    in_flag_words(&e.to_string()),
                    reading.received()
                );
                return stopped().unwrap_or((Ended::of_error(e.kind()), Some(why)));
            }
        };
        if let Some(w) = watch {
            w.heard();
        }
        if let Err(why) = reading.take(&chunk) {
            return (Ended::Malformed, Some(why));
        }
        drop(chunk);
        ticker.tick(reading.payload);
        if interrupted() {
            return (Ended::Interrupted, None);
        }
    }
}

/// The receiver's row for one stream.
pub fn stream_row(bench: &str, peer: SocketAddr, r: &StreamReport) -> Row {
    let complete = r.complete();
    let mut row = object(json!({
        "bench": bench,
        "role": "receiver",
        "peer": peer.to_string(),
        "ip": if peer.is_ipv6() { "v6" } else { "v4" },
        "sender_mode": r.header.map(|h| h.mode_name()),
        // The unit of the sender's pattern: its bytes per send (tcp) or per write (rx).
        "size": r.header.map(|h| h.unit),
        "zcnet_header": r.header.is_some(),
        "bytes": r.bytes,
        "announced_bytes": r.header.map(|h| h.bytes).filter(|&b| b > 0),
        "seconds": r.seconds,
        "gbit_per_s": gbit_per_s(r.bytes, r.seconds),
        "cpu_user_s": r.usage.user.as_secs_f64(),
        "cpu_sys_s": r.usage.system.as_secs_f64(),
        "cpu_us_per_mb": cpu_us_per_mb(&r.usage, r.bytes),
        "ctx_switches": r.usage.context_switches(),
        "mapped_bytes": r.stats.mapped_bytes,
        "mapped_pct": mapped_pct(r.stats.mapped_bytes, r.bytes),
        "fallback": r.fallback,
        "why": why::rx_short(&r.stats),
        "verified": r.data_errors.is_some() && complete,
        "data_errors": r.data_errors,
        "first_error": r.first_error,
        "ended": r.ended.map(Ended::name),
        "complete": complete,
        "reason": r.reason,
        "interrupted": r.interrupted(),
    }));
    if r.stats.zcrx_arms > 0 {
        // Received through io_uring zcrx: its bytes, and those the kernel copied into the area.
        row.insert("zcrx_bytes".into(), json!(r.stats.zcrx_bytes));
        row.insert("zcrx_copied_bytes".into(), json!(r.stats.zcrx_copied_bytes));
    }
    row
}

/// Percentage of the payload that was mapped (the zcnet header is never mapped and not payload).
pub fn mapped_pct(mapped: u64, payload: u64) -> f64 {
    if payload == 0 {
        return 0.0;
    }
    100.0 * mapped as f64 / payload as f64
}

/// What the accept loop keeps of a stream being received, to end it from outside: the receiving
/// thread may wait in `poll` without a timeout (a zero-copy receive), so ending it takes its socket
/// switched to non-blocking and shut down for reading, after which the receiver's next call returns.
pub struct Watch {
    socket: TcpStream,
    since: Instant,
    /// Milliseconds from `since` to the last bytes.
    last: AtomicU64,
    /// How the watch ended the stream, and why, once it has.
    stop: Mutex<Option<(Ended, String)>>,
    /// Whether the stream has been received (set before its row is printed, so that a peer that
    /// reads the row finds the stream's slot free).
    pub received: AtomicBool,
}

impl Watch {
    pub fn new(stream: &TcpStream) -> std::io::Result<Watch> {
        Ok(Watch {
            socket: stream.try_clone()?,
            since: Instant::now(),
            last: AtomicU64::new(0),
            stop: Mutex::new(None),
            received: AtomicBool::new(false),
        })
    }

    /// Records that bytes arrived now.
    pub fn heard(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    pub fn silent_for(&self) -> Duration {
        self.since
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }

    /// Ends the stream as `ended` (the first ending stays).
    pub fn end(&self, ended: Ended, reason: String) {
        let mut stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        if stop.is_none() {
            *stop = Some((ended, reason));
            let _ = self.socket.set_nonblocking(true);
            let _ = self.socket.shutdown(Shutdown::Read);
        }
    }

    /// How the watch ended the stream, if it did.
    pub fn stopped(&self) -> Option<(Ended, Option<String>)> {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        stop.as_ref().map(|(e, why)| (*e, Some(why.clone())))
    }
}
