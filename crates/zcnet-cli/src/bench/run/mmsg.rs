//! Run: `zcnet bench udp --api sendmmsg`: the batched copy sender AF_XDP is measured against. The same
//! datagrams the other APIs send (payload size, sequence number and pattern of [`crate::bench::run::wire`]),
//! `--batch` of them handed to the kernel by each `sendmmsg(2)` call
//! ([`zcnet::packet::send_chunks`]) from one buffer stamped before each call.
//!
//! # Kernel behaviour relied on
//! - `sendmmsg` copies every datagram into an skb and sends it within the call, as `sendmsg` does
//!   one by one: the sending thread's CPU time holds the whole send.
//! - It stops at the first datagram it cannot send, returning the count taken so far (an error
//!   only when it took none): the rest go again in the next call, so sequence numbers stay in order.
//! - `ENOBUFS` (a full device queue) reaches a UDP sender only with `IP_RECVERR`, which the bench
//!   does not set; a datagram dropped there is lost like one the receiver's buffer overflowed.
//! - An error the socket holds (`ECONNREFUSED` after an ICMP port unreachable on a connected
//!   socket) is returned by the next call that sends none of its datagrams: the run ends there,
//!   its row marked `failed` with why, as a sendmsg run is.

use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use crate::bench::run::send;
use crate::bench::run::wire;
use crate::live::{self, Ticker};
use crate::report::{Row, cpu_share, cpu_us_per_mb, gbit_per_s, object};

/// One sendmmsg run: `batch` datagrams of `size` bytes per call for `duration`.
pub struct MmsgSend {
    /// Payload bytes per datagram.
    pub size: usize,
    /// Datagrams per `sendmmsg` call.
    pub batch: usize,
    /// How long to send.
    pub duration: Duration,
    /// Whether datagrams carry no sequence number (`--raw`).
    pub raw: bool,
}

/// Sends one run on the connected `socket` and returns its sender row (`datagrams` and CPU per
/// packet are added by the caller, as for the other APIs); a call the kernel refuses ends the run,
/// the row then marked `failed`.
pub fn send(socket: &UdpSocket, path: &str, run: &MmsgSend, mut ticker: Ticker) -> Result<Row> {
    let mut buf = vec![0u8; run.size * run.batch];
    wire::fill(&mut buf, run.size);
    let (mut next, mut datagrams) = (0u64, 0u64);
    // A refused call fails its step with the calls the step made, the refused one among them.
    let (timed, refused) = live::run_until_failure(run.duration, || {
        if !run.raw {
            next = wire::stamp(&mut buf, run.size, next);
        }
        let (mut from, mut calls) = (0, 0);
        while from < buf.len() {
            calls += 1;
            let sent = match zcnet::packet::send_chunks(socket.as_fd(), &buf[from..], run.size) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => return Err((e, calls)),
            };
            datagrams += sent as u64;
            from += sent * run.size;
        }
        ticker.tick(datagrams * run.size as u64);
        Ok(calls)
    })?;
    let calls = timed.calls + refused.as_ref().map_or(0, |&(_, calls)| calls);
    let failed = refused.map(|(e, _)| send::cut_short(e.raw_os_error(), &e));
    let (seconds, usage) = (timed.seconds, &timed.usage);
    let bytes = datagrams * run.size as u64;
    let dst = socket.peer_addr()?;
    Ok(object(json!({
        "bench": "udp",
        "role": "sender",
        "path": path,
        "ip": if dst.is_ipv6() { "v6" } else { "v4" },
        "api": "sendmmsg",
        "mode": "copy",
        "size": run.size,
        "batch": run.batch,
        "seconds": seconds,
        "bytes": bytes,
        "gbit_per_s": gbit_per_s(bytes, seconds),
        "calls": calls,
        "cpu_user_s": usage.user.as_secs_f64(),
        "cpu_sys_s": usage.system.as_secs_f64(),
        "cpu_share": cpu_share(usage, seconds),
        "cpu_us_per_mb": cpu_us_per_mb(usage, bytes),
        "zc_ids": 0,
        "copied_ids": 0,
        "notifications": 0,
        "enobufs": 0,
        "fallbacks": 0,
        "zerocopy": "sendmmsg copies",
        "interrupted": timed.interrupted,
        "failed": failed,
    })))
}
