//! TCP zero-copy receive: a read-only mapping of a TCP socket and the `TCP_ZEROCOPY_RECEIVE`
//! getsockopt that fills it with received pages, plus the plain socket calls the receiver falls back to
//! (`recv`, `poll`) and the sender-side options that make a stream mappable (`TCP_MAXSEG`, `MSG_EOR`).
//!
//! Kernel behaviour relied on (net/ipv4/tcp.c, `tcp_mmap` and `tcp_zerocopy_receive`):
//! - `mmap` of a TCP socket accepts only `PROT_READ` mappings at offset 0 and maps nothing by itself; the
//!   mapping keeps the socket's file alive until it is unmapped.
//! - `getsockopt(TCP_ZEROCOPY_RECEIVE)` never blocks. It maps whole, page-aligned received pages into the
//!   window, consumes them as if read, and reports in `recv_skip_hint` how many bytes must be read another
//!   way before the next mappable page; with `copybuf_address` set it copies up to `copybuf_len` of those
//!   bytes itself (and everything when the whole queue fits the copy buffer).
//! - Pages already present in the window are zapped before new ones are inserted, unless the
//!   `TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT` flag says the caller already did (then the kernel zaps
//!   only on a conflict). Touching a window page that holds no mapped page raises SIGBUS.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// `TCP_ZEROCOPY_RECEIVE` (linux/tcp.h): the getsockopt that maps received pages.
pub const TCP_ZEROCOPY_RECEIVE: i32 = 35;

/// `TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT` (linux/tcp.h): the window holds no mapped pages, so the
/// kernel need not zap it first.
pub const TCP_RECEIVE_ZEROCOPY_FLAG_TLB_CLEAN_HINT: u32 = 0x1;

/// `struct tcp_zerocopy_receive` from linux/tcp.h (64 bytes since Linux 5.11; libc lacks it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpZerocopyReceive {
    /// In: page-aligned start of the window inside a mapping of this socket.
    pub address: u64,
    /// In: bytes of the window to fill; out: bytes mapped.
    pub length: u32,
    /// Out: bytes to read another way (copybuf or recv) before the next mappable page.
    pub recv_skip_hint: u32,
    /// Out: bytes left in the receive queue.
    pub inq: u32,
    /// Out: pending socket error as a negative errno (`sock_error()`), which the call clears.
    pub err: i32,
    /// In: address of a buffer the kernel copies unmappable bytes into (0 = none).
    pub copybuf_address: u64,
    /// In: size of that buffer; out: bytes copied into it, or a negative errno.
    pub copybuf_len: i32,
    /// In: `TCP_RECEIVE_ZEROCOPY_FLAG_*`.
    pub flags: u32,
    /// In: buffer for receive timestamps as control messages (unused by zcnet: 0).
    pub msg_control: u64,
    /// In/out: length of `msg_control`.
    pub msg_controllen: u64,
    /// Out: `MSG_*` flags of the control data.
    pub msg_flags: u32,
    /// Must be 0.
    pub reserved: u32,
}

const _: () = assert!(mem::size_of::<TcpZerocopyReceive>() == 64);

/// What one `TCP_ZEROCOPY_RECEIVE` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZerocopyOutcome {
    /// Bytes mapped at the start of the window (a multiple of the page size).
    pub mapped: usize,
    /// Bytes the kernel copied into the copy buffer; they follow the mapped bytes in the stream.
    pub copied: usize,
    /// The errno of a failed copy into the copy buffer (0 if none); the mapped bytes are still valid.
    pub copybuf_error: i32,
    /// Bytes after those that must be read with `recv` before the next mappable page.
    pub skip_hint: usize,
    /// Bytes still queued on the socket after the call.
    pub inq: usize,
    /// A pending socket error (positive errno) the kernel reported, 0 if none.
    pub socket_error: i32,
}

/// The size of a page (`sysconf(_SC_PAGESIZE)`): the unit `TCP_ZEROCOPY_RECEIVE` maps, mappings
/// are made of, and the kernel charges locked memory in.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// A `PROT_READ`, `MAP_SHARED` mapping of a TCP socket: the window `TCP_ZEROCOPY_RECEIVE` maps
/// received pages into. Unmapped on drop (which also drops the mapping's reference to the socket).
#[derive(Debug)]
pub struct SocketMapping {
    /// Start and length of the whole mapping (what `munmap` takes).
    base: NonNull<u8>,
    reserved: usize,
    /// The window: `len` bytes from `addr`, inside the mapping, starting on a page-table boundary.
    addr: NonNull<u8>,
    len: usize,
    /// Bytes at the start of the window holding pages from the last receive (0 after a release).
    mapped: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing in it is tied to a thread.
unsafe impl Send for SocketMapping {}
// SAFETY: shared access only reads it; replacing or zapping its pages takes `&mut self`.
unsafe impl Sync for SocketMapping {}

impl SocketMapping {
    /// Maps `len` bytes (a multiple of the page size) of TCP socket `fd` read-only. ENODEV means the
    /// socket (or kernel) has no `tcp_mmap`.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<SocketMapping> {
        if len == 0 || !len.is_multiple_of(page_size()) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // The window starts on a boundary of what one page-table page maps (2 MiB with 4 KiB pages), as
        // tcp_mmap's does: a window of up to that size then lies under a single page table, which the
        // kernel walks once per receive to insert pages and once per release to zap them.
        let align = page_size() / mem::size_of::<u64>() * page_size();
        let reserved = len
            .checked_add(align)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) overlaps no Rust memory; `fd` is open.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        let skip = base.as_ptr().align_offset(align);
        // SAFETY: `skip < align`, so `base + skip .. + len` lies inside the `len + align` bytes mapped.
        let addr = unsafe { base.add(skip) };
        Ok(SocketMapping {
            base,
            reserved,
            addr,
            len,
            mapped: 0,
        })
    }

    /// Length of the window in bytes.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The pages the last [`zerocopy_receive`] mapped at the start of the window (empty after
    /// [`SocketMapping::release`]). Both of those take `&mut self`, so the pages cannot be replaced while
    /// this slice is borrowed.
    pub fn mapped(&self) -> &[u8] {
        // SAFETY: `mapped` bytes from `addr` hold pages the kernel inserted in the last successful
        // receive, and nothing replaced or zapped them since (that needs `&mut self`). The mapping is
        // PROT_READ, which is all a shared slice needs.
        unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.mapped) }
    }

    /// Releases the mapped pages (`madvise(MADV_DONTNEED)`), giving their memory back to the socket
    /// layer at once instead of at the next receive. Afterwards the window holds no page.
    pub fn release(&mut self) -> io::Result<()> {
        if self.mapped == 0 {
            return Ok(());
        }
        let len = mem::replace(&mut self.mapped, 0);
        // SAFETY: the range lies inside this mapping; `&mut self` means no slice of it is borrowed.
        syscall!(madvise(self.addr.as_ptr().cast(), len, libc::MADV_DONTNEED)).map(drop)
    }
}

impl Drop for SocketMapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`reserved` are exactly the mapping created in `new`; no borrow of it outlives
        // `self`.
        let _ = syscall!(munmap(self.base.as_ptr().cast(), self.reserved));
    }
}

/// One `getsockopt(fd, IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE)` filling `window` (which must map `fd`),
/// with `copybuf` as the kernel's copy buffer for unmappable bytes when given. `&mut window` ensures
/// no slice of earlier pages is alive, since the kernel replaces them. Returns the kernel's errno
/// unchanged: ENOPROTOOPT (no zero-copy receive), EINVAL (window not a mapping of `fd`, or copybuf
/// fields unknown to this kernel), EIO (the peer closed and nothing is left), ENOTCONN.
pub fn zerocopy_receive(
    fd: BorrowedFd<'_>,
    window: &mut SocketMapping,
    copybuf: Option<&mut [u8]>,
    flags: u32,
) -> io::Result<ZerocopyOutcome> {
    let (copybuf_address, copybuf_len) = match copybuf {
        Some(buf) => (
            buf.as_mut_ptr() as u64,
            i32::try_from(buf.len()).unwrap_or(i32::MAX),
        ),
        None => (0, 0),
    };
    let mut zc = TcpZerocopyReceive {
        address: window.addr.as_ptr() as u64,
        length: u32::try_from(window.len).unwrap_or(u32::MAX),
        copybuf_address,
        copybuf_len,
        flags,
        ..TcpZerocopyReceive::default()
    };
    let mut len = mem::size_of::<TcpZerocopyReceive>() as libc::socklen_t;
    // The kernel may zap or replace the window's pages from here on.
    window.mapped = 0;
    // SAFETY: `zc` and `len` are live locals of the sizes passed; the window is a live mapping of this
    // process and `copybuf` (when given) is exclusively borrowed for this call, so the kernel may write
    // up to `copybuf_len` bytes into it.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::IPPROTO_TCP,
        TCP_ZEROCOPY_RECEIVE,
        (&mut zc as *mut TcpZerocopyReceive).cast(),
        &mut len,
    ))?;
    window.mapped = (zc.length as usize).min(window.len);
    Ok(ZerocopyOutcome {
        mapped: window.mapped,
        copied: usize::try_from(zc.copybuf_len).unwrap_or(0),
        copybuf_error: (-zc.copybuf_len).max(0),
        skip_hint: zc.recv_skip_hint as usize,
        inq: zc.inq as usize,
        socket_error: zc.err.saturating_abs(),
    })
}

/// `recv(fd, buf, flags)`, retried on EINTR. Returns 0 at end of stream.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], flags: i32) -> io::Result<usize> {
    crate::sys::retry_if_interrupted(|| {
        // SAFETY: `buf` is exclusively borrowed and the length passed is its length.
        syscall!(recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags
        ))
        .map(|n| n as usize)
    })
}

/// `send(fd, buf, flags)`, retried on EINTR (e.g. `MSG_EOR` to end a record). Returns bytes queued.
#[cfg(feature = "bench-internals")]
pub fn send(fd: BorrowedFd<'_>, buf: &[u8], flags: i32) -> io::Result<usize> {
    crate::sys::retry_if_interrupted(|| {
        // SAFETY: `buf` is borrowed for the call and the length passed is its length.
        syscall!(send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags)).map(|n| n as usize)
    })
}

/// Waits until `fd` is readable, at end of stream or in error (`poll` for POLLIN), retried on EINTR.
/// With `SO_RCVLOWAT` set, TCP reports readable only once that many bytes are queued (or at EOF).
pub fn wait_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    super::socket::poll(fd, libc::POLLIN, -1).map(drop)
}

/// Whether `fd` has `O_NONBLOCK` set.
pub fn is_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no argument and only reads the descriptor's flags.
    let flags = syscall!(fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// Sets `TCP_MAXSEG`: the largest segment payload (including TCP options such as the 12-byte
/// timestamps) this socket announces and sends. Set it before `connect`/`listen` to take effect.
pub fn set_max_segment(fd: BorrowedFd<'_>, mss: i32) -> io::Result<()> {
    crate::sys::socket::set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, mss)
}

/// Reads `TCP_MAXSEG`: on a connected socket, the current MSS for sending (options included).
#[cfg(feature = "bench-internals")]
pub fn max_segment(fd: BorrowedFd<'_>) -> io::Result<i32> {
    crate::sys::socket::get_int_option(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;
    use std::os::fd::AsFd;

    /// Windows whose reservation (the window plus one alignment unit) would pass `usize::MAX` are
    /// refused, not reserved with a wrapped length; so are empty windows, those that are not whole
    /// pages, and those larger than the address space can map (ENOMEM).
    #[test]
    fn unaddressable_windows_are_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let page = page_size();
        for len in [
            0,
            1,
            page + 1,
            usize::MAX,
            usize::MAX - page + 1,
            usize::MAX / 2 + 1,
            1 << 62,
        ] {
            let err = SocketMapping::new(client.as_fd(), len)
                .err()
                .unwrap_or_else(|| panic!("a {len}-byte window was mapped"));
            assert!(
                matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOMEM)),
                "{len}: {err}"
            );
        }
    }

    /// Offsets from `struct tcp_zerocopy_receive` in linux/tcp.h (Linux 5.11 and later).
    #[test]
    fn layout_matches_linux_tcp_h() {
        assert_eq!(offset_of!(TcpZerocopyReceive, address), 0);
        assert_eq!(offset_of!(TcpZerocopyReceive, length), 8);
        assert_eq!(offset_of!(TcpZerocopyReceive, recv_skip_hint), 12);
        assert_eq!(offset_of!(TcpZerocopyReceive, inq), 16);
        assert_eq!(offset_of!(TcpZerocopyReceive, err), 20);
        assert_eq!(offset_of!(TcpZerocopyReceive, copybuf_address), 24);
        assert_eq!(offset_of!(TcpZerocopyReceive, copybuf_len), 32);
        assert_eq!(offset_of!(TcpZerocopyReceive, flags), 36);
        assert_eq!(offset_of!(TcpZerocopyReceive, msg_control), 40);
        assert_eq!(offset_of!(TcpZerocopyReceive, msg_controllen), 48);
        assert_eq!(offset_of!(TcpZerocopyReceive, msg_flags), 56);
        assert_eq!(offset_of!(TcpZerocopyReceive, reserved), 60);
        assert_eq!(mem::size_of::<TcpZerocopyReceive>(), 64);
    }

    #[test]
    fn window_must_be_whole_pages() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        use std::os::fd::AsFd;
        let err = SocketMapping::new(stream.as_fd(), page_size() + 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        let mut window = SocketMapping::new(stream.as_fd(), 4 * page_size()).unwrap();
        assert_eq!(window.len(), 4 * page_size());
        assert!(window.mapped().is_empty());
        window.release().unwrap();
    }

    #[test]
    fn window_starts_on_a_page_table_boundary() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        use std::os::fd::AsFd;
        let page_table_span = page_size() / 8 * page_size();
        for len in [page_size(), 512 << 10, page_table_span] {
            let window = SocketMapping::new(stream.as_fd(), len).unwrap();
            assert_eq!(window.addr.as_ptr() as usize % page_table_span, 0, "{len}");
            assert!(
                window.reserved
                    >= window.len + window.addr.as_ptr() as usize - window.base.as_ptr() as usize
            );
        }
    }
}
