//! Sender over UDP on loopback and the veth harness (IPv4, IPv6, with and without GSO), on both
//! submission paths from one body each: byte-exact delivery while recycling pooled buffers, every
//! datagram counted; unconnected sends (`send_to`, refused with the buffer handed back on io_uring);
//! UDP_CORK datagrams built from copied and zero-copied pieces; a veth without scatter-gather, TSO
//! or checksum offload.

mod tx_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use testnet::{Offloads, VethConfig, VethPair};
use tx_common::{
    Checksum, PAGE, datagrams_of, path_config, pool, sender_on, take, udp_sink, veth_udp_sizes,
    veth_udp_sockets,
};
use zcnet::tx::{Mode, PolicyConfig, SendPath, TxError, TxStats};

/// Sends `sizes` `rounds` times on `path` from `tx` (connected to `sink`'s socket) through a
/// 4-buffer pool, optionally with GSO segments, unconnected (`dest`) or connected, and checks
/// delivery and buffers.
fn run(
    path: SendPath,
    tx_socket: UdpSocket,
    rx_socket: UdpSocket,
    sizes: &[usize],
    gso: Option<u16>,
    connected: bool,
    rounds: usize,
) -> TxStats {
    let dest = rx_socket.local_addr().unwrap();
    if connected {
        tx_socket.connect(dest).unwrap();
    }
    let sink = udp_sink(rx_socket);
    let pool = pool(64 << 10, 4);
    let mut tx = sender_on(tx_socket, path_config(path, Mode::ZeroCopy), &pool);
    tx.zerocopy_status().expect("zero-copy on UDP");
    tx.set_gso_segment(gso).expect("UDP_SEGMENT");
    let mut sent = Checksum::default();
    let mut datagrams = 0u64;
    for _ in 0..rounds {
        for &size in sizes {
            // Queued io_uring sends reach the kernel only when submitted.
            sink.throttle_while(sent.len, || {
                tx.poll_completions().expect("completions");
            });
            let mut buf = take(&pool, &mut tx);
            sent.fill_next(&mut buf, size);
            datagrams += datagrams_of(size, gso);
            if connected {
                tx.send(buf).expect("send");
            } else {
                tx.send_to(buf, dest).expect("send_to");
            }
        }
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    sink.assert_delivered(sent, datagrams, &pool);
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls, "{stats:?}");
    assert_eq!(
        stats.zc_calls + stats.copy_empty + stats.copy_enobufs + stats.copy_memlock,
        stats.calls
    );
    stats
}

fn pair(ip: IpAddr) -> (UdpSocket, UdpSocket) {
    let any = SocketAddr::new(ip, 0);
    (UdpSocket::bind(any).unwrap(), UdpSocket::bind(any).unwrap())
}

const V4_SIZES: [usize; 7] = [0, 1, PAGE - 1, PAGE + 1, 10 * 1024 - 1, 10 * 1024, 65507];

each_path! {
    fn udp_v4_loopback_connected_and_unconnected(path: SendPath) {
        let (a, b) = pair(Ipv4Addr::LOCALHOST.into());
        let stats = run(path, a, b, &V4_SIZES, None, true, 10);
        assert_eq!(stats.copied_ids, stats.zc_calls, "loopback delivery copies");
        let (a, b) = pair(Ipv4Addr::LOCALHOST.into());
        if path == SendPath::SENDMSG {
            let stats = run(path, a, b, &V4_SIZES, None, false, 10);
            assert_eq!(stats.copied_ids, stats.zc_calls, "loopback delivery copies");
        } else {
            // io_uring sends on a connected socket only: refused, the buffer handed back unsent.
            let pool = pool(4096, 1);
            let mut tx = sender_on(a, path_config(path, Mode::ZeroCopy), &pool);
            let buf = vec![7u8; 100];
            let err = tx.send_to(buf, b.local_addr().unwrap()).expect_err("send_to on io_uring");
            assert!(matches!(err.error(), TxError::Unsupported { .. }), "{err}");
            let (_, unsent) = err.into_parts();
            assert_eq!(unsent.into_buf().expect("never lent"), vec![7u8; 100]);
            tx.flush(Duration::from_secs(10)).expect("nothing to flush");
            assert_eq!(tx.stats().calls, 0);
        }
    }
}

each_path! {
    fn udp_v6_loopback(path: SendPath) {
        let (a, b) = pair(Ipv6Addr::LOCALHOST.into());
        let sizes = [0, 1, PAGE - 1, PAGE + 1, 10 * 1024, 65487];
        run(path, a, b, &sizes, None, true, 10);
    }
}

each_path! {
    fn udp_gso_v4_and_v6_loopback(path: SendPath) {
        for ip in [IpAddr::from(Ipv4Addr::LOCALHOST), Ipv6Addr::LOCALHOST.into()] {
            let (a, b) = pair(ip);
            let sizes = [1, 1400, 1401, PAGE + 1, 1400 * 44];
            let stats = run(path, a, b, &sizes, Some(1400), true, 10);
            assert!(stats.zc_calls > 0);
        }
    }
}

fn veth_run(path: SendPath, offloads: Offloads, v6: bool, gso: Option<u16>) -> TxStats {
    let pair = VethPair::new(VethConfig {
        offloads,
        ..Default::default()
    })
    .expect("veth pair");
    let (tx, rx) = veth_udp_sockets(&pair, v6);
    run(path, tx, rx, veth_udp_sizes(gso), gso, true, 10)
}

each_path! {
    fn udp_v4_v6_over_veth_with_and_without_gso(path: SendPath) {
        if !tx_common::privileged(path, "udp_v4_v6_over_veth_with_and_without_gso") {
            return;
        }
        for v6 in [false, true] {
            for gso in [None, Some(1200)] {
                let stats = veth_run(path, Offloads::default(), v6, gso);
                assert!(stats.zc_calls > 0, "v6 {v6} gso {gso:?}");
                assert_eq!(stats.copied_ids, stats.zc_calls, "v6 {v6} gso {gso:?}: {stats:?}");
            }
        }
    }
}

each_path! {
    fn udp_over_veth_without_sg_tso_or_checksum_offload_still_delivers_every_byte(path: SendPath) {
        if !tx_common::privileged(path, "udp_over_veth_without_sg_tso_or_checksum_offload") {
            return;
        }
        for off in Offloads::each_off() {
            for gso in [None, Some(1200)] {
                let stats = veth_run(path, off, false, gso);
                assert!(stats.zc_calls > 0);
                assert_eq!(stats.copied_ids, stats.zc_calls, "{off:?}: completions must say copied");
            }
        }
    }
}

/// Builds one datagram from corked pieces on `path`; `threshold` says which pieces may be
/// zero-copy.
fn corked(path: SendPath, mode: Mode, pieces: &[usize], threshold: usize) -> TxStats {
    let (a, b) = pair(Ipv4Addr::LOCALHOST.into());
    a.connect(b.local_addr().unwrap()).unwrap();
    let sink = udp_sink(b);
    let pool = pool(8 << 10, 8);
    let mut cfg = path_config(path, mode);
    cfg.policy = PolicyConfig::with_mode(mode);
    cfg.policy.threshold = threshold;
    cfg.policy.copied_run = u64::MAX;
    let mut tx = sender_on(a, cfg, &pool);
    tx.set_cork(true).unwrap();
    let mut sent = Checksum::default();
    for _ in 0..3 {
        for &len in pieces {
            let mut buf = take(&pool, &mut tx);
            sent.fill_next(&mut buf, len);
            tx.send(buf).expect("corked send");
        }
        tx.set_cork(false).unwrap();
        tx.set_cork(true).unwrap();
    }
    tx.flush(Duration::from_secs(10)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).unwrap());
    // Each uncork sends one datagram.
    sink.assert_delivered(sent, 3, &pool);
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls);
    stats
}

each_path! {
    fn udp_cork_all_zerocopy_pieces(path: SendPath) {
        let stats = corked(path, Mode::ZeroCopy, &[500, 2000, 300, 3000], 0);
        assert_eq!(stats.zc_calls, 12);
    }
}

each_path! {
    fn udp_cork_mixing_copied_and_zerocopy_pieces(path: SendPath) {
        let stats = corked(path, Mode::Auto, &[500, 2000, 300, 3000], 1000);
        assert_eq!((stats.zc_calls, stats.copy_small), (6, 6));
    }
}

each_path! {
    fn udp_cork_all_copied_pieces(path: SendPath) {
        let stats = corked(path, Mode::Copy, &[500, 2000, 300, 3000], 0);
        assert_eq!((stats.zc_calls, stats.notifications), (0, 0));
    }
}

/// The lengths of the datagrams `rx` receives until none comes for half a second.
fn datagram_lengths(rx: &UdpSocket) -> Vec<usize> {
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    std::iter::from_fn(|| rx.recv(&mut buf).ok()).collect()
}

each_path! {
    /// A GSO segment size set while earlier sends are still queued (io_uring submits them later,
    /// as one chain) applies only to the sends after it: the earlier datagrams arrive as they were
    /// sent, neither split into segments nor joined into one datagram.
    fn a_gso_change_applies_only_to_the_datagrams_sent_after_it(path: SendPath) {
        let (a, b) = pair(Ipv4Addr::LOCALHOST.into());
        a.connect(b.local_addr().unwrap()).unwrap();
        let pool = pool(4096, 8);
        let mut tx = sender_on(a, path_config(path, Mode::ZeroCopy), &pool);
        for byte in 1..=3u8 {
            tx.send(vec![byte; 3000]).expect("send a whole datagram");
        }
        tx.set_gso_segment(Some(1000)).expect("UDP_SEGMENT 1000");
        tx.send(vec![4u8; 3000]).expect("send three segments");
        tx.set_gso_segment(None).expect("UDP_SEGMENT off");
        tx.send(vec![5u8; 2000]).expect("send a whole datagram");
        tx.flush(Duration::from_secs(10)).expect("flush");
        assert_eq!(
            datagram_lengths(&b),
            [3000, 3000, 3000, 1000, 1000, 1000, 2000],
            "datagrams as sent, each under the segment size in force when it was sent"
        );
    }
}
