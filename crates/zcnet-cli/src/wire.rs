//! What a zcnet bench stream carries, so that the two sides of `--listen`/`--connect` agree: a
//! 32-byte header (bench, mode, unit, duration, whether to verify), then payload whose every byte is
//! known, then for UDP an end datagram with the sender's totals.
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

use std::io;
use std::net::UdpSocket;

use rustix::net::sockopt;

/// First bytes of a bench stream (and of the header datagram of a UDP run).
pub const MAGIC: &[u8; 8] = b"ZCNETBH1";
/// First bytes of the datagram that ends a UDP run.
pub const END_MAGIC: &[u8; 8] = b"ZCNETEN1";
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
}

/// Mode names in header order.
pub const MODES: [&str; 3] = ["copy", "zerocopy", "auto"];

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8] = self.bench as u8;
        b[9] = self.mode;
        b[10] = u8::from(self.verify);
        b[12..16].copy_from_slice(&self.unit.to_le_bytes());
        b[16..24].copy_from_slice(&self.duration_ms.to_le_bytes());
        b[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        b
    }

    /// The header in `b`, or `None` when `b` does not open with [`MAGIC`] or is malformed.
    pub fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN || &b[..8] != MAGIC {
            return None;
        }
        let bench = match b[8] {
            1 => Bench::Tcp,
            2 => Bench::Udp,
            3 => Bench::Rx,
            _ => return None,
        };
        let unit = u32::from_le_bytes(b[12..16].try_into().ok()?);
        if unit == 0 || usize::from(b[9]) >= MODES.len() {
            return None;
        }
        Some(Header {
            bench,
            mode: b[9],
            verify: b[10] != 0,
            unit,
            duration_ms: u64::from_le_bytes(b[16..24].try_into().ok()?),
            bytes: u64::from_le_bytes(b[24..32].try_into().ok()?),
        })
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
    for (i, b) in buf.iter_mut().enumerate() {
        *b = b'a' + ((i % unit.max(1)) % 26) as u8;
    }
}

/// Checks received bytes against the pattern, wherever they fall in the stream.
#[derive(Debug)]
pub struct Verifier {
    /// One unit followed by its first bytes again, so that any window of up to `unit` bytes starting
    /// anywhere in a unit is one contiguous slice.
    expected: Vec<u8>,
    unit: usize,
    /// Bytes that differed from the pattern.
    pub errors: u64,
    /// Offset (in the payload) of the first differing byte.
    pub first_error: Option<u64>,
}

impl Verifier {
    /// A verifier for units of `unit` bytes.
    pub fn new(unit: usize) -> Verifier {
        let unit = unit.max(1);
        let mut expected = vec![0u8; 2 * unit];
        fill(&mut expected[..unit], unit);
        expected.copy_within(..unit, unit);
        Verifier {
            expected,
            unit,
            errors: 0,
            first_error: None,
        }
    }

    /// Checks `data`, found at payload offset `offset` of a stream.
    pub fn check_stream(&mut self, offset: u64, data: &[u8]) {
        let mut at = offset;
        for piece in data.chunks(self.unit) {
            let start = (at % self.unit as u64) as usize;
            let want = &self.expected[start..start + piece.len()];
            if piece != want {
                let errors = count_errors(at, piece, want, &mut self.first_error);
                self.errors += errors;
            }
            at += piece.len() as u64;
        }
    }

    /// Checks one datagram (each starts at the beginning of a unit, and opens with its sequence
    /// number: [`stamp`]): the pattern after the number.
    pub fn check_sequenced(&mut self, offset: u64, datagram: &[u8]) {
        let at = SEQ_LEN.min(datagram.len());
        let want = &self.expected[at..datagram.len().min(self.unit).max(at)];
        if &datagram[at..] != want {
            let offset = offset + at as u64;
            self.errors += count_errors(offset, &datagram[at..], want, &mut self.first_error);
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
        };
        assert_eq!(Header::decode(&h.encode()), Some(h));
        assert_eq!(h.mode_name(), "zerocopy");
        // msg_zerocopy's payload and tcp_mmap's random bytes are not headers.
        let mut foreign = [0u8; HEADER_LEN];
        fill(&mut foreign, 65435);
        assert_eq!(Header::decode(&foreign), None);
        assert_eq!(decode_end(&encode_end(3, 4200)), Some((3, 4200)));
        assert_eq!(decode_end(&foreign[..END_LEN]), None);
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
