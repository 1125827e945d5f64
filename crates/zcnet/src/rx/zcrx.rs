//! How the io_uring zero-copy receive path of a [`Receiver`](super::Receiver) is set up, and why the
//! kernel refuses it. The path itself is in `zcrx_path`.

use std::fmt;
#[cfg(feature = "io-uring")]
use std::os::fd::OwnedFd;

#[cfg(feature = "io-uring")]
use crate::sys::zcrx::QueueLayout;
#[cfg(feature = "io-uring")]
use crate::sys::zcrx_ring::Ring;

/// Where a zcrx instance receives from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ZcrxBind {
    /// Receive queue `queue` of `interface`: real zero-copy, the NIC writing payloads into the
    /// area. Needs a driver with queue management, header split and `hds-thresh` 0 on that queue,
    /// and the flow steered to it.
    Queue {
        /// The interface's name.
        interface: String,
        /// The receive queue's index.
        queue: u32,
    },
    /// No device (`ZCRX_REG_NODEV`, Linux 7.1): any TCP socket, every byte copied by the kernel
    /// into the area, with the same completions, refill ring and statistics.
    NoDevice,
}

/// How the zcrx path of a [`Receiver`](super::Receiver) is set up ([`super::RxPath::Zcrx`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZcrxConfig {
    /// Where to receive from (default [`ZcrxBind::NoDevice`]).
    pub bind: ZcrxBind,
    /// The area's length in bytes (default 4 MiB; rounded up to pages, or to 2 MiB with huge pages):
    /// the most the kernel can hold for the receiver before it waits for chunks to come back.
    pub area_len: usize,
    /// Map the area on reserved huge pages (`MAP_HUGETLB`), else transparent huge pages (default off).
    pub huge_pages: bool,
    /// The buffer length to ask the device for (Linux 7.0, a power of two, at least a page; `None`:
    /// the kernel's choice, a page). Device-less instances take only a page.
    pub rx_buf_len: Option<u32>,
    /// Refill ring entries (default 4096, rounded up to a power of two).
    pub refill_entries: u32,
    /// Ask for the kernel's copy and allocation-failure events and its copy statistics (Linux 7.2;
    /// default on, used where the kernel has them).
    pub events: bool,
}

impl Default for ZcrxConfig {
    fn default() -> ZcrxConfig {
        ZcrxConfig {
            bind: ZcrxBind::NoDevice,
            area_len: 4 << 20,
            huge_pages: false,
            rx_buf_len: None,
            refill_entries: 4096,
            events: true,
        }
    }
}

impl ZcrxConfig {
    /// Receive queue `queue` of `interface`, with the other defaults.
    pub fn queue(interface: impl Into<String>, queue: u32) -> ZcrxConfig {
        ZcrxConfig {
            bind: ZcrxBind::Queue {
                interface: interface.into(),
                queue,
            },
            ..ZcrxConfig::default()
        }
    }

    /// Device-less, with the other defaults.
    pub fn no_device() -> ZcrxConfig {
        ZcrxConfig::default()
    }

    /// With an area of `len` bytes.
    pub fn with_area_len(self, len: usize) -> ZcrxConfig {
        ZcrxConfig {
            area_len: len,
            ..self
        }
    }

    /// With the area on huge pages or not.
    pub fn with_huge_pages(self, huge_pages: bool) -> ZcrxConfig {
        ZcrxConfig { huge_pages, ..self }
    }

    /// Asking for buffers of `len` bytes.
    pub fn with_rx_buf_len(self, len: u32) -> ZcrxConfig {
        ZcrxConfig {
            rx_buf_len: Some(len),
            ..self
        }
    }

    /// With `entries` refill entries.
    pub fn with_refill_entries(self, entries: u32) -> ZcrxConfig {
        ZcrxConfig {
            refill_entries: entries,
            ..self
        }
    }

    /// Asking for the kernel's events and statistics or not.
    pub fn with_events(self, events: bool) -> ZcrxConfig {
        ZcrxConfig { events, ..self }
    }
}

/// A zcrx instance a privileged broker registered for this process
/// ([`BrokerClient::open_zcrx`](crate::xdp::BrokerClient::open_zcrx)) on a ring of this process's,
/// restricted to receiving and not yet enabled, with its area and refill ring in a sealed memory
/// file the broker shares. Registering an instance needs `CAP_NET_ADMIN`; receiving on one needs
/// nothing, so a worker without capabilities receives through zcrx as if it had set it up. Build a receiver on it with
/// [`Receiver::with_zcrx_grant`](super::Receiver::with_zcrx_grant): the thread that does becomes
/// the ring's only issuer. The grant holds the broker connection; the receiver keeps it, and the
/// instance is gone once the receiver is dropped (or the process ends).
#[cfg(feature = "io-uring")]
pub struct ZcrxGrant {
    pub(crate) ring: Ring,
    pub(crate) memory: OwnedFd,
    pub(crate) layout: QueueLayout,
    pub(crate) bind: ZcrxBind,
    pub(crate) connection: OwnedFd,
}

#[cfg(feature = "io-uring")]
impl ZcrxGrant {
    /// Where the instance receives from.
    pub fn bind(&self) -> &ZcrxBind {
        &self.bind
    }

    /// The area's length in bytes.
    pub fn area_len(&self) -> u64 {
        self.layout.area_len
    }
}

#[cfg(feature = "io-uring")]
impl fmt::Debug for ZcrxGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZcrxGrant")
            .field("bind", &self.bind)
            .field("area_len", &self.area_len())
            .field("rx_buf_len", &self.layout.rx_buf_len)
            .finish()
    }
}

/// Why the kernel refused zcrx, as far as the errno and the kernel's own answers (the zcrx query,
/// the opcode probe) tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ZcrxRefusal {
    /// `EPERM`: registering a zcrx instance needs `CAP_NET_ADMIN`.
    NotPermitted,
    /// The kernel has no io_uring zero-copy receive (`IORING_OP_RECV_ZC`, Linux 6.15).
    KernelTooOld,
    /// The kernel's zcrx has no device-less mode (`ZCRX_REG_NODEV`, Linux 7.1).
    NoDeviceless,
    /// `EOPNOTSUPP`: the device (or the device-less mode) cannot do what was asked: no queue
    /// management, no header split, or a buffer length it does not take.
    DeviceUnsupported,
    /// `ENODEV`: no such interface, or no such queue on it.
    NoSuchDevice,
    /// `EBUSY`/`EEXIST`: the queue is held already (an XDP program or AF_XDP socket, another
    /// zcrx instance or devmem binding).
    QueueBusy,
    /// `EPROTONOSUPPORT`: `RECV_ZC` takes TCP sockets only.
    NotTcp,
    /// `ENOMEM`: the area or refill region could not be pinned or mapped.
    NoMemory,
    /// `EINVAL` for a reason the query does not explain (the ring's set-up, an argument).
    Invalid,
    /// Another errno.
    Other,
}

impl ZcrxRefusal {
    /// What the user can do about it.
    pub fn remedy(self) -> &'static str {
        match self {
            ZcrxRefusal::NotPermitted => "run with CAP_NET_ADMIN, or receive with RxPath::Socket",
            ZcrxRefusal::KernelTooOld => {
                "this kernel has no io_uring zero-copy receive (Linux 6.15+): receive with \
                 RxPath::Socket"
            }
            ZcrxRefusal::NoDeviceless => {
                "this kernel's zcrx needs a NIC queue (device-less zcrx is Linux 7.1+): bind a \
                 queue with header split, or receive with RxPath::Socket"
            }
            ZcrxRefusal::DeviceUnsupported => {
                "the device lacks queue management or header split (tcp-data-split on, hds-thresh \
                 0), or the buffer length is not one it takes"
            }
            ZcrxRefusal::NoSuchDevice => "name an existing interface and receive queue",
            ZcrxRefusal::QueueBusy => {
                "the queue is held by XDP, AF_XDP or another zcrx instance: choose another queue"
            }
            ZcrxRefusal::NotTcp => "zero-copy receive takes TCP sockets only",
            ZcrxRefusal::NoMemory => {
                "raise RLIMIT_MEMLOCK or reserve huge pages, or use a smaller area"
            }
            ZcrxRefusal::Invalid => "the kernel rejected an argument: see the errno",
            ZcrxRefusal::Other => "see the errno",
        }
    }
}

impl fmt::Display for ZcrxRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.remedy())
    }
}
