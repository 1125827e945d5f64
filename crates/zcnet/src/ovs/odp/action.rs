//! Datapath actions (`OVS_ACTION_ATTR_*`, every one Linux 6.12 and later define) in OVS's syntax, e.g.
//! `set(ipv4(ttl=63)),push_vlan(vid=10,pcp=0),ct(commit,zone=1),recirc(0x1),2`. An empty list is
//! `drop`; an action zcnet has no notation for, or one whose payload does not have the layout the
//! header gives, prints as `action<N>(<hex bytes>)` and parses back to the same bytes.

use crate::sys::netlink::Attributes;
use crate::sys::ovs::action_attr as a;

use super::OdpParseError;
use super::key;
use super::text::{self, AttrWriter, Cursor, hex, number};

/// `enum ovs_userspace_attr`.
mod user {
    pub const PID: u16 = 1;
    pub const USERDATA: u16 = 2;
    pub const EGRESS_TUN_PORT: u16 = 3;
    pub const ACTIONS: u16 = 4;
}
/// `enum ovs_sample_attr`.
mod sample {
    pub const PROBABILITY: u16 = 1;
    pub const ACTIONS: u16 = 2;
}
/// `enum ovs_ct_attr` (the ones with a notation here).
mod ct {
    pub const COMMIT: u16 = 1;
    pub const ZONE: u16 = 2;
    pub const MARK: u16 = 3;
    pub const HELPER: u16 = 5;
    pub const FORCE_COMMIT: u16 = 7;
    pub const TIMEOUT: u16 = 9;
}
/// `enum ovs_check_pkt_len_attr`.
mod pkt_len {
    pub const PKT_LEN: u16 = 1;
    pub const IF_GREATER: u16 = 2;
    pub const IF_LESS_EQUAL: u16 = 3;
}
/// `OVS_DEC_TTL_ATTR_ACTION`.
const DEC_TTL_ACTION: u16 = 1;
/// `enum ovs_psample_attr`.
mod psample {
    pub const GROUP: u16 = 1;
    pub const COOKIE: u16 = 2;
}
/// `OVS_HASH_ALG_L4`, `OVS_HASH_ALG_SYM_L4`.
const HASH_ALGS: [&str; 2] = ["l4", "sym_l4"];
/// `ETH_P_8021Q`: the TPID `push_vlan` leaves unsaid.
const ETH_P_8021Q: u16 = 0x8100;

/// Formats an action list as `ovs-dpctl dump-flows` does after `actions:`. Actions nested too
/// deep for the text parsers print raw.
pub fn format_actions(actions: &[u8]) -> String {
    format_list(actions, 0)
}

/// [`format_actions`] inside `depth` parentheses.
fn format_list(actions: &[u8], depth: usize) -> String {
    if actions.is_empty() {
        return "drop".into();
    }
    let mut out = Vec::new();
    let mut rest = actions;
    for attr in Attributes::new(actions) {
        match attr {
            Ok((ty, p)) => {
                out.push(format_action(ty, p, depth).unwrap_or_else(|| raw(ty, p)));
                rest = &rest[crate::sys::netlink::align4(p.len() + 4).min(rest.len())..];
            }
            Err(_) => {
                out.push(format!(
                    "***{} leftover bytes*** ({})",
                    rest.len(),
                    text::raw_hex(rest)
                ));
                break;
            }
        }
    }
    out.join(",")
}

fn raw(ty: u16, p: &[u8]) -> String {
    if p.is_empty() {
        format!("action{ty}")
    } else {
        format!("action{ty}({})", text::raw_hex(p))
    }
}

fn attrs(p: &[u8]) -> Option<Vec<(u16, &[u8])>> {
    Attributes::new(p).collect::<Result<_, _>>().ok()
}

fn u32_of(p: &[u8]) -> Option<u32> {
    p.try_into().ok().map(u32::from_ne_bytes)
}

fn be16(p: &[u8]) -> u16 {
    u16::from_be_bytes([p[0], p[1]])
}

/// `label=…,tc=…,ttl=…,bos=…` of an MPLS label stack entry.
fn lse_text(lse: u32) -> String {
    format!(
        "label={},tc={},ttl={},bos={}",
        lse >> 12,
        lse >> 9 & 7,
        lse & 0xff,
        lse >> 8 & 1
    )
}

/// One action inside `depth` parentheses; `None` prints it raw: no notation for it, or nested
/// too deep (see [`text::nests_within`]).
fn format_action(ty: u16, p: &[u8], depth: usize) -> Option<String> {
    let nests = |levels| text::nests_within(depth, levels).then_some(depth + levels);
    Some(match ty {
        a::OUTPUT => u32_of(p)?.to_string(),
        a::USERSPACE => {
            let mut s = String::from("userspace(");
            let mut parts = Vec::new();
            let mut pid = None;
            for (t, v) in attrs(p)? {
                match t {
                    user::PID => pid = Some(u32_of(v)?),
                    user::USERDATA => parts.push(format!("userdata({})", text::hex_run(v))),
                    user::ACTIONS if v.is_empty() => parts.push("actions".into()),
                    user::EGRESS_TUN_PORT => parts.push(format!("tunnel_out_port={}", u32_of(v)?)),
                    _ => return None,
                }
            }
            s += &format!("pid={}", pid?);
            for part in parts {
                s += ",";
                s += &part;
            }
            s + ")"
        }
        a::SET => {
            let [(kt, kv)] = attrs(p)?[..] else {
                return None;
            };
            format!("set({})", key::format_attr(kt, kv, None, depth + 1))
        }
        a::SET_MASKED => {
            let [(kt, kv)] = attrs(p)?[..] else {
                return None;
            };
            if !kv.len().is_multiple_of(2) {
                return None;
            }
            let (v, m) = kv.split_at(kv.len() / 2);
            let body = key::format_attr(kt, v, Some(m), depth + 1);
            // A mask that is full for every field prints like a plain set; keep it raw instead.
            if body == key::format_attr(kt, v, None, depth + 1) || body.starts_with("key") {
                return None;
            }
            format!("set({body})")
        }
        a::PUSH_VLAN if p.len() == 4 => {
            let tpid = be16(p);
            let tpid = if tpid == ETH_P_8021Q {
                String::new()
            } else {
                format!("tpid=0x{tpid:04x},")
            };
            format!("push_vlan({tpid}{})", key::vlan_tci(be16(&p[2..]), 0xffff))
        }
        a::POP_VLAN | a::POP_ETH | a::CT_CLEAR if p.is_empty() => match ty {
            a::POP_VLAN => "pop_vlan".into(),
            a::POP_ETH => "pop_eth".into(),
            _ => "ct_clear".into(),
        },
        a::POP_NSH if p.is_empty() => "pop_nsh()".into(),
        a::SAMPLE => {
            let [(sample::PROBABILITY, prob), (sample::ACTIONS, acts)] = attrs(p)?[..] else {
                return None;
            };
            let prob = u32_of(prob)?;
            format!(
                "sample(sample={:.1}%,actions({}))",
                percent(prob),
                format_list(acts, nests(2)?)
            )
        }
        a::RECIRC => format!("recirc({})", hex(u32_of(p)?.into())),
        a::HASH if p.len() == 8 => {
            let alg = HASH_ALGS.get(u32_of(&p[..4])? as usize)?;
            format!("hash({alg}({}))", u32_of(&p[4..])?)
        }
        a::PUSH_MPLS if p.len() == 8 => {
            let lse = u32::from_be_bytes(p[..4].try_into().ok()?);
            format!(
                "push_mpls({},eth_type=0x{:x})",
                lse_text(lse),
                be16(&p[4..])
            )
        }
        a::ADD_MPLS if p.len() == 8 && p[6..] == [0, 0] => {
            let lse = u32::from_be_bytes(p[..4].try_into().ok()?);
            format!("add_mpls({},eth_type=0x{:x})", lse_text(lse), be16(&p[4..]))
        }
        a::POP_MPLS if p.len() == 2 => format!("pop_mpls(eth_type=0x{:x})", be16(p)),
        a::CT => format_ct(p)?,
        a::TRUNC => format!("trunc({})", u32_of(p)?),
        a::PUSH_ETH if p.len() == 12 => {
            format!(
                "push_eth(src={},dst={})",
                text::mac(&p[..6]),
                text::mac(&p[6..])
            )
        }
        a::METER => format!("meter({})", u32_of(p)?),
        a::CLONE => format!("clone({})", format_list(p, nests(1)?)),
        a::CHECK_PKT_LEN => {
            // The kernel dumps the less-or-equal branch before the greater one; either order reads.
            let (mut len, mut gt, mut le) = (None, None, None);
            for (t, v) in attrs(p)? {
                let slot = match t {
                    pkt_len::PKT_LEN => &mut len,
                    pkt_len::IF_GREATER => &mut gt,
                    pkt_len::IF_LESS_EQUAL => &mut le,
                    _ => return None,
                };
                if slot.replace(v).is_some() {
                    return None;
                }
            }
            let len: [u8; 2] = len?.try_into().ok()?;
            let inner = nests(2)?;
            format!(
                "check_pkt_len(size={},gt({}),le({}))",
                u16::from_ne_bytes(len),
                format_list(gt?, inner),
                format_list(le?, inner)
            )
        }
        a::DEC_TTL => {
            let [(DEC_TTL_ACTION, acts)] = attrs(p)?[..] else {
                return None;
            };
            format!("dec_ttl(le_1({}))", format_list(acts, nests(2)?))
        }
        a::DROP => match u32_of(p)? {
            0 => "drop".into(),
            e => format!("drop({e})"),
        },
        a::PSAMPLE => {
            let mut s = String::from("psample(");
            let mut group = None;
            let mut cookie = None;
            for (t, v) in attrs(p)? {
                match t {
                    psample::GROUP if group.is_none() => group = Some(u32_of(v)?),
                    psample::COOKIE if cookie.is_none() && !v.is_empty() => cookie = Some(v),
                    _ => return None,
                }
            }
            s += &format!("group={}", group?);
            if let Some(c) = cookie {
                s += &format!(",cookie=0x{}", text::hex_run(c));
            }
            s + ")"
        }
        _ => return None,
    })
}

fn format_ct(p: &[u8]) -> Option<String> {
    let (mut commit, mut force, mut zone, mut mark, mut helper, mut timeout) =
        (false, false, None, None, None, None);
    let mut order = Vec::new();
    for (t, v) in attrs(p)? {
        order.push(t);
        match t {
            ct::COMMIT if v.is_empty() => commit = true,
            ct::FORCE_COMMIT if v.is_empty() => force = true,
            ct::ZONE if v.len() == 2 => zone = Some(u16::from_ne_bytes([v[0], v[1]])),
            ct::MARK if v.len() == 8 => mark = Some((u32_of(&v[..4])?, u32_of(&v[4..])?)),
            ct::HELPER => helper = Some(cstr(v)?),
            ct::TIMEOUT => timeout = Some(cstr(v)?),
            _ => return None,
        }
    }
    // The printed order is fixed; attributes in another order print raw so that they parse back
    // to the same bytes.
    let mut canonical = order.clone();
    canonical.sort_by_key(|t| CT_ORDER.iter().position(|x| x == t));
    canonical.dedup();
    if canonical != order {
        return None;
    }
    let mut parts = Vec::new();
    if commit {
        parts.push("commit".to_string());
    }
    if force {
        parts.push("force_commit".into());
    }
    if let Some(z) = zone {
        parts.push(format!("zone={z}"));
    }
    if let Some((v, m)) = mark {
        parts.push(format!("mark={}/{}", hex(v.into()), hex(m.into())));
    }
    if let Some(h) = helper {
        parts.push(format!("helper={h}"));
    }
    if let Some(t) = timeout {
        parts.push(format!("timeout={t}"));
    }
    Some(if parts.is_empty() {
        "ct".into()
    } else {
        format!("ct({})", parts.join(","))
    })
}

const CT_ORDER: [u16; 6] = [
    ct::COMMIT,
    ct::FORCE_COMMIT,
    ct::ZONE,
    ct::MARK,
    ct::HELPER,
    ct::TIMEOUT,
];

/// A NUL-terminated string attribute that prints and parses back unchanged.
fn cstr(v: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(v.strip_suffix(&[0])?).ok()?;
    (!s.is_empty() && !s.contains([',', ')', '(', '\0']) && s.trim() == s).then_some(s)
}

fn percent(prob: u32) -> f64 {
    100.0 * f64::from(prob) / f64::from(u32::MAX)
}

/// `sample=P%` read as OVS reads it: the fraction of `u32::MAX`, rounded (50.0% is 0x80000000).
/// The text keeps a tenth of a percent, so a probability between two such steps reads back as the
/// nearest step.
fn probability(pct: &str) -> Option<u32> {
    let p: f64 = pct.parse().ok()?;
    (0.0..=100.0)
        .contains(&p)
        .then(|| (p / 100.0 * f64::from(u32::MAX)).round() as u32)
}

/// Parses an action list (`drop` or `a,b,…`) into action attributes.
pub fn parse_actions(s: &str) -> Result<Vec<u8>, OdpParseError> {
    let mut w = AttrWriter::default();
    text::check_nesting(s)?;
    let s = s.trim();
    if s == "drop" || s.is_empty() {
        return Ok(w.buf);
    }
    for (at, part) in text::split_top(s) {
        parse_action(&mut w, part.trim()).map_err(|e| e.shift(at))?;
    }
    Ok(w.buf)
}

fn parse_action(w: &mut AttrWriter, s: &str) -> Result<(), OdpParseError> {
    let mut c = Cursor::new(s);
    if s.chars().all(|ch| ch.is_ascii_digit()) {
        let port = c.parse(s, "a port number", |s| s.parse::<u32>().ok())?;
        return w.put(a::OUTPUT, &port.to_ne_bytes());
    }
    let name = c.name();
    let body_at = name.len() + 1;
    let body = if c.eat("(") { Some(c.group()?) } else { None };
    if !c.at_end() {
        return Err(c.error("text after the action"));
    }
    let b = Cursor::new(body.unwrap_or(""));
    let need = |what: &str| OdpParseError::new(0, format!("{name}: {what}"));
    let body_or = |what: &str| body.ok_or_else(|| need(what));
    let u32_arg = |s: &str| {
        b.parse(s, "a number", |s| {
            number(s).and_then(|n| u32::try_from(n).ok())
        })
    };
    let r = match name {
        "userspace" => w.nest(a::USERSPACE, |w| {
            for (_, part) in text::split_top(body_or("(pid=…)")?) {
                if let Some(v) = part.strip_prefix("pid=") {
                    w.put(user::PID, &u32_arg(v)?.to_ne_bytes())?;
                } else if let Some(v) = part
                    .strip_prefix("userdata(")
                    .and_then(|v| v.strip_suffix(')'))
                {
                    w.put(
                        user::USERDATA,
                        &b.parse(v, "hex bytes", text::parse_hex_run)?,
                    )?;
                } else if part == "actions" {
                    w.put(user::ACTIONS, &[])?;
                } else if let Some(v) = part.strip_prefix("tunnel_out_port=") {
                    w.put(user::EGRESS_TUN_PORT, &u32_arg(v)?.to_ne_bytes())?;
                } else {
                    return Err(need(&format!("unknown part `{part}`")));
                }
            }
            Ok(())
        }),
        "set" => {
            let (kt, v, m) = key::parse_attr(body_or("(key(…))")?)?;
            let (v_full, m_full) = match key::parse_attr(&key::format_attr(kt, &v, None, 1)) {
                Ok((_, fv, fm)) => (fv, fm),
                Err(_) => (v.clone(), vec![0xff; v.len()]),
            };
            if m == m_full && v == v_full {
                w.nest(a::SET, |w| w.put(kt, &v))
            } else {
                let both = [v, m].concat();
                w.nest(a::SET_MASKED, |w| w.put(kt, &both))
            }
        }
        "push_vlan" => {
            let body = body_or("(vid=…,pcp=…)")?;
            let (tpid, rest) = match body.strip_prefix("tpid=") {
                Some(r) => {
                    let (t, rest) = r.split_once(',').unwrap_or((r, ""));
                    let t = b.parse(t, "a TPID", |s| {
                        number(s).and_then(|n| u16::try_from(n).ok())
                    })?;
                    (t, rest)
                }
                None => (ETH_P_8021Q, body),
            };
            let (tci, _) = key::parse_tci(rest)?;
            w.put(
                a::PUSH_VLAN,
                &[tpid.to_be_bytes(), tci.to_be_bytes()].concat(),
            )
        }
        "pop_vlan" if body.is_none() => w.put(a::POP_VLAN, &[]),
        "pop_eth" if body.is_none() => w.put(a::POP_ETH, &[]),
        "ct_clear" if body.is_none() => w.put(a::CT_CLEAR, &[]),
        "pop_nsh" if body == Some("") => w.put(a::POP_NSH, &[]),
        "drop" => {
            let e = match body {
                Some(v) => u32_arg(v)?,
                None => 0,
            };
            w.put(a::DROP, &e.to_ne_bytes())
        }
        "sample" => {
            let body = body_or("(sample=P%,actions(…))")?;
            let (pct, acts) = body
                .strip_prefix("sample=")
                .and_then(|r| r.split_once("%,actions("))
                .and_then(|(p, r)| Some((p, r.strip_suffix(')')?)))
                .ok_or_else(|| need("expected sample=P%,actions(…)"))?;
            let prob = b.parse(pct, "a percentage", probability)?;
            let acts = parse_actions(acts)?;
            w.nest(a::SAMPLE, |w| {
                w.put(sample::PROBABILITY, &prob.to_ne_bytes())?;
                w.put(sample::ACTIONS, &acts)
            })
        }
        "recirc" => w.put(a::RECIRC, &u32_arg(body_or("(id)")?)?.to_ne_bytes()),
        "hash" => {
            let body = body_or("(l4(basis))")?;
            let (alg, basis) = body
                .split_once('(')
                .and_then(|(alg, r)| Some((alg, r.strip_suffix(')')?)))
                .ok_or_else(|| need("expected l4(basis) or sym_l4(basis)"))?;
            let alg = HASH_ALGS
                .iter()
                .position(|x| *x == alg)
                .ok_or_else(|| need(&format!("unknown algorithm `{alg}`")))?
                as u32;
            w.put(
                a::HASH,
                &[alg.to_ne_bytes(), u32_arg(basis)?.to_ne_bytes()].concat(),
            )
        }
        "push_mpls" | "add_mpls" => {
            let mut lse = 0u32;
            let mut ethertype = None;
            for (_, part) in text::split_top(body_or("(label=…,tc=…,ttl=…,bos=…,eth_type=…)")?)
            {
                let (n, v) = part
                    .split_once('=')
                    .ok_or_else(|| need("expected name=value"))?;
                let v = u32_arg(v)?;
                let (shift, max) = match n {
                    "label" => (12, 0xfffff),
                    "tc" => (9, 7),
                    "ttl" => (0, 0xff),
                    "bos" => (8, 1),
                    "eth_type" if v <= 0xffff => {
                        ethertype = Some(v as u16);
                        continue;
                    }
                    _ => return Err(need(&format!("bad field `{part}`"))),
                };
                if v > max {
                    return Err(need(&format!("{n} above {max}")));
                }
                lse |= v << shift;
            }
            let et = ethertype.ok_or_else(|| need("missing eth_type"))?;
            let ty = if name == "push_mpls" {
                a::PUSH_MPLS
            } else {
                a::ADD_MPLS
            };
            w.put(
                ty,
                &[&lse.to_be_bytes()[..], &et.to_be_bytes(), &[0, 0]].concat(),
            )
        }
        "pop_mpls" => {
            let v = body_or("(eth_type=…)")?
                .strip_prefix("eth_type=")
                .ok_or_else(|| need("expected eth_type=…"))?;
            let et = b.parse(v, "an ethertype", |s| {
                number(s).and_then(|n| u16::try_from(n).ok())
            })?;
            w.put(a::POP_MPLS, &et.to_be_bytes())
        }
        "ct" => w.nest(a::CT, |w| {
            let Some(body) = body else { return Ok(()) };
            for (_, part) in text::split_top(body) {
                let (n, v) = part.split_once('=').unwrap_or((part, ""));
                match n {
                    "commit" => w.put(ct::COMMIT, &[])?,
                    "force_commit" => w.put(ct::FORCE_COMMIT, &[])?,
                    "zone" => {
                        let z = b.parse(v, "a zone", |s| {
                            number(s).and_then(|n| u16::try_from(n).ok())
                        })?;
                        w.put(ct::ZONE, &z.to_ne_bytes())?
                    }
                    "mark" => {
                        let (mv, mm) = v.split_once('/').unwrap_or((v, "0xffffffff"));
                        w.put(
                            ct::MARK,
                            &[u32_arg(mv)?.to_ne_bytes(), u32_arg(mm)?.to_ne_bytes()].concat(),
                        )?
                    }
                    "helper" | "timeout" => {
                        let t = if n == "helper" {
                            ct::HELPER
                        } else {
                            ct::TIMEOUT
                        };
                        w.put(t, &[v.as_bytes(), &[0]].concat())?
                    }
                    _ => return Err(need(&format!("unknown part `{part}`"))),
                }
            }
            Ok(())
        }),
        "trunc" => w.put(a::TRUNC, &u32_arg(body_or("(max_len)")?)?.to_ne_bytes()),
        "push_eth" => {
            let body = body_or("(src=…,dst=…)")?;
            let (src, dst) = body
                .strip_prefix("src=")
                .and_then(|r| r.split_once(",dst="))
                .ok_or_else(|| need("expected src=…,dst=…"))?;
            let src = b.parse(src, "a MAC", text::parse_mac)?;
            let dst = b.parse(dst, "a MAC", text::parse_mac)?;
            w.put(a::PUSH_ETH, &[src, dst].concat())
        }
        "meter" => w.put(a::METER, &u32_arg(body_or("(id)")?)?.to_ne_bytes()),
        "clone" => {
            let acts = parse_actions(body_or("(actions)")?)?;
            w.put(a::CLONE, &acts)
        }
        "check_pkt_len" => {
            let body = body_or("(size=…,gt(…),le(…))")?;
            let parts = text::split_top(body);
            let [(_, size), (_, gt), (_, le)] = parts[..] else {
                return Err(need("expected size=…,gt(…),le(…)"));
            };
            let size = size
                .strip_prefix("size=")
                .ok_or_else(|| need("expected size=…"))?;
            let size = b.parse(size, "a length", |s| {
                number(s).and_then(|n| u16::try_from(n).ok())
            })?;
            let inner = |s: &str, pre: &str| {
                s.strip_prefix(pre)
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| need(&format!("expected {pre}…)")))
                    .and_then(parse_actions)
            };
            let (gt, le) = (inner(gt, "gt(")?, inner(le, "le(")?);
            // In the order the kernel dumps them.
            w.nest(a::CHECK_PKT_LEN, |w| {
                w.put(pkt_len::PKT_LEN, &size.to_ne_bytes())?;
                w.put(pkt_len::IF_LESS_EQUAL, &le)?;
                w.put(pkt_len::IF_GREATER, &gt)
            })
        }
        "dec_ttl" => {
            let acts = body_or("(le_1(…))")?
                .strip_prefix("le_1(")
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| need("expected le_1(…)"))?;
            let acts = parse_actions(acts)?;
            w.nest(a::DEC_TTL, |w| w.put(DEC_TTL_ACTION, &acts))
        }
        "psample" => w.nest(a::PSAMPLE, |w| {
            for (_, part) in text::split_top(body_or("(group=…)")?) {
                if let Some(v) = part.strip_prefix("group=") {
                    w.put(psample::GROUP, &u32_arg(v)?.to_ne_bytes())?;
                } else if let Some(v) = part.strip_prefix("cookie=") {
                    w.put(
                        psample::COOKIE,
                        &b.parse(v, "hex bytes", text::parse_hex_run)?,
                    )?;
                } else {
                    return Err(need(&format!("unknown part `{part}`")));
                }
            }
            Ok(())
        }),
        _ => {
            let ty = name
                .strip_prefix("action")
                .and_then(|n| n.parse::<u16>().ok())
                .ok_or_else(|| need("unknown action"))?;
            let p = match body {
                Some(v) => b.parse(v, "hex bytes", text::parse_raw_hex)?,
                None => Vec::new(),
            };
            w.put(ty, &p)
        }
    };
    r.map_err(|e| if e.at == 0 { e } else { e.shift(body_at) })
}

/// The probability OVS reads from `sample=P%` with `P` in tenths of a percent (for tests).
#[cfg(test)]
pub(crate) fn tests_probability(tenths: u32) -> u32 {
    probability(&format!("{:.1}", f64::from(tenths) / 10.0)).unwrap_or(0)
}
