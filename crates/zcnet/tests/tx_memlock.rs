//! Zero-copy senders under a locked-memory limit: 256 TCP connections over loopback in a child
//! process with RLIMIT_MEMLOCK 4 MiB and without CAP_IPC_LOCK (root drops it from its bounding set
//! with setpriv). The process-wide budget (`zcnet::tx::MemlockBudget`) keeps the pages pinned by
//! zero-copy sends under the limit: once it is spent, sends are copied (`copy_memlock`, whose reason
//! names the limit and the remedy); once the loans drain, sends go zero-copy again. Every byte arrives
//! and is verified. Then io_uring senders, with the budget held all but one page by the test (as
//! another user of the process's locked memory would): every send is copied, and after the test lets
//! go, sends go zero-copy again. Last, a sender dropped with zero-copy sends still lent gives their
//! charges back to the budget, on both paths.

mod tx_common;

use std::net::{Shutdown, TcpListener};
use std::process::Command;
use std::time::Duration;

use tx_common::{Checksum, fill, path_config, sender_config, tcp_pair};
use zcnet::tx::{MemlockBudget, Mode, SendPath, TcpSender, TxStats, memlock_reason};

/// Set in the child process, which runs the senders under the lowered limit.
const CHILD: &str = "ZCNET_TX_MEMLOCK_CHILD";
const LIMIT_KIB: u64 = 4096;
const CONNECTIONS: usize = 256;
const SEND: usize = 64 << 10;
/// Sends per connection in each phase: the first phase's sends need far more locked memory than the
/// limit (each charges 18 pages: 2048 × 72 KiB against 4 MiB) and no sender drains in it on its
/// own (its `drain_every` is not reached), so the budget is spent.
const ROUNDS: usize = 8;

#[test]
fn senders_keep_to_the_locked_memory_budget_and_resume_zero_copy() {
    if std::env::var_os(CHILD).is_some() {
        child();
        uring_child();
        return dropped_senders_give_their_charges_back();
    }
    let script = format!(r#"ulimit -l {LIMIT_KIB} && exec "$0" "$@""#);
    let exe = std::env::current_exe().unwrap();
    let mut cmd = if rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set=-ipc_lock", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    let out = cmd
        .arg(exe)
        .args([
            "--exact",
            "senders_keep_to_the_locked_memory_budget_and_resume_zero_copy",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("run the test binary under the lowered limit");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(out.status.success(), "the child failed: {stderr}");
    assert!(stdout.contains("MEMLOCK-RUN"), "the child ran no senders");
}

/// The sum of the stats of every sender.
fn total(txs: &[TcpSender], field: fn(&TxStats) -> u64) -> u64 {
    txs.iter().map(|tx| field(tx.stats())).sum()
}

/// Sends `ROUNDS` buffers on every connection, round-robin, each the pattern at its stream position:
/// `send(k, buf)` sends on connection `k`.
fn rounds(sent: &mut [Checksum], mut send: impl FnMut(usize, Vec<u8>)) {
    for _ in 0..ROUNDS {
        for (k, sum) in sent.iter_mut().enumerate() {
            let mut buf = vec![0u8; SEND];
            fill(&mut buf, sum.len);
            sum.update(&buf);
            send(k, buf);
        }
    }
}

fn phase(txs: &mut [TcpSender], sent: &mut [Checksum]) {
    rounds(sent, |k, buf| txs[k].send(buf).expect("send"));
}

fn child() {
    let budget = MemlockBudget::global();
    assert_eq!(
        budget.limit(),
        Some(LIMIT_KIB << 10),
        "the lowered limit applies"
    );
    let reason = memlock_reason();
    for needle in ["RLIMIT_MEMLOCK (4096 KiB here", "ulimit -l", "CAP_IPC_LOCK"] {
        assert!(reason.contains(needle), "{needle:?} missing: {reason}");
    }
    let (mut txs, mut sinks) = (Vec::new(), Vec::new());
    for _ in 0..CONNECTIONS {
        let (stream, sink) = tcp_pair(TcpListener::bind("127.0.0.1:0").unwrap());
        txs.push(TcpSender::new(stream, sender_config(Mode::ZeroCopy)));
        sinks.push(sink);
    }
    let mut sent = vec![Checksum::default(); CONNECTIONS];

    phase(&mut txs, &mut sent);
    let zc_first = total(&txs, |s| s.zc_calls);
    let memlock_first = total(&txs, |s| s.copy_memlock);
    assert!(zc_first > 0, "no zero-copy send within the budget");
    assert!(memlock_first > 0, "the budget was never spent");

    // The loans drain: every charge returns to the budget.
    for tx in &mut txs {
        tx.flush(Duration::from_secs(30)).expect("flush");
    }
    assert_eq!(budget.in_use(), 0, "charges left after every loan drained");

    phase(&mut txs, &mut sent);
    let zc_second = total(&txs, |s| s.zc_calls) - zc_first;
    assert!(
        zc_second > 0,
        "zero-copy did not resume after the loans drained"
    );

    let stats = |field| total(&txs, field);
    println!(
        "MEMLOCK-RUN connections {CONNECTIONS} limit {LIMIT_KIB} KiB usable {} KiB: \
         phase 1 zc_calls {zc_first} copy_memlock {memlock_first}; phase 2 zc_calls {zc_second}; \
         total calls {} copy_memlock {} enobufs {} copy_enobufs {}",
        budget.usable().unwrap_or(0) >> 10,
        stats(|s| s.calls),
        stats(|s| s.copy_memlock),
        stats(|s| s.enobufs),
        stats(|s| s.copy_enobufs),
    );
    for ((tx, sink), sum) in txs.into_iter().zip(sinks).zip(sent) {
        let stream = tx.close(Duration::from_secs(30)).expect("close");
        stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(sink.join().expect("sink"), sum, "bytes lost or changed");
    }
    assert_eq!(budget.in_use(), 0);
}

/// io_uring connections (each has a ring of its own).
const URING_CONNECTIONS: usize = 16;

/// Sends `ROUNDS` buffers on every io_uring connection, round-robin, and waits until every
/// notification came back.
fn uring_phase(txs: &mut [TcpSender], sent: &mut [Checksum]) {
    rounds(sent, |k, buf| txs[k].send(buf).expect("send"));
    for tx in txs.iter_mut() {
        tx.flush(Duration::from_secs(30)).expect("flush");
    }
}

fn io_uring_sender(stream: std::net::TcpStream) -> TcpSender {
    let tx = TcpSender::new(stream, path_config(SendPath::IO_URING, Mode::ZeroCopy));
    tx.path_status().expect("an io_uring sender");
    tx
}

fn uring_child() {
    let budget = MemlockBudget::global();
    let usable = budget.usable().expect("a limited budget");
    let (mut txs, mut sinks) = (Vec::new(), Vec::new());
    for _ in 0..URING_CONNECTIONS {
        let (stream, sink) = tcp_pair(TcpListener::bind("127.0.0.1:0").unwrap());
        txs.push(io_uring_sender(stream));
        sinks.push(sink);
    }
    let mut sent = vec![Checksum::default(); URING_CONNECTIONS];
    let zc = |txs: &[TcpSender]| txs.iter().map(|t| t.stats().zc_calls).sum::<u64>();
    let memlock = |txs: &[TcpSender]| txs.iter().map(|t| t.stats().copy_memlock).sum::<u64>();

    // All but one page of the budget held elsewhere: no 64 KiB send (18 pages) fits.
    let held = budget
        .try_charge(usable as usize - 3 * 4096)
        .expect("the budget is free");
    assert!(usable - budget.in_use() < budget.pages_for(SEND));
    uring_phase(&mut txs, &mut sent);
    assert_eq!(zc(&txs), 0, "a zero-copy send beyond the budget");
    let copied = memlock(&txs);
    // Counted per request, which may gather several buffers of a stream.
    assert!(
        copied >= URING_CONNECTIONS as u64,
        "{copied} copied requests"
    );
    fixed_sends_take_nothing_from_the_budget();
    drop(held);

    uring_phase(&mut txs, &mut sent);
    let resumed = zc(&txs);
    assert!(
        resumed > 0,
        "zero-copy did not resume once the budget was free"
    );
    println!(
        "MEMLOCK-RUN io_uring connections {URING_CONNECTIONS}: budget held: copy_memlock \
         {copied}; released: zc_calls {resumed}, enobufs {}",
        txs.iter().map(|t| t.stats().enobufs).sum::<u64>()
    );
    for ((tx, sink), sum) in txs.into_iter().zip(sinks).zip(sent) {
        let stream = tx.close(Duration::from_secs(30)).expect("close");
        stream.shutdown(Shutdown::Write).unwrap();
        assert_eq!(sink.join().expect("sink"), sum, "bytes lost or changed");
    }
    assert_eq!(budget.in_use(), 0);
}

/// While the budget is held: sends from a pool registered with the ring (fixed sends, whose pages
/// the registration pinned and charged already) go zero-copy all the same and charge nothing, and
/// every byte arrives.
fn fixed_sends_take_nothing_from_the_budget() {
    let budget = MemlockBudget::global();
    let (stream, sink) = tcp_pair(TcpListener::bind("127.0.0.1:0").unwrap());
    let pool = tx_common::pool(SEND, 8);
    let mut tx = io_uring_sender(stream);
    tx.register_pool(&pool)
        .expect("512 KiB registered under the 4 MiB limit");
    let in_use = budget.in_use();
    let mut sent = Checksum::default();
    for _ in 0..ROUNDS * 4 {
        let mut buf = tx_common::take(&pool, &mut tx);
        sent.fill_next(&mut buf, SEND);
        tx.send(buf).expect("send");
        assert_eq!(budget.in_use(), in_use, "a fixed send charged the budget");
    }
    tx.flush(Duration::from_secs(30)).expect("flush");
    let stats = tx.stats().clone();
    assert_eq!(stats.copy_memlock, 0, "{stats:?}");
    assert_eq!(stats.zc_calls, stats.calls, "{stats:?}");
    println!(
        "MEMLOCK-RUN io_uring fixed sends with the budget held: zc_calls {}",
        stats.zc_calls
    );
    let stream = tx.close(Duration::from_secs(30)).expect("close");
    stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(sink.join().expect("sink"), sent, "bytes lost or changed");
}

/// A sender dropped with zero-copy sends lent (to a receiver that does not read, so they stay
/// unacknowledged) hands them to the reaper, which keeps their charges while it waits; once the
/// receiver goes (a reset: the kernel frees the packets) the completions come and the charges go
/// back to the budget: else each such drop would shrink the budget for good.
fn dropped_senders_give_their_charges_back() {
    let budget = MemlockBudget::global();
    for path in [SendPath::SENDMSG, SendPath::IO_URING] {
        let before = budget.in_use();
        let (stream, receiver) = tx_common::backlog_pair();
        let mut tx = TcpSender::new(stream, path_config(path, Mode::ZeroCopy));
        for k in 0..16u64 {
            let mut buf = vec![0u8; SEND];
            fill(&mut buf, k * SEND as u64);
            tx.send(buf).expect("send");
        }
        tx.poll_completions().expect("poll");
        assert!(tx.outstanding() > 0, "{path:?}: nothing lent at the drop");
        assert!(
            budget.in_use() > before,
            "{path:?}: the sends charged nothing"
        );
        drop(tx);
        drop(receiver);
        let dropped = std::time::Instant::now();
        while budget.in_use() != before && dropped.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            budget.in_use(),
            before,
            "{path:?}: charges kept by a dropped sender"
        );
        println!(
            "MEMLOCK-RUN {path:?}: a dropped sender gave its charges back in {:?}",
            dropped.elapsed()
        );
    }
}
