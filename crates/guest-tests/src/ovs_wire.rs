//! What the three parties of the Open vSwitch run agree on: ports, frame lengths, and the datagram
//! payloads (a sequence number, then the byte pattern of that length and number).
//!
//! Parties: the host-side peer (on the tap, sends and verifies echoes), the echo agent (in a guest
//! namespace behind a veth end, answers every datagram), and the switch (in the guest's root
//! namespace: a datapath whose ports are the guest's NIC and the other veth end).

use crate::pattern;

/// UDP port the echo agent answers on.
pub const ECHO_PORT: u16 = 7007;
/// UDP port the peer floods (the agent reads and discards).
pub const DISCARD_PORT: u16 = 7009;
/// UDP port of the peer's final datagram, answered with [`BYE`].
pub const DONE_PORT: u16 = 7010;
/// The peer's source port for frame length `FRAME_LENGTHS[i]` is `SOURCE_PORT_BASE + i`: one flow per
/// length and direction.
pub const SOURCE_PORT_BASE: u16 = 7100;
/// Ethernet frame lengths of the checked datagrams: odd and even, minimum to full MTU.
pub const FRAME_LENGTHS: [usize; 4] = [60, 61, 1001, 1514];
/// Datagrams per length in the first phase: the first misses, the rest must hit the installed flow.
pub const ROUNDS: u16 = 8;
/// Datagrams the peer floods while the switch stops reading upcalls.
pub const FLOOD: usize = 3000;
/// Ethernet (14), IPv4 (20) and UDP (8) header bytes in front of a payload.
pub const HEADERS: usize = 42;
/// The agent's answer to the final datagram.
pub const BYE: &[u8] = b"bye";

/// The UDP payload of datagram `seq` of frame length `frame_len`.
pub fn payload(frame_len: usize, seq: u16) -> Vec<u8> {
    let mut p = vec![0u8; frame_len - HEADERS];
    p[0..2].copy_from_slice(&seq.to_be_bytes());
    pattern::fill(&mut p[2..], offset(frame_len, seq));
    p
}

fn offset(frame_len: usize, seq: u16) -> u64 {
    ((frame_len as u64) << 32) | (u64::from(seq) << 16)
}

/// The sequence number of `payload` if every byte is the one [`payload`] puts there.
pub fn verify(payload: &[u8]) -> Option<u16> {
    if payload.len() < 2 {
        return None;
    }
    let seq = u16::from_be_bytes([payload[0], payload[1]]);
    let frame_len = payload.len() + HEADERS;
    (pattern::mismatches(&payload[2..], offset(frame_len, seq)) == 0).then_some(seq)
}

/// Which checked length a source port stands for.
pub fn length_of_port(port: u16) -> Option<usize> {
    let i = port.checked_sub(SOURCE_PORT_BASE)? as usize;
    FRAME_LENGTHS.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_verify_and_any_flip_is_seen() {
        for len in FRAME_LENGTHS {
            let mut p = payload(len, 3);
            assert_eq!(p.len() + HEADERS, len);
            assert_eq!(verify(&p), Some(3));
            let last = p.len() - 1;
            p[last] ^= 1;
            assert_eq!(verify(&p), None);
        }
        assert_eq!(length_of_port(SOURCE_PORT_BASE + 1), Some(61));
        assert_eq!(length_of_port(SOURCE_PORT_BASE + 4), None);
    }
}
