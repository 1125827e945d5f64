//! The receiving side of `zcnet bench udp --listen`: one run after another, each from its first
//! datagram to the sender's end datagram, reporting datagrams, bytes, drops and data errors.
//!
//! Datagrams are taken in batches with one `recvmmsg` call ([`DatagramBatch`]). A run whose sender
//! asked for verification is read whole and checked byte for byte; otherwise (`--no-verify`, or a
//! foreign sender without zcnet's header) only the first [`HEADER_LEN`] bytes of each datagram are
//! copied — enough to recognise the header and end datagrams — while `MSG_TRUNC` still gives each
//! datagram's full length: every byte is counted, none copied. After a batch that emptied the queue
//! the receiver sleeps [`PAUSE`] so that the next call finds a batch waiting instead of being woken
//! for each datagram (a wake-up per datagram costs the receiver, and on loopback the sender, more than
//! the datagram itself).
//!
//! The socket coalesces (`UDP_GRO`): a GSO send arrives as one datagram carrying its segment size
//! instead of being split by the kernel into one datagram per segment before it is queued (on
//! loopback that split runs in, and is charged to, the sender). Counts stay those of the wire: a
//! coalesced datagram counts as its segments, and each segment is verified where it starts (every
//! segment of a GSO send starts a pattern unit). The sender's header and end datagrams are never
//! coalesced with data ([`wire::send_control`]). The socket reports its drop counter
//! (`SO_RXQ_OVFL`), so that the row says how many datagrams the kernel dropped for want of room.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::net::sockopt;
use serde_json::{Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::rx::datagrams::{self, Datagram, DatagramBatch};

use crate::bench_listen::{WAKE, woke_up};
use crate::live::{Ticker, interrupted};
use crate::report::{Row, cpu_us_per_mb, gbit_per_s, object};
use crate::wire::{self, HEADER_LEN, Header, Verifier};

/// Datagrams per `recvmmsg` call.
const BATCH: usize = 64;

/// How long the receiver sleeps after a batch that emptied the queue, so that the next call finds a
/// batch waiting rather than being woken for each datagram.
const PAUSE: Duration = Duration::from_micros(100);

/// Bytes kept of each datagram of a run that is verified: the largest UDP payload.
const WHOLE: usize = 65_535;

/// How long a UDP run may stay silent after its first datagram before it counts as ended (a sender
/// whose end datagram was lost, or a foreign sender).
const UDP_IDLE_END: Duration = Duration::from_secs(2);

/// Receive buffer asked for: room for the datagrams a fast sender queues while the receiver sleeps
/// between batches ([`PAUSE`]). Root gets it whole (`SO_RCVBUFFORCE`); others at most
/// `net.core.rmem_max`.
const RECEIVE_BUFFER: usize = 16 << 20;

/// Readies a bound socket for [`receive_datagrams`]: a large receive buffer, GSO sends received whole
/// (`UDP_GRO`) and the drop counter reported with each datagram.
pub fn prepare(socket: &UdpSocket) -> Result<()> {
    if sockopt::set_socket_recv_buffer_size_force(socket, RECEIVE_BUFFER).is_err() {
        sockopt::set_socket_recv_buffer_size(socket, RECEIVE_BUFFER)
            .context("setting SO_RCVBUF on the UDP receiver")?;
    }
    datagrams::set_gro(socket, true).context("setting UDP_GRO on the UDP receiver")?;
    datagrams::count_drops(socket).context("setting SO_RXQ_OVFL on the UDP receiver")
}

/// What one UDP run brought.
#[derive(Debug, Default)]
pub struct DatagramReport {
    /// The zcnet header datagram, if one arrived.
    pub header: Option<Header>,
    /// Data datagrams received.
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// The sender's totals from its end datagram.
    pub sent: Option<(u64, u64)>,
    /// Datagrams the receiving socket dropped during the run (the kernel's count).
    pub socket_drops: u64,
    /// Bytes that differed from the pattern (`None`: not verified).
    pub data_errors: Option<u64>,
    /// First to last datagram.
    pub seconds: f64,
    /// CPU time of the receiving thread.
    pub usage: ResourceUsage,
    /// Whether Ctrl-C cut the run short.
    pub interrupted: bool,
}

/// One run being received.
struct Run<T: FnOnce() -> Ticker> {
    report: DatagramReport,
    verifier: Option<Verifier>,
    /// When the first data datagram arrived, and the CPU time used until then.
    started: Option<(Instant, ResourceUsage)>,
    /// The socket's drop counter at the run's first datagram, and at its latest.
    drops: Option<(u32, u32)>,
    last: Instant,
    ticker: Option<Ticker>,
    ticker_for: Option<T>,
}

impl<T: FnOnce() -> Ticker> Run<T> {
    /// Whether the run's datagrams must be read whole: until its first data datagram (the header
    /// decides), and when its sender asked for verification.
    fn reads_whole(&self) -> bool {
        self.started.is_none() || self.verifier.is_some()
    }

    /// Takes one received datagram; returns true when it ended the run.
    fn take(&mut self, d: &Datagram<'_>) -> Result<bool> {
        let segment = d.segment_size().unwrap_or(d.len()).max(1);
        let mut at = 0;
        // A datagram without a segment size is one of the sender's; a coalesced one (a GSO send, or
        // datagrams GRO merged) is split where the sender's segmentation split it.
        while at < d.len() || (at == 0 && d.is_empty()) {
            let len = segment.min(d.len() - at);
            let seen = d.bytes().get(at..(at + len).min(d.bytes().len()));
            if self.part(d, seen.unwrap_or_default(), len)? {
                return Ok(true);
            }
            at += len.max(1);
        }
        Ok(false)
    }

    /// Takes one datagram (or GRO segment) of `len` bytes whose first bytes are `seen`.
    fn part(&mut self, d: &Datagram<'_>, seen: &[u8], len: usize) -> Result<bool> {
        let whole = seen.len() == len;
        let drops = self.drops.get_or_insert((d.drops(), d.drops()));
        drops.1 = d.drops();
        if whole && let Some(h) = Header::decode(seen) {
            if self.report.datagrams == 0 {
                self.report.header = Some(h);
                self.verifier = h.verify.then(|| Verifier::new(h.unit as usize));
            }
            return Ok(false);
        }
        if whole && let Some(sent) = wire::decode_end(seen) {
            if self.started.is_some() || self.report.header.is_some() {
                self.report.sent = Some(sent);
                return Ok(true);
            }
            // The end of an earlier run, repeated: not part of this one.
            self.drops = None;
            return Ok(false);
        }
        if self.started.is_none() {
            self.started = Some((Instant::now(), resource_usage(UsageOf::Thread)?));
            self.ticker = self.ticker_for.take().map(|f| f());
        }
        if let Some(v) = self.verifier.as_mut() {
            v.check_datagram(self.report.bytes, seen);
        }
        self.report.datagrams += 1;
        self.report.bytes += len as u64;
        Ok(false)
    }
}

/// Receives one UDP run on `socket` (readied by [`prepare`]): from its first datagram to the
/// sender's end datagram (or [`UDP_IDLE_END`] of silence). Returns `None` if interrupted before
/// anything arrived.
pub fn receive_datagrams(
    socket: &UdpSocket,
    ticker_for: impl FnOnce() -> Ticker,
) -> Result<Option<DatagramReport>> {
    socket.set_read_timeout(Some(WAKE))?;
    let mut whole = DatagramBatch::new(BATCH, WHOLE);
    let mut prefix = DatagramBatch::new(BATCH, HEADER_LEN);
    let mut run = Run {
        report: DatagramReport::default(),
        verifier: None,
        started: None,
        drops: None,
        last: Instant::now(),
        ticker: None,
        ticker_for: Some(ticker_for),
    };
    'run: loop {
        let batch = if run.reads_whole() {
            &mut whole
        } else {
            &mut prefix
        };
        let n = match batch.recv(socket) {
            Ok(n) => n,
            Err(e) if woke_up(e.kind()) => {
                if interrupted() {
                    run.report.interrupted = true;
                    break;
                }
                if run.started.is_some() && run.last.elapsed() > UDP_IDLE_END {
                    break;
                }
                continue;
            }
            Err(e) => return Err(e).context("receiving bench datagrams"),
        };
        run.last = Instant::now();
        for d in batch.iter() {
            if run.take(&d)? {
                break 'run;
            }
        }
        if let Some(t) = run.ticker.as_mut() {
            t.tick(run.report.bytes);
        }
        if n < BATCH {
            std::thread::sleep(PAUSE);
        }
    }
    let mut report = run.report;
    let Some((start, before)) = run.started else {
        return Ok((report.header.is_some() || report.sent.is_some()).then_some(report));
    };
    report.seconds = (run.last - start).as_secs_f64();
    report.usage = resource_usage(UsageOf::Thread)?.since(&before);
    report.data_errors = run.verifier.map(|v| v.errors);
    report.socket_drops = run
        .drops
        .map_or(0, |(first, last)| u64::from(last.wrapping_sub(first)));
    Ok(Some(report))
}

/// The receiver's row for one UDP run.
pub fn datagram_row(local: SocketAddr, r: &DatagramReport) -> Row {
    let (sent_datagrams, sent_bytes) = match r.sent {
        Some((d, b)) => (Value::from(d), Value::from(b)),
        None => (Value::Null, Value::Null),
    };
    object(json!({
        "bench": "udp",
        "role": "receiver",
        "local": local.to_string(),
        "ip": if local.is_ipv6() { "v6" } else { "v4" },
        "sender_mode": r.header.map(|h| h.mode_name()),
        "zcnet_header": r.header.is_some(),
        "datagrams": r.datagrams,
        "bytes": r.bytes,
        "sent_datagrams": sent_datagrams,
        "sent_bytes": sent_bytes,
        "socket_drops": r.socket_drops,
        "seconds": r.seconds,
        "gbit_per_s": gbit_per_s(r.bytes, r.seconds),
        "cpu_us_per_mb": cpu_us_per_mb(&r.usage, r.bytes),
        "verified": r.data_errors.is_some(),
        "data_errors": r.data_errors,
        "interrupted": r.interrupted,
    }))
}
