//! `zcnet`: probe what this host's kernel can do with zero-copy networking, and benchmark each path
//! against its copying counterpart in one run.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod bench;
mod flags;
mod live;
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
    let result = match cli.command {
        Command::Probe(args) => probe::run(args),
        Command::Bench(bench) => bench::run(bench),
        Command::Xdp(cmd) => xdp::run(cmd),
        Command::Switch(args) => ovs::switch::run(args),
        Command::Dp(cmd) => ovs::dp::run(cmd),
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
