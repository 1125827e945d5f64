//! AF_VSOCK findings: the local context id, the transports loaded, and whether a loopback transport
//! exists (decided by a bind, never by connecting).

use super::{Finding, Support};
use crate::sys;

/// AF_VSOCK: this host's context id, its transports, and whether a loopback transport exists
/// (decided by a bind, never by connecting).
pub(super) fn vsock() -> Vec<Finding> {
    let cid = Finding::from_result("vsock.local_cid", sys::vsock::local_cid(), |c| {
        format!("CID {c}")
    });
    const TRANSPORTS: [(&str, &str); 5] = [
        ("vsock_loopback", "loopback"),
        ("vmw_vsock_virtio_transport", "virtio (guest)"),
        ("vhost_vsock", "vhost (host)"),
        ("hv_sock", "hyper-v"),
        ("vmw_vsock_vmci_transport", "vmci"),
    ];
    let loaded: Vec<&str> = TRANSPORTS
        .iter()
        .filter(|(module, _)| std::path::Path::new(&format!("/sys/module/{module}")).exists())
        .map(|(_, name)| *name)
        .collect();
    let loopback = match sys::vsock::loopback_available() {
        Ok(()) => Finding::new(
            "vsock.loopback",
            Support::Yes,
            "bind to VMADDR_CID_LOCAL succeeded",
        ),
        Err(reason) => Finding::new("vsock.loopback", Support::No, reason),
    };
    let transports = if loaded.is_empty() {
        Finding::new(
            "vsock.transports",
            Support::No,
            "no vsock transport module loaded",
        )
    } else {
        Finding::new("vsock.transports", Support::Yes, loaded.join(", "))
    };
    vec![cid, transports, loopback]
}
