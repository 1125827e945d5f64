//! The receiver over loopback (IPv4 and IPv6, MSS of one page) with `zcnet::tx`'s MSG_ZEROCOPY sender:
//! pages map, and every message-size pattern arrives byte-exact with and without copybuf, with pages
//! zapped on release or left for the next receive.

mod rx_util;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rx_util::{ALL_PATTERNS, Pattern, Received, SendWith, transfer};
use zcnet::rx::{Release, RxConfig, RxMode, sender};

fn run(ip: IpAddr, pattern: Pattern, config: RxConfig) -> Received {
    let (client, server) = sender::connect_page_mss(ip).expect("loopback pair");
    let len = if pattern == Pattern::OneByte {
        3_000
    } else {
        4 << 20
    };
    transfer(client, server, len, (pattern, SendWith::ZeroCopy), config).0
}

#[test]
fn zerocopy_sender_pages_map_and_every_pattern_arrives_intact() {
    for ip in [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ] {
        for pattern in ALL_PATTERNS {
            for (copybuf, release) in [(true, Release::Zap), (false, Release::Lazy)] {
                let mut config = RxConfig::default();
                config.mode = RxMode::ZeroCopy;
                config.copybuf = copybuf;
                config.release = release;
                let got = run(ip, pattern, config);
                let pct = got.stats.mapped_pct();
                eprintln!(
                    "{ip} {pattern:?} copybuf={copybuf}: {pct:.2}% mapped {:?}",
                    got.stats
                );
                if pattern != Pattern::OneByte {
                    assert!(
                        got.stats.mapped_bytes > 0,
                        "{ip} {pattern:?}: nothing mapped"
                    );
                }
            }
        }
    }
}

#[test]
fn measure_loopback_tells_a_mappable_sender_from_a_plain_one() {
    use std::io::Write;
    use std::time::Duration;
    use zcnet::tx::{Mode, SenderConfig, TcpSender};

    let ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let plain = zcnet::rx::measure_loopback(ip, |mut client| client.write_all(&[7u8; 1 << 20]))
        .expect("plain sender");
    assert_eq!(plain.bytes(), 1 << 20);
    assert_eq!(plain.mapped_pct(), 0.0);

    let zerocopy = zcnet::rx::measure_loopback(ip, |client| {
        let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
        for _ in 0..16 {
            tx.send(vec![9u8; 64 << 10])
                .map_err(std::io::Error::other)?;
        }
        tx.close(Duration::from_secs(10))
            .map(drop)
            .map_err(std::io::Error::other)
    })
    .expect("zero-copy sender");
    assert_eq!(zerocopy.bytes(), 1 << 20);
    assert!(zerocopy.mapped_bytes > 0, "{zerocopy:?}");
}
