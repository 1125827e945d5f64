//! Sends that stop early hand the buffer back: `try_send` on a full send buffer (a peer that does not
//! read), a blocking `send` that times out; the rest then goes out in order, every byte exactly once.
//! A socket wrapped again after it sent zero-copy is not numbered from 0 again.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use tx_common::{Checksum, fill, read_checksum};
use zcnet::tx::{Mode, SenderConfig, TcpSender, TrySendError, Unsent};

const LEN: usize = 4 << 20;

fn pattern_vec(len: usize, pos: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, pos);
    v
}

/// A connected pair whose accepted end is handed back unread.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

#[test]
fn try_send_returns_would_block_with_the_unsent_rest() {
    let (client, server) = pair();
    client.set_nonblocking(true).unwrap();
    let raw = client.as_raw_fd();
    let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
    assert_eq!(tx.as_fd().as_raw_fd(), raw, "AsFd gives the socket");

    // The peer does not read: the send buffer fills and try_send must return, not wait. Run it in a
    // thread so that a send that blocks fails the test instead of hanging it.
    let (done, result) = mpsc::channel();
    let sender = thread::spawn(move || {
        let mut expect = Checksum::default();
        for i in 0..64u64 {
            let buf = pattern_vec(LEN, i * LEN as u64);
            expect.update(&buf);
            match tx.try_send(buf) {
                Ok(()) => {}
                Err(TrySendError::WouldBlock(unsent)) => {
                    done.send(()).unwrap();
                    return (tx, unsent, expect);
                }
                Err(e) => panic!("try_send: {e}"),
            }
        }
        panic!("64 sends of 4 MiB to a peer that does not read never filled the send buffer");
    });
    result
        .recv_timeout(Duration::from_secs(20))
        .expect("try_send blocked on a full send buffer");
    let (mut tx, mut unsent, expect) = sender.join().unwrap();
    assert!(
        unsent.sent() < LEN,
        "WouldBlock after {} bytes",
        unsent.sent()
    );
    assert_eq!(unsent.remaining().len(), LEN - unsent.sent());
    assert!(tx.stats().waits == 0, "try_send waited: {:?}", tx.stats());

    // The rest goes out once the peer reads, when the socket says it is writable.
    let reader = thread::spawn(move || read_checksum(server));
    loop {
        match tx.try_send_unsent(unsent) {
            Ok(()) => break,
            Err(TrySendError::WouldBlock(rest)) => {
                unsent = rest;
                let mut fds = [PollFd::new(&tx, PollFlags::OUT | PollFlags::ERR)];
                poll(&mut fds, None).expect("poll the sender");
                tx.poll_completions().expect("completions");
            }
            Err(e) => panic!("try_send_unsent: {e}"),
        }
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    drop(tx.close(Duration::from_secs(5)).expect("close"));
    assert_eq!(reader.join().unwrap(), expect, "bytes lost or repeated");
}

#[test]
fn a_timed_out_send_hands_back_the_rest() {
    let (client, server) = pair();
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.send_timeout = Some(Duration::from_millis(300));
    let mut tx = TcpSender::new(client, config);
    let buf = pattern_vec(64 << 20, 0);
    let mut expect = Checksum::default();
    expect.update(&buf);
    let err = tx
        .send(buf)
        .expect_err("64 MiB to a peer that does not read must time out");
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT), "{err}");
    let (_, mut unsent): (_, Unsent<Vec<u8>>) = err.into_parts();
    assert!(unsent.sent() < 64 << 20);

    // The rest, once the peer reads; a slow reader may time the send out again, each time handing
    // back what is left.
    let reader = thread::spawn(move || read_checksum(server));
    while let Err(e) = tx.send_unsent(unsent) {
        assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT), "{e}");
        unsent = e.into_parts().1;
    }
    tx.flush(Duration::from_secs(20)).expect("flush");
    drop(tx.close(Duration::from_secs(5)).expect("close"));
    assert_eq!(reader.join().unwrap(), expect, "bytes lost or repeated");
}

#[test]
fn a_buffer_nothing_was_sent_from_comes_back_whole() {
    let (client, server) = pair();
    client.set_nonblocking(true).unwrap();
    let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
    let mut last = None;
    for i in 0..64u64 {
        match tx.try_send(pattern_vec(LEN, i)) {
            Ok(()) => {}
            Err(TrySendError::WouldBlock(u)) => {
                last = Some(u);
                break;
            }
            Err(e) => panic!("try_send: {e}"),
        }
    }
    assert!(last.is_some(), "the send buffer never filled");
    // Now full: a further buffer is refused before any byte went, and it comes back as it was.
    let buf = pattern_vec(64 << 10, 99);
    let back = match tx.try_send(buf.clone()) {
        Err(TrySendError::WouldBlock(u)) => u,
        other => panic!("expected WouldBlock on a full send buffer, got {other:?}"),
    };
    assert_eq!(back.sent(), 0);
    assert_eq!(back.into_buf().expect("no id covers it"), buf);
    drop(server);
}

#[test]
fn a_socket_that_sent_zero_copy_before_is_not_numbered_from_zero_again() {
    let (client, server) = pair();
    let reader = thread::spawn(move || read_checksum(server));
    let mut expect = Checksum::default();
    let mut first = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
    for i in 0..4u64 {
        let buf = pattern_vec(256 << 10, i * (256 << 10));
        expect.update(&buf);
        first.send(buf).expect("send");
    }
    assert!(first.stats().zc_calls > 0);
    let socket = first.close(Duration::from_secs(10)).expect("close");
    let clone = socket.try_clone().unwrap();

    // The kernel's id counter stands at 4 or more: a new sender numbering from 0 would take a
    // completion of id 4 for its own id 4, five sends later. It must copy instead, and say why.
    for wrapped in [socket, clone] {
        let mut again = TcpSender::new(wrapped, SenderConfig::with_mode(Mode::ZeroCopy));
        let why = again
            .zerocopy_status()
            .expect_err("a socket that already had SO_ZEROCOPY must not be sent zero-copy");
        assert!(
            why.to_string().contains("SO_ZEROCOPY was already on"),
            "{why}"
        );
        for i in 0..4u64 {
            let buf = pattern_vec(256 << 10, expect.len + i);
            expect.update(&buf);
            again.send(buf).expect("send by copy");
        }
        assert_eq!(again.stats().zc_calls, 0, "{:?}", again.stats());
        drop(again.close(Duration::from_secs(10)).expect("close"));
    }
    assert_eq!(reader.join().unwrap(), expect, "bytes lost or repeated");
}
