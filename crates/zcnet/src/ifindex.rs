//! [`IfIndex`]: a network interface's index, as every module takes and gives it.

use std::fmt;

/// The index of a network interface in its network namespace (what `if_nametoindex(3)` returns
/// and `ip link` prints first): [`crate::xdp::interface_index`] looks one up by name, an OVS
/// datapath's internal device has one ([`crate::ovs::Datapath::ifindex`]), a queue lease records
/// one ([`crate::queue_lease::Record::ifindex`]).
///
/// ```
/// use zcnet::IfIndex;
///
/// let lo = zcnet::xdp::interface_index("lo")?;
/// assert_eq!(lo, IfIndex::new(lo.get()));
/// assert_eq!(lo.to_string(), lo.get().to_string());
/// # Ok::<(), zcnet::xdp::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IfIndex(u32);

impl IfIndex {
    /// Interface `index` (the kernel numbers interfaces from 1).
    pub const fn new(index: u32) -> IfIndex {
        IfIndex(index)
    }

    /// The index as the kernel's calls take it.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The index in an OVS `ovs_header`, which carries it as a C `int` (an index is positive, so
    /// it fits).
    pub(crate) fn from_ovs(dp_ifindex: i32) -> IfIndex {
        IfIndex(dp_ifindex as u32)
    }

    /// The index as an OVS `ovs_header` carries it.
    pub(crate) fn to_ovs(self) -> i32 {
        self.0 as i32
    }
}

impl fmt::Display for IfIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<IfIndex> for u32 {
    fn from(index: IfIndex) -> u32 {
        index.0
    }
}
