//! Generic netlink: one request/reply path (family resolution, sequence numbers, acknowledgements and
//! error messages, multi-part dumps) shared by the `netdev` family (per-device XDP features) and the Open
//! vSwitch datapath families ([`super::ovs`]), and a non-blocking receive for unicasts the kernel starts
//! (OVS upcalls), where `ENOBUFS` reports messages dropped for lack of queue space.
//!
//! Messages are built and parsed as plain bytes in native endianness (netlink's wire format): a 16-byte
//! `nlmsghdr`, a 4-byte `genlmsghdr`, then 4-byte-aligned attributes (`nlattr`: u16 length including
//! the 4-byte header, u16 type). Only the socket calls need `unsafe`.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

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

/// `NETDEV_A_DEV_XSK_FEATURES` (u64 bitmask of `netdev_xsk_flags`, kernel 6.8 and later): the AF_XDP
/// TX metadata a zero-copy driver acts on (`netdev->xsk_tx_metadata_ops`).
pub const NETDEV_A_DEV_XSK_FEATURES: u16 = 6;

/// `NETDEV_CMD_QUEUE_GET` (Linux 6.8): one queue, or a device's queues with `NLM_F_DUMP`.
pub const NETDEV_CMD_QUEUE_GET: u8 = 10;
/// `NETDEV_A_QUEUE_*` (include/uapi/linux/netdev.h).
mod queue_attr {
    pub const ID: u16 = 1;
    pub const IFINDEX: u16 = 2;
    pub const TYPE: u16 = 3;
    pub const NAPI_ID: u16 = 4;
    pub const DMABUF: u16 = 5;
    /// Nest, present when an io_uring zcrx area is bound to the queue (Linux 6.15).
    pub const IO_URING: u16 = 6;
    /// Nest, present when an AF_XDP socket's pool is bound to the queue (Linux 6.15).
    pub const XSK: u16 = 7;
}
/// `NETDEV_QUEUE_TYPE_RX`.
const NETDEV_QUEUE_TYPE_RX: u32 = 0;

/// One queue as `queue-get` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetdevQueue {
    /// Queue number.
    pub id: u32,
    /// An RX queue (else TX).
    pub rx: bool,
    /// The NAPI instance serving it, when the driver reports one.
    pub napi_id: Option<u32>,
    /// The id of a devmem dma-buf bound to it.
    pub dmabuf: Option<u32>,
    /// An io_uring zcrx area is bound to it.
    pub io_uring: bool,
    /// An AF_XDP socket's buffer pool is bound to it.
    pub xsk: bool,
}

/// `enum netdev_xsk_flags` bits (include/uapi/linux/netdev.h).
pub mod xsk_flags {
    /// `NETDEV_XSK_FLAGS_TX_TIMESTAMP`: the driver fills `XDP_TXMD_FLAGS_TIMESTAMP` requests with the
    /// device's transmit time.
    pub const TX_TIMESTAMP: u64 = 1 << 0;
    /// `NETDEV_XSK_FLAGS_TX_CHECKSUM`: the device computes `XDP_TXMD_FLAGS_CHECKSUM` requests.
    pub const TX_CHECKSUM: u64 = 1 << 1;
    /// `NETDEV_XSK_FLAGS_TX_LAUNCH_TIME_FIFO` (Linux 6.15): the device sends a packet at its
    /// requested launch time.
    pub const TX_LAUNCH_TIME_FIFO: u64 = 1 << 2;

    /// The names of the bits set in `mask` (the netdev spec's), unknown bits as hex.
    pub fn names(mask: u64) -> Vec<String> {
        const ALL: [(u64, &str); 3] = [
            (TX_TIMESTAMP, "tx-timestamp"),
            (TX_CHECKSUM, "tx-checksum"),
            (TX_LAUNCH_TIME_FIFO, "tx-launch-time-fifo"),
        ];
        let known = ALL.iter().fold(0, |m, (bit, _)| m | bit);
        let mut out: Vec<String> = ALL
            .iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, name)| name.to_string())
            .collect();
        if mask & !known != 0 {
            out.push(format!("{:#x}", mask & !known));
        }
        out
    }
}

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

/// Length of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// Length of `struct genlmsghdr`.
pub const GENL_HDRLEN: usize = 4;
/// Length of `struct nlattr`.
pub const NLA_HDRLEN: usize = 4;
/// `NLA_F_NESTED`: set on the type of an attribute whose payload is itself attributes.
pub const NLA_F_NESTED: u16 = 1 << 15;
const NLA_TYPE_MASK: u16 = 0x3fff;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `SOL_NETLINK` (include/linux/socket.h).
const SOL_NETLINK: i32 = 270;
/// `NETLINK_CAP_ACK` (include/uapi/linux/netlink.h, Linux 4.3): error messages without the request.
const NETLINK_CAP_ACK: i32 = 10;

const _: () = assert!(mem::size_of::<libc::nlmsghdr>() == NLMSG_HDRLEN);
const _: () = assert!(mem::size_of::<libc::genlmsghdr>() == GENL_HDRLEN);
const _: () = assert!(mem::size_of::<libc::nlattr>() == NLA_HDRLEN);

/// Rounds `n` up to netlink's 4-byte alignment (`NLMSG_ALIGN`, `NLA_ALIGN`).
pub const fn align4(n: usize) -> usize {
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
    /// `netdev_xsk_flags` bitmask ([`xsk_flags`]); `None` when the kernel sends no such attribute
    /// (before 6.8: no AF_XDP TX metadata).
    pub xsk_features: Option<u64>,
}

/// A generic netlink request under construction: `nlmsghdr`, `genlmsghdr`, an optional family header
/// (OVS's `struct ovs_header`), then 4-byte-aligned attributes, possibly nested.
///
/// Lengths are checked, never wrapped: an attribute (nested ones included) longer than `nla_len`'s
/// 16 bits can say, or a message longer than `nlmsg_len`'s 32 bits, makes [`Request::finish`] fail
/// with `InvalidInput` instead of sending a length the kernel would misread.
#[derive(Debug, Clone)]
pub struct Request {
    buf: Vec<u8>,
    /// The length of the first attribute too long for `nla_len`, if any.
    too_long: Option<usize>,
}

/// An attribute of `len` bytes (header included) too long for `nla_len` (u16).
fn attribute_too_long(len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "netlink attribute of {len} bytes (header included): nla_len holds at most {}",
            u16::MAX
        ),
    )
}

impl Request {
    /// A request for command `cmd` (genl `version`) of `family`, with `NLM_F_*` `flags` beyond
    /// `NLM_F_REQUEST` (always set).
    pub fn new(family: u16, flags: u16, cmd: u8, version: u8) -> Request {
        let mut buf = vec![0u8; NLMSG_HDRLEN];
        buf[4..6].copy_from_slice(&family.to_ne_bytes());
        buf[6..8].copy_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
        buf.extend_from_slice(&[cmd, version, 0, 0]);
        Request {
            buf,
            too_long: None,
        }
    }

    /// A route netlink request (`NETLINK_ROUTE`) of message type `kind` (`RTM_GET*`) with `NLM_F_*`
    /// `flags` beyond `NLM_F_REQUEST`: no `genlmsghdr`, the family header `header` (`struct rtmsg`,
    /// `struct ndmsg`, …) right after the `nlmsghdr`.
    pub fn rtnetlink(kind: u16, flags: u16, header: &[u8]) -> Request {
        let mut buf = vec![0u8; NLMSG_HDRLEN];
        buf[4..6].copy_from_slice(&kind.to_ne_bytes());
        buf[6..8].copy_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
        let request = Request {
            buf,
            too_long: None,
        };
        request.header(header)
    }

    /// Appends a family's fixed header (bytes placed right after the `genlmsghdr`).
    pub fn header(mut self, bytes: &[u8]) -> Request {
        self.buf.extend_from_slice(bytes);
        self.pad();
        self
    }

    fn pad(&mut self) {
        self.buf.resize(align4(self.buf.len()), 0);
    }

    /// `nla_len` for an attribute of `len` bytes (header included): the length, or 0 with the
    /// request marked as failed when it does not fit 16 bits.
    fn nla_len(&mut self, len: usize) -> u16 {
        u16::try_from(len).unwrap_or_else(|_| {
            self.too_long.get_or_insert(len);
            0
        })
    }

    /// Appends attribute `ty` with `payload`, padded to 4 bytes. A payload longer than 65531 bytes
    /// fails the request (see [`Request::finish`]).
    pub fn attr(&mut self, ty: u16, payload: &[u8]) -> &mut Request {
        let len = self.nla_len(NLA_HDRLEN.saturating_add(payload.len()));
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.pad();
        self
    }

    /// Appends a u32 attribute (native byte order).
    pub fn u32(&mut self, ty: u16, value: u32) -> &mut Request {
        self.attr(ty, &value.to_ne_bytes())
    }

    /// Appends a NUL-terminated string attribute.
    pub fn string(&mut self, ty: u16, value: &str) -> &mut Request {
        let mut bytes = Vec::with_capacity(value.len() + 1);
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
        self.attr(ty, &bytes)
    }

    /// Appends a nested attribute `ty` whose payload `fill` writes as attributes.
    pub fn nested(&mut self, ty: u16, fill: impl FnOnce(&mut Request)) -> &mut Request {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        fill(self);
        let len = self.nla_len(self.buf.len() - start);
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    /// The finished message with sequence number `seq` and its length field set; `InvalidInput`
    /// when an attribute was too long for `nla_len` or the message for `nlmsg_len`.
    pub fn finish(self, seq: u32) -> io::Result<Vec<u8>> {
        let len = self.buf.len();
        self.finish_as(seq, len)
    }

    /// The message with `nlmsg_len` set to `total` (the head and whatever the caller sends after it).
    fn finish_as(mut self, seq: u32, total: usize) -> io::Result<Vec<u8>> {
        if let Some(len) = self.too_long {
            return Err(attribute_too_long(len));
        }
        let total = u32::try_from(total).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "netlink message of {total} bytes: nlmsg_len holds at most {}",
                    u32::MAX
                ),
            )
        })?;
        self.buf[0..4].copy_from_slice(&total.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        Ok(self.buf)
    }

    /// The finished message followed by one more attribute `ty` whose payload (`trailer`) the caller
    /// sends from its own memory (scatter-gather): returns the head bytes and the padding to send after
    /// the trailer. The trailer must be the last part of the message. `InvalidInput` as for
    /// [`Request::finish`], also when the trailer is longer than 65531 bytes.
    pub fn finish_with_trailer(
        mut self,
        seq: u32,
        ty: u16,
        trailer_len: usize,
    ) -> io::Result<(Vec<u8>, usize)> {
        let len = self.nla_len(NLA_HDRLEN.saturating_add(trailer_len));
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        if let Some(len) = self.too_long {
            return Err(attribute_too_long(len));
        }
        // The trailer fits nla_len (at most 65531 bytes): no overflow below.
        let pad = align4(trailer_len) - trailer_len;
        let total = self.buf.len() + trailer_len + pad;
        let head = self.finish_as(seq, total)?;
        Ok((head, pad))
    }
}

/// One parsed netlink message: its type and the bytes after the `nlmsghdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// `nlmsg_type`: a family id, `NLMSG_ERROR` or `NLMSG_DONE`.
    pub kind: u16,
    /// `nlmsg_seq`: the request's sequence number (0 on messages the kernel starts, such as upcalls).
    pub seq: u32,
    /// The payload (for genl: `genlmsghdr` then attributes).
    pub payload: &'a [u8],
}

impl Message<'_> {
    /// The genl command of the payload (its first byte), if there is a `genlmsghdr`.
    pub fn genl_cmd(&self) -> Option<u8> {
        (self.payload.len() >= GENL_HDRLEN).then(|| self.payload[0])
    }

    /// For an `NLMSG_ERROR` message: `Ok(())` for an acknowledgement (error 0), else the error.
    pub fn ack(&self) -> Option<io::Result<()>> {
        if self.kind != libc::NLMSG_ERROR as u16 {
            return None;
        }
        Some(match self.payload.get(0..4) {
            Some(b) => status(i32::from_ne_bytes(b.try_into().expect("4 bytes"))),
            None => Err(malformed("truncated netlink error message")),
        })
    }

    /// For an `NLMSG_DONE` message: `Ok(())` for a dump that ended well, else the error it ended
    /// with. The kernel (`netlink_dump_done`, net/netlink/af_netlink.c) puts the dump's result, 0 or
    /// a negative errno, in the message's first 4 bytes: a dump whose object is gone — an Open
    /// vSwitch datapath deleted, `ENODEV` — ends with a `NLMSG_DONE` carrying that error, not with an
    /// `NLMSG_ERROR`. A `NLMSG_DONE` without those bytes ended well.
    pub fn done(&self) -> Option<io::Result<()>> {
        if self.kind != libc::NLMSG_DONE as u16 {
            return None;
        }
        Some(match self.payload.get(0..4) {
            Some(b) => status(i32::from_ne_bytes(b.try_into().expect("4 bytes"))),
            None => Ok(()),
        })
    }
}

/// A kernel status code: 0 (or positive) is success, a negative one is `-errno`.
fn status(code: i32) -> io::Result<()> {
    match code {
        0.. => Ok(()),
        _ => Err(io::Error::from_raw_os_error(code.saturating_neg())),
    }
}

/// Why a netlink message or attribute stream is malformed.
fn malformed(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Splits a receive buffer into messages; a truncated or malformed header ends the walk with an error.
/// The last message's length need not be a multiple of 4 (an OVS upcall from a datapath with
/// `OVS_DP_F_UNALIGNED` is not padded).
pub fn messages(buf: &[u8]) -> io::Result<Vec<Message<'_>>> {
    let mut out = Vec::new();
    let mut rest = buf;
    while !rest.is_empty() {
        if rest.len() < NLMSG_HDRLEN {
            return Err(malformed("truncated netlink message header"));
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(malformed("malformed netlink message length"));
        }
        out.push(Message {
            kind: u16::from_ne_bytes(rest[4..6].try_into().expect("2 bytes")),
            seq: u32::from_ne_bytes(rest[8..12].try_into().expect("4 bytes")),
            payload: &rest[NLMSG_HDRLEN..len],
        });
        rest = &rest[align4(len).min(rest.len())..];
    }
    Ok(out)
}

/// Strict walk over a run of attributes: yields `(type, payload)` with the nested and byte-order flag
/// bits masked off the type, or one error (then stops) for a length field shorter than the attribute
/// header or longer than what is left. The last attribute may lack its padding.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    rest: &'a [u8],
}

impl<'a> Attributes<'a> {
    /// Attributes starting at the first byte of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Attributes<'a> {
        Attributes { rest: bytes }
    }
}

impl<'a> Iterator for Attributes<'a> {
    type Item = io::Result<(u16, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.rest);
        if rest.len() < NLA_HDRLEN {
            return Some(Err(malformed("truncated attribute header")));
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let ty = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN {
            return Some(Err(malformed("attribute length shorter than its header")));
        }
        if len > rest.len() {
            return Some(Err(malformed("attribute length beyond the message")));
        }
        self.rest = &rest[align4(len).min(rest.len())..];
        Some(Ok((ty, &rest[NLA_HDRLEN..len])))
    }
}

/// Lenient walk over the attributes of a genl payload (after its `genlmsghdr`): stops at the first
/// malformed attribute.
pub fn attributes(genl_payload: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    Attributes::new(genl_payload.get(GENL_HDRLEN..).unwrap_or(&[])).map_while(Result::ok)
}

/// One reply of a request: its genl payload, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The genl command of the reply.
    pub cmd: u8,
    /// `genlmsghdr` and everything after it.
    pub payload: Vec<u8>,
}

/// A generic netlink socket (`NETLINK_GENERIC`), closed on drop. It is bound at open, so its port id
/// (what the kernel addresses unicasts such as OVS upcalls to) is known from the start.
#[derive(Debug)]
pub struct GenlSocket {
    fd: OwnedFd,
    seq: u32,
    port_id: u32,
}

impl GenlSocket {
    /// Opens a generic netlink socket and binds it to a port id the kernel chooses.
    pub fn open() -> io::Result<GenlSocket> {
        GenlSocket::open_protocol(libc::NETLINK_GENERIC, 0)
    }

    /// Opens a route netlink socket (`NETLINK_ROUTE`) with the same request path, for
    /// [`Request::rtnetlink`] requests; its replies carry their family header where a genl reply has
    /// its `genlmsghdr` ([`Reply::payload`]).
    pub fn open_route() -> io::Result<GenlSocket> {
        GenlSocket::open_protocol(libc::NETLINK_ROUTE, 0)
    }

    /// Opens a socket diagnostics netlink socket (`NETLINK_SOCK_DIAG`) with the same request path,
    /// for [`Request::rtnetlink`]-shaped requests (`nlmsghdr`, then the family's request struct).
    pub fn open_sock_diag() -> io::Result<GenlSocket> {
        GenlSocket::open_protocol(libc::NETLINK_SOCK_DIAG, 0)
    }

    /// Opens a route netlink socket that joins the multicast `groups` (`RTMGRP_*` bits): the
    /// kernel queues a message on it for every change in those tables, before the call making the
    /// change returns; read them with [`GenlSocket::recv_nonblocking`] (`ENOBUFS` when some were
    /// dropped for lack of queue space).
    pub fn open_route_listener(groups: u32) -> io::Result<GenlSocket> {
        GenlSocket::open_protocol(libc::NETLINK_ROUTE, groups)
    }

    fn open_protocol(protocol: i32, groups: u32) -> io::Result<GenlSocket> {
        let fd = super::socket::socket(libc::AF_NETLINK, libc::SOCK_RAW, protocol)?;
        // SAFETY: all-zero is a valid `sockaddr_nl` (family set below, pid 0 = kernel chooses).
        let mut addr: libc::sockaddr_nl = unsafe { mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = groups;
        let mut len = mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: `addr` is a live `sockaddr_nl` and `len` its exact size.
        syscall!(bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            len
        ))?;
        // SAFETY: `addr` and `len` are live and writable; the kernel writes at most `len` bytes.
        syscall!(getsockname(
            fd.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_nl).cast(),
            &mut len
        ))?;
        let sock = GenlSocket {
            fd,
            seq: 1,
            port_id: addr.nl_pid,
        };
        sock.cap_acks(true)?;
        Ok(sock)
    }

    /// Turns `NETLINK_CAP_ACK` on or off. On, an error message carries the refused request's
    /// `nlmsghdr` only; off, the kernel echoes the whole request after the errno (`netlink_ack`),
    /// which for a request of more than 64 KiB (a large packet to execute) makes an error message of
    /// more than 64 KiB. A kernel older than 4.3 lacks the option (`ENOPROTOOPT`); its long error
    /// messages are still read whole ([`GenlSocket::collect_replies`]).
    fn cap_acks(&self, on: bool) -> io::Result<()> {
        let value = i32::from(on);
        match super::socket::set_int_option(self.fd.as_fd(), SOL_NETLINK, NETLINK_CAP_ACK, value) {
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => Ok(()),
            other => other,
        }
    }

    /// The socket's netlink port id (`nl_pid`).
    pub fn port_id(&self) -> u32 {
        self.port_id
    }

    /// The socket's descriptor, for polling.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Asks for a receive buffer of `bytes` (`SO_RCVBUFFORCE` when privileged, else `SO_RCVBUF`, which
    /// `net.core.rmem_max` caps); returns the size the kernel reports (twice the request, for its
    /// bookkeeping).
    pub fn set_receive_buffer(&self, bytes: usize) -> io::Result<usize> {
        let value = i32::try_from(bytes).unwrap_or(i32::MAX);
        let fd = self.fd.as_fd();
        super::socket::set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value).or_else(
            |_| super::socket::set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, value),
        )?;
        Ok(super::socket::get_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)? as usize)
    }

    /// Receives one datagram into `buf` without blocking: `Ok(None)` when nothing is queued. Returns
    /// the datagram's full length (`MSG_TRUNC`), which exceeds `buf.len()` when it did not fit.
    /// `ENOBUFS` means the socket's receive queue overflowed since the last call and the kernel
    /// dropped messages addressed to it.
    pub fn recv_nonblocking(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.recv_with(buf, libc::MSG_DONTWAIT | libc::MSG_TRUNC) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends one message gathered from `parts` (`sendmsg` with one iovec per part): bytes the caller
    /// borrows, such as a received packet, go to the kernel without being copied into a request buffer.
    pub fn send_gathered(&self, parts: &[&[u8]]) -> io::Result<()> {
        let iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: all-zero is a valid `msghdr` (no address: the kernel is the destination).
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len();
        super::retry_if_interrupted(|| {
            // SAFETY: `msg` points at `iov`, whose entries point at the live slices in `parts`; the
            // kernel only reads them during the call.
            syscall!(sendmsg(self.fd.as_raw_fd(), &msg, 0))
        })
        .map(drop)
    }

    /// The next sequence number for a request of this socket.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `request` with `NLM_F_ACK` and collects its replies: every part of a dump (`NLM_F_DUMP`,
    /// ended by `NLMSG_DONE`), or the replies before the acknowledgement. A netlink error becomes the
    /// returned error (`ENOENT` for an unknown family, `EPERM` without CAP_NET_ADMIN). Messages with
    /// another sequence number (left over from an earlier, interrupted request) are skipped.
    pub fn request(&mut self, request: Request) -> io::Result<Vec<Reply>> {
        let seq = self.next_seq();
        let mut req = request.finish(seq)?;
        let flags = u16::from_ne_bytes([req[6], req[7]]) | libc::NLM_F_ACK as u16;
        req[6..8].copy_from_slice(&flags.to_ne_bytes());
        self.send_gathered(&[&req])?;
        self.collect_replies(
            seq,
            flags & libc::NLM_F_DUMP as u16 == libc::NLM_F_DUMP as u16,
        )
    }

    /// Reads replies to request `seq` until it is complete (see [`GenlSocket::request`]). A dump
    /// that fails part-way — its object deleted under it — is its error, not the replies before it
    /// ([`Message::done`]).
    pub fn collect_replies(&mut self, seq: u32, dump: bool) -> io::Result<Vec<Reply>> {
        let mut replies = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.recv_whole(&mut buf)?;
            for msg in messages(&buf[..n])? {
                if msg.seq != seq {
                    continue;
                }
                if let Some(ack) = msg.ack() {
                    ack?;
                    if !dump {
                        return Ok(replies);
                    }
                    continue;
                }
                if let Some(done) = msg.done() {
                    return done.map(|()| replies);
                }
                if let Some(cmd) = msg.genl_cmd() {
                    replies.push(Reply {
                        cmd,
                        payload: msg.payload.to_vec(),
                    });
                }
            }
        }
    }

    /// Receives the next datagram whole, growing `buf` first when it is longer than `buf`: a peek
    /// (`MSG_PEEK | MSG_TRUNC`) gives its length without taking it. Dump datagrams stay within
    /// 32 KiB, but a single reply is sized for what it carries — an Open vSwitch flow with 64 KiB of
    /// actions, an error echoing a long request — and a datagram read short is lost. Returns its
    /// length.
    fn recv_whole(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let len = self.recv_with(buf, libc::MSG_PEEK | libc::MSG_TRUNC)?;
        if len > buf.len() {
            buf.resize(len, 0);
        }
        Ok(self.recv_with(buf, 0)?.min(buf.len()))
    }

    /// `recv` into `buf` with `flags`, retried when interrupted. With `MSG_TRUNC` the result is the
    /// datagram's full length, which may exceed `buf.len()`; the kernel writes at most `buf.len()`.
    fn recv_with(&self, buf: &mut [u8], flags: i32) -> io::Result<usize> {
        super::retry_if_interrupted(|| {
            // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes.
            syscall!(recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                flags
            ))
        })
        .map(|n| n as usize)
    }

    /// Resolves a generic netlink family name to its id (`CTRL_CMD_GETFAMILY`). `ENOENT` means the
    /// kernel has no such family (its module is not loaded).
    pub fn family_id(&mut self, name: &str) -> io::Result<u16> {
        let mut req = Request::new(
            libc::GENL_ID_CTRL as u16,
            0,
            libc::CTRL_CMD_GETFAMILY as u8,
            1,
        );
        req.string(CTRL_ATTR_FAMILY_NAME, name);
        let replies = self.request(req)?;
        replies
            .iter()
            .flat_map(|r| attributes(&r.payload).collect::<Vec<_>>())
            .find(|(ty, p)| *ty == CTRL_ATTR_FAMILY_ID && p.len() >= 2)
            .map(|(_, p)| u16::from_ne_bytes([p[0], p[1]]))
            .ok_or_else(|| malformed("no family id in reply"))
    }

    /// Every device's XDP features from the netdev family (kernel 6.3 and later). `ENOENT` means the
    /// kernel has no netdev family.
    pub fn netdev_devices(&mut self) -> io::Result<Vec<NetdevXdp>> {
        let family = self.family_id(NETDEV_FAMILY_NAME)?;
        let replies = self.request(Request::new(
            family,
            libc::NLM_F_DUMP as u16,
            NETDEV_CMD_DEV_GET,
            1,
        ))?;
        Ok(replies.iter().map(|r| parse_netdev(&r.payload)).collect())
    }
}

impl GenlSocket {
    /// Every queue of device `ifindex` (`NETDEV_CMD_QUEUE_GET` dump; the kernel lists the queues of
    /// devices that are up). `ENOENT`: no netdev family; `EOPNOTSUPP`/`EINVAL`: a kernel before
    /// queue-get (6.8).
    pub fn netdev_queues(&mut self, ifindex: u32) -> io::Result<Vec<NetdevQueue>> {
        let family = self.family_id(NETDEV_FAMILY_NAME)?;
        let mut req = Request::new(family, libc::NLM_F_DUMP as u16, NETDEV_CMD_QUEUE_GET, 1);
        req.u32(queue_attr::IFINDEX, ifindex);
        let replies = self.request(req)?;
        Ok(replies
            .iter()
            .filter_map(|r| parse_queue(&r.payload, ifindex))
            .collect())
    }
}

/// Reads one `NETDEV_CMD_QUEUE_GET` reply payload of device `ifindex` (`None` for another device's).
pub fn parse_queue(genl_payload: &[u8], ifindex: u32) -> Option<NetdevQueue> {
    let mut q = NetdevQueue {
        id: 0,
        rx: false,
        napi_id: None,
        dmabuf: None,
        io_uring: false,
        xsk: false,
    };
    let mut dev = None;
    let u32_of = |p: &[u8]| p.try_into().ok().map(u32::from_ne_bytes);
    for (ty, p) in attributes(genl_payload) {
        match ty {
            queue_attr::ID => q.id = u32_of(p)?,
            queue_attr::IFINDEX => dev = u32_of(p),
            queue_attr::TYPE => q.rx = u32_of(p)? == NETDEV_QUEUE_TYPE_RX,
            queue_attr::NAPI_ID => q.napi_id = u32_of(p),
            queue_attr::DMABUF => q.dmabuf = u32_of(p),
            queue_attr::IO_URING => q.io_uring = true,
            queue_attr::XSK => q.xsk = true,
            _ => {}
        }
    }
    (dev == Some(ifindex)).then_some(q)
}

/// Reads one `NETDEV_CMD_DEV_GET` reply payload.
pub fn parse_netdev(genl_payload: &[u8]) -> NetdevXdp {
    let mut dev = NetdevXdp {
        ifindex: 0,
        xdp_features: 0,
        xdp_zc_max_segs: 0,
        xsk_features: None,
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
            (NETDEV_A_DEV_XSK_FEATURES, 8) => {
                dev.xsk_features = Some(u64::from_ne_bytes(p.try_into().expect("8")))
            }
            _ => {}
        }
    }
    dev
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        let mut req = Request::new(0x10, 1, 3, 1);
        req.attr(2, b"netdev\0").attr(1, &[1, 2]);
        let req = req.finish(7).unwrap();
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
        let mut req = Request::new(30, 0, 1, 1);
        req.u32(NETDEV_A_DEV_IFINDEX, 4)
            .attr(NETDEV_A_DEV_XDP_FEATURES, &feats);
        let req = req.finish(1).unwrap();
        let msgs = messages(&req).unwrap();
        let dev = parse_netdev(msgs[0].payload);
        assert_eq!(dev.ifindex, 4);
        assert_eq!(
            xdp_act::names(dev.xdp_features),
            ["basic", "redirect", "xsk-zerocopy"]
        );
        assert_eq!(dev.xsk_features, None, "a kernel before 6.8 sends none");
        let xsk = (xsk_flags::TX_CHECKSUM | 1 << 7).to_ne_bytes();
        let mut req = Request::new(30, 0, 1, 1);
        req.u32(NETDEV_A_DEV_IFINDEX, 4)
            .attr(NETDEV_A_DEV_XSK_FEATURES, &xsk);
        let req = req.finish(1).unwrap();
        let dev = parse_netdev(messages(&req).unwrap()[0].payload);
        assert_eq!(dev.xsk_features, Some(xsk_flags::TX_CHECKSUM | 1 << 7));
        assert_eq!(
            xsk_flags::names(dev.xsk_features.unwrap()),
            ["tx-checksum", "0x80"]
        );
    }

    /// Payload lengths around and far beyond what `nla_len` holds, hostile ones included.
    fn payload_len() -> impl Strategy<Value = usize> {
        prop_oneof![
            0usize..16,
            65_500usize..65_600,
            Just(65_531usize),
            Just(65_532usize),
            Just(1usize << 20),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// An attribute (plain, nested or the trailer) fits `nla_len` and round-trips, or fails the
        /// request: a length is never wrapped into 16 bits.
        #[test]
        fn attribute_lengths_fit_or_fail(
            plain in payload_len(),
            nested in payload_len(),
            trailer in prop_oneof![payload_len(), Just(usize::MAX), Just(1usize << 62)],
        ) {
            let fits = |payload: usize| {
                payload
                    .checked_add(NLA_HDRLEN)
                    .is_some_and(|len| len <= usize::from(u16::MAX))
            };
            let mut req = Request::new(0x10, 1, 3, 1);
            req.attr(1, &vec![7; plain]);
            req.nested(2, |r| {
                r.attr(3, &vec![8; nested]);
            });
            let nested_fits =
                fits(nested) && NLA_HDRLEN + align4(NLA_HDRLEN + nested) <= usize::from(u16::MAX);
            let whole = req.clone().finish(9);
            prop_assert_eq!(whole.is_ok(), fits(plain) && nested_fits);
            match whole {
                Ok(msg) => {
                    let msgs = messages(&msg).unwrap();
                    let attrs: Vec<_> = attributes(msgs[0].payload).collect();
                    prop_assert_eq!(attrs.len(), 2);
                    prop_assert_eq!(attrs[0].1.len(), plain);
                    let inner: Vec<_> = Attributes::new(attrs[1].1).map(Result::unwrap).collect();
                    prop_assert_eq!(inner[0].1.len(), nested);
                }
                Err(e) => prop_assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
            }
            match req.finish_with_trailer(9, 4, trailer) {
                Ok((head, pad)) => {
                    prop_assert!(fits(plain) && nested_fits && fits(trailer));
                    let total = u32::from_ne_bytes(head[0..4].try_into().unwrap()) as usize;
                    prop_assert_eq!(total, head.len() + trailer + pad);
                    let len = u16::from_ne_bytes([head[head.len() - 4], head[head.len() - 3]]);
                    prop_assert_eq!(usize::from(len), NLA_HDRLEN + trailer);
                }
                Err(e) => {
                    prop_assert!(!(fits(plain) && nested_fits && fits(trailer)));
                    prop_assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
                }
            }
        }
    }

    #[test]
    fn malformed_lengths_are_rejected_not_trusted() {
        let mut req = Request::new(0x10, 1, 3, 1).finish(7).unwrap();
        req[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(messages(&req).is_err());
        let bogus_attr = [0u8, 0, 0, 0, 200, 0, 1, 0];
        assert_eq!(attributes(&bogus_attr).count(), 0);
    }

    /// A request of more than 64 KiB that the kernel refuses: a family name far longer than
    /// `GENL_NAMSIZ` (the controller's policy rejects it), 65,531 bytes, so that the whole message
    /// is 65,556 bytes.
    fn oversized_bad_request() -> Request {
        let mut req = Request::new(
            libc::GENL_ID_CTRL as u16,
            0,
            libc::CTRL_CMD_GETFAMILY as u8,
            1,
        );
        req.attr(CTRL_ATTR_FAMILY_NAME, &[b'z'; 65_531]);
        req
    }

    #[test]
    fn an_error_to_a_request_over_64_kib_reads_as_its_errno() {
        let mut sock = GenlSocket::open().unwrap();
        let err = sock.request(oversized_bad_request()).unwrap_err();
        assert!(err.raw_os_error().is_some(), "read as {err:?}");
    }

    #[test]
    fn an_error_echoing_a_request_over_64_kib_is_read_whole() {
        let mut sock = GenlSocket::open().unwrap();
        sock.cap_acks(false).unwrap();
        let err = sock.request(oversized_bad_request()).unwrap_err();
        assert!(err.raw_os_error().is_some(), "read as {err:?}");
        // The socket is in step: the next request gets its own reply.
        assert!(sock.family_id("nlctrl").is_ok());
    }

    /// A message of `kind` whose payload is the status `code`.
    fn status_message(kind: u16, code: i32) -> Vec<u8> {
        let mut msg = vec![0u8; NLMSG_HDRLEN];
        msg[0..4].copy_from_slice(&20u32.to_ne_bytes());
        msg[4..6].copy_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&code.to_ne_bytes());
        msg
    }

    #[test]
    fn a_dump_ended_by_an_error_reads_as_that_error() {
        let failed = status_message(libc::NLMSG_DONE as u16, -libc::ENODEV);
        let msgs = messages(&failed).unwrap();
        let err = msgs[0].done().unwrap().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENODEV));
        assert_eq!(msgs[0].ack().map(|r| r.is_ok()), None);
        let ended = status_message(libc::NLMSG_DONE as u16, 0);
        assert!(messages(&ended).unwrap()[0].done().unwrap().is_ok());
        let bare = Request::rtnetlink(libc::NLMSG_DONE as u16, 0, &[])
            .finish(1)
            .unwrap();
        assert!(messages(&bare).unwrap()[0].done().unwrap().is_ok());
        let error = status_message(libc::NLMSG_ERROR as u16, -libc::EPERM);
        assert_eq!(messages(&error).unwrap()[0].done().map(|r| r.is_ok()), None);
    }

    #[test]
    fn queue_reply_parses_holders() {
        let mut req = Request::new(30, 0, NETDEV_CMD_QUEUE_GET, 1);
        req.u32(queue_attr::ID, 3)
            .u32(queue_attr::IFINDEX, 7)
            .u32(queue_attr::TYPE, NETDEV_QUEUE_TYPE_RX)
            .nested(queue_attr::XSK, |_| {});
        let req = req.finish(1).unwrap();
        let payload = messages(&req).unwrap()[0].payload;
        let q = parse_queue(payload, 7).unwrap();
        assert_eq!(
            (q.id, q.rx, q.xsk, q.io_uring, q.napi_id),
            (3, true, true, false, None)
        );
        assert_eq!(parse_queue(payload, 8), None, "another device's queue");
    }

    #[test]
    fn loopback_queues_are_listed_or_refused_with_an_errno() {
        let mut sock = GenlSocket::open().unwrap();
        match sock.netdev_queues(1) {
            Ok(queues) => assert!(queues.iter().all(|q| !q.xsk && !q.io_uring), "{queues:?}"),
            Err(e) => assert!(e.raw_os_error().is_some(), "{e}"),
        }
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
