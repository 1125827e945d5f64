//! Where a datagram sent from an AF_XDP endpoint goes: the next hop's Ethernet address and the source
//! address, from the kernel's route and neighbour tables over route netlink, cached briefly.
//!
//! # Kernel behaviour relied on
//! - `RTM_GETROUTE` for one destination answers as the stack would route a datagram to it: the
//!   outgoing interface (`RTA_OIF`), the gateway if any (`RTA_GATEWAY`), the preferred source
//!   (`RTA_PREFSRC`), or `ENETUNREACH`/`EHOSTUNREACH`.
//! - `RTM_GETNEIGH` without `NLM_F_DUMP`, for one address on one interface, answers with its entry or
//!   `ENOENT`. An entry in `REACHABLE`, `STALE`, `DELAY`, `PROBE`, `PERMANENT` or `NOARP` state has
//!   a usable link-layer address (`STALE` is what the kernel uses too, confirming it later).
//! - A route netlink socket in the `RTMGRP_LINK`, `RTMGRP_NEIGH`, `RTMGRP_IPV4_ROUTE`,
//!   `RTMGRP_IPV6_ROUTE`, `RTMGRP_IPV4_IFADDR` and `RTMGRP_IPV6_IFADDR` groups gets a message for
//!   every change of a link (its MTU, its address), neighbour, route or address, queued before the
//!   call that made the change returns. Any message (or `ENOBUFS`: some were dropped) empties the
//!   cache, read once per send batch, and one about this interface's link (`RTM_NEWLINK` or
//!   `RTM_DELLINK`, `ifi_index` in its `ifinfomsg`; or lost ones) has the interface's MTU and
//!   address read again; the TTL bounds how long an answer is kept all the same.
//! - A peer that sent to this host has an entry here already: the stack records the sender of an ARP
//!   request or neighbour solicitation for one of its addresses. AF_XDP sends never confirm or
//!   refresh entries, so an entry the stack does not use ages to `STALE` (still usable) and may be
//!   garbage-collected; a lookup then fails with [`SendError::Unresolved`] until the stack resolves
//!   it again.
//! - `RTM_NEWNEIGH` with `NTF_USE` has the kernel resolve an address as the stack does before it
//!   sends (see [`rtnetlink::neigh_resolve`]): a lookup that finds no usable entry asks for it, so a
//!   send refused as [`SendError::Unresolved`] finds the address once the peer answered. The
//!   endpoint builds no ARP or neighbour solicitation frames itself.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::send_error::SendError;
use crate::sys::netlink::{self, GenlSocket};
use crate::sys::rtnetlink::{self, Link};

/// How long a [`UdpEndpoint`](super::UdpEndpoint) uses a looked-up next hop before it looks it up
/// again, even when no change was announced: a changed route or neighbour entry (the peer's MAC
/// address changed) is followed from the next send batch on, when the kernel announces it, and
/// within this time in any case.
pub(crate) const NEXT_HOP_TTL: Duration = Duration::from_secs(1);

/// `NUD_*` states whose link-layer address the kernel itself would send to.
const USABLE: u16 = libc::NUD_REACHABLE
    | libc::NUD_STALE
    | libc::NUD_DELAY
    | libc::NUD_PROBE
    | libc::NUD_PERMANENT
    | libc::NUD_NOARP;

/// The Ethernet destination and IP source of datagrams to one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hop {
    pub(crate) mac: [u8; 6],
    pub(crate) src: Option<IpAddr>,
}

/// Route and neighbour lookups for one interface, with a cache of recent answers.
#[derive(Debug)]
pub(crate) struct Routes {
    socket: GenlSocket,
    /// Announcements of neighbour, route and address changes.
    changes: GenlSocket,
    /// Receive buffer for `changes`.
    buf: Vec<u8>,
    ifindex: u32,
    cache: HashMap<IpAddr, (Hop, Instant)>,
}

impl Routes {
    /// Opens a route netlink socket for lookups on interface `ifindex` (in the calling thread's
    /// network namespace, which the socket keeps).
    pub(crate) fn open(ifindex: u32) -> Result<Routes> {
        let socket = GenlSocket::open_route()
            .map_err(|e| Error::new("open a route netlink socket", e, ""))?;
        let groups = libc::RTMGRP_LINK
            | libc::RTMGRP_NEIGH
            | libc::RTMGRP_IPV4_ROUTE
            | libc::RTMGRP_IPV6_ROUTE
            | libc::RTMGRP_IPV4_IFADDR
            | libc::RTMGRP_IPV6_IFADDR;
        let changes = GenlSocket::open_route_listener(groups as u32).map_err(|e| {
            Error::new(
                "open a route netlink socket for change announcements",
                e,
                "",
            )
        })?;
        Ok(Routes {
            socket,
            changes,
            buf: vec![0; 16 * 1024],
            ifindex,
            cache: HashMap::new(),
        })
    }

    /// The interface's MTU and Ethernet address.
    pub(crate) fn link(&mut self, iface: &str) -> Result<Link> {
        rtnetlink::link_get(&mut self.socket, self.ifindex).map_err(|e| {
            Error::from_errno(format!("read the MTU and address of {iface}"), e, "", "")
        })
    }

    /// Reads the change announcements queued so far; any (or lost ones) empties the cache. One about
    /// this interface's link (or lost ones) also has its MTU and address read again, returned
    /// (`None` when no link changed): neighbour and route announcements, far more frequent, cost
    /// no lookup here.
    pub(crate) fn refresh(&mut self) -> Result<Option<Link>> {
        let (mut changed, mut link_changed) = (false, false);
        loop {
            match self.changes.recv_nonblocking(&mut self.buf) {
                Ok(Some(n)) => {
                    changed = true;
                    link_changed |= n > self.buf.len() || self.announces_link(n);
                }
                Ok(None) => break,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    changed = true;
                    link_changed = true;
                }
                Err(e) => {
                    return Err(Error::new("read route netlink announcements", e, ""));
                }
            }
        }
        if changed {
            self.cache.clear();
        }
        if !link_changed {
            return Ok(None);
        }
        let link = rtnetlink::link_get(&mut self.socket, self.ifindex).map_err(|e| {
            let what = format!("read the MTU and address of interface {}", self.ifindex);
            Error::from_errno(what, e, "", "")
        })?;
        Ok(Some(link))
    }

    /// Whether the `n` bytes of announcements in the buffer include one about this interface's
    /// link; unreadable ones count as such.
    fn announces_link(&self, n: usize) -> bool {
        let Ok(messages) = netlink::messages(&self.buf[..n]) else {
            return true;
        };
        messages
            .iter()
            .any(|m| rtnetlink::announces_link(m, self.ifindex))
    }

    /// The next hop for `to`: cached for [`NEXT_HOP_TTL`], else looked up (failures are not cached).
    pub(crate) fn hop(&mut self, to: IpAddr, now: Instant) -> std::result::Result<Hop, SendError> {
        let fresh = |at: Instant| now.duration_since(at) < NEXT_HOP_TTL;
        if let Some(&(hop, at)) = self.cache.get(&to)
            && fresh(at)
        {
            return Ok(hop);
        }
        let hop = self.look_up(to)?;
        if self.cache.len() > 4096 {
            self.cache.retain(|_, (_, at)| fresh(*at));
        }
        self.cache.insert(to, (hop, now));
        Ok(hop)
    }

    fn look_up(&mut self, to: IpAddr) -> std::result::Result<Hop, SendError> {
        let route =
            rtnetlink::route_get(&mut self.socket, to).map_err(|source| match source.kind() {
                std::io::ErrorKind::InvalidData => {
                    SendError::Xdp(Error::new(format!("look up the route to {to}"), source, ""))
                }
                _ => SendError::NoRoute { to, source },
            })?;
        if route.oif != self.ifindex {
            return Err(SendError::OtherInterface {
                to,
                oif: crate::IfIndex::new(route.oif),
            });
        }
        if route.kind != libc::RTN_UNICAST {
            return Err(SendError::NotUnicast {
                to,
                kind: route.kind,
            });
        }
        let next_hop = route.gateway.unwrap_or(to);
        let neighbour = rtnetlink::neigh_get(&mut self.socket, self.ifindex, next_hop)
            .map_err(|e| Error::new(format!("look up the neighbour entry of {next_hop}"), e, ""))?;
        match neighbour {
            Some(n) if n.state & USABLE != 0 && n.mac.is_some() => Ok(Hop {
                mac: n.mac.expect("checked"),
                src: route.prefsrc,
            }),
            other => {
                // As the stack would before its first datagram: the address may be there for
                // the next send. Without CAP_NET_ADMIN (EPERM) nothing is asked.
                let resolving =
                    rtnetlink::neigh_resolve(&mut self.socket, self.ifindex, next_hop).is_ok();
                Err(SendError::Unresolved {
                    next_hop,
                    state: other.map(|n| n.state),
                    resolving,
                })
            }
        }
    }
}
