//! Transmit timestamps (`SO_TIMESTAMPING`, Documentation/networking/timestamping.rst): turning them
//! on for a socket, and reading one from an error-queue entry.
//!
//! Kernel behaviour relied on: with `SOF_TIMESTAMPING_OPT_ID` each timestamp carries a key in
//! `ee_data` of a `sock_extended_err` whose `ee_origin` is `SO_EE_ORIGIN_TIMESTAMPING` and whose
//! `ee_info` says which point of the packet's way it marks (`SCM_TSTAMP_SCHED`, `_SND`, `_ACK`). The
//! key counts datagrams on a datagram socket (one per successful send call; a failed call gives its
//! key back) and bytes on a TCP socket (the offset of the last byte of the send call, counted from
//! the socket's write sequence when the option was set, with `SOF_TIMESTAMPING_OPT_ID_TCP`). With
//! `SOF_TIMESTAMPING_OPT_TSONLY` the entry carries no packet; the time is in the entry's
//! `SCM_TIMESTAMPING` control message, a `struct scm_timestamping` whose first `timespec` is the
//! software time (`CLOCK_REALTIME`).

use std::io;
use std::mem;
use std::os::fd::BorrowedFd;

/// `SO_EE_ORIGIN_TIMESTAMPING` (linux/errqueue.h): the error-queue entry is a transmit timestamp.
pub const SO_EE_ORIGIN_TIMESTAMPING: u8 = 4;
/// `SCM_TSTAMP_SND` (linux/errqueue.h): the packet was handed to the device driver.
pub const SCM_TSTAMP_SND: u32 = 0;
/// `SCM_TSTAMP_SCHED` (linux/errqueue.h): the packet entered the device's queueing discipline.
pub const SCM_TSTAMP_SCHED: u32 = 1;
/// `SCM_TSTAMP_ACK` (linux/errqueue.h): the peer acknowledged every byte of the send (TCP only).
pub const SCM_TSTAMP_ACK: u32 = 2;

/// The flags [`enable_tx`] sets: software timestamps when a packet is scheduled, handed to the
/// device and (TCP) acknowledged, each keyed by [`libc::SOF_TIMESTAMPING_OPT_ID`], reported without
/// the packet.
const TX_FLAGS: u32 = libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_TX_SCHED
    | libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_TX_ACK
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// Turns transmit timestamps on for the socket (`SO_TIMESTAMPING` with [`TX_FLAGS`]; on a stream,
/// keys counted from the write sequence: `SOF_TIMESTAMPING_OPT_ID_TCP`, Linux 6.2). From this call
/// on, keys start at 0.
pub fn enable_tx(fd: BorrowedFd<'_>, stream: bool) -> io::Result<()> {
    let tcp = if stream {
        libc::SOF_TIMESTAMPING_OPT_ID_TCP
    } else {
        0
    };
    let flags = (TX_FLAGS | tcp) as i32;
    super::socket::set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, flags)
}

/// Turns transmit timestamps off again (`SO_TIMESTAMPING` 0): for a socket handed back.
pub fn disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    super::socket::set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, 0)
}

/// `struct scm_timestamping` (linux/errqueue.h): software, (deprecated) and hardware times.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScmTimestamping {
    /// Software time (`CLOCK_REALTIME`), seconds and nanoseconds.
    pub software: [i64; 2],
    /// Unused since Linux 3.17.
    pub deprecated: [i64; 2],
    /// Raw hardware time.
    pub hardware: [i64; 2],
}

const _: () = assert!(mem::size_of::<ScmTimestamping>() == 3 * mem::size_of::<libc::timespec>());

impl ScmTimestamping {
    /// Reads the struct from an `SCM_TIMESTAMPING` payload (native byte order); `None` when short.
    pub fn from_bytes(data: &[u8]) -> Option<ScmTimestamping> {
        if data.len() < mem::size_of::<ScmTimestamping>() {
            return None;
        }
        let at = |i: usize| i64::from_ne_bytes(data[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(ScmTimestamping {
            software: [at(0), at(1)],
            deprecated: [at(2), at(3)],
            hardware: [at(4), at(5)],
        })
    }

    /// The software time in nanoseconds since the epoch; `None` when the kernel left it zero.
    pub fn software_ns(&self) -> Option<u64> {
        let [sec, nsec] = self.software;
        let ns = u64::try_from(sec).ok()?.checked_mul(1_000_000_000)? + u64::try_from(nsec).ok()?;
        (ns != 0).then_some(ns)
    }
}

/// The software time of an error-queue entry, from its control message of `level` and `ty`;
/// `None` for any other control message.
pub fn software_time(level: i32, ty: i32, data: &[u8]) -> Option<u64> {
    if (level, ty) != (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING) {
        return None;
    }
    ScmTimestamping::from_bytes(data)?.software_ns()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    // Offsets from linux/errqueue.h `struct scm_timestamping { struct timespec ts[3]; }`.
    #[test]
    fn scm_timestamping_layout_matches_uapi() {
        assert_eq!(offset_of!(ScmTimestamping, software), 0);
        assert_eq!(offset_of!(ScmTimestamping, deprecated), 16);
        assert_eq!(offset_of!(ScmTimestamping, hardware), 32);
        assert_eq!(mem::size_of::<ScmTimestamping>(), 48);
        assert_eq!(
            mem::size_of::<libc::timespec>(),
            16,
            "64-bit time_t timespec"
        );
    }

    #[test]
    fn constants_match_uapi() {
        assert_eq!(SO_EE_ORIGIN_TIMESTAMPING, libc::SO_EE_ORIGIN_TIMESTAMPING);
        assert_eq!(
            (SCM_TSTAMP_SND, SCM_TSTAMP_SCHED, SCM_TSTAMP_ACK),
            (0, 1, 2)
        );
    }

    #[test]
    fn reads_the_software_time_of_a_timestamping_message() {
        let mut data = [0u8; 48];
        data[0..8].copy_from_slice(&3i64.to_ne_bytes());
        data[8..16].copy_from_slice(&250i64.to_ne_bytes());
        assert_eq!(
            software_time(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &data),
            Some(3_000_000_250)
        );
        assert_eq!(software_time(libc::SOL_IP, libc::IP_RECVERR, &data), None);
        assert_eq!(
            software_time(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &data[..40]),
            None
        );
        assert_eq!(
            software_time(libc::SOL_SOCKET, libc::SCM_TIMESTAMPING, &[0; 48]),
            None
        );
    }
}
