//! The learning switch's bounds, checked in the guest after the main Open vSwitch run, on a datapath
//! of its own whose one port is `device`:
//! 1. `serve` keeps its deadline under a sustained flood of misses: frames from a pool of random
//!    source and destination MACs are sent into the datapath through its local port for
//!    [`FLOOD`] by a second thread, while every `serve(SLICE)` returns within a generous bound; the
//!    MAC table and the installed flows stay under the small limits given;
//! 2. `serve(Duration::MAX)`, a timeout too long for the clock to reach, has no deadline: on a
//!    thread of its own it waits for an upcall, handles what is queued and returns once frames of
//!    new MACs reach the datapath (the way a serve without deadline ends), never panicking on the
//!    deadline's sum;
//! 3. a kernel call refused mid-serve is reported and survived: a second client opens the datapath by
//!    name and deletes it under the switch, after which `serve` still returns `Ok`, counts failed
//!    calls and reports them as events naming the call and errno.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::ovs::{
    Datapath, DatapathConfig, Dispatch, LearningSwitch, SwitchEvent, SwitchLimits, TableSizes,
};

use crate::outcome::Outcome;

/// How long the flood lasts.
const FLOOD: Duration = Duration::from_secs(8);
/// At most this many frames are sent.
const MAX_FRAMES: u64 = 1_000_000;
/// Each `serve` call's timeout.
const SLICE: Duration = Duration::from_millis(300);
/// What a `serve` call may take beyond its timeout (one upcall's handling, in an emulated guest).
const SLACK: Duration = Duration::from_secs(3);
/// MACs in the flood's pool: many more than the switch may remember.
const POOL: u64 = 2000;
/// The switch's bounds: far fewer MACs and flows than the flood brings.
fn limits() -> SwitchLimits {
    let mut limits = SwitchLimits::default();
    limits.max_macs = 64;
    limits.max_flows = 16;
    limits.flow_idle = Duration::from_secs(10);
    limits
}

/// xorshift64: a reproducible stream of MAC indices.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn mac(i: u64) -> [u8; 6] {
    let b = i.to_be_bytes();
    [0x02, 0x5a, b[4], b[5], b[6], b[7]]
}

fn frame(src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental ethertype
    f
}

/// Longest wait for `serve(Duration::MAX)` to return while frames that miss are sent.
const NO_DEADLINE_WAIT: Duration = Duration::from_secs(60);

/// Runs the checks.
pub fn run(outcome: &mut Outcome, device: &str) -> anyhow::Result<()> {
    let name = format!("zc{}-b", std::process::id());
    let mut config = DatapathConfig::default();
    config.unaligned = true;
    config.dispatch = Dispatch::PerVport;
    let mut switch = LearningSwitch::new(&name, config, &[device], limits())
        .context("create the bounded switch")?;
    let port = switch.datapath().local_port()?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < FLOOD && n < MAX_FRAMES {
                let (s, d) = (next(&mut state) % POOL, next(&mut state) % POOL);
                if port.send(&frame(mac(s), mac(d))).is_ok() {
                    n += 1;
                }
            }
            sent.store(n, Ordering::Relaxed);
        })
    };
    let mut slowest = Duration::ZERO;
    let mut handled = 0;
    let mut over_limits = Vec::new();
    let started = Instant::now();
    while started.elapsed() < FLOOD {
        let t = Instant::now();
        handled += switch.serve(SLICE, |_| {})?;
        slowest = slowest.max(t.elapsed());
        let TableSizes { macs, flows, .. } = switch.table_sizes();
        let installed = switch.datapath().flows()?.len();
        if macs > limits().max_macs || flows > limits().max_flows || installed > limits().max_flows
        {
            over_limits.push((macs, flows, installed));
        }
    }
    stop.store(true, Ordering::Relaxed);
    flood.join().ok();
    let c = switch.counters();
    outcome.check(
        "serve-deadline",
        slowest <= SLICE + SLACK && handled > 0 && over_limits.is_empty(),
        &format!(
            "{} frames of random MACs flooded for {FLOOD:?}: {handled} misses handled, the slowest serve({SLICE:?}) took {slowest:?} (bound {:?}); MACs evicted {}, flows installed {}, evicted {}; over the limits {over_limits:?}",
            sent.load(Ordering::Relaxed),
            SLICE + SLACK,
            c.macs_evicted,
            c.flows_installed,
            c.flows_evicted
        ),
    );

    serve_without_deadline(outcome, &mut switch)?;

    // A second client deletes the datapath under the switch.
    Datapath::open(&name)?.delete()?;
    let before = switch.counters().failed_calls;
    let mut served = Ok(0);
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(2500) && served.is_ok() {
        served = switch.serve(SLICE, |_| {});
    }
    let failed = switch.counters().failed_calls - before;
    let events: Vec<String> = switch
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            SwitchEvent::Failed(e) => Some(e.to_string()),
            _ => None,
        })
        .collect();
    outcome.check(
        "failed-call-survived",
        served.is_ok() && failed > 0 && events.iter().any(|e| e.contains("ENODEV")),
        &format!(
            "with {name} deleted by a second client, serve returned {served:?}; {failed} failed call(s), first reported: {:?}",
            events.first()
        ),
    );
    Ok(())
}

/// Check 2: `serve(Duration::MAX)` on a thread returns the upcalls it handled once frames of MACs
/// the switch has not seen are sent into the datapath (one every 200 ms until it returns).
fn serve_without_deadline(
    outcome: &mut Outcome,
    switch: &mut LearningSwitch,
) -> anyhow::Result<()> {
    let port = switch.datapath().local_port()?;
    let returned = AtomicBool::new(false);
    let started = Instant::now();
    let mut frames = 0u64;
    let served = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let served = switch.serve(Duration::MAX, |_| {});
            returned.store(true, Ordering::Relaxed);
            served
        });
        // MACs beyond the flood's pool: each frame misses.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        while !returned.load(Ordering::Relaxed) && started.elapsed() < NO_DEADLINE_WAIT {
            std::thread::sleep(Duration::from_millis(200));
            let (src, dst) = (next(&mut state) % POOL, next(&mut state) % POOL);
            if port.send(&frame(mac(POOL + src), mac(POOL + dst))).is_ok() {
                frames += 1;
            }
        }
        server.join()
    });
    let took = started.elapsed();
    let what = match &served {
        Ok(served) => format!("returned {served:?}"),
        Err(_) => "panicked".to_string(),
    };
    outcome.check(
        "serve-no-deadline",
        matches!(served, Ok(Ok(handled)) if handled > 0),
        &format!(
            "serve(Duration::MAX) on a thread {what} after {took:?}, {frames} frame(s) of new MACs sent"
        ),
    );
    Ok(())
}
