//! `zcnet bench …`: each path against its copying counterpart, side by side. A bench is a pipeline
//! whose steps are the folders here, each using only the steps before it: its flags ([`args`]: what
//! they say, checked, nothing run), the plan of its runs ([`plan`]: sizes, and the order of modes
//! and APIs over rounds), the runs ([`run`]: one driver per path, and the receivers on the other
//! side), and the report of their rows ([`report`]: the table and JSON, the crossover of a sweep,
//! its SVG picture). This file only names the benches and hands each one's runs to its report.

use anyhow::Result;
use clap::Subcommand;

pub(crate) mod args;
pub(crate) mod plan;
pub(crate) mod report;
pub(crate) mod run;

/// The benches.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// TCP stream with MSG_ZEROCOPY (both sides on this host, or apart with --listen/--connect).
    Tcp(args::tcp::TcpArgs),
    /// UDP datagrams with MSG_ZEROCOPY, optionally with GSO or into an XDP drop sink.
    Udp(args::udp::UdpArgs),
    /// TCP zero-copy receive (TCP_ZEROCOPY_RECEIVE) against plain recv, as tcp_mmap does.
    Rx(args::rx::RxArgs),
    /// AF_XDP against AF_PACKET TPACKET_V3 and recvmmsg/sendmmsg on a veth pair.
    Xdp(args::xdp::BenchXdpArgs),
    /// AF_VSOCK with MSG_ZEROCOPY, in the style of vsock_perf.
    Vsock(args::vsock::VsockArgs),
    /// Open vSwitch upcalls: Hits, Missed, Lost with the aligned and unaligned upcall formats.
    Upcall(args::upcall::UpcallArgs),
}

/// Runs the bench `bench` names, then reports what its runs handed over (a `--listen` receiver has
/// reported each stream as it ended).
pub fn run(bench: Bench) -> Result<()> {
    match bench {
        Bench::Tcp(args) => match run::tcp::run(&args)? {
            Some(rounds) => report::sends::finish(rounds, &args.common, "tcp"),
            None => Ok(()),
        },
        Bench::Udp(args) => match run::udp::run(&args)? {
            Some(rounds) => report::sends::finish(rounds, &args.common, "udp"),
            None => Ok(()),
        },
        Bench::Rx(args) => match run::rx::run(&args)? {
            Some(run::rx::RxEnded::Runs(runs)) => report::rx::finish(runs, &args),
            Some(run::rx::RxEnded::Sent(sent)) => report::rx::sent(sent, &args),
            None => Ok(()),
        },
        Bench::Xdp(args) => {
            report::xdp::print(&run::xdp::run(&args)?, &args);
            Ok(())
        }
        Bench::Vsock(args) => match run::vsock::run(&args)? {
            Some(runs) => report::vsock::finish(runs, &args),
            None => Ok(()),
        },
        Bench::Upcall(args) => {
            report::upcall::print(&run::upcall::run(&args)?, &args);
            Ok(())
        }
    }
}
