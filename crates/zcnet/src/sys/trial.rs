//! A system call tried in a throwaway child process, to see what answers it without risking this one.
//!
//! Kernel behaviour relied on (kernel/seccomp.c, Documentation/userspace-api/seccomp_filter.rst):
//! - A seccomp filter runs before the system call itself and may answer with any errno
//!   (`SECCOMP_RET_ERRNO`; Docker's and containerd's default profiles answer `EPERM`, Podman's
//!   `ENOSYS`), or kill the thread or process (`SECCOMP_RET_KILL_*`, `SIGSYS`), or raise `SIGSYS`
//!   (`SECCOMP_RET_TRAP`), or hand the call to a supervisor (`SECCOMP_RET_USER_NOTIF`), which may
//!   never answer. Filters are inherited by `fork`, so a child meets the same filter as its parent.
//! - `fork` copies only the calling thread; the child here makes one raw system call and `_exit`s,
//!   both async-signal-safe, so a multithreaded parent is fine.

use std::io;
use std::time::{Duration, Instant};

/// How a tried system call ended in the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trial {
    /// It returned: `Ok` when it succeeded, else the errno.
    Returned(Result<(), i32>),
    /// The child died of this signal during the call (`SIGSYS`: a filter that kills or traps).
    Killed(i32),
    /// No answer within the time allowed (a filter handing the call to a supervisor that did not
    /// answer); the child was killed.
    NoAnswer,
}

/// Tries system call `nr` with `args` in a forked child and reports how it ended, waiting at most
/// `timeout`. The call's result is passed back as the child's exit status, so it must be made with
/// arguments that cannot do anything when it succeeds.
pub fn syscall_in_child(
    nr: libc::c_long,
    args: [libc::c_long; 4],
    timeout: Duration,
) -> io::Result<Trial> {
    // SAFETY: the child runs only `syscall` and `_exit`, which are async-signal-safe, and never
    // returns into Rust code that could touch state copied from the parent's other threads.
    let pid = syscall!(fork())?;
    if pid == 0 {
        // SAFETY: a raw system call; the caller chose arguments that do nothing on success.
        let ret = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3]) };
        let code = if ret < 0 {
            // SAFETY: `__errno_location` returns this thread's errno slot.
            unsafe { *libc::__errno_location() }.clamp(1, 255)
        } else {
            0
        };
        // SAFETY: ends the child at once, without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: `pid` is this process's own child; `status` is a live, writable int.
        let done = syscall!(waitpid(pid, &mut status, libc::WNOHANG))?;
        if done == pid {
            return Ok(if libc::WIFEXITED(status) {
                match libc::WEXITSTATUS(status) {
                    0 => Trial::Returned(Ok(())),
                    errno => Trial::Returned(Err(errno)),
                }
            } else {
                Trial::Killed(libc::WTERMSIG(status))
            });
        }
        if Instant::now() >= deadline {
            // SAFETY: `pid` is this process's own child, not yet reaped, so the pid is still its.
            syscall!(kill(pid, libc::SIGKILL))?;
            // SAFETY: as above; reaps the child just killed.
            super::retry_if_interrupted(|| syscall!(waitpid(pid, &mut status, 0)))?;
            return Ok(Trial::NoAnswer);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_reports_the_errno_and_success_of_its_call() {
        // close(-1): EBADF from the kernel itself.
        let t = syscall_in_child(libc::SYS_close, [-1, 0, 0, 0], Duration::from_secs(5)).unwrap();
        assert_eq!(t, Trial::Returned(Err(libc::EBADF)));
        // getpid() succeeds.
        let t = syscall_in_child(libc::SYS_getpid, [0; 4], Duration::from_secs(5)).unwrap();
        assert_eq!(t, Trial::Returned(Ok(())));
    }

    #[test]
    fn a_call_that_never_answers_is_cut_off() {
        let t = syscall_in_child(libc::SYS_pause, [0; 4], Duration::from_millis(50)).unwrap();
        assert_eq!(t, Trial::NoAnswer);
    }
}
