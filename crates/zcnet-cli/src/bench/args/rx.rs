//! Parse: the flags of `zcnet bench rx`.

use std::path::PathBuf;

use crate::bench::args::apart::{ApartFlags, ServeFlags, TcpTimeouts};
use crate::flags;

/// How the receiver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// Plain recv into a buffer of the window's size.
    Copy,
    /// TCP_ZEROCOPY_RECEIVE into a mapped window, copybuf for the rest.
    Zerocopy,
    /// The library's default: map or recv, whichever measures cheaper in CPU per byte.
    Auto,
}

/// Which kernel interface receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ApiArg {
    /// The socket: recv, TCP_ZEROCOPY_RECEIVE or both (RxPath::Socket), as --mode says.
    Socket,
    /// io_uring zero-copy receive, device-less (RxPath::Zcrx, Linux 7.1+): every byte copied by the
    /// kernel into a registered area; --mode only decides what auto reports.
    Zcrx,
}

/// How the sender writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SenderArg {
    /// Plain write() (its pages never map on the receiver).
    Copy,
    /// zcnet's MSG_ZEROCOPY sender from page-aligned pooled buffers (its pages map).
    Zerocopy,
}

/// What happens to mapped pages once read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReleaseArg {
    /// madvise(MADV_DONTNEED) right away, then tell the kernel the window is clean.
    Zap,
    /// Leave them for the next TCP_ZEROCOPY_RECEIVE to zap and replace.
    Lazy,
}

/// Options of `zcnet bench rx`.
#[derive(Debug, clap::Args)]
pub(crate) struct RxArgs {
    /// Receive modes to run, side by side (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "copy,zerocopy"
    )]
    pub(crate) mode: Vec<ModeArg>,
    /// Receive APIs to run, side by side (comma-separated): a row per --mode and API. A zcrx the
    /// kernel refuses gets a row saying why, not measured; the others still run, and the bench then
    /// fails (not with --sizes).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "socket")]
    pub(crate) api: Vec<ApiArg>,
    /// Sender mode.
    #[arg(
        long,
        value_enum,
        default_value = "zerocopy",
        conflicts_with = "listen"
    )]
    pub(crate) sender: SenderArg,
    /// MiB to send per connection.
    #[arg(long, default_value_t = 128, value_parser = flags::count64, conflicts_with = "listen")]
    pub(crate) mib: u64,
    /// Connections per mode; the modes alternate and each row sums its mode's connections.
    #[arg(long, default_value_t = 4, value_parser = flags::count, conflicts_with = "listen")]
    pub(crate) rounds: u32,
    /// Parallel streams of each connection, as iperf3's -P: each received on a thread of its own
    /// from a sender process of its own; a row per stream and a sum row, every stream's bytes
    /// counted and verified as one stream's are. With --connect, N streams to the --listen
    /// receiver, side by side; with --listen, N streams to each --mode's turn.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = flags::count)]
    pub(crate) parallel: u32,
    /// What the zerocopy receiver does with mapped pages once read.
    #[arg(long, value_enum, default_value = "zap", conflicts_with = "connect")]
    pub(crate) release: ReleaseArg,
    /// Bytes per write of the sender, in KiB.
    #[arg(long, default_value_t = 512, value_parser = flags::size, allow_hyphen_values = true, conflicts_with = "listen")]
    pub(crate) write_kib: usize,
    /// The sender's write sizes to sweep instead of one --write-kib, comma-separated, in bytes with
    /// K and M suffixes (e.g. 4K,16K,64K,256K; whole KiB, at most 64M): every --mode receives --mib
    /// written in pieces of every size, the order of the modes reversed from one size (and round)
    /// to the next; a row per size and mode, then the size from which zerocopy costs less CPU per MB
    /// than copy. The size is the sender's because the receiver's reads are the same whatever it is:
    /// what changes with it is how the sender's pages land in the segments that arrive (a zero-copy
    /// sender's pages map only when it writes whole pages). With --connect: one stream per --mode at
    /// each size for --rounds rounds, to a --listen receiver with the same --mode.
    #[arg(long, value_delimiter = ',', value_parser = flags::size, allow_hyphen_values = true, conflicts_with_all = ["write_kib", "listen"])]
    pub(crate) sizes: Vec<usize>,
    /// With --sizes: draw Gbit/s and CPU per MB of the receiver against the size, a line per mode,
    /// into FILE.svg (not with --connect: the receiver measures).
    #[arg(
        long,
        value_name = "FILE.svg",
        requires = "sizes",
        conflicts_with_all = ["connect", "listen"]
    )]
    pub(crate) plot: Option<PathBuf>,
    /// Receive window (zerocopy) or buffer (copy) in KiB [default: the library's, RxConfig::default()].
    #[arg(long, value_parser = flags::size, allow_hyphen_values = true, conflicts_with = "connect")]
    pub(crate) window_kib: Option<usize>,
    /// SO_RCVLOWAT in KiB for both modes, so that they differ only in how bytes reach user space
    /// (0: the kernel default of one byte) [default: the library's for bulk streams, RxConfig::bulk()].
    #[arg(long, value_parser = flags::size_or_zero, allow_hyphen_values = true, conflicts_with = "connect")]
    pub(crate) rcvlowat_kib: Option<usize>,
    /// Run over a veth pair between two namespaces (MTU 4148, or 4168 with --ipv6) instead of loopback
    /// with TCP_MAXSEG (needs root).
    #[arg(long)]
    pub(crate) netns: bool,
    /// Use IPv6.
    #[arg(long)]
    pub(crate) ipv6: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds between interval lines of the receiver (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = flags::interval, conflicts_with = "connect")]
    pub(crate) interval: f64,
    /// Attach no observer to count the kernel's copies of the receives (the rows'
    /// kernel_copied_per_byte is then null): for comparing with a receiver that runs without one.
    #[arg(long, conflicts_with = "connect")]
    pub(crate) no_kernel_copies: bool,
    /// Be the receiver only: listen on [ADDR:]PORT with one page of payload per segment and report each
    /// stream in every --mode's turn (until Ctrl-C, or --once).
    #[arg(long, value_name = "[ADDR:]PORT", conflicts_with_all = ["connect", "netns"])]
    pub(crate) listen: Option<String>,
    /// Be the sender only: send --mib to HOST:PORT once per --mode for each of --rounds rounds, a
    /// stream each, for a --listen receiver with the same --mode (the one-process mode runs its
    /// sender this way, in a process of its own, so that the receiver's page zaps need no TLB
    /// shootdown on its CPU).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "netns")]
    pub(crate) connect: Option<String>,
    #[command(flatten)]
    pub(crate) apart: ApartFlags,
    #[command(flatten)]
    pub(crate) serve: ServeFlags,
    #[command(flatten)]
    pub(crate) timeouts: TcpTimeouts,
}

/// Whether rows name their API (`--api` other than `socket` alone).
pub(crate) fn apis_shown(args: &RxArgs) -> bool {
    args.api != [ApiArg::Socket]
}
