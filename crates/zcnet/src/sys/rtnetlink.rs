//! Route netlink (`NETLINK_ROUTE`): one route, one neighbour and one link looked up by request, over
//! the request/reply path of [`super::netlink`]. Messages are plain bytes in native endianness: the
//! `nlmsghdr`, the family header (`struct rtmsg`, `struct ndmsg`, `struct ifinfomsg`, laid out below
//! from include/uapi/linux/rtnetlink.h, neighbour.h and if_link.h), then attributes.

use std::io;
use std::net::IpAddr;

use super::netlink::{Attributes, GenlSocket, Message, Request};

/// `struct rtmsg` length: family, dst_len, src_len, tos, table, protocol, scope, type (u8 each),
/// flags (u32).
const RTMSG_LEN: usize = 12;
/// `struct ndmsg` length: family (u8), 3 pad bytes, ifindex (s32), state (u16), flags, type (u8).
const NDMSG_LEN: usize = 12;
/// `struct ifinfomsg` length: family (u8), pad (u8), type (u16), index (s32), flags, change (u32).
const IFINFOMSG_LEN: usize = 16;
/// `IFLA_ADDRESS` (include/uapi/linux/if_link.h): the link-layer address.
const IFLA_ADDRESS: u16 = 1;
/// `IFLA_MTU` (u32).
const IFLA_MTU: u16 = 4;
/// `RTA_PREFSRC`: the source address the kernel would choose.
const RTA_PREFSRC: u16 = 7;

/// The kernel's answer to `RTM_GETROUTE` for one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// `rtm_type` (`RTN_UNICAST`, `RTN_LOCAL`, …).
    pub kind: u8,
    /// Outgoing interface (`RTA_OIF`), 0 when absent.
    pub oif: u32,
    /// The gateway (`RTA_GATEWAY`), `None` for an on-link destination.
    pub gateway: Option<IpAddr>,
    /// The preferred source address (`RTA_PREFSRC`).
    pub prefsrc: Option<IpAddr>,
}

/// A neighbour table entry: its state (`NUD_*`) and link-layer address, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    /// `ndm_state`.
    pub state: u16,
    /// `NDA_LLADDR` when it is 6 bytes (Ethernet).
    pub mac: Option<[u8; 6]>,
}

/// An interface's MTU and Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// `IFLA_MTU`.
    pub mtu: u32,
    /// `IFLA_ADDRESS` when it is 6 bytes.
    pub mac: Option<[u8; 6]>,
    /// The id of the XDP program attached to the device (`IFLA_XDP_PROG_ID` in `IFLA_XDP`), if
    /// one is.
    pub xdp_prog: Option<u32>,
}

/// `IFLA_XDP` (include/uapi/linux/if_link.h): a nest describing the attached XDP program.
const IFLA_XDP: u16 = 43;
/// `IFLA_XDP_PROG_ID` inside `IFLA_XDP` (u32).
const IFLA_XDP_PROG_ID: u16 = 4;

fn family(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn address(payload: &[u8]) -> Option<IpAddr> {
    match payload.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(payload).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(payload).ok()?)),
        _ => None,
    }
}

fn mac(payload: &[u8]) -> Option<[u8; 6]> {
    <[u8; 6]>::try_from(payload).ok()
}

fn u32_of(payload: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(payload.try_into().ok()?))
}

fn malformed(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The attributes after a family header of `header_len` bytes in a reply payload.
fn reply_attributes(payload: &[u8], header_len: usize) -> io::Result<Attributes<'_>> {
    payload
        .get(header_len..)
        .map(Attributes::new)
        .ok_or_else(|| malformed("rtnetlink reply shorter than its family header"))
}

/// Asks the kernel how it would route a datagram to `dst` (`RTM_GETROUTE`, no dump): the errno of a
/// failed lookup is the kernel's (`ENETUNREACH` with no route, `EHOSTUNREACH` for an unreachable one).
pub fn route_get(sock: &mut GenlSocket, dst: IpAddr) -> io::Result<Route> {
    let mut rtmsg = [0u8; RTMSG_LEN];
    rtmsg[0] = family(dst);
    rtmsg[1] = if dst.is_ipv4() { 32 } else { 128 };
    let mut req = Request::rtnetlink(libc::RTM_GETROUTE, 0, &rtmsg);
    req.attr(libc::RTA_DST, &octets(dst));
    let replies = sock.request(req)?;
    let payload = &replies
        .first()
        .ok_or_else(|| malformed("no RTM_NEWROUTE reply"))?
        .payload;
    let mut route = Route {
        kind: *payload.get(7).ok_or_else(|| malformed("short rtmsg"))?,
        oif: 0,
        gateway: None,
        prefsrc: None,
    };
    for attr in reply_attributes(payload, RTMSG_LEN)? {
        match attr? {
            (libc::RTA_OIF, p) => route.oif = u32_of(p).unwrap_or(0),
            (libc::RTA_GATEWAY, p) => route.gateway = address(p),
            (RTA_PREFSRC, p) => route.prefsrc = address(p),
            _ => {}
        }
    }
    Ok(route)
}

/// The neighbour entry for `ip` on interface `ifindex` (`RTM_GETNEIGH` for one entry, no dump);
/// `None` when there is none (`ENOENT`).
pub fn neigh_get(sock: &mut GenlSocket, ifindex: u32, ip: IpAddr) -> io::Result<Option<Neighbour>> {
    let mut ndmsg = [0u8; NDMSG_LEN];
    ndmsg[0] = family(ip);
    ndmsg[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    let mut req = Request::rtnetlink(libc::RTM_GETNEIGH, 0, &ndmsg);
    req.attr(libc::NDA_DST, &octets(ip));
    let replies = match sock.request(req) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        other => other?,
    };
    let Some(reply) = replies.first() else {
        return Ok(None);
    };
    let state = reply
        .payload
        .get(8..10)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .ok_or_else(|| malformed("short ndmsg"))?;
    let mut neighbour = Neighbour { state, mac: None };
    for attr in reply_attributes(&reply.payload, NDMSG_LEN)? {
        if let (libc::NDA_LLADDR, p) = attr? {
            neighbour.mac = mac(p);
        }
    }
    Ok(Some(neighbour))
}

/// Asks the kernel to resolve `ip` on interface `ifindex` as the stack does before it sends to a
/// neighbour without an address: `RTM_NEWNEIGH` with `NTF_USE` (`NLM_F_CREATE`, state `NUD_NONE`)
/// makes `neigh_add` create the entry if need be and call `neigh_event_send`, which sends an ARP
/// request or neighbour solicitation unless one is under way, and changes nothing else of an
/// existing entry. Needs CAP_NET_ADMIN in the socket's network namespace (`EPERM` otherwise).
pub fn neigh_resolve(sock: &mut GenlSocket, ifindex: u32, ip: IpAddr) -> io::Result<()> {
    let mut ndmsg = [0u8; NDMSG_LEN];
    ndmsg[0] = family(ip);
    ndmsg[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    ndmsg[8..10].copy_from_slice(&libc::NUD_NONE.to_ne_bytes());
    ndmsg[10] = libc::NTF_USE;
    let flags = (libc::NLM_F_CREATE | libc::NLM_F_REPLACE) as u16;
    let mut req = Request::rtnetlink(libc::RTM_NEWNEIGH, flags, &ndmsg);
    req.attr(libc::NDA_DST, &octets(ip));
    sock.request(req).map(drop)
}

/// Interface `ifindex`'s MTU and address (`RTM_GETLINK` for one link).
pub fn link_get(sock: &mut GenlSocket, ifindex: u32) -> io::Result<Link> {
    let mut ifinfo = [0u8; IFINFOMSG_LEN];
    ifinfo[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    let replies = sock.request(Request::rtnetlink(libc::RTM_GETLINK, 0, &ifinfo))?;
    let payload = &replies
        .first()
        .ok_or_else(|| malformed("no RTM_NEWLINK reply"))?
        .payload;
    let mut link = Link {
        mtu: 0,
        mac: None,
        xdp_prog: None,
    };
    for attr in reply_attributes(payload, IFINFOMSG_LEN)? {
        match attr? {
            (IFLA_MTU, p) => link.mtu = u32_of(p).unwrap_or(0),
            (IFLA_ADDRESS, p) => link.mac = mac(p),
            (IFLA_XDP, nest) => {
                for inner in Attributes::new(nest) {
                    if let (IFLA_XDP_PROG_ID, p) = inner? {
                        link.xdp_prog = u32_of(p).filter(|id| *id != 0);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(link)
}

/// Whether `msg`, read from a route netlink socket in `RTMGRP_LINK`, announces a change of
/// interface `ifindex`'s link (`RTM_NEWLINK`, `RTM_DELLINK`: `ifi_index` in its `ifinfomsg`); a
/// link announcement too short to say counts.
pub fn announces_link(msg: &Message<'_>, ifindex: u32) -> bool {
    matches!(msg.kind, libc::RTM_NEWLINK | libc::RTM_DELLINK)
        && msg
            .payload
            .get(4..8)
            .is_none_or(|index| u32::from_ne_bytes(index.try_into().expect("4 bytes")) == ifindex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_headers_match_the_uapi_sizes() {
        assert_eq!(std::mem::size_of::<libc::ifinfomsg>(), IFINFOMSG_LEN);
        // struct rtmsg and struct ndmsg are not in libc: their sizes from rtnetlink.h / neighbour.h.
        assert_eq!(RTMSG_LEN, 8 + 4);
        assert_eq!(NDMSG_LEN, 4 + 4 + 2 + 1 + 1);
        assert_eq!(std::mem::offset_of!(libc::ifinfomsg, ifi_index), 4);
    }

    #[test]
    fn loopback_is_looked_up_in_this_namespace() {
        let mut sock = GenlSocket::open_route().unwrap();
        let lo = link_get(&mut sock, 1).unwrap();
        assert_eq!(lo.mac, Some([0; 6]));
        assert_eq!(lo.xdp_prog, None);
        assert!(lo.mtu >= 1280, "{lo:?}");
        let route = route_get(&mut sock, "127.0.0.1".parse().unwrap());
        // A namespace whose loopback is down has no route even to itself.
        match route {
            Ok(route) => {
                assert_eq!((route.kind, route.oif), (libc::RTN_LOCAL, 1), "{route:?}")
            }
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH), "{e}"),
        }
    }

    #[test]
    fn a_link_announcement_names_its_interface() {
        let mut ifinfo = [0u8; IFINFOMSG_LEN];
        ifinfo[4..8].copy_from_slice(&7u32.to_ne_bytes());
        let msg = |kind, payload| Message {
            kind,
            seq: 0,
            payload,
        };
        assert!(announces_link(&msg(libc::RTM_NEWLINK, &ifinfo), 7));
        assert!(announces_link(&msg(libc::RTM_DELLINK, &ifinfo), 7));
        assert!(!announces_link(&msg(libc::RTM_NEWLINK, &ifinfo), 8));
        assert!(!announces_link(&msg(libc::RTM_NEWNEIGH, &ifinfo), 7));
        assert!(announces_link(&msg(libc::RTM_NEWLINK, &ifinfo[..2]), 8));
    }
}
