//! Shared buffers and pool recycling: one `bytes::Bytes` lent to several connections at once is sent
//! from the same memory by each and freed once, after the last completion; `Sender::take_from`
//! recycles buffers through completions and refuses to wait when nothing can come back. Each body
//! runs on both submission paths.

mod tx_common;

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tx_common::{Checksum, fill, path_config, pool, tcp_pair};
use zcnet::tx::{Mode, TcpSender, TxError};

/// The memory behind a `Bytes`, counting how often it is freed.
struct CountedOwner {
    data: Vec<u8>,
    freed: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for CountedOwner {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for CountedOwner {
    fn drop(&mut self) {
        self.freed.fetch_add(1, Ordering::SeqCst);
    }
}

each_path! {
fn one_bytes_lent_to_many_connections_is_freed_after_the_last_completion(path: SendPath) {
    // 24 MiB lent at once outgrow a normal user's locked-memory limit: the budget is this test's
    // alone (each sender must zero-copy), not shared with the other path's run of it.
    let _turn = testnet::memlock_turn();
    const CONNECTIONS: usize = 6;
    const ROUNDS: usize = 4;
    let freed = Arc::new(AtomicUsize::new(0));
    let mut data = vec![0u8; 1 << 20];
    fill(&mut data, 0);
    let mut expected = Checksum::default();
    for _ in 0..ROUNDS {
        expected.update(&data);
    }
    let object = Bytes::from_owner(CountedOwner {
        data,
        freed: Arc::clone(&freed),
    });
    let address = object.as_ptr();

    let mut senders = Vec::new();
    let mut sinks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (stream, sink) = tcp_pair(TcpListener::bind("127.0.0.1:0").unwrap());
        senders.push(TcpSender::new(stream, path_config(path, Mode::ZeroCopy)));
        sinks.push(sink);
    }
    for _ in 0..ROUNDS {
        for tx in &mut senders {
            let shared = object.clone();
            assert_eq!(shared.as_ptr(), address, "a clone shares the bytes");
            tx.send(shared).expect("send");
        }
    }
    drop(object);
    while let Some(mut tx) = senders.pop() {
        tx.flush(Duration::from_secs(20)).expect("flush");
        assert!(tx.stats().zc_calls > 0, "{:?}", tx.stats());
        let still_lent = senders.iter().any(|t| t.outstanding() > 0);
        let freed_now = freed.load(Ordering::SeqCst);
        if still_lent {
            assert_eq!(freed_now, 0, "freed while other connections still lend it");
        }
        drop(tx.close(Duration::from_secs(1)).expect("close"));
    }
    assert_eq!(freed.load(Ordering::SeqCst), 1, "freed exactly once");
    for sink in sinks {
        assert_eq!(sink.join().expect("sink"), expected);
    }
}
}

each_path! {
fn take_from_recycles_through_completions(path: SendPath) {
    let (stream, sink) = tcp_pair(TcpListener::bind("127.0.0.1:0").unwrap());
    let mut tx = TcpSender::new(stream, path_config(path, Mode::ZeroCopy));
    let pool = pool(64 << 10, 4);
    let mut sum = Checksum::default();
    for i in 0..200u64 {
        let mut buf = tx.take_from(&pool, Duration::from_secs(10))
            .expect("a buffer comes back");
        buf.fill_with(64 << 10, |b| fill(b, i));
        sum.update(&buf);
        tx.send(buf).expect("send");
    }
    drop(tx.close(Duration::from_secs(10)).expect("close"));
    assert_eq!(sink.join().expect("sink"), sum);
    assert_eq!(pool.available(), pool.capacity());
}
}

each_path! {
fn take_from_fails_at_once_when_the_sender_holds_no_buffer(path: SendPath) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let mut tx = TcpSender::new(stream, path_config(path, Mode::Auto));
    let pool = pool(4096, 1);
    let held = pool.take().expect("the only buffer");
    let started = std::time::Instant::now();
    let err = tx.take_from(&pool, Duration::from_secs(30))
        .expect_err("nothing can come back");
    assert!(
        matches!(err, TxError::Timeout { outstanding: 0, .. }),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
    assert!(tx.take_from(&pool, Duration::ZERO).is_ok());
}
}
