//! A dropped `AsyncSender` with many queued buffers toward a slow reader: the reaper's drain of
//! the drop is bounded by the send timeout for the queue as a whole, not per buffer, so the stream
//! ends (delivered, or reset) within about one bound; the runtime shuts down at once, waiting for
//! none of it; and what the reader got is a prefix of what was sent (a stream cut short is reset,
//! never shown whole).

mod tx_common;

use std::io::Read;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use zcnet::aio::AsyncSender;
use zcnet::tx::{SenderConfig, TcpSender};

const QUEUED: usize = 16;
const BUF: usize = 160 << 10;
const BOUND: Duration = Duration::from_millis(500);

fn pattern(k: usize) -> Vec<u8> {
    (0..BUF).map(|i| (i * 7 + k * 13) as u8).collect()
}

/// Reads 8 KiB every 10 ms (about 800 KB/s) until the end or a reset; returns what it read.
fn slow_reader(mut stream: TcpStream) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 8 << 10];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            thread::sleep(Duration::from_millis(10));
        }
    })
}

#[test]
fn a_dropped_sender_drains_its_whole_queue_within_one_bound() {
    let (client, server) = tx_common::small_pair();
    let reader = slow_reader(server);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let queued = runtime.block_on(async {
        let mut config = SenderConfig::default();
        config.send_timeout = Some(BOUND);
        let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
        for k in 0..QUEUED {
            // Dropped while waiting for send-buffer space: the buffer stays queued.
            let _ = tokio::time::timeout(Duration::from_millis(1), tx.send(pattern(k))).await;
        }
        let queued = tx.queued();
        drop(tx);
        queued
    });
    let dropped = Instant::now();
    drop(runtime);
    let shutdown = dropped.elapsed();
    let got = reader.join().unwrap();
    let ended = dropped.elapsed();
    let sent: Vec<u8> = (0..QUEUED).flat_map(pattern).collect();
    eprintln!(
        "{queued} queued, {} of {} bytes read, runtime shut down in {shutdown:?}, stream ended \
         after {ended:?}",
        got.len(),
        sent.len()
    );
    assert!(
        queued >= QUEUED / 2,
        "the sends left {queued} buffers queued"
    );
    assert!(
        got == sent[..got.len()],
        "the reader got a prefix of the stream"
    );
    // Per buffer, the queue would take about QUEUED × 0.2 s at the reader's pace.
    assert!(
        ended < 4 * BOUND,
        "the stream took {ended:?} to end (bound {BOUND:?} for the whole queue)"
    );
    assert!(
        shutdown < BOUND,
        "the runtime took {shutdown:?} to shut down: it waited for the drain"
    );
}
