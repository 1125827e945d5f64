//! Run: `zcnet bench udp --api af_xdp`. As a sender (`--sink xdp-drop`): the same datagrams the
//! socket APIs send (payload size, sequence number and pattern of [`crate::bench::run::wire`]) built by a
//! [`UdpEndpoint`] bound on the sending veth end, into the XDP drop program on the receiving end.
//! As a `--listen` receiver (`--iface IF`): an endpoint on every rx queue of IF takes the runs the
//! recvmmsg receiver would, and they are checked the same way (`crate::bench::run::listen_udp`).
//!
//! # Kernel behaviour relied on
//! - veth has no AF_XDP zero-copy (`XDP_ZEROCOPY` gives `EOPNOTSUPP`): the endpoint's socket runs
//!   in copy mode, where the kernel builds an skb from each frame and transmits it inside the
//!   `sendto` that wakes the tx ring (`xsk_generic_xmit`), so the sending thread's CPU time holds
//!   the whole send, as it does for `sendmsg`.
//! - With an XDP program attached, veth passes every frame arriving on the receiving end through
//!   its NAPI poll and counts it in that end's `rx_packets`, dropped or not: the delta over a run
//!   is what the sink saw.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use benchnet::VethPair;
use serde_json::{Value, json};
use zcnet::tx::Mode;
use zcnet::xdp::{self, EndpointConfig, SendError, UdpEndpoint};

use crate::bench::run::wire;
use crate::live::{self, Ticker};
use crate::report::{Row, cpu_share, cpu_us_per_mb, gbit_per_s, object};

/// Datagrams built per batch (one tx ring wakeup each).
const BATCH: usize = 64;

/// The UDP port the endpoint sends from.
const SOURCE_PORT: u16 = 40_000;

/// One af_xdp run: `size`-byte datagrams from `src` to `dst` for `duration`.
pub struct XdpSend {
    /// The bench mode: `copy` binds `XDP_COPY`; `zerocopy` and `auto` try `XDP_ZEROCOPY` and fall
    /// back to copy mode, the reason in the row.
    pub mode: Mode,
    /// Payload bytes per datagram.
    pub size: usize,
    /// The sender's address (on the sending veth end).
    pub src: SocketAddr,
    /// The destination (the receiving veth end's address).
    pub dst: SocketAddr,
    /// How long to send.
    pub duration: Duration,
    /// Whether datagrams carry no sequence number (`--raw`).
    pub raw: bool,
}

/// Sends one run from the sending end of `veth` (in its namespace) and returns its row, with the
/// frames the receiving end counted over the run (`sink_frames`) and the shortfall (`lost`).
pub fn send(veth: &VethPair, run: &XdpSend, mut ticker: Ticker) -> Result<Row> {
    let before = sink_frames(veth)?;
    let mut row = veth
        .a
        .run(|| send_in_namespace(&veth.a_if, run, &mut ticker))?;
    let after = sink_frames(veth)?;
    let datagrams = row["datagrams"].as_u64().unwrap_or(0);
    let seen = after.saturating_sub(before);
    row.insert("sink_frames".into(), json!(seen));
    row.insert("lost".into(), json!(datagrams.saturating_sub(seen)));
    Ok(row)
}

fn xdp_mode(mode: Mode) -> xdp::Mode {
    match mode {
        Mode::Copy => xdp::Mode::Copy,
        Mode::ZeroCopy | Mode::Auto => xdp::Mode::Auto,
    }
}

fn send_in_namespace(iface: &str, run: &XdpSend, ticker: &mut Ticker) -> Result<Row> {
    let mut config = EndpointConfig::default();
    config.mode = xdp_mode(run.mode);
    let local = SocketAddr::new(run.src.ip(), SOURCE_PORT);
    let mut endpoint = UdpEndpoint::bind(iface, local, config)
        .with_context(|| format!("binding the AF_XDP UDP endpoint on {iface}"))?;
    let mut template = vec![0u8; run.size];
    wire::fill(&mut template, run.size);
    let mut next = 0u64;
    // A failed step ends the run with what it sent so far, the row marked `failed` with why.
    let (timed, failure) = live::run_until_failure(run.duration, || -> Result<u64> {
        let mut batch = endpoint.send_batch();
        for _ in 0..BATCH {
            let pushed = batch.push(run.dst, run.size, |buf| {
                buf.copy_from_slice(&template);
                if !run.raw {
                    wire::stamp(buf, run.size, next);
                }
            });
            match pushed {
                Ok(()) => next += 1,
                // Every frame is in flight: the flush below reclaims the sent ones.
                Err(SendError::NoFrame) => break,
                Err(e) => return Err(e).context("building an af_xdp datagram"),
            }
        }
        batch
            .flush()
            .context("handing af_xdp datagrams to the kernel")?;
        ticker.tick(endpoint.stats().sent * run.size as u64);
        Ok(1)
    })?;
    let failed = failure.map(|e| format!("{e:#}"));
    let (seconds, usage) = (timed.seconds, &timed.usage);
    let datagrams = endpoint.stats().sent;
    let bytes = datagrams * run.size as u64;
    let socket = &endpoint.sockets()[0];
    let bound = socket.mode().as_str();
    let why = socket.zerocopy_status().err().map(ToString::to_string);
    let cpu = (usage.user + usage.system).as_secs_f64();
    Ok(object(json!({
        "bench": "udp",
        "role": "sender",
        "path": "xdp-drop",
        "ip": if run.dst.is_ipv6() { "v6" } else { "v4" },
        "api": "af_xdp",
        "mode": run.mode.name(),
        "xdp_mode": bound,
        "checksum_offload": endpoint.offloads_checksums(),
        "size": run.size,
        "seconds": seconds,
        "bytes": bytes,
        "datagrams": datagrams,
        "gbit_per_s": gbit_per_s(bytes, seconds),
        "calls": timed.calls,
        "cpu_user_s": usage.user.as_secs_f64(),
        "cpu_sys_s": usage.system.as_secs_f64(),
        "cpu_share": cpu_share(usage, seconds),
        "cpu_us_per_mb": cpu_us_per_mb(usage, bytes),
        "cpu_ns_per_packet": ns_per_packet(cpu, datagrams),
        "zerocopy": why.clone().map_or(Value::Bool(bound == "zerocopy"), Value::String),
        "interrupted": timed.interrupted,
        "failed": failed,
        "why": why.map(|w| format!("AF_XDP {bound}: {w}")),
    })))
}

/// CPU nanoseconds per datagram (0 when none was sent).
pub fn ns_per_packet(cpu_seconds: f64, datagrams: u64) -> f64 {
    if datagrams == 0 {
        return 0.0;
    }
    cpu_seconds * 1e9 / datagrams as f64
}

/// The receiving end's `rx_packets` (`ip -s -j link show`, in its namespace).
fn sink_frames(veth: &VethPair) -> Result<u64> {
    let out = veth
        .b
        .command("ip")
        .args(["-s", "-j", "link", "show", "dev", &veth.b_if])
        .stderr(Stdio::inherit())
        .output()
        .context("reading the receiving veth end's counters with ip")?;
    if !out.status.success() {
        bail!("ip -s link show {} failed ({})", veth.b_if, out.status);
    }
    let links: Value = serde_json::from_slice(&out.stdout).context("parsing ip's JSON")?;
    links[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .context("ip -s -j link show gave no rx packet count")
}

/// An endpoint receiving at `local` on every rx queue of `iface` (as many as
/// `/sys/class/net/IF/queues/rx-*` name in this namespace), zero-copy where the driver has it.
pub fn bind_receiver(iface: &str, local: SocketAddr) -> Result<UdpEndpoint> {
    let dir = format!("/sys/class/net/{iface}/queues");
    let queues = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {dir}: is {iface} an interface here?"))?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("rx-")?
                .parse()
                .ok()
        })
        .collect::<Vec<u32>>();
    UdpEndpoint::bind(iface, local, EndpointConfig::with_queues(queues))
        .with_context(|| format!("binding the AF_XDP UDP endpoint at {local} on {iface}"))
}

/// The receiver row's AF_XDP fields: the api, the mode bound (and why not zero-copy), and the
/// frames the endpoint dropped as malformed, for a bad checksum or addressed elsewhere.
pub fn add_endpoint_fields(row: &mut Row, endpoint: &UdpEndpoint) {
    let socket = &endpoint.sockets()[0];
    let stats = endpoint.stats();
    row.insert("api".into(), json!("af_xdp"));
    row.insert("xdp_mode".into(), json!(socket.mode().as_str()));
    row.insert(
        "why".into(),
        json!(socket.zerocopy_status().err().map(ToString::to_string)),
    );
    row.insert("malformed".into(), json!(stats.malformed));
    row.insert("bad_checksum".into(), json!(stats.bad_checksum));
    row.insert("not_for_us".into(), json!(stats.not_for_us));
}
