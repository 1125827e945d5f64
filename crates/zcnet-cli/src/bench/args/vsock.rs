//! Parse: the flags of `zcnet bench vsock`.

use std::path::PathBuf;

use zcnet::tx::Mode;

use crate::bench::args::api::Api;

/// Socket type of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Type {
    /// SOCK_STREAM.
    Stream,
    /// SOCK_SEQPACKET (each buffer is one message).
    Seqpacket,
}

/// The send APIs of `bench vsock`: a socket sender's two submission paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum VsockApi {
    /// `sendmsg(MSG_ZEROCOPY)` with completions on the error queue.
    Sendmsg,
    /// io_uring `IORING_OP_SEND_ZC` from registered buffers, notifications as CQEs (stream only).
    #[value(name = "io_uring")]
    IoUring,
}

impl From<VsockApi> for Api {
    fn from(api: VsockApi) -> Api {
        match api {
            VsockApi::Sendmsg => Api::Sendmsg,
            VsockApi::IoUring => Api::IoUring,
        }
    }
}

/// Options of `zcnet bench vsock`. A flag of the other side is a usage error: the sender's with
/// `--listen`, the receiver's with `--sender` (clap drops a `requires` when a flag that conflicts
/// with the required one is present, so such flags also name the other side's flag as a conflict).
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("role").args(["listen", "sender"]))]
pub(crate) struct VsockArgs {
    /// Bytes per send() (a K, M or G suffix multiplies by 1024, 1024², 1024³); several comma-separated
    /// sizes run one after the other.
    #[arg(long, value_delimiter = ',', value_parser = crate::flags::count64, default_value = "64K", conflicts_with = "listen")]
    pub(crate) buf_size: Vec<u64>,
    /// Buffer sizes to sweep, comma-separated (e.g. 4K,16K,64K,256K; at most 1G): bytes per send() as
    /// --buf-size, every --mode at every size with the order of the modes reversed from one size to
    /// the next; a row per size and mode, then the size from which zerocopy costs less CPU per MB
    /// than copy.
    #[arg(long, value_delimiter = ',', value_parser = crate::flags::size, conflicts_with_all = ["buf_size", "listen"])]
    pub(crate) sizes: Vec<usize>,
    /// With --sizes: draw Gbit/s and CPU per MB of the sender against the size, a line per mode,
    /// into FILE.svg.
    #[arg(
        long,
        value_name = "FILE.svg",
        requires = "sizes",
        conflicts_with = "listen"
    )]
    pub(crate) plot: Option<PathBuf>,
    /// Bytes to send per mode and buffer size (K, M, G suffixes as above).
    #[arg(long, value_parser = crate::flags::count64, default_value = "16M", conflicts_with = "listen")]
    pub(crate) bytes: u64,
    /// Modes to compare, comma-separated: copy, zerocopy, auto.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,zerocopy",
        conflicts_with = "listen"
    )]
    pub(crate) mode: Vec<Mode>,
    /// Send APIs to compare, comma-separated: sendmsg (MSG_ZEROCOPY, completions on the error
    /// queue), io_uring (SEND_ZC from the pool registered with the ring; stream only: a seqpacket
    /// message is sent whole by one call that waits, which io_uring does not make; a request the
    /// peer lacks credit for is copied yet counted in ZC IDS); each mode runs with each, side by
    /// side.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sendmsg",
        conflicts_with = "listen"
    )]
    pub(crate) api: Vec<VsockApi>,
    /// Vsock buffer (credit) of both sockets, SO_VM_SOCKETS_BUFFER_SIZE (K, M, G suffixes as above).
    #[arg(long, value_parser = crate::flags::count64, default_value = "4M")]
    pub(crate) vsk_size: u64,
    /// Socket type.
    #[arg(long = "type", value_enum, default_value = "stream")]
    pub(crate) socket_type: Type,
    /// Receiver only, as vsock_perf's receiver: listen on --port (any context id) and report each of
    /// --connections connections.
    #[arg(long, conflicts_with = "sender")]
    pub(crate) listen: bool,
    /// Sender only, as vsock_perf --sender: connect to context id CID on --port (2 = the host, from a
    /// guest), once per mode and buffer size.
    #[arg(long, value_name = "CID")]
    pub(crate) sender: Option<u32>,
    /// Port of --listen (4294967295, VMADDR_PORT_ANY: one the kernel chooses, and says) and of
    /// --sender (the loopback run listens on a port the kernel chooses).
    #[arg(long, default_value_t = 1234, requires = "role")]
    pub(crate) port: u32,
    /// Connections --listen serves before it exits (the sender makes one per mode and buffer size).
    #[arg(long, default_value_t = 1, value_parser = crate::flags::count, requires = "listen", conflicts_with = "sender")]
    pub(crate) connections: u32,
    /// Parallel streams, as iperf3's -P: each run's streams side by side, each on a thread of its
    /// own with its own connection and sender (and, in the loopback run, its own receiver), all
    /// under the process's one locked-memory budget; a row per stream and a sum row. With --sender,
    /// the --listen receiver takes the connections one after another: give it --connections for
    /// every stream.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = crate::flags::count, conflicts_with = "listen")]
    pub(crate) parallel: u32,
    /// One JSON object per run instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds between interval lines of the sender (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::interval, conflicts_with = "listen")]
    pub(crate) interval: f64,
}
