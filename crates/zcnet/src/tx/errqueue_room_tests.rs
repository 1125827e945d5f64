//! A sender on a socket whose error-queue reads carry more control messages than each completion.
//!
//! With `SO_TIMESTAMPNS` and `SO_TIMESTAMPING` (software reporting) on, `ip_recv_error`
//! (net/ipv4/ip_sockglue.c) writes `SCM_TIMESTAMPNS` and `SCM_TIMESTAMPING` before the `IP_RECVERR`
//! completion of every error-queue entry: 144 bytes of control messages for one IPv4 completion. The
//! sender's reads must have room for all of them, or each read truncates (`MSG_CTRUNC`) and the
//! completion it carried is lost. An entry that does not fit whatever the room (an ICMPv6 error with
//! every `IPV6_RECV*` option on) must fail the call that read it, never vanish.

use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use super::{Mode, SendError, SendPath, SenderConfig, TcpSender, TxError, UdpSender};
use crate::sys::socket::set_int_option;

/// Zero-copy, draining after every send: every entry goes through the sends' own drains.
fn drain_after_each_send() -> SenderConfig {
    SenderConfig {
        path: SendPath::Sendmsg { drain_every: 1 },
        ..SenderConfig::with_mode(Mode::ZeroCopy)
    }
}

#[test]
fn completions_survive_timestamps_on_the_error_queue() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).unwrap();
        got
    });
    let stream = TcpStream::connect(addr).unwrap();
    set_int_option(stream.as_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
    let reporting = libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_SOFTWARE;
    set_int_option(
        stream.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        reporting as i32,
    )
    .unwrap();
    let mut tx = TcpSender::new(stream, drain_after_each_send());
    let mut sent = Vec::new();
    for i in 0..256usize {
        let buf: Vec<u8> = (0..4096).map(|j| (i * 7 + j / 3) as u8).collect();
        sent.extend_from_slice(&buf);
        tx.send(buf).expect("send");
    }
    tx.flush(Duration::from_secs(10))
        .expect("every completion read");
    let stats = tx.stats().clone();
    assert!(stats.zc_calls > 0, "no zero-copy send: {stats:?}");
    assert_eq!(stats.zc_ids + stats.copied_ids, stats.zc_calls, "{stats:?}");
    assert!(tx.zerocopy_status().is_ok(), "{:?}", tx.zerocopy_status());
    drop(tx.close(Duration::from_secs(1)).unwrap());
    assert!(reader.join().unwrap() == sent, "bytes lost or changed");
}

/// A port-unreachable ICMPv6 error on a UDP socket with `IPV6_RECVERR` and every receive option on:
/// `ipv6_recv_error` (net/ipv6/datagram.c) writes the timestamps, `IPV6_PKTINFO`,
/// `IPV6_2292PKTINFO`, `IPV6_HOPLIMIT`, `IPV6_2292HOPLIMIT`, `IPV6_TCLASS`, `IPV6_FLOWINFO`,
/// `IPV6_ORIGDSTADDR` and then `IPV6_RECVERR`: more than the room of a read. The send whose
/// drain reads it must fail with `MSG_CTRUNC`.
#[test]
fn an_entry_larger_than_the_room_fails_the_send_that_reads_it() {
    let closed = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
    let dest = closed.local_addr().unwrap();
    drop(closed);
    let socket = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).unwrap();
    socket.connect(dest).unwrap();
    for (level, name) in [
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO),
        (libc::IPPROTO_IPV6, libc::IPV6_2292PKTINFO),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT),
        (libc::IPPROTO_IPV6, libc::IPV6_2292HOPLIMIT),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS),
        (libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO),
        (libc::IPPROTO_IPV6, libc::IPV6_RECVORIGDSTADDR),
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS),
    ] {
        set_int_option(socket.as_fd(), level, name, 1).unwrap();
    }
    let reporting = libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_SOFTWARE;
    set_int_option(
        socket.as_fd(),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        reporting as i32,
    )
    .unwrap();
    let mut tx = UdpSender::new(socket, drain_after_each_send());
    let failure =
        send_until_the_icmp_error_is_read(&mut tx).expect("no send reported the truncated entry");
    match failure.error() {
        TxError::Errqueue { source, .. } => {
            assert!(source.to_string().contains("MSG_CTRUNC"), "{source}")
        }
        other => panic!("the truncated entry was not reported: {other}"),
    }
}

/// Sends datagrams to the closed port until one send fails or the ICMP error has arrived; returns the
/// failure of the send whose drain came after the error. An ICMP error also sets the socket error, which
/// would fail the next `sendmsg` with ECONNREFUSED: it is read (and cleared) once it is there, so that
/// the next send succeeds and its own drain meets the entry. ICMPv6 errors are rate-limited, hence a
/// datagram more whenever none came within 200 ms.
fn send_until_the_icmp_error_is_read(tx: &mut UdpSender) -> Option<SendError<Vec<u8>>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Err(e) = tx.send(vec![7u8; 100]) {
            return Some(e);
        }
        let wait = Instant::now() + Duration::from_millis(200);
        while Instant::now() < wait {
            if tx.get_ref().take_error().unwrap().is_some() {
                return tx.send(vec![8u8; 100]).err();
            }
            thread::sleep(Duration::from_millis(1));
        }
    }
    panic!("no ICMP error arrived");
}
