//! AF_XDP TX metadata: what the sockets on an interface can ask the kernel to do for each packet
//! they send (compute its L4 checksum, report its transmit time, send it at a launch time), found
//! out at run time, never from the kernel version.
//!
//! # Kernel behaviour relied on
//! - A UMEM registered with `XDP_UMEM_TX_METADATA_LEN` and a `tx_metadata_len` of 16 (`struct
//!   xsk_tx_metadata`) is accepted by a kernel that handles TX metadata and refused with `EINVAL` by
//!   one that does not know the flag (`xdp_umem_reg` rejects flags outside `XDP_UMEM_FLAGS_VALID`).
//!   The flag came after the metadata itself: a kernel that accepts it acts on the metadata.
//! - Copy mode (`XDP_COPY`): `xsk_build_skb` (net/xdp/xsk.c) turns a packet sent with
//!   `XDP_TX_METADATA` and `XDP_TXMD_FLAGS_CHECKSUM` into a `CHECKSUM_PARTIAL` skb (`csum_start`,
//!   `csum_offset`): the device computes the sum if it offloads transmit checksums, the stack's
//!   `validate_xmit_skb` in software otherwise, so it works on any device. A timestamp request gets
//!   the time the skb was freed (`xsk_destruct_skb`: "sw completion timestamp, not a real one").
//! - Zero-copy mode: only the driver acts on metadata, through its `xsk_tx_metadata_ops`, which the
//!   netdev generic netlink family reports per device as `xsk-features` (`NETDEV_A_DEV_XSK_FEATURES`,
//!   6.8 and later: tx-timestamp, tx-checksum; tx-launch-time-fifo from 6.15). A request the driver
//!   has no op for is ignored: the packet leaves without the checksum.

use super::error::{Error, Result};
use super::mode::BoundMode;
use super::program::interface_index;
use super::umem::{FrameSize, Umem, UmemConfig, XSK_PRIVILEGE};
use crate::fallback::Fallback;
use crate::sys;
use crate::sys::netlink::xsk_flags;

/// What AF_XDP TX metadata an interface's sockets can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxMetadata {
    /// Whether the kernel registers a UMEM with TX metadata room (`XDP_UMEM_TX_METADATA_LEN`):
    /// `Err` with its refusal (a [`Fallback`] naming the call and its errno: `EINVAL` from a kernel
    /// that does not know the flag), the same shape as [`super::Socket::zerocopy_status`].
    pub umem: std::result::Result<(), Fallback>,
    /// The driver's `xsk-features` ([`TxMetadata::zero_copy_names`]); `None` when the kernel reports
    /// none (before 6.8, or no netdev family).
    pub xsk_features: Option<u64>,
}

impl TxMetadata {
    /// Probes `iface`: registers a small UMEM with TX metadata room on a throwaway AF_XDP socket
    /// (nothing is bound, no traffic is touched) and reads the device's `xsk-features` over
    /// generic netlink. Needs CAP_NET_RAW for the socket.
    pub fn probe(iface: &str) -> Result<TxMetadata> {
        let ifindex = interface_index(iface)?.get();
        let umem = match probe_umem()? {
            None => Ok(()),
            Some(errno) => Err(umem_refused(errno)),
        };
        let devices = sys::netlink::GenlSocket::open().and_then(|mut s| s.netdev_devices());
        let xsk_features = match devices {
            Ok(devices) => devices
                .iter()
                .find(|d| d.ifindex == ifindex)
                .and_then(|d| d.xsk_features),
            // No netdev family (before 6.3): no TX metadata either.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
            Err(e) => return Err(Error::new("read the netdev family's device list", e, "")),
        };
        Ok(TxMetadata { umem, xsk_features })
    }

    fn zero_copy_has(&self, flag: u64) -> bool {
        self.umem.is_ok() && self.xsk_features.is_some_and(|f| f & flag != 0)
    }

    /// Whether a socket bound in `mode` gets its checksum requests computed.
    pub fn checksum(&self, mode: BoundMode) -> bool {
        match mode {
            BoundMode::Copy => self.umem.is_ok(),
            BoundMode::ZeroCopy => self.zero_copy_has(xsk_flags::TX_CHECKSUM),
        }
    }

    /// Whether a socket bound in `mode` gets transmit timestamps: the device's in zero-copy mode,
    /// a software completion time in copy mode.
    pub fn timestamp(&self, mode: BoundMode) -> bool {
        match mode {
            BoundMode::Copy => self.umem.is_ok(),
            BoundMode::ZeroCopy => self.zero_copy_has(xsk_flags::TX_TIMESTAMP),
        }
    }

    /// Whether the driver sends zero-copy packets at their requested launch time
    /// (`tx-launch-time-fifo`). Copy mode's launch time is not probed (it would take a send).
    pub fn zero_copy_launch_time(&self) -> bool {
        self.zero_copy_has(xsk_flags::TX_LAUNCH_TIME_FIFO)
    }

    /// The names of the driver's `xsk-features` (empty when none or not reported).
    pub fn zero_copy_names(&self) -> Vec<String> {
        xsk_flags::names(self.xsk_features.unwrap_or(0))
    }
}

/// The kernel refused a UMEM with TX metadata room with `errno`.
fn umem_refused(errno: i32) -> Fallback {
    Fallback::refused(
        "setsockopt XDP_UMEM_REG with XDP_UMEM_TX_METADATA_LEN",
        errno,
        "this kernel has no AF_XDP TX metadata: checksums are computed in software",
    )
}

/// Whether the kernel registers a UMEM with room for TX metadata (`XDP_UMEM_TX_METADATA_LEN`,
/// `tx_metadata_len` 16) on a throwaway AF_XDP socket: `Ok(None)` when it does, `Ok(Some(errno))`
/// with its refusal, `Err` when the question cannot be asked (no AF_XDP socket: no privilege).
pub fn probe_umem() -> Result<Option<i32>> {
    let mut umem = Umem::new(UmemConfig {
        frame_size: FrameSize::Page,
        frame_count: 2,
        fill_size: 2,
        completion_size: 2,
        headroom: 0,
        huge_pages: false,
    })?;
    umem.reserve_tx_metadata();
    let fd = sys::xdp::socket()
        .map_err(|e| Error::from_errno("create an AF_XDP socket", e, XSK_PRIVILEGE, ""))?;
    match umem.register_on(std::os::fd::AsFd::as_fd(&fd)) {
        Ok(()) => Ok(None),
        Err(e)
            if e.raw_os_error()
                .is_some_and(|n| n != libc::EPERM && n != libc::ENOMEM) =>
        {
            Ok(e.raw_os_error())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_mode_follows_the_umem_and_zero_copy_the_driver() {
        let both = TxMetadata {
            umem: Ok(()),
            xsk_features: Some(xsk_flags::TX_CHECKSUM),
        };
        assert!(both.checksum(BoundMode::Copy) && both.checksum(BoundMode::ZeroCopy));
        assert!(both.timestamp(BoundMode::Copy) && !both.timestamp(BoundMode::ZeroCopy));
        assert!(!both.zero_copy_launch_time());
        let refused = TxMetadata {
            umem: Err(umem_refused(libc::EINVAL)),
            xsk_features: Some(xsk_flags::TX_CHECKSUM),
        };
        assert!(!refused.checksum(BoundMode::Copy) && !refused.checksum(BoundMode::ZeroCopy));
        let old = TxMetadata {
            umem: Ok(()),
            xsk_features: None,
        };
        assert!(old.checksum(BoundMode::Copy) && !old.checksum(BoundMode::ZeroCopy));
    }
}
