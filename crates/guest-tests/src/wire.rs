//! The little protocol between the guest's senders and the host-side peer: a 24-byte request on the TCP
//! control port, a 16-byte answer, and a 16-byte header on every UDP datagram.

use std::io::{self, Read, Write};

use crate::pattern;

/// TCP port of the peer: data streams and requests.
pub const TCP_PORT: u16 = 7701;
/// UDP port of the peer: datagram streams.
pub const UDP_PORT: u16 = 7702;
/// UDP port on the guest that the peer's bursts go to (the guest's AF_XDP socket takes them).
pub const BURST_PORT: u16 = 7703;
const MAGIC: u32 = 0x7a63_6e74;

/// What a connection to the peer's TCP port asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `bytes` of pattern follow on this connection; the peer answers with (verified, errors).
    TcpStream {
        /// Length of the stream.
        bytes: u64,
    },
    /// Report on UDP stream `stream` of `expected` datagrams: the peer answers with (received, corrupt).
    UdpReport {
        /// The stream id the datagrams carry.
        stream: u32,
        /// How many datagrams the guest sent.
        expected: u64,
    },
    /// Send `datagrams` datagrams of stream `stream` to the guest's [`BURST_PORT`], starting one second
    /// after the answer (time for the guest to bind its AF_XDP socket). The peer answers (0, 0) at once.
    Burst {
        /// The stream id the datagrams carry.
        stream: u32,
        /// How many datagrams to send.
        datagrams: u64,
    },
    /// [`Request::Burst`] of datagrams of [`JUMBO_DATAGRAM`] bytes, filling a 9000-byte MTU (the
    /// harness sets the host side of the link to it).
    JumboBurst {
        /// The stream id the datagrams carry.
        stream: u32,
        /// How many datagrams to send.
        datagrams: u64,
    },
    /// The guest is done: the peer prints its summary and exits.
    Quit,
    /// The peer sends `bytes` of pattern on this connection, then closes it (no answer).
    TcpSend {
        /// Length of the stream.
        bytes: u64,
    },
}

/// Size of the jumbo burst's datagrams (UDP payload, header included): a 9000-byte IPv4 packet.
pub const JUMBO_DATAGRAM: usize = 9000 - 20 - 8;

impl Request {
    /// The request's 24 bytes: magic, kind, two arguments (little endian).
    pub fn encode(self) -> [u8; 24] {
        let (kind, a, b) = match self {
            Request::TcpStream { bytes } => (1u32, bytes, 0u64),
            Request::UdpReport { stream, expected } => (2, u64::from(stream), expected),
            Request::Quit => (3, 0, 0),
            Request::Burst { stream, datagrams } => (4, u64::from(stream), datagrams),
            Request::JumboBurst { stream, datagrams } => (5, u64::from(stream), datagrams),
            Request::TcpSend { bytes } => (6, bytes, 0),
        };
        let mut out = [0u8; 24];
        out[..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&kind.to_le_bytes());
        out[8..16].copy_from_slice(&a.to_le_bytes());
        out[16..].copy_from_slice(&b.to_le_bytes());
        out
    }

    /// Parses a request; `None` for anything that is not one.
    pub fn decode(raw: &[u8; 24]) -> Option<Request> {
        let word = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
        if raw[..4] != MAGIC.to_le_bytes() {
            return None;
        }
        match u32::from_le_bytes(raw[4..8].try_into().expect("4 bytes")) {
            1 => Some(Request::TcpStream { bytes: word(8) }),
            2 => Some(Request::UdpReport {
                stream: u32::try_from(word(8)).ok()?,
                expected: word(16),
            }),
            3 => Some(Request::Quit),
            4 => Some(Request::Burst {
                stream: u32::try_from(word(8)).ok()?,
                datagrams: word(16),
            }),
            5 => Some(Request::JumboBurst {
                stream: u32::try_from(word(8)).ok()?,
                datagrams: word(16),
            }),
            6 => Some(Request::TcpSend { bytes: word(8) }),
            _ => None,
        }
    }
}

/// Writes the peer's answer: two counters.
pub fn write_answer(out: &mut impl Write, first: u64, second: u64) -> io::Result<()> {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&first.to_le_bytes());
    raw[8..].copy_from_slice(&second.to_le_bytes());
    out.write_all(&raw)
}

/// Reads the peer's answer written by [`write_answer`].
pub fn read_answer(input: &mut impl Read) -> io::Result<(u64, u64)> {
    let mut raw = [0u8; 16];
    input.read_exact(&mut raw)?;
    let word = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
    Ok((word(0), word(8)))
}

/// Length of the header at the start of every UDP datagram.
pub const DATAGRAM_HEADER: usize = 16;

/// Fills `buf` as datagram `seq` of `stream`: the header (magic, stream, sequence number), then the
/// pattern at the payload's stream offset (every datagram of a stream has the same length).
pub fn fill_datagram(buf: &mut [u8], stream: u32, seq: u64) {
    buf[..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[4..8].copy_from_slice(&stream.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    let payload = &mut buf[DATAGRAM_HEADER..];
    let offset = datagram_offset(seq, payload.len());
    pattern::fill(payload, offset);
}

/// A received datagram: its stream, its sequence number, and whether its payload is intact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// The stream id from the header.
    pub stream: u32,
    /// The sequence number from the header.
    pub seq: u64,
    /// Whether every payload byte matches the pattern.
    pub intact: bool,
}

/// Checks a datagram written by [`fill_datagram`]; `None` if it does not start with a header.
pub fn check_datagram(buf: &[u8]) -> Option<Datagram> {
    if buf.len() < DATAGRAM_HEADER || buf[..4] != MAGIC.to_le_bytes() {
        return None;
    }
    let stream = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let seq = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    let payload = &buf[DATAGRAM_HEADER..];
    let intact = pattern::mismatches(payload, datagram_offset(seq, payload.len())) == 0;
    Some(Datagram {
        stream,
        seq,
        intact,
    })
}

/// Stream offset of the payload of datagram `seq` when every payload is `payload_len` bytes long.
fn datagram_offset(seq: u64, payload_len: usize) -> u64 {
    seq * payload_len as u64
}

#[cfg(test)]
mod tests {
    use super::{Datagram, Request, check_datagram, fill_datagram};

    #[test]
    fn requests_round_trip_and_garbage_is_rejected() {
        for r in [
            Request::TcpStream { bytes: 1 << 40 },
            Request::UdpReport {
                stream: 7,
                expected: 99,
            },
            Request::JumboBurst {
                stream: 8,
                datagrams: 100,
            },
            Request::Quit,
            Request::TcpSend { bytes: 1 << 20 },
        ] {
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        let mut raw = Request::Quit.encode();
        raw[0] ^= 1;
        assert_eq!(Request::decode(&raw), None);
        let mut raw = Request::Quit.encode();
        raw[4] = 9;
        assert_eq!(Request::decode(&raw), None);
    }

    #[test]
    fn datagrams_check_and_damage_is_seen() {
        let mut buf = [0u8; 100];
        fill_datagram(&mut buf, 3, 1 << 20);
        let intact = Datagram {
            stream: 3,
            seq: 1 << 20,
            intact: true,
        };
        assert_eq!(check_datagram(&buf), Some(intact));
        assert_eq!(check_datagram(&buf[..15]), None);
        buf[99] ^= 1;
        assert_eq!(
            check_datagram(&buf),
            Some(Datagram {
                intact: false,
                ..intact
            })
        );
        fill_datagram(&mut buf, 3, 7);
        buf[8] = 8;
        assert!(
            !check_datagram(&buf).expect("header intact").intact,
            "wrong sequence number"
        );
    }
}
