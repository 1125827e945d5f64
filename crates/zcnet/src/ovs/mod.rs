//! Open vSwitch kernel datapath client: datapaths, vports, flows, executed packets and upcalls over
//! the `ovs_datapath`, `ovs_vport`, `ovs_flow` and `ovs_packet` generic netlink families.
//!
//! Kernel behaviour relied on (net/openvswitch, include/uapi/linux/openvswitch.h):
//! - A packet entering a vport is matched against the datapath's flow table; a hit runs the flow's
//!   actions in the kernel (`n_hit`), a miss is queued to user space as an `OVS_PACKET_CMD_MISS` upcall
//!   (`n_missed`) or dropped when the socket's queue is full (`n_lost`).
//! - Since Linux 3.12 the upcall is built with `skb_zerocopy()` — the packet's pages are attached to the
//!   netlink message, not copied — but only for a datapath created with the `OVS_DP_F_UNALIGNED` user
//!   feature, because the packet attribute then ends unpadded. [`UpcallSocket`] parses either form and
//!   hands out the packet as a slice of its receive buffer.
//! - A flow installed without `OVS_FLOW_ATTR_MASK` matches its key exactly; the key of an upcall can be
//!   installed unchanged. `OVS_PACKET_CMD_EXECUTE` runs actions on a packet sent from user space.
//! - Deleting a datapath deletes its vports and flows; devices that were vports return to the stack.
//!   A request on its ifindex then fails with `ENODEV`, a dump too (its `NLMSG_DONE` carries the
//!   error): [`OvsErrorKind::DatapathGone`].
//! - A flow dump leaves out the actions of a flow too long for its message; [`Datapath::flows`]
//!   reads them again (see [`FlowActions`]).
//! - Resolving the families works for every user; changing anything needs CAP_NET_ADMIN.

mod client;
mod datapath;
mod error;
mod flow_dump;
mod key;
mod local_port;
mod odp;
mod switch;
mod switch_table;
mod upcall;

#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use datapath::monotonic_ms;
pub use datapath::{
    Action, Datapath, DatapathConfig, DatapathInfo, Dispatch, MaskStats, VportInfo, datapaths,
    remove_stale, set_user_features,
};
pub use error::{OvsError, OvsErrorKind};
pub use flow_dump::{FlowActions, FlowInfo};
pub use key::{FlowKey, Ports};
pub use local_port::LocalPort;
pub use odp::{DpFlow, OdpParseError, format_actions, format_key, parse_actions, parse_key};
pub use switch::{LearningSwitch, SwitchCounters, SwitchDispatch, SwitchEvent, TableSizes};
pub use switch_table::SwitchLimits;
pub use upcall::{
    ParseError, Received, Upcall, UpcallCounters, UpcallKind, UpcallSocket, parse_upcall,
};

pub use crate::sys::ovs::{OvsDpStats, OvsFlowStats, OvsKeyEthernet, OvsKeyIpv4, OvsVportStats};
