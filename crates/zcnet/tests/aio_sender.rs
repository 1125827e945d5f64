//! `AsyncSender` on tokio, on both submission paths from one body each: 64 concurrent connections
//! over loopback and over a veth pair between two namespaces, each stream verified byte for byte and
//! every pooled buffer back at close; send futures cancelled at random points by a timer without
//! losing, repeating or reordering a byte and without a buffer released early; UDP with GSO into an
//! XDP drop sink, whose completions are not copied.

mod tx_common;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use bytes::Bytes;
use testnet::{VethConfig, VethPair};
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};
use tx_common::{Checksum, fill, path_config, pool};
use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SendPath, SenderConfig, TcpSender, TxStats, UdpSender};
use zcnet::xdp::{AttachMode, XdpProgram};

/// Reads `stream` to its end, checksumming; pauses `pause` after every `pause_every` reads.
async fn read_all(stream: TcpStream, pause: Option<(u32, Duration)>) -> Checksum {
    stream.set_nonblocking(true).unwrap();
    let mut stream = tokio::net::TcpStream::from_std(stream).unwrap();
    let mut sum = Checksum::default();
    let mut buf = vec![0u8; 128 << 10];
    let mut reads = 0u32;
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        if n == 0 {
            return sum;
        }
        sum.update(&buf[..n]);
        reads += 1;
        if let Some((every, pause)) = pause
            && reads.is_multiple_of(every)
        {
            sleep(pause).await;
        }
    }
}

/// One connection's sender: pooled buffers of varied sizes (the pool recycles through completions,
/// so a buffer released early would be refilled under the kernel and corrupt the stream) between
/// copies of one shared `Bytes`; every pooled buffer is back after close. Returns the stream's
/// checksum and the sender's stats.
async fn send_stream(
    stream: TcpStream,
    config: SenderConfig,
    shared: Bytes,
    seed: u64,
) -> (Checksum, TxStats) {
    let mut tx = AsyncSender::new(TcpSender::new(stream, config)).unwrap();
    let pool = pool(64 << 10, 8);
    let mut sum = Checksum::default();
    for i in 0..48u64 {
        let mut buf = tx.take_from(&pool).await.expect("a pool buffer");
        let size = 1 + ((i * 7919 + seed * 131) % (64 << 10) as u64) as usize;
        let pos = sum.len;
        buf.fill_with(size, |b| fill(b, pos + seed));
        sum.update(&buf);
        tx.send(buf).await.expect("send");
        if i % 8 == 7 {
            sum.update(&shared);
            tx.send(shared.clone()).await.expect("send shared");
        }
    }
    let stats = tx.stats().clone();
    drop(tx.close().await.expect("close"));
    assert_eq!(pool.available(), pool.capacity(), "every buffer back");
    (sum, stats)
}

/// The zero-copy connections (their stats) zero-copied: every one of them when this process is
/// exempt from the locked-memory limit. Under the limit (a normal user) the pages in flight of many
/// concurrent senders outgrow the process's locked-memory budget, and a send that does not fit is
/// copied (`copy_memlock`; or, should the kernel refuse it first, `ENOBUFS`): then at least one
/// connection zero-copied and every one that did not was copied for want of locked memory, as
/// printed.
fn check_zero_copied(test: &str, zerocopy: &[TxStats]) {
    let Some(budget) = testnet::memlock_budget() else {
        for stats in zerocopy {
            assert!(stats.zc_calls > 0, "{stats:?}");
        }
        return;
    };
    let refused = zerocopy.iter().filter(|s| s.zc_calls == 0).count();
    for stats in zerocopy {
        assert!(
            stats.zc_calls > 0 || stats.copy_memlock > 0 || stats.enobufs > 0,
            "{stats:?}"
        );
    }
    assert!(refused < zerocopy.len(), "no connection zero-copied");
    testnet::adapted(
        test,
        &format!(
            "locked-memory limit {} KiB (no CAP_IPC_LOCK): {refused} of {} zero-copy connections \
             found no locked memory to pin and copied",
            budget >> 10,
            zerocopy.len()
        ),
    );
}

/// Runs `count` connections (listener from `listen`, clients from `connect`) concurrently, half
/// zero-copy and half auto, and checks every stream; `test` names the run in what it prints.
async fn many_connections(
    path: SendPath,
    test: &str,
    count: usize,
    listen: impl Fn() -> TcpListener,
    connect: impl Fn(SocketAddr) -> TcpStream,
) {
    let _turn = testnet::memlock_turn();
    let shared = Bytes::from((0..256 << 10).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let listener = listen();
    let addr = listener.local_addr().unwrap();
    let mut tasks = JoinSet::new();
    for c in 0..count {
        let client = connect(addr);
        let (server, _) = listener.accept().unwrap();
        let mode = if c % 2 == 0 {
            Mode::ZeroCopy
        } else {
            Mode::Auto
        };
        let shared = shared.clone();
        tasks.spawn(async move {
            let reader = tokio::spawn(read_all(server, None));
            let config = path_config(path, mode);
            let (sent, stats) = send_stream(client, config, shared, c as u64).await;
            let got = reader.await.expect("reader");
            assert_eq!(got, sent, "connection {c}: stream intact");
            (mode, stats)
        });
    }
    let all = async {
        let mut zerocopy = Vec::new();
        while let Some(done) = tasks.join_next().await {
            let (mode, stats) = done.expect("connection task");
            if mode == Mode::ZeroCopy {
                zerocopy.push(stats);
            }
        }
        zerocopy
    };
    let zerocopy = timeout(Duration::from_secs(120), all)
        .await
        .expect("64 connections within 120 s");
    check_zero_copied(test, &zerocopy);
}

each_path! {
async fn sixty_four_connections_over_loopback(path: SendPath) {
    many_connections(
        path,
        "sixty_four_connections_over_loopback",
        64,
        || TcpListener::bind("127.0.0.1:0").unwrap(),
        |addr| TcpStream::connect(addr).unwrap(),
    )
    .await;
}
}

each_path! {
async fn sixty_four_connections_over_veth(path: SendPath) {
    if !tx_common::privileged(path, "sixty_four_connections_over_veth") {
        return;
    }
    let pair = VethPair::new(VethConfig::default()).expect("veth pair");
    let b = IpAddr::V4(pair.b_v4);
    many_connections(
        path,
        "sixty_four_connections_over_veth",
        64,
        || pair.b.run(|| TcpListener::bind((b, 0))).unwrap(),
        |addr| pair.a.run(|| TcpStream::connect(addr)).unwrap(),
    )
    .await;
}
}

/// A xorshift64 step: the test's source of random cut points, seeded so that a failure repeats.
fn next_random(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

each_path! {
async fn cancelled_sends_lose_repeat_reorder_and_release_nothing(path: SendPath) {
    // Its pool outgrows a normal user's locked-memory limit: the budget is this test's alone.
    let _turn = testnet::memlock_turn();
    // Small socket buffers at both ends, so that sends wait for space often.
    let listening = tokio::net::TcpSocket::new_v4().unwrap();
    listening.set_recv_buffer_size(64 << 10).unwrap();
    listening.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = listening.listen(1).unwrap();
    let connecting = tokio::net::TcpSocket::new_v4().unwrap();
    connecting.set_send_buffer_size(64 << 10).unwrap();
    let client = connecting
        .connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let (client, server) = (client.into_std().unwrap(), server.into_std().unwrap());
    // A reader that stalls now and then, so that timers cut sends that wait.
    let reader = tokio::spawn(read_all(server, Some((4, Duration::from_millis(3)))));
    // io_uring: one send per chain, so that a send waits for the one before as a sendmsg send
    // waits for socket-buffer space (the kernel would hold a whole batch of sends otherwise).
    let path = match path {
        SendPath::IoUring { ring_entries, .. } => SendPath::IoUring { batch: 1, ring_entries },
        path => path,
    };
    let config = path_config(path, Mode::ZeroCopy);
    let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
    // Zero-copy data is barely charged to the send buffer (only skb heads are): a pool larger than
    // what fills it, so that sends wait for space rather than for buffers.
    let pool = pool(256 << 10, 64);
    let mut sum = Checksum::default();
    let (mut cancelled, mut cut_partway) = (0u32, 0u32);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..600u64 {
        let mut buf = tx.take_from(&pool).await.expect("a pool buffer");
        let size = 1 + (next_random(&mut x) % (256 << 10)) as usize;
        let pos = sum.len;
        buf.fill_with(size, |b| fill(b, pos));
        // Every send future is polled at least once (biased select, send first), so each buffer is
        // part of the stream whether or not its future is dropped.
        sum.update(&buf);
        let limit = Duration::from_micros(next_random(&mut x) % 2500);
        tokio::select! {
            biased;
            sent = tx.send(buf) => sent.expect("send"),
            () = sleep(limit) => {
                cancelled += 1;
                if tx.queued() > 0 {
                    cut_partway += 1;
                }
            }
        }
        if i % 50 == 0 {
            // A flush cut short by a timer loses nothing either.
            let _ = timeout(Duration::from_micros(300), tx.flush()).await;
        }
    }
    let stats = tx.stats().clone();
    drop(tx.close().await.expect("close"));
    let got = reader.await.expect("reader");
    assert_eq!(got, sum, "stream intact after {cancelled} cancelled sends");
    assert_eq!(pool.available(), pool.capacity(), "every buffer back");
    assert!(
        cut_partway > 0,
        "no send was cut part-way ({cancelled} cancelled)"
    );
    assert!(stats.zc_calls > 0, "{stats:?}");
    println!("{cancelled} sends cancelled, {cut_partway} with bytes left queued; {stats:?}");
}
}

each_path! {
async fn udp_gso_into_xdp_drop_sink_completes_not_copied(path: SendPath) {
    if !tx_common::privileged(path, "udp_gso_into_xdp_drop_sink_completes_not_copied") {
        return;
    }
    let pair = VethPair::new(VethConfig::default()).expect("veth pair");
    let link = pair
        .b
        .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
        .expect("attach the XDP drop program");
    // The drop program also drops ARP: resolve the peer statically.
    pair.pin_b_neighbours().unwrap();
    let (src, dst) = (IpAddr::V4(pair.a_v4), IpAddr::V4(pair.b_v4));
    let socket = pair.a.run(|| UdpSocket::bind((src, 0))).unwrap();
    socket.connect(SocketAddr::new(dst, 9)).unwrap();
    let mut udp = UdpSender::new(socket, path_config(path, Mode::ZeroCopy));
    udp.set_gso_segment(Some(1200)).expect("UDP_SEGMENT");
    let mut tx = AsyncSender::new(udp).unwrap();
    let pool = pool(1200 * 40, 8);
    let work = async {
        for i in 0..500u64 {
            let mut buf = tx.take_from(&pool).await.expect("a pool buffer");
            buf.fill_with(1200 * 40, |b| fill(b, i));
            tx.send(buf).await.expect("send");
        }
        tx.flush().await.expect("flush");
    };
    timeout(Duration::from_secs(60), work)
        .await
        .expect("500 GSO sends within 60 s");
    let stats = tx.stats().clone();
    drop(tx);
    drop(link);
    assert_eq!(stats.zc_calls, 500, "{stats:?}");
    assert_eq!(stats.zc_ids, 500, "{stats:?}");
    assert_eq!(stats.copied_ids, 0, "{stats:?}");
    assert_eq!(pool.available(), pool.capacity());
}
}

each_path! {
async fn a_send_future_never_polled_sends_nothing(path: SendPath) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let reader = tokio::spawn(read_all(server, None));
    let mut tx = AsyncSender::new(TcpSender::new(client, path_config(path, Mode::Auto))).unwrap();
    drop(tx.send(vec![1u8; 1 << 20]));
    assert_eq!(tx.queued(), 0);
    tx.send(vec![2u8; 1 << 20]).await.expect("send");
    drop(tx.close().await.expect("close"));
    let mut expected = Checksum::default();
    expected.update(&vec![2u8; 1 << 20]);
    assert_eq!(reader.await.expect("reader"), expected);
}
}

each_path! {
/// Waiting for a pool buffer first sends what Nagle's algorithm holds back (on `sendmsg`; io_uring
/// turns it off): with the pool's two 4 KiB buffers lent, the second held behind the first and the
/// peer acknowledging a lone segment only when its delayed-ACK timer fires, a wait that left it
/// held would get no buffer back for 40 ms or more, every time the pool ran dry.
async fn waiting_for_a_pool_buffer_sends_what_nagle_holds_back(path: SendPath) {
    // Zero-copy must happen (a copied send's buffer comes back at once, and nothing waits): the
    // user's locked-memory budget is this test's alone.
    let _turn = testnet::memlock_turn();
    let (client, server) = tx_common::delayed_ack_pair();
    let config = path_config(path, Mode::ZeroCopy);
    let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
    tx.get_ref().zerocopy_status().expect("zero-copy on TCP");
    let pool = pool(tx_common::PAGE, 2);
    let mut sent = Checksum::default();
    for _ in 0..2 {
        let mut buf = tx.take_from(&pool).await.expect("a pool buffer");
        sent.fill_next(&mut buf, tx_common::PAGE);
        tx.send(buf).await.expect("send");
    }
    // The pool is dry; a buffer may come back within the bound or not.
    drop(timeout(Duration::from_millis(5), tx.take_from(&pool)).await);
    assert_eq!(
        tx_common::unsent_bytes(tx.get_ref().get_ref()),
        0,
        "the wait for a pool buffer left bytes unsent"
    );
    let reader = tokio::spawn(read_all(server, None));
    drop(tx.close().await.expect("close"));
    assert_eq!(reader.await.expect("reader"), sent);
    assert_eq!(pool.available(), pool.capacity(), "every buffer back");
}
}
