//! AF_XDP kernel interface (`include/uapi/linux/if_xdp.h`) and the interface-name lookups the XDP code
//! needs.

use std::ffi::{CStr, CString};
use std::io;

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
