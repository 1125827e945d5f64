//! A small reader of the kernel's BTF type information (`/sys/kernel/btf/vmlinux`): struct sizes,
//! member offsets and enumerator values of the running kernel.
//!
//! zcnet uses it where a UAPI layout is too new to trust a copy of the header: upstream renames and
//! grows those structs between releases, so their offsets are read from the kernel that will use them.
//!
//! Kernel behaviour relied on (Documentation/bpf/btf.rst, include/uapi/linux/btf.h):
//! - the file starts with `struct btf_header` (magic `0xeB9F`, version 1) whose `type_off`/`type_len`
//!   and `str_off`/`str_len` are relative to the end of the header (`hdr_len`), in the host's byte
//!   order;
//! - each type is a 12-byte `struct btf_type` (`name_off`, `info`: `vlen` in bits 0–15, `kind` in bits
//!   24–28, `kind_flag` in bit 31; then `size` or `type`) followed by kind-specific data whose length
//!   follows from the kind and `vlen`;
//! - a struct or union member is `{name_off, type, offset}`, the offset in bits (with `kind_flag`,
//!   its low 24 bits); a member without a name is an anonymous struct or union whose members are
//!   the outer struct's (x86-64's `struct pt_regs` holds `cs` in one since 6.9); types are numbered
//!   from 1 in the order they appear; an enumerator is `{name_off, val}` (`ENUM`, 32-bit) or `{name_off, lo32, hi32}`
//!   (`ENUM64`).

use std::io;

/// `BTF_MAGIC`.
const MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;

/// One member of a struct: its name and its offset in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) offset: usize,
}

/// A struct's size and its members, in declaration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StructLayout {
    pub(crate) size: usize,
    pub(crate) members: Vec<Member>,
}

impl StructLayout {
    /// The byte offset of member `name`.
    pub(crate) fn offset_of(&self, name: &str) -> Option<usize> {
        self.members
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.offset)
    }
}

/// Parsed BTF: the kinds of types zcnet asks about, by name.
#[derive(Debug, Default)]
pub(crate) struct Btf {
    structs: Vec<(String, StructLayout)>,
    enumerators: Vec<(String, i64)>,
}

/// Reads `len` bytes at `at`, or fails saying the file is cut short.
fn bytes(data: &[u8], at: usize, len: usize) -> io::Result<&[u8]> {
    at.checked_add(len)
        .and_then(|end| data.get(at..end))
        .ok_or_else(|| invalid(format!("BTF cut short at byte {at}")))
}

fn u32_at(data: &[u8], at: usize) -> io::Result<u32> {
    let b = bytes(data, at, 4)?;
    Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// A struct or union as the file declares it: name (empty when anonymous), size, and members as
/// `(name, type id, byte offset)`.
type Aggregate = (String, bool, usize, Vec<(String, u32, usize)>);

/// How deep anonymous members are followed into one another.
const MAX_NESTING: usize = 8;

/// Appends `members` at `base` to `out`, the members of anonymous ones in their place.
fn flatten(
    aggregates: &[Option<Aggregate>],
    members: &[(String, u32, usize)],
    base: usize,
    depth: usize,
    out: &mut Vec<Member>,
) {
    for (name, ty, offset) in members {
        let nested = aggregates.get(*ty as usize).and_then(Option::as_ref);
        match nested {
            Some((_, _, _, inner)) if name.is_empty() && depth < MAX_NESTING => {
                flatten(aggregates, inner, base + offset, depth + 1, out)
            }
            _ => out.push(Member {
                name: name.clone(),
                offset: base + offset,
            }),
        }
    }
}

impl Btf {
    /// Reads and parses the running kernel's BTF (`/sys/kernel/btf/vmlinux`, `CONFIG_DEBUG_INFO_BTF`).
    pub(crate) fn vmlinux() -> io::Result<Btf> {
        Btf::parse(&std::fs::read("/sys/kernel/btf/vmlinux")?)
    }

    /// Parses raw BTF in the host's byte order.
    pub(crate) fn parse(data: &[u8]) -> io::Result<Btf> {
        let hdr = bytes(data, 0, 24)?;
        if u16::from_ne_bytes([hdr[0], hdr[1]]) != MAGIC {
            return Err(invalid("not BTF (bad magic)".into()));
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let types = bytes(data, hdr_len.saturating_add(type_off), type_len)?;
        let strings = bytes(data, hdr_len.saturating_add(str_off), str_len)?;
        let name = |off: u32| -> io::Result<String> {
            let rest = strings
                .get(off as usize..)
                .ok_or_else(|| invalid(format!("BTF name offset {off} out of range")))?;
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        };
        let mut btf = Btf::default();
        // Indexed by type id (0 is `void`): the structs and unions, for anonymous members.
        let mut aggregates: Vec<Option<Aggregate>> = vec![None];
        let mut at = 0;
        while at < types.len() {
            let (name_off, info, size) = (
                u32_at(types, at)?,
                u32_at(types, at + 4)?,
                u32_at(types, at + 8)?,
            );
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let extra = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => vlen * 12,
                KIND_ENUM | KIND_FUNC_PROTO => vlen * 8,
                _ => 0,
            };
            let data = bytes(types, at, extra)?;
            let mut aggregate = None;
            match kind {
                KIND_STRUCT | KIND_UNION => {
                    let mut members = Vec::with_capacity(vlen);
                    for m in data.chunks_exact(12) {
                        let bits = u32_at(m, 8)?;
                        let bits = if kind_flag { bits & 0xff_ffff } else { bits };
                        members.push((name(u32_at(m, 0)?)?, u32_at(m, 4)?, bits as usize / 8));
                    }
                    aggregate =
                        Some((name(name_off)?, kind == KIND_STRUCT, size as usize, members));
                }
                KIND_ENUM => {
                    for e in data.chunks_exact(8) {
                        let value = u32_at(e, 4)? as i32;
                        btf.enumerators
                            .push((name(u32_at(e, 0)?)?, i64::from(value)));
                    }
                }
                KIND_ENUM64 => {
                    for e in data.chunks_exact(12) {
                        let value = u64::from(u32_at(e, 8)?) << 32 | u64::from(u32_at(e, 4)?);
                        btf.enumerators.push((name(u32_at(e, 0)?)?, value as i64));
                    }
                }
                _ => {}
            }
            aggregates.push(aggregate);
            at += extra;
        }
        for (name, is_struct, size, members) in aggregates.iter().flatten() {
            if *is_struct && !name.is_empty() {
                let mut flat = Vec::with_capacity(members.len());
                flatten(&aggregates, members, 0, 0, &mut flat);
                let layout = StructLayout {
                    size: *size,
                    members: flat,
                };
                btf.structs.push((name.clone(), layout));
            }
        }
        Ok(btf)
    }

    /// The layout of the first struct named `name`.
    pub(crate) fn struct_layout(&self, name: &str) -> Option<&StructLayout> {
        self.structs.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    #[cfg(feature = "io-uring")]
    /// The value of the enumerator `name` (of whichever enum declares it).
    pub(crate) fn enumerator(&self, name: &str) -> Option<i64> {
        self.enumerators
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }
}

/// Raw BTF in the host's byte order from the type section's words and the string section.
#[cfg(test)]
pub(crate) fn raw(type_words: &[u32], strings: &[u8]) -> Vec<u8> {
    let ty: Vec<u8> = type_words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut out = MAGIC.to_ne_bytes().to_vec();
    out.extend_from_slice(&[1, 0]);
    let header = [
        24,
        0,
        ty.len() as u32,
        ty.len() as u32,
        strings.len() as u32,
    ];
    for w in header {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.extend_from_slice(&ty);
    out.extend_from_slice(strings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds BTF bytes from (name_off, info, size_or_type, extra words) and a string section.
    fn blob(types: &[(u32, u32, u32, &[u32])], strings: &[u8]) -> Vec<u8> {
        let words: Vec<u32> = types
            .iter()
            .flat_map(|&(name, info, size, extra)| {
                [name, info, size].into_iter().chain(extra.iter().copied())
            })
            .collect();
        raw(&words, strings)
    }

    #[test]
    fn reads_struct_members_enumerators_and_skips_other_kinds() {
        // Strings: 0 "", 1 "s", 3 "a", 5 "b", 7 "E", 9 "X".
        let strings = b"\0s\0a\0b\0E\0X\0";
        let int = (0, KIND_INT << 24, 8, &[64u32][..]);
        let strukt = (
            1,
            KIND_STRUCT << 24 | 2,
            16,
            &[3, 1, 0, 5, 1, 64][..], // a at bit 0, b at bit 64
        );
        let bitfield = (
            0,
            KIND_STRUCT << 24 | 1 << 31 | 1,
            4,
            &[3, 1, 3 << 24 | 16][..],
        );
        let enum32 = (7, KIND_ENUM << 24 | 1, 4, &[9, (-2i32) as u32][..]);
        let btf = Btf::parse(&blob(&[int, strukt, bitfield, enum32], strings)).unwrap();
        let s = btf.struct_layout("s").unwrap();
        assert_eq!(s.size, 16);
        assert_eq!(s.offset_of("a"), Some(0));
        assert_eq!(s.offset_of("b"), Some(8));
        assert_eq!(s.offset_of("c"), None);
        assert_eq!(btf.enumerator("X"), Some(-2));
        assert_eq!(btf.enumerator("E"), None);
        let enum64 = (7, KIND_ENUM64 << 24 | 1, 8, &[9, 5, 1][..]);
        let btf = Btf::parse(&blob(&[enum64], strings)).unwrap();
        assert_eq!(btf.enumerator("X"), Some(1 << 32 | 5));
    }

    #[test]
    fn members_of_an_anonymous_union_are_the_structs() {
        // Strings: 0 "", 1 "regs", 6 "ip", 9 "cs", 12 "csx".
        let strings = b"\0regs\0ip\0cs\0csx\0";
        let int = (0, KIND_INT << 24, 8, &[64u32][..]); // id 1
        let union = (0, KIND_UNION << 24 | 2, 8, &[9, 1, 0, 12, 1, 0][..]); // id 2
        let regs = (1, KIND_STRUCT << 24 | 2, 16, &[6, 1, 0, 0, 2, 64][..]);
        let btf = Btf::parse(&blob(&[int, union, regs], strings)).unwrap();
        let s = btf.struct_layout("regs").unwrap();
        assert_eq!(s.offset_of("ip"), Some(0));
        assert_eq!(s.offset_of("cs"), Some(8));
        assert_eq!(s.offset_of("csx"), Some(8));
        assert_eq!(s.offset_of(""), None);
    }

    #[test]
    fn refuses_a_cut_or_foreign_file() {
        let strings = b"\0s\0";
        let mut data = blob(&[(1, KIND_STRUCT << 24 | 1, 4, &[1, 0, 0][..])], strings);
        assert!(Btf::parse(&data[..30]).is_err());
        data[0] ^= 0xff;
        assert!(Btf::parse(&data).is_err());
    }

    #[test]
    fn reads_this_kernels_btf_when_it_has_one() {
        match Btf::vmlinux() {
            Ok(btf) => {
                let sk = btf
                    .struct_layout("sockaddr_in")
                    .expect("sockaddr_in in vmlinux BTF");
                assert_eq!(sk.size, 16);
                assert_eq!(sk.offset_of("sin_port"), Some(2));
                assert_eq!(btf.enumerator("IPPROTO_TCP"), Some(6));
            }
            Err(e) => eprintln!("skipped: no readable /sys/kernel/btf/vmlinux ({e})"),
        }
    }
}
