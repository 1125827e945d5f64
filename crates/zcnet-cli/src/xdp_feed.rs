//! How `zcnet bench xdp` hands the generator's frames to the receiving veth end (`a_if`).
//!
//! A real NIC's driver runs XDP on its own receive buffer, and builds an skb around that buffer for
//! frames the program passes. A veth fed with skbs cannot: XDP needs the frame in one page with
//! `XDP_PACKET_HEADROOM` in front of it, and an skb from a packet socket has little headroom (and may be
//! cloned), so veth copies every one into a page-pool page before its XDP program runs
//! (`veth_convert_skb_to_xdp_buff`) — a cost that a native driver never has and that would be charged
//! to the receiver being measured.
//!
//! - [`Feed::Xdp`] (the default) feeds `a_if` the way a driver is fed: the generator sends into a second
//!   veth pair inside `b`'s namespace, whose far end (`fwd_if`) runs [`XdpProgram::redirect_to_interface`]
//!   towards `b_if`. The redirect hands `xdp_frame`s to `b_if`'s `ndo_xdp_xmit`, which queues them on
//!   `a_if`'s receive ring (veth accepts them when `a_if` has NAPI: an XDP program or GRO on). `a_if`'s
//!   NAPI then runs its XDP program on the frame as it is, or, with no program, builds an skb around the
//!   frame's page without a copy. The conversion copy happens on `fwd_if`, whose NAPI thread runs on the
//!   generator's CPU.
//! - [`Feed::Skb`] sends straight into `b_if`: `a_if` receives skbs and copies each before XDP.

use anyhow::{Context, Result};
use benchnet::{VethPair, cpu};
use zcnet::xdp::{AttachMode, XdpLink, XdpProgram, interface_index};

/// `--feed`: how frames reach the receiving interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Feed {
    /// XDP frames redirected from a second veth pair, as a NIC driver delivers them (no copy before
    /// the receiver's XDP program; what a real NIC resembles).
    Xdp,
    /// skbs sent straight into the receiving pair (veth copies each before running XDP on it).
    Skb,
}

impl Feed {
    /// `"xdp"` or `"skb"`, as the rows show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Feed::Xdp => "xdp",
            Feed::Skb => "skb",
        }
    }
}

/// What the generator sends into: `b_if` itself, or the first end of the feeding pair.
#[derive(Debug)]
pub struct FeedPath {
    /// The interface (in `b`'s namespace) the generator sends its frames on.
    pub generator_if: String,
    /// The feeding pair's far end, which redirects to `b_if` (with [`Feed::Xdp`]).
    forwarder: Option<Forwarder>,
}

#[derive(Debug)]
struct Forwarder {
    iface: String,
    _link: XdpLink,
}

impl FeedPath {
    /// Sets up `feed` for `pair`. With [`Feed::Xdp`], turns GRO on on `a_if` (so that it has NAPI and
    /// takes redirected frames whatever runs on it), builds the feeding pair in `b` (removed with `b`)
    /// and attaches the redirect program to its far end; its NAPI (there since the attach) is threaded
    /// so that [`FeedPath::pin`] can keep it on the generator's CPU.
    pub fn new(pair: &VethPair, feed: Feed) -> Result<FeedPath> {
        if feed == Feed::Skb {
            return Ok(FeedPath {
                generator_if: pair.b_if.clone(),
                forwarder: None,
            });
        }
        pair.a
            .exec("ethtool", &["-K", &pair.a_if, "gro", "on"])
            .with_context(|| format!("turn GRO on on {}", pair.a_if))?;
        let pid = std::process::id();
        let (generator_if, fwd_if) = (format!("zc{pid}g"), format!("zc{pid}f"));
        let b = &pair.b;
        b.ip(&[
            "link",
            "add",
            &generator_if,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
            "type",
            "veth",
            "peer",
            "name",
            &fwd_if,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
        ])
        .context("create the feeding veth pair")?;
        for iface in [&generator_if, &fwd_if] {
            b.ip(&["link", "set", iface, "up"])
                .with_context(|| format!("bring {iface} up"))?;
        }
        let link =
            b.run(|| -> Result<XdpLink> {
                let target = interface_index(&pair.b_if)?;
                Ok(XdpProgram::redirect_to_interface(target)?
                    .attach_to(&fwd_if, AttachMode::Driver)?)
            })?;
        // veth has NAPI only once an XDP program is attached (or GRO is on).
        b.exec(
            "sh",
            &["-c", &format!("echo 1 > /sys/class/net/{fwd_if}/threaded")],
        )
        .with_context(|| format!("threaded NAPI on {fwd_if}"))?;
        Ok(FeedPath {
            generator_if,
            forwarder: Some(Forwarder {
                iface: fwd_if,
                _link: link,
            }),
        })
    }

    /// Pins the forwarding end's NAPI threads, if any, to `cpu` (the generator's).
    pub fn pin(&self, cpu: usize) -> Result<()> {
        let Some(forwarder) = &self.forwarder else {
            return Ok(());
        };
        let threads = cpu::napi_threads(&forwarder.iface).context("list NAPI threads")?;
        anyhow::ensure!(
            !threads.is_empty(),
            "{} has no threaded NAPI to pin",
            forwarder.iface
        );
        for tid in threads {
            cpu::pin(tid, cpu).with_context(|| format!("pin NAPI thread {tid}"))?;
        }
        Ok(())
    }
}
