//! Kprobes for the observer: a program loaded as `BPF_PROG_TYPE_KPROBE` and attached, through a BPF
//! link, at the entry or the return of a kernel function.
//!
//! # Kernel behaviour relied on
//! - A kprobe is opened through the `kprobe` PMU (`/sys/bus/event_source/devices/kprobe/type`,
//!   `perf_event_open` with the function's name in `config1`, 4.17+; bit 0 of `config` makes it a
//!   return probe, as the PMU's `format/retprobe` says) and a `BPF_PROG_TYPE_KPROBE` program is
//!   attached to it through a BPF link (`BPF_PERF_EVENT`, 5.15+). Its context is the probed CPU's
//!   `struct pt_regs`: at the entry, the arguments' registers; at the return, the result's (`ax` on
//!   x86-64). A function the kernel does not have, or inlined everywhere, cannot be probed.

use std::ffi::CStr;
use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use super::{Attachment, BlindSpot, LICENSE, layout};
use crate::btf::Btf;
use crate::sys::bpf::Insn;
use crate::sys::{bpf, perf_event};

/// The `kprobe` PMU's directory in sysfs.
const PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// The names in `struct pt_regs` of the registers holding a probed function's first argument at
/// its entry and its result at its return (x86-64 calling convention); `None` elsewhere: zcnet
/// reads kprobe registers on x86-64 only.
#[cfg(target_arch = "x86_64")]
const REGISTERS: Option<(&str, &str)> = Some(("di", "ax"));
#[cfg(not(target_arch = "x86_64"))]
const REGISTERS: Option<(&str, &str)> = None;

/// Where in the function a probe fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum At {
    Entry,
    Return,
}

/// The `kprobe` PMU's type number, or why the kernel has no kprobes.
fn pmu_type() -> Result<u32, String> {
    match fs::read_to_string(Path::new(PMU).join("type")) {
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("{PMU}/type reads {text:?}")),
        Err(_) => Err(format!("this kernel has no kprobes ({PMU} is absent)")),
    }
}

/// What a probe's program is built from: the `kprobe` PMU's type, the offset in `struct pt_regs` of
/// the register it reads (the first argument at the entry, the result at the return), and the
/// kernel's BTF for any other offset.
pub(super) struct Site<'a> {
    pub pmu_type: u32,
    pub register: i16,
    pub btf: &'a Btf,
}

/// The [`Site`] of a probe at `at` of `function`, or why `what` cannot be seen: no kprobes, another
/// architecture, or no BTF.
pub(super) fn site<'a>(
    btf: &'a layout::KernelBtf,
    what: &'static str,
    function: &CStr,
    at: At,
) -> Result<Site<'a>, BlindSpot> {
    let blind = |why: String| BlindSpot { what, why };
    let pmu_type = pmu_type().map_err(|why| {
        blind(format!(
            "{} has no tracepoint, and {why}",
            function.to_string_lossy()
        ))
    })?;
    let (arg0, result) = REGISTERS
        .ok_or_else(|| blind("zcnet reads kprobe registers on x86-64 only".to_string()))?;
    let btf = layout::vmlinux(btf, what)?;
    let name = match at {
        At::Entry => arg0,
        At::Return => result,
    };
    Ok(Site {
        pmu_type,
        register: layout::offset(btf, what, "pt_regs", name)?,
        btf,
    })
}

/// Loads `insns` as the kprobe program `name` and attaches it at `at` of `function`; the error says
/// which step the kernel refused.
pub(super) fn attach(
    pmu_type: u32,
    function: &CStr,
    at: At,
    insns: &[Insn],
    name: &str,
) -> Result<Attachment, String> {
    let function_name = function.to_string_lossy();
    let event = match at {
        At::Entry => format!("kprobe:{function_name}"),
        At::Return => format!("kretprobe:{function_name}"),
    };
    let program =
        bpf::prog_load(bpf::BPF_PROG_TYPE_KPROBE, 0, 0, insns, LICENSE, name).map_err(|e| {
            format!(
                "the kernel refused the {event} program: {}{}",
                e.error,
                if e.verifier_log.is_empty() {
                    String::new()
                } else {
                    format!("; verifier log: {}", e.verifier_log)
                }
            )
        })?;
    let perf: OwnedFd = perf_event::open_kprobe(pmu_type, function, at == At::Return)
        .map_err(|e| format!("cannot open {event}: {e}"))?;
    let link = bpf::perf_link_create(program.as_fd(), perf.as_fd())
        .map_err(|e| format!("cannot attach to {event}: {e}"))?;
    Ok(Attachment {
        event,
        _link: link,
        _perf: Some(perf),
        program,
    })
}
