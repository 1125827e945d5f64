//! A sender on a socket whose error-queue reads carry timestamps besides each completion.
//!
//! With `SO_TIMESTAMPNS` and `SO_TIMESTAMPING` (software reporting) on, `ip_recv_error`
//! (net/ipv4/ip_sockglue.c) writes `SCM_TIMESTAMPNS` and `SCM_TIMESTAMPING` before the `IP_RECVERR`
//! completion of every error-queue entry: 144 bytes of control messages for one IPv4 completion. The
//! sender's reads must have room for all of them, or each read truncates (`MSG_CTRUNC`) and the
//! completion it carried is lost.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::thread;
use std::time::Duration;

use super::{Mode, SenderConfig, TcpSender};
use crate::sys::socket::set_int_option;

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
    // Drain after every send, so that every completion goes through the sends' own drains too.
    let config = SenderConfig {
        drain_every: 1,
        ..SenderConfig::with_mode(Mode::ZeroCopy)
    };
    let mut tx = TcpSender::new(stream, config);
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
