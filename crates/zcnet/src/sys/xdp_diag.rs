//! `sock_diag` for AF_XDP sockets (`NETLINK_SOCK_DIAG`, `SOCK_DIAG_BY_FAMILY` with family `AF_XDP`),
//! as iproute2's `ss --xdp` reads them: one dump lists every bound AF_XDP socket of the netlink
//! socket's network namespace with its interface and queue, its UMEM and its drop and ring
//! counters. Layouts from include/uapi/linux/xdp_diag.h; the kernel's side is net/xdp/xsk_diag.c
//! (`CONFIG_XDP_SOCKETS_DIAG`, module `xsk_diag`).
//!
//! What the kernel checks (net/xdp/xsk_diag.c, `xsk_diag_handler_dump`, `xsk_diag_dump`,
//! `xsk_diag_fill`): only that the request is a dump (`NLM_F_DUMP`, else `EOPNOTSUPP`) at least
//! `sizeof(struct xdp_diag_req)` long (else `EINVAL`). No capability is asked for, for any
//! attribute, statistics included: any process lists every AF_XDP socket of its network namespace,
//! whoever owns it (the dump walks `net->xdp.list` of the netlink socket's namespace only).
//! `xdiag_ino` and `xdiag_cookie` are not used to filter. A socket not bound yet is reported with
//! its inode and no attributes. Without a handler for `AF_XDP` (the module absent and not loadable)
//! `net/core/sock_diag.c` answers `ENOENT`.

use std::fs::{self, File};
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::netlink::{Attributes, GenlSocket, Request};

/// `SOCK_DIAG_BY_FAMILY` (include/uapi/linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `AF_XDP` (include/linux/socket.h).
const AF_XDP: u8 = 44;

/// `XDP_SHOW_*` (include/uapi/linux/xdp_diag.h): what the dump's messages carry.
const XDP_SHOW_INFO: u32 = 1 << 0;
const XDP_SHOW_RING_CFG: u32 = 1 << 1;
const XDP_SHOW_UMEM: u32 = 1 << 2;
const XDP_SHOW_STATS: u32 = 1 << 4;

/// `XDP_DIAG_*` attribute types.
const XDP_DIAG_INFO: u16 = 1;
const XDP_DIAG_RX_RING: u16 = 3;
const XDP_DIAG_TX_RING: u16 = 4;
const XDP_DIAG_UMEM: u16 = 5;
const XDP_DIAG_UMEM_FILL_RING: u16 = 6;
const XDP_DIAG_UMEM_COMPLETION_RING: u16 = 7;
const XDP_DIAG_STATS: u16 = 9;
/// `XDP_DU_F_ZEROCOPY` in `xdp_diag_umem.flags`.
const XDP_DU_F_ZEROCOPY: u32 = 1 << 0;

/// `struct xdp_diag_req`.
#[repr(C)]
#[allow(dead_code)] // Laid out for the size and offset checks; requests are built as bytes.
struct XdpDiagReq {
    sdiag_family: u8,
    sdiag_protocol: u8,
    pad: u16,
    xdiag_ino: u32,
    xdiag_show: u32,
    xdiag_cookie: [u32; 2],
}

/// `struct xdp_diag_msg`.
#[repr(C)]
#[allow(dead_code)]
struct XdpDiagMsg {
    xdiag_family: u8,
    xdiag_type: u8,
    pad: u16,
    xdiag_ino: u32,
    xdiag_cookie: [u32; 2],
}

/// `struct xdp_diag_info`.
#[repr(C)]
#[allow(dead_code)]
struct XdpDiagInfo {
    ifindex: u32,
    queue_id: u32,
}

/// `struct xdp_diag_umem`.
#[repr(C)]
#[allow(dead_code)]
struct XdpDiagUmem {
    size: u64,
    id: u32,
    num_pages: u32,
    chunk_size: u32,
    headroom: u32,
    ifindex: u32,
    queue_id: u32,
    flags: u32,
    refs: u32,
}

/// `struct xdp_diag_stats`.
#[repr(C)]
#[allow(dead_code)]
struct XdpDiagStats {
    n_rx_dropped: u64,
    n_rx_invalid: u64,
    n_rx_full: u64,
    n_fill_ring_empty: u64,
    n_tx_invalid: u64,
    n_tx_ring_empty: u64,
}

/// `XDP_DIAG_UMEM` (the fields kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiagUmem {
    /// `id`: the UMEM's id (sockets sharing a UMEM show the same).
    pub id: u32,
    /// `size` in bytes.
    pub size: u64,
    /// `chunk_size`: the frame size.
    pub chunk_size: u32,
    /// `flags & XDP_DU_F_ZEROCOPY`.
    pub zerocopy: bool,
    /// `refs`: sockets using the UMEM.
    pub refs: u32,
}

/// One socket of the dump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiagSocket {
    /// `xdiag_ino`: the socket's inode (`socket:[N]` in `/proc/<pid>/fd`).
    pub inode: u32,
    /// `XDP_DIAG_INFO` (ifindex, queue id); `None` for a socket not bound.
    pub info: Option<(u32, u32)>,
    /// `XDP_DIAG_UMEM`.
    pub umem: Option<DiagUmem>,
    /// Entries of the RX, TX, fill and completion rings (`XDP_DIAG_*_RING`), when present.
    pub rings: [Option<u32>; 4],
    /// `XDP_DIAG_STATS` (`xsk_diag_put_stats`), in `struct xdp_diag_stats` order: `n_rx_dropped`,
    /// `n_rx_invalid`, `n_rx_full`, `n_fill_ring_empty`, `n_tx_invalid`, `n_tx_ring_empty`.
    pub stats: Option<[u64; 6]>,
}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        bytes.get(offset..offset + 4)?.try_into().ok()?,
    ))
}

fn u64_at(bytes: &[u8], offset: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        bytes.get(offset..offset + 8)?.try_into().ok()?,
    ))
}

fn malformed(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The `struct xdp_diag_req` of a dump of every socket, with every attribute but `MEMINFO`.
fn dump_request() -> [u8; size_of::<XdpDiagReq>()] {
    let mut req = [0u8; size_of::<XdpDiagReq>()];
    req[offset_of!(XdpDiagReq, sdiag_family)] = AF_XDP;
    let show = XDP_SHOW_INFO | XDP_SHOW_RING_CFG | XDP_SHOW_UMEM | XDP_SHOW_STATS;
    let at = offset_of!(XdpDiagReq, xdiag_show);
    req[at..at + 4].copy_from_slice(&show.to_ne_bytes());
    req
}

/// Reads one reply payload: `struct xdp_diag_msg`, then attributes. Attributes shorter than their
/// struct are errors; longer ones (a later kernel's) are read for the fields known here.
pub fn parse(payload: &[u8]) -> io::Result<DiagSocket> {
    let header = size_of::<XdpDiagMsg>();
    if payload.len() < header || payload[offset_of!(XdpDiagMsg, xdiag_family)] != AF_XDP {
        return Err(malformed("sock_diag reply is no xdp_diag_msg"));
    }
    let mut socket = DiagSocket {
        inode: u32_at(payload, offset_of!(XdpDiagMsg, xdiag_ino)).expect("checked length"),
        ..DiagSocket::default()
    };
    let short = || malformed("XDP_DIAG attribute shorter than its struct");
    for attr in Attributes::new(&payload[header..]) {
        let (ty, p) = attr?;
        match ty {
            XDP_DIAG_INFO => {
                let ifindex = u32_at(p, offset_of!(XdpDiagInfo, ifindex)).ok_or_else(short)?;
                let queue = u32_at(p, offset_of!(XdpDiagInfo, queue_id)).ok_or_else(short)?;
                socket.info = Some((ifindex, queue));
            }
            XDP_DIAG_UMEM => {
                if p.len() < size_of::<XdpDiagUmem>() {
                    return Err(short());
                }
                let u32_of = |offset| u32_at(p, offset).expect("checked length");
                socket.umem = Some(DiagUmem {
                    id: u32_of(offset_of!(XdpDiagUmem, id)),
                    size: u64_at(p, offset_of!(XdpDiagUmem, size)).expect("checked length"),
                    chunk_size: u32_of(offset_of!(XdpDiagUmem, chunk_size)),
                    zerocopy: u32_of(offset_of!(XdpDiagUmem, flags)) & XDP_DU_F_ZEROCOPY != 0,
                    refs: u32_of(offset_of!(XdpDiagUmem, refs)),
                });
            }
            XDP_DIAG_RX_RING
            | XDP_DIAG_TX_RING
            | XDP_DIAG_UMEM_FILL_RING
            | XDP_DIAG_UMEM_COMPLETION_RING => {
                let slot = match ty {
                    XDP_DIAG_RX_RING => 0,
                    XDP_DIAG_TX_RING => 1,
                    XDP_DIAG_UMEM_FILL_RING => 2,
                    _ => 3,
                };
                socket.rings[slot] = Some(u32_at(p, 0).ok_or_else(short)?);
            }
            XDP_DIAG_STATS => {
                if p.len() < size_of::<XdpDiagStats>() {
                    return Err(short());
                }
                let mut stats = [0u64; 6];
                for (i, slot) in stats.iter_mut().enumerate() {
                    *slot = u64_at(p, i * 8).expect("checked length");
                }
                socket.stats = Some(stats);
            }
            _ => {}
        }
    }
    Ok(socket)
}

/// Every AF_XDP socket of the calling thread's network namespace (one `NLM_F_DUMP`). `ENOENT` (or
/// `EOPNOTSUPP`) when the kernel has no AF_XDP sock_diag handler.
pub fn dump() -> io::Result<Vec<DiagSocket>> {
    let mut sock = GenlSocket::open_sock_diag()?;
    let request = Request::rtnetlink(
        SOCK_DIAG_BY_FAMILY,
        libc::NLM_F_DUMP as u16,
        &dump_request(),
    );
    sock.request(request)?
        .iter()
        .map(|reply| parse(&reply.payload))
        .collect()
}

/// The inode of a network namespace file (`/proc/<pid>/ns/net`), which names the namespace.
fn namespace_inode(file: &File) -> io::Result<u64> {
    Ok(file.metadata()?.ino())
}

/// Runs `f` in the network namespace `namespace` (a `/proc/<pid>/task/<tid>/ns/net` file): on the
/// calling thread when it is already there, else on a new thread that enters it
/// (`setns(CLONE_NEWNET)`, which needs CAP_SYS_ADMIN) and ends with `f`. Sockets `f` opens belong
/// to that namespace.
pub fn in_network_namespace<R: Send>(
    namespace: &Path,
    f: impl FnOnce() -> R + Send,
) -> io::Result<R> {
    let theirs = File::open(namespace)?;
    let ours = File::open("/proc/thread-self/ns/net")?;
    if namespace_inode(&theirs)? == namespace_inode(&ours)? {
        return Ok(f());
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: `theirs` is an open namespace file; setns only changes this thread, which
            // ends after `f`.
            syscall!(setns(theirs.as_raw_fd(), libc::CLONE_NEWNET))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The network namespaces the threads of process `pid` are in: each namespace's inode and the
/// `ns/net` file of one thread in it (a thread may have entered another namespace than its
/// process's, as with `setns`). Empty once the process is gone.
pub fn network_namespaces(pid: u32) -> Vec<(u64, PathBuf)> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, PathBuf)> = Vec::new();
    for task in tasks.flatten() {
        let path = task.path().join("ns/net");
        let Ok(inode) = fs::metadata(&path).map(|m| m.ino()) else {
            continue;
        };
        if !out.iter().any(|(known, _)| *known == inode) {
            out.push((inode, path));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structs_match_the_uapi_layout() {
        assert_eq!(size_of::<XdpDiagReq>(), 20);
        assert_eq!(offset_of!(XdpDiagReq, xdiag_ino), 4);
        assert_eq!(offset_of!(XdpDiagReq, xdiag_show), 8);
        assert_eq!(offset_of!(XdpDiagReq, xdiag_cookie), 12);
        assert_eq!(size_of::<XdpDiagMsg>(), 16);
        assert_eq!(offset_of!(XdpDiagMsg, xdiag_ino), 4);
        assert_eq!(offset_of!(XdpDiagMsg, xdiag_cookie), 8);
        assert_eq!(size_of::<XdpDiagInfo>(), 8);
        assert_eq!(size_of::<XdpDiagUmem>(), 40);
        assert_eq!(offset_of!(XdpDiagUmem, id), 8);
        assert_eq!(offset_of!(XdpDiagUmem, chunk_size), 16);
        assert_eq!(offset_of!(XdpDiagUmem, flags), 32);
        assert_eq!(offset_of!(XdpDiagUmem, refs), 36);
        assert_eq!(size_of::<XdpDiagStats>(), 48);
        assert_eq!(offset_of!(XdpDiagStats, n_fill_ring_empty), 24);
        assert_eq!(offset_of!(XdpDiagStats, n_tx_ring_empty), 40);
    }

    #[test]
    fn the_request_asks_for_every_socket_with_stats() {
        let req = dump_request();
        assert_eq!(req[0], 44);
        assert_eq!(u32_at(&req, 4), Some(0));
        assert_eq!(u32_at(&req, 8), Some(0b10111));
    }

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        out.extend_from_slice(&ty.to_ne_bytes());
        out.extend_from_slice(payload);
        out.resize(super::super::netlink::align4(out.len()), 0);
        out
    }

    #[test]
    fn a_reply_is_read_field_by_field() {
        let mut payload = vec![AF_XDP, libc::SOCK_RAW as u8, 0, 0];
        payload.extend_from_slice(&4242u32.to_ne_bytes());
        payload.extend_from_slice(&[0; 8]);
        let info: Vec<u8> = [7u32, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        payload.extend(attr(XDP_DIAG_INFO, &info));
        payload.extend(attr(XDP_DIAG_RX_RING, &2048u32.to_ne_bytes()));
        let stats: Vec<u8> = (1u64..=6).flat_map(|v| v.to_ne_bytes()).collect();
        payload.extend(attr(XDP_DIAG_STATS, &stats));
        let mut umem = 1u64 << 20;
        let mut umem_bytes = umem.to_ne_bytes().to_vec();
        for v in [9u32, 256, 4096, 0, 7, 3, XDP_DU_F_ZEROCOPY, 2] {
            umem_bytes.extend_from_slice(&v.to_ne_bytes());
        }
        payload.extend(attr(XDP_DIAG_UMEM, &umem_bytes));
        let socket = parse(&payload).unwrap();
        assert_eq!(socket.inode, 4242);
        assert_eq!(socket.info, Some((7, 3)));
        assert_eq!(socket.rings, [Some(2048), None, None, None]);
        assert_eq!(socket.stats, Some([1, 2, 3, 4, 5, 6]));
        umem = socket.umem.unwrap().size;
        assert_eq!(umem, 1 << 20);
        assert_eq!(
            socket.umem.unwrap(),
            DiagUmem {
                id: 9,
                size: 1 << 20,
                chunk_size: 4096,
                zerocopy: true,
                refs: 2
            }
        );
        // An unbound socket: the header alone.
        assert_eq!(parse(&payload[..16]).unwrap().info, None);
        // A truncated stats attribute is refused.
        let mut short = payload[..16].to_vec();
        short.extend(attr(XDP_DIAG_STATS, &stats[..40]));
        assert!(parse(&short).is_err());
    }

    #[test]
    fn the_dump_answers_or_says_the_handler_is_missing() {
        // On a kernel without xsk_diag the dump is ENOENT; with it, a list (empty without sockets).
        match dump() {
            Ok(sockets) => assert!(sockets.iter().all(|s| s.inode != 0)),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
        }
    }
}
