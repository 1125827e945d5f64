//! Deciding whether a test can run, and saying so when it cannot: every skip goes through [`skip`].
//! What a normal user lacks: the capabilities to build topologies ([`privileged`]) and the exemption
//! from the locked-memory limit that zero-copy sends are charged to ([`memlock_budget`]).

use std::fs::{File, OpenOptions};

use rustix::fs::{FlockOperation, flock};
use rustix::process::{Resource, getrlimit};
use rustix::thread::{CapabilitySet, capabilities};

/// Tests that may skip even under `ZCNET_PRIV_TESTS=1`, each with the reason it is allowed. Anything
/// else that skips there fails: CI runs as root on this host's kernel, so a skip means a test that
/// silently stopped testing.
const MAY_SKIP: &[(&str, &str)] = &[
    // This host has AF_VSOCK but no vsock loopback transport (bind to VMADDR_CID_LOCAL is
    // EADDRNOTAVAIL; /work/shared/kernel-facts.md): the live vsock tests run in the guest suite
    // (vm/run-suite vsock), which loads vsock_loopback.
    (
        "vsock_stream_loopback_zerocopy_delivers_every_byte",
        "no vsock loopback transport on the host; run in the guest suite",
    ),
    (
        "vsock_seqpacket_loopback_zerocopy_mode_copies_every_message",
        "no vsock loopback transport on the host; run in the guest suite",
    ),
    (
        "vsock_stream_loopback_copy_and_auto",
        "no vsock loopback transport on the host; run in the guest suite",
    ),
    // This host's kernel has no openvswitch module (kernel-facts.md): the datapath tests run in the
    // guest suite (vm/run-suite ovs), whose 6.12 kernel loads it.
    (
        "ovs_local_port_upcalls_carry_every_byte_and_flows_turn_misses_into_hits",
        "no openvswitch module on the host; the guest suite's ovs run (vm/run-suite ovs) checks upcalls and hits on a NIC and a veth port",
    ),
    // The guest suite's nic run: virtio-net on Debian's 6.12 kernel never advertises AF_XDP
    // zero-copy (kernel-facts.md), so the XDP_ZEROCOPY bind is refused there by design; the copy-mode
    // AF_XDP checks of the same run still run.
    (
        "nic xdp-zerocopy-bind",
        "virtio-net on the guest's 6.12 kernel has no AF_XDP zero-copy",
    ),
    // This host's 6.18 has io_uring zero-copy receive but no device-less mode (ZCRX_REG_NODEV is
    // Linux 7.1; kernel-facts.md) and no NIC that takes a zcrx queue: device-less zcrx runs in the
    // guest suite's zcrx run (vm/run-suite zcrx) on the 7.3 backports kernel.
    (
        "zcrx_device_less_loopback_delivers_every_byte",
        "no device-less zcrx on the host's 6.18; the guest suite's zcrx run checks it on 7.3",
    ),
];

/// Whether `ZCNET_PRIV_TESTS=1` demands that every test not on the allow-list runs.
fn runs_required() -> bool {
    std::env::var_os("ZCNET_PRIV_TESTS").is_some_and(|v| v == "1")
}

/// The capabilities a topology needs: CAP_SYS_ADMIN (network namespaces), CAP_NET_ADMIN (links,
/// addresses, XDP attachment) and CAP_NET_RAW (AF_XDP and AF_PACKET sockets), with their names.
const TOPOLOGY_CAPS: [(CapabilitySet, &str); 3] = [
    (CapabilitySet::SYS_ADMIN, "CAP_SYS_ADMIN"),
    (CapabilitySet::NET_ADMIN, "CAP_NET_ADMIN"),
    (CapabilitySet::NET_RAW, "CAP_NET_RAW"),
];

/// This process's effective capabilities (none when they cannot be read).
fn effective_caps() -> CapabilitySet {
    capabilities(None).map_or(CapabilitySet::empty(), |sets| sets.effective)
}

/// Whether this process may build topologies: it holds CAP_SYS_ADMIN, CAP_NET_ADMIN and
/// CAP_NET_RAW in its effective set, as root does. When it may not, [`skip`]s `test` with the
/// missing capabilities and returns `false` (so under `ZCNET_PRIV_TESTS=1` it panics).
pub fn privileged(test: &str) -> bool {
    let caps = effective_caps();
    let missing: Vec<&str> = TOPOLOGY_CAPS
        .iter()
        .filter(|(cap, _)| !caps.contains(*cap))
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        return true;
    }
    skip(
        test,
        &format!(
            "needs root ({} missing) to create network namespaces",
            missing.join(", ")
        ),
    );
    false
}

/// The bytes of pages this process may have pinned at once by MSG_ZEROCOPY sends, io_uring buffer
/// registrations and AF_XDP UMEMs: `RLIMIT_MEMLOCK`'s soft limit, or `None` when the process is
/// exempt (it has CAP_IPC_LOCK, as root does) or the limit is unlimited.
///
/// The kernel charges each zero-copy send its pages plus two to the *user's* locked memory
/// (`mm_account_pinned_pages`: one count per uid, shared by all of the user's processes, checked
/// against the sending process's limit) until the send's completion, and refuses the send with
/// `ENOBUFS` past the limit. A test whose pinned bytes could exceed the budget sizes itself to it,
/// or says what it checks instead.
pub fn memlock_budget() -> Option<u64> {
    if effective_caps().contains(CapabilitySet::IPC_LOCK) {
        return None;
    }
    getrlimit(Resource::Memlock).current
}

/// A test's exclusive use of the user's locked-memory budget, held until dropped: see [`memlock_turn`].
#[derive(Debug)]
pub struct MemlockTurn {
    _lock: File,
}

/// Waits until no other test of this user holds the locked-memory budget, then holds it: tests that
/// pin many pages and check that zero-copy happened take turns, since the budget is the user's
/// (every process of the uid counts against it). `None`, at once, when this process is exempt from
/// the budget ([`memlock_budget`] is `None`). The turn is an exclusive `flock` on a per-user file in
/// the temporary directory, released when the [`MemlockTurn`] is dropped (or the process dies); the
/// file stays, for the next test to lock.
pub fn memlock_turn() -> Option<MemlockTurn> {
    memlock_budget()?;
    let path = std::env::temp_dir().join(format!(
        "zcnet-memlock-{}.lock",
        rustix::process::getuid().as_raw()
    ));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    flock(&file, FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("flock {}: {e}", path.display()));
    Some(MemlockTurn { _lock: file })
}

/// Says how `test` adapted to what this process lacks (`ADAPTED <test>: <how>`), on standard error
/// directly as [`skip`] does, so that a test checking less than it does as root always shows it.
pub fn adapted(test: &str, how: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "ADAPTED {test}: {how}");
}

/// Skips `test` for `reason`: prints `SKIP <test>: <reason>` — or, under `ZCNET_PRIV_TESTS=1`,
/// panics unless `test` is on the commented allow-list above. It writes to standard error directly
/// rather than through `eprintln!`, which the test harness captures and hides for passing tests: a
/// skip must always show.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    if runs_required() {
        match MAY_SKIP.iter().find(|(name, _)| *name == test) {
            Some((_, allowed)) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIP {test}: {reason} (allowed under ZCNET_PRIV_TESTS=1: {allowed})"
                );
                return;
            }
            None => panic!(
                "{test} cannot run: {reason}; ZCNET_PRIV_TESTS=1 requires it to (it is not on \
                 testnet's allow-list of tests that may skip)"
            ),
        }
    }
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {reason}");
}

#[cfg(test)]
mod tests {
    use super::MAY_SKIP;

    #[test]
    fn every_allowed_skip_names_a_test_and_a_reason() {
        for (name, why) in MAY_SKIP {
            assert!(!name.is_empty() && !why.is_empty());
            assert_eq!(
                MAY_SKIP.iter().filter(|(n, _)| n == name).count(),
                1,
                "{name}"
            );
        }
    }
}
