//! What confines this process, as `/proc` tells it: its capability sets, its seccomp mode, whether it
//! runs in a user namespace, and signs of a container.
//!
//! Kernel behaviour relied on (fs/proc/array.c, kernel/user_namespace.c, kernel/capability.c):
//! - `/proc/self/status` lists `CapEff`, `CapPrm`, `CapBnd` as 64-bit hex masks (bit n =
//!   capability n), and `Seccomp:` 0 (none), 1 (strict) or 2 (filter), with `Seccomp_filters:` the
//!   number of filters installed (5.9+).
//! - The initial user namespace's `/proc/self/uid_map` is the single line `0 0 4294967295`; any
//!   other map is a user namespace's. Capabilities held in a user namespace count only for what that
//!   namespace owns: the checks zero-copy meets are made against the initial namespace
//!   (`capable()`): `CAP_IPC_LOCK`'s exemption from `RLIMIT_MEMLOCK` (`mm_account_pinned_pages`,
//!   io_uring's `__io_account_mem`, the XDP UMEM's `xdp_umem_account_pages`), `CAP_SYS_ADMIN`'s
//!   pass through `kernel.io_uring_disabled = 1`, `CAP_BPF` for BPF programs; `CAP_NET_ADMIN` and
//!   `CAP_NET_RAW` count on the interfaces of a network namespace the user namespace owns.
//! - `/proc/self/gid_map` maps the namespace's group ids to the initial namespace's (`inside
//!   outside count`), which is where `kernel.io_uring_group` is counted.

use std::path::Path;

use super::remedy::Remedy;
use super::{Finding, Support};

/// The capabilities zcnet's own calls need: bit, name without `CAP_`, and what for.
pub(crate) const CAPABILITIES: [(u32, &str, &str); 4] = [
    (
        13,
        "NET_RAW",
        "AF_XDP and AF_PACKET sockets (xdp::Socket, UdpEndpoint)",
    ),
    (
        12,
        "NET_ADMIN",
        "attaching XDP programs, OVS datapaths, zero-copy receive queues",
    ),
    (39, "BPF", "loading the XDP program and its XSKMAP"),
    (
        14,
        "IPC_LOCK",
        "pinning pages past RLIMIT_MEMLOCK (zero-copy sends, UMEMs, registered buffers)",
    ),
];

/// `CAP_SYS_ADMIN`'s bit: it lets io_uring through `kernel.io_uring_disabled = 1` outside
/// `kernel.io_uring_group` (the `syscall.io_uring_setup` row says when that is what refuses it).
pub(crate) const CAP_SYS_ADMIN: u32 = 21;

/// What `/proc` says about this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ProcessFacts {
    /// Effective, permitted and bounding capability sets.
    pub effective: u64,
    pub permitted: u64,
    pub bounding: u64,
    /// `Seccomp:` (0 none, 1 strict, 2 filter); `None` when the kernel does not say.
    pub seccomp: Option<u8>,
    /// `Seccomp_filters:`.
    pub seccomp_filters: Option<u32>,
    /// Runs in a user namespace other than the initial one.
    pub user_namespace: bool,
    /// The process's group ids (effective and supplementary) as the initial namespace sees them.
    pub outside_groups: Vec<u32>,
}

impl ProcessFacts {
    /// Reads `/proc/self/status`, `uid_map` and `gid_map`, and the process's groups.
    pub(crate) fn read() -> ProcessFacts {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let mut facts =
            ProcessFacts::parse(&read("/proc/self/status"), &read("/proc/self/uid_map"));
        let gid_map = read("/proc/self/gid_map");
        facts.outside_groups = crate::sys::socket::groups()
            .into_iter()
            .filter_map(|g| map_id(&gid_map, g))
            .collect();
        facts
    }

    /// The facts `status` and `uid_map` hold (groups left empty).
    pub(crate) fn parse(status: &str, uid_map: &str) -> ProcessFacts {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let mask = |name: &str| field(name).and_then(|v| u64::from_str_radix(v, 16).ok());
        ProcessFacts {
            effective: mask("CapEff:").unwrap_or(0),
            permitted: mask("CapPrm:").unwrap_or(0),
            bounding: mask("CapBnd:").unwrap_or(0),
            seccomp: field("Seccomp:").and_then(|v| v.parse().ok()),
            seccomp_filters: field("Seccomp_filters:").and_then(|v| v.parse().ok()),
            user_namespace: !is_initial_map(uid_map),
            outside_groups: Vec::new(),
        }
    }

    /// Whether the process holds capability `bit` where the kernel checks it for zero-copy: in its
    /// effective set, and in the initial user namespace.
    pub(crate) fn counts(&self, bit: u32) -> bool {
        self.effective & (1 << bit) != 0 && !self.user_namespace
    }
}

/// Whether a `uid_map` (or `gid_map`) is the initial namespace's identity map.
fn is_initial_map(map: &str) -> bool {
    let fields: Vec<&str> = map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

/// The initial namespace's id for `id` of this namespace, through `map` (`inside outside count`
/// lines).
fn map_id(map: &str, id: u32) -> Option<u32> {
    map.lines().find_map(|line| {
        let mut f = line.split_whitespace().map(|v| v.parse::<u64>().ok());
        let (inside, outside, count) = (f.next()??, f.next()??, f.next()??);
        let id = u64::from(id);
        (id >= inside && id - inside < count)
            .then(|| u32::try_from(outside + (id - inside)).ok())
            .flatten()
    })
}

/// Names of the capabilities zcnet uses that `mask` holds, or `none`.
fn names(mask: u64) -> String {
    let held: Vec<&str> = CAPABILITIES
        .iter()
        .filter(|(bit, _, _)| mask & (1 << bit) != 0)
        .map(|(_, name, _)| *name)
        .collect();
    if held.is_empty() {
        "none".into()
    } else {
        held.join(" ")
    }
}

/// The rows: user namespace, container, capability sets, and one per capability zcnet uses.
pub(super) fn rows(facts: &ProcessFacts) -> Vec<Finding> {
    let mut out = vec![user_namespace(facts), container()];
    out.push(Finding::new(
        "process.capabilities",
        Support::Yes,
        format!(
            "of those zcnet uses: effective {}; permitted {}; bounding {}",
            names(facts.effective),
            names(facts.permitted),
            names(facts.bounding)
        ),
    ));
    out.extend(
        CAPABILITIES
            .iter()
            .map(|&(bit, name, what)| capability(facts, bit, name, what)),
    );
    out
}

fn user_namespace(facts: &ProcessFacts) -> Finding {
    if facts.user_namespace {
        Finding::new(
            "process.user_namespace",
            Support::Partial,
            "in a user namespace (uid_map is not the identity): its capabilities count only for \
             what the namespace owns, so CAP_IPC_LOCK does not exempt from RLIMIT_MEMLOCK, \
             CAP_SYS_ADMIN does not pass kernel.io_uring_disabled=1, and CAP_BPF loads no program; \
             CAP_NET_ADMIN and CAP_NET_RAW count on the namespace's own interfaces",
        )
    } else {
        Finding::new(
            "process.user_namespace",
            Support::Yes,
            "initial user namespace (uid_map 0 0 4294967295)",
        )
    }
}

/// Signs of a container runtime: the files Docker and Podman leave, Kubernetes' service account and
/// environment, and the runtime's name in `/proc/self/cgroup`.
fn container() -> Finding {
    let mut signs = Vec::new();
    for (path, what) in [
        ("/.dockerenv", "docker (/.dockerenv)"),
        ("/run/.containerenv", "podman (/run/.containerenv)"),
        (
            "/var/run/secrets/kubernetes.io",
            "kubernetes (/var/run/secrets/kubernetes.io)",
        ),
    ] {
        if Path::new(path).exists() {
            signs.push(what.to_string());
        }
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        signs.push("kubernetes (KUBERNETES_SERVICE_HOST)".into());
    }
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for runtime in ["docker", "containerd", "kubepods", "libpod", "crio"] {
        if cgroup.contains(runtime) {
            signs.push(format!("{runtime} in /proc/self/cgroup"));
        }
    }
    let reason = if signs.is_empty() {
        "no sign of a container".to_string()
    } else {
        format!("in a container: {}", signs.join(", "))
    };
    Finding::new("process.container", Support::Yes, reason)
}

fn capability(facts: &ProcessFacts, bit: u32, name: &str, what: &str) -> Finding {
    let feature = format!("cap.{}", name.to_lowercase());
    let has = |mask: u64| mask & (1 << bit) != 0;
    if has(facts.effective) && !facts.user_namespace {
        return Finding::new(&feature, Support::Yes, format!("effective: {what}"));
    }
    if has(facts.effective) {
        return Finding::new(
            &feature,
            Support::Partial,
            format!(
                "effective, but in a user namespace: counts only for what the namespace owns \
                 ({what})"
            ),
        );
    }
    let remedy = Remedy::capability(name);
    let why = if has(facts.bounding) {
        format!(
            "not effective, though in the bounding set: the process may gain it (run as root in \
             the container, or `setcap cap_{}+ep` on the binary for a non-root user); {remedy}",
            name.to_lowercase()
        )
    } else {
        format!("not in the bounding set: the container must add it; {remedy}")
    };
    Finding::new(&feature, Support::No, format!("needed for {what}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tzcnet\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\n\
                          CapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\n\
                          NoNewPrivs:\t0\nSeccomp:\t2\nSeccomp_filters:\t1\n";

    #[test]
    fn docker_default_capabilities_and_filter_read_from_status() {
        // Docker's default set (0xa80425fb) has NET_RAW, none of NET_ADMIN, BPF, IPC_LOCK,
        // SYS_ADMIN.
        let facts = ProcessFacts::parse(STATUS, "0 0 4294967295\n");
        assert_eq!(facts.seccomp, Some(2));
        assert_eq!(facts.seccomp_filters, Some(1));
        assert!(!facts.user_namespace);
        assert_eq!(names(facts.effective), "NET_RAW");
        let rows = rows(&facts);
        let row = |f: &str| rows.iter().find(|r| r.feature == f).unwrap().clone();
        assert_eq!(row("cap.net_raw").support, Support::Yes);
        let lock = row("cap.ipc_lock");
        assert_eq!(lock.support, Support::No);
        assert!(lock.reason.contains("--cap-add IPC_LOCK"), "{lock:?}");
        assert!(lock.reason.contains("add: [IPC_LOCK]"), "{lock:?}");
        assert!(lock.reason.contains("not in the bounding set"), "{lock:?}");
    }

    #[test]
    fn capabilities_in_a_user_namespace_do_not_count() {
        let facts = ProcessFacts::parse(
            "CapEff:\t000001ffffffffff\nCapPrm:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n",
            "         0       1000          1\n",
        );
        assert!(facts.user_namespace);
        assert!(!facts.counts(14));
        let rows = rows(&facts);
        let lock = rows.iter().find(|r| r.feature == "cap.ipc_lock").unwrap();
        assert_eq!(lock.support, Support::Partial, "{lock:?}");
    }

    #[test]
    fn group_ids_map_to_the_initial_namespace() {
        let map = "0 1000 1\n1 100000 65536\n";
        assert_eq!(map_id(map, 0), Some(1000));
        assert_eq!(map_id(map, 5), Some(100004));
        assert_eq!(map_id(map, 70000), None);
        assert_eq!(map_id("0 0 4294967295\n", 27), Some(27));
    }
}
