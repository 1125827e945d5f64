//! Byte containers that can be lent to the kernel for a zero-copy send.
//!
//! A zero-copy send hands the kernel the address of the buffer's bytes; the kernel reads them until the
//! send's completion arrives. [`SendBuf`] is sealed: it is implemented only for containers whose bytes
//! live at a stable heap address, cannot be changed through a shared reference, and are reachable only
//! by their owner — so once a sender owns one, safe code cannot modify or reuse the bytes before the
//! completion releases it.

use std::sync::Arc;

use super::pool::{FrozenBuf, PooledBuf};

mod sealed {
    pub trait Sealed {}
}

/// An owned byte container a sender can lend to the kernel (sealed; see the module docs). Implemented
/// for `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>`, `Arc<Vec<u8>>`, `&'static [u8]`, [`PooledBuf`],
/// [`FrozenBuf`] and, with the `bytes` feature, `bytes::Bytes`.
///
/// A shared container (`Arc<[u8]>`, [`FrozenBuf`], `Bytes`) can be lent to many senders at once: each send holds one
/// reference until the completion covering it, so the bytes are freed only after the last one. No
/// holder can change them meanwhile (a `Bytes` turns back into a mutable `BytesMut` only when it is
/// the last reference).
pub trait SendBuf: sealed::Sealed + Send + Sync + 'static {
    /// The bytes to send.
    fn as_bytes(&self) -> &[u8];
}

macro_rules! send_buf {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl SendBuf for $t {
            fn as_bytes(&self) -> &[u8] {
                self
            }
        }
    )*};
}

send_buf!(
    Vec<u8>,
    Box<[u8]>,
    Arc<[u8]>,
    &'static [u8],
    PooledBuf,
    FrozenBuf
);

#[cfg(feature = "bytes")]
send_buf!(bytes::Bytes);

impl sealed::Sealed for Arc<Vec<u8>> {}
impl SendBuf for Arc<Vec<u8>> {
    fn as_bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A buffer while it is lent: shared by the sender (for the unsent remainder of a stream send) and by
/// every outstanding id that covers part of it. The container is dropped — a [`PooledBuf`] goes back to
/// its pool — when the last holder lets go.
pub(crate) type Loan = Arc<dyn SendBuf>;

/// What a zero-copy send keeps until its completion: its loan, and the locked memory its pages are
/// charged to.
pub(crate) type Lent = (Loan, super::budget::Charge<'static>);

/// A [`SendBuf`]'s bytes cannot change or move while any clone of its loan lives (see the module docs).
impl crate::sys::errqueue::StableBytes for Lent {
    fn stable_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}
