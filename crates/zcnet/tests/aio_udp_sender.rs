//! `AsyncSender<UdpSocket>` does what `UdpSender` does, without holding a runtime thread:
//! `send_to` on an unconnected socket, GSO segment size and cork changes that apply to the
//! datagrams sent after them only, `get_mut`/`get_ref`/`into_inner`, stats — each checked against
//! a real UDP receiver, every datagram's bytes and boundaries.

mod tx_common;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use tx_common::path_config;
use zcnet::aio::AsyncSender;
use zcnet::tx::{Mode, SendPath, TxError};

/// The bytes of datagram `k`, `len` long.
fn datagram(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + k * 31) as u8).collect()
}

/// A receiver on loopback with room for everything a test sends.
fn receiver() -> UdpSocket {
    let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&rx, 4 << 20).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rx
}

/// The next datagram `rx` receives, whole. io_uring posts a request's completion by work on the
/// thread that submitted it, which interrupts a wait of that thread that has a timeout (`EINTR`).
fn recv(rx: &UdpSocket) -> Vec<u8> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match rx.recv(&mut buf) {
            Ok(n) => return buf[..n].to_vec(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("a datagram is missing: {e}"),
        }
    }
}

/// An async sender on `path` over a new socket, connected to `to` when given.
fn sender(path: SendPath, to: Option<SocketAddr>) -> AsyncSender<UdpSocket> {
    let socket = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    if let Some(to) = to {
        socket.connect(to).unwrap();
    }
    socket.set_nonblocking(true).unwrap();
    let socket = tokio::net::UdpSocket::from_std(socket).unwrap();
    let tx = AsyncSender::from_tokio(socket, path_config(path, Mode::ZeroCopy)).unwrap();
    assert_eq!(
        tx.get_ref().path(),
        path,
        "{:?}",
        tx.get_ref().path_status()
    );
    tx
}

each_path! {
    /// `send_to` on an unconnected socket: two receivers, datagrams of many sizes to each in turn,
    /// each arriving whole with its bytes. io_uring refuses it and hands the datagram back.
    async fn send_to_reaches_each_destination_whole(path: SendPath) {
        let receivers = [receiver(), receiver()];
        let mut tx = sender(path, None);
        let sizes = [0, 1, 100, 1472, 4096, 20_000, 65_000];
        if matches!(path, SendPath::IoUring { .. }) {
            let dest = receivers[0].local_addr().unwrap();
            let e = tx.send_to(datagram(0, 100), dest).await.expect_err("refused");
            let (error, unsent) = e.into_parts();
            assert!(matches!(error, TxError::Unsupported { .. }), "{error}");
            assert_eq!(unsent.into_buf().expect("handed back"), datagram(0, 100));
            return;
        }
        for (k, len) in sizes.into_iter().enumerate() {
            for rx in &receivers {
                tx.send_to(datagram(k, len), rx.local_addr().unwrap()).await.expect("send_to");
            }
        }
        tx.flush().await.expect("flush");
        for rx in &receivers {
            for (k, len) in sizes.into_iter().enumerate() {
                assert_eq!(recv(rx), datagram(k, len), "datagram {k} of {len} bytes");
            }
        }
        let stats = tx.stats().clone();
        assert_eq!(stats.bytes, 2 * sizes.iter().sum::<usize>() as u64, "{stats:?}");
        assert_eq!(tx.outstanding(), 0);
    }
}

each_path! {
    /// A GSO segment size applies to the datagrams sent after it only, even with sends still
    /// queued (io_uring): 10,000 bytes sent under 1,000-byte segments arrive as ten datagrams,
    /// then without GSO as one.
    async fn gso_changes_apply_to_the_sends_after_them(path: SendPath) {
        let rx = receiver();
        let mut tx = sender(path, Some(rx.local_addr().unwrap()));
        tx.send(datagram(0, 3000)).await.expect("send");
        tx.set_gso_segment(Some(1000)).await.expect("UDP_SEGMENT");
        tx.send(datagram(1, 10_000)).await.expect("send");
        tx.send(datagram(2, 2500)).await.expect("send");
        tx.set_gso_segment(None).await.expect("UDP_SEGMENT off");
        tx.send(datagram(3, 5000)).await.expect("send");
        tx.flush().await.expect("flush");
        assert_eq!(recv(&rx), datagram(0, 3000), "sent before GSO: whole");
        for (k, len) in [(1, 10_000), (2, 2500)] {
            let whole = datagram(k, len);
            for segment in whole.chunks(1000) {
                assert_eq!(recv(&rx), segment, "datagram {k}: a 1000-byte segment");
            }
        }
        assert_eq!(recv(&rx), datagram(3, 5000), "sent after GSO is off: whole");
    }
}

each_path! {
    /// Corked, three sends make one datagram, sent at the uncork; the sends before the cork go
    /// out on their own.
    async fn corked_sends_make_one_datagram(path: SendPath) {
        let rx = receiver();
        let mut tx = sender(path, Some(rx.local_addr().unwrap()));
        tx.send(datagram(0, 700)).await.expect("send");
        tx.set_cork(true).await.expect("cork");
        let parts = [datagram(1, 1000), datagram(2, 3000), datagram(3, 10)];
        for part in &parts {
            tx.send(part.clone()).await.expect("send");
        }
        tx.set_cork(false).await.expect("uncork");
        tx.send(datagram(4, 1200)).await.expect("send");
        tx.flush().await.expect("flush");
        assert_eq!(recv(&rx), datagram(0, 700));
        assert_eq!(recv(&rx), parts.concat(), "the corked sends, as one datagram");
        assert_eq!(recv(&rx), datagram(4, 1200));
    }
}

each_path! {
    /// `get_mut` reaches the sender (its settings), `into_inner` gives it back, deregistered, with
    /// its stats; the blocking sender then goes on where the async one stopped.
    async fn get_mut_and_into_inner_reach_the_sender(path: SendPath) {
        let rx = receiver();
        let mut tx = sender(path, Some(rx.local_addr().unwrap()));
        tx.send(datagram(0, 2000)).await.expect("send");
        tx.flush().await.expect("flush");
        let before = tx.stats().clone();
        assert_eq!(tx.get_mut().stats(), &before);
        let mut blocking = tx.into_inner().expect("nothing queued");
        assert_eq!(blocking.stats(), &before);
        blocking.send(datagram(1, 3000)).expect("send");
        blocking.flush(Duration::from_secs(10)).expect("flush");
        assert_eq!(blocking.stats().bytes, before.bytes + 3000);
        assert_eq!(recv(&rx), datagram(0, 2000));
        assert_eq!(recv(&rx), datagram(1, 3000));
    }
}

each_path! {
    /// A GSO train of more segments than the kernel takes (200: `UDP_MAX_SEGMENTS` is 64, 128
    /// since Linux 6.9) fails and comes back whole inside the error; the datagrams around it
    /// arrive once each, with their bytes, the last segment of a train that does not divide
    /// shorter (io_uring: the flush fails, handing it back).
    async fn a_gso_train_too_long_comes_back_whole(path: SendPath) {
        let rx = receiver();
        let mut tx = sender(path, Some(rx.local_addr().unwrap()));
        tx.set_gso_segment(Some(100)).await.expect("UDP_SEGMENT");
        tx.send(datagram(0, 199)).await.expect("send");
        let too_long = datagram(1, 200 * 100);
        if path == SendPath::SENDMSG {
            let e = tx.send(too_long.clone()).await.expect_err("200 segments");
            assert_eq!(e.error().raw_os_error(), Some(libc::EINVAL), "{e}");
            let (_, unsent) = e.into_parts();
            assert_eq!(unsent.into_buf().expect("nothing of it sent"), too_long);
        } else {
            // Queued: its request fails later, and the flush hands it back.
            tx.send(too_long.clone()).await.expect("queued");
            let e = tx.flush().await.expect_err("200 segments");
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
            let unsent: Vec<_> = e.unsent().iter().map(|u| u.remaining()).collect();
            assert_eq!(unsent, [&too_long[..]], "{e}");
        }
        tx.send(datagram(2, 64 * 100)).await.expect("64 segments");
        tx.flush().await.expect("flush");
        assert_eq!(recv(&rx), datagram(0, 199)[..100]);
        assert_eq!(recv(&rx), datagram(0, 199)[100..]);
        for segment in datagram(2, 64 * 100).chunks(100) {
            assert_eq!(recv(&rx), segment, "datagram 2: a 100-byte segment");
        }
        rx.set_nonblocking(true).unwrap();
        assert!(rx.recv(&mut [0; 16]).is_err(), "a datagram more than sent");
    }
}
