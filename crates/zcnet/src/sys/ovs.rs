//! The Open vSwitch kernel datapath's generic netlink UAPI (include/uapi/linux/openvswitch.h, and its
//! specs Documentation/netlink/specs/ovs_datapath.yaml, ovs_vport.yaml, ovs_flow.yaml): family names,
//! commands, attribute numbers, user features and the fixed-layout structs carried in attributes.
//!
//! Every request and reply of the four families starts, after its `genlmsghdr`, with a
//! `struct ovs_header` (the datapath's ifindex, 0 when creating one). Structs are read from attribute
//! payloads by field offset in native byte order (the `__be*` fields stay big-endian byte arrays),
//! never by pointer cast, so a short payload is a `None`, not undefined behaviour.

use std::mem;

/// `OVS_DATAPATH_FAMILY`.
pub const DATAPATH_FAMILY: &str = "ovs_datapath";
/// `OVS_VPORT_FAMILY`.
pub const VPORT_FAMILY: &str = "ovs_vport";
/// `OVS_FLOW_FAMILY`.
pub const FLOW_FAMILY: &str = "ovs_flow";
/// `OVS_PACKET_FAMILY`.
pub const PACKET_FAMILY: &str = "ovs_packet";
/// `OVS_DATAPATH_VERSION`: the genl version that carries user features.
pub const DATAPATH_VERSION: u8 = 2;
/// `OVS_VPORT_VERSION`, `OVS_FLOW_VERSION`, `OVS_PACKET_VERSION`.
pub const VERSION: u8 = 1;

/// `enum ovs_datapath_cmd` (the vport and flow families use the same numbers).
pub mod cmd {
    /// `OVS_*_CMD_NEW`.
    pub const NEW: u8 = 1;
    /// `OVS_*_CMD_DEL`.
    pub const DEL: u8 = 2;
    /// `OVS_*_CMD_GET`.
    pub const GET: u8 = 3;
    /// `OVS_*_CMD_SET`.
    pub const SET: u8 = 4;
}

/// `enum ovs_packet_cmd`.
pub mod packet_cmd {
    /// `OVS_PACKET_CMD_MISS`: a packet that matched no flow.
    pub const MISS: u8 = 1;
    /// `OVS_PACKET_CMD_ACTION`: a packet sent up by an `OVS_ACTION_ATTR_USERSPACE` action.
    pub const ACTION: u8 = 2;
    /// `OVS_PACKET_CMD_EXECUTE`: apply actions to a packet from user space.
    pub const EXECUTE: u8 = 3;
}

/// `enum ovs_datapath_attr`.
pub mod dp_attr {
    /// `OVS_DP_ATTR_NAME`: string, the datapath's internal device.
    pub const NAME: u16 = 1;
    /// `OVS_DP_ATTR_UPCALL_PID`: u32 port id for upcalls of the local port.
    pub const UPCALL_PID: u16 = 2;
    /// `OVS_DP_ATTR_STATS`: `struct ovs_dp_stats`.
    pub const STATS: u16 = 3;
    /// `OVS_DP_ATTR_MEGAFLOW_STATS`: `struct ovs_dp_megaflow_stats`.
    pub const MEGAFLOW_STATS: u16 = 4;
    /// `OVS_DP_ATTR_USER_FEATURES`: u32 of `OVS_DP_F_*`.
    pub const USER_FEATURES: u16 = 5;
    /// `OVS_DP_ATTR_PER_CPU_PIDS`: array of u32 port ids, one per CPU.
    pub const PER_CPU_PIDS: u16 = 8;
}

/// `OVS_DP_F_*` user features.
pub mod dp_feature {
    /// `OVS_DP_F_UNALIGNED`: user space parses an unaligned last attribute, so the kernel may build
    /// upcalls with `skb_zerocopy()` instead of copying the packet.
    pub const UNALIGNED: u32 = 1 << 0;
    /// `OVS_DP_F_VPORT_PIDS`: several port ids per vport.
    pub const VPORT_PIDS: u32 = 1 << 1;
    /// `OVS_DP_F_TC_RECIRC_SHARING`.
    pub const TC_RECIRC_SHARING: u32 = 1 << 2;
    /// `OVS_DP_F_DISPATCH_UPCALL_PER_CPU`: upcalls go to the port id of the CPU that handled the packet.
    pub const DISPATCH_UPCALL_PER_CPU: u32 = 1 << 3;
}

/// `enum ovs_vport_attr`.
pub mod vport_attr {
    /// `OVS_VPORT_ATTR_PORT_NO`: u32.
    pub const PORT_NO: u16 = 1;
    /// `OVS_VPORT_ATTR_TYPE`: u32 `OVS_VPORT_TYPE_*`.
    pub const TYPE: u16 = 2;
    /// `OVS_VPORT_ATTR_NAME`: string.
    pub const NAME: u16 = 3;
    /// `OVS_VPORT_ATTR_UPCALL_PID`: array of u32 port ids.
    pub const UPCALL_PID: u16 = 5;
    /// `OVS_VPORT_ATTR_STATS`: `struct ovs_vport_stats`.
    pub const STATS: u16 = 6;
    /// `OVS_VPORT_ATTR_IFINDEX`: u32.
    pub const IFINDEX: u16 = 8;
}

/// `enum ovs_vport_type`.
pub mod vport_type {
    /// `OVS_VPORT_TYPE_NETDEV`: an existing network device.
    pub const NETDEV: u32 = 1;
    /// `OVS_VPORT_TYPE_INTERNAL`: a device the datapath implements (its local port is one).
    pub const INTERNAL: u32 = 2;
}

/// `enum ovs_flow_attr`.
pub mod flow_attr {
    /// `OVS_FLOW_ATTR_KEY`: nested `OVS_KEY_ATTR_*`.
    pub const KEY: u16 = 1;
    /// `OVS_FLOW_ATTR_ACTIONS`: nested `OVS_ACTION_ATTR_*`.
    pub const ACTIONS: u16 = 2;
    /// `OVS_FLOW_ATTR_STATS`: `struct ovs_flow_stats`.
    pub const STATS: u16 = 3;
    /// `OVS_FLOW_ATTR_TCP_FLAGS`: u8, the TCP flags of the packets that hit the flow, OR'd.
    pub const TCP_FLAGS: u16 = 4;
    /// `OVS_FLOW_ATTR_USED`: u64 milliseconds of `CLOCK_MONOTONIC` when a packet last hit it.
    pub const USED: u16 = 5;
    /// `OVS_FLOW_ATTR_MASK`: nested `OVS_KEY_ATTR_*`; absent = exact match.
    pub const MASK: u16 = 7;
    /// `OVS_FLOW_ATTR_UFID`: 1-16 bytes naming the flow, given when it was installed.
    pub const UFID: u16 = 9;
}

/// `enum ovs_packet_attr`.
pub mod packet_attr {
    /// `OVS_PACKET_ATTR_PACKET`: the packet; last in an upcall, unpadded with `OVS_DP_F_UNALIGNED`.
    pub const PACKET: u16 = 1;
    /// `OVS_PACKET_ATTR_KEY`: nested `OVS_KEY_ATTR_*`.
    pub const KEY: u16 = 2;
    /// `OVS_PACKET_ATTR_ACTIONS`: nested `OVS_ACTION_ATTR_*`.
    pub const ACTIONS: u16 = 3;
    /// `OVS_PACKET_ATTR_USERDATA`: the `OVS_USERSPACE_ATTR_USERDATA` of an action upcall.
    pub const USERDATA: u16 = 4;
    /// `OVS_PACKET_ATTR_MRU`: u16, maximum received fragment size.
    pub const MRU: u16 = 9;
    /// `OVS_PACKET_ATTR_LEN`: u32, the packet's length before truncation.
    pub const LEN: u16 = 10;
    /// `OVS_PACKET_ATTR_HASH`: u64.
    pub const HASH: u16 = 11;
}

/// `enum ovs_key_attr`.
pub mod key_attr {
    /// `OVS_KEY_ATTR_ENCAP`: nested, inside a VLAN tag.
    pub const ENCAP: u16 = 1;
    /// `OVS_KEY_ATTR_PRIORITY`: u32 skb priority.
    pub const PRIORITY: u16 = 2;
    /// `OVS_KEY_ATTR_IN_PORT`: u32 datapath port number.
    pub const IN_PORT: u16 = 3;
    /// `OVS_KEY_ATTR_ETHERNET`: `struct ovs_key_ethernet`.
    pub const ETHERNET: u16 = 4;
    /// `OVS_KEY_ATTR_VLAN`: be16 TCI.
    pub const VLAN: u16 = 5;
    /// `OVS_KEY_ATTR_ETHERTYPE`: be16.
    pub const ETHERTYPE: u16 = 6;
    /// `OVS_KEY_ATTR_IPV4`: `struct ovs_key_ipv4`.
    pub const IPV4: u16 = 7;
    /// `OVS_KEY_ATTR_IPV6`: `struct ovs_key_ipv6`.
    pub const IPV6: u16 = 8;
    /// `OVS_KEY_ATTR_TCP`: `struct ovs_key_tcp`.
    pub const TCP: u16 = 9;
    /// `OVS_KEY_ATTR_UDP`: `struct ovs_key_udp`.
    pub const UDP: u16 = 10;
    /// `OVS_KEY_ATTR_ICMP`: `struct ovs_key_icmp`.
    pub const ICMP: u16 = 11;
    /// `OVS_KEY_ATTR_ICMPV6`: `struct ovs_key_icmpv6`.
    pub const ICMPV6: u16 = 12;
    /// `OVS_KEY_ATTR_ARP`: `struct ovs_key_arp`.
    pub const ARP: u16 = 13;
    /// `OVS_KEY_ATTR_ND`: `struct ovs_key_nd`.
    pub const ND: u16 = 14;
    /// `OVS_KEY_ATTR_SKB_MARK`: u32.
    pub const SKB_MARK: u16 = 15;
    /// `OVS_KEY_ATTR_TUNNEL`: nested `OVS_TUNNEL_KEY_ATTR_*`.
    pub const TUNNEL: u16 = 16;
    /// `OVS_KEY_ATTR_SCTP`: `struct ovs_key_sctp`.
    pub const SCTP: u16 = 17;
    /// `OVS_KEY_ATTR_TCP_FLAGS`: be16.
    pub const TCP_FLAGS: u16 = 18;
    /// `OVS_KEY_ATTR_DP_HASH`: u32.
    pub const DP_HASH: u16 = 19;
    /// `OVS_KEY_ATTR_RECIRC_ID`: u32.
    pub const RECIRC_ID: u16 = 20;
    /// `OVS_KEY_ATTR_MPLS`: array of `struct ovs_key_mpls`.
    pub const MPLS: u16 = 21;
    /// `OVS_KEY_ATTR_CT_STATE`: u32 of `OVS_CS_F_*`.
    pub const CT_STATE: u16 = 22;
    /// `OVS_KEY_ATTR_CT_ZONE`: u16.
    pub const CT_ZONE: u16 = 23;
    /// `OVS_KEY_ATTR_CT_MARK`: u32.
    pub const CT_MARK: u16 = 24;
    /// `OVS_KEY_ATTR_CT_LABELS`: 16 bytes.
    pub const CT_LABELS: u16 = 25;
    /// `OVS_KEY_ATTR_CT_ORIG_TUPLE_IPV4`: `struct ovs_key_ct_tuple_ipv4`.
    pub const CT_ORIG_TUPLE_IPV4: u16 = 26;
    /// `OVS_KEY_ATTR_CT_ORIG_TUPLE_IPV6`: `struct ovs_key_ct_tuple_ipv6`.
    pub const CT_ORIG_TUPLE_IPV6: u16 = 27;
    /// `OVS_KEY_ATTR_NSH`: nested `OVS_NSH_KEY_ATTR_*`.
    pub const NSH: u16 = 28;
    /// `OVS_KEY_ATTR_PACKET_TYPE`: be32.
    pub const PACKET_TYPE: u16 = 29;
    /// `OVS_KEY_ATTR_ND_EXTENSIONS`: `struct ovs_key_nd_extensions`.
    pub const ND_EXTENSIONS: u16 = 30;
    /// `OVS_KEY_ATTR_IPV6_EXTHDRS`: `struct ovs_key_ipv6_exthdrs` (Linux 6.0).
    pub const IPV6_EXTHDRS: u16 = 32;
}

/// `enum ovs_action_attr`.
pub mod action_attr {
    /// `OVS_ACTION_ATTR_OUTPUT`: u32 port number.
    pub const OUTPUT: u16 = 1;
    /// `OVS_ACTION_ATTR_USERSPACE`: nested `OVS_USERSPACE_ATTR_*`.
    pub const USERSPACE: u16 = 2;
    /// `OVS_ACTION_ATTR_SET`: one nested key attribute.
    pub const SET: u16 = 3;
    /// `OVS_ACTION_ATTR_PUSH_VLAN`: `struct ovs_action_push_vlan`.
    pub const PUSH_VLAN: u16 = 4;
    /// `OVS_ACTION_ATTR_POP_VLAN`: no argument.
    pub const POP_VLAN: u16 = 5;
    /// `OVS_ACTION_ATTR_SAMPLE`: nested `OVS_SAMPLE_ATTR_*`.
    pub const SAMPLE: u16 = 6;
    /// `OVS_ACTION_ATTR_RECIRC`: u32 recirculation id.
    pub const RECIRC: u16 = 7;
    /// `OVS_ACTION_ATTR_HASH`: `struct ovs_action_hash`.
    pub const HASH: u16 = 8;
    /// `OVS_ACTION_ATTR_PUSH_MPLS`: `struct ovs_action_push_mpls`.
    pub const PUSH_MPLS: u16 = 9;
    /// `OVS_ACTION_ATTR_POP_MPLS`: be16 ethertype.
    pub const POP_MPLS: u16 = 10;
    /// `OVS_ACTION_ATTR_SET_MASKED`: one nested key attribute: value then mask.
    pub const SET_MASKED: u16 = 11;
    /// `OVS_ACTION_ATTR_CT`: nested `OVS_CT_ATTR_*`.
    pub const CT: u16 = 12;
    /// `OVS_ACTION_ATTR_TRUNC`: u32 maximum length.
    pub const TRUNC: u16 = 13;
    /// `OVS_ACTION_ATTR_PUSH_ETH`: `struct ovs_action_push_eth`.
    pub const PUSH_ETH: u16 = 14;
    /// `OVS_ACTION_ATTR_POP_ETH`: no argument.
    pub const POP_ETH: u16 = 15;
    /// `OVS_ACTION_ATTR_CT_CLEAR`: no argument.
    pub const CT_CLEAR: u16 = 16;
    /// `OVS_ACTION_ATTR_PUSH_NSH`: nested `OVS_NSH_KEY_ATTR_*`.
    pub const PUSH_NSH: u16 = 17;
    /// `OVS_ACTION_ATTR_POP_NSH`: no argument.
    pub const POP_NSH: u16 = 18;
    /// `OVS_ACTION_ATTR_METER`: u32 meter id.
    pub const METER: u16 = 19;
    /// `OVS_ACTION_ATTR_CLONE`: nested actions.
    pub const CLONE: u16 = 20;
    /// `OVS_ACTION_ATTR_CHECK_PKT_LEN`: nested `OVS_CHECK_PKT_LEN_ATTR_*`.
    pub const CHECK_PKT_LEN: u16 = 21;
    /// `OVS_ACTION_ATTR_ADD_MPLS`: `struct ovs_action_add_mpls`.
    pub const ADD_MPLS: u16 = 22;
    /// `OVS_ACTION_ATTR_DEC_TTL`: nested `OVS_DEC_TTL_ATTR_*`.
    pub const DEC_TTL: u16 = 23;
    /// `OVS_ACTION_ATTR_DROP`: u32 error code (Linux 6.4).
    pub const DROP: u16 = 24;
    /// `OVS_ACTION_ATTR_PSAMPLE`: nested `OVS_PSAMPLE_ATTR_*` (Linux 6.11).
    pub const PSAMPLE: u16 = 25;
}

/// `enum ovs_userspace_attr`.
pub mod userspace_attr {
    /// `OVS_USERSPACE_ATTR_PID`: u32 port id to send the packet to.
    pub const PID: u16 = 1;
    /// `OVS_USERSPACE_ATTR_USERDATA`: opaque bytes returned in the upcall.
    pub const USERDATA: u16 = 2;
}

/// `OVSP_LOCAL`: the datapath's own internal port.
pub const OVSP_LOCAL: u32 = 0;

/// `struct ovs_header`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsHeader {
    /// `dp_ifindex`: ifindex of the datapath's local port (0 to create or to name by attribute).
    pub dp_ifindex: i32,
}
const _: () = assert!(mem::size_of::<OvsHeader>() == 4);

impl OvsHeader {
    /// The header's bytes.
    pub fn to_bytes(self) -> [u8; 4] {
        self.dp_ifindex.to_ne_bytes()
    }

    /// Reads the header at the start of `bytes` (after a `genlmsghdr`).
    pub fn read(bytes: &[u8]) -> Option<OvsHeader> {
        Some(OvsHeader {
            dp_ifindex: i32::from_ne_bytes(bytes.get(0..4)?.try_into().ok()?),
        })
    }
}

fn u64_at(bytes: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        bytes.get(off..off + 8)?.try_into().ok()?,
    ))
}

fn u64s<const N: usize>(bytes: &[u8]) -> Option<[u64; N]> {
    let mut out = [0u64; N];
    for (i, v) in out.iter_mut().enumerate() {
        *v = u64_at(bytes, i * 8)?;
    }
    Some(out)
}

/// `struct ovs_dp_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsDpStats {
    /// `n_hit`: packets that matched a flow.
    pub n_hit: u64,
    /// `n_missed`: packets that matched none (each an upcall).
    pub n_missed: u64,
    /// `n_lost`: misses that could not be queued to user space.
    pub n_lost: u64,
    /// `n_flows`: flows installed.
    pub n_flows: u64,
}
const _: () = assert!(mem::size_of::<OvsDpStats>() == 32);

impl OvsDpStats {
    /// Reads the struct from an `OVS_DP_ATTR_STATS` payload.
    pub fn read(bytes: &[u8]) -> Option<OvsDpStats> {
        let [n_hit, n_missed, n_lost, n_flows] = u64s::<4>(bytes)?;
        Some(OvsDpStats {
            n_hit,
            n_missed,
            n_lost,
            n_flows,
        })
    }
}

/// `struct ovs_vport_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsVportStats {
    /// `rx_packets`.
    pub rx_packets: u64,
    /// `tx_packets`.
    pub tx_packets: u64,
    /// `rx_bytes`.
    pub rx_bytes: u64,
    /// `tx_bytes`.
    pub tx_bytes: u64,
    /// `rx_errors`.
    pub rx_errors: u64,
    /// `tx_errors`.
    pub tx_errors: u64,
    /// `rx_dropped`.
    pub rx_dropped: u64,
    /// `tx_dropped`.
    pub tx_dropped: u64,
}
const _: () = assert!(mem::size_of::<OvsVportStats>() == 64);

impl OvsVportStats {
    /// Reads the struct from an `OVS_VPORT_ATTR_STATS` payload.
    pub fn read(bytes: &[u8]) -> Option<OvsVportStats> {
        let [
            rx_packets,
            tx_packets,
            rx_bytes,
            tx_bytes,
            rx_errors,
            tx_errors,
            rx_dropped,
            tx_dropped,
        ] = u64s::<8>(bytes)?;
        Some(OvsVportStats {
            rx_packets,
            tx_packets,
            rx_bytes,
            tx_bytes,
            rx_errors,
            tx_errors,
            rx_dropped,
            tx_dropped,
        })
    }
}

/// `struct ovs_flow_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsFlowStats {
    /// `n_packets`.
    pub n_packets: u64,
    /// `n_bytes`.
    pub n_bytes: u64,
}
const _: () = assert!(mem::size_of::<OvsFlowStats>() == 16);

impl OvsFlowStats {
    /// Reads the struct from an `OVS_FLOW_ATTR_STATS` payload.
    pub fn read(bytes: &[u8]) -> Option<OvsFlowStats> {
        let [n_packets, n_bytes] = u64s::<2>(bytes)?;
        Some(OvsFlowStats { n_packets, n_bytes })
    }
}

/// `struct ovs_key_ethernet`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsKeyEthernet {
    /// `eth_src`.
    pub eth_src: [u8; 6],
    /// `eth_dst`.
    pub eth_dst: [u8; 6],
}
const _: () = assert!(mem::size_of::<OvsKeyEthernet>() == 12);

impl OvsKeyEthernet {
    /// Reads the struct from an `OVS_KEY_ATTR_ETHERNET` payload (exactly its size).
    pub fn read(bytes: &[u8]) -> Option<OvsKeyEthernet> {
        (bytes.len() == 12).then(|| OvsKeyEthernet {
            eth_src: bytes[0..6].try_into().expect("6 bytes"),
            eth_dst: bytes[6..12].try_into().expect("6 bytes"),
        })
    }
}

/// `struct ovs_key_ipv4` (addresses in network byte order, as on the wire).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsKeyIpv4 {
    /// `ipv4_src`.
    pub ipv4_src: [u8; 4],
    /// `ipv4_dst`.
    pub ipv4_dst: [u8; 4],
    /// `ipv4_proto`.
    pub ipv4_proto: u8,
    /// `ipv4_tos`.
    pub ipv4_tos: u8,
    /// `ipv4_ttl`.
    pub ipv4_ttl: u8,
    /// `ipv4_frag`: `OVS_FRAG_TYPE_*`.
    pub ipv4_frag: u8,
}
const _: () = assert!(mem::size_of::<OvsKeyIpv4>() == 12);

impl OvsKeyIpv4 {
    /// Reads the struct from an `OVS_KEY_ATTR_IPV4` payload (exactly its size).
    pub fn read(bytes: &[u8]) -> Option<OvsKeyIpv4> {
        (bytes.len() == 12).then(|| OvsKeyIpv4 {
            ipv4_src: bytes[0..4].try_into().expect("4 bytes"),
            ipv4_dst: bytes[4..8].try_into().expect("4 bytes"),
            ipv4_proto: bytes[8],
            ipv4_tos: bytes[9],
            ipv4_ttl: bytes[10],
            ipv4_frag: bytes[11],
        })
    }
}

/// `struct ovs_key_udp` and `struct ovs_key_tcp` (one layout: two big-endian ports).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OvsKeyPorts {
    /// `udp_src` / `tcp_src`, big-endian.
    pub src: [u8; 2],
    /// `udp_dst` / `tcp_dst`, big-endian.
    pub dst: [u8; 2],
}
const _: () = assert!(mem::size_of::<OvsKeyPorts>() == 4);

impl OvsKeyPorts {
    /// Reads the struct from an `OVS_KEY_ATTR_UDP` or `_TCP` payload (exactly its size).
    pub fn read(bytes: &[u8]) -> Option<OvsKeyPorts> {
        (bytes.len() == 4).then(|| OvsKeyPorts {
            src: [bytes[0], bytes[1]],
            dst: [bytes[2], bytes[3]],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    // Expected values are those of include/uapi/linux/openvswitch.h (enum positions, #defines and
    // the C layout of each struct).
    #[test]
    fn command_and_attribute_numbers_match_the_header() {
        assert_eq!((cmd::NEW, cmd::DEL, cmd::GET, cmd::SET), (1, 2, 3, 4));
        assert_eq!(
            (packet_cmd::MISS, packet_cmd::ACTION, packet_cmd::EXECUTE),
            (1, 2, 3)
        );
        assert_eq!(
            [
                dp_attr::NAME,
                dp_attr::UPCALL_PID,
                dp_attr::STATS,
                dp_attr::MEGAFLOW_STATS,
                dp_attr::USER_FEATURES,
                dp_attr::PER_CPU_PIDS
            ],
            [1, 2, 3, 4, 5, 8]
        );
        assert_eq!(
            [
                dp_feature::UNALIGNED,
                dp_feature::VPORT_PIDS,
                dp_feature::TC_RECIRC_SHARING,
                dp_feature::DISPATCH_UPCALL_PER_CPU
            ],
            [1, 2, 4, 8]
        );
        assert_eq!(
            [
                vport_attr::PORT_NO,
                vport_attr::TYPE,
                vport_attr::NAME,
                vport_attr::UPCALL_PID,
                vport_attr::STATS,
                vport_attr::IFINDEX
            ],
            [1, 2, 3, 5, 6, 8]
        );
        assert_eq!((vport_type::NETDEV, vport_type::INTERNAL), (1, 2));
        assert_eq!(
            [
                flow_attr::KEY,
                flow_attr::ACTIONS,
                flow_attr::STATS,
                flow_attr::MASK
            ],
            [1, 2, 3, 7]
        );
        assert_eq!(
            [
                packet_attr::PACKET,
                packet_attr::KEY,
                packet_attr::ACTIONS,
                packet_attr::USERDATA,
                packet_attr::MRU,
                packet_attr::LEN,
                packet_attr::HASH
            ],
            [1, 2, 3, 4, 9, 10, 11]
        );
        assert_eq!(
            [
                key_attr::ENCAP,
                key_attr::PRIORITY,
                key_attr::IN_PORT,
                key_attr::ETHERNET,
                key_attr::VLAN,
                key_attr::ETHERTYPE,
                key_attr::IPV4,
                key_attr::IPV6,
                key_attr::TCP,
                key_attr::UDP,
                key_attr::ICMP,
                key_attr::ARP,
                key_attr::SKB_MARK,
                key_attr::RECIRC_ID,
                key_attr::CT_STATE
            ],
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 20, 22]
        );
        assert_eq!((action_attr::OUTPUT, action_attr::USERSPACE), (1, 2));
        assert_eq!((userspace_attr::PID, userspace_attr::USERDATA), (1, 2));
        assert_eq!((DATAPATH_VERSION, VERSION, OVSP_LOCAL), (2, 1, 0));
    }

    #[test]
    fn struct_layouts_match_the_header() {
        assert_eq!(offset_of!(OvsDpStats, n_hit), 0);
        assert_eq!(offset_of!(OvsDpStats, n_missed), 8);
        assert_eq!(offset_of!(OvsDpStats, n_lost), 16);
        assert_eq!(offset_of!(OvsDpStats, n_flows), 24);
        assert_eq!(offset_of!(OvsVportStats, rx_bytes), 16);
        assert_eq!(offset_of!(OvsVportStats, tx_dropped), 56);
        assert_eq!(offset_of!(OvsFlowStats, n_bytes), 8);
        assert_eq!(offset_of!(OvsKeyEthernet, eth_dst), 6);
        assert_eq!(offset_of!(OvsKeyIpv4, ipv4_dst), 4);
        assert_eq!(offset_of!(OvsKeyIpv4, ipv4_proto), 8);
        assert_eq!(offset_of!(OvsKeyIpv4, ipv4_frag), 11);
        assert_eq!(offset_of!(OvsKeyPorts, dst), 2);
    }

    #[test]
    fn readers_take_fields_at_the_header_offsets() {
        let mut stats = Vec::new();
        for v in [7u64, 8, 9, 10] {
            stats.extend_from_slice(&v.to_ne_bytes());
        }
        let s = OvsDpStats::read(&stats).unwrap();
        assert_eq!((s.n_hit, s.n_missed, s.n_lost, s.n_flows), (7, 8, 9, 10));
        assert_eq!(OvsDpStats::read(&stats[..31]), None);
        let ip = OvsKeyIpv4::read(&[10, 0, 0, 1, 10, 0, 0, 2, 17, 0, 64, 0]).unwrap();
        assert_eq!(
            (ip.ipv4_dst, ip.ipv4_proto, ip.ipv4_ttl),
            ([10, 0, 0, 2], 17, 64)
        );
        assert_eq!(OvsKeyIpv4::read(&[0; 11]), None);
        let eth = OvsKeyEthernet::read(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]).unwrap();
        assert_eq!(eth.eth_dst, [7, 8, 9, 10, 11, 12]);
        assert_eq!(
            OvsHeader::read(&OvsHeader { dp_ifindex: 9 }.to_bytes())
                .unwrap()
                .dp_ifindex,
            9
        );
    }
}
