//! `zcnet xdp broker`: the privileged half of AF_XDP's privilege split (`zcnet::xdp::Broker`). It
//! listens on a Unix socket and hands the queues of its allow-list to workers of the allowed uids
//! and gids, which then run AF_XDP with no capability; it also registers the zcrx instances of its
//! `--allow-zcrx` list on the workers' rings, so they receive through io_uring zero-copy receive
//! with no capability. It prints what it does, one line each.

use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use zcnet::rx::ZcrxBind;
use zcnet::xdp::{Broker, BrokerConfig, FrameMatch};

use super::{AttachArg, MatchArg, Refused};
use crate::flags::UsageError;

/// Options of `zcnet xdp broker`.
#[derive(Debug, Clone, clap::Args)]
pub struct BrokerArgs {
    /// Unix socket to listen on (a socket left there by a broker that is gone is replaced).
    #[arg(long)]
    pub socket: PathBuf,
    /// A queue it may hand out, as IFACE:QUEUE (repeat for more).
    #[arg(long = "allow", required_unless_present = "zcrx", value_parser = parse_queue)]
    pub allow: Vec<(String, u32)>,
    /// A zcrx instance it may register for workers: a receive queue as IFACE:QUEUE, or `nodev`
    /// for device-less ones (Linux 7.1+) (repeat for more).
    #[arg(long = "allow-zcrx", value_parser = parse_zcrx)]
    pub zcrx: Vec<ZcrxBind>,
    /// A uid whose workers it serves (repeat for more).
    #[arg(long = "allow-uid")]
    pub uids: Vec<u32>,
    /// A gid whose workers it serves (repeat for more).
    #[arg(long = "allow-gid")]
    pub gids: Vec<u32>,
    /// Frames of a granted queue its program hands to the worker; the others go on to the stack.
    #[arg(long = "match", value_enum, default_value_t = MatchArg::Udp)]
    pub matching: MatchArg,
    /// UDP destination port matched (--match udp).
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    /// Where the program runs.
    #[arg(long, value_enum, default_value_t = AttachArg::Driver)]
    pub attach: AttachArg,
    /// Largest UMEM or zcrx area registered for one worker, in MiB.
    #[arg(long, default_value_t = 64)]
    pub max_umem_mib: u64,
    /// Hand out every frame (--match all) of an interface the host uses.
    #[arg(long)]
    pub force: bool,
}

/// Parses `IFACE:QUEUE`.
fn parse_queue(text: &str) -> Result<(String, u32), String> {
    let (iface, queue) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not IFACE:QUEUE"))?;
    let queue = queue
        .parse()
        .map_err(|_| format!("{queue:?} in {text:?} is not a queue number"))?;
    if iface.is_empty() {
        return Err(format!("{text:?} names no interface"));
    }
    Ok((iface.to_string(), queue))
}

/// Parses `IFACE:QUEUE` or `nodev`.
fn parse_zcrx(text: &str) -> Result<ZcrxBind, String> {
    if text == "nodev" {
        return Ok(ZcrxBind::NoDevice);
    }
    let (interface, queue) = parse_queue(text).map_err(|e| format!("{e} nor nodev"))?;
    Ok(ZcrxBind::Queue { interface, queue })
}

/// Removes the socket at `path` when nobody listens there any more (a broker that was killed).
fn remove_stale(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Ok(());
    }
    match UnixStream::connect(path) {
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .with_context(|| format!("remove the stale socket {}", path.display())),
        _ => Ok(()),
    }
}

/// Runs the broker until it is killed (its programs go with it).
pub fn run(args: BrokerArgs) -> Result<()> {
    if args.uids.is_empty() && args.gids.is_empty() {
        return Err(
            UsageError("give --allow-uid or --allow-gid: nobody would be served".into()).into(),
        );
    }
    if args.matching == MatchArg::All && !args.force {
        for (iface, _) in &args.allow {
            if let Some(why) = zcnet::xdp::host_traffic(iface)? {
                return Err(Refused(format!(
                    "{why}: --match all hands every frame of its queues to workers, the host's own \
                     traffic included; pass --force to run anyway, or use --match udp"
                ))
                .into());
            }
        }
    }
    let mut config = BrokerConfig::new(args.allow.clone());
    config.uids = args.uids;
    config.gids = args.gids;
    config.matching = match args.matching {
        MatchArg::Udp => FrameMatch::UdpPort(args.port),
        MatchArg::All => FrameMatch::All,
    };
    config.attach = args.attach.into();
    config.max_umem_bytes = args.max_umem_mib << 20;
    config.zcrx = args.zcrx.clone();
    remove_stale(&args.socket)?;
    let broker = Broker::bind(&args.socket, config)?;
    let zcrx = args.zcrx.iter().map(|b| match b {
        ZcrxBind::Queue { interface, queue } => format!("zcrx {interface}:{queue}"),
        _ => "zcrx nodev".to_string(),
    });
    let allowed: Vec<String> = args
        .allow
        .iter()
        .map(|(i, q)| format!("{i}:{q}"))
        .chain(zcrx)
        .collect();
    println!(
        "listening on {} for {}",
        args.socket.display(),
        allowed.join(" ")
    );
    let _ = std::io::stdout().flush();
    broker.serve(|event| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{event}");
        let _ = out.flush();
    })?;
    Ok(())
}
