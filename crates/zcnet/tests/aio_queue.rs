//! The queue of an `AsyncSender`'s dropped send futures: `take_from` sends the pool buffers waiting
//! in it instead of failing; it holds at most its limit however many futures are dropped, and what
//! it held arrives whole and in order; a queued rest whose send fails stays queued and every later
//! send fails too, so nothing goes out after the gap.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::timeout;
use tx_common::{Checksum, fill, pool};
use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SenderConfig, TcpSender};

/// A connected pair with small socket buffers (64 KiB each way), so that sends wait for the reader.
fn small_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    for s in [&client, &server] {
        let fd = rustix::fd::AsFd::as_fd(s);
        rustix::net::sockopt::set_socket_send_buffer_size(fd, 64 << 10).unwrap();
        rustix::net::sockopt::set_socket_recv_buffer_size(fd, 64 << 10).unwrap();
    }
    (client, server)
}

/// Reads `stream` to its end.
async fn read_to_end(stream: TcpStream) -> Vec<u8> {
    stream.set_nonblocking(true).unwrap();
    let mut stream = tokio::net::TcpStream::from_std(stream).unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).await.expect("read");
    got
}

/// A buffer of `len` bytes of the stream pattern at `pos`.
fn patterned(len: usize, pos: u64) -> Vec<u8> {
    let mut b = vec![0u8; len];
    fill(&mut b, pos);
    b
}

/// Buffer `k` of `len` bytes: `k` in its first 8 bytes, then the stream pattern at `k * len`.
fn numbered(len: usize, k: u64) -> Vec<u8> {
    let mut b = patterned(len, k * len as u64);
    b[..8].copy_from_slice(&k.to_le_bytes());
    b
}

#[tokio::test(flavor = "current_thread")]
async fn take_from_sends_the_pool_buffers_queued_by_dropped_sends() {
    let (client, server) = small_pair();
    let config = SenderConfig::with_mode(Mode::Copy);
    let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
    // Fill the socket: this send cannot finish while nobody reads, and its rest stays queued.
    let big = patterned(4 << 20, 0);
    let mut sent = Checksum::default();
    sent.update(&big);
    assert!(
        timeout(Duration::from_millis(50), tx.send(big))
            .await
            .is_err()
    );
    // The pool's only buffer, queued behind it by a send future dropped at its first wait.
    let pool = pool(64 << 10, 1);
    let mut buf = pool.take().unwrap();
    sent.fill_next(&mut buf, 60_000);
    assert!(
        timeout(Duration::from_millis(20), tx.send(buf))
            .await
            .is_err()
    );
    assert_eq!(tx.queued(), 2);
    assert_eq!(tx.outstanding(), 0, "copies lend nothing");
    let reader = tokio::spawn(read_to_end(server));
    // The pool is dry and no completion is due, but the sender holds the buffer: it sends the
    // queue, and the copied buffer comes back.
    let buf = timeout(Duration::from_secs(20), tx.take_from(&pool))
        .await
        .expect("within 20 s")
        .expect("the queued pool buffer");
    assert_eq!(tx.queued(), 0);
    drop(buf);
    drop(tx.close().await.expect("close"));
    let mut got = Checksum::default();
    got.update(&reader.await.unwrap());
    assert_eq!(got, sent);
}

#[tokio::test(flavor = "current_thread")]
async fn the_queue_of_dropped_sends_stays_within_its_limit_and_loses_nothing() {
    const LEN: usize = 16 << 10;
    let (client, server) = small_pair();
    let config = SenderConfig::with_mode(Mode::ZeroCopy);
    let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
    // Nobody reads: every send future after the socket filled is dropped at its first wait.
    let mut most_queued = 0;
    for k in 0..400u64 {
        let buf = numbered(LEN, k);
        let _ = timeout(Duration::from_millis(1), tx.send(buf)).await;
        most_queued = most_queued.max(tx.queued());
    }
    assert!(
        most_queued <= 64,
        "{most_queued} buffers of dropped sends queued (the default limit is 64)"
    );
    let reader = tokio::spawn(read_to_end(server));
    drop(tx.close().await.expect("close"));
    // What arrived is whole buffers, each sent once, in the order sent: a buffer that took a place
    // in the queue went out whole; one dropped before it had one, not at all.
    let got = reader.await.unwrap();
    assert_eq!(got.len() % LEN, 0, "a buffer arrived in part");
    let mut last = None;
    for chunk in got.chunks(LEN) {
        let k = u64::from_le_bytes(chunk[..8].try_into().unwrap());
        assert!(
            k < 400 && chunk == numbered(LEN, k),
            "a chunk that is no buffer sent"
        );
        assert!(last < Some(k), "buffer {k} after {last:?}");
        last = Some(k);
    }
    assert!(got.len() >= 64 * LEN, "only {} bytes arrived", got.len());
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_rest_that_fails_stays_queued_and_later_sends_fail() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = tx_common::resetting_peer(listener);
    let client = TcpStream::connect(addr).unwrap();
    let config = SenderConfig::with_mode(Mode::Copy);
    let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
    // More than the socket buffers hold and the peer reads before it resets (50 ms after reading):
    // the send waits, and is dropped with its rest queued.
    assert!(
        timeout(Duration::from_millis(20), tx.send(patterned(8 << 20, 0)))
            .await
            .is_err()
    );
    assert_eq!(tx.queued(), 1);
    tokio::task::spawn_blocking(move || peer.join().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for k in 0..3u8 {
        let err = timeout(Duration::from_secs(10), tx.send(vec![k; 1000]))
            .await
            .expect("within 10 s")
            .expect_err("the queued rest cannot go out: nothing after it may");
        assert!(
            matches!(err.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)),
            "{err}"
        );
        assert_eq!(err.unsent().sent(), 0, "send {k} went out after the gap");
        assert_eq!(tx.queued(), 1, "the failed rest was dropped");
    }
    let flushed = timeout(Duration::from_secs(10), tx.flush()).await.unwrap();
    assert!(flushed.is_err(), "the queued rest cannot be sent");
    assert_eq!(tx.queued(), 1);
}
