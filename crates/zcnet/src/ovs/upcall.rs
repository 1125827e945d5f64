//! Upcalls: packets the datapath queues to user space over generic netlink, received into one buffer
//! and handed out as typed values that borrow the packet bytes from it (nothing is copied in user
//! space).
//!
//! Kernel behaviour relied on (net/openvswitch/datapath.c, `queue_userspace_packet`): an upcall is one
//! `ovs_packet` message per datagram, unicast to the port id registered for the vport (or the CPU);
//! `OVS_PACKET_ATTR_PACKET` comes last. With `OVS_DP_F_UNALIGNED` the kernel attaches the packet's pages
//! with `skb_zerocopy()` and neither pads that attribute nor the message length to 4 bytes; without it,
//! it copies the packet into the message and pads both. When the socket's queue is full the upcall is
//! dropped and counted in the datapath's `n_lost`, and the socket's next receive fails with `ENOBUFS`.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::IfIndex;
use crate::sys::netlink::{Attributes, GENL_HDRLEN, GenlSocket, messages};
use crate::sys::ovs::{OvsHeader, packet_attr, packet_cmd};

use super::error::{Call, OvsError};
use super::key::FlowKey;

/// Receive buffer size: the largest upcall is a 64 KiB GSO packet plus its key and headers.
const RECV_BUFFER: usize = 128 * 1024;

/// Why an upcall message was rejected. A hostile or truncated message is an error, never a panic.
#[derive(Debug)]
#[non_exhaustive]
pub enum ParseError {
    /// The netlink framing is broken (length fields).
    Framing(io::Error),
    /// The datagram held no message, or more than one.
    MessageCount(usize),
    /// The message is not of the `ovs_packet` family.
    Family(u16),
    /// The message is too short for its `genlmsghdr` and `ovs_header`.
    Header,
    /// The genl command is neither MISS nor ACTION.
    Command(u8),
    /// An attribute's length field is wrong (shorter than its header, beyond the message) or bytes
    /// trail the last attribute.
    Attribute(io::Error),
    /// A flow key attribute is malformed.
    Key(io::Error),
    /// A flow key attribute zcnet reads has the wrong size.
    KeyAttribute(u16),
    /// A required attribute is missing.
    Missing(&'static str),
    /// The datagram did not fit the receive buffer (its full length).
    Truncated(usize),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Framing(e) => write!(f, "malformed netlink framing: {e}"),
            ParseError::MessageCount(n) => write!(f, "{n} netlink messages in one upcall datagram"),
            ParseError::Family(k) => write!(f, "message of family {k}, not ovs_packet"),
            ParseError::Header => f.write_str("message shorter than genlmsghdr + ovs_header"),
            ParseError::Command(c) => write!(f, "genl command {c} is not an upcall"),
            ParseError::Attribute(e) => write!(f, "malformed attribute: {e}"),
            ParseError::Key(e) => write!(f, "malformed flow key: {e}"),
            ParseError::KeyAttribute(t) => write!(f, "flow key attribute {t} has the wrong size"),
            ParseError::Missing(what) => write!(f, "upcall without {what}"),
            ParseError::Truncated(n) => write!(f, "upcall of {n} bytes truncated by the buffer"),
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    /// The errno of a framing, attribute or key error, when it carries one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            ParseError::Framing(e) | ParseError::Attribute(e) | ParseError::Key(e) => {
                e.raw_os_error()
            }
            _ => None,
        }
    }

    /// `InvalidData`, the kind of `io::Error` this converts to: the message is malformed.
    pub fn kind(&self) -> io::ErrorKind {
        io::ErrorKind::InvalidData
    }
}

crate::error::into_io_error!(ParseError);

/// Why the datapath sent the packet up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpcallKind {
    /// `OVS_PACKET_CMD_MISS`: no flow matched.
    Miss,
    /// `OVS_PACKET_CMD_ACTION`: a flow's userspace action.
    Action,
}

/// One upcall; its key and packet borrow the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upcall<'a> {
    /// Miss or action.
    pub kind: UpcallKind,
    /// The datapath's ifindex (`ovs_header`).
    pub dp_ifindex: IfIndex,
    /// The flow key the datapath extracted.
    pub key: FlowKey<'a>,
    /// The packet, exactly as many bytes as the attribute's length says (no padding).
    pub packet: &'a [u8],
    /// `OVS_PACKET_ATTR_USERDATA` of an action upcall.
    pub userdata: Option<&'a [u8]>,
    /// `OVS_PACKET_ATTR_LEN`: the packet's length before the datapath truncated it, if it did.
    pub original_len: Option<u32>,
    /// Length of the whole netlink message (`nlmsg_len`).
    pub message_len: usize,
}

/// Parses one upcall datagram of the `ovs_packet` family `packet_family`. Accepts an unpadded last
/// attribute and message (`OVS_DP_F_UNALIGNED`) and the padded form; rejects everything malformed.
pub fn parse_upcall(datagram: &[u8], packet_family: u16) -> Result<Upcall<'_>, ParseError> {
    let msgs = messages(datagram).map_err(ParseError::Framing)?;
    let [msg] = msgs[..] else {
        return Err(ParseError::MessageCount(msgs.len()));
    };
    if msg.kind != packet_family {
        return Err(ParseError::Family(msg.kind));
    }
    let body = msg.payload.get(GENL_HDRLEN..).ok_or(ParseError::Header)?;
    let header = OvsHeader::read(body).ok_or(ParseError::Header)?;
    let kind = match msg.payload[0] {
        packet_cmd::MISS => UpcallKind::Miss,
        packet_cmd::ACTION => UpcallKind::Action,
        other => return Err(ParseError::Command(other)),
    };
    let (mut key, mut packet, mut userdata, mut original_len) = (None, None, None, None);
    for attr in Attributes::new(&body[4..]) {
        let (ty, p) = attr.map_err(ParseError::Attribute)?;
        match ty {
            packet_attr::KEY => key = Some(FlowKey::parse(p)?),
            packet_attr::PACKET => packet = Some(p),
            packet_attr::USERDATA => userdata = Some(p),
            packet_attr::LEN => {
                original_len = Some(u32::from_ne_bytes(p.try_into().map_err(|_| {
                    ParseError::Attribute(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "OVS_PACKET_ATTR_LEN is not a u32",
                    ))
                })?))
            }
            _ => {}
        }
    }
    Ok(Upcall {
        kind,
        dp_ifindex: IfIndex::from_ovs(header.dp_ifindex),
        key: key.ok_or(ParseError::Missing("OVS_PACKET_ATTR_KEY"))?,
        packet: packet.ok_or(ParseError::Missing("OVS_PACKET_ATTR_PACKET"))?,
        userdata,
        original_len,
        message_len: msg.payload.len() + crate::sys::netlink::NLMSG_HDRLEN,
    })
}

/// What an [`UpcallSocket`] has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpcallCounters {
    /// Upcalls received and parsed.
    pub received: u64,
    /// Packet bytes delivered in them.
    pub packet_bytes: u64,
    /// Netlink message bytes delivered (headers, key and padding included).
    pub message_bytes: u64,
    /// Times the receive queue overflowed (`ENOBUFS`): upcalls were lost in between.
    pub overflows: u64,
    /// Datagrams rejected as malformed or truncated.
    pub rejected: u64,
}

add_counters! {
    /// The counts of several sockets (one per handler thread) added up.
    UpcallCounters {
        received,
        packet_bytes,
        message_bytes,
        overflows,
        rejected,
    }
}

/// A generic netlink socket that upcalls are addressed to (its port id is registered with the
/// datapath and its vports), with the buffer every received upcall borrows from.
#[derive(Debug)]
pub struct UpcallSocket {
    sock: GenlSocket,
    packet_family: u16,
    buf: Vec<u8>,
    counters: UpcallCounters,
}

/// What one receive produced.
#[derive(Debug)]
#[non_exhaustive]
pub enum Received<'a> {
    /// An upcall.
    Upcall(Upcall<'a>),
    /// The queue overflowed since the last receive: the kernel dropped upcalls (counted in
    /// [`UpcallCounters::overflows`] and in the datapath's `lost`).
    Overflow,
    /// A datagram that is not a well-formed upcall (counted in [`UpcallCounters::rejected`]).
    Rejected(ParseError),
}

impl UpcallSocket {
    /// Opens a socket for upcalls of the `ovs_packet` family (`ENOENT` when the module is absent).
    ///
    /// # Errors
    ///
    /// [`OvsError`]: no generic netlink socket, or no `ovs_packet` family (`ENOENT`: load
    /// `openvswitch`).
    pub fn open() -> Result<UpcallSocket, OvsError> {
        let mut sock = GenlSocket::open().call("open a generic netlink socket")?;
        let packet_family = sock
            .family_id(crate::sys::ovs::PACKET_FAMILY)
            .call("resolve ovs_packet")?;
        Ok(UpcallSocket {
            sock,
            packet_family,
            buf: vec![0; RECV_BUFFER],
            counters: UpcallCounters::default(),
        })
    }

    /// The port id the kernel sends this socket's upcalls to.
    pub fn port_id(&self) -> u32 {
        self.sock.port_id()
    }

    /// Sets the receive queue size (bytes); returns what the kernel granted. A small queue makes the
    /// datapath lose upcalls sooner when they are not read.
    ///
    /// # Errors
    ///
    /// `setsockopt SO_RCVBUF` fails.
    pub fn set_queue_bytes(&self, bytes: usize) -> Result<usize, OvsError> {
        self.sock.set_receive_buffer(bytes).call("SO_RCVBUF")
    }

    /// Waits up to `timeout` for something to receive; false on timeout.
    ///
    /// # Errors
    ///
    /// The `poll` fails (`EINTR` when a signal interrupts it).
    pub fn wait(&self, timeout: Duration) -> Result<bool, OvsError> {
        let ms = crate::sys::socket::poll_timeout(Some(timeout));
        crate::sys::socket::poll(self.sock.as_fd(), libc::POLLIN, ms)
            .map(|revents| revents != 0)
            .call("poll the upcall socket")
    }

    /// Receives one datagram without blocking (`Ok(None)` when none is queued).
    ///
    /// # Errors
    ///
    /// [`OvsError`] when `recv` fails; an overflow and a malformed datagram are not errors
    /// ([`Received::Overflow`], [`Received::Rejected`]).
    pub fn recv(&mut self) -> Result<Option<Received<'_>>, OvsError> {
        let n = match self.sock.recv_nonblocking(&mut self.buf) {
            Ok(None) => return Ok(None),
            Ok(Some(n)) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.counters.overflows += 1;
                return Ok(Some(Received::Overflow));
            }
            Err(e) => return Err(OvsError::new("recv an upcall", e)),
        };
        let parsed = if n > self.buf.len() {
            Err(ParseError::Truncated(n))
        } else {
            parse_upcall(&self.buf[..n], self.packet_family)
        };
        Ok(Some(match parsed {
            Ok(up) => {
                self.counters.received += 1;
                self.counters.packet_bytes += up.packet.len() as u64;
                self.counters.message_bytes += up.message_len as u64;
                Received::Upcall(up)
            }
            Err(e) => {
                self.counters.rejected += 1;
                Received::Rejected(e)
            }
        }))
    }

    /// What this socket has received so far.
    pub fn counters(&self) -> UpcallCounters {
        self.counters
    }
}

#[cfg(test)]
#[path = "upcall_tests.rs"]
mod tests;
