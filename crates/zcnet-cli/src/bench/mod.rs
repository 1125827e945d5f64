//! `zcnet bench …`: each path against its copying counterpart, side by side. A bench is its flags
//! (each command's file, and [`send`]'s shared ones, [`apart`]'s for two hosts), the plan of its
//! runs ([`plan`]: sizes, and the order of modes over rounds), the runs ([`run`]: one driver per
//! path, and the receivers on the other side), and the report of their rows ([`report`]: the table
//! and JSON, the crossover of a sweep, its SVG picture).

use clap::Subcommand;

pub(crate) mod apart;
pub(crate) mod api;
pub(crate) mod args;
pub(crate) mod plan;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod rx;
pub(crate) mod send;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod upcall;
pub(crate) mod vsock;
pub(crate) mod xdp;

/// The benches.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// TCP stream with MSG_ZEROCOPY (both sides on this host, or apart with --listen/--connect).
    Tcp(tcp::TcpArgs),
    /// UDP datagrams with MSG_ZEROCOPY, optionally with GSO or into an XDP drop sink.
    Udp(udp::UdpArgs),
    /// TCP zero-copy receive (TCP_ZEROCOPY_RECEIVE) against plain recv, as tcp_mmap does.
    Rx(rx::RxArgs),
    /// AF_XDP against AF_PACKET TPACKET_V3 and recvmmsg/sendmmsg on a veth pair.
    Xdp(xdp::BenchXdpArgs),
    /// AF_VSOCK with MSG_ZEROCOPY, in the style of vsock_perf.
    Vsock(vsock::VsockArgs),
    /// Open vSwitch upcalls: Hits, Missed, Lost with the aligned and unaligned upcall formats.
    Upcall(upcall::UpcallArgs),
}

/// Runs the bench `bench` names.
pub fn run(bench: Bench) -> anyhow::Result<()> {
    match bench {
        Bench::Tcp(args) => tcp::run_tcp(args),
        Bench::Udp(args) => udp::run_udp(args),
        Bench::Rx(args) => rx::run(args),
        Bench::Xdp(args) => xdp::run(args),
        Bench::Vsock(args) => vsock::run(args),
        Bench::Upcall(args) => upcall::run(args),
    }
}
