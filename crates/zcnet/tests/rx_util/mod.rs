//! Shared pieces of the receive tests: deterministic streams written in several message-size
//! patterns, and a reader that checks every chunk against the bytes sent.
#![allow(dead_code)]

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use zcnet::rx::{Chunk, ChunkKind, Receiver, RxConfig, RxMode, RxStats, sender};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TcpSender};

/// How the sender cuts the stream into writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Writes of 1, 2, 4 and 16 pages in turn.
    PageMultiples,
    /// Writes of odd sizes (1 to 9000 bytes, stepping by primes).
    OddSizes,
    /// One byte per write.
    OneByte,
    /// A 37-byte header sent with MSG_EOR, then 16 KiB of payload, repeated.
    EorHeaders,
}

pub const ALL_PATTERNS: [Pattern; 4] = [
    Pattern::PageMultiples,
    Pattern::OddSizes,
    Pattern::OneByte,
    Pattern::EorHeaders,
];

/// `len` deterministic pseudo-random bytes (xorshift64 from `seed`).
pub fn stream_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// FNV-1a 64: the checksum both ends compute.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The write sizes of `pattern` covering `total` bytes (the last one cut short).
pub fn write_sizes(pattern: Pattern, total: usize) -> Vec<(usize, bool)> {
    let page = 4096;
    let mut sizes = Vec::new();
    let mut sent = 0;
    let mut i = 0usize;
    while sent < total {
        let (size, eor) = match pattern {
            Pattern::PageMultiples => ([1, 2, 4, 16][i % 4] * page, false),
            Pattern::OddSizes => (1 + (i * 7919 + 13) % 9000, false),
            Pattern::OneByte => (1, false),
            Pattern::EorHeaders if i.is_multiple_of(2) => (37, true),
            Pattern::EorHeaders => (16 * page, false),
        };
        let size = size.min(total - sent);
        sizes.push((size, eor));
        sent += size;
        i += 1;
    }
    sizes
}

/// How the sender writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendWith {
    /// Plain `write()`: pages from the socket's page frags, which never map on this kernel.
    Plain,
    /// `zcnet::tx`'s MSG_ZEROCOPY sender (every data send zero-copy) from page-aligned pooled buffers;
    /// MSG_EOR headers still go out with a plain send on the same socket.
    ZeroCopy,
}

/// Writes `bytes` to `stream` cut as `pattern` says (headers with MSG_EOR), then shuts down writing.
pub fn send_pattern(stream: TcpStream, bytes: &[u8], pattern: Pattern, with: SendWith) {
    send_writes(stream, bytes, &write_sizes(pattern, bytes.len()), with);
}

/// Writes `bytes` to `stream` in `writes` (size, sent as a MSG_EOR record), then shuts down writing.
pub fn send_writes(stream: TcpStream, bytes: &[u8], writes: &[(usize, bool)], with: SendWith) {
    let stream = match with {
        SendWith::Plain => send_plain(stream, bytes, writes),
        SendWith::ZeroCopy => send_zerocopy(stream, bytes, writes),
    };
    stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
}

fn send_plain(mut stream: TcpStream, bytes: &[u8], writes: &[(usize, bool)]) -> TcpStream {
    let mut at = 0;
    for &(size, eor) in writes {
        let piece = &bytes[at..at + size];
        if eor {
            sender::send_record(&stream, piece).expect("send header with MSG_EOR");
        } else {
            stream.write_all(piece).expect("write payload");
        }
        at += size;
    }
    stream
}

fn send_zerocopy(stream: TcpStream, bytes: &[u8], writes: &[(usize, bool)]) -> TcpStream {
    let pool = BufferPool::new(PoolConfig::new(
        writes.iter().map(|&(size, _)| size).max().unwrap_or(1),
        32,
    ))
    .expect("send buffer pool");
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.send_timeout = Some(Duration::from_secs(20));
    let mut tx = TcpSender::new(stream, config);
    tx.zerocopy_status().expect("SO_ZEROCOPY on TCP");
    let mut at = 0;
    for &(size, eor) in writes {
        let piece = &bytes[at..at + size];
        at += size;
        if eor {
            sender::send_record(tx.get_ref(), piece).expect("send header with MSG_EOR");
            continue;
        }
        let mut buf = tx
            .take_from(&pool, Duration::from_secs(20))
            .expect("a send buffer back from its completion");
        buf.fill_with(size, |b| b.copy_from_slice(piece));
        tx.send(buf).expect("zero-copy send");
    }
    tx.close(Duration::from_secs(20)).expect("flush the sender")
}

/// What a receiver got.
#[derive(Debug)]
pub struct Received {
    pub bytes: u64,
    pub checksum: u64,
    pub stats: RxStats,
    pub kinds: [u64; 3],
}

/// Checks chunks in arrival order against the expected stream: each starts where the previous one
/// ended and holds exactly the expected bytes.
pub struct StreamCheck<'a> {
    expected: &'a [u8],
    hash: u64,
    next: u64,
    kinds: [u64; 3],
}

impl<'a> StreamCheck<'a> {
    pub fn new(expected: &'a [u8]) -> Self {
        StreamCheck {
            expected,
            hash: 0xcbf2_9ce4_8422_2325,
            next: 0,
            kinds: [0; 3],
        }
    }

    pub fn check(&mut self, chunk: &Chunk<'_>) {
        assert_eq!(chunk.offset(), self.next, "chunk offset");
        assert!(!chunk.is_empty(), "empty chunk");
        let at = self.next as usize;
        assert!(
            at + chunk.len() <= self.expected.len(),
            "more bytes than sent"
        );
        assert!(
            chunk[..] == self.expected[at..at + chunk.len()],
            "bytes differ in a {:?} chunk at offset {at}",
            chunk.kind()
        );
        self.hash = chunk.iter().fold(self.hash, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        self.kinds[kind_index(chunk.kind())] += chunk.len() as u64;
        self.next += chunk.len() as u64;
    }

    pub fn finish(self, stats: RxStats) -> Received {
        Received {
            bytes: self.next,
            checksum: self.hash,
            stats,
            kinds: self.kinds,
        }
    }
}

/// Reads `rx` to its end, checking every chunk ([`StreamCheck`]).
pub fn receive_checked(rx: &mut Receiver, expected: &[u8]) -> Received {
    let mut check = StreamCheck::new(expected);
    while let Some(chunk) = rx.recv().expect("receive") {
        check.check(&chunk);
    }
    check.finish(*rx.stats())
}

pub fn kind_index(kind: ChunkKind) -> usize {
    match kind {
        ChunkKind::Mapped => 0,
        ChunkKind::Copybuf => 1,
        ChunkKind::Recv => 2,
        other => panic!("the socket path handed out a {other:?} chunk"),
    }
}

/// Checks that `got` is the whole of `expected` and that the stats add up to the chunks.
pub fn assert_intact(got: &Received, expected: &[u8]) {
    assert_eq!(got.bytes, expected.len() as u64, "stream length");
    assert_eq!(got.checksum, checksum(expected), "stream checksum");
    assert_eq!(got.stats.bytes(), got.bytes, "stats count every byte once");
    assert_eq!(got.stats.mapped_bytes, got.kinds[0]);
    assert_eq!(got.stats.copybuf_bytes, got.kinds[1]);
    assert_eq!(got.stats.recv_bytes, got.kinds[2]);
}

/// Sends `len` deterministic bytes from `client` cut as `pattern`, receives them on `server` with
/// `config`, and checks every chunk and the whole stream. Returns what arrived and the receiver.
pub fn transfer(
    client: TcpStream,
    server: TcpStream,
    len: usize,
    (pattern, with): (Pattern, SendWith),
    config: RxConfig,
) -> (Received, Receiver) {
    let bytes = stream_bytes(len, len as u64 ^ 0x5eed);
    let to_send = bytes.clone();
    let writer = thread::spawn(move || send_pattern(client, &to_send, pattern, with));
    let mut rx = Receiver::new(server, config).expect("receiver");
    let got = receive_checked(&mut rx, &bytes);
    writer.join().expect("sender");
    assert_intact(&got, &bytes);
    (got, rx)
}

/// A zero-copy receiver configuration that never falls back to `recv` (so that a sender whose pages
/// do not map still exercises `TCP_ZEROCOPY_RECEIVE`), with or without copybuf.
pub fn keep_trying(copybuf: bool) -> RxConfig {
    let mut config = RxConfig::default();
    config.mode = RxMode::ZeroCopy;
    config.copybuf = copybuf;
    config.give_up_after = None;
    config
}

/// A loopback pair whose client sent `bytes` and then reset the connection (its queue held unread
/// bytes when it closed); returns the server side, to which the reset was sent.
pub fn reset_after(ip: std::net::IpAddr, bytes: &[u8]) -> TcpStream {
    let (mut client, mut server) = sender::connect_page_mss(ip).expect("loopback pair");
    server.write_all(b"unread").unwrap();
    client.write_all(bytes).unwrap();
    let mut one = [0u8; 1];
    // Wait until the bytes for the client arrived, so that dropping it resets.
    while client.peek(&mut one).unwrap() == 0 {}
    drop(client);
    server
}
