//! Parse: the flags of `zcnet bench xdp`.

use crate::xdp::ModeArg;
use crate::xdp::feed::Feed;

/// Options of `zcnet bench xdp`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchXdpArgs {
    /// Seconds per path.
    #[arg(long, default_value_t = 2.0, value_parser = crate::flags::duration)]
    pub duration: f64,
    /// Frame length in bytes (without FCS): 54 (the headers and a 12-byte checked payload) to 1514 (the
    /// pair's MTU of 1500 and the Ethernet header).
    #[arg(long, default_value_t = 64, value_parser = crate::flags::size)]
    pub size: usize,
    /// Packets per receive batch.
    #[arg(long, default_value_t = 64, value_parser = crate::flags::batch)]
    pub batch: u32,
    /// AF_XDP mode (veth only does copy; auto says so).
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
    /// Applications to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rxdrop")]
    pub app: Vec<BenchApp>,
    /// After a partial batch, the AF_XDP receivers sleep this many microseconds to let frames gather
    /// (0: poll for every wakeup). TPACKET_V3 gathers frames the same way, in blocks retired after
    /// 10 ms.
    #[arg(long, default_value_t = 1000, value_parser = crate::flags::coalesce_us)]
    pub coalesce_us: u64,
    /// Paths to run, in this order (comma-separated names of the rows' `path`, e.g.
    /// tpacket_v3,af_xdp) [default: every path of each --app].
    #[arg(long = "path", value_delimiter = ',')]
    pub paths: Vec<String>,
    /// How the generator's frames reach the receiving interface.
    #[arg(long, value_enum, default_value_t = Feed::Xdp)]
    pub feed: Feed,
    /// Seconds between interval lines (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::interval)]
    pub interval: f64,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Which comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BenchApp {
    /// Receive and drop.
    Rxdrop,
    /// Transmit as fast as possible.
    Txpush,
    /// Return received frames to the peer.
    L2fwd,
}
