//! The receiver across a veth pair between two namespaces, with the MTU that leaves one page of
//! payload per segment (4148 for IPv4, 4168 for IPv6): every message-size pattern arrives byte-exact
//! with and without copybuf, from a plain sender (whose pages do not map) and from the MSG_ZEROCOPY
//! sender (whose pages do).

mod rx_util;

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;

use rx_util::{ALL_PATTERNS, Pattern, Received, SendWith, transfer};
use testnet::{VethConfig, VethPair};
use zcnet::rx::{RxConfig, RxMode, sender};

/// A veth pair for `v6` and a connected (client in `a`, server in `b`) pair across it.
fn veth_pair(v6: bool) -> VethPair {
    VethPair::new(VethConfig {
        mtu: if v6 { 4168 } else { 4148 },
        ..VethConfig::default()
    })
    .expect("veth pair")
}

fn connect(pair: &VethPair, v6: bool) -> (TcpStream, TcpStream) {
    let ip = if v6 {
        IpAddr::V6(pair.b_v6)
    } else {
        IpAddr::V4(pair.b_v4)
    };
    let listener = pair
        .b
        .run(|| std::net::TcpListener::bind(SocketAddr::new(ip, 0)))
        .expect("listen in b");
    let addr = listener.local_addr().unwrap();
    let client = pair
        .a
        .run(|| TcpStream::connect(addr))
        .expect("connect from a");
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn run(pair: &VethPair, v6: bool, how: (Pattern, SendWith), config: RxConfig) -> Received {
    let (client, server) = connect(pair, v6);
    // The MTU alone gives one page of payload per segment (timestamps included).
    assert_eq!(sender::current_mss(client.as_fd()).unwrap(), 4096);
    let len = if how.0 == Pattern::OneByte {
        10_000
    } else {
        2 << 20
    };
    transfer(client, server, len, how, config).0
}

#[test]
fn plain_sender_over_veth_arrives_intact_v4_and_v6() {
    if !testnet::privileged("plain_sender_over_veth_arrives_intact_v4_and_v6") {
        return;
    }
    for v6 in [false, true] {
        let pair = veth_pair(v6);
        for pattern in ALL_PATTERNS {
            for copybuf in [true, false] {
                let config = rx_util::keep_trying(copybuf);
                let got = run(&pair, v6, (pattern, SendWith::Plain), config);
                assert_eq!(got.stats.mapped_bytes, 0, "v6={v6} {pattern:?}");
                assert_eq!(got.stats.copybuf_bytes > 0, copybuf, "v6={v6} {pattern:?}");
            }
        }
    }
}

#[test]
fn zerocopy_sender_over_veth_maps_pages_v4_and_v6() {
    if !testnet::privileged("zerocopy_sender_over_veth_maps_pages_v4_and_v6") {
        return;
    }
    for v6 in [false, true] {
        let pair = veth_pair(v6);
        for pattern in [
            Pattern::PageMultiples,
            Pattern::OddSizes,
            Pattern::EorHeaders,
        ] {
            for copybuf in [true, false] {
                let mut config = RxConfig::default();
                config.mode = RxMode::ZeroCopy;
                config.copybuf = copybuf;
                let got = run(&pair, v6, (pattern, SendWith::ZeroCopy), config);
                assert!(
                    got.stats.mapped_bytes > 0,
                    "v6={v6} {pattern:?} copybuf={copybuf}: nothing mapped: {:?}",
                    got.stats
                );
                eprintln!(
                    "v6={v6} {pattern:?} copybuf={copybuf}: {:.1}% mapped",
                    got.stats.mapped_pct()
                );
            }
        }
    }
}
