//! Zero-copy senders under a locked-memory limit: 256 TCP connections over loopback in a child
//! process with RLIMIT_MEMLOCK 4 MiB and without CAP_IPC_LOCK (root drops it from its bounding set
//! with setpriv). The process-wide budget (`zcnet::tx::MemlockBudget`) keeps the pages pinned by
//! zero-copy sends under the limit: once it is spent, sends are copied (`copy_memlock`, whose reason
//! names the limit and the remedy); once the loans drain, sends go zero-copy again. Every byte arrives
//! and is verified.

mod tx_common;

use std::net::{Shutdown, TcpListener};
use std::process::Command;
use std::time::Duration;

use tx_common::{Checksum, fill, sender_config, tcp_pair};
use zcnet::tx::{MemlockBudget, Mode, TcpSender, TxStats, memlock_reason};

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
        return child();
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

/// Sends `ROUNDS` buffers on every connection, round-robin, each the pattern at its stream position.
fn phase(txs: &mut [TcpSender], sent: &mut [Checksum]) {
    for _ in 0..ROUNDS {
        for (tx, sum) in txs.iter_mut().zip(sent.iter_mut()) {
            let mut buf = vec![0u8; SEND];
            fill(&mut buf, sum.len);
            sum.update(&buf);
            tx.send(buf).expect("send");
        }
    }
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
