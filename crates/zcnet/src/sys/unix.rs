//! Unix domain sockets carrying descriptors (`SCM_RIGHTS`), their peer's credentials
//! (`SO_PEERCRED`), and sealed memory files (`memfd_create`) to share memory through them.
//!
//! Kernel behaviour relied on (`net/unix/af_unix.c`, `net/core/scm.c`, `mm/memfd.c`):
//! - Descriptors sent with `SCM_RIGHTS` are installed in the receiver when it reads the message
//!   (with `MSG_CMSG_CLOEXEC`, close-on-exec); those that do not fit its control buffer are closed
//!   and `MSG_CTRUNC` is set.
//! - `SO_PEERCRED` on a connected socket gives the pid, uid and gid the peer had when it called
//!   `connect` (translated into the reader's user namespace).
//! - A memfd sealed with `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL` keeps its size for its whole
//!   life, so a mapping of it never faults past its end.
//! - An io_uring descriptor cannot be sent with `SCM_RIGHTS` (`EINVAL`, since 6.7). A process may
//!   take a copy of another's descriptor with `pidfd_getfd` (5.6) when it may ptrace it
//!   (`PTRACE_MODE_ATTACH_REALCREDS`: root with `CAP_SYS_PTRACE`); `SO_PEERPIDFD` (6.5) gives a
//!   pidfd of the process that connected, so the pid cannot have been reused meanwhile.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Bytes of control buffer for [`MAX_FDS`] descriptors: `CMSG_SPACE(MAX_FDS * sizeof(int))`.
const CONTROL_LEN: usize = 32;

/// A control buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; CONTROL_LEN]);

/// Sends `bytes` on the connected socket `fd` with `fds` attached (`SCM_RIGHTS`), without
/// `SIGPIPE` when the peer is gone (`EPIPE` instead); returns how many bytes were sent.
pub fn send_with_fds(
    fd: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut control = Control([0; CONTROL_LEN]);
    let fd_bytes = mem::size_of_val(fds) as u32;
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: `msghdr` is plain old data; all-zero is valid (no name, no buffers).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a length.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
        // SAFETY: `msg` points at `control`, aligned for `cmsghdr` and at least CMSG_SPACE(fd_bytes)
        // <= CONTROL_LEN bytes long, so the first header lies inside it.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        // SAFETY: `cmsg` points at the first header inside `control` (checked above); its data
        // area holds `fd_bytes` bytes (CMSG_LEN), into which the raw descriptors are copied
        // (`BorrowedFd` is `repr(transparent)` over a C int).
        unsafe {
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
            let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
            for (i, f) in fds.iter().enumerate() {
                data.add(i).write_unaligned(f.as_raw_fd());
            }
        }
    }
    super::retry_if_interrupted(|| {
        // SAFETY: `msg` names one live iovec over `bytes` and, with descriptors, a control buffer
        // built above; the kernel only reads them.
        syscall!(sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)).map(|n| n as usize)
    })
}

/// What [`recv_with_fds`] read.
#[derive(Debug)]
pub struct Received {
    /// Bytes written into the buffer (0: the peer closed the connection).
    pub len: usize,
    /// The descriptors that came with them, now owned by this process (close-on-exec).
    pub fds: Vec<OwnedFd>,
    /// Whether the kernel had more descriptors than [`MAX_FDS`] (`MSG_CTRUNC`): those were closed.
    pub truncated: bool,
}

/// Reads one message from the connected socket `fd` into `buf`, taking up to [`MAX_FDS`]
/// descriptors sent with it (`SCM_RIGHTS`).
pub fn recv_with_fds(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    let mut control = Control([0; CONTROL_LEN]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is plain old data; all-zero is valid (no name, no buffers).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN;
    let len = super::retry_if_interrupted(|| {
        // SAFETY: `msg` names one live iovec over `buf` and the control buffer `control`, both
        // writable for the lengths given.
        syscall!(recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC)).map(|n| n as usize)
    })?;
    let mut fds = Vec::new();
    // SAFETY: `msg` was filled by recvmsg: its control pointer and length describe `control`.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return headers lying wholly inside the control buffer.
        let (level, kind, cmsg_len) =
            unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len) };
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN(0) only computes a length.
            let header = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = cmsg_len.saturating_sub(header) / mem::size_of::<libc::c_int>();
            for i in 0..count {
                // SAFETY: the data area of this header holds `count` ints (from its length, which
                // the kernel wrote within the buffer); each is a descriptor the kernel just
                // installed in this process, owned by nobody else.
                let owned = unsafe {
                    let raw = libc::CMSG_DATA(cmsg)
                        .cast::<libc::c_int>()
                        .add(i)
                        .read_unaligned();
                    OwnedFd::from_raw_fd(raw)
                };
                fds.push(owned);
            }
        }
        // SAFETY: `cmsg` is a header inside the buffer `msg` describes.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    Ok(Received {
        len,
        fds,
        truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// The pid, uid and gid of the peer of the connected Unix socket `fd` (`SO_PEERCRED`), as they were
/// when it connected.
pub fn peer_credentials(fd: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a live, writable `ucred` and `len` its exact size.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_PEERCRED,
        (&mut cred as *mut libc::ucred).cast(),
        &mut len,
    ))?;
    Ok(cred)
}

/// `SO_PEERPIDFD` (asm-generic/socket.h).
#[cfg(feature = "io-uring")]
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd of the process that connected the Unix socket `fd` (`SO_PEERPIDFD`).
#[cfg(feature = "io-uring")]
pub fn peer_pidfd(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut pidfd: libc::c_int = -1;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `pidfd` is a live, writable int and `len` its exact size.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        SO_PEERPIDFD,
        (&mut pidfd as *mut libc::c_int).cast(),
        &mut len,
    ))?;
    // SAFETY: the kernel installed a new descriptor for this process, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(pidfd) })
}

/// A copy of descriptor `target` of the process `pidfd` names (`pidfd_getfd`, close-on-exec).
#[cfg(feature = "io-uring")]
pub fn take_fd(pidfd: BorrowedFd<'_>, target: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes no pointer.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel installed a new descriptor for this process, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as libc::c_int) })
}

/// Seals that fix a memfd's size for good.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// A new memory file of `len` zeroed bytes (`memfd_create`, close-on-exec), sealed so that its size
/// never changes (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`).
pub fn sealed_memfd(name: &std::ffi::CStr, len: u64) -> io::Result<OwnedFd> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let raw = syscall!(memfd_create(name.as_ptr(), flags))?;
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: ftruncate(2) and fcntl(2) on a descriptor this function owns; no pointers.
    syscall!(ftruncate(fd.as_raw_fd(), len))?;
    // SAFETY: as above.
    syscall!(fcntl(
        fd.as_raw_fd(),
        libc::F_ADD_SEALS,
        SIZE_SEALS | libc::F_SEAL_SEAL
    ))?;
    Ok(fd)
}

/// The size of the memory file `fd` when it is sealed against shrinking and growing (`None`
/// otherwise, or when `fd` is no memfd).
pub fn sealed_size(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    // SAFETY: fcntl(2) F_GET_SEALS takes no pointer.
    let seals = match syscall!(fcntl(fd.as_raw_fd(), libc::F_GET_SEALS)) {
        Ok(seals) => seals,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
        Err(e) => return Err(e),
    };
    if seals & SIZE_SEALS != SIZE_SEALS {
        return Ok(None);
    }
    // SAFETY: `stat` is plain old data; all-zero is valid.
    let mut st: libc::stat = unsafe { mem::zeroed() };
    // SAFETY: `st` is a live, writable `stat`.
    syscall!(fstat(fd.as_raw_fd(), &mut st))?;
    Ok(Some(st.st_size as u64))
}

/// A connected pair of Unix stream sockets (`socketpair`, close-on-exec).
#[cfg(test)]
fn stream_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut raw = [0; 2];
    // SAFETY: `raw` is a live, writable array of two ints.
    syscall!(socketpair(
        libc::AF_UNIX,
        libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
        0,
        raw.as_mut_ptr()
    ))?;
    // SAFETY: both are fresh descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(raw[0]), OwnedFd::from_raw_fd(raw[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn the_control_buffer_fits_max_fds_descriptors() {
        // SAFETY: CMSG_SPACE only computes a length.
        let space = unsafe { libc::CMSG_SPACE((MAX_FDS * mem::size_of::<libc::c_int>()) as u32) };
        assert_eq!(space as usize, CONTROL_LEN);
        assert_eq!(mem::align_of::<Control>(), mem::align_of::<libc::cmsghdr>());
        assert_eq!(mem::size_of::<libc::ucred>(), 12);
        assert_eq!(mem::offset_of!(libc::ucred, uid), 4);
        assert_eq!(mem::offset_of!(libc::ucred, gid), 8);
    }

    #[test]
    fn descriptors_and_bytes_arrive_together() {
        let (a, b) = stream_pair().unwrap();
        let memfd = sealed_memfd(c"zcnet-test", 8192).unwrap();
        let sent = send_with_fds(a.as_fd(), b"hello", &[memfd.as_fd(), a.as_fd()]).unwrap();
        assert_eq!(sent, 5);
        let mut buf = [0u8; 16];
        let got = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..got.len], b"hello");
        assert!(!got.truncated);
        assert_eq!(got.fds.len(), 2);
        assert_eq!(sealed_size(got.fds[0].as_fd()).unwrap(), Some(8192));
        assert_eq!(
            sealed_size(got.fds[1].as_fd()).unwrap(),
            None,
            "a socket is no memfd"
        );
        let cred = peer_credentials(b.as_fd()).unwrap();
        // SAFETY: getuid(2) cannot fail.
        assert_eq!(cred.uid, unsafe { libc::getuid() });
        assert_eq!(cred.pid as u32, std::process::id());
        // The copy of `a` received is one of its descriptors too: the connection closes with both.
        drop(got);
        drop(a);
        let eof = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((eof.len, eof.fds.len()), (0, 0));
    }

    #[test]
    fn too_many_descriptors_are_refused_before_the_call() {
        let (a, _b) = stream_pair().unwrap();
        let fds = [a.as_fd(); MAX_FDS + 1];
        let e = send_with_fds(a.as_fd(), b"x", &fds).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn an_unsealed_file_has_no_sealed_size() {
        let name = c"zcnet-unsealed";
        // SAFETY: `name` is NUL-terminated.
        let raw = syscall!(memfd_create(name.as_ptr(), libc::MFD_CLOEXEC)).unwrap();
        // SAFETY: a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        assert_eq!(sealed_size(fd.as_fd()).unwrap(), None);
    }
}
