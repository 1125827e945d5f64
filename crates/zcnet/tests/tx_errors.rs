//! Sender at its limits and after failures, on both submission paths from one body each: a stream
//! part over 4 GiB goes out once, in order, between normal parts (over `u32::MAX`, an SQE's length,
//! and over the kernel's `MAX_RW_COUNT`, which cuts longer sends short); a datagram over 4 GiB is a
//! clear error that hands the buffer back and wedges nothing; a peer reset mid-stream hands back
//! every buffer not sent — the failing call's own, and on io_uring every earlier one its failed
//! chain left, in order; a send that times out hands its buffer back; flush after each error
//! succeeds and leaves nothing lent; a close that times out hands back what it never submitted;
//! `Duration::MAX` as a timeout is no deadline.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use tx_common::{Checksum, assert_stream_delivered, fill, path_config, pool, sender_on, tcp_pair};
use zcnet::tx::{Mode, SendPath, SenderConfig, TxError, UnsentBuf};

/// 4 GiB and one byte: over `u32::MAX` and over the kernel's `MAX_RW_COUNT`.
const HUGE: usize = (4 << 30) + 1;

/// A zeroed buffer of `len` bytes that costs no memory: a fresh zeroed allocation is mapped on
/// demand, and reading it (the kernel does, sending it) maps only the shared zero page.
fn zeroes(len: usize) -> Vec<u8> {
    vec![0u8; len]
}

each_path! {
    fn a_stream_part_over_4_gib_arrives_once_between_normal_parts(path: SendPath) {
        // The default policy (auto): zero-copy for large sends, as long as the kernel takes them.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (stream, sink) = tcp_pair(listener);
        let mut cfg = SenderConfig::default();
cfg.path = path;
cfg.send_timeout = Some(Duration::from_secs(60));
        let pool = pool(64 << 10, 4);
        let mut tx = sender_on(stream, cfg, &pool);
        let mut sent = Checksum::default();
        let patterned = |tx: &mut zcnet::tx::TcpSender, sent: &mut Checksum, size: usize| {
            let mut buf = tx_common::take(&pool, tx);
            sent.fill_next(&mut buf, size);
            tx.send(buf).expect("send");
        };
        patterned(&mut tx, &mut sent, 40_000);
        let huge = zeroes(HUGE);
        sent.update(&huge);
        tx.send(huge).expect("a stream takes any length");
        for size in [1, 4096, 64 << 10, 7] {
            patterned(&mut tx, &mut sent, size);
        }
        tx.flush(Duration::from_secs(120)).expect("flush");
        assert_eq!(tx.outstanding(), 0);
        let stats = tx.stats().clone();
        drop(tx.close(Duration::from_secs(1)).expect("close"));
        assert_eq!(sink.join().unwrap(), sent, "every byte once, in order");
        assert_eq!(stats.bytes, sent.len, "{stats:?}");
        assert_eq!(pool.available(), pool.capacity());
    }
}

each_path! {
    /// `Duration::MAX` as a send timeout and as every wait's bound means no deadline: sends, waits
    /// for completions (idle or not), a pool take, flush and close behave as unbounded ones, the
    /// same on both paths, and every byte arrives.
    fn the_longest_timeouts_mean_no_deadline(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (stream, sink) = tcp_pair(listener);
        let mut cfg = path_config(path, Mode::ZeroCopy);
cfg.send_timeout = Some(Duration::MAX);
        let pool = pool(64 << 10, 2);
        let mut tx = sender_on(stream, cfg, &pool);
        assert_eq!(tx.wait_completions(Duration::MAX).expect("an idle wait"), 0);
        let mut sent = Checksum::default();
        for size in [1, 40_000, 64 << 10, 4096, 7] {
            let mut buf = tx.take_from(&pool, Duration::MAX).expect("a pool buffer");
            sent.fill_next(&mut buf, size);
            tx.send(buf).expect("send");
            tx.wait_completions(Duration::MAX).expect("a wait with sends lent");
        }
        tx.flush(Duration::MAX).expect("flush");
        assert_eq!(tx.outstanding(), 0);
        let stats = tx.stats().clone();
        drop(tx.close(Duration::MAX).expect("close"));
        assert_stream_delivered(sink, sent, &pool, &stats);
    }
}

each_path! {
    fn a_datagram_over_4_gib_is_refused_handed_back_and_wedges_nothing(path: SendPath) {
        let sink = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        socket.connect(sink.local_addr().unwrap()).unwrap();
        let pool = pool(4096, 1);
        let mut tx = sender_on(socket, path_config(path, Mode::ZeroCopy), &pool);
        let huge = Arc::new(zeroes(HUGE));
        let err = tx.send(Arc::clone(&huge)).expect_err("no datagram is that long");
        // sendmsg: the kernel refuses it (EMSGSIZE); io_uring: refused before it is queued, as
        // one request cannot carry it.
        match err.error() {
            TxError::TooLong { len: HUGE, .. } => {}
            e => assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}"),
        }
        assert!(err.to_string().contains("datagram"), "{err}");
        let (error, back) = err.into_parts();
        assert!(error.unsent().is_empty(), "{error}");
        assert_eq!(back.sent(), 0);
        assert!(Arc::ptr_eq(&back.into_buf().expect("never lent"), &huge));
        // Nothing was queued: the next datagram goes out alone, and flush has nothing to wait for.
        tx.send(vec![5u8; 100]).unwrap();
        tx.flush(Duration::from_secs(10)).expect("flush");
        let mut got = [0u8; 200];
        sink.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(sink.recv(&mut got).unwrap(), 100);
        assert_eq!(tx.stats().bytes, 100);
    }
}

/// `count` distinct buffers of `len` bytes, buffer `k` holding the stream pattern at `k * len`.
fn distinct_bufs(count: u64, len: usize) -> Vec<Arc<Vec<u8>>> {
    (0..count)
        .map(|k| {
            let mut b = vec![0u8; len];
            fill(&mut b, k * len as u64);
            Arc::new(b)
        })
        .collect()
}

/// Checks `unsent` against the sends made: the buffers of sends `first..=last` (send `k` lent
/// `bufs[k % bufs.len()]`), in order, only the first possibly begun.
fn assert_tail_of_sends(unsent: &[UnsentBuf], bufs: &[Arc<Vec<u8>>], last: usize) {
    let Some(first) = (last + 1).checked_sub(unsent.len()) else {
        panic!(
            "{} buffers handed back after {} sends",
            unsent.len(),
            last + 1
        );
    };
    for (k, u) in (first..=last).zip(unsent) {
        let want = &bufs[k % bufs.len()];
        assert!(
            std::ptr::eq(u.as_bytes(), want.as_slice()),
            "handed back out of order at send {k}"
        );
        if k > first {
            assert_eq!(u.sent(), 0, "send {k} was never submitted");
        }
        assert_eq!(u.remaining().len(), want.len() - u.sent());
    }
}

each_path! {
    fn a_peer_reset_mid_stream_hands_back_every_buffer_not_sent(path: SendPath) {
        for mode in [Mode::ZeroCopy, Mode::Copy] {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = tx_common::resetting_peer(listener);
            let stream = TcpStream::connect(addr).unwrap();
            let mut tx = zcnet::tx::Sender::new(stream, path_config(path, mode));
            // 48 distinct buffers lent over and over: a buffer handed back is recognised by
            // address.
            let bufs = distinct_bufs(48, 64 << 10);
            let mut failed = None;
            for k in 0..200_000 {
                if let Err(e) = tx.send(Arc::clone(&bufs[k % bufs.len()])) {
                    failed = Some((k, e));
                    break;
                }
            }
            let (k, err) = failed.expect("a reset peer must fail a send");
            peer.join().unwrap();
            assert!(
                matches!(err.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)),
                "{mode:?}: unexpected error: {err}"
            );
            let (error, own) = err.into_parts();
            // The call that reported the error hands back its own buffer, the earlier ones
            // (io_uring) come inside the error, in order: together, the tail of the sends made.
            assert!(Arc::ptr_eq(own.buf(), &bufs[k % bufs.len()]));
            if !error.unsent().is_empty() {
                assert!(error.to_string().contains("handed back"), "{error}");
                assert_tail_of_sends(error.unsent(), &bufs, k - 1);
                assert_eq!(own.sent(), 0, "queued after the failed request");
            }
            tx.flush(Duration::from_secs(10)).expect("nothing more after the error");
            assert_eq!(tx.outstanding(), 0);
            // Sends after the error are refused by the kernel and hand back their buffer too
            // (io_uring: from the flush that reads the refusal).
            let again = match tx.send(Arc::clone(&bufs[0])) {
                Ok(()) => {
                    let e = tx.flush(Duration::from_secs(10)).expect_err("a reset socket");
                    assert_eq!(e.unsent().len(), 1, "{e}");
                    e
                }
                Err(e) => e.into_parts().0,
            };
            tx.flush(Duration::from_secs(10)).expect("flush after the error");
            drop((again, error, own));
            // Nothing kept: the sender and the kernel hold no buffer any more.
            for (i, b) in bufs.iter().enumerate() {
                assert_eq!(Arc::strong_count(b), 1, "{mode:?}: buffer {i} still held");
            }
        }
    }
}

each_path! {
    fn a_send_that_times_out_hands_its_buffer_back_and_flush_delivers_the_rest(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        // io_uring: one send per chain, so that a send waits for the previous one.
        let path = match path {
            SendPath::IoUring { ring_entries, .. } => SendPath::IoUring { batch: 1, ring_entries },
            path => path,
        };
        let mut cfg = path_config(path, Mode::ZeroCopy);
cfg.send_timeout = Some(Duration::from_millis(200));
        let mut tx = zcnet::tx::Sender::new(stream, cfg);
        // Nobody reads: the socket fills, and a send times out.
        let mut sent = Checksum::default();
        let mut timed_out = None;
        for k in 0..64u64 {
            let mut buf = vec![0u8; 1 << 20];
            fill(&mut buf, k << 20);
            match tx.send(buf) {
                Ok(()) => sent.update(&fill_of(k)),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), e.error().raw_os_error());
                    assert!(
                        matches!(e.error(), TxError::Timeout { .. })
                            || e.raw_os_error() == Some(libc::ETIMEDOUT),
                        "{e}"
                    );
                    timed_out = Some((k, e.into_parts().1));
                    break;
                }
            }
        }
        let (k, unsent) = timed_out.expect("64 MiB went out with nobody reading");
        let sink = std::thread::spawn(move || tx_common::read_checksum(server));
        // The part of the buffer sent is in the stream; the rest goes out now, once.
        assert_eq!(unsent.buf().as_slice(), fill_of(k).as_slice());
        sent.update(unsent.buf());
        tx.send_unsent(unsent).expect("the rest, once the peer reads");
        tx.flush(Duration::from_secs(20)).expect("flush once the peer reads");
        drop(tx.close(Duration::from_secs(1)).unwrap());
        assert_eq!(sink.join().unwrap(), sent, "every byte once, in order");
    }
}

/// The bytes of send `k` of the time-out test.
fn fill_of(k: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 1 << 20];
    fill(&mut buf, k << 20);
    buf
}

each_path! {
    /// A close that times out (nobody reads) hands back, inside its error, the buffers still
    /// queued and never submitted (io_uring queues them; sendmsg queues nothing), in order, the
    /// tail of the sends made; what reaches the peer is a prefix of the stream without them, and
    /// a stream that misses buffers so is reset, not ended cleanly.
    fn a_close_that_times_out_hands_back_what_it_never_submitted(path: SendPath) {
        let (stream, receiver) = tx_common::backlog_pair();
        // 48 distinct buffers of 256 KiB, 12 MiB: more than the socket buffers hold.
        let bufs = distinct_bufs(48, 256 << 10);
        let mut tx = zcnet::tx::Sender::new(stream, path_config(path, Mode::Copy));
        let mut accepted = 0;
        for buf in &bufs {
            match tx.try_send(Arc::clone(buf)) {
                Ok(()) => accepted += 1,
                // Whatever part of it the kernel took is in the stream: it counts as sent.
                Err(e) => {
                    if e.unsent().sent() > 0 {
                        accepted += 1;
                    }
                    break;
                }
            }
        }
        let handed_back = match tx.close(Duration::from_millis(100)) {
            Ok(socket) => {
                drop(socket);
                Vec::new()
            }
            Err(e) => {
                assert!(e.to_string().contains("handed back"), "{path:?}: {e}");
                e.into_unsent()
            }
        };
        if matches!(path, SendPath::IoUring { .. }) {
            assert!(
                !handed_back.is_empty(),
                "{path:?}: close handed back nothing of {accepted} sends queued"
            );
        }
        assert_tail_of_sends(&handed_back, &bufs, accepted - 1);
        let mut received = Vec::new();
        let reset = match std::io::Read::read_to_end(&mut &receiver, &mut received) {
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
            Err(e) => panic!("{path:?}: read: {e}"),
        };
        assert_eq!(reset, !handed_back.is_empty(), "{path:?}: reset iff buffers came back");
        let stream: Vec<u8> = bufs[..accepted].iter().flat_map(|b| b.iter().copied()).collect();
        assert!(
            stream.starts_with(&received),
            "{path:?}: {} bytes arrived, not a prefix of the stream",
            received.len()
        );
        let first_back = (accepted - handed_back.len()) * (256 << 10)
            + handed_back.first().map_or(0, UnsentBuf::sent);
        assert!(
            received.len() <= first_back,
            "{path:?}: bytes handed back arrived too"
        );
    }
}
