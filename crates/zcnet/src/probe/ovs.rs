//! The Open vSwitch datapath: whether the kernel offers its generic netlink family, and whether this
//! process may use it. Read-only: nothing is created.

use super::{Finding, Support, refusal};
use crate::sys;

/// `CAP_NET_ADMIN`'s bit in the capability sets (include/uapi/linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;

/// Whether the effective capability set of this process holds `cap` (from /proc/self/status).
fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|eff| eff & (1 << cap) != 0)
}

/// Whether the running kernel ships the openvswitch module (loadable, or built in).
fn module_available() -> bool {
    let Ok(release) = sys::socket::kernel_release() else {
        return false;
    };
    let base = format!("/lib/modules/{release}");
    let builtin = std::fs::read_to_string(format!("{base}/modules.builtin"))
        .is_ok_and(|s| s.contains("/openvswitch.ko"));
    let loadable = std::fs::read_dir(format!("{base}/kernel/net/openvswitch"))
        .map(|dir| {
            dir.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("openvswitch.ko")
            })
        })
        .unwrap_or(false);
    builtin || loadable
}

/// The `ovs.datapath` row.
pub(super) fn datapath() -> Finding {
    const ROW: &str = "ovs.datapath";
    let family =
        sys::netlink::GenlSocket::open().and_then(|mut s| s.family_id(sys::ovs::DATAPATH_FAMILY));
    match family {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            let why = if module_available() {
                "module not loaded (modprobe openvswitch)"
            } else {
                "this kernel has no openvswitch module"
            };
            Finding::new(ROW, Support::No, format!("no ovs_datapath family: {why}"))
        }
        Err(e) => Finding::new(ROW, Support::No, refusal(&e)),
        Ok(id) if !has_capability(CAP_NET_ADMIN) => Finding::new(
            ROW,
            Support::No,
            format!(
                "ovs_datapath family present (id {id}), but no CAP_NET_ADMIN to create datapaths"
            ),
        ),
        Ok(id) => match crate::ovs::datapaths() {
            Ok(dps) => Finding::new(
                ROW,
                Support::Yes,
                format!(
                    "ovs_datapath family present (id {id}), CAP_NET_ADMIN held, {} datapath(s)",
                    dps.len()
                ),
            ),
            Err(e) => Finding::new(ROW, Support::No, e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_says_why_when_the_family_is_absent() {
        let row = datapath();
        assert_eq!(row.feature, "ovs.datapath");
        let present = sys::netlink::GenlSocket::open()
            .and_then(|mut s| s.family_id(sys::ovs::DATAPATH_FAMILY))
            .is_ok();
        if present {
            assert!(row.reason.contains("family present"), "{row:?}");
        } else {
            assert_eq!(row.support, Support::No);
            assert!(row.reason.contains("no ovs_datapath family: "), "{row:?}");
        }
    }

    #[test]
    fn root_holds_cap_net_admin() {
        if sys::socket::effective_uid() == 0 {
            assert!(has_capability(CAP_NET_ADMIN));
        }
        assert!(!has_capability(63), "no process holds capability 63");
    }
}
