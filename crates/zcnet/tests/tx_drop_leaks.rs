//! A thousand senders dropped with zero-copy loans in flight toward a peer that does not read (a
//! receive window of a few KiB, so most of what is sent stays queued, its pages pinned), some after
//! every completion came back: what the drops leak is counted process-wide (`zcnet::tx::leaked`),
//! exactly the buffers still lent — those whose reference the sender never gave back —; no drop
//! blocks the dropping thread, and a tokio
//! runtime whose tasks dropped senders shuts down at once. Alone in its binary: the counter is the
//! process's.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod tx_common;

use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SendPath, SenderConfig, TcpSender, leaked};

const SENDERS: usize = 1000;
const SENDS: usize = 4;
const SEND: usize = 16 << 10;
/// Far above what a drop that does not wait takes, even on a loaded host.
const DROP_BOUND: Duration = Duration::from_millis(500);

/// A loopback pair whose receiving end (returned second, never read) has the smallest receive
/// buffer the kernel allows.
fn slow_pair() -> (TcpStream, TcpStream) {
    pair(1)
}

/// A loopback pair whose receiving end (returned second) has a receive buffer of `rcvbuf` bytes
/// (as the kernel rounds it).
fn pair(rcvbuf: usize) -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&listener, rcvbuf).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn config() -> SenderConfig {
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.send_timeout = Some(Duration::from_secs(10));
    config
}

fn buffers(lent: &mut Vec<Arc<Vec<u8>>>, k: usize) -> Vec<Arc<Vec<u8>>> {
    let bufs: Vec<_> = (0..SENDS)
        .map(|i| Arc::new(vec![(k + i) as u8; SEND]))
        .collect();
    lent.extend(bufs.iter().cloned());
    bufs
}

#[test]
fn dropped_senders_count_what_they_leak_and_block_nobody() {
    let before = leaked();
    let mut lent = Vec::new();
    let mut slowest = Duration::ZERO;

    // Blocking senders, dropped on this thread; every fourth toward a peer with room for all it
    // sends, and dropped only once every completion came back: it leaks nothing.
    for k in 0..SENDERS / 2 {
        let room = k % 4 == 0;
        let (client, peer) = if room { pair(1 << 20) } else { slow_pair() };
        let mut tx = TcpSender::new(client, config());
        for buf in buffers(&mut lent, k) {
            tx.send(buf).expect("send");
        }
        if room {
            tx.flush(Duration::from_secs(10)).expect("every completion");
        }
        let started = Instant::now();
        drop(tx);
        slowest = slowest.max(started.elapsed());
        drop(peer);
    }

    // Async senders, dropped by tasks of a runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (async_slowest, async_lent) = runtime.block_on(async {
        let mut lent = Vec::new();
        let mut slowest = Duration::ZERO;
        for k in 0..SENDERS / 2 {
            let (client, peer) = slow_pair();
            let mut tx = AsyncSender::new(TcpSender::new(client, config())).unwrap();
            for buf in buffers(&mut lent, k) {
                tx.send(buf).await.expect("send");
            }
            let started = Instant::now();
            drop(tx);
            slowest = slowest.max(started.elapsed());
            drop(peer);
        }
        (slowest, lent)
    });
    lent.extend(async_lent);
    let started = Instant::now();
    drop(runtime);
    let shutdown = started.elapsed();

    let after = leaked();
    // A buffer whose sender never gave its reference back is one the kernel still had.
    let still_lent: Vec<_> = lent.iter().filter(|b| Arc::strong_count(b) > 1).collect();
    let bytes: u64 = still_lent.iter().map(|b| b.len() as u64).sum();
    eprintln!(
        "{} of {} buffers leaked ({bytes} bytes); slowest drop {slowest:?} blocking, \
         {async_slowest:?} async; runtime shut down in {shutdown:?}",
        still_lent.len(),
        lent.len()
    );
    assert!(
        !still_lent.is_empty(),
        "no loan was in flight: the test shows nothing"
    );
    assert_eq!(after.buffers - before.buffers, still_lent.len() as u64);
    assert_eq!(after.bytes - before.bytes, bytes);
    assert!(slowest < DROP_BOUND, "a blocking drop took {slowest:?}");
    assert!(
        async_slowest < DROP_BOUND,
        "an async drop took {async_slowest:?}"
    );
    assert!(
        shutdown < DROP_BOUND,
        "the runtime took {shutdown:?} to shut down"
    );

    aborting_resets_at_once();
    a_dropped_io_uring_sender_counts_its_leak();
}

/// `abort` resets the connection without waiting, for a blocking and an async sender alike.
fn aborting_resets_at_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for asynchronous in [false, true] {
        let (client, mut peer) = slow_pair();
        let mut tx = TcpSender::new(client, config());
        tx.send(vec![1u8; SEND]).expect("send");
        let started = Instant::now();
        if asynchronous {
            let _guard = runtime.enter();
            AsyncSender::new(tx).unwrap().abort();
        } else {
            tx.abort();
        }
        assert!(started.elapsed() < DROP_BOUND);
        let mut sink = Vec::new();
        let err = std::io::Read::read_to_end(&mut peer, &mut sink).expect_err("a reset");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    }
}

/// On the io_uring path too: what requests in flight lend is leaked and counted, and the drop does
/// not wait. Run after the sendmsg part, in the same test: both read the process's counter.
fn a_dropped_io_uring_sender_counts_its_leak() {
    if !tx_common::io_uring_available("a_dropped_io_uring_sender_counts_its_leak") {
        return;
    }
    let before = leaked();
    let mut lent = Vec::new();
    for k in 0..100 {
        let (client, peer) = slow_pair();
        let mut tx = TcpSender::new(client, {
            let mut config = config();
            config.path = SendPath::IO_URING;
            config
        });
        tx.path_status().expect("an io_uring sender");
        for buf in buffers(&mut lent, k) {
            tx.send(buf).expect("send");
        }
        let started = Instant::now();
        drop(tx);
        assert!(started.elapsed() < DROP_BOUND, "the drop waited");
        drop(peer);
    }
    let still_lent = lent.iter().filter(|b| Arc::strong_count(b) > 1).count() as u64;
    assert!(still_lent > 0, "nothing was in flight");
    assert_eq!(leaked().buffers - before.buffers, still_lent);
}
