//! Property test of the chunk and offset accounting against a model of the byte stream: for random
//! write sizes (with MSG_EOR records), windows, copy buffers, copybuf, release policy, low-water mark
//! and blocking mode, the chunks a receiver hands out tile the sent stream exactly, in order, each
//! within the bound of its kind, and the stats count every byte once.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpStream};
use std::thread;

use proptest::prelude::*;
use zcnet::rx::{ChunkKind, Receiver, Release, RxConfig, RxStats, sender};

const PAGE: usize = 4096;

#[derive(Debug, Clone)]
struct Case {
    writes: Vec<(usize, bool)>,
    v6: bool,
    config: RxConfig,
    nonblocking: bool,
}

fn case() -> impl Strategy<Value = Case> {
    let write = prop_oneof![
        (1usize..64).prop_map(|n| n * PAGE),
        1usize..20_000,
        Just(1usize),
    ];
    (
        prop::collection::vec((write, any::<bool>()), 1..120),
        any::<bool>(),
        1usize..48,
        1usize..(64 << 10),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1usize..(128 << 10)),
        prop::option::of(0u64..(256 << 10)),
        any::<bool>(),
    )
        .prop_map(
            |(writes, v6, pages, copy_buffer, copybuf, lazy, low_water, give_up, nonblocking)| {
                Case {
                    writes,
                    v6,
                    config: RxConfig {
                        window: pages * PAGE,
                        copy_buffer,
                        copybuf,
                        release: if lazy { Release::Lazy } else { Release::Zap },
                        low_water,
                        give_up_after: give_up,
                        ..RxConfig::default()
                    },
                    nonblocking,
                }
            },
        )
}

/// The model: the stream is the concatenation of the writes, byte i of write k being a function of
/// (k, i), so that any misplaced, lost or repeated byte shows.
fn model(writes: &[(usize, bool)]) -> Vec<u8> {
    let mut stream = Vec::new();
    for (k, &(len, _)) in writes.iter().enumerate() {
        stream.extend((0..len).map(|i| (k * 131 + i * 7 + i / 251) as u8));
    }
    stream
}

fn send(mut client: TcpStream, stream: Vec<u8>, writes: Vec<(usize, bool)>) {
    let mut at = 0;
    for (len, eor) in writes {
        let piece = &stream[at..at + len];
        if eor {
            sender::send_record(&client, piece).unwrap();
        } else {
            client.write_all(piece).unwrap();
        }
        at += len;
    }
}

fn check(case: Case) -> Result<(), TestCaseError> {
    let ip = if case.v6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    let (client, server) = sender::connect_page_mss(ip).unwrap();
    server.set_nonblocking(case.nonblocking).unwrap();
    let stream = model(&case.writes);
    let writer = {
        let (stream, writes) = (stream.clone(), case.writes.clone());
        thread::spawn(move || send(client, stream, writes))
    };
    let window = case.config.window;
    let copy_buffer = case.config.copy_buffer;
    let mut rx = Receiver::new(server, case.config).unwrap();
    let mut next = 0usize;
    let mut by_kind = RxStats::default();
    loop {
        let chunk = match rx.recv() {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::yield_now();
                continue;
            }
            Err(e) => return Err(TestCaseError::fail(format!("receive: {e}"))),
        };
        prop_assert_eq!(chunk.offset(), next as u64);
        prop_assert!(!chunk.is_empty());
        prop_assert!(
            next + chunk.len() <= stream.len(),
            "past the end of the stream"
        );
        prop_assert!(
            chunk[..] == stream[next..next + chunk.len()],
            "bytes differ at {}",
            next
        );
        match chunk.kind() {
            ChunkKind::Mapped => {
                prop_assert!(chunk.len() % PAGE == 0 && chunk.len() <= window);
                by_kind.mapped_bytes += chunk.len() as u64;
            }
            ChunkKind::Copybuf => {
                prop_assert!(chunk.len() < PAGE);
                by_kind.copybuf_bytes += chunk.len() as u64;
            }
            ChunkKind::Recv => {
                prop_assert!(chunk.len() <= copy_buffer.max(PAGE - 1));
                by_kind.recv_bytes += chunk.len() as u64;
            }
        }
        next += chunk.len();
    }
    writer.join().unwrap();
    let stats = rx.stats();
    prop_assert_eq!(next, stream.len());
    prop_assert_eq!(rx.offset(), stream.len() as u64);
    prop_assert_eq!(stats.mapped_bytes, by_kind.mapped_bytes);
    prop_assert_eq!(stats.copybuf_bytes, by_kind.copybuf_bytes);
    prop_assert_eq!(stats.recv_bytes, by_kind.recv_bytes);
    prop_assert!(stats.chunks >= 1);
    // Once the stream has ended, it stays ended.
    prop_assert!(rx.recv().unwrap().is_none());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn chunks_tile_the_stream(case in case()) {
        check(case)?;
    }
}
