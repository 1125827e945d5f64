//! `aio::AsyncUdpEndpoint` on a veth pair: a tokio echo server on the endpoint answers a kernel UDP
//! socket in the peer namespace, every datagram intact and answered once, although receives are
//! dropped while they wait (a dropped receive takes no frame: one before the client starts, and one
//! whenever a round has not arrived yet) and the UMEM is too small to hold a round's answers without
//! waiting for sent frames; receives cancelled at random points lose no datagram; and the `xdp_udp_echo` example, run as a user runs it on both queues of
//! a veth end (a task per queue), answers plain `std::net::UdpSocket` clients, each queue some.
//!
//! A queue that never transmits (the endpoint's queue past the interface's tx queues: the kernel
//! takes nothing from its tx ring and completes no frame) makes `send` wait for a frame: it sleeps
//! on the socket's readiness rather than spinning, and fails with `NoFrameWithin` at its bound; a
//! `SendBatch` dropped with more datagrams than the tx ring takes counts what it dropped.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use std::time::Instant;

use testnet::{VethConfig, VethPair};
use zcnet::aio::AsyncUdpEndpoint;
use zcnet::probe::{UsageOf, resource_usage};
use zcnet::xdp::{EndpointConfig, FrameSize, Mode, SendError, UdpEndpoint};

/// The endpoint's port.
const PORT: u16 = 9400;
/// Datagrams echoed.
const COUNT: usize = 400;
/// Clients of the example, each on a socket of its own, each sending [`COUNT`] datagrams.
const CLIENTS: usize = 16;
/// Datagrams the client sends before reading their echoes.
const ROUND: usize = 40;
/// Bound on every wait (never reached when things work).
const PATIENCE: Duration = Duration::from_secs(10);

/// A one-queue pair whose ends put whole UDP checksums in what they send (see
/// [`VethConfig::full_checksums`]).
fn pair() -> VethPair {
    pair_with_queues(1)
}

/// [`pair`] with `queues` queues per end.
fn pair_with_queues(queues: u32) -> VethPair {
    VethPair::new(VethConfig::full_checksums(queues)).expect("veth pair")
}

/// Payload `seq`: 1 to 1400 bytes derived from the sequence number.
fn payload(seq: usize) -> Vec<u8> {
    let len = 1 + (seq * 397) % 1400;
    (0..len).map(|i| (seq * 13 + i * 5) as u8).collect()
}

/// The client's side: sends [`COUNT`] datagrams to `to` in rounds of [`ROUND`], reads each round's
/// echoes and checks that every datagram came back once, intact, from `to`.
fn client(socket: UdpSocket, to: SocketAddr) {
    socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut echoed = vec![false; COUNT];
    let mut buf = vec![0u8; 2048];
    for round in (0..COUNT).step_by(ROUND) {
        let end = (round + ROUND).min(COUNT);
        for seq in round..end {
            socket.send_to(&payload(seq), to).expect("send");
        }
        for _ in round..end {
            let (n, from) = socket.recv_from(&mut buf).expect("an echo arrives");
            assert_eq!(from, to, "the echo comes from the endpoint");
            let seq = (round..end)
                .find(|&seq| payload(seq) == buf[..n])
                .expect("an echo of this round, intact");
            assert!(!echoed[seq], "datagram {seq} echoed twice");
            echoed[seq] = true;
        }
    }
}

/// Up to 64 datagrams, waiting for at least one: their sources and payloads.
async fn receive(endpoint: &mut AsyncUdpEndpoint) -> Vec<(SocketAddr, Vec<u8>)> {
    let batch = endpoint.receive(64).await.expect("receive");
    batch
        .iter()
        .map(|d| (d.source, d.payload.to_vec()))
        .collect()
}

/// A one-queue [`pair`], the endpoint on `a`'s IPv4 address (copy mode, 64 frames for its fill
/// ring and 32 to send with), a client socket on `b`, and a current-thread runtime.
fn small_endpoint() -> (
    VethPair,
    SocketAddr,
    UdpEndpoint,
    UdpSocket,
    tokio::runtime::Runtime,
) {
    let pair = pair();
    let local = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let endpoint = pair.a.run(|| {
        let mut config = EndpointConfig::default();
        config.mode = Mode::Copy;
        config.umem.frame_size = FrameSize::Half;
        config.umem.frame_count = 96;
        config.umem.fill_size = 64;
        config.umem.completion_size = 64;
        UdpEndpoint::bind(&pair.a_if, local, config).expect("bind endpoint")
    });
    let socket = pair
        .b
        .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind client"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    (pair, local, endpoint, socket, runtime)
}

#[test]
fn an_async_echo_server_answers_every_datagram_once_through_cancelled_receives() {
    if !testnet::privileged(
        "an_async_echo_server_answers_every_datagram_once_through_cancelled_receives",
    ) {
        return;
    }
    // 32 frames to send with: fewer than a round's answers, so sends wait for sent frames.
    let (_pair, local, endpoint, socket, runtime) = small_endpoint();
    let (stats, cancelled, client_thread) = runtime.block_on(async {
        let mut endpoint = AsyncUdpEndpoint::new(endpoint).expect("register");
        // Before the client sends anything, a receive can only wait: this one is dropped waiting.
        let first = tokio::time::timeout(Duration::ZERO, receive(&mut endpoint)).await;
        assert!(first.is_err(), "a datagram before any was sent: {first:?}");
        let mut cancelled = 1;
        let client_thread = std::thread::spawn(move || client(socket, local));
        while endpoint.stats().sent < COUNT as u64 {
            // Dropped when nothing is ready yet (it must take nothing), else its datagrams count.
            let answers = match tokio::time::timeout(Duration::ZERO, receive(&mut endpoint)).await {
                Ok(answers) => answers,
                Err(_) => {
                    cancelled += 1;
                    tokio::time::timeout(PATIENCE, receive(&mut endpoint))
                        .await
                        .expect("datagrams arrive")
                }
            };
            for (to, payload) in answers {
                endpoint
                    .send(to, payload.len(), |buf| buf.copy_from_slice(&payload))
                    .await
                    .expect("send");
            }
            tokio::time::timeout(PATIENCE, endpoint.flush())
                .await
                .expect("the tx ring drains")
                .expect("flush");
        }
        (endpoint.stats(), cancelled, client_thread)
    });
    client_thread
        .join()
        .expect("every echo arrived intact, once");
    println!("{stats:?}, {cancelled} receives cancelled");
    assert_eq!(stats.received, COUNT as u64, "{stats:?}");
    assert_eq!(stats.sent, COUNT as u64, "{stats:?}");
    assert_eq!(stats.malformed + stats.bad_checksum, 0, "{stats:?}");
}

/// Receives cancelled at random points (polled once, or bounded by 0 to 120 µs) against a
/// client that sends [`CANCEL_COUNT`] datagrams in bursts the fill ring holds, each burst once the
/// last arrived: a cancelled receive holds no frame (it takes datagrams only when it returns them,
/// and gives what it rejects straight back to the fill ring), so the kernel never finds the fill
/// ring empty and every datagram arrives, once.
#[test]
fn receives_cancelled_at_random_lose_no_datagram() {
    if !testnet::privileged("receives_cancelled_at_random_lose_no_datagram") {
        return;
    }
    const CANCEL_COUNT: usize = 3000;
    let (_pair, local, endpoint, socket, runtime) = small_endpoint();
    let arrived = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client_arrived = std::sync::Arc::clone(&arrived);
    let client_thread = std::thread::spawn(move || {
        for round in (0..CANCEL_COUNT).step_by(ROUND) {
            let deadline = std::time::Instant::now() + PATIENCE;
            while client_arrived.load(std::sync::atomic::Ordering::Acquire) < round {
                if std::time::Instant::now() > deadline {
                    return;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            for seq in round..(round + ROUND).min(CANCEL_COUNT) {
                socket.send_to(&payload(seq), local).expect("send");
            }
        }
    });
    let (seen, cancelled, stats, kernel) = runtime.block_on(async {
        let mut endpoint = AsyncUdpEndpoint::new(endpoint).expect("register");
        let mut seen = vec![0u32; CANCEL_COUNT];
        let mut cancelled = 0u64;
        // xorshift64: the cancellation points, reproducible.
        let mut random = 0x9e37_79b9_7f4a_7c15u64;
        let deadline = tokio::time::Instant::now() + 3 * PATIENCE;
        while arrived.load(std::sync::atomic::Ordering::Acquire) < CANCEL_COUNT
            && tokio::time::Instant::now() < deadline
        {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            // Three receives in four are polled once, the others bounded by a timer (which tokio
            // rounds up to its millisecond).
            let batch = if !random.is_multiple_of(4) {
                tokio::select! {
                    biased;
                    batch = receive(&mut endpoint) => Some(batch),
                    () = std::future::ready(()) => None,
                }
            } else {
                let wait = Duration::from_micros(random % 121);
                tokio::time::timeout(wait, receive(&mut endpoint))
                    .await
                    .ok()
            };
            let Some(batch) = batch else {
                cancelled += 1;
                tokio::task::yield_now().await;
                continue;
            };
            for (_, bytes) in batch {
                let seq = (0..CANCEL_COUNT)
                    .find(|&seq| payload(seq) == bytes)
                    .expect("a datagram sent, intact");
                seen[seq] += 1;
                arrived.fetch_add(1, std::sync::atomic::Ordering::Release);
            }
        }
        let kernel = endpoint.get_ref().sockets()[0]
            .statistics()
            .expect("statistics");
        (seen, cancelled, endpoint.stats(), kernel)
    });
    client_thread.join().expect("client");
    println!("{stats:?}, {kernel:?}, {cancelled} receives cancelled");
    let missing: Vec<usize> = (0..CANCEL_COUNT).filter(|&s| seen[s] == 0).collect();
    let twice: Vec<usize> = (0..CANCEL_COUNT).filter(|&s| seen[s] > 1).collect();
    assert!(
        missing.is_empty() && twice.is_empty(),
        "missing {missing:?}, twice {twice:?}; {stats:?}, {kernel:?}"
    );
    assert!(cancelled > 100, "only {cancelled} receives were cancelled");
    assert_eq!(
        (kernel.rx_dropped, kernel.rx_ring_full),
        (0, 0),
        "{kernel:?}"
    );
}

/// The example binary `cargo test` built beside this test.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("this test's path");
    let built = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/release/deps")
        .join("examples")
        .join(name);
    assert!(
        built.is_file(),
        "no {} (cargo test builds it)",
        built.display()
    );
    built
}

/// Ends the example if the test fails before it exits.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn the_xdp_udp_echo_example_answers_a_std_client_in_the_other_namespace() {
    if !testnet::privileged("the_xdp_udp_echo_example_answers_a_std_client_in_the_other_namespace")
    {
        return;
    }
    let pair = pair_with_queues(2);
    let local = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let exe = example("xdp_udp_echo");
    let total = CLIENTS * COUNT;
    let mut child = Reaped(
        pair.a
            .command(exe.to_str().expect("a UTF-8 path"))
            .args([
                pair.a_if.as_str(),
                &local.to_string(),
                &total.to_string(),
                "0,1",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the example"),
    );
    let mut lines = BufReader::new(child.0.stdout.take().expect("stdout")).lines();
    let mut printed = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the example ended before it was ready: {printed:?}"))
            .expect("read the example's output");
        let ready = line.starts_with("ready on");
        printed.push(line);
        if ready {
            break;
        }
    }
    // Clients on sockets of their own, side by side: the peer's transmit queue choice (a hash of
    // each flow) spreads them over both of the example's queues.
    let sockets: Vec<UdpSocket> = (0..CLIENTS)
        .map(|_| {
            pair.b
                .run(|| UdpSocket::bind((pair.b_v4, 0)).expect("bind client"))
        })
        .collect();
    let answered = std::panic::catch_unwind(|| {
        std::thread::scope(|s| {
            let clients: Vec<_> = sockets
                .into_iter()
                .map(|socket| s.spawn(move || client(socket, local)))
                .collect();
            for c in clients {
                c.join().expect("every echo arrived intact, once");
            }
        })
    });
    if answered.is_err() {
        let _ = child.0.kill();
    }
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.0.wait().expect("the example exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().expect("stderr"), &mut stderr)
        .expect("read the example's errors");
    printed.extend(rest);
    let output = printed.join("\n");
    println!("{output}\n{stderr}");
    if let Err(panic) = answered {
        std::panic::resume_unwind(panic);
    }
    assert!(status.success(), "{status}: {output}\n{stderr}");
    assert!(
        output.contains(&format!(
            "echoed {total} datagrams: received {total}, malformed 0, bad checksum 0"
        )),
        "{output}"
    );
    for queue in 0..2 {
        let line = output
            .lines()
            .find(|l| l.starts_with(&format!("queue {queue}: echoed")))
            .unwrap_or_else(|| panic!("no count of queue {queue}: {output}"));
        assert!(
            !line.starts_with(&format!("queue {queue}: echoed 0,")),
            "queue {queue}'s task answered nothing: {output}"
        );
    }
}

/// An endpoint on queue 1 of a two-queue `a` whose tx queues were cut to one (`ethtool -L tx 1`):
/// the kernel's copy-mode transmit skips a socket whose queue is past the interface's tx queues
/// (`__xsk_generic_xmit`), so nothing it queues is sent or completed. `spare` frames beyond the
/// fill ring's 64 are there to send with. `b`'s neighbour entries are pinned, so building a
/// datagram to `b` needs no resolution.
fn stalled_endpoint(spare: u32) -> (VethPair, UdpEndpoint, SocketAddr) {
    let pair = pair_with_queues(2);
    pair.a
        .exec("ethtool", &["-L", &pair.a_if, "tx", "1"])
        .expect("ethtool -L tx 1 on the veth end");
    pair.pin_b_neighbours().expect("pin b's neighbour entries");
    let local = SocketAddr::new(IpAddr::V4(pair.a_v4), PORT);
    let endpoint = pair.a.run(|| {
        let mut config = EndpointConfig::with_queues(vec![1]);
        config.mode = Mode::Copy;
        config.umem.frame_size = FrameSize::Half;
        config.umem.fill_size = 64;
        config.umem.completion_size = 64;
        config.umem.frame_count = 64 + spare;
        UdpEndpoint::bind(&pair.a_if, local, config).expect("bind endpoint")
    });
    let peer = SocketAddr::new(IpAddr::V4(pair.b_v4), PORT);
    (pair, endpoint, peer)
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let usage = resource_usage(UsageOf::Thread).expect("getrusage");
    usage.user + usage.system
}

#[test]
fn a_send_no_frame_comes_free_for_sleeps_on_readiness_and_fails_at_its_bound() {
    if !testnet::privileged(
        "a_send_no_frame_comes_free_for_sleeps_on_readiness_and_fails_at_its_bound",
    ) {
        return;
    }
    const SPARE: u32 = 32;
    const BOUND: Duration = Duration::from_millis(500);
    let (_pair, endpoint, peer) = stalled_endpoint(SPARE);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut endpoint = AsyncUdpEndpoint::new(endpoint).expect("register");
        endpoint.set_send_timeout(BOUND);
        // Every spare frame takes a datagram; they go to the tx ring, which the kernel never reads.
        for seq in 0..SPARE as usize {
            let data = payload(seq);
            endpoint
                .send(peer, data.len(), |buf| buf.copy_from_slice(&data))
                .await
                .expect("a free frame");
        }
        let (started, cpu) = (Instant::now(), thread_cpu());
        let waited = tokio::time::timeout(PATIENCE, endpoint.send(peer, 8, |buf| buf.fill(7)))
            .await
            .expect("send returns at its bound");
        let (elapsed, cpu) = (started.elapsed(), thread_cpu() - cpu);
        println!("waited {elapsed:?}, {cpu:?} of CPU: {waited:?}");
        match waited {
            Err(SendError::NoFrameWithin { waited }) => assert_eq!(waited, BOUND),
            other => panic!("no frame comes free, yet: {other:?}"),
        }
        assert!(
            elapsed >= BOUND,
            "returned after {elapsed:?}, before its bound"
        );
        // A task spinning on yield_now would use the whole wait; one sleeping on readiness, with a
        // look every millisecond, a small part of it.
        assert!(
            cpu < elapsed / 2,
            "{cpu:?} of CPU in a wait of {elapsed:?}: spinning"
        );
        let stats = endpoint.stats();
        assert_eq!(stats.sent, u64::from(SPARE), "{stats:?}");
    });
}

#[test]
fn a_send_batch_dropped_on_a_full_tx_ring_counts_what_it_dropped() {
    if !testnet::privileged("a_send_batch_dropped_on_a_full_tx_ring_counts_what_it_dropped") {
        return;
    }
    // The endpoint's tx ring has 2048 entries; 2100 datagrams leave 52 that never fit.
    const BUILT: usize = 2100;
    const TX_RING: u64 = 2048;
    let (_pair, mut endpoint, peer) = stalled_endpoint(BUILT as u32);
    let mut batch = endpoint.send_batch();
    for seq in 0..BUILT {
        let data = payload(seq);
        batch
            .push(peer, data.len(), |buf| buf.copy_from_slice(&data))
            .expect("a free frame");
    }
    drop(batch);
    let stats = endpoint.stats();
    assert_eq!(stats.sent, TX_RING, "{stats:?}");
    assert_eq!(stats.unsent, BUILT as u64 - TX_RING, "{stats:?}");
    // The dropped datagrams' frames are free again: a flushed batch of them reports the same.
    let mut batch = endpoint.send_batch();
    for seq in 0..(BUILT as u64 - TX_RING) as usize {
        batch
            .push(peer, 8, |buf| buf.fill(seq as u8))
            .expect("a frame freed by the drop");
    }
    match batch.flush() {
        Err(SendError::TxRingFull { sent: 0, dropped }) => {
            assert_eq!(dropped as u64, BUILT as u64 - TX_RING)
        }
        other => panic!("the ring is still full: {other:?}"),
    }
    assert_eq!(endpoint.stats().unsent, 2 * (BUILT as u64 - TX_RING));
}
