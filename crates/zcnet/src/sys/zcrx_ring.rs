//! The io_uring ring of a zcrx instance, set up and mapped by zcnet itself, so that the instance
//! can be registered on it by another process (a broker) before it is enabled: a ring with 32-byte
//! completions (`IORING_SETUP_CQE32`) created disabled, restricted, entered and read here.
//!
//! Kernel behaviour relied on (include/uapi/linux/io_uring.h, io_uring/io_uring.c, register.c,
//! memmap.c):
//! - `io_uring_setup(entries, params)` writes the ring sizes, the features and the offsets of every
//!   ring word into `params`; the submission ring (head, tail, mask, entries, flags, dropped, the
//!   index array) is mapped at `IORING_OFF_SQ_RING`, the completion ring (head, tail, mask,
//!   entries, overflow, flags, the CQEs) at `IORING_OFF_CQ_RING` — or in the same mapping with
//!   `IORING_FEAT_SINGLE_MMAP` — and the SQEs (64 bytes each) at `IORING_OFF_SQES`. A mapping
//!   longer than the kernel's region is refused (`EINVAL`), so a mapping that succeeds lies inside
//!   it.
//! - User space produces SQEs (entry, index, then the tail with release ordering) and consumes
//!   CQEs (read with the tail loaded with acquire ordering, then the head stored with release);
//!   the kernel owns the other two words.
//! - A ring set up with `IORING_SETUP_R_DISABLED` takes restrictions
//!   (`IORING_REGISTER_RESTRICTIONS`) and registrations from any task; with `SINGLE_ISSUER`, the task
//!   that enables it (`IORING_REGISTER_ENABLE_RINGS`) becomes its only issuer, every other task's
//!   `io_uring_enter` and registration failing with `EEXIST`. Enabling twice is `EBADFD`.
//!   Restrictions take effect at enabling.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};

use super::xdp::Mmap;

/// `IORING_SETUP_CQSIZE`.
const SETUP_CQSIZE: u32 = 1 << 3;
/// `IORING_SETUP_R_DISABLED`.
const SETUP_R_DISABLED: u32 = 1 << 6;
/// `IORING_SETUP_SQE128`.
const SETUP_SQE128: u32 = 1 << 10;
/// `IORING_SETUP_CQE32`.
const SETUP_CQE32: u32 = 1 << 11;
/// `IORING_SETUP_SINGLE_ISSUER`.
const SETUP_SINGLE_ISSUER: u32 = 1 << 12;
/// `IORING_SETUP_DEFER_TASKRUN`.
const SETUP_DEFER_TASKRUN: u32 = 1 << 13;
/// `IORING_SETUP_NO_SQARRAY`.
const SETUP_NO_SQARRAY: u32 = 1 << 16;
/// `IORING_FEAT_SINGLE_MMAP`.
const FEAT_SINGLE_MMAP: u32 = 1;
const OFF_SQ_RING: libc::off_t = 0;
const OFF_CQ_RING: libc::off_t = 0x800_0000;
const OFF_SQES: libc::off_t = 0x1000_0000;
/// `IORING_REGISTER_RESTRICTIONS`.
const REGISTER_RESTRICTIONS: u32 = 11;
/// `IORING_REGISTER_ENABLE_RINGS`.
const REGISTER_ENABLE_RINGS: u32 = 12;
/// `IORING_RESTRICTION_REGISTER_OP`.
const RESTRICTION_REGISTER_OP: u16 = 0;
/// `IORING_RESTRICTION_SQE_OP`.
const RESTRICTION_SQE_OP: u16 = 1;
/// The most submission entries a ring of this module takes from a layout (the kernel's
/// `IORING_MAX_ENTRIES`), and completions (`IORING_MAX_CQ_ENTRIES`).
const MAX_SQ_ENTRIES: u32 = 32768;
const MAX_CQ_ENTRIES: u32 = 2 * MAX_SQ_ENTRIES;

/// `struct io_sqring_offsets`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_cqring_offsets`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

/// `struct io_uring_params`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}
const _: () = assert!(size_of::<Params>() == 120);

/// `struct io_uring_restriction`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Restriction {
    opcode: u16,
    op: u8,
    resv: u8,
    resv2: [u32; 3],
}
const _: () = assert!(size_of::<Restriction>() == 16);

/// `struct io_uring_sqe`, with the fields a zcrx ring uses named.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sqe {
    pub(crate) opcode: u8,
    pub(crate) flags: u8,
    pub(crate) ioprio: u16,
    pub(crate) fd: i32,
    pub(crate) off: u64,
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) op_flags: u32,
    pub(crate) user_data: u64,
    pub(crate) buf_index: u16,
    pub(crate) personality: u16,
    /// `file_index`, `zcrx_ifq_idx`, …
    pub(crate) index: u32,
    pub(crate) addr3: u64,
    pub(crate) pad: u64,
}
const _: () = assert!(size_of::<Sqe>() == 64);

/// A 32-byte `struct io_uring_cqe`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cqe32 {
    pub(crate) user_data: u64,
    pub(crate) res: i32,
    pub(crate) flags: u32,
    pub(crate) big: [u64; 2],
}
const _: () = assert!(size_of::<Cqe32>() == 32);

/// A ring's set-up flags, sizes, features and ring words' offsets, as `io_uring_setup` wrote them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RingLayout {
    flags: u32,
    sq_entries: u32,
    cq_entries: u32,
    features: u32,
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

impl RingLayout {
    /// Bytes of the submission ring's mapping.
    fn sq_len(&self) -> Option<usize> {
        (self.sq_off.array as usize).checked_add(4 * self.sq_entries as usize)
    }

    /// Bytes of the completion ring's mapping.
    fn cq_len(&self) -> Option<usize> {
        (self.cq_off.cqes as usize).checked_add(size_of::<Cqe32>() * self.cq_entries as usize)
    }

    /// Whether a ring of this layout is one this module maps: 32-byte completions, 64-byte SQEs
    /// with their index array, sizes powers of two within the kernel's limits.
    fn check(&self) -> io::Result<()> {
        let bad = |what: &str| Err(io::Error::other(format!("ring layout: {what}")));
        if self.flags & SETUP_CQE32 == 0 {
            return bad("no 32-byte completions");
        }
        if self.flags & (SETUP_SQE128 | SETUP_NO_SQARRAY) != 0 {
            return bad("128-byte SQEs or no SQ index array");
        }
        let sized = |n: u32, max: u32| n.is_power_of_two() && n <= max;
        if !sized(self.sq_entries, MAX_SQ_ENTRIES) || !sized(self.cq_entries, MAX_CQ_ENTRIES) {
            return bad("ring sizes are not powers of two within the kernel's limits");
        }
        Ok(())
    }
}

/// `io_uring_setup`: a ring of `entries` submissions and `cq_entries` completions set up with
/// `flags` (`CQSIZE` added), its layout as the kernel wrote it.
fn setup(entries: u32, cq_entries: u32, flags: u32) -> io::Result<(OwnedFd, RingLayout)> {
    let mut params = Params {
        flags: flags | SETUP_CQSIZE,
        cq_entries,
        ..Params::default()
    };
    // SAFETY: `params` is a live, writable `struct io_uring_params` the kernel reads and fills.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_io_uring_setup,
            entries,
            ptr::from_mut(&mut params),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor this process owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let layout = RingLayout {
        flags: params.flags,
        sq_entries: params.sq_entries,
        cq_entries: params.cq_entries,
        features: params.features,
        sq_off: params.sq_off,
        cq_off: params.cq_off,
    };
    Ok((fd, layout))
}

/// `io_uring_register(fd, opcode, arg, nr_args)`: its non-negative result.
pub(super) fn io_uring_register(
    fd: RawFd,
    opcode: libc::c_uint,
    arg: *mut libc::c_void,
    nr_args: libc::c_uint,
) -> io::Result<i64> {
    // SAFETY: every caller passes a pointer to a live, writable argument of the size the opcode
    // reads and writes (or null where the opcode reads none), and `fd` is -1 or a ring it borrows.
    let ret = unsafe { libc::syscall(libc::SYS_io_uring_register, fd, opcode, arg, nr_args) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Whether `fd` is an io_uring (its `/proc/self/fd` link reads `anon_inode:[io_uring]`).
pub(crate) fn is_ring(fd: BorrowedFd<'_>) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|link| link.as_os_str() == "anon_inode:[io_uring]")
}

/// What a restriction allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allow {
    /// A submission opcode (`IORING_OP_*`), with no SQE flag.
    SqeOp(u8),
    /// A registration opcode (`IORING_REGISTER_*`).
    Register(u8),
}

/// A zcrx ring, mapped: 32-byte completions, `SINGLE_ISSUER` and `DEFER_TASKRUN`.
pub(crate) struct Ring {
    fd: OwnedFd,
    layout: RingLayout,
    /// The submission ring (and the completion ring with `IORING_FEAT_SINGLE_MMAP`): the words
    /// below point into it.
    _sq_ring: Mmap,
    /// The completion ring, when mapped apart.
    _cq_ring: Option<Mmap>,
    sqes: Mmap,
    sq_head: NonNull<AtomicU32>,
    sq_tail: NonNull<AtomicU32>,
    sq_array: NonNull<AtomicU32>,
    cq_head: NonNull<AtomicU32>,
    cq_tail: NonNull<AtomicU32>,
    cqes: NonNull<Cqe32>,
}

// SAFETY: the ring owns its descriptor and mappings and the pointers into them; moving it moves
// that ownership, and every access goes through `&mut self` or atomics.
unsafe impl Send for Ring {}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("fd", &self.fd)
            .field("layout", &self.layout)
            .finish()
    }
}

/// The address of a `T` at byte `offset` of `map`, checked to lie inside it, aligned, with `count`
/// of them fitting.
fn at<T>(map: &Mmap, offset: u32, count: usize, what: &str) -> io::Result<NonNull<T>> {
    let offset = offset as usize;
    let fits = size_of::<T>()
        .checked_mul(count)
        .and_then(|n| n.checked_add(offset))
        .is_some_and(|end| end <= map.len());
    // In bounds: the address does not wrap.
    let aligned = (map.as_ptr() as usize + offset.min(map.len())).is_multiple_of(align_of::<T>());
    if !fits || !aligned {
        return Err(io::Error::other(format!(
            "ring layout: {what} at {offset} outside its mapping of {} bytes",
            map.len()
        )));
    }
    // SAFETY: `offset` lies inside the mapping (checked above), whose pointer is not null.
    Ok(unsafe { NonNull::new_unchecked(map.as_ptr().add(offset).cast()) })
}

impl Ring {
    /// A new ring of `entries` submissions and `cq_entries` completions, created disabled: it takes
    /// restrictions and registrations until [`Ring::enable`] (or another process's) starts it.
    pub(crate) fn new_disabled(entries: u32, cq_entries: u32) -> io::Result<Ring> {
        let flags = SETUP_SINGLE_ISSUER | SETUP_DEFER_TASKRUN | SETUP_CQE32 | SETUP_R_DISABLED;
        let (fd, layout) = setup(entries, cq_entries, flags)?;
        Ring::map(fd, layout)
    }

    /// Maps the ring `fd` set up with `layout`, checking every offset against the mappings before
    /// any address is computed from it.
    fn map(fd: OwnedFd, layout: RingLayout) -> io::Result<Ring> {
        layout.check()?;
        let too_large = || io::Error::other("ring layout: sizes overflow");
        let sq_len = layout.sq_len().ok_or_else(too_large)?;
        let cq_len = layout.cq_len().ok_or_else(too_large)?;
        let single = layout.features & FEAT_SINGLE_MMAP != 0;
        let sq_ring = Mmap::shared(
            fd.as_fd(),
            if single { sq_len.max(cq_len) } else { sq_len },
            OFF_SQ_RING,
        )?;
        let cq_ring = match single {
            true => None,
            false => Some(Mmap::shared(fd.as_fd(), cq_len, OFF_CQ_RING)?),
        };
        let sqes = Mmap::shared(
            fd.as_fd(),
            size_of::<Sqe>() * layout.sq_entries as usize,
            OFF_SQES,
        )?;
        let (sq, cq) = (&layout.sq_off, &layout.cq_off);
        let cq_map = cq_ring.as_ref().unwrap_or(&sq_ring);
        let sq_head = at(&sq_ring, sq.head, 1, "the SQ head")?;
        let sq_tail = at(&sq_ring, sq.tail, 1, "the SQ tail")?;
        let sq_array = at(
            &sq_ring,
            sq.array,
            layout.sq_entries as usize,
            "the SQ array",
        )?;
        let sq_mask = at::<AtomicU32>(&sq_ring, sq.ring_mask, 1, "the SQ mask")?;
        let cq_head = at(cq_map, cq.head, 1, "the CQ head")?;
        let cq_tail = at(cq_map, cq.tail, 1, "the CQ tail")?;
        let cqes = at(cq_map, cq.cqes, layout.cq_entries as usize, "the CQEs")?;
        let cq_mask = at::<AtomicU32>(cq_map, cq.ring_mask, 1, "the CQ mask")?;
        // SAFETY: both masks lie inside their mappings, 4-aligned (checked above).
        let masks = unsafe {
            (
                sq_mask.as_ref().load(Ordering::Relaxed),
                cq_mask.as_ref().load(Ordering::Relaxed),
            )
        };
        if masks != (layout.sq_entries - 1, layout.cq_entries - 1) {
            return Err(io::Error::other(format!(
                "ring layout: masks {masks:?} for {} and {} entries",
                layout.sq_entries, layout.cq_entries
            )));
        }
        Ok(Ring {
            fd,
            layout,
            _sq_ring: sq_ring,
            _cq_ring: cq_ring,
            sqes,
            sq_head,
            sq_tail,
            sq_array,
            cq_head,
            cq_tail,
            cqes,
        })
    }

    /// The ring's descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Restricts the ring, before it is enabled, to `allowed`: any other submission opcode, any SQE
    /// flag, and any other registration is refused once it runs (`EACCES`).
    pub(crate) fn restrict(&self, allowed: &[Allow]) -> io::Result<()> {
        let mut restrictions: Vec<Restriction> = allowed
            .iter()
            .map(|a| match *a {
                Allow::SqeOp(op) => Restriction {
                    opcode: RESTRICTION_SQE_OP,
                    op,
                    ..Restriction::default()
                },
                Allow::Register(op) => Restriction {
                    opcode: RESTRICTION_REGISTER_OP,
                    op,
                    ..Restriction::default()
                },
            })
            .collect();
        self.register(
            REGISTER_RESTRICTIONS,
            restrictions.as_mut_ptr().cast(),
            restrictions.len() as u32,
        )
        .map(drop)
    }

    /// Enables a disabled ring: the calling thread becomes its only issuer.
    pub(crate) fn enable(&self) -> io::Result<()> {
        self.register(REGISTER_ENABLE_RINGS, ptr::null_mut(), 0)
            .map(drop)
    }

    /// `io_uring_register` on this ring.
    pub(crate) fn register(
        &self,
        opcode: libc::c_uint,
        arg: *mut libc::c_void,
        nr_args: libc::c_uint,
    ) -> io::Result<i64> {
        io_uring_register(self.fd.as_raw_fd(), opcode, arg, nr_args)
    }

    /// Queues `sqe` (submitted by the next [`Ring::enter`]); `false` when the submission ring is
    /// full.
    ///
    /// # Safety
    /// Whatever memory `sqe` points the kernel at must stay valid, as the opcode uses it, until its
    /// completions say the kernel is done with it.
    pub(crate) unsafe fn push(&mut self, sqe: &Sqe) -> bool {
        let entries = self.layout.sq_entries;
        // SAFETY: the head and tail lie inside the mapping (checked at set-up). Acquire on the
        // head: the kernel has read the entries before it. Only this ring writes the tail.
        let (head, tail) = unsafe {
            (
                self.sq_head.as_ref().load(Ordering::Acquire),
                self.sq_tail.as_ref().load(Ordering::Relaxed),
            )
        };
        if tail.wrapping_sub(head) >= entries {
            return false;
        }
        let index = tail & (entries - 1);
        // SAFETY: `index` < entries: the SQE and its array slot lie inside their mappings (checked
        // at set-up); the kernel reads neither until the tail covering them is published.
        unsafe {
            self.sqes
                .as_ptr()
                .cast::<Sqe>()
                .add(index as usize)
                .write(*sqe);
            (*self.sq_array.as_ptr().add(index as usize)).store(index, Ordering::Relaxed);
            // Release: the entry and its index are written before the kernel sees the tail.
            self.sq_tail
                .as_ref()
                .store(tail.wrapping_add(1), Ordering::Release);
        }
        true
    }

    /// `io_uring_enter`: submits up to `to_submit` queued entries and, with
    /// `IORING_ENTER_GETEVENTS` in `flags`, runs the ring's deferred work and waits for
    /// `min_complete` completions. Interrupted calls are retried.
    pub(crate) fn enter(
        &mut self,
        to_submit: u32,
        min_complete: u32,
        flags: u32,
    ) -> io::Result<u32> {
        super::retry_if_interrupted(|| {
            // SAFETY: no signal mask or argument is passed; the submitted entries are the caller's
            // (see `push`).
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    self.fd.as_raw_fd(),
                    to_submit,
                    min_complete,
                    flags,
                    ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if ret < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(ret as u32)
            }
        })
    }

    /// Whether a completion is posted.
    pub(crate) fn has_completion(&self) -> bool {
        // SAFETY: the head and tail lie inside the mapping (checked at set-up).
        let (head, tail) = unsafe {
            (
                self.cq_head.as_ref().load(Ordering::Relaxed),
                self.cq_tail.as_ref().load(Ordering::Acquire),
            )
        };
        head != tail
    }

    /// The next posted completion, taken off the ring.
    pub(crate) fn next_completion(&mut self) -> Option<Cqe32> {
        // SAFETY: the head and tail lie inside the mapping (checked at set-up). Acquire on the
        // tail: the CQEs before it are written. Only this ring writes the head.
        let (head, tail) = unsafe {
            (
                self.cq_head.as_ref().load(Ordering::Relaxed),
                self.cq_tail.as_ref().load(Ordering::Acquire),
            )
        };
        if head == tail {
            return None;
        }
        let index = head & (self.layout.cq_entries - 1);
        // SAFETY: `index` < entries: the CQE lies inside the mapping (checked at set-up), and the
        // kernel does not write it again until the head moves past it; any bit pattern is a CQE.
        let cqe = unsafe { self.cqes.as_ptr().add(index as usize).read_volatile() };
        // SAFETY: as above. Release: the CQE is read before the kernel may reuse its slot.
        unsafe { self.cq_head.as_ref() }.store(head.wrapping_add(1), Ordering::Release);
        Some(cqe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn layouts_match_the_uapi_headers() {
        assert_eq!(offset_of!(Params, sq_off), 40);
        assert_eq!(offset_of!(Params, cq_off), 80);
        assert_eq!(size_of::<SqOffsets>(), 40);
        assert_eq!(offset_of!(SqOffsets, user_addr), 32);
        assert_eq!(offset_of!(CqOffsets, cqes), 20);
        assert_eq!(offset_of!(Sqe, user_data), 32);
        assert_eq!(offset_of!(Sqe, index), 44);
        assert_eq!(offset_of!(Sqe, addr3), 48);
        assert_eq!(offset_of!(Cqe32, big), 16);
    }

    /// A ring whose layout puts a word outside its mappings, or has sizes the kernel never gives,
    /// is refused before anything is read through it.
    #[test]
    fn a_layout_pointing_outside_the_ring_is_refused() {
        let Ok(ring) = Ring::new_disabled(4, 32) else {
            testnet::skip(
                "a_layout_pointing_outside_the_ring_is_refused",
                "no io_uring ring with SINGLE_ISSUER, DEFER_TASKRUN and CQE32 here",
            );
            return;
        };
        assert!(is_ring(ring.fd()));
        let good = ring.layout;
        let mut far = good;
        far.cq_off.head = 1 << 20;
        let mut odd = good;
        odd.cq_entries = 48;
        let mut small_cqe = good;
        small_cqe.flags &= !SETUP_CQE32;
        let mut masks = good;
        masks.sq_entries = 2;
        for bad in [far, odd, small_cqe, masks] {
            let copy = ring.fd().try_clone_to_owned().unwrap();
            assert!(Ring::map(copy, bad).is_err(), "{bad:?}");
        }
        let copy = ring.fd().try_clone_to_owned().unwrap();
        assert!(Ring::map(copy, good).is_ok());
        let file = std::fs::File::open("/proc/self/status").unwrap();
        assert!(!is_ring(file.as_fd()));
    }
}
