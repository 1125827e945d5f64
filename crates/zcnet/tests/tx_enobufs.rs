//! Forced ENOBUFS: with net.core.optmem_max lowered inside a test namespace, undrained completion
//! notifications exhaust the socket's option memory and zero-copy sends fail with ENOBUFS. The sender
//! must resend those bytes by copy — none lost, none duplicated — and return to zero-copy afterwards.
//! UDP completions of back-to-back sends coalesce into the queued notification (freeing the new one),
//! so the UDP test lowers optmem_max below the size of a single queued notification.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use testnet::Netns;
use tx_common::{Checksum, fill, pool, take};
use zcnet::tx::{Mode, PolicyConfig, SenderConfig, TcpSender, UdpSender};

fn config() -> SenderConfig {
    SenderConfig {
        policy: PolicyConfig {
            enobufs_backoff: 8,
            ..PolicyConfig::with_mode(Mode::ZeroCopy)
        },
        // Never drain opportunistically: let notifications pile up.
        drain_every: u32::MAX,
        send_timeout: Some(Duration::from_secs(20)),
    }
}

#[test]
fn tcp_enobufs_falls_back_to_copy_without_loss_and_recovers() {
    if !testnet::privileged("tcp_enobufs_falls_back_to_copy_without_loss_and_recovers") {
        return;
    }
    let ns = Netns::create("a").expect("namespace");
    ns.set_sysctl("net.core.optmem_max", "2048")
        .expect("optmem_max");
    let listener = ns
        .run(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = tx_common::tcp_sink(listener);
    let stream = ns.run(|| TcpStream::connect(addr)).unwrap();
    let pool = pool(4096, 256);
    let mut tx = TcpSender::new(stream, config());
    let mut sent = Checksum::default();
    let send_one = |tx: &mut TcpSender, sent: &mut Checksum| {
        let mut buf = take(&pool, tx);
        let pos = sent.len;
        buf.fill_with(3000, |b| fill(b, pos));
        sent.update(&buf);
        tx.send(buf).expect("send");
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
    assert!(at_enobufs.copy_enobufs >= at_enobufs.enobufs);
    // Recovery: once the outstanding completions are drained (waiting for each, so the result does
    // not depend on how fast the kernel frees them), zero-copy sends succeed again after the back-off.
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
    let got = sink.join().unwrap();
    assert_eq!(got, sent, "bytes lost or duplicated around ENOBUFS");
    assert!(
        stats.zc_calls > at_enobufs.zc_calls,
        "never recovered: {stats:?}"
    );
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls);
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn udp_enobufs_falls_back_to_copy_without_loss_and_recovers() {
    if !testnet::privileged("udp_enobufs_falls_back_to_copy_without_loss_and_recovers") {
        return;
    }
    let ns = Netns::create("a").expect("namespace");
    ns.set_sysctl("net.core.optmem_max", "1024")
        .expect("optmem_max");
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
    let mut tx = UdpSender::new(a, config());
    let mut sent = Checksum::default();
    let mut datagrams = 0;
    let send_one = |tx: &mut UdpSender, sent: &mut Checksum| {
        sink.throttle(sent.len);
        let mut buf = take(&pool, tx);
        let pos = sent.len;
        buf.fill_with(1000, |b| fill(b, pos));
        sent.update(&buf);
        tx.send(buf).expect("send");
    };
    for _ in 0..20_000 {
        send_one(&mut tx, &mut sent);
        datagrams += 1;
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
        datagrams += 1;
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
    let (got, got_datagrams) = sink.finish(sent.len);
    assert_eq!(got, sent, "bytes lost or duplicated around ENOBUFS");
    assert_eq!(got_datagrams, datagrams);
    assert!(
        stats.zc_calls > at_enobufs.zc_calls,
        "never recovered: {stats:?}"
    );
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls);
    assert_eq!(pool.available(), pool.capacity());
}
