//! The locked memory a process's zero-copy sends count against: its user's `locked_vm`, which the
//! kernel charges and checks against the process's `RLIMIT_MEMLOCK`.
//!
//! # Kernel behaviour relied on
//! - `mm_account_pinned_pages` (net/core/skbuff.c) charges a MSG_ZEROCOPY send's pages to
//!   `current_user()->locked_vm` (`struct user_struct`, one per real uid, shared by all of the
//!   user's processes) and refuses the send with `ENOBUFS` past the sending process's
//!   `RLIMIT_MEMLOCK`; the charge returns when the send completes. io_uring's zero-copy sends and
//!   registered buffers and AF_XDP UMEMs are charged to the same count. A process with
//!   `CAP_IPC_LOCK`, or an unlimited `RLIMIT_MEMLOCK`, is neither charged nor limited.
//! - No file shows a user's `locked_vm` (`VmLck` and `VmPin` in `/proc/<pid>/status` are the
//!   process's `mlock`ed and `pin_user_pages`d memory, which MSG_ZEROCOPY does not change), so the
//!   observer's programs read it at each completion the process reads
//!   (`current->cred->user->locked_vm`), with the limit the kernel applies then: the task's
//!   `RLIMIT_MEMLOCK` (`signal->rlim`), or none when `capable(CAP_IPC_LOCK)`, which holds when the
//!   capability is effective and the task is in the initial user namespace (level 0). Offsets come
//!   from the kernel's BTF.

use std::os::fd::BorrowedFd;

use super::programs::{
    LOCKED_EXEMPT, LOCKED_LIMIT, LOCKED_PAGES, LOCKED_PEAK, LOCKED_UID, LockedLayout,
};
use super::{BlindSpot, ObserveError, layout};
use crate::sys::bpf;

/// What is not seen without the layout.
pub(super) const WHAT: &str = "locked memory charged against RLIMIT_MEMLOCK";

/// The locked memory of an observed process's user, as the kernel charges zero-copy sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockedMemory {
    /// The process (tgid).
    pub pid: u32,
    /// Its user (real uid): the count is the user's, shared by all of its processes.
    pub uid: u32,
    /// Bytes the user had locked when the process last read a zero-copy completion (an error-queue
    /// completion or an io_uring notification).
    pub bytes: u64,
    /// The most seen at those reads.
    pub peak_bytes: u64,
    /// What the kernel held the count against for this process at its last read.
    pub limit: MemlockLimit,
}

/// A process's locked-memory limit, as `mm_account_pinned_pages` applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemlockLimit {
    /// `RLIMIT_MEMLOCK` (soft) in bytes: a send that would take the user past it fails with
    /// `ENOBUFS`.
    Bytes(u64),
    /// `RLIMIT_MEMLOCK` is unlimited: nothing is charged.
    Unlimited,
    /// The process has `CAP_IPC_LOCK` in the initial user namespace (root has it): nothing is
    /// charged.
    Exempt,
}

/// Where the programs find a task's user's `locked_vm` on the running kernel, or why they cannot.
pub(super) fn layout(btf: &layout::KernelBtf) -> Result<LockedLayout, BlindSpot> {
    let btf = layout::vmlinux(btf, WHAT)?;
    let offset = |strukt: &str, member: &str| layout::offset(btf, WHAT, strukt, member);
    Ok(LockedLayout {
        cred: offset("task_struct", "cred")?,
        uid: offset("cred", "uid")?,
        user: offset("cred", "user")?,
        locked_vm: offset("user_struct", "locked_vm")?,
        cap_effective: offset("cred", "cap_effective")?,
        user_ns: offset("cred", "user_ns")?,
        ns_level: offset("user_namespace", "level")?,
        signal: offset("task_struct", "signal")?,
        rlim: offset("signal_struct", "rlim")?,
    })
}

/// Every process's entry of the locked memory map.
pub(super) fn read(map: BorrowedFd<'_>) -> Result<Vec<LockedMemory>, ObserveError> {
    let read = |e| ObserveError::kernel("read the locked memory map", e);
    let page = crate::sys::tcp_zc::page_size() as u64;
    let mut out = Vec::new();
    for entry in bpf::map_entries(map).map_err(read)? {
        let entry = entry.map_err(read)?;
        let pid = u32::from_ne_bytes(entry.key[..4].try_into().expect("4-byte keys"));
        // A map shared by the CPUs: one value.
        out.push(parse(pid, &entry.values[0], page));
    }
    out.sort_by_key(|l| l.pid);
    Ok(out)
}

/// One entry's value (native-endian, as the programs store it).
fn parse(pid: u32, value: &[u8], page: u64) -> LockedMemory {
    let u64_at = |at: usize| u64::from_ne_bytes(value[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_ne_bytes(value[at..at + 4].try_into().expect("4 bytes"));
    let limit = match (u32_at(LOCKED_EXEMPT), u64_at(LOCKED_LIMIT)) {
        (0, u64::MAX) => MemlockLimit::Unlimited,
        (0, bytes) => MemlockLimit::Bytes(bytes),
        _ => MemlockLimit::Exempt,
    };
    LockedMemory {
        pid,
        uid: u32_at(LOCKED_UID),
        bytes: u64_at(LOCKED_PAGES).saturating_mul(page),
        peak_bytes: u64_at(LOCKED_PEAK).saturating_mul(page),
        limit,
    }
}

#[cfg(test)]
mod tests {
    use super::super::programs::LOCKED_VALUE;
    use super::*;

    #[test]
    fn entries_are_read_as_the_programs_store_them() {
        let mut value = [0u8; LOCKED_VALUE as usize];
        value[LOCKED_PAGES..][..8].copy_from_slice(&3u64.to_ne_bytes());
        value[LOCKED_PEAK..][..8].copy_from_slice(&5u64.to_ne_bytes());
        value[LOCKED_UID..][..4].copy_from_slice(&65534u32.to_ne_bytes());
        value[LOCKED_LIMIT..][..8].copy_from_slice(&8_388_608u64.to_ne_bytes());
        let l = parse(7, &value, 4096);
        assert_eq!(
            (l.pid, l.uid, l.bytes, l.peak_bytes),
            (7, 65534, 12288, 20480)
        );
        assert_eq!(l.limit, MemlockLimit::Bytes(8_388_608));
        value[LOCKED_LIMIT..][..8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert_eq!(parse(7, &value, 4096).limit, MemlockLimit::Unlimited);
        value[LOCKED_EXEMPT..][..4].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(parse(7, &value, 4096).limit, MemlockLimit::Exempt);
    }
}
