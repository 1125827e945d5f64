//! `zcnet observe` and io_uring zero-copy receive: a device-less zcrx receiver of this process
//! copies every byte it receives into its area, and the observer's return probe on
//! `io_zcrx_copy_chunk` must count exactly those bytes, as the kernel's own statistics of the
//! instance (7.2) do. Debian's bpftrace, with a return probe of its own on the same function, must
//! count the same copies and bytes as the observer for a `zcnet bench rx --api zcrx` receiver.
//! On a kernel without zcrx (6.12) the observer must list these copies as not seen, with the
//! reason.

use std::net::{TcpListener, TcpStream};
use std::thread;

use anyhow::Context;
use zcnet::observe::{Counter, Observer};
use zcnet::rx::{Receiver, RxConfig, RxPath, ZcrxConfig, ZcrxRefusal};

use crate::outcome::Outcome;
use crate::{observe_bpftrace, pattern, peer};

/// Bytes of the stream.
const STREAM: u64 = 4 << 20;
/// The return probe's event name.
const EVENT: &str = "kretprobe:io_zcrx_copy_chunk";

/// bpftrace's reference: a copy is a call that returned a positive byte count (a negative one is an
/// error), counted for the command's process. Map names are zcnet's counter names.
const ZCRX_COPIES: &str = r#"
kretprobe:io_zcrx_copy_chunk
/pid == cpid && (int64)retval > 0/
{
    @zcrx_copies = count();
    @zcrx_copied_bytes = sum(retval);
}
"#;

/// The observer's zcrx copies against the kernel's statistics for a receiver of this process (with
/// `own`), and against bpftrace's for a bench's receiver (with `all`).
pub fn check(out: &mut Outcome, own: &Observer, all: &Observer) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let server = listener.accept()?.0;
    let config =
        RxConfig::default().with_path(RxPath::Zcrx(ZcrxConfig::no_device().with_area_len(1 << 20)));
    let attached = own.tracepoints().any(|t| t == EVENT);
    let mut rx = match Receiver::new(server, config) {
        Ok(rx) => rx,
        Err(e) if e.zcrx_refusal() == Some(ZcrxRefusal::KernelTooOld) => {
            let spot = own
                .blind_spots()
                .iter()
                .find(|s| s.what.contains("zero-copy receive"));
            out.check(
                "zcrx copies",
                !attached && spot.is_some(),
                &format!("this kernel has no zcrx ({e}); the observer lists as not seen: {spot:?}"),
            );
            return Ok(());
        }
        Err(e) => return Err(e).context("a device-less zcrx receiver"),
    };
    let before = own.process_totals(std::process::id())?;
    let sender = thread::spawn(move || peer::send_pattern(&mut { client }, STREAM, None));
    let (mut got, mut mismatched) = (0u64, 0u64);
    while let Some(chunk) = rx.recv()? {
        mismatched += pattern::mismatches(&chunk, got);
        got += chunk.len() as u64;
    }
    sender.join().expect("sender thread")?;
    let seen = own.process_totals(std::process::id())?.since(&before);
    let stats = *rx.stats();
    let observed = seen.get(Counter::ZcrxCopiedBytes);
    out.check(
        "zcrx copies",
        attached
            && got == STREAM
            && mismatched == 0
            && observed == got
            && observed == stats.zcrx_copied_bytes
            && seen.get(Counter::ZcrxCopies) > 0,
        &format!(
            "{got} of {STREAM} bytes through device-less zcrx, {mismatched} mismatched: observed \
             zcrx_copied_bytes {observed} in {} copies ({EVENT} attached: {attached}); the \
             kernel's statistics copy_bytes {}",
            seen.get(Counter::ZcrxCopies),
            stats.zcrx_copied_bytes
        ),
    );
    bpftrace_reference(out, all)
}

/// `zcnet bench rx --api zcrx` (its receiver is the bench's process; a child of it sends) under
/// bpftrace's [`ZCRX_COPIES`]: the observer's counts for the process equal bpftrace's, are not none,
/// and the bytes equal the kernel's statistics in the bench's row.
fn bpftrace_reference(out: &mut Outcome, all: &Observer) -> anyhow::Result<()> {
    let check = "bpftrace zcrx copies";
    let mib = STREAM >> 20;
    let command =
        format!("zcnet bench rx --api zcrx --mode copy --mib {mib} --rounds 1 --interval 0 --json");
    let Some(traced) = observe_bpftrace::traced(out, check, ZCRX_COPIES, &command) else {
        return Ok(());
    };
    let seen = all.process_totals(traced.pid)?;
    let (equal, text) = observe_bpftrace::side_by_side(
        &seen,
        &traced,
        &[Counter::ZcrxCopies, Counter::ZcrxCopiedBytes],
    );
    let row = traced
        .output
        .iter()
        .find(|l| l.contains("\"api\":\"zcrx\""));
    let statistics = row.and_then(|r| observe_bpftrace::json_u64(r, "zcrx_copied_bytes"));
    out.check(
        check,
        equal
            && seen.get(Counter::ZcrxCopies) > 0
            && statistics == Some(seen.get(Counter::ZcrxCopiedBytes)),
        &format!(
            "zcnet bench rx --api zcrx, {mib} MiB over loopback (pid {}) under bpftrace's {EVENT}: \
             {text}; the kernel's statistics in the bench's row: zcrx_copied_bytes {statistics:?}",
            traced.pid
        ),
    );
    Ok(())
}
