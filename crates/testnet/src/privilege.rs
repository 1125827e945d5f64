//! Deciding whether a test that needs root can run, and saying so when it cannot.

/// Whether this process may build topologies (it runs as root). When it may not, prints
/// `SKIP <test>: …` with the reason and returns `false` — unless `ZCNET_PRIV_TESTS=1` is set, in which
/// case a privileged test that cannot run is a failure and this panics.
pub fn privileged(test: &str) -> bool {
    if zcnet::sys::socket::effective_uid() == 0 {
        return true;
    }
    let reason = "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces";
    if std::env::var_os("ZCNET_PRIV_TESTS").is_some_and(|v| v == "1") {
        panic!("{test}: {reason}, and ZCNET_PRIV_TESTS=1 requires privileged tests to run");
    }
    skip(test, reason);
    false
}

/// Prints that `test` is skipped and why. It writes to standard error directly rather than through
/// `eprintln!`, which the test harness captures and hides for passing tests: a skip must always show.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {reason}");
}
