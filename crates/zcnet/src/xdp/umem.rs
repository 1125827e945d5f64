//! The UMEM: the frame area shared with the kernel, and its fill and completion rings.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{Error, Result};
use super::ring::{Consumer, Desc, Producer};
use super::socket::BoundMode;
pub use crate::sys::frame_area::Frame;
use crate::sys::frame_area::FrameArea;
use crate::sys::xdp::{self as sys, Mmap, RingKind, RingMmap};

/// Privilege the kernel checks to create an AF_XDP socket.
pub(crate) const XSK_PRIVILEGE: &str = "CAP_NET_RAW";

/// Size of one UMEM frame (chunk). Each packet occupies one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSize {
    /// 2048 bytes: two frames per page, enough for a 1500-byte MTU.
    Half = 2048,
    /// 4096 bytes: one frame per page.
    Page = 4096,
}

/// How to build a [`Umem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UmemConfig {
    /// Frame size.
    pub frame_size: FrameSize,
    /// Number of frames.
    pub frame_count: u32,
    /// Fill ring entries (power of two).
    pub fill_size: u32,
    /// Completion ring entries (power of two).
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

/// A registered frame area with its fill and completion rings. Every frame is in one place: the free
/// list, a [`Frame`] token held by user space, or lent to the kernel. The UMEM records which, so a
/// descriptor the kernel returns for a frame it does not hold (a bug or a hostile kernel) is counted
/// as invalid and never becomes a second token for the same memory.
#[derive(Debug)]
pub struct Umem {
    fd: Arc<OwnedFd>,
    /// The interface index and queue of the socket bound using `fd` itself, once there is one (later
    /// sockets share the UMEM: on the same queue through its fill and completion rings, on other
    /// queues with rings of their own).
    pub(crate) owner: Option<(u32, u32)>,
    /// Rx and tx ring sizes an earlier, failed bind set on the UMEM's own socket: the kernel refuses to
    /// size a ring twice, so a later bind keeps them (and the socket stays usable).
    pub(crate) sized_rings: Option<(u32, u32)>,
    /// The mode of the first bound socket (sharing sockets inherit it).
    pub(crate) bound_mode: Option<BoundMode>,
    area: FrameArea,
    frame_size: u32,
    frame_count: u32,
    huge_pages: bool,
    fill: Producer<u64>,
    completion: Consumer<u64>,
    /// Tells this UMEM's sockets apart from other UMEMs' (a socket only carries its UMEM's frames).
    id: u64,
}

/// Gives every UMEM a distinct id.
static NEXT_UMEM_ID: AtomicU64 = AtomicU64::new(1);

impl Umem {
    /// Allocates the area, registers it on a new AF_XDP socket (`XDP_UMEM_REG`) and maps its fill and
    /// completion rings. Needs CAP_NET_RAW; the pinned area counts against RLIMIT_MEMLOCK unless the
    /// process has CAP_IPC_LOCK.
    pub fn new(config: UmemConfig) -> Result<Umem> {
        let frame_size = config.frame_size as u32;
        let fd = sys::socket().map_err(|e| {
            Error::from_errno(
                "create AF_XDP socket",
                e,
                XSK_PRIVILEGE,
                "the kernel lacks AF_XDP (CONFIG_XDP_SOCKETS)",
            )
        })?;
        let len = frame_size as usize * config.frame_count as usize;
        let (area, huge_pages) = Mmap::anonymous(len, config.huge_pages)
            .map_err(|e| Error::new(format!("allocate {len}-byte UMEM"), e, ""))?;
        sys::register_umem(fd.as_fd(), &area, frame_size, config.headroom).map_err(|e| {
            Error::from_errno(
                format!("register {len}-byte UMEM"),
                e,
                XSK_PRIVILEGE,
                "raise RLIMIT_MEMLOCK (ulimit -l) or grant CAP_IPC_LOCK",
            )
        })?;
        let ring_err = |what: &str, e| Error::from_errno(what.to_string(), e, XSK_PRIVILEGE, "");
        sys::set_ring_size(fd.as_fd(), RingKind::Fill, config.fill_size)
            .map_err(|e| ring_err("set fill ring size", e))?;
        sys::set_ring_size(fd.as_fd(), RingKind::Completion, config.completion_size)
            .map_err(|e| ring_err("set completion ring size", e))?;
        let offsets =
            sys::mmap_offsets(fd.as_fd()).map_err(|e| ring_err("read ring offsets", e))?;
        let fill = RingMmap::map(fd.as_fd(), RingKind::Fill, &offsets, config.fill_size)
            .map_err(|e| ring_err("map fill ring", e))?;
        let completion = RingMmap::map(
            fd.as_fd(),
            RingKind::Completion,
            &offsets,
            config.completion_size,
        )
        .map_err(|e| ring_err("map completion ring", e))?;
        let mut umem = Umem::over(
            fd,
            FrameArea::new(area, frame_size),
            Producer::new(Arc::new(fill)),
            Consumer::new(Arc::new(completion)),
        );
        umem.huge_pages = huge_pages;
        Ok(umem)
    }

    /// A UMEM over `area` with every frame on the free list.
    fn over(fd: OwnedFd, area: FrameArea, fill: Producer<u64>, completion: Consumer<u64>) -> Umem {
        let frame_size = area.frame_size();
        let frame_count = area.frame_count();
        Umem {
            fd: Arc::new(fd),
            owner: None,
            sized_rings: None,
            bound_mode: None,
            area,
            frame_size,
            frame_count,
            huge_pages: false,
            fill,
            completion,
            id: NEXT_UMEM_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn shared_fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Entries of the fill and completion rings (a socket with rings of its own gets the same).
    pub(crate) fn ring_sizes(&self) -> (u32, u32) {
        (self.fill.entries(), self.completion.entries())
    }

    /// Frame size in bytes.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
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

    /// Moves up to `max` free frames onto the fill ring for the kernel to receive into; returns how many.
    /// (A socket sharing this UMEM on another queue has a fill ring of its own: [`Socket::fill`].)
    ///
    /// [`Socket::fill`]: crate::xdp::Socket::fill
    pub fn fill(&mut self, max: u32) -> u32 {
        self.fill_via(None, max)
    }

    /// [`Umem::fill`] through `ring`, or this UMEM's own fill ring.
    pub(crate) fn fill_via(&mut self, ring: Option<&mut Producer<u64>>, max: u32) -> u32 {
        let ring = ring.unwrap_or(&mut self.fill);
        let mut r = ring.reserve(max.min(self.area.free_frames() as u32));
        while r.remaining() > 0 {
            let Some(addr) = self.area.lend_free() else {
                break;
            };
            r.push(addr).expect("reserved");
        }
        r.submit()
    }

    /// Lends frames from the front of `frames` to the kernel through the fill ring (a forwarder
    /// recycling what it received) and removes them from `frames`; returns how many. Those that do not
    /// fit stay in `frames`.
    ///
    /// # Panics
    /// When a frame belongs to another UMEM.
    pub fn fill_with(&mut self, frames: &mut Vec<Frame>) -> u32 {
        self.fill_with_via(None, frames)
    }

    /// [`Umem::fill_with`] through `ring`, or this UMEM's own fill ring.
    pub(crate) fn fill_with_via(
        &mut self,
        ring: Option<&mut Producer<u64>>,
        frames: &mut Vec<Frame>,
    ) -> u32 {
        let ring = ring.unwrap_or(&mut self.fill);
        let mut r = ring.reserve(frames.len() as u32);
        let n = r.len() as usize;
        for frame in frames.drain(..n) {
            let (addr, _) = self.area.lend(frame);
            r.push(addr).expect("reserved");
        }
        r.submit()
    }

    /// Takes up to `max` completed tx frames back onto the free list. Returns the number reclaimed and
    /// the number of completion entries that did not name a frame lent to the kernel (skipped).
    pub fn reclaim(&mut self, max: u32) -> (u32, u32) {
        self.reclaim_via(None, max)
    }

    /// [`Umem::reclaim`] from `ring`, or this UMEM's own completion ring.
    pub(crate) fn reclaim_via(&mut self, ring: Option<&mut Consumer<u64>>, max: u32) -> (u32, u32) {
        let ring = ring.unwrap_or(&mut self.completion);
        let batch = ring.peek(max);
        let (mut done, mut invalid) = (0, 0);
        for addr in batch.iter() {
            if self.area.completed(addr) {
                done += 1;
            } else {
                invalid += 1;
            }
        }
        batch.release();
        (done, invalid)
    }

    /// Turns up to `max` descriptors of the rx ring `rx` into frame tokens appended to `out`; returns
    /// the number of descriptors rejected: outside one frame of the area, or naming a frame the kernel
    /// does not hold. A rejected descriptor's frame stays where it was.
    pub(crate) fn receive(
        &mut self,
        rx: &mut Consumer<Desc>,
        max: u32,
        out: &mut Vec<Frame>,
    ) -> u32 {
        let batch = rx.peek(max);
        let mut invalid = 0;
        for desc in batch.iter() {
            match self.area.received(desc.addr(), desc.len()) {
                Some(frame) => out.push(frame),
                None => invalid += 1,
            }
        }
        batch.release();
        invalid
    }

    /// Lends frames from the front of `frames` to the kernel through the tx ring `tx` and removes them
    /// from `frames`; returns how many. Those that do not fit stay in `frames`.
    pub(crate) fn transmit(&mut self, tx: &mut Producer<Desc>, frames: &mut Vec<Frame>) -> u32 {
        let mut r = tx.reserve(frames.len() as u32);
        let n = r.len() as usize;
        for frame in frames.drain(..n) {
            let (addr, len) = self.area.lend(frame);
            r.push(Desc::new(addr, len)).expect("reserved");
        }
        r.submit()
    }

    /// Whether the fill ring asks for a wakeup (`poll`/`recvfrom`) before the kernel will use it.
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    /// Frames on the fill ring the kernel has not taken yet.
    pub fn fill_outstanding(&mut self) -> u32 {
        self.fill.outstanding()
    }
}

impl AsFd for Umem {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdp::ring::Entry;
    use proptest::prelude::*;

    const FRAMES: u32 = 8;
    const FRAME: u32 = 2048;

    /// A UMEM over anonymous memory, with the kernel's halves of its rings and of one socket's rx and
    /// tx rings: the tests play the kernel, honest or hostile.
    struct Harness {
        umem: Umem,
        rx: Consumer<Desc>,
        tx: Producer<Desc>,
        kernel_fill: Consumer<u64>,
        kernel_completion: Producer<u64>,
        kernel_rx: Producer<Desc>,
        kernel_tx: Consumer<Desc>,
    }

    fn harness() -> Harness {
        let addrs = || Arc::new(RingMmap::anonymous(4).expect("ring"));
        let descs = || Arc::new(RingMmap::anonymous(4).expect("ring"));
        let (fill, completion, rx, tx) = (addrs(), addrs(), descs(), descs());
        let (area, _) = Mmap::anonymous((FRAMES * FRAME) as usize, false).expect("area");
        let fd = std::fs::File::open("/dev/null").expect("fd").into();
        Harness {
            umem: Umem::over(
                fd,
                FrameArea::new(area, FRAME),
                Producer::new(fill.clone()),
                Consumer::new(completion.clone()),
            ),
            rx: Consumer::new(rx.clone()),
            tx: Producer::new(tx.clone()),
            kernel_fill: Consumer::new(fill),
            kernel_completion: Producer::new(completion),
            kernel_rx: Producer::new(rx),
            kernel_tx: Consumer::new(tx),
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
        assert_eq!(h.umem.fill(1), 1);
        let lent = kernel_take(&mut h.kernel_fill, 4);
        assert_eq!(lent.len(), 1);
        // The kernel receives 60 bytes at an offset (headroom) into that frame.
        kernel_push(&mut h.kernel_rx, &[Desc::new(lent[0] + 256, 60)]);
        let mut got = Vec::new();
        assert_eq!(h.umem.receive(&mut h.rx, 4, &mut got), 0);
        let mut frame = got.pop().expect("one frame");
        assert_eq!((frame.addr(), frame.len()), (lent[0] + 256, 60));
        assert_eq!(frame.capacity(), FRAME - 256);
        h.umem.bytes_mut(&mut frame).fill(7);
        assert_eq!(h.umem.bytes(&frame), &[7; 60][..]);
        assert!(!frame.set_len(FRAME), "beyond the frame's end");
        assert!(frame.set_len(100));
        let mut out = vec![frame];
        assert_eq!(h.umem.transmit(&mut h.tx, &mut out), 1);
        assert!(out.is_empty());
        let sent = kernel_take(&mut h.kernel_tx, 4);
        assert_eq!((sent[0].addr(), sent[0].len()), (lent[0] + 256, 100));
        kernel_push(&mut h.kernel_completion, &[sent[0].addr()]);
        assert_eq!(h.umem.reclaim(4), (1, 0));
        assert_eq!(h.umem.free_frames(), FRAMES as usize);
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
        assert_eq!(h.umem.receive(&mut h.rx, 8, &mut got), 4);
        assert!(got.is_empty());
        kernel_push(&mut h.kernel_completion, &[held.addr(), 1 << 40]);
        assert_eq!(h.umem.reclaim(8), (0, 2));
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
    }

    fn step() -> impl Strategy<Value = Step> {
        let addr = prop_oneof![0..u64::from(FRAMES * FRAME + 64), any::<u64>()];
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
            (addr.clone(), 0u32..3000).prop_map(|(a, l)| Step::HostileRx(a, l)),
            addr.prop_map(Step::HostileCompletion),
        ]
    }

    proptest! {
        /// Against a model of where each frame is (free list, a user token, the kernel), no sequence of
        /// user calls and kernel answers, hostile ones included, ever puts a frame in two places.
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
                    Step::Fill(n) => { h.umem.fill(n); }
                    Step::FillWith(n) => {
                        let n = n.min(tokens.len());
                        let mut give: Vec<Frame> = tokens.drain(..n).collect();
                        h.umem.fill_with(&mut give);
                        tokens.append(&mut give);
                    }
                    Step::Transmit(n) => {
                        let n = n.min(tokens.len());
                        let mut give: Vec<Frame> = tokens.drain(..n).collect();
                        h.umem.transmit(&mut h.tx, &mut give);
                        tokens.append(&mut give);
                    }
                    Step::Receive(n) => { h.umem.receive(&mut h.rx, n, &mut tokens); }
                    Step::Reclaim(n) => { h.umem.reclaim(n); }
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
            }
            for t in tokens { h.umem.release(t); }
        }
    }
}
