//! The receiver's auto mode over loopback (MSS of one page) with the MSG_ZEROCOPY sender, whose pages
//! map: switching between mapped receive and `recv` window after window loses, repeats and reorders
//! no byte; `stats().auto` says what it chose and why; a peer whose pages do not map makes it copy,
//! with the reason; and a request/response exchange does not stall while it switches.

mod rx_util;

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpStream};
use std::thread;
use std::time::Duration;

use rx_util::{Pattern, SendWith, StreamCheck, assert_intact, send_pattern, stream_bytes};
use zcnet::rx::{
    AutoChoice, AutoConfig, AutoReason, ChunkKind, Receiver, Release, RxConfig, RxMode, RxStats,
    sender,
};
use zcnet::tx::{BufferPool, Mode, PoolConfig, SenderConfig, TcpSender};
use zcnet::{Cause, Fallback};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// Auto with windows of `window_bytes` and a comparison after every kept window: the receiver
/// changes way every one or two windows whatever the costs.
fn switching(window_bytes: u64) -> RxConfig {
    let mut config = RxConfig::default();
    config.mode = RxMode::Auto;
    config.auto = AutoConfig::default();
    config.auto.window_bytes = window_bytes;
    config.auto.compare_every = 1;
    config.auto.max_compare_every = 1;
    config
}

/// Receives `len` bytes sent as `how` with `config`, checking every chunk; returns the stats, the
/// fallback and how many times consecutive chunks changed between mapped and copied.
fn receive(
    ip: IpAddr,
    len: usize,
    how: (Pattern, SendWith),
    config: RxConfig,
) -> (RxStats, Option<Fallback>, usize) {
    let (client, server) = sender::connect_page_mss(ip).expect("loopback pair");
    let bytes = stream_bytes(len, len as u64 ^ 0xa070);
    let to_send = bytes.clone();
    let writer = thread::spawn(move || send_pattern(client, &to_send, how.0, how.1));
    let mut rx = Receiver::new(server, config).expect("receiver");
    let mut check = StreamCheck::new(&bytes);
    let (mut last, mut changes) = (None, 0);
    while let Some(chunk) = rx.recv().expect("receive") {
        check.check(&chunk);
        let mapped = chunk.kind() == ChunkKind::Mapped;
        changes += usize::from(last.is_some_and(|was| was != mapped));
        last = Some(mapped);
    }
    writer.join().expect("sender");
    let got = check.finish(*rx.stats());
    assert_intact(&got, &bytes);
    (*rx.stats(), rx.zerocopy_status().err().cloned(), changes)
}

#[test]
fn switching_window_after_window_loses_no_byte() {
    for ip in [V4, V6] {
        for pattern in [
            Pattern::PageMultiples,
            Pattern::OddSizes,
            Pattern::EorHeaders,
        ] {
            for (copybuf, release) in [(false, Release::Zap), (true, Release::Lazy)] {
                let mut config = switching(128 << 10);
                config.window = 64 << 10;
                config.copy_buffer = 64 << 10;
                config.low_water = Some(64 << 10);
                config.copybuf = copybuf;
                config.release = release;
                config.give_up_after = None;
                let (stats, fallback, changes) =
                    receive(ip, 8 << 20, (pattern, SendWith::ZeroCopy), config);
                let what = format!("{ip} {pattern:?} copybuf={copybuf}: {stats:?}");
                assert!(stats.mapped_bytes > 0, "{what}");
                assert!(stats.recv_bytes > 0, "{what}");
                // 64 windows: a comparison (two windows of each way) at least every five.
                assert!(stats.cost_comparisons >= 8, "{what}");
                assert!(changes >= 16, "{changes} changes of way: {what}");
                assert!(
                    matches!(
                        stats.auto,
                        Some(AutoChoice {
                            mode: RxMode::ZeroCopy | RxMode::Copy,
                            reason: AutoReason::CheaperPerByte { .. }
                        })
                    ),
                    "{what}"
                );
                assert!(fallback.is_none(), "{what}");
                eprintln!(
                    "{ip} {pattern:?} copybuf={copybuf}: {changes} changes, {:.1}% mapped, {:?}",
                    stats.mapped_pct(),
                    stats.auto
                );
            }
        }
    }
}

#[test]
fn the_default_measures_a_mappable_stream_and_says_what_it_chose() {
    let config = RxConfig::default();
    assert_eq!(config.mode, RxMode::Auto);
    let (stats, fallback, _) = receive(
        V4,
        64 << 20,
        (Pattern::PageMultiples, SendWith::ZeroCopy),
        config,
    );
    // 16 windows of 4 MiB: the start-up window and at least one comparison.
    assert!(stats.cost_comparisons >= 1, "{stats:?}");
    let (mode, zc_ns_per_kb, copy_ns_per_kb) = match stats.auto.map(|c| (c.mode, c.reason)) {
        Some((
            mode,
            AutoReason::CheaperPerByte {
                zc_ns_per_kb,
                copy_ns_per_kb,
            },
        )) => (mode, zc_ns_per_kb, copy_ns_per_kb),
        other => panic!("a measured choice, not {other:?}: {stats:?}"),
    };
    assert!(mode == RxMode::ZeroCopy || mode == RxMode::Copy);
    assert!(zc_ns_per_kb > 0 && copy_ns_per_kb > 0, "{stats:?}");
    assert!(stats.mapped_bytes > 0 && stats.recv_bytes > 0, "{stats:?}");
    assert!(fallback.is_none());
    eprintln!("auto chose {mode:?}: mapped {zc_ns_per_kb}, recv {copy_ns_per_kb} us/MB");
}

#[test]
fn a_peer_whose_pages_do_not_map_makes_auto_copy_and_say_why() {
    for config in [RxConfig::default(), switching(64 << 10)] {
        let mut config = config;
        config.give_up_after = Some(1 << 20);
        let (stats, fallback, _) = receive(
            V6,
            8 << 20,
            (Pattern::PageMultiples, SendWith::Plain),
            config,
        );
        assert_eq!(stats.mapped_bytes, 0);
        assert_eq!(
            stats.auto,
            Some(AutoChoice {
                mode: RxMode::Copy,
                reason: AutoReason::NothingMapped
            })
        );
        match fallback.as_ref().map(Fallback::cause) {
            Some(Cause::Observed(what)) => assert!(what.contains("could be mapped"), "{what}"),
            other => panic!("expected a fallback for nothing mapped, got {other:?}"),
        }
    }
}

/// Sizes of the requests, cycled: below, at and above a page, and several windows' worth.
const REQUESTS: [usize; 6] = [1, 100, 4096, 5000, 64 << 10, 3 * 4096];

#[test]
fn a_request_response_exchange_does_not_stall_under_auto() {
    let (client, server) = sender::connect_page_mss(V4).expect("loopback pair");
    // A reply that does not come within this time fails the test rather than hanging it.
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let rounds = 300;
    let mut config = switching(4096);
    config.low_water = None;
    let answering = thread::spawn(move || {
        let mut rx = Receiver::new(server, config).expect("receiver");
        for round in 0..rounds {
            let want = REQUESTS[round % REQUESTS.len()];
            let mut got = Vec::with_capacity(want);
            while got.len() < want {
                let chunk = rx.recv().expect("receive").expect("a request, not the end");
                got.extend_from_slice(&chunk);
            }
            assert_eq!(got.len(), want, "round {round}: bytes of the next request");
            let answer = rx_util::checksum(&got).to_le_bytes();
            sender::send_record(rx.get_ref(), &answer).expect("answer");
        }
        assert!(rx.recv().expect("the end").is_none());
        *rx.stats()
    });
    let pool = BufferPool::new(PoolConfig::new(64 << 10, 4)).expect("send buffer pool");
    let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
    for round in 0..rounds {
        let request = stream_bytes(REQUESTS[round % REQUESTS.len()], round as u64);
        let mut buf = tx
            .take_from(&pool, Duration::from_secs(30))
            .expect("a send buffer back");
        buf.fill_with(request.len(), |b| b.copy_from_slice(&request));
        tx.send(buf).expect("request");
        let mut answer = [0u8; 8];
        let mut stream: &TcpStream = tx.get_ref();
        stream
            .read_exact(&mut answer)
            .unwrap_or_else(|e| panic!("round {round}: no answer: {e}"));
        assert_eq!(u64::from_le_bytes(answer), rx_util::checksum(&request));
    }
    drop(tx.close(Duration::from_secs(30)).expect("flush"));
    let stats = answering.join().expect("the answering side");
    assert!(stats.cost_comparisons > 0, "{stats:?}");
    assert!(stats.auto.is_some(), "{stats:?}");
    eprintln!("{stats:?}");
}
