//! The lease's steps: each snapshots the one setting it changes, applies it, verifies it, and knows
//! how to put back exactly what it changed ([`Undo`]).

use std::fmt;
use std::io;
use std::net::Ipv4Addr;

use crate::sys::ethtool::{
    self, EthtoolIoctl, EthtoolNl, FlowUnion, RX_CLS_LOC_ANY, RxFlowSpec, tcp_data_split,
};

/// One step of a lease, as errors and records name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Reading the device's settings before anything changes.
    Snapshot,
    /// Writing the lease record (before each change).
    Record,
    /// Setting the number of channels (queues).
    Channels,
    /// `tcp-data-split` on and `hds-thresh` 0 (ethtool rings).
    HeaderSplit,
    /// Taking the queue out of the default RSS indirection table.
    RssIsolate,
    /// An ntuple rule steering the flow to the queue.
    Ntuple,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Snapshot => "snapshot",
            Step::Record => "record",
            Step::Channels => "channels",
            Step::HeaderSplit => "header-split",
            Step::RssIsolate => "rss-isolate",
            Step::Ntuple => "ntuple",
        })
    }
}

/// The transport of a steered flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlowProto {
    /// `TCP_V4_FLOW`.
    Tcp,
    /// `UDP_V4_FLOW`.
    Udp,
}

/// The flow an ntuple rule steers to the leased queue: IPv4 TCP or UDP to a destination port (and
/// address, when given).
///
/// Start from [`FlowMatch::new`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowMatch {
    /// TCP or UDP.
    pub proto: FlowProto,
    /// Destination port.
    pub dst_port: u16,
    /// Destination address; `None` matches any.
    pub dst_ip: Option<Ipv4Addr>,
}

impl FlowMatch {
    /// `proto` to `dst_port` on any destination address (set [`FlowMatch::dst_ip`] to narrow it).
    pub fn new(proto: FlowProto, dst_port: u16) -> FlowMatch {
        FlowMatch {
            proto,
            dst_port,
            dst_ip: None,
        }
    }

    /// The rule's `ethtool_rx_flow_spec` for `queue` at `location`.
    pub(super) fn spec(&self, queue: u32, location: u32) -> RxFlowSpec {
        let mut h_u = FlowUnion::ZERO;
        let mut m_u = FlowUnion::ZERO;
        h_u.pdst = self.dst_port.to_be();
        m_u.pdst = 0xffff;
        if let Some(ip) = self.dst_ip {
            h_u.ip4dst = u32::from(ip).to_be();
            m_u.ip4dst = u32::MAX;
        }
        let flow_type = match self.proto {
            FlowProto::Tcp => ethtool::TCP_V4_FLOW,
            FlowProto::Udp => ethtool::UDP_V4_FLOW,
        };
        RxFlowSpec {
            flow_type,
            h_u,
            h_ext: Default::default(),
            m_u,
            m_ext: Default::default(),
            ring_cookie: u64::from(queue),
            location,
        }
    }

    /// Whether the device's rule `got` is this flow to `queue` (drivers may report unmasked bytes
    /// and extension fields differently: only the matched fields, the flow type and the queue count).
    pub(super) fn is(&self, got: &RxFlowSpec, queue: u32) -> bool {
        let want = self.spec(queue, got.location);
        got.flow_type & 0xff == want.flow_type
            && got.ring_cookie == want.ring_cookie
            && got.h_u.pdst & got.m_u.pdst == want.h_u.pdst
            && got.m_u.pdst == want.m_u.pdst
            && got.h_u.ip4dst & got.m_u.ip4dst == want.h_u.ip4dst
            && got.m_u.ip4dst == want.m_u.ip4dst
            && got.m_u.ip4src == 0
            && got.m_u.psrc == 0
    }
}

impl fmt::Display for FlowMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.proto {
            FlowProto::Tcp => "tcp",
            FlowProto::Udp => "udp",
        };
        match self.dst_ip {
            Some(ip) => write!(f, "{proto}:{ip}:{}", self.dst_port),
            None => write!(f, "{proto}:{}", self.dst_port),
        }
    }
}

impl std::str::FromStr for FlowMatch {
    type Err = String;

    /// `tcp:PORT`, `udp:PORT`, `tcp:ADDR:PORT` or `udp:ADDR:PORT` (IPv4).
    fn from_str(s: &str) -> Result<FlowMatch, String> {
        let bad = || format!("'{s}': expected tcp:PORT, udp:PORT, tcp:IPV4:PORT or udp:IPV4:PORT");
        let mut parts = s.split(':');
        let proto = match parts.next() {
            Some("tcp") => FlowProto::Tcp,
            Some("udp") => FlowProto::Udp,
            _ => return Err(bad()),
        };
        let rest: Vec<&str> = parts.collect();
        let (dst_ip, port) = match rest.as_slice() {
            [port] => (None, port),
            [ip, port] => (Some(ip.parse().map_err(|_| bad())?), port),
            _ => return Err(bad()),
        };
        Ok(FlowMatch {
            proto,
            dst_port: port.parse().map_err(|_| bad())?,
            dst_ip,
        })
    }
}

/// What one applied (or about to be applied) step changed, with what was there before: enough to
/// put it back exactly, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Undo {
    /// Channel counts before, only for the counts the lease set (rx, tx, other, combined).
    Channels([Option<u32>; 4]),
    /// `tcp-data-split` and `hds-thresh` before, only for those the lease set.
    Rings {
        /// The earlier `tcp-data-split`.
        tcp_data_split: Option<u8>,
        /// The earlier `hds-thresh`.
        hds_thresh: Option<u32>,
    },
    /// The indirection table before; `None` when it was the kernel's default spread (restored as
    /// the default, which the kernel then keeps following channel changes, as before).
    Rss(Option<Vec<u32>>),
    /// An ntuple rule the lease inserted: its flow and queue, its location once known, and the
    /// locations in use before (so that a rule whose insertion was not recorded can still be told
    /// apart from every rule that was there).
    Rule {
        /// The flow.
        flow: FlowMatch,
        /// The queue it steers to.
        queue: u32,
        /// Its location, once the kernel returned it (or when zcnet chose it).
        location: Option<u32>,
        /// Rules that existed before.
        existing: Vec<u32>,
    },
}

impl Undo {
    /// The step that made this change.
    pub fn step(&self) -> Step {
        match self {
            Undo::Channels(_) => Step::Channels,
            Undo::Rings { .. } => Step::HeaderSplit,
            Undo::Rss(_) => Step::RssIsolate,
            Undo::Rule { .. } => Step::Ntuple,
        }
    }

    /// Puts the change back. Idempotent: a change never made (the process died between recording
    /// and applying it) restores to what is already there; a rule is deleted only when the rule at
    /// its location is still the lease's.
    pub(super) fn undo(&self, dev: &mut Device) -> io::Result<String> {
        match self {
            Undo::Channels(before) => {
                dev.nl
                    .set_channels(dev.ifindex, *before)
                    .or_else(unchanged)?;
                Ok(format!("channels {}", channel_words(before)))
            }
            Undo::Rings {
                tcp_data_split,
                hds_thresh,
            } => {
                dev.nl
                    .set_rings(dev.ifindex, *tcp_data_split, *hds_thresh)
                    .or_else(unchanged)?;
                Ok(format!(
                    "rings{}{}",
                    tcp_data_split.map_or(String::new(), |v| format!(
                        " tcp-data-split {}",
                        split_name(v)
                    )),
                    hds_thresh.map_or(String::new(), |v| format!(" hds-thresh {v}"))
                ))
            }
            Undo::Rss(table) => {
                let ioctl = dev.ioctl()?;
                match table {
                    Some(t) => ioctl.set_rxfh_indir(t)?,
                    None => ioctl.set_rxfh_indir(&[])?,
                }
                Ok(match table {
                    Some(t) => format!("rss indirection table ({} entries)", t.len()),
                    None => "rss indirection table (default spread)".to_string(),
                })
            }
            Undo::Rule {
                flow,
                queue,
                location,
                existing,
            } => {
                let ioctl = dev.ioctl()?;
                let ours = match location {
                    Some(loc) => {
                        Some(*loc).filter(|l| ioctl.rule(*l).is_ok_and(|got| flow.is(&got, *queue)))
                    }
                    None => {
                        let (count, _, _) = ioctl.rule_count()?;
                        ioctl
                            .rule_locations(count)?
                            .into_iter()
                            .filter(|l| !existing.contains(l))
                            .find(|l| ioctl.rule(*l).is_ok_and(|got| flow.is(&got, *queue)))
                    }
                };
                match ours {
                    Some(loc) => {
                        ioctl.delete_rule(loc)?;
                        Ok(format!(
                            "ntuple rule {flow} -> queue {queue} at {loc} deleted"
                        ))
                    }
                    None => Ok(format!(
                        "ntuple rule {flow} -> queue {queue}: never inserted"
                    )),
                }
            }
        }
    }
}

/// A set that the kernel answers with "nothing to change" is a restore already done: some drivers
/// and kernels refuse a no-op set (`EOPNOTSUPP` for a knob the driver lacks, which then was never
/// changed). Only `EOPNOTSUPP` counts: it means the setting cannot have been changed by the lease.
fn unchanged(e: io::Error) -> io::Result<()> {
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        Ok(())
    } else {
        Err(e)
    }
}

pub(super) fn split_name(v: u8) -> &'static str {
    match v {
        tcp_data_split::DISABLED => "off",
        tcp_data_split::ENABLED => "on",
        _ => "unknown",
    }
}

/// `rx 2 combined 4` for the counts given.
pub(super) fn channel_words(counts: &[Option<u32>; 4]) -> String {
    ["rx", "tx", "other", "combined"]
        .iter()
        .zip(counts)
        .filter_map(|(name, v)| v.map(|v| format!("{name} {v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The device a lease works on: its netlink and ioctl handles.
#[derive(Debug)]
pub(super) struct Device {
    pub(super) nl: EthtoolNl,
    pub(super) ifindex: u32,
    pub(super) name: String,
}

impl Device {
    pub(super) fn open(ifindex: u32, name: &str) -> io::Result<Device> {
        Ok(Device {
            nl: EthtoolNl::open()?,
            ifindex,
            name: name.to_string(),
        })
    }

    pub(super) fn ioctl(&self) -> io::Result<EthtoolIoctl> {
        EthtoolIoctl::new(&self.name)
    }
}

/// The kernel's default spread of `entries` table entries over `queues` queues
/// (`ethtool_rxfh_indir_default`: entry i to queue i mod queues).
pub(super) fn default_spread(entries: usize, queues: u32) -> Vec<u32> {
    (0..entries as u32).map(|i| i % queues.max(1)).collect()
}

/// `table` with `queue` replaced, entry by entry, by the other queues below `queues` in turn.
pub(super) fn without_queue(table: &[u32], queue: u32, queues: u32) -> Option<Vec<u32>> {
    let others: Vec<u32> = (0..queues).filter(|q| *q != queue).collect();
    if others.is_empty() {
        return None;
    }
    let mut next = others.iter().cycle();
    Some(
        table
            .iter()
            .map(|&q| {
                if q == queue {
                    *next.next().expect("cycle over a non-empty list")
                } else {
                    q
                }
            })
            .collect(),
    )
}

/// Where to insert a rule: `RX_CLS_LOC_ANY` when the driver chooses, else the first free location.
pub(super) fn rule_location(special: bool, table: u32, existing: &[u32]) -> Option<u32> {
    if special {
        return Some(RX_CLS_LOC_ANY);
    }
    (0..table).find(|l| !existing.contains(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_taken_out_of_the_table_is_replaced_by_the_others_in_turn() {
        let table = default_spread(8, 4);
        assert_eq!(table, [0, 1, 2, 3, 0, 1, 2, 3]);
        let out = without_queue(&table, 1, 4).unwrap();
        assert_eq!(out, [0, 0, 2, 3, 0, 2, 2, 3]);
        assert!(!out.contains(&1));
        assert_eq!(without_queue(&[0, 0], 0, 1), None, "no other queue");
    }

    #[test]
    fn flows_parse_print_and_match_their_own_rule() {
        let f: FlowMatch = "tcp:10.1.2.3:9000".parse().unwrap();
        assert_eq!(f.to_string(), "tcp:10.1.2.3:9000");
        let g: FlowMatch = "udp:53".parse().unwrap();
        assert_eq!((g.proto, g.dst_port, g.dst_ip), (FlowProto::Udp, 53, None));
        for bad in ["tcp", "icmp:1", "tcp:x", "tcp:1.2.3:4", "tcp:1:2:3"] {
            assert!(bad.parse::<FlowMatch>().is_err(), "{bad}");
        }
        let spec = f.spec(3, 7);
        assert!(f.is(&spec, 3));
        assert!(!f.is(&spec, 2), "another queue");
        assert!(!g.is(&spec, 3), "another flow");
        assert_eq!(u16::from_be(spec.h_u.pdst), 9000);
    }

    #[test]
    fn rules_go_where_the_driver_or_the_first_free_slot_says() {
        assert_eq!(rule_location(true, 0, &[]), Some(RX_CLS_LOC_ANY));
        assert_eq!(rule_location(false, 4, &[0, 1, 3]), Some(2));
        assert_eq!(rule_location(false, 2, &[0, 1]), None);
    }
}
