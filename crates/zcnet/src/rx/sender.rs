//! Sender-side helpers that make a stream mappable by the receiver: segments that carry exactly one
//! page of payload, and records (headers) kept out of the page-aligned payload with `MSG_EOR`.
//!
//! `TCP_ZEROCOPY_RECEIVE` maps a page only when a received segment holds it whole and page-aligned.
//! With TCP timestamps (on by default) each segment carries 12 bytes of options, so an MSS of one page
//! plus 12 bytes leaves exactly one page of payload per segment. On a veth or NIC path the same is
//! reached with an MTU of 4148 (IPv4) or 4168 (IPv6) for 4 KiB pages.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};

use crate::sys::tcp_zc;

/// Bytes of TCP options in every segment of a connection with timestamps (RFC 7323: 10 + 2 padding).
pub const TIMESTAMP_OPTION_LEN: usize = 12;

/// The `TCP_MAXSEG` value that leaves exactly one page of payload per segment when timestamps are on.
pub fn page_payload_mss() -> i32 {
    (tcp_zc::page_size() + TIMESTAMP_OPTION_LEN) as i32
}

/// Sets `TCP_MAXSEG` to [`page_payload_mss`] on a socket that is not connected yet (a listener, whose
/// accepted sockets inherit it, or a socket about to connect).
pub fn set_page_mss(fd: BorrowedFd<'_>) -> io::Result<()> {
    tcp_zc::set_max_segment(fd, page_payload_mss())
}

/// Sets `TCP_MAXSEG` to `mss` bytes on a socket (before it connects, or on a listener whose accepted
/// sockets inherit it): the kernel then sends no segment with more payload.
#[cfg(feature = "bench-internals")]
pub fn set_mss(fd: BorrowedFd<'_>, mss: i32) -> io::Result<()> {
    tcp_zc::set_max_segment(fd, mss)
}

/// The MSS a connected socket sends with: the payload per segment, TCP options excluded.
#[cfg(feature = "bench-internals")]
pub fn current_mss(fd: BorrowedFd<'_>) -> io::Result<usize> {
    tcp_zc::max_segment(fd).map(|mss| mss as usize)
}

/// Sends all of `record` and ends it with `MSG_EOR`, so that the kernel starts the next bytes in a new
/// segment: a small header sent this way does not shift the page-aligned payload after it.
#[cfg(feature = "bench-internals")]
pub fn send_record(stream: &TcpStream, record: &[u8]) -> io::Result<()> {
    let mut rest = record;
    while !rest.is_empty() {
        let n = tcp_zc::send(stream.as_fd(), rest, libc::MSG_EOR | libc::MSG_NOSIGNAL)?;
        rest = &rest[n..];
    }
    Ok(())
}

/// A connected pair on `ip` (e.g. loopback) whose segments carry one page of payload each: a listener
/// with [`set_page_mss`] on an ephemeral port, and a plain client. Returns (client, server).
pub fn connect_page_mss(ip: IpAddr) -> io::Result<(TcpStream, TcpStream)> {
    let listener = bind_page_mss(SocketAddr::new(ip, 0))?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    Ok((client, server))
}

/// A listener on `addr` whose connections carry one page of payload per segment in both directions:
/// the kernel announces the listener's `TCP_MAXSEG` in its SYN-ACK (the peer sends no larger
/// segments) and accepted sockets inherit it.
pub fn bind_page_mss(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    set_page_mss(listener.as_fd())?;
    Ok(listener)
}
