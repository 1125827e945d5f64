//! Test and benchmark frames: Ethernet + IPv4 + UDP with a sequence-numbered, checksummed payload,
//! and the MAC swap of a layer-2 forwarder. Pure byte manipulation, no kernel involved.

use std::net::Ipv4Addr;

pub use zcnet::xdp::headers::ETH_HLEN;
use zcnet::xdp::headers::{IPV4_HLEN, UDP_HLEN};

/// Ethernet + IPv4 (no options) + UDP header length.
pub const UDP_HEADERS: usize = ETH_HLEN + IPV4_HLEN + UDP_HLEN;
/// Smallest payload [`UdpFrame::write`] accepts: an 8-byte sequence number and a 4-byte checksum.
pub const MIN_PAYLOAD: usize = 12;

/// Addresses and ports of the UDP frames to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrame {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// Source UDP port.
    pub src_port: u16,
    /// Destination UDP port.
    pub dst_port: u16,
}

impl UdpFrame {
    /// Writes a frame carrying `payload_len` bytes of sequence-numbered payload (see [`write_payload`])
    /// into `buf`; returns the frame length, or `None` when `buf` is too small or the payload shorter
    /// than [`MIN_PAYLOAD`]. The IPv4 header checksum is set; the UDP checksum is 0 (none, allowed for
    /// IPv4), so the payload carries its own.
    pub fn write(&self, buf: &mut [u8], seq: u64, payload_len: usize) -> Option<usize> {
        let total = UDP_HEADERS + payload_len;
        if payload_len < MIN_PAYLOAD || buf.len() < total || total - ETH_HLEN > u16::MAX as usize {
            return None;
        }
        let frame = &mut buf[..total];
        frame[0..6].copy_from_slice(&self.dst_mac);
        frame[6..12].copy_from_slice(&self.src_mac);
        frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut frame[ETH_HLEN..ETH_HLEN + 20];
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&((total - ETH_HLEN) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
        ip[8] = 64;
        ip[9] = 17; // UDP
        ip[10..12].copy_from_slice(&[0, 0]);
        ip[12..16].copy_from_slice(&self.src_ip.octets());
        ip[16..20].copy_from_slice(&self.dst_ip.octets());
        let sum = zcnet::xdp::headers::checksum(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let udp = &mut frame[ETH_HLEN + 20..UDP_HEADERS];
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]);
        write_payload(&mut frame[UDP_HEADERS..], seq);
        Some(total)
    }
}

/// FNV-1a over `bytes`: a cheap checksum that catches reordered, shifted or corrupted bytes.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

/// Fills `payload` with: `seq` (8 bytes little-endian), a byte pattern derived from `seq`, and an
/// FNV-1a checksum of everything before it in the last 4 bytes. `payload` must hold [`MIN_PAYLOAD`].
pub fn write_payload(payload: &mut [u8], seq: u64) {
    let n = payload.len();
    payload[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in payload[8..n - 4].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(i as u8);
    }
    let sum = fnv1a(&payload[..n - 4]);
    payload[n - 4..].copy_from_slice(&sum.to_le_bytes());
}

/// The sequence number of a payload written by [`write_payload`], or `None` when its checksum or
/// pattern does not match.
pub fn check_payload(payload: &[u8]) -> Option<u64> {
    let n = payload.len();
    if n < MIN_PAYLOAD {
        return None;
    }
    let sum = u32::from_le_bytes(payload[n - 4..].try_into().ok()?);
    if fnv1a(&payload[..n - 4]) != sum {
        return None;
    }
    let seq = u64::from_le_bytes(payload[..8].try_into().ok()?);
    let pattern_ok = payload[8..n - 4]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (seq as u8).wrapping_add(i as u8));
    pattern_ok.then_some(seq)
}

/// The destination port and payload of an Ethernet + IPv4 + UDP frame, or `None` for anything else.
pub fn udp_payload(frame: &[u8]) -> Option<(u16, &[u8])> {
    if frame.len() < UDP_HEADERS || frame[12..14] != [0x08, 0x00] || frame[ETH_HLEN] != 0x45 {
        return None;
    }
    if frame[ETH_HLEN + 9] != 17 {
        return None;
    }
    let udp = &frame[ETH_HLEN + 20..];
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    let len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    if len < 8 || len > udp.len() {
        return None;
    }
    Some((dst_port, &udp[8..len]))
}

/// Parses a MAC address written `aa:bb:cc:dd:ee:ff` (as sysfs and `ip link` print it; surrounding
/// white space allowed); `None` unless it is exactly six hexadecimal bytes.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for byte in &mut mac {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Swaps destination and source MAC of an Ethernet frame in place (what a layer-2 forwarder that
/// returns frames to their sender does); frames shorter than a header are left alone.
pub fn swap_macs(frame: &mut [u8]) {
    if frame.len() >= ETH_HLEN {
        let (dst, rest) = frame.split_at_mut(6);
        dst.swap_with_slice(&mut rest[..6]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> UdpFrame {
        UdpFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 77, 0, 2),
            dst_ip: Ipv4Addr::new(10, 77, 0, 1),
            src_port: 4000,
            dst_port: 5000,
        }
    }

    #[test]
    fn mac_addresses_parse_exactly() {
        assert_eq!(
            parse_mac("02:fc:00:0a:FF:01\n"),
            Some([2, 0xfc, 0, 0x0a, 0xff, 1])
        );
        for bad in [
            "",
            "02:fc:00:0a:ff",
            "02:fc:00:0a:ff:01:02",
            "02:fc:00:0a:ff:g1",
            "002:fc:0:a:ff:1",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn frames_round_trip() {
        let mut buf = [0u8; 128];
        let n = spec().write(&mut buf, 77, 18).expect("fits");
        assert_eq!(n, 60);
        let (port, payload) = udp_payload(&buf[..n]).expect("udp");
        assert_eq!(port, 5000);
        assert_eq!(check_payload(payload), Some(77));
        assert_eq!(
            zcnet::xdp::headers::checksum(&buf[ETH_HLEN..ETH_HLEN + 20]),
            0,
            "valid header sums to 0"
        );
    }

    #[test]
    fn corruption_is_detected() {
        let mut buf = [0u8; 128];
        let n = spec().write(&mut buf, 5, 40).expect("fits");
        for i in UDP_HEADERS..n {
            let mut bad = buf;
            bad[i] ^= 0x10;
            let (_, payload) = udp_payload(&bad[..n]).expect("headers intact");
            assert_eq!(check_payload(payload), None, "byte {i}");
        }
    }

    #[test]
    fn small_buffers_and_payloads_are_refused() {
        let mut buf = [0u8; 50];
        assert_eq!(spec().write(&mut buf, 1, 11), None);
        assert_eq!(spec().write(&mut buf, 1, 20), None);
    }

    #[test]
    fn macs_swap() {
        let mut buf = [0u8; 64];
        let n = spec().write(&mut buf, 1, 18).expect("fits");
        swap_macs(&mut buf[..n]);
        assert_eq!(buf[..6], [2, 0, 0, 0, 0, 1]);
        assert_eq!(buf[6..12], [2, 0, 0, 0, 0, 2]);
    }
}
