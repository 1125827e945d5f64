//! `zcnet bench rx`: TCP zero-copy receive (`TCP_ZEROCOPY_RECEIVE`) against plain `recv`, sender and
//! receiver in one process, over loopback with an MSS of one page or over a veth pair whose MTU leaves
//! one page of payload per segment. Prints what tcp_mmap prints for each receive mode.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::thread;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use testnet::{VethConfig, VethPair};
use zcnet::rx::{Receiver, RxConfig, RxMode, RxStats, sender};
use zcnet::sys::socket::{ResourceUsage, UsageOf, resource_usage};

use crate::report::{Row, cpu_us_per_mb, gbit_per_s, print_rows};

/// How the receiver reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Plain recv into a buffer of the window's size.
    Copy,
    /// TCP_ZEROCOPY_RECEIVE into a mapped window, copybuf for the rest.
    Zerocopy,
}

/// How the sender writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SenderArg {
    /// Plain write() (its pages never map on the receiver).
    Copy,
}

/// Options of `zcnet bench rx`.
#[derive(Debug, clap::Args)]
pub struct RxArgs {
    /// Receive modes to run, side by side (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "copy,zerocopy"
    )]
    mode: Vec<ModeArg>,
    /// Sender mode.
    #[arg(long, value_enum, default_value = "copy")]
    sender: SenderArg,
    /// MiB to send per run.
    #[arg(long, default_value_t = 256)]
    mib: u64,
    /// Bytes per write of the sender, in KiB.
    #[arg(long, default_value_t = 512)]
    write_kib: usize,
    /// Receive window (zerocopy) or buffer (copy) in KiB.
    #[arg(long, default_value_t = 512)]
    window_kib: usize,
    /// SO_RCVLOWAT in KiB for both modes, so that they differ only in how bytes reach user space
    /// (0: leave the kernel default of one byte).
    #[arg(long, default_value_t = 512)]
    rcvlowat_kib: usize,
    /// Run over a veth pair between two namespaces (MTU 4148, or 4168 with --ipv6) instead of loopback
    /// with TCP_MAXSEG (needs root).
    #[arg(long)]
    netns: bool,
    /// Use IPv6.
    #[arg(long)]
    ipv6: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

/// Where sender and receiver connect.
enum Path {
    Loopback(IpAddr),
    Veth(Box<VethPair>),
}

impl Path {
    fn name(&self) -> &'static str {
        match self {
            Path::Loopback(_) => "loopback",
            Path::Veth(_) => "veth",
        }
    }

    /// A connected (sender, receiver) pair with one page of payload per segment.
    fn connect(&self, ipv6: bool) -> anyhow::Result<(TcpStream, TcpStream)> {
        match self {
            Path::Loopback(ip) => sender::connect_page_mss(*ip).context("loopback connection"),
            Path::Veth(pair) => {
                let server_ip = if ipv6 {
                    IpAddr::V6(pair.b_v6)
                } else {
                    IpAddr::V4(pair.b_v4)
                };
                let listener = pair
                    .b
                    .run(|| sender::bind_page_mss(SocketAddr::new(server_ip, 0)))
                    .context("listen in the receiver's namespace")?;
                let addr = listener.local_addr()?;
                let client = pair
                    .a
                    .run(|| sender::connect_with_page_mss(addr))
                    .context("connect from the sender's namespace")?;
                let (server, _) = listener.accept()?;
                Ok((client, server))
            }
        }
    }
}

/// What the receiving thread measured.
struct Measured {
    stats: RxStats,
    seconds: f64,
    usage: ResourceUsage,
    fallback: Option<String>,
}

fn receive(server: TcpStream, config: RxConfig) -> anyhow::Result<Measured> {
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    let mut rx = Receiver::new(server, config)?;
    while let Some(chunk) = rx.recv()? {
        std::hint::black_box(chunk.len());
    }
    let seconds = start.elapsed().as_secs_f64();
    let usage = resource_usage(UsageOf::Thread)?.since(&before);
    Ok(Measured {
        stats: *rx.stats(),
        seconds,
        usage,
        fallback: rx.fallback().map(|f| f.to_string()),
    })
}

fn send_all(mut client: TcpStream, total: u64, write: usize) -> anyhow::Result<()> {
    let buf: Vec<u8> = (0..write).map(|i| (i % 251) as u8).collect();
    let mut left = total;
    while left > 0 {
        let n = left.min(write as u64) as usize;
        client.write_all(&buf[..n]).context("send")?;
        left -= n as u64;
    }
    client.shutdown(std::net::Shutdown::Write)?;
    Ok(())
}

fn run_one(args: &RxArgs, path: &Path, mode: ModeArg) -> anyhow::Result<Row> {
    let (client, server) = path.connect(args.ipv6)?;
    let window = args.window_kib.max(4) << 10;
    let low_water = (args.rcvlowat_kib > 0).then_some(args.rcvlowat_kib << 10);
    let config = match mode {
        ModeArg::Copy => RxConfig {
            mode: RxMode::Copy,
            copy_buffer: window,
            low_water,
            ..RxConfig::default()
        },
        ModeArg::Zerocopy => RxConfig {
            window,
            low_water,
            give_up_after: None,
            ..RxConfig::default()
        },
    };
    let total = args.mib << 20;
    let write = args.write_kib.max(1) << 10;
    let receiver = thread::Builder::new()
        .name("rx".into())
        .spawn(move || receive(server, config))?;
    let sent = send_all(client, total, write);
    let measured = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))??;
    sent?;
    let stats = &measured.stats;
    if stats.bytes() != total {
        bail!("received {} bytes of {total}", stats.bytes());
    }
    let row = json!({
        "bench": "rx",
        "path": path.name(),
        "ip": if args.ipv6 { "v6" } else { "v4" },
        "mode": mode_name(mode),
        "sender_mode": sender_name(args.sender),
        "bytes": stats.bytes(),
        "seconds": measured.seconds,
        "gbit_per_s": gbit_per_s(stats.bytes(), measured.seconds),
        "cpu_user_s": measured.usage.user.as_secs_f64(),
        "cpu_sys_s": measured.usage.system.as_secs_f64(),
        "cpu_us_per_mb": cpu_us_per_mb(&measured.usage, stats.bytes()),
        "mapped_bytes": stats.mapped_bytes,
        "copied_bytes": stats.copied_bytes(),
        "mapped_pct": stats.mapped_pct(),
        "ctx_switches": measured.usage.context_switches(),
        "zerocopy_calls": stats.zerocopy_calls,
        "recv_calls": stats.recv_calls,
        "fallback": measured.fallback,
    });
    match row {
        Value::Object(map) => Ok(map),
        _ => unreachable!("json! of an object literal"),
    }
}

fn mode_name(mode: ModeArg) -> &'static str {
    match mode {
        ModeArg::Copy => "copy",
        ModeArg::Zerocopy => "zerocopy",
    }
}

fn sender_name(sender: SenderArg) -> &'static str {
    match sender {
        SenderArg::Copy => "copy",
    }
}

/// tcp_mmap's summary line for one row.
fn tcp_mmap_line(row: &Row) -> String {
    let num = |key: &str| row.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    format!(
        "{} receive: received {:.0} MB ({:.4} % mmap'ed) in {:.4} s, {:.4} Gbit/s, cpu usage user:{:.3} \
         sys:{:.3}, {:.2} usec per MB, {} c-switches",
        row.get("mode").and_then(Value::as_str).unwrap_or("?"),
        num("bytes") / (1 << 20) as f64,
        num("mapped_pct"),
        num("seconds"),
        num("gbit_per_s"),
        num("cpu_user_s"),
        num("cpu_sys_s"),
        num("cpu_us_per_mb"),
        num("ctx_switches"),
    )
}

/// Runs every requested receive mode over one path and prints a row for each.
pub fn run(args: RxArgs) -> anyhow::Result<()> {
    let path = if args.netns {
        let mtu = if args.ipv6 { 4168 } else { 4148 };
        let pair = VethPair::new(VethConfig {
            mtu,
            ..VethConfig::default()
        })
        .context("creating the veth pair (needs root)")?;
        Path::Veth(Box::new(pair))
    } else if args.ipv6 {
        Path::Loopback(IpAddr::V6(Ipv6Addr::LOCALHOST))
    } else {
        Path::Loopback(IpAddr::V4(Ipv4Addr::LOCALHOST))
    };
    let mut rows = Vec::new();
    for &mode in &args.mode {
        rows.push(run_one(&args, &path, mode)?);
    }
    print_rows(
        &rows,
        &[
            ("path", "path"),
            ("mode", "mode"),
            ("sender_mode", "sender"),
            ("bytes", "bytes"),
            ("mapped_pct", "% mapped"),
            ("seconds", "seconds"),
            ("gbit_per_s", "Gbit/s"),
            ("cpu_user_s", "user s"),
            ("cpu_sys_s", "sys s"),
            ("cpu_us_per_mb", "usec/MB"),
            ("ctx_switches", "c-switches"),
        ],
        args.json,
    );
    if !args.json {
        for row in &rows {
            println!("{}", tcp_mmap_line(row));
        }
    }
    Ok(())
}
