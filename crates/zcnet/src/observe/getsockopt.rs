//! Where the observer reads `TCP_ZEROCOPY_RECEIVE`, which has no socket-layer tracepoint: at
//! `getsockopt`'s cgroup hook where it can attach one, else at the `syscalls:sys_exit_getsockopt`
//! tracepoint.
//!
//! # Kernel behaviour relied on
//! - `do_tcp_getsockopt` runs the `BPF_CGROUP_GETSOCKOPT` programs of the socket's cgroup for
//!   `TCP_ZEROCOPY_RECEIVE` after the receive, under the socket's lock, with the kernel's own struct
//!   as the value and the receive's result as `retval` (`BPF_CGROUP_RUN_PROG_GETSOCKOPT_KERN`).
//! - A socket belongs to the cgroup v2 of the task that created it, and a program linked to a
//!   cgroup runs for the sockets of every cgroup under it, beside the programs others attached
//!   there: linked at the root of the hierarchy the observer sees (its mount point), it runs for
//!   every socket of the host, or of the container. The program tests the calling task's scope, as
//!   the tracepoints' do.
//! - While it is attached, every other `getsockopt` on those sockets runs it too, and takes the
//!   kernel's generic path for it (the caller's value copied in and back, under the socket's lock);
//!   no other system call is touched. A system call tracepoint, the fallback, instead sends every
//!   system call of every task through the kernel's slower path while it is attached.
//! - Loading a cgroup program needs CAP_NET_ADMIN (or CAP_SYS_ADMIN) besides CAP_BPF, and its
//!   `bpf_task_pt_regs` and `bpf_get_current_task_btf` need CAP_PERFMON.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use super::programs::{self, Maps, SyscallRegs};
use super::{Attachment, BlindSpot, ObserveError, Scope};
use super::{attach_perf, load, mountinfo, read_event};
use crate::sys::bpf;

/// What is not seen when neither hook attaches.
const WHAT: &str = "TCP zero-copy receive";

/// Attaches the `TCP_ZEROCOPY_RECEIVE` program at `getsockopt`'s cgroup hook or, where that cannot
/// attach (no cgroup v2 mounted, no CAP_NET_ADMIN), at `syscalls:sys_exit_getsockopt` of the
/// tracefs at `root`; with neither (a kernel without `CONFIG_FTRACE_SYSCALLS`), records why.
pub(super) fn attach(
    root: &Path,
    scope: Scope,
    maps: Maps<'_>,
    regs: &SyscallRegs,
    attachments: &mut Vec<Attachment>,
    blind: &mut Vec<BlindSpot>,
) -> Result<(), ObserveError> {
    let hook = match attach_hook(scope, maps, regs) {
        Ok(attachment) => {
            attachments.push(attachment);
            return Ok(());
        }
        Err(why) => why,
    };
    let (group, name) = ("syscalls", "sys_exit_getsockopt");
    if !root.join("events").join(group).join(name).is_dir() {
        blind.push(BlindSpot {
            what: WHAT,
            why: format!(
                "{hook}, and the kernel has no tracepoint {group}:{name} (CONFIG_FTRACE_SYSCALLS)"
            ),
        });
        return Ok(());
    }
    let event = read_event(root, group, name)?;
    let insns = programs::zc_receive(scope, maps, regs, &event)
        .map_err(|e| ObserveError::kernel(format!("build the program for {}", event.name), e))?;
    attachments.push(attach_perf(event, name, &insns)?);
    Ok(())
}

/// Links [`programs::zc_receive_hook`] to the root of the cgroup v2 hierarchy the calling thread
/// sees, or says why it could not.
fn attach_hook(scope: Scope, maps: Maps<'_>, regs: &SyscallRegs) -> Result<Attachment, String> {
    let cgroup = mountinfo::mount_of("cgroup2")
        .ok_or_else(|| "no cgroup v2 hierarchy is mounted for getsockopt's hook".to_string())?;
    let event = format!("cgroup_getsockopt:{}", cgroup.display());
    let dir = File::open(&cgroup).map_err(|e| format!("open {}: {e}", cgroup.display()))?;
    let insns = programs::zc_receive_hook(scope, maps, regs);
    let program = load(
        bpf::BPF_PROG_TYPE_CGROUP_SOCKOPT,
        bpf::BPF_CGROUP_GETSOCKOPT,
        &insns,
        "getsockopt",
        &event,
    )
    .map_err(|e| e.to_string())?;
    let link = bpf::cgroup_link_create(program.as_fd(), dir.as_fd(), bpf::BPF_CGROUP_GETSOCKOPT)
        .map_err(|e| format!("attach to {event}: {e}"))?;
    Ok(Attachment {
        event,
        _link: link,
        _perf: None,
        program,
    })
}
