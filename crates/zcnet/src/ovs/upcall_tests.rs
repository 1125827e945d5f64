//! The upcall parser on synthetic messages laid out as `queue_userspace_packet` lays them out: padded
//! (copied packet) and unpadded (`OVS_DP_F_UNALIGNED`), truncated, with lying length fields, and on
//! arbitrary bytes.

use proptest::prelude::*;

use super::*;
use crate::ovs::Ports;
use crate::sys::netlink::{NLA_F_NESTED, Request, align4};
use crate::sys::ovs::key_attr;

const FAMILY: u16 = 0x21;
const SRC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const DST: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// An Ethernet frame of `len` bytes whose every byte depends on its position and length.
fn frame(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + len) as u8).collect()
}

/// A MISS upcall carrying `packet`, padded like a copying datapath or not (`unaligned`).
fn upcall_message(packet: &[u8], unaligned: bool) -> Vec<u8> {
    let mut req = Request::new(FAMILY, 0, packet_cmd::MISS, 1).header(&5i32.to_ne_bytes());
    req.nested(packet_attr::KEY, |r| {
        let mut eth = SRC.to_vec();
        eth.extend_from_slice(&DST);
        r.u32(key_attr::IN_PORT, 2)
            .attr(key_attr::ETHERNET, &eth)
            .attr(key_attr::ETHERTYPE, &0x0800u16.to_be_bytes())
            .attr(key_attr::UDP, &[0x30, 0x39, 0, 7]);
    });
    let (mut msg, pad) = req
        .finish_with_trailer(0, packet_attr::PACKET, packet.len())
        .unwrap();
    msg.extend_from_slice(packet);
    if unaligned {
        let len = msg.len() as u32;
        msg[0..4].copy_from_slice(&len.to_ne_bytes());
    } else {
        msg.resize(msg.len() + pad, 0);
    }
    msg
}

#[test]
fn padded_and_unpadded_upcalls_deliver_every_byte_borrowed() {
    for len in [60, 61, 62, 63, 1001, 1514] {
        for unaligned in [false, true] {
            let msg = upcall_message(&frame(len), unaligned);
            assert_eq!(
                msg.len().is_multiple_of(4),
                !unaligned || len.is_multiple_of(4),
                "len {len}"
            );
            let up = parse_upcall(&msg, FAMILY).unwrap();
            assert_eq!(
                up.packet,
                &frame(len)[..],
                "len {len} unaligned {unaligned}"
            );
            assert_eq!(up.kind, UpcallKind::Miss);
            assert_eq!(up.dp_ifindex, crate::IfIndex::new(5));
            assert_eq!(up.key.in_port, Some(2));
            assert_eq!(up.key.ethernet.unwrap().eth_dst, DST);
            assert_eq!(up.key.ethertype, Some(0x0800));
            assert_eq!(up.key.udp, Some(Ports { src: 12345, dst: 7 }));
            let range = msg.as_ptr_range();
            assert!(
                range.contains(&up.packet.as_ptr()),
                "packet is a slice of the buffer"
            );
            assert_eq!(up.message_len, msg.len());
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    for unaligned in [false, true] {
        let msg = upcall_message(&frame(61), unaligned);
        for cut in 0..msg.len() {
            assert!(
                parse_upcall(&msg[..cut], FAMILY).is_err(),
                "prefix of {cut} of {} bytes parsed",
                msg.len()
            );
        }
    }
}

#[test]
fn oversized_length_fields_are_rejected() {
    let msg = upcall_message(&frame(1001), true);
    let mut longer = msg.clone();
    longer[0..4].copy_from_slice(&(msg.len() as u32 + 1).to_ne_bytes());
    assert!(matches!(
        parse_upcall(&longer, FAMILY),
        Err(ParseError::Framing(_))
    ));

    // The packet attribute claims one byte more than the message holds.
    let packet_attr_at = msg.len() - 1001 - 4;
    let mut lying = msg.clone();
    let claimed = u16::from_ne_bytes([lying[packet_attr_at], lying[packet_attr_at + 1]]) + 1;
    lying[packet_attr_at..packet_attr_at + 2].copy_from_slice(&claimed.to_ne_bytes());
    assert!(matches!(
        parse_upcall(&lying, FAMILY),
        Err(ParseError::Attribute(_))
    ));

    // An attribute length shorter than its own header.
    let mut short = msg.clone();
    short[packet_attr_at..packet_attr_at + 2].copy_from_slice(&2u16.to_ne_bytes());
    assert!(matches!(
        parse_upcall(&short, FAMILY),
        Err(ParseError::Attribute(_))
    ));

    // The key's first attribute claims more than the key holds.
    let key_at = 16 + 4 + 4 + 4;
    let mut bad_key = msg;
    bad_key[key_at..key_at + 2].copy_from_slice(&200u16.to_ne_bytes());
    assert!(matches!(
        parse_upcall(&bad_key, FAMILY),
        Err(ParseError::Key(_))
    ));
}

#[test]
fn trailing_bytes_and_wrong_shapes_are_rejected() {
    let mut msg = upcall_message(&frame(60), false);
    msg.extend_from_slice(&[0, 0]);
    let len = msg.len() as u32;
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    assert!(matches!(
        parse_upcall(&msg, FAMILY),
        Err(ParseError::Attribute(_))
    ));

    let msg = upcall_message(&frame(60), false);
    assert!(matches!(
        parse_upcall(&msg, FAMILY + 1),
        Err(ParseError::Family(_))
    ));
    let mut execute = msg.clone();
    execute[16] = packet_cmd::EXECUTE;
    assert!(matches!(
        parse_upcall(&execute, FAMILY),
        Err(ParseError::Command(3))
    ));
    let mut two = msg.clone();
    two.extend_from_slice(&msg);
    assert!(matches!(
        parse_upcall(&two, FAMILY),
        Err(ParseError::MessageCount(2))
    ));

    let mut keyless = Request::new(FAMILY, 0, packet_cmd::MISS, 1).header(&[0; 4]);
    keyless.attr(packet_attr::PACKET, &frame(60));
    assert!(matches!(
        parse_upcall(&keyless.finish(0).unwrap(), FAMILY),
        Err(ParseError::Missing("OVS_PACKET_ATTR_KEY"))
    ));
    let mut wrong_size = Request::new(FAMILY, 0, packet_cmd::MISS, 1).header(&[0; 4]);
    wrong_size.nested(packet_attr::KEY, |r| {
        r.attr(key_attr::IPV4, &[0; 11]);
    });
    wrong_size.attr(packet_attr::PACKET, &frame(60));
    assert!(matches!(
        parse_upcall(&wrong_size.finish(0).unwrap(), FAMILY),
        Err(ParseError::KeyAttribute(key_attr::IPV4))
    ));
}

#[test]
fn action_upcalls_carry_userdata() {
    let mut req = Request::new(FAMILY, 0, packet_cmd::ACTION, 1).header(&[0; 4]);
    req.attr(packet_attr::KEY | NLA_F_NESTED, &[])
        .attr(packet_attr::USERDATA, &42u64.to_ne_bytes())
        .attr(packet_attr::PACKET, &frame(64));
    let msg = req.finish(0).unwrap();
    let up = parse_upcall(&msg, FAMILY).unwrap();
    assert_eq!(up.kind, UpcallKind::Action);
    assert_eq!(up.userdata, Some(&42u64.to_ne_bytes()[..]));
    assert_eq!(align4(up.message_len), msg.len());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_upcall(&bytes, FAMILY);
    }

    #[test]
    fn corrupted_upcalls_never_panic_and_never_overrun(
        len in 1usize..1600,
        unaligned in any::<bool>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut msg = upcall_message(&frame(len), unaligned);
        for (at, byte) in flips {
            let i = at % msg.len();
            msg[i] = byte;
        }
        let end = msg.len() - cut % 8;
        if let Ok(up) = parse_upcall(&msg[..end], FAMILY) {
            let range = msg[..end].as_ptr_range();
            prop_assert!(up.packet.is_empty() || range.contains(&up.packet.as_ptr()));
            prop_assert!(up.packet.as_ptr_range().end <= range.end);
        }
    }
}
