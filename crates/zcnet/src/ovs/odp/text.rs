//! The pieces of OVS's datapath flow syntax shared by keys and actions: a cursor over the text, an
//! attribute writer, and the number and address notations (`%#x`, MACs, dotted IPv4, IPv6).

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::sys::netlink::{NLA_HDRLEN, align4};

use super::OdpParseError;

/// Netlink attributes written into a buffer, lengths checked: an attribute longer than `nla_len`'s
/// 16 bits is an error, never a wrapped length.
#[derive(Debug, Default, Clone)]
pub(crate) struct AttrWriter {
    pub(crate) buf: Vec<u8>,
}

impl AttrWriter {
    pub(crate) fn put(&mut self, ty: u16, payload: &[u8]) -> Result<(), OdpParseError> {
        let len = u16::try_from(NLA_HDRLEN + payload.len())
            .map_err(|_| OdpParseError::new(0, "attribute longer than 65531 bytes"))?;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(align4(self.buf.len()), 0);
        Ok(())
    }

    /// Attribute `ty` whose payload `fill` writes as attributes.
    pub(crate) fn nest(
        &mut self,
        ty: u16,
        fill: impl FnOnce(&mut AttrWriter) -> Result<(), OdpParseError>,
    ) -> Result<(), OdpParseError> {
        let mut inner = AttrWriter::default();
        fill(&mut inner)?;
        self.put(ty, &inner.buf)
    }
}

/// The deepest nesting of parentheses flow text may have. The kernel accepts far less (nested
/// actions 16 levels down, two encapsulated keys); the parsers recurse once per level, so text
/// nested deeper is refused before parsing rather than left to exhaust the stack.
pub(crate) const MAX_NESTING: usize = 64;

/// Whether an attribute printed inside `depth` parentheses may print nested in `levels` more, the
/// printers' bound on their recursion: inside them, an attribute that nests nothing opens at most
/// two (`set(ipv4(…))`), and one nested too deep for this prints raw (`action<N>(…)`,
/// `key<N>(…)`), opening one. Printed text so never nests deeper than [`MAX_NESTING`]: it reads
/// back, to the same bytes.
pub(crate) fn nests_within(depth: usize, levels: usize) -> bool {
    depth + levels + 2 <= MAX_NESTING
}

/// Refuses `s` when its parentheses nest deeper than [`MAX_NESTING`], at the first too deep.
pub(crate) fn check_nesting(s: &str) -> Result<(), OdpParseError> {
    let mut depth = 0usize;
    for (at, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_NESTING {
            return Err(OdpParseError::new(
                at,
                format!("nested deeper than {MAX_NESTING} levels"),
            ));
        }
    }
    Ok(())
}

/// A cursor over flow text; positions in errors are byte offsets into it.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a str) -> Cursor<'a> {
        Cursor { text, pos: 0 }
    }

    pub(crate) fn error(&self, what: impl Into<String>) -> OdpParseError {
        OdpParseError::new(self.pos, what)
    }

    pub(crate) fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub(crate) fn at_end(&self) -> bool {
        self.rest().is_empty()
    }

    /// Consumes `s` if the text continues with it.
    pub(crate) fn eat(&mut self, s: &str) -> bool {
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, s: &str) -> Result<(), OdpParseError> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{s}`")))
        }
    }

    /// A name: letters, digits and `_`.
    pub(crate) fn name(&mut self) -> &'a str {
        let r = self.rest();
        let n = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    /// The text up to the `)` that closes the parenthesis just consumed, which is consumed too.
    pub(crate) fn group(&mut self) -> Result<&'a str, OdpParseError> {
        let r = self.rest();
        let mut depth = 0usize;
        for (i, c) in r.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    self.pos += i + 1;
                    return Ok(&r[..i]);
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        Err(self.error("unbalanced parenthesis"))
    }

    /// Parses `v` with `parse`, the error naming what was expected at this position.
    pub(crate) fn parse<T>(
        &self,
        v: &str,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, OdpParseError> {
        // Where `v` starts in this cursor's text when it is a slice of it.
        let at = (v.as_ptr() as usize)
            .checked_sub(self.text.as_ptr() as usize)
            .filter(|o| *o <= self.text.len())
            .unwrap_or(self.pos);
        parse(v).ok_or_else(|| OdpParseError::new(at, format!("`{v}` is not {what}")))
    }
}

/// Splits `text` at the commas outside parentheses.
pub(crate) fn split_top(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push((start, &text[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push((start, &text[start..]));
    out
}

/// C's `%#x`: `0` for zero, else `0x…`.
pub(crate) fn hex(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// A number written in decimal or with `0x`.
pub(crate) fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

pub(crate) fn mac(b: &[u8]) -> String {
    let mut s = String::new();
    for (i, x) in b.iter().enumerate() {
        let _ = write!(s, "{}{x:02x}", if i > 0 { ":" } else { "" });
    }
    s
}

pub(crate) fn parse_mac(s: &str) -> Option<Vec<u8>> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| {
            (p.len() <= 2)
                .then(|| u8::from_str_radix(p, 16).ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    (v.len() == 6).then_some(v)
}

pub(crate) fn ipv4(b: &[u8]) -> String {
    Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string()
}

pub(crate) fn parse_ipv4(s: &str) -> Option<Vec<u8>> {
    s.parse::<Ipv4Addr>().ok().map(|a| a.octets().to_vec())
}

pub(crate) fn ipv6(b: &[u8]) -> String {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    Ipv6Addr::from(a).to_string()
}

pub(crate) fn parse_ipv6(s: &str) -> Option<Vec<u8>> {
    s.parse::<Ipv6Addr>().ok().map(|a| a.octets().to_vec())
}

/// Bytes as OVS prints an attribute it does not know: two hex digits each, space-separated.
pub(crate) fn raw_hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn parse_raw_hex(s: &str) -> Option<Vec<u8>> {
    s.split_ascii_whitespace()
        .map(|p| {
            (p.len() == 2)
                .then(|| u8::from_str_radix(p, 16).ok())
                .flatten()
        })
        .collect()
}

/// Bytes as one hex run (`userdata(0a0b…)`).
pub(crate) fn hex_run(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn parse_hex_run(s: &str) -> Option<Vec<u8>> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|p| u8::from_str_radix(p, 16).ok()))
        .collect()
}
