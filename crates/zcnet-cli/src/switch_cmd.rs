//! `zcnet switch --port IF --port IF …`: an L2 learning switch on the Open vSwitch kernel datapath.
//! Each miss upcall installs an exact-match flow from the upcall's key and executes the packet, so a
//! flow's later packets never leave the kernel. One line per second; SIGINT/SIGTERM delete the
//! datapath and everything in it. Datapaths named `zc<pid>…` whose process is gone (a killed run) are
//! removed at start.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zcnet::ovs::{self, DatapathConfig, Dispatch, LearningSwitch};

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
    /// Upcall dispatch.
    #[arg(long, value_enum, default_value_t = DispatchArg::PerVport)]
    dispatch: DispatchArg,
    /// Stop after this many seconds (default: until interrupted).
    #[arg(long, value_parser = crate::flags::duration)]
    duration: Option<f64>,
}

/// Runs the switch until interrupted or `--duration` passes.
pub fn run(args: SwitchArgs) -> Result<()> {
    let interrupted = testnet::termination_flag()?;
    for name in ovs::remove_stale("zc").context("removing datapaths of dead runs")? {
        outln!("removed datapath {name} left by a run that is gone");
    }
    let name = format!("zc{}-sw", std::process::id());
    let devices: Vec<&str> = args.ports.iter().map(String::as_str).collect();
    let config = DatapathConfig {
        unaligned: !args.aligned,
        dispatch: args.dispatch.into(),
    };
    let mut switch = LearningSwitch::new(&name, config, &devices)
        .with_context(|| format!("creating datapath {name} with ports {devices:?}"))?;
    let ports: Vec<String> = switch
        .ports()
        .iter()
        .map(|(no, dev)| format!("{dev}={no}"))
        .collect();
    let features = switch.datapath().info()?.user_features;
    outln!(
        "switch {name}: ports {}, user features {features:#x}; Ctrl-C ends it and deletes the datapath",
        ports.join(" ")
    );
    let start = Instant::now();
    let limit = args.duration.map(Duration::from_secs_f64);
    let mut tick = Instant::now();
    let mut handled_since = 0;
    while !interrupted.load(std::sync::atomic::Ordering::Relaxed)
        && limit.is_none_or(|l| start.elapsed() < l)
    {
        handled_since += switch.serve(Duration::from_millis(100), |_| {})?;
        if tick.elapsed() >= Duration::from_secs(1) {
            let secs = tick.elapsed().as_secs_f64();
            let stats = switch.datapath().info()?.stats;
            outln!(
                "{:>5.0}s upcalls/s {:>8.0} flows {:>6} hits {:>10} missed {:>8} lost {:>8} overflows {}",
                start.elapsed().as_secs_f64(),
                handled_since as f64 / secs,
                stats.n_flows,
                stats.n_hit,
                stats.n_missed,
                stats.n_lost,
                switch.upcall_counters().overflows
            );
            tick = Instant::now();
            handled_since = 0;
        }
    }
    let counters = switch.counters();
    if let Ok(i) = switch.datapath().info() {
        outln!(
            "final: hits {} missed {} lost {} flows {}; installed {} flows, flooded {} packets",
            i.stats.n_hit,
            i.stats.n_missed,
            i.stats.n_lost,
            i.stats.n_flows,
            counters.flows_installed,
            counters.flooded
        );
    }
    drop(switch);
    outln!("datapath {name} deleted with its ports and flows");
    Ok(())
}
