//! The receiver over loopback with a plain `send()` sender (IPv4 and IPv6): every message-size pattern
//! arrives byte-exact with and without copybuf, nothing maps (this kernel cannot map a plain sender's
//! pages), and the fallback to `recv` is recorded, as is whether copybuf was used.

mod rx_util;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::thread;

use rx_util::{ALL_PATTERNS, Pattern, SendWith, send_pattern, stream_bytes, transfer};
use zcnet::rx::{AutoChoice, AutoReason, Receiver, Release, RxConfig, RxMode, sender};
use zcnet::{Cause, Fallback};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

fn plain_sender_run(
    ip: IpAddr,
    pattern: Pattern,
    config: RxConfig,
    len: usize,
) -> (rx_util::Received, Receiver) {
    let (client, server) = sender::connect_page_mss(ip).expect("loopback pair");
    transfer(client, server, len, (pattern, SendWith::Plain), config)
}

fn pattern_len(pattern: Pattern) -> usize {
    match pattern {
        Pattern::OneByte => 20_000,
        _ => 3 << 20,
    }
}

#[test]
fn plain_sender_maps_nothing_but_every_pattern_arrives_intact() {
    for ip in [V4, V6] {
        for pattern in ALL_PATTERNS {
            for copybuf in [true, false] {
                let config = rx_util::keep_trying(copybuf);
                let (got, rx) = plain_sender_run(ip, pattern, config, pattern_len(pattern));
                assert_eq!(
                    got.stats.mapped_bytes, 0,
                    "{ip} {pattern:?} copybuf={copybuf}"
                );
                assert!(got.stats.zerocopy_calls > 0);
                if copybuf {
                    assert!(
                        got.stats.copybuf_bytes > 0,
                        "{ip} {pattern:?}: copybuf unused"
                    );
                    assert_eq!(rx.copybuf_status(), Ok(()), "{ip} {pattern:?}");
                } else {
                    assert_eq!(got.stats.copybuf_bytes, 0);
                    let why = rx.copybuf_status().expect_err("copybuf off");
                    assert_eq!(why.cause(), &Cause::Requested);
                    assert!(why.remedy().contains("RxConfig::copybuf"), "{why}");
                }
            }
        }
    }
}

#[test]
fn nothing_mapped_falls_back_to_recv_and_records_why() {
    let mut config = RxConfig::default();
    config.mode = RxMode::ZeroCopy;
    config.give_up_after = Some(1 << 20);
    let (client, server) = sender::connect_page_mss(V4).expect("loopback pair");
    let (got, rx) = transfer(
        client,
        server,
        4 << 20,
        (Pattern::PageMultiples, SendWith::Plain),
        config,
    );
    match rx.zerocopy_status().err().map(Fallback::cause) {
        Some(Cause::Observed(what)) => assert!(what.contains("could be mapped"), "{what}"),
        other => panic!("expected a fallback for nothing mapped, got {other:?}"),
    }
    assert!(rx.stats().copied_bytes() >= 1 << 20);
    assert!(got.stats.recv_bytes > 0);
}

#[test]
fn copy_mode_reads_with_recv_only() {
    let mut config = RxConfig::default();
    config.mode = RxMode::Copy;
    for pattern in ALL_PATTERNS {
        let (got, _) = plain_sender_run(V6, pattern, config.clone(), pattern_len(pattern));
        assert_eq!(got.stats.zerocopy_calls, 0);
        assert_eq!(got.stats.recv_bytes, got.bytes);
    }
}

#[test]
fn lazy_release_and_low_water_keep_the_stream_intact() {
    let mut config = RxConfig::default();
    config.mode = RxMode::ZeroCopy;
    config.release = Release::Lazy;
    config.low_water = Some(64 << 10);
    config.window = 256 << 10;
    config.give_up_after = None;
    for pattern in [Pattern::OddSizes, Pattern::EorHeaders] {
        let (got, _) = plain_sender_run(V4, pattern, config.clone(), 1 << 20);
        assert_eq!(got.stats.zaps, 0);
    }
}

#[test]
fn page_mss_pair_sends_one_page_per_segment() {
    for ip in [V4, V6] {
        let (client, server) = sender::connect_page_mss(ip).expect("loopback pair");
        use std::os::fd::AsFd;
        assert_eq!(sender::current_mss(client.as_fd()).unwrap(), 4096, "{ip}");
        assert_eq!(sender::current_mss(server.as_fd()).unwrap(), 4096, "{ip}");
    }
}

#[test]
fn non_blocking_receiver_reports_would_block_and_loses_nothing() {
    let (client, server) = sender::connect_page_mss(V6).expect("loopback pair");
    server.set_nonblocking(true).unwrap();
    let mut config = RxConfig::default();
    config.give_up_after = None;
    let mut rx = Receiver::new(server, config).expect("receiver");
    // Nothing has been sent yet: the queue is empty.
    let err = rx.recv().expect_err("an empty non-blocking socket");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
    let bytes = stream_bytes(2 << 20, 11);
    let to_send = bytes.clone();
    let writer =
        thread::spawn(move || send_pattern(client, &to_send, Pattern::OddSizes, SendWith::Plain));
    let mut next = 0usize;
    loop {
        match rx.recv() {
            Ok(Some(chunk)) => {
                assert_eq!(chunk.offset(), next as u64);
                assert!(chunk[..] == bytes[next..next + chunk.len()]);
                next += chunk.len();
            }
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) => panic!("receive: {e}"),
        }
    }
    writer.join().expect("sender");
    assert_eq!(next, bytes.len());
}

/// Receives until an error, checking every chunk against `bytes` (a prefix of them arrives: what
/// the receiver's socket had not taken when the reset came is dropped with the connection); returns
/// the error and the receiver.
fn receive_until_error(
    mut rx: Receiver,
    bytes: &[u8],
    what: &str,
) -> (zcnet::rx::RxError, Receiver) {
    let mut next = 0usize;
    let err = loop {
        match rx.recv() {
            Ok(Some(chunk)) => {
                assert!(chunk[..] == bytes[next..next + chunk.len()], "{what}");
                next += chunk.len();
            }
            Ok(None) => panic!("{what}: a reset ended the stream cleanly"),
            Err(e) => break e,
        }
    };
    (err, rx)
}

/// Runs `f` on another thread and returns what it returns, failing the test if that takes more
/// than 5 s (a receiver spinning on a closed socket never returns).
fn within_5s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(f());
    });
    result
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("{what}: the receiver did not return within 5 s"))
}

/// Receives from `rx` (within 5 s) until an error, which must be a reset, and then receives once
/// more, which must give the reset again.
fn assert_ends_in_resets(rx: Receiver, bytes: &std::sync::Arc<Vec<u8>>, what: &str) {
    let (expected, label) = (bytes.clone(), what.to_string());
    let (err, mut rx) = within_5s(what, move || receive_until_error(rx, &expected, &label));
    assert_eq!(
        err.kind(),
        std::io::ErrorKind::ConnectionReset,
        "{what}: {err}"
    );
    let again = within_5s(what, move || {
        rx.recv().map(|c| c.map(|c| c.len())).map_err(|e| e.kind())
    });
    assert_eq!(
        again,
        Err(std::io::ErrorKind::ConnectionReset),
        "{what}: after the reset"
    );
}

#[test]
fn reset_surfaces_after_the_bytes_before_it_and_again_after() {
    let bytes = std::sync::Arc::new(stream_bytes(300_000, 3));
    for ip in [V4, V6] {
        for mode in [RxMode::ZeroCopy, RxMode::Auto, RxMode::Copy] {
            let what = format!("{ip} {mode:?}");
            let mut config = rx_util::keep_trying(true);
            config.mode = mode;
            let rx = Receiver::new(rx_util::reset_after(ip, &bytes), config).expect("receiver");
            assert_ends_in_resets(rx, &bytes, &what);
        }
    }
}

#[test]
fn a_reset_whose_error_was_read_elsewhere_is_still_a_reset_while_mapping() {
    let bytes = std::sync::Arc::new(stream_bytes(300_000, 4));
    for ip in [V4, V6] {
        let what = ip.to_string();
        let server = rx_util::reset_after(ip, &bytes);
        // SO_ERROR takes the reset's error off the socket: no receive sees it from the kernel.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while server.take_error().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "{ip}: no reset arrived"
            );
            thread::sleep(std::time::Duration::from_millis(1));
        }
        let rx = Receiver::new(server, rx_util::keep_trying(true)).expect("receiver");
        assert_ends_in_resets(rx, &bytes, &what);
    }
}

#[test]
fn a_stream_shut_down_for_reading_ends_instead_of_spinning() {
    for ip in [V4, V6] {
        let (client, server) = sender::connect_page_mss(ip).expect("loopback pair");
        server.shutdown(std::net::Shutdown::Read).unwrap();
        let mut rx = Receiver::new(server, rx_util::keep_trying(true)).expect("receiver");
        let end = within_5s(&ip.to_string(), move || {
            rx.recv()
                .map(|c| c.map(|c| c.len()))
                .map_err(|e| e.to_string())
        });
        assert_eq!(end, Ok(None), "{ip}");
        drop(client);
    }
}

#[test]
fn socket_without_tcp_mmap_falls_back_with_the_errno_and_loses_nothing() {
    // A Unix stream socket has no mmap (ENODEV): the receiver must record that and read with recv.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let client = std::net::TcpStream::from(std::os::fd::OwnedFd::from(a));
    let server = std::net::TcpStream::from(std::os::fd::OwnedFd::from(b));
    let (got, rx) = transfer(
        client,
        server,
        1 << 20,
        (Pattern::OddSizes, SendWith::Plain),
        RxConfig::default(),
    );
    assert_eq!(
        rx.zerocopy_status().err().map(Fallback::cause),
        Some(&Cause::Refused {
            call: "mmap of the socket",
            errno: libc::ENODEV
        })
    );
    assert_eq!(got.stats.zerocopy_calls, 0);
    assert_eq!(got.stats.recv_bytes, 1 << 20);
    // The default mode is auto, which says it copies and why.
    assert_eq!(
        rx.stats().auto,
        Some(AutoChoice {
            mode: RxMode::Copy,
            reason: AutoReason::Refused
        })
    );
}

/// A request/response exchange of small messages with the default configuration: each request (far
/// less than a window) must reach the receiver while its sender waits for the answer. A low-water
/// mark by default would leave the receiver waiting for bytes that never come; the client's read
/// timeout bounds that wait (generously) so the test fails instead of hanging, and its close then
/// ends the receiver's wait.
#[test]
fn small_requests_get_answers_with_the_default_config() {
    use std::io::{Read, Write};
    use std::time::Duration;
    const ROUNDS: u8 = 20;
    const REQUEST: usize = 100;
    for ip in [V4, V6] {
        let (mut client, server) = sender::connect_page_mss(ip).expect("loopback pair");
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut rx = Receiver::new(server, RxConfig::default()).expect("receiver");
        let server = thread::spawn(move || -> Result<u8, String> {
            for round in 0..ROUNDS {
                let mut request = Vec::new();
                while request.len() < REQUEST {
                    match rx.recv().map_err(|e| e.to_string())? {
                        Some(chunk) => request.extend_from_slice(&chunk),
                        None => return Err(format!("round {round}: the stream ended")),
                    }
                }
                assert_eq!(request, vec![round; REQUEST]);
                rx.get_ref()
                    .write_all(&[round])
                    .map_err(|e| e.to_string())?;
            }
            Ok(ROUNDS)
        });
        for round in 0..ROUNDS {
            client.write_all(&[round; REQUEST]).unwrap();
            let mut answer = [0u8; 1];
            if let Err(e) = client.read_exact(&mut answer) {
                drop(client);
                let _ = server.join();
                panic!("{ip} round {round}: no answer ({e}): the receiver waited for more");
            }
            assert_eq!(answer, [round]);
        }
        drop(client);
        assert_eq!(server.join().unwrap(), Ok(ROUNDS), "{ip}");
    }
}

/// A window no address space holds is refused as a setup error, not rounded with a wrapping
/// multiplication into some other size.
#[test]
fn an_unaddressable_window_is_refused() {
    for window in [usize::MAX, usize::MAX - 1, usize::MAX - 4000] {
        let (_client, server) = sender::connect_page_mss(V4).expect("loopback pair");
        let mut config = RxConfig::default();
        config.window = window;
        match Receiver::new(server, config) {
            Ok(_) => panic!("a receiver with a {window}-byte window"),
            Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}"),
        }
    }
}
