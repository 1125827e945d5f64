//! Network device flags (`SIOCGIFFLAGS` / `SIOCSIFFLAGS`): bringing a device zcnet created up.

use std::io;
use std::mem;
use std::os::fd::AsRawFd;

/// Sets `IFF_UP` on device `name` (at most 15 bytes). Needs CAP_NET_ADMIN.
pub fn set_up(name: &str) -> io::Result<()> {
    if name.len() >= libc::IFNAMSIZ || name.as_bytes().contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let sock = super::socket::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    // SAFETY: `ifreq` is plain old data; all-zero is a valid value (an empty name, no flags).
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `req` is a live `ifreq` with a NUL-terminated name; the kernel writes `ifru_flags`.
    syscall!(ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: as above; the kernel reads the name and the flags.
    syscall!(ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_be_devices_are_refused() {
        let e = set_up("a-name-longer-than-ifnamsiz").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert!(set_up("no-such-dev0").is_err());
    }
}
