//! The embedded XDP programs (typed bytecode, no compiler or libbpf needed), their XSKMAP, and the
//! BPF link that keeps a program attached to an interface for exactly as long as it lives.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::error::{Error, Result};
use super::frame_match::{FrameMatch, redirect_program};
use super::socket::Socket;
use crate::IfIndex;
use crate::sys::bpf::{
    self, BPF_ANY, BPF_MAP_TYPE_XSKMAP, BPF_PROG_TYPE_XDP, BPF_XDP, Insn, Reg, XDP_FLAGS_DRV_MODE,
    XDP_FLAGS_SKB_MODE, XDP_MD_RX_QUEUE_INDEX, helper, xdp_action,
};
use crate::sys::xdp::{self as sys_xdp, interface_name};

/// License the programs are loaded under (GPL-compatible, so every helper is available).
const LICENSE: &std::ffi::CStr = c"Dual MIT/GPL";

/// Privileges the kernel checks for loading programs, creating maps and attaching links.
const BPF_PRIVILEGE: &str = "CAP_BPF and CAP_NET_ADMIN";

/// Which embedded program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProgramKind {
    /// Returns `XDP_DROP` for every frame: a receive sink that costs the sender nothing beyond the driver.
    DropAll,
    /// Frames that match go to `bpf_redirect_map(xskmap, ctx->rx_queue_index, XDP_PASS)`: to the AF_XDP
    /// socket stored at their queue's index; with no socket there, the kernel returns the flags' action,
    /// `XDP_PASS` (kernel 5.6+). Frames that do not match are passed to the stack, so it keeps working.
    RedirectToXsk(FrameMatch),
    /// Every frame goes to `bpf_redirect(ifindex, 0)`: out of that interface of the same network
    /// namespace, as an `xdp_frame` handed to its driver's `ndo_xdp_xmit` (no skb is built). The kernel
    /// drops the frame when that driver cannot take XDP frames (for a veth: when its peer has neither
    /// an XDP program nor GRO on, so no NAPI to receive them).
    RedirectToInterface(IfIndex),
}

impl ProgramKind {
    /// The program in the kernel verifier's notation, one instruction per line; `map_fd` is the
    /// XSKMAP descriptor shown in it (unused by [`ProgramKind::DropAll`]).
    pub fn disassembly(self, map_fd: i32) -> String {
        bpf::disassemble(&self.instructions(map_fd))
    }

    /// The program's instructions; `map_fd` is the XSKMAP descriptor (unused by [`ProgramKind::DropAll`]).
    pub(crate) fn instructions(self, map_fd: i32) -> Vec<Insn> {
        match self {
            ProgramKind::DropAll => vec![Insn::mov64_imm(Reg::R0, xdp_action::DROP), Insn::exit()],
            ProgramKind::RedirectToXsk(matching) => redirect_program(
                matching,
                Insn::load_map_fd(Reg::R1, map_fd),
                XDP_MD_RX_QUEUE_INDEX,
                helper::REDIRECT_MAP,
                xdp_action::PASS,
            ),
            ProgramKind::RedirectToInterface(ifindex) => vec![
                Insn::mov64_imm(Reg::R1, ifindex.get() as i32),
                Insn::mov64_imm(Reg::R2, 0),
                Insn::call(helper::REDIRECT),
                Insn::exit(),
            ],
        }
    }

    /// The kernel object name of the program (as `bpftool prog` shows it).
    pub fn name(self) -> &'static str {
        match self {
            ProgramKind::DropAll => "zcnet_drop",
            ProgramKind::RedirectToXsk(FrameMatch::All) => "zcnet_xsk",
            ProgramKind::RedirectToXsk(FrameMatch::UdpPort(_)) => "zcnet_xsk_udp",
            ProgramKind::RedirectToInterface(_) => "zcnet_redirect",
        }
    }
}

/// Where in the receive path an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Native XDP (`XDP_FLAGS_DRV_MODE`): run by the driver before an skb exists. veth supports it.
    Driver,
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`): run by the core after the skb is built; works on any device.
    Generic,
}

impl AttachMode {
    fn flags(self) -> u32 {
        match self {
            AttachMode::Driver => XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }

    /// `"driver"` or `"generic"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Driver => "driver",
            AttachMode::Generic => "generic",
        }
    }
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An XSKMAP (`BPF_MAP_TYPE_XSKMAP`): AF_XDP sockets indexed by receive queue.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    entries: u32,
}

impl XskMap {
    /// Creates a map with one slot per queue `0..entries`.
    pub fn new(entries: u32) -> Result<XskMap> {
        let fd = bpf::map_create(BPF_MAP_TYPE_XSKMAP, entries, "zcnet_xsks").map_err(|e| {
            Error::from_errno(
                format!("create XSKMAP with {entries} entries"),
                e,
                BPF_PRIVILEGE,
                "the kernel lacks AF_XDP (CONFIG_XDP_SOCKETS)",
            )
        })?;
        Ok(XskMap { fd, entries })
    }

    /// Number of slots (queues).
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Stores the bound AF_XDP socket `socket` at slot `queue`: from now on the redirect program sends
    /// frames received on that queue to it. The kernel rejects a socket that is not bound (`EINVAL`
    /// or `EOPNOTSUPP`).
    pub fn insert(&self, queue: u32, socket: &Socket) -> Result<()> {
        let value = socket.fd().as_raw_fd() as u32;
        bpf::map_update_u32(self.fd.as_fd(), queue, value, BPF_ANY).map_err(|e| {
            Error::from_errno(
                format!("insert socket into XSKMAP slot {queue}"),
                e,
                BPF_PRIVILEGE,
                "the slot must be below the map size and the socket bound",
            )
        })
    }

    /// Empties slot `queue`: from now on the redirect program passes that queue's frames to the stack,
    /// even while a duplicate of the socket's descriptor (in a child forked meanwhile) keeps the socket
    /// open. An empty slot is left as it is.
    pub fn remove(&self, queue: u32) -> Result<()> {
        match bpf::map_delete_u32(self.fd.as_fd(), queue) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(Error::from_errno(
                format!("empty XSKMAP slot {queue}"),
                e,
                BPF_PRIVILEGE,
                "the slot must be below the map size",
            )),
            _ => Ok(()),
        }
    }
}

impl AsFd for XskMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A loaded XDP program (not yet attached anywhere). Loading needs CAP_BPF (or CAP_SYS_ADMIN).
///
/// ```no_run
/// use zcnet::xdp::{AttachMode, XdpProgram, interface_index};
/// let ifindex = interface_index("veth0")?;
/// let _link = XdpProgram::drop_all()?.attach(ifindex, AttachMode::Driver)?;
/// // every frame arriving on veth0 is dropped until `_link` is dropped
/// # Ok::<(), zcnet::xdp::Error>(())
/// ```
#[derive(Debug)]
pub struct XdpProgram {
    fd: OwnedFd,
    kind: ProgramKind,
    map: Option<XskMap>,
}

impl XdpProgram {
    fn load(kind: ProgramKind, map: Option<XskMap>, prog_flags: u32) -> Result<XdpProgram> {
        let map_fd = map.as_ref().map_or(-1, |m| m.fd.as_raw_fd());
        let insns = kind.instructions(map_fd);
        let load = bpf::prog_load(
            BPF_PROG_TYPE_XDP,
            BPF_XDP,
            prog_flags,
            &insns,
            LICENSE,
            kind.name(),
        );
        let fd = load.map_err(|e| {
            let why = match e.error.raw_os_error() {
                Some(libc::EAGAIN) => "signals kept interrupting the verifier",
                _ => "the verifier rejected the program",
            };
            Error::from_errno(
                format!("load XDP program {}", kind.name()),
                e.error,
                BPF_PRIVILEGE,
                why,
            )
            .with_verifier_log(e.verifier_log)
        })?;
        Ok(XdpProgram { fd, kind, map })
    }

    /// Loads the program that drops every frame ([`ProgramKind::DropAll`]).
    pub fn drop_all() -> Result<XdpProgram> {
        XdpProgram::load(ProgramKind::DropAll, None, 0)
    }

    /// Creates an XSKMAP with `queues` slots and loads the program that redirects each queue's frames
    /// that match `matching` to the socket in its slot, passing them to the stack when the slot is
    /// empty, and every other frame always ([`ProgramKind::RedirectToXsk`]). Fill the slots with
    /// [`XdpProgram::xsk_map`].
    pub fn redirect_to_xsk(queues: u32, matching: FrameMatch) -> Result<XdpProgram> {
        XdpProgram::load(
            ProgramKind::RedirectToXsk(matching),
            Some(XskMap::new(queues)?),
            0,
        )
    }

    /// [`XdpProgram::redirect_to_xsk`] loaded for multi-buffer frames (`BPF_F_XDP_HAS_FRAGS`, kernel
    /// 5.18+): drivers hand it frames larger than one buffer (an MTU above about 3500 bytes on veth),
    /// which reach sockets bound with [`SocketConfig::multi_buffer`](crate::xdp::SocketConfig) as
    /// several frames. The match reads the headers in the frame's first buffer.
    pub fn redirect_to_xsk_multi_buffer(queues: u32, matching: FrameMatch) -> Result<XdpProgram> {
        XdpProgram::load(
            ProgramKind::RedirectToXsk(matching),
            Some(XskMap::new(queues)?),
            bpf::BPF_F_XDP_HAS_FRAGS,
        )
    }

    /// Loads the program that sends every frame out of interface `ifindex` of the same network
    /// namespace ([`ProgramKind::RedirectToInterface`]).
    pub fn redirect_to_interface(ifindex: IfIndex) -> Result<XdpProgram> {
        XdpProgram::load(ProgramKind::RedirectToInterface(ifindex), None, 0)
    }

    /// Which embedded program this is.
    pub fn kind(&self) -> ProgramKind {
        self.kind
    }

    /// The XSKMAP of a redirect program.
    pub fn xsk_map(&self) -> Option<&XskMap> {
        self.map.as_ref()
    }

    /// Attaches the program to interface `ifindex` (of the calling thread's network namespace) with a
    /// BPF link. The program stays attached while the returned [`XdpLink`] lives; dropping it, or the
    /// process ending in any way (the kernel closes the link descriptor), detaches it. `EBUSY` means the
    /// interface already has an XDP program; `EOPNOTSUPP` in driver mode that the driver lacks native XDP.
    pub fn attach(&self, ifindex: IfIndex, mode: AttachMode) -> Result<XdpLink> {
        let iface = interface_name(ifindex.get()).unwrap_or_else(|_| format!("ifindex {ifindex}"));
        let fd =
            bpf::xdp_link_create(self.fd.as_fd(), ifindex.get(), mode.flags()).map_err(|e| {
                let otherwise = match e.raw_os_error() {
                    Some(libc::EBUSY | libc::EEXIST) => {
                        "the interface already has an XDP program attached"
                    }
                    Some(libc::EOPNOTSUPP) if mode == AttachMode::Driver => {
                        "the driver has no native XDP: attach in generic mode"
                    }
                    Some(libc::EINVAL) => "the kernel rejected the attach (kernel older than 5.9?)",
                    _ => "",
                };
                Error::from_errno(
                    format!(
                        "attach XDP program {} to {iface} ({mode} mode)",
                        self.kind.name()
                    ),
                    e,
                    BPF_PRIVILEGE,
                    otherwise,
                )
            })?;
        Ok(XdpLink {
            fd,
            ifindex,
            iface,
            mode,
        })
    }

    /// Attaches to the interface named `iface` (resolved in the calling thread's network namespace).
    pub fn attach_to(&self, iface: &str, mode: AttachMode) -> Result<XdpLink> {
        self.attach(interface_index(iface)?, mode)
    }
}

impl AsFd for XdpProgram {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An attached XDP program. Dropping it detaches the program (`BPF_LINK_DETACH`) before closing the
/// BPF link descriptor, so the program is gone when `drop` returns even if a child process forked
/// meanwhile still holds a duplicate of the descriptor until its `exec`. The kernel also detaches it
/// when the process exits or is killed, since it closes every descriptor.
#[must_use = "the program is detached as soon as the link is dropped"]
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
    ifindex: IfIndex,
    iface: String,
    mode: AttachMode,
}

impl XdpLink {
    /// The interface index the program is attached to.
    pub fn ifindex(&self) -> IfIndex {
        self.ifindex
    }

    /// The interface name at attach time.
    pub fn interface(&self) -> &str {
        &self.iface
    }

    /// The attach mode.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }
}

impl Drop for XdpLink {
    fn drop(&mut self) {
        // A failure (a kernel without BPF_LINK_DETACH) leaves the detach to the close that follows.
        let _ = bpf::link_detach(self.fd.as_fd());
    }
}

impl AsFd for XdpLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The index of interface `iface` in the calling thread's network namespace; the error names the
/// interface (`ENODEV`) when it does not exist.
pub fn interface_index(iface: &str) -> Result<IfIndex> {
    sys_xdp::interface_index(iface)
        .map(IfIndex::new)
        .map_err(|e| Error::from_errno(format!("look up interface {iface}"), e, "", ""))
}

#[cfg(test)]
mod tests {
    use crate::sys::bpf::{BPF_PROG_TYPE_XDP, BPF_XDP, Insn, prog_load};

    #[test]
    fn a_rejected_program_comes_back_with_the_verifier_log() {
        if !testnet::privileged("a_rejected_program_comes_back_with_the_verifier_log") {
            return;
        }
        // `exit` without setting r0: the verifier refuses to return an uninitialised register.
        let err = prog_load(
            BPF_PROG_TYPE_XDP,
            BPF_XDP,
            0,
            &[Insn::exit()],
            c"Dual MIT/GPL",
            "zcnet_bad",
        )
        .expect_err("verifier rejects");
        assert_eq!(err.error.raw_os_error(), Some(libc::EACCES), "{err:?}");
        assert!(err.verifier_log.contains("R0"), "log: {}", err.verifier_log);
    }
}
