//! Which frames the redirect program steers to AF_XDP sockets, and the bytecode that tests it. Frames
//! that do not match go on to the network stack (`XDP_PASS`), so a socket on a live interface takes only
//! its own traffic and leaves ARP, SSH and everything else alone.

use std::fmt;

use super::headers;
use crate::sys::bpf::{Insn, Reg, XDP_MD_DATA, XDP_MD_DATA_END};

/// The frames a redirect program hands to the AF_XDP sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameMatch {
    /// Every frame of the queue (xdpsock's behaviour): nothing reaches the stack while a socket is
    /// bound there, not even ARP.
    All,
    /// Unfragmented UDP datagrams to this destination port over IPv4 (without IP options) or IPv6
    /// (UDP as the first next header), untagged Ethernet. Fragments, the first included, go to the
    /// stack, which reassembles them for a kernel socket on the port.
    UdpPort(u16),
}

impl fmt::Display for FrameMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameMatch::All => f.write_str("all"),
            FrameMatch::UdpPort(port) => write!(f, "udp port {port}"),
        }
    }
}

// Header lengths as the program's offsets take them (see `xdp::headers`).
const ETH_HLEN: i32 = headers::ETH_HLEN as i32;
const IPV4_HLEN: i32 = headers::IPV4_HLEN as i32;
const IPV6_HLEN: i32 = headers::IPV6_HLEN as i32;
const UDP_HLEN: i32 = headers::UDP_HLEN as i32;
const IPPROTO_UDP: i32 = 17;

/// A 16-bit big-endian field as the program's `u16` load (host byte order) reads it.
fn wire_u16(v: u16) -> i32 {
    i32::from(u16::from_ne_bytes(v.to_be_bytes()))
}

/// Jump targets inside the match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Ipv4,
    Ipv6,
    Port,
    Redirect,
    Pass,
}

/// Straight-line bytecode with forward jumps to labels, resolved by [`Assembler::finish`].
#[derive(Debug, Default)]
struct Assembler {
    insns: Vec<Insn>,
    jumps: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Assembler {
    fn push(&mut self, insn: Insn) {
        self.insns.push(insn);
    }

    /// A jump instruction (its offset is filled in later) to `to`.
    fn jump(&mut self, insn: Insn, to: Label) {
        self.jumps.push((self.insns.len(), to));
        self.insns.push(insn);
    }

    fn label(&mut self, label: Label) {
        self.labels.push((label, self.insns.len()));
    }

    fn finish(mut self) -> Vec<Insn> {
        for &(at, to) in &self.jumps {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == to)
                .map(|&(_, pos)| pos)
                .expect("every jump target is placed");
            let off = i16::try_from(target as isize - at as isize - 1).expect("short program");
            self.insns[at] = self.insns[at].with_offset(off);
        }
        self.insns
    }
}

/// The redirect program: frames matching `matching` go to the XSKMAP slot of their receive queue
/// (`bpf_redirect_map(map, ctx->rx_queue_index, XDP_PASS)`: an empty slot passes them to the stack, kernel
/// 5.6+); all others return `XDP_PASS`. `map` is the two-slot load of the map; `queue_index` the
/// `rx_queue_index` offset; `redirect_map` and `pass` the helper id and action.
pub(super) fn redirect_program(
    matching: FrameMatch,
    map: [Insn; 2],
    queue_index: i16,
    redirect_map: i32,
    pass: i32,
) -> Vec<Insn> {
    let mut a = Assembler::default();
    if let FrameMatch::UdpPort(port) = matching {
        udp_port_test(&mut a, port);
    }
    a.label(Label::Redirect);
    let ctx = if matching == FrameMatch::All {
        Reg::R1
    } else {
        Reg::R6
    };
    a.push(Insn::load_u32(Reg::R2, ctx, queue_index));
    a.push(map[0]);
    a.push(map[1]);
    a.push(Insn::mov64_imm(Reg::R3, pass));
    a.push(Insn::call(redirect_map));
    a.push(Insn::exit());
    if matching != FrameMatch::All {
        a.label(Label::Pass);
        a.push(Insn::mov64_imm(Reg::R0, pass));
        a.push(Insn::exit());
    }
    a.finish()
}

/// Falls through to `Redirect` for a UDP datagram to `port`, jumps to `Pass` otherwise. Keeps the
/// context in r6 (callee-saved) for the redirect. Every packet read is preceded by the bounds check
/// the verifier requires (`data + n > data_end` goes to `Pass`).
fn udp_port_test(a: &mut Assembler, port: u16) {
    let (data, end, probe, field) = (Reg::R2, Reg::R3, Reg::R4, Reg::R5);
    a.push(Insn::mov64_reg(Reg::R6, Reg::R1));
    a.push(Insn::load_u32(data, Reg::R1, XDP_MD_DATA));
    a.push(Insn::load_u32(end, Reg::R1, XDP_MD_DATA_END));
    let bounds = |a: &mut Assembler, len: i32| {
        a.push(Insn::mov64_reg(probe, data));
        a.push(Insn::add64_imm(probe, len));
        a.jump(Insn::jump_if_greater_reg(probe, end, 0), Label::Pass);
    };
    bounds(a, ETH_HLEN);
    a.push(Insn::load_u16(field, data, 12));
    a.jump(Insn::jump_if_equal(field, wire_u16(0x0800), 0), Label::Ipv4);
    a.jump(Insn::jump_if_equal(field, wire_u16(0x86dd), 0), Label::Ipv6);
    a.jump(Insn::jump(0), Label::Pass);

    a.label(Label::Ipv4);
    let udp = ETH_HLEN + IPV4_HLEN;
    bounds(a, udp + UDP_HLEN);
    // Version 4 and a 20-byte header (no options), so the UDP header follows at a fixed offset.
    a.push(Insn::load_u8(field, data, ETH_HLEN as i16));
    a.jump(Insn::jump_if_not_equal(field, 0x45, 0), Label::Pass);
    a.push(Insn::load_u8(field, data, (ETH_HLEN + 9) as i16));
    a.jump(Insn::jump_if_not_equal(field, IPPROTO_UDP, 0), Label::Pass);
    // No fragment: more-fragments (0x2000) clear and a zero offset (0x1fff). A first fragment has
    // the UDP header but not the whole datagram; only the stack can reassemble it with the rest.
    a.push(Insn::load_u16(field, data, (ETH_HLEN + 6) as i16));
    a.push(Insn::and64_imm(field, wire_u16(0x3fff)));
    a.jump(Insn::jump_if_not_equal(field, 0, 0), Label::Pass);
    a.push(Insn::load_u16(field, data, (udp + 2) as i16));
    a.jump(Insn::jump(0), Label::Port);

    a.label(Label::Ipv6);
    let udp = ETH_HLEN + IPV6_HLEN;
    bounds(a, udp + UDP_HLEN);
    a.push(Insn::load_u8(field, data, (ETH_HLEN + 6) as i16));
    a.jump(Insn::jump_if_not_equal(field, IPPROTO_UDP, 0), Label::Pass);
    a.push(Insn::load_u16(field, data, (udp + 2) as i16));

    a.label(Label::Port);
    a.jump(
        Insn::jump_if_not_equal(field, wire_u16(port), 0),
        Label::Pass,
    );
}
