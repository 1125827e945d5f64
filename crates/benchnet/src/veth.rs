//! Two namespaces joined by a veth pair, with addresses, MTU, queue count and offloads chosen by the test.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::frame::UdpFrame;
use crate::netns::Netns;

/// Which offloads stay on for both ends of a veth pair. Turning them off reproduces the conditions of
/// MSG_ZEROCOPY's regression matrix: without scatter-gather the kernel must copy every zero-copy send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Scatter-gather (`ethtool -K sg`).
    pub sg: bool,
    /// TCP segmentation offload (`tso`).
    pub tso: bool,
    /// Generic segmentation offload (`gso`).
    pub gso: bool,
    /// Generic receive offload (`gro`).
    pub gro: bool,
    /// Transmit checksum offload (`tx`).
    pub tx_checksum: bool,
}

impl Offloads {
    /// The offload rows of MSG_ZEROCOPY's regression matrix: scatter-gather, TSO and transmit
    /// checksum offload, each turned off alone (the rest on).
    pub fn each_off() -> [Offloads; 3] {
        let on = Offloads::default();
        [
            Offloads { sg: false, ..on },
            Offloads { tso: false, ..on },
            Offloads {
                tx_checksum: false,
                ..on
            },
        ]
    }
}

impl Default for Offloads {
    /// Everything on, as a new veth has it.
    fn default() -> Self {
        Offloads {
            sg: true,
            tso: true,
            gso: true,
            gro: true,
            tx_checksum: true,
        }
    }
}

/// How to build a [`VethPair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VethConfig {
    /// MTU of both ends.
    pub mtu: u32,
    /// Number of rx and tx queues of each end (AF_XDP binds to one queue; 1 keeps all traffic there).
    pub queues: u32,
    /// Offloads of both ends.
    pub offloads: Offloads,
}

impl VethConfig {
    /// `queues` queues per end, both ends putting whole checksums in what they send: veth offloads
    /// transmit checksums by default, and a frame a local sender left to the offload carries only
    /// the pseudo-header sum, which an AF_XDP receiver (given no checksum status) sees as wrong.
    pub fn full_checksums(queues: u32) -> VethConfig {
        VethConfig {
            queues,
            offloads: Offloads {
                tx_checksum: false,
                ..Offloads::default()
            },
            ..VethConfig::default()
        }
    }
}

impl Default for VethConfig {
    fn default() -> Self {
        VethConfig {
            mtu: 1500,
            queues: 1,
            offloads: Offloads::default(),
        }
    }
}

/// Namespaces `a` and `b` joined by a veth pair (`a_if` in `a`, `b_if` in `b`), both ends up, with IPv4
/// addresses 10.77.0.1/24 and 10.77.0.2/24 and IPv6 addresses fd7a:636e::1/64 and fd7a:636e::2/64
/// (no duplicate-address detection, so they are usable at once). Addresses exist only inside the two
/// namespaces. Dropping the pair deletes both namespaces and with them the interfaces.
#[derive(Debug)]
pub struct VethPair {
    /// The first namespace.
    pub a: Netns,
    /// The second namespace.
    pub b: Netns,
    /// Interface name of the end in `a`.
    pub a_if: String,
    /// Interface name of the end in `b`.
    pub b_if: String,
    /// IPv4 address of `a_if`.
    pub a_v4: Ipv4Addr,
    /// IPv4 address of `b_if`.
    pub b_v4: Ipv4Addr,
    /// IPv6 address of `a_if`.
    pub a_v6: Ipv6Addr,
    /// IPv6 address of `b_if`.
    pub b_v6: Ipv6Addr,
    /// The configuration it was built with.
    pub config: VethConfig,
}

impl VethPair {
    /// A pair with one queue per end and the default settings: every frame arrives on queue 0, where
    /// a single AF_XDP socket can take it.
    pub fn one_queue() -> io::Result<VethPair> {
        VethPair::new(VethConfig {
            queues: 1,
            ..VethConfig::default()
        })
    }

    /// Builds the pair. Needs root; fails with the failing command's message otherwise.
    pub fn new(config: VethConfig) -> io::Result<VethPair> {
        let a = Netns::create("a")?;
        let b = Netns::create("b")?;
        let pid = std::process::id();
        let (a_if, b_if) = (format!("zc{pid}a"), format!("zc{pid}b"));
        let queues = config.queues.to_string();
        let mtu = config.mtu.to_string();
        a.ip(&[
            "link",
            "add",
            &a_if,
            "numtxqueues",
            &queues,
            "numrxqueues",
            &queues,
            "type",
            "veth",
            "peer",
            "name",
            &b_if,
            "numtxqueues",
            &queues,
            "numrxqueues",
            &queues,
            "netns",
            b.name(),
        ])?;
        let pair = VethPair {
            a,
            b,
            a_if,
            b_if,
            a_v4: Ipv4Addr::new(10, 77, 0, 1),
            b_v4: Ipv4Addr::new(10, 77, 0, 2),
            a_v6: "fd7a:636e::1".parse().expect("literal"),
            b_v6: "fd7a:636e::2".parse().expect("literal"),
            config,
        };
        for (ns, ifname, v4, v6) in [
            (&pair.a, &pair.a_if, pair.a_v4, pair.a_v6),
            (&pair.b, &pair.b_if, pair.b_v4, pair.b_v6),
        ] {
            ns.ip(&["link", "set", ifname, "mtu", &mtu])?;
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", ifname])?;
            ns.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                ifname,
                "nodad",
            ])?;
            set_offloads(ns, ifname, config.offloads)?;
            // No duplicate address detection for the link-local address either: for about a
            // second after the link comes up it would be tentative, and the kernel sources its
            // neighbour solicitations from it, so neither end could resolve the other over IPv6.
            ns.set_sysctl(&format!("net.ipv6.conf.{ifname}.accept_dad"), "0")?;
            ns.ip(&["link", "set", ifname, "up"])?;
        }
        Ok(pair)
    }

    /// Gives `a` permanent neighbour entries for both of `b`'s addresses, so that `a` sends to `b`
    /// without ARP or neighbour discovery — needed when `b` runs an XDP program that drops or
    /// redirects every frame, answers included.
    pub fn pin_b_neighbours(&self) -> io::Result<()> {
        let lladdr = self.mac(&self.b_if)?.map(|b| format!("{b:02x}")).join(":");
        for ip in [self.b_v4.to_string(), self.b_v6.to_string()] {
            self.a.ip(&[
                "neigh",
                "replace",
                &ip,
                "lladdr",
                &lladdr,
                "dev",
                &self.a_if,
                "nud",
                "permanent",
            ])?;
        }
        Ok(())
    }

    /// UDP frames between the pair's IPv4 addresses, both ends on `port`: `b` to `a`, and `a` to `b`.
    pub fn udp_frames(&self, port: u16) -> io::Result<(UdpFrame, UdpFrame)> {
        let (a_mac, b_mac) = (self.mac(&self.a_if)?, self.mac(&self.b_if)?);
        let to_a = UdpFrame {
            src_mac: b_mac,
            dst_mac: a_mac,
            src_ip: self.b_v4,
            dst_ip: self.a_v4,
            src_port: port,
            dst_port: port,
        };
        let to_b = UdpFrame {
            src_mac: a_mac,
            dst_mac: b_mac,
            src_ip: self.a_v4,
            dst_ip: self.b_v4,
            ..to_a
        };
        Ok((to_a, to_b))
    }

    /// The MAC address of an interface of this pair (`a_if` or `b_if`).
    pub fn mac(&self, ifname: &str) -> io::Result<[u8; 6]> {
        let ns = if ifname == self.a_if {
            &self.a
        } else {
            &self.b
        };
        let text = ns.exec("cat", &[&format!("/sys/class/net/{ifname}/address")])?;
        crate::frame::parse_mac(&text)
            .ok_or_else(|| io::Error::other(format!("{ifname} has no MAC address: {text:?}")))
    }
}

fn set_offloads(ns: &Netns, ifname: &str, o: Offloads) -> io::Result<()> {
    if o == Offloads::default() {
        return Ok(());
    }
    let onoff = |on: bool| if on { "on" } else { "off" };
    ns.exec(
        "ethtool",
        &[
            "-K",
            ifname,
            "sg",
            onoff(o.sg),
            "tso",
            onoff(o.tso),
            "gso",
            onoff(o.gso),
            "gro",
            onoff(o.gro),
            "tx",
            onoff(o.tx_checksum),
        ],
    )
    .map(drop)
}
