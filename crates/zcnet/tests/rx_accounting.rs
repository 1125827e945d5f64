//! Property test of the chunk and offset accounting against a model of the byte stream: for random
//! write sizes (with MSG_EOR records), plain or MSG_ZEROCOPY senders, windows, copy buffers, copybuf,
//! release policy, low-water mark, blocking mode, zero-copy or auto mode (with windows so small that
//! it switches between mapping and copying every few chunks), the chunks a receiver hands out tile the sent
//! stream exactly, in order, each within the bound of its kind, and the stats count every byte once.

mod rx_util;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::thread;

use proptest::prelude::*;
use rx_util::{SendWith, send_writes};
use zcnet::rx::{
    AutoConfig, ChunkKind, Receiver, Release, RxConfig, RxMode, RxPath, RxStats, sender,
};

const PAGE: usize = 4096;

#[derive(Debug, Clone)]
struct Case {
    writes: Vec<(usize, bool)>,
    v6: bool,
    config: RxConfig,
    nonblocking: bool,
    with: SendWith,
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
        any::<bool>(),
        prop::option::of(1u64..(64 << 10)),
    )
        .prop_map(
            |(
                writes,
                v6,
                pages,
                copy_buffer,
                copybuf,
                lazy,
                low_water,
                give_up,
                nonblocking,
                zerocopy,
                auto_window,
            )| {
                Case {
                    writes,
                    v6,
                    config: {
                        let mut config = RxConfig::default();
                        config.mode = auto_window.map_or(RxMode::ZeroCopy, |_| RxMode::Auto);
                        config.auto = AutoConfig::default();
                        config.auto.window_bytes = auto_window.unwrap_or(0);
                        config.auto.compare_every = 1;
                        config.auto.max_compare_every = 2;
                        config.window = pages * PAGE;
                        config.copy_buffer = copy_buffer;
                        config.copybuf = copybuf;
                        config.release = if lazy { Release::Lazy } else { Release::Zap };
                        config.low_water = low_water;
                        config.give_up_after = give_up;
                        config.path = RxPath::Socket;
                        config
                    },
                    nonblocking,
                    with: if zerocopy {
                        SendWith::ZeroCopy
                    } else {
                        SendWith::Plain
                    },
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

fn check(case: Case) -> Result<RxStats, TestCaseError> {
    let ip = if case.v6 {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    let (client, server) = sender::connect_page_mss(ip).unwrap();
    server.set_nonblocking(case.nonblocking).unwrap();
    let stream = model(&case.writes);
    let writer = {
        let (stream, writes, with) = (stream.clone(), case.writes.clone(), case.with);
        thread::spawn(move || send_writes(client, &stream, &writes, with))
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
            other => prop_assert!(false, "the socket path handed out a {other:?} chunk"),
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
    Ok(*rx.stats())
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

/// The property above draws mapped chunks only when a case happens to carry whole pages from the
/// MSG_ZEROCOPY sender; this case always does, with headers and odd writes between the pages.
#[test]
fn mapped_chunks_take_part_in_the_accounting() {
    let writes = [
        (37, true),
        (64 * PAGE, false),
        (5000, false),
        (16 * PAGE, false),
        (1, true),
    ];
    let stats = check(Case {
        writes: writes.repeat(8),
        v6: false,
        config: {
            let mut config = RxConfig::default();
            config.mode = RxMode::ZeroCopy;
            config.window = 8 * PAGE;
            config.copy_buffer = 3000;
            config
        },
        nonblocking: false,
        with: SendWith::ZeroCopy,
    })
    .unwrap();
    assert!(stats.mapped_bytes > 0, "{stats:?}");
    assert!(stats.copied_bytes() > 0, "{stats:?}");
}
