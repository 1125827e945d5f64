//! The io_uring path under a small locked-memory limit. A limit too small for the pool:
//! registering it fails with ENOMEM and a reason that names RLIMIT_MEMLOCK's value and what to
//! raise; zero-copy sends whose pinned pages (charged to the same limit) do not fit the process's
//! locked-memory budget go out by copy (`copy_memlock`) instead of being refused by the kernel,
//! every byte delivered. A limit of 0, which leaves no room for the ring itself: the sender falls
//! back to the sendmsg path, says why (`path_status`: `io_uring_setup`, ENOMEM, RLIMIT_MEMLOCK), and
//! still delivers every byte.
//!
//! The limit is lowered in a child process (`prlimit`), which as root also loses CAP_IPC_LOCK
//! (`setpriv`), since that capability exempts a process from the limit.

mod tx_common;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use tx_common::{io_uring_available, path_config, pool, send_sizes, tcp_pair};
use zcnet::tx::{Mode, SendPath, Sender, TcpSender};

const CHILD: &str = "ZCNET_URING_MEMLOCK_CHILD";
const LIMIT: u64 = 64 << 10;
const TEST: &str = "small_memlock_limit_gives_a_clear_error_and_the_copy_fallback";
const NO_RING_TEST: &str = "no_room_for_a_ring_falls_back_to_sendmsg_and_says_why";

/// An io_uring sender on `stream` (each try on a duplicate; the original closes on return). The
/// kernel charges a ring's memory to the locked-memory limit of its user (across all the user's
/// processes), and releases the rings of an exited process asynchronously: right after another
/// test process's rings, `io_uring_setup` may fail with `ENOMEM` under this small limit for a
/// moment, so it is retried for up to 5 s.
fn sender_under_small_limit(stream: TcpStream) -> TcpSender {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let socket = stream.try_clone().unwrap();
        let tx = Sender::new(socket, path_config(SendPath::IO_URING, Mode::ZeroCopy));
        match tx.path_status() {
            Ok(()) => return tx,
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
    assert_eq!(refused.raw_os_error(), Some(libc::ENOMEM), "{refused}");
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
    let sent = send_sizes(&mut tx, &pool, &[64 << 10], 200, |tx, b| tx.send(b));
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

/// The checks, run in the child under a limit of 0: no ring fits, the sender sends on the sendmsg
/// path (copying: the pages of a zero-copy send do not fit either), and says why.
fn without_room_for_a_ring() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (stream, sink): (TcpStream, _) = tcp_pair(listener);
    let pool = pool(64 << 10, 4);
    let mut tx = Sender::new(stream, path_config(SendPath::IO_URING, Mode::ZeroCopy));
    let why = tx.path_status().expect_err("no ring fits in 0 bytes");
    assert_eq!(why.raw_os_error(), Some(libc::ENOMEM), "{why}");
    assert!(
        matches!(tx.path(), SendPath::Sendmsg { .. }),
        "{:?}",
        tx.path()
    );
    let text = why.to_string();
    // The path is checked above: the reason says what refused the ring and what to do.
    for needle in ["io_uring_setup", "RLIMIT_MEMLOCK"] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    println!("fell back: {text}");
    let sent = send_sizes(&mut tx, &pool, &tx_common::STREAM_SIZES, 50, |tx, b| {
        tx.send(b)
    });
    tx.flush(Duration::from_secs(20)).expect("flush");
    let stats = tx.stats().clone();
    drop(tx.close(Duration::from_secs(1)).expect("close"));
    tx_common::assert_stream_delivered(sink, sent, &pool, &stats);
}

#[test]
fn small_memlock_limit_gives_a_clear_error_and_the_copy_fallback() {
    under_limit(TEST, LIMIT, under_small_limit, "registration refused");
}

#[test]
fn no_room_for_a_ring_falls_back_to_sendmsg_and_says_why() {
    under_limit(NO_RING_TEST, 0, without_room_for_a_ring, "fell back");
}

/// Test `test`: in the child process run for it, `checks`; in the parent, the child under a
/// locked-memory limit of `limit` bytes (see [`in_child`]). A child run for another test does
/// nothing.
fn under_limit(test: &str, limit: u64, checks: fn(), ran: &str) {
    match std::env::var(CHILD) {
        Ok(child) if child == test => checks(),
        Ok(_) => {}
        Err(_) if io_uring_available(test) => in_child(test, limit, ran),
        Err(_) => {}
    }
}

/// Runs `test` again in a child process under a locked-memory limit of `limit` bytes, without
/// CAP_IPC_LOCK; the child must succeed and print `ran`.
fn in_child(test: &str, limit: u64, ran: &str) {
    let exe = std::env::current_exe().unwrap();
    let memlock = format!("--memlock={limit}:{limit}");
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
        .args([test, "--exact", "--nocapture", "--test-threads=1"]);
    let out = match cmd.env(CHILD, test).output() {
        Ok(out) => out,
        Err(e) => {
            testnet::skip(
                test,
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
        "the child under a {limit}-byte memlock limit failed"
    );
    assert!(stdout.contains(ran), "the child ran no check");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}
