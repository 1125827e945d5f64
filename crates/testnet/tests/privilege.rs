//! What testnet says a process lacks, checked in a child of this test binary that lacks it: as root
//! the child runs under `setpriv` with the capabilities removed from its bounding set (root's
//! effective set after `execve` is the bounding set), as a normal user it lacks them anyway.
//! `privileged` skips naming the missing capabilities (root without them cannot build topologies
//! either), and `memlock_budget` is `RLIMIT_MEMLOCK` without CAP_IPC_LOCK and `None` with it.

use std::process::{Command, Output};

/// Set in the child: the helpers below then report; in a normal run they have nothing to do.
const CHILD: &str = "TESTNET_PRIVILEGE_CHILD";
/// The child's locked-memory limit (bytes).
const LIMIT: u64 = 512 << 10;

#[test]
fn child_reports_privilege() {
    if std::env::var_os(CHILD).is_some() {
        println!("privileged: {}", testnet::privileged("privilege_child"));
    }
}

#[test]
fn child_reports_memlock_budget() {
    if std::env::var_os(CHILD).is_some() {
        println!("memlock budget: {:?}", testnet::memlock_budget());
    }
}

/// Runs `test` of this binary in a child without the capabilities `caps` (setpriv syntax, e.g.
/// `-net_admin,-net_raw`) and with a locked-memory limit of [`LIMIT`]; `None` when util-linux's
/// `setpriv` or `prlimit` cannot be run (said with a SKIP line).
fn run_child(caller: &str, test: &str, caps: &str) -> Option<Output> {
    let limit = format!("--memlock={LIMIT}:{LIMIT}");
    let exe = std::env::current_exe().unwrap();
    // Only root may drop capabilities from its bounding set; a normal user has none to drop.
    let mut cmd = if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.arg(format!("--bounding-set={caps}"))
            .arg(format!("--inh-caps={caps}"))
            .arg("prlimit");
        c
    } else {
        Command::new("prlimit")
    };
    let ran = cmd
        .arg(&limit)
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("ZCNET_PRIV_TESTS")
        .output();
    match ran {
        Ok(out) => {
            assert!(out.status.success(), "child {test}: {out:?}");
            Some(out)
        }
        Err(e) => {
            testnet::skip(
                caller,
                &format!("cannot run setpriv/prlimit (util-linux): {e}"),
            );
            None
        }
    }
}

#[test]
fn without_the_capabilities_privileged_skips_naming_them() {
    let test = "without_the_capabilities_privileged_skips_naming_them";
    let Some(out) = run_child(
        test,
        "child_reports_privilege",
        "-sys_admin,-net_admin,-net_raw",
    ) else {
        return;
    };
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("privileged: false"), "{stdout}");
    assert!(
        stderr.contains(
            "SKIP privilege_child: needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW missing)"
        ),
        "{stderr}"
    );
}

#[test]
fn memlock_budget_is_the_limit_without_cap_ipc_lock() {
    let test = "memlock_budget_is_the_limit_without_cap_ipc_lock";
    let Some(out) = run_child(test, "child_reports_memlock_budget", "-ipc_lock") else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("memlock budget: Some({LIMIT})")),
        "{stdout}"
    );
}

#[test]
fn root_is_exempt_from_the_memlock_budget() {
    if !rustix::process::geteuid().is_root() {
        testnet::skip(
            "root_is_exempt_from_the_memlock_budget",
            "needs root (CAP_IPC_LOCK) to be exempt",
        );
        return;
    }
    assert_eq!(testnet::memlock_budget(), None);
}
