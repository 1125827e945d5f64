//! UringSender over UDP on loopback and the veth harness (IPv4, IPv6, with and without GSO):
//! byte-exact delivery while a registered pool recycles buffers as notifications return, every
//! datagram counted.

mod tx_common;
mod uring_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::time::Duration;

use testnet::{VethConfig, VethPair};
use tx_common::{Checksum, PAGE, datagrams_of, pool, udp_sink, veth_udp_sizes, veth_udp_sockets};
use uring_common::{config, send_zc_available, take};
use zcnet::tx::{Mode, TxStats};
use zcnet::uring::{UringConfig, UringUdpSender};

/// Sends `sizes` `rounds` times from `tx_socket` to `rx_socket` through a registered 4-buffer pool,
/// keeping what is unreceived within the sink's window, and checks every byte, datagram and buffer.
fn run(
    tx_socket: UdpSocket,
    rx_socket: UdpSocket,
    sizes: &[usize],
    gso: Option<u16>,
    rounds: usize,
) -> TxStats {
    tx_socket.connect(rx_socket.local_addr().unwrap()).unwrap();
    let sink = udp_sink(rx_socket);
    let pool = pool(64 << 10, 4);
    let cfg = UringConfig {
        batch: 4,
        ..config(Mode::ZeroCopy)
    };
    let mut tx = UringUdpSender::new(tx_socket, cfg).expect("io_uring");
    tx.register_pool(&pool).expect("register the pool");
    tx.set_gso_segment(gso).expect("UDP_SEGMENT");
    let mut sent = Checksum::default();
    let mut datagrams = 0u64;
    for _ in 0..rounds {
        for &size in sizes {
            sink.throttle_while(sent.len, || tx.submit().expect("submit"));
            let mut buf = take(&pool, &mut tx).expect("take");
            sent.fill_next(&mut buf, size);
            datagrams += datagrams_of(size, gso);
            tx.send(buf).expect("send");
        }
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    sink.assert_delivered(sent, datagrams, &pool);
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls, "{stats:?}");
    assert_eq!(stats.zc_calls + stats.copy_empty, stats.calls, "{stats:?}");
    assert!(stats.zc_calls > 0);
    stats
}

fn pair(ip: IpAddr) -> (UdpSocket, UdpSocket) {
    (
        UdpSocket::bind((ip, 0)).unwrap(),
        UdpSocket::bind((ip, 0)).unwrap(),
    )
}

#[test]
fn udp_v4_and_v6_loopback_with_and_without_gso() {
    if !send_zc_available("udp_v4_and_v6_loopback_with_and_without_gso") {
        return;
    }
    for ip in [
        IpAddr::from(Ipv4Addr::LOCALHOST),
        Ipv6Addr::LOCALHOST.into(),
    ] {
        let (a, b) = pair(ip);
        let stats = run(
            a,
            b,
            &[0, 1, PAGE - 1, PAGE + 1, 10 * 1024, 65487],
            None,
            10,
        );
        assert_eq!(stats.copied_ids, stats.zc_calls, "a local receiver: copied");
        let (a, b) = pair(ip);
        run(a, b, &[1, 1400, 1401, PAGE + 1, 1400 * 44], Some(1400), 10);
    }
}

#[test]
fn udp_v4_and_v6_over_veth_with_and_without_gso() {
    if !testnet::privileged("uring udp_v4_and_v6_over_veth_with_and_without_gso")
        || !send_zc_available("uring udp_v4_and_v6_over_veth_with_and_without_gso")
    {
        return;
    }
    for v6 in [false, true] {
        for gso in [None, Some(1200)] {
            let pair = VethPair::new(VethConfig::default()).expect("veth pair");
            let (tx, rx) = veth_udp_sockets(&pair, v6);
            let stats = run(tx, rx, veth_udp_sizes(gso), gso, 10);
            assert_eq!(
                stats.copied_ids, stats.zc_calls,
                "v6 {v6} gso {gso:?}: {stats:?}"
            );
        }
    }
}
