//! AF_PACKET sockets bound to one interface: how the Open vSwitch client injects frames on a
//! datapath's local port (the rings and batches the benches compare AF_XDP with are in
//! `sys::packet`).
//!
//! Kernel behaviour relied on: a packet socket bound to an interface index sends each frame as
//! given, link-layer header included (`SOCK_RAW`).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use crate::IfIndex;

/// Opens a raw packet socket for `protocol` (an `ETH_P_*` value, host order) bound to interface
/// `ifindex`. Needs CAP_NET_RAW.
pub fn open(ifindex: IfIndex, protocol: u16) -> io::Result<OwnedFd> {
    let proto_be = protocol.to_be();
    let fd = super::socket::socket(libc::AF_PACKET, libc::SOCK_RAW, proto_be as libc::c_int)?;
    // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto_be;
    addr.sll_ifindex = ifindex.get() as i32;
    // SAFETY: `addr` is a live `sockaddr_ll` and its exact size is passed.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_ll).cast(),
        mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
    ))?;
    Ok(fd)
}

/// Sends one frame on a bound packet socket.
pub fn send(fd: BorrowedFd<'_>, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: `frame` is readable for its length during the call.
    syscall!(send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0)).map(|n| n as usize)
}
