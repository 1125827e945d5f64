//! Why a zero-copy path is not used: one typed reason shared by send, receive, AF_XDP and the probe.
//!
//! Every mechanism in zcnet can end up copying: the user asked for it, the kernel refused a call
//! (an errno), or the kernel accepted but what it did shows no benefit (every completion copied, no
//! page mapped). A [`Fallback`] says which, names the refused call and its errno when there is one,
//! and says what the user can do about it.

use std::borrow::Cow;
use std::fmt;
use std::io;

use crate::sys::errno::errno_name;

/// What made zcnet copy instead of using zero-copy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The caller asked for copying (a copy mode was chosen).
    Requested,
    /// The kernel refused a call the zero-copy path needs.
    Refused {
        /// The refused call, as the kernel's documentation names it (`setsockopt SO_ZEROCOPY`).
        call: &'static str,
        /// The errno it returned.
        errno: i32,
    },
    /// The kernel accepted, but what it did shows no benefit (for example: every completion said
    /// copied, or none of the bytes received could be mapped).
    Observed(Cow<'static, str>),
    /// Another zcnet sender in this process owns the socket, reached through another descriptor of it
    /// (`try_clone`, `dup`): one socket has one completion-id counter and one error queue, so only
    /// one sender may send it zero-copy and read its completions.
    SocketInUse,
    /// `SO_ZEROCOPY` was already on and sends made before may have taken completion ids (the kernel
    /// counts them per socket and never resets the count), so zcnet cannot number its own; the
    /// text says what was found.
    UnknownIds(Cow<'static, str>),
    /// zcnet did not ask the kernel: on what was asked for, the kernel is known to make the path
    /// cost more than the fallback; the text says how.
    Declined(Cow<'static, str>),
}

/// Why a zero-copy path is not used, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    cause: Cause,
    remedy: Cow<'static, str>,
}

impl Fallback {
    /// The caller chose to copy; `remedy` says how to choose zero-copy instead.
    pub fn requested(remedy: impl Into<Cow<'static, str>>) -> Fallback {
        Fallback {
            cause: Cause::Requested,
            remedy: remedy.into(),
        }
    }

    /// The kernel refused `call` with `errno`.
    pub fn refused(
        call: &'static str,
        errno: i32,
        remedy: impl Into<Cow<'static, str>>,
    ) -> Fallback {
        Fallback {
            cause: Cause::Refused { call, errno },
            remedy: remedy.into(),
        }
    }

    /// The kernel accepted, but `what` was observed instead of a benefit.
    pub fn observed(
        what: impl Into<Cow<'static, str>>,
        remedy: impl Into<Cow<'static, str>>,
    ) -> Fallback {
        Fallback {
            cause: Cause::Observed(what.into()),
            remedy: remedy.into(),
        }
    }

    /// Another sender owns the socket (see [`Cause::SocketInUse`]).
    pub fn socket_in_use(remedy: impl Into<Cow<'static, str>>) -> Fallback {
        Fallback {
            cause: Cause::SocketInUse,
            remedy: remedy.into(),
        }
    }

    /// The socket's completion ids are unknown: `what` says why (see [`Cause::UnknownIds`]).
    pub fn unknown_ids(
        what: impl Into<Cow<'static, str>>,
        remedy: impl Into<Cow<'static, str>>,
    ) -> Fallback {
        Fallback {
            cause: Cause::UnknownIds(what.into()),
            remedy: remedy.into(),
        }
    }

    /// zcnet did not use the path because of what the kernel is known to do here (see
    /// [`Cause::Declined`]).
    pub fn declined(
        why: impl Into<Cow<'static, str>>,
        remedy: impl Into<Cow<'static, str>>,
    ) -> Fallback {
        Fallback {
            cause: Cause::Declined(why.into()),
            remedy: remedy.into(),
        }
    }

    /// What made zcnet copy.
    pub fn cause(&self) -> &Cause {
        &self.cause
    }

    /// The errno, when the kernel refused a call.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self.cause {
            Cause::Refused { errno, .. } => Some(errno),
            _ => None,
        }
    }

    /// The kind of `io::Error` this converts to: the refused call's errno's kind, `Unsupported`
    /// otherwise (the path is not available here, as configured).
    pub fn kind(&self) -> io::ErrorKind {
        match self.raw_os_error() {
            Some(errno) => io::Error::from_raw_os_error(errno).kind(),
            None => io::ErrorKind::Unsupported,
        }
    }

    /// What the user can do about it.
    pub fn remedy(&self) -> &str {
        &self.remedy
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Cause::Requested => write!(f, "copy requested")?,
            Cause::Refused { call, errno } => write!(f, "{call}: {}", errno_name(*errno))?,
            Cause::Observed(what) | Cause::UnknownIds(what) | Cause::Declined(what) => {
                write!(f, "{what}")?
            }
            Cause::SocketInUse => write!(f, "another zcnet sender owns this socket")?,
        }
        if self.remedy.is_empty() {
            Ok(())
        } else {
            write!(f, " ({})", self.remedy)
        }
    }
}

/// A fallback is an error where a zero-copy path was required (`register_pool(&pool)?`); where it
/// is a reason to report, it is read through the `zerocopy_status` of each sender, receiver and
/// AF_XDP socket. Its `Display` is the whole reason, so it has no `source`.
impl std::error::Error for Fallback {}

crate::error::into_io_error!(Fallback);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_reads_as_call_errno_and_remedy() {
        let refused = Fallback::refused(
            "setsockopt SO_ZEROCOPY",
            libc::EOPNOTSUPP,
            "this socket type has no MSG_ZEROCOPY: sending by copy",
        );
        assert_eq!(
            refused.to_string(),
            "setsockopt SO_ZEROCOPY: EOPNOTSUPP (this socket type has no MSG_ZEROCOPY: sending by copy)"
        );
        assert_eq!(refused.raw_os_error(), Some(libc::EOPNOTSUPP));

        let requested = Fallback::requested("use --mode zerocopy");
        assert_eq!(
            requested.to_string(),
            "copy requested (use --mode zerocopy)"
        );
        assert_eq!(requested.raw_os_error(), None);

        let observed = Fallback::observed("every completion copied", "");
        assert_eq!(observed.to_string(), "every completion copied");
        assert_eq!(
            observed.cause(),
            &Cause::Observed("every completion copied".into())
        );

        let declined = Fallback::declined("pool on huge pages", "build it without");
        assert_eq!(
            declined.to_string(),
            "pool on huge pages (build it without)"
        );
        assert_eq!(declined.raw_os_error(), None);
    }
}
