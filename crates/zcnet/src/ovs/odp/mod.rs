//! Flows in Open vSwitch's own datapath flow syntax, the text `ovs-dpctl dump-flows` prints and
//! `ovs-dpctl add-flow` reads: `KEY, packets:N, bytes:N, used:T, actions:ACTIONS`. zcnet writes and
//! reads it with its own printer and parser, so that a line can pass from one tool to the other.
//!
//! The netlink side is the kernel's (include/uapi/linux/openvswitch.h): a flow is its key attributes
//! (`OVS_FLOW_ATTR_KEY`), their mask (`OVS_FLOW_ATTR_MASK`, absent for an exact match) and its
//! actions (`OVS_FLOW_ATTR_ACTIONS`); the kernel keeps and dumps the key masked.

mod action;
mod key;
mod text;

use std::fmt;

pub use action::{format_actions, parse_actions};
pub use key::{format_key, parse_key};

/// Flow text zcnet could not read: where (a byte offset) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OdpParseError {
    /// Byte offset into the text.
    pub at: usize,
    /// What was wrong there.
    pub what: String,
}

impl OdpParseError {
    pub(crate) fn new(at: usize, what: impl Into<String>) -> OdpParseError {
        OdpParseError {
            at,
            what: what.into(),
        }
    }

    /// The same error, `by` bytes further into an enclosing text.
    pub(crate) fn shift(mut self, by: usize) -> OdpParseError {
        self.at += by;
        self
    }
}

impl fmt::Display for OdpParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flow text at byte {}: {}", self.at, self.what)
    }
}

impl std::error::Error for OdpParseError {}

crate::error::own_error!(OdpParseError, InvalidData);

/// A flow's match and actions as netlink attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpFlow {
    /// `OVS_KEY_ATTR_*` attributes.
    pub key: Vec<u8>,
    /// Their mask; `None` matches the key exactly.
    pub mask: Option<Vec<u8>>,
    /// `OVS_ACTION_ATTR_*` attributes; empty drops.
    pub actions: Vec<u8>,
}

impl DpFlow {
    /// Reads `KEY` and `ACTIONS` texts, or (with `actions` `None`) one line as `ovs-dpctl dump-flows`
    /// prints it: `KEY[, packets:…, bytes:…, used:…[, flags:…]], actions:ACTIONS`.
    pub fn parse(flow: &str, actions: Option<&str>) -> Result<DpFlow, OdpParseError> {
        let (key_text, actions_text, actions_at) = match actions {
            Some(a) => (flow, a, 0),
            None => {
                let i = flow
                    .find(", actions:")
                    .or_else(|| flow.find(",actions:"))
                    .ok_or_else(|| OdpParseError::new(flow.len(), "no `actions:` in the line"))?;
                let after = i + flow[i..].find(':').unwrap_or(0) + 1;
                (&flow[..i], &flow[after..], after)
            }
        };
        let key_text = match key_text.find(", packets:") {
            Some(i) => &key_text[..i],
            None => key_text,
        };
        let key_text = key_text
            .trim()
            .strip_prefix("ufid:")
            .map_or(key_text, |r| r.split_once(", ").map_or(r, |(_, k)| k));
        let (key, mask) = parse_key(key_text)?;
        let actions = parse_actions(actions_text).map_err(|e| e.shift(actions_at))?;
        Ok(DpFlow {
            key,
            mask: Some(mask),
            actions,
        })
    }

    /// The key as `ovs-dpctl dump-flows` prints it.
    pub fn key_text(&self) -> String {
        format_key(&self.key, self.mask.as_deref())
    }

    /// The actions as `ovs-dpctl dump-flows` prints them after `actions:`.
    pub fn actions_text(&self) -> String {
        format_actions(&self.actions)
    }
}

impl fmt::Display for DpFlow {
    /// `KEY, actions:ACTIONS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, actions:{}", self.key_text(), self.actions_text())
    }
}

/// TCP flags as `ovs-dpctl dump-flows` prints them after `flags:` (`S`, `F`, `.` for ACK, …).
pub fn tcp_flags_text(flags: u16) -> String {
    const LETTERS: [(u16, &str); 9] = [
        (0x002, "S"),
        (0x001, "F"),
        (0x008, "P"),
        (0x004, "R"),
        (0x020, "U"),
        (0x010, "."),
        (0x040, "E"),
        (0x080, "C"),
        (0x100, "N"),
    ];
    LETTERS
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, l)| *l)
        .collect()
}

#[cfg(test)]
mod tests;
