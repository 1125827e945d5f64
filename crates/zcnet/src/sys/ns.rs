//! Network namespaces: moving the calling thread into another namespace (`setns(2)`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Moves the calling thread into the network namespace that `ns` refers to (an open
/// `/run/netns/NAME` or `/proc/PID/ns/net`). Only this thread changes namespace; sockets it
/// creates afterwards live there. Needs CAP_SYS_ADMIN.
pub fn enter_network_namespace(ns: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `ns` is a valid open descriptor for the duration of the call.
    syscall!(setns(ns.as_raw_fd(), libc::CLONE_NEWNET)).map(drop)
}
