//! The UMEM: the frame area shared with the kernel, and its fill and completion rings.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::error::{Error, Result};
use super::ring::{Consumer, Desc, Producer};
use super::socket::BoundMode;
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

/// A descriptor that failed validation against the UMEM: its address or length lies outside the area,
/// or the packet crosses a frame boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidDescriptor {
    /// The rejected descriptor.
    pub desc: Desc,
}

impl fmt::Display for InvalidDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid descriptor: address {:#x} length {} is not inside one UMEM frame",
            self.desc.addr, self.desc.len
        )
    }
}

impl std::error::Error for InvalidDescriptor {}

/// A packet in the UMEM whose descriptor passed [`Umem::validate`]: its bytes lie inside one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    addr: u64,
    len: u32,
}

impl Frame {
    /// UMEM address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A registered frame area with its fill and completion rings. Frames are tracked by address: a free
/// list here, or lent to the kernel through the fill or tx ring until they come back through the rx or
/// completion ring.
#[derive(Debug)]
pub struct Umem {
    fd: Arc<OwnedFd>,
    /// Whether a socket already bound using `fd` itself (later sockets share the UMEM).
    pub(crate) owner_bound: bool,
    /// The mode of the first bound socket (sharing sockets inherit it).
    pub(crate) bound_mode: Option<BoundMode>,
    area: Mmap,
    frame_size: u32,
    frame_count: u32,
    huge_pages: bool,
    fill: Producer<u64>,
    completion: Consumer<u64>,
    free: Vec<u64>,
}

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
        Ok(Umem {
            fd: Arc::new(fd),
            owner_bound: false,
            bound_mode: None,
            area,
            frame_size,
            frame_count: config.frame_count,
            huge_pages,
            fill: Producer::new(Arc::new(fill)),
            completion: Consumer::new(Arc::new(completion)),
            free: (0..config.frame_count as u64)
                .rev()
                .map(|i| i * frame_size as u64)
                .collect(),
        })
    }

    pub(crate) fn shared_fd(&self) -> Arc<OwnedFd> {
        self.fd.clone()
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
        self.free.len()
    }

    /// Takes a free frame; returns its address.
    pub fn alloc(&mut self) -> Option<u64> {
        self.free.pop()
    }

    /// Returns the frame containing `addr` to the free list (the caller must no longer use it);
    /// an address outside the area is ignored.
    pub fn release(&mut self, addr: u64) {
        if addr < self.area.len() as u64 {
            self.free.push(addr - addr % self.frame_size as u64);
        }
    }

    /// Checks that `desc` describes bytes inside a single frame of this UMEM.
    pub fn validate(&self, desc: Desc) -> std::result::Result<Frame, InvalidDescriptor> {
        validate(self.area.len() as u64, self.frame_size as u64, desc)
    }

    /// The packet bytes of a validated frame (empty for a frame of another, smaller UMEM).
    ///
    /// The frame must be one the kernel handed to user space (rx ring) and not yet given back.
    pub fn data(&self, frame: &Frame) -> &[u8] {
        self.area
            .bytes(frame.addr as usize, frame.len as usize)
            .unwrap_or_default()
    }

    /// The whole frame at `addr` for writing (e.g. to build a packet to send), or `None` when `addr` is
    /// outside the area. The frame must be one user space owns (allocated or received).
    pub fn frame_mut(&mut self, addr: u64) -> Option<&mut [u8]> {
        let fs = self.frame_size as u64;
        let base = addr - addr % fs;
        self.area
            .bytes_mut(addr as usize, (base + fs).checked_sub(addr)? as usize)
    }

    /// Moves up to `max` free frames onto the fill ring for the kernel to receive into; returns how many.
    pub fn fill(&mut self, max: u32) -> u32 {
        let mut r = self.fill.reserve(max.min(self.free.len() as u32));
        while r.remaining() > 0 {
            match self.free.pop() {
                Some(addr) => {
                    if let Err(addr) = r.push(addr) {
                        self.free.push(addr);
                        break;
                    }
                }
                None => break,
            }
        }
        r.submit()
    }

    /// Puts specific frame addresses on the fill ring (a forwarder recycling frames); returns how many
    /// fitted — the rest stay with the caller.
    pub fn fill_with(&mut self, addrs: &[u64]) -> u32 {
        let mut r = self.fill.reserve(addrs.len() as u32);
        for &a in addrs {
            if r.push(a).is_err() {
                break;
            }
        }
        r.submit()
    }

    /// Takes up to `max` completed tx frames back onto the free list. Returns the number reclaimed and
    /// the number of completion entries that did not name a frame of this UMEM (skipped).
    pub fn reclaim(&mut self, max: u32) -> (u32, u32) {
        let (area_len, fs) = (self.area.len() as u64, self.frame_size as u64);
        let batch = self.completion.peek(max);
        let mut invalid = 0;
        for addr in batch.iter() {
            let desc = Desc {
                addr,
                len: 0,
                options: 0,
            };
            match validate(area_len, fs, desc) {
                Ok(_) => self.free.push(addr - addr % fs),
                Err(_) => invalid += 1,
            }
        }
        let n = batch.len();
        batch.release();
        (n - invalid, invalid)
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

/// Accepts `desc` when its bytes lie inside one `frame_size` frame of an area of `area_len` bytes.
fn validate(
    area_len: u64,
    frame_size: u64,
    desc: Desc,
) -> std::result::Result<Frame, InvalidDescriptor> {
    let inside = desc.addr.checked_add(desc.len as u64).is_some_and(|end| {
        desc.addr < area_len
            && end <= area_len
            && (desc.addr % frame_size) + desc.len as u64 <= frame_size
    });
    if inside {
        Ok(Frame {
            addr: desc.addr,
            len: desc.len,
        })
    } else {
        Err(InvalidDescriptor { desc })
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

    fn desc(addr: u64, len: u32) -> Desc {
        Desc {
            addr,
            len,
            options: 0,
        }
    }

    /// Validation only needs the area and the frame size; a UMEM over anonymous memory with fake rings.
    fn fake_umem(frame_count: u32) -> Umem {
        let (area, _) = Mmap::anonymous(2048 * frame_count as usize, false).expect("area");
        let fill = Arc::new(RingMmap::anonymous(8).expect("ring"));
        let completion = Arc::new(RingMmap::anonymous(8).expect("ring"));
        let fd = std::fs::File::open("/dev/null").expect("fd").into();
        Umem {
            fd: Arc::new(fd),
            owner_bound: false,
            bound_mode: None,
            area,
            frame_size: 2048,
            frame_count,
            huge_pages: false,
            fill: Producer::new(fill),
            completion: Consumer::new(completion),
            free: Vec::new(),
        }
    }

    #[test]
    fn descriptors_inside_one_frame_are_accepted() {
        let u = fake_umem(4);
        assert!(u.validate(desc(0, 2048)).is_ok());
        assert!(u.validate(desc(2048 + 256, 1500)).is_ok());
        assert!(u.validate(desc(3 * 2048 + 2047, 1)).is_ok());
        assert_eq!(u.data(&u.validate(desc(100, 60)).expect("valid")).len(), 60);
    }

    #[test]
    fn out_of_range_or_frame_crossing_descriptors_are_rejected() {
        let u = fake_umem(4);
        for bad in [
            desc(4 * 2048, 1),
            desc(4 * 2048 - 10, 11),
            desc(2000, 100),
            desc(u64::MAX - 5, 10),
            desc(u64::MAX, 0),
            desc(4 * 2048, 0),
            desc(0, 2049),
        ] {
            assert_eq!(
                u.validate(bad),
                Err(InvalidDescriptor { desc: bad }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn completions_outside_the_umem_are_skipped() {
        let mut u = fake_umem(4);
        let mut kernel = Producer::<u64>::new(u.completion.ring_for_test());
        let mut r = kernel.reserve(3);
        for a in [2048, 1 << 40, 4096 + 100] {
            r.push(a).expect("room");
        }
        assert_eq!(r.submit(), 3);
        assert_eq!(u.reclaim(8), (2, 1));
        assert_eq!(u.free_frames(), 2);
        assert_eq!(u.alloc(), Some(4096), "frame base of a completed offset");
        u.release(4 * 2048);
        assert_eq!(u.free_frames(), 1, "addresses outside the area are not freed");
    }

    #[test]
    fn fill_moves_free_frames_up_to_the_ring_size() {
        let mut u = fake_umem(16);
        u.free = (0..16).map(|i| i * 2048).collect();
        assert_eq!(u.fill(100), 8, "the fake fill ring has 8 slots");
        assert_eq!(u.free_frames(), 8);
        assert_eq!(u.fill_outstanding(), 8);
    }
}
