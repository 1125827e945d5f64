//! Registration of sockets with tokio's reactor (feature `tokio`).

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Registers a duplicate of `socket` (`F_DUPFD_CLOEXEC`) for `interest` with the current tokio
/// runtime's reactor; panics outside a runtime, as tokio's registration does.
///
/// The duplicate shares the socket's open file description, so epoll reports the socket's readiness
/// through it; owning it makes the registration independent of the owner of `socket`, which may
/// close its descriptor at any time. Dropping the returned `AsyncFd` deregisters and closes the
/// duplicate.
pub fn register(socket: BorrowedFd<'_>, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    let fd = socket.try_clone_to_owned()?;
    // SAFETY: `OwnedFd` owns an open descriptor that stays open, and is the one `as_raw_fd` returns,
    // until the `OwnedFd` is dropped — which only happens when the `AsyncFd` owning it is dropped or
    // gives it back with `into_inner`, as `register_with_interest` requires.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(io::Error::from)
}
