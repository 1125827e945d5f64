//! Run: the network a one-process bench of sends runs over — loopback of this namespace, or a veth
//! pair with an optional XDP drop program on the receiving end (`bench udp --sink xdp-drop`: the one
//! local path where the kernel does not copy zero-copy sends).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;

use anyhow::{Context, Result};
use benchnet::{VethConfig, VethPair};
use zcnet::xdp::{AttachMode, XdpLink, XdpProgram};

use crate::bench::args::Common;

/// The network a bench runs over: loopback of this namespace, or a veth pair (with an optional XDP
/// drop program on the receiving end).
pub(crate) struct Net {
    pub(crate) veth: Option<VethPair>,
    pub(crate) _sink: Option<XdpLink>,
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
}

impl Net {
    pub(crate) fn new(common: &Common, xdp_drop: bool) -> Result<Net> {
        if !common.netns && !xdp_drop {
            let ip = loopback(common.ipv6);
            return Ok(Net {
                veth: None,
                _sink: None,
                src: ip,
                dst: ip,
            });
        }
        let pair = VethPair::new(VethConfig::default())
            .context("building the veth harness (needs root, iproute2 and ethtool)")?;
        let (src, dst): (IpAddr, IpAddr) = if common.ipv6 {
            (pair.a_v6.into(), pair.b_v6.into())
        } else {
            (pair.a_v4.into(), pair.b_v4.into())
        };
        // The far end is resolved statically: the XDP drop program drops ARP and neighbour
        // discovery too, and without it a burst of datagrams sent while discovery is pending is
        // dropped (the kernel queues only a few per unresolved neighbour).
        pair.pin_b_neighbours()?;
        let sink = if xdp_drop {
            let link = pair
                .b
                .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
                .context("attaching the XDP drop program to the receiving veth end")?;
            Some(link)
        } else {
            None
        };
        Ok(Net {
            veth: Some(pair),
            _sink: sink,
            src,
            dst,
        })
    }

    pub(crate) fn path(&self) -> &'static str {
        match (&self.veth, &self._sink) {
            (None, _) => "loopback",
            (Some(_), None) => "veth",
            (Some(_), Some(_)) => "xdp-drop",
        }
    }

    /// Runs `f` in the sending namespace (this one for loopback).
    pub(crate) fn in_sender<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.veth {
            Some(p) => p.a.run(f),
            None => f(),
        }
    }

    /// A command that starts `exe` in the receiving namespace.
    pub(crate) fn receiver_command(&self, exe: &str) -> Command {
        match &self.veth {
            Some(p) => p.b.command(exe),
            None => Command::new(exe),
        }
    }
}

fn loopback(ipv6: bool) -> IpAddr {
    if ipv6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    }
}
