//! AF_XDP kernel interface (`include/uapi/linux/if_xdp.h`) and the interface-name lookups the XDP code
//! needs.

use std::ffi::{CStr, CString};
use std::io;
use std::marker::PhantomData;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The index of the network interface `name` in the calling thread's network namespace
/// (`if_nametoindex(3)`); `ENODEV` when there is no such interface.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(index)
}

/// The name of interface `index` in the calling thread's network namespace (`if_indextoname(3)`).
pub fn interface_name(index: u32) -> io::Result<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` holds IF_NAMESIZE bytes, the most the call writes.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success `buf` holds a NUL-terminated name.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// The primary IPv4 address of interface `name` (`ioctl(SIOCGIFADDR)` on an `AF_INET` datagram socket),
/// `None` when it has none (`EADDRNOTAVAIL`).
#[cfg(feature = "bench-internals")]
pub fn interface_ipv4(name: &str) -> io::Result<Option<std::net::Ipv4Addr>> {
    let sock = crate::sys::socket::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    // SAFETY: `ifreq` is plain old data (a name and a union of plain structs); all zeros is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= libc::IF_NAMESIZE || name.as_bytes().contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    for (d, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = b as libc::c_char;
    }
    // SAFETY: SIOCGIFADDR reads the NUL-terminated name in `req` (zero-padded above) and writes a
    // `sockaddr` into its union; `req` is a valid, writable `ifreq` for the whole call.
    match syscall!(ioctl(sock.as_raw_fd(), libc::SIOCGIFADDR as _, &mut req)) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => return Ok(None),
        Err(e) => return Err(e),
    }
    // SAFETY: after a successful SIOCGIFADDR the union holds the address as a `sockaddr` (every
    // variant is plain bytes, so reading this one is defined in any case).
    let sa = unsafe { req.ifr_ifru.ifru_addr };
    // AF_INET: sa_data holds the port (2 bytes) then the address (4 bytes), network order.
    let [a, b, c, d] = [2, 3, 4, 5].map(|i| sa.sa_data[i] as u8);
    Ok(Some(std::net::Ipv4Addr::new(a, b, c, d)))
}

/// `xdp_desc.options` bit (`if_xdp.h`): the packet continues in the next descriptor (multi-buffer).
pub use libc::XDP_PKT_CONTD;
/// `struct sockaddr_xdp` (`if_xdp.h`).
pub use libc::sockaddr_xdp;
/// `struct xdp_desc` (`if_xdp.h`): a frame address in the UMEM, its length and options.
pub use libc::xdp_desc;
/// `struct xdp_mmap_offsets` (`if_xdp.h`): where producer, consumer, flags and descriptors lie in each
/// ring's mapping.
pub use libc::xdp_mmap_offsets;
/// `struct xdp_ring_offset` (`if_xdp.h`).
pub use libc::xdp_ring_offset;
/// `struct xdp_statistics` (`if_xdp.h`), as `getsockopt(XDP_STATISTICS)` fills it.
pub use libc::xdp_statistics;
/// `struct xdp_umem_reg` (`if_xdp.h`).
pub use libc::xdp_umem_reg;
/// `sockaddr_xdp.sxdp_flags` bits and ring flags (`if_xdp.h`).
pub use libc::{
    XDP_COPY, XDP_RING_NEED_WAKEUP, XDP_SHARED_UMEM, XDP_USE_NEED_WAKEUP, XDP_USE_SG, XDP_ZEROCOPY,
};

/// `XDP_UMEM_TX_METADATA_LEN` (`xdp_umem_reg.flags`, `if_xdp.h`): the kernel reserves
/// `tx_metadata_len` bytes before each transmitted packet for a `struct xsk_tx_metadata`. A kernel
/// without AF_XDP TX metadata refuses the unknown flag (`EINVAL`, `xdp_umem_reg` checks
/// `XDP_UMEM_FLAGS_VALID`).
pub const XDP_UMEM_TX_METADATA_LEN: u32 = 1 << 2;
/// `XDP_TX_METADATA` (`xdp_desc.options`): the packet's metadata lies `tx_metadata_len` bytes before
/// its address.
pub const XDP_TX_METADATA: u32 = 1 << 1;
/// `XDP_TXMD_FLAGS_CHECKSUM` (`xsk_tx_metadata.flags`): checksum the bytes from `csum_start` to the
/// packet's end and store it at `csum_start + csum_offset`.
const XDP_TXMD_FLAGS_CHECKSUM: u64 = 1 << 1;
/// `sizeof(struct xsk_tx_metadata)`: `u64 flags`, then a union of `{u16 csum_start; u16
/// csum_offset}` (request) and `{u64 tx_timestamp}` (completion).
pub const TX_METADATA_LEN: u32 = 16;

/// Writes a `struct xsk_tx_metadata` requesting a transmit checksum into `meta` (its first
/// [`TX_METADATA_LEN`] bytes): `csum_start` and `csum_offset` count from the packet's first byte.
pub fn write_checksum_request(meta: &mut [u8], csum_start: u16, csum_offset: u16) {
    let meta = &mut meta[..TX_METADATA_LEN as usize];
    meta[0..8].copy_from_slice(&XDP_TXMD_FLAGS_CHECKSUM.to_ne_bytes());
    meta[8..10].copy_from_slice(&csum_start.to_ne_bytes());
    meta[10..12].copy_from_slice(&csum_offset.to_ne_bytes());
    meta[12..16].fill(0);
}

const _: () = assert!(mem::size_of::<sockaddr_xdp>() == 16);
const _: () = assert!(mem::size_of::<xdp_desc>() == 16);
const _: () = assert!(mem::size_of::<xdp_ring_offset>() == 32);
const _: () = assert!(mem::size_of::<xdp_mmap_offsets>() == 128);
const _: () = assert!(mem::size_of::<xdp_statistics>() == 48);
const _: () = assert!(mem::size_of::<xdp_umem_reg>() == 32);

/// Which of the four rings (`XDP_PGOFF_*` mmap offsets and `XDP_*_RING` socket options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    /// Frames user space gives the kernel to receive into (`XDP_UMEM_FILL_RING`).
    Fill,
    /// Frames the kernel has finished sending (`XDP_UMEM_COMPLETION_RING`).
    Completion,
    /// Received frames (`XDP_RX_RING`).
    Rx,
    /// Frames to send (`XDP_TX_RING`).
    Tx,
}

impl RingKind {
    fn option(self) -> libc::c_int {
        match self {
            RingKind::Fill => libc::XDP_UMEM_FILL_RING,
            RingKind::Completion => libc::XDP_UMEM_COMPLETION_RING,
            RingKind::Rx => libc::XDP_RX_RING,
            RingKind::Tx => libc::XDP_TX_RING,
        }
    }

    fn page_offset(self) -> libc::off_t {
        match self {
            RingKind::Fill => libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
            RingKind::Completion => libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
            RingKind::Rx => libc::XDP_PGOFF_RX_RING,
            RingKind::Tx => libc::XDP_PGOFF_TX_RING,
        }
    }

    fn offsets(self, all: &xdp_mmap_offsets) -> &xdp_ring_offset {
        match self {
            RingKind::Fill => &all.fr,
            RingKind::Completion => &all.cr,
            RingKind::Rx => &all.rx,
            RingKind::Tx => &all.tx,
        }
    }
}

/// A memory mapping owned by zcnet, unmapped on drop.
#[derive(Debug)]
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; sharing its address between threads is sound, and every access
// zcnet makes through it goes through atomics or through borrows of `&self`/`&mut self`.
unsafe impl Send for Mmap {}
// SAFETY: see `Send`; `&Mmap` only gives out shared views.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of `fd` at byte offset `offset`, shared and readable/writable (how the kernel
    /// exports AF_XDP and packet rings), pre-faulted.
    pub fn shared(fd: BorrowedFd<'_>, len: usize, offset: libc::off_t) -> io::Result<Mmap> {
        Mmap::new(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset,
        )
    }

    /// Maps `len` bytes of zeroed anonymous private memory, pre-faulted. With `huge_pages`, asks for
    /// reserved huge pages (`MAP_HUGETLB`) first and, when none are reserved, for transparent huge pages
    /// (`MADV_HUGEPAGE` before the first touch, then `MADV_POPULATE_WRITE`, 5.14); the returned flag
    /// says whether `MAP_HUGETLB` worked.
    pub fn anonymous(len: usize, huge_pages: bool) -> io::Result<(Mmap, bool)> {
        let map = |extra: libc::c_int| {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra;
            Mmap::new(len, flags, -1, 0)
        };
        if huge_pages && let Ok(m) = map(libc::MAP_HUGETLB | libc::MAP_POPULATE) {
            return Ok((m, true));
        }
        if !huge_pages {
            return Ok((map(libc::MAP_POPULATE)?, false));
        }
        // Advised before the first touch: pages faulted in first stay small until khugepaged
        // collapses them, long after the UMEM is registered and its pages pinned.
        let m = map(0)?;
        // SAFETY: advice on a mapping this function owns; neither changes its contents (the second
        // faults in zeroed pages, as MAP_POPULATE would have).
        syscall!(madvise(m.ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE))?;
        // Before 5.14 (EINVAL) the pages are faulted in when the UMEM is registered and pinned.
        let _ = syscall!(madvise(
            m.ptr.as_ptr().cast(),
            len,
            libc::MADV_POPULATE_WRITE
        ));
        Ok((m, false))
    }

    /// `mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, offset)`.
    fn new(
        len: usize,
        flags: libc::c_int,
        fd: libc::c_int,
        offset: libc::off_t,
    ) -> io::Result<Mmap> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh mapping at an address the kernel chooses; it aliases nothing in this process.
        let ptr = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, fd, offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes `offset..offset + len`, or `None` when the range is not inside the mapping.
    ///
    /// # Safety
    /// The mapping may be shared with the kernel (a UMEM or packet ring): the range must be one the
    /// kernel has handed to user space and will not write while the slice lives.
    pub unsafe fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `offset..end` lies inside the live mapping; the caller guarantees the kernel does
        // not write it while the slice lives.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }

    /// The bytes `offset..offset + len` for writing, or `None` when the range is not inside the mapping.
    ///
    /// # Safety
    /// As for [`Mmap::bytes`]: the kernel neither reads nor writes the range while the slice lives.
    pub unsafe fn bytes_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `offset..end` lies inside the live mapping, `&mut self` excludes other borrows, and
        // the caller guarantees the kernel does not touch the range while the slice lives.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) })
    }

    /// A `T` at byte `offset`, or `None` when it does not fit or is misaligned. For the kernel-shared
    /// control words of rings (`T` an atomic integer).
    pub fn atomic_at<T: RingWord>(&self, offset: usize) -> Option<&T> {
        self.atomics_at(offset, 1).map(|one| &one[0])
    }

    /// `count` consecutive `T`s from byte `offset`, or `None` when they do not fit or are misaligned.
    /// The offset may come from the kernel (`XDP_MMAP_OFFSETS`) or from a packet ring's headers: it is
    /// checked against the mapping before any address is computed from it.
    pub fn atomics_at<T: RingWord>(&self, offset: usize, count: usize) -> Option<&[T]> {
        let end = offset.checked_add(mem::size_of::<T>().checked_mul(count)?)?;
        if end > self.len {
            return None;
        }
        // `offset <= len`: the address lies inside (or just past) the mapping, so it does not wrap.
        let addr = self.ptr.as_ptr() as usize + offset;
        if !addr.is_multiple_of(mem::align_of::<T>()) {
            return None;
        }
        // SAFETY: in bounds and aligned (checked); `T` is valid for any bit pattern and made of atomics.
        Some(unsafe { std::slice::from_raw_parts(addr as *const T, count) })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value owns and nobody borrows any more.
        let _ = syscall!(munmap(self.ptr.as_ptr().cast(), self.len));
    }
}

/// Types made only of atomics, valid for every bit pattern, that may overlay kernel-shared ring memory.
/// Sealed: implemented for `AtomicU32`, `AtomicU64` and [`DescSlot`].
pub trait RingWord: sealed::Sealed + Sync + std::fmt::Debug {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::sync::atomic::AtomicU32 {}
    impl Sealed for std::sync::atomic::AtomicU64 {}
    impl Sealed for super::DescSlot {}
}
impl RingWord for AtomicU32 {}
impl RingWord for AtomicU64 {}
impl RingWord for DescSlot {}

/// One rx/tx ring entry, laid out exactly as `struct xdp_desc` (`if_xdp.h`) but made of atomics, so
/// user space can read and write entries the kernel may touch at the same time without a data race.
#[derive(Debug)]
#[repr(C)]
pub struct DescSlot {
    addr: AtomicU64,
    len: AtomicU32,
    options: AtomicU32,
}

const _: () = assert!(mem::size_of::<DescSlot>() == mem::size_of::<xdp_desc>());

impl DescSlot {
    /// Reads the entry (relaxed; ordering comes from the ring's producer/consumer indices).
    pub fn load(&self) -> xdp_desc {
        xdp_desc {
            addr: self.addr.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
            options: self.options.load(Ordering::Relaxed),
        }
    }

    /// Writes the entry (relaxed; published by the producer index store).
    pub fn store(&self, desc: xdp_desc) {
        self.addr.store(desc.addr, Ordering::Relaxed);
        self.len.store(desc.len, Ordering::Relaxed);
        self.options.store(desc.options, Ordering::Relaxed);
    }
}

/// Creates an AF_XDP socket (`socket(AF_XDP, SOCK_RAW)`); needs CAP_NET_RAW.
pub fn socket() -> io::Result<OwnedFd> {
    super::socket::socket(libc::AF_XDP, libc::SOCK_RAW, 0)
}

fn set_option<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live `T` and the length passed is its size.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        libc::SOL_XDP,
        name,
        (value as *const T).cast(),
        mem::size_of::<T>() as libc::socklen_t,
    ))
    .map(drop)
}

fn get_option<T: Copy>(fd: BorrowedFd<'_>, name: libc::c_int, mut value: T) -> io::Result<T> {
    let mut len = mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live, writable `T` of `len` bytes.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_XDP,
        name,
        (&mut value as *mut T).cast(),
        &mut len,
    ))?;
    Ok(value)
}

/// Registers `area` as the UMEM of socket `fd` (`XDP_UMEM_REG`), cut into chunks of `frame_size`
/// bytes with `headroom` bytes reserved before each received packet, and, when `tx_metadata_len` is
/// not 0, that many bytes of TX metadata before each transmitted one (`XDP_UMEM_TX_METADATA_LEN`;
/// the kernel then refuses any tx descriptor less than `tx_metadata_len` bytes into its chunk).
/// The kernel pins the pages, so they stay valid for the kernel even if `area` is unmapped first.
pub fn register_umem(
    fd: BorrowedFd<'_>,
    area: &Mmap,
    frame_size: u32,
    (headroom, tx_metadata_len): (u32, u32),
) -> io::Result<()> {
    let reg = xdp_umem_reg {
        addr: area.as_ptr() as u64,
        len: area.len() as u64,
        chunk_size: frame_size,
        headroom,
        flags: if tx_metadata_len > 0 {
            XDP_UMEM_TX_METADATA_LEN
        } else {
            0
        },
        tx_metadata_len,
    };
    set_option(fd, libc::XDP_UMEM_REG, &reg)
}

/// Sets the number of entries of one ring (a power of two) with its `XDP_*_RING` option.
pub fn set_ring_size(fd: BorrowedFd<'_>, ring: RingKind, entries: u32) -> io::Result<()> {
    set_option(fd, ring.option(), &entries)
}

/// The ring layout (`XDP_MMAP_OFFSETS`).
pub fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<xdp_mmap_offsets> {
    let zero = xdp_ring_offset {
        producer: 0,
        consumer: 0,
        desc: 0,
        flags: 0,
    };
    get_option(
        fd,
        libc::XDP_MMAP_OFFSETS,
        xdp_mmap_offsets {
            rx: zero,
            tx: zero,
            fr: zero,
            cr: zero,
        },
    )
}

/// The mapping of one ring: producer, consumer and flags words and `entries` slots of `S` (`AtomicU64`
/// addresses for fill/completion, [`DescSlot`] for rx/tx).
#[derive(Debug)]
pub struct RingMmap<S> {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    entries: u32,
    _slot: PhantomData<S>,
}

impl<S: RingWord> RingMmap<S> {
    /// Maps ring `kind` of socket `fd` with `entries` slots, at the offsets the kernel reported.
    pub fn map(
        fd: BorrowedFd<'_>,
        kind: RingKind,
        offsets: &xdp_mmap_offsets,
        entries: u32,
    ) -> io::Result<RingMmap<S>> {
        let off = kind.offsets(offsets);
        // Checked: the offsets come from the kernel, `entries` from the caller.
        let len = usize::try_from(off.desc)
            .ok()
            .and_then(|desc| desc.checked_add((entries as usize).checked_mul(mem::size_of::<S>())?))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let map = Mmap::shared(fd, len, kind.page_offset())?;
        RingMmap::over(map, off, entries)
    }

    /// A ring over private anonymous memory, with the kernel's layout (indices on separate cache lines):
    /// both halves of a ring in one process, for testing ring logic without a kernel.
    #[cfg(test)]
    pub fn anonymous(entries: u32) -> io::Result<RingMmap<S>> {
        let off = xdp_ring_offset {
            producer: 0,
            consumer: 64,
            flags: 128,
            desc: 192,
        };
        let len = 192 + entries as usize * mem::size_of::<S>();
        let (map, _) = Mmap::anonymous(len, false)?;
        RingMmap::over(map, &off, entries)
    }

    fn over(map: Mmap, off: &xdp_ring_offset, entries: u32) -> io::Result<RingMmap<S>> {
        if !entries.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let ring = RingMmap {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            entries,
            _slot: PhantomData,
        };
        // Check once that every view is inside the mapping, so the accessors below cannot fail.
        let fits = ring.map.atomic_at::<AtomicU32>(ring.producer).is_some()
            && ring.map.atomic_at::<AtomicU32>(ring.consumer).is_some()
            && ring.map.atomic_at::<AtomicU32>(ring.flags).is_some()
            && ring
                .map
                .atomics_at::<S>(ring.desc, entries as usize)
                .is_some();
        if !fits {
            return Err(io::Error::other("ring offsets outside the ring mapping"));
        }
        Ok(ring)
    }

    /// Number of slots (a power of two).
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The producer index word.
    pub fn producer(&self) -> &AtomicU32 {
        self.word(self.producer)
    }

    /// The consumer index word.
    pub fn consumer(&self) -> &AtomicU32 {
        self.word(self.consumer)
    }

    /// The flags word (`XDP_RING_NEED_WAKEUP`).
    pub fn flags(&self) -> &AtomicU32 {
        self.word(self.flags)
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        self.map
            .atomic_at(offset)
            .expect("ring word bounds checked in RingMmap::over")
    }

    /// All slots.
    pub fn slots(&self) -> &[S] {
        self.map
            .atomics_at(self.desc, self.entries as usize)
            .expect("ring slots bounds checked in RingMmap::over")
    }
}

/// Binds `fd` to queue `queue` of interface `ifindex` with `flags` (`XDP_COPY`, `XDP_ZEROCOPY`,
/// `XDP_USE_NEED_WAKEUP`, or `XDP_SHARED_UMEM` together with `shared_umem`, the socket that owns the
/// UMEM).
pub fn bind(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared_umem: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let addr = sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared_umem.map_or(0, |f| f.as_raw_fd() as u32),
    };
    // SAFETY: `addr` is a live `sockaddr_xdp` and its exact size is passed.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const sockaddr_xdp).cast(),
        mem::size_of::<sockaddr_xdp>() as libc::socklen_t,
    ))
    .map(drop)
}

/// The socket's counters (`XDP_STATISTICS`).
pub fn statistics(fd: BorrowedFd<'_>) -> io::Result<xdp_statistics> {
    get_option(
        fd,
        libc::XDP_STATISTICS,
        xdp_statistics {
            rx_dropped: 0,
            rx_invalid_descs: 0,
            tx_invalid_descs: 0,
            rx_ring_full: 0,
            rx_fill_ring_empty_descs: 0,
            tx_ring_empty_descs: 0,
        },
    )
}

/// Asks the kernel to process the tx ring (`sendto(fd, NULL, 0, MSG_DONTWAIT)`); in copy mode this call
/// is what transmits the frames.
pub fn kick_tx(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a zero-length send with no buffer and no address.
    syscall!(sendto(
        fd.as_raw_fd(),
        ptr::null(),
        0,
        libc::MSG_DONTWAIT,
        ptr::null(),
        0,
    ))
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn layouts_match_linux_if_xdp_h() {
        assert_eq!(offset_of!(sockaddr_xdp, sxdp_flags), 2);
        assert_eq!(offset_of!(sockaddr_xdp, sxdp_ifindex), 4);
        assert_eq!(offset_of!(sockaddr_xdp, sxdp_queue_id), 8);
        assert_eq!(offset_of!(sockaddr_xdp, sxdp_shared_umem_fd), 12);
        assert_eq!(offset_of!(xdp_desc, len), 8);
        assert_eq!(offset_of!(xdp_desc, options), 12);
        assert_eq!(offset_of!(DescSlot, len), 8);
        assert_eq!(offset_of!(DescSlot, options), 12);
        assert_eq!(offset_of!(xdp_ring_offset, desc), 16);
        assert_eq!(offset_of!(xdp_ring_offset, flags), 24);
        assert_eq!(offset_of!(xdp_mmap_offsets, tx), 32);
        assert_eq!(offset_of!(xdp_mmap_offsets, fr), 64);
        assert_eq!(offset_of!(xdp_mmap_offsets, cr), 96);
        assert_eq!(offset_of!(xdp_umem_reg, chunk_size), 16);
        assert_eq!(offset_of!(xdp_umem_reg, headroom), 20);
        assert_eq!(offset_of!(xdp_umem_reg, flags), 24);
        assert_eq!(offset_of!(xdp_statistics, rx_ring_full), 24);
        assert_eq!(offset_of!(xdp_statistics, tx_ring_empty_descs), 40);
    }

    #[test]
    fn mmap_views_are_bounds_checked() {
        let (mut m, _) = Mmap::anonymous(4096, false).expect("mmap");
        // A private anonymous mapping: the kernel never touches it, so every range is ours.
        let read = |m: &Mmap, offset, len| {
            // SAFETY: see above.
            unsafe { m.bytes(offset, len) }.map(<[u8]>::to_vec)
        };
        assert!(read(&m, 4000, 96).is_some());
        assert!(read(&m, 4000, 97).is_none());
        assert!(read(&m, usize::MAX, 2).is_none());
        // SAFETY: see above.
        unsafe { m.bytes_mut(10, 2) }
            .expect("in range")
            .copy_from_slice(&[1, 2]);
        assert_eq!(read(&m, 10, 2), Some(vec![1u8, 2]));
        assert!(m.atomic_at::<AtomicU64>(4088).is_some());
        assert!(m.atomic_at::<AtomicU64>(4089).is_none());
        assert!(m.atomic_at::<AtomicU64>(4).is_none(), "misaligned");
        assert!(m.atomics_at::<DescSlot>(4096 - 32, 2).is_some());
        assert!(m.atomics_at::<DescSlot>(4096 - 32, 3).is_none());
    }

    /// Offsets and lengths around the end of a 4096-byte mapping and far beyond it: those a kernel
    /// or a caller could hand over, hostile ones included.
    fn hostile_offset() -> impl proptest::strategy::Strategy<Value = usize> {
        use proptest::prelude::*;
        prop_oneof![
            0usize..4200,
            Just(usize::MAX),
            Just(usize::MAX - 7),
            Just(usize::MAX - 15),
            Just(usize::MAX - 4095),
            Just(1usize << 62),
            Just(isize::MAX as usize),
            any::<usize>(),
        ]
    }

    proptest::proptest! {
        /// Whatever offset and length are asked for, a view of a mapping is inside it or refused:
        /// never a wrapped address, an overflow panic or a slice past its end.
        #[test]
        fn mmap_views_are_inside_the_mapping_or_refused(
            offset in hostile_offset(),
            len in hostile_offset(),
        ) {
            let (mut m, _) = Mmap::anonymous(4096, false).expect("mmap");
            let base = m.as_ptr() as usize;
            let fits = |size: usize| offset.checked_add(size).is_some_and(|end| end <= 4096);
            // SAFETY: a private anonymous mapping: the kernel never touches it.
            let read = unsafe { m.bytes(offset, len) }.map(|b| (b.as_ptr() as usize, b.len()));
            proptest::prop_assert_eq!(read, fits(len).then(|| (base + offset, len)));
            // SAFETY: as above.
            let write = unsafe { m.bytes_mut(offset, len) }.map(|b| (b.as_ptr() as usize, b.len()));
            proptest::prop_assert_eq!(write, fits(len).then(|| (base + offset, len)));
            let words = m
                .atomics_at::<AtomicU64>(offset, len)
                .map(|w| (w.as_ptr() as usize, w.len()));
            let word_bytes = len.checked_mul(8);
            let expected = word_bytes
                .filter(|&b| fits(b) && offset.is_multiple_of(8))
                .map(|_| (base + offset, len));
            proptest::prop_assert_eq!(words, expected);
            let slots = m.atomics_at::<DescSlot>(offset, 1).map(|s| s.as_ptr() as usize);
            proptest::prop_assert_eq!(slots, (fits(16) && offset.is_multiple_of(8)).then(|| base + offset));
        }

        /// Ring offsets a hostile kernel reports (`XDP_MMAP_OFFSETS`) and any slot count: the ring
        /// is refused, or every view of it lies inside its mapping.
        #[test]
        fn hostile_ring_offsets_are_refused_or_inside(
            producer in hostile_offset(),
            consumer in hostile_offset(),
            flags in hostile_offset(),
            desc in hostile_offset(),
            entries in proptest::prop_oneof![
                proptest::prelude::Just(1u32),
                proptest::prelude::Just(8u32),
                proptest::prelude::Just(256u32),
                proptest::prelude::Just(1u32 << 31),
                proptest::prelude::any::<u32>(),
            ],
        ) {
            let (map, _) = Mmap::anonymous(4096, false).expect("mmap");
            let (base, len) = (map.as_ptr() as usize, map.len());
            let off = xdp_ring_offset {
                producer: producer as u64,
                consumer: consumer as u64,
                flags: flags as u64,
                desc: desc as u64,
            };
            if let Ok(ring) = RingMmap::<DescSlot>::over(map, &off, entries) {
                for word in [ring.producer(), ring.consumer(), ring.flags()] {
                    let at = word.as_ptr() as usize;
                    proptest::prop_assert!(at >= base && at + 4 <= base + len);
                }
                let slots = ring.slots();
                let at = slots.as_ptr() as usize;
                proptest::prop_assert_eq!(slots.len(), entries as usize);
                proptest::prop_assert!(at >= base && at + 16 * slots.len() <= base + len);
            }
        }
    }

    #[test]
    fn an_area_asked_for_huge_pages_gets_transparent_ones() {
        if let Err(why) = crate::sys::pages::thp_advice_takes_effect() {
            eprintln!("skipped: {why}");
            return;
        }
        let (m, reserved) = Mmap::anonymous(8 << 20, true).expect("mmap");
        if reserved {
            eprintln!("skipped: the area got reserved huge pages (MAP_HUGETLB)");
            return;
        }
        // Advised after being faulted in, the area would stay on 4 KiB pages (0 kB here).
        assert!(testnet::anon_huge_kib(m.as_ptr() as usize) >= 2048);
        // SAFETY: a private anonymous mapping no kernel object shares.
        let area = unsafe { m.bytes(0, m.len()) }.expect("the whole area");
        assert!(area.iter().all(|&b| b == 0));
    }

    #[test]
    fn rings_need_power_of_two_sizes() {
        assert!(RingMmap::<AtomicU64>::anonymous(6).is_err());
        let ring = RingMmap::<DescSlot>::anonymous(8).expect("ring");
        assert_eq!(ring.slots().len(), 8);
    }
}
