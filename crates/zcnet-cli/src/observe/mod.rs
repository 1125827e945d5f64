//! `zcnet observe`: what the kernel's tracepoints show of zero-copy in running processes, per
//! process and per socket, a row per interval and a summary at the end (Ctrl-C, or `--duration`).
//! Flags become a [`zcnet::observe::Scope`]; the library's [`Observer`] counts; [`output`] writes
//! the rows.

mod output;
mod sockets;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{ArgGroup, Args};
use zcnet::observe::{Counters, ObserveError, Observer, Owner, Scope};

use crate::flags;
use crate::live::{interrupted, watch_interrupts};
use crate::xdp_cmd::Refused;

/// `zcnet observe` flags.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("scope").required(true).args(["pid", "cgroup", "all"])))]
pub struct ObserveArgs {
    /// Observe this process (all its threads).
    #[arg(long)]
    pid: Option<u32>,
    /// Observe the tasks of this cgroup v2 directory (e.g. /sys/fs/cgroup/system.slice/x.service).
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Observe every process on the host.
    #[arg(long)]
    all: bool,
    /// Seconds between rows of what changed (0: only the summary).
    #[arg(long, default_value_t = 1.0, value_parser = flags::interval)]
    interval: f64,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long, value_parser = flags::duration)]
    duration: Option<f64>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

/// How often the loop looks at the interruption flag.
const POLL: Duration = Duration::from_millis(50);
/// How often owners are named when no rows are printed (`--interval 0`).
const NAMING: Duration = Duration::from_secs(1);

/// Attaches, prints a row per owner that changed in each interval, and the totals at the end.
pub fn run(args: ObserveArgs) -> anyhow::Result<()> {
    let scope = match (&args.pid, &args.cgroup) {
        (Some(pid), _) => Scope::Process(*pid),
        (None, Some(path)) => Scope::cgroup(path)
            .map_err(|e| flags::UsageError(format!("--cgroup {}: {e}", path.display())))?,
        (None, None) => Scope::All,
    };
    watch_interrupts()?;
    let observer = Observer::attach(scope).map_err(|e| match e {
        ObserveError::Capabilities { .. } | ObserveError::NoTracefs => {
            anyhow::Error::new(Refused(e.to_string()))
        }
        other => anyhow::Error::new(other),
    })?;
    let out = output::Output::new(args.json);
    out.attached(&observer)?;
    let mut names = Names::default();
    let start = Instant::now();
    let every = (args.interval > 0.0).then(|| Duration::from_secs_f64(args.interval));
    let end = args.duration.map(Duration::from_secs_f64);
    let mut last: BTreeMap<Owner, Counters> = BTreeMap::new();
    // Without rows, owners are still looked at each second to name them while they live.
    let tick = every.unwrap_or(NAMING);
    let mut next_tick = start + tick;
    while !interrupted() && end.is_none_or(|end| start.elapsed() < end) {
        std::thread::sleep(POLL);
        if Instant::now() < next_tick {
            continue;
        }
        next_tick += tick;
        let now: BTreeMap<Owner, Counters> = observer.snapshot()?.into_iter().collect();
        let t = start.elapsed().as_secs_f64();
        for (owner, counters) in &now {
            let named = names.of(*owner);
            let delta = counters.since(last.get(owner).unwrap_or(&Counters::default()));
            if every.is_some() && !delta.is_zero() {
                out.row(t, named, &delta);
            }
        }
        last = now;
    }
    let totals = observer.snapshot()?;
    out.summary(start.elapsed().as_secs_f64(), &totals, &mut names);
    Ok(())
}

/// What a row calls an owner: the process's command name and the socket's addresses.
#[derive(Debug, Clone)]
pub struct Named {
    pub owner: Owner,
    pub command: String,
    pub socket: Option<String>,
}

/// Names resolved when a process or socket is first seen, and kept: a process that exited or a
/// socket closed since keeps its name.
#[derive(Debug, Default)]
pub struct Names {
    commands: HashMap<u32, String>,
    owners: HashMap<Owner, Named>,
}

impl Names {
    pub fn of(&mut self, owner: Owner) -> &Named {
        let command = self
            .commands
            .entry(owner.pid)
            .or_insert_with(|| sockets::command_name(owner.pid))
            .clone();
        self.owners.entry(owner).or_insert_with(|| Named {
            owner,
            command,
            socket: owner.fd.map(|fd| sockets::socket_name(owner.pid, fd)),
        })
    }
}
