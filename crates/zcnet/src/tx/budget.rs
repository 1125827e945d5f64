//! The process's locked-memory budget for MSG_ZEROCOPY: what every sender of the process may pin.
//!
//! Kernel behaviour relied on (`mm_account_pinned_pages`, net/core/skbuff.c): each zero-copy
//! `sendmsg` of `len` bytes charges `len / PAGE_SIZE + 2` pages (the two unaligned partial pages of
//! the worst case) to the user's locked memory, and the charge is returned when the send's
//! notification is freed, that is by its completion. A charge that would take the user past
//! `RLIMIT_MEMLOCK` fails the send with `ENOBUFS` — unless the process has `CAP_IPC_LOCK` (root has
//! it), which exempts it from the limit. The count charged is the user's (`user->locked_vm`), shared
//! by all of the user's processes and by io_uring registered buffers and AF_XDP UMEMs.
//!
//! [`MemlockBudget::global`] is shared by every sender in the process: a send takes a [`Charge`] of
//! its pages before going zero-copy and the charge is released with the send's completion; a send
//! that does not fit is copied instead ([`crate::tx::CopyReason::Memlock`]) and zero-copy resumes as
//! completions return pages. The budget leaves headroom for what the process had locked when it was
//! first used (`VmLck` in `/proc/self/status`) and a margin of an eighth of the limit for what the
//! user pins elsewhere; an `ENOBUFS` that still comes (the user's other pins, or
//! `net.core.optmem_max`) is copied and zero-copy resumes once the sender's loans drained.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bit of `CAP_IPC_LOCK` in the capability sets (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// A budget of locked memory in bytes, charged in whole pages as the kernel charges zero-copy sends.
#[derive(Debug)]
pub struct MemlockBudget {
    /// `RLIMIT_MEMLOCK` in bytes; `None` when unlimited or exempt (`CAP_IPC_LOCK`).
    limit: Option<u64>,
    /// Bytes kept out of the budget: locked before the first use, and the margin.
    reserved: u64,
    page: u64,
    in_use: AtomicU64,
}

/// Pages charged to a budget by one zero-copy send, returned when dropped (with the send's completion).
#[derive(Debug)]
pub struct Charge<'a> {
    budget: &'a MemlockBudget,
    bytes: u64,
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.budget.in_use.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Charge<'_> {
    /// Bytes charged (whole pages).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl MemlockBudget {
    /// A budget of `limit` bytes (`None`: unlimited) of which `reserved` are kept for other uses,
    /// charged in pages of `page` bytes (at least 1).
    pub fn new(limit: Option<u64>, reserved: u64, page: u64) -> Self {
        MemlockBudget {
            limit,
            reserved,
            page: page.max(1),
            in_use: AtomicU64::new(0),
        }
    }

    /// The process-wide budget, read on first use: `RLIMIT_MEMLOCK` unless the effective capabilities
    /// hold `CAP_IPC_LOCK` in the initial user namespace, less the process's `VmLck` then and an eighth of the limit.
    pub fn global() -> &'static MemlockBudget {
        static GLOBAL: OnceLock<MemlockBudget> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            // The kernel checks CAP_IPC_LOCK in the initial user namespace (`capable()`): held in
            // another one, as rootless containers hold it, it exempts from nothing.
            let initial_namespace = std::fs::read_to_string("/proc/self/uid_map")
                .is_ok_and(|map| map.split_whitespace().eq(["0", "0", "4294967295"]));
            let exempt = initial_namespace
                && status_field(&status, "CapEff:")
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
                    .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0);
            let limit = match crate::sys::socket::memlock_limit() {
                _ if exempt => None,
                Ok((soft, _)) => soft,
                // An unreadable limit: assume a normal user's 8 MiB rather than none.
                Err(_) => Some(8 << 20),
            };
            let locked = status_field(&status, "VmLck:")
                .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                .saturating_mul(1024);
            let margin = limit.unwrap_or(0) / 8;
            let page = crate::sys::tcp_zc::page_size() as u64;
            MemlockBudget::new(limit, locked.saturating_add(margin), page)
        })
    }

    /// `RLIMIT_MEMLOCK` in bytes; `None` when unlimited or the process has `CAP_IPC_LOCK`.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Bytes the senders may pin: the limit less what is reserved (`None`: no bound).
    pub fn usable(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.reserved))
    }

    /// Bytes charged by zero-copy sends not yet completed.
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Acquire)
    }

    /// What the kernel charges for one zero-copy send of `len` bytes: `len / page + 2` pages, in bytes
    /// (saturating).
    pub fn pages_for(&self, len: usize) -> u64 {
        (len as u64 / self.page)
            .saturating_add(2)
            .saturating_mul(self.page)
    }

    /// Locked memory `connections` senders need to keep `window` bytes each in flight zero-copy in
    /// sends of `send_size` bytes (saturating).
    pub fn needed(&self, connections: u64, window: u64, send_size: usize) -> u64 {
        let size = (send_size as u64).max(1);
        let sends = window.div_ceil(size);
        self.pages_for(send_size)
            .saturating_mul(sends)
            .saturating_mul(connections)
    }

    /// Charges a zero-copy send of `len` bytes, or `None` when it would take the budget past
    /// [`MemlockBudget::usable`] (the send should be copied).
    pub fn try_charge(&self, len: usize) -> Option<Charge<'_>> {
        let bytes = self.pages_for(len);
        let usable = self.usable().unwrap_or(u64::MAX);
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= usable)
            })
            .ok()?;
        Some(Charge {
            budget: self,
            bytes,
        })
    }
}

fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// Why a send was copied instead of zero-copied for want of locked memory, naming the limit and the
/// remedies.
pub fn memlock_reason() -> String {
    let b = MemlockBudget::global();
    let kib = |v: Option<u64>| v.map_or("unlimited".into(), |v| format!("{} KiB", v >> 10));
    format!(
        "copied while the locked-memory budget was spent: the pages a MSG_ZEROCOPY send pins count \
         against RLIMIT_MEMLOCK ({} here, {} usable by senders, {} KiB in flight); raise it with \
         `ulimit -l` or limits.conf, or grant CAP_IPC_LOCK (in the initial user namespace: held in \
         another it exempts from nothing); in a container, {}; zero-copy resumes as completions \
         return pages",
        kib(b.limit()),
        kib(b.usable()),
        b.in_use() >> 10,
        crate::probe::remedy::Remedy::memlock()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_whole_pages_as_the_kernel_does() {
        let b = MemlockBudget::new(Some(1 << 20), 0, 4096);
        assert_eq!(b.pages_for(0), 2 * 4096);
        assert_eq!(b.pages_for(1), 2 * 4096);
        assert_eq!(b.pages_for(4095), 2 * 4096);
        assert_eq!(b.pages_for(4096), 3 * 4096);
        assert_eq!(b.pages_for(64 << 10), 18 * 4096);
        let c = b.try_charge(4096).unwrap();
        assert_eq!(c.bytes(), 3 * 4096);
        assert_eq!(b.in_use(), 3 * 4096);
        drop(c);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn refuses_what_does_not_fit_and_takes_it_after_release() {
        // 64 pages usable of 72: 8 reserved.
        let b = MemlockBudget::new(Some(72 * 4096), 8 * 4096, 4096);
        let held: Vec<_> = (0..8).map(|_| b.try_charge(6 * 4096).unwrap()).collect();
        assert_eq!(b.in_use(), 64 * 4096);
        assert!(b.try_charge(0).is_none());
        drop(held);
        assert_eq!(b.in_use(), 0);
        assert!(b.try_charge(62 * 4096).is_some());
        assert!(b.try_charge(62 * 4096 + 1).is_some());
        assert!(b.try_charge(63 * 4096).is_none());
    }

    #[test]
    fn hostile_sizes_saturate_and_never_wrap() {
        let b = MemlockBudget::new(Some(u64::MAX), 0, 4096);
        assert_eq!(b.pages_for(usize::MAX), u64::MAX);
        let big = b.try_charge(usize::MAX).unwrap();
        // A second charge would wrap the counter: refused, the count unchanged.
        assert!(b.try_charge(usize::MAX).is_none());
        assert_eq!(b.in_use(), big.bytes());
        drop(big);
        assert_eq!(b.in_use(), 0);
        // Everything reserved, a zero limit, a zero page: nothing fits, nothing divides by zero.
        for b in [
            MemlockBudget::new(Some(4096), u64::MAX, 4096),
            MemlockBudget::new(Some(0), 0, 4096),
            MemlockBudget::new(Some(1 << 20), 0, 0),
        ] {
            assert!(b.try_charge(1 << 30).is_none());
            assert_eq!(b.in_use(), 0);
        }
        let unlimited = MemlockBudget::new(None, u64::MAX, 4096);
        assert!(unlimited.try_charge(usize::MAX).is_some());
        assert_eq!(unlimited.needed(u64::MAX, u64::MAX, usize::MAX), u64::MAX);
        assert_eq!(
            unlimited.needed(256, 256 << 10, 0),
            256 * (256 << 10) * 2 * 4096
        );
    }

    #[test]
    fn concurrent_charges_never_exceed_the_budget() {
        let b = MemlockBudget::new(Some(100 * 4096), 0, 4096);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        if let Some(c) = b.try_charge(4096 * 3) {
                            assert!(b.in_use() <= 100 * 4096);
                            drop(c);
                        }
                    }
                });
            }
        });
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn the_global_budget_reads_this_process() {
        let b = MemlockBudget::global();
        assert!(b.usable() <= b.limit());
        assert!(std::ptr::eq(b, MemlockBudget::global()));
    }
}
