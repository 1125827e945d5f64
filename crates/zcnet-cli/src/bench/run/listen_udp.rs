//! Run: The receiving side of `zcnet bench udp --listen`: one run after another, each from its first
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
//! coalesced with data ([`wire::send_control`]).
//!
//! Loss is counted in datagrams, from the sequence number each data datagram of a zcnet run
//! carries: lost = datagrams sent (the end datagram's count) − distinct sequence numbers received,
//! with duplicates and reordering counted apart, so that a repeat cannot hide a loss. The socket's
//! drop counter (`SO_RXQ_OVFL`) is reported beside it as what it is: the kernel counts each queued
//! datagram it dropped once, and a coalesced GSO send of 40 segments is one.
//!
//! A run belongs to the address its header datagram came from (or, for a sender without zcnet's
//! header, its first datagram): datagrams from anywhere else while it lasts — an end datagram
//! among them — are counted as foreign and ignored, and so is what came before its header (but
//! for what its own sender sent and was rejected). A run without the header takes no end datagram
//! (its totals could be anything): it ends by silence. A header datagram from elsewhere takes over a
//! run without the header (a stray datagram, a foreign sender: what it brought is counted as
//! foreign), and is refused while a run with the header lasts: one run at a time, since a run's CPU
//! figures are the receiving thread's. The exception is a sender's `-P N`: its header announces N
//! streams, and up to N header datagrams identical to the first from its IP address (each stream
//! sends from a port of its own) join the run as streams of their own, each bound to its source,
//! counted, verified and reported as it ends, the run ending with the last of them; their CPU
//! figures are the shared thread's over each stream's time, which cannot be split between
//! streams. Every header datagram is answered ([`wire::Answer`]), so a
//! refused sender learns it at once, and the refusal gets a row of its own. A datagram that opens
//! with zcnet's header or end magic but is malformed, or whose fields a UDP run cannot carry (a
//! pattern unit outside 8..=65507), is rejected before anything is sized by it, counted, and named
//! once on standard error. An answer leaves from the address its header datagram was sent to
//! (`IP_PKTINFO`/`IPV6_PKTINFO`): a receiver bound to every address would otherwise answer from the
//! route's source address, which a sender connected to another local address (127.0.0.2, a second
//! address of the interface) does not take.

use std::mem;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::net::sockopt;
use serde_json::{Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};
use zcnet::rx::datagrams::{self, Datagram, DatagramBatch};
use zcnet::xdp::{self, UdpEndpoint};

use crate::bench::run::af_xdp::{add_endpoint_fields, ns_per_packet};
use crate::bench::run::listen::{WAKE, woke_up};
use crate::bench::run::wire::{self, Answer, Bench, HEADER_LEN, Header, SEQ_LEN, Verifier};
use crate::live::{Ticker, interrupted};
use crate::report::{Row, cpu_us_per_mb, gbit_per_s, object};

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
/// (`UDP_GRO`), the drop counter and the address it was sent to reported with each datagram.
pub fn prepare(socket: &UdpSocket) -> Result<()> {
    if sockopt::set_socket_recv_buffer_size_force(socket, RECEIVE_BUFFER).is_err() {
        sockopt::set_socket_recv_buffer_size(socket, RECEIVE_BUFFER)
            .context("setting SO_RCVBUF on the UDP receiver")?;
    }
    datagrams::set_gro(socket, true).context("setting UDP_GRO on the UDP receiver")?;
    datagrams::count_drops(socket).context("setting SO_RXQ_OVFL on the UDP receiver")?;
    datagrams::record_destination(socket)
        .context("setting IP_PKTINFO (IPV6_RECVPKTINFO) on the UDP receiver")
}

/// How a UDP run ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The sender's end datagram arrived.
    #[default]
    EndDatagram,
    /// The run's sender stayed silent for [`UDP_IDLE_END`] (its end datagrams were lost, or it sent
    /// none): how many of its last datagrams were lost is not known.
    Idle,
    /// Ctrl-C.
    Interrupted,
    /// Refused: its header datagram came while another sender's run with the header lasted.
    Refused,
}

impl RunEnd {
    /// The name rows carry.
    pub fn name(self) -> &'static str {
        match self {
            RunEnd::EndDatagram => "end datagram",
            RunEnd::Idle => "idle",
            RunEnd::Interrupted => "interrupted",
            RunEnd::Refused => "refused",
        }
    }
}

/// What one UDP run brought.
#[derive(Debug, Default)]
pub struct DatagramReport {
    /// The zcnet header datagram, if one arrived.
    pub header: Option<Header>,
    /// The run's sender: the source of its header datagram (or, without one, of its first datagram).
    pub peer: Option<SocketAddr>,
    /// Data datagrams received from the run's sender (each GRO segment one), duplicates included.
    pub datagrams: u64,
    /// Payload bytes received from the run's sender.
    pub bytes: u64,
    /// The sender's totals from its end datagram.
    pub sent: Option<(u64, u64)>,
    /// Datagrams by sequence number: lost, duplicated, reordered (`None`: the run carried no
    /// sequence numbers — a sender without zcnet's header).
    pub sequence: Option<SequenceCounts>,
    /// Datagrams from other sources while the run was bound to its sender, ignored.
    pub foreign: u64,
    /// Datagrams that opened with a header or end magic but were malformed or out of bounds, ignored.
    pub rejected: u64,
    /// The socket's drop counter over the run (`SO_RXQ_OVFL`): what the kernel dropped, counted per
    /// queued datagram — a coalesced GSO send dropped whole counts once.
    pub socket_drops: u64,
    /// Bytes that differed from the pattern (`None`: not verified).
    pub data_errors: Option<u64>,
    /// First to last datagram.
    pub seconds: f64,
    /// CPU time of the receiving thread.
    pub usage: ResourceUsage,
    /// How the run ended.
    pub end: RunEnd,
    /// Whether Ctrl-C cut the run short.
    pub interrupted: bool,
    /// Why a refused run was refused.
    pub refusal: Option<String>,
    /// Which of its sender's `-P` streams the run is, and of how many (`None`: a run of one).
    pub stream: Option<(u8, u8)>,
}

impl DatagramReport {
    /// Why a run whose sender asked for verification did not arrive whole and right (`None`: it
    /// did, or verification was not asked for).
    /// A refused run is not judged: its sender was told.
    pub fn shortfall(&self) -> Option<String> {
        if !self.header.is_some_and(|h| h.verify) || self.interrupted || self.refusal.is_some() {
            return None;
        }
        let mut why = Vec::new();
        if let Some(n) = self.data_errors.filter(|&n| n > 0) {
            why.push(format!("{n} bytes differ from what was sent"));
        }
        if let Some(s) = self.sequence.filter(|s| s.lost > 0) {
            why.push(format!("{} datagrams lost", s.lost));
        }
        if self.end == RunEnd::Idle {
            why.push("the sender's end datagram never arrived (the run's tail is unknown)".into());
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    /// Why the run was refused, or did not arrive whole and right ([`Self::shortfall`]).
    pub fn reason(&self) -> Option<String> {
        self.refusal.clone().or_else(|| self.shortfall())
    }
}

/// Lost, duplicated and reordered datagrams of a run, from their sequence numbers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SequenceCounts {
    /// Datagrams sent (the end datagram's count, or else one past the highest sequence number seen)
    /// that never arrived.
    pub lost: u64,
    /// Datagrams that arrived more than once (each repeat counts).
    pub duplicated: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: u64,
}

/// Sequence numbers remembered behind the highest one seen: a datagram later than this counts as
/// reordered but cannot be told from a duplicate (and counts as new).
const SEQUENCE_WINDOW: u64 = 1 << 20;

/// Which sequence numbers arrived, over a sliding window below the highest.
#[derive(Debug)]
struct Sequences {
    /// Bit `seq % SEQUENCE_WINDOW` set: `seq` arrived (for `seq` in the window below `next`).
    seen: Vec<u64>,
    /// One past the highest sequence number seen.
    next: u64,
    /// Distinct sequence numbers seen.
    distinct: u64,
    duplicated: u64,
    reordered: u64,
}

impl Sequences {
    fn new() -> Sequences {
        Sequences {
            seen: vec![0; (SEQUENCE_WINDOW / 64) as usize],
            next: 0,
            distinct: 0,
            duplicated: 0,
            reordered: 0,
        }
    }

    fn bit(seq: u64) -> (usize, u64) {
        let at = seq % SEQUENCE_WINDOW;
        ((at / 64) as usize, 1 << (at % 64))
    }

    fn record(&mut self, seq: u64) {
        let late = seq < self.next;
        if !late {
            // Forget what the window slides past (the slot of `seq` held `seq - SEQUENCE_WINDOW`).
            if seq - self.next >= SEQUENCE_WINDOW {
                self.seen.fill(0);
            } else {
                for s in self.next..=seq {
                    let (word, mask) = Self::bit(s);
                    self.seen[word] &= !mask;
                }
            }
            self.next = seq.saturating_add(1);
        } else if self.next - seq > SEQUENCE_WINDOW {
            self.reordered += 1;
            self.distinct += 1;
            return;
        }
        let (word, mask) = Self::bit(seq);
        if self.seen[word] & mask != 0 {
            self.duplicated += 1;
        } else {
            self.seen[word] |= mask;
            self.distinct += 1;
            self.reordered += u64::from(late);
        }
    }

    /// The counts, with `sent` datagrams sent (`None`: not known; the highest seen is the bound).
    fn counts(&self, sent: Option<u64>) -> SequenceCounts {
        SequenceCounts {
            lost: sent.unwrap_or(self.next).saturating_sub(self.distinct),
            duplicated: self.duplicated,
            reordered: self.reordered,
        }
    }
}

/// The header of a UDP run in `b`, a datagram of `len` bytes opening with [`wire::MAGIC`], with
/// every field checked against what a UDP run can carry before anything is sized by it.
fn udp_header(b: &[u8], len: usize) -> Result<Header, String> {
    if len != HEADER_LEN {
        return Err(format!("{len} bytes, not {HEADER_LEN}"));
    }
    let h = Header::decode(b).map_err(|e| e.to_string())?;
    if h.bench != Bench::Udp {
        return Err(format!("a {:?} header", h.bench));
    }
    if !(SEQ_LEN as u32..=MAX_UNIT).contains(&h.unit) {
        return Err(format!(
            "unit {} outside {SEQ_LEN}..={MAX_UNIT} (a datagram's sequence number to the largest UDP payload)",
            h.unit
        ));
    }
    Ok(h)
}

/// Largest pattern unit of a UDP run: the largest UDP payload (IPv4).
const MAX_UNIT: u32 = 65_507;

/// One received datagram as a run reads it: from a UDP socket (`recvmmsg`) or from an AF_XDP
/// [`UdpEndpoint`] (`--api af_xdp`).
trait Incoming {
    /// The bytes copied (all of them, or a prefix of an unverified run's datagram).
    fn bytes(&self) -> &[u8];
    /// The datagram's full length.
    fn len(&self) -> usize;
    /// The segment size of a coalesced (GRO) datagram.
    fn segment_size(&self) -> Option<usize>;
    /// The sender's address.
    fn source(&self) -> Option<SocketAddr>;
    /// The local address it was sent to.
    fn destination(&self) -> Option<IpAddr>;
    /// The socket's drop counter when it was queued (`SO_RXQ_OVFL`; 0 where there is none).
    fn drops(&self) -> u32;
}

/// Sources of header datagrams refused in one run that get a row each; a run refuses more (each
/// answered) without a row.
const REFUSED_ROWS: usize = 64;

impl Incoming for Datagram<'_> {
    fn bytes(&self) -> &[u8] {
        Datagram::bytes(self)
    }
    fn len(&self) -> usize {
        Datagram::len(self)
    }
    fn segment_size(&self) -> Option<usize> {
        Datagram::segment_size(self)
    }
    fn source(&self) -> Option<SocketAddr> {
        Datagram::source(self)
    }
    fn destination(&self) -> Option<IpAddr> {
        Datagram::destination(self)
    }
    fn drops(&self) -> u32 {
        Datagram::drops(self)
    }
}

/// A datagram of the endpoint, whose payload is read where it arrived, in its UMEM frame.
impl Incoming for xdp::Datagram<'_> {
    fn bytes(&self) -> &[u8] {
        self.payload
    }
    fn len(&self) -> usize {
        self.payload.len()
    }
    fn segment_size(&self) -> Option<usize> {
        None
    }
    fn source(&self) -> Option<SocketAddr> {
        Some(self.source)
    }
    fn destination(&self) -> Option<IpAddr> {
        Some(self.destination.ip())
    }
    fn drops(&self) -> u32 {
        0
    }
}

/// Where a run's datagrams come from.
trait Source {
    /// Waits up to [`WAKE`] for a batch of at most [`BATCH`] datagrams (read whole when `whole`)
    /// and hands each to `take`; returns how many the batch held (`None`: the wait passed with
    /// none).
    fn batch(
        &mut self,
        whole: bool,
        take: &mut dyn FnMut(&dyn Incoming) -> Result<()>,
    ) -> Result<Option<usize>>;

    /// Sends `answer` to the sender of a header datagram; a failure is ignored (the sender then
    /// hears nothing, and sends all the same).
    fn answer(&mut self, reply: Reply, answer: &Answer);

    /// Adds what the source tells of itself to the row of an ended run.
    fn add_fields(&self, _row: &mut Row) {}
}

/// Where an answer to a header datagram goes: to its sender, from the local address it was sent
/// to where the source says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reply {
    to: SocketAddr,
    from: Option<IpAddr>,
}

/// A UDP socket read with `recvmmsg`.
struct SocketSource<'s> {
    socket: &'s UdpSocket,
    whole: DatagramBatch,
    prefix: DatagramBatch,
}

impl Source for SocketSource<'_> {
    fn batch(
        &mut self,
        whole: bool,
        take: &mut dyn FnMut(&dyn Incoming) -> Result<()>,
    ) -> Result<Option<usize>> {
        let batch = if whole {
            &mut self.whole
        } else {
            &mut self.prefix
        };
        let n = match batch.recv(self.socket) {
            Ok(n) => n,
            Err(e) if woke_up(e.kind()) => return Ok(None),
            Err(e) => return Err(e).context("receiving bench datagrams"),
        };
        for d in batch.iter() {
            take(&d)?;
        }
        Ok(Some(n))
    }

    /// From the address the header was sent to; from the route's source address where that
    /// fails (a header sent to a broadcast address).
    fn answer(&mut self, reply: Reply, answer: &Answer) {
        let bytes = answer.encode();
        let sent = reply
            .from
            .map(|from| datagrams::send_from(self.socket, &bytes, reply.to, from));
        if !matches!(sent, Some(Ok(_))) {
            let _ = self.socket.send_to(&bytes, reply.to);
        }
    }
}

/// An AF_XDP UDP endpoint: every datagram's payload is read in place (there is nothing to copy).
impl Source for UdpEndpoint {
    fn add_fields(&self, row: &mut Row) {
        add_endpoint_fields(row, self);
    }

    fn batch(
        &mut self,
        _whole: bool,
        take: &mut dyn FnMut(&dyn Incoming) -> Result<()>,
    ) -> Result<Option<usize>> {
        // The rings are read before any wait: a busy receiver makes no system call per batch (a
        // fill ring that needs a wakeup gets it when its frames go back).
        let mut batch = self.receive(BATCH)?;
        if batch.is_empty() {
            drop(batch);
            if !self.wait(Some(WAKE))? {
                return Ok(None);
            }
            batch = self.receive(BATCH)?;
        }
        for d in batch.iter() {
            take(&d)?;
        }
        Ok(Some(batch.len()))
    }

    /// From the address the header was sent to (an endpoint bound to every address holds them
    /// all), else from the endpoint's own, or the route's source address.
    fn answer(&mut self, reply: Reply, answer: &Answer) {
        let bytes = answer.encode();
        let write = |b: &mut [u8]| b.copy_from_slice(&bytes);
        let mut batch = self.send_batch();
        let built = match reply.from {
            Some(from) => batch.push_from(from, reply.to, bytes.len(), write),
            None => batch.push(reply.to, bytes.len(), write),
        };
        if built.is_ok() {
            let _ = batch.flush();
        }
    }
}

/// One run being received.
struct Run<T: FnOnce() -> Ticker> {
    report: DatagramReport,
    verifier: Option<Verifier>,
    sequences: Option<Sequences>,
    /// When the first data datagram arrived, and the CPU time used until then.
    started: Option<(Instant, ResourceUsage)>,
    /// The socket's drop counter at the run's first datagram, and at its latest.
    drops: Option<(u32, u32)>,
    /// When the run's sender was last heard from (the end of the batch that brought its latest
    /// datagram: a clock read per batch, not per datagram).
    last: Instant,
    /// A datagram of the run's sender came in the batch being taken.
    heard: bool,
    /// The run has ended: its end datagram came, its sender went silent, or Ctrl-C.
    ended: bool,
    ticker: Option<Ticker>,
    ticker_for: Option<T>,
    /// Answers to header datagrams of the batch being taken, sent after it.
    answers: Vec<(Reply, Answer)>,
    /// Runs refused in the batch being taken, reported after it.
    refused: Vec<DatagramReport>,
    /// Sources refused during this run that got a row (at most [`REFUSED_ROWS`]).
    refused_from: Vec<SocketAddr>,
    /// Where the datagrams rejected before the run's header came from: `None` before any,
    /// `Some(None)` from several sources (or one unknown).
    rejected_from: Option<Option<SocketAddr>>,
}

impl<T: FnOnce() -> Ticker> Run<T> {
    /// Whether the run's datagrams must be read whole: until its first data datagram (the header
    /// decides), and when its sender asked for verification.
    fn reads_whole(&self) -> bool {
        self.started.is_none() || self.verifier.is_some()
    }

    /// Takes one received datagram; returns true when it ended the run.
    fn take(&mut self, d: &dyn Incoming) -> Result<bool> {
        let segment = d.segment_size().unwrap_or(d.len()).max(1);
        let first = wire::sequence(d.bytes());
        let mut at = 0;
        // A datagram without a segment size is one of the sender's; a coalesced one (a GSO send, or
        // datagrams GRO merged) is split where the sender's segmentation split it. Segments whose
        // bytes were not copied (an unverified run) are taken as following the first in sequence,
        // as a GSO send's segments and GRO's merges of one flow do.
        let mut index = 0;
        while at < d.len() || (at == 0 && d.len() == 0) {
            let len = segment.min(d.len() - at);
            let seen = d.bytes().get(at..(at + len).min(d.bytes().len()));
            let seq = first.map(|s| s.wrapping_add(index));
            if self.part(d, seen.unwrap_or_default(), len, seq)? {
                return Ok(true);
            }
            at += len.max(1);
            index += 1;
        }
        Ok(false)
    }

    /// Counts a datagram that opened with a zcnet magic but is not what it claims, and says so.
    fn reject(&mut self, d: &dyn Incoming, what: &str, why: &str) {
        if self.report.rejected == 0 {
            let from = d.source().map_or("?".into(), |s| s.to_string());
            eprintln!("zcnet: udp: ignored a {what} datagram from {from}: {why}");
        }
        self.report.rejected += 1;
        if self.report.header.is_none() {
            let source = d.source();
            self.rejected_from = match self.rejected_from {
                None => Some(source),
                Some(from) => Some(from.filter(|_| from == source)),
            };
        }
    }

    /// Takes a valid header datagram from `reply.to`: a repeat of the run's header is answered
    /// again, and keeps the run from ending by silence (a sender that has not heard the answer yet
    /// offers its header for longer than [`UDP_IDLE_END`]); one from elsewhere opens the run, or
    /// takes over a run without the header (what that brought becomes foreign), or — while a run
    /// with the header lasts — is refused.
    fn header(&mut self, reply: Reply, h: Header, drops: u32) {
        let from = reply.to;
        match self.report.peer.filter(|_| self.report.header.is_some()) {
            Some(peer) if peer == from => {
                self.heard = true;
                self.answers.push((reply, Answer::Accepted));
            }
            Some(peer) => {
                self.report.foreign += 1;
                let why = format!("busy with a run from {peer} (one run at a time)");
                self.answers.push((reply, Answer::Refused(why.clone())));
                if self.refused_from.len() < REFUSED_ROWS && !self.refused_from.contains(&from) {
                    self.refused_from.push(from);
                    self.refused.push(DatagramReport {
                        header: Some(h),
                        peer: Some(from),
                        end: RunEnd::Refused,
                        refusal: Some(why),
                        ..DatagramReport::default()
                    });
                }
            }
            None => {
                let stray = mem::take(&mut self.report);
                // What was rejected before the header is the run's if its sender sent it; what
                // else came before is not the run's.
                let own = self.rejected_from.take() == Some(Some(from));
                let (rejected, others) = if own {
                    (stray.rejected, 0)
                } else {
                    (0, stray.rejected)
                };
                self.report = DatagramReport {
                    header: Some(h),
                    peer: Some(from),
                    foreign: stray.foreign + stray.datagrams + others,
                    rejected,
                    ..DatagramReport::default()
                };
                self.verifier = h.verify.then(|| Verifier::new(h.unit as usize));
                self.sequences = Some(Sequences::new());
                self.started = None;
                self.drops = Some((drops, drops));
                self.last = Instant::now();
                self.answers.push((reply, Answer::Accepted));
            }
        }
    }

    /// Takes one datagram (or GRO segment) of `len` bytes whose first bytes are `seen`, and whose
    /// sequence number is `inferred` if its bytes do not say.
    fn part(
        &mut self,
        d: &dyn Incoming,
        seen: &[u8],
        len: usize,
        inferred: Option<u64>,
    ) -> Result<bool> {
        let source = d.source();
        if let (true, Some(from)) = (seen.starts_with(wire::MAGIC), source)
            && let Ok(h) = udp_header(seen, len)
        {
            let reply = Reply {
                to: from,
                from: d.destination(),
            };
            self.header(reply, h, d.drops());
            return Ok(false);
        }
        let from_peer = self.report.peer.is_some() && self.report.peer == source;
        if self.report.peer.is_some() && !from_peer {
            self.report.foreign += 1;
            return Ok(false);
        }
        let drops = self.drops.get_or_insert((d.drops(), d.drops()));
        drops.1 = d.drops();
        if seen.starts_with(wire::MAGIC) {
            // A valid header (with a source) was taken above.
            if let Err(why) = udp_header(seen, len) {
                self.reject(d, "header", &why);
            }
            return Ok(false);
        }
        if seen.starts_with(wire::END_MAGIC) {
            match wire::decode_end(seen).filter(|_| seen.len() == len) {
                None => self.reject(d, "end", &format!("{len} bytes, not {}", wire::END_LEN)),
                Some(sent) if from_peer && self.report.header.is_some() => {
                    self.report.sent = Some(sent);
                    return Ok(true);
                }
                // A run without zcnet's header sends no end of zcnet's: its totals are not taken.
                Some(_) if from_peer => {
                    self.reject(d, "end", "the run carries no zcnet header");
                }
                // The end of an earlier run, repeated: not part of this one.
                Some(_) => self.drops = None,
            }
            return Ok(false);
        }
        if self.report.peer.is_none() {
            // A sender without zcnet's header: the run is bound to its first datagram's source.
            self.report.peer = source;
        }
        self.heard = true;
        if self.started.is_none() {
            self.started = Some((Instant::now(), resource_usage(UsageOf::Thread)?));
            // A run that took over from a stray sender keeps its ticker, from zero.
            match self.ticker_for.take() {
                Some(f) => self.ticker = Some(f()),
                None => self.ticker.iter_mut().for_each(Ticker::restart),
            }
        }
        if let Some(seq) = self.sequences.as_mut() {
            match wire::sequence(seen).or(inferred) {
                Some(n) => seq.record(n),
                None => self.report.rejected += 1,
            }
        }
        if let Some(v) = self.verifier.as_mut() {
            v.check_sequenced(self.report.bytes, seen);
        }
        self.report.datagrams += 1;
        self.report.bytes += len as u64;
        Ok(false)
    }
}

/// Receives one UDP run on `socket` (readied by [`prepare`]): from its first datagram to its
/// sender's end datagram (or [`UDP_IDLE_END`] of the sender's silence, or Ctrl-C); a run of a
/// sender's `-P N` ends with the last of its streams. The run (each stream) is bound to the source
/// of its header datagram (or first datagram): datagrams from anywhere else are counted as foreign
/// and otherwise ignored, so that no other host can end or disturb it; a header datagram from
/// elsewhere takes over a run without the header, and is refused (answered so) while a run with the
/// header lasts, unless it is one of the `-P` streams its header announced. Each stream's report
/// (with the source's fields) and each refusal's is handed to `report` as it ends; returns whether
/// Ctrl-C ended the run.
pub fn receive_datagrams(
    socket: &UdpSocket,
    ticker_for: impl FnOnce() -> Ticker,
    report: &mut dyn FnMut(&DatagramReport, Row),
) -> Result<bool> {
    socket.set_read_timeout(Some(WAKE))?;
    let mut source = SocketSource {
        socket,
        whole: DatagramBatch::new(BATCH, WHOLE),
        prefix: DatagramBatch::new(BATCH, HEADER_LEN),
    };
    receive_run(&mut source, ticker_for, report)
}

/// [`receive_datagrams`] from an AF_XDP UDP endpoint (`bench udp --listen --api af_xdp`). The
/// report's `socket_drops` stays 0: the endpoint's own counts (malformed, bad checksums) go in
/// its row.
pub fn receive_endpoint_datagrams(
    endpoint: &mut UdpEndpoint,
    ticker_for: impl FnOnce() -> Ticker,
    report: &mut dyn FnMut(&DatagramReport, Row),
) -> Result<bool> {
    receive_run(endpoint, ticker_for, report)
}

fn receive_run(
    source: &mut dyn Source,
    ticker_for: impl FnOnce() -> Ticker,
    report: &mut dyn FnMut(&DatagramReport, Row),
) -> Result<bool> {
    // The streams being received: the first one's, then those of its sender's `-P` that joined it.
    let mut runs = vec![Run::new(Some(ticker_for))];
    let mut group = Group::default();
    loop {
        // Checked on every pass, not only when the socket is quiet: a sender that never pauses must
        // not keep Ctrl-C, or a run's end by silence, waiting.
        let interrupted = interrupted();
        for run in &mut runs {
            if interrupted {
                run.report.interrupted = true;
                run.report.end = RunEnd::Interrupted;
                run.ended = true;
            } else if run.report.peer.is_some() && run.last.elapsed() > UDP_IDLE_END {
                run.report.end = RunEnd::Idle;
                run.ended = true;
            }
        }
        if !runs.iter().any(|r| r.ended) {
            let whole = runs.iter().any(Run::reads_whole);
            let Some(n) = source.batch(whole, &mut |d| group.take(&mut runs, d))? else {
                continue;
            };
            for run in &mut runs {
                for (reply, answer) in run.answers.drain(..) {
                    source.answer(reply, &answer);
                }
                run.refused.drain(..).for_each(|r| report(&r, Row::new()));
                if mem::take(&mut run.heard) {
                    run.last = Instant::now();
                }
            }
            if let Some(Run {
                ticker: Some(t),
                report,
                ..
            }) = runs.first_mut()
            {
                t.tick(report.bytes);
            }
            if n < BATCH {
                std::thread::sleep(PAUSE);
            }
            if !runs.iter().any(|r| r.ended) {
                continue;
            }
        }
        let (ended, going): (Vec<_>, Vec<_>) = runs.into_iter().partition(|r| r.ended);
        runs = going;
        for run in ended {
            if let Some(peer) = run.report.peer {
                group.over.push(peer);
            }
            if let Some(r) = run.finish()? {
                let mut fields = Row::new();
                source.add_fields(&mut fields);
                report(&r, fields);
            }
        }
        if runs.is_empty() || interrupted {
            return Ok(interrupted);
        }
    }
}

/// The streams of one sender's `-P` run, each of whose header datagrams came from the first
/// stream's address, with the first stream's header.
#[derive(Default)]
struct Group {
    /// Streams taken so far, the first one's included.
    taken: u8,
    /// Senders of the streams that have ended: their repeated end datagrams are not another's.
    over: Vec<SocketAddr>,
}

impl Group {
    /// Hands one received datagram to the stream it belongs to: the stream of its source; a new one
    /// when it is a header datagram that joins the first stream's; else the first stream (which
    /// counts it as foreign, refuses it, or is opened or taken over by it).
    fn take<T: FnOnce() -> Ticker>(
        &mut self,
        runs: &mut Vec<Run<T>>,
        d: &dyn Incoming,
    ) -> Result<()> {
        let source = d.source();
        // What comes from the sender of a stream that ended in this batch (its end datagram
        // repeated) is not another stream's.
        let own = |r: &&mut Run<T>| r.report.peer.is_some() && r.report.peer == source;
        if let Some(run) = runs.iter_mut().find(own) {
            if !run.ended {
                run.ended = run.take(d)?;
            }
            return Ok(());
        }
        if source.is_some_and(|s| self.over.contains(&s)) {
            return Ok(());
        }
        let first = runs.iter().find_map(|r| r.report.header.zip(r.report.peer));
        if let (Some((h, peer)), Some(from)) = (first, source)
            && self.taken < h.streams
            && from.ip() == peer.ip()
            && d.bytes().starts_with(wire::MAGIC)
            && udp_header(d.bytes(), d.len()) == Ok(h)
        {
            self.taken += 1;
            let mut run = Run::new(None);
            run.ended = run.take(d)?;
            run.report.stream = Some((self.taken, h.streams));
            runs.push(run);
            return Ok(());
        }
        // A datagram that came after every stream ended waits for the next run, as one that came
        // later would.
        let Some(run) = runs.iter_mut().find(|r| !r.ended) else {
            return Ok(());
        };
        let opened = run.report.header.is_none();
        run.ended = run.take(d)?;
        if let (true, Some(h)) = (opened, run.report.header) {
            self.taken = 1;
            if h.streams > 1 {
                run.report.stream = Some((1, h.streams));
            }
        }
        Ok(())
    }
}

impl<T: FnOnce() -> Ticker> Run<T> {
    fn new(ticker_for: Option<T>) -> Run<T> {
        Run {
            report: DatagramReport::default(),
            verifier: None,
            sequences: None,
            started: None,
            drops: None,
            last: Instant::now(),
            heard: false,
            ended: false,
            ticker: None,
            ticker_for,
            answers: Vec::new(),
            refused: Vec::new(),
            refused_from: Vec::new(),
            rejected_from: None,
        }
    }

    /// The report of an ended run (`None`: nothing of a run arrived).
    fn finish(self) -> Result<Option<DatagramReport>> {
        let mut report = self.report;
        report.sequence = self
            .sequences
            .map(|s| s.counts(report.sent.map(|(datagrams, _)| datagrams)));
        let Some((start, before)) = self.started else {
            return Ok((report.header.is_some() || report.sent.is_some()).then_some(report));
        };
        report.seconds = (self.last - start).as_secs_f64();
        report.usage = resource_usage(UsageOf::Thread)?.since(&before);
        report.data_errors = self.verifier.map(|v| v.errors);
        report.socket_drops = self
            .drops
            .map_or(0, |(first, last)| u64::from(last.wrapping_sub(first)));
        Ok(Some(report))
    }
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
        "peer": r.peer.map(|p| p.to_string()),
        "ip": if local.is_ipv6() { "v6" } else { "v4" },
        "sender_mode": r.header.map(|h| h.mode_name()),
        "zcnet_header": r.header.is_some(),
        "datagrams": r.datagrams,
        "bytes": r.bytes,
        "sent_datagrams": sent_datagrams,
        "sent_bytes": sent_bytes,
        "lost": r.sequence.map(|s| s.lost),
        "duplicated": r.sequence.map(|s| s.duplicated),
        "reordered": r.sequence.map(|s| s.reordered),
        "foreign": r.foreign,
        "rejected": r.rejected,
        "socket_drops": r.socket_drops,
        "seconds": r.seconds,
        "gbit_per_s": gbit_per_s(r.bytes, r.seconds),
        "cpu_us_per_mb": cpu_us_per_mb(&r.usage, r.bytes),
        "cpu_ns_per_packet": ns_per_packet(
            (r.usage.user + r.usage.system).as_secs_f64(),
            r.datagrams
        ),
        "verified": r.data_errors.is_some(),
        "data_errors": r.data_errors,
        "end": r.end.name(),
        "complete": r.refusal.is_none() && r.shortfall().is_none(),
        "reason": r.reason(),
        "interrupted": r.interrupted,
        "stream": r.stream.map(|(n, _)| n),
        "streams": r.stream.map(|(_, of)| of),
        // The streams of one run share the receiving thread: each stream's CPU figures are the
        // thread's over that stream's time, which its other streams' datagrams took too.
        "cpu_shared": r.stream.is_some(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_count_loss_duplicates_and_reordering_apart() {
        let mut s = Sequences::new();
        // 0..10 sent; 3 and 7 lost, 5 twice, 9 before 8.
        for n in [0, 1, 2, 4, 5, 5, 6, 9, 8] {
            s.record(n);
        }
        let counts = s.counts(Some(10));
        assert_eq!(
            counts,
            SequenceCounts {
                lost: 2,
                duplicated: 1,
                reordered: 1
            }
        );
        // Without the end datagram's count, the highest number seen bounds what was sent.
        assert_eq!(s.counts(None).lost, 2);
        // A number the window has slid past counts as new, and late.
        s.record(9 + 2 * SEQUENCE_WINDOW);
        s.record(5);
        assert_eq!((s.distinct, s.reordered, s.duplicated), (10, 2, 1));
    }
}
