//! A sender dropped with loans in flight toward a peer that resets the connection — before the
//! drop or after it — on both paths: the reset frees the packets that hold the pages, their
//! completions come, and the reaper releases every buffer and closes the sender long before its
//! bound, leaking nothing. Buffers shared between many such senders come back to one holder.
//! Alone in its binary: the reaper's counters are the process's.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

mod tx_common;

use zcnet::tx::{Mode, SendPath, SenderConfig, TcpSender, leaked, reaping};

/// The reaper's bound (the senders' send timeout): far beyond what a reset takes to free the
/// packets, so a sender given up at the bound shows.
const BOUND: Duration = Duration::from_secs(20);
const SENDERS: usize = 16;
const SENDS: usize = 4;
const SEND: usize = 16 << 10;

/// A loopback pair whose receiving end (returned second) has the smallest receive buffer.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&listener, 1).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

/// Resets the connection from `peer`'s end (`SO_LINGER` 0, then the close).
fn reset(peer: TcpStream) {
    rustix::net::sockopt::set_socket_linger(&peer, Some(Duration::ZERO)).unwrap();
    drop(peer);
}

fn sender(path: SendPath, client: TcpStream) -> TcpSender {
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = path;
    config.send_timeout = Some(BOUND);
    let tx = TcpSender::new(client, config);
    assert_eq!(tx.path(), path, "{:?}", tx.path_status());
    tx
}

/// Drops senders on `path` with `buf` lent to each `SENDS` times, the peer resetting before the
/// drop (`reset_first`) or after it; checks that the reaper gets every loan back, well before its
/// bound, and leaks nothing.
fn dropped_around_a_reset(path: SendPath, reset_first: bool) {
    let what = format!(
        "{path:?}, reset {}",
        if reset_first { "first" } else { "after" }
    );
    let buf: Arc<[u8]> = (0..SEND).map(|i| i as u8).collect::<Vec<_>>().into();
    let (before, reaped) = (leaked(), reaping());
    let mut peers = Vec::new();
    for _ in 0..SENDERS {
        let (client, peer) = pair();
        let mut tx = sender(path, client);
        for _ in 0..SENDS {
            tx.send(Arc::clone(&buf)).expect("send");
        }
        if reset_first {
            reset(peer);
            // The reset reaches the sender's socket before its drop.
            thread::sleep(Duration::from_millis(5));
        } else {
            peers.push(peer);
        }
        drop(tx);
    }
    peers.into_iter().for_each(reset);
    let started = Instant::now();
    while Arc::strong_count(&buf) > 1 || reaping().held > reaped.held {
        assert!(
            started.elapsed() < BOUND / 2,
            "{what}: {} references still lent, reaper {:?}, leaked {:?}",
            Arc::strong_count(&buf) - 1,
            reaping(),
            leaked()
        );
        thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "{what}: all back in {:?}, {:?}",
        started.elapsed(),
        reaping()
    );
    assert_eq!(leaked(), before, "{what}");
    assert_eq!(reaping().expired, reaped.expired, "{what}");
    assert_eq!(reaping().refused, reaped.refused, "{what}");
}

#[test]
fn senders_dropped_around_a_peer_reset_get_every_loan_back() {
    for reset_first in [true, false] {
        dropped_around_a_reset(SendPath::SENDMSG, reset_first);
        if tx_common::io_uring_available("senders_dropped_around_a_peer_reset") {
            dropped_around_a_reset(SendPath::IO_URING, reset_first);
        }
    }
}
