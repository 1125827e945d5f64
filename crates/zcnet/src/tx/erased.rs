//! Buffers of any type in one queue: what the io_uring path queues, and what an error hands back
//! unsent ([`UnsentBuf`]) whatever the type each was sent as.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::buffer::SendBuf;
use super::unsent::Unsent;

/// A [`SendBuf`] that can be taken back as its own type.
pub(crate) trait Erased: SendBuf + Any {}

impl<B: SendBuf> Erased for B {}

/// A queued buffer (`Arc<B>` of the caller's type `B`, erased so that one queue holds any mix).
pub(crate) type Queued = Arc<dyn Erased>;

/// A buffer the sender did not wholly send, handed back by an error ([`super::TxError::unsent`]): the buffer and how many of its
/// bytes the kernel took (the front of a stream send that failed part-way; 0 for one never
/// submitted). Dropping it drops the buffer — a pooled one goes back to its pool — once no
/// notification still covers the part sent. [`UnsentBuf::downcast`] gives back the caller's type.
pub struct UnsentBuf {
    buf: Queued,
    sent: usize,
}

impl UnsentBuf {
    #[cfg(any(feature = "io-uring", feature = "tokio"))]
    pub(crate) fn new(buf: Queued, sent: usize) -> Self {
        UnsentBuf { buf, sent }
    }

    /// The queued buffer.
    #[cfg(feature = "io-uring")]
    pub(crate) fn queued(&self) -> &Queued {
        &self.buf
    }

    /// Bytes of the buffer the kernel took before the send stopped.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// The bytes not sent.
    pub fn remaining(&self) -> &[u8] {
        &self.buf.as_bytes()[self.sent..]
    }

    /// The whole buffer's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_bytes()
    }

    /// As the type it was sent as (then [`Unsent::into_buf`] gives the buffer itself once no
    /// notification covers it); `self` back when it is not a `B`.
    pub fn downcast<B: SendBuf>(self) -> Result<Unsent<B>, UnsentBuf> {
        let sent = self.sent;
        let any: Arc<dyn Any + Send + Sync> = self.buf.clone();
        match any.downcast::<B>() {
            Ok(buf) => {
                drop(self);
                Ok(Unsent::new(buf, sent))
            }
            Err(_) => Err(self),
        }
    }
}

impl fmt::Debug for UnsentBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnsentBuf")
            .field("sent", &self.sent)
            .field("len", &self.buf.as_bytes().len())
            .finish()
    }
}
