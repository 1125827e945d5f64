//! Dropping a sender without `close`: every byte `send` accepted arrives, as closing a socket
//! delivers its send buffer (on io_uring the reaper submits the sends still queued and waits for
//! the kernel to take them; a dropped `AsyncSender`'s queue is sent by the reaper too); and
//! a TCP stream that cannot be finished so is reset, never ended cleanly with bytes missing.

mod tx_common;

use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use tokio::time::timeout;
use tx_common::{Checksum, fill, path_config, pool, small_pair};
use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SendPath, TcpSender};

/// How a stream read to its end ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// A clean end (FIN).
    Closed,
    /// `ECONNRESET`: the sender cut the stream.
    Reset,
}

/// Reads `conn` to its end (each read bounded by 60 s): the checksum of what arrived, checked to be
/// the stream pattern from position 0, and how the stream ended.
fn read_stream(mut conn: TcpStream) -> (Checksum, End) {
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut sum = Checksum::default();
    let mut buf = vec![0u8; 256 << 10];
    let mut expected = vec![0u8; buf.len()];
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => return (sum, End::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return (sum, End::Reset),
            Err(e) => panic!("read after {} bytes: {e}", sum.len),
        };
        fill(&mut expected[..n], sum.len);
        assert!(
            buf[..n] == expected[..n],
            "bytes {}..{} are not the stream sent",
            sum.len,
            sum.len + n as u64
        );
        sum.update(&buf[..n]);
    }
}

/// `len` bytes of the stream pattern, from `sum`'s position on, added to `sum`.
fn next_bytes(sum: &mut Checksum, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    fill(&mut b, sum.len);
    sum.update(&b);
    b
}

each_path! {
    /// Sends of every size, from a pool and from owned vectors, fewer than an io_uring batch (so
    /// that they are still queued there), then a drop: all of them arrive, in order, and the
    /// stream ends cleanly.
    fn a_dropped_sender_delivers_every_byte_it_accepted(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let reader = thread::spawn(move || read_stream(listener.accept().unwrap().0));
        let pool = pool(64 << 10, 8);
        let mut tx = tx_common::sender_on(client, path_config(path, Mode::ZeroCopy), &pool);
        let mut sent = Checksum::default();
        for &size in &tx_common::STREAM_SIZES {
            let mut buf = pool.take().expect("a free pool buffer");
            sent.fill_next(&mut buf, size);
            tx.send(buf).expect("send");
            tx.send(next_bytes(&mut sent, size + 3)).expect("send");
        }
        drop(tx);
        assert_eq!(reader.join().unwrap(), (sent, End::Closed), "{path:?}");
    }
}

each_path! {
    /// Nobody reads, and sends go on until one fails with the send timeout (its rest handed back)
    /// or 64 MiB were accepted; then the drop, and the peer reads once the reaper's bound (the
    /// send timeout) has passed. On `sendmsg` every accepted byte is in the kernel already and the
    /// stream ends cleanly; on io_uring sends accepted into the queue cannot be taken before the
    /// reaper's bound runs out, and the stream is reset. Either way no stream misses an accepted
    /// byte and still ends cleanly.
    fn a_dropped_sender_that_cannot_deliver_resets_the_stream(path: SendPath) {
        let (client, server) = small_pair();
        let mut config = path_config(path, Mode::Copy);
        config.send_timeout = Some(Duration::from_millis(300));
        let mut tx = TcpSender::new(client, config);
        let mut accepted = Checksum::default();
        let mut cut = false;
        while accepted.len < 64 << 20 {
            let mut next = accepted;
            let buf = next_bytes(&mut next, 16 << 10);
            match tx.send(buf) {
                Ok(()) => accepted = next,
                Err(e) => {
                    let (error, unsent) = e.into_parts();
                    let timed_out = std::io::Error::from(error).kind() == ErrorKind::TimedOut;
                    assert!(timed_out, "{path:?}: a send failed, not by the send timeout");
                    // A stream send taken in part keeps its prefix in the stream.
                    accepted.update(&unsent.buf()[..unsent.sent()]);
                    cut = true;
                    break;
                }
            }
        }
        assert!(cut, "{path:?}: 64 MiB accepted by a socket nobody reads");
        drop(tx);
        // The reaper holds the dropped sender for its send timeout: the peer reads after that.
        thread::sleep(Duration::from_millis(900));
        let (got, end) = read_stream(server);
        match path {
            SendPath::Sendmsg { .. } => assert_eq!((got, end), (accepted, End::Closed)),
            _ => assert_eq!(end, End::Reset, "{path:?}: {} of {} bytes", got.len, accepted.len),
        }
    }
}

each_path! {
    /// Nobody reads while send futures are dropped at their first wait (their rests queued in the
    /// `AsyncSender`, or in the io_uring sender's own queue); then the sender is dropped, not
    /// closed, and a reader starts: every buffer arrives, in order, and the stream ends cleanly.
    async fn a_dropped_async_sender_finishes_its_queue(path: SendPath) {
        const LEN: usize = 16 << 10;
        let (client, server) = small_pair();
        let mut tx = AsyncSender::new(TcpSender::new(client, path_config(path, Mode::ZeroCopy)))
            .unwrap();
        let mut sent = Checksum::default();
        let mut dropped = 0;
        for _ in 0..200 {
            let buf = next_bytes(&mut sent, LEN);
            if timeout(Duration::from_millis(1), tx.send(buf)).await.is_err() {
                dropped += 1;
            }
        }
        assert!(dropped > 64, "{path:?}: only {dropped} send futures dropped");
        drop(tx);
        let reader = tokio::task::spawn_blocking(move || read_stream(server));
        assert_eq!(reader.await.unwrap(), (sent, End::Closed), "{path:?}");
    }
}

each_path! {
    /// As above, but nobody reads before the drop's sends run out of their 300 ms send timeout:
    /// the stream is reset, so its peer cannot take what arrived for all of it.
    async fn a_dropped_async_sender_that_cannot_finish_resets_the_stream(path: SendPath) {
        let (client, server) = small_pair();
        let mut config = path_config(path, Mode::Copy);
        config.send_timeout = Some(Duration::from_millis(300));
        let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
        let mut sent = Checksum::default();
        for _ in 0..200 {
            let _ = timeout(Duration::from_millis(1), tx.send(next_bytes(&mut sent, 16 << 10))).await;
        }
        drop(tx);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let reader = tokio::task::spawn_blocking(move || read_stream(server));
        let (got, end) = reader.await.unwrap();
        assert_eq!(end, End::Reset, "{path:?}: {} of {} bytes", got.len, sent.len);
    }
}

each_path! {
    /// A runtime shut down under a task whose sender holds queued sends (nobody read yet): the
    /// task is dropped unfinished, and every buffer still arrives, in order, ending cleanly.
    fn a_sender_dropped_with_its_runtime_finishes_its_queue(path: SendPath) {
        const LEN: usize = 16 << 10;
        let (client, server) = small_pair();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let sent = runtime.block_on(async {
            let config = path_config(path, Mode::ZeroCopy);
            let mut tx = AsyncSender::new(TcpSender::new(client, config)).unwrap();
            let mut sent = Checksum::default();
            for _ in 0..200 {
                let _ = timeout(Duration::from_millis(1), tx.send(next_bytes(&mut sent, LEN))).await;
            }
            assert!(tx.queued() > 64, "{path:?}: only {} buffers queued", tx.queued());
            tokio::spawn(async move {
                let _held = tx;
                std::future::pending::<()>().await;
            });
            sent
        });
        let reader = thread::spawn(move || read_stream(server));
        drop(runtime);
        assert_eq!(reader.join().unwrap(), (sent, End::Closed), "{path:?}");
    }
}

each_path! {
    /// Five datagrams, fewer than an io_uring batch, then a drop: each arrives, whole, in order.
    fn a_dropped_udp_sender_sends_its_queued_datagrams(path: SendPath) {
        let rx = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        socket.connect(rx.local_addr().unwrap()).unwrap();
        let mut tx = zcnet::tx::UdpSender::new(socket, path_config(path, Mode::ZeroCopy));
        let mut sent = Checksum::default();
        let sizes = [1, 1000, 12_000, 30_000, 65_000];
        for size in sizes {
            tx.send(next_bytes(&mut sent, size)).expect("send");
        }
        drop(tx);
        let mut got = Checksum::default();
        let mut buf = vec![0u8; 1 << 16];
        for size in sizes {
            // io_uring posts a request's completion by work on the thread that submitted it, which
            // interrupts that thread's waits (EINTR where the wait has a timeout).
            let n = loop {
                match rx.recv(&mut buf) {
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            let n = n.unwrap_or_else(|e| panic!("{path:?}: datagram of {size}: {e}"));
            assert_eq!(n, size, "{path:?}");
            got.update(&buf[..n]);
        }
        assert_eq!(got, sent, "{path:?}");
    }
}

each_path! {
    /// A thread that panics holding a sender with sends queued (nobody reads): the unwinding drop
    /// does not wait, and a stream that misses bytes is reset, not ended cleanly.
    fn a_sender_dropped_by_a_panic_does_not_wait(path: SendPath) {
        let (client, server) = small_pair();
        let sender = thread::spawn(move || {
            let mut tx = TcpSender::new(client, path_config(path, Mode::Copy));
            let mut sent = Checksum::default();
            // Fill the socket, then queue more (io_uring) or wait (sendmsg) no longer than this.
            while tx.try_send(next_bytes(&mut sent, 16 << 10)).is_ok() {}
            for _ in 0..4 {
                let _ = tx.try_send(next_bytes(&mut sent, 1000));
            }
            let queued = tx.queued();
            let started = std::time::Instant::now();
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
                let _tx = tx;
                panic!("a panic while the sender holds {queued} queued sends");
            }));
            assert!(unwound.is_err());
            (queued, started.elapsed())
        });
        let (queued, took) = sender.join().unwrap();
        if matches!(path, SendPath::IoUring { .. }) {
            assert!(queued > 0, "the io_uring sender queued nothing");
        }
        assert!(took < Duration::from_secs(5), "{path:?}: the unwinding drop waited {took:?}");
        let (got, end) = read_stream(server);
        if queued > 0 {
            assert_eq!(end, End::Reset, "{path:?}: {} bytes, {queued} sends queued", got.len);
        }
    }
}

each_path! {
    /// An `AsyncSender` whose every send went out, flushed, then dropped by a panic: nothing was
    /// cut, so the stream ends cleanly with every byte.
    async fn an_async_sender_with_nothing_queued_dropped_by_a_panic_ends_cleanly(path: SendPath) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let reader = thread::spawn(move || read_stream(listener.accept().unwrap().0));
        let mut tx = AsyncSender::new(TcpSender::new(client, path_config(path, Mode::Copy)))
            .unwrap();
        let mut sent = Checksum::default();
        for _ in 0..8 {
            tx.send(next_bytes(&mut sent, 10_000)).await.expect("send");
        }
        tx.flush().await.expect("flush");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _tx = tx;
            panic!("a panic after every send went out");
        }));
        assert!(unwound.is_err());
        assert_eq!(reader.join().unwrap(), (sent, End::Closed), "{path:?}");
    }
}
