//! The UMEM's frame area and who owns each frame in it: the free list, user space (a [`Frame`] token)
//! or one of the kernel's buffer pools (lent through the fill ring or a tx ring of the sockets bound to
//! one queue). The only code that makes slices of UMEM memory, and it makes them only from tokens, so
//! safe code never gets a reference to a frame the kernel owns.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use super::xdp::{Mmap, TX_METADATA_LEN, register_umem, write_checksum_request};

/// A frame of a UMEM that user space owns: the only way to its bytes. Neither `Copy` nor `Clone`: a
/// frame is in exactly one place — this token, the UMEM's free list, or lent to the kernel through the
/// fill or tx ring — and handing it to a ring or back to the free list consumes it.
///
/// Frames come from [`Umem::alloc`](crate::xdp::Umem::alloc) (the free list) and
/// [`Socket::receive`](crate::xdp::Socket::receive) (the rx ring), and go to
/// [`Socket::fill_with`](crate::xdp::Socket::fill_with) (fill ring),
/// [`Socket::transmit`](crate::xdp::Socket::transmit) (tx ring) or
/// [`Umem::release`](crate::xdp::Umem::release) (free list). Dropping a token leaks its frame: it is
/// never reused, so it can never be in two places.
///
/// A token cannot be used twice:
///
/// ```compile_fail
/// fn twice(umem: &mut zcnet::xdp::Umem) {
///     let frame = umem.alloc().expect("a free frame");
///     umem.release(frame);
///     umem.release(frame); // error[E0382]: use of moved value: `frame`
/// }
/// ```
///
/// With multi-buffer (`XDP_USE_SG`) a packet larger than a frame spans several frames in a row; every
/// frame but the last [`continues`](Frame::continues) into the next (`XDP_PKT_CONTD`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a dropped frame is leaked: release it, fill it or transmit it"]
pub struct Frame {
    area: u64,
    addr: u64,
    len: u32,
    capacity: u32,
    continues: bool,
    /// Whether a TX metadata request was written before the packet (`XDP_TX_METADATA`).
    tx_metadata: bool,
}

impl Frame {
    /// UMEM address of the packet's first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Packet length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes from the packet's first byte to the end of its frame: the most [`Frame::set_len`] accepts.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Whether the packet goes on in the next frame (`XDP_PKT_CONTD`: every frame of a multi-buffer
    /// packet but its last).
    pub fn continues(&self) -> bool {
        self.continues
    }

    /// Marks the frame as continued by the next one of the same packet (set it on every frame of a
    /// multi-buffer packet to send but the last; needs a socket bound with multi-buffer).
    pub fn set_continues(&mut self, continues: bool) {
        self.continues = continues;
    }

    /// Sets the packet length (e.g. after building a packet to send); false, and no change, when
    /// `len` exceeds [`Frame::capacity`].
    pub fn set_len(&mut self, len: u32) -> bool {
        let fits = len <= self.capacity;
        if fits {
            self.len = len;
        }
        fits
    }
}

/// Where a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On the free list.
    Free,
    /// Held by user space as a [`Frame`] token.
    User,
    /// Lent to the kernel buffer pool with this tag (its fill ring, or the tx ring of one of its
    /// sockets), until an rx ring or its completion ring returns it, or the pool is gone.
    Kernel(u32),
}

/// Gives every area a distinct id, so a frame token is only accepted by its own area.
static NEXT_AREA_ID: AtomicU64 = AtomicU64::new(1);

/// The frames of one UMEM and their owners. Invariant: a frame whose place is `User` has exactly one
/// live [`Frame`] token (of this area), a `Free` one is on the free list exactly once, a `Kernel` one
/// is neither; slices of the mapping are made only for `User` frames, through their token. A kernel
/// pool returns frames only as it lent them (a descriptor is accepted from the pool holding the frame).
#[derive(Debug)]
pub struct FrameArea {
    map: Mmap,
    id: u64,
    frame_size: u32,
    /// Bytes of TX metadata before each packet to send ([`FrameArea::reserve_tx_metadata`]).
    tx_metadata_len: u32,
    places: Vec<Place>,
    free: Vec<u32>,
}

impl FrameArea {
    /// `map` cut into frames of `frame_size` bytes (`map.len()` is a multiple of it), all free.
    pub fn new(map: Mmap, frame_size: u32) -> FrameArea {
        let count = (map.len() / frame_size as usize) as u32;
        FrameArea {
            map,
            id: NEXT_AREA_ID.fetch_add(1, Ordering::Relaxed),
            frame_size,
            tx_metadata_len: 0,
            places: vec![Place::Free; count as usize],
            free: (0..count).rev().collect(),
        }
    }

    /// Frame size in bytes.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub fn frame_count(&self) -> u32 {
        self.places.len() as u32
    }

    /// Frames on the free list.
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    fn base(&self, index: u32) -> u64 {
        u64::from(index) * u64::from(self.frame_size)
    }

    /// Takes a free frame as a token (empty packet, whole frame as capacity).
    pub fn alloc(&mut self) -> Option<Frame> {
        let index = self.free.pop()?;
        self.places[index as usize] = Place::User;
        Some(Frame {
            area: self.id,
            addr: self.base(index) + u64::from(self.tx_metadata_len),
            len: 0,
            capacity: self.frame_size - self.tx_metadata_len,
            continues: false,
            tx_metadata: false,
        })
    }

    /// The frame index of a token, after checking that it is one of this area's.
    ///
    /// # Panics
    /// When `frame` belongs to another area (a programming error, like an index out of bounds).
    fn index_of(&self, frame: &Frame) -> usize {
        assert_eq!(frame.area, self.id, "a frame token of another UMEM");
        (frame.addr / u64::from(self.frame_size)) as usize
    }

    /// Puts the frame back on the free list.
    pub fn release(&mut self, frame: Frame) {
        let index = self.index_of(&frame);
        self.places[index] = Place::Free;
        self.free.push(index as u32);
    }

    /// Lends a free frame to kernel pool `pool`; returns its address.
    pub fn lend_free(&mut self, pool: u32) -> Option<u64> {
        let index = self.free.pop()?;
        self.places[index as usize] = Place::Kernel(pool);
        Some(self.base(index))
    }

    /// Lends the token's frame to kernel pool `pool`; returns the packet's address, length, whether
    /// it continues in the next frame and whether it carries a TX metadata request.
    pub fn lend(&mut self, frame: Frame, pool: u32) -> (u64, u32, bool, bool) {
        let index = self.index_of(&frame);
        self.places[index] = Place::Kernel(pool);
        (frame.addr, frame.len, frame.continues, frame.tx_metadata)
    }

    /// Reserves [`TX_METADATA_LEN`] bytes of TX metadata before each packet to send: frames from
    /// [`FrameArea::alloc`] start that far into their chunk, and [`FrameArea::register`] asks the
    /// kernel for it. Only before the area is registered.
    pub fn reserve_tx_metadata(&mut self) {
        self.tx_metadata_len = TX_METADATA_LEN;
    }

    /// Bytes reserved for TX metadata before each packet to send (0: none).
    pub fn tx_metadata_len(&self) -> u32 {
        self.tx_metadata_len
    }

    /// Asks the kernel to checksum the token's packet from `csum_start` to its end and store the
    /// sum at `csum_start + csum_offset` (a `struct xsk_tx_metadata` before the packet, sent with
    /// `XDP_TX_METADATA`). False, and nothing written, when no TX metadata is reserved or the
    /// packet starts too early in its frame to have it in front.
    pub fn request_tx_checksum(
        &mut self,
        frame: &mut Frame,
        csum_start: u16,
        csum_offset: u16,
    ) -> bool {
        let index = self.index_of(frame);
        let md = u64::from(self.tx_metadata_len);
        if md == 0 || frame.addr - self.base(index as u32) < md {
            return false;
        }
        // SAFETY: the token proves its frame's place is `User`; `addr - md..addr` lies inside that
        // frame (checked above), and `&mut self` excludes every other slice of the mapping.
        let Some(meta) = (unsafe { self.map.bytes_mut((frame.addr - md) as usize, md as usize) })
        else {
            return false;
        };
        write_checksum_request(meta, csum_start, csum_offset);
        frame.tx_metadata = true;
        true
    }

    /// The frame index of `addr` when kernel pool `pool` holds that frame.
    fn lent_index(&self, addr: u64, pool: u32) -> Option<usize> {
        let index = usize::try_from(addr / u64::from(self.frame_size)).ok()?;
        (self.places.get(index) == Some(&Place::Kernel(pool))).then_some(index)
    }

    /// Pool `pool` finished sending the frame at `addr` (its completion ring): back to the free list.
    /// False, and nothing changes, when that pool does not hold that frame.
    pub fn completed(&mut self, addr: u64, pool: u32) -> bool {
        let Some(index) = self.lent_index(addr, pool) else {
            return false;
        };
        self.places[index] = Place::Free;
        self.free.push(index as u32);
        true
    }

    /// Pool `pool` received `len` bytes at `addr` (an rx ring of one of its sockets), continued in the
    /// next frame when `continues`: a token for that frame. `None`, and nothing changes, when the
    /// bytes are not inside one frame or that pool does not hold that frame.
    pub fn received(&mut self, addr: u64, len: u32, continues: bool, pool: u32) -> Option<Frame> {
        let frame_size = u64::from(self.frame_size);
        let end = addr.checked_add(u64::from(len))?;
        if end > self.map.len() as u64 || (addr % frame_size) + u64::from(len) > frame_size {
            return None;
        }
        let index = self.lent_index(addr, pool)?;
        self.places[index] = Place::User;
        Some(Frame {
            area: self.id,
            addr,
            len,
            capacity: (self.base(index as u32) + frame_size - addr) as u32,
            continues,
            tx_metadata: false,
        })
    }

    /// Pool `pool` is gone and the kernel writes none of its frames any more: every frame it held goes
    /// back to the free list. Returns how many.
    pub fn reclaim_pool(&mut self, pool: u32) -> u32 {
        let mut returned = 0;
        for (index, place) in self.places.iter_mut().enumerate() {
            if *place == Place::Kernel(pool) {
                *place = Place::Free;
                self.free.push(index as u32);
                returned += 1;
            }
        }
        returned
    }

    /// Registers the area as the UMEM of the AF_XDP socket `fd` (`XDP_UMEM_REG`) with `headroom` bytes
    /// before each received packet.
    pub fn register(&self, fd: BorrowedFd<'_>, headroom: u32) -> io::Result<()> {
        register_umem(
            fd,
            &self.map,
            self.frame_size,
            (headroom, self.tx_metadata_len),
        )
    }

    /// The packet bytes of the token's frame.
    pub fn bytes(&self, frame: &Frame) -> &[u8] {
        self.index_of(frame);
        // SAFETY: the token proves its frame's place is `User` (the kernel holds it on no ring and
        // writes it no more), `addr..addr + len` lies inside that frame (checked when the token was
        // made, `len <= capacity`), and the borrow of the token keeps it from being lent meanwhile.
        unsafe { self.map.bytes(frame.addr as usize, frame.len as usize) }.unwrap_or_default()
    }

    /// The token's frame from the packet's first byte to the end of the frame, for writing.
    pub fn buffer_mut(&mut self, frame: &mut Frame) -> &mut [u8] {
        self.index_of(frame);
        // SAFETY: as in `bytes`, for `addr..addr + capacity` (the rest of the frame); `&mut self`
        // excludes every other slice of the mapping for the slice's lifetime.
        unsafe {
            self.map
                .bytes_mut(frame.addr as usize, frame.capacity as usize)
        }
        .unwrap_or_default()
    }

    /// Where each frame is, for the model tests: (free list, places as 'F'/'U'/'K').
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> (Vec<u32>, String) {
        let places = self
            .places
            .iter()
            .map(|p| match p {
                Place::Free => 'F',
                Place::User => 'U',
                Place::Kernel(_) => 'K',
            })
            .collect();
        (self.free.clone(), places)
    }
}
