//! Flow keys and masks (`OVS_KEY_ATTR_*`) in OVS's datapath flow syntax, e.g.
//! `in_port(1),eth(src=02:00:00:00:00:01),eth_type(0x0800),ipv4(src=10.0.0.0/255.255.255.0,frag=no)`.
//!
//! Printing follows `ovs-dpctl dump-flows`: an attribute whose mask is all zeros is left out (a
//! wildcarded `eth` still prints as `eth()`: the kernel takes Ethernet as the packet's root when the
//! attribute is present), a field whose mask is zero is left out, a partly masked field prints as
//! `value/mask`. Attributes zcnet has no notation for print as `key<N>(<hex bytes>)`, never dropped.

use std::fmt::Write as _;

use crate::sys::netlink::Attributes;
use crate::sys::ovs::key_attr as k;

use super::OdpParseError;
use super::text::{self, AttrWriter, Cursor, hex, number};

/// How a field of a fixed-layout key struct is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fmt {
    Mac,
    Ip4,
    Ip6,
    /// u8 in decimal (`proto=17`).
    U8,
    /// u8 as `%#x` (`tos=0x10`).
    U8Hex,
    /// be16 in decimal (`src=53`).
    Be16,
    /// be32 as `%#x`.
    Be32Hex,
    /// The IPv6 flow label: be32 of which 20 bits count.
    Label,
    /// `OVS_FRAG_TYPE_*`: no, first, later.
    Frag,
}

impl Fmt {
    fn width(self) -> usize {
        match self {
            Fmt::Mac => 6,
            Fmt::Ip4 | Fmt::Be32Hex | Fmt::Label => 4,
            Fmt::Ip6 => 16,
            Fmt::U8 | Fmt::U8Hex | Fmt::Frag => 1,
            Fmt::Be16 => 2,
        }
    }

    /// The mask of a field written without `/mask`.
    fn full(self) -> Vec<u8> {
        match self {
            Fmt::Label => 0x000f_ffffu32.to_be_bytes().to_vec(),
            _ => vec![0xff; self.width()],
        }
    }

    /// Whether `b` (a value or mask) fits the field: a flow label is 20 bits of its 32.
    fn fits(self, b: &[u8]) -> bool {
        self != Fmt::Label || be(b) >> 20 == 0
    }

    /// Whether mask `m` prints in the notation: one that fits the field, or all ones — the mask the
    /// kernel builds for a flow installed without one, which Open vSwitch prints as an exact match
    /// (its text reads back with the 20-bit mask, which matches the same packets: no key has a label
    /// beyond 20 bits).
    fn fits_mask(self, m: &[u8]) -> bool {
        self.fits(m) || all(m, 0xff)
    }

    /// What a value of the field is, for errors.
    fn what(self, name: &str) -> String {
        match self {
            Fmt::Label => format!("a {name}: 20 bits, at most 0xfffff"),
            _ => format!("a value for {name}"),
        }
    }

    fn is_full(self, m: &[u8]) -> bool {
        match self {
            Fmt::Label => be(m) & 0xf_ffff == 0xf_ffff,
            _ => m.iter().all(|b| *b == 0xff),
        }
    }

    fn show(self, v: &[u8], is_mask: bool) -> String {
        match self {
            Fmt::Mac => text::mac(v),
            Fmt::Ip4 => text::ipv4(v),
            Fmt::Ip6 => text::ipv6(v),
            Fmt::U8 | Fmt::Be16 if !is_mask => be(v).to_string(),
            Fmt::Frag if !is_mask => match v[0] {
                0 => "no".into(),
                1 => "first".into(),
                2 => "later".into(),
                n => n.to_string(),
            },
            _ => hex(be(v)),
        }
    }

    fn read(self, s: &str) -> Option<Vec<u8>> {
        let w = self.width();
        let int = |s: &str| {
            let n = number(s)?;
            (w == 8 || n >> (8 * w) == 0).then(|| n.to_be_bytes()[8 - w..].to_vec())
        };
        match self {
            Fmt::Mac => text::parse_mac(s),
            Fmt::Ip4 => text::parse_ipv4(s),
            Fmt::Ip6 => text::parse_ipv6(s),
            Fmt::Frag => match s {
                "no" => Some(vec![0]),
                "first" => Some(vec![1]),
                "later" => Some(vec![2]),
                _ => int(s),
            },
            Fmt::Label => int(s).filter(|b| self.fits(b)),
            _ => int(s),
        }
    }
}

/// A big-endian unsigned integer of up to 8 bytes.
fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |acc, x| acc << 8 | u64::from(*x))
}

type Field = (&'static str, usize, Fmt);

/// The struct attributes: type, name, size, fields in printing order.
const STRUCTS: &[(u16, &str, usize, &[Field])] = &[
    (
        k::ETHERNET,
        "eth",
        12,
        &[("src", 0, Fmt::Mac), ("dst", 6, Fmt::Mac)],
    ),
    (
        k::IPV4,
        "ipv4",
        12,
        &[
            ("src", 0, Fmt::Ip4),
            ("dst", 4, Fmt::Ip4),
            ("proto", 8, Fmt::U8),
            ("tos", 9, Fmt::U8Hex),
            ("ttl", 10, Fmt::U8),
            ("frag", 11, Fmt::Frag),
        ],
    ),
    (
        k::IPV6,
        "ipv6",
        40,
        &[
            ("src", 0, Fmt::Ip6),
            ("dst", 16, Fmt::Ip6),
            ("label", 32, Fmt::Label),
            ("proto", 36, Fmt::U8),
            ("tclass", 37, Fmt::U8Hex),
            ("hlimit", 38, Fmt::U8),
            ("frag", 39, Fmt::Frag),
        ],
    ),
    (k::TCP, "tcp", 4, PORTS),
    (k::UDP, "udp", 4, PORTS),
    (k::SCTP, "sctp", 4, PORTS),
    (k::ICMP, "icmp", 2, ICMP),
    (k::ICMPV6, "icmpv6", 2, ICMP),
    (
        k::ARP,
        "arp",
        24,
        &[
            ("sip", 0, Fmt::Ip4),
            ("tip", 4, Fmt::Ip4),
            ("op", 8, Fmt::Be16),
            ("sha", 10, Fmt::Mac),
            ("tha", 16, Fmt::Mac),
        ],
    ),
    (
        k::ND,
        "nd",
        28,
        &[
            ("target", 0, Fmt::Ip6),
            ("sll", 16, Fmt::Mac),
            ("tll", 22, Fmt::Mac),
        ],
    ),
    (
        k::CT_ORIG_TUPLE_IPV4,
        "ct_tuple4",
        16,
        &[
            ("src", 0, Fmt::Ip4),
            ("dst", 4, Fmt::Ip4),
            ("proto", 12, Fmt::U8),
            ("tp_src", 8, Fmt::Be16),
            ("tp_dst", 10, Fmt::Be16),
        ],
    ),
    (
        k::CT_ORIG_TUPLE_IPV6,
        "ct_tuple6",
        40,
        &[
            ("src", 0, Fmt::Ip6),
            ("dst", 16, Fmt::Ip6),
            ("proto", 36, Fmt::U8),
            ("tp_src", 32, Fmt::Be16),
            ("tp_dst", 34, Fmt::Be16),
        ],
    ),
    (
        k::ND_EXTENSIONS,
        "nd_ext",
        8,
        &[
            ("nd_reserved", 0, Fmt::Be32Hex),
            ("nd_options_type", 4, Fmt::U8),
        ],
    ),
];
const PORTS: &[Field] = &[("src", 0, Fmt::Be16), ("dst", 2, Fmt::Be16)];
const ICMP: &[Field] = &[("type", 0, Fmt::U8), ("code", 1, Fmt::U8)];

/// Native-endian u32 attributes printed as `%#x`, and their names.
const HEX32: &[(u16, &str)] = &[
    (k::PRIORITY, "skb_priority"),
    (k::SKB_MARK, "skb_mark"),
    (k::DP_HASH, "dp_hash"),
    (k::RECIRC_ID, "recirc_id"),
    (k::CT_MARK, "ct_mark"),
];

const CT_STATE_BITS: &[&str] = &["new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"];
const TCP_FLAG_BITS: &[&str] = &["fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns"];
/// The bits of a be16 `tcp_flags` that are flags.
const TCP_FLAGS_MASK: u64 = 0x0fff;

/// `OVS_KEY_ATTR_TUNNEL_INFO`: the last key attribute Open vSwitch 3.1 knows.
const LAST_KNOWN_TO_OVS: u16 = 31;

/// The nested attributes (their masks nest too).
fn is_nested(ty: u16) -> bool {
    matches!(ty, k::ENCAP | k::TUNNEL | k::NSH)
}

fn find(attrs: &[u8], ty: u16) -> Option<&[u8]> {
    Attributes::new(attrs)
        .map_while(Result::ok)
        .find(|(t, _)| *t == ty)
        .map(|(_, p)| p)
}

fn all(b: &[u8], v: u8) -> bool {
    b.iter().all(|x| *x == v)
}

/// Formats key attributes `key` with their `mask` (`None`: an exact match) as `ovs-dpctl
/// dump-flows` does. An `encap` nested too deep for the text parsers, or whose attributes do not
/// parse, prints raw; bytes after the last attribute that parses print as a note that does not
/// read back.
pub fn format_key(key: &[u8], mask: Option<&[u8]>) -> String {
    format_key_at(key, mask, 0)
}

/// [`format_key`] inside `depth` parentheses.
fn format_key_at(key: &[u8], mask: Option<&[u8]>, depth: usize) -> String {
    let mut out = Vec::new();
    let mut has_ethertype = false;
    let mut rest = key;
    for attr in Attributes::new(key) {
        let Ok((ty, v)) = attr else {
            out.push(format!(
                "***{} leftover bytes*** ({})",
                rest.len(),
                text::raw_hex(rest)
            ));
            break;
        };
        rest = &rest[crate::sys::netlink::align4(v.len() + 4).min(rest.len())..];
        has_ethertype |= ty == k::ETHERTYPE;
        let m = mask.map(|m| find(m, ty));
        let wildcard = match m {
            Some(Some(m)) => all(m, 0),
            Some(None) => true,
            None => false,
        };
        // Open vSwitch 3.1 prints an attribute beyond those it knows (`ipv6_exthdrs`, 32, which
        // Linux 6.12 dumps for IPv6 flows) even when its mask is all zeros; so does zcnet.
        if !wildcard || is_nested(ty) || ty > LAST_KNOWN_TO_OVS {
            let zeros;
            let m = match m {
                Some(Some(m)) => Some(m),
                Some(None) => {
                    zeros = vec![0u8; v.len()];
                    Some(&zeros[..])
                }
                None => None,
            };
            out.push(format_attr(ty, v, m, depth));
        } else if ty == k::ETHERNET {
            out.push("eth()".into());
        }
    }
    let mut s = out.join(",");
    if !has_ethertype && let Some(m) = mask.and_then(|m| find(m, k::ETHERTYPE)) {
        let _ = write!(s, ",eth_type(0/0x{:04x})", be(m));
    }
    if key.is_empty() {
        s = "<empty>".into();
    }
    s
}

/// One attribute `name(...)` inside `depth` parentheses; `mask` `None` is exact. Malformed ones,
/// and nested ones too deep (see [`text::nests_within`]), print raw.
pub(crate) fn format_attr(ty: u16, v: &[u8], m: Option<&[u8]>, depth: usize) -> String {
    typed_attr(ty, v, m, depth).unwrap_or_else(|| {
        let mut s = format!("key{ty}({}", text::raw_hex(v));
        // OVS 3.1 cannot tell an exact mask of an attribute it does not know: it always writes one.
        // A nested attribute's mask (attributes too) may differ in length from its value.
        if let Some(m) = m.filter(|m| ty > LAST_KNOWN_TO_OVS || !all(m, 0xff) || m.len() != v.len())
        {
            let _ = write!(s, "/{}", text::raw_hex(m));
        }
        s + ")"
    })
}

fn typed_attr(ty: u16, v: &[u8], m: Option<&[u8]>, depth: usize) -> Option<String> {
    if let Some(m) = m
        && m.len() != v.len()
        && ty != k::ENCAP
    {
        return None;
    }
    let exact = m.is_none_or(|m| all(m, 0xff));
    let scalar = |name: &str, value: String, mask: fn(&[u8]) -> String| {
        let mut s = format!("{name}({value}");
        if !exact {
            s += "/";
            s += &mask(m.unwrap_or_default());
        }
        Some(s + ")")
    };
    let ne32 = |b: &[u8]| b.try_into().ok().map(u32::from_ne_bytes);
    if let Some((_, name)) = HEX32.iter().find(|(t, _)| *t == ty) {
        let value = ne32(v)?;
        return scalar(name, hex(value.into()), |m| {
            hex(u32::from_ne_bytes(m.try_into().unwrap_or_default()).into())
        });
    }
    if let Some((_, name, size, fields)) = STRUCTS.iter().find(|s| s.0 == ty) {
        return (v.len() == *size)
            .then(|| format_struct(name, fields, v, m))
            .flatten();
    }
    match ty {
        k::ENCAP if text::nests_within(depth, 1) && well_formed(v) && m.is_none_or(well_formed) => {
            let inner = format_key_at(v, m, depth + 1);
            Some(format!("encap({})", if v.is_empty() { "" } else { &inner }))
        }
        k::IN_PORT => scalar("in_port", ne32(v)?.to_string(), |m| {
            hex(u32::from_ne_bytes(m.try_into().unwrap_or_default()).into())
        }),
        k::ETHERTYPE if v.len() == 2 => scalar("eth_type", format!("0x{:04x}", be(v)), |m| {
            format!("0x{:04x}", be(m))
        }),
        k::CT_ZONE if v.len() == 2 => {
            let zone = u16::from_ne_bytes([v[0], v[1]]);
            scalar("ct_zone", hex(zone.into()), |m| {
                hex(u16::from_ne_bytes([m[0], m[1]]).into())
            })
        }
        k::CT_LABELS if v.len() == 16 => {
            // OVS reads the 16 bytes as one native-endian 128-bit number and prints it in hex.
            let n = |b: &[u8]| u128::from_ne_bytes(b.try_into().unwrap_or_default());
            scalar("ct_label", hex128(n(v)), |m| {
                hex128(u128::from_ne_bytes(m.try_into().unwrap_or_default()))
            })
        }
        // The kernel refuses a mask that leaves the CFI bit out; the text has no way to say it.
        k::VLAN if v.len() == 2 && m.is_none_or(|m| be(m) & 0x1000 != 0) => Some(format!(
            "vlan({})",
            vlan_tci(be(v) as u16, m.map_or(0xffff, |m| be(m) as u16))
        )),
        k::CT_STATE => {
            let flags = u64::from(ne32(v)?);
            let mask = m.map_or(Some(0xffff_ffff), |m| ne32(m).map(u64::from))?;
            flags_text(CT_STATE_BITS, flags, mask, 0xffff_ffff).map(|s| format!("ct_state({s})"))
        }
        k::TCP_FLAGS if v.len() == 2 => {
            let flags = be(v);
            // A partial mask beyond the flag bits has no notation: the attribute prints raw.
            let (mask, max) = if exact {
                (0xffff, 0xffff)
            } else {
                let mask = be(m?);
                if mask & !TCP_FLAGS_MASK != 0 {
                    return None;
                }
                (mask, TCP_FLAGS_MASK)
            };
            flags_text(TCP_FLAG_BITS, flags, mask, max).map(|s| format!("tcp_flags({s})"))
        }
        _ => None,
    }
}

/// `%#x` of a 128-bit number.
fn hex128(v: u128) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// Attributes that all parse.
fn well_formed(b: &[u8]) -> bool {
    Attributes::new(b).all(|a| a.is_ok())
}

/// `None` when a field's value or mask does not fit the field (the attribute then prints raw).
fn format_struct(name: &str, fields: &[Field], v: &[u8], m: Option<&[u8]>) -> Option<String> {
    let mut parts = Vec::new();
    for &(fname, off, fmt) in fields {
        let fv = &v[off..off + fmt.width()];
        let fm = m.map(|m| &m[off..off + fmt.width()]);
        if !fmt.fits(fv) || fm.is_some_and(|fm| !fmt.fits_mask(fm)) {
            return None;
        }
        if fm.is_some_and(|fm| all(fm, 0)) {
            continue;
        }
        let mut s = format!("{fname}={}", fmt.show(fv, false));
        if let Some(fm) = fm.filter(|fm| !fmt.is_full(fm)) {
            s += "/";
            s += &fmt.show(fm, true);
        }
        parts.push(s);
    }
    Some(format!("{name}({})", parts.join(",")))
}

/// `vid=…,pcp=…[,cfi=0]` of a VLAN TCI, as OVS writes it.
pub(crate) fn vlan_tci(tci: u16, mask: u16) -> String {
    let (vid, vid_m) = (tci & 0xfff, mask & 0xfff);
    let (pcp, pcp_m) = (tci >> 13, mask >> 13);
    let mut parts = Vec::new();
    if vid != 0 || vid_m != 0 {
        let mut s = format!("vid={vid}");
        if vid_m != 0xfff {
            let _ = write!(s, "/0x{vid_m:x}");
        }
        parts.push(s);
    }
    if pcp != 0 || pcp_m != 0 {
        let mut s = format!("pcp={pcp}");
        if pcp_m != 7 {
            let _ = write!(s, "/0x{pcp_m:x}");
        }
        parts.push(s);
    }
    if tci & 0x1000 == 0 {
        parts.push("cfi=0".into());
    }
    parts.join(",")
}

/// Flags as OVS writes them: `a|b` when the mask is `max`, else `+a-b`; `None` when a bit has no
/// name (the attribute then prints raw).
fn flags_text(names: &[&str], flags: u64, mask: u64, max: u64) -> Option<String> {
    let named = (1u64 << names.len()) - 1;
    if flags & !named != 0 || (mask != max && mask & !named != 0) {
        return None;
    }
    if mask == max {
        if flags == 0 {
            return Some("0".into());
        }
        let set: Vec<_> = (0..names.len())
            .filter(|b| flags >> b & 1 == 1)
            .map(|b| names[b])
            .collect();
        return Some(set.join("|"));
    }
    if mask == 0 {
        return Some("0/0".into());
    }
    Some(
        (0..names.len())
            .filter(|b| mask >> b & 1 == 1)
            .map(|b| {
                format!(
                    "{}{}",
                    if flags >> b & 1 == 1 { '+' } else { '-' },
                    names[b]
                )
            })
            .collect(),
    )
}

fn parse_flags(
    c: &Cursor,
    names: &[&str],
    s: &str,
    full: u64,
) -> Result<(u64, u64), OdpParseError> {
    let bit = |n: &str| {
        names
            .iter()
            .position(|x| *x == n)
            .map(|b| 1u64 << b)
            .ok_or_else(|| c.error(format!("unknown flag `{n}`")))
    };
    if s == "0" {
        return Ok((0, full));
    }
    if s == "0/0" {
        return Ok((0, 0));
    }
    if s.starts_with(['+', '-']) {
        let (mut flags, mut mask) = (0, 0);
        let mut rest = s;
        while let Some(sign) = rest.chars().next() {
            let body = &rest[1..];
            let end = body.find(['+', '-']).unwrap_or(body.len());
            let b = bit(&body[..end])?;
            mask |= b;
            if sign == '+' {
                flags |= b;
            }
            rest = &body[end..];
        }
        return Ok((flags, mask));
    }
    let mut flags = 0;
    for n in s.split('|') {
        flags |= bit(n)?;
    }
    Ok((flags, full))
}

/// Parses key text into key attributes and their mask attributes. A field written without `/mask`
/// is exact; a field left out, wildcarded; values are stored masked, as the kernel keeps them.
pub fn parse_key(s: &str) -> Result<(Vec<u8>, Vec<u8>), OdpParseError> {
    let (mut key, mut mask) = (AttrWriter::default(), AttrWriter::default());
    text::check_nesting(s)?;
    let s = s.trim();
    if s == "<empty>" || s.is_empty() {
        return Ok((key.buf, mask.buf));
    }
    for (at, part) in text::split_top(s) {
        let (ty, v, m) = parse_attr(part.trim()).map_err(|e| e.shift(at))?;
        key.put(ty, &v)?;
        mask.put(ty, &m)?;
    }
    Ok((key.buf, mask.buf))
}

fn ty_of(name: &str) -> Option<u16> {
    let named = STRUCTS
        .iter()
        .map(|s| (s.0, s.1))
        .chain(HEX32.iter().copied())
        .chain([
            (k::ENCAP, "encap"),
            (k::IN_PORT, "in_port"),
            (k::ETHERTYPE, "eth_type"),
            (k::CT_ZONE, "ct_zone"),
            (k::VLAN, "vlan"),
            (k::CT_STATE, "ct_state"),
            (k::CT_LABELS, "ct_label"),
            (k::TCP_FLAGS, "tcp_flags"),
        ])
        .find(|(_, n)| *n == name)
        .map(|(t, _)| t);
    named.or_else(|| name.strip_prefix("key")?.parse().ok())
}

/// One `name(...)` key attribute: its type, value (masked) and mask.
pub(crate) fn parse_attr(s: &str) -> Result<(u16, Vec<u8>, Vec<u8>), OdpParseError> {
    let mut c = Cursor::new(s);
    let name = c.name();
    let ty = ty_of(name).ok_or_else(|| OdpParseError::new(0, format!("unknown key `{name}`")))?;
    c.expect("(")?;
    let body_at = s.len() - c.rest().len();
    let body = c.group()?;
    if !c.at_end() {
        return Err(c.error("text after the key's closing parenthesis"));
    }
    let r = parse_body(ty, name, body).map_err(|e| e.shift(body_at))?;
    Ok((ty, r.0, r.1))
}

fn scalar_parts<'a>(
    c: &Cursor,
    body: &'a str,
) -> Result<(&'a str, Option<&'a str>), OdpParseError> {
    let (v, m) = match body.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (body, None),
    };
    if v.is_empty() {
        return Err(c.error("missing value"));
    }
    Ok((v, m))
}

fn parse_body(ty: u16, name: &str, body: &str) -> Result<(Vec<u8>, Vec<u8>), OdpParseError> {
    let c = Cursor::new(body);
    let int = |s: &str, bits: u32| number(s).filter(|n| bits == 64 || n >> bits == 0);
    if name.starts_with("key") {
        return parse_raw(&c, ty, body);
    }
    if let Some((_, _, size, fields)) = STRUCTS.iter().find(|s| s.0 == ty) {
        return parse_struct(body, *size, fields);
    }
    let masked = |v: u64, m: u64| (v & m, m);
    let scalar = |bits: u32, mask_default: u64| -> Result<(u64, u64), OdpParseError> {
        let (v, m) = scalar_parts(&c, body)?;
        let v = c.parse(v, "a number", |s| int(s, bits))?;
        let m = match m {
            Some(m) => c.parse(m, "a mask", |s| int(s, bits))?,
            None => mask_default,
        };
        Ok(masked(v, m))
    };
    if HEX32.iter().any(|(t, _)| *t == ty) || ty == k::IN_PORT {
        let (v, m) = scalar(32, 0xffff_ffff)?;
        return Ok((
            (v as u32).to_ne_bytes().to_vec(),
            (m as u32).to_ne_bytes().to_vec(),
        ));
    }
    match ty {
        k::ENCAP => parse_key(body),
        k::ETHERTYPE => {
            let (v, m) = scalar(16, 0xffff)?;
            Ok((
                (v as u16).to_be_bytes().to_vec(),
                (m as u16).to_be_bytes().to_vec(),
            ))
        }
        k::CT_LABELS => {
            let (v, m) = scalar_parts(&c, body)?;
            let n = |s: &str| {
                let s = s.strip_prefix("0x")?;
                u128::from_str_radix(s, 16).ok()
            };
            let v = c.parse(v, "a 128-bit hex number", |s| {
                if s == "0" { Some(0) } else { n(s) }
            })?;
            let m = match m {
                Some(m) => c.parse(m, "a 128-bit hex number", |s| {
                    if s == "0" { Some(0) } else { n(s) }
                })?,
                None => u128::MAX,
            };
            Ok(((v & m).to_ne_bytes().to_vec(), m.to_ne_bytes().to_vec()))
        }
        k::CT_ZONE => {
            let (v, m) = scalar(16, 0xffff)?;
            Ok((
                (v as u16).to_ne_bytes().to_vec(),
                (m as u16).to_ne_bytes().to_vec(),
            ))
        }
        k::VLAN => {
            let (tci, mask) = parse_tci(body)?;
            Ok((
                (tci & mask).to_be_bytes().to_vec(),
                mask.to_be_bytes().to_vec(),
            ))
        }
        k::CT_STATE => {
            let (v, m) = parse_flags(&c, CT_STATE_BITS, body, 0xffff_ffff)?;
            Ok((
                (v as u32).to_ne_bytes().to_vec(),
                (m as u32).to_ne_bytes().to_vec(),
            ))
        }
        k::TCP_FLAGS => {
            let (v, m) = parse_flags(&c, TCP_FLAG_BITS, body, 0xffff)?;
            Ok((
                (v as u16).to_be_bytes().to_vec(),
                (m as u16).to_be_bytes().to_vec(),
            ))
        }
        _ => parse_raw(&c, ty, body),
    }
}

/// `<hex bytes>[/<hex bytes>]` of an attribute printed raw.
fn parse_raw(c: &Cursor, ty: u16, body: &str) -> Result<(Vec<u8>, Vec<u8>), OdpParseError> {
    let (v, m) = match body.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (body, None),
    };
    let v = c.parse(v, "hex bytes", text::parse_raw_hex)?;
    let m = match m {
        Some(m) => c.parse(m, "hex bytes", text::parse_raw_hex)?,
        None => vec![0xff; v.len()],
    };
    if is_nested(ty) {
        return Ok((v, m));
    }
    if m.len() != v.len() {
        return Err(c.error(format!("key{ty}: mask and value differ in length")));
    }
    Ok((v.iter().zip(&m).map(|(a, b)| a & b).collect(), m))
}

fn parse_struct(
    body: &str,
    size: usize,
    fields: &[Field],
) -> Result<(Vec<u8>, Vec<u8>), OdpParseError> {
    let (mut v, mut m) = (vec![0u8; size], vec![0u8; size]);
    if body.is_empty() {
        return Ok((v, m));
    }
    for (at, part) in text::split_top(body) {
        let c = Cursor::new(part);
        let (fname, value) = part.split_once('=').ok_or_else(|| {
            OdpParseError::new(at, format!("expected name=value, found `{part}`"))
        })?;
        let &(_, off, fmt) = fields
            .iter()
            .find(|f| f.0 == fname)
            .ok_or_else(|| OdpParseError::new(at, format!("unknown field `{fname}`")))?;
        let (fv, fm) = match value.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (value, None),
        };
        let what = fmt.what(fname);
        let fv = c
            .parse(fv, &what, |s| fmt.read(s))
            .map_err(|e| e.shift(at))?;
        let fm = match fm {
            Some(s) => c
                .parse(s, &what, |s| fmt.read(s))
                .map_err(|e| e.shift(at))?,
            None => fmt.full(),
        };
        let w = fmt.width();
        for i in 0..w {
            v[off + i] = fv[i] & fm[i];
            m[off + i] = fm[i];
        }
    }
    Ok((v, m))
}

/// `vid=…[/…],pcp=…[/…][,cfi=…]` into a TCI and its mask (CFI set and exact unless `cfi=0`).
pub(crate) fn parse_tci(body: &str) -> Result<(u16, u16), OdpParseError> {
    let (mut tci, mut mask) = (0x1000u16, 0x1000u16);
    if body.is_empty() {
        return Ok((tci, mask));
    }
    for (at, part) in text::split_top(body) {
        let c = Cursor::new(part);
        let (name, value) = part.split_once('=').ok_or_else(|| {
            OdpParseError::new(at, format!("expected name=value, found `{part}`"))
        })?;
        let (v, m) = match value.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (value, None),
        };
        let (shift, width) = match name {
            "vid" => (0, 0xfff),
            "pcp" => (13, 7),
            "cfi" => (12, 1),
            _ => {
                return Err(OdpParseError::new(
                    at,
                    format!("unknown VLAN field `{name}`"),
                ));
            }
        };
        let fit = |s: &str| number(s).filter(|n| *n <= width).map(|n| n as u16);
        let v = c
            .parse(v, "a VLAN field value", fit)
            .map_err(|e| e.shift(at))?;
        let m = match m {
            Some(m) => c
                .parse(m, "a VLAN field mask", fit)
                .map_err(|e| e.shift(at))?,
            None => width as u16,
        };
        tci = tci & !((width as u16) << shift) | (v & m) << shift;
        mask = mask & !((width as u16) << shift) | m << shift;
    }
    Ok((tci, mask))
}
