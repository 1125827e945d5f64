//! `zcnet`: probe what this host's kernel can do with zero-copy networking, and benchmark each path
//! against its copying counterpart in one run.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod bench;
mod flags;
mod iperf3;
mod lease;
mod live;
mod observe;
mod ovs;
mod probe;
mod report;
mod xdp;

/// Linux zero-copy networking: probe the host, benchmark zero-copy against copy.
#[derive(Debug, Parser)]
#[command(name = "zcnet", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Report which zero-copy features this host supports, each measured by using it.
    Probe(probe::ProbeArgs),
    /// Benchmark a zero-copy path against its copying counterpart, side by side.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Run an AF_XDP application (rxdrop, txpush, l2fwd) on an interface.
    #[command(subcommand)]
    Xdp(xdp::XdpCommand),
    /// Run an L2 learning switch on the Open vSwitch kernel datapath over the given ports.
    Switch(ovs::switch::SwitchArgs),
    /// Show any Open vSwitch datapath's ports and flows, add and delete flows, in ovs-dpctl's text.
    #[command(subcommand)]
    Dp(ovs::dp::DpCommand),
    /// Dedicate a NIC receive queue to a flow (zcrx, AF_XDP) and put back exactly what changed.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Be a peer of stock iperf3: its server (-s) or its client (-c HOST), sending and receiving
    /// with zcnet.
    Iperf3(iperf3::Iperf3Args),
    /// Watch zero-copy happen in running processes: sends, completions, copies, mapped receives.
    Observe(observe::ObserveArgs),
}

/// Lets every option that takes a value take a negative number (`--size -1`), so that the value's
/// parser refuses it naming the flag rather than clap reading it as an unknown flag.
fn negatives_are_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        if arg.get_action().takes_values() {
            arg.allow_negative_numbers(true)
        } else {
            arg
        }
    })
    .mut_subcommands(negatives_are_values)
}

fn main() -> ExitCode {
    let matches = negatives_are_values(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // A lease whose holder was killed is put back by the next run (`lease` commands do it
    // themselves, with their own record directory).
    if !matches!(cli.command, Command::Lease(_)) {
        lease::restore_at_start();
    }
    let result = match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Bench(bench) => bench::run(bench),
        Command::Xdp(cmd) => xdp::run(cmd),
        Command::Switch(args) => ovs::switch::run(args),
        Command::Dp(cmd) => ovs::dp::run(cmd),
        Command::Lease(cmd) => lease::run(cmd),
        Command::Iperf3(args) => iperf3::run(args),
        Command::Observe(args) => observe::run(args),
    };
    match result {
        // The error was reported when the write failed.
        Ok(()) if report::output_failed() => ExitCode::FAILURE,
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<xdp::Refused>() => {
            eprintln!("zcnet: refused: {e}");
            ExitCode::from(2)
        }
        Err(e) if e.is::<flags::UsageError>() => {
            eprintln!("zcnet: usage error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("zcnet: error: {}", report::in_flag_words(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}
