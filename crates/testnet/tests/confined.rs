//! zcnet run as a service would be: under a seccomp filter that refuses io_uring as Docker's default
//! profile does (`testnet-seccomp`), in a user namespace (`unshare -U -r`, as rootless containers
//! run), and as a throwaway user with no capabilities (`setpriv`). In each, an io_uring sender over
//! TCP loopback still delivers every byte (falling back to sendmsg where io_uring is refused, saying
//! who refused it), and `zcnet::probe` names the constraint and its remedy.
//!
//! Each test runs itself again in a child process built under its constraint (the child does the
//! checks, selected by `ZCNET_CONFINED_CHILD`); building those needs root, so as a normal user the
//! tests skip with the reason.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use zcnet::probe::{Finding, ProbeOptions, Support, probe};
use zcnet::tx::{MemlockBudget, Mode, SendPath, Sender, SenderConfig};

const CHILD: &str = "ZCNET_CONFINED_CHILD";
const SECCOMP: &str =
    "an_io_uring_sender_under_a_seccomp_filter_falls_back_and_delivers_every_byte";
const SECCOMP_ENOSYS: &str =
    "a_filter_answering_enosys_is_named_as_the_filter_not_as_a_kernel_without_io_uring";
const SECCOMP_KILL: &str = "a_probe_under_a_filter_that_kills_survives_and_names_it";
const USERNS: &str =
    "an_io_uring_sender_in_a_user_namespace_delivers_every_byte_within_the_memlock_limit";
const NOCAPS: &str = "an_io_uring_sender_as_a_user_without_capabilities_delivers_every_byte";

/// Bytes sent: 64 KiB sends, more than the 8 MiB locked-memory limit a confined process meets.
const SENDS: usize = 256;
const SEND: usize = 64 << 10;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8 ^ (i / 65_521) as u8
}

/// Sends [`SENDS`] x [`SEND`] bytes over TCP loopback with an io_uring sender and checks every byte
/// arrived in order; returns the sender's path status (as text, `None` when io_uring was used; when
/// it is not, the sender is on sendmsg).
fn send_over_loopback() -> Option<String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let total = SENDS * SEND;
    let sink = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut got = Vec::with_capacity(total);
        stream.read_to_end(&mut got).unwrap();
        got
    });
    let stream = TcpStream::connect(addr).unwrap();
    let mut config = SenderConfig::with_mode(Mode::ZeroCopy);
    config.path = SendPath::IO_URING;
    let mut tx = Sender::new(stream, config);
    let status = tx.path_status().err().map(|f| f.to_string());
    println!("path {:?}, status {status:?}", tx.path());
    assert_eq!(
        status.is_some(),
        tx.path() != SendPath::IO_URING,
        "a refused ring leaves the sender on sendmsg, saying why"
    );
    for k in 0..SENDS {
        let buf: Vec<u8> = (k * SEND..(k + 1) * SEND).map(pattern).collect();
        tx.send(buf).expect("send");
    }
    tx.flush(Duration::from_secs(30)).expect("flush");
    println!("{:?}", tx.stats());
    drop(tx.close(Duration::from_secs(5)).expect("close"));
    let got = sink.join().unwrap();
    assert_eq!(got.len(), total, "bytes received");
    if let Some(i) = (0..total).find(|&i| got[i] != pattern(i)) {
        panic!("byte {i} differs");
    }
    println!("delivered {total} bytes intact");
    status
}

fn rows() -> Vec<Finding> {
    let rows = probe(&{
        let mut opts = ProbeOptions::default();
        opts.ifaces = Some(vec!["lo".into()]);
        opts.try_xsk_bind = false;
        opts
    });
    for r in &rows {
        println!(
            "ROW {:<28} {:<8} {}",
            r.feature,
            r.support.to_string(),
            r.reason
        );
    }
    rows
}

fn row<'a>(rows: &'a [Finding], feature: &str) -> &'a Finding {
    rows.iter()
        .find(|r| r.feature == feature)
        .unwrap_or_else(|| panic!("no {feature} row"))
}

fn assert_says(f: &Finding, support: Support, needles: &[&str]) {
    assert_eq!(f.support, support, "{f:?}");
    for n in needles {
        assert!(f.reason.contains(n), "{n:?} missing from {f:?}");
    }
}

/// Under a filter answering `EPERM`, as Docker's default profile does.
fn under_seccomp() {
    filtered("EPERM");
}

/// Under a filter answering `ENOSYS`, as Podman's default profile does: this kernel shows it has
/// io_uring, so the answer is the filter's.
fn under_seccomp_enosys() {
    filtered("ENOSYS");
}

/// Under the filter: the io_uring calls are refused by it (with `errno`), the sender falls back to
/// sendmsg naming it, the probe's rows say seccomp and give both remedies.
fn filtered(errno: &str) {
    let rows = rows();
    assert_says(row(&rows, "seccomp"), Support::Partial, &["Seccomp: 2"]);
    for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
        assert_says(
            row(&rows, &format!("syscall.{call}")),
            Support::No,
            &[
                "a seccomp filter refuses",
                errno,
                "--security-opt seccomp=",
                "seccompProfile",
            ],
        );
    }
    assert_says(
        row(&rows, "syscall.bpf"),
        Support::Yes,
        &["reaches the kernel"],
    );
    assert_says(
        row(&rows, "io_uring.send_zc"),
        Support::No,
        &["seccomp filter"],
    );
    for r in &rows {
        assert!(
            !(r.feature.contains("io_uring")
                && (r.reason.contains("not supported") || r.reason.contains("has no"))),
            "a filter's refusal reads as a missing feature: {r:?}"
        );
    }
    let why = send_over_loopback().expect("io_uring is refused: the sender falls back");
    for n in [&format!("io_uring_setup: {errno}"), "seccomp filter"] {
        assert!(
            why.contains(n),
            "{n:?} missing from the fallback reason: {why}"
        );
    }
}

/// Under a filter that kills a process calling io_uring: the probe tries each call in a child, so
/// it survives, names the filter, and does not make the call itself.
fn under_killing_seccomp() {
    let rows = rows();
    for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
        assert_says(
            row(&rows, &format!("syscall.{call}")),
            Support::No,
            &[
                "a seccomp filter kills a process calling",
                "--security-opt seccomp=",
            ],
        );
    }
    assert_says(
        row(&rows, "io_uring.send_zc"),
        Support::No,
        &["not tried", "seccomp filter kills"],
    );
}

/// In a user namespace as its root: every capability is held but counts only inside it, so the
/// locked-memory limit applies; io_uring works (the sysctl lets everyone use it here).
fn in_user_namespace() {
    let rows = rows();
    assert_says(
        row(&rows, "process.user_namespace"),
        Support::Partial,
        &["in a user namespace", "CAP_IPC_LOCK does not exempt"],
    );
    assert_says(
        row(&rows, "cap.ipc_lock"),
        Support::Partial,
        &["user namespace"],
    );
    assert!(
        MemlockBudget::global().limit().is_some(),
        "CAP_IPC_LOCK in a user namespace exempts from nothing"
    );
    assert!(!row(&rows, "limit.memlock").reason.contains("exempt"));
    assert_eq!(send_over_loopback(), None, "io_uring is allowed here");
}

/// As nobody with no capabilities: each capability row says which flag adds it; io_uring works.
fn without_capabilities() {
    let rows = rows();
    assert_says(
        row(&rows, "process.capabilities"),
        Support::Yes,
        &["effective none; permitted none; bounding none"],
    );
    for (feature, cap) in [
        ("cap.net_raw", "NET_RAW"),
        ("cap.ipc_lock", "IPC_LOCK"),
        ("cap.bpf", "BPF"),
    ] {
        assert_says(
            row(&rows, feature),
            Support::No,
            &[
                "not in the bounding set",
                &format!("--cap-add {cap}"),
                &format!("capabilities: {{add: [{cap}]}}"),
            ],
        );
    }
    assert_says(
        row(&rows, "xdp.socket"),
        Support::No,
        &["EPERM", "--cap-add NET_RAW"],
    );
    assert!(MemlockBudget::global().limit().is_some());
    assert_eq!(send_over_loopback(), None, "io_uring is allowed here");
}

/// Runs `test`'s `checks` in the child; in the parent, the child under `wrapper`.
fn confined(test: &str, checks: fn(), wrapper: &[&str]) {
    match std::env::var(CHILD) {
        Ok(child) if child == test => {
            checks();
            println!("confined checks done");
            return;
        }
        Ok(_) => return,
        Err(_) => {}
    }
    if !rustix::process::getuid().is_root() {
        testnet::skip(
            test,
            "building the confined child (another uid with setpriv, a user namespace mapping \
             root with unshare -U -r) needs root",
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", wrapper[0]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("child stdout:\n{stdout}\nchild stderr:\n{stderr}");
    assert!(out.status.success(), "the confined child failed");
    assert!(
        stdout.contains("confined checks done") && stdout.contains("1 passed"),
        "the child ran no check"
    );
}

#[test]
fn an_io_uring_sender_under_a_seccomp_filter_falls_back_and_delivers_every_byte() {
    confined(
        SECCOMP,
        under_seccomp,
        &[env!("CARGO_BIN_EXE_testnet-seccomp"), "--"],
    );
}

#[test]
fn a_filter_answering_enosys_is_named_as_the_filter_not_as_a_kernel_without_io_uring() {
    confined(
        SECCOMP_ENOSYS,
        under_seccomp_enosys,
        &[env!("CARGO_BIN_EXE_testnet-seccomp"), "--errno", "38", "--"],
    );
}

#[test]
fn a_probe_under_a_filter_that_kills_survives_and_names_it() {
    confined(
        SECCOMP_KILL,
        under_killing_seccomp,
        &[env!("CARGO_BIN_EXE_testnet-seccomp"), "--kill", "--"],
    );
}

#[test]
fn an_io_uring_sender_in_a_user_namespace_delivers_every_byte_within_the_memlock_limit() {
    confined(USERNS, in_user_namespace, &["unshare", "-U", "-r"]);
}

#[test]
fn an_io_uring_sender_as_a_user_without_capabilities_delivers_every_byte() {
    confined(
        NOCAPS,
        without_capabilities,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ],
    );
}
