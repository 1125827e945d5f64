//! Where the observer finds the system call a send or receive belongs to, and its arguments: the
//! offsets in `struct pt_regs` of the registers the 64-bit ABI passes them in, read from the
//! kernel's BTF.
//!
//! # Kernel behaviour relied on
//! - A task's saved user registers stay as the call entered until it returns: on x86-64 the call's
//!   number in `orig_ax` and its arguments in `di`, `si`, `dx` and `r10`. The socket calls counted
//!   here do not change them, so they still hold them at the socket layer's tracepoints
//!   (`sock:sock_send_length`, `sock:sock_recv_length`, both in the calling task), in
//!   `getsockopt`'s cgroup hook and at the `syscalls:sys_exit_getsockopt` tracepoint.
//! - `task_struct.tgid` is the process's id as the initial pid namespace names it, what
//!   `bpf_get_current_pid_tgid() >> 32` returns: the programs load it from the task instead.
//! - `bpf_task_pt_regs(bpf_get_current_task_btf())` (5.15+) is that `struct pt_regs`, typed by the
//!   kernel's BTF, so the programs load its fields directly.
//! - A 64-bit task enters with `cs` = `__USER_CS` (0x33); a 32-bit task's calls (`__USER32_CS`)
//!   have other numbers, and are left out. The program compares the low 16 bits: with FRED (6.9+)
//!   `cs` shares a 64-bit slot (`csx`) with the event's other bits.

use super::programs::{SyscallNumbers, SyscallRegs};
use super::{BlindSpot, layout};

/// What is not seen without the saved registers' layout.
const WHAT: &str = "MSG_ZEROCOPY and copying sends, error-queue completions, TCP zero-copy receive";

/// The names in `struct pt_regs` of the number, the first four arguments and the code segment.
#[cfg(target_arch = "x86_64")]
const REGISTERS: Option<(&str, [&str; 4], &str)> =
    Some(("orig_ax", ["di", "si", "dx", "r10"], "cs"));
#[cfg(not(target_arch = "x86_64"))]
const REGISTERS: Option<(&str, [&str; 4], &str)> = None;

/// `__USER_CS` (`arch/x86/include/asm/segment.h`): the code segment of a 64-bit task.
const USER_CS: i32 = 0x33;

/// The layout the system call program reads on the running kernel, or why there is none.
pub(super) fn registers(btf: &layout::KernelBtf) -> Result<SyscallRegs, BlindSpot> {
    let blind = |why: String| BlindSpot { what: WHAT, why };
    let (nr, args, native) = REGISTERS.ok_or_else(|| {
        blind("zcnet reads system call arguments from x86-64 registers only".to_string())
    })?;
    let btf = layout::vmlinux(btf, WHAT)?;
    let offset = |name: &str| layout::offset(btf, WHAT, "pt_regs", name);
    Ok(SyscallRegs {
        nr: offset(nr)?,
        args: [
            offset(args[0])?,
            offset(args[1])?,
            offset(args[2])?,
            offset(args[3])?,
        ],
        native: (offset(native)?, USER_CS),
        numbers: SyscallNumbers {
            sendmsg: libc::SYS_sendmsg as i32,
            sendto: libc::SYS_sendto as i32,
            sendmmsg: libc::SYS_sendmmsg as i32,
            recvmsg: libc::SYS_recvmsg as i32,
            getsockopt: libc::SYS_getsockopt as i32,
        },
        task_tgid: layout::offset(btf, WHAT, "task_struct", "tgid")?,
    })
}
