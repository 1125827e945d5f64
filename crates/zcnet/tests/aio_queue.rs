//! The queue of an `AsyncSender`'s dropped send futures: `take_from` sends the pool buffers waiting
//! in it instead of failing; every dropped future's buffer is queued and arrives whole and in order;
//! a queued rest whose send fails comes back inside the error with everything queued after it, so
//! nothing goes out after the gap and nothing is lost.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::timeout;
use tx_common::{Checksum, fill, pool, small_pair};
use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SenderConfig, TcpSender};

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

each_path! {
    /// Nobody reads: every send future after the socket filled is dropped while it waits — for the
    /// queued buffers ahead of it or for room of its own — and each buffer stays queued: all of them
    /// arrive, whole, once, in order.
    async fn every_dropped_send_is_queued_and_arrives_in_order(path: SendPath) {
        const LEN: usize = 16 << 10;
        const SENDS: u64 = 400;
        let (client, server) = small_pair();
        let config = tx_common::path_config(path, Mode::ZeroCopy);
        let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
        let mut dropped = 0;
        for k in 0..SENDS {
            if timeout(Duration::from_millis(1), tx.send(numbered(LEN, k)))
                .await
                .is_err()
            {
                dropped += 1;
            }
        }
        assert!(dropped > 64, "{path:?}: only {dropped} send futures dropped");
        let reader = tokio::spawn(read_to_end(server));
        drop(tx.close().await.expect("close"));
        let got = reader.await.unwrap();
        let expected: Vec<u8> = (0..SENDS).flat_map(|k| numbered(LEN, k)).collect();
        assert!(got == expected, "{path:?}: {} of {} bytes, not the stream sent", got.len(), expected.len());
    }
}

each_path! {
    /// A reset while buffers wait — queued by dropped send futures (sendmsg) or in the io_uring
    /// sender's own queue — hands them all back inside the error, in stream order, the first with
    /// the part the kernel took: nothing queued goes out after the failure, and flush and close then
    /// succeed.
    async fn a_failure_hands_back_every_waiting_buffer_in_order(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = tx_common::resetting_peer(listener);
        let client = TcpStream::connect(addr).unwrap();
        let config = tx_common::path_config(path, Mode::Copy);
        let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
        // More than the socket buffers hold, and the peer reads 100 000 bytes before it resets
        // (50 ms after reading): on sendmsg the send waits and is dropped with its rest queued, as
        // are the three sends after it; on io_uring all four wait in the sender's queue.
        let big = patterned(32 << 20, 0);
        let _ = timeout(Duration::from_millis(20), tx.send(big.clone())).await;
        for k in 0..3u64 {
            let _ = timeout(Duration::from_millis(1), tx.send(numbered(1000, k))).await;
        }
        // io_uring submits a batch at a time: a flush (dropped unfinished, losing nothing) submits
        // what waits, so that the peer reads and resets. On a loaded host that flush can already
        // meet the reset: then its error is the one examined.
        let first = timeout(Duration::from_millis(20), tx.flush()).await;
        timeout(
            Duration::from_secs(10),
            tokio::task::spawn_blocking(move || peer.join().unwrap()),
        )
        .await
        .expect("the peer read and reset within 10 s")
        .unwrap();
        let err = match first {
            Ok(Err(err)) => err,
            Ok(Ok(())) => panic!("{path:?}: flushed 32 MiB into a peer that reads 100 000 bytes"),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                timeout(Duration::from_secs(10), tx.flush())
                    .await
                    .expect("within 10 s")
                    .expect_err("the peer reset the connection")
            }
        };
        assert!(
            matches!(err.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)),
            "{path:?}: {err}"
        );
        assert_eq!(tx.queued(), 0, "{path:?}: buffers kept queued after the failure");
        let back = err.unsent();
        assert_eq!(back.len(), 4, "{path:?}: {back:?}");
        assert!(back[0].as_bytes() == &big[..], "{path:?}: not the big buffer first");
        assert!(back[0].sent() < big.len(), "{path:?}: {back:?}");
        for (k, buf) in back[1..].iter().enumerate() {
            assert_eq!(buf.sent(), 0, "{path:?}: buffer {k} went out after the gap");
            assert!(buf.as_bytes() == &numbered(1000, k as u64)[..], "{path:?}: buffer {k}");
        }
        drop(err);
        tx.flush().await.expect("flush after the failure");
        drop(tx.close().await.expect("close after the failure"));
    }
}
