//! The receiver agrees with its socket: switched to non-blocking through `stream()`, an empty queue is
//! `WouldBlock` (never a wait); urgent data arrives in line, in order, on the mapped and copy paths alike.

mod rx_util;

use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rustix::net::{SendFlags, send};
use zcnet::rx::{Receiver, RxConfig, RxMode, sender};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn modes() -> [RxConfig; 3] {
    [RxConfig::default(), rx_util::keep_trying(false), {
        let mut config = RxConfig::default();
        config.mode = RxMode::Copy;
        config
    }]
}

#[test]
fn nonblocking_set_through_the_stream_is_honoured() {
    for config in modes() {
        let (client, server) = sender::connect_page_mss(V4).expect("loopback pair");
        let raw = server.as_raw_fd();
        let (answer, got) = mpsc::channel();
        let mode = config.mode;
        // On a thread, so that a receive that blocks fails the test instead of hanging it.
        thread::spawn(move || {
            let mut rx = Receiver::new(server, config).expect("receiver");
            assert_eq!(rx.as_fd().as_raw_fd(), raw, "AsFd gives the socket");
            rx.get_ref().set_nonblocking(true).unwrap();
            let empty = rx.recv().map(|c| c.map(|c| c.len())).map_err(|e| e.kind());
            answer.send(empty).unwrap();
        });
        let empty = got
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("{mode:?}: recv blocked on a non-blocking socket"));
        assert_eq!(empty, Err(ErrorKind::WouldBlock), "{mode:?}");
        drop(client);
    }
}

/// Sends `before`, one urgent byte, then `after`, and closes.
fn send_with_urgent(mut client: TcpStream, before: &[u8], urgent: u8, after: &[u8]) {
    client.write_all(before).unwrap();
    assert_eq!(send(&client, &[urgent], SendFlags::OOB).unwrap(), 1);
    client.write_all(after).unwrap();
}

#[test]
fn urgent_data_arrives_in_line_on_every_path() {
    let before = rx_util::stream_bytes(3 * 4096 + 17, 1);
    let after = rx_util::stream_bytes(2 * 4096, 2);
    let mut expected = before.clone();
    expected.push(b'!');
    expected.extend_from_slice(&after);
    for config in modes() {
        let mode = config.mode;
        let (client, server) = sender::connect_page_mss(V4).expect("loopback pair");
        let (b, a) = (before.clone(), after.clone());
        let writer = thread::spawn(move || send_with_urgent(client, &b, b'!', &a));
        // Let everything arrive first, so the urgent byte is queued mid-stream.
        writer.join().unwrap();
        thread::sleep(Duration::from_millis(50));
        let mut rx = Receiver::new(server, config).expect("receiver");
        let got = rx_util::receive_checked(&mut rx, &expected);
        assert_eq!(
            got.bytes,
            expected.len() as u64,
            "{mode:?}: the urgent byte was lost or repeated ({:?})",
            got.stats
        );
        rx_util::assert_intact(&got, &expected);
    }
}
