//! UringSender at its limits and after failures: a stream part over 4 GiB goes out once, in order,
//! between normal parts (the kernel cuts longer requests short, and an SQE's length is 32 bits); a
//! datagram too long for one request is refused and handed back; a peer reset mid-chain hands back
//! every buffer not sent, in order, including the one of the call that reports it; a send that times
//! out keeps its buffer queued; flush after each error succeeds and leaves nothing lent.

mod tx_common;
mod uring_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use tx_common::{Checksum, fill, pool, tcp_pair};
use uring_common::{config, send_zc_available};
use zcnet::tx::Mode;
use zcnet::uring::{UnsentBuf, UringConfig, UringError, UringTcpSender, UringUdpSender};

/// 4 GiB and one byte: over `u32::MAX` and over the kernel's `MAX_RW_COUNT`.
const HUGE: usize = (4 << 30) + 1;

/// A zeroed buffer of `len` bytes that costs no memory: a fresh zeroed allocation is mapped on
/// demand, and reading it (the kernel does, sending it) maps only the shared zero page.
fn zeroes(len: usize) -> Vec<u8> {
    vec![0u8; len]
}

#[test]
fn a_stream_part_over_4_gib_arrives_once_between_normal_parts() {
    if !send_zc_available("a_stream_part_over_4_gib_arrives_once_between_normal_parts") {
        return;
    }
    // The default policy (auto): zero-copy for large sends, as long as the kernel takes them.
    {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (stream, sink): (TcpStream, _) = tcp_pair(listener);
        let cfg = UringConfig {
            send_timeout: Some(Duration::from_secs(60)),
            ..UringConfig::default()
        };
        let mut tx = UringTcpSender::new(stream, cfg).expect("io_uring");
        let pool = pool(64 << 10, 4);
        tx.register_pool(&pool).ok();
        let mut sent = Checksum::default();
        let patterned = |tx: &mut UringTcpSender, sent: &mut Checksum, size: usize| {
            let mut buf = uring_common::take(&pool, tx).expect("a pool buffer");
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

#[test]
fn a_datagram_too_long_for_one_request_is_refused_and_handed_back() {
    if !send_zc_available("a_datagram_too_long_for_one_request_is_refused_and_handed_back") {
        return;
    }
    let sink = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    socket.connect(sink.local_addr().unwrap()).unwrap();
    let mut tx = UringUdpSender::new(socket, config(Mode::ZeroCopy)).unwrap();
    let huge = Arc::new(zeroes(HUGE));
    let err = tx
        .send(Arc::clone(&huge))
        .expect_err("one request cannot carry it");
    assert!(
        matches!(err, UringError::TooLong { len: HUGE, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("datagram"), "{err}");
    let back = err.into_unsent();
    assert_eq!(back.len(), 1);
    let back = back.into_iter().next().unwrap();
    assert_eq!(back.sent(), 0);
    let back = back.downcast::<Arc<Vec<u8>>>().expect("the type sent");
    assert!(Arc::ptr_eq(&back.into_buf().unwrap(), &huge));
    // Nothing was queued: the next datagram goes out alone, and flush has nothing to wait for.
    tx.send(vec![5u8; 100]).unwrap();
    tx.flush(Duration::from_secs(10)).expect("flush");
    let mut got = [0u8; 200];
    assert_eq!(sink.recv(&mut got).unwrap(), 100);
}

/// Checks `unsent` against the sends made: the buffers of sends `first..=last` (send `k` lent
/// `bufs[k % bufs.len()]`), in order, only the first possibly begun.
fn assert_tail_of_sends(unsent: &[UnsentBuf], bufs: &[Arc<Vec<u8>>], last: usize) {
    assert!(!unsent.is_empty());
    let first = last + 1 - unsent.len();
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

#[test]
fn a_peer_reset_mid_chain_hands_back_every_buffer_not_sent() {
    if !send_zc_available("a_peer_reset_mid_chain_hands_back_every_buffer_not_sent") {
        return;
    }
    for mode in [Mode::ZeroCopy, Mode::Copy] {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = tx_common::resetting_peer(listener);
        let stream = TcpStream::connect(addr).unwrap();
        let mut tx = UringTcpSender::new(stream, config(mode)).unwrap();
        // 48 distinct buffers lent over and over: a buffer handed back is recognised by address.
        let bufs: Vec<Arc<Vec<u8>>> = (0..48u64)
            .map(|k| {
                let mut b = vec![0u8; 64 << 10];
                fill(&mut b, k << 16);
                Arc::new(b)
            })
            .collect();
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
        assert!(err.to_string().contains("handed back"), "{err}");
        // The call that reported the error hands back its own buffer too, last.
        assert_tail_of_sends(err.unsent(), &bufs, k);
        tx.flush(Duration::from_secs(10))
            .expect("nothing more after the error");
        assert_eq!(tx.outstanding(), 0);
        // Sends after the error are refused by the kernel and hand back their buffer too.
        let again = tx.send(Arc::clone(&bufs[0]));
        let again = match again {
            Ok(()) => tx
                .flush(Duration::from_secs(10))
                .expect_err("a reset socket"),
            Err(e) => e,
        };
        assert_eq!(again.unsent().len(), 1, "{again}");
        tx.flush(Duration::from_secs(10))
            .expect("flush after the error");
        drop(again);
        drop(err);
        // Nothing kept: the sender and the kernel hold no buffer any more.
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(Arc::strong_count(b), 1, "{mode:?}: buffer {i} still held");
        }
    }
}

#[test]
fn a_send_that_times_out_keeps_its_buffer_queued_and_flush_delivers_it() {
    if !send_zc_available("a_send_that_times_out_keeps_its_buffer_queued_and_flush_delivers_it") {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let cfg = UringConfig {
        batch: 1,
        send_timeout: Some(Duration::from_millis(200)),
        ..UringConfig::with_mode(Mode::ZeroCopy)
    };
    let mut tx = UringTcpSender::new(stream, cfg).unwrap();
    // Nobody reads: the socket fills, a request waits in the kernel, and a send times out.
    let mut sent = Checksum::default();
    let mut timed_out = false;
    for k in 0..64u64 {
        let mut buf = vec![0u8; 1 << 20];
        fill(&mut buf, k << 20);
        sent.update(&buf);
        match tx.send(buf) {
            Ok(()) => {}
            Err(UringError::Timeout { .. }) => {
                timed_out = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(timed_out, "64 MiB went out with nobody reading");
    let sink = std::thread::spawn(move || tx_common::read_checksum(server));
    tx.flush(Duration::from_secs(20))
        .expect("flush once the peer reads");
    drop(tx.close(Duration::from_secs(1)).unwrap());
    assert_eq!(
        sink.join().unwrap(),
        sent,
        "the timed-out buffer went out once"
    );
}
