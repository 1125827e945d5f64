//! The datapath's local port (port 0, `OVSP_LOCAL`): its internal device, brought up, with a raw packet
//! socket on it. A frame sent there enters the datapath as if received on port 0 — a load generator
//! that needs no other device.

use std::os::fd::OwnedFd;

use crate::sys;

use super::error::{Call, OvsError};

/// A packet socket on a datapath's internal device.
#[derive(Debug)]
pub struct LocalPort {
    fd: OwnedFd,
}

impl LocalPort {
    /// Brings device `name` (the datapath's internal device, `ifindex`) up and opens a raw packet
    /// socket on it for sending. Needs CAP_NET_ADMIN and CAP_NET_RAW.
    pub(crate) fn open(name: &str, ifindex: i32) -> Result<LocalPort, OvsError> {
        sys::link::set_up(name).call("SIOCSIFFLAGS IFF_UP on the datapath's device")?;
        // Protocol 0: the socket sends only and receives nothing.
        let fd = sys::packet_socket::open(crate::IfIndex::from_ovs(ifindex), 0)
            .call("AF_PACKET socket on the local port")?;
        Ok(LocalPort { fd })
    }

    /// Sends one Ethernet frame into the datapath through its local port.
    pub fn send(&self, frame: &[u8]) -> Result<(), OvsError> {
        use std::os::fd::AsFd;
        sys::packet_socket::send(self.fd.as_fd(), frame)
            .call("send on the local port")
            .map(drop)
    }
}
