//! io_uring zero-copy send: which opcodes the kernel has, and a ring that keeps every buffer it lends
//! to the kernel until the kernel is done with it.
//!
//! Kernel behaviour relied on (io_uring/net.c, io_uring/notif.c, include/uapi/linux/io_uring.h):
//! - `IORING_OP_SEND_ZC` (6.0) completes twice: a result CQE (bytes sent, or `-errno`) carrying
//!   `IORING_CQE_F_MORE` when a notification follows, then a notification CQE (`IORING_CQE_F_NOTIF`,
//!   same `user_data`) once no packet references the pages any more. A request that failed — even one
//!   cancelled because an earlier link of its chain failed — may still carry `F_MORE` and notify.
//!   After a result without `F_MORE` the kernel holds no reference to the bytes; a request refused
//!   while being submitted (6.18: `ENOMEM` when its pages exceed `RLIMIT_MEMLOCK`) may nevertheless
//!   post a notification afterwards, for no pages.
//! - A zero-copy request from unregistered memory charges the user's locked memory
//!   (`RLIMIT_MEMLOCK`, unless `CAP_IPC_LOCK`) with its length in pages plus two, once per request
//!   until its notification (`io_notif_account_mem`); a fixed send, from pages the registration
//!   pinned and charged already, charges nothing.
//! - With `IORING_SEND_ZC_REPORT_USAGE` (6.2) the notification's `res` has
//!   `IORING_NOTIF_USAGE_ZC_COPIED` set when the kernel copied the data after all; older kernels fail
//!   the request with `EINVAL`.
//! - `MSG_WAITALL` on a stream socket makes one request send all its bytes, the kernel retrying after
//!   short sends; a short result means the request failed after partial progress.
//! - Requests linked with `IOSQE_IO_LINK` run one after the other; when one fails or comes up short,
//!   the rest of the chain completes with `-ECANCELED`.
//! - Notification stacking (io_uring/notif.c `io_link_skb`, 6.10): when a TCP request's first bytes
//!   join the unsent tail skb of an earlier request of the same ring, its notification is linked to
//!   that request's, and every notification of such a run is posted together, once the last of their
//!   skbs is freed. A sender that keeps the socket backlogged therefore gets no notification until
//!   the socket drains. `MSG_EOR` marks a request's last skb as closed to later data
//!   (`tcp_sendmsg_locked`, `tcp_skb_can_collapse_to`), so the next request starts its own skb and
//!   each notification comes as soon as the request's own bytes are acknowledged. (The request's last
//!   segment may then be short; with Nagle's algorithm on, a short segment waits while an earlier
//!   short one is unacknowledged.)
//! - Every send request is cut to `MAX_RW_COUNT` bytes (`INT_MAX & PAGE_MASK`) without an error
//!   (`import_ubuf`, `__import_iovec` in lib/iov_iter.c), and with `MSG_WAITALL` the cut request
//!   counts as complete: its link holds, and the next request sends before the cut-off rest. A
//!   `sendmsg` takes at most `UIO_MAXIOV` (1024) iovecs (`EMSGSIZE` beyond).
//! - `IORING_OP_SENDMSG_ZC` (6.1) sends an iovec array as one request with one notification; with
//!   `IORING_RECVSEND_FIXED_BUF` (6.15; `EINVAL` before) every iovec must lie in registered buffer
//!   `buf_index`.
//! - `IORING_REGISTER_BUFFERS` pins the buffers' pages and charges them to `RLIMIT_MEMLOCK` (without
//!   `CAP_IPC_LOCK`): `ENOMEM` beyond it. A fixed send (`IORING_RECVSEND_FIXED_BUF` with `buf_index`)
//!   must lie inside its registered buffer, which may not exceed 1 GiB. The rings themselves are
//!   charged to the same limit (6.18: `io_uring_setup` fails with `ENOMEM` under a 64 KiB limit while
//!   the rings of an exited process of the same user are still being released, asynchronously).
//! - Closing the ring cancels what is still in flight, asynchronously: memory lent then is never
//!   freed (it is leaked), since a request or packet may still read it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use io_uring::register::Restriction;
use io_uring::{IoUring, Probe, cqueue, opcode, squeue, types};

use super::pages::PageArena;

/// The most bytes one request carries (1 GiB): below `MAX_RW_COUNT` (`INT_MAX & PAGE_MASK`,
/// include/linux/fs.h) for every page size up to 64 KiB. The kernel cuts a longer send to
/// `MAX_RW_COUNT` without an error (`import_ubuf`, `__import_iovec` in lib/iov_iter.c), and with
/// `MSG_WAITALL` the cut request counts as complete, so its link does not break.
pub const MAX_REQUEST_LEN: usize = 1 << 30;
/// The most iovecs one `sendmsg` takes (`UIO_MAXIOV`; more is `EMSGSIZE`).
pub const MAX_PARTS: usize = 1024;

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h), in the SQE's `ioprio`.
pub const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: bit of a notification's `res` meaning "the data was copied".
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;
/// `IORING_RECVSEND_FIXED_BUF`: the request sends from registered buffer `buf_index`.
const IORING_RECVSEND_FIXED_BUF: u16 = 1 << 2;
/// `io_uring_enter` flag: wait for completions — and post the ones waiting for this thread.
const IORING_ENTER_GETEVENTS: u32 = 1 << 0;
/// The largest buffer one registration entry may hold (io_uring/rsrc.c).
pub const MAX_REGISTERED_BYTES: usize = 1 << 30;
/// The most submission queue entries `io_uring_setup` accepts (`IORING_MAX_ENTRIES`,
/// io_uring/io_uring.c): more is `EINVAL` unless the ring asks to be clamped.
pub const MAX_RING_ENTRIES: u32 = 32768;

/// Zero-copy send opcodes the running kernel accepts (`IORING_REGISTER_PROBE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcOpcodes {
    /// `IORING_OP_SEND_ZC` (kernel 6.0).
    pub send_zc: bool,
    /// `IORING_OP_SENDMSG_ZC` (kernel 6.1).
    pub sendmsg_zc: bool,
}

/// Sets up a small ring and asks the kernel which zero-copy send opcodes it supports.
/// `ENOSYS` or `EPERM` (io_uring disabled by `kernel.io_uring_disabled`) come back as errors.
pub fn zero_copy_opcodes() -> io::Result<ZcOpcodes> {
    probe_opcodes(&IoUring::new(2)?)
}

fn probe_opcodes(ring: &IoUring) -> io::Result<ZcOpcodes> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    Ok(ZcOpcodes {
        send_zc: probe.is_supported(opcode::SendZc::CODE),
        sendmsg_zc: probe.is_supported(opcode::SendMsgZc::CODE),
    })
}

/// `IORING_REGISTER_BUFFERS` (include/uapi/linux/io_uring.h).
const IORING_REGISTER_BUFFERS: u8 = 0;
/// `IORING_REGISTER_PROBE`.
const IORING_REGISTER_PROBE: u8 = 8;

/// Restricts disabled `ring` to what a [`SendRing`] does, then enables it:
/// `IORING_REGISTER_RESTRICTIONS` (5.10) allowing the submission opcodes `SEND_ZC`, `SENDMSG_ZC`,
/// `SEND` and `SENDMSG` (those this kernel has), the SQE flag `IOSQE_IO_LINK`, and the registrations
/// `IORING_REGISTER_PROBE` and `IORING_REGISTER_BUFFERS`; then `IORING_REGISTER_ENABLE_RINGS`.
///
/// Kernel behaviour relied on (io_uring/register.c, io_uring/io_uring.c `io_check_restriction`):
/// restrictions are taken once, only while the ring is disabled (`EBADFD` otherwise, `EBUSY` a
/// second time), and an opcode past the kernel's last is `EINVAL`; once enabled, a registration
/// outside them fails with `EACCES`, and an SQE with another opcode or flag completes with
/// `-EACCES`.
fn restrict(ring: &IoUring) -> io::Result<()> {
    let ops = probe_opcodes(ring)?;
    let mut allowed = vec![
        Restriction::sqe_op(opcode::Send::CODE),
        Restriction::sqe_op(opcode::SendMsg::CODE),
        Restriction::sqe_flags_allowed(squeue::Flags::IO_LINK.bits()),
        Restriction::register_op(IORING_REGISTER_PROBE),
        Restriction::register_op(IORING_REGISTER_BUFFERS),
    ];
    if ops.send_zc {
        allowed.push(Restriction::sqe_op(opcode::SendZc::CODE));
    }
    if ops.sendmsg_zc {
        allowed.push(Restriction::sqe_op(opcode::SendMsgZc::CODE));
    }
    let submitter = ring.submitter();
    submitter.register_restrictions(&mut allowed)?;
    submitter.register_enable_rings()
}

/// The soft `RLIMIT_MEMLOCK` of this process in bytes (`u64::MAX` when unlimited).
pub fn memlock_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live, writable rlimit for the duration of the call.
    syscall!(getrlimit(libc::RLIMIT_MEMLOCK, &mut limit))?;
    Ok(if limit.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        limit.rlim_cur
    })
}

/// How one request sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendKind {
    /// `IORING_OP_SEND_ZC` (one part; a fixed send when it lies in the registered arena) or
    /// `IORING_OP_SENDMSG_ZC` (several parts), with `IORING_SEND_ZC_REPORT_USAGE` when `report_usage`.
    ZeroCopy {
        /// Ask the notification to say whether the kernel copied.
        report_usage: bool,
        /// Send several parts as a fixed send when all lie in the registered arena (kernel 6.15).
        vectored_fixed: bool,
    },
    /// `IORING_OP_SEND` or `IORING_OP_SENDMSG`: the kernel copies the bytes during the request.
    Copy,
}

/// How a request sits among the others on its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sequence {
    /// `IOSQE_IO_LINK`: the next queued request runs only after this one finished.
    pub link: bool,
    /// `MSG_EOR`: on TCP, later bytes never join this request's last skb (so its notification is its
    /// own).
    pub end_of_record: bool,
}

/// One completion, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendEvent {
    /// A request's result.
    Result {
        /// The request's `user_data`.
        user_data: u64,
        /// Bytes sent, or the errno.
        res: Result<usize, i32>,
        /// `IORING_CQE_F_MORE`: a notification for this request follows.
        notif_follows: bool,
    },
    /// A zero-copy request's notification: the kernel no longer references its bytes.
    Notif {
        /// The request's `user_data`.
        user_data: u64,
        /// `IORING_NOTIF_USAGE_ZC_COPIED` (always false without `REPORT_USAGE`).
        copied: bool,
    },
}

/// One request for [`SendRing::push_chain`].
pub struct SendRequest<'a, T: ?Sized> {
    /// Identifies the request's CQEs; unique among the requests in flight.
    pub user_data: u64,
    /// Byte ranges of loans, sent in order.
    pub parts: &'a [(&'a Arc<T>, Range<usize>)],
    /// How it sends.
    pub kind: SendKind,
    /// Its place among the others.
    pub sequence: Sequence,
}

impl<T: ?Sized> Clone for SendRequest<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for SendRequest<'_, T> {}

impl<T: ?Sized> std::fmt::Debug for SendRequest<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendRequest")
            .field("user_data", &self.user_data)
            .field("parts", &self.parts.len())
            .field("kind", &self.kind)
            .field("sequence", &self.sequence)
            .finish()
    }
}

/// Where a ring finds the bytes of each loan it holds.
pub type Project<T> = for<'a> fn(&'a T) -> &'a [u8];

/// The most finished vectored requests' messages and loan lists a ring keeps for the next ones: a
/// chain of the default 32 sends makes at most 32 requests.
const MAX_SPARE: usize = 32;

/// The iovec array and message header of a vectored request. A finished request's is kept for
/// the next one ([`SendRing::spare_messages`]), so that vectored requests allocate nothing.
struct Message {
    iovecs: Vec<libc::iovec>,
    header: Box<libc::msghdr>,
}

impl Message {
    fn new() -> Message {
        Message {
            iovecs: Vec::new(),
            // SAFETY: msghdr is plain old data (pointers and integers): all zeroes is a valid
            // value, an empty message without name or control data.
            header: Box::new(unsafe { std::mem::zeroed() }),
        }
    }
}

// SAFETY: the pointers inside are only read by the kernel; user space never dereferences them, so the
// value may move between threads with the ring.
unsafe impl Send for Message {}

/// The loans of one request (most send from one), held, never read: dropping them ends the loan.
enum Loans<T: ?Sized> {
    One { _loan: Arc<T> },
    Many { loans: Vec<Arc<T>> },
}

/// What a request lends: its loans (and message), kept until its last CQE.
struct Lent<T: ?Sized> {
    loans: Loans<T>,
    message: Option<Message>,
    awaiting_result: bool,
    awaiting_notif: bool,
    notified: bool,
}

/// An io_uring that sends from shared, immutable loans (`Arc<T>`) and holds a clone of each until the
/// kernel posts the request's last CQE — the notification, or a result without `F_MORE` — so no
/// buffer can be freed or reused while the kernel may read it. Dropping the ring with requests in
/// flight leaks their loans.
pub struct SendRing<T: ?Sized> {
    ring: IoUring,
    project: Project<T>,
    lent: HashMap<u64, Lent<T>, BuildHasherDefault<UserDataHasher>>,
    registered: Option<Arc<PageArena>>,
    /// Messages and loan lists of finished vectored requests, emptied, for the next ones (at most
    /// [`MAX_SPARE`] of each).
    spare_messages: Vec<Message>,
    spare_loans: Vec<Vec<Arc<T>>>,
    /// [`Self::push_chain`]'s entries and what each lends, emptied after every call and kept for
    /// the next.
    prepared: (Vec<squeue::Entry>, Vec<Lent<T>>),
}

/// Hashes a request's `user_data` with one multiplication: the keys are the sender's own (ids and
/// counters, never chosen by a peer), so they need no protection from collisions crafted against
/// the default hasher, which costs more per CQE.
#[derive(Default)]
pub struct UserDataHasher(u64);

impl Hasher for UserDataHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the high bits, which hashbrown uses, depend on every bit of the key.
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
}

impl<T: ?Sized> std::fmt::Debug for SendRing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendRing")
            .field("entries", &self.entries())
            .field("in_flight", &self.lent.len())
            .field("registered", &self.registered.is_some())
            .finish()
    }
}

impl<T: ?Sized> SendRing<T> {
    /// A ring of `entries` submission entries (the completion queue has twice as many); `project`
    /// gives the bytes of a loan.
    ///
    /// The ring is set up with `IORING_SETUP_COOP_TASKRUN` (5.19): a completion (a retried send, a
    /// notification) no longer interrupts the submitting thread while it runs in user space (an
    /// inter-processor interrupt and a detour through the kernel each) but is posted at its next
    /// entry into the kernel — a system call, or the next timer tick; a sleeping thread is still
    /// woken. `IORING_SETUP_TASKRUN_FLAG` says when some wait, and [`Self::reap`] then enters the
    /// kernel to post them at once. An older kernel refuses the flags (`EINVAL`): then a plain ring.
    ///
    /// The ring is created disabled (`IORING_SETUP_R_DISABLED`) and restricted before it is enabled
    /// ([`restrict`]): it takes only the send operations and registrations a `SendRing` makes, so
    /// that whoever reaches its descriptor can do nothing else with it.
    pub fn new(entries: u32, project: Project<T>) -> io::Result<SendRing<T>> {
        let ring = match IoUring::builder()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .setup_r_disabled()
            .build(entries)
        {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                IoUring::builder().setup_r_disabled().build(entries)?
            }
            ring => ring?,
        };
        restrict(&ring)?;
        Ok(SendRing {
            ring,
            project,
            lent: HashMap::default(),
            registered: None,
            spare_messages: Vec::new(),
            spare_loans: Vec::new(),
            prepared: (Vec::new(), Vec::new()),
        })
    }

    /// The ring's descriptor, for an event loop to poll: it is readable (`EPOLLIN`) while CQEs wait
    /// in the completion queue or work that posts them is pending (`io_uring_poll`:
    /// `__io_cqring_events_user` or `io_has_work`), and posting a CQE wakes its pollers
    /// (`io_cqring_wake`, `io_poll_wq_wake` once the ring was polled).
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is the ring's own, open until `self.ring` drops, which the
        // returned borrow cannot outlive.
        unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) }
    }

    /// The zero-copy send opcodes this ring's kernel accepts (`IORING_REGISTER_PROBE`).
    pub fn zero_copy_opcodes(&self) -> io::Result<ZcOpcodes> {
        probe_opcodes(&self.ring)
    }

    /// Submission queue entries.
    pub fn entries(&self) -> usize {
        self.ring.params().sq_entries() as usize
    }

    /// Free submission queue entries.
    pub fn sq_space(&mut self) -> usize {
        let sq = self.ring.submission();
        sq.capacity() - sq.len()
    }

    /// Requests whose last CQE has not arrived (their loans are held).
    pub fn in_flight(&self) -> usize {
        self.lent.len()
    }

    /// Registers `arena`'s mapping as fixed buffer 0 (`IORING_REGISTER_BUFFERS`); later sends whose
    /// bytes lie in it are fixed sends. The ring keeps the arena mapped while it lives. `ENOMEM` when
    /// the pinned pages exceed `RLIMIT_MEMLOCK`, `EBUSY` when a registration exists, `EINVAL` beyond
    /// [`MAX_REGISTERED_BYTES`].
    pub fn register(&mut self, arena: &Arc<PageArena>) -> io::Result<()> {
        if self.registered.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let (base, len) = arena.region();
        if len > MAX_REGISTERED_BYTES {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let iovec = libc::iovec {
            iov_base: base.cast_mut().cast(),
            iov_len: len,
        };
        // SAFETY: the iovec is the arena's live mapping, and `self.registered` keeps the arena (so
        // the mapping) alive until the ring is dropped, which unregisters the buffer.
        unsafe { self.ring.submitter().register_buffers(&[iovec]) }?;
        self.registered = Some(Arc::clone(arena));
        Ok(())
    }

    /// Queues one send (see [`Self::push_chain`]).
    pub fn push(
        &mut self,
        user_data: u64,
        fd: BorrowedFd<'_>,
        parts: &[(&Arc<T>, Range<usize>)],
        kind: SendKind,
        sequence: Sequence,
    ) -> io::Result<()> {
        self.push_chain(
            fd,
            &[SendRequest {
                user_data,
                parts,
                kind,
                sequence,
            }],
        )
    }

    /// Queues `requests` on socket `fd` (unsubmitted until [`Self::submit`]), all or none: each
    /// sends its `parts` — byte ranges of loans, in order — always with `MSG_WAITALL`, with
    /// `MSG_EOR` when `end_of_record` (for TCP: the request's notification is not stacked onto the
    /// next request's), and `link` chains the next queued request after it. Nothing is queued when
    /// any request is refused: `EBUSY` when the submission queue has no room for all, `EINVAL` for
    /// no parts, more than [`MAX_PARTS`], a range outside its loan or more than
    /// [`MAX_REQUEST_LEN`] bytes in one request (the kernel would cut it short without an error),
    /// `EEXIST` when a `user_data` is already in flight or given twice.
    pub fn push_chain(
        &mut self,
        fd: BorrowedFd<'_>,
        requests: &[SendRequest<'_, T>],
    ) -> io::Result<()> {
        // Kept from one call to the next (an error drops them, with the loans cloned so far).
        let (mut entries, mut lents) = std::mem::take(&mut self.prepared);
        entries.clear();
        lents.clear();
        for (k, request) in requests.iter().enumerate() {
            let user_data = request.user_data;
            if self.lent.contains_key(&user_data)
                || requests[..k].iter().any(|r| r.user_data == user_data)
            {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            let (entry, lent) = self.prepare(fd, request)?;
            entries.push(entry);
            lents.push(lent);
        }
        if self.sq_space() < entries.len() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        // SAFETY: the kernel reads the parts' bytes (and, for a vectored request, the iovec array and
        // message header) until the request's last CQE. The bytes are what `project` found in each
        // loan; the loan clones stored in `self.lent` below keep them allocated and, each being a
        // shared borrow of its loan that lasts as long as the clone, unchanged; the iovecs and header
        // (on the heap, where moving their owner leaves them) are stored beside them. `reap` releases
        // all of it only after the last CQE (a message is reused only then), and `Drop` leaks the
        // loans when that CQE never came. Every length was checked by `prepare` (`MAX_PARTS`
        // iovecs, `MAX_REQUEST_LEN` bytes, each range inside its loan).
        unsafe { self.ring.submission().push_multiple(&entries) }
            .map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
        for (request, lent) in requests.iter().zip(lents.drain(..)) {
            self.lent.insert(request.user_data, lent);
        }
        self.prepared = (entries, lents);
        Ok(())
    }

    /// Whether a zero-copy request of `parts` sent as `kind` goes out as a fixed send, from the
    /// registered buffer ([`Self::register`]): a single part lying in it, or every part of a
    /// vectored request when `vectored_fixed`. The kernel pins nothing for a fixed send and
    /// charges it no locked memory.
    pub fn sends_fixed(&self, parts: &[(&Arc<T>, Range<usize>)], kind: SendKind) -> bool {
        let Some(arena) = self.registered.as_deref() else {
            return false;
        };
        let fixed = |part| {
            self.part_bytes(part)
                .is_some_and(|bytes| arena.contains(bytes))
        };
        match (kind, parts) {
            (SendKind::Copy, _) | (_, []) => false,
            (_, [part]) => fixed(part),
            (SendKind::ZeroCopy { vectored_fixed, .. }, _) => {
                vectored_fixed && parts.iter().all(fixed)
            }
        }
    }

    /// The bytes of one part, `None` when its range lies outside its loan.
    fn part_bytes<'a>(&self, (loan, range): &(&'a Arc<T>, Range<usize>)) -> Option<&'a [u8]> {
        let loan: &'a Arc<T> = loan;
        (self.project)(loan).get(range.clone())
    }

    /// Builds one request's entry and what it lends, checking every length and range it was given.
    fn prepare(
        &mut self,
        fd: BorrowedFd<'_>,
        request: &SendRequest<'_, T>,
    ) -> io::Result<(squeue::Entry, Lent<T>)> {
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let SendRequest {
            user_data,
            parts,
            kind,
            sequence,
        } = *request;
        if parts.len() > MAX_PARTS {
            return Err(einval());
        }
        // A vectored request's message and loan list, from a finished one's when there is one.
        let (spare_message, spare_loans) = if parts.len() > 1 {
            (self.spare_messages.pop(), self.spare_loans.pop())
        } else {
            (None, None)
        };
        let bytes_of = |part| self.part_bytes(part).ok_or_else(einval);
        let mut total = 0usize;
        for part in parts {
            total = total
                .checked_add(bytes_of(part)?.len())
                .filter(|&t| t <= MAX_REQUEST_LEN)
                .ok_or_else(einval)?;
        }
        let fixed = self.sends_fixed(parts, kind);
        let report = |report_usage: bool| {
            if report_usage {
                IORING_SEND_ZC_REPORT_USAGE
            } else {
                0
            }
        };
        let fd = types::Fd(fd.as_raw_fd());
        let msg_flags = if sequence.end_of_record {
            libc::MSG_WAITALL | libc::MSG_EOR
        } else {
            libc::MSG_WAITALL
        };
        let mut message = None;
        let entry = match parts {
            [] => return Err(einval()),
            [part] => {
                let bytes = bytes_of(part)?;
                // At most MAX_REQUEST_LEN (checked above), so it fits the SQE's 32-bit length.
                let len = u32::try_from(bytes.len()).map_err(|_| einval())?;
                match kind {
                    SendKind::ZeroCopy { report_usage, .. } => {
                        opcode::SendZc::new(fd, bytes.as_ptr(), len)
                            .buf_index(fixed.then_some(0))
                            .flags(msg_flags)
                            .zc_flags(report(report_usage))
                            .build()
                    }
                    SendKind::Copy => opcode::Send::new(fd, bytes.as_ptr(), len)
                        .flags(msg_flags)
                        .build(),
                }
            }
            _ => {
                let mut spare = spare_message.unwrap_or_else(Message::new);
                spare.iovecs.clear();
                for part in parts {
                    let b = bytes_of(part)?;
                    spare.iovecs.push(libc::iovec {
                        iov_base: b.as_ptr().cast_mut().cast(),
                        iov_len: b.len(),
                    });
                }
                let Message { iovecs, mut header } = spare;
                // SAFETY: msghdr is plain old data (pointers and integers): all zeroes is a valid
                // value, an empty message without name or control data.
                *header = unsafe { std::mem::zeroed() };
                header.msg_iov = iovecs.as_ptr().cast_mut();
                header.msg_iovlen = iovecs.len();
                let entry = match kind {
                    SendKind::ZeroCopy { report_usage, .. } => {
                        let mut ioprio = report(report_usage);
                        if fixed {
                            // buf_index stays 0: the registered arena.
                            ioprio |= IORING_RECVSEND_FIXED_BUF;
                        }
                        opcode::SendMsgZc::new(fd, &*header)
                            .ioprio(ioprio)
                            .flags(msg_flags as u32)
                            .build()
                    }
                    SendKind::Copy => opcode::SendMsg::new(fd, &*header)
                        .flags(msg_flags as u32)
                        .build(),
                };
                message = Some(Message { iovecs, header });
                entry
            }
        };
        let flags = if sequence.link {
            squeue::Flags::IO_LINK
        } else {
            squeue::Flags::empty()
        };
        let entry = entry.user_data(user_data).flags(flags);
        let lent = Lent {
            loans: match parts {
                [(loan, _)] => Loans::One {
                    _loan: Arc::clone(loan),
                },
                _ => {
                    let mut loans = spare_loans.unwrap_or_default();
                    loans.extend(parts.iter().map(|(loan, _)| Arc::clone(loan)));
                    Loans::Many { loans }
                }
            },
            message,
            awaiting_result: true,
            awaiting_notif: false,
            notified: false,
        };
        Ok((entry, lent))
    }

    /// Submits the queued requests (`io_uring_enter`), retrying on `EINTR`.
    pub fn submit(&mut self) -> io::Result<usize> {
        super::retry_if_interrupted(|| self.ring.submit())
    }

    /// Submits the queued requests and waits up to `timeout` (forever with `None`) for at least `want`
    /// CQEs. Returning early (timeout, signal) is not an error: [`Self::reap`] tells what arrived.
    pub fn wait(&mut self, want: usize, timeout: Option<Duration>) -> io::Result<()> {
        let res = match timeout {
            None => self.ring.submit_and_wait(want),
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
        };
        match res {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands every CQE queued now to `on_event`, releasing the loans of finished requests; returns
    /// the number of CQEs.
    pub fn reap(&mut self, mut on_event: impl FnMut(SendEvent)) -> usize {
        if self.ring.submission().taskrun() {
            // Posts the completions waiting for this thread (task work), submitting nothing. An
            // error (a signal) leaves them for the next call.
            // SAFETY: no submission is made (to_submit 0) and no signal mask is passed.
            let _ = unsafe {
                self.ring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
            };
        }
        let mut n = 0;
        for cqe in self.ring.completion() {
            n += 1;
            let user_data = cqe.user_data();
            let flags = cqe.flags();
            let mut lent = match self.lent.entry(user_data) {
                Entry::Occupied(entry) => Some(entry),
                Entry::Vacant(_) => None,
            };
            let event = if cqueue::notif(flags) {
                if let Some(l) = lent.as_mut().map(|e| e.get_mut()) {
                    l.awaiting_notif = false;
                    l.notified = true;
                }
                SendEvent::Notif {
                    user_data,
                    copied: cqe.result() as u32 & IORING_NOTIF_USAGE_ZC_COPIED != 0,
                }
            } else {
                let notif_follows = cqueue::more(flags);
                if let Some(l) = lent.as_mut().map(|e| e.get_mut()) {
                    l.awaiting_result = false;
                    l.awaiting_notif = notif_follows && !l.notified;
                }
                let res = cqe.result();
                SendEvent::Result {
                    user_data,
                    res: if res < 0 { Err(-res) } else { Ok(res as usize) },
                    notif_follows,
                }
            };
            if let Some(entry) = lent
                && !entry.get().awaiting_result
                && !entry.get().awaiting_notif
            {
                let Lent { loans, message, .. } = entry.remove();
                // The loans end here (their clones dropped); the emptied lists are kept.
                if let Loans::Many { mut loans } = loans
                    && self.spare_loans.len() < MAX_SPARE
                {
                    loans.clear();
                    self.spare_loans.push(loans);
                }
                if let Some(message) = message
                    && self.spare_messages.len() < MAX_SPARE
                {
                    self.spare_messages.push(message);
                }
            }
            on_event(event);
        }
        n
    }
}

impl<T: ?Sized> Drop for SendRing<T> {
    fn drop(&mut self) {
        self.reap(drop);
        for (_, lent) in self.lent.drain() {
            // The kernel may still read these bytes: never free or reuse them.
            std::mem::forget(lent.loans);
            std::mem::forget(lent.message);
        }
    }
}

/// What one `IORING_OP_SEND_ZC` with `IORING_SEND_ZC_REPORT_USAGE` reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendZcReport {
    /// Bytes the result CQE says were sent.
    pub sent: usize,
    /// Whether the notification said the kernel copied the data (`IORING_NOTIF_USAGE_ZC_COPIED`).
    pub copied: bool,
}

fn whole(bytes: &[u8]) -> &[u8] {
    bytes
}

/// Sends a copy of `buf` once on connected socket `fd` with `IORING_OP_SEND_ZC` and `REPORT_USAGE`,
/// waiting for both the result and the notification CQE. A kernel without `REPORT_USAGE` fails the
/// send with `EINVAL`, returned as the error. On any error the copy stays lent (leaked) if the kernel
/// may still read it.
pub fn send_zc_reporting_usage(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<SendZcReport> {
    let mut ring = SendRing::<[u8]>::new(4, whole)?;
    let loan: Arc<[u8]> = Arc::from(buf);
    let kind = SendKind::ZeroCopy {
        report_usage: true,
        vectored_fixed: false,
    };
    ring.push(1, fd, &[(&loan, 0..loan.len())], kind, Sequence::default())?;
    let (mut sent, mut failed, mut copied) = (None, None, None);
    while ring.in_flight() > 0 {
        ring.wait(1, None)?;
        ring.reap(|event| match event {
            SendEvent::Result { res: Ok(n), .. } => sent = Some(n),
            SendEvent::Result { res: Err(e), .. } => failed = Some(e),
            SendEvent::Notif { copied: c, .. } => copied = Some(c),
        });
    }
    if let Some(errno) = failed {
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(SendZcReport {
        sent: sent.unwrap_or(0),
        // No notification: the kernel never took the pages, so nothing was sent from them.
        copied: copied.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::socket::set_int_option;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::time::Instant;

    fn send_zc_available(test: &str) -> bool {
        match zero_copy_opcodes() {
            Ok(ops) if ops.send_zc => true,
            other => {
                testnet::skip(test, &format!("io_uring SEND_ZC unavailable: {other:?}"));
                false
            }
        }
    }

    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (client, listener.accept().unwrap().0)
    }

    #[test]
    fn send_zc_over_loopback_arrives_and_reports_usage() {
        if !send_zc_available("send_zc_over_loopback_arrives_and_reports_usage") {
            return;
        }
        let (client, mut server) = tcp_pair();
        let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let report = send_zc_reporting_usage(client.as_fd(), &data).unwrap();
        assert_eq!(report.sent, data.len());
        // Loopback delivers to a local socket: the kernel copies (kernel-facts.md).
        assert!(report.copied);
        let mut got = vec![0u8; data.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got, data);
    }

    const ZC: SendKind = SendKind::ZeroCopy {
        report_usage: true,
        vectored_fixed: false,
    };
    const ALONE: Sequence = Sequence {
        link: false,
        end_of_record: false,
    };
    const LINKED: Sequence = Sequence {
        link: true,
        end_of_record: false,
    };

    /// A ring zcnet creates takes its own sends and registrations and refuses every other operation
    /// with `EACCES`: a submission (`IORING_OP_NOP`, `IORING_OP_READ`), a registration
    /// (`IORING_REGISTER_FILES`), a second set of restrictions.
    #[test]
    fn a_send_ring_refuses_what_it_does_not_send() {
        if !send_zc_available("a_send_ring_refuses_what_it_does_not_send") {
            return;
        }
        let (client, mut server) = tcp_pair();
        let mut ring = SendRing::<[u8]>::new(4, whole).unwrap();
        let errno = |r: io::Result<()>| r.unwrap_err().raw_os_error();
        assert_eq!(
            errno(ring.ring.submitter().register_files(&[client.as_raw_fd()])),
            Some(libc::EACCES)
        );
        assert_eq!(
            errno(
                ring.ring
                    .submitter()
                    .register_restrictions(&mut [Restriction::sqe_op(opcode::Nop::CODE)])
            ),
            Some(libc::EACCES)
        );
        let mut byte = [0u8; 1];
        let refused = [
            opcode::Nop::new().build().user_data(100),
            opcode::Read::new(types::Fd(server.as_raw_fd()), byte.as_mut_ptr(), 1)
                .build()
                .user_data(101),
        ];
        // One at a time: the kernel stops submitting a batch at the first refused entry.
        let mut results = Vec::new();
        for entry in &refused {
            // SAFETY: NOP reads nothing; the READ's buffer (`byte`) outlives the wait below, which
            // collects its completion before `byte` goes out of scope.
            unsafe { ring.ring.submission().push(entry) }.unwrap();
            ring.ring.submit_and_wait(1).unwrap();
            results.extend(
                ring.ring
                    .completion()
                    .map(|cqe| (cqe.user_data(), cqe.result())),
            );
        }
        assert_eq!(results, [(100, -libc::EACCES), (101, -libc::EACCES)]);
        // Its own sends still go out, zero-copy and by copy, after the refusals.
        let loan: Arc<[u8]> = (0..50_000u32).map(|i| (i % 249) as u8).collect();
        ring.push(1, client.as_fd(), &[(&loan, 0..30_000)], ZC, LINKED)
            .unwrap();
        ring.push(
            2,
            client.as_fd(),
            &[(&loan, 30_000..50_000)],
            SendKind::Copy,
            ALONE,
        )
        .unwrap();
        while ring.in_flight() > 0 {
            ring.wait(1, Some(Duration::from_secs(5))).unwrap();
            ring.reap(drop);
        }
        let mut got = vec![0u8; loan.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got[..], loan[..]);
    }

    #[test]
    fn a_ring_dropped_with_requests_in_flight_leaks_their_loans() {
        if !send_zc_available("a_ring_dropped_with_requests_in_flight_leaks_their_loans") {
            return;
        }
        let (client, _server) = tcp_pair();
        let loan: Arc<[u8]> = Arc::from(vec![1u8; 4096]);
        let mut ring = SendRing::<[u8]>::new(4, whole).unwrap();
        let fd = client.as_fd();
        ring.push(7, fd, &[(&loan, 0..4096)], ZC, ALONE).unwrap();
        assert_eq!(Arc::strong_count(&loan), 2);
        let errno = |r: io::Result<()>| r.unwrap_err().raw_os_error();
        assert_eq!(
            errno(ring.push(7, fd, &[(&loan, 0..1)], ZC, ALONE)),
            Some(libc::EEXIST)
        );
        assert_eq!(
            errno(ring.push(8, fd, &[(&loan, 0..4097)], ZC, ALONE)),
            Some(libc::EINVAL)
        );
        assert_eq!(errno(ring.push(8, fd, &[], ZC, ALONE)), Some(libc::EINVAL));
        drop(ring);
        // Never submitted, never completed: the ring cannot know the kernel is done, so it keeps the
        // loan's bytes alive forever.
        assert_eq!(Arc::strong_count(&loan), 2);
    }

    #[test]
    fn finished_requests_release_their_loans_single_and_vectored() {
        if !send_zc_available("finished_requests_release_their_loans_single_and_vectored") {
            return;
        }
        let (client, mut server) = tcp_pair();
        let a: Arc<[u8]> = Arc::from(vec![9u8; 20_000]);
        let b: Arc<[u8]> = Arc::from(vec![8u8; 5_000]);
        let mut ring = SendRing::<[u8]>::new(8, whole).unwrap();
        let fd = client.as_fd();
        ring.push(1, fd, &[(&a, 0..10_000)], ZC, LINKED).unwrap();
        ring.push(2, fd, &[(&a, 10_000..20_000)], SendKind::Copy, LINKED)
            .unwrap();
        ring.push(3, fd, &[(&b, 0..5_000), (&a, 0..100)], ZC, LINKED)
            .unwrap();
        ring.push(4, fd, &[(&a, 100..200), (&b, 0..50)], SendKind::Copy, ALONE)
            .unwrap();
        let mut events = Vec::new();
        while ring.in_flight() > 0 {
            ring.wait(1, Some(Duration::from_secs(5))).unwrap();
            ring.reap(|e| events.push(e));
        }
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 1));
        let results: Vec<_> = events
            .iter()
            .filter_map(|e| match *e {
                SendEvent::Result {
                    user_data,
                    res,
                    notif_follows,
                } => Some((user_data, res, notif_follows)),
                SendEvent::Notif { .. } => None,
            })
            .collect();
        assert_eq!(
            results,
            [
                (1, Ok(10_000), true),
                (2, Ok(10_000), false),
                (3, Ok(5_100), true),
                (4, Ok(150), false)
            ]
        );
        for user_data in [1, 3] {
            assert!(events.contains(&SendEvent::Notif {
                user_data,
                copied: true
            }));
        }
        let mut got = vec![0u8; 25_250];
        server.read_exact(&mut got).unwrap();
        let mut want = vec![9u8; 20_000];
        want.extend([8u8; 5_000]);
        want.extend([9u8; 200]);
        want.extend([8u8; 50]);
        assert_eq!(got, want);
    }

    #[test]
    fn a_finished_vectored_request_s_message_carries_the_next_one_s_own_parts() {
        if !send_zc_available(
            "a_finished_vectored_request_s_message_carries_the_next_one_s_own_parts",
        ) {
            return;
        }
        let (client, mut server) = tcp_pair();
        let a: Arc<[u8]> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let b: Arc<[u8]> = (0..3000u32).map(|i| (i % 239) as u8).collect();
        let mut ring = SendRing::<[u8]>::new(8, whole).unwrap();
        let fd = client.as_fd();
        let finish = |ring: &mut SendRing<[u8]>| {
            while ring.in_flight() > 0 {
                ring.wait(1, Some(Duration::from_secs(5))).unwrap();
                ring.reap(drop);
            }
        };
        let first = [(&a, 0..1000), (&b, 0..1000), (&a, 1000..1500)];
        ring.push(1, fd, &first, ZC, ALONE).unwrap();
        finish(&mut ring);
        assert_eq!((ring.spare_messages.len(), ring.spare_loans.len()), (1, 1));
        let header: *const libc::msghdr = &*ring.spare_messages[0].header;
        // Fewer parts than the first request: none of its parts may go out again.
        let second = [(&b, 2000..3000), (&a, 2000..3000)];
        ring.push(2, fd, &second, SendKind::Copy, ALONE).unwrap();
        let reused = ring.lent[&2]
            .message
            .as_ref()
            .expect("a vectored request's message");
        assert!(std::ptr::eq(&*reused.header, header));
        assert!(ring.spare_messages.is_empty() && ring.spare_loans.is_empty());
        finish(&mut ring);
        assert_eq!((Arc::strong_count(&a), Arc::strong_count(&b)), (1, 1));
        let mut got = vec![0u8; 4500];
        server.read_exact(&mut got).unwrap();
        let want: Vec<u8> = first
            .iter()
            .chain(&second)
            .flat_map(|(loan, range)| loan[range.clone()].to_vec())
            .collect();
        assert_eq!(got, want);
    }

    /// Waits up to `timeout` for CQEs, collecting them, until `done` holds for what arrived.
    fn collect_until(
        ring: &mut SendRing<[u8]>,
        events: &mut Vec<SendEvent>,
        timeout: Duration,
        done: impl Fn(&[SendEvent]) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        while !done(events) && Instant::now() < deadline {
            ring.wait(1, Some(Duration::from_millis(50))).unwrap();
            ring.reap(|e| events.push(e));
        }
    }

    fn notified(events: &[SendEvent], id: u64) -> bool {
        events
            .iter()
            .any(|e| matches!(*e, SendEvent::Notif { user_data, .. } if user_data == id))
    }

    /// A request queued behind unsent bytes, followed by a larger one: with `MSG_EOR` its
    /// notification comes once its own bytes are acknowledged, while the next request's bytes are
    /// still waiting for the receiver (without it, 6.10 and later stack the two notifications).
    #[test]
    fn a_request_ending_a_record_notifies_before_the_next_one_is_acknowledged() {
        if !send_zc_available(
            "a_request_ending_a_record_notifies_before_the_next_one_is_acknowledged",
        ) {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // A small receive buffer (inherited by the accepted socket) keeps the window small.
        set_int_option(
            listener.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            64 << 10,
        )
        .unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let mut server = listener.accept().unwrap().0;
        set_int_option(client.as_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20).unwrap();
        // Copied bytes beyond the window: the requests below queue unsent behind them.
        let filler = vec![1u8; 1 << 20];
        client.write_all(&filler).unwrap();
        let first: Arc<[u8]> = (0..4096u32).map(|i| (i % 253) as u8).collect();
        let second: Arc<[u8]> = (0..(2u32 << 20)).map(|i| (i % 241) as u8).collect();
        let mut ring = SendRing::<[u8]>::new(8, whole).unwrap();
        let kind = SendKind::ZeroCopy {
            report_usage: false,
            vectored_fixed: false,
        };
        let record = Sequence {
            link: false,
            end_of_record: true,
        };
        let fd = client.as_fd();
        ring.push(1, fd, &[(&first, 0..first.len())], kind, record)
            .unwrap();
        ring.push(2, fd, &[(&second, 0..second.len())], kind, record)
            .unwrap();
        ring.submit().unwrap();
        let mut events = Vec::new();
        let results = |events: &[SendEvent]| {
            events
                .iter()
                .filter(|e| matches!(e, SendEvent::Result { .. }))
                .count()
                == 2
        };
        collect_until(&mut ring, &mut events, Duration::from_secs(5), results);
        assert!(results(&events), "both requests queued: {events:?}");

        // Read the filler and the first request: its bytes are then acknowledged, most of the
        // second request's are not (they do not fit the receiver's window).
        let mut got = vec![0u8; filler.len() + first.len()];
        server.read_exact(&mut got).unwrap();
        assert_eq!(got[filler.len()..], first[..]);
        collect_until(&mut ring, &mut events, Duration::from_secs(5), |e| {
            notified(e, 1)
        });
        assert!(
            notified(&events, 1),
            "no notification for the first request: {events:?}"
        );
        assert!(
            !notified(&events, 2),
            "the second request is still unacknowledged"
        );

        let mut rest = vec![0u8; second.len()];
        server.read_exact(&mut rest).unwrap();
        assert_eq!(rest[..], second[..]);
        collect_until(&mut ring, &mut events, Duration::from_secs(5), |e| {
            notified(e, 2)
        });
        assert!(notified(&events, 2));
        assert_eq!(ring.in_flight(), 0);
    }

    #[test]
    fn completions_reach_a_thread_that_only_reaps() {
        if !send_zc_available("completions_reach_a_thread_that_only_reaps") {
            return;
        }
        let (client, mut server) = tcp_pair();
        let loan: Arc<[u8]> = Arc::from(vec![5u8; 64 << 10]);
        let mut ring = SendRing::<[u8]>::new(4, whole).unwrap();
        ring.push(1, client.as_fd(), &[(&loan, 0..loan.len())], ZC, ALONE)
            .unwrap();
        ring.submit().unwrap();
        let mut got = vec![0u8; loan.len()];
        server.read_exact(&mut got).unwrap();
        // No wait and no other system call: reap alone must post what the kernel finished
        // (COOP_TASKRUN defers it to this thread's next entry into the kernel).
        let mut events = Vec::new();
        let start = std::time::Instant::now();
        while ring.in_flight() > 0 && start.elapsed() < Duration::from_secs(5) {
            ring.reap(|e| events.push(e));
            std::hint::spin_loop();
        }
        assert_eq!(ring.in_flight(), 0, "{events:?}");
        assert!(events.contains(&SendEvent::Notif {
            user_data: 1,
            copied: true
        }));
        assert_eq!(Arc::strong_count(&loan), 1);
    }

    /// A chain whose last request is refused queues nothing: no entry, no loan held.
    #[test]
    fn a_refused_chain_queues_none_of_its_requests() {
        if !send_zc_available("a_refused_chain_queues_none_of_its_requests") {
            return;
        }
        let (client, _server) = tcp_pair();
        let loan: Arc<[u8]> = Arc::from(vec![3u8; 4096]);
        let mut ring = SendRing::<[u8]>::new(8, whole).unwrap();
        let fd = client.as_fd();
        let good = [(&loan, 0..4096)];
        let outside = [(&loan, 4000..4097)];
        let request = |user_data, parts| SendRequest {
            user_data,
            parts,
            kind: ZC,
            sequence: LINKED,
        };
        let space = ring.sq_space();
        let errno = |r: io::Result<()>| r.unwrap_err().raw_os_error();
        for (chain, want) in [
            (
                vec![request(1, &good[..]), request(2, &outside[..])],
                libc::EINVAL,
            ),
            (
                vec![request(1, &good[..]), request(1, &good[..])],
                libc::EEXIST,
            ),
            (vec![request(1, &good[..]); 9], libc::EEXIST),
            (
                (1..=9).map(|u| request(u, &good[..])).collect(),
                libc::EBUSY,
            ),
        ] {
            assert_eq!(errno(ring.push_chain(fd, &chain)), Some(want));
            assert_eq!(ring.sq_space(), space, "an entry stayed queued");
            assert_eq!(ring.in_flight(), 0);
            assert_eq!(Arc::strong_count(&loan), 1, "a loan is held");
        }
    }

    proptest::proptest! {
        /// Hostile ranges and counts: a request is queued only when every range lies in its loan and
        /// the request carries at most `MAX_PARTS` parts and `MAX_REQUEST_LEN` bytes; otherwise
        /// nothing is queued and no loan is held.
        #[test]
        fn push_checks_every_range_and_count(
            ranges in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::strategy::Just(0usize),
                        0usize..70_000,
                        proptest::strategy::Just(usize::MAX),
                    ],
                    proptest::prop_oneof![
                        proptest::strategy::Just(0usize),
                        0usize..70_000,
                        proptest::strategy::Just(u32::MAX as usize + 1),
                        proptest::strategy::Just(usize::MAX),
                    ],
                ),
                0..4,
            ),
            copies in proptest::prop_oneof![
                proptest::strategy::Just(1usize),
                proptest::strategy::Just(MAX_PARTS),
                proptest::strategy::Just(MAX_PARTS + 1),
            ],
        ) {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let loan: Arc<[u8]> = Arc::from(vec![1u8; 65_536]);
            let mut ring = match SendRing::<[u8]>::new(4, whole) {
                Ok(ring) => ring,
                Err(_) => return Ok(()),
            };
            let parts: Vec<(&Arc<[u8]>, Range<usize>)> = ranges
                .iter()
                .flat_map(|&(start, end)| std::iter::repeat_n((&loan, start..end), copies))
                .collect();
            let valid = !parts.is_empty()
                && parts.len() <= MAX_PARTS
                && parts.iter().all(|(_, r)| r.start <= r.end && r.end <= loan.len())
                && parts.iter().map(|(_, r)| r.end - r.start).sum::<usize>() <= MAX_REQUEST_LEN;
            let res = ring.push(1, socket.as_fd(), &parts, SendKind::Copy, ALONE);
            proptest::prop_assert_eq!(res.is_ok(), valid, "{:?}", res);
            // A queued request holds one clone of the loan per part.
            let held = if valid { 1 + parts.len() } else { 1 };
            proptest::prop_assert_eq!(Arc::strong_count(&loan), held);
            proptest::prop_assert_eq!(ring.in_flight(), usize::from(valid));
            // Never submitted: dropping the ring leaks the loan, a few bytes per case.
        }
    }
}
