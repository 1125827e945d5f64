//! Ethernet II, IPv4, IPv6 and UDP headers as AF_XDP frames carry them: parsing a received frame into
//! its UDP datagram (lengths and checksums verified) and writing the headers of a datagram to send in
//! front of a payload already in the frame.
//!
//! # Wire rules relied on
//! - RFC 1071: the Internet checksum is the one's complement of the one's complement sum of 16-bit
//!   big-endian words (an odd last byte padded with zero); summing a header or datagram *with* its
//!   checksum gives `0xffff` when the checksum is right.
//! - RFC 791 / RFC 768: IPv4 header checksum over the header; UDP checksum over the pseudo header
//!   (source, destination, zero, protocol 17, UDP length), the UDP header and the payload. Over IPv4 a
//!   checksum of 0 means "none" and a computed 0 is sent as `0xffff`.
//! - RFC 8200: over IPv6 the UDP checksum is mandatory (a zero checksum is dropped), the pseudo header
//!   is source, destination, the 32-bit UDP length and next header 17.
//!
//! Parsing accepts only what the redirect program's [`FrameMatch::UdpPort`] steers: untagged
//! Ethernet, IPv4 without options and not a fragment, IPv6 with UDP as the first next header.
//! Anything else is a [`Malformed`] reason, never a panic: every length is checked before use.
//!
//! [`FrameMatch::UdpPort`]: super::FrameMatch::UdpPort

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Ethernet II header length (no VLAN tag).
pub const ETH_HLEN: usize = 14;
/// IPv4 header length without options.
pub const IPV4_HLEN: usize = 20;
/// IPv6 fixed header length.
pub const IPV6_HLEN: usize = 40;
/// UDP header length.
pub const UDP_HLEN: usize = 8;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_UDP: u8 = 17;
/// Hop limit / TTL of sent datagrams (Linux's default `net.ipv4.ip_default_ttl`).
const DEFAULT_TTL: u8 = 64;

/// Bytes of headers in front of the payload of a UDP datagram to or from `addr`'s family.
pub fn headers_len(addr: IpAddr) -> usize {
    match addr {
        IpAddr::V4(_) => ETH_HLEN + IPV4_HLEN + UDP_HLEN,
        IpAddr::V6(_) => ETH_HLEN + IPV6_HLEN + UDP_HLEN,
    }
}

/// Why a frame is not a well-formed UDP datagram the endpoint takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// Shorter than the headers it announces.
    Short,
    /// Not IPv4 or IPv6 over untagged Ethernet: the EtherType (a VLAN tag, ARP, …).
    NotIp(u16),
    /// The IP version field disagrees with the EtherType.
    BadVersion,
    /// An IPv4 header with options (IHL above 5) or an IHL below 5.
    Ipv4Options,
    /// An IPv4 fragment (more-fragments set or a non-zero offset).
    Fragment,
    /// Not UDP: the IPv4 protocol or IPv6 next header (an extension header included).
    NotUdp(u8),
    /// An IP or UDP length field beyond the frame, or a UDP length below its header.
    BadLength,
    /// The IPv4 header checksum is wrong.
    BadIpChecksum,
    /// The UDP checksum is wrong (or zero over IPv6).
    BadUdpChecksum,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Short => f.write_str("frame shorter than its headers"),
            Malformed::NotIp(ty) => write!(f, "EtherType {ty:#06x} is not IPv4 or IPv6"),
            Malformed::BadVersion => f.write_str("IP version disagrees with the EtherType"),
            Malformed::Ipv4Options => f.write_str("IPv4 header with options"),
            Malformed::Fragment => f.write_str("IPv4 fragment"),
            Malformed::NotUdp(p) => write!(f, "IP protocol {p} is not UDP"),
            Malformed::BadLength => f.write_str("IP or UDP length disagrees with the frame"),
            Malformed::BadIpChecksum => f.write_str("bad IPv4 header checksum"),
            Malformed::BadUdpChecksum => f.write_str("bad UDP checksum"),
        }
    }
}

impl std::error::Error for Malformed {}

crate::error::own_error!(Malformed, InvalidData);

/// A parsed UDP datagram: its addresses and where its payload lies in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrame {
    /// Ethernet source address.
    pub src_mac: [u8; 6],
    /// Ethernet destination address.
    pub dst_mac: [u8; 6],
    /// IP source address and UDP source port.
    pub src: SocketAddr,
    /// IP destination address and UDP destination port.
    pub dst: SocketAddr,
    /// Offset of the payload in the frame.
    pub payload_start: usize,
    /// Payload length (from the UDP length field; Ethernet padding after it is ignored).
    pub payload_len: usize,
}

impl UdpFrame {
    /// The payload's byte range in the frame.
    pub fn payload_range(&self) -> std::ops::Range<usize> {
        self.payload_start..self.payload_start + self.payload_len
    }
}

/// Adds `bytes` as 16-bit big-endian words to the running one's complement sum `sum` (an odd last
/// byte padded with zero); fold with [`fold`].
///
/// The bytes are summed four at a time in the machine's byte order into a 64-bit accumulator (no
/// carry is lost below 2^32 words), which the compiler vectorises; RFC 1071 section 1.2(B) says the
/// folded sum then only needs its two bytes swapped on a little-endian machine. Every received
/// datagram pays this sum over all its bytes, so it is not summed a word at a time.
pub(crate) fn checksum_add(sum: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(4);
    let mut native: u64 = 0;
    for w in &mut words {
        native += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    // The last 1 to 3 bytes keep their place in a zero-padded word: an odd last byte is the high
    // byte of its big-endian 16-bit word, as RFC 1071 pads it.
    let rest = words.remainder();
    let mut last = [0u8; 4];
    last[..rest.len()].copy_from_slice(rest);
    native += u64::from(u32::from_ne_bytes(last));
    sum + u64::from(u16::from_be(fold(native)))
}

/// Folds a running sum into 16 bits (end-around carry).
pub(crate) fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The Internet checksum of `bytes` (RFC 1071): the complement of their folded sum.
pub fn checksum(bytes: &[u8]) -> u16 {
    !fold(checksum_add(0, bytes))
}

/// The running sum of the UDP pseudo header for `src`, `dst` and UDP length `udp_len`.
fn pseudo_header_sum(src: IpAddr, dst: IpAddr, udp_len: usize) -> u64 {
    let sum = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => checksum_add(checksum_add(0, &s.octets()), &d.octets()),
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum_add(checksum_add(0, &s.octets()), &d.octets()),
        // The callers pass addresses of one family.
        _ => 0,
    };
    sum + u64::from(IPPROTO_UDP) + udp_len as u64
}

fn be16(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at], frame[at + 1]])
}

fn mac(bytes: &[u8]) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&bytes[..6]);
    m
}

/// Parses `frame` as an Ethernet frame carrying one UDP datagram, verifying the IPv4 header checksum
/// and the UDP checksum (optional over IPv4, mandatory over IPv6).
pub fn parse(frame: &[u8]) -> Result<UdpFrame, Malformed> {
    if frame.len() < ETH_HLEN {
        return Err(Malformed::Short);
    }
    let (dst_mac, src_mac) = (mac(&frame[0..6]), mac(&frame[6..12]));
    let ip = &frame[ETH_HLEN..];
    let (src, dst, udp_at, ip_payload_len) = match be16(frame, 12) {
        ETHERTYPE_IPV4 => {
            if ip.len() < IPV4_HLEN {
                return Err(Malformed::Short);
            }
            if ip[0] >> 4 != 4 {
                return Err(Malformed::BadVersion);
            }
            if ip[0] & 0x0f != 5 {
                return Err(Malformed::Ipv4Options);
            }
            // Flags and fragment offset: more-fragments (0x2000) or an offset (0x1fff).
            if be16(ip, 6) & 0x3fff != 0 {
                return Err(Malformed::Fragment);
            }
            if ip[9] != IPPROTO_UDP {
                return Err(Malformed::NotUdp(ip[9]));
            }
            let total = usize::from(be16(ip, 2));
            if total < IPV4_HLEN || total > ip.len() {
                return Err(Malformed::BadLength);
            }
            if fold(checksum_add(0, &ip[..IPV4_HLEN])) != 0xffff {
                return Err(Malformed::BadIpChecksum);
            }
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (
                IpAddr::V4(src),
                IpAddr::V4(dst),
                ETH_HLEN + IPV4_HLEN,
                total - IPV4_HLEN,
            )
        }
        ETHERTYPE_IPV6 => {
            if ip.len() < IPV6_HLEN {
                return Err(Malformed::Short);
            }
            if ip[0] >> 4 != 6 {
                return Err(Malformed::BadVersion);
            }
            if ip[6] != IPPROTO_UDP {
                return Err(Malformed::NotUdp(ip[6]));
            }
            let payload = usize::from(be16(ip, 4));
            if payload > ip.len() - IPV6_HLEN {
                return Err(Malformed::BadLength);
            }
            let src: [u8; 16] = ip[8..24].try_into().expect("16 bytes");
            let dst: [u8; 16] = ip[24..40].try_into().expect("16 bytes");
            (
                IpAddr::V6(Ipv6Addr::from(src)),
                IpAddr::V6(Ipv6Addr::from(dst)),
                ETH_HLEN + IPV6_HLEN,
                payload,
            )
        }
        other => return Err(Malformed::NotIp(other)),
    };
    if ip_payload_len < UDP_HLEN {
        return Err(Malformed::BadLength);
    }
    let udp = &frame[udp_at..udp_at + ip_payload_len];
    let udp_len = usize::from(be16(udp, 4));
    if udp_len < UDP_HLEN || udp_len > ip_payload_len {
        return Err(Malformed::BadLength);
    }
    let stored = be16(udp, 6);
    let optional = src.is_ipv4() && stored == 0;
    if !optional {
        let sum = checksum_add(pseudo_header_sum(src, dst, udp_len), &udp[..udp_len]);
        if stored == 0 || fold(sum) != 0xffff {
            return Err(Malformed::BadUdpChecksum);
        }
    }
    Ok(UdpFrame {
        src_mac,
        dst_mac,
        src: SocketAddr::new(src, be16(udp, 0)),
        dst: SocketAddr::new(dst, be16(udp, 2)),
        payload_start: udp_at + UDP_HLEN,
        payload_len: udp_len - UDP_HLEN,
    })
}

/// The link and network ends of a datagram to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Ethernet source address (the interface's).
    pub src_mac: [u8; 6],
    /// Ethernet destination address (the next hop's).
    pub dst_mac: [u8; 6],
    /// IP source address and UDP source port.
    pub src: SocketAddr,
    /// IP destination address and UDP destination port (same family as `src`).
    pub dst: SocketAddr,
}

/// Why headers could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// Source and destination are of different address families.
    MixedFamilies,
    /// The datagram does not fit the IP length field (or the buffer is shorter than headers and
    /// payload).
    TooLong,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BuildError::MixedFamilies => "source and destination of different address families",
            BuildError::TooLong => "datagram too long for the IP length field or the frame buffer",
        })
    }
}

impl std::error::Error for BuildError {}

crate::error::own_error!(BuildError, InvalidInput);

/// Writes the Ethernet, IP and UDP headers of a datagram along `path` in front of the `payload_len`
/// bytes of payload already at `frame[headers_len(..)..]`, with the IPv4 header checksum and the UDP
/// checksum computed over the payload there; returns the frame length. The IPv4 identification is
/// `id` (datagrams are sent with don't-fragment set, so it only needs to differ between neighbours).
pub fn write_udp(
    frame: &mut [u8],
    path: &Path,
    payload_len: usize,
    id: u16,
) -> Result<usize, BuildError> {
    write(frame, path, payload_len, id, UdpSum::Whole)
}

/// [`write_udp`] for a transmit checksum offload: the UDP checksum field holds only the
/// pseudo-header sum (folded, not complemented), which the device (or the stack, for a
/// `CHECKSUM_PARTIAL` packet) turns into the checksum by summing from the UDP header
/// ([`udp_offset`]) to the frame's end and storing the complement at offset 6 of the UDP header.
pub fn write_udp_for_offload(
    frame: &mut [u8],
    path: &Path,
    payload_len: usize,
    id: u16,
) -> Result<usize, BuildError> {
    write(frame, path, payload_len, id, UdpSum::PseudoHeader)
}

/// Where the UDP header of a datagram to or from `ip`'s family starts in its frame.
pub fn udp_offset(ip: IpAddr) -> usize {
    headers_len(ip) - UDP_HLEN
}

/// What goes into the UDP checksum field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UdpSum {
    /// The checksum.
    Whole,
    /// The pseudo-header sum, for the device to complete.
    PseudoHeader,
}

fn write(
    frame: &mut [u8],
    path: &Path,
    payload_len: usize,
    id: u16,
    sum: UdpSum,
) -> Result<usize, BuildError> {
    let (src_ip, dst_ip) = (path.src.ip(), path.dst.ip());
    if src_ip.is_ipv4() != dst_ip.is_ipv4() {
        return Err(BuildError::MixedFamilies);
    }
    // An IP length field fits only a `payload_len` far below where these sums could wrap: check it
    // before adding anything to it.
    let hlen = headers_len(src_ip);
    if payload_len > usize::from(u16::MAX) - (hlen - ETH_HLEN) {
        return Err(BuildError::TooLong);
    }
    let udp_len = UDP_HLEN + payload_len;
    let frame_len = hlen + payload_len;
    let ip_len = frame_len - ETH_HLEN;
    if frame.len() < frame_len {
        return Err(BuildError::TooLong);
    }
    frame[0..6].copy_from_slice(&path.dst_mac);
    frame[6..12].copy_from_slice(&path.src_mac);
    let udp_at = match (src_ip, dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            frame[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            let ip = &mut frame[ETH_HLEN..ETH_HLEN + IPV4_HLEN];
            ip[0] = 0x45;
            ip[1] = 0;
            ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            // Don't fragment, offset 0.
            ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
            ip[8] = DEFAULT_TTL;
            ip[9] = IPPROTO_UDP;
            ip[10..12].fill(0);
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            let sum = checksum(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            ETH_HLEN + IPV4_HLEN
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            frame[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let ip = &mut frame[ETH_HLEN..ETH_HLEN + IPV6_HLEN];
            ip[0..4].copy_from_slice(&0x6000_0000u32.to_be_bytes());
            ip[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            ip[6] = IPPROTO_UDP;
            ip[7] = DEFAULT_TTL;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            ETH_HLEN + IPV6_HLEN
        }
        _ => unreachable!("families checked above"),
    };
    let udp = &mut frame[udp_at..udp_at + udp_len];
    udp[0..2].copy_from_slice(&path.src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&path.dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    udp[6..8].fill(0);
    let pseudo = pseudo_header_sum(src_ip, dst_ip, udp_len);
    let sum = match sum {
        UdpSum::PseudoHeader => fold(pseudo),
        UdpSum::Whole => {
            let sum = !fold(checksum_add(pseudo, udp));
            // A computed zero is sent as all ones (zero means "no checksum" over IPv4, invalid over
            // IPv6).
            if sum == 0 { 0xffff } else { sum }
        }
    };
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
    Ok(frame_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn path(src: &str, dst: &str) -> Path {
        Path {
            src_mac: A_MAC,
            dst_mac: B_MAC,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
        }
    }

    fn built(p: &Path, payload: &[u8]) -> Vec<u8> {
        let hlen = headers_len(p.src.ip());
        let mut frame = vec![0u8; hlen + payload.len()];
        frame[hlen..].copy_from_slice(payload);
        let len = write_udp(&mut frame, p, payload.len(), 7).unwrap();
        assert_eq!(len, frame.len());
        frame
    }

    #[test]
    fn rfc1071_example_sums() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (carries folded).
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(checksum_add(0, &bytes)), 0xddf2);
        assert_eq!(checksum(&bytes), !0xddf2);
        // An odd length pads the last byte with zero.
        assert_eq!(fold(checksum_add(0, &[0x01])), 0x0100);
    }

    #[test]
    fn ipv4_header_checksum_matches_a_known_header() {
        // A widely quoted example header (Wikipedia, "IPv4 header checksum"): checksum b861.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&header), 0xb861);
    }

    #[test]
    fn ipv4_datagram_round_trips() {
        let p = path("10.0.0.1:4000", "10.0.0.2:9099");
        let frame = built(&p, b"hello, world");
        let got = parse(&frame).unwrap();
        assert_eq!((got.src, got.dst), (p.src, p.dst));
        assert_eq!((got.src_mac, got.dst_mac), (A_MAC, B_MAC));
        assert_eq!(&frame[got.payload_range()], b"hello, world");
        assert_eq!(frame[ETH_HLEN + 8], DEFAULT_TTL);
    }

    #[test]
    fn an_offloaded_checksum_completed_as_a_device_does_is_the_whole_one() {
        for (src, dst) in [
            ("10.0.0.1:4000", "10.0.0.2:9099"),
            ("[fd00::1]:4000", "[fd00::2]:9099"),
        ] {
            let p = path(src, dst);
            let payload = b"an odd-length payload";
            let whole = built(&p, payload);
            let hlen = headers_len(p.src.ip());
            let mut partial = vec![0u8; whole.len()];
            partial[hlen..].copy_from_slice(payload);
            let len = write_udp_for_offload(&mut partial, &p, payload.len(), 7).unwrap();
            assert_eq!(len, whole.len());
            // As sent: only the checksum field differs, and the receiver would refuse it.
            let at = udp_offset(p.src.ip());
            assert_eq!(partial[..at + 6], whole[..at + 6]);
            assert_eq!(partial[at + 8..], whole[at + 8..]);
            assert_ne!(partial[at + 6..at + 8], whole[at + 6..at + 8]);
            assert_eq!(parse(&partial).unwrap_err(), Malformed::BadUdpChecksum);
            // CHECKSUM_PARTIAL's completion: sum from csum_start to the end, store the complement.
            let sum = checksum(&partial[at..]);
            partial[at + 6..at + 8].copy_from_slice(&sum.to_be_bytes());
            assert_eq!(partial, whole, "{src}");
        }
    }

    #[test]
    fn ipv6_datagram_round_trips_and_empty_payloads_too() {
        let p = path("[fd00::1]:4000", "[fd00::2]:9099");
        for payload in [&b""[..], b"x", b"an odd-length payload"] {
            let frame = built(&p, payload);
            let got = parse(&frame).unwrap();
            assert_eq!((got.src, got.dst), (p.src, p.dst));
            assert_eq!(&frame[got.payload_range()], payload);
        }
    }

    #[test]
    fn ethernet_padding_after_the_datagram_is_ignored() {
        let p = path("10.0.0.1:1", "10.0.0.2:2");
        let mut frame = built(&p, b"ab");
        frame.resize(60, 0xee);
        let got = parse(&frame).unwrap();
        assert_eq!(&frame[got.payload_range()], b"ab");
    }

    #[test]
    fn zero_udp_checksum_is_accepted_over_ipv4_only() {
        let mut v4 = built(&path("10.0.0.1:1", "10.0.0.2:2"), b"data");
        v4[ETH_HLEN + IPV4_HLEN + 6..ETH_HLEN + IPV4_HLEN + 8].fill(0);
        assert!(parse(&v4).is_ok());
        let mut v6 = built(&path("[fd00::1]:1", "[fd00::2]:2"), b"data");
        v6[ETH_HLEN + IPV6_HLEN + 6..ETH_HLEN + IPV6_HLEN + 8].fill(0);
        assert_eq!(parse(&v6), Err(Malformed::BadUdpChecksum));
    }

    #[test]
    fn corruptions_are_named() {
        let good = built(&path("10.0.0.1:1", "10.0.0.2:2"), b"payload");
        let with = |at: usize, value: u8| {
            let mut f = good.clone();
            f[at] = value;
            parse(&f)
        };
        assert_eq!(with(12, 0x81), Err(Malformed::NotIp(0x8100)));
        assert_eq!(with(ETH_HLEN, 0x46), Err(Malformed::Ipv4Options));
        assert_eq!(with(ETH_HLEN, 0x44), Err(Malformed::Ipv4Options));
        assert_eq!(with(ETH_HLEN, 0x65), Err(Malformed::BadVersion));
        assert_eq!(with(ETH_HLEN + 6, 0x60), Err(Malformed::Fragment));
        assert_eq!(with(ETH_HLEN + 7, 0x01), Err(Malformed::Fragment));
        assert_eq!(with(ETH_HLEN + 9, 6), Err(Malformed::NotUdp(6)));
        assert_eq!(with(ETH_HLEN + 3, 0xff), Err(Malformed::BadLength));
        assert_eq!(with(ETH_HLEN + 8, 1), Err(Malformed::BadIpChecksum));
        let payload_at = ETH_HLEN + IPV4_HLEN + UDP_HLEN;
        assert_eq!(with(payload_at, b'P'), Err(Malformed::BadUdpChecksum));
        let udp_len_low = ETH_HLEN + IPV4_HLEN + 5;
        assert_eq!(with(udp_len_low, 0xff), Err(Malformed::BadLength));
        assert_eq!(with(udp_len_low, 4), Err(Malformed::BadLength));
        for len in 0..good.len() {
            assert!(parse(&good[..len]).is_err(), "a {len}-byte prefix parsed");
        }
        let v6 = built(&path("[fd00::1]:1", "[fd00::2]:2"), b"payload");
        let mut ext = v6.clone();
        ext[ETH_HLEN + 6] = 0; // hop-by-hop options header first
        assert_eq!(parse(&ext), Err(Malformed::NotUdp(0)));
        for len in 0..v6.len() {
            assert!(parse(&v6[..len]).is_err(), "a {len}-byte prefix parsed");
        }
    }

    #[test]
    fn mixed_families_and_short_buffers_are_refused() {
        let mut frame = [0u8; 128];
        let mixed = path("10.0.0.1:1", "[fd00::2]:2");
        assert_eq!(
            write_udp(&mut frame, &mixed, 0, 0),
            Err(BuildError::MixedFamilies)
        );
        let p = path("10.0.0.1:1", "10.0.0.2:2");
        assert_eq!(write_udp(&mut frame, &p, 100, 0), Err(BuildError::TooLong));
    }

    /// A length whose sums with the header lengths wrap is refused, never a panic, whatever the
    /// buffer.
    #[test]
    fn lengths_that_wrap_are_too_long() {
        let mut frame = vec![0u8; 70_000];
        for p in [
            path("10.0.0.1:1", "10.0.0.2:2"),
            path("[fd00::1]:1", "[fd00::2]:2"),
        ] {
            for len in [
                usize::MAX,
                usize::MAX - ETH_HLEN,
                usize::MAX - headers_len(p.src.ip()) + 1,
                usize::MAX - UDP_HLEN + 1,
                65_536,
            ] {
                assert_eq!(write_udp(&mut frame, &p, len, 0), Err(BuildError::TooLong));
                assert_eq!(
                    write_udp_for_offload(&mut frame, &p, len, 0),
                    Err(BuildError::TooLong)
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Random bytes never panic the parser, and a frame it accepts has its payload inside.
        #[test]
        fn the_sum_equals_the_word_at_a_time_definition(
            start in prop_oneof![Just(0u64), Just(0xffff), Just(u64::from(u32::MAX)), 0u64..(1 << 40)],
            bytes in proptest::collection::vec(any::<u8>(), 0..3000),
        ) {
            let mut words = bytes.chunks(2);
            let by_words = (&mut words).fold(start, |sum, w| {
                sum + u64::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)]))
            });
            prop_assert_eq!(fold(checksum_add(start, &bytes)), fold(by_words));
        }

        #[test]
        fn random_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(got) = parse(&bytes) {
                prop_assert!(got.payload_range().end <= bytes.len());
            }
        }

        /// A random frame that starts as IPv4 or IPv6 UDP exercises the deeper checks.
        #[test]
        fn random_ip_udp_frames_never_panic(
            v6 in any::<bool>(),
            rest in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut bytes = vec![0u8; 12];
            let (ty, first): (u16, u8) = if v6 { (ETHERTYPE_IPV6, 0x60) } else { (ETHERTYPE_IPV4, 0x45) };
            bytes.extend_from_slice(&ty.to_be_bytes());
            bytes.push(first);
            bytes.extend_from_slice(&rest);
            if let Ok(got) = parse(&bytes) {
                prop_assert!(got.payload_range().end <= bytes.len());
            }
        }

        /// Built datagrams parse back to what was built, whatever the payload.
        #[test]
        fn built_datagrams_round_trip(
            v6 in any::<bool>(),
            sport in any::<u16>(),
            dport in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..1500),
        ) {
            let p = if v6 {
                path(&format!("[fd00::1]:{sport}"), &format!("[fd00::2]:{dport}"))
            } else {
                path(&format!("10.0.0.1:{sport}"), &format!("10.0.0.2:{dport}"))
            };
            let frame = built(&p, &payload);
            let got = parse(&frame).unwrap();
            prop_assert_eq!((got.src, got.dst), (p.src, p.dst));
            prop_assert_eq!(&frame[got.payload_range()], &payload[..]);
        }
    }
}
