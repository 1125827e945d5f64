//! The Open vSwitch commands: `zcnet switch` ([`switch`]) and `zcnet dp` ([`dp`]).

pub(crate) mod dp;
pub(crate) mod switch;
