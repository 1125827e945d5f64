//! `DatagramBatch` over loopback: one call takes every queued datagram, `MSG_TRUNC` reports full
//! lengths while only the kept bytes are copied, a GSO send arrives whole with its segment size on a
//! `UDP_GRO` socket, the drop counter accounts exactly for datagrams the kernel dropped, and each
//! datagram names its source.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Duration;

use rustix::net::sockopt;
use zcnet::rx::datagrams::{count_drops, set_gro};
use zcnet::rx::{Datagram, DatagramBatch};
use zcnet::tx::{SenderConfig, UdpSender};

/// A receiving socket and a sender connected to it, over IPv4 or IPv6 loopback.
fn pair(ipv6: bool) -> (UdpSocket, UdpSocket) {
    let host = if ipv6 { "[::1]:0" } else { "127.0.0.1:0" };
    let rx = UdpSocket::bind(host).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = UdpSocket::bind(host).unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    (rx, tx)
}

fn datagram(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Lengths and kept bytes of a batch, owned.
fn collect(batch: &DatagramBatch) -> Vec<(usize, Vec<u8>, bool)> {
    batch
        .iter()
        .map(|d: Datagram<'_>| (d.len(), d.bytes().to_vec(), d.is_whole()))
        .collect()
}

#[test]
fn one_call_takes_every_queued_datagram_and_truncation_keeps_full_lengths() {
    for ipv6 in [false, true] {
        let (rx, tx) = pair(ipv6);
        let lens = [1000usize, 1, 0, 1472, 16, 17];
        for (i, &len) in lens.iter().enumerate() {
            tx.send(&datagram(len, i as u8)).unwrap();
        }
        let mut batch = DatagramBatch::new(64, 16);
        assert_eq!(batch.keep(), 16);
        let mut got = Vec::new();
        while got.len() < lens.len() {
            batch.recv(&rx).unwrap();
            got.extend(collect(&batch));
        }
        assert_eq!(got.len(), lens.len());
        for (i, ((len, kept, whole), &sent)) in got.iter().zip(&lens).enumerate() {
            assert_eq!(*len, sent, "full length of datagram {i}");
            let want = datagram(sent, i as u8);
            assert_eq!(kept[..], want[..sent.min(16)], "kept bytes of datagram {i}");
            assert_eq!(*whole, sent <= 16);
        }

        // Kept whole: every byte as sent, and the batch is never larger than its capacity.
        for i in 0..5u8 {
            tx.send(&datagram(3000, i)).unwrap();
        }
        let mut small = DatagramBatch::new(2, 65535);
        let mut seen = 0;
        while seen < 5 {
            let n = small.recv(&rx).unwrap();
            assert!((1..=2).contains(&n), "{n}");
            for d in small.iter() {
                assert!(d.is_whole());
                assert_eq!(d.bytes(), &datagram(3000, seen as u8)[..]);
                assert_eq!((d.segments(), d.segment_size()), (1, None));
                seen += 1;
            }
        }
    }
}

#[test]
fn an_empty_socket_reports_would_block_or_its_timeout() {
    let (rx, _tx) = pair(false);
    let mut batch = DatagramBatch::new(8, 0);
    rx.set_nonblocking(true).unwrap();
    let err = batch.recv(&rx).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WouldBlock);
    assert_eq!(batch.iter().len(), 0);
    rx.set_nonblocking(false).unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let err = batch.recv(&rx).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
}

#[test]
fn a_gso_send_arrives_whole_with_its_segment_size_on_a_gro_socket() {
    for ipv6 in [false, true] {
        let (rx, tx) = pair(ipv6);
        set_gro(&rx, true).unwrap();
        let mut sender = UdpSender::new(tx, SenderConfig::default());
        sender.set_gso_segment(Some(1200)).expect("UDP_SEGMENT");
        // Five segments of 1200 bytes and a last one of 500.
        let sent = datagram(6500, 7);
        sender.send(sent.clone()).unwrap();
        sender.flush(Duration::from_secs(5)).unwrap();
        let mut batch = DatagramBatch::new(4, 65535);
        assert_eq!(batch.recv(&rx).unwrap(), 1);
        let d = batch.iter().next().unwrap();
        assert_eq!(
            (d.len(), d.segment_size(), d.segments()),
            (6500, Some(1200), 6)
        );
        assert_eq!(d.bytes(), &sent[..]);

        // Without UDP_GRO the kernel splits it into its segments before queueing them.
        set_gro(&rx, false).unwrap();
        sender.send(sent.clone()).unwrap();
        sender.flush(Duration::from_secs(5)).unwrap();
        let mut lens = Vec::new();
        while lens.iter().sum::<usize>() < 6500 {
            batch.recv(&rx).unwrap();
            lens.extend(batch.iter().map(|d| {
                assert_eq!((d.segment_size(), d.segments()), (None, 1));
                d.len()
            }));
        }
        assert_eq!(lens, [1200, 1200, 1200, 1200, 1200, 500]);
    }
}

#[test]
fn the_drop_counter_accounts_for_every_datagram_the_kernel_dropped() {
    let (rx, tx) = pair(false);
    count_drops(&rx).unwrap();
    // The smallest receive buffer the kernel allows holds a few datagrams; the rest are dropped.
    sockopt::set_socket_recv_buffer_size(&rx, 1).unwrap();
    const SENT: usize = 200;
    for i in 0..SENT {
        tx.send(&datagram(1000, i as u8)).unwrap();
    }
    let mut batch = DatagramBatch::new(256, 0);
    rx.set_nonblocking(true).unwrap();
    let mut received = 0;
    while let Ok(n) = batch.recv(&rx) {
        received += n;
        assert!(batch.iter().all(|d| d.drops() == 0 && d.len() == 1000));
    }
    assert!(received > 0 && received < SENT, "{received} of {SENT}");
    // A datagram queued after the flood carries the count of every one dropped before it.
    tx.send(b"last").unwrap();
    rx.set_nonblocking(false).unwrap();
    batch.recv(&rx).unwrap();
    let last = batch.iter().next().unwrap();
    assert_eq!(last.len(), 4);
    assert_eq!(received + last.drops() as usize, SENT);
}

#[test]
fn each_datagram_names_its_source() {
    for ipv6 in [false, true] {
        let (rx, tx) = pair(ipv6);
        let other = UdpSocket::bind(if ipv6 { "[::1]:0" } else { "127.0.0.1:0" }).unwrap();
        other.connect(rx.local_addr().unwrap()).unwrap();
        tx.send(b"one").unwrap();
        other.send(b"two").unwrap();
        tx.send(b"three").unwrap();
        let mut batch = DatagramBatch::new(8, 8);
        let mut got = Vec::new();
        while got.len() < 3 {
            batch.recv(&rx).unwrap();
            got.extend(batch.iter().map(|d| (d.bytes().to_vec(), d.source())));
        }
        let (a, b) = (tx.local_addr().unwrap(), other.local_addr().unwrap());
        assert_eq!(
            got,
            vec![
                (b"one".to_vec(), Some(a)),
                (b"two".to_vec(), Some(b)),
                (b"three".to_vec(), Some(a)),
            ]
        );
    }
}

/// Sends one datagram per entry of `lens` and receives them all with `batch`, checking each one's
/// length and kept bytes against what was sent.
fn round_trip(batch: &mut DatagramBatch, lens: &[usize]) {
    let (rx, tx) = pair(false);
    for (i, &len) in lens.iter().enumerate() {
        tx.send(&datagram(len, i as u8)).unwrap();
    }
    let mut got = Vec::new();
    while got.len() < lens.len() {
        let n = batch.recv(&rx).unwrap();
        assert!((1..=batch.capacity()).contains(&n), "{n}");
        got.extend(collect(batch));
    }
    for (i, ((len, kept, _), &sent)) in got.iter().zip(lens).enumerate() {
        assert_eq!(*len, sent, "full length of datagram {i}");
        let want = datagram(sent, i as u8);
        assert_eq!(
            kept[..],
            want[..sent.min(batch.keep())],
            "kept bytes of {i}"
        );
    }
}

#[test]
fn a_keep_whose_product_overflows_is_capped_not_wrapped() {
    // (1 << 62) + 8 times 4 wraps to 32 bytes: the batch must not hand the kernel 4 slots of
    // 2^62 bytes over a 32-byte buffer. It keeps whole datagrams (65535 at most) instead.
    let mut batch = DatagramBatch::new(4, (1 << 62) + 8);
    assert_eq!((batch.capacity(), batch.keep()), (4, 65535));
    round_trip(&mut batch, &[100, 65507, 0, 3000, 64]);
    for (capacity, keep) in [
        (usize::MAX, usize::MAX),
        (1 << 62, 2),
        (0, 1 << 62),
        (usize::MAX / 2 + 1, 2),
    ] {
        let batch = DatagramBatch::new(capacity, keep);
        assert!((1..=1024).contains(&batch.capacity()), "{capacity}");
        assert!(batch.keep() <= 65535, "{keep}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever capacity and keep a caller passes (hostile ones included), the batch keeps what it
    /// says and every datagram arrives with its full length and its first `keep()` bytes.
    #[test]
    fn any_capacity_and_keep_receive_correctly(
        capacity in proptest::prop_oneof![
            0usize..70,
            proptest::prelude::Just(usize::MAX),
            proptest::prelude::Just(1usize << 62),
            proptest::prelude::Just(1025usize),
        ],
        keep in proptest::prop_oneof![
            0usize..2000,
            proptest::prelude::Just(usize::MAX),
            proptest::prelude::Just(1usize << 62),
            proptest::prelude::Just((1usize << 62) + 8),
            proptest::prelude::Just(65535usize),
            proptest::prelude::Just(65536usize),
        ],
        lens in proptest::collection::vec(0usize..4000, 1..12),
    ) {
        let mut batch = DatagramBatch::new(capacity, keep);
        proptest::prop_assert_eq!(batch.capacity(), capacity.clamp(1, 1024));
        proptest::prop_assert_eq!(batch.keep(), keep.min(65535));
        round_trip(&mut batch, &lens);
    }
}
