//! A chunk of the received stream, borrowed from its [`Receiver`].

use std::fmt;
use std::ops::{Deref, Range};

use super::Receiver;

/// How the bytes of a [`Chunk`] reached user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChunkKind {
    /// Received pages mapped into the receiver's window by `TCP_ZEROCOPY_RECEIVE`: no copy.
    Mapped,
    /// Copied by the kernel into the copy buffer during `TCP_ZEROCOPY_RECEIVE` (copybuf).
    Copybuf,
    /// Read with `recv` into the copy buffer.
    Recv,
    /// A buffer of the io_uring zero-copy receive area ([`RxPath::Zcrx`](super::RxPath::Zcrx)),
    /// written by the NIC or (device-less, or a flow the queue did not get) copied there by the
    /// kernel ([`RxStats::zcrx_copied_bytes`](super::RxStats::zcrx_copied_bytes) says how much);
    /// given back through the refill ring when the chunk is dropped.
    Zcrx,
}

/// Consecutive bytes of the stream, starting at [`Chunk::offset`], readable through `Deref<[u8]>`.
///
/// A chunk borrows its receiver, so the mapped pages, the copy buffer or the zcrx area behind it
/// cannot be replaced while it lives, nor outlive the receiver:
///
/// ```compile_fail
/// # fn outlive(stream: std::net::TcpStream) -> Result<(), zcnet::rx::RxError> {
/// use zcnet::rx::{Receiver, RxConfig, RxPath, ZcrxConfig};
/// let config = RxConfig::default().with_path(RxPath::Zcrx(ZcrxConfig::no_device()));
/// let chunk = {
///     let mut rx = Receiver::new(stream, config)?;
///     rx.recv()?.unwrap()
/// }; // error: `rx` dropped here while still borrowed
/// # drop(chunk); Ok(()) }
/// ```
///
/// Dropping a mapped chunk releases its pages (`MADV_DONTNEED`) under
/// [`Release::Zap`](super::Release::Zap), or leaves them for the next receive to replace; dropping a
/// zcrx chunk gives its buffer back to the kernel, once.
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
        match self.kind {
            ChunkKind::Mapped => self.rx.chunk_released(),
            ChunkKind::Zcrx => self.rx.zcrx_released(self.range.clone()),
            ChunkKind::Copybuf | ChunkKind::Recv => {}
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
