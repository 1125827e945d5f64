//! AF_XDP socket counters read through `sock_diag` (`XDP_DIAG`), as iproute2's `ss --xdp` reads
//! them: for any process's sockets, without tracing and without the owner's cooperation.
//!
//! The kernel (net/xdp/xsk_diag.c) lists every bound AF_XDP socket of the asking netlink socket's
//! network namespace, asks for no capability — statistics included — and needs
//! `CONFIG_XDP_SOCKETS_DIAG` (module `xsk_diag`). Reading another namespace's sockets means
//! entering it (`setns`, CAP_SYS_ADMIN): [`xdp_sockets_of`] does that for processes in other
//! namespaces.
//!
//! What it cannot see: the packets a socket received or sent. `XDP_DIAG` carries only drop and
//! ring counters; the per-socket packet counts are the owner's own (`XDP_STATISTICS` getsockopt,
//! [`crate::xdp::Socket::statistics`]), on a descriptor only the owner holds.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::PathBuf;

use super::{ObserveError, Owner};
use crate::IfIndex;
use crate::sys::xdp_diag;
use crate::xdp::Statistics;

/// One bound AF_XDP socket as `XDP_DIAG` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct XdpSocket {
    /// The socket's inode: `socket:[inode]` in its owner's `/proc/<pid>/fd`.
    pub inode: u64,
    /// The interface it is bound to, in the socket's network namespace.
    pub ifindex: IfIndex,
    /// That interface's name, looked up in the socket's namespace when the dump was read (`None`
    /// when it is gone).
    pub interface: Option<String>,
    /// The queue it is bound to.
    pub queue_id: u32,
    /// Whether its UMEM is in zero-copy mode (`XDP_DU_F_ZEROCOPY`).
    pub zero_copy: bool,
    /// Its drop and ring counters (`struct xdp_diag_stats`), each counted since the socket was
    /// created: the counters its owner reads with `XDP_STATISTICS`.
    pub stats: Statistics,
}

impl ObserveError {
    /// A failed dump: the typed reason when the kernel has no AF_XDP `sock_diag` handler.
    fn xdp_diag(step: String, e: io::Error) -> ObserveError {
        match e.raw_os_error() {
            Some(libc::ENOENT | libc::EOPNOTSUPP) => ObserveError::NoXdpDiag,
            _ => ObserveError::kernel(step, e),
        }
    }
}

/// The dump of the calling thread's namespace, bound sockets only, interfaces named.
fn dump_here() -> io::Result<Vec<XdpSocket>> {
    let mut out = Vec::new();
    for s in xdp_diag::dump()? {
        let Some((ifindex, queue_id)) = s.info else {
            continue;
        };
        out.push(XdpSocket {
            inode: u64::from(s.inode),
            ifindex: IfIndex::new(ifindex),
            interface: crate::sys::xdp::interface_name(ifindex).ok(),
            queue_id,
            zero_copy: s.umem.is_some_and(|u| u.zerocopy),
            stats: s
                .stats
                .map_or_else(Statistics::default, Statistics::from_diag),
        });
    }
    Ok(out)
}

/// Every bound AF_XDP socket of the caller's network namespace, whoever owns it (one
/// `SOCK_DIAG_BY_FAMILY` dump; no privilege needed).
///
/// [`ObserveError::NoXdpDiag`] when the kernel has no `xsk_diag`.
pub fn xdp_sockets() -> Result<Vec<XdpSocket>, ObserveError> {
    dump_here().map_err(|e| ObserveError::xdp_diag("dump the AF_XDP sockets".into(), e))
}

/// The bound AF_XDP sockets that processes `pids` hold, with the descriptor each holds it by: their
/// `/proc/<pid>/fd` socket inodes matched against one dump per network namespace their threads are
/// in (a namespace other than the caller's is entered, which needs CAP_SYS_ADMIN). Processes that end
/// meanwhile, or whose descriptors cannot be read, are left out. Sorted by owner.
///
/// [`ObserveError::NoXdpDiag`] when the kernel has no `xsk_diag`.
pub fn xdp_sockets_of(pids: &[u32]) -> Result<Vec<(Owner, XdpSocket)>, ObserveError> {
    // Socket inodes of the processes, grouped by the network namespaces their threads are in.
    let mut namespaces: BTreeMap<u64, (PathBuf, Vec<(Owner, u64)>)> = BTreeMap::new();
    for &pid in pids {
        let sockets = socket_inodes(pid);
        if sockets.is_empty() {
            continue;
        }
        for (namespace, path) in xdp_diag::network_namespaces(pid) {
            let entry = namespaces.entry(namespace).or_insert((path, Vec::new()));
            entry.1.extend(sockets.iter().copied());
        }
    }
    let mut out = Vec::new();
    for (_, (path, sockets)) in namespaces {
        let step = format!(
            "dump the AF_XDP sockets of the network namespace {}",
            path.display()
        );
        let dumped = match xdp_diag::in_network_namespace(&path, dump_here) {
            Ok(dump) => dump,
            // The thread ended: its namespace may be gone with it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ObserveError::kernel(step, e)),
        }
        .map_err(|e| ObserveError::xdp_diag(step, e))?;
        let by_inode: HashMap<u64, &XdpSocket> = dumped.iter().map(|s| (s.inode, s)).collect();
        for (owner, inode) in sockets {
            if let Some(socket) = by_inode.get(&inode) {
                out.push((owner, (*socket).clone()));
            }
        }
    }
    out.sort_by_key(|(owner, _)| *owner);
    out.dedup_by_key(|(owner, _)| *owner);
    Ok(out)
}

/// The socket descriptors of process `pid` and their inodes (`socket:[inode]` links in
/// `/proc/<pid>/fd`); none when they cannot be read.
fn socket_inodes(pid: u32) -> Vec<(Owner, u64)> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let fd: i32 = entry.file_name().to_str()?.parse().ok()?;
        let target = fs::read_link(entry.path()).ok()?;
        let inode = socket_inode(target.to_str()?)?;
        Some((pid_fd(pid, fd), inode))
    })
    .collect()
}

fn pid_fd(pid: u32, fd: i32) -> Owner {
    Owner { pid, fd: Some(fd) }
}

/// The inode of a `socket:[N]` descriptor link.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Whether this kernel can show AF_XDP socket counters: `None` when it can, else why not.
pub(super) fn blind_spot() -> Option<super::BlindSpot> {
    match xdp_sockets() {
        Ok(_) => None,
        Err(e) => Some(super::BlindSpot {
            what: "AF_XDP socket counters",
            why: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_links_give_their_inode() {
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn a_kernel_without_xsk_diag_is_a_typed_reason() {
        match xdp_sockets() {
            Ok(_) => assert!(blind_spot().is_none()),
            Err(e) => {
                assert!(matches!(e, ObserveError::NoXdpDiag), "{e}");
                assert_eq!(e.kind(), io::ErrorKind::Unsupported);
                assert!(e.to_string().contains("modprobe xsk_diag"), "{e}");
            }
        }
    }
}
