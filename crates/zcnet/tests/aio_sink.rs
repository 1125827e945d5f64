//! `SenderSink`, an `AsyncSender` as a `futures::Sink` of owned buffers: `send_all` of a stream of
//! `Vec<u8>`, of `bytes::Bytes` and of pooled buffers to a TCP peer that reads slowly delivers every
//! byte in order, and a flush means every loan is back (every pool buffer in its pool).

mod tx_common;

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, stream};
use tokio::io::AsyncReadExt;
use tx_common::{Checksum, path_config, pool, small_pair};
use zcnet::aio::AsyncSender;
use zcnet::tx::Mode;

/// Reads the stream to its end in 8 KiB reads, pausing every 64 reads (a peer slower than the
/// sender); the checksum of what it read.
async fn read_slowly(stream: std::net::TcpStream) -> Checksum {
    stream.set_nonblocking(true).unwrap();
    let mut stream = tokio::net::TcpStream::from_std(stream).unwrap();
    let mut sum = Checksum::default();
    let mut buf = vec![0u8; 8 << 10];
    for reads in 0u64.. {
        match stream.read(&mut buf).await.expect("read") {
            0 => return sum,
            n => sum.update(&buf[..n]),
        }
        if reads % 64 == 63 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    unreachable!()
}

/// `count` buffers of sizes around pages and beyond, their bytes continuing `sum`'s pattern.
fn buffers(sum: &mut Checksum, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let mut buf = vec![0u8; [1, 4095, 4096, 65_536, 200_000, 1000][i % 6]];
            tx_common::fill(&mut buf, sum.len);
            sum.update(&buf);
            buf
        })
        .collect()
}

each_path! {
    /// `send_all` of `Vec<u8>`s, then of `Bytes` (a sink of each, on one sender): every byte
    /// arrives, in order.
    async fn send_all_delivers_every_byte(path: SendPath) {
        let (client, server) = small_pair();
        let reader = tokio::spawn(read_slowly(server));
        let tx = AsyncSender::new(zcnet::tx::TcpSender::new(client, path_config(path, Mode::ZeroCopy)))
            .unwrap();
        let mut sink = tx.into_sink();
        let mut sent = Checksum::default();
        let vecs = buffers(&mut sent, 120);
        sink.send_all(&mut stream::iter(vecs.into_iter().map(Ok))).await.expect("send_all");
        let tx = sink.into_inner().expect("no operation under way");
        assert_eq!(tx.outstanding(), 0, "send_all flushes: every loan back");
        let mut sink = tx.into_sink();
        let bytes: Vec<Bytes> = buffers(&mut sent, 120).into_iter().map(Bytes::from).collect();
        sink.send_all(&mut stream::iter(bytes.into_iter().map(Ok))).await.expect("send_all");
        let tx = sink.into_inner().expect("no operation under way");
        assert_eq!(tx.outstanding(), 0, "send_all flushes: every loan back");
        let stream = tx.close().await.expect("close");
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(reader.await.unwrap(), sent, "{path:?}");
    }
}

each_path! {
    /// Pooled buffers fed one by one (`feed`), then a flush: every buffer is back in its pool once
    /// the flush returns, and the peer got every byte.
    async fn a_flush_brings_every_pooled_buffer_back(path: SendPath) {
        let (client, server) = small_pair();
        let reader = tokio::spawn(read_slowly(server));
        let pool = pool(64 << 10, 16);
        let tx = AsyncSender::new(tx_common::sender_on(client, path_config(path, Mode::ZeroCopy), &pool))
            .unwrap();
        let mut sink = tx.into_sink();
        let mut sent = Checksum::default();
        for round in 0..8 {
            for _ in 0..pool.capacity() {
                let mut buf = pool.take().expect("every buffer is back after each flush");
                let len = buf.capacity() - round;
                sent.fill_next(&mut buf, len);
                sink.feed(buf).await.expect("feed");
            }
            sink.flush().await.expect("flush");
            assert_eq!(pool.available(), pool.capacity(), "{path:?}: round {round}");
        }
        drop(sink);
        assert_eq!(reader.await.unwrap(), sent, "{path:?}");
    }
}
