//! Raw AF_PACKET sockets bound to one interface: how the Open vSwitch client injects frames on a
//! datapath's local port. (The packet rings benchmarks compare AF_XDP with live in testnet.)

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// Opens a raw packet socket for `protocol` (an `ETH_P_*` value, host order) bound to interface
/// `ifindex`. Needs CAP_NET_RAW.
pub(crate) fn open(ifindex: u32, protocol: u16) -> io::Result<OwnedFd> {
    let proto_be = protocol.to_be();
    let fd = super::socket::socket(libc::AF_PACKET, libc::SOCK_RAW, proto_be as libc::c_int)?;
    // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto_be;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` is a live `sockaddr_ll` and its exact size is passed.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_ll).cast(),
        mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
    ))?;
    Ok(fd)
}

/// Sends one frame on a bound packet socket.
pub(crate) fn send(fd: BorrowedFd<'_>, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: `frame` is readable for its length during the call.
    syscall!(send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0)).map(|n| n as usize)
}
