//! A pool of page-aligned send buffers, optionally on transparent huge pages.
//!
//! Each [`PooledBuf`] is one slot of a single anonymous mapping ([`crate::sys::pages::PageArena`]);
//! dropping it (directly, or when a sender's completion releases it) puts the slot back. A filled
//! buffer can be frozen ([`PooledBuf::freeze`]) into a [`FrozenBuf`]: read-only and cheap to clone, so
//! the same bytes can be lent to many sends at once — over and over on one socket, or to many sockets —
//! while they stay in the pool's memory (registered with an io_uring, they go out as fixed sends).

use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::sys::pages::{PageArena, PageSlot};

/// How to build a [`BufferPool`].
///
/// Start from [`PoolConfig::new`] or [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Bytes per buffer (rounded up to whole pages).
    pub buf_size: usize,
    /// Number of buffers.
    pub count: usize,
    /// Back the pool with transparent huge pages (`madvise(MADV_HUGEPAGE)`), when the kernel allows.
    ///
    /// Pays for large sends on the `sendmsg` path: the kernel pins a `MSG_ZEROCOPY` send's pages one
    /// by one and makes each a fragment of a socket buffer (at most 17), where a send within one
    /// huge page is one fragment. On the io_uring path keep small pages and register the pool
    /// ([`crate::tx::Sender::register_pool`] declines a pool on huge pages: the kernel would charge
    /// a fixed send from one to the socket as up to the whole page).
    pub huge_pages: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            buf_size: 64 << 10,
            count: 64,
            huge_pages: false,
        }
    }
}

impl PoolConfig {
    /// `count` buffers of `buf_size` bytes each (rounded up to whole pages), on small pages.
    pub fn new(buf_size: usize, count: usize) -> PoolConfig {
        PoolConfig {
            buf_size,
            count,
            huge_pages: false,
        }
    }
}

/// A fixed set of page-aligned buffers. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct BufferPool {
    arena: Arc<PageArena>,
}

impl BufferPool {
    /// Maps the pool's memory. Fails with the `mmap` error (`ENOMEM`: lower `count` or `buf_size`).
    ///
    /// A buffer never shows what its previous user wrote: the bytes [`PooledBuf::set_len`] and
    /// [`PooledBuf::fill_with`] expose beyond what the current user wrote are zero. Each buffer
    /// remembers how far its users ever wrote, so only that part is zeroed, once per user: a pool's
    /// fresh buffers cost nothing, and neither does shrinking and growing one's own data.
    pub fn new(config: PoolConfig) -> io::Result<BufferPool> {
        let arena = PageArena::new(config.buf_size, config.count, config.huge_pages, false)?;
        Ok(BufferPool { arena })
    }

    /// [`BufferPool::new`] for a pool whose buffers keep what their previous user left: a taken
    /// buffer's [`PooledBuf::set_len`] exposes those bytes as they are, and nothing is zeroed. For a
    /// program that fills its buffers once and resends them without writing again (a benchmark
    /// sending one pattern); never for data of different clients or trust, which one user could
    /// then read from the next.
    pub fn new_keeping_contents(config: PoolConfig) -> io::Result<BufferPool> {
        let arena = PageArena::new(config.buf_size, config.count, config.huge_pages, true)?;
        Ok(BufferPool { arena })
    }

    /// Takes a free buffer (empty, capacity [`BufferPool::buf_size`]), or `None` when every buffer is out
    /// (in the application or lent to the kernel: drain completions and retry).
    pub fn take(&self) -> Option<PooledBuf> {
        self.arena.take().map(|slot| PooledBuf { slot })
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.arena.slot_size()
    }

    /// Number of buffers.
    pub fn capacity(&self) -> usize {
        self.arena.count()
    }

    /// Buffers in the pool right now.
    pub fn available(&self) -> usize {
        self.arena.available()
    }

    /// The mapping behind the pool, for registering it with an io_uring.
    #[cfg(feature = "io-uring")]
    pub(crate) fn arena(&self) -> &Arc<PageArena> {
        &self.arena
    }

    /// Whether transparent huge pages back the pool, or why not.
    pub fn huge_pages(&self) -> Result<(), &str> {
        self.arena.huge_pages()
    }
}

/// One buffer of a [`BufferPool`]: dereferences to its data (`len` bytes) and returns to the pool when
/// dropped.
#[derive(Debug)]
pub struct PooledBuf {
    slot: PageSlot,
}

impl PooledBuf {
    /// The buffer's capacity.
    pub fn capacity(&self) -> usize {
        self.slot.capacity()
    }

    /// Sets the data length (clamped to the capacity). Bytes it exposes that this user did not write
    /// are zero (or, in a pool made with [`BufferPool::new_keeping_contents`], whatever the previous
    /// user left).
    pub fn set_len(&mut self, len: usize) {
        self.slot.set_len(len);
    }

    /// Fills the buffer with `f` over `len` bytes (clamped to the capacity) and sets its length. `f`
    /// sees zeroes where this user wrote nothing yet (see [`PooledBuf::set_len`]).
    pub fn fill_with(&mut self, len: usize, f: impl FnOnce(&mut [u8])) {
        self.slot.fill_with(len, f);
    }

    /// Makes the buffer read-only and shareable: every clone of the [`FrozenBuf`] may be lent to a
    /// send while others are in flight (the kernel only reads lent bytes), and the slot returns to the
    /// pool when the last clone is dropped — by the application or by the completion of the last send
    /// that covered it.
    pub fn freeze(self) -> FrozenBuf {
        FrozenBuf {
            slot: Arc::new(self.slot),
        }
    }
}

/// A read-only [`PooledBuf`] shared by its clones (see [`PooledBuf::freeze`]); it dereferences to its
/// data. No clone can change the bytes, so lending one to the kernel while others are lent, or read, is
/// safe.
#[derive(Debug, Clone)]
pub struct FrozenBuf {
    slot: Arc<PageSlot>,
}

impl Deref for FrozenBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.slot
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.slot
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.slot
    }
}
