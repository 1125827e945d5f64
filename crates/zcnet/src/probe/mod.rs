//! What this host supports, each feature measured by using it.
//!
//! Every check does the real thing on a throwaway socket (set the option, send over loopback, read the
//! completion, map received pages) and reports [`Support`] with the reason: the errno name when the
//! kernel refused, or the measured value. Nothing here attaches to or sends on a real interface:
//! interface facts come from sysfs and netdev generic netlink (read-only), and the one intrusive check
//! (an XDP_ZEROCOPY bind) runs only on interfaces the caller names and opts into.
//!
//! What confines the process comes first: its user namespace, container, capabilities, seccomp
//! filter (each system call zcnet needs tried in a throwaway child) and memory limits, each refusal
//! with the cause named (a filter, a sysctl, a limit — never "not supported" for those) and its
//! remedy as a `docker run` flag and a Kubernetes `securityContext`. The library's fallback reasons
//! name the same causes (one function, `seccomp::io_uring_refusal`, words both).

mod cgroup;
mod iface;
mod nic_queues;
mod ovs;
mod process;
mod receive;
pub(crate) mod remedy;
pub(crate) mod seccomp;
mod send;
mod tcp_loopback;
mod vsock;
#[cfg(feature = "io-uring")]
mod zcrx;

/// CPU time and context switches of a measured run (`getrusage(2)`), as `zcnet bench` reports them.
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use crate::sys::socket::{ResourceUsage, UsageOf, resource_usage};
/// How a TCP connection's sending side fares (`TCP_INFO`), for telling a stalled peer from a lossy
/// path.
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub use crate::sys::socket::{TcpSendState, tcp_send_state};

use std::fmt;
use std::io;

use crate::sys;
use crate::sys::errno::error_name;

/// Whether a feature works here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// It works as intended.
    Yes,
    /// It is accepted but does not deliver its benefit here (e.g. zero-copy sends that the kernel
    /// copies anyway).
    Partial,
    /// This process cannot use it here: the kernel refused it or lacks it, or the process lacks a
    /// privilege or resource it needs (the reason names which, and what to do).
    No,
    /// Not found out: only what the probe's own test needed around the feature was missing (for
    /// example locked memory for the zero-copy sender whose stream a mapped receive would read),
    /// so the feature itself went untried. The reason says what, and what to do.
    Unknown,
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Support::Yes => "yes",
            Support::Partial => "partial",
            Support::No => "no",
            Support::Unknown => "unknown",
        })
    }
}

/// One probed feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Short stable name, e.g. `tcp.so_zerocopy` or `xdp.xsk_zerocopy`.
    pub feature: String,
    /// The interface it concerns, for per-interface rows.
    pub iface: Option<String>,
    /// The verdict.
    pub support: Support,
    /// Why: an errno name, a measured value, or what was observed.
    pub reason: String,
}

impl Finding {
    fn new(feature: &str, support: Support, reason: impl Into<String>) -> Finding {
        Finding {
            feature: feature.to_string(),
            iface: None,
            support,
            reason: reason.into(),
        }
    }

    fn on(mut self, iface: &str) -> Finding {
        self.iface = Some(iface.to_string());
        self
    }

    /// `Yes` with `ok` as the reason, or `No` with the error's errno name and text.
    fn from_result<T>(
        feature: &str,
        result: io::Result<T>,
        ok: impl FnOnce(T) -> String,
    ) -> Finding {
        match result {
            Ok(v) => Finding::new(feature, Support::Yes, ok(v)),
            Err(e) => Finding::new(feature, Support::No, refusal(&e)),
        }
    }
}

/// `"EOPNOTSUPP (Operation not supported)"`: errno name first, then the system's text.
pub(crate) fn refusal(e: &io::Error) -> String {
    let name = error_name(e);
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    format!("{name} ({text})")
}

/// [`refusal`] for zcnet's CLI (`bench-internals`): the probe's words for an errno.
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub fn errno_refusal(e: &io::Error) -> String {
    refusal(e)
}

/// What to probe beyond the host-wide features.
///
/// Start from [`Default`] and set the fields that differ
/// ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeOptions {
    /// Interfaces to describe; `None` = every interface of this network namespace.
    pub ifaces: Option<Vec<String>>,
    /// Also try an AF_XDP XDP_ZEROCOPY bind on queue 0 of each named interface. This reconfigures the
    /// queue of a real NIC for a moment: only for interfaces the caller owns.
    pub try_xsk_bind: bool,
}

/// The io_uring zero-copy receive rows of [`probe`] alone: `io_uring.zcrx` (the opcode and the
/// kernel's zcrx query), `io_uring.zcrx_nodev` (a device-less instance registered, or why not) and
/// `io_uring.zcrx_events` (the copy events and statistics, their layout from the kernel's BTF).
#[cfg(feature = "io-uring")]
pub fn zcrx() -> Vec<Finding> {
    zcrx::zcrx()
}

/// Runs every check and returns the findings in a stable order.
pub fn probe(opts: &ProbeOptions) -> Vec<Finding> {
    let mut out = vec![kernel()];
    let facts = process::ProcessFacts::read();
    out.extend(process::rows(&facts));
    let calls = seccomp::rows(&facts);
    // A filter may kill a process making a call it refuses: when the trial in a child saw
    // io_uring_setup refused, this process does not make it.
    let uring_refused = calls
        .iter()
        .find(|r| r.feature == "syscall.io_uring_setup" && r.support == Support::No)
        .map(|r| r.reason.clone());
    out.extend(calls);
    for (feature, domain, kind) in [
        ("tcp.so_zerocopy", libc::AF_INET, libc::SOCK_STREAM),
        ("udp.so_zerocopy", libc::AF_INET, libc::SOCK_DGRAM),
        ("vsock.so_zerocopy", libc::AF_VSOCK, libc::SOCK_STREAM),
    ] {
        out.push(send::so_zerocopy(feature, domain, kind));
    }
    out.push(send::loopback_send(
        "tcp.msg_zerocopy_loopback",
        send::tcp_zerocopy_stats(),
    ));
    out.push(send::loopback_send(
        "udp.msg_zerocopy_loopback",
        send::udp_zerocopy_stats(),
    ));
    out.push(receive::zerocopy_receive());
    match uring_refused {
        Some(why) => {
            out.extend(uring_not_tried(&send::URING_FEATURES, &why));
            #[cfg(feature = "io-uring")]
            out.extend(uring_not_tried(&zcrx::FEATURES, &why));
        }
        None => {
            out.extend(send::uring());
            #[cfg(feature = "io-uring")]
            out.extend(zcrx::zcrx());
        }
    }
    out.push(xdp_socket());
    out.extend(vsock::vsock());
    out.push(ovs::datapath());
    out.extend(iface::interfaces(opts));
    out.extend(limits());
    out
}
/// An AF_XDP socket: `EPERM` without `CAP_NET_RAW` (held for the network namespace's owner).
/// io_uring rows when a trial in a child saw `io_uring_setup` refused (`why`): not tried here, since
/// a filter may kill a process making a call it refuses.
fn uring_not_tried(features: &[&'static str], why: &str) -> Vec<Finding> {
    features
        .iter()
        .map(|&feature| {
            Finding::new(
                feature,
                Support::No,
                format!("not tried (syscall.io_uring_setup is refused): {why}"),
            )
        })
        .collect()
}

fn xdp_socket() -> Finding {
    match sys::socket::socket(libc::AF_XDP, libc::SOCK_RAW, 0) {
        Ok(_) => Finding::new("xdp.socket", Support::Yes, "AF_XDP socket created"),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Finding::new(
            "xdp.socket",
            Support::No,
            format!(
                "{}: needs CAP_NET_RAW over this network namespace; {}",
                refusal(&e),
                remedy::Remedy::capability("NET_RAW")
            ),
        ),
        Err(e) => Finding::new("xdp.socket", Support::No, refusal(&e)),
    }
}
fn kernel() -> Finding {
    Finding::from_result("kernel", sys::socket::kernel_release(), |r| r)
}
fn limits() -> Vec<Finding> {
    let memlock = Finding::from_result(
        "limit.memlock",
        sys::socket::memlock_limit(),
        |(soft, hard)| {
            let show =
                |v: Option<u64>| v.map_or("unlimited".to_string(), |b| format!("{} KiB", b / 1024));
            // The budget reads the capability, not the uid: root without CAP_IPC_LOCK is charged,
            // and so is a process holding it in a user namespace.
            let exempt = if soft.is_some() && crate::tx::MemlockBudget::global().limit().is_none() {
                " (CAP_IPC_LOCK in the initial user namespace: exempt)"
            } else {
                ""
            };
            format!(
                "RLIMIT_MEMLOCK soft {} hard {}{exempt}",
                show(soft),
                show(hard)
            )
        },
    );
    let optmem = Finding::from_result(
        "limit.optmem_max",
        std::fs::read_to_string("/proc/sys/net/core/optmem_max"),
        |v| format!("net.core.optmem_max = {} bytes", v.trim()),
    );
    vec![memlock, memlock_budget(), cgroup::row(), optmem]
}

/// Connections, in-flight window per connection and send size of the example the budget line sizes.
const BUDGET_EXAMPLE: (u64, u64, usize) = (256, 256 << 10, 64 << 10);

/// The senders' locked-memory budget ([`crate::tx::MemlockBudget`]): its limit, what is in use, and
/// what [`BUDGET_EXAMPLE`]'s connections need; partial when they would not all fit (sends past the
/// budget are copied).
fn memlock_budget() -> Finding {
    let b = crate::tx::MemlockBudget::global();
    let (conns, window, size) = BUDGET_EXAMPLE;
    let need = b.needed(conns, window, size);
    let kib = |v: u64| format!("{} KiB", v >> 10);
    let example = format!(
        "{conns} connections with {} in flight in {} sends need {}",
        kib(window),
        kib(size as u64),
        kib(need)
    );
    match b.usable() {
        None => Finding::new(
            "limit.memlock_budget",
            Support::Yes,
            format!(
                "senders may pin without bound (CAP_IPC_LOCK or no RLIMIT_MEMLOCK); {} in use; {example}",
                kib(b.in_use())
            ),
        ),
        Some(usable) => Finding::new(
            "limit.memlock_budget",
            if need <= usable {
                Support::Yes
            } else {
                Support::Partial
            },
            format!(
                "senders may pin {} of RLIMIT_MEMLOCK {} ({} in use); {example}{}",
                kib(usable),
                kib(b.limit().unwrap_or(usable)),
                kib(b.in_use()),
                if need > usable {
                    format!(
                        ": sends past the budget are copied (raise `ulimit -l` or grant \
                         CAP_IPC_LOCK); {}",
                        remedy::Remedy::memlock()
                    )
                } else {
                    String::new()
                }
            ),
        ),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_leads_with_the_errno_name() {
        let r = refusal(&io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert!(r.starts_with("EOPNOTSUPP ("), "{r}");
    }

    #[test]
    fn host_wide_rows_are_present_once_each() {
        let rows = probe(&ProbeOptions {
            ifaces: Some(vec!["lo".into()]),
            try_xsk_bind: false,
        });
        for f in [
            "kernel",
            "tcp.so_zerocopy",
            "udp.so_zerocopy",
            "xdp.socket",
            "limit.optmem_max",
        ] {
            assert_eq!(
                rows.iter().filter(|r| r.feature == f).count(),
                1,
                "{f}: {rows:?}"
            );
        }
        let tcp = rows
            .iter()
            .find(|r| r.feature == "tcp.so_zerocopy")
            .unwrap();
        assert_eq!(tcp.support, Support::Yes, "{tcp:?}");
        let lo = rows.iter().find(|r| r.feature == "iface").unwrap();
        assert!(lo.reason.contains("ifindex 1"), "{lo:?}");
    }
}
