//! The auto mode's measured choice, end to end: with the copied-completion rule off, the cost
//! comparison switches a TCP stream and a UDP GSO flow between zero-copy and copy window after
//! window, and every byte still arrives once and in order; on loopback the copied completions
//! decide; into the XDP drop sink (completions not copied) the choice is measured and says so.
//! Each body runs on both submission paths.

mod tx_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::thread::JoinHandle;
use std::time::Duration;

use tx_common::{
    Checksum, assert_stream_delivered, datagrams_of, fill, pool, sender_on, take, tcp_pair,
    udp_sink, xdp_drop_sink,
};
use zcnet::tx::{AutoChoice, AutoReason, BufferPool, Mode, SendPath, SenderConfig, TxStats};

/// Auto with small windows, a comparison every other window and, unless `copied_rule`, no switch to
/// copying on copied completions: the measurement alone moves the sender between the modes.
fn switching(path: SendPath, copied_rule: bool) -> SenderConfig {
    let mut config = SenderConfig::with_mode(Mode::Auto);
    config.path = path;
    config.policy.window_bytes = 256 << 10;
    config.policy.compare_every = 1;
    config.policy.max_compare_every = 2;
    config.policy.copied_run = if copied_rule { 16 } else { u64::MAX };
    config.send_timeout = Some(Duration::from_secs(20));
    config
}

/// Sizes cycled through: large ones the policy decides on, and one below the threshold.
const SIZES: [usize; 4] = [64 << 10, 48 << 10, 3000, 64 << 10];

fn assert_switched_and_accounted(stats: &TxStats) {
    assert!(stats.cost_comparisons >= 4, "{stats:?}");
    assert!(stats.zc_calls > 0 && stats.copy_cheaper > 0, "{stats:?}");
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls, "{stats:?}");
    assert!(
        matches!(
            stats.auto,
            Some(AutoChoice {
                reason: AutoReason::CheaperPerByte { .. },
                ..
            })
        ),
        "{stats:?}"
    );
}

/// Every byte of the stream arrived once and in order, every buffer came back, and the sender
/// switched between the modes.
fn assert_stream_exact(
    sink: JoinHandle<Checksum>,
    sent: Checksum,
    pool: &BufferPool,
    stats: &TxStats,
) {
    assert_stream_delivered(sink, sent, pool, stats);
    assert!(stats.copy_small > 0, "{stats:?}");
    assert_switched_and_accounted(stats);
}

fn tcp_stream_switching_modes(path: SendPath, ip: IpAddr) {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    let pool = pool(64 << 10, 8);
    let mut tx = sender_on(stream, switching(path, false), &pool);
    let sent = tx_common::send_sizes(&mut tx, &pool, &SIZES, 600, |tx, b| tx.send(b));
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_stream_exact(sink, sent, &pool, &stats);
}

each_path! {
    fn tcp_v4_stream_switching_between_measured_modes_arrives_exactly(path: SendPath) {
        tcp_stream_switching_modes(path, Ipv4Addr::LOCALHOST.into());
    }
}

each_path! {
    fn tcp_v6_stream_switching_between_measured_modes_arrives_exactly(path: SendPath) {
        tcp_stream_switching_modes(path, Ipv6Addr::LOCALHOST.into());
    }
}

each_path! {
fn udp_gso_switching_between_measured_modes_arrives_exactly(path: SendPath) {
    let tx_socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let rx_socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    tx_socket.connect(rx_socket.local_addr().unwrap()).unwrap();
    let sink = udp_sink(rx_socket);
    let pool = pool(64 << 10, 8);
    let mut tx = sender_on(tx_socket, switching(path, false), &pool);
    const SEG: u16 = 1200;
    tx.set_gso_segment(Some(SEG)).expect("UDP_SEGMENT");
    let mut sent = Checksum::default();
    let mut datagrams = 0;
    for _ in 0..600 {
        for size in [
            SEG as usize * 40,
            SEG as usize * 30,
            3000,
            SEG as usize * 40,
        ] {
            sink.throttle_while(sent.len, || {
                tx.poll_completions().expect("completions");
            });
            let mut buf = take(&pool, &mut tx);
            sent.fill_next(&mut buf, size);
            datagrams += datagrams_of(size, Some(SEG));
            tx.send(buf).expect("send");
        }
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    sink.assert_delivered(sent, datagrams, &pool);
    assert!(stats.copy_small > 0, "{stats:?}");
    assert_switched_and_accounted(&stats);
}
}

each_path! {
fn tcp_loopback_auto_says_the_kernel_copies(path: SendPath) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    let pool = pool(64 << 10, 8);
    let mut tx = sender_on(stream, switching(path, true), &pool);
    let sent = tx_common::send_sizes(&mut tx, &pool, &SIZES, 300, |tx, b| tx.send(b));
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_eq!(sink.join().expect("sink"), sent);
    // Every completion over loopback says copied: the hard rule holds whatever was measured.
    assert_eq!(stats.zc_ids, 0, "{stats:?}");
    assert!(stats.policy_switches >= 1, "{stats:?}");
    assert_eq!(
        stats.auto,
        Some(AutoChoice {
            mode: Mode::Copy,
            reason: AutoReason::CopiedCompletions
        }),
        "{stats:?}"
    );
}
}

each_path! {
fn auto_into_xdp_drop_sink_measures_and_says_why(path: SendPath) {
    if !tx_common::privileged(path, "auto_into_xdp_drop_sink_measures_and_says_why") {
        return;
    }
    let (_pair, link, socket) = xdp_drop_sink(false);
    let pool = pool(64 << 10, 8);
    let mut tx = sender_on(socket, switching(path, true), &pool);
    tx.set_gso_segment(Some(1200)).expect("UDP_SEGMENT");
    for i in 0..2000u64 {
        let mut buf = take(&pool, &mut tx);
        buf.fill_with(1200 * 40, |b| fill(b, i));
        tx.send(buf).expect("send");
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx);
    drop(link);
    assert_eq!(stats.copied_ids, 0, "{stats:?}");
    assert_eq!(pool.available(), pool.capacity());
    assert_switched_and_accounted(&stats);
    let Some(AutoChoice {
        mode,
        reason:
            AutoReason::CheaperPerByte {
                zc_ns_per_kb,
                copy_ns_per_kb,
            },
    }) = stats.auto
    else {
        unreachable!("checked above");
    };
    eprintln!(
        "auto into the XDP sink: {mode:?}, zero-copy {zc_ns_per_kb} copy {copy_ns_per_kb} ns/KB"
    );
    assert!(zc_ns_per_kb > 0 && copy_ns_per_kb > 0, "{stats:?}");
}
}
