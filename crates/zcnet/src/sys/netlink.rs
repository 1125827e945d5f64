//! Generic netlink, read-only: the `netdev` family's per-device XDP features (`NETDEV_CMD_DEV_GET`).
//!
//! Messages are built and parsed as plain bytes in native endianness (netlink's wire format): a 16-byte
//! `nlmsghdr`, a 4-byte `genlmsghdr`, then 4-byte-aligned attributes (`nlattr`: u16 length including
//! the 4-byte header, u16 type). Only the socket calls need `unsafe`.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd};

/// `NETDEV_FAMILY_NAME` (include/uapi/linux/netdev.h).
pub const NETDEV_FAMILY_NAME: &str = "netdev";
/// `NETDEV_CMD_DEV_GET`: one device's attributes, or all with `NLM_F_DUMP`.
pub const NETDEV_CMD_DEV_GET: u8 = 1;
/// `NETDEV_A_DEV_IFINDEX` (u32).
pub const NETDEV_A_DEV_IFINDEX: u16 = 1;
/// `NETDEV_A_DEV_XDP_FEATURES` (u64 bitmask of `netdev_xdp_act`).
pub const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
/// `NETDEV_A_DEV_XDP_ZC_MAX_SEGS` (u32): fragments an XSK zero-copy frame may span.
pub const NETDEV_A_DEV_XDP_ZC_MAX_SEGS: u16 = 4;

/// `enum netdev_xdp_act` bits (include/uapi/linux/netdev.h): what a driver's XDP path can do.
pub mod xdp_act {
    /// `NETDEV_XDP_ACT_BASIC`: XDP_PASS, XDP_DROP, XDP_ABORTED, XDP_TX.
    pub const BASIC: u64 = 1 << 0;
    /// `NETDEV_XDP_ACT_REDIRECT`: XDP_REDIRECT (needed to feed an AF_XDP socket in driver mode).
    pub const REDIRECT: u64 = 1 << 1;
    /// `NETDEV_XDP_ACT_NDO_XMIT`: the device can be a redirect target.
    pub const NDO_XMIT: u64 = 1 << 2;
    /// `NETDEV_XDP_ACT_XSK_ZEROCOPY`: AF_XDP sockets can bind with XDP_ZEROCOPY.
    pub const XSK_ZEROCOPY: u64 = 1 << 3;
    /// `NETDEV_XDP_ACT_HW_OFFLOAD`: programs can run on the NIC.
    pub const HW_OFFLOAD: u64 = 1 << 4;
    /// `NETDEV_XDP_ACT_RX_SG`: multi-buffer (fragmented) frames on receive.
    pub const RX_SG: u64 = 1 << 5;
    /// `NETDEV_XDP_ACT_NDO_XMIT_SG`: multi-buffer frames as a redirect target.
    pub const NDO_XMIT_SG: u64 = 1 << 6;

    /// Names of the bits set in `mask`, in bit order, as `ip`/ynl print them.
    pub fn names(mask: u64) -> Vec<&'static str> {
        const ALL: [(u64, &str); 7] = [
            (BASIC, "basic"),
            (REDIRECT, "redirect"),
            (NDO_XMIT, "ndo-xmit"),
            (XSK_ZEROCOPY, "xsk-zerocopy"),
            (HW_OFFLOAD, "hw-offload"),
            (RX_SG, "rx-sg"),
            (NDO_XMIT_SG, "ndo-xmit-sg"),
        ];
        ALL.iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

const NLMSG_HDRLEN: usize = 16;
const GENL_HDRLEN: usize = 4;
const NLA_HDRLEN: usize = 4;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_FAMILY_ID: u16 = 1;

const _: () = assert!(mem::size_of::<libc::nlmsghdr>() == NLMSG_HDRLEN);
const _: () = assert!(mem::size_of::<libc::genlmsghdr>() == GENL_HDRLEN);
const _: () = assert!(mem::size_of::<libc::nlattr>() == NLA_HDRLEN);

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One device as the netdev family describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetdevXdp {
    /// Interface index.
    pub ifindex: u32,
    /// `netdev_xdp_act` bitmask ([`xdp_act`]).
    pub xdp_features: u64,
    /// Maximum fragments per XSK zero-copy frame (0 when absent).
    pub xdp_zc_max_segs: u32,
}

/// Builds a generic netlink request: headers plus attributes `(type, payload)`.
pub fn build_request(
    family: u16,
    flags: u16,
    cmd: u8,
    seq: u32,
    attrs: &[(u16, &[u8])],
) -> Vec<u8> {
    let mut msg = vec![0u8; NLMSG_HDRLEN];
    msg.extend_from_slice(&[cmd, 1, 0, 0]);
    for (ty, payload) in attrs {
        let len = NLA_HDRLEN + payload.len();
        msg.extend_from_slice(&(len as u16).to_ne_bytes());
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(payload);
        msg.resize(align4(msg.len()), 0);
    }
    let total = msg.len() as u32;
    msg[0..4].copy_from_slice(&total.to_ne_bytes());
    msg[4..6].copy_from_slice(&family.to_ne_bytes());
    msg[6..8].copy_from_slice(&flags.to_ne_bytes());
    msg[8..12].copy_from_slice(&seq.to_ne_bytes());
    msg
}

/// One parsed netlink message: its type and the bytes after the `nlmsghdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// `nlmsg_type`: a family id, `NLMSG_ERROR` or `NLMSG_DONE`.
    pub kind: u16,
    /// The payload (for genl: `genlmsghdr` then attributes).
    pub payload: &'a [u8],
}

/// Splits a receive buffer into messages; a truncated or malformed header ends the walk with an error.
pub fn messages(buf: &[u8]) -> io::Result<Vec<Message<'_>>> {
    let mut out = Vec::new();
    let mut rest = buf;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "malformed netlink message length",
            ));
        }
        let kind = u16::from_ne_bytes(rest[4..6].try_into().expect("2 bytes"));
        out.push(Message {
            kind,
            payload: &rest[NLMSG_HDRLEN..len],
        });
        rest = &rest[align4(len).min(rest.len())..];
    }
    Ok(out)
}

/// Iterates the attributes `(type, payload)` of a genl payload (after its `genlmsghdr`). Nested and
/// byte-order flag bits are masked off the type. Stops at the first malformed attribute.
pub fn attributes(genl_payload: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = genl_payload.get(GENL_HDRLEN..).unwrap_or(&[]);
    std::iter::from_fn(move || {
        if rest.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let ty = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < NLA_HDRLEN || len > rest.len() {
            return None;
        }
        let payload = &rest[NLA_HDRLEN..len];
        rest = &rest[align4(len).min(rest.len())..];
        Some((ty, payload))
    })
}

fn error_of(msg: &Message<'_>) -> Option<io::Error> {
    if msg.kind != libc::NLMSG_ERROR as u16 {
        return None;
    }
    let code = i32::from_ne_bytes(msg.payload.get(0..4)?.try_into().ok()?);
    (code != 0).then(|| io::Error::from_raw_os_error(-code))
}

/// A generic netlink socket (`NETLINK_GENERIC`), closed on drop.
#[derive(Debug)]
pub struct GenlSocket {
    fd: OwnedFd,
    seq: u32,
}

impl GenlSocket {
    /// Opens a generic netlink socket (unbound: the kernel gives it a port id on its first send).
    pub fn open() -> io::Result<GenlSocket> {
        let fd = super::socket::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_GENERIC)?;
        Ok(GenlSocket { fd, seq: 1 })
    }

    /// Sends `request` (built by [`build_request`] with a placeholder sequence number) and collects
    /// every reply message until `NLMSG_DONE` (dumps) or the first reply (plain requests). A netlink
    /// error reply becomes the returned error (e.g. `ENOENT` for an unknown family).
    pub fn transact(
        &mut self,
        family: u16,
        flags: u16,
        cmd: u8,
        attrs: &[(u16, &[u8])],
    ) -> io::Result<Vec<(u16, Vec<u8>)>> {
        self.seq = self.seq.wrapping_add(1);
        let req = build_request(
            family,
            flags | libc::NLM_F_REQUEST as u16,
            cmd,
            self.seq,
            attrs,
        );
        // SAFETY: `req` is a live buffer of `req.len()` bytes that the kernel only reads during the call
        // (a netlink socket with no destination set sends to the kernel, port id 0).
        syscall!(send(self.fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0))?;
        let dump = flags & libc::NLM_F_DUMP as u16 != 0;
        let mut replies = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = super::retry_if_interrupted(|| {
                // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
                syscall!(recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0
                ))
            })? as usize;
            for msg in messages(&buf[..n])? {
                if let Some(err) = error_of(&msg) {
                    return Err(err);
                }
                if msg.kind == libc::NLMSG_DONE as u16 || msg.kind == libc::NLMSG_ERROR as u16 {
                    return Ok(replies);
                }
                replies.push((msg.kind, msg.payload.to_vec()));
                if !dump {
                    return Ok(replies);
                }
            }
        }
    }

    /// Resolves a generic netlink family name to its id (`CTRL_CMD_GETFAMILY`).
    pub fn family_id(&mut self, name: &str) -> io::Result<u16> {
        let mut cname = name.as_bytes().to_vec();
        cname.push(0);
        let replies = self.transact(
            libc::GENL_ID_CTRL as u16,
            0,
            libc::CTRL_CMD_GETFAMILY as u8,
            &[(CTRL_ATTR_FAMILY_NAME, &cname)],
        )?;
        replies
            .iter()
            .flat_map(|(_, p)| attributes(p).collect::<Vec<_>>())
            .find(|(ty, p)| *ty == CTRL_ATTR_FAMILY_ID && p.len() >= 2)
            .map(|(_, p)| u16::from_ne_bytes([p[0], p[1]]))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no family id in reply"))
    }

    /// Every device's XDP features from the netdev family (kernel 6.3 and later). `ENOENT` means the
    /// kernel has no netdev family.
    pub fn netdev_devices(&mut self) -> io::Result<Vec<NetdevXdp>> {
        let family = self.family_id(NETDEV_FAMILY_NAME)?;
        let replies = self.transact(family, libc::NLM_F_DUMP as u16, NETDEV_CMD_DEV_GET, &[])?;
        Ok(replies.iter().map(|(_, p)| parse_netdev(p)).collect())
    }
}

/// Reads one `NETDEV_CMD_DEV_GET` reply payload.
pub fn parse_netdev(genl_payload: &[u8]) -> NetdevXdp {
    let mut dev = NetdevXdp {
        ifindex: 0,
        xdp_features: 0,
        xdp_zc_max_segs: 0,
    };
    for (ty, p) in attributes(genl_payload) {
        match (ty, p.len()) {
            (NETDEV_A_DEV_IFINDEX, 4) => dev.ifindex = u32::from_ne_bytes(p.try_into().expect("4")),
            (NETDEV_A_DEV_XDP_FEATURES, 8) => {
                dev.xdp_features = u64::from_ne_bytes(p.try_into().expect("8"))
            }
            (NETDEV_A_DEV_XDP_ZC_MAX_SEGS, 4) => {
                dev.xdp_zc_max_segs = u32::from_ne_bytes(p.try_into().expect("4"))
            }
            _ => {}
        }
    }
    dev
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layouts_match_linux_netlink_h() {
        assert_eq!(mem::offset_of!(libc::nlmsghdr, nlmsg_len), 0);
        assert_eq!(mem::offset_of!(libc::nlmsghdr, nlmsg_type), 4);
        assert_eq!(mem::offset_of!(libc::nlmsghdr, nlmsg_flags), 6);
        assert_eq!(mem::offset_of!(libc::nlmsghdr, nlmsg_seq), 8);
        assert_eq!(mem::offset_of!(libc::nlmsghdr, nlmsg_pid), 12);
        assert_eq!(mem::offset_of!(libc::genlmsghdr, cmd), 0);
        assert_eq!(mem::offset_of!(libc::nlattr, nla_type), 2);
    }

    #[test]
    fn request_round_trips_through_the_parser() {
        let req = build_request(0x10, 1, 3, 7, &[(2, b"netdev\0"), (1, &[1, 2])]);
        assert_eq!(req.len() % 4, 0);
        let msgs = messages(&req).unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].kind, 0x10);
        let attrs: Vec<_> = attributes(msgs[0].payload).collect();
        assert_eq!(attrs, vec![(2, &b"netdev\0"[..]), (1, &[1u8, 2][..])]);
    }

    #[test]
    fn netdev_reply_parses_and_names_features() {
        let feats = (xdp_act::BASIC | xdp_act::REDIRECT | xdp_act::XSK_ZEROCOPY).to_ne_bytes();
        let req = build_request(
            30,
            0,
            1,
            1,
            &[
                (NETDEV_A_DEV_IFINDEX, &4u32.to_ne_bytes()),
                (NETDEV_A_DEV_XDP_FEATURES, &feats),
            ],
        );
        let msgs = messages(&req).unwrap();
        let dev = parse_netdev(msgs[0].payload);
        assert_eq!(dev.ifindex, 4);
        assert_eq!(
            xdp_act::names(dev.xdp_features),
            ["basic", "redirect", "xsk-zerocopy"]
        );
    }

    #[test]
    fn malformed_lengths_are_rejected_not_trusted() {
        let mut req = build_request(0x10, 1, 3, 7, &[]);
        req[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(messages(&req).is_err());
        let bogus_attr = [0u8, 0, 0, 0, 200, 0, 1, 0];
        assert_eq!(attributes(&bogus_attr).count(), 0);
    }

    #[test]
    fn the_running_kernel_lists_loopback() {
        let mut sock = GenlSocket::open().unwrap();
        match sock.netdev_devices() {
            Ok(devs) => assert!(devs.iter().any(|d| d.ifindex == 1), "{devs:?}"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
        }
    }
}
