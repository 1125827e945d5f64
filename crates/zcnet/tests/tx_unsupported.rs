//! A socket whose protocol refuses SO_ZEROCOPY still sends every byte: the sender records the errno
//! and copies. UDP-Lite is such a socket — the kernel accepts SO_ZEROCOPY only on TCP and on UDP
//! proper (EOPNOTSUPP otherwise) — and std's `UdpSocket` drives it like UDP.

mod tx_common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use tx_common::{Checksum, fill, pool, take, udp_sink};
use zcnet::tx::{Mode, SenderConfig, UdpSender};

/// A UDP-Lite socket, or `None` (with a printed reason) on a kernel built without UDP-Lite.
fn udplite() -> Option<UdpSocket> {
    use rustix::net::{AddressFamily, SocketType, ipproto, socket};
    match socket(
        AddressFamily::INET,
        SocketType::DGRAM,
        Some(ipproto::UDPLITE),
    ) {
        Ok(fd) => Some(UdpSocket::from(fd)),
        Err(e) => {
            let reason = format!("no UDP-Lite sockets here: {e}");
            testnet::skip("so_zerocopy_refused_falls_back_to_copy", &reason);
            None
        }
    }
}

#[test]
fn so_zerocopy_refused_falls_back_to_copy_and_delivers_every_byte() {
    let (Some(tx_socket), Some(rx_socket)) = (udplite(), udplite()) else {
        return;
    };
    // Neither socket can be bound through std: connecting binds each to an ephemeral loopback port.
    tx_socket
        .connect(SocketAddr::from((Ipv4Addr::LOCALHOST, 9)))
        .unwrap();
    rx_socket.connect(tx_socket.local_addr().unwrap()).unwrap();
    tx_socket.connect(rx_socket.local_addr().unwrap()).unwrap();

    let sink = udp_sink(rx_socket);
    let pool = pool(64 << 10, 4);
    let mut tx = UdpSender::new(tx_socket, {
        let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
        config.send_timeout = Some(Duration::from_secs(20));
        config
    });
    let reason = tx
        .zerocopy_status()
        .expect_err("UDP-Lite refuses SO_ZEROCOPY");
    assert_eq!(reason.raw_os_error(), Some(libc::EOPNOTSUPP), "{reason}");

    let sizes = [1, 4095, 4097, 10 * 1024, 60_000];
    let mut sent = Checksum::default();
    for _ in 0..20 {
        for size in sizes {
            sink.throttle(sent.len);
            let mut buf = take(&pool, &mut tx);
            let pos = sent.len;
            buf.fill_with(size, |b| fill(b, pos));
            sent.update(&buf);
            tx.send(buf).expect("send by copy");
        }
    }
    tx.flush(Duration::from_secs(5))
        .expect("nothing is outstanding");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).unwrap());
    let (got, datagrams) = sink.finish(sent.len);
    assert_eq!(got, sent, "bytes lost or duplicated on the copy fallback");
    assert_eq!(datagrams, 20 * sizes.len() as u64);
    assert_eq!(stats.zc_calls, 0, "{stats:?}");
    assert_eq!(stats.copy_unsupported, stats.calls, "{stats:?}");
    assert_eq!(stats.fallbacks(), stats.calls, "{stats:?}");
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "a buffer was not returned"
    );
}
