//! What the AF_XDP tests share: the frames between the ends of a veth pair, and the check of each
//! arriving payload.

use std::collections::BTreeSet;

use testnet::VethPair;
use testnet::frame::{UdpFrame, check_payload};

/// UDP port of every test frame.
pub const PORT: u16 = 9099;

/// UDP frames from `b` to `a` (or the reverse with `to_b`).
pub fn frames(pair: &VethPair, to_b: bool) -> UdpFrame {
    let (a_mac, b_mac) = (
        pair.mac(&pair.a_if).expect("mac"),
        pair.mac(&pair.b_if).expect("mac"),
    );
    let spec = UdpFrame {
        src_mac: b_mac,
        dst_mac: a_mac,
        src_ip: pair.b_v4,
        dst_ip: pair.a_v4,
        src_port: PORT,
        dst_port: PORT,
    };
    if to_b {
        UdpFrame {
            src_mac: a_mac,
            dst_mac: b_mac,
            src_ip: pair.a_v4,
            dst_ip: pair.b_v4,
            ..spec
        }
    } else {
        spec
    }
}

/// Records a payload's sequence number, failing on corruption or duplicates.
pub fn record(seen: &mut BTreeSet<u64>, payload: &[u8]) {
    let seq = check_payload(payload).expect("payload checksum");
    assert!(seen.insert(seq), "sequence {seq} arrived twice");
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
