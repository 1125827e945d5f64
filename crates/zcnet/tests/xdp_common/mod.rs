//! What the AF_XDP tests share: the frames between the ends of a veth pair, the check of each
//! arriving payload, and a reader of what an AF_XDP socket sends to the peer's UDP socket.

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use testnet::VethPair;
use testnet::frame::{UdpFrame, check_payload};

/// UDP port of every test frame.
pub const PORT: u16 = 9099;

/// Bound on every wait in these tests (never reached when things work).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// UDP frames from `b` to `a` (or the reverse with `to_b`).
pub fn frames(pair: &VethPair, to_b: bool) -> UdpFrame {
    let (to_a_frame, to_b_frame) = pair.udp_frames(PORT).expect("mac");
    if to_b { to_b_frame } else { to_a_frame }
}

/// Records a payload's sequence number, failing on corruption or duplicates.
pub fn record(seen: &mut BTreeSet<u64>, payload: &[u8]) {
    let seq = check_payload(payload).expect("payload checksum");
    assert!(seen.insert(seq), "sequence {seq} arrived twice");
}

/// A UDP socket on `b`'s address and [`PORT`], in `b`'s namespace, each read bounded by
/// [`PATIENCE`].
pub fn peer_receiver(pair: &VethPair) -> UdpSocket {
    let receiver = pair
        .b
        .run(|| UdpSocket::bind((pair.b_v4, PORT)).expect("bind receiver"));
    receiver.set_read_timeout(Some(PATIENCE)).expect("timeout");
    receiver
}

/// Reads datagrams of up to `max_len` bytes from `receiver` until sequence numbers `0..count`
/// arrived or a read waited [`PATIENCE`] in vain, checking each payload with `check` before
/// recording it, and publishing how many arrived in `arrived` (by which a sender keeps the
/// receiver's socket buffer from overflowing).
pub fn read_paced(
    receiver: &UdpSocket,
    count: u64,
    max_len: usize,
    arrived: &AtomicU64,
    check: impl Fn(&[u8]),
) -> BTreeSet<u64> {
    let mut seen = BTreeSet::new();
    let mut buf = vec![0u8; max_len];
    while (seen.len() as u64) < count {
        let Ok(n) = receiver.recv(&mut buf) else {
            break;
        };
        check(&buf[..n]);
        record(&mut seen, &buf[..n]);
        arrived.store(seen.len() as u64, Ordering::Release);
    }
    seen
}

/// Checks that sequence numbers `0..count` all arrived, naming the first lost ones otherwise.
pub fn assert_all_arrived(seen: &BTreeSet<u64>, count: u64) {
    assert_eq!(
        seen.len() as u64,
        count,
        "lost: {:?}",
        (0..count)
            .filter(|s| !seen.contains(s))
            .take(10)
            .collect::<Vec<_>>()
    );
}
