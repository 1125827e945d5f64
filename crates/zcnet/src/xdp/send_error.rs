//! Why [`UdpEndpoint`](super::UdpEndpoint) refused or failed to send a datagram.

use std::fmt;
use std::io;
use std::net::IpAddr;

use super::error::Error;
use crate::IfIndex;
use crate::sys::errno::error_name;

/// A datagram the endpoint cannot send, or a failure on the way.
#[derive(Debug)]
#[non_exhaustive]
pub enum SendError {
    /// The payload is longer than one datagram on the interface carries unfragmented (MTU less the
    /// IP and UDP headers, and at most what a UMEM frame holds).
    TooLong {
        /// The payload length asked for.
        len: usize,
        /// The longest payload the endpoint sends to that family.
        max: usize,
    },
    /// The destination's address family differs from the endpoint's bound address.
    FamilyMismatch {
        /// The endpoint's address.
        local: IpAddr,
        /// The destination.
        to: IpAddr,
    },
    /// A source address was asked for ([`SendBatch::push_from`](super::SendBatch::push_from)) that
    /// the endpoint cannot send from: it is bound to another address.
    SourceMismatch {
        /// The endpoint's address.
        local: IpAddr,
        /// The source asked for.
        from: IpAddr,
    },
    /// The kernel has no usable route to the destination (`RTM_GETROUTE` failed with `source`:
    /// `ENETUNREACH` for no route, `EHOSTUNREACH` for an unreachable or prohibited one).
    NoRoute {
        /// The destination.
        to: IpAddr,
        /// The kernel's error.
        source: io::Error,
    },
    /// The kernel routes the destination through another interface (interface index `oif`; a
    /// local address goes through `lo`), which the endpoint's sockets cannot reach.
    OtherInterface {
        /// The destination.
        to: IpAddr,
        /// The interface the route uses.
        oif: IfIndex,
    },
    /// The route is of a kind no datagram is sent on (`rtm_type`: not `RTN_UNICAST`).
    NotUnicast {
        /// The destination.
        to: IpAddr,
        /// The route's `rtm_type`.
        kind: u8,
    },
    /// The next hop has no usable neighbour entry (no link-layer address). The endpoint asked the
    /// kernel to resolve it (when it could): retry the send in a moment.
    Unresolved {
        /// The next hop (the destination, or the route's gateway).
        next_hop: IpAddr,
        /// The entry's `NUD_*` state, `None` when there was no entry.
        state: Option<u16>,
        /// Whether the kernel was asked to resolve it (`RTM_NEWNEIGH` with `NTF_USE`; refused
        /// without CAP_NET_ADMIN): its ARP request or neighbour solicitation is then on its way.
        resolving: bool,
    },
    /// Every UMEM frame is in use (in flight or held by received batches): reclaim, or drop
    /// batches, and retry.
    NoFrame,
    /// [`AsyncUdpEndpoint::send`](crate::aio::AsyncUdpEndpoint::send) waited `waited` for a free
    /// frame and the kernel completed none of the frames in flight: the queue is not transmitting.
    NoFrameWithin {
        /// The wait ([`AsyncUdpEndpoint::set_send_timeout`](crate::aio::AsyncUdpEndpoint::set_send_timeout)).
        waited: std::time::Duration,
    },
    /// The tx ring stayed full while the kernel was woken and completions reclaimed, again and
    /// again: `sent` datagrams of the batch went, `dropped` were dropped (their frames freed).
    TxRingFull {
        /// Datagrams of the batch handed to the kernel.
        sent: usize,
        /// Datagrams dropped.
        dropped: usize,
    },
    /// A lookup or ring operation failed.
    Xdp(Error),
}

impl SendError {
    /// The errno of the kernel's error, for [`SendError::NoRoute`] and [`SendError::Xdp`] (the
    /// other variants are the endpoint's own refusals, their messages naming the errno they stand
    /// for).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            SendError::NoRoute { source, .. } => source.raw_os_error(),
            SendError::Xdp(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// The kind of `io::Error` this converts to: `WouldBlock` for [`SendError::NoFrame`] (retry
    /// once frames are reclaimed), `HostUnreachable` for a destination without a usable route or
    /// neighbour, `InvalidInput` for a datagram that cannot be sent as asked.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            SendError::TooLong { .. } | SendError::FamilyMismatch { .. } => {
                io::ErrorKind::InvalidInput
            }
            SendError::SourceMismatch { .. } => io::ErrorKind::AddrNotAvailable,
            SendError::NoRoute { source, .. } => source.kind(),
            SendError::OtherInterface { .. } => io::ErrorKind::Unsupported,
            SendError::NotUnicast { .. } | SendError::Unresolved { .. } => {
                io::ErrorKind::HostUnreachable
            }
            SendError::NoFrame => io::ErrorKind::WouldBlock,
            SendError::NoFrameWithin { .. } => io::ErrorKind::TimedOut,
            SendError::TxRingFull { .. } => io::ErrorKind::ResourceBusy,
            SendError::Xdp(e) => e.kind(),
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::TooLong { len, max } => write!(
                f,
                "payload of {len} bytes: at most {max} fit one datagram (EMSGSIZE; the interface \
                 MTU bounds it and the endpoint never fragments)"
            ),
            SendError::FamilyMismatch { local, to } => write!(
                f,
                "cannot send to {to} from {local} (EAFNOSUPPORT; bind the endpoint to an \
                 unspecified address to send to both families)"
            ),
            SendError::SourceMismatch { local, from } => write!(
                f,
                "cannot send from {from}: the endpoint is bound to {local} (EADDRNOTAVAIL; bind it \
                 to an unspecified address to choose the source per datagram)"
            ),
            SendError::NoRoute { to, source } => write!(
                f,
                "no route to {to}: {} (add a route through the endpoint's interface)",
                error_name(source)
            ),
            SendError::OtherInterface { to, oif } => write!(
                f,
                "the route to {to} goes through interface index {oif}, not the endpoint's \
                 (send it with a kernel socket)"
            ),
            SendError::NotUnicast { to, kind } => {
                write!(f, "the route to {to} is of type {kind}, not unicast")
            }
            SendError::Unresolved {
                next_hop,
                state,
                resolving,
            } => {
                write!(f, "no link-layer address for next hop {next_hop} (")?;
                match state {
                    Some(state) => write!(f, "neighbour state {state:#x}")?,
                    None => f.write_str("no neighbour entry")?,
                }
                f.write_str(if *resolving {
                    "; EHOSTUNREACH: the kernel is resolving it, retry in a moment)"
                } else {
                    "; EHOSTUNREACH: have the kernel resolve it, e.g. by a ping or any kernel socket \
                     send to it, or add a neighbour entry)"
                })
            }
            SendError::NoFrame => f.write_str(
                "every UMEM frame is in use (ENOBUFS; reclaim sent frames or drop received \
                 batches, then retry)",
            ),
            SendError::NoFrameWithin { waited } => write!(
                f,
                "no UMEM frame came free within {waited:?}: the kernel completed none of the \
                 frames in flight (ETIMEDOUT; is the interface up and its queue transmitting?)"
            ),
            SendError::TxRingFull { sent, dropped } => write!(
                f,
                "the tx ring stayed full: {sent} datagrams sent, {dropped} dropped (EAGAIN; send \
                 smaller batches, or retry)"
            ),
            SendError::Xdp(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::NoRoute { source, .. } => Some(source),
            // Transparent: the message is the wrapped error's, and so is its cause.
            SendError::Xdp(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

crate::error::into_io_error!(SendError);

impl From<Error> for SendError {
    fn from(e: Error) -> SendError {
        SendError::Xdp(e)
    }
}
