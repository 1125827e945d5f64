//! `perf_event_open(2)` for one tracepoint or one kprobe: the event a tracing BPF program is
//! attached to.
//!
//! Layout and numbers from `include/uapi/linux/perf_event.h`: the first version of `struct
//! perf_event_attr` (`PERF_ATTR_SIZE_VER0`, 64 bytes) is all a tracepoint or a kprobe at a function's
//! entry needs; the kernel takes a shorter attribute block than its own and treats the tail as zero
//! (for a kprobe, `config2`, the offset into the function, is then 0).

use std::ffi::CStr;
use std::io;
use std::mem;
use std::os::fd::{FromRawFd, OwnedFd};

/// `PERF_TYPE_TRACEPOINT`: `config` is the tracepoint's id (tracefs `events/<group>/<name>/id`).
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// `struct perf_event_attr` up to `config1` (`PERF_ATTR_SIZE_VER0`); the bit fields (`disabled`,
/// `inherit`, …) are the one `flags` word, all zero here: the event is enabled at once.
#[repr(C)]
#[derive(Debug, Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const _: () = assert!(mem::size_of::<PerfEventAttr>() == 64);

/// Opens the tracepoint `id` as a perf event for every process, counted on CPU 0 (`pid` -1, `cpu`
/// 0, as a BPF attachment point: a program attached to it runs at the tracepoint on every CPU).
/// Needs CAP_PERFMON (or CAP_SYS_ADMIN), or `kernel.perf_event_paranoid` at -1.
pub fn open_tracepoint(id: u64) -> io::Result<OwnedFd> {
    open(PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        config: id,
        ..PerfEventAttr::default()
    })
}

/// Opens a kprobe at the entry of the kernel function `function`, or at its return with
/// `at_return`, through the `kprobe` PMU, whose type number is `pmu_type`
/// (`/sys/bus/event_source/devices/kprobe/type`): `config1` points at the function's name, bit 0 of
/// `config` makes it a return probe (`format/retprobe` reads `config:0`). As [`open_tracepoint`],
/// for every process on CPU 0, as a BPF attachment point. The kernel copies the name during the
/// call.
pub fn open_kprobe(pmu_type: u32, function: &CStr, at_return: bool) -> io::Result<OwnedFd> {
    open(PerfEventAttr {
        type_: pmu_type,
        config: u64::from(at_return),
        config1: function.as_ptr() as u64,
        ..PerfEventAttr::default()
    })
}

/// `perf_event_open(attr, pid -1, cpu 0, group -1, CLOEXEC)`, one sample per event.
fn open(attr: PerfEventAttr) -> io::Result<OwnedFd> {
    let mut attr = PerfEventAttr {
        size: mem::size_of::<PerfEventAttr>() as u32,
        sample_period: 1,
        wakeup_events: 1,
        ..attr
    };
    let fd = syscall!(syscall(
        libc::SYS_perf_event_open,
        (&mut attr as *mut PerfEventAttr).cast::<libc::c_void>(),
        -1 as libc::pid_t,
        0 as libc::c_int,
        -1 as libc::c_int,
        PERF_FLAG_FD_CLOEXEC,
    ))?;
    // SAFETY: perf_event_open returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn attr_layout_matches_linux_perf_event_h() {
        assert_eq!(offset_of!(PerfEventAttr, config), 8);
        assert_eq!(offset_of!(PerfEventAttr, sample_period), 16);
        assert_eq!(offset_of!(PerfEventAttr, flags), 40);
        assert_eq!(offset_of!(PerfEventAttr, wakeup_events), 48);
        assert_eq!(offset_of!(PerfEventAttr, config1), 56);
    }
}
