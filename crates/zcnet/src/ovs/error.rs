//! Errors of the datapath client: the refused call, its errno, and what the user can do.

use std::fmt;
use std::io;

use crate::sys::errno::error_name;

/// What an [`OvsError`] means for its caller, where zcnet can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OvsErrorKind {
    /// The datapath a handle names is gone: deleted — by its creator, another client or
    /// `ovs-dpctl del-dp` — since the handle was opened or the datapath listed. The kernel answers
    /// `ENODEV` for a request on an ifindex that no longer names a datapath (`get_dp`), a dump
    /// included (its `NLMSG_DONE` carries the error).
    DatapathGone,
    /// Anything else: see [`OvsError::raw_os_error`] and [`OvsError::remedy`].
    Other,
}

/// A datapath request the kernel refused (or whose reply made no sense).
#[derive(Debug)]
pub struct OvsError {
    call: &'static str,
    source: io::Error,
    /// The datapath found gone ([`OvsErrorKind::DatapathGone`]), by name.
    gone: Option<String>,
}

impl OvsError {
    pub(crate) fn new(call: &'static str, source: io::Error) -> OvsError {
        OvsError {
            call,
            source,
            gone: None,
        }
    }

    /// The same error, marked [`OvsErrorKind::DatapathGone`] when it is `ENODEV` from a request
    /// whose only device is the datapath `datapath` (a dump, a GET of the datapath or of a flow).
    pub(crate) fn gone_if_enodev(mut self, datapath: &str) -> OvsError {
        if self.source.raw_os_error() == Some(libc::ENODEV) {
            self.gone = Some(datapath.to_string());
        }
        self
    }

    /// What it means for the caller, where zcnet can tell.
    pub fn ovs_kind(&self) -> OvsErrorKind {
        match self.gone {
            Some(_) => OvsErrorKind::DatapathGone,
            None => OvsErrorKind::Other,
        }
    }

    /// The request that failed (`"OVS_DP_CMD_NEW"`, `"resolve ovs_datapath"`).
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// The errno, when the kernel returned one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The kind of `io::Error` this converts to: `NotFound` for a datapath found gone
    /// ([`OvsErrorKind::DatapathGone`]), the kernel error's kind otherwise.
    pub fn kind(&self) -> io::ErrorKind {
        match self.ovs_kind() {
            OvsErrorKind::DatapathGone => io::ErrorKind::NotFound,
            OvsErrorKind::Other => self.source.kind(),
        }
    }

    /// What the user can do about it.
    pub fn remedy(&self) -> &'static str {
        if self.gone.is_some() {
            return "the datapath was deleted (by its creator, another client or ovs-dpctl del-dp): \
                    open it again once it exists again";
        }
        match self.source.raw_os_error() {
            Some(libc::ENOENT) if self.call.starts_with("resolve") => {
                "the openvswitch kernel module is not loaded (modprobe openvswitch)"
            }
            Some(libc::EPERM) => "changing a datapath needs CAP_NET_ADMIN (run as root)",
            Some(libc::ENODEV) => "no such datapath or port (it may have been deleted)",
            Some(libc::EEXIST) => "something of that name exists already",
            Some(libc::EBUSY) => "the device belongs to another master (bridge, bond or datapath)",
            Some(libc::EINVAL) => "the kernel rejected the request's attributes",
            None if self.source.kind() == io::ErrorKind::InvalidInput => {
                "netlink cannot carry it: an attribute (a packet to execute included) holds at most \
                 65531 bytes"
            }
            _ => "see the errno",
        }
    }
}

impl fmt::Display for OvsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.call)?;
        if let Some(name) = &self.gone {
            write!(f, "datapath {name} is gone, ")?;
        }
        write!(f, "{}: {}", error_name(&self.source), self.remedy())
    }
}

impl std::error::Error for OvsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

crate::error::into_io_error!(OvsError);

/// Adds the call's name to an `io::Result`.
pub(crate) trait Call<T> {
    fn call(self, call: &'static str) -> Result<T, OvsError>;
}

impl<T> Call<T> for io::Result<T> {
    fn call(self, call: &'static str) -> Result<T, OvsError> {
        self.map_err(|e| OvsError::new(call, e))
    }
}
