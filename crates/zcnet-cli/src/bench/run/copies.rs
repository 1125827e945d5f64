//! The kernel's copies of a bench's own payload after its sends: each row of a bench of sends gains
//! `kernel_copied_per_byte`, the bytes the kernel copied after zero-copy sends (`skb_copy_ubufs`,
//! counted by `zcnet::observe`'s kprobe for this process) per payload byte of the row. Where the
//! probe cannot run (no kprobes, as on a kernel built without them, or no CAP_BPF and CAP_PERFMON)
//! the field is null and `kernel_copied_reason` says why; the summary prints that once.
//!
//! The probe runs only when the kernel copies, so it costs the sends nothing. A copy the kernel
//! makes in `ksoftirqd` rather than in the bench's own softirq work is not counted against the
//! bench: on a loaded host the figure can be low, never high.

use serde_json::{Value, json};
use zcnet::observe::{Counter, Observer, Scope};

use crate::report::Row;

/// The probe on this process, or why there is none.
pub(crate) struct KernelCopies(Result<Observer, String>);

impl KernelCopies {
    /// Attaches the probe for this process.
    pub(crate) fn start() -> KernelCopies {
        KernelCopies(
            Observer::attach_late_copies(Scope::Process(std::process::id()))
                .map_err(|e| format!("kernel copies not counted: {e}")),
        )
    }

    /// The bytes copied so far, or why they are not known.
    pub(crate) fn so_far(&self) -> Result<u64, String> {
        let observer = self.0.as_ref().map_err(Clone::clone)?;
        observer
            .process_totals(std::process::id())
            .map(|c| c.get(Counter::LateCopiedBytes))
            .map_err(|e| format!("kernel copies not counted: {e}"))
    }

    /// Adds to each row of one run (its streams) the bytes copied since `before` (from
    /// [`KernelCopies::so_far`]) per payload byte of the run, or the reason there is no figure:
    /// the probe counts the process, not a stream, so parallel streams share the run's figure.
    pub(crate) fn record(&self, before: Result<u64, String>, rows: &mut [Row]) {
        let bytes: u64 = rows
            .iter()
            .map(|row| row.get("bytes").and_then(Value::as_u64).unwrap_or(0))
            .sum();
        let figure = before.and_then(|b| Ok(self.so_far()?.saturating_sub(b)));
        let (value, reason) = match figure {
            Ok(_) if bytes == 0 => (Value::Null, Some("no payload sent".to_string())),
            Ok(copied) => (json!(copied as f64 / bytes as f64), None),
            Err(why) => (Value::Null, Some(why)),
        };
        for row in rows {
            row.insert("kernel_copied_per_byte".into(), value.clone());
            row.insert("kernel_copied_reason".into(), json!(reason));
        }
    }
}
