//! Run: the receiver process of a one-process bench of sends, and the sender's row merged with its
//! report.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use zcnet::tx::Mode;

use crate::bench::args::Common;
use crate::bench::run::child::Watched;
use crate::bench::run::net::Net;
use crate::report::Row;

/// The receiver process of the one-process mode: this binary with `--listen … --once`, in the
/// receiving namespace and in a process group of its own (Ctrl-C reaches only this process, which
/// then ends the stream so that the receiver reports what arrived).
pub(crate) struct Peer {
    pub(crate) child: Watched,
    pub(crate) addr: SocketAddr,
}

impl Peer {
    pub(crate) fn spawn(net: &Net, bench: &str, extra: &[String], common: &Common) -> Result<Peer> {
        let exe = std::env::current_exe().context("locating the zcnet binary")?;
        let mut cmd = net.receiver_command(&exe.to_string_lossy());
        cmd.args(["bench", bench, "--listen"])
            .arg(SocketAddr::new(net.dst, 0).to_string())
            .args(["--once", "--json", "--interval", "0", "--exit-with-parent"])
            .args(extra);
        if common.ipv6 {
            cmd.arg("--ipv6");
        }
        cmd.stdin(Stdio::piped()).process_group(0);
        let mut child = Watched::spawn(&mut cmd, "the receiver process")?;
        let addr = match child.next_line(Instant::now() + REPORT_WAIT) {
            Ok(Some(line)) => serde_json::from_str::<Value>(&line)
                .ok()
                .and_then(|v| v.get("listening")?.as_str()?.parse().ok()),
            Ok(None) => None,
            Err(why) => return Err(child.failure(&why)),
        };
        match addr {
            Some(addr) => Ok(Peer { child, addr }),
            None => Err(child.failure("did not start")),
        }
    }

    /// Waits for the receiver's report of its one stream, at most [`REPORT_WAIT`]: the receiver
    /// ends its stream within that once the sender is done, unless it is stopped or stuck; then it
    /// is killed and the run fails with its state and standard error.
    pub(crate) fn finish(mut self) -> Result<Row> {
        let deadline = Instant::now() + REPORT_WAIT;
        let mut last = None;
        loop {
            match self.child.next_line(deadline) {
                Ok(Some(line)) => {
                    if let Ok(Value::Object(row)) = serde_json::from_str::<Value>(&line)
                        && row.get("role").and_then(Value::as_str) == Some("receiver")
                    {
                        last = Some(row);
                    }
                }
                Ok(None) => break,
                Err(why) => return Err(self.child.failure(&why)),
            }
        }
        let status = match self.child.wait(deadline) {
            Ok(status) => status,
            Err(why) => return Err(self.child.failure(&why)),
        };
        match last {
            Some(row) if status.success() => Ok(row),
            _ => Err(self.child.failure(&format!("failed ({status})"))),
        }
    }

    /// Stops the receiver (the run failed on this side).
    pub(crate) fn abandon(self) {
        self.child.abandon();
    }

    /// The sender's row of a run `sent` to this receiver, with the receiver's findings added, and
    /// the receiver's own row — `None` when the receiver gave none (it was stopped, or failed),
    /// the sender's row then marked `failed` with why; fails when the send failed (the receiver is
    /// stopped then) or the receiver found wrong bytes.
    pub(crate) fn merge_into(
        self,
        sent: Result<Row>,
        bench: &str,
        mode: Mode,
    ) -> Result<(Row, Option<Row>)> {
        let mut row = match sent {
            Ok(row) => row,
            Err(e) => {
                self.abandon();
                return Err(e);
            }
        };
        let received = match self.finish() {
            Ok(received) => received,
            Err(e) => {
                row.insert("failed".into(), json!(format!("{e:#}")));
                return Ok((row, None));
            }
        };
        merge_receiver(&mut row, &received);
        check_data(bench, mode, &received)?;
        Ok((row, Some(received)))
    }
}

/// Longest wait for the receiver's report once the sender is done: its stream ends within a few
/// seconds (a UDP run after two silent seconds at most).
const REPORT_WAIT: Duration = Duration::from_secs(10);

/// Adds the receiver's findings to the sender's row.
fn merge_receiver(row: &mut Row, peer: &Row) {
    for (key, name) in [
        ("bytes", "received_bytes"),
        ("datagrams", "received_datagrams"),
        ("cpu_us_per_mb", "rx_cpu_us_per_mb"),
        ("data_errors", "data_errors"),
        ("socket_drops", "rx_socket_drops"),
        ("sent_datagrams", "sent_datagrams"),
        ("lost", "lost"),
        ("duplicated", "duplicated"),
        ("reordered", "reordered"),
    ] {
        if let Some(v) = peer.get(key) {
            row.insert(name.into(), v.clone());
        }
    }
}

/// Fails when the receiver found wrong bytes.
fn check_data(bench: &str, mode: Mode, peer: &Row) -> Result<()> {
    match peer.get("data_errors").and_then(Value::as_u64) {
        Some(n) if n > 0 => bail!(
            "{bench} {}: the receiver found {n} bytes that differ from what was sent",
            mode.name()
        ),
        _ => Ok(()),
    }
}
