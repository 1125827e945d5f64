//! A locked-memory limit too small for the pool: registering it fails with ENOMEM and a reason that
//! names RLIMIT_MEMLOCK's value and what to raise; zero-copy sends whose pinned pages (charged to
//! the same limit) do not fit the process's locked-memory budget go out by copy (`copy_memlock`)
//! instead of being refused by the kernel, every byte delivered.
//!
//! The limit is lowered in a child process (`prlimit`), which as root also loses CAP_IPC_LOCK
//! (`setpriv`), since that capability exempts a process from the limit.

mod tx_common;
mod uring_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use tx_common::{pool, tcp_pair};
use uring_common::{config, send_sizes, send_zc_available};
use zcnet::tx::Mode;
use zcnet::uring::UringTcpSender;

const CHILD: &str = "ZCNET_URING_MEMLOCK_CHILD";
const LIMIT: u64 = 64 << 10;
const TEST: &str = "small_memlock_limit_gives_a_clear_error_and_the_copy_fallback";

/// A sender on `stream` (each try on a duplicate; the original closes on return). The kernel charges a ring's memory to the locked-memory
/// limit of its user (across all the user's processes), and releases the rings of an exited process
/// asynchronously: right after another test process's rings, `io_uring_setup` may fail with `ENOMEM`
/// under this small limit for a moment, so it is retried for up to 5 s.
fn sender_under_small_limit(stream: TcpStream) -> UringTcpSender {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let socket = stream.try_clone().unwrap();
        match UringTcpSender::new(socket, config(Mode::ZeroCopy)) {
            Ok(tx) => return tx,
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("io_uring under a {LIMIT}-byte limit: {e}"),
        }
    }
}

/// The checks, run in the child under the small limit.
fn under_small_limit() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink): (TcpStream, _) = tcp_pair(listener);
    let pool = pool(64 << 10, 16);
    let mut tx = sender_under_small_limit(stream);
    let refused = tx
        .register_pool(&pool)
        .expect_err("1 MiB cannot be pinned under 64 KiB");
    assert_eq!(refused.errno(), Some(libc::ENOMEM), "{refused}");
    let text = refused.to_string();
    for needle in [
        "IORING_REGISTER_BUFFERS",
        "RLIMIT_MEMLOCK (64 KiB)",
        "1024 KiB",
        "ulimit -l",
        "CAP_IPC_LOCK",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    println!("registration refused: {text}");
    let sent = send_sizes(&mut tx, &pool, &[64 << 10], 200, drop).expect("send");
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    assert_eq!(
        sink.join().unwrap(),
        sent,
        "bytes delivered differ from bytes sent"
    );
    assert_eq!(pool.available(), pool.capacity());
    println!("{stats:?}");
    // A 64 KiB send is charged 18 pages (72 KiB), more than the budget under a 64 KiB limit: each
    // is copied before the kernel could refuse it.
    assert!(stats.copy_memlock > 0, "{stats:?}");
    assert_eq!(stats.zc_calls, 0, "{stats:?}");
    assert_eq!(stats.enobufs, 0, "the kernel refused a send: {stats:?}");
    assert_eq!(stats.bytes, sent.len);
}

#[test]
fn small_memlock_limit_gives_a_clear_error_and_the_copy_fallback() {
    if std::env::var_os(CHILD).is_some() {
        under_small_limit();
        return;
    }
    if !send_zc_available(TEST) {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let memlock = format!("--memlock={LIMIT}:{LIMIT}");
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--bounding-set=-ipc_lock",
            "--inh-caps=-ipc_lock",
            "prlimit",
            &memlock,
        ]);
        c
    } else {
        let mut c = Command::new("prlimit");
        c.arg(&memlock);
        c
    };
    cmd.arg(&exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"]);
    let out = match cmd.env(CHILD, "1").output() {
        Ok(out) => out,
        Err(e) => {
            testnet::skip(
                TEST,
                &format!("cannot run setpriv/prlimit (util-linux): {e}"),
            );
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("child stdout:\n{stdout}\nchild stderr:\n{stderr}");
    assert!(
        out.status.success(),
        "the child under a {LIMIT}-byte memlock limit failed"
    );
    assert!(
        stdout.contains("registration refused"),
        "the child ran no check"
    );
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}
