//! A flow key as the datapath reports it in an upcall (`OVS_PACKET_ATTR_KEY`): the raw nested
//! attributes, which can be handed back unchanged as an exact-match flow key, and the fields a switch
//! needs, parsed.

use crate::sys::netlink::Attributes;
use crate::sys::ovs::{OvsKeyEthernet, OvsKeyIpv4, OvsKeyPorts, key_attr};

use super::upcall::ParseError;

/// A parsed flow key that borrows its bytes from the message it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey<'a> {
    raw: &'a [u8],
    /// `OVS_KEY_ATTR_IN_PORT`: the datapath port the packet came in on.
    pub in_port: Option<u32>,
    /// `OVS_KEY_ATTR_ETHERNET`: source and destination MAC.
    pub ethernet: Option<OvsKeyEthernet>,
    /// `OVS_KEY_ATTR_ETHERTYPE` (host byte order).
    pub ethertype: Option<u16>,
    /// `OVS_KEY_ATTR_IPV4`.
    pub ipv4: Option<OvsKeyIpv4>,
    /// `OVS_KEY_ATTR_UDP` ports.
    pub udp: Option<Ports>,
    /// `OVS_KEY_ATTR_TCP` ports.
    pub tcp: Option<Ports>,
}

/// The source and destination ports of a flow key's transport (host byte order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ports {
    /// Source port.
    pub src: u16,
    /// Destination port.
    pub dst: u16,
}

impl<'a> FlowKey<'a> {
    /// Parses the nested attributes of a key. Every attribute must be well formed; the ones zcnet
    /// reads must have their struct's exact size.
    pub fn parse(raw: &'a [u8]) -> Result<FlowKey<'a>, ParseError> {
        let mut key = FlowKey {
            raw,
            in_port: None,
            ethernet: None,
            ethertype: None,
            ipv4: None,
            udp: None,
            tcp: None,
        };
        for attr in Attributes::new(raw) {
            let (ty, p) = attr.map_err(ParseError::Key)?;
            let bad = || ParseError::KeyAttribute(ty);
            let ports = |p: &[u8]| {
                OvsKeyPorts::read(p)
                    .map(|k| Ports {
                        src: u16::from_be_bytes(k.src),
                        dst: u16::from_be_bytes(k.dst),
                    })
                    .ok_or_else(bad)
            };
            match ty {
                key_attr::IN_PORT => {
                    key.in_port = Some(u32::from_ne_bytes(p.try_into().map_err(|_| bad())?))
                }
                key_attr::ETHERNET => key.ethernet = Some(OvsKeyEthernet::read(p).ok_or_else(bad)?),
                key_attr::ETHERTYPE => {
                    key.ethertype = Some(u16::from_be_bytes(p.try_into().map_err(|_| bad())?))
                }
                key_attr::IPV4 => key.ipv4 = Some(OvsKeyIpv4::read(p).ok_or_else(bad)?),
                key_attr::UDP => key.udp = Some(ports(p)?),
                key_attr::TCP => key.tcp = Some(ports(p)?),
                _ => {}
            }
        }
        Ok(key)
    }

    /// The key's attributes as the kernel sent them: install them as a flow key (with no mask, an
    /// exact match) or pass them with a packet to execute.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }
}
