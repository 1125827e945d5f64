//! Deciding whether a test can run, and saying so when it cannot: every skip goes through [`skip`].

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
        "vsock_seqpacket_loopback_zerocopy_delivers_every_byte",
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
        "no openvswitch module on the host; run in the guest suite (vm/run-suite ovs)",
    ),
    // The guest suite's nic run: virtio-net on Debian's 6.12 kernel never advertises AF_XDP
    // zero-copy (kernel-facts.md), so the XDP_ZEROCOPY bind is refused there by design; the copy-mode
    // AF_XDP checks of the same run still run.
    (
        "nic xdp-zerocopy-bind",
        "virtio-net on the guest's 6.12 kernel has no AF_XDP zero-copy",
    ),
];

/// Whether `ZCNET_PRIV_TESTS=1` demands that every test not on the allow-list runs.
fn runs_required() -> bool {
    std::env::var_os("ZCNET_PRIV_TESTS").is_some_and(|v| v == "1")
}

/// Whether this process may build topologies (it runs as root). When it may not, [`skip`]s `test`
/// with the reason and returns `false` (so under `ZCNET_PRIV_TESTS=1` it panics).
pub fn privileged(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    skip(
        test,
        "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces",
    );
    false
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
