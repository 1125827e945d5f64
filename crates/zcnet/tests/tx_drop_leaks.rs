//! A thousand senders dropped with zero-copy loans in flight toward peers that do not read (a
//! receive window of a few KiB, so most of what is sent stays queued, its pages pinned), on the
//! `sendmsg` path (blocking and async senders) and on io_uring: no drop blocks the dropping
//! thread, a tokio runtime whose tasks dropped senders shuts down at once, the reaper holds them
//! until its bound passes, and then what it leaks is counted process-wide (`zcnet::tx::leaked`):
//! exactly the buffers still lent — those whose reference the sender never gave back. Senders
//! dropped toward peers that then read everything lose no byte and leak nothing: the reaper gets
//! every buffer back. Alone in its binary: the counters are the process's.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

mod tx_common;

use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SendPath, SenderConfig, TcpSender, leaked, reaping};

/// The most senders the reaper holds at once, as `Sender`'s `# Drop` section says.
const MOST_HELD: usize = 1024;

const SENDERS: usize = 1000;
const SENDS: usize = 4;
const SEND: usize = 16 << 10;
/// Far above what a drop that does not wait takes, even on a loaded host.
const DROP_BOUND: Duration = Duration::from_millis(500);
/// The reaper's bound for the senders toward peers that never read (their send timeout).
const REAPER_BOUND: Duration = Duration::from_secs(1);

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

fn config(path: SendPath, bound: Duration) -> SenderConfig {
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = path;
    config.send_timeout = Some(bound);
    config
}

/// `count` buffers for sender `k`, each also kept in `lent`.
fn buffers(lent: &mut Vec<Arc<Vec<u8>>>, k: usize, count: usize) -> Vec<Arc<Vec<u8>>> {
    let bufs: Vec<_> = (0..count)
        .map(|i| Arc::new(vec![(k + i) as u8; SEND]))
        .collect();
    lent.extend(bufs.iter().cloned());
    bufs
}

/// Room for every socket the test holds at once (two per sender and a ring), as far as the hard
/// limit allows.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
}

/// Waits until the reaper holds nothing, for at most `bound` and some slack; returns how long.
fn reaper_emptied(bound: Duration) -> Duration {
    let started = Instant::now();
    while reaping().held > 0 {
        assert!(
            started.elapsed() < bound + Duration::from_secs(30),
            "the reaper still holds {:?}",
            reaping()
        );
        thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

/// Checks, once the reaper gave every sender up, that what it leaked is exactly what is still
/// lent: the buffers whose reference no sender gave back.
fn assert_leaks_counted(what: &str, lent: &[Arc<Vec<u8>>], before: zcnet::tx::Leaked) {
    let after = leaked();
    let still_lent: Vec<_> = lent.iter().filter(|b| Arc::strong_count(b) > 1).collect();
    let bytes: u64 = still_lent.iter().map(|b| b.len() as u64).sum();
    eprintln!(
        "{what}: {} of {} buffers leaked ({bytes} bytes), reaper {:?}",
        still_lent.len(),
        lent.len(),
        reaping()
    );
    assert!(
        !still_lent.is_empty(),
        "{what}: no loan was in flight: the test shows nothing"
    );
    assert_eq!(
        after.buffers - before.buffers,
        still_lent.len() as u64,
        "{what}"
    );
    assert_eq!(after.bytes - before.bytes, bytes, "{what}");
}

#[test]
fn dropped_senders_count_what_they_leak_and_block_nobody() {
    raise_descriptor_limit();
    sendmsg_senders_dropped_toward_peers_that_never_read();
    if tx_common::io_uring_available("io_uring_senders_dropped_toward_peers_that_never_read") {
        io_uring_senders_dropped_toward_peers_that_never_read();
    }
    senders_dropped_toward_peers_that_read_everything_lose_nothing();
    a_full_reaper_refuses_and_the_drop_leaks_at_once();
    aborting_resets_at_once();
}

fn sendmsg_senders_dropped_toward_peers_that_never_read() {
    let before = leaked();
    let reaped_before = reaping();
    let mut lent = Vec::new();
    let mut peers = Vec::new();
    let mut slowest = Duration::ZERO;
    let config = config(SendPath::SENDMSG, REAPER_BOUND);

    // Blocking senders, dropped on this thread; every fourth toward a peer with room for all it
    // sends, and dropped only once every completion came back: it leaks nothing.
    for k in 0..SENDERS / 2 {
        let room = k % 4 == 0;
        let (client, peer) = if room { pair(1 << 20) } else { slow_pair() };
        let mut tx = TcpSender::new(client, config);
        for buf in buffers(&mut lent, k, SENDS) {
            tx.send(buf).expect("send");
        }
        if room {
            tx.flush(Duration::from_secs(10)).expect("every completion");
        }
        let started = Instant::now();
        drop(tx);
        slowest = slowest.max(started.elapsed());
        peers.push(peer);
    }

    // Async senders, dropped by tasks of a runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (async_slowest, async_lent, async_peers) = runtime.block_on(async {
        let (mut lent, mut peers) = (Vec::new(), Vec::new());
        let mut slowest = Duration::ZERO;
        for k in 0..SENDERS / 2 {
            let (client, peer) = slow_pair();
            let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
            for buf in buffers(&mut lent, k, SENDS) {
                tx.send(buf).await.expect("send");
            }
            let started = Instant::now();
            drop(tx);
            slowest = slowest.max(started.elapsed());
            peers.push(peer);
        }
        (slowest, lent, peers)
    });
    lent.extend(async_lent);
    peers.extend(async_peers);
    let started = Instant::now();
    drop(runtime);
    let shutdown = started.elapsed();
    let held = reaping().held;

    let emptied = reaper_emptied(REAPER_BOUND);
    eprintln!(
        "sendmsg: slowest drop {slowest:?} blocking, {async_slowest:?} async; runtime shut down \
         in {shutdown:?}; the reaper held {held} and gave up within {emptied:?}"
    );
    assert!(held > 0, "no sender was handed to the reaper");
    assert!(reaping().expired > reaped_before.expired);
    assert_leaks_counted("sendmsg", &lent, before);
    assert!(slowest < DROP_BOUND, "a blocking drop took {slowest:?}");
    assert!(
        async_slowest < DROP_BOUND,
        "an async drop took {async_slowest:?}"
    );
    assert!(
        shutdown < DROP_BOUND,
        "the runtime took {shutdown:?} to shut down"
    );
}

/// Drops `senders` senders on `path`, each right after its sends toward a peer that never reads
/// (kept in `peers`; the buffers in `lent`); returns the slowest drop.
///
/// Under a locked-memory limit (a user without CAP_IPC_LOCK) the pages the held senders pin and
/// their rings are charged to the user's locked memory until the reaper gives them up, so a new
/// io_uring ring is refused (`ENOMEM`) once the held ones fill the limit: the senders made until
/// then are the test's, and it says so.
fn drop_toward_slow_peers(
    path: SendPath,
    senders: usize,
    lent: &mut Vec<Arc<Vec<u8>>>,
    peers: &mut Vec<TcpStream>,
) -> Duration {
    let mut slowest = Duration::ZERO;
    for k in 0..senders {
        let (client, peer) = slow_pair();
        let mut tx = TcpSender::new(client, config(path, REAPER_BOUND));
        if tx.path() != path && k > 0 && ring_refused_for_locked_memory(&tx) {
            testnet::adapted(
                "dropped_senders_count_what_they_leak_and_block_nobody",
                &format!(
                    "the user's locked memory ({} bytes) held {k} {} senders' rings and pinned \
                     pages; the test drops {k}, not {senders}",
                    testnet::memlock_budget().unwrap_or_default(),
                    path.name()
                ),
            );
            break;
        }
        assert_eq!(tx.path(), path, "{:?}", tx.path_status());
        for buf in buffers(lent, k, SENDS) {
            tx.send(buf).expect("send");
        }
        let started = Instant::now();
        drop(tx);
        slowest = slowest.max(started.elapsed());
        peers.push(peer);
    }
    slowest
}

/// Whether `tx`'s ring was refused because the user's locked memory is used up, in a process
/// bound by a locked-memory limit.
fn ring_refused_for_locked_memory(tx: &TcpSender) -> bool {
    testnet::memlock_budget().is_some()
        && tx
            .path_status()
            .is_err_and(|why| why.raw_os_error() == Some(libc::ENOMEM))
}

/// On the io_uring path, the drop submits nothing and waits for nothing: the reaper submits what
/// is queued and waits for the notifications; what requests still in flight lend when its bound
/// passes is leaked and counted (what it never submitted is dropped, not leaked: the kernel never
/// saw it).
fn io_uring_senders_dropped_toward_peers_that_never_read() {
    let before = leaked();
    let (mut lent, mut peers) = (Vec::new(), Vec::new());
    let slowest = drop_toward_slow_peers(SendPath::IO_URING, SENDERS, &mut lent, &mut peers);
    let held = reaping().held;
    let emptied = reaper_emptied(REAPER_BOUND);
    eprintln!(
        "io_uring: slowest drop {slowest:?}; the reaper held {held} and gave up within {emptied:?}"
    );
    assert!(held > 0, "no sender was handed to the reaper");
    assert_leaks_counted("io_uring", &lent, before);
    assert!(slowest < DROP_BOUND, "a drop took {slowest:?}");
}

/// Sends per sender toward a peer that reads everything: four times its receive window.
const READ_SENDS: usize = 16;

/// Reads everything `peer` gets, checking each byte against what sender `k` sent; the bytes read,
/// once the stream ended cleanly after all of them.
fn read_all(mut peer: TcpStream, k: usize) -> thread::JoinHandle<Result<usize, String>> {
    thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).map_err(|e| format!("{e}"))?;
        let want: Vec<u8> = (0..READ_SENDS)
            .flat_map(|i| vec![(k + i) as u8; SEND])
            .collect();
        if got != want {
            return Err(format!("{} bytes read, {} sent", got.len(), want.len()));
        }
        Ok(got.len())
    })
}

/// Senders of both paths dropped with loans in flight toward peers (a 64 KiB receive window) that
/// start reading only after the drops: each peer reads every byte, in order, then a clean end;
/// the reaper gets every buffer back and leaks nothing.
fn senders_dropped_toward_peers_that_read_everything_lose_nothing() {
    let mut paths = vec![SendPath::SENDMSG];
    if tx_common::io_uring_available("io_uring senders dropped toward peers that read") {
        paths.push(SendPath::IO_URING);
    }
    let before = leaked();
    let reaped_before = reaping();
    let mut lent = Vec::new();
    let mut peers = Vec::new();
    for (n, path) in paths.iter().enumerate() {
        for k in n * 100..(n + 1) * 100 {
            let (client, peer) = tx_common::backlog_pair();
            let mut tx = TcpSender::new(client, config(*path, Duration::from_secs(60)));
            for buf in buffers(&mut lent, k, READ_SENDS) {
                tx.send(buf).expect("send");
            }
            let started = Instant::now();
            drop(tx);
            assert!(started.elapsed() < DROP_BOUND, "a drop waited");
            peers.push((k, peer));
        }
    }
    let held = reaping().held;
    assert!(held > 0, "no sender was handed to the reaper");
    let readers: Vec<_> = peers.into_iter().map(|(k, p)| read_all(p, k)).collect();
    for reader in readers {
        let read = reader.join().unwrap();
        assert_eq!(read, Ok(READ_SENDS * SEND));
    }
    reaper_emptied(Duration::from_secs(60));
    let still_lent = lent.iter().filter(|b| Arc::strong_count(b) > 1).count();
    let reaped = reaping();
    eprintln!("read everything: the reaper held {held}, now {reaped:?}");
    assert_eq!(still_lent, 0, "buffers never given back");
    assert_eq!(
        leaked(),
        before,
        "the reaper leaked buffers whose peer read them"
    );
    assert_eq!(reaped.expired, reaped_before.expired);
    assert!(reaped.drained >= reaped_before.drained + held as u64);
}

/// Beyond [`MOST_HELD`] senders held, a drop ends its sender at once: counted as refused, its
/// loans leaked then; the counter still equals what is lent once the reaper gave the rest up.
fn a_full_reaper_refuses_and_the_drop_leaks_at_once() {
    const BEYOND: usize = 10;
    assert_eq!(reaping().held, 0);
    if let Some(budget) = testnet::memlock_budget() {
        // A sender goes to the reaper only with a loan out, and each loan pins its pages plus two
        // against the user's locked memory: far fewer than MOST_HELD senders fit.
        testnet::adapted(
            "dropped_senders_count_what_they_leak_and_block_nobody",
            &format!(
                "a full reaper is not checked: the user's locked memory ({budget} bytes) pins the \
                 loans of far fewer than {MOST_HELD} dropped senders at once (run as root, it is)"
            ),
        );
        return;
    }
    let before = leaked();
    let refused_before = reaping().refused;
    let (mut lent, mut peers) = (Vec::new(), Vec::new());
    let senders = MOST_HELD + BEYOND;
    let slowest = drop_toward_slow_peers(SendPath::SENDMSG, senders, &mut lent, &mut peers);
    let refused = reaping().refused - refused_before;
    reaper_emptied(REAPER_BOUND);
    assert_eq!(refused, BEYOND as u64, "{:?}", reaping());
    assert_leaks_counted("a full reaper", &lent, before);
    assert!(slowest < DROP_BOUND, "a drop took {slowest:?}");
}

/// `abort` resets the connection without waiting, for a blocking and an async sender alike.
fn aborting_resets_at_once() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for asynchronous in [false, true] {
        let (client, mut peer) = slow_pair();
        let mut tx = TcpSender::new(client, config(SendPath::SENDMSG, REAPER_BOUND));
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
