//! The UMEM: the frame area shared with the kernel, who owns each of its frames, and which kernel
//! sockets use it — so that a new socket can share it, and the frames of a closed socket come back.
//!
//! Kernel behaviour relied on (`net/xdp/xsk.c`, `net/xdp/xsk_buff_pool.c`):
//! - The area is registered (`XDP_UMEM_REG`) on one AF_XDP socket; other sockets use it by binding with
//!   `XDP_SHARED_UMEM` and naming a *bound* socket that uses it (`EBADF` for an unbound one). The
//!   kernel's UMEM lives as long as any socket using it; once the last one closed, the next bind
//!   registers the area again, on the new socket.
//! - Each (interface, queue) gets one buffer pool, with one fill and one completion ring, set up by
//!   the first socket bound there. A socket naming a socket of the same queue shares that pool (and
//!   may not have fill or completion rings of its own); one naming a socket of another queue needs
//!   both rings of its own.
//! - A socket is released once its descriptor and every mapping of its rings are gone — everywhere: a
//!   child forked at that moment holds copies until it execs. A pool is torn down once every socket
//!   using it was released and freed (their last packets sent), from a workqueue; only that teardown
//!   stops a zero-copy driver from writing the pool's frames, and only then is the queue free for a
//!   new pool (`EBUSY` until then). So the frames lent to a pool whose sockets all closed come back to
//!   the free list when this UMEM binds that queue again: the bind succeeding proves the teardown.

use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::error::{Error, Result};
use super::mode::BoundMode;
use super::packet::Packet;
use super::queue::Queue;
use super::ring::{Consumer, Desc, Producer};
pub use crate::sys::frame_area::Frame;
use crate::sys::frame_area::FrameArea;
use crate::sys::xdp::Mmap;

/// Privilege the kernel checks to create an AF_XDP socket.
pub(crate) const XSK_PRIVILEGE: &str = "CAP_NET_RAW";

/// Size of one UMEM frame (chunk). A packet occupies one frame, or several with multi-buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSize {
    /// 2048 bytes: two frames per page, enough for a 1500-byte MTU.
    Half = 2048,
    /// 4096 bytes: one frame per page.
    Page = 4096,
}

/// What one [`Socket::reclaim`](super::Socket::reclaim) took off its queue's completion ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reclaimed {
    /// Frames the kernel finished sending, back on the UMEM's free list.
    pub frames: u32,
    /// Completion entries that did not name a frame lent on this queue (skipped).
    pub skipped: u32,
}

/// How to build a [`Umem`].
///
/// Start from [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct UmemConfig {
    /// Frame size.
    pub frame_size: FrameSize,
    /// Number of frames.
    pub frame_count: u32,
    /// Fill ring entries of each queue's pool (power of two).
    pub fill_size: u32,
    /// Completion ring entries of each queue's pool (power of two).
    pub completion_size: u32,
    /// Bytes the kernel leaves free before each received packet.
    pub headroom: u32,
    /// Back the area with huge pages (reserved `MAP_HUGETLB` pages if any, else transparent ones).
    pub huge_pages: bool,
}

impl Default for UmemConfig {
    fn default() -> UmemConfig {
        UmemConfig {
            frame_size: FrameSize::Half,
            frame_count: 4096,
            fill_size: 2048,
            completion_size: 2048,
            headroom: 0,
            huge_pages: false,
        }
    }
}

/// A queue a socket is bound to: network namespace (its inode), interface index and queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuePlace {
    netns: u64,
    ifindex: u32,
    queue: u32,
}

impl QueuePlace {
    /// Queue `queue` of interface `ifindex` in the calling thread's network namespace.
    pub(crate) fn here(ifindex: u32, queue: u32) -> QueuePlace {
        let netns = std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino());
        QueuePlace {
            netns,
            ifindex,
            queue,
        }
    }
}

/// What a socket sharing the kernel's UMEM (or a queue's pool) gets from the socket it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inherited {
    /// The data path of the kernel's UMEM.
    pub mode: BoundMode,
    /// Whether the pool wakes with need_wakeup.
    pub need_wakeup: bool,
    /// Whether the kernel's UMEM was bound with `XDP_USE_SG`.
    pub multi_buffer: bool,
}

/// Pools whose last socket closed, as they report themselves to their UMEM.
#[derive(Debug, Default)]
struct Inbox {
    pending: AtomicBool,
    closed: Mutex<Vec<ClosedPool>>,
}

#[derive(Debug, Clone, Copy)]
struct ClosedPool {
    tag: u32,
    place: QueuePlace,
}

/// One kernel buffer pool of a UMEM, as its frame bookkeeping knows it: the tag of the frames lent on
/// one queue. The queue's [`Queue`] holds it and drops it last, after closing the queue's rings and
/// anchor socket (every socket bound there holds the queue and closes its own kernel socket first);
/// the pool then reports itself closed to its UMEM, which takes its frames back once the queue is
/// bound again.
#[derive(Debug)]
pub(crate) struct Pool {
    tag: u32,
    place: QueuePlace,
    inbox: Arc<Inbox>,
}

impl Pool {
    /// The tag of the pool's frames in the UMEM's frame area.
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let closed = ClosedPool {
            tag: self.tag,
            place: self.place,
        };
        let mut list = self
            .inbox
            .closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        list.push(closed);
        self.inbox.pending.store(true, Ordering::Release);
    }
}

/// How a new socket gets to the UMEM.
#[derive(Debug)]
pub(crate) enum Sharing {
    /// No socket uses the UMEM: open its queue registering it there.
    Register,
    /// The UMEM is in use on other queues only: open this queue sharing it through `with`.
    Share { with: Arc<Queue> },
    /// The queue is open: bind there, sharing its rings.
    Queue(Arc<Queue>),
}

/// A frame area for AF_XDP sockets. Every frame is in one place: the free list, a [`Frame`] token
/// held by user space, or lent to one of the kernel's buffer pools (a queue's fill ring or a tx ring
/// of a socket bound there). The UMEM records which, so a descriptor the kernel returns for a frame
/// that pool does not hold (a bug or a hostile kernel) is counted as invalid and never becomes a
/// second token for the same memory.
///
/// The UMEM owns no kernel socket: each [`Socket`](crate::xdp::Socket) owns its own, and each queue's
/// rings belong to a socket of that queue's own (shared by the sockets bound there); the first queue
/// opened registers the area. When every socket of a queue has closed, the frames lent there come
/// back to the free list as soon as this UMEM binds that queue again (which proves the kernel let go
/// of them).
#[derive(Debug)]
pub struct Umem {
    area: FrameArea,
    config: UmemConfig,
    huge_pages: bool,
    /// Tells this UMEM's sockets apart from other UMEMs' (a socket only carries its UMEM's frames).
    id: u64,
    /// The queues open with this UMEM (each held by the sockets bound there).
    queues: Vec<Weak<Queue>>,
    inbox: Arc<Inbox>,
    /// Closed pools whose frames wait for proof that the kernel let go of them.
    quarantined: Vec<ClosedPool>,
    next_pool: u32,
}

/// Gives every UMEM a distinct id.
static NEXT_UMEM_ID: AtomicU64 = AtomicU64::new(1);

impl Umem {
    /// Allocates the area (pre-faulted). The kernel sees it when the first socket binds: that bind
    /// registers it (needs CAP_NET_RAW; the pinned area counts against RLIMIT_MEMLOCK unless the
    /// process has CAP_IPC_LOCK).
    pub fn new(config: UmemConfig) -> Result<Umem> {
        let frame_size = config.frame_size as u32;
        let len = frame_size as usize * config.frame_count as usize;
        let (area, huge_pages) = Mmap::anonymous(len, config.huge_pages)
            .map_err(|e| Error::new(format!("allocate {len}-byte UMEM"), e, ""))?;
        let mut umem = Umem::over(FrameArea::new(area, frame_size), config);
        umem.huge_pages = huge_pages;
        Ok(umem)
    }

    /// A UMEM over the first `frame_size * frame_count` bytes of the memory file `memfd`, mapped
    /// shared: another process mapping the same file (a [`Broker`](crate::xdp::Broker) and its
    /// worker) sees the same frames.
    pub(crate) fn over_memfd(memfd: BorrowedFd<'_>, config: UmemConfig) -> Result<Umem> {
        let frame_size = config.frame_size as u32;
        let len = frame_size as usize * config.frame_count as usize;
        let area = Mmap::shared(memfd, len, 0)
            .map_err(|e| Error::new(format!("map {len}-byte shared UMEM"), e, ""))?;
        Ok(Umem::over(FrameArea::new(area, frame_size), config))
    }

    /// A UMEM over `area` with every frame on the free list.
    fn over(area: FrameArea, config: UmemConfig) -> Umem {
        Umem {
            area,
            config,
            huge_pages: false,
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
            queues: Vec::new(),
            inbox: Arc::default(),
            quarantined: Vec::new(),
            next_pool: 0,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Entries of the fill and completion rings each pool gets.
    pub(crate) fn ring_sizes(&self) -> (u32, u32) {
        (self.config.fill_size, self.config.completion_size)
    }

    /// How a socket binding to `place` gets to this UMEM: through the queue open there, sharing the
    /// UMEM through a queue open elsewhere, or registering it anew.
    pub(crate) fn sharing_for(&mut self, place: QueuePlace) -> Sharing {
        self.collect_closed();
        self.queues.retain(|q| q.strong_count() > 0);
        let live: Vec<Arc<Queue>> = self.queues.iter().filter_map(Weak::upgrade).collect();
        if let Some(queue) = live.iter().find(|q| q.place() == place) {
            return Sharing::Queue(queue.clone());
        }
        match live.into_iter().next() {
            Some(with) => Sharing::Share { with },
            None => Sharing::Register,
        }
    }

    /// Registers the area as the UMEM of the unbound socket `fd` (`XDP_UMEM_REG`).
    pub(crate) fn register_on(&self, fd: BorrowedFd<'_>) -> Result<()> {
        let len = self.area.frame_count() as usize * self.area.frame_size() as usize;
        self.area.register(fd, self.config.headroom).map_err(|e| {
            Error::from_errno(
                format!("register {len}-byte UMEM"),
                e,
                XSK_PRIVILEGE,
                "raise RLIMIT_MEMLOCK (ulimit -l) or grant CAP_IPC_LOCK",
            )
        })
    }

    /// A new pool for a socket just bound to `place` with a pool of its own. The bind succeeding
    /// proves that the kernel tore down any earlier pool of that queue, so the frames of a closed pool
    /// there come back now.
    pub(crate) fn new_pool(&mut self, place: QueuePlace) -> Arc<Pool> {
        self.collect_closed();
        let area = &mut self.area;
        self.quarantined.retain(|closed| {
            let torn_down = closed.place == place;
            if torn_down {
                area.reclaim_pool(closed.tag);
            }
            !torn_down
        });
        let tag = self.next_pool;
        self.next_pool = self.next_pool.wrapping_add(1);
        Arc::new(Pool {
            tag,
            place,
            inbox: self.inbox.clone(),
        })
    }

    /// Records a queue opened with this UMEM, so later sockets bind there or share the UMEM through it.
    pub(crate) fn opened(&mut self, queue: &Arc<Queue>) {
        self.queues.push(Arc::downgrade(queue));
    }

    /// Moves pools whose sockets all closed to the quarantine, where their frames wait for their
    /// queue to be bound again.
    fn collect_closed(&mut self) {
        if !self.inbox.pending.swap(false, Ordering::Acquire) {
            return;
        }
        let closed = std::mem::take(
            &mut *self
                .inbox
                .closed
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.quarantined.extend(closed);
    }

    /// Reserves room for AF_XDP TX metadata (`struct xsk_tx_metadata`) before each packet to send:
    /// frames from [`Umem::alloc`] then start that many bytes into their chunk (their capacity that
    /// much smaller), and the registration asks the kernel for it (`XDP_UMEM_TX_METADATA_LEN`;
    /// kernels without AF_XDP TX metadata refuse the bind with `EINVAL`). Only before the first
    /// socket binds with this UMEM.
    pub(crate) fn reserve_tx_metadata(&mut self) {
        self.area.reserve_tx_metadata();
    }

    /// Bytes reserved for TX metadata before each packet to send (0: none).
    pub(crate) fn tx_metadata_len(&self) -> u32 {
        self.area.tx_metadata_len()
    }

    /// Asks the kernel to checksum `frame`'s packet from `csum_start` to its end, storing the sum
    /// at `csum_start + csum_offset` (the frame goes to the tx ring with `XDP_TX_METADATA`); false,
    /// and nothing changes, when this UMEM reserved no TX metadata.
    ///
    /// # Panics
    /// When `frame` belongs to another UMEM.
    pub(crate) fn request_tx_checksum(
        &mut self,
        frame: &mut Frame,
        csum_start: u16,
        csum_offset: u16,
    ) -> bool {
        self.area
            .request_tx_checksum(frame, csum_start, csum_offset)
    }

    /// Frame size in bytes.
    pub fn frame_size(&self) -> u32 {
        self.area.frame_size()
    }

    /// Number of frames.
    pub fn frame_count(&self) -> u32 {
        self.area.frame_count()
    }

    /// Whether the area got reserved huge pages (`MAP_HUGETLB`).
    pub fn huge_pages(&self) -> bool {
        self.huge_pages
    }

    /// Frames on the free list (neither lent to the kernel nor held by the caller).
    pub fn free_frames(&self) -> usize {
        self.area.free_frames()
    }

    /// Takes a free frame (its packet empty, its whole buffer available to [`Umem::buffer_mut`]).
    pub fn alloc(&mut self) -> Option<Frame> {
        self.area.alloc()
    }

    /// Puts `frame` back on the free list.
    ///
    /// # Panics
    /// When `frame` belongs to another UMEM.
    pub fn release(&mut self, frame: Frame) {
        self.area.release(frame)
    }

    /// The packet bytes of `frame`.
    ///
    /// # Panics
    /// When `frame` belongs to another UMEM.
    pub fn bytes(&self, frame: &Frame) -> &[u8] {
        self.area.bytes(frame)
    }

    /// The packet bytes of `frame`, for writing.
    ///
    /// # Panics
    /// When `frame` belongs to another UMEM.
    pub fn bytes_mut(&mut self, frame: &mut Frame) -> &mut [u8] {
        let len = frame.len() as usize;
        &mut self.area.buffer_mut(frame)[..len]
    }

    /// The whole buffer of `frame` from its packet's first byte to the end of the frame
    /// ([`Frame::capacity`] bytes): build a packet there, then [`Frame::set_len`].
    ///
    /// # Panics
    /// When `frame` belongs to another UMEM.
    pub fn buffer_mut(&mut self, frame: &mut Frame) -> &mut [u8] {
        self.area.buffer_mut(frame)
    }

    /// Appends the bytes of every frame of `packet`, in order, to `out`.
    ///
    /// # Panics
    /// When a frame belongs to another UMEM.
    pub fn copy_packet(&self, packet: &Packet, out: &mut Vec<u8>) {
        for frame in packet.frames() {
            out.extend_from_slice(self.area.bytes(frame));
        }
    }

    /// Lends up to `max` free frames to pool `pool` through its fill ring `ring`; returns how many.
    pub(crate) fn fill_via(&mut self, ring: &mut Producer<u64>, pool: u32, max: u32) -> u32 {
        let mut r = ring.reserve(max.min(self.area.free_frames() as u32));
        while r.remaining() > 0 {
            let Some(addr) = self.area.lend_free(pool) else {
                break;
            };
            r.push(addr).expect("reserved");
        }
        r.submit()
    }

    /// Lends frames from the front of `frames` to pool `pool` through its fill ring `ring` and removes
    /// them from `frames`; returns how many. Those that do not fit stay in `frames`.
    pub(crate) fn fill_with_via(
        &mut self,
        ring: &mut Producer<u64>,
        pool: u32,
        frames: &mut Vec<Frame>,
    ) -> u32 {
        let mut r = ring.reserve(frames.len() as u32);
        let n = r.len() as usize;
        for frame in frames.drain(..n) {
            let (addr, ..) = self.area.lend(frame, pool);
            r.push(addr).expect("reserved");
        }
        r.submit()
    }

    /// Takes up to `max` frames pool `pool` finished sending (its completion ring `ring`) back onto
    /// the free list.
    pub(crate) fn reclaim_via(
        &mut self,
        ring: &mut Consumer<u64>,
        pool: u32,
        max: u32,
    ) -> Reclaimed {
        let batch = ring.peek(max);
        let mut reclaimed = Reclaimed::default();
        for addr in batch.iter() {
            if self.area.completed(addr, pool) {
                reclaimed.frames += 1;
            } else {
                reclaimed.skipped += 1;
            }
        }
        batch.release();
        reclaimed
    }

    /// Turns up to `max` descriptors of the rx ring `rx` of a socket of pool `pool` into frame tokens
    /// appended to `out`; returns the number of descriptors rejected: outside one frame of the area,
    /// or naming a frame that pool does not hold. A rejected descriptor's frame stays where it was.
    pub(crate) fn receive(
        &mut self,
        rx: &mut Consumer<Desc>,
        pool: u32,
        max: u32,
        out: &mut Vec<Frame>,
    ) -> u32 {
        let batch = rx.peek(max);
        let mut invalid = 0;
        for desc in batch.iter() {
            match self
                .area
                .received(desc.addr(), desc.len(), desc.continues(), pool)
            {
                Some(frame) => out.push(frame),
                None => invalid += 1,
            }
        }
        batch.release();
        invalid
    }

    /// Takes whole packets from the rx ring `rx` of a socket of pool `pool`, up to `max` frames (more
    /// when the first packet alone is longer), appending them to `out`; returns the number of
    /// descriptors rejected. A packet with a rejected descriptor is dropped: its valid frames go back
    /// to the free list. The descriptors of a packet whose end the kernel has not published yet stay
    /// in the ring — unless they fill it, which no honest kernel does: then they are dropped too.
    pub(crate) fn receive_packets(
        &mut self,
        rx: &mut Consumer<Desc>,
        pool: u32,
        max: u32,
        out: &mut Vec<Packet>,
    ) -> u32 {
        let whole = {
            let ready = rx.peek(rx.entries());
            let mut end = 0;
            for (i, desc) in ready.iter().enumerate() {
                let seen = i as u32 + 1;
                if !desc.continues() {
                    end = seen;
                }
                if end > 0 && seen >= max {
                    break;
                }
            }
            if end == 0 && ready.len() == rx.entries() {
                rx.entries()
            } else {
                end
            }
        };
        let batch = rx.peek(whole);
        let (mut invalid, mut broken) = (0, false);
        let mut frames = Vec::new();
        for desc in batch.iter() {
            match self
                .area
                .received(desc.addr(), desc.len(), desc.continues(), pool)
            {
                Some(frame) => frames.push(frame),
                None => {
                    invalid += 1;
                    broken = true;
                }
            }
            if !desc.continues() {
                match std::mem::replace(&mut broken, false) {
                    false => out.push(Packet::received(std::mem::take(&mut frames))),
                    true => frames.drain(..).for_each(|f| self.area.release(f)),
                }
            }
        }
        // A run that never ended (a ring full of continued descriptors) is dropped.
        frames.drain(..).for_each(|f| self.area.release(f));
        batch.release();
        invalid
    }

    /// Lends frames from the front of `frames` to pool `pool` through the tx ring `tx` and removes
    /// them from `frames`; returns how many. Only whole packets go (a frame that continues goes with
    /// the frames up to its packet's last); those that do not fit stay in `frames`.
    pub(crate) fn transmit(
        &mut self,
        tx: &mut Producer<Desc>,
        pool: u32,
        frames: &mut Vec<Frame>,
    ) -> u32 {
        let mut r = tx.reserve(frames.len() as u32);
        let room = r.len() as usize;
        let whole = frames[..room]
            .iter()
            .rposition(|f| !f.continues())
            .map_or(0, |last| last + 1);
        for frame in frames.drain(..whole) {
            let (addr, len, continues, metadata) = self.area.lend(frame, pool);
            r.push(
                Desc::new(addr, len)
                    .continuing(continues)
                    .with_tx_metadata(metadata),
            )
            .expect("reserved");
        }
        r.submit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::xdp::{RingMmap, TX_METADATA_LEN};
    use crate::xdp::ring::Entry;
    use proptest::prelude::*;

    const FRAMES: u32 = 8;
    const FRAME: u32 = 2048;

    /// A UMEM over anonymous memory with one pool: the fill and completion rings of one queue and one
    /// socket's rx and tx rings, with the kernel's halves of each: the tests play the kernel, honest
    /// or hostile.
    struct Harness {
        umem: Umem,
        pool: Arc<Pool>,
        fill: Producer<u64>,
        completion: Consumer<u64>,
        rx: Consumer<Desc>,
        tx: Producer<Desc>,
        kernel_fill: Consumer<u64>,
        kernel_completion: Producer<u64>,
        kernel_rx: Producer<Desc>,
        kernel_tx: Consumer<Desc>,
    }

    fn place(queue: u32) -> QueuePlace {
        QueuePlace {
            netns: 1,
            ifindex: 2,
            queue,
        }
    }

    fn harness() -> Harness {
        harness_in(Umem::over(
            FrameArea::new(
                Mmap::anonymous((FRAMES * FRAME) as usize, false)
                    .expect("area")
                    .0,
                FRAME,
            ),
            UmemConfig::default(),
        ))
    }

    /// A one-frame area, to stand in for a UMEM moved out for a moment.
    fn tiny_area() -> FrameArea {
        FrameArea::new(
            Mmap::anonymous(FRAME as usize, false).expect("area").0,
            FRAME,
        )
    }

    /// A harness for a new copy-mode pool of `umem` on queue 0.
    fn harness_in(mut umem: Umem) -> Harness {
        let addrs = || Arc::new(RingMmap::anonymous(4).expect("ring"));
        let descs = || Arc::new(RingMmap::anonymous(4).expect("ring"));
        let (fill, completion, rx, tx) = (addrs(), addrs(), descs(), descs());
        let pool = umem.new_pool(place(0));
        Harness {
            umem,
            pool,
            fill: Producer::new(fill.clone()),
            completion: Consumer::new(completion.clone()),
            rx: Consumer::new(rx.clone()),
            tx: Producer::new(tx.clone()),
            kernel_fill: Consumer::new(fill),
            kernel_completion: Producer::new(completion),
            kernel_rx: Producer::new(rx),
            kernel_tx: Consumer::new(tx),
        }
    }

    impl Harness {
        /// Every socket of the pool closes (its rings go with it), then a new one binds the queue.
        fn reopen(&mut self) {
            let stand_in = Umem::over(tiny_area(), UmemConfig::default());
            let umem = std::mem::replace(&mut self.umem, stand_in);
            let old = std::mem::replace(
                self,
                harness_in(Umem::over(tiny_area(), UmemConfig::default())),
            );
            drop(old);
            *self = harness_in(umem);
        }

        fn fill(&mut self, max: u32) -> u32 {
            self.umem.fill_via(&mut self.fill, self.pool.tag(), max)
        }
        fn fill_with(&mut self, frames: &mut Vec<Frame>) -> u32 {
            self.umem
                .fill_with_via(&mut self.fill, self.pool.tag(), frames)
        }
        fn reclaim(&mut self, max: u32) -> (u32, u32) {
            let r = self
                .umem
                .reclaim_via(&mut self.completion, self.pool.tag(), max);
            (r.frames, r.skipped)
        }
        fn receive(&mut self, max: u32, out: &mut Vec<Frame>) -> u32 {
            self.umem.receive(&mut self.rx, self.pool.tag(), max, out)
        }
        fn receive_packets(&mut self, max: u32, out: &mut Vec<Packet>) -> u32 {
            self.umem
                .receive_packets(&mut self.rx, self.pool.tag(), max, out)
        }
        fn transmit(&mut self, frames: &mut Vec<Frame>) -> u32 {
            self.umem.transmit(&mut self.tx, self.pool.tag(), frames)
        }
    }

    fn kernel_push<T: Entry>(ring: &mut Producer<T>, values: &[T]) -> u32 {
        let mut r = ring.reserve(values.len() as u32);
        for &v in values {
            if r.push(v).is_err() {
                break;
            }
        }
        r.submit()
    }

    fn kernel_take<T: Entry>(ring: &mut Consumer<T>, max: u32) -> Vec<T> {
        let b = ring.peek(max);
        let got = b.iter().collect();
        b.release();
        got
    }

    #[test]
    fn a_frame_travels_free_fill_rx_user_tx_completion_free() {
        let mut h = harness();
        assert_eq!(h.fill(1), 1);
        let lent = kernel_take(&mut h.kernel_fill, 4);
        assert_eq!(lent.len(), 1);
        // The kernel receives 60 bytes at an offset (headroom) into that frame.
        kernel_push(&mut h.kernel_rx, &[Desc::new(lent[0] + 256, 60)]);
        let mut got = Vec::new();
        assert_eq!(h.receive(4, &mut got), 0);
        let mut frame = got.pop().expect("one frame");
        assert_eq!((frame.addr(), frame.len()), (lent[0] + 256, 60));
        assert_eq!(frame.capacity(), FRAME - 256);
        h.umem.bytes_mut(&mut frame).fill(7);
        assert_eq!(h.umem.bytes(&frame), &[7; 60][..]);
        assert!(!frame.set_len(FRAME), "beyond the frame's end");
        assert!(frame.set_len(100));
        let mut out = vec![frame];
        assert_eq!(h.transmit(&mut out), 1);
        assert!(out.is_empty());
        let sent = kernel_take(&mut h.kernel_tx, 4);
        assert_eq!((sent[0].addr(), sent[0].len()), (lent[0] + 256, 100));
        kernel_push(&mut h.kernel_completion, &[sent[0].addr()]);
        assert_eq!(h.reclaim(4), (1, 0));
        assert_eq!(h.umem.free_frames(), FRAMES as usize);
    }

    #[test]
    fn tx_metadata_room_comes_before_each_frame_to_send_and_its_request_goes_with_it() {
        let mut h = harness();
        let mut unreserved = h.umem.alloc().expect("frame");
        assert!(
            !h.umem.request_tx_checksum(&mut unreserved, 34, 6),
            "no room reserved"
        );
        h.umem.release(unreserved);
        h.umem.reserve_tx_metadata();
        assert_eq!(h.umem.tx_metadata_len(), TX_METADATA_LEN);
        let (mut asked, mut plain) = (h.umem.alloc().unwrap(), h.umem.alloc().unwrap());
        for f in [&asked, &plain] {
            assert_eq!(f.addr() % u64::from(FRAME), u64::from(TX_METADATA_LEN));
            assert_eq!(f.capacity(), FRAME - TX_METADATA_LEN);
        }
        assert!(asked.set_len(60) && plain.set_len(61));
        assert!(h.umem.request_tx_checksum(&mut asked, 34, 6));
        let (a, p) = (asked.addr(), plain.addr());
        assert_eq!(h.transmit(&mut vec![asked, plain]), 2);
        let sent = kernel_take(&mut h.kernel_tx, 4);
        assert_eq!(
            sent,
            [
                Desc::new(a, 60).with_tx_metadata(true),
                Desc::new(p, 61).with_tx_metadata(false)
            ]
        );
        // A received frame at its chunk's start has no room in front for a request.
        assert_eq!(h.fill(1), 1);
        let lent = kernel_take(&mut h.kernel_fill, 4);
        kernel_push(&mut h.kernel_rx, &[Desc::new(lent[0], 60)]);
        let mut got = Vec::new();
        assert_eq!(h.receive(4, &mut got), 0);
        let mut frame = got.pop().expect("one frame");
        assert!(!h.umem.request_tx_checksum(&mut frame, 34, 6));
        h.umem.release(frame);
    }

    #[test]
    fn descriptors_for_frames_the_kernel_does_not_hold_are_rejected() {
        let mut h = harness();
        let held = h.umem.alloc().expect("frame");
        let mut got = Vec::new();
        kernel_push(
            &mut h.kernel_rx,
            &[
                Desc::new(held.addr(), 10),          // ours, not the kernel's
                Desc::new(3 * u64::from(FRAME), 10), // on the free list
                Desc::new(u64::MAX - 5, 10),         // outside the area
                Desc::new(0, FRAME + 1),             // crosses a frame boundary
            ],
        );
        assert_eq!(h.receive(8, &mut got), 4);
        assert!(got.is_empty());
        kernel_push(&mut h.kernel_completion, &[held.addr(), 1 << 40]);
        assert_eq!(h.reclaim(8), (0, 2));
        h.umem.release(held);
        assert_eq!(h.umem.free_frames(), FRAMES as usize);
    }

    #[test]
    #[should_panic(expected = "another UMEM")]
    fn a_token_of_another_umem_is_refused() {
        let mut a = harness();
        let mut b = harness();
        let frame = a.umem.alloc().expect("frame");
        b.umem.release(frame);
    }

    #[test]
    fn frames_of_a_closed_pool_come_back_when_its_queue_is_bound_again() {
        let mut h = harness();
        assert_eq!(h.fill(4), 4);
        let lent = kernel_take(&mut h.kernel_fill, 1);
        kernel_push(&mut h.kernel_rx, &[Desc::new(lent[0], 60)]);
        let mut held = Vec::new();
        assert_eq!(h.receive(4, &mut held), 0);
        let mut out = vec![h.umem.alloc().expect("frame")];
        assert_eq!(h.transmit(&mut out), 1);
        assert_eq!(h.umem.free_frames(), FRAMES as usize - 5);
        // Every socket of the pool closed: what its fill and tx rings held stays lent until the
        // queue is bound again (the kernel may not have let go of it yet), binding another queue
        // proves nothing, and the frame the user received stays the user's.
        let Harness { mut umem, pool, .. } = h;
        drop(pool);
        assert_eq!(umem.free_frames(), FRAMES as usize - 5);
        drop(umem.new_pool(place(1)));
        assert_eq!(umem.free_frames(), FRAMES as usize - 5, "another queue");
        let _again = umem.new_pool(place(0));
        assert_eq!(
            umem.free_frames(),
            FRAMES as usize - 1,
            "the old pool is gone"
        );
        umem.release(held.pop().expect("received frame"));
        assert_eq!(umem.free_frames(), FRAMES as usize);
    }

    #[test]
    fn a_pool_cannot_return_frames_lent_to_another() {
        let mut h = harness();
        let other = h.umem.new_pool(place(1));
        assert_eq!(h.umem.fill_via(&mut h.fill, other.tag(), 1), 1);
        let lent = kernel_take(&mut h.kernel_fill, 1);
        kernel_push(&mut h.kernel_rx, &[Desc::new(lent[0], 60)]);
        kernel_push(&mut h.kernel_completion, &[lent[0]]);
        let mut got = Vec::new();
        assert_eq!(h.receive(4, &mut got), 1, "lent to the other queue's pool");
        assert_eq!(h.reclaim(4), (0, 1));
        assert!(got.is_empty());
    }

    #[test]
    fn multi_buffer_packets_are_taken_whole() {
        let mut h = harness();
        assert_eq!(h.fill(4), 4);
        let lent = kernel_take(&mut h.kernel_fill, 4);
        let d = |i: usize, continues| Desc::new(lent[i], 100 + i as u32).continuing(continues);
        // A packet of three frames, then the first frame of one whose end is not published yet.
        kernel_push(
            &mut h.kernel_rx,
            &[d(0, true), d(1, true), d(2, false), d(3, true)],
        );
        let mut packets = Vec::new();
        assert_eq!(
            h.receive_packets(1, &mut packets),
            0,
            "a packet longer than max"
        );
        assert_eq!(packets.len(), 1);
        let packet = packets.pop().expect("packet");
        assert_eq!(packet.len(), 100 + 101 + 102);
        let conts: Vec<bool> = packet.frames().iter().map(Frame::continues).collect();
        assert_eq!(conts, [true, true, false]);
        let mut copy = Vec::new();
        h.umem.copy_packet(&packet, &mut copy);
        assert_eq!(copy.len(), packet.len());
        // Rewriting the packet's bytes and lengths leaves its continuation marks as they were.
        let mut packet = packet;
        for (i, mut frame) in packet.frames_mut().enumerate() {
            frame.bytes_mut(&mut h.umem).fill(i as u8);
            assert!(frame.set_len(50));
        }
        let conts: Vec<bool> = packet.frames().iter().map(Frame::continues).collect();
        assert_eq!(conts, [true, true, false]);
        assert_eq!(packet.len(), 150);
        copy.clear();
        h.umem.copy_packet(&packet, &mut copy);
        assert_eq!(copy, [[0u8; 50], [1; 50], [2; 50]].concat());
        assert_eq!(h.receive_packets(8, &mut packets), 0);
        assert!(
            packets.is_empty(),
            "the unfinished packet stays in the ring"
        );
        // Sending: only whole packets leave; an unfinished one stays with the caller.
        let mut frames = packet.into_frames();
        frames.push(h.umem.alloc().expect("frame"));
        frames.last_mut().expect("frame").set_continues(true);
        assert_eq!(h.transmit(&mut frames), 3);
        assert_eq!(frames.len(), 1);
        let sent = kernel_take(&mut h.kernel_tx, 4);
        let conts: Vec<bool> = sent.iter().map(Desc::continues).collect();
        assert_eq!(conts, [true, true, false]);
        h.umem.release(frames.pop().expect("frame"));
    }

    #[test]
    fn a_packet_with_a_rejected_descriptor_is_dropped_whole() {
        let mut h = harness();
        assert_eq!(h.fill(2), 2);
        let lent = kernel_take(&mut h.kernel_fill, 2);
        kernel_push(
            &mut h.kernel_rx,
            &[
                Desc::new(lent[0], 10).continuing(true),
                Desc::new(u64::MAX - 5, 10).continuing(true),
                Desc::new(lent[1], 10),
            ],
        );
        let mut packets = Vec::new();
        assert_eq!(h.receive_packets(8, &mut packets), 1);
        assert!(packets.is_empty());
        assert_eq!(
            h.umem.free_frames(),
            FRAMES as usize,
            "its valid frames are freed"
        );
    }

    #[test]
    fn a_ring_full_of_continued_descriptors_is_dropped_not_stuck() {
        let mut h = harness();
        assert_eq!(h.fill(4), 4);
        let lent = kernel_take(&mut h.kernel_fill, 4);
        let descs: Vec<Desc> = lent
            .iter()
            .map(|&a| Desc::new(a, 8).continuing(true))
            .collect();
        assert_eq!(kernel_push(&mut h.kernel_rx, &descs), 4);
        let mut packets = Vec::new();
        assert_eq!(h.receive_packets(8, &mut packets), 0);
        assert!(packets.is_empty());
        assert_eq!(h.umem.free_frames(), FRAMES as usize);
        assert_eq!(h.kernel_rx.reserve(4).len(), 4, "the ring is free again");
    }

    /// What the kernel side of the test does next.
    #[derive(Debug, Clone)]
    enum Step {
        Alloc,
        Release(usize),
        Fill(u32),
        FillWith(usize),
        Transmit(usize),
        Receive(u32),
        Reclaim(u32),
        /// The kernel receives into frames it took from the fill ring.
        KernelReceive(u32),
        /// The kernel completes frames it took from the tx ring.
        KernelComplete(u32),
        /// A hostile kernel puts an arbitrary descriptor on the rx ring.
        HostileRx(u64, u32),
        /// A hostile kernel puts an arbitrary address on the completion ring.
        HostileCompletion(u64),
        /// Every socket of the queue closes and a new one binds it: the kernel lets go of every frame
        /// it held there.
        Reopen,
    }

    fn step() -> impl Strategy<Value = Step> {
        let addr = prop_oneof![0..u64::from(FRAMES * FRAME + 64), any::<u64>()];
        let len = prop_oneof![
            0u32..3000,
            Just(FRAME),
            Just(FRAME + 1),
            Just(u32::MAX),
            any::<u32>()
        ];
        prop_oneof![
            Just(Step::Alloc),
            (0usize..8).prop_map(Step::Release),
            (0u32..6).prop_map(Step::Fill),
            (0usize..8).prop_map(Step::FillWith),
            (0usize..8).prop_map(Step::Transmit),
            (0u32..6).prop_map(Step::Receive),
            (0u32..6).prop_map(Step::Reclaim),
            (0u32..6).prop_map(Step::KernelReceive),
            (0u32..6).prop_map(Step::KernelComplete),
            (addr.clone(), len).prop_map(|(a, l)| Step::HostileRx(a, l)),
            addr.prop_map(Step::HostileCompletion),
            Just(Step::Reopen),
        ]
    }

    proptest! {
        /// Against a model of where each frame is (free list, a user token, the kernel), no sequence of
        /// user calls and kernel answers, hostile ones included, and of the queue's sockets closing
        /// and binding again, ever puts a frame in two places.
        #[test]
        fn no_frame_is_ever_in_two_places(steps in proptest::collection::vec(step(), 1..80)) {
            let mut h = harness();
            let mut tokens: Vec<Frame> = Vec::new();
            // What the kernel holds and will return honestly: frames taken from fill and tx.
            let (mut kernel_rx_frames, mut kernel_tx_frames) = (Vec::new(), Vec::new());
            for step in steps {
                match step {
                    Step::Alloc => tokens.extend(h.umem.alloc()),
                    Step::Release(i) if i < tokens.len() => h.umem.release(tokens.swap_remove(i)),
                    Step::Fill(n) => { h.fill(n); }
                    Step::FillWith(n) => {
                        let n = n.min(tokens.len());
                        let mut give: Vec<Frame> = tokens.drain(..n).collect();
                        h.fill_with(&mut give);
                        tokens.append(&mut give);
                    }
                    Step::Transmit(n) => {
                        let n = n.min(tokens.len());
                        let mut give: Vec<Frame> = tokens.drain(..n).collect();
                        h.transmit(&mut give);
                        tokens.append(&mut give);
                    }
                    Step::Receive(n) => { h.receive(n, &mut tokens); }
                    Step::Reclaim(n) => { h.reclaim(n); }
                    Step::KernelReceive(n) => {
                        kernel_rx_frames.extend(kernel_take(&mut h.kernel_fill, n));
                        let descs: Vec<Desc> = kernel_rx_frames.iter().map(|&a| Desc::new(a, 64)).collect();
                        let done = kernel_push(&mut h.kernel_rx, &descs) as usize;
                        kernel_rx_frames.drain(..done);
                    }
                    Step::KernelComplete(n) => {
                        kernel_tx_frames.extend(kernel_take(&mut h.kernel_tx, n).iter().map(|d| d.addr()));
                        let done = kernel_push(&mut h.kernel_completion, &kernel_tx_frames) as usize;
                        kernel_tx_frames.drain(..done);
                    }
                    Step::HostileRx(addr, len) => { kernel_push(&mut h.kernel_rx, &[Desc::new(addr, len)]); }
                    Step::HostileCompletion(addr) => { kernel_push(&mut h.kernel_completion, &[addr]); }
                    Step::Reopen => {
                        h.reopen();
                        kernel_rx_frames.clear();
                        kernel_tx_frames.clear();
                        // Frames of the closed queue are free again: it is bound anew.
                        let (_, places) = h.umem.area.snapshot();
                        prop_assert!(!places.contains('K'), "{}", places);
                    }
                    Step::Release(_) => {}
                }
                let (free, places) = h.umem.area.snapshot();
                let mut seen = vec![0u32; FRAMES as usize];
                for &f in &free {
                    seen[f as usize] += 1;
                    prop_assert_eq!(places.as_bytes()[f as usize], b'F');
                }
                for t in &tokens {
                    let index = (t.addr() / u64::from(FRAME)) as usize;
                    seen[index] += 1;
                    prop_assert_eq!(places.as_bytes()[index], b'U');
                }
                for (index, (&count, place)) in seen.iter().zip(places.bytes()).enumerate() {
                    let expected = if place == b'K' { 0 } else { 1 };
                    prop_assert_eq!(count, expected, "frame {} ({}) in {} places", index, place as char, count);
                }
                // Every token's bytes, and the buffer it lends for writing, lie in its own frame,
                // whatever descriptor it came from.
                for t in &mut tokens {
                    prop_assert!(t.len() <= t.capacity());
                    prop_assert_eq!(t.addr() % u64::from(FRAME) + u64::from(t.capacity()), u64::from(FRAME));
                    let (read, len) = {
                        let b = h.umem.area.bytes(t);
                        (b.as_ptr() as usize, b.len())
                    };
                    prop_assert_eq!(len, t.len() as usize);
                    let capacity = t.capacity() as usize;
                    let write = h.umem.area.buffer_mut(t);
                    prop_assert_eq!((write.as_ptr() as usize, write.len()), (read, capacity));
                }
            }
            for t in tokens { h.umem.release(t); }
        }
    }
}
