//! AF_PACKET: raw packet sockets bound to one interface (how the Open vSwitch client injects frames
//! on a datapath's local port), the TPACKET_V3 receive ring, the TPACKET_V2 transmit ring
//! (`PACKET_TX_RING`), and batched `recvmmsg(2)`/`sendmmsg(2)` — the copying paths AF_XDP is compared
//! with.
//!
//! Layouts from `include/uapi/linux/if_packet.h`. Kernel behaviour relied on: a ring's memory is
//! shared with the kernel, and a block (V3 rx) or frame slot (V2 tx) belongs to user space only while
//! its status word says so (`TP_STATUS_USER`, `TP_STATUS_AVAILABLE`); the status word is written with
//! release order by its owner and read with acquire order by the other side.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

pub use super::packet_socket::{open, send};
use super::socket::{poll, set_int_option};
use super::xdp::Mmap;

use crate::IfIndex;

/// `TPACKET_V2` (`enum tpacket_versions`).
const TPACKET_V2: i32 = 1;
/// `TPACKET_V3`.
const TPACKET_V3: i32 = 2;
/// `TP_STATUS_KERNEL`: an rx block belongs to the kernel.
const TP_STATUS_KERNEL: u32 = 0;
/// `TP_STATUS_USER`: an rx block is ready for user space.
const TP_STATUS_USER: u32 = 1;
/// `TP_STATUS_AVAILABLE`: a tx frame slot is free.
const TP_STATUS_AVAILABLE: u32 = 0;
/// `TP_STATUS_SEND_REQUEST`: a tx frame slot is ready to send.
const TP_STATUS_SEND_REQUEST: u32 = 1;
/// Where frame data starts in a TPACKET_V2 tx slot: `TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`
/// = `TPACKET_ALIGN(sizeof(struct tpacket2_hdr))` = 32.
const TX_DATA_OFFSET: usize = 32;
/// The smallest TPACKET_V2 tx slot: the power of two above `TPACKET2_HDRLEN` (52), which the kernel
/// requires a slot to hold (`packet_set_ring`).
const TX_MIN_FRAME: u32 = 64;
/// The frame size a TPACKET_V3 rx ring is requested with (packets are packed into blocks regardless).
const RX_FRAME_SIZE: u32 = 2048;

/// `struct tpacket_req3` (`if_packet.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

const _: () = assert!(mem::size_of::<TpacketReq3>() == 28);

/// `struct tpacket_stats_v3` (`if_packet.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

const _: () = assert!(mem::size_of::<TpacketStatsV3>() == 12);

// Field offsets inside the shared ring memory (`struct tpacket_block_desc`, `struct tpacket_hdr_v1`,
// `struct tpacket3_hdr`, `struct tpacket2_hdr`).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
const PKT3_NEXT_OFFSET: usize = 0;
const PKT3_SNAPLEN: usize = 12;
const PKT3_MAC: usize = 24;
/// Bytes of a `tpacket3_hdr` read before its packet: up to and including `tp_mac` (u16).
const PKT3_HEADER_READ: usize = PKT3_MAC + 2;
const PKT2_LEN: usize = 4;

/// Receives one frame without blocking (`EAGAIN` when none is queued).
pub fn recv_nonblocking(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for its length during the call.
    syscall!(recv(
        fd.as_raw_fd(),
        buf.as_mut_ptr().cast(),
        buf.len(),
        libc::MSG_DONTWAIT
    ))
    .map(|n| n as usize)
}

/// A TPACKET_V3 receive ring: blocks of packets the kernel fills and hands over whole.
#[derive(Debug)]
pub struct RxRingV3 {
    fd: OwnedFd,
    map: Mmap,
    block_size: usize,
    block_nr: usize,
    next: usize,
}

impl RxRingV3 {
    /// Opens a packet socket for `protocol` on `ifindex` with a ring of `block_nr` blocks of
    /// `block_size` bytes; a block is handed over when full or after `retire_ms` milliseconds.
    ///
    /// Sizes are checked before any socket is opened: `InvalidInput` unless `block_size` is a
    /// multiple of the page size from one page up to `i32::MAX` (the kernel reads it as an `int`),
    /// `block_nr` is at least 1, and the ring's 2048-byte frames number at most `u32::MAX`.
    pub fn open(
        ifindex: IfIndex,
        protocol: u16,
        block_size: u32,
        block_nr: u32,
        retire_ms: u32,
    ) -> io::Result<RxRingV3> {
        let page = super::tcp_zc::page_size();
        let shape = (block_size as usize).is_multiple_of(page)
            && block_size > 0
            && block_size <= i32::MAX as u32
            && block_nr > 0;
        let frame_nr = (block_size / RX_FRAME_SIZE)
            .checked_mul(block_nr)
            .filter(|_| shape)
            .ok_or_else(|| {
                ring_size_error(
                    block_nr,
                    block_size,
                    "blocks of whole pages, at most i32::MAX bytes, at least one block, at most \
                     u32::MAX frames of 2048 bytes",
                )
            })?;
        let fd = open(ifindex, protocol)?;
        set_int_option(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            TPACKET_V3,
        )?;
        let req = TpacketReq3 {
            tp_block_size: block_size,
            tp_block_nr: block_nr,
            tp_frame_size: RX_FRAME_SIZE,
            tp_frame_nr: frame_nr,
            tp_retire_blk_tov: retire_ms,
            ..Default::default()
        };
        set_packet_option(fd.as_fd(), libc::PACKET_RX_RING, &req)?;
        let map = Mmap::shared(fd.as_fd(), block_size as usize * block_nr as usize, 0)?;
        Ok(RxRingV3 {
            fd,
            map,
            block_size: block_size as usize,
            block_nr: block_nr as usize,
            next: 0,
        })
    }

    /// A ring of `block_nr` blocks of `block_size` bytes over `map`, for walking blocks a test
    /// wrote (playing the kernel, honest or hostile) without a packet socket's ring.
    #[cfg(test)]
    fn over(fd: OwnedFd, map: Mmap, block_size: usize, block_nr: usize) -> RxRingV3 {
        assert!(block_size * block_nr <= map.len());
        RxRingV3 {
            fd,
            map,
            block_size,
            block_nr,
            next: 0,
        }
    }

    fn status(&self, block: usize) -> &AtomicU32 {
        self.map
            .atomic_at::<AtomicU32>(block * self.block_size + BLOCK_STATUS)
            .expect("block header inside the ring")
    }

    fn read_u32(&self, offset: usize) -> Option<u32> {
        // SAFETY: block headers and packets are read only while the block's status says
        // TP_STATUS_USER, and only inside that block (both checked by every caller before
        // reading): the kernel writes it no more until the block is handed back.
        let b = unsafe { self.map.bytes(offset, 4) }?;
        Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn read_u16(&self, offset: usize) -> Option<u16> {
        // SAFETY: as in `read_u32`.
        let b = unsafe { self.map.bytes(offset, 2) }?;
        Some(u16::from_ne_bytes([b[0], b[1]]))
    }

    /// Calls `each` with every packet of the next block the kernel has handed over, returns the block
    /// to the kernel and gives the packet count; `None` when the next block is still the kernel's.
    ///
    /// Offsets and lengths the kernel wrote are checked before anything is read through them: a
    /// packet header or packet that does not lie wholly inside the block ends the walk, so nothing
    /// of another block (which the kernel may be writing) is ever read or borrowed.
    pub fn next_block(&mut self, mut each: impl FnMut(&[u8])) -> Option<u32> {
        let block = self.next;
        // Acquire pairs with the kernel's release of the block status: the packets are visible.
        if self.status(block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        // `block < block_nr` and the mapping is `block_nr * block_size` bytes: no overflow.
        let base = block * self.block_size;
        let end = base + self.block_size;
        // The block header lies in the block (a block is at least a page).
        let count = self.read_u32(base + BLOCK_NUM_PKTS).unwrap_or(0);
        let first = self.read_u32(base + BLOCK_FIRST_PKT).unwrap_or(0) as usize;
        let inside = |from: usize, len: usize| from.checked_add(len).filter(|&e| e <= end);
        let mut pkt = base.checked_add(first);
        let mut seen = 0;
        while seen < count
            && let Some(at) = pkt.filter(|&at| inside(at, PKT3_HEADER_READ).is_some())
        {
            let (Some(next), Some(snap), Some(mac)) = (
                self.read_u32(at + PKT3_NEXT_OFFSET),
                self.read_u32(at + PKT3_SNAPLEN),
                self.read_u16(at + PKT3_MAC),
            ) else {
                break;
            };
            let start = at + mac as usize;
            if inside(start, snap as usize).is_none() {
                break;
            }
            // SAFETY: `start..start + snap` lies inside this block (checked just above), whose
            // status is TP_STATUS_USER (checked on entry): the kernel writes it no more until
            // `next_block` hands it back, after the last use of `data`.
            let Some(data) = (unsafe { self.map.bytes(start, snap as usize) }) else {
                break;
            };
            each(data);
            seen += 1;
            if next == 0 {
                break;
            }
            pkt = at.checked_add(next as usize);
        }
        // Release: our reads of the block finish before the kernel may refill it.
        self.status(block)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.next = (block + 1) % self.block_nr;
        Some(seen)
    }

    /// Waits up to `timeout_ms` for a block to be handed over.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<bool> {
        poll(self.fd.as_fd(), libc::POLLIN, timeout_ms).map(|r| r & libc::POLLIN != 0)
    }

    /// Packets received and dropped since the last call (`PACKET_STATISTICS`, which resets them).
    pub fn statistics(&self) -> io::Result<(u64, u64)> {
        let mut stats = TpacketStatsV3::default();
        let mut len = mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `stats` is a live, writable struct of `len` bytes.
        syscall!(getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut stats as *mut TpacketStatsV3).cast(),
            &mut len,
        ))?;
        Ok((stats.tp_packets as u64, stats.tp_drops as u64))
    }
}

fn ring_size_error(count: u32, size: u32, wanted: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("a packet ring of {count} x {size} bytes (wanted: {wanted})"),
    )
}

fn set_packet_option<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live `T` and its exact size is passed.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        libc::SOL_PACKET,
        name,
        (value as *const T).cast(),
        mem::size_of::<T>() as libc::socklen_t,
    ))
    .map(drop)
}

/// A TPACKET_V2 transmit ring (`PACKET_TX_RING`): frames written into shared slots, sent by one
/// `send` call for the whole batch, with the qdisc layer bypassed (`PACKET_QDISC_BYPASS`).
#[derive(Debug)]
pub struct TxRingV2 {
    fd: OwnedFd,
    map: Mmap,
    frame_size: usize,
    frame_nr: usize,
    /// Bytes of frame data a slot holds: `frame_size - TX_DATA_OFFSET`, at least 32.
    room: usize,
    next: usize,
}

impl TxRingV2 {
    /// Opens a packet socket on `ifindex` with `frame_nr` slots of `frame_size` bytes.
    ///
    /// Sizes are checked before any socket is opened: `InvalidInput` unless `frame_size` is a power
    /// of two from 64 (the slot header and address the kernel requires) to the page size, and
    /// `frame_nr` a nonzero multiple of the slots per page whose total fits `u32`.
    pub fn open(ifindex: IfIndex, frame_size: u32, frame_nr: u32) -> io::Result<TxRingV2> {
        let page = u32::try_from(super::tcp_zc::page_size()).unwrap_or(u32::MAX);
        let shape = frame_size.is_power_of_two()
            && (TX_MIN_FRAME..=page).contains(&frame_size)
            && frame_nr > 0
            && frame_nr.is_multiple_of(page / frame_size);
        let block_nr = frame_nr
            .checked_mul(frame_size)
            .filter(|_| shape)
            .ok_or_else(|| {
                ring_size_error(
                    frame_nr,
                    frame_size,
                    "slots of a power of two from 64 bytes to a page, whole pages of them, at most \
                     u32::MAX bytes",
                )
            })?
            / page;
        let fd = open(ifindex, 0)?;
        set_int_option(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            TPACKET_V2,
        )?;
        set_int_option(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)?;
        let req = TpacketReq3 {
            tp_block_size: page,
            tp_block_nr: block_nr,
            tp_frame_size: frame_size,
            tp_frame_nr: frame_nr,
            ..Default::default()
        };
        // The V1/V2 request is the first four fields of `tpacket_req3`.
        let req2 = [
            req.tp_block_size,
            req.tp_block_nr,
            req.tp_frame_size,
            req.tp_frame_nr,
        ];
        set_packet_option(fd.as_fd(), libc::PACKET_TX_RING, &req2)?;
        let map = Mmap::shared(fd.as_fd(), frame_size as usize * frame_nr as usize, 0)?;
        Ok(TxRingV2 {
            fd,
            map,
            frame_size: frame_size as usize,
            frame_nr: frame_nr as usize,
            room: frame_size as usize - TX_DATA_OFFSET,
            next: 0,
        })
    }

    fn status(&self, slot: usize) -> &AtomicU32 {
        self.map
            .atomic_at::<AtomicU32>(slot * self.frame_size)
            .expect("slot header inside the ring")
    }

    /// Lets `write` build a frame in the next free slot (it returns the frame length) and marks it for
    /// sending; returns false, without calling `write`, when the slot is still in flight.
    pub fn push(&mut self, write: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let slot = self.next;
        // Acquire pairs with the kernel's release of the slot status once it sent the frame.
        if self.status(slot).load(Ordering::Acquire) != TP_STATUS_AVAILABLE {
            return false;
        }
        // `slot < frame_nr` and the mapping is `frame_nr * frame_size` bytes: no overflow.
        let base = slot * self.frame_size;
        let room = self.room;
        // SAFETY: the slot's status is TP_STATUS_AVAILABLE (checked above): the kernel neither reads
        // nor writes it until the status store below hands it over, after the last use of `data`.
        let Some(data) = (unsafe { self.map.bytes_mut(base + TX_DATA_OFFSET, room) }) else {
            return false;
        };
        let len = write(data).min(room) as u32;
        // SAFETY: as above, for the slot's header.
        if let Some(field) = unsafe { self.map.bytes_mut(base + PKT2_LEN, 4) } {
            field.copy_from_slice(&len.to_ne_bytes());
        }
        // Release: the frame bytes and length are visible before the kernel sees the request.
        self.status(slot)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.next = (slot + 1) % self.frame_nr;
        true
    }

    /// Asks the kernel to send every slot marked for sending, without waiting for them to complete.
    pub fn flush(&self) -> io::Result<()> {
        // SAFETY: a zero-length send with no buffer: the frames come from the ring.
        match syscall!(send(
            self.fd.as_raw_fd(),
            ptr::null(),
            0,
            libc::MSG_DONTWAIT
        )) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => Ok(()),
            other => other.map(drop),
        }
    }

    /// Waits up to `timeout_ms` for a slot to become free.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<()> {
        poll(self.fd.as_fd(), libc::POLLOUT, timeout_ms).map(drop)
    }
}

/// The most datagrams one `recvmmsg`/`sendmmsg` call takes (`UIO_MAXIOV`).
const MAX_BATCH: usize = 1024;

/// Buffers for receiving a batch of datagrams with one `recvmmsg(2)` call.
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<u8>,
    size: usize,
    lens: Vec<usize>,
}

impl RecvBatch {
    /// The most datagrams one batch holds.
    pub const MAX: usize = MAX_BATCH;

    /// Room for `count` datagrams (1 to 1024, the most one `recvmmsg` takes: `UIO_MAXIOV`) of up to
    /// `size` bytes (at least 1) each; other sizes, or a product that does not fit in memory, are
    /// `InvalidInput`.
    pub fn new(count: usize, size: usize) -> io::Result<RecvBatch> {
        let total = count
            .checked_mul(size)
            .filter(|_| (1..=MAX_BATCH).contains(&count) && size > 0 && size <= isize::MAX as usize)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("a batch of {count} datagrams of {size} bytes (1 to {MAX_BATCH} of at least 1)"),
                )
            })?;
        Ok(RecvBatch {
            bufs: vec![0; total],
            size,
            lens: vec![0; count],
        })
    }

    /// Receives up to the batch size of datagrams on `fd` without blocking; returns how many
    /// (`EAGAIN` when none is queued).
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let count = self.lens.len();
        let mut iov: Vec<libc::iovec> = self
            .bufs
            .chunks_exact_mut(self.size)
            .map(|slot| libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            })
            .collect();
        let mut hdrs = one_iovec_headers(&mut iov);
        // SAFETY: every header points at one live iovec, each covering one `size`-byte slot of `bufs`,
        // writable and borrowed for the call; `count` is the number of headers.
        let n = syscall!(recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
            ptr::null_mut(),
        ))? as usize;
        for (len, h) in self.lens.iter_mut().zip(&hdrs[..n.min(count)]) {
            *len = h.msg_len as usize;
        }
        Ok(n.min(count))
    }

    /// Datagram `i` of the last batch.
    pub fn get(&self, i: usize) -> &[u8] {
        &self.bufs[i * self.size..i * self.size + self.lens[i].min(self.size)]
    }

    /// Sends the first `n` datagrams of the last batch on the connected socket `fd` with one
    /// `sendmmsg(2)` call (a forwarder); returns how many the kernel took.
    pub fn send(&self, fd: BorrowedFd<'_>, n: usize) -> io::Result<usize> {
        let mut iov: Vec<libc::iovec> = (0..n.min(self.lens.len()))
            .map(|i| {
                let d = self.get(i);
                libc::iovec {
                    iov_base: d.as_ptr() as *mut libc::c_void,
                    iov_len: d.len(),
                }
            })
            .collect();
        // SAFETY: every iovec covers a datagram of `self.bufs`, borrowed for the call.
        unsafe { send_iovecs(fd, &mut iov) }
    }
}

/// One `mmsghdr` per iovec, each message made of that one iovec (no address, no control data).
fn one_iovec_headers(iov: &mut [libc::iovec]) -> Vec<libc::mmsghdr> {
    iov.iter_mut()
        .map(|v| {
            // SAFETY: `msghdr` is plain old data; all-zero is valid.
            let mut h: libc::msghdr = unsafe { mem::zeroed() };
            h.msg_iov = v;
            h.msg_iovlen = 1;
            libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            }
        })
        .collect()
}

/// Sends one datagram per iovec on a connected socket with one `sendmmsg(2)` call; returns how many
/// the kernel took.
///
/// # Safety
/// Every iovec must describe memory readable for its length during the call.
unsafe fn send_iovecs(fd: BorrowedFd<'_>, iov: &mut [libc::iovec]) -> io::Result<usize> {
    let mut hdrs = one_iovec_headers(iov);
    // SAFETY: every header points at one iovec of `iov`, readable per the caller's guarantee.
    syscall!(sendmmsg(
        fd.as_raw_fd(),
        hdrs.as_mut_ptr(),
        hdrs.len() as libc::c_uint,
        0
    ))
    .map(|n| n as usize)
}

/// Sends `data` cut into datagrams of `unit` bytes (the last one shorter) on a connected socket with
/// one `sendmmsg(2)` call, at most 1024 of them (`UIO_MAXIOV`); returns how many the kernel took.
/// A blocking socket blocks until the first one is taken; the call stops early at an error after
/// the first datagram (sendmmsg(2)), so a short count leaves the rest for the next call.
pub fn send_chunks(fd: BorrowedFd<'_>, data: &[u8], unit: usize) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = data
        .chunks(unit.max(1))
        .take(MAX_BATCH)
        .map(|d| libc::iovec {
            iov_base: d.as_ptr() as *mut libc::c_void,
            iov_len: d.len(),
        })
        .collect();
    // SAFETY: every iovec covers a chunk of `data`, borrowed for the call.
    unsafe { send_iovecs(fd, &mut iov) }
}

/// Sends `count` copies of `datagram` on a connected socket with one `sendmmsg(2)` call; returns how
/// many the kernel took.
pub fn send_copies(fd: BorrowedFd<'_>, datagram: &[u8], count: usize) -> io::Result<usize> {
    let one = libc::iovec {
        iov_base: datagram.as_ptr() as *mut libc::c_void,
        iov_len: datagram.len(),
    };
    let mut iov = vec![one; count.min(MAX_BATCH)];
    // SAFETY: every iovec covers `datagram`, borrowed for the call.
    unsafe { send_iovecs(fd, &mut iov) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::mem::offset_of;

    #[test]
    fn layouts_match_linux_if_packet_h() {
        assert_eq!(offset_of!(TpacketReq3, tp_frame_nr), 12);
        assert_eq!(offset_of!(TpacketReq3, tp_retire_blk_tov), 16);
        assert_eq!(offset_of!(TpacketReq3, tp_feature_req_word), 24);
        assert_eq!(offset_of!(TpacketStatsV3, tp_drops), 4);
    }

    /// Ring sizes a caller could pass, hostile ones included.
    fn hostile_size() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            Just(1),
            Just(32),
            Just(52),
            Just(64),
            Just(100),
            Just(2048),
            Just(4096),
            Just(4097),
            Just(8192),
            Just(1 << 18),
            Just(i32::MAX as u32),
            Just(1 << 31),
            Just(u32::MAX),
            any::<u32>(),
        ]
    }

    /// Whether `InvalidInput` came from zcnet's own check (no errno: no socket was opened).
    fn refused_before_the_kernel(
        res: io::Result<impl std::fmt::Debug>,
    ) -> Result<(), TestCaseError> {
        let err = res.expect_err("refused");
        prop_assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{}", err);
        prop_assert_eq!(err.raw_os_error(), None, "{}", err);
        prop_assert!(err.to_string().contains("packet ring of"), "{}", err);
        Ok(())
    }

    proptest! {
        /// Hostile tx ring sizes are refused before any socket or mapping is made, as a normal
        /// user too (only sizes of the kernel's shape reach it; those are not tried here, as a
        /// valid one may map gigabytes).
        #[test]
        fn hostile_tx_ring_sizes_are_refused(frame_size in hostile_size(), frame_nr in hostile_size()) {
            let page = super::super::tcp_zc::page_size() as u32;
            let valid = frame_size.is_power_of_two()
                && (64..=page).contains(&frame_size)
                && frame_nr > 0
                && frame_nr % (page / frame_size) == 0
                && frame_nr.checked_mul(frame_size).is_some();
            prop_assume!(!valid);
            refused_before_the_kernel(TxRingV2::open(IfIndex::new(1), frame_size, frame_nr))?;
        }

        /// As above for the rx ring's block sizes and counts.
        #[test]
        fn hostile_rx_ring_sizes_are_refused(block_size in hostile_size(), block_nr in hostile_size()) {
            let page = super::super::tcp_zc::page_size() as u32;
            let valid = block_size > 0
                && block_size % page == 0
                && block_size <= i32::MAX as u32
                && block_nr > 0
                && (block_size / 2048).checked_mul(block_nr).is_some();
            prop_assume!(!valid);
            refused_before_the_kernel(RxRingV3::open(IfIndex::new(1), 0, block_size, block_nr, 10))?;
        }

        /// Whatever a hostile kernel writes in a block it hands over (packet count, first offset,
        /// each packet's next offset, length and data offset), the walk reads and lends only bytes
        /// of that block: the next block is unreadable here (PROT_NONE), so one byte read from it
        /// would kill the test.
        #[test]
        fn a_hostile_block_is_walked_inside_itself(
            count in prop_oneof![Just(0u32), 1u32..6, Just(u32::MAX), any::<u32>()],
            first in near_block_end(),
            packets in proptest::collection::vec((near_block_end(), near_block_end(), any::<u16>()), 0..5),
        ) {
            let block = super::super::tcp_zc::page_size();
            let (mut map, _) = Mmap::anonymous(2 * block, false).expect("mmap");
            let base = map.as_ptr() as usize;
            let mut write = |offset: usize, bytes: &[u8]| {
                // SAFETY: a private anonymous mapping: no kernel writes it; block 0 only.
                unsafe { map.bytes_mut(offset, bytes.len()) }
                    .expect("inside block 0")
                    .copy_from_slice(bytes);
            };
            write(BLOCK_STATUS, &TP_STATUS_USER.to_ne_bytes());
            write(BLOCK_NUM_PKTS, &count.to_ne_bytes());
            write(BLOCK_FIRST_PKT, &first.to_ne_bytes());
            let mut at = first as usize;
            for &(next, snap, mac) in &packets {
                if at < BLOCK_FIRST_PKT + 4 || at + PKT3_HEADER_READ > block {
                    break;
                }
                write(at + PKT3_NEXT_OFFSET, &next.to_ne_bytes());
                write(at + PKT3_SNAPLEN, &snap.to_ne_bytes());
                write(at + PKT3_MAC, &mac.to_ne_bytes());
                at += next as usize;
            }
            // SAFETY: the second block of a mapping this test owns; nothing refers to it.
            syscall!(mprotect((base + block) as *mut libc::c_void, block, libc::PROT_NONE))
                .expect("mprotect");
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
            let mut ring = RxRingV3::over(OwnedFd::from(socket), map, block, 2);
            let mut lent = Vec::new();
            let seen = ring
                .next_block(|data| lent.push((data.as_ptr() as usize, data.len())))
                .expect("block 0 is the user's");
            prop_assert!(seen <= count && seen as usize == lent.len());
            for (at, len) in lent {
                prop_assert!(at >= base && at + len <= base + block, "{} bytes at {}", len, at - base);
            }
            prop_assert_eq!(ring.status(0).load(Ordering::Relaxed), TP_STATUS_KERNEL);
        }
    }

    /// Offsets and lengths from 0 past the end of a block, and far beyond.
    fn near_block_end() -> impl Strategy<Value = u32> {
        let block = super::super::tcp_zc::page_size() as u32;
        prop_oneof![
            0u32..64,
            (0u32..64).prop_map(move |k| block - k),
            0..block + 64,
            Just(u32::MAX),
            any::<u32>(),
        ]
    }

    #[test]
    fn an_honest_block_yields_every_packet() {
        let block = super::super::tcp_zc::page_size();
        let (mut map, _) = Mmap::anonymous(block, false).expect("mmap");
        let mut write = |offset: usize, bytes: &[u8]| {
            // SAFETY: a private anonymous mapping: no kernel writes it.
            unsafe { map.bytes_mut(offset, bytes.len()) }
                .expect("inside the block")
                .copy_from_slice(bytes);
        };
        write(BLOCK_STATUS, &TP_STATUS_USER.to_ne_bytes());
        write(BLOCK_NUM_PKTS, &3u32.to_ne_bytes());
        write(BLOCK_FIRST_PKT, &64u32.to_ne_bytes());
        // Three packets of 10, 20 and 30 bytes, each after a 40-byte header; the last one ends
        // exactly at the end of the block.
        let last = block - 70;
        for (at, next, len, fill) in [
            (64, 100, 10u32, 1u8),
            (164, last - 164, 20, 2),
            (last, 0, 30, 3),
        ] {
            write(at + PKT3_NEXT_OFFSET, &(next as u32).to_ne_bytes());
            write(at + PKT3_SNAPLEN, &len.to_ne_bytes());
            write(at + PKT3_MAC, &40u16.to_ne_bytes());
            write(at + 40, &vec![fill; len as usize]);
        }
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let mut ring = RxRingV3::over(OwnedFd::from(socket), map, block, 1);
        let mut got = Vec::new();
        assert_eq!(ring.next_block(|d| got.push(d.to_vec())), Some(3));
        assert_eq!(got, vec![vec![1u8; 10], vec![2; 20], vec![3; 30]]);
        assert_eq!(ring.next_block(|_| {}), None, "handed back to the kernel");
    }

    #[test]
    fn hostile_batch_sizes_are_refused() {
        for (count, size) in [
            (0, 64),
            (MAX_BATCH + 1, 64),
            (4, 0),
            (4, (1 << 62) + 8),
            (MAX_BATCH, usize::MAX),
        ] {
            let err = RecvBatch::new(count, size).expect_err("refused");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{count} x {size}");
        }
    }

    #[test]
    fn a_batch_receives_datagrams_into_their_slots_cut_at_the_slot_size() {
        use std::net::UdpSocket;
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let sent = [vec![1u8; 10], vec![2u8; 64], vec![3u8; 100]];
        for d in &sent {
            tx.send(d).unwrap();
        }
        let mut batch = RecvBatch::new(2, 64).unwrap();
        assert_eq!(batch.recv(rx.as_fd()).unwrap(), 2);
        assert_eq!(batch.get(0), &sent[0][..]);
        assert_eq!(batch.get(1), &sent[1][..]);
        assert_eq!(batch.recv(rx.as_fd()).unwrap(), 1);
        assert_eq!(batch.get(0), &sent[2][..64], "cut at the slot size");
        let again = batch.recv(rx.as_fd()).expect_err("nothing queued");
        assert_eq!(again.raw_os_error(), Some(libc::EAGAIN));
        // Forwarding sends what was received, datagram by datagram.
        let fwd = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.connect(fwd.local_addr().unwrap()).unwrap();
        assert_eq!(batch.send(rx.as_fd(), 1).unwrap(), 1);
        let mut buf = [0u8; 128];
        assert_eq!(fwd.recv(&mut buf).unwrap(), 64);
        // Copies of one datagram, sent with one call.
        let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
        fwd.connect(sink.local_addr().unwrap()).unwrap();
        assert_eq!(send_copies(fwd.as_fd(), b"abc", 3).unwrap(), 3);
        let mut copies = RecvBatch::new(4, 8).unwrap();
        assert_eq!(copies.recv(sink.as_fd()).unwrap(), 3);
        assert_eq!(copies.get(2), b"abc");
    }

    #[test]
    fn chunks_leave_as_one_datagram_each_the_last_one_shorter() {
        use std::net::UdpSocket;
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let data: Vec<u8> = (0..10u8).collect();
        assert_eq!(send_chunks(tx.as_fd(), &data, 4).unwrap(), 3);
        let mut batch = RecvBatch::new(4, 16).unwrap();
        assert_eq!(batch.recv(rx.as_fd()).unwrap(), 3);
        assert_eq!(batch.get(0), &data[..4]);
        assert_eq!(batch.get(1), &data[4..8]);
        assert_eq!(batch.get(2), &data[8..]);
    }
}
