//! Watching zero-copy happen in running processes: BPF programs on the kernel's tracepoints count,
//! per process and per socket, MSG_ZEROCOPY sends and their completions (and how many the kernel
//! copied), io_uring zero-copy sends and their notifications, TCP zero-copy receive, and the bytes
//! socket receives copy; where the kernel has kprobes, also the bytes it copies after a zero-copy
//! send and the cause (see `late_copy`), and the bytes io_uring zero-copy receive copies into its
//! area (see `zcrx_copy`). AF_XDP sockets' drop and ring counters are read from
//! the kernel's socket diagnostics (`XDP_DIAG`, as `ss --xdp` reads them), without tracing:
//! [`xdp_sockets`], [`xdp_sockets_of`].
//!
//! [`Observer::attach`] loads one small program per tracepoint (assembled here, loaded with the
//! `bpf()` system call: no compiler, libbpf or bpftrace at run time), each attached through a BPF
//! link: to a raw tracepoint (the socket layer's sends and receives), to a tracepoint opened as a
//! perf event (io_uring), or to the root cgroup's `getsockopt` hook. The [`Observer`] owns every
//! descriptor: dropping it, or the process ending in any way (`kill -9` included), closes them and
//! the kernel detaches and frees everything. [`Observer::own_process`] watches the calling process
//! only, for a service to export its own counters (the `observe_prometheus` example prints them in
//! Prometheus text).
//!
//! # Kernel behaviour relied on
//! - Raw tracepoint programs (`BPF_PROG_TYPE_RAW_TRACEPOINT`, `BPF_RAW_TRACEPOINT_OPEN`) run at
//!   the tracepoint with its arguments, before any record is built: the cheapest hook for events as
//!   frequent as every send. Tracepoint programs (`BPF_PROG_TYPE_TRACEPOINT`) attach to a
//!   tracepoint opened with `perf_event_open(PERF_TYPE_TRACEPOINT)` through `BPF_LINK_CREATE`
//!   (`BPF_PERF_EVENT`, 5.15+); one event opened for CPU 0 runs the program on every CPU. Loading
//!   needs CAP_BPF and CAP_PERFMON (5.8+) or CAP_SYS_ADMIN.
//! - The io_uring tracepoints' ids and record layouts are read from tracefs
//!   (`events/<group>/<event>/{id,format}`), so field offsets are the running kernel's.
//! - `sock:sock_send_length(sk, ret, 0)` and `sock:sock_recv_length(sk, ret, flags)` fire in the
//!   calling task as `sock_sendmsg` and `sock_recvmsg` return, once per message (a `sendmmsg` of
//!   eight messages fires eight times), with the result. The task's saved registers there still
//!   hold the system call's number and arguments (see `syscalls`), and `bpf_probe_read_user` reads
//!   the caller's memory (the `msghdr` and control message of an error-queue read). The socket
//!   tracepoints cost nothing to other calls. `TCP_ZEROCOPY_RECEIVE` is read at `getsockopt`'s
//!   cgroup hook, or at its system call tracepoint where that hook cannot attach (see
//!   `getsockopt`).
//! - A MSG_ZEROCOPY completion is one `sock_extended_err` (`ee_origin` 5, `ee_errno` 0) per error
//!   queue read, ids `ee_info..=ee_data`, `ee_code` bit 0 when the kernel copied.
//! - `io_uring:io_uring_submit_req` carries the opcode and the request; `io_uring:io_uring_complete`
//!   the request, result and CQE flags, and runs in the submitting task; a notification CQE has
//!   `IORING_CQE_F_NOTIF`, and its result bit 31 says copied when the send asked for
//!   `IORING_SEND_ZC_REPORT_USAGE`.
//! - A receive's result is the bytes it copied to the caller (TCP, UDP, vsock, packet and Unix
//!   sockets alike), except with `MSG_TRUNC`, which returns bytes it did not copy.
//!
//! # What it cannot see
//! [`Observer::blind_spots`] lists what it does not show, with the reason, on the running kernel:
//! the bytes the kernel copies *after* a zero-copy send (`skb_copy_ubufs`, when a packet is
//! delivered to a local socket or cloned for a tap) have no tracepoint, and are counted through a
//! kprobe only where the kernel has kprobes, as are the bytes io_uring zero-copy receive copies
//! into its area (`io_zcrx_copy_chunk`); completions a process never reads are not counted
//! (the completion callback has no tracepoint either). AF_XDP counters need the kernel's
//! `xsk_diag` ([`ObserveError::NoXdpDiag`] without it) and do not include the packets a socket
//! received or sent (only its owner reads those, with `XDP_STATISTICS`).

mod asm;
mod counters;
mod error;
mod getsockopt;
mod kallsyms;
mod kprobe;
mod late_copy;
mod layout;
mod locked;
mod mountinfo;
mod programs;
mod syscalls;
mod tracefs;
mod xdp;
mod zcrx_copy;

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

pub use counters::{Counter, Counters};
pub use error::ObserveError;
pub use locked::{LockedMemory, MemlockLimit};
pub use xdp::{XdpSocket, xdp_sockets, xdp_sockets_of};

use crate::sys::bpf;
use crate::sys::perf_event;

/// Which tasks the observer counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// The threads of one process (its tgid, the pid `ps` shows).
    Process(u32),
    /// Tasks in one cgroup v2 (its id: the inode number of its directory, see [`Scope::cgroup`]).
    Cgroup(u64),
    /// Every task on the host.
    All,
}

impl Scope {
    /// The scope of the cgroup v2 directory `path` (`/sys/fs/cgroup/system.slice/x.service`): tasks
    /// directly in it (not in its children).
    pub fn cgroup(path: &Path) -> io::Result<Scope> {
        use std::os::unix::fs::MetadataExt;
        Ok(Scope::Cgroup(fs::metadata(path)?.ino()))
    }
}

/// Whose counters: a process, and the socket descriptor they were counted on (`None` for counts
/// of the process as a whole: io_uring requests and receive copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// The process (tgid).
    pub pid: u32,
    /// The socket's descriptor in that process.
    pub fd: Option<i32>,
}

/// Something the observer cannot count on this kernel, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlindSpot {
    /// What is not counted.
    pub what: &'static str,
    /// Why.
    pub why: String,
}

/// One program attached to one tracepoint or kprobe; the descriptors keep it there (a raw
/// tracepoint's link needs no perf event).
#[derive(Debug)]
struct Attachment {
    event: String,
    _link: OwnedFd,
    _perf: Option<OwnedFd>,
    program: OwnedFd,
}

/// Counting programs attached to the kernel's tracepoints, and the map they count in.
///
/// Everything it attached stays attached exactly as long as it lives: drop it (or end the process)
/// and the kernel detaches the programs and frees them and their maps.
#[derive(Debug)]
pub struct Observer {
    counters: OwnedFd,
    /// The io_uring requests map, when the io_uring tracepoints' programs are attached.
    _uring: Option<OwnedFd>,
    /// The locked memory map, when programs that sample it are attached.
    locked: Option<OwnedFd>,
    attachments: Vec<Attachment>,
    blind: Vec<BlindSpot>,
    scope: Scope,
}

/// Which programs an observer attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parts {
    /// Every one: [`Observer::attach`].
    Everything,
    /// The `skb_copy_ubufs` kprobe: [`Observer::attach_late_copies`].
    LateCopies,
    /// The receive copies' tracepoint: [`Observer::attach_receive_copies`].
    ReceiveCopies,
}

/// Entries of the counters map (sockets and processes); a full map stops counting new sockets.
const MAX_OWNERS: u32 = 16_384;
/// io_uring zero-copy requests in flight the observer follows at once (least recently used ones
/// drop).
const MAX_REQUESTS: u32 = 16_384;
/// Program license: `bpf_probe_read_user` is only for GPL-compatible programs.
const LICENSE: &std::ffi::CStr = c"Dual MIT/GPL";

/// Capability numbers (`include/uapi/linux/capability.h`).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

impl Observer {
    /// Loads the counting programs for `scope` and attaches them to their tracepoints, and to the
    /// `skb_copy_ubufs` kprobe where the kernel allows it (else [`Observer::blind_spots`] says why).
    ///
    /// Refuses with [`ObserveError::Capabilities`] without CAP_BPF and CAP_PERFMON (or
    /// CAP_SYS_ADMIN), and with [`ObserveError::NoTracefs`] when tracefs is not mounted.
    pub fn attach(scope: Scope) -> Result<Observer, ObserveError> {
        Observer::start(scope, Parts::Everything)
    }

    /// Counts only the copies the kernel makes after zero-copy sends (the `skb_copy_ubufs` kprobe,
    /// [`Counter::LateCopies`] and the counters after it), which cost nothing until the kernel
    /// copies: for a benchmark to report its own copies without slowing its sends.
    ///
    /// Refuses as [`Observer::attach`] does, and with [`ObserveError::NotSeen`] saying why when the
    /// kernel does not let the probe attach (no kprobes, as on a kernel built without them).
    pub fn attach_late_copies(scope: Scope) -> Result<Observer, ObserveError> {
        Observer::start_one(scope, Parts::LateCopies)
    }

    /// Counts only the bytes socket receives copy to the tasks ([`Counter::RxCopiedBytes`], the
    /// raw `sock_recv_length` tracepoint: one short program per receive, which reads only the
    /// tracepoint's arguments): for a receiving benchmark to report the kernel's copies of its own
    /// payload.
    ///
    /// Refuses as [`Observer::attach`] does, and with [`ObserveError::NotSeen`] when the kernel has
    /// no such tracepoint.
    pub fn attach_receive_copies(scope: Scope) -> Result<Observer, ObserveError> {
        Observer::start_one(scope, Parts::ReceiveCopies)
    }

    /// Attaches the one program of `parts`, or says why it could not ([`ObserveError::NotSeen`],
    /// with the last reason recorded: the attachment's own).
    fn start_one(scope: Scope, parts: Parts) -> Result<Observer, ObserveError> {
        let observer = Observer::start(scope, parts)?;
        if observer.attachments.is_empty() {
            let spot = observer.blind.into_iter().last().expect("a reason");
            return Err(ObserveError::NotSeen {
                what: spot.what,
                why: spot.why,
            });
        }
        Ok(observer)
    }

    /// Creates the maps and attaches the programs of `parts`. A map is created only for programs
    /// that use it: the io_uring requests map for the io_uring tracepoints, the locked memory map
    /// for the programs that sample it (those of [`Observer::attach`], where the kernel's BTF gives
    /// its layout).
    fn start(scope: Scope, parts: Parts) -> Result<Observer, ObserveError> {
        check_capabilities()?;
        let tracepoints = parts == Parts::Everything;
        // Asked before any program runs: the netlink dump's reply is a receive of this process's,
        // which the programs would count when it observes itself.
        let xdp_blind = tracepoints.then(xdp::blind_spot).flatten();
        let counters = create_map(
            bpf::BPF_MAP_TYPE_PERCPU_HASH,
            8,
            Counters::SIZE as u32,
            MAX_OWNERS,
            "zcnet_counts",
        )?;
        let mut blind = Vec::new();
        let btf = layout::KernelBtf::new();
        let locked = match tracepoints {
            true => match locked::layout(&btf) {
                Ok(layout) => Some((
                    create_map(
                        bpf::BPF_MAP_TYPE_LRU_HASH,
                        4,
                        programs::LOCKED_VALUE,
                        MAX_OWNERS,
                        "zcnet_locked",
                    )?,
                    layout,
                )),
                Err(spot) => {
                    blind.push(spot);
                    None
                }
            },
            false => None,
        };
        let maps = programs::Maps {
            counters: counters.as_fd(),
            locked: locked.as_ref().map(|(map, layout)| (map.as_fd(), *layout)),
        };
        let mut attachments = Vec::new();
        let root = match tracepoints {
            true => Some(tracefs::mount_point().ok_or(ObserveError::NoTracefs)?),
            false => None,
        };
        let uring = match &root {
            Some(root) => Some(attach_io_uring(root, scope, maps, &mut attachments)?),
            None => None,
        };
        let regs = match tracepoints {
            true => syscalls::registers(&btf)
                .map_err(|spot| blind.push(spot))
                .ok(),
            false => None,
        };
        if let (Some(regs), Some(root)) = (&regs, &root) {
            let insns = programs::socket_send(scope, maps, regs);
            attach_raw_unless_missing(
                c"sock_send_length",
                &insns,
                SENDS,
                &mut attachments,
                &mut blind,
            )?;
            getsockopt::attach(root, scope, maps, regs, &mut attachments, &mut blind)?;
        }
        if parts != Parts::LateCopies {
            let sk_type = layout::vmlinux(&btf, TRUNCATING)
                .and_then(|btf| layout::offset(btf, TRUNCATING, "sock", "sk_type"))
                .map_err(|spot| blind.push(spot))
                .ok();
            let insns = programs::socket_receive(scope, maps, sk_type, regs.as_ref());
            attach_raw_unless_missing(
                c"sock_recv_length",
                &insns,
                RECEIVES,
                &mut attachments,
                &mut blind,
            )?;
        }
        if parts != Parts::ReceiveCopies {
            match late_copy::attach(scope, maps, &btf) {
                Ok((attachment, causes)) => {
                    attachments.push(attachment);
                    blind.extend(causes);
                }
                Err(spot) => blind.push(spot),
            }
        }
        if tracepoints {
            match zcrx_copy::attach(scope, maps, &btf) {
                Ok(attachment) => attachments.push(attachment),
                Err(spot) => blind.push(spot),
            }
            blind.extend(xdp_blind);
            blind.extend(ALWAYS_BLIND.iter().map(|&(what, why)| BlindSpot {
                what,
                why: why.to_string(),
            }));
        }
        Ok(Observer {
            counters,
            _uring: uring,
            locked: locked.map(|(map, _)| map),
            attachments,
            blind,
            scope,
        })
    }

    /// Observes the calling process: its own sockets' counters, for it to export.
    pub fn own_process() -> Result<Observer, ObserveError> {
        Observer::attach(Scope::Process(std::process::id()))
    }

    /// What it observes.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The tracepoints and kprobes it is attached to (`raw_tracepoint:sock_send_length`, …,
    /// `kprobe:skb_copy_ubufs`).
    pub fn tracepoints(&self) -> impl Iterator<Item = &str> {
        self.attachments.iter().map(|a| a.event.as_str())
    }

    /// The kernel's ids of the programs it loaded (as `/proc/<pid>/fdinfo` and `bpftool prog` show
    /// them).
    pub fn program_ids(&self) -> io::Result<Vec<u32>> {
        self.attachments
            .iter()
            .map(|a| bpf::object_id(a.program.as_fd()))
            .collect()
    }

    /// Every counter so far, per owner (sorted), summed over the CPUs. Owners whose counters are
    /// all zero are left out.
    pub fn snapshot(&self) -> Result<Vec<(Owner, Counters)>, ObserveError> {
        let read = |e| ObserveError::kernel("read the counters map", e);
        let mut out = Vec::new();
        for entry in bpf::map_entries(self.counters.as_fd()).map_err(read)? {
            let entry = entry.map_err(read)?;
            let counters = Counters::from_per_cpu(&entry.values);
            if !counters.is_zero() {
                out.push((owner_of(&entry.key), counters));
            }
        }
        out.sort_by_key(|(owner, _)| *owner);
        Ok(out)
    }

    /// The counters of every owner of process `pid` added up.
    pub fn process_totals(&self, pid: u32) -> Result<Counters, ObserveError> {
        let mut total = Counters::default();
        for (owner, counters) in self.snapshot()? {
            if owner.pid == pid {
                total.add(&counters);
            }
        }
        Ok(total)
    }

    /// The locked memory of each observed process's user that read zero-copy completions (its
    /// error queue or io_uring notifications), as of its last read and at most, with the limit the
    /// kernel holds it against: the headroom before its MSG_ZEROCOPY sends fail with `ENOBUFS`.
    /// Empty when no program samples it: for an observer of late or receive copies only, or when
    /// the kernel's BTF does not give its layout (then [`Observer::blind_spots`] says so).
    pub fn locked_memory(&self) -> Result<Vec<LockedMemory>, ObserveError> {
        match &self.locked {
            Some(map) => locked::read(map.as_fd()),
            None => Ok(Vec::new()),
        }
    }

    /// What it cannot count on this kernel, and why.
    pub fn blind_spots(&self) -> &[BlindSpot] {
        &self.blind
    }
}

/// Creates the map `name` of `kind` with keys of `key` and values of `value` bytes.
fn create_map(
    kind: u32,
    key: u32,
    value: u32,
    max: u32,
    name: &str,
) -> Result<OwnedFd, ObserveError> {
    bpf::map_create_sized(kind, key, value, max, name)
        .map_err(|e| ObserveError::kernel(format!("create the map {name}"), e))
}

/// Creates the io_uring requests map and attaches the programs of the io_uring tracepoints (opened
/// as perf events), the only ones that use it; returns the map.
fn attach_io_uring(
    root: &Path,
    scope: Scope,
    maps: programs::Maps<'_>,
    attachments: &mut Vec<Attachment>,
) -> Result<OwnedFd, ObserveError> {
    let uring = create_map(
        bpf::BPF_MAP_TYPE_LRU_HASH,
        8,
        8,
        MAX_REQUESTS,
        "zcnet_uring",
    )?;
    for &(group, name, build) in &programs::TRACEPOINTS {
        let event = read_event(root, group, name)?;
        let insns = build(scope, maps, uring.as_fd(), &event).map_err(|e| {
            ObserveError::kernel(format!("build the program for {}", event.name), e)
        })?;
        attachments.push(attach_perf(event, name, &insns)?);
    }
    Ok(uring)
}

/// The tracepoint `group:name` as the tracefs at `root` describes it.
fn read_event(root: &Path, group: &str, name: &str) -> Result<tracefs::Event, ObserveError> {
    tracefs::Event::read(root, group, name)
        .map_err(|e| ObserveError::kernel(format!("read the tracepoint {group}:{name}"), e))
}

/// Loads `insns` as a tracepoint program named `zcnet_<name>` and attaches it to `event`, opened
/// as a perf event.
fn attach_perf(
    event: tracefs::Event,
    name: &str,
    insns: &[bpf::Insn],
) -> Result<Attachment, ObserveError> {
    let program = load(bpf::BPF_PROG_TYPE_TRACEPOINT, 0, insns, name, &event.name)?;
    let perf = perf_event::open_tracepoint(event.id)
        .map_err(|e| ObserveError::kernel(format!("open {}", event.name), e))?;
    let link = bpf::perf_link_create(program.as_fd(), perf.as_fd())
        .map_err(|e| ObserveError::kernel(format!("attach to {}", event.name), e))?;
    Ok(Attachment {
        event: event.name,
        _link: link,
        _perf: Some(perf),
        program,
    })
}

/// Attaches `insns` to the raw tracepoint `name` or, when the kernel has no such tracepoint
/// (`ENOENT`: one older than it), records that `what` is not seen.
fn attach_raw_unless_missing(
    name: &std::ffi::CStr,
    insns: &[bpf::Insn],
    what: &'static str,
    attachments: &mut Vec<Attachment>,
    blind: &mut Vec<BlindSpot>,
) -> Result<(), ObserveError> {
    match attach_raw(name, insns) {
        Ok(attachment) => attachments.push(attachment),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => blind.push(BlindSpot {
            what,
            why: format!(
                "the kernel has no tracepoint sock:{}",
                name.to_string_lossy()
            ),
        }),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// What each socket program counts, for the reason when it cannot attach.
const SENDS: &str = "MSG_ZEROCOPY and copying sends";
const RECEIVES: &str = "bytes socket receives copy, error-queue completions";
const TRUNCATING: &str = "bytes datagram receives asked with MSG_TRUNC copy";

/// Loads `insns` as a program of `prog_type` (for `expected_attach_type`, where the type needs one)
/// named `zcnet_<name>` for `event`, with the verifier's log when the kernel refuses it.
fn load(
    prog_type: u32,
    expected_attach_type: u32,
    insns: &[bpf::Insn],
    name: &str,
    event: &str,
) -> Result<OwnedFd, ObserveError> {
    bpf::prog_load(
        prog_type,
        expected_attach_type,
        0,
        insns,
        LICENSE,
        &format!("zcnet_{name}"),
    )
    .map_err(|e| ObserveError::Kernel {
        step: format!("load the program for {event}"),
        source: e.error,
        verifier_log: e.verifier_log,
    })
}

/// Loads `insns` as a raw tracepoint program and attaches it to the tracepoint `name`.
fn attach_raw(name: &std::ffi::CStr, insns: &[bpf::Insn]) -> Result<Attachment, ObserveError> {
    let event = format!("raw_tracepoint:{}", name.to_string_lossy());
    let program = load(
        bpf::BPF_PROG_TYPE_RAW_TRACEPOINT,
        0,
        insns,
        &name.to_string_lossy(),
        &event,
    )?;
    let link = bpf::raw_tracepoint_open(program.as_fd(), name)
        .map_err(|e| ObserveError::kernel(format!("attach to {event}"), e))?;
    Ok(Attachment {
        event,
        _link: link,
        _perf: None,
        program,
    })
}

/// The ids of every BPF program loaded on the host (`BPF_PROG_GET_NEXT_ID`; needs CAP_SYS_ADMIN):
/// with [`Observer::program_ids`], a check that an observer that ended left nothing loaded.
pub fn loaded_programs() -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut last = 0;
    while let Some(id) = bpf::prog_next_id(last)? {
        ids.push(id);
        last = id;
    }
    Ok(ids)
}

/// What no kernel shows the observer, and why.
const ALWAYS_BLIND: [(&str, &str); 2] = [
    (
        "completions a process does not read from its error queue",
        "the MSG_ZEROCOPY completion callback has no tracepoint: completions are counted as the process reads them",
    ),
    (
        "sends by write() and io_uring's copying sends",
        "a send is counted for the sendmsg, sendto and sendmmsg calls its saved registers name",
    ),
];

/// The owner of a counters map key `{tgid: u32, fd: i32}`.
fn owner_of(key: &[u8]) -> Owner {
    let pid = u32::from_ne_bytes(key[..4].try_into().expect("4 bytes"));
    let fd = i32::from_ne_bytes(key[4..8].try_into().expect("4 bytes"));
    Owner {
        pid,
        fd: (fd >= 0).then_some(fd),
    }
}

/// Refuses early, naming them, when the calling thread's effective capabilities (capabilities are
/// per thread; `CapEff` in `/proc/thread-self/status`) lack what loading tracing programs needs.
fn check_capabilities() -> Result<(), ObserveError> {
    let status = fs::read_to_string("/proc/thread-self/status")
        .map_err(|e| ObserveError::kernel("read /proc/thread-self/status", e))?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&'static str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(cap, _)| !has(cap))
        .map(|(_, name)| name)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ObserveError::Capabilities { missing })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_a_socket_or_the_process() {
        let mut key = [0u8; 8];
        key[..4].copy_from_slice(&42u32.to_ne_bytes());
        key[4..].copy_from_slice(&7i32.to_ne_bytes());
        assert_eq!(
            owner_of(&key),
            Owner {
                pid: 42,
                fd: Some(7)
            }
        );
        key[4..].copy_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(owner_of(&key), Owner { pid: 42, fd: None });
    }
}
