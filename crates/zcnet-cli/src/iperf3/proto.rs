//! iperf3's control protocol, as its 3.x releases speak it: what crosses the control connection and
//! the UDP streams, independent of how the data is sent or received.
//!
//! A test runs over one TCP control connection and one connection (TCP) or connected socket (UDP)
//! per stream, all to the server's port:
//!
//! 1. The client connects and writes its cookie: 36 characters from `a-z2-7` and a NUL
//!    ([`COOKIE_LEN`] bytes), which names the test.
//! 2. The server writes the state byte [`State::ParamExchange`]; the client writes its parameters as
//!    a JSON object ([`Params`]), framed as a 4-byte big-endian length and the text ([`write_json`]).
//! 3. The server writes [`State::CreateStreams`]; the client opens the streams: a TCP stream
//!    writes the cookie first; a UDP stream writes [`UDP_CONNECT_MSG`] and waits for
//!    [`UDP_CONNECT_REPLY`] from the socket the server connected to it. Stream ids are 1, 3, 4, 5…
//!    in the order the streams were opened; with `--bidir` the client's sending streams come first.
//! 4. The server writes [`State::TestStart`] then [`State::TestRunning`]; data flows.
//! 5. The client ends the test with [`State::TestEnd`]; the server answers
//!    [`State::ExchangeResults`]; the client writes its results ([`Results`]), the server its own,
//!    then [`State::DisplayResults`]; the client closes with [`State::IperfDone`].
//!
//! A server that is busy writes [`State::AccessDenied`] and closes; one that cannot run the test
//! writes [`State::ServerError`] followed by two 4-byte big-endian numbers: iperf3's own error
//! number (`i_errno`, [`ServerError`]) and an `errno`.
//!
//! UDP datagrams start with the sender's clock (seconds, microseconds: 4 bytes each) and the
//! datagram's sequence number from 1 (4 bytes, or 8 when both ends agreed on 64-bit counters),
//! all big-endian ([`UdpHeader`]).

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Bytes of a cookie on the wire, its closing NUL included.
pub const COOKIE_LEN: usize = 37;

/// The characters of a cookie.
const COOKIE_CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A test's cookie, as the client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cookie(pub [u8; COOKIE_LEN]);

impl Cookie {
    /// A new cookie from 36 random bytes (from `/dev/urandom`).
    pub fn random() -> io::Result<Cookie> {
        let mut bytes = [0u8; COOKIE_LEN];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        for b in &mut bytes[..COOKIE_LEN - 1] {
            *b = COOKIE_CHARS[usize::from(*b) % COOKIE_CHARS.len()];
        }
        bytes[COOKIE_LEN - 1] = 0;
        Ok(Cookie(bytes))
    }

    /// Reads a cookie.
    pub fn read(r: &mut impl Read) -> io::Result<Cookie> {
        let mut bytes = [0u8; COOKIE_LEN];
        r.read_exact(&mut bytes)?;
        Ok(Cookie(bytes))
    }

    /// The cookie's text (up to its NUL; unprintable bytes escaped).
    pub fn text(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(COOKIE_LEN);
        self.0[..end].escape_ascii().to_string()
    }
}

/// The state bytes of the control connection (a signed char on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfStart,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    const ALL: [(State, i8); 13] = [
        (State::TestStart, 1),
        (State::TestRunning, 2),
        (State::TestEnd, 4),
        (State::ParamExchange, 9),
        (State::CreateStreams, 10),
        (State::ServerTerminate, 11),
        (State::ClientTerminate, 12),
        (State::ExchangeResults, 13),
        (State::DisplayResults, 14),
        (State::IperfStart, 15),
        (State::IperfDone, 16),
        (State::AccessDenied, -1),
        (State::ServerError, -2),
    ];

    /// The state's byte.
    pub fn byte(self) -> u8 {
        let (_, b) = State::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .expect("every state has a byte");
        *b as u8
    }

    /// The state a byte names, or `None` for a byte iperf3 does not send.
    pub fn from_byte(byte: u8) -> Option<State> {
        State::ALL
            .iter()
            .find(|(_, b)| *b as u8 == byte)
            .map(|(s, _)| *s)
    }

    /// Writes the state byte.
    pub fn write(self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&[self.byte()])
    }
}

/// What came on the control connection where a state byte was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    State(State),
    /// A byte that names no state.
    Unknown(u8),
}

/// Reads one state byte; end of stream is `UnexpectedEof`.
pub fn read_state(r: &mut impl Read) -> io::Result<Received> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(State::from_byte(b[0]).map_or(Received::Unknown(b[0]), Received::State))
}

/// iperf3's error numbers (`i_errno`) that a server sends after [`State::ServerError`], and that its
/// client prints as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerError {
    /// `IERECVPARAMS` (114): "unable to receive parameters from client".
    RecvParams = 114,
    /// `IELISTEN` (102): "unable to start listener for connections".
    Listen = 102,
}

/// Writes [`State::ServerError`], `error` and `errno`.
pub fn write_server_error(w: &mut impl Write, error: ServerError, errno: i32) -> io::Result<()> {
    let mut msg = vec![State::ServerError.byte()];
    msg.extend_from_slice(&(error as i32).to_be_bytes());
    msg.extend_from_slice(&errno.to_be_bytes());
    w.write_all(&msg)
}

/// Reads the two numbers after [`State::ServerError`]: iperf3's error number and the `errno`.
pub fn read_server_error(r: &mut impl Read) -> io::Result<(i32, i32)> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    let num = |i: usize| i32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Ok((num(0), num(4)))
}

/// Longest parameter block a server reads: iperf3's own client sends a few hundred bytes (iperf3
/// itself allows 8 KiB).
pub const MAX_PARAMS: u32 = 64 << 10;

/// Longest result block read (the server's may carry its whole output).
pub const MAX_RESULTS: u32 = 16 << 20;

/// Writes `value` as a length-prefixed JSON block.
pub fn write_json(w: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    let text = serde_json::to_vec(value).map_err(io::Error::other)?;
    let len = u32::try_from(text.len()).map_err(|_| io::Error::other("JSON block over 4 GiB"))?;
    let mut msg = len.to_be_bytes().to_vec();
    msg.extend_from_slice(&text);
    w.write_all(&msg)
}

/// Why a JSON block was not read.
#[derive(Debug)]
pub enum JsonError {
    Io(io::Error),
    /// The length prefix claims more than the limit.
    TooLong {
        claimed: u32,
        limit: u32,
    },
    /// The text is not the JSON expected.
    Malformed(String),
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JsonError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                f.write_str("the connection closed inside the JSON block")
            }
            JsonError::Io(e) => write!(f, "reading the JSON block: {e}"),
            JsonError::TooLong { claimed, limit } => write!(
                f,
                "the JSON block claims {claimed} bytes, over the limit of {limit}"
            ),
            JsonError::Malformed(why) => write!(f, "malformed JSON block: {why}"),
        }
    }
}

impl std::error::Error for JsonError {}

/// Reads a length-prefixed JSON block of at most `limit` bytes as a `T`.
pub fn read_json<T: for<'de> Deserialize<'de>>(
    r: &mut impl Read,
    limit: u32,
) -> Result<T, JsonError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(JsonError::Io)?;
    let claimed = u32::from_be_bytes(len);
    if claimed > limit {
        return Err(JsonError::TooLong { claimed, limit });
    }
    let mut text = vec![0u8; claimed as usize];
    r.read_exact(&mut text).map_err(JsonError::Io)?;
    serde_json::from_slice(&text).map_err(|e| JsonError::Malformed(e.to_string()))
}

/// The client's parameter block (the fields zcnet reads or sends; others are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<bool>,
    #[serde(default)]
    pub omit: u32,
    #[serde(default)]
    pub time: u32,
    /// Bytes to send in all (0: no limit).
    #[serde(default)]
    pub num: u64,
    /// Blocks to send in all (0: no limit).
    #[serde(default)]
    pub blockcount: u64,
    #[serde(rename = "MSS", default, skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    #[serde(default = "one")]
    pub parallel: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bidirectional: Option<bool>,
    /// Socket buffer size (`-w`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
    /// Block size (`-l`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u32>,
    /// Bits per second per stream (`-b`; 0 or absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_counters_64bit: Option<u32>,
    /// iperf3's `-Z` (sendfile on the client's side; nothing for its peer to do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zerocopy: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
}

fn one() -> u32 {
    1
}

/// Which way the data of a test goes, as seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client sends.
    Forward,
    /// The server sends (`-R`).
    Reverse,
    /// Both send (`--bidir`).
    Bidir,
}

impl Params {
    /// Which way the data goes.
    pub fn direction(&self) -> Direction {
        match (self.bidirectional, self.reverse) {
            (Some(true), _) => Direction::Bidir,
            (_, Some(true)) => Direction::Reverse,
            _ => Direction::Forward,
        }
    }

    /// Whether the test is UDP.
    pub fn is_udp(&self) -> bool {
        self.udp == Some(true)
    }
}

/// The stream ids of a test with `count` streams: 1, 3, 4, 5, …
pub fn stream_ids(count: usize) -> impl Iterator<Item = u32> {
    (0..count as u32).map(|i| if i == 0 { 1 } else { i + 2 })
}

/// One side's results of a test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Results {
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1 when this side sent TCP and counts retransmits, 0 when it does not, -1 when it only received.
    #[serde(deserialize_with = "signed")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResult>,
}

/// One stream's results, from the side that reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    pub id: u32,
    /// Bytes sent (by a sender) or received (by a receiver).
    pub bytes: u64,
    #[serde(deserialize_with = "signed")]
    pub retransmits: i64,
    /// UDP: seconds of jitter the receiver measured.
    pub jitter: f64,
    /// UDP: datagrams the receiver counts as lost.
    #[serde(deserialize_with = "signed")]
    pub errors: i64,
    /// UDP: datagrams sent, or the highest sequence number received.
    #[serde(deserialize_with = "signed")]
    pub packets: i64,
    #[serde(default)]
    pub start_time: f64,
    #[serde(default)]
    pub end_time: f64,
}

/// A signed number as iperf3 writes it: its JSON library prints -1 in 64-bit fields as
/// 18446744073709551615, which is read back as -1.
fn signed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    n.as_i64()
        .or_else(|| n.as_u64().map(|u| u as i64))
        .or_else(|| n.as_f64().map(|f| f as i64))
        .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a number iperf3 writes")))
}

/// What a UDP client writes to the server's port to open a stream (read as a native-endian u32, as
/// iperf3 writes it: the bytes "9876" on little-endian hosts).
pub const UDP_CONNECT_MSG: u32 = 0x3637_3839;
/// What the server writes back from the socket it connected to the client.
pub const UDP_CONNECT_REPLY: u32 = 0x3938_3736;
/// The reply of iperf3 releases before 3.11.
pub const LEGACY_UDP_CONNECT_REPLY: u32 = 987_654_321;

/// The header at the start of every UDP datagram of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    pub sec: u32,
    pub usec: u32,
    /// The datagram's sequence number, from 1.
    pub seq: u64,
}

impl UdpHeader {
    /// Bytes of the header: 12, or 16 with 64-bit counters.
    pub fn len(wide: bool) -> usize {
        if wide { 16 } else { 12 }
    }

    /// Writes the header into the start of `buf` (at least [`UdpHeader::len`] bytes).
    pub fn write(&self, buf: &mut [u8], wide: bool) {
        buf[0..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if wide {
            buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        } else {
            buf[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes());
        }
    }

    /// The header of a datagram, or `None` when it is shorter than one.
    pub fn parse(buf: &[u8], wide: bool) -> Option<UdpHeader> {
        let word = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        if buf.len() < UdpHeader::len(wide) {
            return None;
        }
        let seq = if wide {
            u64::from_be_bytes(buf[8..16].try_into().ok()?)
        } else {
            u64::from(word(8))
        };
        Some(UdpHeader {
            sec: word(0),
            usec: word(4),
            seq,
        })
    }

    /// The header's time in seconds.
    pub fn seconds(&self) -> f64 {
        f64::from(self.sec) + f64::from(self.usec) / 1e6
    }
}

/// What a UDP receiver makes of the sequence numbers and times of the datagrams it gets, as iperf3
/// counts them: a gap in sequence numbers is counted lost, a datagram older than the newest seen is
/// out of order (and takes one back from the lost), and the jitter is RFC 3550's running average of
/// the change in transit time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UdpTally {
    /// The highest sequence number seen.
    pub highest: u64,
    pub lost: i64,
    pub out_of_order: u64,
    /// Seconds.
    pub jitter: f64,
    /// The transit time of the last datagram (None before the first).
    last_transit: Option<f64>,
}

impl UdpTally {
    /// Counts a datagram sent at `sent` seconds that arrived at `arrived` seconds.
    pub fn add(&mut self, header: &UdpHeader, arrived: f64) {
        if header.seq > self.highest {
            self.lost += (header.seq - self.highest - 1) as i64;
            self.highest = header.seq;
        } else {
            self.out_of_order += 1;
            if self.lost > 0 {
                self.lost -= 1;
            }
        }
        let transit = arrived - header.seconds();
        let previous = self.last_transit.unwrap_or(transit);
        self.jitter += ((transit - previous).abs() - self.jitter) / 16.0;
        self.last_transit = Some(transit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_iperf3s_bytes() {
        assert_eq!(State::TestStart.byte(), 1);
        assert_eq!(State::TestEnd.byte(), 4);
        assert_eq!(State::ParamExchange.byte(), 9);
        assert_eq!(State::IperfDone.byte(), 16);
        assert_eq!(State::AccessDenied.byte(), 0xff);
        assert_eq!(State::ServerError.byte(), 0xfe);
        for (s, _) in State::ALL {
            assert_eq!(State::from_byte(s.byte()), Some(s));
        }
        assert_eq!(State::from_byte(3), None);
    }

    #[test]
    fn cookies_are_36_characters_and_a_nul() {
        let c = Cookie::random().unwrap();
        assert_eq!(c.0[36], 0);
        assert!(c.0[..36].iter().all(|b| COOKIE_CHARS.contains(b)));
        assert_eq!(c.text().len(), 36);
        assert_ne!(c, Cookie::random().unwrap());
    }

    #[test]
    fn json_blocks_are_length_prefixed_and_bounded() {
        let p = Params {
            tcp: Some(true),
            time: 3,
            parallel: 4,
            reverse: Some(true),
            len: Some(131_072),
            ..Params::default()
        };
        let mut wire = Vec::new();
        write_json(&mut wire, &p).unwrap();
        let len = u32::from_be_bytes(wire[..4].try_into().unwrap()) as usize;
        assert_eq!(len, wire.len() - 4);
        assert!(
            std::str::from_utf8(&wire[4..])
                .unwrap()
                .contains("\"parallel\":4")
        );
        let back: Params = read_json(&mut &wire[..], MAX_PARAMS).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.direction(), Direction::Reverse);

        let huge = [0xffu8, 0xff, 0xff, 0xff];
        let err = read_json::<Params>(&mut &huge[..], MAX_PARAMS).unwrap_err();
        assert!(
            matches!(
                err,
                JsonError::TooLong {
                    claimed: u32::MAX,
                    ..
                }
            ),
            "{err}"
        );
        let garbage = [0, 0, 0, 3, b'{', b'x', b'!'];
        assert!(matches!(
            read_json::<Params>(&mut &garbage[..], MAX_PARAMS),
            Err(JsonError::Malformed(_))
        ));
        let short = [0, 0, 0, 9, b'{'];
        assert!(matches!(
            read_json::<Params>(&mut &short[..], MAX_PARAMS),
            Err(JsonError::Io(_))
        ));
        // iperf3's own client's block: fields zcnet does not read are ignored, `parallel` defaults.
        let theirs = br#"{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#;
        let p: Params = serde_json::from_slice(theirs).unwrap();
        assert_eq!(
            (p.time, p.len, p.direction()),
            (10, Some(131_072), Direction::Forward)
        );
    }

    #[test]
    fn results_read_iperf3s_unsigned_minus_one() {
        let theirs = br#"{"cpu_util_total":1.5,"cpu_util_user":0.5,"cpu_util_system":1,"sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":1000,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":1.0}]}"#;
        let r: Results = serde_json::from_slice(theirs).unwrap();
        assert_eq!(
            (r.sender_has_retransmits, r.streams[0].retransmits),
            (-1, -1)
        );
        assert_eq!(r.streams[0].bytes, 1000);
    }

    #[test]
    fn stream_ids_skip_two() {
        assert_eq!(stream_ids(4).collect::<Vec<_>>(), [1, 3, 4, 5]);
    }

    #[test]
    fn udp_headers_round_trip_in_both_widths() {
        let h = UdpHeader {
            sec: 1_700_000_000,
            usec: 123_456,
            seq: 7,
        };
        for wide in [false, true] {
            let mut buf = [0u8; 20];
            h.write(&mut buf, wide);
            assert_eq!(UdpHeader::parse(&buf, wide), Some(h));
        }
        let mut buf = [0u8; 12];
        h.write(&mut buf, false);
        assert_eq!(&buf[8..12], &[0, 0, 0, 7]);
        assert_eq!(UdpHeader::parse(&buf[..11], false), None);
    }

    #[test]
    fn udp_tally_counts_gaps_reordering_and_jitter() {
        let mut t = UdpTally::default();
        let at = |seq: u64, sent: f64| UdpHeader {
            sec: sent as u32,
            usec: ((sent.fract()) * 1e6).round() as u32,
            seq,
        };
        t.add(&at(1, 10.0), 10.5);
        t.add(&at(2, 11.0), 11.5);
        assert_eq!((t.highest, t.lost, t.out_of_order), (2, 0, 0));
        assert_eq!(t.jitter, 0.0);
        t.add(&at(5, 12.0), 12.6); // 3 and 4 missing; transit 0.1 s longer
        assert_eq!((t.highest, t.lost), (5, 2));
        assert!((t.jitter - 0.1 / 16.0).abs() < 1e-9, "{}", t.jitter);
        t.add(&at(3, 11.5), 12.7); // late
        assert_eq!((t.highest, t.lost, t.out_of_order), (5, 1, 1));
    }
}
