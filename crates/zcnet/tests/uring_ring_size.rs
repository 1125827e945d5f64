//! A ring of more submission entries than the kernel takes (`IORING_MAX_ENTRIES`, 32768): the
//! sender falls back to the sendmsg path, says which setting to lower — not that io_uring is
//! missing — and still delivers every byte.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use tx_common::{Checksum, fill, io_uring_available, tcp_pair};
use zcnet::tx::{Mode, SendPath, Sender, SenderConfig};

#[test]
fn a_ring_larger_than_the_kernel_takes_names_ring_entries_and_falls_back() {
    let test = "a_ring_larger_than_the_kernel_takes_names_ring_entries_and_falls_back";
    if !io_uring_available(test) {
        return;
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink) = tcp_pair(listener);
    let mut config = SenderConfig::with_mode(Mode::Auto);
    config.path = SendPath::IoUring {
        batch: 32,
        ring_entries: 1 << 16,
    };
    let mut tx = Sender::new(stream, config);
    assert_eq!(tx.path(), SendPath::SENDMSG);
    let why = tx
        .path_status()
        .expect_err("no ring of 65536 entries")
        .to_string();
    for needle in ["io_uring_setup", "EINVAL", "ring_entries 65536", "32768"] {
        assert!(why.contains(needle), "{needle:?} missing from {why:?}");
    }
    assert!(!why.contains("no io_uring here"), "{why}");
    let mut sent = Checksum::default();
    for len in [1, 4096, 100_000] {
        let mut buf = vec![0u8; len];
        fill(&mut buf, sent.len);
        sent.update(&buf);
        tx.send(buf).expect("send on the sendmsg path");
    }
    drop(tx.close(Duration::from_secs(10)).expect("close"));
    assert_eq!(sink.join().unwrap(), sent, "every byte, in order");
}
