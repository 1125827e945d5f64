//! One zero-copy sender per kernel socket. A `try_clone`d descriptor (or a `dup`) is the same socket:
//! one id counter, one error queue. Two senders on it would both number their sends from 0 and each
//! would release its own buffers on the other's completions, so exactly one of them may send
//! zero-copy and read the error queue; any other sends by copy and never reads it.

mod tx_common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tx_common::{fill, pool, sender_config};
use zcnet::Cause;
use zcnet::tx::errqueue::{
    ControlBuf, enable_zerocopy, poll_socket, recv_errqueue, zerocopy_enabled,
};
use zcnet::tx::{BufferPool, Mode, TcpSender};

/// Bytes per send: above the default zero-copy threshold (10 KiB).
const SIZE: usize = 32 << 10;
/// Sends per sender and round.
const SENDS: u64 = 24;
/// Buffers per sender's pool: few, so that a released buffer is taken and refilled at once.
const POOL: usize = 2;

fn connected_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

/// The bytes of send `seq` of sender `who`: a pattern of its own, so that a buffer refilled for a
/// later send before the kernel read it changes what arrives.
fn content(who: u64, seq: u64) -> Vec<u8> {
    let mut v = vec![0u8; SIZE];
    fill(&mut v, (who << 40) + seq * SIZE as u64);
    v
}

/// Reads `conn` to its end slowly (small reads with pauses), so that sends
/// wait in the sender's queue, still reading the lent pages, while completions of earlier sends
/// come back.
fn slow_reader(conn: TcpStream) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut conn = conn;
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = conn.read(&mut buf).expect("read");
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
            thread::sleep(Duration::from_micros(300));
        }
    })
}

/// What one sender saw.
struct Outcome {
    /// Whether it was set up to send zero-copy.
    zerocopy: bool,
    /// The first failure (a send, a buffer that never came back, a flush).
    error: Option<String>,
    /// Its pool's buffers back at the end, and how many it has.
    available: usize,
    capacity: usize,
}

/// One sender's part: created at the same moment as the other's, then `SENDS` sends from its own
/// small pool, each filled and sent under `order` (which records what the stream carries, in order).
fn one_sender(
    who: u64,
    socket: TcpStream,
    start: Arc<AtomicUsize>,
    order: Arc<Mutex<Vec<(u64, u64)>>>,
) -> Outcome {
    let pool: BufferPool = pool(SIZE, POOL);
    // Spin until both threads are here, so that both create their sender in the same microsecond.
    start.fetch_add(1, Ordering::AcqRel);
    while start.load(Ordering::Acquire) < 2 {
        std::hint::spin_loop();
    }
    let mut tx = TcpSender::new(socket, sender_config(Mode::ZeroCopy));
    let zerocopy = tx.zerocopy_status().is_ok();
    let mut run = || -> Result<(), String> {
        for seq in 0..SENDS {
            let mut buf = tx
                .take_from(&pool, Duration::from_secs(5))
                .map_err(|e| format!("send {seq}: {e}"))?;
            let mut order = order.lock().unwrap();
            buf.fill_with(SIZE, |b| b.copy_from_slice(&content(who, seq)));
            tx.send(buf).map_err(|e| format!("send {seq}: {e}"))?;
            order.push((who, seq));
        }
        tx.flush(Duration::from_secs(20)).map_err(|e| e.to_string())
    };
    let error = run().err();
    drop(tx);
    Outcome {
        zerocopy,
        error,
        available: pool.available(),
        capacity: pool.capacity(),
    }
}

#[test]
fn senders_created_at_once_on_clones_of_one_socket_never_release_each_others_buffers() {
    for round in 0..12 {
        let (client, server) = connected_pair();
        let reader = slow_reader(server);
        let clone = client.try_clone().unwrap();
        let start = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let senders: Vec<_> = [(0u64, client), (1u64, clone)]
            .into_iter()
            .map(|(who, socket)| {
                let (start, order) = (Arc::clone(&start), Arc::clone(&order));
                thread::spawn(move || one_sender(who, socket, start, order))
            })
            .collect();
        let outcomes: Vec<Outcome> = senders.into_iter().map(|h| h.join().unwrap()).collect();
        let got = reader.join().unwrap();
        let expect: Vec<u8> = order
            .lock()
            .unwrap()
            .iter()
            .flat_map(|&(who, seq)| content(who, seq))
            .collect();
        let wrong = got.iter().zip(&expect).filter(|(a, b)| a != b).count();
        let zerocopy = outcomes.iter().filter(|o| o.zerocopy).count();
        let errors: Vec<_> = outcomes.iter().filter_map(|o| o.error.as_deref()).collect();
        let leaked: usize = outcomes.iter().map(|o| o.capacity - o.available).sum();
        let what = format!(
            "round {round}: {zerocopy} senders set up for zero-copy on one socket; {} of {} bytes \
             arrived, {wrong} of them not what was sent; {leaked} buffers not back; errors {errors:?}",
            got.len(),
            expect.len()
        );
        assert!(
            zerocopy == 1 && errors.is_empty() && got.len() == expect.len() && wrong == 0,
            "{what}"
        );
        assert_eq!(leaked, 0, "{what}");
    }
}

/// Waits until the socket's error queue holds an entry (`POLLERR`).
fn wait_for_completion(socket: &TcpStream) {
    let end = Instant::now() + Duration::from_secs(10);
    while !poll_socket(socket.as_fd(), false, Duration::from_millis(100))
        .unwrap()
        .error
    {
        assert!(Instant::now() < end, "no completion within 10 s");
    }
}

/// Sends `pool`'s one buffer zero-copy on `tx`, reads it whole at `peer`, and waits until its
/// completion is queued (seen through `watch`, another descriptor of the sender's socket).
fn lend_one(tx: &mut TcpSender, pool: &BufferPool, peer: &mut TcpStream, watch: &TcpStream) {
    let mut buf = pool.take().expect("the pool's buffer");
    buf.fill_with(SIZE, |b| b.copy_from_slice(&content(0, 0)));
    tx.send(buf).expect("send");
    let mut got = vec![0u8; SIZE];
    peer.read_exact(&mut got).unwrap();
    assert!(got == content(0, 0));
    wait_for_completion(watch);
}

#[test]
fn a_second_sender_never_reads_the_completions_of_the_first() {
    let (client, mut server) = connected_pair();
    let clone = client.try_clone().unwrap();
    let watch = client.try_clone().unwrap();
    let mut owner = TcpSender::new(client, sender_config(Mode::ZeroCopy));
    owner
        .zerocopy_status()
        .expect("the first sender sends zero-copy");
    let mut second = TcpSender::new(clone, sender_config(Mode::ZeroCopy));
    let why = second
        .zerocopy_status()
        .expect_err("two zero-copy senders on one socket");
    assert_eq!(why.cause(), &Cause::SocketInUse, "{why}");
    let pool = pool(SIZE, 1);
    lend_one(&mut owner, &pool, &mut server, &watch);

    // The second sender's own reads of completions, and its sends, leave the queue alone.
    assert_eq!(second.poll_completions().expect("poll"), 0);
    second.send(content(1, 0)).expect("send by copy");
    second.flush(Duration::from_secs(1)).expect("flush");
    let mut got = vec![0u8; SIZE];
    server.read_exact(&mut got).unwrap();
    assert!(got == content(1, 0));
    assert_eq!(second.stats().zc_calls, 0, "{:?}", second.stats());
    assert_eq!(second.outstanding(), 0);

    owner
        .flush(Duration::from_secs(5))
        .expect("the owner's completion is still queued for it");
    assert_eq!(pool.available(), 1, "the lent buffer came back");
}

#[test]
fn reading_the_error_queue_of_a_senders_socket_is_refused_and_takes_nothing() {
    let (client, mut server) = connected_pair();
    let clone = client.try_clone().unwrap();
    let mut tx = TcpSender::new(client, sender_config(Mode::ZeroCopy));
    tx.zerocopy_status().expect("zero-copy on TCP");
    let pool = pool(SIZE, 1);
    lend_one(&mut tx, &pool, &mut server, &clone);

    // Through the sender's own descriptor and through another one of the same socket.
    let mut control = ControlBuf::default();
    for fd in [tx.as_fd(), clone.as_fd()] {
        let err = recv_errqueue(fd, &mut control).expect_err("the sender's completion was taken");
        assert_eq!(err.kind(), ErrorKind::ResourceBusy, "{err}");
    }
    tx.flush(Duration::from_secs(5))
        .expect("the completion is still there for the sender");
    assert_eq!(pool.available(), 1, "the lent buffer came back");

    // Once the sender let the socket go, its error queue is anyone's to read (and empty).
    let socket = tx.close(Duration::from_secs(1)).expect("close");
    assert!(!recv_errqueue(socket.as_fd(), &mut control).expect("read"));
}

/// A listener with `SO_ZEROCOPY` on and the connection it accepted (which inherits the option).
fn accepted_from_zerocopy_listener() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    enable_zerocopy(listener.as_fd()).expect("SO_ZEROCOPY on a TCP listener");
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    assert!(
        zerocopy_enabled(accepted.as_fd()).unwrap(),
        "an accepted socket inherits SO_ZEROCOPY from its listener"
    );
    (client, accepted)
}

#[test]
fn a_socket_accepted_from_a_zerocopy_listener_is_sent_zero_copy_when_wrapped_first() {
    let (client, accepted) = accepted_from_zerocopy_listener();
    let reader = thread::spawn(move || tx_common::read_checksum(client));
    let mut tx = TcpSender::new(accepted, sender_config(Mode::ZeroCopy));
    tx.zerocopy_status()
        .expect("nothing was sent on the accepted socket: its ids start at 0");
    let pool = pool(SIZE, 4);
    let mut expect = tx_common::Checksum::default();
    for _ in 0..64 {
        let mut buf = tx_common::take(&pool, &mut tx);
        expect.fill_next(&mut buf, SIZE);
        tx.send(buf).expect("send");
    }
    tx.flush(Duration::from_secs(10)).expect("flush");
    let stats = tx.stats().clone();
    assert!(stats.zc_calls > 0, "{stats:?}");
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls, "{stats:?}");
    assert!(tx.zerocopy_status().is_ok(), "{:?}", tx.zerocopy_status());
    drop(tx);
    assert_eq!(reader.join().unwrap(), expect, "bytes lost or changed");
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn an_accepted_socket_that_already_sent_is_copied_and_says_why() {
    let (client, mut accepted) = accepted_from_zerocopy_listener();
    let reader = thread::spawn(move || tx_common::read_checksum(client));
    let mut expect = tx_common::Checksum::default();
    accepted.write_all(b"greeting").unwrap();
    expect.update(b"greeting");
    let mut tx = TcpSender::new(accepted, sender_config(Mode::ZeroCopy));
    let why = tx
        .zerocopy_status()
        .expect_err("data was sent before: the ids are unknown");
    assert!(matches!(why.cause(), Cause::UnknownIds(_)), "{why:?}");
    assert!(why.remedy().contains("before anything is sent"), "{why}");
    let buf = vec![9u8; SIZE];
    expect.update(&buf);
    tx.send(buf).expect("send by copy");
    assert_eq!(tx.stats().zc_calls, 0);
    drop(tx.close(Duration::from_secs(5)).expect("close"));
    assert_eq!(reader.join().unwrap(), expect);
}
