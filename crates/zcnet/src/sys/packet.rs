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

use super::socket::{poll, set_int_option};
use super::xdp::Mmap;

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
const PKT2_LEN: usize = 4;

/// Opens a raw packet socket for `protocol` (an `ETH_P_*` value, host order) bound to interface
/// `ifindex`. Needs CAP_NET_RAW.
pub fn open(ifindex: u32, protocol: u16) -> io::Result<OwnedFd> {
    let proto_be = protocol.to_be();
    let fd = super::socket::socket(libc::AF_PACKET, libc::SOCK_RAW, proto_be as libc::c_int)?;
    // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto_be;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` is a live `sockaddr_ll` and its exact size is passed.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_ll).cast(),
        mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
    ))?;
    Ok(fd)
}

/// Sends one frame on a bound packet socket.
pub fn send(fd: BorrowedFd<'_>, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: `frame` is readable for its length during the call.
    syscall!(send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0)).map(|n| n as usize)
}

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
    /// `block_size` bytes (a multiple of the page size); a block is handed over when full or after
    /// `retire_ms` milliseconds.
    pub fn open(
        ifindex: u32,
        protocol: u16,
        block_size: u32,
        block_nr: u32,
        retire_ms: u32,
    ) -> io::Result<RxRingV3> {
        let fd = open(ifindex, protocol)?;
        set_int_option(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            TPACKET_V3,
        )?;
        let frame_size = 2048;
        let frame_nr = (block_size / frame_size)
            .checked_mul(block_nr)
            .ok_or_else(|| ring_size_error(block_size, block_nr))?;
        let req = TpacketReq3 {
            tp_block_size: block_size,
            tp_block_nr: block_nr,
            tp_frame_size: frame_size,
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

    fn status(&self, block: usize) -> &AtomicU32 {
        self.map
            .atomic_at::<AtomicU32>(block * self.block_size + BLOCK_STATUS)
            .expect("block header inside the ring")
    }

    fn read_u32(&self, offset: usize) -> Option<u32> {
        // SAFETY: block headers and packets are read only while the block's status says
        // TP_STATUS_USER (checked by every caller before reading): the kernel writes it no more
        // until the block is handed back.
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
    /// Offsets the kernel wrote are bounds-checked: a packet outside the block ends the walk.
    pub fn next_block(&mut self, mut each: impl FnMut(&[u8])) -> Option<u32> {
        let block = self.next;
        // Acquire pairs with the kernel's release of the block status: the packets are visible.
        if self.status(block).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        let base = block * self.block_size;
        let end = base + self.block_size;
        let count = self.read_u32(base + BLOCK_NUM_PKTS).unwrap_or(0);
        let mut pkt = base + self.read_u32(base + BLOCK_FIRST_PKT).unwrap_or(0) as usize;
        let mut seen = 0;
        while seen < count && pkt < end {
            let (Some(next), Some(snap), Some(mac)) = (
                self.read_u32(pkt + PKT3_NEXT_OFFSET),
                self.read_u32(pkt + PKT3_SNAPLEN),
                self.read_u16(pkt + PKT3_MAC),
            ) else {
                break;
            };
            let start = pkt + mac as usize;
            // SAFETY: the block's status is TP_STATUS_USER (checked above): the kernel writes it
            // no more until `next_block` hands it back, after the last use of `data`.
            match unsafe { self.map.bytes(start, snap as usize) } {
                Some(data) if start + snap as usize <= end => each(data),
                _ => break,
            }
            seen += 1;
            if next == 0 {
                break;
            }
            pkt += next as usize;
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

fn ring_size_error(size: u32, count: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("a packet ring of {count} x {size} bytes does not fit the kernel's 32-bit sizes"),
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
    next: usize,
}

impl TxRingV2 {
    /// Opens a packet socket on `ifindex` with `frame_nr` slots of `frame_size` bytes (a power of two,
    /// at most the page size).
    pub fn open(ifindex: u32, frame_size: u32, frame_nr: u32) -> io::Result<TxRingV2> {
        let fd = open(ifindex, 0)?;
        set_int_option(
            fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            TPACKET_V2,
        )?;
        set_int_option(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)?;
        let page = 4096u32;
        let block_nr = frame_nr
            .checked_mul(frame_size)
            .ok_or_else(|| ring_size_error(frame_size, frame_nr))?
            / page;
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
        let base = slot * self.frame_size;
        let room = self.frame_size - TX_DATA_OFFSET;
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
    use std::mem::offset_of;

    #[test]
    fn layouts_match_linux_if_packet_h() {
        assert_eq!(offset_of!(TpacketReq3, tp_frame_nr), 12);
        assert_eq!(offset_of!(TpacketReq3, tp_retire_blk_tov), 16);
        assert_eq!(offset_of!(TpacketReq3, tp_feature_req_word), 24);
        assert_eq!(offset_of!(TpacketStatsV3, tp_drops), 4);
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
}
