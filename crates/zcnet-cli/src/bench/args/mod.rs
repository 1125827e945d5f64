//! Parse: what each bench's flags say, each checked as it is read and nothing run — a file per
//! bench ([`tcp`], [`udp`], [`rx`], [`vsock`], [`xdp`], [`upcall`]), the values of `--api`
//! ([`api`]), the flags of two sides apart ([`apart`]), and here the flags every bench of sends
//! shares (`bench tcp`, `bench udp`): sizes, modes, APIs, rounds, the pages and pool of the send
//! buffers, and the roles (`--listen`, `--connect`) with their addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::{Context, Result};
use zcnet::tx::Mode;

use crate::flags::{self, UsageError};

pub(crate) mod apart;
pub(crate) mod api;
pub(crate) mod rx;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod upcall;
pub(crate) mod vsock;
pub(crate) mod xdp;

use apart::ApartFlags;
use api::Api;

/// Options shared by both benches. The sender's are refused with `--listen`; `--api` is checked once
/// parsed (udp's receiver takes `--api af_xdp`).
#[derive(Debug, clap::Args)]
pub(crate) struct Common {
    /// Bytes per send call (K, M suffixes allowed).
    #[arg(long, value_parser = flags::size, allow_hyphen_values = true, conflicts_with = "listen")]
    pub(crate) size: Option<usize>,
    /// Send sizes to sweep instead of one --size, comma-separated (e.g. 1K,4K,16K,64K,256K): every
    /// --mode runs at every size, the order of the modes reversed from one size (and round) to the
    /// next; a row per size and mode, then the size from which zerocopy costs less CPU per MB than
    /// copy. Each size is the bytes of one send, within --size's limits (udp --gso: the bytes of one
    /// send, cut into --gso segments, the last one shorter; at most 64 segments and 65507 bytes).
    #[arg(long, value_delimiter = ',', value_parser = flags::size, allow_hyphen_values = true, conflicts_with_all = ["size", "listen"])]
    pub(crate) sizes: Vec<usize>,
    /// With --sizes: draw Gbit/s and CPU per MB against the size, a line per mode, into FILE.svg.
    #[arg(
        long,
        value_name = "FILE.svg",
        requires = "sizes",
        conflicts_with = "listen"
    )]
    pub(crate) plot: Option<PathBuf>,
    /// Seconds each mode runs.
    #[arg(long, default_value_t = 2.0, value_parser = flags::duration, conflicts_with = "listen")]
    pub(crate) duration: f64,
    /// Modes to compare, comma-separated: copy, zerocopy, auto.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,zerocopy,auto",
        conflicts_with = "listen"
    )]
    pub(crate) mode: Vec<Mode>,
    /// Send APIs to compare, comma-separated: sendmsg (MSG_ZEROCOPY), io_uring (SEND_ZC from
    /// registered buffers), sendmmsg (udp only: --batch datagrams a call, always copied, so it runs
    /// in --mode copy only; no --gso), af_xdp (udp --sink xdp-drop only: an AF_XDP UDP endpoint on
    /// the sending veth end; --mode copy binds XDP_COPY, zerocopy and auto try XDP_ZEROCOPY and fall
    /// back to copy, saying why; no --gso); each mode runs with each, side by side [default:
    /// sendmsg].
    // No default_value: a `--listen` given `--api sendmsg` is refused, which a default would hide.
    #[arg(long, value_delimiter = ',')]
    pub(crate) api: Vec<Api>,
    /// Use IPv6.
    #[arg(long)]
    pub(crate) ipv6: bool,
    /// Run over a veth pair between two fresh network namespaces instead of loopback (needs root).
    #[arg(long, conflicts_with_all = ["listen", "connect"])]
    pub(crate) netns: bool,
    /// Size threshold of the auto mode, in bytes.
    #[arg(long, default_value_t = 10 << 10, value_parser = flags::size, allow_hyphen_values = true, conflicts_with = "listen")]
    pub(crate) threshold: usize,
    /// Pages backing the send buffers of the sendmsg and io_uring APIs (udp's sendmmsg sends from
    /// buffers of its own): `huge` (transparent huge pages), `small`, or `auto`: huge for the
    /// sendmsg API, whose sends the kernel pins page by page (a 64 KiB send from a huge page is one
    /// fragment of a socket buffer, not sixteen), small for io_uring, which registers them (the
    /// kernel charges a fixed send from a huge page to the socket as up to the whole page, so with
    /// `huge` io_uring sends them unregistered).
    #[arg(long, value_enum, default_value_t = Pages::Auto, conflicts_with = "listen")]
    pub(crate) pages: Pages,
    /// Buffers in the send pool of the sendmsg and io_uring APIs, each of a send's size. A zero-copy
    /// send keeps its buffer until the peer acknowledges its bytes: a pool holding less than the
    /// peer leaves unacknowledged makes the sender wait for ACKs.
    #[arg(long, default_value_t = POOL_BUFFERS, value_parser = flags::count, conflicts_with = "listen")]
    pub(crate) pool_buffers: u32,
    /// Per-send latency: the sender turns on the kernel's transmit timestamps and a table under the
    /// rows gives, per row, p50, p99 and max of the time from each send call to its packet
    /// scheduled, handed to the device, acknowledged (tcp) and its buffer back (zero-copy sends);
    /// in --json a `latency` object per row. io_uring rows need Linux 6.17
    /// (SOCKET_URING_OP_TX_TIMESTAMP), and count a request (several sends on a stream) as one.
    #[arg(long, conflicts_with = "listen")]
    pub(crate) latency: bool,
    /// One JSON object per interval and per mode instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds between interval lines (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = flags::interval)]
    pub(crate) interval: f64,
    /// Rounds: every mode runs once per round, in reverse order on even rounds; with more than one,
    /// the summary adds each mode's totals and how auto compares with the better of the other two.
    #[arg(long, default_value_t = 1, value_parser = flags::count, conflicts_with = "listen")]
    pub(crate) rounds: u32,
    /// Parallel streams, as iperf3's -P: each run's streams side by side, each on a thread of its
    /// own with its own sender (and, on this host, its own receiver process), all under the process's
    /// one locked-memory budget; a row per stream and a sum row. Every stream is verified as one is.
    #[arg(short = 'P', long, default_value_t = 1, value_parser = flags::count, conflicts_with = "listen")]
    pub(crate) parallel: u32,
    /// Be the receiver only: listen on [ADDR:]PORT and report each stream (until Ctrl-C, or --once).
    #[arg(long, value_name = "[ADDR:]PORT", conflicts_with = "connect")]
    pub(crate) listen: Option<String>,
    /// Be the sender only: send each --mode to a `--listen` receiver (or a foreign one with --raw) at
    /// HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) connect: Option<String>,
    #[command(flatten)]
    pub(crate) apart: ApartFlags,
    /// Internal: end when standard input closes (the receiver process of the one-process mode).
    #[arg(long, hide = true)]
    pub(crate) exit_with_parent: bool,
}

impl Common {
    /// The send APIs of `--api`, `sendmsg` when it is not given.
    pub(crate) fn apis(&self) -> &[Api] {
        if self.api.is_empty() {
            &[Api::Sendmsg]
        } else {
            &self.api
        }
    }
}

/// Buffers per pool unless `--pool-buffers` says otherwise: enough to keep the socket busy while
/// completions trail behind.
const POOL_BUFFERS: u32 = 64;

/// Most bytes of send buffers a bench maps and writes (`--pool-buffers` times a send's size).
const MAX_POOL_BYTES: u64 = 1 << 30;

/// Fails (a usage error naming `flag`) when `--pool-buffers` buffers of `size` bytes exceed
/// [`MAX_POOL_BYTES`].
pub(crate) fn check_pool_bytes(flag: &str, size: usize, common: &Common) -> Result<()> {
    flags::at_most(
        flag,
        size as u64,
        MAX_POOL_BYTES / u64::from(common.pool_buffers),
        &format!(
            "the bench keeps {} buffers of a send's size (--pool-buffers), at most 1 GiB",
            common.pool_buffers
        ),
    )
}

/// The address of `--listen [ADDR:]PORT` (a bare port, or `:PORT`, listens on every address; an IPv6
/// address goes in brackets, `[::1]:5201`).
pub(crate) fn listen_addr(spec: &str, ipv6: bool) -> Result<SocketAddr> {
    if let Ok(addr) = spec.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let usage = |why: &str| -> anyhow::Error {
        UsageError(format!(
            "--listen {spec:?}: {why}, e.g. 5201, 0.0.0.0:5201 or [::1]:5201"
        ))
        .into()
    };
    if let Ok(ip) = spec.parse::<IpAddr>() {
        return Err(UsageError(format!("--listen {spec:?}: {}", no_port(ip, spec))).into());
    }
    let port = spec.strip_prefix(':').unwrap_or(spec);
    match port.parse::<u16>() {
        Ok(port) if ipv6 => Ok(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)),
        Ok(port) => Ok(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)),
        Err(_) => Err(usage("expected [ADDR:]PORT")),
    }
}

/// Why `spec`, which parsed as the address `ip`, is no address with a port. An IPv6 address takes
/// its port after brackets; one whose last group reads as a port (`::1:5401`) is shown so
/// (`[::1]:5401`), unless that leaves the bare `::` (`::1` is loopback more likely than port 1).
fn no_port(ip: IpAddr, spec: &str) -> String {
    if ip.is_ipv4() {
        return format!("{ip} has no port: use ADDR:PORT");
    }
    let meant = spec
        .rsplit_once(':')
        .filter(|(addr, port)| {
            *addr != "::" && addr.parse::<Ipv6Addr>().is_ok() && port.parse::<u16>().is_ok()
        })
        .map_or_else(
            || "[::1]:5201".to_string(),
            |(addr, port)| format!("[{addr}]:{port}"),
        );
    format!("an IPv6 address goes in brackets before its port, as in {meant}")
}

/// The address of `--connect HOST:PORT` (an IPv6 one first with --ipv6): a usage error without a
/// port, an error naming the host when the name does not resolve.
pub(crate) fn connect_addr(spec: &str, ipv6: bool) -> Result<SocketAddr> {
    if let Ok(ip) = spec.parse::<IpAddr>() {
        return Err(UsageError(format!("--connect {spec:?}: {}", no_port(ip, spec))).into());
    }
    let port_ok = spec
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(UsageError(format!(
            "--connect {spec:?}: expected HOST:PORT (e.g. 192.0.2.1:5201, [::1]:5201)"
        ))
        .into());
    }
    let addrs: Vec<SocketAddr> = spec
        .to_socket_addrs()
        .with_context(|| format!("--connect {spec:?}: the host name did not resolve"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv6() == ipv6)
        .or(addrs.first())
        .copied()
        .with_context(|| format!("--connect {spec:?}: the host name has no address"))
}

/// Which pages back the send buffers (`--pages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Pages {
    /// Huge pages for the sendmsg API, small (registered) ones for io_uring.
    Auto,
    /// Small pages.
    Small,
    /// Transparent huge pages, where the kernel allows them.
    Huge,
}

impl Pages {
    /// Whether `api`'s send buffers are asked onto huge pages.
    pub(crate) fn huge_for(self, api: Api) -> bool {
        match self {
            Pages::Auto => api != Api::IoUring,
            Pages::Small => false,
            Pages::Huge => true,
        }
    }
}

/// Refuses `--api` with `--listen`: the API is the sender's (udp's receiver takes `--api af_xdp`
/// alone, checked by [`check_af_xdp`]).
pub(crate) fn check_listener_api(common: &Common, reads: &str) -> Result<()> {
    if common.listen.is_none() || common.api.is_empty() || common.api == [Api::AfXdp] {
        return Ok(());
    }
    let apis: Vec<&str> = common.api.iter().map(|api| api.name()).collect();
    Err(UsageError(format!(
        "--api {} with --listen: the API is the sender's ({reads})",
        apis.join(",")
    ))
    .into())
}
