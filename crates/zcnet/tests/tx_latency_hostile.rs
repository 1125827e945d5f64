//! Per-send latency (`SenderConfig::timestamps`) under sequences a caller may make: empty and
//! one-byte sends between large ones, corked UDP sends (several calls, one datagram), a close
//! with stamps still to come, a socket handed back and wrapped again. No panic, no stamp joined
//! to the wrong send (a corked datagram's sends share its key, as the kernel keys datagrams, not
//! calls), every send counted with its steps, every byte delivered, and the socket handed back
//! by `close` sends no stamps any more.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::time::Duration;

use tx_common::{Checksum, path_config, tcp_pair, udp_sink};
use zcnet::tx::{Mode, SendPath, Sender, TxLatency, ZcSocket};

const WAIT: Duration = Duration::from_secs(20);
/// Corked UDP rounds: three datagrams, then three sends corked into one.
const ROUNDS: usize = 8;

/// Whether `path` reads timestamps here (io_uring: Linux 6.17), skipping `test` when not.
fn path_has_timestamps(path: SendPath, test: &str) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || numbers.next().and_then(|n| n.parse::<u32>().ok());
    if path == SendPath::SENDMSG {
        return true;
    }
    if (next(), next()) >= (Some(6), Some(17)) {
        return tx_common::io_uring_available(test);
    }
    testnet::skip(test, "no SOCKET_URING_OP_TX_TIMESTAMP before Linux 6.17");
    false
}

/// A datagram's or a stream piece's bytes: `len` of them, from `seed`.
fn bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed * 31 + i) as u8).collect()
}

/// Sends no stamp any more: a plain send on `socket` leaves its error queue empty.
fn stamps_off<S: ZcSocket + std::os::fd::AsFd>(socket: &S, send: impl FnOnce(&S)) {
    send(socket);
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = [0u8; 64];
    let got = rustix::net::recv(
        socket,
        &mut buf,
        rustix::net::RecvFlags::ERRQUEUE | rustix::net::RecvFlags::DONTWAIT,
    );
    assert_eq!(
        got.err(),
        Some(rustix::io::Errno::AGAIN),
        "the handed-back socket still queues timestamps"
    );
}

/// Flushes `tx`, reads the stamps still queued, and closes it: its latency, and the socket.
fn close<S: ZcSocket>(mut tx: Sender<S>) -> (TxLatency, S) {
    tx.flush(WAIT).expect("flush");
    std::thread::sleep(Duration::from_millis(50));
    tx.poll_completions().expect("poll");
    let latency = tx.stats().latency.clone();
    (latency, tx.close(WAIT).expect("close"))
}

/// Sends of a sender wrapping a socket a timestamping sender handed back.
const AGAIN: usize = 8;

/// Wraps `socket`, handed back by a timestamping sender, in a new one with timestamps: the kernel
/// counts its keys from 0 again, so each of its `AGAIN` sends gets its own stamps.
fn again<S: ZcSocket>(path: SendPath, socket: S, sent: &mut Checksum) -> S {
    let mut config = path_config(path, Mode::ZeroCopy);
    config.timestamps = true;
    let mut tx = Sender::new(socket, config);
    for i in 0..AGAIN {
        let buf = bytes(100 + i, 1000);
        sent.update(&buf);
        tx.send(buf).expect("send");
    }
    let (l, socket) = close(tx);
    eprintln!("again {path:?}: {l:?}");
    assert!(l.unmatched < AGAIN as u64, "{l:?}");
    assert!(
        l.sent.count() > 0 && l.sent.count() <= AGAIN as u64,
        "{l:?}"
    );
    if path == SendPath::SENDMSG {
        assert_eq!(l.sent.count(), AGAIN as u64, "{l:?}");
    }
    socket
}

fn tcp(path: SendPath) {
    let (client, sink) = tcp_pair(TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
    let mut config = path_config(path, Mode::ZeroCopy);
    config.timestamps = true;
    let mut tx = Sender::new(client, config);
    let mut sent = Checksum::default();
    let mut calls = 0u64;
    for i in 0..64usize {
        let len = match i % 4 {
            0 => 0,
            1 | 2 => 1,
            _ => 64 << 10,
        };
        let buf = bytes(i, len);
        sent.update(&buf);
        calls += u64::from(len > 0);
        tx.send(buf).expect("send");
    }
    let (latency, socket) = close(tx);
    let l = &latency;
    eprintln!("tcp {path:?}: {l:?}");
    // A retransmission (a tail loss probe on a loaded host) stamps a joined send's key again.
    assert!(l.unmatched < calls, "{l:?}");
    if path == SendPath::SENDMSG {
        assert_eq!(l.sends, calls, "{l:?}");
        let steps = [&l.scheduled, &l.sent, &l.acked, &l.freed];
        assert!(steps.iter().all(|h| h.count() == calls), "{l:?}");
    } else {
        // A request is a send there, and one may carry several buffers.
        assert!(l.sends > 0 && l.sends <= calls, "{l:?}");
    }
    stamps_off(&socket, |s| {
        use std::io::Write;
        (&*s).write_all(b"after").unwrap();
    });
    sent.update(b"after");
    let socket = again(path, socket, &mut sent);
    drop(socket);
    assert_eq!(sink.join().unwrap(), sent, "bytes delivered");
}

fn udp_corked(path: SendPath) {
    let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let tx_socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    tx_socket.connect(rx.local_addr().unwrap()).unwrap();
    let sink = udp_sink(rx);
    let mut config = path_config(path, Mode::ZeroCopy);
    config.timestamps = true;
    let mut tx = Sender::new(tx_socket, config);
    let (mut sent, mut datagrams, mut calls) = (Checksum::default(), 0u64, 0u64);
    for round in 0..ROUNDS {
        for i in 0..3 {
            let buf = bytes(round * 10 + i, 1 + 600 * i);
            sent.update(&buf);
            calls += 1;
            datagrams += 1;
            tx.send(buf).expect("send");
        }
        tx.set_cork(true).expect("cork");
        for i in 0..3 {
            let buf = bytes(round * 10 + 5 + i, 1 + 700 * i);
            sent.update(&buf);
            calls += 1;
            tx.send(buf).expect("corked send");
        }
        tx.set_cork(false).expect("uncork");
        datagrams += 1;
        sink.throttle(sent.len);
    }
    let (latency, socket) = close(tx);
    let l = &latency;
    eprintln!("udp {path:?}: {l:?}");
    assert_eq!(l.sends, calls, "{l:?}");
    if path == SendPath::SENDMSG {
        assert_eq!(l.unmatched, 0, "{l:?}");
        assert_eq!(l.sent.count(), calls, "{l:?}");
    } else {
        // The stamps of a datagram sent by the uncork (a socket option, not a request) come to
        // the timestamp command after its sends' notifications, once they are joined: unmatched,
        // never landing on another datagram's sends. Every other datagram gets its own.
        let (plain, corked) = (3 * ROUNDS as u64, ROUNDS as u64);
        assert!(l.unmatched <= 2 * corked, "{l:?}");
        assert_eq!(
            l.sent.count(),
            plain + 3 * (corked - l.unmatched / 2),
            "{l:?}"
        );
    }
    stamps_off(&socket, |s| {
        s.send(b"after").unwrap();
    });
    sent.update(b"after");
    datagrams += 1;
    drop(again(path, socket, &mut sent));
    datagrams += AGAIN as u64;
    let (got, got_datagrams) = sink.finish(sent.len);
    assert_eq!(
        (got, got_datagrams),
        (sent, datagrams),
        "datagrams delivered"
    );
}

#[test]
fn hostile_sends_with_timestamps() {
    for path in [SendPath::SENDMSG, SendPath::IO_URING] {
        if path_has_timestamps(path, "hostile_sends_with_timestamps") {
            tcp(path);
            udp_corked(path);
        }
    }
}
