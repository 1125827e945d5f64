//! The kernel's copies of a bench's own payload: each row gains `kernel_copied_per_byte`, counted by
//! `zcnet::observe` for this process, per payload byte of the row. A bench of sends counts the bytes
//! the kernel copied after zero-copy sends (`skb_copy_ubufs`, a kprobe that runs only when the
//! kernel copies, so it costs the sends nothing); a bench of receives counts the bytes its receives
//! copied (the `sock_recv_length` tracepoint, a short program per receive and none
//! for a mapped page). Where the observer cannot run (no kprobes, as on a kernel built without
//! them, or no CAP_BPF and CAP_PERFMON) the field is null and `kernel_copied_reason` says why; the
//! summary prints that once.
//!
//! A copy the kernel makes in `ksoftirqd` rather than in the bench's own softirq work is not counted
//! against the bench: on a loaded host the figure after sends can be low, never high.

use serde_json::{Value, json};
use zcnet::observe::{Counter, Observer, Scope};

use crate::report::Row;

/// The observer on this process and what it counts, or why there is none.
pub(crate) struct KernelCopies(Result<(Observer, Counter), String>);

impl KernelCopies {
    /// Counts the copies after this process's zero-copy sends.
    pub(crate) fn after_sends() -> KernelCopies {
        KernelCopies::start(Observer::attach_late_copies, Counter::LateCopiedBytes)
    }

    /// Counts the copies of this process's socket receives, unless `off` (`--no-kernel-copies`).
    pub(crate) fn in_receives(off: bool) -> KernelCopies {
        match off {
            true => KernelCopies::not_counted("not counted (--no-kernel-copies)"),
            false => KernelCopies::start(Observer::attach_receive_copies, Counter::RxCopiedBytes),
        }
    }

    fn start(
        attach: fn(Scope) -> Result<Observer, zcnet::observe::ObserveError>,
        counter: Counter,
    ) -> KernelCopies {
        KernelCopies(
            attach(Scope::Process(std::process::id()))
                .map(|observer| (observer, counter))
                .map_err(|e| format!("kernel copies not counted: {e}")),
        )
    }

    /// One that counts nothing, for `why`.
    pub(crate) fn not_counted(why: &str) -> KernelCopies {
        KernelCopies(Err(why.to_string()))
    }

    /// The bytes copied so far, or why they are not known.
    pub(crate) fn so_far(&self) -> Result<u64, String> {
        let (observer, counter) = self.0.as_ref().map_err(Clone::clone)?;
        observer
            .process_totals(std::process::id())
            .map(|c| c.get(*counter))
            .map_err(|e| format!("kernel copies not counted: {e}"))
    }

    /// The bytes copied since `before` (from [`KernelCopies::so_far`]).
    pub(crate) fn since(&self, before: Result<u64, String>) -> Result<u64, String> {
        before.and_then(|b| Ok(self.so_far()?.saturating_sub(b)))
    }

    /// Adds to each row of one run (its streams) the bytes copied since `before` per payload byte
    /// of the run, or the reason there is no figure: the observer counts the process, not a
    /// stream, so parallel streams share the run's figure.
    pub(crate) fn record(&self, before: Result<u64, String>, rows: &mut [Row]) {
        let bytes: u64 = rows
            .iter()
            .map(|row| row.get("bytes").and_then(Value::as_u64).unwrap_or(0))
            .sum();
        let copied = self.since(before);
        for row in rows {
            put(row, &copied, bytes);
        }
    }
}

/// Puts into `row` the figure of `copied` bytes over `bytes` of payload, or why there is none.
pub(crate) fn put(row: &mut Row, copied: &Result<u64, String>, bytes: u64) {
    let (value, reason) = match copied {
        Ok(_) if bytes == 0 => (Value::Null, Some("no payload".to_string())),
        Ok(copied) => (json!(*copied as f64 / bytes as f64), None),
        Err(why) => (Value::Null, Some(why.clone())),
    };
    row.insert("kernel_copied_per_byte".into(), value);
    row.insert("kernel_copied_reason".into(), json!(reason));
}
