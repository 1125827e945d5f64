//! io_uring zero-copy receive (zcrx): the ring it needs, the interface-queue registration, the refill
//! ring, the control and query calls, and the event and statistics layouts read from the running
//! kernel.
//!
//! Kernel behaviour relied on (include/uapi/linux/io_uring.h, include/uapi/linux/io_uring/zcrx.h and
//! query.h, io_uring/zcrx.c, io_uring/query.c; 6.15+, the control call 6.19+, NODEV 7.1, events 7.2):
//! - `IORING_REGISTER_ZCRX_IFQ` (32) needs `CAP_NET_ADMIN` (`EPERM`) and a ring set up with
//!   `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` and 32-byte CQEs (`CQE32` or
//!   `CQE_MIXED`), else `EINVAL`. It reads `struct io_uring_zcrx_ifq_reg` and writes back the refill
//!   ring's offsets, the instance id (`zcrx_id`), the buffer length it chose (`rx_buf_len`) and, into
//!   the area registration, the area's token (its id shifted by `IORING_ZCRX_AREA_SHIFT`).
//! - The area is user memory the kernel pins (page-aligned address and length); the refill ring lives
//!   in a region the user provides (`IORING_MEM_REGION_TYPE_USER`): a header (head and tail, at the
//!   returned offsets) then `rq_entries` (a power of two) 16-byte entries `{off, len}`. User space
//!   produces (writes entries, then publishes the tail with release ordering); the kernel consumes
//!   and publishes the head. An entry returns one reference the kernel gave with one completion.
//! - `IORING_OP_RECV_ZC` (multishot) posts one 32-byte CQE per piece received: `res` its length,
//!   the second half `{off, pad}` where `off` is the area token ORed with the byte offset in the area,
//!   `IORING_CQE_F_MORE` while the request goes on. It ends with `res` 0 at the end of the stream,
//!   `-ENOMEM` when the area has no free buffer (the bytes stay queued on the socket), or another
//!   `-errno` (`EPROTONOSUPPORT` on a socket that is not TCP).
//! - `ZCRX_REG_NODEV` (7.1): no device; `if_idx`/`if_rxq` must be 0 (`EINVAL`); every byte is copied
//!   into the area, and refill entries are taken back only by `ZCRX_CTRL_FLUSH_RQ`.
//! - `IORING_REGISTER_ZCRX_CTRL` (36, `nr_args` 0) takes `struct zcrx_ctrl`: `ZCRX_CTRL_FLUSH_RQ` (0)
//!   consumes the refill ring now; the arm-event opcode re-arms an event that fired (`EINVAL` for one
//!   that has not). An unknown id is `ENXIO`.
//! - `IORING_REGISTER_QUERY` (35) needs no ring (fd -1, `nr_args` 0): a chain of headers, each with
//!   an opcode and a buffer the kernel fills, `result` `-EOPNOTSUPP` for an opcode it lacks.
//!   `IO_URING_QUERY_ZCRX` (1) gives the registration flags, features, control opcode count and the
//!   refill header's size and alignment; opcode 3 the event statistics' size and alignment.
//! - Events (7.2): the registration's `event_desc` points to a descriptor (user_data, a mask of
//!   event types, flags, the statistics' offset in the refill region). An event posts one CQE with
//!   that user_data and `res` the event type, once until re-armed. With the statistics flag the kernel
//!   adds to `{copy_count, copy_bytes}` in the region (plain stores, read here with volatile loads).
//!   These names changed upstream after 7.2, so the descriptor's and the statistics' layouts, the
//!   flag, the event numbers and the arm opcode come from the running kernel's BTF.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::{IoUring, cqueue, opcode, squeue};

use super::tcp_zc::page_size;
use super::unix::{sealed_memfd, sealed_size};
use super::xdp::Mmap;
use super::zcrx_ring::{Allow, Ring, Sqe, io_uring_register};
use crate::btf::Btf;

pub(crate) const IORING_REGISTER_ZCRX_IFQ: libc::c_uint = 32;
pub(crate) const IORING_REGISTER_QUERY: libc::c_uint = 35;
pub(crate) const IORING_REGISTER_ZCRX_CTRL: libc::c_uint = 36;
pub(crate) const IO_URING_QUERY_ZCRX: u32 = 1;
pub(crate) const IO_URING_QUERY_ZCRX_EVENT: u32 = 3;
/// `ZCRX_REG_NODEV`: an instance bound to no device.
pub(crate) const ZCRX_REG_NODEV: u32 = 2;
/// `ZCRX_FEATURE_EVENT` (named `ZCRX_FEATURE_NOTIFICATION` in later headers).
pub(crate) const ZCRX_FEATURE_EVENT: u32 = 2;
const ZCRX_CTRL_FLUSH_RQ: u32 = 0;
const IORING_MEM_REGION_TYPE_USER: u32 = 1;
/// `IORING_ZCRX_AREA_SHIFT`: the area id sits above this bit of an offset.
pub(crate) const AREA_SHIFT: u32 = 48;
/// `IORING_ENTER_GETEVENTS`.
const IORING_ENTER_GETEVENTS: u32 = 1;
/// `IORING_CQE_F_MORE`.
const CQE_F_MORE: u32 = 1 << 1;

/// `struct io_uring_zcrx_rqe`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Rqe {
    off: u64,
    len: u32,
    pad: u32,
}

/// `struct io_uring_zcrx_offsets`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Offsets {
    head: u32,
    tail: u32,
    rqes: u32,
    resv2: u32,
    resv: [u64; 2],
}

/// `struct io_uring_zcrx_area_reg`.
#[repr(C)]
#[derive(Debug, Default)]
struct AreaReg {
    addr: u64,
    len: u64,
    rq_area_token: u64,
    flags: u32,
    dmabuf_fd: u32,
    resv2: [u64; 2],
}

/// `struct io_uring_region_desc`.
#[repr(C)]
#[derive(Debug, Default)]
struct RegionDesc {
    user_addr: u64,
    size: u64,
    flags: u32,
    id: u32,
    mmap_offset: u64,
    resv: [u64; 4],
}

/// `struct io_uring_zcrx_ifq_reg`.
#[repr(C)]
#[derive(Debug, Default)]
struct IfqReg {
    if_idx: u32,
    if_rxq: u32,
    rq_entries: u32,
    flags: u32,
    area_ptr: u64,
    region_ptr: u64,
    offsets: Offsets,
    zcrx_id: u32,
    rx_buf_len: u32,
    event_desc: u64,
    resv: [u64; 2],
}

/// `struct zcrx_ctrl`: the union of the operations' arguments as six words.
#[repr(C)]
#[derive(Debug, Default)]
struct Ctrl {
    zcrx_id: u32,
    op: u32,
    resv: [u64; 2],
    payload: [u64; 6],
}

/// `struct io_uring_query_hdr`.
#[repr(C)]
#[derive(Debug, Default)]
struct QueryHdr {
    next_entry: u64,
    query_data: u64,
    query_op: u32,
    size: u32,
    result: i32,
    resv: [u32; 3],
}

/// `struct io_uring_query_zcrx`: what the kernel's zcrx takes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueryZcrx {
    /// `ZCRX_REG_*` flags it accepts.
    pub(crate) register_flags: u64,
    /// `IORING_ZCRX_AREA_*` flags it accepts.
    pub(crate) area_flags: u64,
    /// How many `ZCRX_CTRL_*` opcodes it has.
    pub(crate) nr_ctrl_opcodes: u32,
    /// `ZCRX_FEATURE_*` bits.
    pub(crate) features: u32,
    /// The refill ring header's size.
    pub(crate) rq_hdr_size: u32,
    /// The refill ring header's alignment.
    pub(crate) rq_hdr_alignment: u32,
    resv2: u64,
}

/// The event query's answer (`struct io_uring_query_zcrx_notif` upstream).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct QueryEvent {
    flags: u32,
    stats_size: u32,
    stats_alignment: u32,
    resv1: u32,
    resv2: [u64; 4],
}

/// Runs one `IORING_REGISTER_QUERY` entry: `Ok(None)` when the kernel knows the call but not the
/// query opcode, an error when it lacks the call (before 6.18: `EINVAL` or `EBADF`).
fn query<T: Default>(op: u32) -> io::Result<Option<T>> {
    let mut data = T::default();
    let mut hdr = QueryHdr {
        query_data: ptr::from_mut(&mut data) as u64,
        query_op: op,
        size: size_of::<T>() as u32,
        ..QueryHdr::default()
    };
    io_uring_register(-1, IORING_REGISTER_QUERY, ptr::from_mut(&mut hdr).cast(), 0)?;
    Ok((hdr.result >= 0).then_some(data))
}

/// What the running kernel's zcrx takes (`IO_URING_QUERY_ZCRX`).
pub(crate) fn query_zcrx() -> io::Result<Option<QueryZcrx>> {
    query::<QueryZcrx>(IO_URING_QUERY_ZCRX)
}

/// Whether the kernel knows `IORING_OP_RECV_ZC` (`IORING_REGISTER_PROBE`; 6.15+).
pub(crate) fn recv_zc_supported() -> bool {
    let Ok(ring) = IoUring::<squeue::Entry, cqueue::Entry>::new(2) else {
        return false;
    };
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).is_ok() && probe.is_supported(opcode::RecvZc::CODE)
}

/// An event the kernel posted for a zcrx instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZcrxEvent {
    /// Bytes were copied into the area instead of written there by the NIC.
    Copy,
    /// The NIC queue's page pool found no free buffer in the area.
    AllocFail,
}

/// Where the event descriptor's fields and the statistics' counters sit, as the running kernel
/// declares them, and the numbers it gives the events and the arm opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventLayout {
    desc_size: usize,
    user_data: usize,
    type_mask: usize,
    flags: usize,
    stats_offset: usize,
    stats_flag: u32,
    copy: u32,
    alloc_fail: u32,
    arm_op: u32,
    stats_size: usize,
    stats_align: usize,
    copy_count: usize,
    copy_bytes: usize,
}

/// The first of `names` the BTF declares as an enumerator.
fn enumerator(btf: &Btf, names: &[&str]) -> Option<u32> {
    names
        .iter()
        .find_map(|n| btf.enumerator(n))
        .and_then(|v| u32::try_from(v).ok())
}

impl EventLayout {
    /// Reads the layout from the kernel: the event query for the statistics' size and alignment,
    /// BTF for the rest (either upstream spelling). `Err` says what is missing.
    pub(crate) fn from_kernel() -> Result<EventLayout, String> {
        let query = query::<QueryEvent>(IO_URING_QUERY_ZCRX_EVENT)
            .map_err(|e| format!("IORING_REGISTER_QUERY: {}", super::errno::error_name(&e)))?
            .ok_or("the kernel has no zcrx event query")?;
        let btf = Btf::vmlinux().map_err(|e| format!("/sys/kernel/btf/vmlinux: {e}"))?;
        EventLayout::from_btf(
            &btf,
            query.stats_size as usize,
            query.stats_alignment as usize,
        )
    }

    fn from_btf(btf: &Btf, stats_size: usize, stats_align: usize) -> Result<EventLayout, String> {
        let desc = ["zcrx_event_desc", "zcrx_notification_desc"]
            .iter()
            .find_map(|n| btf.struct_layout(n))
            .ok_or("BTF has no zcrx_event_desc")?;
        let stats = [
            "zcrx_stats",
            "io_uring_zcrx_notif_stats",
            "zcrx_notif_stats",
        ]
        .iter()
        .find_map(|n| btf.struct_layout(n))
        .ok_or("BTF has no zcrx_stats")?;
        let member = |s: &crate::btf::StructLayout, name: &str| {
            s.offset_of(name)
                .ok_or_else(|| format!("BTF's zcrx struct has no member {name}"))
        };
        let named = |names: &[&str]| {
            enumerator(btf, names).ok_or_else(|| format!("BTF has no {}", names[0]))
        };
        let layout = EventLayout {
            desc_size: desc.size,
            user_data: member(desc, "user_data")?,
            type_mask: member(desc, "type_mask")?,
            flags: member(desc, "flags")?,
            stats_offset: member(desc, "stats_offset")?,
            stats_flag: named(&["ZCRX_EVENT_DESC_FLAG_STATS", "ZCRX_NOTIF_DESC_FLAG_STATS"])?,
            copy: named(&["ZCRX_EVENT_COPY", "ZCRX_NOTIF_COPY"])?,
            alloc_fail: named(&["ZCRX_EVENT_ALLOC_FAIL", "ZCRX_NOTIF_NO_BUFFERS"])?,
            arm_op: named(&["ZCRX_CTRL_ARM_EVENT", "ZCRX_CTRL_ARM_NOTIFICATION"])?,
            stats_size: stats_size.max(stats.size),
            stats_align: stats_align.max(1),
            copy_count: member(stats, "copy_count")?,
            copy_bytes: member(stats, "copy_bytes")?,
        };
        let fits = |off: usize, size: usize, within: usize| off + size <= within;
        let desc_ok = [
            (layout.user_data, 8),
            (layout.type_mask, 4),
            (layout.flags, 4),
            (layout.stats_offset, 8),
        ]
        .iter()
        .all(|&(off, size)| fits(off, size, layout.desc_size) && off.is_multiple_of(size));
        let stats_ok = [layout.copy_count, layout.copy_bytes]
            .iter()
            .all(|&off| fits(off, 8, layout.stats_size) && off.is_multiple_of(8));
        if !desc_ok || !stats_ok || layout.copy > 31 || layout.alloc_fail > 31 {
            return Err(format!(
                "BTF's zcrx event layout is not one zcnet can use: {layout:?}"
            ));
        }
        Ok(layout)
    }

    /// The event an event CQE's `res` names, if it is one this layout knows.
    pub(crate) fn event(&self, res: i32) -> Option<ZcrxEvent> {
        match u32::try_from(res).ok()? {
            kind if kind == self.copy => Some(ZcrxEvent::Copy),
            kind if kind == self.alloc_fail => Some(ZcrxEvent::AllocFail),
            _ => None,
        }
    }

    /// The layout in words, as the probe prints it.
    pub(crate) fn summary(&self) -> String {
        format!(
            "copy event {} and allocation-failure event {} (arm opcode {}); statistics of {} bytes aligned {}: copy_count at {}, copy_bytes at {}; descriptor of {} bytes (from BTF)",
            self.copy,
            self.alloc_fail,
            self.arm_op,
            self.stats_size,
            self.stats_align,
            self.copy_count,
            self.copy_bytes,
            self.desc_size
        )
    }

    /// The descriptor asking for `events` (bit per event type) and, when `stats_offset` is given,
    /// the statistics there, as words to pass to the kernel.
    fn descriptor(&self, user_data: u64, events: u32, stats_offset: Option<u64>) -> Vec<u64> {
        let mut bytes = vec![0u8; self.desc_size.next_multiple_of(8)];
        bytes[self.user_data..][..8].copy_from_slice(&user_data.to_ne_bytes());
        bytes[self.type_mask..][..4].copy_from_slice(&events.to_ne_bytes());
        if let Some(off) = stats_offset {
            bytes[self.flags..][..4].copy_from_slice(&self.stats_flag.to_ne_bytes());
            bytes[self.stats_offset..][..8].copy_from_slice(&off.to_ne_bytes());
        }
        bytes
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
            .collect()
    }
}

/// Where one zcrx instance is bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bind {
    /// Receive queue `queue` of interface `ifindex`.
    Queue { ifindex: u32, queue: u32 },
    /// No device (`ZCRX_REG_NODEV`; interface and queue 0).
    NoDevice,
}

/// How to set up a [`ZcrxQueue`].
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub(crate) bind: Bind,
    /// Area length in bytes (rounded up to pages, or to 2 MiB with huge pages).
    pub(crate) area_len: usize,
    pub(crate) huge_pages: bool,
    /// `rx_buf_len` to ask for (0: the kernel's choice).
    pub(crate) rx_buf_len: u32,
    /// Refill entries (a power of two).
    pub(crate) refill_entries: u32,
    /// Ring entries (submission; completions get eight times as many).
    pub(crate) ring_entries: u32,
    /// Events to ask for, with the statistics, when the kernel has them.
    pub(crate) events: Option<EventLayout>,
}

/// Which step of [`ZcrxQueue::new`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Ring,
    Area,
    Region,
    Register,
}

/// What a CQE of a [`ZcrxQueue`]'s ring says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    /// A receive result: `res` (bytes or `-errno`), the area offset word, and whether the request
    /// goes on.
    Recv { res: i32, off: u64, more: bool },
    /// An event of type `kind`.
    Event { kind: i32 },
}

/// `user_data` of the receive request.
const RECV: u64 = 1;
/// `user_data` of the events.
const EVENT: u64 = 2;

/// A ring with one zcrx instance: its area, its refill ring, and (7.2) its statistics.
///
/// Dropped ring first: closing the ring ends the receive and unregisters the instance; the kernel
/// keeps the area's pages pinned until it is done with them, so unmapping afterwards is safe in any
/// order for the kernel, and nothing of the area is reachable from user space after the drop.
pub(crate) struct ZcrxQueue {
    ring: Ring,
    zcrx_id: u32,
    area: Mmap,
    area_token: u64,
    rx_buf_len: u32,
    refill: RefillRing,
    stats: Option<(usize, EventLayout)>,
}

/// The refill ring in its region: user space produces entries, the kernel consumes them.
pub(crate) struct RefillRing {
    region: Mmap,
    head: NonNull<AtomicU32>,
    tail: NonNull<AtomicU32>,
    rqes: NonNull<Rqe>,
    entries: u32,
    /// The tail as written so far (published by [`RefillRing::publish`]).
    local_tail: u32,
}

// SAFETY: the ring owns its region and the pointers into it; moving it moves that ownership, and
// every access goes through `&mut self` or atomics.
unsafe impl Send for RefillRing {}

impl RefillRing {
    /// The ring the kernel laid out in `region` at `offsets`, of `entries` (a power of two).
    fn new(region: Mmap, offsets: &Offsets, entries: u32) -> io::Result<RefillRing> {
        let at = |off: u32, size: usize, align: usize| -> io::Result<NonNull<u8>> {
            let off = off as usize;
            if off.checked_add(size).is_none_or(|end| end > region.len())
                || !off.is_multiple_of(align)
            {
                return Err(io::Error::other(format!(
                    "refill ring offset {off} outside its region of {} bytes",
                    region.len()
                )));
            }
            // SAFETY: `off + size` lies inside the region mapping (checked above).
            Ok(unsafe { NonNull::new_unchecked(region.as_ptr().add(off)) })
        };
        if !entries.is_power_of_two() {
            return Err(io::Error::other(format!("{entries} refill entries")));
        }
        let bytes = entries as usize * size_of::<Rqe>();
        let head = at(offsets.head, 4, 4)?.cast::<AtomicU32>();
        let tail = at(offsets.tail, 4, 4)?.cast::<AtomicU32>();
        let rqes = at(offsets.rqes, bytes, align_of::<Rqe>())?.cast();
        let entries_at = offsets.rqes as usize..offsets.rqes as usize + bytes;
        if [offsets.head, offsets.tail]
            .iter()
            .any(|&o| entries_at.contains(&(o as usize)) || entries_at.contains(&(o as usize + 3)))
        {
            return Err(io::Error::other(
                "refill ring head or tail inside its entries",
            ));
        }
        // SAFETY: the tail lies inside the region, 4-aligned (checked above).
        let local_tail = unsafe { tail.as_ref() }.load(Ordering::Relaxed);
        Ok(RefillRing {
            region,
            head,
            tail,
            rqes,
            entries,
            local_tail,
        })
    }

    /// Writes an entry (published by [`RefillRing::publish`]); `false` when the ring is full, or
    /// when the kernel's head is one no well-behaved kernel could have stored.
    fn push(&mut self, off: u64, len: u32) -> bool {
        // SAFETY: the head lies inside the region (checked at set-up); the kernel stores it.
        // Acquire: the kernel's reads of the entries before it are done.
        let head = unsafe { self.head.as_ref() }.load(Ordering::Acquire);
        if refill_room(head, self.local_tail, self.entries) == 0 {
            return false;
        }
        let slot = (self.local_tail & (self.entries - 1)) as usize;
        // SAFETY: `slot` < entries, and the entries lie inside the region; the kernel does not read
        // this slot until a tail covering it is published (it is past the published tail, and the
        // room check keeps it clear of the entries between head and tail).
        unsafe {
            self.rqes.as_ptr().add(slot).write(Rqe { off, len, pad: 0 });
        }
        self.local_tail = self.local_tail.wrapping_add(1);
        true
    }

    /// Publishes the entries written so far.
    fn publish(&mut self) {
        // SAFETY: the tail lies inside the region. Release: the entries are written before the
        // kernel can see the tail that covers them.
        unsafe { self.tail.as_ref() }.store(self.local_tail, Ordering::Release);
    }
}

// SAFETY: the queue owns its ring and its mappings; nothing is shared with another thread, and
// moving it moves that ownership.
unsafe impl Send for ZcrxQueue {}

impl std::fmt::Debug for ZcrxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcrxQueue")
            .field("zcrx_id", &self.zcrx_id)
            .field("area_len", &self.area.len())
            .field("rx_buf_len", &self.rx_buf_len)
            .field("refill_entries", &self.refill.entries)
            .finish()
    }
}

/// `IORING_REGISTER_EVENTFD` (include/uapi/linux/io_uring.h).
const IORING_REGISTER_EVENTFD: u8 = 4;
/// `IORING_OP_RECV_ZC`.
const IORING_OP_RECV_ZC: u8 = 58;
/// `IORING_RECV_MULTISHOT`, in a receive's `ioprio`.
const IORING_RECV_MULTISHOT: u16 = 1 << 1;

/// The ring of a zcrx instance: `SINGLE_ISSUER`, `DEFER_TASKRUN` and 32-byte CQEs (the kernel refuses
/// zcrx on any other ring), with room for `entries` submissions and eight times as many
/// completions. It is created disabled (`IORING_SETUP_R_DISABLED`) and restricted
/// (`IORING_REGISTER_RESTRICTIONS`) to what a zcrx queue does once its instance is registered:
/// the submission opcode `RECV_ZC` with no SQE flags, and the registrations `ZCRX_CTRL` and
/// `EVENTFD`; so whoever reaches its descriptor can do nothing else with it — not even register
/// another instance. The instance is registered while the ring is still disabled, when no
/// restriction applies yet; whoever enables it (this process, or the one it is handed to) becomes
/// its single issuer.
///
/// Kernel behaviour relied on (io_uring/register.c, io_uring/io_uring.c `io_check_restriction`):
/// restrictions are taken once, only while the ring is disabled, and apply from its enabling;
/// once enabled, a registration outside them fails with `EACCES`, and an SQE with another opcode
/// or a flag completes with `-EACCES`; a registration opcode the kernel does not have makes the
/// whole set `EINVAL`, and a refused set leaves the ring unrestricted, to be restricted again. The
/// query (`IORING_REGISTER_QUERY`) needs no ring, and entering a ring is not a registration.
pub(crate) fn restricted_ring(entries: u32) -> io::Result<Ring> {
    let ring = Ring::new_disabled(entries, entries.saturating_mul(8))?;
    let mut allowed = vec![
        Allow::SqeOp(IORING_OP_RECV_ZC),
        Allow::Register(IORING_REGISTER_EVENTFD),
        Allow::Register(IORING_REGISTER_ZCRX_CTRL as u8),
    ];
    match ring.restrict(&allowed) {
        // A kernel before 6.19 has no ZCRX_CTRL (an opcode past its last is EINVAL, and a refused
        // set is not kept); zcnet calls it only on kernels with device-less zcrx or events (7.1+).
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            allowed.pop();
            ring.restrict(&allowed)?;
        }
        other => other?,
    }
    Ok(ring)
}

/// What a registration gave, besides the ring.
struct Registered {
    zcrx_id: u32,
    area_token: u64,
    rx_buf_len: u32,
    offsets: Offsets,
    refill_entries: u32,
    stats_off: Option<usize>,
}

/// How an instance registered on another process's ring is laid out: the instance, and the memory
/// file holding its refill region (at 0) and its area (right after it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueLayout {
    pub(crate) zcrx_id: u32,
    pub(crate) area_token: u64,
    pub(crate) rx_buf_len: u32,
    pub(crate) refill_entries: u32,
    pub(crate) refill_head: u32,
    pub(crate) refill_tail: u32,
    pub(crate) refill_rqes: u32,
    /// Bytes of the refill region (a multiple of the page size).
    pub(crate) region_len: u32,
    pub(crate) area_len: u64,
    /// Where the kernel's statistics sit in the region, when the registration asked for them.
    pub(crate) stats_off: Option<u32>,
}

impl ZcrxQueue {
    /// Sets up the ring, maps the area and the refill region, registers the instance, and enables
    /// the ring: the calling thread is its issuer.
    pub(crate) fn new(setup: &Setup) -> Result<ZcrxQueue, (Stage, io::Error)> {
        let unit = if setup.huge_pages {
            2 << 20
        } else {
            page_size()
        };
        let area_len = setup.area_len.max(1).next_multiple_of(unit);
        let (area, _) =
            Mmap::anonymous(area_len, setup.huge_pages).map_err(|e| (Stage::Area, e))?;
        let (region, _) =
            Mmap::anonymous(RegionPlan::of(setup).len, false).map_err(|e| (Stage::Region, e))?;
        let ring = restricted_ring(setup.ring_entries).map_err(|e| (Stage::Ring, e))?;
        let registered = register_on(ring.fd(), setup, &region, &area)?;
        ring.enable().map_err(|e| (Stage::Ring, e))?;
        ZcrxQueue::assemble(ring, region, area, &registered, setup.events.clone())
            .map_err(|e| (Stage::Register, e))
    }

    /// Registers an instance on `ring`, another process's disabled zcrx ring (a broker's worker's,
    /// [`restricted_ring`]), with the area and the refill region in one sealed memory file that
    /// process maps ([`ZcrxQueue::adopt`]). This process's mappings are gone when it returns (the
    /// kernel keeps the pages pinned).
    pub(crate) fn register_for(
        ring: BorrowedFd<'_>,
        setup: &Setup,
    ) -> Result<(OwnedFd, QueueLayout), (Stage, io::Error)> {
        if setup.huge_pages {
            return Err((
                Stage::Area,
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "huge pages in a handed-out area",
                ),
            ));
        }
        let area_len = setup.area_len.max(1).next_multiple_of(page_size());
        let region_len = RegionPlan::of(setup).len;
        let memory = sealed_memfd(c"zcnet-zcrx", (region_len + area_len) as u64)
            .map_err(|e| (Stage::Area, e))?;
        let region = Mmap::shared(memory.as_fd(), region_len, 0).map_err(|e| (Stage::Region, e))?;
        let area = Mmap::shared(memory.as_fd(), area_len, region_len as libc::off_t)
            .map_err(|e| (Stage::Area, e))?;
        let r = register_on(ring, setup, &region, &area)?;
        let layout = QueueLayout {
            zcrx_id: r.zcrx_id,
            area_token: r.area_token,
            rx_buf_len: r.rx_buf_len,
            refill_entries: r.refill_entries,
            refill_head: r.offsets.head,
            refill_tail: r.offsets.tail,
            refill_rqes: r.offsets.rqes,
            region_len: region_len as u32,
            area_len: area_len as u64,
            stats_off: r.stats_off.map(|o| o as u32),
        };
        Ok((memory, layout))
    }

    /// The queue over the instance another process (a broker) registered on `ring`, this
    /// process's [`restricted_ring`]: maps `memory` as `layout` says (every offset checked against
    /// the mappings) and enables the ring, so the calling thread is its issuer. Its events, if it
    /// asked for them, are read with the running kernel's layout.
    pub(crate) fn adopt(
        ring: Ring,
        memory: OwnedFd,
        layout: &QueueLayout,
    ) -> io::Result<ZcrxQueue> {
        let wrong = |what: String| io::Error::other(format!("handed-out zcrx queue: {what}"));
        let region_len = layout.region_len as usize;
        let area_len =
            usize::try_from(layout.area_len).map_err(|_| wrong("area too large".into()))?;
        if region_len == 0 || !region_len.is_multiple_of(page_size()) || area_len == 0 {
            return Err(wrong(format!(
                "region of {region_len} bytes, area of {area_len}"
            )));
        }
        let needed = (region_len as u64).checked_add(layout.area_len);
        match (sealed_size(memory.as_fd())?, needed) {
            (Some(size), Some(needed)) if size >= needed => {}
            _ => {
                return Err(wrong(
                    "no sealed memory file holding its region and area".into(),
                ));
            }
        }
        let region = Mmap::shared(memory.as_fd(), region_len, 0)?;
        let area = Mmap::shared(memory.as_fd(), area_len, region_len as libc::off_t)?;
        let events = match layout.stats_off {
            Some(_) => Some(EventLayout::from_kernel().map_err(|e| wrong(e.to_string()))?),
            None => None,
        };
        let registered = Registered {
            zcrx_id: layout.zcrx_id,
            area_token: layout.area_token,
            rx_buf_len: layout.rx_buf_len,
            offsets: Offsets {
                head: layout.refill_head,
                tail: layout.refill_tail,
                rqes: layout.refill_rqes,
                ..Offsets::default()
            },
            refill_entries: layout.refill_entries,
            stats_off: layout.stats_off.map(|o| o as usize),
        };
        let queue = ZcrxQueue::assemble(ring, region, area, &registered, events)?;
        queue.ring.enable()?;
        Ok(queue)
    }

    /// The queue over a registered instance, its refill ring and statistics checked to lie inside
    /// the region.
    fn assemble(
        ring: Ring,
        region: Mmap,
        area: Mmap,
        r: &Registered,
        events: Option<EventLayout>,
    ) -> io::Result<ZcrxQueue> {
        if !r.refill_entries.is_power_of_two() {
            return Err(io::Error::other(format!(
                "{} refill entries",
                r.refill_entries
            )));
        }
        let rqes_end =
            (r.offsets.rqes as usize).saturating_add(r.refill_entries as usize * size_of::<Rqe>());
        let stats = r.stats_off.zip(events);
        if let Some((off, layout)) = &stats
            && (rqes_end > *off
                || !off.is_multiple_of(8)
                || off.saturating_add(layout.stats_size) > region.len())
        {
            return Err(io::Error::other(
                "the kernel's refill entries overlap the statistics, or they leave the region",
            ));
        }
        let refill = RefillRing::new(region, &r.offsets, r.refill_entries)?;
        Ok(ZcrxQueue {
            ring,
            zcrx_id: r.zcrx_id,
            area_token: r.area_token,
            rx_buf_len: r.rx_buf_len,
            area,
            refill,
            stats,
        })
    }

    /// The area's length in bytes.
    pub(crate) fn area_len(&self) -> usize {
        self.area.len()
    }

    /// The area's token: the bits a completion's offset carries above [`AREA_SHIFT`].
    pub(crate) fn area_token(&self) -> u64 {
        self.area_token
    }

    /// The buffer length the kernel chose.
    pub(crate) fn rx_buf_len(&self) -> u32 {
        self.rx_buf_len
    }

    /// Whether the registration asked for events.
    pub(crate) fn events(&self) -> Option<&EventLayout> {
        self.stats.as_ref().map(|(_, l)| l)
    }

    /// Queues a multishot `IORING_OP_RECV_ZC` on `socket` (all it receives, until it ends).
    pub(crate) fn arm_recv(&mut self, socket: BorrowedFd<'_>) -> io::Result<()> {
        let entry = Sqe {
            opcode: IORING_OP_RECV_ZC,
            ioprio: IORING_RECV_MULTISHOT,
            fd: socket.as_raw_fd(),
            index: self.zcrx_id,
            user_data: RECV,
            ..Sqe::default()
        };
        // SAFETY: RECV_ZC reads no user memory of the SQE's; it writes only into the registered
        // area, which this queue owns for as long as the ring lives. The socket is held by the
        // kernel's reference on its file for as long as the request runs.
        if !unsafe { self.ring.push(&entry) } {
            return Err(io::Error::other("submission queue full"));
        }
        self.ring.enter(1, 0, 0).map(drop)
    }

    /// Enters the ring with `IORING_ENTER_GETEVENTS` to run its deferred work and post
    /// completions, waiting for at least `want` (0: not waiting). Without that flag a
    /// `DEFER_TASKRUN` ring runs no deferred work, so nothing would be posted.
    pub(crate) fn enter(&mut self, want: u32) -> io::Result<()> {
        self.ring.enter(0, want, IORING_ENTER_GETEVENTS).map(drop)
    }

    /// Registers a new non-blocking eventfd with the ring (`IORING_REGISTER_EVENTFD`): the kernel
    /// signals it when a completion is posted or deferred work waits to post one, so a reactor can
    /// wait on it. Drain it with [`drain_eventfd`] before looking at the ring again.
    #[cfg(feature = "tokio")]
    pub(crate) fn register_eventfd(&mut self) -> io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd has no pointer arguments.
        let fd = syscall!(eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?;
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mut raw = fd.as_raw_fd();
        // The kernel reads one descriptor number through the pointer.
        self.ring.register(
            IORING_REGISTER_EVENTFD.into(),
            ptr::from_mut(&mut raw).cast(),
            1,
        )?;
        Ok(fd)
    }

    /// Whether a completion is posted.
    pub(crate) fn has_completion(&mut self) -> bool {
        self.ring.has_completion()
    }

    /// The next completion, if one is posted.
    pub(crate) fn next_completion(&mut self) -> Option<Completion> {
        let cqe = self.ring.next_completion()?;
        Some(match cqe.user_data {
            EVENT => Completion::Event { kind: cqe.res },
            _ => Completion::Recv {
                res: cqe.res,
                off: cqe.big[0],
                more: cqe.flags & CQE_F_MORE != 0,
            },
        })
    }

    /// The area's bytes `range`.
    ///
    /// The range must be one a completion handed out and not yet given back: the kernel does not
    /// write a buffer while user space holds its reference.
    pub(crate) fn area_bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        // SAFETY: the caller passes a range from a completion not yet refilled (decoded by
        // `decode_completion`, which keeps it inside the area); the kernel leaves it alone until
        // its refill entry is published, which needs `&mut self`.
        unsafe { self.area.bytes(range.start, range.len()) }.unwrap_or(&[])
    }

    /// Writes a refill entry giving back the buffer of completion offset `off` (published by
    /// [`ZcrxQueue::publish_refills`]); `false` when the refill ring is full.
    pub(crate) fn refill(&mut self, off: u64, len: u32) -> bool {
        self.refill.push(off, len)
    }

    /// Publishes the refill entries written so far.
    pub(crate) fn publish_refills(&mut self) {
        self.refill.publish();
    }

    /// `ZCRX_CTRL_FLUSH_RQ`: the kernel takes back the published refill entries now.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.ctrl(ZCRX_CTRL_FLUSH_RQ, [0; 6])
    }

    /// Re-arms `event` after it fired.
    pub(crate) fn arm_event(&mut self, event: ZcrxEvent) -> io::Result<()> {
        let layout = self.events();
        let layout = layout.ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))?;
        let kind = match event {
            ZcrxEvent::Copy => layout.copy,
            ZcrxEvent::AllocFail => layout.alloc_fail,
        };
        self.ctrl(layout.arm_op, [u64::from(kind), 0, 0, 0, 0, 0])
    }

    fn ctrl(&mut self, op: u32, payload: [u64; 6]) -> io::Result<()> {
        let mut ctrl = Ctrl {
            zcrx_id: self.zcrx_id,
            op,
            payload,
            ..Ctrl::default()
        };
        self.ring
            .register(
                IORING_REGISTER_ZCRX_CTRL,
                ptr::from_mut(&mut ctrl).cast(),
                0,
            )
            .map(drop)
    }

    /// The kernel's statistics `(copy_count, copy_bytes)`, when the registration asked for them.
    pub(crate) fn copy_stats(&self) -> Option<(u64, u64)> {
        let (off, layout) = self.stats.as_ref()?;
        let read = |field: usize| {
            // SAFETY: the statistics lie inside the region (set-up placed them there, and the
            // layout check keeps each 8-byte counter inside `stats_size`, 8-aligned); the kernel
            // stores to them while this reads, so the read is volatile.
            unsafe {
                ptr::read_volatile(self.refill.region.as_ptr().add(off + field).cast::<u64>())
            }
        };
        Some((read(layout.copy_count), read(layout.copy_bytes)))
    }
}

/// How the refill region of `setup` is laid out: a header (at most a page on any kernel so far),
/// the entries (a power of two), then the statistics when asked for.
struct RegionPlan {
    entries: u32,
    stats_off: Option<usize>,
    /// Bytes of the region, a multiple of the page size.
    len: usize,
}

impl RegionPlan {
    fn of(setup: &Setup) -> RegionPlan {
        let entries = setup.refill_entries.max(1).next_power_of_two();
        let rqes_end = page_size() + entries as usize * size_of::<Rqe>();
        let stats_off = setup
            .events
            .as_ref()
            .map(|l| rqes_end.next_multiple_of(l.stats_align));
        let stats_size = setup.events.as_ref().map_or(0, |l| l.stats_size);
        let len = (stats_off.unwrap_or(rqes_end) + stats_size).next_multiple_of(page_size());
        RegionPlan {
            entries,
            stats_off,
            len,
        }
    }
}

/// Registers an instance over `region` and `area` on `ring`, a [`restricted_ring`] still disabled.
fn register_on(
    ring: BorrowedFd<'_>,
    setup: &Setup,
    region: &Mmap,
    area: &Mmap,
) -> Result<Registered, (Stage, io::Error)> {
    let RegionPlan {
        entries, stats_off, ..
    } = RegionPlan::of(setup);
    let mut area_reg = AreaReg {
        addr: area.as_ptr() as u64,
        len: area.len() as u64,
        ..AreaReg::default()
    };
    let mut region_desc = RegionDesc {
        user_addr: region.as_ptr() as u64,
        size: region.len() as u64,
        flags: IORING_MEM_REGION_TYPE_USER,
        ..RegionDesc::default()
    };
    let mut desc = setup.events.as_ref().map(|l| {
        let mask = 1u32 << l.copy | 1u32 << l.alloc_fail;
        l.descriptor(EVENT, mask, stats_off.map(|o| o as u64))
    });
    let (flags, if_idx, if_rxq) = match setup.bind {
        Bind::Queue { ifindex, queue } => (0, ifindex, queue),
        Bind::NoDevice => (ZCRX_REG_NODEV, 0, 0),
    };
    let mut reg = IfqReg {
        if_idx,
        if_rxq,
        rq_entries: entries,
        flags,
        area_ptr: ptr::from_mut(&mut area_reg) as u64,
        region_ptr: ptr::from_mut(&mut region_desc) as u64,
        rx_buf_len: setup.rx_buf_len,
        event_desc: desc.as_mut().map_or(0, |d| d.as_mut_ptr() as u64),
        ..IfqReg::default()
    };
    // The kernel reads the area registration, the region descriptor and the event descriptor
    // through the pointers above (all live until the call returns) and writes back into `reg`
    // and `area_reg`: each is passed as a unique pointer, never through a shared reference.
    io_uring_register(
        ring.as_raw_fd(),
        IORING_REGISTER_ZCRX_IFQ,
        ptr::from_mut(&mut reg).cast(),
        1,
    )
    .map_err(|e| (Stage::Register, e))?;
    let registered = Registered {
        zcrx_id: reg.zcrx_id,
        area_token: area_reg.rq_area_token,
        rx_buf_len: reg.rx_buf_len,
        offsets: reg.offsets,
        refill_entries: entries,
        stats_off,
    };
    Ok(registered)
}

/// Resets an eventfd's counter (a non-blocking read; nothing to read is no error).
#[cfg(feature = "tokio")]
pub(crate) fn drain_eventfd(fd: BorrowedFd<'_>) {
    let mut count = [0u8; 8];
    // SAFETY: `count` is 8 writable bytes, the size an eventfd read takes.
    let _ = syscall!(read(fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()));
}

/// Free refill slots between the kernel's `head` and the local `tail` of a ring of `entries`;
/// 0 also when the kernel's head is not one a well-behaved kernel could have stored (ahead of the
/// tail, or more than `entries` behind it).
pub(crate) fn refill_room(head: u32, tail: u32, entries: u32) -> u32 {
    let used = tail.wrapping_sub(head);
    entries.saturating_sub(used)
}

/// Checks a receive completion against the area: the byte range it hands out, or `None` when the
/// offset names another area or the range leaves the area (a kernel that misbehaved).
pub(crate) fn decode_completion(
    res: i32,
    off: u64,
    area_token: u64,
    area_len: usize,
) -> Option<std::ops::Range<usize>> {
    let len = usize::try_from(res).ok().filter(|&l| l > 0)?;
    let mask = !((1u64 << AREA_SHIFT) - 1);
    if off & mask != area_token & mask {
        return None;
    }
    let start = usize::try_from(off & !mask).ok()?;
    let end = start.checked_add(len)?;
    (end <= area_len).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// A zcrx ring, once enabled, takes its own registrations and `RECV_ZC`, and refuses every other
    /// operation with `EACCES`: a submission (`IORING_OP_NOP`), an SQE flag on `RECV_ZC`, a
    /// registration (`IORING_REGISTER_PROBE`), a second zcrx instance, a second set of
    /// restrictions. (Registering the instance itself, before enabling, is checked by the guest
    /// suite's zcrx run: this kernel may refuse zcrx.)
    #[test]
    fn a_zcrx_ring_refuses_what_a_zcrx_queue_does_not_do() {
        let ring = restricted_ring(4).and_then(|ring| ring.enable().map(|()| ring));
        let mut ring = match ring {
            Ok(ring) => ring,
            Err(e) => {
                testnet::skip(
                    "a_zcrx_ring_refuses_what_a_zcrx_queue_does_not_do",
                    &format!("no io_uring ring with SINGLE_ISSUER and DEFER_TASKRUN: {e}"),
                );
                return;
            }
        };
        let errno = |r: io::Result<i64>| r.unwrap_err().raw_os_error();
        // `struct io_uring_probe` with room for 64 opcodes.
        let mut probe = vec![0u64; 2 + 64];
        let mut reg = IfqReg {
            flags: ZCRX_REG_NODEV,
            ..IfqReg::default()
        };
        for (opcode, arg, nr) in [
            (8, probe.as_mut_ptr().cast(), 64),
            (IORING_REGISTER_ZCRX_IFQ, ptr::from_mut(&mut reg).cast(), 1),
            (11, probe.as_mut_ptr().cast(), 1),
        ] {
            assert_eq!(
                errno(ring.register(opcode, arg, nr)),
                Some(libc::EACCES),
                "{opcode}"
            );
        }
        let refused = [
            Sqe {
                user_data: 100,
                ..Sqe::default()
            },
            Sqe {
                opcode: IORING_OP_RECV_ZC,
                ioprio: IORING_RECV_MULTISHOT,
                // IOSQE_IO_LINK
                flags: 1 << 2,
                user_data: 101,
                ..Sqe::default()
            },
        ];
        let mut results = Vec::new();
        for entry in &refused {
            // SAFETY: both are refused before they run: neither reads nor writes memory.
            assert!(unsafe { ring.push(entry) });
            ring.enter(1, 1, IORING_ENTER_GETEVENTS).unwrap();
            results.extend(
                std::iter::from_fn(|| ring.next_completion()).map(|c| (c.user_data, c.res)),
            );
        }
        assert_eq!(results, [(100, -libc::EACCES), (101, -libc::EACCES)]);
    }

    #[test]
    fn layouts_match_the_uapi_headers() {
        assert_eq!(size_of::<Rqe>(), 16);
        assert_eq!(size_of::<Offsets>(), 32);
        assert_eq!(offset_of!(Offsets, rqes), 8);
        assert_eq!(size_of::<AreaReg>(), 48);
        assert_eq!(offset_of!(AreaReg, rq_area_token), 16);
        assert_eq!(offset_of!(AreaReg, flags), 24);
        assert_eq!(size_of::<RegionDesc>(), 64);
        assert_eq!(offset_of!(RegionDesc, flags), 16);
        assert_eq!(offset_of!(RegionDesc, mmap_offset), 24);
        assert_eq!(size_of::<IfqReg>(), 96);
        assert_eq!(offset_of!(IfqReg, area_ptr), 16);
        assert_eq!(offset_of!(IfqReg, offsets), 32);
        assert_eq!(offset_of!(IfqReg, zcrx_id), 64);
        assert_eq!(offset_of!(IfqReg, rx_buf_len), 68);
        assert_eq!(offset_of!(IfqReg, event_desc), 72);
        assert_eq!(size_of::<Ctrl>(), 72);
        assert_eq!(offset_of!(Ctrl, payload), 24);
        assert_eq!(size_of::<QueryHdr>(), 40);
        assert_eq!(offset_of!(QueryHdr, result), 24);
        assert_eq!(size_of::<QueryZcrx>(), 40);
        assert_eq!(offset_of!(QueryZcrx, features), 20);
        assert_eq!(offset_of!(QueryZcrx, rq_hdr_size), 24);
        assert_eq!(size_of::<QueryEvent>(), 48);
    }

    /// A BTF blob declaring the 7.2 names, as the guest's 7.3 kernel does.
    fn event_btf() -> Btf {
        let strings: &[u8] = b"\0zcrx_event_desc\0user_data\0type_mask\0flags\0stats_offset\0\
            zcrx_stats\0copy_count\0copy_bytes\0e\0ZCRX_EVENT_DESC_FLAG_STATS\0ZCRX_EVENT_COPY\0\
            ZCRX_EVENT_ALLOC_FAIL\0ZCRX_CTRL_ARM_EVENT\0";
        let pos = |s: &str| {
            let needle = [s.as_bytes(), b"\0"].concat();
            strings
                .windows(needle.len())
                .position(|w| w == needle)
                .unwrap() as u32
        };
        let mut types: Vec<u32> = Vec::new();
        let mut push = |words: &[u32]| types.extend_from_slice(words);
        push(&[pos("zcrx_event_desc"), 4 << 24 | 4, 96]);
        push(&[pos("user_data"), 0, 0, pos("type_mask"), 0, 64]);
        push(&[pos("flags"), 0, 96, pos("stats_offset"), 0, 128]);
        push(&[pos("zcrx_stats"), 4 << 24 | 2, 16]);
        push(&[pos("copy_count"), 0, 0, pos("copy_bytes"), 0, 64]);
        push(&[pos("e"), 6 << 24 | 4, 4]);
        push(&[
            pos("ZCRX_EVENT_DESC_FLAG_STATS"),
            1,
            pos("ZCRX_EVENT_COPY"),
            1,
        ]);
        push(&[
            pos("ZCRX_EVENT_ALLOC_FAIL"),
            0,
            pos("ZCRX_CTRL_ARM_EVENT"),
            2,
        ]);
        Btf::parse(&crate::btf::raw(&types, strings)).unwrap()
    }

    #[test]
    fn event_descriptor_is_built_at_the_offsets_btf_gives() {
        let layout = EventLayout::from_btf(&event_btf(), 16, 8).unwrap();
        assert_eq!((layout.copy, layout.alloc_fail, layout.arm_op), (1, 0, 2));
        assert_eq!(layout.event(1), Some(ZcrxEvent::Copy));
        assert_eq!(layout.event(0), Some(ZcrxEvent::AllocFail));
        assert_eq!(layout.event(2), None);
        assert_eq!(layout.event(-1), None);
        let words = layout.descriptor(7, 0b11, Some(4096));
        assert_eq!(words.len(), 12);
        assert_eq!(words[0], 7);
        assert_eq!(words[1], 0b11 | 1 << 32);
        assert_eq!(words[2], 4096);
        assert!(words[3..].iter().all(|&w| w == 0));
        let no_stats = layout.descriptor(7, 0b10, None);
        assert_eq!(no_stats[1], 0b10);
        assert_eq!(no_stats[2], 0);
    }

    #[test]
    fn a_kernel_without_the_event_types_is_refused() {
        let err = EventLayout::from_btf(&Btf::default(), 16, 8).unwrap_err();
        assert!(err.contains("zcrx_event_desc"), "{err}");
    }

    #[test]
    fn completions_outside_the_area_are_refused() {
        let token = 1u64 << AREA_SHIFT;
        assert_eq!(
            decode_completion(100, token | 4096, token, 8192),
            Some(4096..4196)
        );
        assert_eq!(
            decode_completion(4096, token | 4096, token, 8192),
            Some(4096..8192)
        );
        assert_eq!(decode_completion(4097, token | 4096, token, 8192), None);
        assert_eq!(
            decode_completion(100, 2 << AREA_SHIFT | 4096, token, 8192),
            None
        );
        assert_eq!(decode_completion(0, token, token, 8192), None);
        assert_eq!(decode_completion(-12, token, token, 8192), None);
    }

    #[test]
    fn refill_room_never_exceeds_the_ring() {
        assert_eq!(refill_room(0, 0, 8), 8);
        assert_eq!(refill_room(u32::MAX, 3, 8), 4);
        assert_eq!(refill_room(5, 13, 8), 0);
        // A head ahead of the tail, or far behind it: no room, never a slot the kernel still reads.
        assert_eq!(refill_room(14, 13, 8), 0);
        assert_eq!(refill_room(0, 100, 8), 0);
    }

    /// A refill ring over an anonymous region laid out as the kernel lays it out (head, tail, then
    /// entries from byte 128), every other byte a sentinel.
    fn fake_ring(entries: u32) -> RefillRing {
        let (mut region, _) = Mmap::anonymous(4096, false).unwrap();
        // SAFETY: the region is this test's own; no kernel shares it.
        unsafe { region.bytes_mut(0, 4096) }.unwrap().fill(0xaa);
        // SAFETY: as above.
        unsafe { region.bytes_mut(0, 128) }.unwrap().fill(0);
        let offsets = Offsets {
            head: 0,
            tail: 64,
            rqes: 128,
            ..Offsets::default()
        };
        RefillRing::new(region, &offsets, entries).unwrap()
    }

    /// Stores `head` as a (hostile) kernel would.
    fn kernel_stores_head(ring: &RefillRing, head: u32) {
        // SAFETY: the head lies inside the ring's region (checked by `RefillRing::new`).
        unsafe { ring.head.as_ref() }.store(head, Ordering::Release);
    }

    fn region_bytes(ring: &RefillRing) -> &[u8] {
        // SAFETY: the region is the test's own; nothing writes it while the slice lives.
        unsafe { ring.region.bytes(0, ring.region.len()) }.unwrap()
    }

    #[test]
    fn a_ring_laid_out_outside_its_region_is_refused() {
        let (region, _) = Mmap::anonymous(4096, false).unwrap();
        let offsets = Offsets {
            head: 0,
            tail: 64,
            rqes: 4096 - 64,
            ..Offsets::default()
        };
        assert!(RefillRing::new(region, &offsets, 8).is_err());
        let (region, _) = Mmap::anonymous(4096, false).unwrap();
        let overlapping = Offsets {
            head: 0,
            tail: 136,
            rqes: 128,
            ..Offsets::default()
        };
        assert!(RefillRing::new(region, &overlapping, 8).is_err());
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever a completion says, the range handed out lies inside the area, is as long as
        /// the completion says, and names the area's own token.
        #[test]
        fn hostile_completions_never_leave_the_area(
            res in any::<i32>(),
            off in any::<u64>(),
            token_id in 0u64..4,
            area_len in 0usize..(1 << 30),
        ) {
            let token = token_id << AREA_SHIFT;
            if let Some(range) = decode_completion(res, off, token, area_len) {
                prop_assert!(range.end <= area_len);
                prop_assert_eq!(range.len(), res as usize);
                prop_assert_eq!(off >> AREA_SHIFT, token_id);
                prop_assert_eq!(range.start as u64, off & ((1 << AREA_SHIFT) - 1));
            }
        }

        /// Heads stored by a hostile kernel between pushes: the ring never takes more entries than
        /// the room the head leaves, never writes a byte outside its entries and tail, and keeps
        /// every entry it took where the kernel will read it.
        #[test]
        fn hostile_heads_never_overrun_the_ring(
            start in any::<u32>(),
            steps in proptest::collection::vec((any::<u32>(), 0u32..12, any::<bool>()), 1..40),
        ) {
            let entries = 8;
            let mut ring = fake_ring(entries);
            ring.local_tail = start;
            ring.publish();
            let before = region_bytes(&ring).to_vec();
            for (head_delta, pushes, hostile) in steps {
                // A kernel that consumed some entries, or one that stored any value at all.
                let head = if hostile {
                    head_delta
                } else {
                    ring.local_tail.wrapping_sub(head_delta % (entries + 1))
                };
                kernel_stores_head(&ring, head);
                let room = refill_room(head, ring.local_tail, entries);
                let mut taken = 0;
                for i in 0..pushes {
                    let tail = ring.local_tail;
                    if ring.push(u64::from(tail) << 12 | u64::from(i), 4096) {
                        taken += 1;
                        let slot = (tail & (entries - 1)) as usize;
                        let at = 128 + slot * 16;
                        let word = u64::from_ne_bytes(region_bytes(&ring)[at..at + 8].try_into().unwrap());
                        prop_assert_eq!(word, u64::from(tail) << 12 | u64::from(i));
                    }
                }
                prop_assert_eq!(taken, pushes.min(room));
                prop_assert!(ring.local_tail.wrapping_sub(head) <= entries || taken == 0);
                ring.publish();
            }
            // Outside the entries, the head and the tail, nothing changed.
            let after = region_bytes(&ring);
            for (i, (a, b)) in before.iter().zip(after).enumerate() {
                if !(0..4).contains(&i) && !(64..68).contains(&i) && !(128..256).contains(&i) {
                    prop_assert_eq!(a, b, "byte {} changed", i);
                }
            }
        }
    }

    #[test]
    fn this_kernels_query_answers_or_says_it_has_none() {
        // 6.18 and later answer the query; earlier kernels refuse the call itself.
        match query_zcrx() {
            Ok(Some(q)) => assert!(q.rq_hdr_size > 0, "{q:?}"),
            Ok(None) => {}
            Err(e) => assert!(
                matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EBADF)),
                "{e}"
            ),
        }
    }
}
