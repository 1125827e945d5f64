//! Run: `zcnet bench upcall`: the Open vSwitch upcall table of the zero-copy upcall patch (Hits, Missed,
//! Lost), reproduced with the unaligned user feature off and on side by side in one run.
//!
//! Each row creates a datapath, brings its local port up and sends UDP frames into it from a
//! generator thread, while the handler (this thread) receives every upcall and installs a drop flow
//! from its key — what a controller does. `many` flows: every frame has a new source address and port,
//! so every frame misses; `few` flows: frames cycle over a handful of flows, so after the first miss
//! of each they hit. The datapath counts hits, misses and lost upcalls; the handler counts the upcalls
//! it handled, their packet and message bytes, and its own CPU time; the generator's kernel time per
//! frame holds the datapath's work, the building of each upcall included (where the copy went).
//!
//! While a row runs, one line per `--interval` gives the packet bytes and upcalls handled in it and
//! the datapath's hits, misses and lost upcalls; Ctrl-C (SIGINT/SIGTERM) ends the row that runs
//! (marked `"interrupted": true`), deletes its datapath and prints the rows that ran.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use benchnet::frame::UdpFrame;
use serde_json::json;
use zcnet::ovs::{self, Datapath, DatapathConfig, Received, UpcallKind, UpcallSocket};
use zcnet::probe::{UsageOf, resource_usage};

use crate::bench::args::upcall::{FeatureArg, LoadArg, UpcallArgs};
use crate::live::{self, Ticker};
use crate::ovs::switch::DispatchArg;
use crate::report::{Row, object};

/// Why an upcall row has no `kernel_copied_per_byte`: the copy this bench is about has no tracepoint.
const UPCALL_COPIES_UNSEEN: &str = "not counted: no tracepoint shows the building of an upcall, \
     where the datapath copies the packet into the message or attaches its pages \
     (queue_userspace_packet); the netlink receive then copies every message byte \
     (message_bytes_per_upcall)";

/// Runs every (load, features) row, printing interval lines; Ctrl-C (SIGINT/SIGTERM) ends the row
/// that runs and deletes its datapath, and the rows that ran are handed to the report.
pub(crate) fn run(args: &UpcallArgs) -> Result<Vec<Row>> {
    if !(60..=1514).contains(&args.size) {
        return Err(crate::flags::UsageError(format!(
            "--size {} is not an Ethernet frame size (60 to 1514 bytes)",
            args.size
        ))
        .into());
    }
    live::watch_interrupts()?;
    for name in ovs::remove_stale("zc").context("removing datapaths of dead runs")? {
        eprintln!("removed datapath {name} left by a run that is gone");
    }
    let mut rows = Vec::new();
    for (i, (load, feature)) in args
        .load
        .iter()
        .flat_map(|l| args.features.iter().map(move |f| (*l, *f)))
        .enumerate()
    {
        rows.push(row(args, load, feature, i)?);
        if live::interrupted() {
            break;
        }
    }
    Ok(rows)
}

/// The frame generator: sends frames into the local port until `stop`; returns how many it sent and
/// its kernel CPU time. The datapath's lookup and the building of each upcall (the copy into the
/// message, or the attaching of pages) run inside the generator's sends.
fn generate(
    port: ovs::LocalPort,
    load: LoadArg,
    size: usize,
    flows: u16,
    stop: &AtomicBool,
) -> Result<(u64, Duration)> {
    let before = resource_usage(UsageOf::Thread)?;
    let mut buf = vec![0u8; size];
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = sent;
        let (src_ip, src_port) = match load {
            LoadArg::Many => (
                Ipv4Addr::from(0x0a63_0000 | ((n >> 16) as u32 & 0xffff)),
                n as u16,
            ),
            LoadArg::Few => (
                Ipv4Addr::new(10, 99, 0, 1),
                1000 + (n % u64::from(flows)) as u16,
            ),
        };
        let frame = UdpFrame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip,
            dst_ip: Ipv4Addr::new(10, 99, 1, 1),
            src_port,
            dst_port: 9,
        };
        let Some(len) = frame.write(&mut buf, n, size - 42) else {
            break;
        };
        if port.send(&buf[..len]).is_ok() {
            sent += 1;
        }
    }
    Ok((sent, resource_usage(UsageOf::Thread)?.since(&before).system))
}

fn row(args: &UpcallArgs, load: LoadArg, feature: FeatureArg, index: usize) -> Result<Row> {
    let name = format!("zc{}-b{index}", std::process::id());
    let mut upcalls = UpcallSocket::open()?;
    let mut config = DatapathConfig::default();
    config.unaligned = feature == FeatureArg::Unaligned;
    config.dispatch = args.dispatch.into();
    let mut dp = Datapath::create(&name, config, &upcalls)?;
    let port = dp.local_port()?;
    let stop = Arc::new(AtomicBool::new(false));
    let generator = {
        let (stop, size, flows) = (stop.clone(), args.size, args.flows);
        thread::spawn(move || generate(port, load, size, flows, &stop))
    };
    let mut ticker = Ticker::new(
        args.interval,
        json!({"bench": "upcall", "load": load.name(), "features": feature.name()}),
        args.json,
    );
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    let mut handled = 0u64;
    let mut interrupted = false;
    while start.elapsed() < Duration::from_secs_f64(args.duration) {
        if live::interrupted() {
            interrupted = true;
            break;
        }
        if upcalls.wait(Duration::from_millis(50))? {
            while let Some(received) = upcalls.recv()? {
                let Received::Upcall(up) = received else {
                    continue;
                };
                if up.kind == UpcallKind::Miss {
                    dp.install_flow(up.key.raw(), &[])?;
                    handled += 1;
                }
            }
        }
        // Interval lines: packet bytes of the upcalls handled, and the datapath's counters.
        ticker.tick_with(upcalls.counters().packet_bytes, || {
            let mut counts = vec![("upcalls", handled)];
            if let Ok(info) = dp.info() {
                let s = info.stats;
                counts.extend([
                    ("hits", s.n_hit),
                    ("missed", s.n_missed),
                    ("lost", s.n_lost),
                ]);
            }
            counts
        });
    }
    let seconds = start.elapsed().as_secs_f64();
    let usage = resource_usage(UsageOf::Thread)?.since(&before);
    stop.store(true, Ordering::Relaxed);
    let (sent, generator_sys) = generator.join().expect("generator thread")?;
    let stats = dp.info()?.stats;
    let counters = upcalls.counters();
    dp.delete()?;
    let per = |total: f64| {
        if handled == 0 {
            0.0
        } else {
            total / handled as f64
        }
    };
    let mut row = object(json!({
        "bench": "upcall",
        "load": load.name(),
        "features": feature.name(),
        "frame_bytes": args.size,
        "sent": sent,
        "hits": stats.n_hit,
        "missed": stats.n_missed,
        "lost": stats.n_lost,
        "upcalls": handled,
        "overflows": counters.overflows,
        "upcalls_per_s": handled as f64 / seconds,
        "packet_bytes_per_upcall": per(counters.packet_bytes as f64),
        "message_bytes_per_upcall": per(counters.message_bytes as f64),
        "user_us_per_upcall": per(usage.user.as_secs_f64() * 1e6),
        "sys_us_per_upcall": per(usage.system.as_secs_f64() * 1e6),
        "dispatch": match args.dispatch { DispatchArg::PerVport => "per-vport", DispatchArg::PerCpu => "per-cpu" },
        "generator_sys_us_per_frame": if sent == 0 { 0.0 } else { generator_sys.as_secs_f64() * 1e6 / sent as f64 },
        "emulated_cpu": super::emulated_cpu(),
        "interrupted": interrupted,
    }));
    super::copies::put(&mut row, &Err(UPCALL_COPIES_UNSEEN.to_string()), 0);
    Ok(row)
}
