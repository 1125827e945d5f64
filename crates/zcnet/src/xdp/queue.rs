//! One queue of a UMEM: the fill and completion rings of the kernel's buffer pool on an (interface,
//! queue), owned by a kernel socket of zcnet's own (the anchor) rather than by any user socket, so
//! that every [`Socket`](crate::xdp::Socket) bound there shares them and none strands the others by
//! closing.
//!
//! Kernel behaviour relied on (`net/xdp/xsk.c`):
//! - The first socket bound with a UMEM on a queue sets up the queue's pool with the fill and
//!   completion rings it was given; those rings can only be mapped through that socket. A socket
//!   binding with `XDP_SHARED_UMEM` and naming a socket of the same queue shares the pool and may
//!   not have rings of its own (`EINVAL`). The pool lives while any socket using it lives.
//! - A bound socket needs an rx or a tx ring (`EINVAL` otherwise); a socket that is in no XSKMAP
//!   never receives, so the anchor's one-entry rx ring stays empty and takes no frame.
//! - Closing the anchor's descriptor and unmapping its rings releases it; once every socket of the
//!   queue is released the kernel tears the pool down, after which the queue binds again (`EBUSY`
//!   for a moment before).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::error::{Error, Result};
use super::mode::{BoundMode, Mode};
use super::ring::{Consumer, Producer};
use super::socket::{bind_on_queue, copy_remedy, create_socket, map_ring, setup_error, size_rings};
use super::umem::{Inherited, Pool, QueuePlace, Umem};
use crate::fallback::Fallback;
use crate::sys::xdp::{
    RingKind, XDP_COPY, XDP_SHARED_UMEM, XDP_USE_NEED_WAKEUP, XDP_USE_SG, XDP_ZEROCOPY,
    mmap_offsets, xdp_mmap_offsets,
};

/// Entries of the anchor's rx ring: the least a bound socket may have. It never receives.
const ANCHOR_RX_ENTRIES: u32 = 1;

/// The fill and completion rings of one queue's pool and the anchor socket that owns them, shared
/// (reference-counted) by every socket of the UMEM on that queue. The last of them to drop drops
/// the queue: its rings are unmapped, the anchor closed, and then the pool reports itself closed to
/// the UMEM, which takes its frames back once the queue is bound again.
#[derive(Debug)]
pub(crate) struct Queue {
    // Fields drop in order: the rings and the anchor go before the pool reports itself closed.
    fill: Mutex<Producer<u64>>,
    completion: Mutex<Consumer<u64>>,
    anchor: OwnedFd,
    pool: Arc<Pool>,
    place: QueuePlace,
    inherited: Inherited,
    fallback: Option<Fallback>,
}

/// What a new queue's anchor binds with: the UMEM registered on it, or shared through another queue.
pub(crate) enum Through<'a> {
    /// No socket uses the UMEM: register it on the anchor and bind in `mode`.
    Register(Mode),
    /// Share the UMEM through the anchor of `queue` (on another queue).
    Share(&'a Queue),
}

impl Queue {
    /// Opens queue `queue` of `iface` (interface index `ifindex`, at `place`) for `umem`: an anchor
    /// socket with the UMEM's fill and completion ring sizes, bound as `through` says.
    pub(crate) fn open(
        umem: &mut Umem,
        through: Through<'_>,
        (iface, ifindex, queue, place): (&str, u32, u32, QueuePlace),
        need_wakeup: bool,
        multi_buffer: bool,
    ) -> Result<Queue> {
        let anchor = create_socket()?;
        let name = queue_socket_name(iface, queue);
        if let Through::Register(_) = through {
            umem.register_on(anchor.as_fd())?;
        }
        let (fill_size, completion_size) = umem.ring_sizes();
        let rings = [
            (RingKind::Rx, ANCHOR_RX_ENTRIES),
            (RingKind::Fill, fill_size),
            (RingKind::Completion, completion_size),
        ];
        let offsets = size_rings(anchor.as_fd(), &name, &rings)?;
        let (fill, completion) = map_pool_rings(anchor.as_fd(), &name, &offsets, umem)?;
        let bind = |flags: u16, shared: Option<BorrowedFd<'_>>| {
            bind_on_queue(anchor.as_fd(), iface, ifindex, queue, flags, shared)
        };
        let (inherited, fallback) = match through {
            Through::Share(other) => {
                bind(XDP_SHARED_UMEM, Some(other.fd()))?;
                (other.inherited, None)
            }
            Through::Register(asked) => {
                let mut extra = 0;
                if need_wakeup {
                    extra |= XDP_USE_NEED_WAKEUP;
                }
                if multi_buffer {
                    extra |= XDP_USE_SG;
                }
                let (mode, refused) = match asked {
                    Mode::ZeroCopy => (
                        bind(XDP_ZEROCOPY | extra, None).map(|_| BoundMode::ZeroCopy)?,
                        None,
                    ),
                    Mode::Copy => (bind(XDP_COPY | extra, None).map(|_| BoundMode::Copy)?, None),
                    Mode::Auto => match bind(XDP_ZEROCOPY | extra, None) {
                        Ok(()) => (BoundMode::ZeroCopy, None),
                        Err(zc) => {
                            bind(XDP_COPY | extra, None)?;
                            (BoundMode::Copy, Some(zc.raw_os_error().unwrap_or(0)))
                        }
                    },
                };
                let fallback = copy_fallback(asked, refused, multi_buffer);
                let inherited = Inherited {
                    mode,
                    need_wakeup,
                    multi_buffer,
                };
                (inherited, fallback)
            }
        };
        Ok(Queue::assemble(
            umem,
            anchor,
            (fill, completion),
            place,
            (inherited, fallback),
        ))
    }

    /// The queue whose anchor `anchor` another process (a [`Broker`](crate::xdp::Broker)) opened
    /// for `umem`'s memory on queue `queue` of `iface` (at `place`) and bound as `inherited` says,
    /// copying for `fallback`: its fill and completion rings mapped here.
    pub(crate) fn adopt(
        umem: &mut Umem,
        anchor: OwnedFd,
        (iface, queue, place): (&str, u32, QueuePlace),
        inherited: Inherited,
        fallback: Option<Fallback>,
    ) -> Result<Queue> {
        let name = queue_socket_name(iface, queue);
        let offsets =
            mmap_offsets(anchor.as_fd()).map_err(|e| setup_error(&name, "read ring offsets", e))?;
        let rings = map_pool_rings(anchor.as_fd(), &name, &offsets, umem)?;
        Ok(Queue::assemble(
            umem,
            anchor,
            rings,
            place,
            (inherited, fallback),
        ))
    }

    /// The queue of `anchor` at `place`, with its mapped `rings` and a new pool of `umem`.
    fn assemble(
        umem: &mut Umem,
        anchor: OwnedFd,
        (fill, completion): (Producer<u64>, Consumer<u64>),
        place: QueuePlace,
        (inherited, fallback): (Inherited, Option<Fallback>),
    ) -> Queue {
        Queue {
            fill: Mutex::new(fill),
            completion: Mutex::new(completion),
            anchor,
            pool: umem.new_pool(place),
            place,
            inherited,
            fallback,
        }
    }

    /// The anchor's descriptor: what a socket binding here (or sharing the UMEM) names.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.anchor.as_fd()
    }

    /// The tag of the queue's pool in the UMEM's frame area.
    pub(crate) fn tag(&self) -> u32 {
        self.pool.tag()
    }

    pub(crate) fn place(&self) -> QueuePlace {
        self.place
    }

    /// The mode, need_wakeup and multi-buffer setting every socket of the UMEM has.
    pub(crate) fn inherited(&self) -> Inherited {
        self.inherited
    }

    /// Why the queue copies, when this queue registered the UMEM (see [`Socket::zerocopy_status`]).
    ///
    /// [`Socket::zerocopy_status`]: crate::xdp::Socket::zerocopy_status
    pub(crate) fn fallback(&self) -> Option<&Fallback> {
        self.fallback.as_ref()
    }

    /// The queue's fill ring (a poisoned lock still guards a consistent ring: its guards publish
    /// nothing unless submitted).
    pub(crate) fn fill(&self) -> MutexGuard<'_, Producer<u64>> {
        self.fill.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue's completion ring (as for [`Queue::fill`]).
    pub(crate) fn completion(&self) -> MutexGuard<'_, Consumer<u64>> {
        self.completion
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// How the socket of a queue is named in errors.
fn queue_socket_name(iface: &str, queue: u32) -> String {
    format!("the AF_XDP queue socket for {iface} queue {queue}")
}

/// Maps the fill and completion rings of `umem`'s sizes on `anchor` (named `name` in errors), whose
/// ring offsets are `offsets`.
fn map_pool_rings(
    anchor: BorrowedFd<'_>,
    name: &str,
    offsets: &xdp_mmap_offsets,
    umem: &Umem,
) -> Result<(Producer<u64>, Consumer<u64>)> {
    let (fill_size, completion_size) = umem.ring_sizes();
    let setup = |what: &str, e| setup_error(name, what, e);
    let fill = map_ring(anchor, RingKind::Fill, offsets, fill_size)
        .map_err(|e| setup("map fill ring", e))?
        .map(Producer::new);
    let completion = map_ring(anchor, RingKind::Completion, offsets, completion_size)
        .map_err(|e| setup("map completion ring", e))?
        .map(Consumer::new);
    let (Some(fill), Some(completion)) = (fill, completion) else {
        return Err(Error::usage(format!(
            "UmemConfig fill_size {fill_size} and completion_size {completion_size}: a queue \
             needs both rings"
        )));
    };
    Ok((fill, completion))
}

/// Why a queue bound after asking for `asked` copies: copy mode was asked for, or [`Mode::Auto`]'s
/// zero-copy bind was `refused` with that errno (with `XDP_USE_SG` when `multi_buffer`); `None`
/// when it does not copy.
pub(crate) fn copy_fallback(
    asked: Mode,
    refused: Option<i32>,
    multi_buffer: bool,
) -> Option<Fallback> {
    match (asked, refused) {
        (Mode::Copy, _) => Some(Fallback::requested(
            "bind in zero-copy or auto mode for zero-copy",
        )),
        (Mode::Auto, Some(errno)) => {
            let (call, flags) = match multi_buffer {
                true => ("bind XDP_ZEROCOPY|XDP_USE_SG", XDP_ZEROCOPY | XDP_USE_SG),
                false => ("bind XDP_ZEROCOPY", XDP_ZEROCOPY),
            };
            Some(Fallback::refused(call, errno, copy_remedy(errno, flags)))
        }
        _ => None,
    }
}
