//! `zcnet-guest`: zcnet's checks that need a guest kernel, run by vm/run-suite inside a QEMU guest, and the
//! host-side peer they stream to. Prints one PASS/FAIL/SKIP line per check; exits non-zero on any failure.

#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod nic;
mod nic_uring;
mod observe;
mod observe_bpftrace;
mod observe_reference;
mod observe_zcrx;
mod outcome;
mod ovs;
mod ovs_bounds;
mod ovs_dump;
mod ovs_frame;
mod ovs_peer;
mod ovs_show_vanish;
mod ovs_wire;
mod pattern;
mod peer;
mod uring_sysctl;
mod vsock;
mod vsock_async;
mod vsock_credit;
mod vsock_optmem;
mod vsock_seqpacket;
mod vsock_timeout;
mod vsock_trace;
mod vsock_uring;
mod wire;
mod xdp_endpoint;
mod xdp_zc;
mod zcrx;
mod zcrx_broker;

/// zcnet's guest-kernel checks and their host-side peer.
#[derive(Debug, Parser)]
#[command(name = "zcnet-guest", about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// In the guest: AF_VSOCK MSG_ZEROCOPY over vsock_loopback.
    Vsock,
    /// In the guest: TCP and UDP streams over the guest's NIC to the peer at --peer.
    Nic {
        /// Address of the host-side peer.
        #[arg(long)]
        peer: IpAddr,
        /// The guest's NIC.
        #[arg(long, default_value = "eth0")]
        iface: String,
    },
    /// In the guest: an Open vSwitch datapath over --port devices, run by zcnet's learning switch.
    Ovs {
        /// A device to make a port of the datapath (repeat).
        #[arg(long = "port", required = true)]
        ports: Vec<String>,
    },
    /// In the guest, in a namespace behind the switch: answer and verify the peer's datagrams.
    OvsEcho {
        /// Address to answer on.
        #[arg(long)]
        listen: IpAddr,
        /// Give up after this many seconds without the final datagram.
        #[arg(long, default_value_t = 600)]
        max_seconds: u64,
    },
    /// On the host side of the guest's NIC: send datagrams through the guest's switch to its agent.
    OvsPeer {
        /// Address to send from.
        #[arg(long)]
        listen: IpAddr,
        /// The echo agent's address.
        #[arg(long)]
        agent: IpAddr,
    },
    /// In the guest: AF_XDP zero-copy on the guest's NIC, every frame checked against the peer at --peer.
    Xdp {
        /// Address of the host-side peer.
        #[arg(long)]
        peer: IpAddr,
        /// The guest's IPv4 address on the NIC (the source of the frames it builds).
        #[arg(long)]
        ip: std::net::Ipv4Addr,
        /// The guest's NIC.
        #[arg(long, default_value = "eth0")]
        iface: String,
    },
    /// In the guest: `zcnet::observe` with its kprobe on `skb_copy_ubufs`, against zcnet's senders,
    /// a copying sender and a tapped interface.
    Observe,
    /// In the guest: io_uring zero-copy receive (device-less over loopback, and its refusals).
    Zcrx {
        /// Only check that the kernel refuses zcrx as too old (the 6.12 boot).
        #[arg(long)]
        expect_too_old: bool,
        /// Also try a real registration on queue 0 of this NIC (refused without header split).
        #[arg(long)]
        iface: Option<String>,
        /// Also receive a stream the host-side peer at this address sends over the NIC.
        #[arg(long)]
        peer: Option<IpAddr>,
    },
    /// The worker of the zcrx broker check, run by it as uid 65534: receives through the instance
    /// the broker at `broker` hands it.
    #[command(hide = true)]
    ZcrxWorker {
        /// The broker's socket.
        #[arg(long)]
        broker: std::path::PathBuf,
        /// The sender to connect to.
        #[arg(long)]
        connect: std::net::SocketAddr,
    },
    /// In the guest: kernel.io_uring_disabled and kernel.io_uring_group set live, each named by the
    /// probe and by the sender's fallback (changes both sysctls, and puts them back).
    UringSysctl,
    /// The part of `uring-sysctl` run in a user namespace: checks one setting from there.
    #[command(hide = true)]
    UringSysctlChild {
        /// What the setting must do to io_uring.
        #[arg(long, value_enum)]
        expect: uring_sysctl::Expect,
    },
    /// On the host side of the guest's NIC: receive and verify the guest's streams.
    Peer {
        /// Address to listen on.
        #[arg(long)]
        listen: IpAddr,
        /// Give up after this many seconds without the guest's Quit.
        #[arg(long, default_value_t = 300)]
        max_seconds: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (name, result) = match cli.command {
        Command::Vsock => ("vsock", vsock::run()),
        Command::Nic { peer, iface } => ("nic", nic::run(peer, &iface)),
        Command::Ovs { ports } => ("ovs", ovs::run(&ports)),
        Command::OvsEcho {
            listen,
            max_seconds,
        } => (
            "ovs-echo",
            ovs_peer::echo(listen, Duration::from_secs(max_seconds)),
        ),
        Command::OvsPeer { listen, agent } => ("ovs-peer", ovs_peer::peer(listen, agent)),
        Command::Observe => ("observe", observe::run()),
        Command::Xdp { peer, ip, iface } => ("xdp", xdp_zc::run(peer, ip, &iface)),
        Command::Zcrx {
            expect_too_old,
            iface,
            peer,
        } => ("zcrx", zcrx::run(expect_too_old, iface.as_deref(), peer)),
        Command::ZcrxWorker { broker, connect } => {
            return zcrx_broker::worker(&broker, connect);
        }
        Command::UringSysctl => ("uring-sysctl", uring_sysctl::run()),
        Command::UringSysctlChild { expect } => {
            return if uring_sysctl::child(expect) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Command::Peer {
            listen,
            max_seconds,
        } => ("peer", peer::run(listen, Duration::from_secs(max_seconds))),
    };
    let passed = match result {
        Ok(outcome) => outcome.passed(),
        Err(e) => {
            println!("FAIL {name} setup: {e:#}");
            false
        }
    };
    println!(
        "ZCNET-DONE {name} {}",
        if passed { "passed" } else { "failed" }
    );
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
