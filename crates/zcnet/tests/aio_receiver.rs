//! `AsyncReceiver` on tokio: the same chunks as the blocking receiver (mapped pages included), many
//! receivers on one thread, and chunk futures cancelled by a timer without losing a byte.

mod rx_util;

use std::net::{IpAddr, Ipv4Addr, Shutdown};
use std::thread;
use std::time::Duration;

use rx_util::{
    Pattern, Received, SendWith, StreamCheck, assert_intact, send_pattern, stream_bytes,
};
use zcnet::aio::AsyncReceiver;
use zcnet::rx::{Receiver, RxConfig, sender};
use zcnet::tx::{Mode, SenderConfig, TcpSender};

/// Reads `rx` to its end, checking each chunk against `expected`; when `cancel_after` is set, every
/// chunk future races a timer of that length and the lost races are retried. Returns what arrived and
/// the number of chunk futures the timer cancelled.
async fn receive_checked(
    rx: &mut AsyncReceiver,
    expected: &[u8],
    cancel_after: Option<Duration>,
) -> (Received, u64) {
    let mut check = StreamCheck::new(expected);
    let mut cancelled = 0;
    loop {
        let chunk = match cancel_after {
            None => rx.recv().await,
            Some(limit) => tokio::select! {
                chunk = rx.recv() => chunk,
                () = tokio::time::sleep(limit) => {
                    cancelled += 1;
                    continue;
                }
            },
        };
        match chunk.expect("receive") {
            Some(chunk) => check.check(&chunk),
            None => break,
        }
    }
    (check.finish(*rx.get_ref().stats()), cancelled)
}

/// Starts a zero-copy sender thread writing `len` bytes cut as `pattern` over a page-MSS loopback
/// pair; returns the receiving stream's async receiver, the expected bytes and the writer.
fn start(len: usize, pattern: Pattern) -> (AsyncReceiver, Vec<u8>, thread::JoinHandle<()>) {
    let (client, server) = sender::connect_page_mss(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    let bytes = stream_bytes(len, len as u64 ^ 0xa51c);
    let to_send = bytes.clone();
    let writer = thread::spawn(move || send_pattern(client, &to_send, pattern, SendWith::ZeroCopy));
    let rx = Receiver::new(server, RxConfig::default()).expect("receiver");
    (AsyncReceiver::new(rx).expect("register"), bytes, writer)
}

#[tokio::test(flavor = "current_thread")]
async fn async_chunks_are_the_blocking_receivers_chunks() {
    for pattern in rx_util::ALL_PATTERNS {
        // One-byte zero-copy sends move a pool's worth (32) per delayed ACK under Nagle: 8 KiB of them
        // already make thousands of one-byte chunks.
        let len = if pattern == Pattern::OneByte {
            8 << 10
        } else {
            4 << 20
        };
        let (mut rx, bytes, writer) = start(len, pattern);
        let (got, _) = receive_checked(&mut rx, &bytes, None).await;
        writer.join().expect("writer");
        assert_intact(&got, &bytes);
        if pattern == Pattern::PageMultiples {
            assert!(
                got.stats.mapped_bytes * 2 > got.bytes,
                "most pages map: {:?}",
                got.stats
            );
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn sixteen_receivers_share_one_thread() {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (mut rx, bytes, writer) = start(1 << 20, Pattern::OddSizes);
        tasks.spawn(async move {
            let (got, _) = receive_checked(&mut rx, &bytes, None).await;
            assert_intact(&got, &bytes);
            writer
        });
    }
    while let Some(writer) = tasks.join_next().await {
        writer.expect("receiver task").join().expect("writer");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn cancelled_chunk_futures_lose_nothing() {
    let (client, server) = sender::connect_page_mss(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    let bytes = stream_bytes(8 << 20, 0xca9c);
    let to_send = bytes.clone();
    // A zero-copy writer that pauses 3 ms after every fourth 64 KiB piece, longer than tokio's 1 ms
    // timer resolution, so that receives wait and timers win.
    let writer = thread::spawn(move || {
        let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
        for (i, piece) in to_send.chunks(64 << 10).enumerate() {
            tx.send(piece.to_vec()).expect("send");
            if i % 4 == 3 {
                thread::sleep(Duration::from_millis(3));
            }
        }
        let stream = tx.close(Duration::from_secs(20)).expect("close");
        stream.shutdown(Shutdown::Write).expect("shutdown");
    });
    let rx = Receiver::new(server, RxConfig::default()).expect("receiver");
    let mut rx = AsyncReceiver::new(rx).expect("register");
    let (got, cancelled) = receive_checked(&mut rx, &bytes, Some(Duration::from_millis(1))).await;
    writer.join().expect("writer");
    assert_intact(&got, &bytes);
    assert!(cancelled > 0, "no chunk future was cancelled");
    println!("{cancelled} chunk futures cancelled by the timer");
}

#[tokio::test(flavor = "current_thread")]
async fn a_reset_is_reported_after_the_bytes_before_it_and_again_after() {
    use zcnet::rx::RxMode;
    let bytes = stream_bytes(300_000, 5);
    for mode in [RxMode::ZeroCopy, RxMode::Copy] {
        let server = rx_util::reset_after(IpAddr::V4(Ipv4Addr::LOCALHOST), &bytes);
        let mut config = rx_util::keep_trying(true);
        config.mode = mode;
        let mut rx = AsyncReceiver::new(Receiver::new(server, config).unwrap()).unwrap();
        let mut next = 0;
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match rx.recv().await {
                    Ok(Some(chunk)) => {
                        assert!(chunk[..] == bytes[next..next + chunk.len()], "{mode:?}");
                        next += chunk.len();
                    }
                    Ok(None) => panic!("{mode:?}: a reset ended the stream cleanly"),
                    Err(e) => break e.kind(),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{mode:?}: no end within 5 s"));
        assert_eq!(end, std::io::ErrorKind::ConnectionReset, "{mode:?}");
        let again = rx
            .recv()
            .await
            .map(|c| c.map(|c| c.len()))
            .map_err(|e| e.kind());
        assert_eq!(again, Err(std::io::ErrorKind::ConnectionReset), "{mode:?}");
    }
}
