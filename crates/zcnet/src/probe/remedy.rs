//! What to change so that a refused feature works, in the words of the two places a service's
//! confinement is usually set: `docker run` flags and a Kubernetes container's `securityContext`.

use std::fmt;

/// The Docker flags and the Kubernetes container settings that lift one refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remedy {
    /// `docker run` flags.
    pub docker: String,
    /// The container's settings in a pod spec (YAML flow style).
    pub kubernetes: String,
}

impl Remedy {
    /// A capability the container must add, `name` without its `CAP_` prefix.
    pub(crate) fn capability(name: &str) -> Remedy {
        Remedy {
            docker: format!("--cap-add {name}"),
            kubernetes: format!("securityContext: {{capabilities: {{add: [{name}]}}}}"),
        }
    }

    /// A seccomp profile allowing what zcnet needs (docs/containers.md has the fragment).
    pub(crate) fn seccomp_profile() -> Remedy {
        Remedy {
            docker: "--security-opt seccomp=zcnet-seccomp.json (the default profile plus the \
                     io_uring calls, docs/containers.md)"
                .into(),
            kubernetes: "securityContext: {seccompProfile: {type: Localhost, localhostProfile: \
                         profiles/zcnet-seccomp.json}}"
                .into(),
        }
    }

    /// Locked memory: the limit raised, or the capability that exempts from it.
    pub(crate) fn memlock() -> Remedy {
        Remedy {
            docker: "--ulimit memlock=-1:-1 (or --cap-add IPC_LOCK)".into(),
            kubernetes: "securityContext: {capabilities: {add: [IPC_LOCK]}} (no pod field sets \
                         ulimits: else the runtime's default, e.g. LimitMEMLOCK=infinity for \
                         containerd; neither works in a user namespace, as in rootless runtimes)"
                .into(),
        }
    }

    /// The cgroup's memory limit, which pinned pages count against.
    pub(crate) fn cgroup_memory() -> Remedy {
        Remedy {
            docker: "--memory <bytes> (larger)".into(),
            kubernetes: "resources: {limits: {memory: <bytes>}} (larger)".into(),
        }
    }

    /// A host sysctl: no container setting changes it; `group` adds the io_uring group when it is
    /// one.
    pub(crate) fn host_sysctl(setting: &str, group: Option<u32>) -> Remedy {
        match group {
            Some(gid) => Remedy {
                docker: format!(
                    "--group-add {gid} (kernel.io_uring_group), or on the host: {setting}"
                ),
                kubernetes: format!(
                    "securityContext: {{supplementalGroups: [{gid}]}} (kernel.io_uring_group), or on \
                     the node: {setting}"
                ),
            },
            None => Remedy {
                docker: format!("none (a host setting): on the host, {setting}"),
                kubernetes: format!("none (a node setting): on the node, {setting}"),
            },
        }
    }
}

impl fmt::Display for Remedy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "docker: {}; kubernetes: {}",
            self.docker, self.kubernetes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_reads_as_both_runtimes_spell_it() {
        assert_eq!(
            Remedy::capability("NET_RAW").to_string(),
            "docker: --cap-add NET_RAW; kubernetes: securityContext: {capabilities: {add: [NET_RAW]}}"
        );
    }
}
