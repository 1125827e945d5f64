//! Parse: the flags of `zcnet bench udp`.

use crate::bench::args::Common;
use crate::flags;

/// Where UDP datagrams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Sink {
    /// A UDP socket in a receiver process that reads (and verifies) them.
    Socket,
    /// A native XDP program on the receiving veth end that drops every frame (implies --netns).
    XdpDrop,
}

/// Options of `zcnet bench udp`.
#[derive(Debug, clap::Args)]
pub(crate) struct UdpArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Segment size for UDP GSO (UDP_SEGMENT): each send of --size bytes leaves as segments of SEG.
    #[arg(long, value_name = "SEG", value_parser = flags::segment, conflicts_with = "listen")]
    pub(crate) gso: Option<u16>,
    /// Receiver of the datagrams (one-process mode).
    #[arg(long, value_enum, default_value = "socket", conflicts_with_all = ["listen", "connect"])]
    pub(crate) sink: Sink,
    /// With --listen --api af_xdp: the interface whose every rx queue the AF_XDP endpoint serves.
    #[arg(
        long,
        value_name = "IF",
        requires = "listen",
        conflicts_with = "connect"
    )]
    pub(crate) iface: Option<String>,
    /// Datagrams per sendmmsg(2) call of --api sendmmsg (1 to 1024, the kernel's UIO_MAXIOV).
    #[arg(long, default_value_t = 32, value_parser = flags::mmsg_batch, conflicts_with = "listen")]
    pub(crate) batch: usize,
}
