//! Checks that a frame the datapath sent up is, byte for byte, a datagram of the Open vSwitch run:
//! its length, Ethernet/IPv4/UDP headers consistent with it (lengths, both checksums), and every
//! payload byte as the sender wrote it.

use crate::ovs_wire;

fn ones_complement_sum(mut sum: u32, bytes: &[u8]) -> u32 {
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The datagram's sequence number when `frame` is an intact IPv4/UDP datagram of `expected_len`
/// frame bytes; otherwise what is wrong.
pub fn check(frame: &[u8], expected_len: usize) -> Result<u16, String> {
    if frame.len() != expected_len {
        return Err(format!("{} bytes, expected {expected_len}", frame.len()));
    }
    if frame.len() < ovs_wire::HEADERS || frame[12..14] != [0x08, 0x00] || frame[14] != 0x45 {
        return Err("not an IPv4 frame without options".into());
    }
    let ip = &frame[14..34];
    if usize::from(u16::from_be_bytes([ip[2], ip[3]])) != expected_len - 14 || ip[9] != 17 {
        return Err("IPv4 total length or protocol wrong".into());
    }
    if fold(ones_complement_sum(0, ip)) != 0xffff {
        return Err("IPv4 header checksum wrong".into());
    }
    let udp = &frame[34..];
    if usize::from(u16::from_be_bytes([udp[4], udp[5]])) != udp.len() {
        return Err("UDP length wrong".into());
    }
    if udp[6..8] != [0, 0] {
        let pseudo = ones_complement_sum(0, &ip[12..20]) + 17 + udp.len() as u32;
        if fold(ones_complement_sum(pseudo, udp)) != 0xffff {
            return Err("UDP checksum wrong".into());
        }
    }
    ovs_wire::verify(&udp[8..]).ok_or_else(|| "payload bytes differ from what was sent".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as a sender's stack builds it, checksums included.
    fn frame(len: usize, seq: u16) -> Vec<u8> {
        let payload = ovs_wire::payload(len, seq);
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let total = (len - 14) as u16;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 78, 0, 1, 10, 78, 0, 2,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let c = !fold(ones_complement_sum(0, &ip));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut udp = vec![0x1b, 0xbc, 0x1b, 0x5f, 0, 0, 0, 0];
        udp[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        udp.extend_from_slice(&payload);
        let pseudo = ones_complement_sum(0, &ip[12..20]) + 17 + udp.len() as u32;
        let c = !fold(ones_complement_sum(pseudo, &udp));
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&udp);
        f
    }

    #[test]
    fn intact_frames_pass_and_every_single_flip_fails() {
        for len in ovs_wire::FRAME_LENGTHS {
            let good = frame(len, 5);
            assert_eq!(check(&good, len), Ok(5));
            for i in 12..good.len() {
                let mut bad = good.clone();
                bad[i] ^= 0x10;
                assert!(check(&bad, len).is_err(), "flip at {i} of {len} passed");
            }
            assert!(check(&good[..len - 1], len).is_err());
        }
    }
}
