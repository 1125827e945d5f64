//! Which kernel sockets a [`crate::tx::Sender`] owns, process-wide.
//!
//! A kernel socket has one MSG_ZEROCOPY id counter and one error queue, whatever number of
//! descriptors reach it (`try_clone`, `dup`). A sender numbers its sends from the counter's value
//! when it starts and releases a buffer when the completion of its id arrives, so a second sender on
//! the same socket would take ids the first one counts as its own, and each would read — and act on —
//! the other's completions. A sender therefore claims the socket before it looks at `SO_ZEROCOPY`:
//! the claim is taken under one lock, keyed by the socket's identity (the device and inode of its
//! sockfs inode, the same for every descriptor of it), and released when the sender is dropped. Only
//! the claim's holder reads the socket's error queue; [`crate::tx::errqueue::recv_errqueue`] refuses
//! a claimed socket under the same lock.
//!
//! Two sockets alive at once have different identities, except after the kernel's 32-bit inode
//! counter wrapped around during the older one's life: the newer one then reads as claimed, and its
//! sender copies (the safe direction).
//!
//! What a claim cannot see: other processes sharing the socket (a `fork`, a descriptor passed over
//! `SCM_RIGHTS`), and `MSG_ZEROCOPY` sends made on the socket through other code. Ids those take
//! shift the kernel's numbering; the first completion naming an id the sender never registered then
//! stops every release ([`crate::tx::CompletionTracker::unregistered_id`]).

use std::collections::BTreeSet;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, MutexGuard};

use crate::sys::socket::socket_identity;

/// The sockets claimed now, by identity (device, inode).
static CLAIMED: Mutex<BTreeSet<(u64, u64)>> = Mutex::new(BTreeSet::new());

fn claimed() -> MutexGuard<'static, BTreeSet<(u64, u64)>> {
    // The set stays consistent whatever panicked while holding it (one insert or remove).
    CLAIMED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why a socket could not be claimed.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Another sender holds the claim.
    InUse,
    /// The socket's identity could not be read (`fstat` failed).
    Identity(io::Error),
}

/// The claim on one socket, held by the sender that owns it; released on drop.
#[derive(Debug)]
pub(crate) struct Claim {
    id: (u64, u64),
}

impl Claim {
    /// Claims the socket behind `fd` for the caller, unless another claim holds it.
    pub(crate) fn take(fd: BorrowedFd<'_>) -> Result<Claim, Refused> {
        let id = socket_identity(fd).map_err(Refused::Identity)?;
        if claimed().insert(id) {
            Ok(Claim { id })
        } else {
            Err(Refused::InUse)
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        claimed().remove(&self.id);
    }
}

/// Runs `f` unless a sender has claimed the socket behind `fd`, holding the registry's lock
/// throughout so that no sender can claim the socket meanwhile. A claimed socket gives
/// `ResourceBusy`.
#[cfg(feature = "bench-internals")]
pub(crate) fn unless_claimed<T>(
    fd: BorrowedFd<'_>,
    f: impl FnOnce() -> io::Result<T>,
) -> io::Result<T> {
    let id = socket_identity(fd)?;
    let claimed = claimed();
    if claimed.contains(&id) {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            "a zcnet Sender owns this socket's error queue: read its completions through the sender \
             (poll_completions, flush)",
        ));
    }
    let result = f();
    drop(claimed);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn one_claim_per_socket_whatever_the_descriptor() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = a.try_clone().unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let claim = Claim::take(a.as_fd()).expect("a fresh socket");
        assert!(matches!(Claim::take(b.as_fd()), Err(Refused::InUse)));
        let kind = unless_claimed(b.as_fd(), || Ok(())).unwrap_err().kind();
        assert_eq!(kind, io::ErrorKind::ResourceBusy);
        let second = Claim::take(other.as_fd()).expect("another socket");
        assert_eq!(unless_claimed(a.as_fd(), || Ok(7)).ok(), None);
        drop(claim);
        assert_eq!(unless_claimed(b.as_fd(), || Ok(7)).unwrap(), 7);
        let again = Claim::take(b.as_fd()).expect("released on drop");
        drop((again, second));
    }
}
