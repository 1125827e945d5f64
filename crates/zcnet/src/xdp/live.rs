//! Whether an interface carries the host's own traffic: an AF_XDP socket that takes its whole queue
//! (or a txpush flooding it) would cut off whatever runs over it, SSH sessions included.

use std::fs;

use super::error::{Error, Result};
use crate::sys::xdp as sys;

/// Why `iface` (in the calling thread's network namespace) is in use by the host: it has an IPv4 or
/// IPv6 address, or carries a default route. `None` for an interface with neither (e.g. a veth made for
/// a test). Reads `SIOCGIFADDR`, `/proc/net/if_inet6`, `/proc/net/route` and `/proc/net/ipv6_route`.
pub fn host_traffic(iface: &str) -> Result<Option<String>> {
    let ipv4 = sys::interface_ipv4(iface)
        .map_err(|e| Error::from_errno(format!("read the IPv4 address of {iface}"), e, "", ""))?;
    if let Some(addr) = ipv4 {
        return Ok(Some(format!("{iface} has the address {addr}")));
    }
    // if_inet6: address, ifindex, prefix length, scope, flags, name. Link-local addresses (scope 0x20)
    // exist on every interface that is up and carry no routed traffic of the host's own.
    let has_ipv6 = proc_lines("/proc/net/if_inet6")?
        .iter()
        .any(|fields| fields.len() >= 6 && fields[5] == iface && fields[3] != "20");
    if has_ipv6 {
        return Ok(Some(format!("{iface} has an IPv6 address")));
    }
    // route: Iface Destination Gateway ...; the default route has destination 00000000.
    let v4_default = proc_lines("/proc/net/route")?
        .iter()
        .any(|f| f.len() >= 2 && f[0] == iface && f[1] == "00000000");
    // ipv6_route: destination, prefix length, ..., device name last; ::/0 is the default route.
    let v6_default = proc_lines("/proc/net/ipv6_route")?
        .iter()
        .any(|f| f.len() >= 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] == iface);
    if v4_default || v6_default {
        return Ok(Some(format!("{iface} carries the default route")));
    }
    Ok(None)
}

/// The whitespace-separated fields of each line of `path`; an absent file (no IPv6) has none.
fn proc_lines(path: &str) -> Result<Vec<Vec<String>>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(text
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::new(format!("read {path}"), e, "")),
    }
}
