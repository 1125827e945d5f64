//! The switch side of the Open vSwitch run, in the guest's root namespace: a datapath with the
//! unaligned user feature whose ports are the guest's NIC and a veth end (its peer is in the echo
//! agent's namespace), run by zcnet's learning switch while the host-side peer sends datagrams of
//! every checked length. Checks, in order:
//! 1. the user feature reads back as set;
//! 2. the first datagram of each flow and direction arrives as a MISS upcall whose packet is, byte
//!    for byte, the datagram (lengths 60, 61, 1001, 1514: the unpadded last attribute);
//! 3. the later datagrams of those flows are hits: the datapath's hit counter covers them;
//! 4. while the switch stops reading and the peer floods, the datapath counts lost upcalls and the
//!    upcall socket reports the overflow;
//! 5. after Open vSwitch's `ovs-dpctl dump-dps` opens the datapath, turning on per-CPU upcall
//!    dispatch (user features 0x1 become 0x9, no per-CPU sockets named), the switch registers its
//!    socket for per-CPU dispatch; a second `dump-dps` opens it while it is registered per CPU (the
//!    default switch's state), and with its flows deleted the peer's last echoes miss and are all
//!    forwarded without a lost upcall;
//! 6. Open vSwitch's `ovs-dpctl show` and `dump-flows` read the switch's datapath, ports, flows and
//!    counters as zcnet does;
//! 7. after the run no datapath, vport or flow remains;
//! 8. the switch's bounds on a datapath of their own (see `ovs_bounds`);
//! 9. dumps of long action lists and of deleted datapaths (see `ovs_dump`), and `zcnet dp show`
//!    over a datapath deleted while it reads (see `ovs_show_vanish`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use zcnet::ovs::{
    self, Datapath, DatapathConfig, DatapathInfo, Dispatch, FlowInfo, LearningSwitch, SwitchLimits,
    Upcall, UpcallKind,
};

use crate::outcome::Outcome;
use crate::ovs_frame;
use crate::ovs_wire::{self, DONE_PORT, ECHO_PORT, FRAME_LENGTHS, ROUNDS};

/// Longest wait of each phase (the emulated guest is slow; the peer starts once the guest boots).
const PHASE: Duration = Duration::from_secs(240);
/// Upcall queue while the switch does not read: a few upcalls fill it.
const SMALL_QUEUE: usize = 4096;
/// Upcall queue otherwise.
const QUEUE: usize = 4 << 20;

/// Which MISS upcalls carried an intact first datagram: (frame length, toward the agent?).
#[derive(Debug, Default)]
struct Misses {
    intact: BTreeSet<(usize, bool)>,
    bad: Vec<String>,
    done_seen: bool,
}

impl Misses {
    fn inspect(&mut self, up: &Upcall<'_>) {
        let Some(ovs::Ports { src, dst, .. }) = up.key.udp else {
            return;
        };
        if up.kind != UpcallKind::Miss {
            return;
        }
        if dst == DONE_PORT {
            self.done_seen = true;
        }
        let (len, toward_agent) =
            match (ovs_wire::length_of_port(src), ovs_wire::length_of_port(dst)) {
                (Some(len), None) if dst == ECHO_PORT => (len, true),
                (None, Some(len)) if src == ECHO_PORT => (len, false),
                _ => return,
            };
        match ovs_frame::check(up.packet, len) {
            Ok(_) => {
                self.intact.insert((len, toward_agent));
            }
            Err(why) => self.bad.push(format!(
                "{len}-byte frame {}: {why}",
                if toward_agent {
                    "to the agent"
                } else {
                    "to the peer"
                }
            )),
        }
    }

    fn complete(&self) -> bool {
        self.intact.len() == 2 * FRAME_LENGTHS.len()
    }
}

/// Runs Open vSwitch's `ovs-dpctl` (packed into the initramfs by vm/run-suite) and returns its output.
pub(crate) fn ovs_dpctl(args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("ovs-dpctl")
        .args(args)
        .output()
        .context("run ovs-dpctl")?;
    anyhow::ensure!(
        out.status.success(),
        "ovs-dpctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The datapath read by zcnet and by `ovs-dpctl` at one moment.
struct Reads {
    info: DatapathInfo,
    flows: Vec<FlowInfo>,
    /// `ovs-dpctl dump-flows`.
    ovs_flows: String,
    /// `ovs-dpctl show`.
    ovs_show: String,
}

/// How often [`read_alike`] reads before it takes what it read.
const READ_TRIES: u32 = 20;

/// Reads the datapath of `name` through zcnet (counters and flows), then through `ovs-dpctl`
/// (`dump-flows`, `show`), then zcnet's counters again. The traffic has ended, but a stray frame
/// (the guest stack's router solicitations, on its ports) can move the counters between the
/// reads: they are read again, a little later, until zcnet's two reads agree ([`READ_TRIES`] at
/// most; the last reads are returned then, and the comparison shows what moved).
fn read_alike(switch: &mut LearningSwitch, name: &str) -> anyhow::Result<Reads> {
    let mut tries = 0;
    loop {
        let info = switch.datapath().info()?;
        let flows = switch.datapath().flows()?;
        let ovs_flows = ovs_dpctl(&["dump-flows", name])?;
        let ovs_show = ovs_dpctl(&["show", name])?;
        let after = switch.datapath().info()?;
        tries += 1;
        if after.stats == info.stats || tries == READ_TRIES {
            return Ok(Reads {
                info,
                flows,
                ovs_flows,
                ovs_show,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Serves upcalls until `done` says so or `limit` passes; true if `done` did.
fn serve_until(
    switch: &mut LearningSwitch,
    misses: &mut Misses,
    limit: Duration,
    mut done: impl FnMut(&mut LearningSwitch, &Misses) -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    let start = Instant::now();
    let mut last_check = Instant::now();
    while start.elapsed() < limit {
        switch.serve(Duration::from_millis(100), |up| misses.inspect(up))?;
        if last_check.elapsed() >= Duration::from_millis(300) {
            last_check = Instant::now();
            if done(switch, misses)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Runs the switch over `ports` and makes the checks above.
pub fn run(ports: &[String]) -> anyhow::Result<Outcome> {
    let mut outcome = Outcome::new("ovs");
    let removed = ovs::remove_stale("zc").context("remove datapaths of dead runs")?;
    let name = format!("zc{}-g", std::process::id());
    let devices: Vec<&str> = ports.iter().map(String::as_str).collect();
    let mut config = DatapathConfig::default();
    config.unaligned = true;
    config.dispatch = Dispatch::PerVport;
    let mut switch = LearningSwitch::new(&name, config, &devices, SwitchLimits::default())
        .context("create the switch")?;
    switch.upcall_socket().set_queue_bytes(QUEUE)?;
    let info = switch.datapath().info()?;
    outcome.check(
        "user-features",
        info.user_features == config.user_features(),
        &format!(
            "datapath {name} reads back user features {:#x} (OVS_DP_F_UNALIGNED), {} stale removed",
            info.user_features,
            removed.len()
        ),
    );

    // Phase 1: first datagrams miss, later ones hit.
    let expected_hits = u64::from(ROUNDS - 1) * FRAME_LENGTHS.len() as u64 * 2;
    let mut misses = Misses::default();
    let settled = serve_until(&mut switch, &mut misses, PHASE, |sw, m| {
        Ok(m.complete() && sw.datapath().info()?.stats.n_hit >= expected_hits)
    })?;
    let stats = switch.datapath().info()?.stats;
    outcome.check(
        "miss-bytes",
        misses.complete() && misses.bad.is_empty(),
        &format!(
            "MISS upcalls with intact frames for {} of {} (length, direction) pairs; bad: {:?}",
            misses.intact.len(),
            2 * FRAME_LENGTHS.len(),
            misses.bad
        ),
    );
    outcome.check(
        "hits",
        settled && stats.n_hit >= expected_hits,
        &format!(
            "after the flows were installed: hits {} (>= {expected_hits} expected), missed {}, flows {}",
            stats.n_hit, stats.n_missed, stats.n_flows
        ),
    );

    // A packet longer than an attribute's 16-bit length can say is refused before anything is sent
    // (no errno: the kernel never saw it), never sent with a wrapped length.
    let refused = switch.datapath().execute(&vec![0; 65_532], &[], &[]);
    outcome.check(
        "execute-too-long",
        matches!(&refused, Err(e) if e.raw_os_error().is_none() && e.to_string().contains("65531")),
        &format!("a 65532-byte packet given to execute: {refused:?}"),
    );

    // Phase 2: stop reading while the peer floods.
    switch.upcall_socket().set_queue_bytes(SMALL_QUEUE)?;
    let start = Instant::now();
    let mut lost = 0;
    while start.elapsed() < PHASE && lost == 0 {
        std::thread::sleep(Duration::from_millis(200));
        lost = switch.datapath().info()?.stats.n_lost;
    }
    switch.upcall_socket().set_queue_bytes(QUEUE)?;
    serve_until(&mut switch, &mut misses, Duration::from_secs(2), |_, _| {
        Ok(false)
    })?;
    let overflows = switch.upcall_counters().overflows;
    outcome.check(
        "lost",
        lost > 0 && overflows > 0,
        &format!(
            "not reading under a flood: datapath lost {lost} upcalls, socket reported {overflows} overflow(s) (ENOBUFS)"
        ),
    );

    // Phase 3: Open vSwitch's own `ovs-dpctl dump-dps` opens the datapath, which turns on per-CPU
    // dispatch; the switch must follow before the peer's last echoes (it waits after the flood),
    // which miss again once the flows are deleted. A second `dump-dps` then opens it while the
    // switch is registered per CPU, as the default switch is: its per-CPU sockets must stay.
    let per_cpu = {
        let mut config = config;
        config.dispatch = Dispatch::PerCpu;
        config
    }
    .user_features();
    let dps = ovs_dpctl(&["dump-dps"])?;
    let followed = serve_until(&mut switch, &mut misses, PHASE, |sw, _| {
        Ok(sw.counters().dispatch_changes > 0)
    })?;
    let ovs::SwitchDispatch {
        dispatch,
        user_features: features_read,
        ..
    } = switch.dispatch();
    switch.datapath().delete_flows(None)?;
    ovs_dpctl(&["dump-dps"])?;
    let at_change = switch.datapath().info()?.stats;

    // Phase 4: serve until the peer's final datagram has been through, then tear down.
    let finished = serve_until(&mut switch, &mut misses, PHASE, |_, m| Ok(m.done_seen))?;
    serve_until(&mut switch, &mut misses, Duration::from_secs(3), |_, _| {
        Ok(false)
    })?;
    let reads = read_alike(&mut switch, &name)?;
    let (info, flows) = (reads.info, reads.flows);
    let vports = switch.datapath().vports()?;
    let upcalls = switch.upcall_counters();
    let counters = switch.counters();
    println!(
        "ovs: hits {} missed {} lost {} flows {}; upcalls {} ({} packet bytes, {} message bytes), switch {:?}",
        info.stats.n_hit,
        info.stats.n_missed,
        info.stats.n_lost,
        info.stats.n_flows,
        upcalls.received,
        upcalls.packet_bytes,
        upcalls.message_bytes,
        counters
    );
    for v in &vports {
        println!(
            "ovs: port {} {}: rx {} tx {} packets",
            v.port_no, v.name, v.stats.rx_packets, v.stats.tx_packets
        );
    }
    // Open vSwitch's ovs-dpctl reads the switch's datapath, ports, flows and counters as zcnet does
    // (read at one moment: see `read_alike`).
    let without_used = |line: &str| match line.find(", used:") {
        Some(i) => {
            let rest = &line[i + 2..];
            let end = rest.find(", ").map_or(rest.len(), |e| e + 2);
            format!("{}, {}", &line[..i], &rest[end..])
        }
        None => line.to_string(),
    };
    let now = ovs::monotonic_ms();
    let mut zc_lines: Vec<String> = flows.iter().map(|f| without_used(&f.line(now))).collect();
    let mut ovs_lines: Vec<String> = reads.ovs_flows.lines().map(without_used).collect();
    zc_lines.sort();
    ovs_lines.sort();
    let shown = reads.ovs_show;
    let lookups = format!(
        "lookups: hit:{} missed:{} lost:{}",
        info.stats.n_hit, info.stats.n_missed, info.stats.n_lost
    );
    let flow_count = format!("flows: {}", info.stats.n_flows);
    let ports_alike = vports
        .iter()
        .all(|v| shown.contains(&format!("port {}: {}", v.port_no, v.name)));
    let first_difference = zc_lines
        .iter()
        .zip(&ovs_lines)
        .find(|(a, b)| a != b)
        .map(|(a, b)| format!("zcnet: {a}\novs-dpctl: {b}"));
    outcome.check(
        "ovs-dpctl-reads-switch",
        zc_lines == ovs_lines
            && !zc_lines.is_empty()
            && shown.contains(&lookups)
            && shown.contains(&flow_count)
            && ports_alike,
        &format!(
            "ovs-dpctl show has `{lookups}`, `{flow_count}` and the {} ports: {}; {} flow lines (packets and bytes included) read the same through ovs-dpctl dump-flows as through zcnet ({} from ovs-dpctl){}; ovs-dpctl: `{}`",
            vports.len(),
            shown.contains(&lookups) && shown.contains(&flow_count) && ports_alike,
            zc_lines.len(),
            ovs_lines.len(),
            first_difference.map_or(String::new(), |d| format!("; first difference:\n{d}")),
            shown
                .lines()
                .find(|l| l.contains("lookups:"))
                .unwrap_or("no lookups line")
                .trim(),
        ),
    );
    if let Some(line) = zc_lines.first() {
        println!("ovs: e.g. {line}");
    }
    outcome.check(
        "follows-dispatch",
        followed
            && dispatch == Dispatch::PerCpu
            && features_read == per_cpu
            && info.stats.n_missed > at_change.n_missed
            && info.stats.n_lost == at_change.n_lost
            && counters.failed_calls == 0,
        &format!(
            "ovs-dpctl dump-dps ({}) set user features {per_cpu:#x}: the switch read {features_read:#x} and registered for {dispatch:?} dispatch ({} change(s)); after a second dump-dps, missed {} -> {}, lost {} -> {}; failed calls {}",
            dps.trim(),
            counters.dispatch_changes,
            at_change.n_missed,
            info.stats.n_missed,
            at_change.n_lost,
            info.stats.n_lost,
            counters.failed_calls
        ),
    );
    outcome.check(
        "final-datagram",
        finished,
        "the peer's final datagram went through the switch",
    );
    let ifindex = switch.datapath().ifindex();
    drop(switch);
    let left: Vec<String> = ovs::datapaths()?
        .into_iter()
        .filter(|d| d.name == name || d.ifindex == ifindex)
        .map(|d| d.name)
        .collect();
    let enslaved: Vec<&String> = ports
        .iter()
        .filter(|p| std::path::Path::new(&format!("/sys/class/net/{p}/master")).exists())
        .collect();
    outcome.check(
        "cleanup",
        left.is_empty() && enslaved.is_empty() && !flows.is_empty(),
        &format!(
            "after deleting {name} ({} flows, {} vports before): datapaths left {left:?}, ports still enslaved {enslaved:?}",
            flows.len(),
            vports.len()
        ),
    );
    crate::ovs_bounds::run(&mut outcome, &ports[ports.len() - 1])?;
    numbered_name(&mut outcome)?;
    crate::ovs_dump::run(&mut outcome)?;
    crate::ovs_show_vanish::run(&mut outcome)?;
    Ok(outcome)
}

/// A datapath created as `zcpct%d` is named as the kernel named its device (`%d` replaced by a
/// number), so that it can be opened again by that name.
fn numbered_name(outcome: &mut Outcome) -> anyhow::Result<()> {
    let upcalls = zcnet::ovs::UpcallSocket::open()?;
    let dp = Datapath::create("zcpct%d", DatapathConfig::default(), &upcalls)
        .context("create zcpct%d")?;
    let name = dp.name().to_string();
    let reopened = Datapath::open(&name).map(|d| d.ifindex() == dp.ifindex());
    outcome.check(
        "numbered-name",
        name.starts_with("zcpct") && !name.contains('%') && matches!(reopened, Ok(true)),
        &format!("created as zcpct%d: named {name:?}, opened again by that name: {reopened:?}"),
    );
    Ok(())
}
