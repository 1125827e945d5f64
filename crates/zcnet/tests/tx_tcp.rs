//! Sender over TCP on loopback and the veth harness (IPv4, IPv6), on both submission paths from one
//! body each: byte-exact delivery while recycling pooled buffers (registered for fixed sends on
//! io_uring), every buffer back, every zero-copy send completed, copied ones reported copied for a
//! local receiver; sizes around the page and the threshold; the auto policy following copied
//! completions; a peer that resets mid-stream; frozen pool buffers lent to many sends at once; a
//! sender whose sending thread exits with sends in flight, carried on by another thread; io_uring
//! submitting large sends a chain (512 KiB) at a time, and turning Nagle's algorithm off while it
//! owns the socket, and handing it no more than its congestion window; `sendmsg` reading
//! completions once 256 KiB went out zero-copy.

mod tx_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use testnet::{Offloads, VethConfig, VethPair};
use tx_common::{
    Checksum, PAGE, STREAM_SIZES, assert_stream_delivered, fill, path_config, pool, send_sizes,
    sender_config, sender_on, tcp_pair,
};
use zcnet::tx::{Mode, PolicyConfig, SendPath, Sender, SenderConfig, TrySendError, TxStats};

/// Streams `STREAM_SIZES` `rounds` times through a 4-buffer pool and checks every byte and buffer.
fn roundtrip(
    stream: TcpStream,
    sink: std::thread::JoinHandle<Checksum>,
    config: SenderConfig,
    rounds: usize,
) -> TxStats {
    let pool = pool(64 << 10, 4);
    let mut tx = sender_on(stream, config, &pool);
    if config.policy.mode != Mode::Copy {
        tx.zerocopy_status().expect("zero-copy on TCP");
    }
    let sent = send_sizes(&mut tx, &pool, &STREAM_SIZES, rounds, |tx, b| tx.send(b));
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_stream_delivered(sink, sent, &pool, &stats);
    stats
}

fn loopback(ip: IpAddr, config: SenderConfig) -> TxStats {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    roundtrip(stream, sink, config, 40)
}

each_path! {
    fn tcp_v4_and_v6_loopback_zerocopy_delivers_every_byte_and_returns_every_buffer(
        path: SendPath
    ) {
        for ip in [IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)] {
            let stats = loopback(ip, path_config(path, Mode::ZeroCopy));
            // Every send with data went zero-copy but for those the locked-memory budget or
            // ENOBUFS turned to copies; a local receiver makes the kernel copy each one.
            assert_eq!(
                stats.zc_calls + stats.copy_empty + stats.copy_enobufs + stats.copy_memlock,
                stats.calls,
                "{stats:?}"
            );
            assert!(stats.zc_calls > 0);
            assert_eq!(stats.copied_ids, stats.zc_calls, "{stats:?}");
        }
    }
}

each_path! {
    fn tcp_loopback_copy_mode_takes_no_ids(path: SendPath) {
        let stats = loopback(IpAddr::V4(Ipv4Addr::LOCALHOST), path_config(path, Mode::Copy));
        assert_eq!((stats.zc_calls, stats.notifications), (0, 0));
        assert_eq!(stats.copy_mode, stats.calls);
    }
}

each_path! {
    fn tcp_auto_copies_below_threshold_and_switches_after_copied_completions(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (stream, sink) = tcp_pair(listener);
        let pool = pool(64 << 10, 4);
        // One send per io_uring request, so that each decision follows the notifications before.
        let path = match path {
            SendPath::IoUring { ring_entries, .. } => SendPath::IoUring { batch: 1, ring_entries },
            path => path,
        };
        let mut cfg = path_config(path, Mode::Auto);
cfg.policy = PolicyConfig::default();
cfg.policy.copied_run = 4;
        let mut tx = sender_on(stream, cfg, &pool);
        // Exactly at the threshold: zero-copy; one below: copy.
        let mut sent = Checksum::default();
        for size in [10 * 1024 - 1, 10 * 1024] {
            let mut buf = tx_common::take(&pool, &mut tx);
            sent.fill_next(&mut buf, size);
            tx.send(buf).expect("send");
        }
        tx.flush(Duration::from_secs(20)).unwrap();
        assert_eq!((tx.stats().copy_small, tx.stats().zc_calls), (1, 1), "{:?}", tx.stats());
        for _ in 0..400 {
            let mut buf = tx_common::take(&pool, &mut tx);
            sent.fill_next(&mut buf, 64 << 10);
            tx.send(buf).expect("send");
        }
        tx.flush(Duration::from_secs(20)).unwrap();
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert_stream_delivered(sink, sent, &pool, &stats);
        assert!(stats.policy_switches >= 1, "{stats:?}");
        assert!(stats.copy_copied > stats.zc_calls, "{stats:?}");
    }
}

each_path! {
    fn tcp_peer_reset_mid_stream_returns_an_error_and_every_buffer(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = tx_common::resetting_peer(listener);
        let pool = pool(64 << 10, 8);
        let stream = TcpStream::connect(addr).unwrap();
        let mut tx = sender_on(stream, path_config(path, Mode::ZeroCopy), &pool);
        // The failure comes back from a send, or (io_uring) from the wait for a pool buffer that
        // reads the failed chain's results.
        let mut failed = None;
        for i in 0..100_000u64 {
            let mut buf = match tx.take_from(&pool, Duration::from_secs(10)) {
                Ok(buf) => buf,
                Err(e) => {
                    failed = Some((e, None));
                    break;
                }
            };
            buf.fill_with(64 << 10, |b| fill(b, i));
            if let Err(e) = tx.send(buf) {
                let (e, unsent) = e.into_parts();
                failed = Some((e, Some(unsent)));
                break;
            }
        }
        peer.join().unwrap();
        let (error, own) = failed.expect("sending to a reset peer must fail");
        assert!(
            matches!(error.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)),
            "unexpected error: {error}"
        );
        assert!(error.to_string().contains("flush()"), "{error}");
        tx.flush(Duration::from_secs(10)).expect("completions after a reset");
        assert_eq!(tx.outstanding(), 0);
        // Every buffer is back in the pool or handed back: the call's own, and on io_uring the
        // earlier ones its failed chain left unsent.
        assert_eq!(
            pool.available() + usize::from(own.is_some()) + error.unsent().len(),
            pool.capacity(),
            "a buffer leaked"
        );
        drop((error, own));
        assert_eq!(pool.available(), pool.capacity());
    }
}

fn veth(offloads: Offloads, v6: bool, config: SenderConfig) -> TxStats {
    let pair = VethPair::new(VethConfig {
        offloads,
        ..Default::default()
    })
    .expect("veth pair");
    let dst: IpAddr = if v6 {
        pair.b_v6.into()
    } else {
        pair.b_v4.into()
    };
    let listener = pair
        .b
        .run(|| TcpListener::bind(SocketAddr::new(dst, 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = tx_common::tcp_sink(listener);
    let stream = pair.a.run(|| TcpStream::connect(addr)).unwrap();
    roundtrip(stream, sink, config, 20)
}

each_path! {
    fn tcp_v4_and_v6_over_veth(path: SendPath) {
        if !tx_common::privileged(path, "tcp_v4_and_v6_over_veth") {
            return;
        }
        for v6 in [false, true] {
            let stats = veth(Offloads::default(), v6, path_config(path, Mode::ZeroCopy));
            assert!(stats.zc_calls > 0);
            // Delivered to a socket in the peer namespace: still a local socket, so copied.
            assert_eq!(stats.copied_ids, stats.zc_calls, "{stats:?}");
        }
    }
}

each_path! {
    fn tcp_over_veth_without_sg_tso_or_checksum_offload_still_delivers_every_byte(
        path: SendPath
    ) {
        if !tx_common::privileged(path, "tcp_over_veth_without_sg_tso_or_checksum_offload") {
            return;
        }
        for off in Offloads::each_off() {
            let stats = veth(off, false, path_config(path, Mode::ZeroCopy));
            assert!(stats.zc_calls > 0, "{off:?}");
            // Without TSO or checksum offload the kernel copies and says so. Without
            // scatter-gather it linearizes in software GSO and reports only the ranges still in
            // page frags as copied, so only delivery is checked there.
            if off.sg {
                assert_eq!(stats.copied_ids, stats.zc_calls, "{off:?}: completions must say copied");
            }
        }
    }
}

each_path! {
    fn tcp_frozen_buffers_lent_to_many_sends_at_once_arrive_whole_and_return_after_the_last(
        path: SendPath
    ) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (stream, sink) = tcp_pair(listener);
        let pool = pool(64 << 10, 3);
        let mut tx = sender_on(stream, path_config(path, Mode::ZeroCopy), &pool);
        // Two different payloads, each frozen once and sent over and over, interleaved.
        let frozen: Vec<_> = [0u64, 1 << 20]
            .into_iter()
            .map(|pos| {
                let mut buf = pool.take().unwrap();
                buf.fill_with(60_000, |b| fill(b, pos));
                buf.freeze()
            })
            .collect();
        let mut sent = Checksum::default();
        let mut most_outstanding = 0;
        for k in 0..2_000 {
            let buf = if k % 3 == 2 { &frozen[1] } else { &frozen[0] };
            sent.update(buf);
            tx.send(buf.clone()).unwrap();
            most_outstanding = most_outstanding.max(tx.outstanding());
        }
        tx.flush(Duration::from_secs(20)).unwrap();
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert!(most_outstanding > 1, "never lent to two sends at once");
        // Every send is back; the slots stay out until the last clones go.
        assert_eq!(pool.available(), pool.capacity() - frozen.len());
        drop(frozen);
        assert_stream_delivered(sink, sent, &pool, &stats);
    }
}

each_path! {
    fn a_sender_whose_thread_exits_with_sends_in_flight_delivers_every_byte(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        // 3 MiB lent at once: under a normal user's locked-memory limit, not beside another test
        // lending as much.
        let _turn = testnet::memlock_turn();
        let pool = pool(64 << 10, 48);
        let config = path_config(path, Mode::ZeroCopy);
        // Nobody reads yet: the thread that sends exits with sends lent to the kernel (and, on
        // io_uring, requests waiting in it for socket-buffer space); another thread goes on.
        let (mut tx, pool, sent, rest) = std::thread::spawn(move || {
            let mut tx = sender_on(stream, config, &pool);
            let mut sent = Checksum::default();
            let mut rest = None;
            while let Some(mut buf) = pool.take() {
                sent.fill_next(&mut buf, 64 << 10);
                match tx.try_send(buf) {
                    Ok(()) => {}
                    Err(TrySendError::WouldBlock(unsent)) => {
                        rest = Some(unsent);
                        break;
                    }
                    Err(TrySendError::Failed(e)) => panic!("{e}"),
                }
            }
            assert!(tx.outstanding() + tx.queued() > 0, "nothing in flight at exit");
            (tx, pool, sent, rest)
        })
        .join()
        .unwrap();
        let sink = std::thread::spawn(move || tx_common::read_checksum(server));
        if let Some(rest) = rest {
            tx.send_unsent(rest).expect("the rest of the buffer the socket did not take");
        }
        tx.flush(Duration::from_secs(20)).expect("every completion, on the thread left");
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert_stream_delivered(sink, sent, &pool, &stats);
    }
}

each_path! {
    fn a_backlogged_socket_gives_buffers_back_before_it_drains(path: SendPath) {
        // A small receive window and a slow reader: the sender's socket holds a backlog of unsent
        // bytes for as long as the sender keeps it fed. The whole pool is lent at once: under a
        // normal user's locked-memory limit the budget is this test's alone.
        let _turn = testnet::memlock_turn();
        let (stream, server) = tx_common::backlog_pair();
        // 16 KiB a millisecond.
        let sink = std::thread::spawn(move || {
            tx_common::read_checksum_paced(server, 16 << 10, Duration::from_millis(1))
        });
        let pool = pool(64 << 10, 24);
        let mut tx = sender_on(stream, path_config(path, Mode::ZeroCopy), &pool);
        let mut sent = Checksum::default();
        // What the socket still held unsent whenever buffers came back: in a wait for the dry
        // pool, or inside a send (the io_uring path waits there while what it lent fills the
        // congestion window).
        let mut unsent_at_return = Vec::new();
        for _ in 0..192 {
            if pool.available() == 0 {
                let released = tx.wait_completions(Duration::from_secs(20)).expect("completions");
                if released > 0 {
                    unsent_at_return.push(tx_common::unsent_bytes(tx.get_ref()));
                }
            }
            let mut buf = pool.take().expect("a buffer after completions");
            sent.fill_next(&mut buf, 64 << 10);
            let available = pool.available();
            tx.send(buf).expect("send");
            if pool.available() > available {
                unsent_at_return.push(tx_common::unsent_bytes(tx.get_ref()));
            }
        }
        tx.flush(Duration::from_secs(30)).expect("flush");
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert_stream_delivered(sink, sent, &pool, &stats);
        // With the whole pool lent and a backlog, buffers must come back while it lasts, not once
        // the socket has sent everything.
        let backlogged = unsent_at_return.iter().filter(|&&b| b >= 256 << 10).count();
        assert!(
            backlogged * 2 >= unsent_at_return.len() && !unsent_at_return.is_empty(),
            "buffers came back only as the socket drained: unsent bytes at each return \
             {unsent_at_return:?}"
        );
    }
}

/// On io_uring, 64 KiB sends are submitted as soon as a chain's worth (512 KiB) waits, not once
/// `batch` (32) of them do: a stream of them never has more than two chains' worth queued (16
/// buffers) where it had a chain and `batch` (40).
#[test]
fn io_uring_submits_large_sends_once_a_chain_s_worth_waits() {
    if !tx_common::io_uring_available("io_uring_submits_large_sends_once_a_chain_s_worth_waits") {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    let pool = pool(64 << 10, 48);
    let mut tx = sender_on(
        stream,
        path_config(SendPath::IO_URING, Mode::ZeroCopy),
        &pool,
    );
    let mut sent = Checksum::default();
    let mut most_queued = 0;
    for _ in 0..256 {
        let mut buf = tx_common::take(&pool, &mut tx);
        sent.fill_next(&mut buf, 64 << 10);
        tx.send(buf).expect("send");
        most_queued = most_queued.max(tx.queued());
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_stream_delivered(sink, sent, &pool, &stats);
    assert!(
        most_queued <= 16,
        "{most_queued} sends of 64 KiB were queued at once"
    );
}

/// The io_uring path turns Nagle's algorithm off while it owns a TCP socket (a stream of
/// 65435-byte requests, each a segment just short of loopback's MSS, would otherwise wait for
/// ACKs), delivers every byte so, and hands the socket back as it found it; the `sendmsg` path
/// leaves the option alone.
#[test]
fn io_uring_turns_nagle_off_while_it_owns_a_tcp_socket_and_restores_it() {
    if !tx_common::io_uring_available(
        "io_uring_turns_nagle_off_while_it_owns_a_tcp_socket_and_restores_it",
    ) {
        return;
    }
    for (path, nodelay_before, nodelay_while) in [
        (SendPath::IO_URING, false, true),
        (SendPath::IO_URING, true, true),
        (SendPath::SENDMSG, false, false),
    ] {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (stream, sink) = tcp_pair(listener);
        stream.set_nodelay(nodelay_before).unwrap();
        let pool = pool(65435, 8);
        let mut tx = sender_on(stream, path_config(path, Mode::ZeroCopy), &pool);
        assert_eq!(
            tx.get_ref().nodelay().unwrap(),
            nodelay_while,
            "{path:?}, TCP_NODELAY {nodelay_before} before"
        );
        let mut sent = Checksum::default();
        for _ in 0..64 {
            let mut buf = tx_common::take(&pool, &mut tx);
            sent.fill_next(&mut buf, 65435);
            tx.send(buf).expect("send");
        }
        tx.flush(Duration::from_secs(20)).expect("flush");
        let stats = tx.stats().clone();
        let stream = tx.close(Duration::from_secs(1)).expect("close");
        assert_eq!(
            stream.nodelay().unwrap(),
            nodelay_before,
            "{path:?}: TCP_NODELAY after close"
        );
        drop(stream);
        assert_stream_delivered(sink, sent, &pool, &stats);
    }
}

/// The `sendmsg` path reads the error queue once 256 KiB went out zero-copy since it last did,
/// however far `drain_every` is: a lent buffer comes back only once its completion is read. The
/// first 64 KiB send's completion is queued (the socket reports `POLLERR`) before three more
/// sends; nothing reads it until the fourth makes 256 KiB, and that send does, without a poll.
#[test]
fn sendmsg_reads_completions_once_256_kib_went_out_zero_copy() {
    // Zero-copy must happen: the user's locked-memory budget is this test's alone.
    let _turn = testnet::memlock_turn();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    // Room for all four sends at once: a send that found the socket full would wait for room and
    // read the queue then.
    rustix::net::sockopt::set_socket_send_buffer_size(&stream, 4 << 20).unwrap();
    let pool = pool(64 << 10, 8);
    let mut config = sender_config(Mode::ZeroCopy);
    config.path = SendPath::Sendmsg {
        drain_every: u32::MAX,
    };
    let mut tx = sender_on(stream, config, &pool);
    tx.zerocopy_status().expect("zero-copy on TCP");
    let mut sent = Checksum::default();
    let mut send = |tx: &mut Sender<TcpStream>| {
        let mut buf = tx_common::take(&pool, tx);
        sent.fill_next(&mut buf, 64 << 10);
        tx.send(buf).expect("send");
    };
    send(&mut tx);
    let fd = tx.get_ref().as_fd();
    let mut polled = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::empty(),
    )];
    let timeout = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut polled, Some(&timeout)).expect("poll");
    assert!(
        polled[0].revents().contains(rustix::event::PollFlags::ERR),
        "the first send's completion was not queued within 10 s"
    );
    send(&mut tx);
    send(&mut tx);
    assert_eq!(
        tx.stats().notifications,
        0,
        "read before 256 KiB: {:?}",
        tx.stats()
    );
    send(&mut tx);
    assert!(
        tx.stats().notifications > 0,
        "256 KiB sent zero-copy and no completion read: {:?}",
        tx.stats()
    );
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_stream_delivered(sink, sent, &pool, &stats);
}

each_path! {
    /// A wait for completions first sends what Nagle's algorithm holds back. A lent buffer comes
    /// back only once its bytes are acknowledged, and here the peer acknowledges a lone segment
    /// only when its delayed-ACK timer fires: two 4 KiB sends from a pool of two, the second held
    /// by the algorithm (on `sendmsg`; io_uring turns it off) behind the first, unacknowledged.
    /// Had the wait left it held, the sender would get its buffers back 40 ms or more later, every
    /// time its pool ran dry.
    fn a_wait_for_completions_sends_what_nagle_holds_back(path: SendPath) {
        // Zero-copy must happen (a copied send's buffer comes back at once, and nothing waits):
        // the user's locked-memory budget is this test's alone.
        let _turn = testnet::memlock_turn();
        let (stream, server) = tx_common::delayed_ack_pair();
        let pool = pool(PAGE, 2);
        let mut tx = sender_on(stream, path_config(path, Mode::ZeroCopy), &pool);
        tx.zerocopy_status().expect("zero-copy on TCP");
        let mut sent = Checksum::default();
        for _ in 0..2 {
            let mut buf = tx_common::take(&pool, &mut tx);
            sent.fill_next(&mut buf, PAGE);
            tx.send(buf).expect("send");
        }
        if matches!(path, SendPath::Sendmsg { .. }) {
            assert_eq!(
                tx_common::unsent_bytes(tx.get_ref()),
                PAGE as u32,
                "Nagle's algorithm did not hold the second send back"
            );
        }
        tx.wait_completions(Duration::from_millis(1)).expect("wait");
        assert_eq!(
            tx_common::unsent_bytes(tx.get_ref()),
            0,
            "the wait for completions left bytes unsent"
        );
        let sink = std::thread::spawn(move || tx_common::read_checksum(server));
        tx.flush(Duration::from_secs(20)).expect("flush");
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert_stream_delivered(sink, sent, &pool, &stats);
    }
}

/// On io_uring, a chain that goes out because the caller waits (here for a buffer of a dry pool)
/// ends its last send apart: two 4 KiB sends from a pool of two make two requests, not one. A
/// request's notification comes once its last segment is acknowledged, and a receiver may hold
/// the ACK of a lone segment for its delayed-ACK timer; in two requests, the first buffer comes
/// back once the second's segment follows its own.
#[test]
fn io_uring_ends_the_last_send_of_a_waiting_chain_apart() {
    if !tx_common::io_uring_available("io_uring_ends_the_last_send_of_a_waiting_chain_apart") {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    let pool = pool(PAGE, 2);
    let mut tx = sender_on(
        stream,
        path_config(SendPath::IO_URING, Mode::ZeroCopy),
        &pool,
    );
    let mut sent = Checksum::default();
    for _ in 0..2 {
        let mut buf = tx_common::take(&pool, &mut tx);
        sent.fill_next(&mut buf, PAGE);
        tx.send(buf).expect("send");
    }
    assert_eq!(
        tx.queued(),
        2,
        "submitted before the wait: {:?}",
        tx.stats()
    );
    drop(
        tx.take_from(&pool, Duration::from_secs(20))
            .expect("a buffer back"),
    );
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_stream_delivered(sink, sent, &pool, &stats);
    assert_eq!(stats.calls, 2, "requests for two sends: {stats:?}");
}

/// On TCP the io_uring path hands the socket no more than its congestion window lets it send at
/// once while the peer keeps up: it cuts or holds the next chain while what it lent and the chain
/// would exceed the window, so the socket never holds much more unsent than one chain, here
/// where the socket's pacing rate is capped below what the sender gives. Without that, the socket
/// held most of its 4 MiB send buffer unsent: every one of the 921 sends counted left over 512 KiB
/// unsent beyond the window (up to 3146664 bytes), in three runs. The reader only counts (a
/// checksumming one in a debug build is slow enough to be what limits the connection, and the
/// path then lets the socket buffer for it): every byte arrives, and every buffer comes back.
#[test]
fn io_uring_hands_a_tcp_socket_no_more_than_its_congestion_window() {
    let test = "io_uring_hands_a_tcp_socket_no_more_than_its_congestion_window";
    if !tx_common::io_uring_available(test) {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        // Reads of up to 1 MiB, as fast as the sender's pacing lets the bytes come.
        let mut conn = std::io::BufReader::with_capacity(1 << 20, conn);
        std::io::copy(&mut conn, &mut std::io::sink()).expect("read")
    });
    let stream = TcpStream::connect(addr).unwrap();
    // 128 MiB/s: the kernel sends slower than the sender gives, and the peer reads all it gets
    // (also a reader sharing a loaded host with other tests).
    tx_common::cap_pacing_rate(&stream, 128 << 20);
    let pool = pool(64 << 10, 2);
    let mut tx = sender_on(
        stream,
        path_config(SendPath::IO_URING, Mode::ZeroCopy),
        &pool,
    );
    let mut buf = pool.take().unwrap();
    buf.fill_with(64 << 10, |b| fill(b, 0));
    let frozen = buf.freeze();
    // After each send while the peer's receive window is not the smaller (a reader short of CPU
    // on a loaded host can be what limits the connection): the bytes the socket holds unsent
    // beyond its congestion window.
    let mut beyond = Vec::new();
    const SENDS: usize = 1_000;
    for _ in 0..SENDS {
        tx.send(frozen.clone()).expect("send");
        let state = zcnet::probe::tcp_send_state(tx.get_ref().as_fd()).expect("TCP_INFO");
        if state
            .snd_wnd
            .is_none_or(|w| u64::from(w) >= state.congestion_window)
        {
            beyond.push(u64::from(state.notsent_bytes).saturating_sub(state.congestion_window));
        }
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    drop(frozen);
    assert_eq!(sink.join().unwrap(), (SENDS * (64 << 10)) as u64);
    assert_eq!(
        pool.available(),
        pool.capacity(),
        "a buffer did not come back"
    );
    assert!(
        stats.window_waits > 0,
        "no chain waited for the window: {stats:?}"
    );
    // The window may shrink after a chain went (a loss, a reordering): a few samples may exceed.
    let over = beyond.iter().filter(|&&b| b > 512 << 10).count();
    beyond.sort_unstable();
    assert!(
        beyond.len() >= SENDS / 2 && over * 10 <= beyond.len(),
        "{over} of {} sends left over 512 KiB unsent beyond the congestion window (most {:?}, \
         {} chains held back)",
        beyond.len(),
        beyond.last(),
        stats.window_waits
    );
}
