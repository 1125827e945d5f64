//! Under `ZCNET_PRIV_TESTS=1` a skip fails unless the test is on testnet's allow-list: checked by
//! running this test binary again as a child, with the variable set, on one helper test each way.

use std::process::Command;

/// Set in the child: the helpers below then skip; in a normal run they have nothing to do.
const CHILD: &str = "TESTNET_SKIP_POLICY_CHILD";

#[test]
fn child_skips_a_test_not_on_the_allow_list() {
    if std::env::var_os(CHILD).is_some() {
        testnet::skip("a_test_not_on_the_allow_list", "what it needs is missing");
    }
}

#[test]
fn child_skips_an_allowed_test() {
    if std::env::var_os(CHILD).is_some() {
        testnet::skip(
            "vsock_stream_loopback_copy_and_auto",
            "no vsock loopback transport",
        );
    }
}

/// Runs one helper in a child with `ZCNET_PRIV_TESTS=1`; returns whether it passed and its stderr.
fn run_child(test: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("ZCNET_PRIV_TESTS", "1")
        .env(CHILD, "1")
        .output()
        .expect("run the test binary again");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_skip_not_on_the_allow_list_fails_under_priv_tests() {
    let (passed, stderr) = run_child("child_skips_a_test_not_on_the_allow_list");
    assert!(
        !passed,
        "the skip passed under ZCNET_PRIV_TESTS=1: {stderr}"
    );
    assert!(stderr.contains("allow-list"), "{stderr}");

    let (passed, stderr) = run_child("child_skips_an_allowed_test");
    assert!(passed, "an allowed skip failed: {stderr}");
    assert!(
        stderr.contains("SKIP vsock_stream_loopback_copy_and_auto"),
        "{stderr}"
    );
}
