//! `zcnet xdp rxdrop|txpush|l2fwd`: the three AF_XDP applications of the original AF_XDP benchmark
//! (xdpsock), on one queue of one interface; and `zcnet xdp broker` (in `broker`), which hands
//! queues to unprivileged workers.
//!
//! rxdrop and l2fwd attach the redirect program; every program is attached through a BPF link owned
//! by this process, so it goes away when the command ends in any way (normal exit, SIGINT/SIGTERM,
//! SIGKILL): the kernel closes the link descriptor with the process.

pub(crate) mod broker;
pub(crate) mod feed;
pub(crate) mod meter;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use benchnet::frame::{UdpFrame, swap_macs};
use serde_json::json;
use zcnet::xdp::{
    AttachMode, BusyPoll, Frame, FrameMatch, Mode, Socket, SocketConfig, Statistics, Umem,
    UmemConfig, XdpLink, XdpProgram,
};

use crate::flags::UsageError;
use crate::live;
use crate::report::{self, Row};
use crate::xdp::meter::Meter;

/// `--mode`: which AF_XDP data path to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Zero-copy when the driver supports it, else copy (the reason is printed).
    Auto,
    /// Copy mode.
    Copy,
    /// Zero-copy or fail.
    Zerocopy,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Auto => Mode::Auto,
            ModeArg::Copy => Mode::Copy,
            ModeArg::Zerocopy => Mode::ZeroCopy,
        }
    }
}

/// `--attach`: where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachArg {
    /// Native (driver) XDP.
    Driver,
    /// Generic (skb) XDP.
    Generic,
}

impl From<AttachArg> for AttachMode {
    fn from(a: AttachArg) -> AttachMode {
        match a {
            AttachArg::Driver => AttachMode::Driver,
            AttachArg::Generic => AttachMode::Generic,
        }
    }
}

/// `--match`: which frames of the queue the redirect program hands to the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MatchArg {
    /// Unfragmented UDP datagrams to --port; everything else (fragments included) goes on to the
    /// network stack.
    Udp,
    /// Every frame of the queue (xdpsock's behaviour): the stack sees none of them.
    All,
}

/// Options every AF_XDP application takes.
#[derive(Debug, Clone, clap::Args)]
pub struct XdpArgs {
    /// Interface to run on.
    #[arg(long)]
    pub iface: String,
    /// Queue of the interface (0 to 65535: the kernel keeps a queue id in 16 bits).
    #[arg(long, default_value_t = 0, value_parser = crate::flags::queue)]
    pub queue: u32,
    /// AF_XDP data path.
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
    /// Frames the socket takes (rxdrop, l2fwd); the others pass to the network stack.
    #[arg(long = "match", value_enum, default_value_t = MatchArg::Udp)]
    pub matching: MatchArg,
    /// UDP port: the destination port matched (rxdrop, l2fwd), or the ports of the frames sent (txpush).
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    /// Run on an interface the host uses (one with an IP address or the default route) although the
    /// run takes its whole queue (--match all) or floods it (txpush).
    #[arg(long)]
    pub force: bool,
    /// XDP attach mode for the redirect program.
    #[arg(long, value_enum, default_value_t = AttachArg::Driver)]
    pub attach: AttachArg,
    /// Descriptors handled per ring operation.
    #[arg(long, default_value_t = 64, value_parser = crate::flags::batch)]
    pub batch: u32,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0, value_parser = crate::flags::duration)]
    pub duration: f64,
    /// Block in poll() when idle instead of spinning on the rings.
    #[arg(long, conflicts_with = "busy_poll")]
    pub poll: bool,
    /// Preferred busy polling (SO_PREFER_BUSY_POLL): poll() runs the driver loop in this thread.
    #[arg(long)]
    pub busy_poll: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `zcnet xdp txpush` options: the common ones plus the frame to send.
#[derive(Debug, Clone, clap::Args)]
pub struct TxpushArgs {
    #[command(flatten)]
    pub common: XdpArgs,
    /// Destination MAC of the frames.
    #[arg(long, default_value = "ff:ff:ff:ff:ff:ff")]
    pub dst_mac: String,
    /// Source IPv4 address of the frames.
    #[arg(long, default_value = "10.77.0.1")]
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address of the frames.
    #[arg(long, default_value = "10.77.0.2")]
    pub dst_ip: Ipv4Addr,
    /// Frame length in bytes (without FCS), at least 54.
    #[arg(long, default_value_t = 64, value_parser = crate::flags::size)]
    pub size: usize,
}

/// The AF_XDP applications.
#[derive(Debug, clap::Subcommand)]
pub enum XdpCommand {
    /// Receive and drop the matched frames (counts them).
    Rxdrop(XdpArgs),
    /// Send the same prebuilt UDP frame as fast as possible.
    Txpush(TxpushArgs),
    /// Return every matched frame on the same interface with swapped MACs (no copy: the rx
    /// descriptor goes to the tx ring).
    L2fwd(XdpArgs),
    /// Hand queues to unprivileged workers over a Unix socket (the program, the sockets and the
    /// XSKMAP are the broker's; workers need no capability).
    Broker(broker::BrokerArgs),
}

/// How a loop waits when its rings are idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Spin on the rings; syscall only when the kernel asks (need_wakeup).
    Spin,
    /// Block in poll() (100 ms at most).
    Poll,
    /// poll() with timeout 0 under preferred busy polling.
    BusyPoll,
    /// Block in poll() when idle, and after a batch smaller than asked for, sleep this long to let
    /// frames gather: fewer wakeups per packet at low rates, as TPACKET_V3's block retire timeout does.
    Coalesce(std::time::Duration),
}

impl XdpArgs {
    /// The frames the redirect program takes.
    pub fn frame_match(&self) -> FrameMatch {
        match self.matching {
            MatchArg::Udp => FrameMatch::UdpPort(self.port),
            MatchArg::All => FrameMatch::All,
        }
    }

    fn wait(&self) -> Wait {
        match (self.poll, self.busy_poll) {
            (true, _) => Wait::Poll,
            (_, true) => Wait::BusyPoll,
            _ => Wait::Spin,
        }
    }
}

/// A bound socket, its UMEM and (for receivers) the redirect program's link.
#[derive(Debug)]
pub struct App {
    /// The frames.
    pub umem: Umem,
    /// The socket.
    pub socket: Socket,
    link: Option<XdpLink>,
    /// Progress lines: per second for the `zcnet xdp` command, per interval for `zcnet bench xdp`.
    meter: Option<Meter>,
}

impl App {
    /// Binds a socket on `iface`/`queue` with the rings asked for; for a receiver, fills the fill ring,
    /// attaches the redirect program (taking the frames of `attach`'s match) and registers the socket in
    /// its map.
    pub fn open(
        iface: &str,
        queue: u32,
        mode: Mode,
        rx: bool,
        tx: bool,
        attach: Option<(AttachMode, FrameMatch)>,
    ) -> Result<App> {
        let mut umem = Umem::new(UmemConfig::default())?;
        let mut config = SocketConfig::default();
        config.rx_size = if rx { 2048 } else { 0 };
        config.tx_size = if tx { 2048 } else { 0 };
        let mut socket = Socket::bind_with(&mut umem, iface, queue, mode, config)?;
        let link = match attach {
            Some((attach_mode, matching)) => {
                socket.fill(&mut umem, u32::MAX)?;
                let program = XdpProgram::redirect_to_xsk(queue + 1, matching)?;
                program
                    .xsk_map()
                    .context("redirect program without XSKMAP")?
                    .insert(queue, &socket)?;
                Some(program.attach_to(iface, attach_mode)?)
            }
            None => None,
        };
        Ok(App {
            umem,
            socket,
            link,
            meter: None,
        })
    }

    /// Prints a line of statistics every second from now on (JSON lines with `json`).
    pub fn print_every_second(&mut self, json: bool) -> Result<()> {
        self.meter = Some(Meter::statistics(&self.socket, json)?);
        Ok(())
    }

    /// Prints progress with `meter` from now on.
    pub fn set_meter(&mut self, meter: Meter) {
        self.meter = Some(meter);
    }

    /// Lets the meter, if any, print its line: `rx` and `tx` packets so far.
    fn tick(&mut self, rx: u64, tx: u64) -> Result<()> {
        match &mut self.meter {
            Some(meter) => meter.tick(&self.socket, rx, tx),
            None => Ok(()),
        }
    }

    /// The attach mode of the redirect program, if any.
    pub fn attach_mode(&self) -> Option<AttachMode> {
        self.link.as_ref().map(XdpLink::mode)
    }

    fn idle(&mut self, wait: Wait) -> Result<()> {
        match wait {
            Wait::Spin if self.socket.fill_needs_wakeup() => {
                self.socket.wait_rx(Some(Duration::ZERO))?;
            }
            Wait::Spin => std::hint::spin_loop(),
            Wait::Poll | Wait::Coalesce(_) => {
                self.socket.wait_rx(Some(Duration::from_millis(100)))?;
            }
            Wait::BusyPoll => {
                self.socket.wait_rx(Some(Duration::ZERO))?;
            }
        }
        Ok(())
    }

    /// Takes up to `batch` received frames into `frames`; returns the count of rejected descriptors.
    fn receive(&mut self, batch: u32, frames: &mut Vec<Frame>) -> Result<u64> {
        Ok(self.socket.receive(&mut self.umem, batch, frames)? as u64)
    }

    /// Gives frames back to the fill ring (the free list takes what does not fit).
    fn refill(&mut self, frames: &mut Vec<Frame>) -> Result<()> {
        self.socket.fill_with(&mut self.umem, frames)?;
        for frame in frames.drain(..) {
            self.umem.release(frame);
        }
        Ok(())
    }

    /// rxdrop: counts and recycles received frames until `stop()`; returns (packets, invalid).
    pub fn rxdrop(
        &mut self,
        batch: u32,
        wait: Wait,
        stop: impl Fn() -> bool,
    ) -> Result<(u64, u64)> {
        let (mut packets, mut invalid) = (0, 0);
        let mut frames = Vec::with_capacity(batch as usize);
        while !stop() {
            self.tick(packets, 0)?;
            invalid += self.receive(batch, &mut frames)?;
            if frames.is_empty() {
                self.idle(wait)?;
                continue;
            }
            packets += frames.len() as u64;
            let partial = frames.len() < batch as usize;
            self.refill(&mut frames)?;
            coalesce(wait, partial);
        }
        Ok((packets, invalid))
    }

    /// l2fwd: returns every received frame with swapped MACs through the tx ring until `stop()`;
    /// returns (frames transmitted, invalid descriptors).
    pub fn l2fwd(&mut self, batch: u32, wait: Wait, stop: impl Fn() -> bool) -> Result<(u64, u64)> {
        let (mut sent, mut received, mut invalid) = (0, 0, 0);
        let mut frames = Vec::with_capacity(batch as usize);
        while !stop() {
            self.tick(received, sent)?;
            sent += self.reclaim_and_refill()?;
            invalid += self.receive(batch, &mut frames)?;
            if frames.is_empty() {
                self.idle(wait)?;
                continue;
            }
            received += frames.len() as u64;
            for frame in &mut frames {
                swap_macs(self.umem.bytes_mut(frame));
            }
            let partial = frames.len() < batch as usize;
            self.push_tx(&mut frames)?;
            // Frames the tx ring had no room for go straight back to the fill ring.
            self.refill(&mut frames)?;
            coalesce(wait, partial);
        }
        Ok((sent, invalid))
    }

    fn reclaim_and_refill(&mut self) -> Result<u64> {
        let done = self.socket.reclaim(&mut self.umem, u32::MAX)?.frames;
        self.socket.fill(&mut self.umem, done)?;
        Ok(done as u64)
    }

    /// Queues frames from the front of `frames` on the tx ring and wakes the kernel; those that do not
    /// fit stay in `frames`.
    fn push_tx(&mut self, frames: &mut Vec<Frame>) -> Result<()> {
        self.socket.transmit(&mut self.umem, frames)?;
        self.socket.wake_tx()?;
        Ok(())
    }

    /// txpush: writes `packet` into every UMEM frame once, then sends frames until `stop()`; returns the
    /// number the kernel completed.
    pub fn txpush(&mut self, packet: &[u8], batch: u32, stop: impl Fn() -> bool) -> Result<u64> {
        let mut all = Vec::new();
        while let Some(mut frame) = self.umem.alloc() {
            self.umem
                .buffer_mut(&mut frame)
                .get_mut(..packet.len())
                .context("frame larger than a UMEM frame")?
                .copy_from_slice(packet);
            all.push(frame);
        }
        for frame in all.into_iter().rev() {
            self.umem.release(frame);
        }
        let len = packet.len() as u32;
        let mut completed = 0;
        let mut frames = Vec::with_capacity(batch as usize);
        while !stop() {
            self.tick(0, completed)?;
            completed += self.socket.reclaim(&mut self.umem, u32::MAX)?.frames as u64;
            while frames.len() < batch as usize {
                let Some(mut frame) = self.umem.alloc() else {
                    break;
                };
                // The packet was written into every frame above; a freed frame keeps its bytes.
                frame.set_len(len);
                frames.push(frame);
            }
            self.push_tx(&mut frames)?;
        }
        for frame in frames {
            self.umem.release(frame);
        }
        Ok(completed + self.socket.reclaim(&mut self.umem, u32::MAX)?.frames as u64)
    }

    /// The socket's counters.
    pub fn statistics(&self) -> Result<Statistics> {
        Ok(self.socket.statistics()?)
    }
}

/// Under [`Wait::Coalesce`], sleeps after a `partial` batch so that the next one is fuller.
fn coalesce(wait: Wait, partial: bool) {
    if let (Wait::Coalesce(pause), true) = (wait, partial) {
        std::thread::sleep(pause);
    }
}

/// A run refused before it touched the interface (the CLI exits with status 2, as for a usage error).
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Parses `aa:bb:cc:dd:ee:ff`, saying what is wrong otherwise.
pub fn parse_mac(text: &str) -> Result<[u8; 6]> {
    benchnet::frame::parse_mac(text)
        .with_context(|| format!("{text:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"))
}

/// The MAC address of `iface` (from sysfs, as the calling process's network namespace shows it).
pub fn interface_mac(iface: &str) -> Result<[u8; 6]> {
    let path = format!("/sys/class/net/{iface}/address");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_mac(&text)
}

/// Smallest `--size` of txpush: the Ethernet, IPv4 and UDP headers and 12 bytes of payload.
const MIN_TX_FRAME: usize = benchnet::frame::UDP_HEADERS + 12;

/// Largest `--size` of txpush: one UMEM frame (`FrameSize::Half`, 2048 bytes).
const MAX_TX_FRAME: usize = 2048;

/// Refuses, as usage errors, the txpush flags no frame can be built from.
fn check_txpush(t: &TxpushArgs) -> Result<()> {
    if !(MIN_TX_FRAME..=MAX_TX_FRAME).contains(&t.size) {
        return Err(UsageError(format!(
            "--size {}: a txpush frame is {MIN_TX_FRAME} to {MAX_TX_FRAME} bytes (the headers, \
             and at most one UMEM frame)",
            t.size
        ))
        .into());
    }
    if let Err(e) = parse_mac(&t.dst_mac) {
        return Err(UsageError(format!("--dst-mac: {e:#}")).into());
    }
    Ok(())
}

/// Runs an AF_XDP application.
pub fn run(cmd: XdpCommand) -> Result<()> {
    let (name, args) = match &cmd {
        XdpCommand::Broker(b) => return broker::run(b.clone()),
        XdpCommand::Rxdrop(a) => ("rxdrop", a.clone()),
        XdpCommand::Txpush(t) => ("txpush", t.common.clone()),
        XdpCommand::L2fwd(a) => ("l2fwd", a.clone()),
    };
    // Ctrl-C or SIGTERM ends the run early but cleanly: the summary is printed and dropping the
    // link detaches the program (a second signal, or SIGKILL, ends the process at once; the kernel
    // then detaches the program as it closes the link).
    if let XdpCommand::Txpush(t) = &cmd {
        check_txpush(t)?;
    }
    let receives = !matches!(cmd, XdpCommand::Txpush(_));
    let takes_host_traffic = !receives || args.matching == MatchArg::All;
    if takes_host_traffic
        && !args.force
        && let Some(why) = zcnet::xdp::host_traffic(&args.iface)?
    {
        let what = if receives {
            "--match all takes every frame of the queue, the host's own traffic included"
        } else {
            "txpush floods the link"
        };
        return Err(Refused(format!(
            "{why}: {what}; pass --force to run anyway, or use an interface the host does not use"
        ))
        .into());
    }
    live::watch_interrupts()?;
    let mut app = App::open(
        &args.iface,
        args.queue,
        args.mode.into(),
        receives,
        name != "rxdrop",
        receives.then_some((args.attach.into(), args.frame_match())),
    )?;
    if let Some(reason) = app
        .socket
        .zerocopy_status()
        .err()
        .filter(|f| f.raw_os_error().is_some())
    {
        eprintln!(
            "zcnet: copy mode: {}",
            report::in_flag_words(&reason.to_string())
        );
    }
    if args.busy_poll {
        let budget = u16::try_from(args.batch).unwrap_or(u16::MAX);
        app.socket
            .set_busy_poll(BusyPoll::new(Duration::from_micros(20), budget))?;
    }
    app.print_every_second(args.json)?;
    let start = Instant::now();
    let stop = || live::interrupted() || start.elapsed().as_secs_f64() >= args.duration;
    let (packets, invalid) = match &cmd {
        XdpCommand::Rxdrop(_) => app.rxdrop(args.batch, args.wait(), stop)?,
        XdpCommand::L2fwd(_) => app.l2fwd(args.batch, args.wait(), stop)?,
        XdpCommand::Txpush(t) => {
            let spec = UdpFrame {
                src_mac: interface_mac(&args.iface)?,
                dst_mac: parse_mac(&t.dst_mac)?,
                src_ip: t.src_ip,
                dst_ip: t.dst_ip,
                src_port: args.port,
                dst_port: args.port,
            };
            let mut frame = vec![0u8; t.size.max(64)];
            let payload = t.size.saturating_sub(benchnet::frame::UDP_HEADERS);
            let len = spec
                .write(&mut frame, 0, payload)
                .with_context(|| format!("--size {} is too small for a UDP frame", t.size))?;
            (app.txpush(&frame[..len], args.batch, stop)?, 0)
        }
        XdpCommand::Broker(_) => unreachable!("the broker is served at the top of run"),
    };
    let seconds = start.elapsed().as_secs_f64();
    let stats = app.statistics()?;
    let mut row = Row::new();
    for (k, v) in [
        ("app", json!(name)),
        ("iface", json!(args.iface)),
        ("queue", json!(args.queue)),
        ("mode", json!(app.socket.mode().as_str())),
        (
            "match",
            json!(receives.then(|| args.frame_match().to_string())),
        ),
        (
            "attach",
            json!(app.attach_mode().map(|m| m.as_str().to_string())),
        ),
        ("packets", json!(packets)),
        ("seconds", json!(seconds)),
        ("mpps", json!(packets as f64 / seconds / 1e6)),
        ("rx_dropped", json!(stats.rx_dropped + stats.rx_ring_full)),
        ("invalid_descs", json!(stats.invalid_descs() + invalid)),
        (
            "fallback",
            json!(
                app.socket
                    .zerocopy_status()
                    .err()
                    .map(|f| report::in_flag_words(&f.to_string()))
            ),
        ),
    ] {
        row.insert(k.to_string(), v);
    }
    report::print_rows(
        &[row],
        &[
            ("app", "app"),
            ("iface", "iface"),
            ("mode", "mode"),
            ("attach", "attach"),
            ("packets", "packets"),
            ("seconds", "s"),
            ("mpps", "Mpps"),
            ("rx_dropped", "rx_dropped"),
            ("invalid_descs", "invalid"),
        ],
        args.json,
    );
    Ok(())
}
