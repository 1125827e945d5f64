//! Forced ENOBUFS: with net.core.optmem_max lowered inside a test namespace, undrained completion
//! notifications exhaust the socket's option memory and zero-copy sends fail with ENOBUFS. The sender
//! must resend those bytes by copy — none lost, none duplicated — and return to zero-copy afterwards.
//! UDP completions of back-to-back sends coalesce into the queued notification (freeing the new one),
//! so the UDP test lowers optmem_max below the size of a single queued notification.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use testnet::Netns;
use tx_common::{Checksum, pool, take};
use zcnet::tx::{
    BufferPool, Mode, SendPath, Sender, SenderConfig, TcpSender, TxStats, UdpSender, ZcSocket,
};

fn config() -> SenderConfig {
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.policy.enobufs_backoff = 8;
    // Never drain opportunistically: let notifications pile up. (The sendmsg path only: an
    // io_uring notification is not charged to the socket's option memory, so optmem_max cannot
    // refuse it.)
    config.path = SendPath::Sendmsg {
        drain_every: u32::MAX,
    };
    config.send_timeout = Some(Duration::from_secs(20));
    config
}

/// What [`enobufs_and_recovery`] saw.
struct Run {
    /// The checksum of every byte sent.
    sent: Checksum,
    /// How many sends there were.
    sends: u64,
    /// The statistics at the third ENOBUFS (or after 20 000 sends).
    at_enobufs: TxStats,
}

/// Sends `size`-byte buffers of `pool` until ENOBUFS came three times (20 000 sends at most),
/// calling `before` with the bytes sent so far ahead of each send; then recovers: 200 more sends,
/// each waited for (so the result does not depend on how fast the kernel frees completions).
/// Checks that ENOBUFS came, that zero-copy sends succeeded again after the back-off, that
/// completion ids stayed in sync, and that every buffer came back; closes the sender.
fn enobufs_and_recovery<S: ZcSocket>(
    mut tx: Sender<S>,
    pool: &BufferPool,
    size: usize,
    before: impl Fn(u64),
) -> Run {
    let mut sent = Checksum::default();
    let mut sends = 0;
    let mut send_one = |tx: &mut Sender<S>, sent: &mut Checksum| {
        before(sent.len);
        let mut buf = take(pool, tx);
        sent.fill_next(&mut buf, size);
        tx.send(buf).expect("send");
        sends += 1;
    };
    for _ in 0..20_000 {
        send_one(&mut tx, &mut sent);
        if tx.stats().enobufs >= 3 {
            break;
        }
    }
    let at_enobufs = tx.stats().clone();
    assert!(
        at_enobufs.enobufs >= 1,
        "no ENOBUFS provoked: {at_enobufs:?}"
    );
    for _ in 0..200 {
        send_one(&mut tx, &mut sent);
        tx.flush(Duration::from_secs(20)).unwrap();
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    // Every ENOBUFS call took no id (the kernel fails before numbering the send): had the sender
    // counted one anyway, or given back one the kernel kept, the next completion would name an id it
    // never registered.
    assert!(
        tx.zerocopy_status().is_ok(),
        "ids out of sync after ENOBUFS: {:?}",
        tx.zerocopy_status()
    );
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).unwrap());
    assert!(
        stats.zc_calls > at_enobufs.zc_calls,
        "never recovered: {stats:?}"
    );
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls);
    assert_eq!(pool.available(), pool.capacity());
    Run {
        sent,
        sends,
        at_enobufs,
    }
}

/// A namespace whose net.core.optmem_max is `bytes`.
fn namespace_with_optmem_max(bytes: &str) -> Netns {
    let ns = Netns::create("a").expect("namespace");
    ns.set_sysctl("net.core.optmem_max", bytes)
        .expect("optmem_max");
    ns
}

#[test]
fn tcp_enobufs_falls_back_to_copy_without_loss_and_recovers() {
    if !testnet::privileged("tcp_enobufs_falls_back_to_copy_without_loss_and_recovers") {
        return;
    }
    let ns = namespace_with_optmem_max("2048");
    let listener = ns
        .run(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = tx_common::tcp_sink(listener);
    let stream = ns.run(|| TcpStream::connect(addr)).unwrap();
    let pool = pool(4096, 256);
    let run = enobufs_and_recovery(TcpSender::new(stream, config()), &pool, 3000, |_| {});
    assert!(run.at_enobufs.copy_enobufs >= run.at_enobufs.enobufs);
    let got = sink.join().unwrap();
    assert_eq!(got, run.sent, "bytes lost or duplicated around ENOBUFS");
}

#[test]
fn udp_enobufs_falls_back_to_copy_without_loss_and_recovers() {
    if !testnet::privileged("udp_enobufs_falls_back_to_copy_without_loss_and_recovers") {
        return;
    }
    let ns = namespace_with_optmem_max("1024");
    let (a, b) = ns
        .run(|| -> std::io::Result<_> {
            Ok((
                UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?,
                UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?,
            ))
        })
        .unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    let sink = tx_common::udp_sink(b);
    let pool = pool(4096, 256);
    let run = enobufs_and_recovery(UdpSender::new(a, config()), &pool, 1000, |sent| {
        sink.throttle(sent)
    });
    // One datagram a send.
    sink.assert_delivered(run.sent, run.sends, &pool);
}
