//! Which of the system calls zcnet needs reach the kernel, and what refuses the others: a seccomp
//! filter, `kernel.io_uring_disabled`, `kernel.io_uring_group`, a security module, or a kernel built
//! without the call.
//!
//! Each call is tried in a throwaway child ([`crate::sys::trial`]) with arguments the kernel rejects
//! before doing anything, so that the answer tells who answered:
//! - `io_uring_setup(0, NULL)`: the kernel answers `EFAULT` (it copies the parameters first) or
//!   `EINVAL` once the call is allowed; `io_uring_allowed()` answers `EPERM` before that when
//!   `kernel.io_uring_disabled` is 2, or 1 and the caller is neither in `kernel.io_uring_group`
//!   (counted in the initial user namespace) nor `CAP_SYS_ADMIN` in the initial namespace, or a
//!   security module refuses (`security_uring_allowed`).
//! - `io_uring_enter(-2, ..)` and `io_uring_register(-2, ..)`: `EBADF`; no sysctl gates them. (Not
//!   -1: `io_uring_register(-1, ..)` is a registration without a ring since 6.13, `EINVAL` here.)
//! - `bpf(-1, NULL, 0)`: `EINVAL` (an unknown command), after the security module's `security_bpf`.
//! - A kernel built without the call answers `ENOSYS` (`sys_ni_syscall`). So does a filter that
//!   answers with `ENOSYS` (Podman's default profile does): when the kernel shows it was built with
//!   io_uring (`/proc/sys/kernel/io_uring_disabled` exists, 6.6+) or BPF
//!   (`/proc/sys/kernel/unprivileged_bpf_disabled`), an `ENOSYS` under a filter is the filter's.
//! - Any other answer under a filter (`Seccomp: 2`) is the filter's: `EPERM` from Docker's and
//!   containerd's default profiles, which refuse the io_uring calls (and `bpf` without `CAP_BPF` or
//!   `CAP_SYS_ADMIN`).
//!
//! `perf_event_open` is not among them: zcnet opens no perf events.

use std::time::Duration;

use super::process::{CAP_SYS_ADMIN, ProcessFacts};
use super::remedy::Remedy;
use super::{Finding, Support};
use crate::sys::errno_name;
use crate::sys::trial::{Trial, syscall_in_child};

/// A system call zcnet needs: its name, number, harmless arguments, the errnos the kernel itself
/// answers them with, and what zcnet does with it.
struct Call {
    name: &'static str,
    nr: libc::c_long,
    args: [libc::c_long; 4],
    kernel_answers: &'static [i32],
    io_uring: bool,
    what: &'static str,
}

const CALLS: [Call; 4] = [
    Call {
        name: "io_uring_setup",
        nr: libc::SYS_io_uring_setup,
        args: [0; 4],
        kernel_answers: &[libc::EFAULT, libc::EINVAL],
        io_uring: true,
        what: "io_uring sends (SendPath::IoUring)",
    },
    Call {
        name: "io_uring_enter",
        nr: libc::SYS_io_uring_enter,
        args: [-2, 0, 0, 0],
        kernel_answers: &[libc::EBADF],
        io_uring: true,
        what: "io_uring sends (SendPath::IoUring)",
    },
    Call {
        name: "io_uring_register",
        nr: libc::SYS_io_uring_register,
        args: [-2, 0, 0, 0],
        kernel_answers: &[libc::EBADF],
        io_uring: true,
        what: "io_uring sends (SendPath::IoUring), registered buffers",
    },
    Call {
        name: "bpf",
        nr: libc::SYS_bpf,
        args: [-1, 0, 0, 0],
        kernel_answers: &[libc::EINVAL],
        io_uring: false,
        what: "AF_XDP's XDP program and XSKMAP",
    },
];

/// The io_uring sysctls, and whether they let this process set up a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct UringSysctl {
    /// `kernel.io_uring_disabled`; `None` when the file is missing (before 6.6, or no io_uring).
    pub disabled: Option<u8>,
    /// `kernel.io_uring_group` (-1: none).
    pub group: i64,
    /// The process is in that group, or holds `CAP_SYS_ADMIN` in the initial namespace.
    pub passes_group: bool,
}

impl UringSysctl {
    pub(crate) fn read(facts: &ProcessFacts) -> UringSysctl {
        let read = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        let group = read("io_uring_group").unwrap_or(-1);
        let in_group = u32::try_from(group).is_ok_and(|g| facts.outside_groups.contains(&g));
        UringSysctl {
            disabled: read("io_uring_disabled").and_then(|v| u8::try_from(v).ok()),
            group,
            passes_group: in_group || facts.counts(CAP_SYS_ADMIN),
        }
    }
}

/// What refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refuser {
    /// A seccomp filter answered with this errno.
    Filter(i32),
    /// A seccomp filter killed the caller with this signal (or trapped it).
    FilterKills(i32),
    /// The call was handed elsewhere and never answered (a filter's user notification).
    NoAnswer,
    /// `kernel.io_uring_disabled = 2`.
    UringDisabled,
    /// `kernel.io_uring_disabled = 1` and the process is not in `kernel.io_uring_group` (`None`:
    /// no group set).
    UringGroup(Option<u32>),
    /// The kernel has no such call (`ENOSYS` without a filter).
    NotBuilt,
    /// `ENOSYS` under a filter, on a kernel that does not show whether it has the call.
    FilterOrNotBuilt,
    /// No filter, yet refused: a security module (SELinux, AppArmor, lockdown) with this errno.
    SecurityModule(i32),
}

impl Refuser {
    /// Says who refused `call` and what to change.
    pub(crate) fn explain(&self, call: &str) -> String {
        match self {
            Refuser::Filter(errno) if call == "bpf" => format!(
                "a seccomp filter refuses bpf ({}; Seccomp: 2 in /proc/self/status) — Docker's and \
                 containerd's default profiles allow it only to a container holding CAP_BPF or \
                 CAP_SYS_ADMIN; {}",
                errno_name(*errno),
                Remedy::capability("BPF")
            ),
            Refuser::Filter(errno) => format!(
                "a seccomp filter refuses {call} ({}; Seccomp: 2 in /proc/self/status) — Docker's \
                 and containerd's default profiles refuse the io_uring calls (EPERM), Podman's \
                 too (ENOSYS); {}",
                errno_name(*errno),
                Remedy::seccomp_profile()
            ),
            Refuser::FilterKills(signal) => format!(
                "a seccomp filter kills a process calling {call} (signal {signal}); {}",
                Remedy::seccomp_profile()
            ),
            Refuser::NoAnswer => format!(
                "{call} got no answer within a second (a seccomp filter handing it to a supervisor); {}",
                Remedy::seccomp_profile()
            ),
            Refuser::UringDisabled => format!(
                "kernel.io_uring_disabled = 2 refuses {call} to every process (EPERM); {}",
                Remedy::host_sysctl("sysctl kernel.io_uring_disabled=0", None)
            ),
            Refuser::UringGroup(group) => format!(
                "kernel.io_uring_disabled = 1 refuses {call} (EPERM) outside kernel.io_uring_group \
                 ({}) without CAP_SYS_ADMIN in the initial user namespace; {}",
                group.map_or("none set".to_string(), |g| g.to_string()),
                Remedy::host_sysctl(
                    "sysctl kernel.io_uring_disabled=0 (or kernel.io_uring_group=<gid>)",
                    *group
                )
            ),
            Refuser::NotBuilt => format!(
                "this kernel has no {call} (ENOSYS, no filter): built without it; nothing a \
                 container setting changes"
            ),
            Refuser::FilterOrNotBuilt => format!(
                "{call} answers ENOSYS under a seccomp filter, and this kernel does not show \
                 whether it has the call: the filter (Podman's default profile answers ENOSYS) or \
                 a kernel built without it; {}",
                Remedy::seccomp_profile()
            ),
            Refuser::SecurityModule(errno) => format!(
                "{call} refused ({}) with no seccomp filter: a security module (SELinux, AppArmor, \
                 lockdown) refuses it; its policy must allow it",
                errno_name(*errno)
            ),
        }
    }
}

/// Who refused a call of an io_uring or bpf system call with `errno`, when the kernel's own answers
/// to the trial arguments are `kernel_answers` (`None`: allowed). `built` says whether the kernel
/// shows it has the call (`None`: it does not say).
pub(crate) fn refuser(
    errno: i32,
    kernel_answers: &[i32],
    io_uring_setup: bool,
    seccomp: Option<u8>,
    sysctl: &UringSysctl,
    built: Option<bool>,
) -> Option<Refuser> {
    if kernel_answers.contains(&errno) {
        return None;
    }
    let filtered = seccomp == Some(2);
    Some(match errno {
        libc::ENOSYS if !filtered || built == Some(false) => Refuser::NotBuilt,
        libc::ENOSYS if built == Some(true) => Refuser::Filter(errno),
        libc::ENOSYS => Refuser::FilterOrNotBuilt,
        libc::EPERM if io_uring_setup && sysctl.disabled == Some(2) => Refuser::UringDisabled,
        libc::EPERM if io_uring_setup && sysctl.disabled == Some(1) && !sysctl.passes_group => {
            Refuser::UringGroup(u32::try_from(sysctl.group).ok())
        }
        _ if filtered => Refuser::Filter(errno),
        _ => Refuser::SecurityModule(errno),
    })
}

/// Whether the kernel shows it was built with `call`: a sysctl that exists only then.
fn built(call: &Call) -> Option<bool> {
    let sysctl = if call.io_uring {
        "/proc/sys/kernel/io_uring_disabled"
    } else {
        "/proc/sys/kernel/unprivileged_bpf_disabled"
    };
    std::path::Path::new(sysctl).exists().then_some(true)
}

#[cfg(feature = "io-uring")]
/// Why `io_uring_setup` (or another io_uring call, `call`) failed with `errno` for this process: who
/// refused it and what to do, or `None` for an errno no refusal explains (`ENOMEM`, `EINVAL`).
pub(crate) fn io_uring_refusal(call: &str, errno: i32) -> Option<String> {
    if !matches!(errno, libc::EPERM | libc::EACCES | libc::ENOSYS) {
        return None;
    }
    let facts = ProcessFacts::read();
    let sysctl = UringSysctl::read(&facts);
    let built = std::path::Path::new("/proc/sys/kernel/io_uring_disabled")
        .exists()
        .then_some(true);
    refuser(
        errno,
        &[],
        call == "io_uring_setup",
        facts.seccomp,
        &sysctl,
        built,
    )
    .map(|r| r.explain(call))
}

/// The seccomp row and one row per call.
pub(super) fn rows(facts: &ProcessFacts) -> Vec<Finding> {
    let mode = match facts.seccomp {
        Some(0) => Finding::new("seccomp", Support::Yes, "no filter (Seccomp: 0)"),
        Some(1) => Finding::new(
            "seccomp",
            Support::No,
            "strict mode (Seccomp: 1): only read, write, exit and sigreturn",
        ),
        Some(2) => Finding::new(
            "seccomp",
            Support::Partial,
            format!(
                "filter (Seccomp: 2, {} filters): the rows syscall.* say what it refuses",
                facts
                    .seccomp_filters
                    .map_or("?".to_string(), |n| n.to_string())
            ),
        ),
        _ => Finding::new(
            "seccomp",
            Support::Unknown,
            "no Seccomp: line in /proc/self/status",
        ),
    };
    let sysctl = UringSysctl::read(facts);
    let mut out = vec![mode];
    for call in &CALLS {
        out.push(row(call, facts, &sysctl));
    }
    out
}

fn row(call: &Call, facts: &ProcessFacts, sysctl: &UringSysctl) -> Finding {
    let feature = format!("syscall.{}", call.name);
    let refused = |r: Refuser| {
        Finding::new(
            &feature,
            Support::No,
            format!("needed for {}: {}", call.what, r.explain(call.name)),
        )
    };
    match syscall_in_child(call.nr, call.args, Duration::from_secs(1)) {
        Err(e) => Finding::new(
            &feature,
            Support::Unknown,
            format!("could not fork a child to try it: {}", super::refusal(&e)),
        ),
        Ok(Trial::Killed(signal)) => refused(Refuser::FilterKills(signal)),
        Ok(Trial::NoAnswer) => refused(Refuser::NoAnswer),
        Ok(Trial::Returned(Ok(()))) => Finding::new(
            &feature,
            Support::Yes,
            "reaches the kernel (an invalid call succeeded?)",
        ),
        Ok(Trial::Returned(Err(errno))) => match refuser(
            errno,
            call.kernel_answers,
            call.name == "io_uring_setup",
            facts.seccomp,
            sysctl,
            built(call),
        ) {
            None => Finding::new(
                &feature,
                Support::Yes,
                format!(
                    "reaches the kernel ({} for invalid arguments)",
                    errno_name(errno)
                ),
            ),
            Some(r) => refused(r),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: UringSysctl = UringSysctl {
        disabled: Some(0),
        group: -1,
        passes_group: false,
    };
    const SETUP: &[i32] = &[libc::EFAULT, libc::EINVAL];

    #[test]
    fn each_refuser_of_io_uring_setup_is_told_apart() {
        let r = |errno, seccomp, sysctl: &UringSysctl, built| {
            refuser(errno, SETUP, true, seccomp, sysctl, built)
        };
        assert_eq!(r(libc::EFAULT, Some(2), &OPEN, Some(true)), None);
        // Docker's default profile: EPERM under a filter, the sysctl open.
        assert_eq!(
            r(libc::EPERM, Some(2), &OPEN, Some(true)),
            Some(Refuser::Filter(libc::EPERM))
        );
        let off = UringSysctl {
            disabled: Some(2),
            ..OPEN
        };
        assert_eq!(
            r(libc::EPERM, Some(0), &off, Some(true)),
            Some(Refuser::UringDisabled)
        );
        let group = UringSysctl {
            disabled: Some(1),
            group: 4242,
            passes_group: false,
        };
        assert_eq!(
            r(libc::EPERM, Some(0), &group, Some(true)),
            Some(Refuser::UringGroup(Some(4242)))
        );
        // In the group: the sysctl lets it through, so the EPERM is the filter's.
        let member = UringSysctl {
            passes_group: true,
            ..group
        };
        assert_eq!(
            r(libc::EPERM, Some(2), &member, Some(true)),
            Some(Refuser::Filter(libc::EPERM))
        );
        assert_eq!(
            r(libc::EPERM, Some(0), &OPEN, Some(true)),
            Some(Refuser::SecurityModule(libc::EPERM))
        );
        // ENOSYS: the kernel's without a filter; a filter's when the kernel shows io_uring.
        assert_eq!(
            r(libc::ENOSYS, Some(0), &OPEN, None),
            Some(Refuser::NotBuilt)
        );
        assert_eq!(
            r(libc::ENOSYS, Some(2), &OPEN, Some(true)),
            Some(Refuser::Filter(libc::ENOSYS))
        );
        assert_eq!(
            r(libc::ENOSYS, Some(2), &UringSysctl::default(), None),
            Some(Refuser::FilterOrNotBuilt)
        );
    }

    #[test]
    fn explanations_name_the_cause_and_never_a_missing_kernel_feature_for_a_filter() {
        let filter = Refuser::Filter(libc::EPERM).explain("io_uring_setup");
        assert!(filter.contains("seccomp filter"), "{filter}");
        assert!(filter.contains("--security-opt seccomp="), "{filter}");
        assert!(filter.contains("seccompProfile"), "{filter}");
        assert!(!filter.contains("not supported"), "{filter}");
        let group = Refuser::UringGroup(Some(4242)).explain("io_uring_setup");
        assert!(group.contains("--group-add 4242"), "{group}");
        assert!(group.contains("supplementalGroups: [4242]"), "{group}");
    }

    #[test]
    fn every_call_reaches_this_kernel_without_a_filter() {
        let facts = ProcessFacts::read();
        if facts.seccomp != Some(0) {
            testnet::skip(
                "every_call_reaches_this_kernel_without_a_filter",
                "the tests run under a seccomp filter",
            );
            return;
        }
        let rows = rows(&facts);
        assert_eq!(rows[0].support, Support::Yes, "{rows:?}");
        for r in &rows[1..] {
            assert_eq!(r.support, Support::Yes, "{r:?}");
        }
    }
}
