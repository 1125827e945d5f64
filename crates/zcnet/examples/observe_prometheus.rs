//! A service exporting its own zero-copy counters: it watches itself with `zcnet::observe`, sends a
//! stream over loopback with a `TcpSender` (MSG_ZEROCOPY every time, on the `sendmsg` path or, with
//! the argument `io_uring`, with io_uring SEND_ZC), then prints what the kernel's tracepoints
//! counted as Prometheus text: per socket and for the process, and the locked memory its user is
//! charged (gauges, with the limit when there is one). The sender's own `TxStats` come
//! first, as comments, to compare. Needs CAP_BPF and CAP_PERFMON (or root) and tracefs mounted.
//! Run: `sudo cargo run --release --example observe_prometheus [-- io_uring]`.

use std::fmt::Write as _;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use zcnet::observe::{Counter, Counters, LockedMemory, MemlockLimit, Observer, Owner};
use zcnet::tx::{Mode, SendPath, SenderConfig, TcpSender};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let observer = Observer::own_process()?;
    let mut config = SenderConfig::default();
    config.policy.mode = Mode::ZeroCopy;
    if std::env::args().nth(1).as_deref() == Some("io_uring") {
        config.path = SendPath::IO_URING;
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || listener.accept()?.0.read_to_end(&mut Vec::new()));
    let path = config.path.name();
    let mut tx = TcpSender::new(TcpStream::connect(addr)?, config);
    for i in 0..=255u8 {
        tx.send(vec![i; 256 << 10])?;
    }
    tx.flush(Duration::from_secs(10))?;
    let stats = tx.stats().clone();
    drop(tx);
    reader.join().expect("reader")?;
    println!(
        "# sender: path {} bytes {} zc_calls {} notifications {} zc_ids {} copied_ids {}",
        path, stats.bytes, stats.zc_calls, stats.notifications, stats.zc_ids, stats.copied_ids
    );
    print!("{}", prometheus(&observer.snapshot()?));
    print!("{}", locked_gauges(&observer.locked_memory()?));
    Ok(())
}

/// The counters in Prometheus text exposition format: one family per counter, a sample per socket
/// (`fd` label) and one for the process as a whole.
fn prometheus(snapshot: &[(Owner, Counters)]) -> String {
    let mut out = String::new();
    for counter in Counter::ALL {
        let name = format!("zcnet_{}_total", counter.name());
        let _ = writeln!(out, "# HELP {name} {}", counter.help());
        let _ = writeln!(out, "# TYPE {name} counter");
        for (owner, counters) in snapshot {
            let fd = owner.fd.map_or("process".to_string(), |fd| fd.to_string());
            let _ = writeln!(
                out,
                "{name}{{pid=\"{}\",fd=\"{fd}\"}} {}",
                owner.pid,
                counters.get(counter)
            );
        }
    }
    out
}

/// The locked memory of the process's user as gauges: at its last completion, the most seen, and
/// `RLIMIT_MEMLOCK` when the kernel holds the sends to one (root is exempt: no limit sample).
fn locked_gauges(locked: &[LockedMemory]) -> String {
    let mut out = String::new();
    for (name, help) in [
        (
            "zcnet_locked_bytes",
            "locked memory of the user at the last zero-copy completion",
        ),
        (
            "zcnet_locked_peak_bytes",
            "most locked memory of the user seen at completions",
        ),
        (
            "zcnet_memlock_limit_bytes",
            "RLIMIT_MEMLOCK the kernel holds the user's sends to",
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for l in locked {
            let value = match name {
                "zcnet_locked_bytes" => Some(l.bytes),
                "zcnet_locked_peak_bytes" => Some(l.peak_bytes),
                _ => match l.limit {
                    MemlockLimit::Bytes(b) => Some(b),
                    _ => None,
                },
            };
            if let Some(v) = value {
                let _ = writeln!(out, "{name}{{pid=\"{}\",uid=\"{}\"}} {v}", l.pid, l.uid);
            }
        }
    }
    out
}
