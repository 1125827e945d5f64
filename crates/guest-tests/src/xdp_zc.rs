//! The guest side of the AF_XDP zero-copy run (a kernel whose virtio-net binds XDP_ZEROCOPY): every
//! frame is checked against what the host-side peer sent or verifies what the guest sent.

use std::net::IpAddr;

use crate::outcome::Outcome;
use crate::{nic, wire};

/// Runs the zero-copy checks against the peer at `peer` over `iface`, then tells the peer to quit.
pub fn run(peer: IpAddr, iface: &str) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("xdp");
    // Two queue pairs: the burst lands on whichever queue the NIC's hash picks.
    nic::xdp_rxdrop(peer, iface, 2, true, 1, &mut outcome)?;
    nic::request(peer, wire::Request::Quit)?;
    Ok(outcome)
}
