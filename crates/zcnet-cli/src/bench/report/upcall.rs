//! Report: the rows of `zcnet bench upcall` as a table (or JSON), with a note when the CPU is
//! emulated (the rows say so).

use serde_json::Value;

use crate::bench::args::upcall::UpcallArgs;
use crate::report::{Column, Row, emit, print_rows, say_once};

/// Prints `rows` as `args` asks.
pub(crate) fn print(rows: &[Row], args: &UpcallArgs) {
    let emulated = rows
        .iter()
        .any(|r| r.get("emulated_cpu").and_then(Value::as_bool) == Some(true));
    if emulated && !args.json {
        emit("emulated CPU: correctness only (timings from QEMU's software emulation)\n");
    }
    print_rows(rows, COLUMNS, args.json);
    say_once(rows, "kernel_copied_reason");
}

/// The table's columns.
const COLUMNS: &[Column] = &[
    ("load", "load"),
    ("features", "features"),
    ("hits", "Hits"),
    ("missed", "Missed"),
    ("lost", "Lost"),
    ("upcalls", "upcalls"),
    ("upcalls_per_s", "upcalls/s"),
    ("packet_bytes_per_upcall", "packet B/upcall"),
    ("message_bytes_per_upcall", "message B/upcall"),
    ("user_us_per_upcall", "user µs/upcall"),
    ("sys_us_per_upcall", "sys µs/upcall"),
    ("generator_sys_us_per_frame", "sender sys µs/frame"),
    ("kernel_copied_per_byte", "kernel copied/B"),
];
