//! `zcnet bench tcp` and `zcnet bench udp`: MSG_ZEROCOPY senders against plain copying sends, every
//! mode in the same invocation so that ratios are meaningful on a noisy host.
//!
//! Sender and receiver run in this process: over loopback by default, or over the veth harness with
//! `--netns`. `zcnet bench udp --sink xdp-drop` sends into a veth whose far end runs a native XDP
//! program dropping every frame — the one local path where the kernel does not copy zero-copy sends.
//! Each mode gets a fresh socket (MSG_ZEROCOPY ids start at 0 per socket) and the same buffer pool size.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use testnet::{VethConfig, VethPair};
use zcnet::probe::{UsageOf, resource_usage};
use zcnet::tx::{
    BufferPool, Mode, PolicyConfig, PoolConfig, SendError, Sender, SenderConfig, TcpSender,
    UdpSender, ZcSocket,
};
use zcnet::xdp::{AttachMode, XdpLink, XdpProgram};

use crate::report::{Column, Row, cpu_us_per_mb, gbit_per_s, object, print_rows};

/// Options shared by both benches.
#[derive(Debug, clap::Args)]
struct Common {
    /// Bytes per send call.
    #[arg(long)]
    size: Option<usize>,
    /// Seconds each mode runs.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Modes to compare, comma-separated: copy, zerocopy, auto.
    #[arg(long, value_delimiter = ',', default_value = "copy,zerocopy,auto")]
    mode: Vec<Mode>,
    /// Use IPv6.
    #[arg(long)]
    ipv6: bool,
    /// Run over a veth pair between two fresh network namespaces instead of loopback (needs root).
    #[arg(long)]
    netns: bool,
    /// Size threshold of the auto mode, in bytes.
    #[arg(long, default_value_t = 10 << 10)]
    threshold: usize,
    /// Back the send buffers with transparent huge pages.
    #[arg(long)]
    huge_pages: bool,
    /// One JSON object per mode instead of a table.
    #[arg(long)]
    json: bool,
}

/// Options of `zcnet bench tcp`.
#[derive(Debug, clap::Args)]
pub struct TcpArgs {
    #[command(flatten)]
    common: Common,
}

/// Where UDP datagrams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Sink {
    /// A UDP socket that reads and discards them.
    Socket,
    /// A native XDP program on the receiving veth end that drops every frame (implies --netns).
    XdpDrop,
}

/// Options of `zcnet bench udp`.
#[derive(Debug, clap::Args)]
pub struct UdpArgs {
    #[command(flatten)]
    common: Common,
    /// Segment size for UDP GSO (UDP_SEGMENT): each send of --size bytes leaves as segments of SEG.
    #[arg(long, value_name = "SEG")]
    gso: Option<u16>,
    /// Receiver of the datagrams.
    #[arg(long, value_enum, default_value = "socket")]
    sink: Sink,
}

const COLUMNS: &[Column] = &[
    ("path", "path"),
    ("mode", "mode"),
    ("size", "size"),
    ("gbit_per_s", "Gbit/s"),
    ("calls", "calls"),
    ("cpu_us_per_mb", "CPU us/MB"),
    ("zc_ids", "zc ids"),
    ("copied_ids", "copied ids"),
    ("notifications", "notifs"),
    ("enobufs", "ENOBUFS"),
    ("fallbacks", "fallbacks"),
];

/// Buffers per pool: enough to keep the socket busy while completions trail behind.
const POOL_BUFFERS: usize = 64;

/// The network a bench runs over: loopback of this namespace, or a veth pair (with an optional XDP
/// drop program on the receiving end).
struct Net {
    veth: Option<VethPair>,
    _sink: Option<XdpLink>,
    src: IpAddr,
    dst: IpAddr,
}

impl Net {
    fn new(common: &Common, xdp_drop: bool) -> Result<Net> {
        if !common.netns && !xdp_drop {
            let ip: IpAddr = if common.ipv6 {
                Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            return Ok(Net {
                veth: None,
                _sink: None,
                src: ip,
                dst: ip,
            });
        }
        let pair = VethPair::new(VethConfig::default())
            .context("building the veth harness (needs root, iproute2 and ethtool)")?;
        let (src, dst): (IpAddr, IpAddr) = if common.ipv6 {
            (pair.a_v6.into(), pair.b_v6.into())
        } else {
            (pair.a_v4.into(), pair.b_v4.into())
        };
        let sink = if xdp_drop {
            let link = pair
                .b
                .run(|| XdpProgram::drop_all()?.attach_to(&pair.b_if, AttachMode::Driver))
                .context("attaching the XDP drop program to the receiving veth end")?;
            // The program drops ARP and neighbour discovery too: resolve the far end statically.
            pair.pin_b_neighbours()?;
            Some(link)
        } else {
            None
        };
        Ok(Net {
            veth: Some(pair),
            _sink: sink,
            src,
            dst,
        })
    }

    fn path(&self) -> &'static str {
        match (&self.veth, &self._sink) {
            (None, _) => "loopback",
            (Some(_), None) => "veth",
            (Some(_), Some(_)) => "xdp-drop",
        }
    }

    /// Runs `f` in the sending namespace (this one for loopback).
    fn in_sender<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.veth {
            Some(p) => p.a.run(f),
            None => f(),
        }
    }

    /// Runs `f` in the receiving namespace.
    fn in_receiver<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.veth {
            Some(p) => p.b.run(f),
            None => f(),
        }
    }
}

/// What one timed run measured on the sending thread.
struct Measured {
    seconds: f64,
    usage: zcnet::probe::ResourceUsage,
}

fn sender_config(mode: Mode, common: &Common) -> SenderConfig {
    SenderConfig {
        policy: PolicyConfig {
            threshold: common.threshold,
            ..PolicyConfig::with_mode(mode)
        },
        send_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    }
}

fn new_pool(size: usize, huge_pages: bool) -> Result<BufferPool> {
    BufferPool::new(PoolConfig {
        buf_size: size.max(1),
        count: POOL_BUFFERS,
        huge_pages,
    })
    .context("mapping the send buffer pool")
}

/// Sends `size`-byte pooled buffers with `send` for `duration`, recycling them as completions
/// return, then flushes. CPU time is the sending thread's.
fn timed<S: ZcSocket>(
    tx: &mut Sender<S>,
    pool: &BufferPool,
    size: usize,
    duration: Duration,
    mut send: impl FnMut(
        &mut Sender<S>,
        zcnet::tx::PooledBuf,
    ) -> Result<(), SendError<zcnet::tx::PooledBuf>>,
) -> Result<Measured> {
    let before = resource_usage(UsageOf::Thread)?;
    let start = Instant::now();
    while start.elapsed() < duration {
        let mut buf = match pool.take() {
            Some(b) => b,
            None => {
                tx.wait_completions(Duration::from_millis(100))?;
                continue;
            }
        };
        buf.set_len(size);
        send(tx, buf)?;
    }
    tx.flush(Duration::from_secs(10))?;
    let seconds = start.elapsed().as_secs_f64();
    let usage = resource_usage(UsageOf::Thread)?.since(&before);
    Ok(Measured { seconds, usage })
}

fn row<S: ZcSocket>(
    bench: &str,
    net: &Net,
    mode: Mode,
    size: usize,
    m: &Measured,
    tx: &Sender<S>,
) -> Row {
    let s = tx.stats();
    let v = json!({
        "bench": bench,
        "path": net.path(),
        "ip": if net.dst.is_ipv6() { "v6" } else { "v4" },
        "mode": mode.name(),
        "size": size,
        "seconds": m.seconds,
        "bytes": s.bytes,
        "gbit_per_s": gbit_per_s(s.bytes, m.seconds),
        "calls": s.calls,
        "cpu_user_s": m.usage.user.as_secs_f64(),
        "cpu_sys_s": m.usage.system.as_secs_f64(),
        "cpu_us_per_mb": cpu_us_per_mb(&m.usage, s.bytes),
        "zc_ids": s.zc_ids,
        "copied_ids": s.copied_ids,
        "notifications": s.notifications,
        "enobufs": s.enobufs,
        "fallbacks": s.fallbacks(),
        "zc_calls": s.zc_calls,
        "copy_small": s.copy_small,
        "policy_switches": s.policy_switches,
        "zerocopy": match tx.zerocopy_status() {
            Ok(()) => Value::Bool(true),
            Err(reason) => Value::String(reason.to_string()),
        },
    });
    object(v)
}

fn duration(common: &Common) -> Result<Duration> {
    if !(common.duration > 0.0 && common.duration <= 3600.0) {
        bail!("--duration must be between 0 and 3600 seconds");
    }
    Ok(Duration::from_secs_f64(common.duration))
}

/// Runs `zcnet bench tcp`.
pub fn run_tcp(args: TcpArgs) -> Result<()> {
    let common = &args.common;
    let size = common.size.unwrap_or(64 << 10);
    let duration = duration(common)?;
    let net = Net::new(common, false)?;
    let mut rows = Vec::new();
    for &mode in &common.mode {
        let listener = net
            .in_receiver(|| TcpListener::bind(SocketAddr::new(net.dst, 0)))
            .context("binding the TCP receiver")?;
        let addr = listener.local_addr()?;
        let receiver = tcp_receiver(listener);
        let stream = net
            .in_sender(|| TcpStream::connect(addr))
            .with_context(|| format!("connecting to {addr}"))?;
        let pool = new_pool(size, common.huge_pages)?;
        let mut tx = TcpSender::new(stream, sender_config(mode, common));
        let m = timed(&mut tx, &pool, size, duration, |tx, b| tx.send(b))
            .with_context(|| format!("tcp {} run", mode.name()))?;
        rows.push(row("tcp", &net, mode, size, &m, &tx));
        drop(tx.close(Duration::from_secs(5))?);
        let received = receiver
            .join()
            .map_err(|_| anyhow::anyhow!("TCP receiver panicked"))??;
        let sent = rows.last().and_then(|r| r["bytes"].as_u64()).unwrap_or(0);
        if received != sent {
            bail!(
                "tcp {}: sent {sent} bytes but {received} arrived",
                mode.name()
            );
        }
    }
    print_rows(&rows, COLUMNS, common.json);
    Ok(())
}

fn tcp_receiver(listener: TcpListener) -> JoinHandle<Result<u64>> {
    thread::spawn(move || {
        let (mut conn, _) = listener
            .accept()
            .context("accepting the bench connection")?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            match conn.read(&mut buf).context("reading the bench stream")? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    })
}

/// Runs `zcnet bench udp`.
pub fn run_udp(args: UdpArgs) -> Result<()> {
    let common = &args.common;
    let size = common.size.unwrap_or(match args.gso {
        Some(seg) => usize::from(seg) * 40,
        None => 1400,
    });
    let duration = duration(common)?;
    let net = Net::new(common, args.sink == Sink::XdpDrop)?;
    let mut rows = Vec::new();
    for &mode in &common.mode {
        let (dest, receiver) = match args.sink {
            Sink::Socket => {
                let socket = net
                    .in_receiver(|| UdpSocket::bind(SocketAddr::new(net.dst, 0)))
                    .context("binding the UDP receiver")?;
                let dest = socket.local_addr()?;
                (dest, Some(UdpReceiver::start(socket)?))
            }
            Sink::XdpDrop => (SocketAddr::new(net.dst, 9), None),
        };
        let socket = net
            .in_sender(|| UdpSocket::bind(SocketAddr::new(net.src, 0)))
            .context("binding the UDP sender")?;
        socket.connect(dest)?;
        let pool = new_pool(size, common.huge_pages)?;
        let mut tx = UdpSender::new(socket, sender_config(mode, common));
        tx.set_gso_segment(args.gso);
        let m = timed(&mut tx, &pool, size, duration, |tx, b| tx.send(b))
            .with_context(|| format!("udp {} run", mode.name()))?;
        let mut r = row("udp", &net, mode, size, &m, &tx);
        r.insert("gso".into(), json!(args.gso));
        if let Some(receiver) = receiver {
            r.insert("received_bytes".into(), json!(receiver.stop()?));
        }
        rows.push(r);
        drop(tx.close(Duration::from_secs(5))?);
    }
    print_rows(&rows, COLUMNS, common.json);
    Ok(())
}

/// A thread reading and discarding datagrams until stopped.
struct UdpReceiver {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<u64>>,
}

impl UdpReceiver {
    fn start(socket: UdpSocket) -> Result<UdpReceiver> {
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0u64;
            while !flag.load(Ordering::Relaxed) {
                match socket.recv(&mut buf) {
                    Ok(n) => total += n as u64,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => return Err(e).context("reading bench datagrams"),
                }
            }
            Ok(total)
        });
        Ok(UdpReceiver { stop, handle })
    }

    fn stop(self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("UDP receiver panicked"))?
    }
}
