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
use zcnet::observe::{Counters, LockedMemory, ObserveError, Observer, Owner, Scope, XdpSocket};
use zcnet::xdp::Statistics;

use crate::flags;
use crate::live::{interrupted, watch_interrupts};
use crate::xdp::Refused;

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
    // AF_XDP counters so far are not counted: read them before saying the observer is attached.
    let mut xdp = XdpWatch::start(&args);
    let out = output::Output::new(args.json);
    out.attached(&observer)?;
    let mut names = Names::default();
    let start = Instant::now();
    let every = (args.interval > 0.0).then(|| Duration::from_secs_f64(args.interval));
    let end = args.duration.map(Duration::from_secs_f64);
    let mut last: BTreeMap<Owner, Counters> = BTreeMap::new();
    let mut last_locked: BTreeMap<u32, LockedMemory> = BTreeMap::new();
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
        for locked in observer.locked_memory()? {
            if every.is_some() && last_locked.get(&locked.pid) != Some(&locked) {
                let named = names.of(Owner {
                    pid: locked.pid,
                    fd: None,
                });
                out.locked_row(t, named, &locked);
            }
            last_locked.insert(locked.pid, locked);
        }
        for (owner, socket, delta) in xdp.read(&args) {
            if every.is_some() && !delta.is_zero() {
                out.xdp_row(t, &names.of_xdp(owner, &socket), &socket, &delta);
            }
        }
    }
    let totals = observer.snapshot()?;
    let locked = observer.locked_memory()?;
    let seconds = start.elapsed().as_secs_f64();
    out.summary(seconds, &totals, &locked, &mut names);
    for (owner, socket, grown) in xdp.totals() {
        out.xdp_summary(seconds, &names.of_xdp(owner, &socket), &socket, &grown);
    }
    Ok(())
}

/// The AF_XDP sockets of the observed processes, read from the kernel's socket diagnostics at each
/// interval: what each counter was when the socket was first seen (zero for a socket created while
/// observing) and at the last read.
#[derive(Debug, Default)]
struct XdpWatch {
    /// Off once the kernel said it cannot show them (the `attached` output says why).
    off: bool,
    first: BTreeMap<Owner, Statistics>,
    last: BTreeMap<Owner, (XdpSocket, Statistics)>,
}

impl XdpWatch {
    /// Reads the sockets there are at the start: their counters so far are not counted.
    fn start(args: &ObserveArgs) -> XdpWatch {
        let mut watch = XdpWatch::default();
        for (owner, socket) in watch.sockets(args) {
            watch.first.insert(owner, socket.stats);
            watch.last.insert(owner, (socket.clone(), socket.stats));
        }
        watch
    }

    /// The observed processes' AF_XDP sockets, or none once the kernel refused: then this says why
    /// on standard error (unless the kernel has no xsk_diag, which `attached` already says) and stops
    /// reading them, the other counters going on.
    fn sockets(&mut self, args: &ObserveArgs) -> Vec<(Owner, XdpSocket)> {
        if self.off {
            return Vec::new();
        }
        zcnet::observe::xdp_sockets_of(&observed_pids(args)).unwrap_or_else(|e| {
            if !matches!(e, ObserveError::NoXdpDiag) {
                eprintln!("zcnet observe: AF_XDP socket counters no longer read: {e}");
            }
            self.off = true;
            Vec::new()
        })
    }

    /// The sockets now, each with what its counters grew by since the last read.
    fn read(&mut self, args: &ObserveArgs) -> Vec<(Owner, XdpSocket, Statistics)> {
        let mut out = Vec::new();
        for (owner, socket) in self.sockets(args) {
            self.first.entry(owner).or_default();
            let before = self
                .last
                .get(&owner)
                .map_or_else(Statistics::default, |l| l.1);
            out.push((owner, socket.clone(), socket.stats.since(&before)));
            self.last.insert(owner, (socket.clone(), socket.stats));
        }
        out
    }

    /// Every socket seen, with what its counters grew by while observed.
    fn totals(&self) -> Vec<(Owner, XdpSocket, Statistics)> {
        self.last
            .iter()
            .map(|(owner, (socket, stats))| {
                let first = self.first.get(owner).copied().unwrap_or_default();
                (*owner, socket.clone(), stats.since(&first))
            })
            .collect()
    }
}

/// The processes the flags select: the one of `--pid`, those of `--cgroup` (`cgroup.procs`),
/// or every process (`--all`).
fn observed_pids(args: &ObserveArgs) -> Vec<u32> {
    let listed = |text: String| {
        text.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    match (&args.pid, &args.cgroup) {
        (Some(pid), _) => vec![*pid],
        (None, Some(path)) => {
            listed(std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default())
        }
        (None, None) => std::fs::read_dir("/proc")
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default(),
    }
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
    /// An AF_XDP socket's owner, the socket named `xdp <interface>:<queue>`.
    pub fn of_xdp(&mut self, owner: Owner, socket: &XdpSocket) -> Named {
        let command = self.of(Owner { fd: None, ..owner }).command.clone();
        let interface = socket
            .interface
            .clone()
            .unwrap_or_else(|| format!("if{}", socket.ifindex));
        Named {
            owner,
            command,
            socket: Some(format!("xdp {interface}:{}", socket.queue_id)),
        }
    }

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
