//! The raw system calls testnet's packet rings need: the only `unsafe` code of this crate, each block
//! with the reason it is sound. Benchmarks and tests compare zcnet against AF_PACKET through these;
//! they are not part of zcnet's API.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;

/// Runs a libc call, mapping a `-1` return to `io::Error::last_os_error()`.
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        // SAFETY: the caller of `syscall!` documents why the arguments are valid for this call.
        let res = unsafe { libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

pub mod packet;

/// `socket(domain, kind | SOCK_CLOEXEC, protocol)`: a new socket owned by the caller.
fn socket(domain: i32, kind: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let raw = syscall!(socket(domain, kind | libc::SOCK_CLOEXEC, protocol))?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Waits up to `timeout_ms` for `events` on `fd` (`poll(2)`, retried on `EINTR`); returns the revents.
pub fn poll(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is one live pollfd and the count passed is 1.
        match syscall!(poll(&mut pfd, 1, timeout_ms)) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other.map(|_| pfd.revents),
        }
    }
}

/// `setsockopt(fd, level, name, &value, sizeof(int))`.
pub fn set_int_option(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live `c_int` and the length passed is exactly its size.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        level,
        name,
        (&value as *const i32).cast(),
        std::mem::size_of::<i32>() as libc::socklen_t,
    ))
    .map(drop)
}

/// A shared mapping of a packet socket's ring, unmapped on drop.
#[derive(Debug)]
struct RingMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; every access goes through atomics or `&self`/`&mut self`.
unsafe impl Send for RingMap {}

impl RingMap {
    /// Maps `len` bytes of `fd`'s ring, shared, readable and writable, pre-faulted.
    fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<RingMap> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_SHARED | libc::MAP_POPULATE;
        // SAFETY: a fresh mapping at an address the kernel chooses; it aliases nothing in this process.
        let ptr = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, fd.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(RingMap { ptr, len })
    }

    /// The bytes `offset..offset + len`, or `None` outside the mapping.
    ///
    /// # Safety
    /// The kernel must not write the range while the slice lives (its frame or block is user space's).
    unsafe fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: in bounds (checked); the caller guarantees the kernel leaves the range alone.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }

    /// The bytes `offset..offset + len` for writing, or `None` outside the mapping.
    ///
    /// # Safety
    /// As for [`RingMap::bytes`]: the kernel neither reads nor writes the range while the slice lives.
    unsafe fn bytes_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: in bounds (checked), `&mut self` excludes other borrows, and the caller guarantees
        // the kernel leaves the range alone.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) })
    }

    /// The `u32` status word at `offset` (shared with the kernel, hence atomic), or `None` when it does
    /// not fit or is misaligned.
    fn status_word(&self, offset: usize) -> Option<&AtomicU32> {
        let addr = self.ptr.as_ptr() as usize + offset;
        if offset.checked_add(4)? > self.len || !addr.is_multiple_of(4) {
            return None;
        }
        // SAFETY: in bounds and aligned (checked); an AtomicU32 is valid for any bit pattern and may
        // be shared with the kernel's concurrent accesses.
        Some(unsafe { &*(addr as *const AtomicU32) })
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value owns and nobody borrows any more.
        let _ = syscall!(munmap(self.ptr.as_ptr().cast(), self.len));
    }
}
