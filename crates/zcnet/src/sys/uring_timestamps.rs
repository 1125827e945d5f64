//! A socket's transmit timestamps through io_uring: one multishot `SOCKET_URING_OP_TX_TIMESTAMP`
//! command on a small ring of big (32-byte) CQEs of its own.
//!
//! Kernel behaviour relied on (io_uring/cmd_net.c `io_uring_cmd_timestamp`,
//! include/uapi/linux/io_uring.h, Linux 6.17): an `IORING_OP_URING_CMD` with `cmd_op`
//! `SOCKET_URING_OP_TX_TIMESTAMP` (4) on a socket, on a ring set up with `IORING_SETUP_CQE32`
//! (`EINVAL` without), polls the socket for `POLLERR` and, for each timestamp entry of its error
//! queue that carries no packet (`SOF_TIMESTAMPING_OPT_TSONLY`), takes it off the queue and posts a
//! CQE with `IORING_CQE_F_MORE`: `res` is the timestamp's key, `flags >> 17`
//! (`IORING_TIMESTAMP_TYPE_SHIFT`) its `SCM_TSTAMP_*` type, bit 16 (`IORING_CQE_F_TSTAMP_HW`) set
//! for a hardware time, and the CQE's second 16 bytes a `struct io_timespec` (`u64` seconds,
//! `u64` nanoseconds). Other error-queue entries stay. A CQE without `F_MORE` ends the command (its
//! `res` the error: `EOPNOTSUPP` or `EINVAL` where the kernel lacks it). Closing the ring cancels it.
//! The ring is restricted to that command (`IORING_REGISTER_RESTRICTIONS` on a disabled ring).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::register::Restriction;
use io_uring::{IoUring, cqueue, opcode, squeue, types};

/// `SOCKET_URING_OP_TX_TIMESTAMP` (enum io_uring_socket_op, include/uapi/linux/io_uring.h).
pub const SOCKET_URING_OP_TX_TIMESTAMP: u32 = 4;
/// `IORING_TIMESTAMP_HW_SHIFT`: the bit of a CQE's flags set for a hardware time.
pub const IORING_TIMESTAMP_HW_SHIFT: u32 = 16;
/// `IORING_TIMESTAMP_TYPE_SHIFT`: where a CQE's flags hold the timestamp's type.
pub const IORING_TIMESTAMP_TYPE_SHIFT: u32 = IORING_TIMESTAMP_HW_SHIFT + 1;
/// `io_uring_enter` flag: wait for completions — and post the ones waiting for this thread.
const IORING_ENTER_GETEVENTS: u32 = 1 << 0;
/// Completion queue entries: room for the timestamps of many sends between two reaps (an
/// overflow is kept by the kernel, not lost).
const CQ_ENTRIES: u32 = 1024;

/// `struct io_timespec` (include/uapi/linux/io_uring.h): the second half of a timestamp's CQE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTimespec {
    /// Seconds.
    pub tv_sec: u64,
    /// Nanoseconds.
    pub tv_nsec: u64,
}

const _: () = assert!(mem::size_of::<IoTimespec>() == 16);

/// One timestamp a [`TimestampRing`] received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingStamp {
    /// `SCM_TSTAMP_*`.
    pub kind: u32,
    /// The key (`SOF_TIMESTAMPING_OPT_ID`).
    pub key: u32,
    /// The time, nanoseconds since the epoch (`CLOCK_REALTIME` for a software time).
    pub at: u64,
    /// A hardware time.
    pub hardware: bool,
}

/// What one CQE of the command says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingEvent {
    /// A timestamp (the command goes on).
    Stamp(RingStamp),
    /// The command ended, with this errno (0: ended without error).
    Ended(i32),
}

/// Decodes one CQE of the command: its `res`, `flags` and second half.
pub fn decode(res: i32, flags: u32, big: [u64; 2]) -> RingEvent {
    if !cqueue::more(flags) {
        return RingEvent::Ended(res.saturating_neg().max(0));
    }
    let time = IoTimespec {
        tv_sec: big[0],
        tv_nsec: big[1],
    };
    RingEvent::Stamp(RingStamp {
        kind: flags >> IORING_TIMESTAMP_TYPE_SHIFT,
        key: res as u32,
        at: time
            .tv_sec
            .saturating_mul(1_000_000_000)
            .saturating_add(time.tv_nsec),
        hardware: flags & (1 << IORING_TIMESTAMP_HW_SHIFT) != 0,
    })
}

/// A ring of 32-byte CQEs running one `SOCKET_URING_OP_TX_TIMESTAMP` command on a socket.
pub struct TimestampRing {
    ring: IoUring<squeue::Entry, cqueue::Entry32>,
    fd: i32,
}

impl std::fmt::Debug for TimestampRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimestampRing")
            .field("fd", &self.fd)
            .finish()
    }
}

impl TimestampRing {
    /// A ring whose command takes the timestamps off `socket`'s error queue. The socket must
    /// outlive the ring (the command holds a reference to it until the ring closes).
    pub fn new(socket: BorrowedFd<'_>) -> io::Result<TimestampRing> {
        let ring = IoUring::<squeue::Entry, cqueue::Entry32>::builder()
            .setup_cqsize(CQ_ENTRIES)
            .setup_r_disabled()
            .build(4)?;
        // It takes the one command and nothing else, whoever reaches its descriptor.
        let submitter = ring.submitter();
        submitter.register_restrictions(&mut [Restriction::sqe_op(opcode::UringCmd16::CODE)])?;
        submitter.register_enable_rings()?;
        let mut this = TimestampRing {
            ring,
            fd: socket.as_raw_fd(),
        };
        this.arm()?;
        Ok(this)
    }

    /// Submits the command (again, after it ended).
    pub fn arm(&mut self) -> io::Result<()> {
        let cmd = opcode::UringCmd16::new(types::Fd(self.fd), SOCKET_URING_OP_TX_TIMESTAMP)
            .build()
            .user_data(0);
        // SAFETY: the command carries no buffer; it names the socket, which the caller keeps
        // open while the ring lives (see `new`).
        unsafe { self.ring.submission().push(&cmd) }
            .map_err(|_| io::Error::other("the timestamp ring's submission queue is full"))?;
        super::retry_if_interrupted(|| self.ring.submit()).map(drop)
    }

    /// Hands every CQE queued now to `on_event`, after posting what waits for this thread.
    pub fn reap(&mut self, mut on_event: impl FnMut(RingEvent)) {
        // SAFETY: no submission is made (to_submit 0) and no signal mask is passed. An error (a
        // signal) leaves the completions for the next call.
        let _ = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
        };
        for cqe in self.ring.completion() {
            on_event(decode(cqe.result(), cqe.flags(), *cqe.big_cqe()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    // Offsets from include/uapi/linux/io_uring.h `struct io_timespec`.
    #[test]
    fn io_timespec_layout_matches_uapi() {
        assert_eq!(offset_of!(IoTimespec, tv_sec), 0);
        assert_eq!(offset_of!(IoTimespec, tv_nsec), 8);
        assert_eq!(mem::size_of::<IoTimespec>(), 16);
    }

    #[test]
    fn decodes_a_stamp_and_the_end() {
        // IORING_CQE_F_MORE is bit 1.
        let flags = (2 << IORING_TIMESTAMP_TYPE_SHIFT) | (1 << 1);
        assert_eq!(
            decode(-2, flags, [3, 7]),
            RingEvent::Stamp(RingStamp {
                kind: 2,
                key: u32::MAX - 1,
                at: 3_000_000_007,
                hardware: false,
            })
        );
        let hw = flags | (1 << IORING_TIMESTAMP_HW_SHIFT);
        assert!(matches!(decode(0, hw, [0, 0]), RingEvent::Stamp(s) if s.hardware && s.kind == 2));
        assert_eq!(
            decode(-libc::EOPNOTSUPP, 0, [0, 0]),
            RingEvent::Ended(libc::EOPNOTSUPP)
        );
    }
}
