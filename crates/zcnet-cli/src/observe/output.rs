//! How `zcnet observe` writes: text lines for a person, or one JSON object per line (`--json`):
//! `{"event":"attached",…}` first, `{"event":"interval",…}` per owner that changed, and at the end
//! `{"event":"summary",…}` per owner and `{"event":"process",…}` per process with its totals.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use zcnet::observe::{Counter, Counters, LockedMemory, MemlockLimit, Observer, Owner, XdpSocket};
use zcnet::xdp::Statistics;

use super::{Named, Names};
use crate::report::emit;

/// The chosen format.
#[derive(Debug)]
pub struct Output {
    json: bool,
}

impl Output {
    pub fn new(json: bool) -> Output {
        Output { json }
    }

    /// What is observed, through which tracepoints and programs, and what this kernel hides.
    pub fn attached(&self, observer: &Observer) -> anyhow::Result<()> {
        let programs = observer.program_ids()?;
        let blind = observer.blind_spots();
        if self.json {
            let blind: Vec<Value> = blind
                .iter()
                .map(|b| json!({"what": b.what, "why": b.why}))
                .collect();
            emit(&format!(
                "{}\n",
                json!({
                    "event": "attached",
                    "scope": format!("{:?}", observer.scope()),
                    "tracepoints": observer.tracepoints().collect::<Vec<_>>(),
                    "programs": programs,
                    "not_seen": blind,
                })
            ));
        } else {
            let mut text = format!(
                "observing {:?} at {} tracepoints (BPF programs {programs:?})\nnot seen:\n",
                observer.scope(),
                observer.tracepoints().count()
            );
            for b in blind {
                text.push_str(&format!("  {}: {}\n", b.what, b.why));
            }
            emit(&text);
        }
        Ok(())
    }

    /// One owner's counts over an interval that ended `t` seconds into the run.
    pub fn row(&self, t: f64, named: &Named, delta: &Counters) {
        self.timed(
            t,
            named,
            ("interval", "counters"),
            || counters_json(delta),
            || counters_text(delta),
        );
    }

    /// A process's user's locked memory, at an interval that ended `t` seconds into the run in
    /// which it changed.
    pub fn locked_row(&self, t: f64, named: &Named, locked: &LockedMemory) {
        self.timed(
            t,
            named,
            ("locked_memory", "locked_memory"),
            || locked_json(locked),
            || locked_text(locked),
        );
    }

    /// A line at `t` seconds into the run about `named`: in JSON the event `event` with the value
    /// under `key`, else the time, who, and the text.
    fn timed(
        &self,
        t: f64,
        named: &Named,
        (event, key): (&str, &str),
        value: impl FnOnce() -> Value,
        text: impl FnOnce() -> String,
    ) {
        if self.json {
            let mut v = identity(named);
            v.insert("event".into(), event.into());
            v.insert("t".into(), json!(t));
            v.insert(key.into(), value());
            emit(&format!("{}\n", Value::Object(v)));
        } else {
            emit(&format!("{t:8.1}s  {}  {}\n", who(named), text()));
        }
    }

    /// The totals of each owner, then of each process with its user's locked memory.
    pub fn summary(
        &self,
        seconds: f64,
        totals: &[(Owner, Counters)],
        locked: &[LockedMemory],
        names: &mut Names,
    ) {
        let mut processes: BTreeMap<u32, Counters> = BTreeMap::new();
        if !self.json {
            emit(&format!("summary after {seconds:.1} s:\n"));
        }
        for (owner, counters) in totals {
            processes.entry(owner.pid).or_default().add(counters);
            let named = names.of(*owner);
            if self.json {
                let mut v = identity(named);
                v.insert("event".into(), "summary".into());
                v.insert("seconds".into(), json!(seconds));
                v.insert("counters".into(), counters_json(counters));
                emit(&format!("{}\n", Value::Object(v)));
            } else {
                emit(&format!("  {}  {}\n", who(named), counters_text(counters)));
            }
        }
        for (pid, counters) in processes {
            let command = names.of(Owner { pid, fd: None }).command.clone();
            let locked = locked.iter().find(|l| l.pid == pid);
            if self.json {
                emit(&format!(
                    "{}\n",
                    json!({"event": "process", "pid": pid, "command": command,
                           "seconds": seconds, "counters": counters_json(&counters),
                           "locked_memory": locked.map(locked_json)})
                ));
            } else {
                emit(&format!(
                    "  pid {pid} ({command}) in all: {}\n",
                    counters_text(&counters)
                ));
                if let Some(l) = locked {
                    emit(&format!("  pid {pid} ({command}) {}\n", locked_text(l)));
                }
            }
        }
    }
}

impl Output {
    /// One AF_XDP socket's counters over an interval that ended `t` seconds into the run.
    pub fn xdp_row(&self, t: f64, named: &Named, socket: &XdpSocket, delta: &Statistics) {
        self.xdp_line("xdp", ("t", t), named, socket, delta);
    }

    /// What one AF_XDP socket's counters grew by over the `seconds` observed.
    pub fn xdp_summary(&self, seconds: f64, named: &Named, socket: &XdpSocket, grown: &Statistics) {
        self.xdp_line("xdp_summary", ("seconds", seconds), named, socket, grown);
    }

    fn xdp_line(
        &self,
        event: &str,
        (time_key, time): (&str, f64),
        named: &Named,
        socket: &XdpSocket,
        stats: &Statistics,
    ) {
        if self.json {
            let mut v = identity(named);
            v.insert("event".into(), event.into());
            v.insert(time_key.into(), json!(time));
            v.insert("inode".into(), json!(socket.inode));
            v.insert("ifindex".into(), json!(socket.ifindex.get()));
            v.insert("queue_id".into(), json!(socket.queue_id));
            v.insert("zero_copy".into(), json!(socket.zero_copy));
            for (name, value) in xdp_counts(stats) {
                v.insert(name.into(), json!(value));
            }
            emit(&format!("{}\n", Value::Object(v)));
        } else {
            let counts: Vec<String> = xdp_counts(stats)
                .into_iter()
                .filter(|&(_, v)| v != 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let lead = match event {
                "xdp" => format!("{time:8.1}s"),
                _ => String::new(),
            };
            emit(&format!(
                "{lead}  {} (inode {})  {}\n",
                who(named),
                socket.inode,
                counts.join(" ")
            ));
        }
    }
}

/// An AF_XDP socket's counters under the names `ss --xdp` and the kernel's `struct xdp_diag_stats`
/// give them.
fn xdp_counts(s: &Statistics) -> [(&'static str, u64); 6] {
    [
        ("rx_dropped", s.rx_dropped),
        ("rx_invalid", s.rx_invalid_descs),
        ("rx_full", s.rx_ring_full),
        ("fill_ring_empty", s.rx_fill_ring_empty_descs),
        ("tx_invalid", s.tx_invalid_descs),
        ("tx_ring_empty", s.tx_ring_empty_descs),
    ]
}

/// `pid 123 (name) tcp a -> b`, or `… process` for counts not tied to a socket.
fn who(named: &Named) -> String {
    format!(
        "pid {} ({}) {}",
        named.owner.pid,
        named.command,
        named.socket.as_deref().unwrap_or("process")
    )
}

fn identity(named: &Named) -> Map<String, Value> {
    let mut v = Map::new();
    v.insert("pid".into(), json!(named.owner.pid));
    v.insert("command".into(), json!(named.command));
    v.insert("fd".into(), json!(named.owner.fd));
    v.insert("socket".into(), json!(named.socket));
    v
}

/// `{"uid", "bytes", "peak_bytes", "limit"}`, the limit in bytes or `"unlimited"`, `"exempt"`.
fn locked_json(l: &LockedMemory) -> Value {
    let limit = match l.limit {
        MemlockLimit::Bytes(b) => json!(b),
        MemlockLimit::Unlimited => json!("unlimited"),
        MemlockLimit::Exempt => json!("exempt"),
    };
    json!({"uid": l.uid, "bytes": l.bytes, "peak_bytes": l.peak_bytes, "limit": limit})
}

/// `locked memory of uid 1000: 1.2 MiB at its last completion (peak 3.4 MiB) of RLIMIT_MEMLOCK 8.0 MiB`.
fn locked_text(l: &LockedMemory) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / 1048576.0);
    let limit = match l.limit {
        MemlockLimit::Bytes(b) => format!("of RLIMIT_MEMLOCK {}", mib(b)),
        MemlockLimit::Unlimited => "(RLIMIT_MEMLOCK unlimited: not charged)".to_string(),
        MemlockLimit::Exempt => "(CAP_IPC_LOCK: not charged)".to_string(),
    };
    format!(
        "locked memory of uid {}: {} at its last completion (peak {}) {limit}",
        l.uid,
        mib(l.bytes),
        mib(l.peak_bytes)
    )
}

fn counters_json(c: &Counters) -> Value {
    Value::Object(
        c.iter()
            .map(|(k, v)| (k.name().to_string(), json!(v)))
            .collect(),
    )
}

/// The counters that are not zero, `name=value`, bytes in MiB.
fn counters_text(c: &Counters) -> String {
    c.iter()
        .filter(|&(_, v)| v != 0)
        .map(|(k, v)| match k {
            k if Counter::is_bytes(k) => format!("{}={:.1}MiB", k.name(), v as f64 / 1048576.0),
            k => format!("{}={v}", k.name()),
        })
        .collect::<Vec<_>>()
        .join(" ")
}
