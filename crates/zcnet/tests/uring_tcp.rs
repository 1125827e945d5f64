//! UringSender over TCP on loopback and the veth harness (IPv4, IPv6): byte-exact delivery while a
//! registered pool recycles buffers as notifications return; REPORT_USAGE says copied for a local
//! receiver; the auto policy follows copied notifications; a peer that resets mid-stream; one frozen
//! pool buffer lent to many sends at once.

mod tx_common;
mod uring_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use testnet::{VethConfig, VethPair};
use tx_common::{Checksum, STREAM_SIZES, assert_stream_delivered, fill, pool, tcp_sink};
use uring_common::{config, send_sizes, send_zc_available};
use zcnet::tx::{Mode, PolicyConfig, TxStats};
use zcnet::uring::{UringConfig, UringTcpSender};

/// Streams `STREAM_SIZES` `rounds` times through a registered 4-buffer pool and checks every byte
/// and buffer.
fn roundtrip(stream: TcpStream, listener: TcpListener, cfg: UringConfig, rounds: usize) -> TxStats {
    let sink = tcp_sink(listener);
    let pool = pool(64 << 10, 4);
    let mut tx = UringTcpSender::new(stream, cfg).expect("io_uring");
    tx.register_pool(&pool).expect("register the pool");
    let sent = send_sizes(&mut tx, &pool, &STREAM_SIZES, rounds, drop).expect("send");
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_stream_delivered(sink, sent, &pool, &stats);
    stats
}

fn loopback(ip: IpAddr, mode: Mode) -> TxStats {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    roundtrip(stream, listener, config(mode), 40)
}

#[test]
fn tcp_v4_and_v6_loopback_deliver_every_byte_and_report_copied() {
    if !send_zc_available("tcp_v4_and_v6_loopback_deliver_every_byte_and_report_copied") {
        return;
    }
    for ip in [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        let stats = loopback(ip, Mode::ZeroCopy);
        // Every send with data went zero-copy; a local receiver makes the kernel copy each one.
        assert_eq!(stats.zc_calls + stats.copy_empty, stats.calls, "{stats:?}");
        assert!(stats.zc_calls > 0);
        assert_eq!(stats.copied_ids, stats.zc_calls, "{stats:?}");
    }
}

#[test]
fn tcp_copy_mode_takes_no_ids() {
    if !send_zc_available("tcp_copy_mode_takes_no_ids") {
        return;
    }
    let stats = loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), Mode::Copy);
    assert_eq!((stats.zc_calls, stats.notifications), (0, 0));
    assert_eq!(stats.copy_mode, stats.calls);
}

#[test]
fn tcp_auto_copies_below_threshold_and_switches_after_copied_notifications() {
    if !send_zc_available("tcp_auto_copies_below_threshold_and_switches") {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let cfg = UringConfig {
        policy: PolicyConfig {
            copied_run: 4,
            ..PolicyConfig::default()
        },
        batch: 1,
        ..config(Mode::Auto)
    };
    let sink = tcp_sink(listener);
    let pool = pool(64 << 10, 4);
    let mut tx = UringTcpSender::new(stream, cfg).unwrap();
    let mut sizes = vec![10 * 1024 - 1, 10 * 1024];
    sizes.extend([64 << 10; 400]);
    let sent = send_sizes(&mut tx, &pool, &sizes, 1, drop).unwrap();
    tx.flush(Duration::from_secs(20)).unwrap();
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).unwrap());
    assert_eq!(sink.join().unwrap(), sent);
    assert_eq!(stats.copy_small, 1, "{stats:?}");
    assert!(stats.policy_switches >= 1, "{stats:?}");
    assert!(stats.copy_copied > stats.zc_calls, "{stats:?}");
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn tcp_peer_reset_mid_stream_returns_an_error_and_every_buffer() {
    if !send_zc_available("tcp_peer_reset_mid_stream_returns_an_error_and_every_buffer") {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = tx_common::resetting_peer(listener);
    let pool = pool(64 << 10, 8);
    let stream = TcpStream::connect(addr).unwrap();
    let mut tx = UringTcpSender::new(stream, config(Mode::ZeroCopy)).unwrap();
    tx.register_pool(&pool).unwrap();
    let sizes = [64 << 10; 100_000];
    let err =
        send_sizes(&mut tx, &pool, &sizes, 1, drop).expect_err("a reset peer must fail a send");
    peer.join().unwrap();
    assert!(
        matches!(err.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)),
        "unexpected error: {err}"
    );
    assert!(err.to_string().contains("flush()"), "{err}");
    tx.flush(Duration::from_secs(10))
        .expect("notifications after a reset");
    assert_eq!(tx.outstanding(), 0);
    // Every buffer is back in the pool or handed back by the error.
    assert_eq!(
        pool.available() + err.unsent().len(),
        pool.capacity(),
        "a buffer leaked"
    );
    drop(err);
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn tcp_v4_and_v6_over_veth() {
    if !testnet::privileged("uring tcp_v4_and_v6_over_veth")
        || !send_zc_available("uring tcp_v4_and_v6_over_veth")
    {
        return;
    }
    for v6 in [false, true] {
        let pair = VethPair::new(VethConfig::default()).expect("veth pair");
        let dst: IpAddr = if v6 {
            pair.b_v6.into()
        } else {
            pair.b_v4.into()
        };
        let listener = pair
            .b
            .run(|| TcpListener::bind(SocketAddr::new(dst, 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = pair.a.run(|| TcpStream::connect(addr)).unwrap();
        let stats = roundtrip(stream, listener, config(Mode::ZeroCopy), 20);
        assert!(stats.zc_calls > 0);
        // Delivered to a socket in the peer namespace: still a local socket, so copied.
        assert_eq!(stats.copied_ids, stats.zc_calls, "{stats:?}");
    }
}

#[test]
fn tcp_frozen_buffers_lent_to_many_sends_at_once_arrive_whole_and_return_after_the_last() {
    if !send_zc_available("tcp_frozen_buffers_lent_to_many_sends_at_once") {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let sink = tcp_sink(listener);
    let pool = pool(64 << 10, 3);
    let mut tx = UringTcpSender::new(stream, config(Mode::ZeroCopy)).unwrap();
    tx.register_pool(&pool).unwrap();
    // Two different payloads, each frozen once and sent over and over, interleaved.
    let frozen: Vec<_> = [0u64, 1 << 20]
        .into_iter()
        .map(|pos| {
            let mut buf = pool.take().unwrap();
            buf.fill_with(60_000, |b| fill(b, pos));
            buf.freeze()
        })
        .collect();
    let mut sent = Checksum::default();
    let mut most_in_flight = 0;
    for k in 0..2_000 {
        let buf = if k % 3 == 2 { &frozen[1] } else { &frozen[0] };
        sent.update(buf);
        tx.send(buf.clone()).unwrap();
        most_in_flight = most_in_flight.max(tx.outstanding());
    }
    tx.flush(Duration::from_secs(20)).unwrap();
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).unwrap());
    assert!(
        most_in_flight > 1,
        "the frozen buffers were never lent to two requests at once"
    );
    // Every send is back; the slots stay out until the last clones go.
    assert_eq!(pool.available(), pool.capacity() - frozen.len());
    drop(frozen);
    assert_stream_delivered(sink, sent, &pool, &stats);
}
