//! Run: the parallel streams of one run (`-P N`, as iperf3's): each on a thread of its own, with its
//! own sender and (on this host) its own receiver, side by side for the run's duration. MSG_ZEROCOPY
//! senders in one process share its locked-memory budget ([`zcnet::tx::MemlockBudget::global`]): a
//! send that does not fit is copied, which each stream's row counts and says.

use std::cell::Cell;
use std::thread;

use anyhow::{Result, anyhow};
use serde_json::json;

use zcnet::tx::Mode;

use crate::bench::args::api::Api;
use crate::bench::run::wire;
use crate::flags;
use crate::report::{Row, object};

/// Most `-P`: each stream takes a thread, a socket, its buffer pool and, on this host, a receiver
/// process.
const MAX_STREAMS: u64 = wire::MAX_STREAMS as u64;

thread_local! {
    /// The stream this thread sends, when the run has several (its interval lines name it).
    static STREAM: Cell<Option<u32>> = const { Cell::new(None) };
}

/// The stream the calling thread sends, when its run has several.
pub(crate) fn current() -> Option<u32> {
    STREAM.with(Cell::get)
}

/// Fails with a usage error when `-P` (`parallel`) is out of its range.
pub(crate) fn check(parallel: u32) -> Result<()> {
    flags::at_most(
        "-P",
        u64::from(parallel),
        MAX_STREAMS,
        "a thread, a socket, a buffer pool and a receiver process each",
    )
}

/// What a stream's row says of its run before anything was measured: the row of a stream that
/// ended without one.
pub(crate) fn fields(bench: &str, path: &str, (mode, api): (Mode, Api), size: usize) -> Row {
    object(json!({
        "bench": bench,
        "role": "sender",
        "path": path,
        "api": api.name(),
        "mode": mode.name(),
        "size": size,
        "bytes": 0,
    }))
}

/// Runs `one` for streams 1 to `n`, each on a thread of its own (the calling thread's for one
/// stream, whose error is then the call's), and gives what each ended with, in stream order.
pub(crate) fn each<T: Send>(n: u32, one: impl Fn() -> Result<T> + Sync) -> Result<Vec<Result<T>>> {
    if n == 1 {
        return Ok(vec![Ok(one()?)]);
    }
    Ok(thread::scope(|s| {
        let threads: Vec<_> = (1..=n)
            .map(|stream| {
                let one = &one;
                s.spawn(move || {
                    STREAM.with(|s| s.set(Some(stream)));
                    one()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow!("the stream's thread panicked")))
            })
            .collect()
    }))
}

/// Runs `one` for streams 1 to `n`, each on a thread of its own, and gives their rows in stream
/// order, each with its number. A stream that ended in an error without a row gets `failed` (the
/// run's `fields` and why), so that the others are still reported and the bench fails after them.
/// One stream runs on the calling thread and its row is as it was, without a number; its error is
/// the run's.
pub(crate) fn side_by_side(
    n: u32,
    fields: &Row,
    one: impl Fn() -> Result<Row> + Sync,
) -> Result<Vec<Row>> {
    if n == 1 {
        return Ok(vec![one()?]);
    }
    let ended = each(n, one)?;
    Ok(ended
        .into_iter()
        .zip(1..)
        .map(|(ended, stream): (Result<Row>, u32)| {
            let mut row = ended.unwrap_or_else(|e| {
                let mut row = fields.clone();
                row.insert("failed".into(), json!(format!("{e:#}")));
                row
            });
            row.insert("stream".into(), json!(stream));
            row
        })
        .collect())
}
