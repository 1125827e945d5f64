//! Installed flows as a dump describes them, and the actions a dump can leave out.
//!
//! Kernel behaviour relied on (net/openvswitch/datapath.c and flow_netlink.c, Linux 6.12):
//! - A flow's message in a dump carries `OVS_FLOW_ATTR_ACTIONS`, empty for a flow that drops,
//!   unless the actions do not fit the dump's buffer even as its first message
//!   (`ovs_flow_cmd_fill_actions`): a flow may hold up to 32 KiB of actions (`MAX_ACTIONS_BUFSIZE`)
//!   while a dump buffer holds at most 32 KiB less the skb's overhead, so a long action list is
//!   left out and the message goes without the attribute. Such a flow's actions are unknown, not
//!   empty.
//! - `OVS_FLOW_CMD_GET` of one flow sizes its reply for that flow's actions
//!   (`ovs_flow_cmd_msg_size`), so it always carries them. It finds the flow by
//!   `OVS_FLOW_ATTR_UFID` or by the unmasked key (`ovs_flow_tbl_lookup_ufid`,
//!   `ovs_flow_tbl_lookup_exact`) — what a dump names each flow by: its UFID when it was installed
//!   with one, else its unmasked key (`ovs_nla_put_identifier`).

use crate::sys::netlink::{Attributes, Reply};
use crate::sys::ovs::{OvsFlowStats, flow_attr};

use super::client::reply_body;
use super::odp::{DpFlow, format_actions, format_key, tcp_flags_text};

/// Why a dumped flow's actions are unknown before they are read again.
pub(crate) const LEFT_OUT: &str = "left out of the dump (too long for its message)";

/// A flow's actions as zcnet read them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlowActions {
    /// Carried by the dump (empty: the flow drops).
    Dumped(Vec<u8>),
    /// Left out of the dump, then read by `OVS_FLOW_CMD_GET` of that flow.
    Refetched(Vec<u8>),
    /// Left out of the dump and not read since: why (the `OVS_FLOW_CMD_GET` error, when it failed).
    Unknown(String),
}

impl FlowActions {
    /// The action attributes when they are known (empty: drop), `None` when they are not.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            FlowActions::Dumped(a) | FlowActions::Refetched(a) => Some(a),
            FlowActions::Unknown(_) => None,
        }
    }
}

/// An installed flow as a dump describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowInfo {
    /// The flow's key attributes: its unmasked key when the dump names the flow by it, else (a
    /// flow with a UFID) the masked key.
    pub key: Vec<u8>,
    /// Its mask attributes (`None`: the dump carried none, an exact match).
    pub mask: Option<Vec<u8>>,
    /// Its action attributes, or why they are unknown.
    pub actions: FlowActions,
    /// Packets and bytes that hit it.
    pub stats: OvsFlowStats,
    /// `CLOCK_MONOTONIC` milliseconds when a packet last hit it (`None`: never).
    pub used_ms: Option<u64>,
    /// TCP flags of the packets that hit it, OR'd.
    pub tcp_flags: u8,
    /// The id it was installed with (`OVS_FLOW_ATTR_UFID`), if any.
    pub ufid: Option<Vec<u8>>,
}

impl FlowInfo {
    /// Its match and actions; `None` when the actions are unknown.
    pub fn flow(&self) -> Option<DpFlow> {
        Some(DpFlow {
            key: self.key.clone(),
            mask: self.mask.clone(),
            actions: self.actions.bytes()?.to_vec(),
        })
    }

    /// Its match as `ovs-dpctl dump-flows` prints it.
    pub fn key_text(&self) -> String {
        format_key(&self.key, self.mask.as_deref())
    }

    /// Its actions as `ovs-dpctl dump-flows` prints them after `actions:`, or, when they are
    /// unknown, `unknown(WHY)` — which no parser reads as actions, so that a flow of unknown
    /// actions is never taken for one that drops.
    pub fn actions_text(&self) -> String {
        match &self.actions {
            FlowActions::Dumped(a) | FlowActions::Refetched(a) => format_actions(a),
            FlowActions::Unknown(why) => format!("unknown({why})"),
        }
    }

    /// The line `ovs-dpctl dump-flows` prints for it, `used` measured from `now_ms`
    /// (`CLOCK_MONOTONIC` milliseconds): `KEY, packets:N, bytes:N, used:T[, flags:F], actions:A`.
    pub fn line(&self, now_ms: u64) -> String {
        let used = match self.used_ms {
            Some(t) => format!("{:.3}s", now_ms.saturating_sub(t) as f64 / 1000.0),
            None => "never".into(),
        };
        let flags = if self.tcp_flags == 0 {
            String::new()
        } else {
            format!(", flags:{}", tcp_flags_text(self.tcp_flags.into()))
        };
        format!(
            "{}, packets:{}, bytes:{}, used:{used}{flags}, actions:{}",
            self.key_text(),
            self.stats.n_packets,
            self.stats.n_bytes,
            self.actions_text()
        )
    }
}

/// Reads one flow message (a dump's or a GET's); a message without `OVS_FLOW_ATTR_ACTIONS` gives
/// [`FlowActions::Unknown`] ([`LEFT_OUT`]).
pub(crate) fn flow_info(reply: &Reply) -> Option<FlowInfo> {
    let (_, attrs) = reply_body(reply)?;
    let mut flow = FlowInfo {
        key: Vec::new(),
        mask: None,
        actions: FlowActions::Unknown(LEFT_OUT.into()),
        stats: OvsFlowStats::default(),
        used_ms: None,
        tcp_flags: 0,
        ufid: None,
    };
    for (ty, p) in Attributes::new(attrs).map_while(Result::ok) {
        match ty {
            flow_attr::KEY => flow.key = p.to_vec(),
            flow_attr::MASK => flow.mask = Some(p.to_vec()),
            flow_attr::ACTIONS => flow.actions = FlowActions::Dumped(p.to_vec()),
            flow_attr::STATS => flow.stats = OvsFlowStats::read(p)?,
            flow_attr::USED => flow.used_ms = Some(u64::from_ne_bytes(p.try_into().ok()?)),
            flow_attr::TCP_FLAGS => flow.tcp_flags = *p.first()?,
            flow_attr::UFID => flow.ufid = Some(p.to_vec()),
            _ => {}
        }
    }
    Some(flow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::netlink::{NLA_F_NESTED, Request, messages};
    use crate::sys::ovs::{OvsHeader, action_attr, cmd};

    /// A flow message as the kernel builds it, with `fill` adding its attributes.
    fn reply(fill: impl FnOnce(&mut Request)) -> Reply {
        let mut req =
            Request::new(0x21, 0, cmd::GET, 1).header(&OvsHeader { dp_ifindex: 7 }.to_bytes());
        req.attr(flow_attr::KEY | NLA_F_NESTED, &[]);
        fill(&mut req);
        let msg = req.finish(1).unwrap();
        let payload = messages(&msg).unwrap()[0].payload.to_vec();
        Reply {
            cmd: cmd::GET,
            payload,
        }
    }

    #[test]
    fn a_dump_message_without_actions_reads_as_unknown_not_drop() {
        let flow = flow_info(&reply(|_| {})).unwrap();
        assert_eq!(flow.actions, FlowActions::Unknown(LEFT_OUT.into()));
        assert_eq!(flow.actions.bytes(), None);
        assert_eq!(flow.flow(), None);
        assert!(
            flow.line(0)
                .ends_with(&format!("actions:unknown({LEFT_OUT})")),
            "{}",
            flow.line(0)
        );
        assert!(crate::ovs::parse_actions(&flow.actions_text()).is_err());
    }

    #[test]
    fn an_empty_action_list_reads_as_drop() {
        let flow = flow_info(&reply(|r| {
            r.attr(flow_attr::ACTIONS | NLA_F_NESTED, &[]);
        }))
        .unwrap();
        assert_eq!(flow.actions, FlowActions::Dumped(Vec::new()));
        assert!(flow.line(0).ends_with("actions:drop"), "{}", flow.line(0));
        assert_eq!(flow.flow().map(|f| f.actions), Some(Vec::new()));
    }

    #[test]
    fn dumped_actions_read_as_given() {
        let flow = flow_info(&reply(|r| {
            r.nested(flow_attr::ACTIONS, |r| {
                r.u32(action_attr::OUTPUT, 3);
            });
        }))
        .unwrap();
        assert_eq!(flow.actions.bytes().map(format_actions), Some("3".into()));
        assert!(flow.line(0).ends_with("actions:3"), "{}", flow.line(0));
    }
}
