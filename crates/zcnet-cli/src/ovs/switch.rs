//! `zcnet switch --port IF --port IF …`: an L2 learning switch on the Open vSwitch kernel datapath.
//! Each miss upcall installs an exact-match flow from the upcall's key and executes the packet, so a
//! flow's later packets never leave the kernel. One line per second; SIGINT/SIGTERM delete the
//! datapath and everything in it. Datapaths named `zc<pid>…` whose process is gone (a killed run) are
//! removed at start. The switch follows the datapath's upcall dispatch when another tool changes it
//! (a line on stderr and a count in the final line), per-CPU dispatch being the default where the
//! kernel has it; its MAC table and flows are bounded and idle flows deleted.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zcnet::ovs::{
    self, DatapathConfig, Dispatch, LearningSwitch, OvsError, SwitchEvent, SwitchLimits,
};

use crate::live;
use crate::report::outln;

/// `--dispatch`: how the kernel picks the socket for an upcall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DispatchArg {
    /// One socket per vport (OVS_VPORT_ATTR_UPCALL_PID).
    PerVport,
    /// One socket per CPU (OVS_DP_F_DISPATCH_UPCALL_PER_CPU).
    PerCpu,
}

impl From<DispatchArg> for Dispatch {
    fn from(d: DispatchArg) -> Dispatch {
        match d {
            DispatchArg::PerVport => Dispatch::PerVport,
            DispatchArg::PerCpu => Dispatch::PerCpu,
        }
    }
}

fn dispatch_name(d: Dispatch) -> &'static str {
    match d {
        Dispatch::PerVport => "per-vport",
        Dispatch::PerCpu => "per-CPU",
    }
}

/// Whether `e`, from creating a per-CPU datapath, says the kernel has no per-CPU dispatch: a kernel
/// before 5.16 refuses the unknown user feature with `EOPNOTSUPP`.
fn per_cpu_unsupported(e: &OvsError) -> bool {
    e.call() == "OVS_DP_CMD_NEW" && e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Arguments of `zcnet switch`.
#[derive(Debug, Clone, clap::Args)]
pub struct SwitchArgs {
    /// A network device to make a port of the switch (repeat; it stops serving this host's stack
    /// until the switch ends).
    #[arg(long = "port", required = true)]
    ports: Vec<String>,
    /// Do not declare OVS_DP_F_UNALIGNED: the kernel then copies each packet into its upcall.
    #[arg(long)]
    aligned: bool,
    /// Upcall dispatch (default: per-CPU where the kernel has it, 5.16 and later, else per-vport).
    #[arg(long, value_enum)]
    dispatch: Option<DispatchArg>,
    /// MAC addresses remembered; one more forgets the least recently seen.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    max_macs: u32,
    /// Flows kept installed; one more deletes the least recently hit.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u32).range(1..))]
    max_flows: u32,
    /// Seconds a flow may go without a packet before it is deleted.
    #[arg(long, default_value_t = 10.0, value_parser = crate::flags::duration)]
    flow_idle: f64,
    /// Stop after this many seconds (default: until interrupted).
    #[arg(long, value_parser = crate::flags::duration)]
    duration: Option<f64>,
}

/// Prints what the switch has to say on stderr: dispatch changes and failed kernel calls.
fn report(switch: &mut LearningSwitch) {
    for event in switch.take_events() {
        match event {
            SwitchEvent::Dispatch {
                user_features,
                dispatch,
            } => eprintln!(
                "switch: the datapath's user features became {user_features:#x}: upcall socket registered for {} dispatch",
                dispatch_name(dispatch)
            ),
            SwitchEvent::Failed(e) => eprintln!("switch: {e} (going on)"),
            other => eprintln!("switch: {other:?}"),
        }
    }
}

/// Runs the switch until interrupted or `--duration` passes.
pub fn run(args: SwitchArgs) -> Result<()> {
    live::watch_interrupts()?;
    for name in ovs::remove_stale("zc").context("removing datapaths of dead runs")? {
        outln!("removed datapath {name} left by a run that is gone");
    }
    let name = format!("zc{}-sw", std::process::id());
    let devices: Vec<&str> = args.ports.iter().map(String::as_str).collect();
    let mut limits = SwitchLimits::default();
    limits.max_macs = args.max_macs as usize;
    limits.max_flows = args.max_flows as usize;
    limits.flow_idle = Duration::from_secs_f64(args.flow_idle);
    let config = |dispatch| {
        let mut config = DatapathConfig::default();
        config.unaligned = !args.aligned;
        config.dispatch = dispatch;
        config
    };
    let created = match args.dispatch {
        Some(d) => LearningSwitch::new(&name, config(d.into()), &devices, limits),
        None => match LearningSwitch::new(&name, config(Dispatch::PerCpu), &devices, limits) {
            Err(e) if per_cpu_unsupported(&e) => {
                eprintln!("this kernel has no per-CPU upcall dispatch ({e}); using per-vport");
                LearningSwitch::new(&name, config(Dispatch::PerVport), &devices, limits)
            }
            other => other,
        },
    };
    let mut switch =
        created.with_context(|| format!("creating datapath {name} with ports {devices:?}"))?;
    let ports: Vec<String> = switch
        .ports()
        .iter()
        .map(|(no, dev)| format!("{dev}={no}"))
        .collect();
    let features = switch.datapath().info()?.user_features;
    outln!(
        "switch {name}: ports {}, user features {features:#x} ({} dispatch), at most {} MACs and {} flows, idle flows deleted after {} s; Ctrl-C ends it and deletes the datapath",
        ports.join(" "),
        dispatch_name(switch.dispatch().dispatch),
        limits.max_macs,
        limits.max_flows,
        args.flow_idle
    );
    let start = Instant::now();
    let limit = args.duration.map(Duration::from_secs_f64);
    let mut tick = Instant::now();
    let mut handled_since = 0;
    while !live::interrupted() && limit.is_none_or(|l| start.elapsed() < l) {
        handled_since += switch.serve(Duration::from_millis(100), |_| {})?;
        report(&mut switch);
        if tick.elapsed() >= Duration::from_secs(1) {
            let secs = tick.elapsed().as_secs_f64();
            let stats = match switch.datapath().info() {
                Ok(info) => info.stats,
                Err(e) => {
                    eprintln!("switch: {e}");
                    tick = Instant::now();
                    continue;
                }
            };
            let macs = switch.table_sizes().macs;
            outln!(
                "{:>5.0}s upcalls/s {:>8.0} flows {:>6} hits {:>10} missed {:>8} lost {:>8} overflows {} macs {macs} failed calls {}",
                start.elapsed().as_secs_f64(),
                handled_since as f64 / secs,
                stats.n_flows,
                stats.n_hit,
                stats.n_missed,
                stats.n_lost,
                switch.upcall_counters().overflows,
                switch.counters().failed_calls
            );
            tick = Instant::now();
            handled_since = 0;
        }
    }
    let counters = switch.counters();
    if let Ok(i) = switch.datapath().info() {
        outln!(
            "final: hits {} missed {} lost {} flows {}; installed {} flows, flooded {} packets; evicted {} MACs and {} flows, {} idle flows deleted; dispatch changes {}, failed calls {}",
            i.stats.n_hit,
            i.stats.n_missed,
            i.stats.n_lost,
            i.stats.n_flows,
            counters.flows_installed,
            counters.flooded,
            counters.macs_evicted,
            counters.flows_evicted,
            counters.flows_expired,
            counters.dispatch_changes,
            counters.failed_calls
        );
    }
    drop(switch);
    outln!("datapath {name} deleted with its ports and flows");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: SwitchArgs,
    }

    #[test]
    fn the_default_flags_are_the_library_s_default_limits_and_auto_dispatch() {
        let args = Cli::try_parse_from(["switch", "--port", "a"]).unwrap().args;
        let d = SwitchLimits::default();
        assert_eq!(args.max_macs as usize, d.max_macs);
        assert_eq!(args.max_flows as usize, d.max_flows);
        assert_eq!(Duration::from_secs_f64(args.flow_idle), d.flow_idle);
        assert_eq!(args.dispatch, None);
        assert!(Cli::try_parse_from(["switch", "--port", "a", "--max-flows", "0"]).is_err());
    }
}
