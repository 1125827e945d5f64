//! `flush` returns a socket error at once instead of spinning on `POLLERR` until its time-out: a TCP
//! connection that fails (TCP_USER_TIMEOUT) while the packets holding its zero-copy pages are still
//! queued in a slow qdisc has an error pending and no completion to read.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use testnet::{VethConfig, VethPair};
use zcnet::tx::{Mode, SenderConfig, TcpSender, TxError};

#[test]
fn flush_returns_a_pending_socket_error() {
    if !testnet::privileged("flush_returns_a_pending_socket_error") {
        return;
    }
    let pair = VethPair::new(VethConfig::default()).expect("veth pair");
    let listener = pair
        .b
        .run(|| TcpListener::bind(SocketAddr::new(pair.b_v4.into(), 0)))
        .unwrap();
    let addr = SocketAddr::new(pair.b_v4.into(), listener.local_addr().unwrap().port());
    let stream = pair.a.run(|| TcpStream::connect(addr)).unwrap();
    let (_peer, _) = listener.accept().unwrap();
    // From here on, what `a` sends waits in a token bucket of 8 kbit/s: the packets, and with them the
    // sent pages, stay queued for a minute, and no acknowledgement comes back.
    pair.a
        .exec(
            "tc",
            &[
                "qdisc", "add", "dev", &pair.a_if, "root", "tbf", "rate", "8kbit", "burst", "1600",
                "limit", "10000000",
            ],
        )
        .expect("tc qdisc add tbf");
    rustix::net::sockopt::set_tcp_user_timeout(&stream, 500).unwrap();
    let mut tx = TcpSender::new(stream, SenderConfig::with_mode(Mode::ZeroCopy));
    tx.send(vec![0x5a; 32 << 10]).expect("send");
    assert!(tx.stats().zc_calls > 0);

    let start = Instant::now();
    let err = tx
        .flush(Duration::from_secs(20))
        .expect_err("the connection times out with its packets still queued");
    let waited = start.elapsed();
    assert!(
        matches!(err, TxError::Socket { .. }),
        "expected the socket error, got {err} after {waited:?}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT), "{err}");
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    // The ids still outstanding keep their buffers lent (leaked when the sender is dropped).
    assert!(tx.outstanding() > 0);
}
