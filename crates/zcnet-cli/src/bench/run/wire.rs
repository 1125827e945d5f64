//! Run: What a zcnet bench stream carries, so that the two sides of `--listen`/`--connect` agree: a
//! 32-byte header (bench, mode, unit, duration, whether to verify), then payload whose every byte is
//! known, then for UDP an end datagram with the sender's totals.
//!
//! A `bench tcp` stream runs for a duration, so its close alone does not tell a sender that finished
//! from one killed midway: its header opens with [`MAGIC_MARKED`] instead of [`MAGIC`], and its last
//! [`STREAM_END_LEN`] bytes are the sender's end mark ([`encode_stream_end`]: the payload bytes it
//! sent, and whether its duration ran out or Ctrl-C stopped it). A receiver holds back that many
//! bytes of such a stream until it ends; a stream closed without the mark was cut short. A receiver
//! that knows only [`MAGIC`] counts such a stream as foreign (not verified) rather than refusing it.
//!
//! The payload repeats a unit of `unit` bytes (the send size for TCP, the datagram for UDP) filled with
//! `'a' + i % 26`, the pattern the kernel's msg_zerocopy tool sends, so that a zcnet sender with
//! `--raw` (no header) is accepted by `msg_zerocopy -r`. A stream that does not open with the header
//! (a foreign sender such as tcp_mmap or msg_zerocopy) is counted, not verified.
//!
//! Every data datagram of a UDP run that opened with the header starts with its sequence number
//! ([`SEQ_LEN`] bytes, little-endian, counting from 0 over the run's datagrams — each GSO segment is
//! one), in place of the pattern's first bytes: the receiver counts lost, duplicated and reordered
//! datagrams from it. `--raw` runs carry the bare pattern.
//!
//! A UDP receiver answers each header datagram ([`offer_header`]): [`ACCEPT_MAGIC`] when the run is
//! the one it receives, or [`REFUSE_MAGIC`] and why when it is busy with another sender's run, so
//! that a refused sender ends at once instead of sending into a receiver that counts its datagrams
//! as foreign. A sender that hears no answer (every answer lost, or a receiver that does not
//! answer) sends all the same.

use std::io;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use rustix::net::sockopt;

/// First bytes of a bench stream (and of the header datagram of a UDP run).
pub const MAGIC: &[u8; 8] = b"ZCNETBH1";
/// First bytes of a bench stream that ends with the sender's end mark ([`encode_stream_end`]); the
/// header is otherwise [`MAGIC`]'s.
pub const MAGIC_MARKED: &[u8; 8] = b"ZCNETBH2";
/// First bytes of the end mark of a stream opened with [`MAGIC_MARKED`].
pub const STREAM_END_MAGIC: &[u8; 8] = b"ZCNETSE1";
/// Bytes of the end mark of a stream.
pub const STREAM_END_LEN: usize = 24;
/// First bytes of the datagram that ends a UDP run.
pub const END_MAGIC: &[u8; 8] = b"ZCNETEN1";
/// First bytes of a UDP receiver's answer to a header datagram of the run it receives.
pub const ACCEPT_MAGIC: &[u8; 8] = b"ZCNETOK1";
/// First bytes of a UDP receiver's answer to a header datagram of a run it refused, followed by why
/// (UTF-8, at most [`MAX_REASON`] bytes).
pub const REFUSE_MAGIC: &[u8; 8] = b"ZCNETNO1";
/// Longest reason a refusal carries.
pub const MAX_REASON: usize = 200;
/// Bytes of [`Header`] on the wire.
pub const HEADER_LEN: usize = 32;
/// Bytes of the UDP end datagram.
pub const END_LEN: usize = 24;
/// Bytes of the sequence number opening each data datagram of a UDP run with the header.
pub const SEQ_LEN: usize = 8;

/// The bench a stream belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    /// `bench tcp`.
    Tcp = 1,
    /// `bench udp`.
    Udp = 2,
    /// `bench rx`.
    Rx = 3,
}

/// The header opening every zcnet bench stream (all integers little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Which bench sent it.
    pub bench: Bench,
    /// The sender's mode name index: 0 copy, 1 zerocopy, 2 auto.
    pub mode: u8,
    /// Whether the receiver should check every byte.
    pub verify: bool,
    /// Length of the repeating pattern unit.
    pub unit: u32,
    /// How long the sender sends, in milliseconds (0: until a byte count).
    pub duration_ms: u64,
    /// Bytes the sender will send after the header (0: unknown, until the stream ends).
    pub bytes: u64,
    /// Whether the stream ends with the sender's end mark ([`MAGIC_MARKED`]).
    pub marked: bool,
    /// Streams the sender sends side by side with the same header (`-P`; a UDP receiver takes them
    /// as one run's): 1 for one stream, which is 0 on the wire as older senders write it.
    pub streams: u8,
}

/// How the sender of a stream with an end mark stopped sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Its duration ran out: the stream is whole.
    Done = 0,
    /// Ctrl-C stopped it before its duration ran out.
    Interrupted = 1,
}

/// Mode names in header order.
pub const MODES: [&str; 3] = ["copy", "zerocopy", "auto"];

/// Largest pattern unit a header may announce: the largest write of any zcnet sender (`bench rx
/// --write-kib`, 64 MiB). A verifier's memory does not grow with the unit ([`Verifier`]).
pub const MAX_UNIT: u32 = 64 << 20;

/// Most streams a header may announce: the most `-P` takes.
pub const MAX_STREAMS: u8 = 64;

/// Longest duration a header may announce: one day, the longest `--duration`.
pub const MAX_DURATION_MS: u64 = 86_400_000;

/// Why the opening bytes of a stream are not a [`Header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// They do not open with [`MAGIC`]: a foreign sender (tcp_mmap, msg_zerocopy, `--raw`), whose
    /// bytes are payload.
    Foreign,
    /// They open with [`MAGIC`] but a field is out of bounds (the reason says which).
    Malformed(String),
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejected::Foreign => f.write_str("no zcnet header"),
            Rejected::Malformed(why) => write!(f, "malformed header: {why}"),
        }
    }
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(if self.marked { MAGIC_MARKED } else { MAGIC });
        b[8] = self.bench as u8;
        b[9] = self.mode;
        b[10] = u8::from(self.verify);
        b[11] = if self.streams > 1 { self.streams } else { 0 };
        b[12..16].copy_from_slice(&self.unit.to_le_bytes());
        b[16..24].copy_from_slice(&self.duration_ms.to_le_bytes());
        b[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        b
    }

    /// The header in `b`: [`Rejected::Foreign`] when `b` does not open with [`MAGIC`] or
    /// [`MAGIC_MARKED`], [`Rejected::Malformed`] when it does but a field is out of bounds — every
    /// field is checked here, before a receiver sizes anything by it.
    pub fn decode(b: &[u8]) -> Result<Header, Rejected> {
        let magic = b.get(..MAGIC.len());
        let marked = magic == Some(MAGIC_MARKED);
        if magic != Some(MAGIC) && !marked {
            return Err(Rejected::Foreign);
        }
        let malformed = |why: String| Err(Rejected::Malformed(why));
        if b.len() < HEADER_LEN {
            return malformed(format!("{} bytes, not {HEADER_LEN}", b.len()));
        }
        let bench = match b[8] {
            1 => Bench::Tcp,
            2 => Bench::Udp,
            3 => Bench::Rx,
            other => return malformed(format!("bench {other} (1 tcp, 2 udp, 3 rx)")),
        };
        if usize::from(b[9]) >= MODES.len() {
            return malformed(format!("mode {} (0 copy, 1 zerocopy, 2 auto)", b[9]));
        }
        if b[10] > 1 {
            return malformed(format!("verify byte {} (0 or 1)", b[10]));
        }
        if b[11] == 1 || b[11] > MAX_STREAMS {
            return malformed(format!(
                "stream count {} (0 for one stream, else 2..={MAX_STREAMS})",
                b[11]
            ));
        }
        let unit = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        if !(1..=MAX_UNIT).contains(&unit) {
            return malformed(format!(
                "unit {unit} outside 1..={MAX_UNIT} (the largest write of a zcnet sender)"
            ));
        }
        let duration_ms = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        if duration_ms > MAX_DURATION_MS {
            return malformed(format!(
                "duration {duration_ms} ms above {MAX_DURATION_MS} (one day, the longest --duration)"
            ));
        }
        Ok(Header {
            bench,
            mode: b[9],
            verify: b[10] == 1,
            unit,
            duration_ms,
            bytes: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
            marked,
            streams: b[11].max(1),
        })
    }

    /// Whether `opening`, the first bytes of a stream (fewer than [`HEADER_LEN`]), may still open a
    /// header: they are the start of [`MAGIC`] or [`MAGIC_MARKED`].
    pub fn may_open(opening: &[u8]) -> bool {
        let seen = opening.len().min(MAGIC.len());
        [MAGIC, MAGIC_MARKED]
            .iter()
            .any(|m| opening[..seen] == m[..seen])
    }

    /// The sender's mode name.
    pub fn mode_name(&self) -> &'static str {
        MODES[usize::from(self.mode)]
    }
}

/// The end datagram of a UDP run: the sender's datagram and byte counts.
pub fn encode_end(datagrams: u64, bytes: u64) -> [u8; END_LEN] {
    let mut b = [0u8; END_LEN];
    b[..8].copy_from_slice(END_MAGIC);
    b[8..16].copy_from_slice(&datagrams.to_le_bytes());
    b[16..24].copy_from_slice(&bytes.to_le_bytes());
    b
}

/// The (datagrams, bytes) of an end datagram, or `None`.
pub fn decode_end(b: &[u8]) -> Option<(u64, u64)> {
    if b.len() != END_LEN || &b[..8] != END_MAGIC {
        return None;
    }
    Some((
        u64::from_le_bytes(b[8..16].try_into().ok()?),
        u64::from_le_bytes(b[16..24].try_into().ok()?),
    ))
}

/// The end mark of a stream opened with [`MAGIC_MARKED`]: the payload bytes sent before it, and how
/// the sender stopped.
pub fn encode_stream_end(bytes: u64, finish: Finish) -> [u8; STREAM_END_LEN] {
    let mut b = [0u8; STREAM_END_LEN];
    b[..8].copy_from_slice(STREAM_END_MAGIC);
    b[8..16].copy_from_slice(&bytes.to_le_bytes());
    b[16] = finish as u8;
    b
}

/// The (payload bytes, finish) of a stream's end mark, or `None` when `b` is not one.
pub fn decode_stream_end(b: &[u8]) -> Option<(u64, Finish)> {
    if b.len() != STREAM_END_LEN || &b[..8] != STREAM_END_MAGIC || b[17..] != [0; 7] {
        return None;
    }
    let finish = match b[16] {
        0 => Finish::Done,
        1 => Finish::Interrupted,
        _ => return None,
    };
    Some((u64::from_le_bytes(b[8..16].try_into().ok()?), finish))
}

/// Sends one header or end datagram of a UDP run on the connected `socket` with a TTL (IPv4) or hop
/// limit (IPv6) one off the data's, then restores the data's. GRO merges only datagrams of one flow
/// whose IP headers match but for their length (`inet_gro_flush`, `ipv6_gro_receive`), so a control
/// datagram is never appended to data segments, where a receiver that copies only the first bytes
/// of each datagram could not see it.
pub fn send_control(socket: &UdpSocket, datagram: &[u8]) -> io::Result<usize> {
    let other = |ttl: u8| if ttl == u8::MAX { ttl - 1 } else { ttl + 1 };
    if socket.local_addr()?.is_ipv6() {
        let data_hops = sockopt::ipv6_unicast_hops(socket)?;
        sockopt::set_ipv6_unicast_hops(socket, Some(other(data_hops)))?;
        let sent = socket.send(datagram);
        sockopt::set_ipv6_unicast_hops(socket, Some(data_hops))?;
        sent
    } else {
        let data_ttl = socket.ttl()?;
        socket.set_ttl(u32::from(other(data_ttl.min(255) as u8)))?;
        let sent = socket.send(datagram);
        socket.set_ttl(data_ttl)?;
        sent
    }
}

/// A UDP receiver's answer to a header datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The run is the one the receiver receives.
    Accepted,
    /// The receiver refused the run, for the reason given.
    Refused(String),
}

impl Answer {
    /// The answer's bytes (a reason cut to [`MAX_REASON`] bytes, at a character boundary).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Answer::Accepted => ACCEPT_MAGIC.to_vec(),
            Answer::Refused(why) => {
                let mut cut = why.len().min(MAX_REASON);
                while !why.is_char_boundary(cut) {
                    cut -= 1;
                }
                [REFUSE_MAGIC.as_slice(), &why.as_bytes()[..cut]].concat()
            }
        }
    }

    /// The answer in `b` (`None`: not an answer). A refusal's reason is shown as printable text
    /// only, whatever bytes it carried.
    pub fn decode(b: &[u8]) -> Option<Answer> {
        if b == ACCEPT_MAGIC {
            return Some(Answer::Accepted);
        }
        let why = b.strip_prefix(REFUSE_MAGIC)?;
        let why = String::from_utf8_lossy(&why[..why.len().min(MAX_REASON)]);
        Some(Answer::Refused(
            why.chars().filter(|c| !c.is_control()).collect(),
        ))
    }
}

/// Header datagrams a UDP sender sends at most until its receiver answers.
const HEADER_TRIES: u32 = 5;
/// How long a UDP sender waits for an answer to its first header datagram; the wait doubles with
/// each later one (3.1 s in all). A receiver reads a header behind the datagrams queued before it,
/// so a busy or descheduled one answers late, and a sender that gave up too soon would send its
/// run into another's.
const FIRST_ANSWER_WAIT: Duration = Duration::from_millis(100);

/// Sends the header datagram of a UDP run on the connected `socket` ([`send_control`]) until the
/// receiver answers, at most [`HEADER_TRIES`] times, waiting [`FIRST_ANSWER_WAIT`] for the first
/// answer and twice as long after each try; returns its answer (`None`: none came). Datagrams that
/// are not an answer are skipped. A receiver that is not there (`ECONNREFUSED`) is an error.
pub fn offer_header(socket: &UdpSocket, header: &[u8]) -> io::Result<Option<Answer>> {
    let before = socket.read_timeout()?;
    let answer = (|| {
        let mut buf = [0u8; REFUSE_MAGIC.len() + MAX_REASON];
        for try_ in 0..HEADER_TRIES {
            send_control(socket, header)?;
            let deadline = Instant::now() + FIRST_ANSWER_WAIT * (1 << try_);
            while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                socket.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
                match socket.recv(&mut buf) {
                    Ok(n) => {
                        if let Some(answer) = Answer::decode(&buf[..n]) {
                            return Ok(Some(answer));
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock
                                | io::ErrorKind::TimedOut
                                | io::ErrorKind::Interrupted
                        ) =>
                    {
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(None)
    })();
    socket.set_read_timeout(before)?;
    answer
}

/// Writes the sequence numbers `first`, `first + 1`, … at the start of each datagram of `unit`
/// bytes in `buf` (a send cut into datagrams of `unit`); returns the next sequence number.
pub fn stamp(buf: &mut [u8], unit: usize, first: u64) -> u64 {
    let mut seq = first;
    for datagram in buf.chunks_mut(unit.max(1)) {
        let n = datagram.len().min(SEQ_LEN);
        datagram[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
        seq += 1;
    }
    seq
}

/// The sequence number opening a UDP data datagram (`None` when shorter than [`SEQ_LEN`]).
pub fn sequence(datagram: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(
        datagram.get(..SEQ_LEN)?.try_into().ok()?,
    ))
}

/// Fills `buf` with the pattern of units of `unit` bytes, starting at the beginning of a unit.
pub fn fill(buf: &mut [u8], unit: usize) {
    const ALPHABET: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
    for unit in buf.chunks_mut(unit.max(1)) {
        for run in unit.chunks_mut(ALPHABET.len()) {
            run.copy_from_slice(&ALPHABET[..run.len()]);
        }
    }
}

/// Bytes of the pattern a [`Verifier`] compares at once.
const SPAN: usize = 64 << 10;

/// Checks received bytes against the pattern, wherever they fall in the stream, in memory that does
/// not grow with the unit: within a unit the pattern repeats every 26 bytes, so one alphabet run of
/// [`SPAN`] bytes holds every window of up to [`SPAN`] bytes that does not cross a unit's end.
#[derive(Debug)]
pub struct Verifier {
    /// `a..z` repeated over 26 + [`SPAN`] bytes.
    alphabet: Vec<u8>,
    unit: u64,
    /// Bytes that differed from the pattern.
    pub errors: u64,
    /// Offset (in the payload) of the first differing byte.
    pub first_error: Option<u64>,
}

impl Verifier {
    /// A verifier for units of `unit` bytes.
    pub fn new(unit: usize) -> Verifier {
        let alphabet = (0..26 + SPAN).map(|i| b'a' + (i % 26) as u8).collect();
        Verifier {
            alphabet,
            unit: unit.max(1) as u64,
            errors: 0,
            first_error: None,
        }
    }

    /// Checks `data`, found at payload offset `offset` of a stream.
    pub fn check_stream(&mut self, offset: u64, data: &[u8]) {
        let mut at = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let in_unit = at % self.unit;
            let n = rest
                .len()
                .min((self.unit - in_unit).min(SPAN as u64) as usize);
            let (piece, tail) = rest.split_at(n);
            self.check_within_unit(at, in_unit, piece);
            at += n as u64;
            rest = tail;
        }
    }

    /// Checks one datagram (each starts at the beginning of a unit, and opens with its sequence
    /// number: [`stamp`]): the pattern after the number; bytes past the unit's end all differ.
    pub fn check_sequenced(&mut self, offset: u64, datagram: &[u8]) {
        let at = SEQ_LEN.min(datagram.len());
        let end = datagram.len().min(self.unit as usize).max(at);
        for (i, piece) in datagram[at..end].chunks(SPAN).enumerate() {
            let in_unit = (at + i * SPAN) as u64;
            self.check_within_unit(offset + in_unit, in_unit, piece);
        }
        let past = &datagram[end..];
        if !past.is_empty() {
            self.errors += past.len() as u64;
            self.first_error.get_or_insert(offset + end as u64);
        }
    }

    /// Checks `piece` (at most [`SPAN`] bytes, not crossing a unit's end), found at payload offset
    /// `offset`, `in_unit` bytes into its unit.
    fn check_within_unit(&mut self, offset: u64, in_unit: u64, piece: &[u8]) {
        let start = (in_unit % 26) as usize;
        let want = &self.alphabet[start..start + piece.len()];
        if piece != want {
            self.errors += count_errors(offset, piece, want, &mut self.first_error);
        }
    }
}

/// Bytes of `got` that differ from `want` (bytes past `want`'s end all differ); records the payload
/// offset of the first in `first`.
fn count_errors(offset: u64, got: &[u8], want: &[u8], first: &mut Option<u64>) -> u64 {
    let mut errors = 0;
    for (i, g) in got.iter().enumerate() {
        if want.get(i) != Some(g) {
            errors += 1;
            first.get_or_insert(offset + i as u64);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_foreign_bytes() {
        let h = Header {
            bench: Bench::Rx,
            mode: 1,
            verify: true,
            unit: 65536,
            duration_ms: 2000,
            bytes: 1 << 30,
            marked: false,
            streams: 1,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let marked = Header { marked: true, ..h };
        assert_eq!(&marked.encode()[..8], MAGIC_MARKED);
        assert_eq!(Header::decode(&marked.encode()), Ok(marked));
        assert_eq!(h.encode()[11], 0);
        let four = Header { streams: 4, ..h };
        assert_eq!(Header::decode(&four.encode()), Ok(four));
        assert!(Header::may_open(b"ZCNETB") && Header::may_open(b"ZCNETBH2"));
        assert!(!Header::may_open(b"ZCNETBH3") && !Header::may_open(b"abc"));
        for finish in [Finish::Done, Finish::Interrupted] {
            let end = encode_stream_end(7 << 30, finish);
            assert_eq!(decode_stream_end(&end), Some((7 << 30, finish)));
        }
        let mut bad = encode_stream_end(1, Finish::Done);
        bad[16] = 2;
        assert_eq!(decode_stream_end(&bad), None);
        assert_eq!(h.mode_name(), "zerocopy");
        // msg_zerocopy's payload and tcp_mmap's random bytes are not headers.
        let mut foreign = [0u8; HEADER_LEN];
        fill(&mut foreign, 65435);
        assert_eq!(Header::decode(&foreign), Err(Rejected::Foreign));
        assert_eq!(decode_end(&encode_end(3, 4200)), Some((3, 4200)));
        assert_eq!(decode_end(&foreign[..END_LEN]), None);
        assert_eq!(decode_stream_end(&foreign[..STREAM_END_LEN]), None);
    }

    #[test]
    fn answers_round_trip_and_a_refusal_reason_is_bounded_printable_text() {
        assert_eq!(
            Answer::decode(&Answer::Accepted.encode()),
            Some(Answer::Accepted)
        );
        let busy = Answer::Refused("busy with a run from 10.0.0.1:5000".into());
        assert_eq!(Answer::decode(&busy.encode()), Some(busy));
        let long = Answer::Refused("é".repeat(MAX_REASON)).encode();
        assert_eq!(long.len(), REFUSE_MAGIC.len() + MAX_REASON);
        let hostile = [REFUSE_MAGIC.as_slice(), b"\x1b[2Jgone\n\xff"].concat();
        assert_eq!(
            Answer::decode(&hostile),
            Some(Answer::Refused("[2Jgone\u{fffd}".into()))
        );
        assert_eq!(Answer::decode(b"ZCNETOK1!"), None);
        assert_eq!(Answer::decode(&encode_end(1, 2)), None);
    }

    #[test]
    fn every_field_is_bounded_before_use() {
        let good = Header {
            bench: Bench::Tcp,
            mode: 0,
            verify: true,
            unit: MAX_UNIT,
            duration_ms: MAX_DURATION_MS,
            bytes: u64::MAX,
            marked: false,
            streams: MAX_STREAMS,
        }
        .encode();
        assert!(Header::decode(&good).is_ok());
        let with = |at: usize, bytes: &[u8]| {
            let mut b = good;
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        for (hostile, names) in [
            (with(12, &u32::MAX.to_le_bytes()), "unit 4294967295"),
            (with(12, &(MAX_UNIT + 1).to_le_bytes()), "unit 67108865"),
            (with(12, &0u32.to_le_bytes()), "unit 0"),
            (with(8, &[0]), "bench 0"),
            (with(8, &[4]), "bench 4"),
            (with(9, &[3]), "mode 3"),
            (with(10, &[2]), "verify byte 2"),
            (with(11, &[1]), "stream count 1"),
            (with(11, &[65]), "stream count 65"),
            (
                with(16, &u64::MAX.to_le_bytes()),
                "duration 18446744073709551615",
            ),
        ] {
            match Header::decode(&hostile) {
                Err(Rejected::Malformed(why)) => assert!(why.contains(names), "{why}"),
                other => panic!("{names}: {other:?}"),
            }
        }
        assert!(matches!(
            Header::decode(&good[..20]),
            Err(Rejected::Malformed(_))
        ));
        assert_eq!(Header::decode(&good[..5]), Err(Rejected::Foreign));
    }

    #[test]
    fn verifier_finds_every_wrong_byte_at_any_offset() {
        let unit = 1000;
        let mut stream = vec![0u8; 3 * unit + 17];
        for (i, b) in stream.iter_mut().enumerate() {
            *b = b'a' + ((i % unit) % 26) as u8;
        }
        let mut v = Verifier::new(unit);
        v.check_stream(0, &stream[..333]);
        v.check_stream(333, &stream[333..]);
        assert_eq!(v.errors, 0);
        stream[2500] ^= 1;
        v.check_stream(0, &stream);
        assert_eq!((v.errors, v.first_error), (1, Some(2500)));
        let mut d = Verifier::new(unit);
        d.check_sequenced(0, &stream[..unit]);
        d.check_sequenced(0, &stream[..10]);
        assert_eq!(d.errors, 0);
        d.check_sequenced(0, &stream[1..11]);
        assert!(d.errors > 0);
        // Units longer than the verifier's span, and a piece crossing units.
        let unit = 3 * SPAN + 5;
        let mut long = vec![0u8; 2 * unit + 7];
        fill(&mut long[..unit], unit);
        fill(&mut long[unit..], unit);
        let mut v = Verifier::new(unit);
        v.check_stream(0, &long[..SPAN + 3]);
        v.check_stream((SPAN + 3) as u64, &long[SPAN + 3..]);
        assert_eq!(v.errors, 0);
        long[unit + 1] ^= 1;
        v.check_stream(0, &long);
        assert_eq!((v.errors, v.first_error), (1, Some(unit as u64 + 1)));
        let mut d = Verifier::new(unit);
        d.check_sequenced(0, &long[..unit]);
        assert_eq!(d.errors, 0);
        // A datagram longer than its unit: every byte past the unit differs.
        d.check_sequenced(0, &long[..unit + 4]);
        assert_eq!((d.errors, d.first_error), (4, Some(unit as u64)));
    }

    #[test]
    fn the_pattern_restarts_its_alphabet_at_every_unit() {
        for unit in [1, 25, 26, 27, 100, 65435] {
            let mut buf = vec![0u8; 3 * unit + 11];
            fill(&mut buf, unit);
            for (i, &b) in buf.iter().enumerate() {
                assert_eq!(b, b'a' + ((i % unit) % 26) as u8, "unit {unit}, byte {i}");
            }
        }
    }

    #[test]
    fn sequenced_datagrams_carry_their_number_and_the_pattern() {
        let unit = 100;
        let mut send = vec![0u8; 250];
        fill(&mut send, unit);
        assert_eq!(stamp(&mut send, unit, 7), 10);
        let datagrams: Vec<&[u8]> = send.chunks(unit).collect();
        let numbers: Vec<Option<u64>> = datagrams.iter().map(|d| sequence(d)).collect();
        assert_eq!(numbers, [Some(7), Some(8), Some(9)]);
        let mut v = Verifier::new(unit);
        for d in &datagrams {
            v.check_sequenced(0, d);
        }
        assert_eq!(v.errors, 0);
        send[120] ^= 1;
        v.check_sequenced(100, &send[100..200]);
        assert_eq!((v.errors, v.first_error), (1, Some(120)));
        assert_eq!(sequence(&send[..7]), None);
    }
}
