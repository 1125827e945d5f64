//! The bytes io_uring zero-copy receive (zcrx) copied into an area instead of a NIC writing them
//! there — every byte of a device-less instance, and a NIC queue's fallbacks (a packet the device
//! did not split, a buffer not from the area's page pool) — for any process: a return probe on
//! `io_zcrx_copy_chunk`. The kernel's own statistics of an instance (7.2) are written into its
//! owner's memory, where only the owner reads them (`RxStats` of zcnet's receivers).
//!
//! # Kernel behaviour relied on
//! - `io_zcrx_copy_chunk` (io_uring/zcrx.c, 6.15+) copies one piece of a received packet into the
//!   area and returns the bytes it copied (`ssize_t`), or a negative errno when no buffer was free;
//!   it runs in the receiving task (the request's issue, or its task work on a `DEFER_TASKRUN`
//!   ring). The return probe reads the result from `pt_regs.ax` (x86-64), its offset from the
//!   kernel's BTF.
//! - A static function may be inlined into its callers, or renamed in another kernel: then it
//!   cannot be probed, and these copies are listed as not seen, with the kernel's error.

use std::ffi::CStr;

use super::kprobe::{self, At};
use super::programs::{self, Maps};
use super::{Attachment, BlindSpot, Scope, layout};

/// The probed function.
const FUNCTION: &CStr = c"io_zcrx_copy_chunk";
/// What is not seen when the probe cannot be attached.
const WHAT: &str = "bytes io_uring zero-copy receive copied into its area";

/// Attaches the return probe, or says why it cannot.
pub(super) fn attach(
    scope: Scope,
    maps: Maps<'_>,
    btf: &layout::KernelBtf,
) -> Result<Attachment, BlindSpot> {
    let site = kprobe::site(btf, WHAT, FUNCTION, At::Return)?;
    let insns = programs::zcrx_copy(scope, maps, site.register);
    kprobe::attach(
        site.pmu_type,
        FUNCTION,
        At::Return,
        &insns,
        "zcnet_zcrx_copy",
    )
    .map_err(|why| BlindSpot {
        what: WHAT,
        why: format!(
            "{why} (a kernel without zcrx, before 6.15, or one that inlined the function)"
        ),
    })
}
