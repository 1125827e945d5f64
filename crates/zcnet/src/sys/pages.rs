//! Page-aligned memory for zero-copy send buffers: one anonymous mapping cut into equal slots, each
//! handed out to exactly one owner at a time.
//!
//! A new owner of a slot sees none of the bytes an earlier owner wrote (unless the arena was made to
//! keep them): each slot remembers how far its owners ever wrote, and the bytes an owner exposes
//! ([`PageSlot::set_len`], [`PageSlot::fill_with`]) that it did not write itself are zeroed first —
//! only up to that mark, since the mapping's bytes beyond it are still zero.
//!
//! Kernel behaviour relied on: `mmap(MAP_ANONYMOUS | MAP_PRIVATE)` returns page-aligned, zeroed memory;
//! `madvise(MADV_HUGEPAGE)` asks for transparent huge pages on a 2 MiB-aligned range (it fails with
//! `EINVAL` when THP is compiled out), and `MADV_NOHUGEPAGE` keeps a range on small pages, every
//! multi-size THP included, when THP is enabled `always`. MSG_ZEROCOPY pins the pages of each send,
//! so page-aligned buffers waste no partial pages.

use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::tcp_zc::page_size;

const HUGE_PAGE: usize = 2 << 20;

/// The system's transparent huge page mode: `[always]`, `[madvise]` or `[never]` is selected.
const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// Whether `MADV_HUGEPAGE` takes effect on this system ([`THP_ENABLED`]), or why not: not on a
/// kernel built without transparent huge pages (no such file), nor under `never`.
pub(crate) fn thp_advice_takes_effect() -> Result<(), String> {
    match std::fs::read_to_string(THP_ENABLED) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "this kernel has no transparent huge pages (no {THP_ENABLED})"
        )),
        mode => thp_mode_allows_advice(&mode.unwrap_or_default()),
    }
}

/// Whether `MADV_HUGEPAGE` takes effect under `mode`, read from [`THP_ENABLED`]: not under
/// `never`, where `madvise` still succeeds. A mode that could not be read (empty) is given the
/// benefit of the doubt (the advice succeeded).
fn thp_mode_allows_advice(mode: &str) -> Result<(), String> {
    if mode.contains("[never]") {
        Err(format!(
            "transparent huge pages are off ({THP_ENABLED}: never)"
        ))
    } else {
        Ok(())
    }
}

/// An anonymous mapping divided into `count` slots of `slot_size` bytes (a multiple of the page size).
/// Slots are taken with [`PageArena::take`] and come back when the [`PageSlot`] is dropped.
#[derive(Debug)]
pub struct PageArena {
    base: NonNull<u8>,
    map_len: usize,
    slot_size: usize,
    count: usize,
    huge_pages: Result<(), String>,
    /// Whether a new owner of a slot sees what the earlier owners left in it.
    keep_contents: bool,
    /// The free slots.
    free: Mutex<FreeSlots>,
}

/// The slots of a [`PageArena`] not handed out: those given back, each with how far its earlier
/// owners could write (bytes from there on are still the mapping's zeroes), and the slots from
/// `untouched` to the arena's count, never handed out. The list grows only with slots given back,
/// so a pool of many buffers costs memory for the buffers it used, not for its count.
#[derive(Debug, Default)]
struct FreeSlots {
    returned: Vec<(u32, usize)>,
    untouched: usize,
}

// SAFETY: the mapping is owned by the arena; slot bytes are only reached through a `PageSlot`, which the
// free list hands to one owner at a time, so sharing the arena between threads shares no bytes.
unsafe impl Send for PageArena {}
// SAFETY: as above; the free list is behind a mutex.
unsafe impl Sync for PageArena {}

impl PageArena {
    /// Maps `count` slots of at least `slot_size` bytes (rounded up to whole pages). With `huge_pages`
    /// the mapping is 2 MiB aligned and advised `MADV_HUGEPAGE`; the outcome is in
    /// [`PageArena::huge_pages`]. With `keep_contents` a slot's new owner sees whatever the previous
    /// one left; without, it sees only zeroes and its own writes.
    pub fn new(
        slot_size: usize,
        count: usize,
        huge_pages: bool,
        keep_contents: bool,
    ) -> io::Result<Arc<PageArena>> {
        let page = page_size();
        let too_large = || io::Error::new(io::ErrorKind::InvalidInput, "pool too large");
        // Every size below is bounded here: the mapping is at most isize::MAX / 2 bytes, so the
        // alignment padding added to it and each slot's offset (index * slot_size) cannot overflow.
        let slot_size = slot_size
            .max(1)
            .div_ceil(page)
            .checked_mul(page)
            .ok_or_else(too_large)?;
        let len = slot_size
            .checked_mul(count.max(1))
            .filter(|&l| l <= isize::MAX as usize / 2 && count <= u32::MAX as usize)
            .ok_or_else(too_large)?;
        let align = if huge_pages { HUGE_PAGE } else { page };
        let map_len = len.div_ceil(align) * align;
        let reserve = map_len + align - page;
        // SAFETY: anonymous private mapping at an address of the kernel's choosing; no fd involved.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = raw as usize;
        let aligned = start.div_ceil(align) * align;
        let (head, tail) = (aligned - start, reserve - (aligned - start) - map_len);
        // SAFETY: both trims lie inside the reservation just mapped, start on page boundaries and
        // are whole pages long (the reservation and `aligned` are page-aligned); nothing references them.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + map_len) as *mut libc::c_void, tail);
            }
        }
        let base = NonNull::new(aligned as *mut u8).expect("mmap never returns address 0 here");
        let huge = if huge_pages {
            // SAFETY: advising a range we own; advice does not change its contents.
            syscall!(madvise(base.as_ptr().cast(), map_len, libc::MADV_HUGEPAGE))
                .map(drop)
                .map_err(|e| format!("madvise(MADV_HUGEPAGE): {}", super::errno::error_name(&e)))
                .and_then(|()| thp_advice_takes_effect())
        } else {
            // Kept on small pages even where THP is `always`: registered with an io_uring, a huge
            // page is one piece, and each fixed send from it is charged to the socket from the
            // page's start (the io_uring send path declines to register huge pages for that).
            // EINVAL without THP, where nothing is huge anyway.
            // SAFETY: as above.
            let _ = syscall!(madvise(
                base.as_ptr().cast(),
                map_len,
                libc::MADV_NOHUGEPAGE
            ));
            Err("not requested".to_string())
        };
        Ok(Arc::new(PageArena {
            base,
            map_len,
            slot_size,
            count,
            huge_pages: huge,
            keep_contents,
            free: Mutex::new(FreeSlots::default()),
        }))
    }

    /// Bytes per slot (a multiple of the page size).
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Number of slots.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Slots not handed out right now.
    pub fn available(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        free.returned.len() + (self.count - free.untouched)
    }

    /// Whether the mapping was advised onto transparent huge pages, or why not (also when the
    /// system's THP mode is `never`, under which the advice succeeds and does nothing).
    pub fn huge_pages(&self) -> Result<(), &str> {
        self.huge_pages.as_ref().map(|_| ()).map_err(String::as_str)
    }

    /// The whole mapping: its start and length (what `IORING_REGISTER_BUFFERS` pins).
    #[cfg(feature = "io-uring")]
    pub fn region(&self) -> (*const u8, usize) {
        (self.base.as_ptr().cast_const(), self.map_len)
    }

    /// Whether all of `bytes` lie inside the mapping.
    #[cfg(feature = "io-uring")]
    pub fn contains(&self, bytes: &[u8]) -> bool {
        let start = self.base.as_ptr() as usize;
        let at = bytes.as_ptr() as usize;
        at >= start && at + bytes.len() <= start + self.map_len
    }

    /// Takes a free slot (length 0), or `None` when all are out.
    pub fn take(self: &Arc<Self>) -> Option<PageSlot> {
        let (index, written) = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            match free.returned.pop() {
                Some(slot) => slot,
                None if free.untouched < self.count => {
                    free.untouched += 1;
                    // `new` keeps the count within u32.
                    ((free.untouched - 1) as u32, 0)
                }
                None => return None,
            }
        };
        Some(PageSlot {
            arena: Arc::clone(self),
            index,
            len: 0,
            mine: if self.keep_contents {
                self.slot_size
            } else {
                0
            },
            written,
        })
    }
}

impl Drop for PageArena {
    fn drop(&mut self) {
        // SAFETY: every `PageSlot` holds an `Arc` of the arena, so none is left; the range is ours.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// One slot of a [`PageArena`], owned exclusively: it dereferences to its first `len` bytes and goes
/// back to the arena's free list when dropped.
///
/// Invariant: `len <= mine <= capacity`, so what the slot dereferences to is always the owner's own.
#[derive(Debug)]
pub struct PageSlot {
    arena: Arc<PageArena>,
    index: u32,
    len: usize,
    /// Bytes `..mine` are this owner's to see: written or zeroed since it took the slot (all of
    /// them in an arena that keeps contents).
    mine: usize,
    /// How far the slot's earlier owners could write: bytes from there on are the mapping's zeroes.
    written: usize,
}

impl PageSlot {
    /// The slot's capacity (the arena's slot size).
    pub fn capacity(&self) -> usize {
        self.arena.slot_size
    }

    /// Sets the length of the data (clamped to the capacity). Bytes exposed beyond what this owner
    /// wrote are zero (or, in an arena that keeps contents, what the previous owner left).
    pub fn set_len(&mut self, len: usize) {
        let len = len.min(self.capacity());
        self.make_mine(len);
        self.len = len;
    }

    /// Hands the first `len` bytes (clamped to the capacity) to `f` to fill, then sets the length to
    /// them. `f` sees zeroes where this owner wrote nothing yet (or, in an arena that keeps contents,
    /// what the previous owner left).
    pub fn fill_with(&mut self, len: usize, f: impl FnOnce(&mut [u8])) {
        let len = len.min(self.capacity());
        self.make_mine(len);
        f(&mut self.whole_mut()[..len]);
        self.len = len;
    }

    /// Zeroes what earlier owners wrote in `mine..upto` (at most up to where they wrote), making the
    /// bytes up to `upto` this owner's.
    fn make_mine(&mut self, upto: usize) {
        if upto <= self.mine {
            return;
        }
        let (start, end) = (self.mine, upto.min(self.written));
        if start < end {
            self.whole_mut()[start..end].fill(0);
        }
        self.mine = upto;
    }

    /// The whole slot, whoever wrote its bytes: only for the methods above, which expose no more
    /// than the owner's own.
    fn whole_mut(&mut self) -> &mut [u8] {
        let cap = self.capacity();
        // SAFETY: the slot's range lies inside the live mapping (the `Arc` keeps it alive) and the free
        // list handed this index to this `PageSlot` alone; `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), cap) }
    }

    fn ptr(&self) -> *mut u8 {
        // The offset stays inside the mapping: index < count and count * slot_size <= map_len.
        self.arena
            .base
            .as_ptr()
            .wrapping_add(self.index as usize * self.arena.slot_size)
    }
}

impl Deref for PageSlot {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: as in `spare_mut`; `len <= capacity` and the borrow is shared with `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }
}

impl DerefMut for PageSlot {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.whole_mut()[..len]
    }
}

impl Drop for PageSlot {
    fn drop(&mut self) {
        // This owner could write up to `mine` (through `fill_with`, or `DerefMut` after `set_len`).
        let written = self.written.max(self.mine);
        self.arena
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .returned
            .push((self.index, written));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_go_out_in_order_given_back_ones_first_each_once() {
        let count = 1 << 16;
        let arena = PageArena::new(4096, count, false, false).unwrap();
        assert_eq!(arena.available(), count);
        let (a, b) = (arena.take().unwrap(), arena.take().unwrap());
        assert_eq!((a.index, b.index), (0, 1));
        drop(a);
        assert_eq!(arena.available(), count - 1);
        let again = arena.take().unwrap();
        assert_eq!(
            again.index, 0,
            "a slot given back goes out before an untouched one"
        );
        let mut seen = vec![false; count];
        seen[0] = true;
        seen[1] = true;
        let mut held = vec![again, b];
        while let Some(slot) = arena.take() {
            assert!(!seen[slot.index as usize], "slot {} twice", slot.index);
            seen[slot.index as usize] = true;
            held.push(slot);
        }
        assert_eq!(held.len(), count);
        assert_eq!(arena.available(), 0);
        drop(held);
        assert_eq!(arena.available(), count);
    }

    #[test]
    fn slots_are_page_aligned_exclusive_and_recycled() {
        let arena = PageArena::new(5000, 3, false, false).unwrap();
        assert_eq!(arena.slot_size() % page_size(), 0);
        let mut a = arena.take().unwrap();
        let mut b = arena.take().unwrap();
        let c = arena.take().unwrap();
        assert!(arena.take().is_none());
        assert_eq!(arena.available(), 0);
        a.fill_with(3, |b| b.copy_from_slice(b"abc"));
        b.set_len(usize::MAX);
        assert_eq!(&a[..], b"abc");
        assert_eq!(b.len(), arena.slot_size());
        for s in [&a, &b, &c] {
            assert_eq!(s.as_ptr() as usize % page_size(), 0);
        }
        drop(b);
        assert_eq!(arena.available(), 1);
        drop((a, c));
        assert_eq!(arena.available(), 3);
    }

    #[test]
    fn thp_mode_never_means_no_huge_pages() {
        assert_eq!(thp_mode_allows_advice("always [madvise] never\n"), Ok(()));
        assert_eq!(thp_mode_allows_advice("[always] madvise never\n"), Ok(()));
        let off = thp_mode_allows_advice("always madvise [never]\n").unwrap_err();
        assert!(off.contains("never"), "{off}");
        assert_eq!(thp_mode_allows_advice(""), Ok(()), "unreadable");
    }

    #[test]
    fn huge_page_arena_is_2mib_aligned() {
        let arena = PageArena::new(64 << 10, 40, true, false).unwrap();
        let s = arena.take().unwrap();
        assert_eq!(s.as_ptr() as usize % HUGE_PAGE, 0);
        if let Err(reason) = arena.huge_pages() {
            eprintln!("transparent huge pages not used: {reason}");
        }
    }
}
