//! Runs a command under a seccomp filter that refuses io_uring as Docker's default profile does:
//! `io_uring_setup`, `io_uring_enter` and `io_uring_register` fail with `EPERM` (or the errno given
//! with `--errno N`), every other call is allowed.
//!
//! Usage: `testnet-seccomp [--errno N] -- PROGRAM [ARGS...]`
//!
//! Kernel behaviour relied on (Documentation/userspace-api/seccomp_filter.rst): a process that set
//! `PR_SET_NO_NEW_PRIVS` may install a classic BPF filter with `prctl(PR_SET_SECCOMP,
//! SECCOMP_MODE_FILTER, &prog)` without privilege; the filter reads `struct seccomp_data` (`nr` at
//! offset 0, `arch` at offset 4) and returns `SECCOMP_RET_ERRNO | errno` or `SECCOMP_RET_ALLOW`; it
//! stays in force across `execve` and is inherited by children.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// `AUDIT_ARCH_*` of this build's architecture (linux/audit.h): system call numbers are per
/// architecture, so the filter allows anything made under another one.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: other architectures and other calls allowed, the three io_uring calls refused.
fn filter(errno: u16) -> Vec<libc::sock_filter> {
    let refused = [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    let n = refused.len() as u8;
    let mut prog = vec![
        insn(LD_W_ABS, 0, 0, 4),
        // Another architecture: jump to the ALLOW at the end.
        insn(JEQ_K, 0, n + 1, AUDIT_ARCH),
        insn(LD_W_ABS, 0, 0, 0),
    ];
    for (i, nr) in refused.iter().enumerate() {
        // A match jumps to the ERRNO return, past the remaining checks and the ALLOW.
        prog.push(insn(JEQ_K, n - i as u8, 0, *nr as u32));
    }
    prog.push(insn(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    prog.push(insn(
        RET_K,
        0,
        0,
        libc::SECCOMP_RET_ERRNO | u32::from(errno),
    ));
    prog
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (errno, command) = match args.as_slice() {
        [flag, n, dashes, rest @ ..] if flag == "--errno" && dashes == "--" => {
            (n.parse().ok(), rest)
        }
        [dashes, rest @ ..] if dashes == "--" => (Some(libc::EPERM as u16), rest),
        _ => (None, &[][..]),
    };
    let (Some(errno), [program, program_args @ ..]) = (errno, command) else {
        eprintln!("usage: testnet-seccomp [--errno N] -- PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    let prog = filter(errno);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        eprintln!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error());
        return ExitCode::from(1);
    }
    // SAFETY: `fprog` points at `prog`, live for the call; the kernel copies the program.
    if unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        )
    } != 0
    {
        eprintln!("PR_SET_SECCOMP: {}", std::io::Error::last_os_error());
        return ExitCode::from(1);
    }
    let err = Command::new(program).args(program_args).exec();
    eprintln!("exec {program}: {err}");
    ExitCode::from(1)
}
