//! `zcnet lease {apply|restore|show}`: a NIC receive queue dedicated to one flow for io_uring
//! zero-copy receive or AF_XDP ([`zcnet::queue_lease`]), its crash records, and their restore.
//! `apply` holds the lease until SIGINT/SIGTERM (or `--for`), then puts back what it changed; a
//! holder killed outright leaves its record, which `zcnet lease restore` — or any later `zcnet`
//! run ([`restore_at_start`]) — puts back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use zcnet::queue_lease::{
    DEFAULT_DIR, FlowMatch, Lease, LeaseSpec, RestoreOutcome, RestoreReport, records,
    restore_abandoned,
};

use crate::live;
use crate::report::outln;

/// `zcnet lease …`.
#[derive(Debug, clap::Subcommand)]
pub enum LeaseCommand {
    /// Dedicate a receive queue to a flow and hold it until Ctrl-C (SIGINT/SIGTERM), then put
    /// back exactly what was changed.
    Apply(ApplyArgs),
    /// Put back the leases whose holder is gone (killed, crashed), from their records.
    Restore(RecordsArg),
    /// List the lease records: holder, queue, and what each would put back.
    Show(RecordsArg),
}

/// Where the records are.
#[derive(Debug, clap::Args)]
pub struct RecordsArg {
    /// The lease record directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DIR)]
    records: PathBuf,
}

/// Options of `zcnet lease apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// The interface.
    #[arg(long)]
    iface: String,
    /// The receive queue to dedicate.
    #[arg(long)]
    queue: u32,
    /// First set the interface's queue count (combined channels, or RX and TX).
    #[arg(long, value_name = "N")]
    channels: Option<u32>,
    /// Turn on header split (tcp-data-split) and set hds-thresh 0, as io_uring zcrx needs.
    #[arg(long)]
    header_split: bool,
    /// Take the queue out of the default RSS indirection table.
    #[arg(long)]
    isolate: bool,
    /// Steer this flow to the queue with an ntuple rule: tcp:PORT, udp:PORT, tcp:IPV4:PORT, ….
    #[arg(long, value_name = "FLOW")]
    flow: Option<FlowMatch>,
    /// Everything zcrx needs: --header-split --isolate (with --flow, the rule too).
    #[arg(long)]
    zcrx: bool,
    /// Hold the lease this many seconds, then put it back (default: until SIGINT/SIGTERM).
    #[arg(long = "for", value_name = "SECONDS")]
    hold_for: Option<f64>,
    #[command(flatten)]
    records: RecordsArg,
}

/// Runs `zcnet lease …`.
pub fn run(cmd: LeaseCommand) -> Result<()> {
    match cmd {
        LeaseCommand::Apply(args) => apply(args),
        LeaseCommand::Restore(args) => {
            let reports = restore_abandoned(&args.records)?;
            if reports.is_empty() {
                outln!("no lease records in {}", args.records.display());
            }
            let failed = report(&reports, true);
            if failed > 0 {
                bail!("{failed} lease(s) not put back whole: their records are kept");
            }
            Ok(())
        }
        LeaseCommand::Show(args) => show(&args.records),
    }
}

fn apply(args: ApplyArgs) -> Result<()> {
    let mut spec = LeaseSpec::new(&args.iface, args.queue);
    spec.channels = args.channels;
    spec.header_split = args.header_split || args.zcrx;
    spec.isolate = args.isolate || args.zcrx;
    spec.flow = args.flow;
    live::watch_interrupts()?;
    let lease = Lease::apply(&spec, &args.records.records)?;
    for line in lease.applied() {
        outln!("applied: {line}");
    }
    outln!(
        "holding {} queue {} (record {}); SIGINT/SIGTERM puts it back",
        spec.iface,
        spec.queue,
        lease.record_path().display()
    );
    let until = args
        .hold_for
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    while !live::interrupted() && until.is_none_or(|t| Instant::now() < t) {
        std::thread::sleep(Duration::from_millis(50));
    }
    match lease.restore() {
        Ok(lines) => {
            for line in lines {
                outln!("restored: {line}");
            }
            Ok(())
        }
        Err(failed) => {
            for (step, e) in &failed {
                outln!("NOT restored: step {step}: {e}");
            }
            bail!("the lease was not put back whole: its record is kept for zcnet lease restore")
        }
    }
}

/// Prints each report; returns how many failed.
fn report(reports: &[RestoreReport], verbose: bool) -> usize {
    let mut failed = 0;
    for r in reports {
        let who = r.record.as_ref().map_or_else(
            || r.path.display().to_string(),
            |rec| format!("{} queue {} (pid {})", rec.iface, rec.queue, rec.pid),
        );
        match &r.outcome {
            RestoreOutcome::Restored(lines) => {
                outln!("restored lease of {who}: {}", lines.join("; "));
            }
            RestoreOutcome::DeviceGone => {
                outln!("lease of {who}: the device is gone; record removed");
            }
            RestoreOutcome::Failed {
                restored,
                failed: f,
            } => {
                failed += 1;
                let steps: Vec<String> = f.iter().map(|(s, e)| format!("{s}: {e}")).collect();
                outln!(
                    "lease of {who}: put back {}; NOT put back: {}",
                    restored.join("; "),
                    steps.join("; ")
                );
            }
            RestoreOutcome::Unreadable(e) => {
                failed += 1;
                outln!("lease record {}: {e}", r.path.display());
            }
            RestoreOutcome::Held if verbose => outln!("lease of {who}: held by a running process"),
            RestoreOutcome::OtherNamespace if verbose => {
                outln!("lease of {who}: of another network namespace (restore it from there)");
            }
            RestoreOutcome::Held | RestoreOutcome::OtherNamespace => {}
            other => outln!("lease of {who}: {other:?}"),
        }
    }
    failed
}

fn show(dir: &Path) -> Result<()> {
    let all = records(dir)?;
    if all.is_empty() {
        outln!("no lease records in {}", dir.display());
    }
    for (path, record) in all {
        match record {
            Ok(r) => {
                let state = if r.holder_alive() {
                    "held"
                } else {
                    "abandoned"
                };
                outln!(
                    "{}: {} queue {} (ifindex {}), pid {} {state}",
                    path.display(),
                    r.iface,
                    r.queue,
                    r.ifindex,
                    r.pid
                );
                for line in r.to_text().lines().filter(|l| l.starts_with("undo ")) {
                    outln!("  {line}");
                }
            }
            Err(e) => outln!("{}: {e}", path.display()),
        }
    }
    Ok(())
}

/// Puts back, before any other command runs, the leases of [`DEFAULT_DIR`] whose holder is gone,
/// saying so on standard error; quiet when there are none.
pub fn restore_at_start() {
    match restore_abandoned(Path::new(DEFAULT_DIR)) {
        Ok(reports) => {
            for r in &reports {
                if let (Some(rec), RestoreOutcome::Restored(lines)) = (&r.record, &r.outcome) {
                    eprintln!(
                        "zcnet: put back the lease of {} queue {} left by pid {}: {}",
                        rec.iface,
                        rec.queue,
                        rec.pid,
                        lines.join("; ")
                    );
                } else if let RestoreOutcome::Failed { failed, .. } = &r.outcome {
                    eprintln!(
                        "zcnet: could not put back the lease record {} ({} step(s) failed): see zcnet lease restore",
                        r.path.display(),
                        failed.len()
                    );
                }
            }
        }
        Err(e) => eprintln!("zcnet: lease records in {DEFAULT_DIR}: {e}"),
    }
}
