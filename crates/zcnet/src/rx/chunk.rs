//! A chunk of the received stream, borrowed from its [`Receiver`].

use std::fmt;
use std::ops::{Deref, Range};

use super::Receiver;

/// How the bytes of a [`Chunk`] reached user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// Received pages mapped into the receiver's window by `TCP_ZEROCOPY_RECEIVE`: no copy.
    Mapped,
    /// Copied by the kernel into the copy buffer during `TCP_ZEROCOPY_RECEIVE` (copybuf).
    Copybuf,
    /// Read with `recv` into the copy buffer.
    Recv,
}

/// Consecutive bytes of the stream, starting at [`Chunk::offset`], readable through `Deref<[u8]>`.
///
/// A chunk borrows its receiver, so the mapped pages or the copy buffer behind it cannot be replaced
/// while it lives. Dropping a mapped chunk releases its pages (`MADV_DONTNEED`) under
/// [`Release::Zap`](super::Release::Zap), or leaves them for the next receive to replace.
pub struct Chunk<'a> {
    pub(super) rx: &'a mut Receiver,
    pub(super) kind: ChunkKind,
    pub(super) range: Range<usize>,
    pub(super) offset: u64,
}

impl Chunk<'_> {
    /// How these bytes arrived.
    pub fn kind(&self) -> ChunkKind {
        self.kind
    }

    /// The stream offset of the first byte: the number of bytes handed out before this chunk.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Deref for Chunk<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.rx.chunk_bytes(self.kind, self.range.clone())
    }
}

impl Drop for Chunk<'_> {
    fn drop(&mut self) {
        if self.kind == ChunkKind::Mapped {
            self.rx.chunk_released();
        }
    }
}

impl fmt::Debug for Chunk<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunk")
            .field("kind", &self.kind)
            .field("offset", &self.offset)
            .field("len", &self.range.len())
            .finish()
    }
}
