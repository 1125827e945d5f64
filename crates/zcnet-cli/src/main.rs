//! `zcnet`: probe what this host's kernel can do with zero-copy networking, and benchmark each path
//! against its copying counterpart in one run.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod auto_why;
mod bench_apart;
mod bench_api;
mod bench_listen;
mod bench_listen_udp;
mod bench_rx;
mod bench_send;
mod bench_send_mmsg;
mod bench_send_xdp;
mod bench_serve;
mod bench_summary;
mod bench_tcp;
mod bench_udp;
mod bench_upcall;
mod bench_vsock;
mod bench_xdp;
mod child;
mod dp_cmd;
mod flags;
mod iperf3;
mod lease_cmd;
mod live;
mod measure_verdict;
mod observe;
mod plot;
mod probe_cmd;
mod probe_measure;
mod report;
mod send_watch;
mod sweep;
mod switch_cmd;
mod wire;
mod xdp_cmd;
mod xdp_feed;
mod xdp_meter;

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
    Probe(probe_cmd::ProbeArgs),
    /// Benchmark a zero-copy path against its copying counterpart, side by side.
    #[command(subcommand)]
    Bench(Bench),
    /// Run an AF_XDP application (rxdrop, txpush, l2fwd) on an interface.
    #[command(subcommand)]
    Xdp(xdp_cmd::XdpCommand),
    /// Run an L2 learning switch on the Open vSwitch kernel datapath over the given ports.
    Switch(switch_cmd::SwitchArgs),
    /// Show any Open vSwitch datapath's ports and flows, add and delete flows, in ovs-dpctl's text.
    #[command(subcommand)]
    Dp(dp_cmd::DpCommand),
    /// Dedicate a NIC receive queue to a flow (zcrx, AF_XDP) and put back exactly what changed.
    #[command(subcommand)]
    Lease(lease_cmd::LeaseCommand),
    /// Be a peer of stock iperf3: its server (-s) or its client (-c HOST), sending and receiving
    /// with zcnet.
    Iperf3(iperf3::Iperf3Args),
    /// Watch zero-copy happen in running processes: sends, completions, copies, mapped receives.
    Observe(observe::ObserveArgs),
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// TCP stream with MSG_ZEROCOPY (both sides on this host, or apart with --listen/--connect).
    Tcp(bench_tcp::TcpArgs),
    /// UDP datagrams with MSG_ZEROCOPY, optionally with GSO or into an XDP drop sink.
    Udp(bench_udp::UdpArgs),
    /// TCP zero-copy receive (TCP_ZEROCOPY_RECEIVE) against plain recv, as tcp_mmap does.
    Rx(bench_rx::RxArgs),
    /// AF_XDP against AF_PACKET TPACKET_V3 and recvmmsg/sendmmsg on a veth pair.
    Xdp(bench_xdp::BenchXdpArgs),
    /// AF_VSOCK with MSG_ZEROCOPY, in the style of vsock_perf.
    Vsock(bench_vsock::VsockArgs),
    /// Open vSwitch upcalls: Hits, Missed, Lost with the aligned and unaligned upcall formats.
    Upcall(bench_upcall::UpcallArgs),
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
        lease_cmd::restore_at_start();
    }
    let result = match cli.command {
        Command::Probe(args) => probe_cmd::run(args),
        Command::Bench(Bench::Tcp(args)) => bench_tcp::run_tcp(args),
        Command::Bench(Bench::Udp(args)) => bench_udp::run_udp(args),
        Command::Bench(Bench::Rx(args)) => bench_rx::run(args),
        Command::Bench(Bench::Xdp(args)) => bench_xdp::run(args),
        Command::Bench(Bench::Vsock(args)) => bench_vsock::run(args),
        Command::Bench(Bench::Upcall(args)) => bench_upcall::run(args),
        Command::Xdp(cmd) => xdp_cmd::run(cmd),
        Command::Switch(args) => switch_cmd::run(args),
        Command::Dp(cmd) => dp_cmd::run(cmd),
        Command::Lease(cmd) => lease_cmd::run(cmd),
        Command::Iperf3(args) => iperf3::run(args),
        Command::Observe(args) => observe::run(args),
    };
    match result {
        // The error was reported when the write failed.
        Ok(()) if report::output_failed() => ExitCode::FAILURE,
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<xdp_cmd::Refused>() => {
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
