//! What senders left lent to the kernel when they stopped tracking it, counted for the whole
//! process.
//!
//! A sender that stops before the completions of its zero-copy sends arrived cannot know when the
//! kernel stops reading their buffers (the completions would come to the socket it closes, or the
//! ring it drops), so it leaks them: never freed, never reused. That happens at
//! [`crate::tx::Sender::abort`], at a failed close, when the reaper gives a dropped sender up (its
//! bound passed) and when a sender is dropped while the reaper is full (see `# Drop` on
//! [`crate::tx::Sender`]). Every such leak is counted here, so a server that drops connections on
//! error paths sees what that costs: [`leaked`]. (Their locked-memory charges go back to
//! [`crate::tx::MemlockBudget`]: the kernel un-accounts the pages when it frees the socket's
//! packets, at the close or its reset, and keeping the charges for good would turn zero-copy off
//! after a few dozen such ends.)

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::SendBuf;

static BUFFERS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Buffers (and their bytes) that senders left lent to the kernel, in this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leaked {
    /// Buffers leaked: each `Vec`, `Bytes` reference, pool buffer … counted once, however many
    /// sends it was lent to.
    pub buffers: u64,
    /// Their lengths, summed.
    pub bytes: u64,
}

/// What senders left lent so far in this process, when they stopped tracking it (see `# Drop` on
/// [`crate::tx::Sender`]): only ever grows. A successful [`crate::tx::Sender::close`] leaves
/// nothing lent; a dropped sender's buffers are counted only if the reaper gives them up.
pub fn leaked() -> Leaked {
    Leaked {
        buffers: BUFFERS.load(Ordering::Relaxed),
        bytes: BYTES.load(Ordering::Relaxed),
    }
}

/// Leaks `loans` (never frees them) and counts each buffer once.
pub(crate) fn leak<T: SendBuf + ?Sized>(loans: impl IntoIterator<Item = Arc<T>>) {
    let mut seen = HashSet::new();
    for loan in loans {
        if seen.insert(Arc::as_ptr(&loan).cast::<u8>()) {
            BUFFERS.fetch_add(1, Ordering::Relaxed);
            BYTES.fetch_add(loan.as_bytes().len() as u64, Ordering::Relaxed);
        }
        std::mem::forget(loan);
    }
}
