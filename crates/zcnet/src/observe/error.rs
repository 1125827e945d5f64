//! Why the observer could not start or read its counters: the step, the errno, and what to do.

use std::fmt;
use std::io;

use crate::sys::errno::error_name;

/// A failed start or read of an [`Observer`](super::Observer).
#[derive(Debug)]
#[non_exhaustive]
pub enum ObserveError {
    /// The process lacks capabilities the kernel requires to load tracing programs and open
    /// tracepoints: CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, which implies both; root has all).
    Capabilities {
        /// The names of the missing capabilities.
        missing: Vec<&'static str>,
    },
    /// tracefs, where the kernel describes its tracepoints, is not mounted.
    NoTracefs,
    /// What was asked for cannot be seen on this kernel.
    NotSeen {
        /// What.
        what: &'static str,
        /// Why.
        why: String,
    },
    /// The kernel has no AF_XDP socket diagnostics (`CONFIG_XDP_SOCKETS_DIAG`, module `xsk_diag`):
    /// the `sock_diag` dump for `AF_XDP` was refused with `ENOENT` (or `EOPNOTSUPP`), so AF_XDP
    /// socket counters ([`xdp_sockets`](super::xdp_sockets)) cannot be read.
    NoXdpDiag,
    /// A step failed: reading a tracepoint's description, loading a program (with the verifier's
    /// log), attaching it, or a map operation.
    Kernel {
        /// What was being done (`load the program for raw_tracepoint:sys_exit`).
        step: String,
        /// The kernel's error.
        source: io::Error,
        /// The verifier's log when a program was refused (empty otherwise).
        verifier_log: String,
    },
}

impl ObserveError {
    /// The errno, when the kernel refused a step.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            ObserveError::Kernel { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The kind of failure: `PermissionDenied` without the capabilities, `NotFound` without
    /// tracefs, `Unsupported` for what this kernel cannot show (AF_XDP counters without xsk_diag
    /// included), else the kernel error's kind.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            ObserveError::Capabilities { .. } => io::ErrorKind::PermissionDenied,
            ObserveError::NoTracefs => io::ErrorKind::NotFound,
            ObserveError::NotSeen { .. } | ObserveError::NoXdpDiag => io::ErrorKind::Unsupported,
            ObserveError::Kernel { source, .. } => source.kind(),
        }
    }

    pub(super) fn kernel(step: impl Into<String>, source: io::Error) -> ObserveError {
        ObserveError::Kernel {
            step: step.into(),
            source,
            verifier_log: String::new(),
        }
    }
}

impl fmt::Display for ObserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObserveError::Capabilities { missing } => write!(
                f,
                "observing needs CAP_BPF and CAP_PERFMON (or root); this process lacks {}: \
                 run as root or grant them (setcap cap_bpf,cap_perfmon+ep <program>)",
                missing.join(" and ")
            ),
            ObserveError::NoTracefs => write!(
                f,
                "tracefs is not mounted, so the kernel's tracepoints cannot be read: mount it with \
                 `mount -t tracefs nodev /sys/kernel/tracing`"
            ),
            ObserveError::NotSeen { what, why } => write!(f, "cannot see the {what}: {why}"),
            ObserveError::NoXdpDiag => write!(
                f,
                "the kernel has no xsk_diag (CONFIG_XDP_SOCKETS_DIAG), so AF_XDP socket counters \
                 cannot be read: modprobe xsk_diag (or build the kernel with it)"
            ),
            ObserveError::Kernel {
                step,
                source,
                verifier_log,
            } => {
                match source.raw_os_error() {
                    Some(_) => write!(f, "could not {step}: {} ({source})", error_name(source))?,
                    None => write!(f, "could not {step}: {source}")?,
                }
                if matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
                    write!(f, " (needs CAP_BPF and CAP_PERFMON, or root)")?;
                }
                if !verifier_log.is_empty() {
                    write!(f, "\nverifier log:\n{verifier_log}")?;
                }
                Ok(())
            }
        }
    }
}

/// The kernel's error is part of the message (its errno's name and text, and the verifier's log):
/// no separate source, which error reporters would print a second time.
impl std::error::Error for ObserveError {}

crate::error::into_io_error!(ObserveError);
