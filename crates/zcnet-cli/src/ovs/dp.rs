//! `zcnet dp show|dump-flows|add-flow|del-flow`: any Open vSwitch kernel datapath — zcnet's, or one
//! made by `ovs-dpctl` or ovs-vswitchd — opened without being taken over, its ports and flows printed
//! in the text `ovs-dpctl` prints and flows read in the text it reads, so that a line can be pasted
//! from one tool into the other.

use anyhow::{Context, Result};
use zcnet::ovs::{
    self, Datapath, DatapathInfo, DpFlow, FlowActions, FlowInfo, OvsErrorKind, VportInfo,
};

use crate::report::outln;

/// `zcnet dp …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DpCommand {
    /// A datapath's counters, masks and ports, as `ovs-dpctl show` (every datapath without NAME).
    /// A datapath deleted while it is being read is said to have vanished, and the others shown.
    Show {
        /// Datapath name.
        name: Option<String>,
    },
    /// Its flows with masks, counters and actions, one per line as `ovs-dpctl dump-flows` prints.
    /// Actions the kernel's dump leaves out (a list too long for its message) are read again flow
    /// by flow; a flow whose actions cannot be read prints `actions:unknown(WHY)`, is named on
    /// standard error, and the run exits 1.
    DumpFlows {
        /// Datapath name.
        name: String,
        /// One JSON object per flow instead.
        #[arg(long)]
        json: bool,
    },
    /// Install a flow: `zcnet dp add-flow NAME 'in_port(1),eth(),…' 'ACTIONS'`, or one line of
    /// `ovs-dpctl dump-flows` output (with its `actions:`) as FLOW alone. Needs CAP_NET_ADMIN.
    AddFlow {
        /// Datapath name.
        name: String,
        /// The match in OVS's datapath flow syntax (or a whole dump-flows line).
        flow: String,
        /// The actions (`2`, `drop`, `set(…),push_vlan(…),…`).
        actions: Option<String>,
    },
    /// Delete the flow whose match prints as FLOW does (a dump-flows line works too).
    DelFlow {
        /// Datapath name.
        name: String,
        /// The match.
        flow: String,
    },
}

/// Runs `zcnet dp …`.
pub fn run(cmd: DpCommand) -> Result<()> {
    match cmd {
        DpCommand::Show { name } => {
            let all = ovs::datapaths().context("listing datapaths")?;
            let chosen: Vec<_> = match &name {
                Some(n) => {
                    let d = all
                        .into_iter()
                        .find(|d| &d.name == n)
                        .with_context(|| format!("no datapath named {n}"))?;
                    vec![d]
                }
                None => all,
            };
            for info in chosen {
                show(&info)?;
            }
            Ok(())
        }
        DpCommand::DumpFlows { name, json } => {
            let mut dp = open(&name)?;
            let now = ovs::monotonic_ms();
            let mut unknown = 0;
            for f in dp.flows().context("dumping flows")? {
                if json {
                    outln!("{}", flow_json(&f, now));
                } else {
                    outln!("{}", f.line(now));
                }
                if let FlowActions::Unknown(why) = &f.actions {
                    eprintln!("zcnet: flow {}: actions unknown: {why}", f.key_text());
                    unknown += 1;
                }
            }
            anyhow::ensure!(
                unknown == 0,
                "the actions of {unknown} flow(s) could not be read (named above)"
            );
            Ok(())
        }
        DpCommand::AddFlow {
            name,
            flow,
            actions,
        } => {
            let flow = DpFlow::parse(&flow, actions.as_deref())?;
            open(&name)?.install(&flow).context("installing the flow")
        }
        DpCommand::DelFlow { name, flow } => {
            let flow = match DpFlow::parse(&flow, None) {
                Ok(f) => f,
                Err(_) => DpFlow::parse(&flow, Some("drop"))?,
            };
            open(&name)?.remove(&flow).context("deleting the flow")
        }
    }
}

fn open(name: &str) -> Result<Datapath> {
    Datapath::open(name).with_context(|| format!("opening datapath {name}"))
}

/// Prints `info` (as listed) and its ports, or, when it is deleted before its ports are read, a
/// line saying it vanished.
fn show(info: &DatapathInfo) -> Result<()> {
    let mut ports = match ports_of(info.ifindex) {
        Ok(ports) => ports,
        Err(e) if e.ovs_kind() == OvsErrorKind::DatapathGone => {
            outln!("system@{}: vanished (deleted while being read)", info.name);
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("reading datapath {}", info.name)),
    };
    let s = &info.stats;
    outln!("system@{}:", info.name);
    outln!(
        "  lookups: hit:{} missed:{} lost:{}",
        s.n_hit,
        s.n_missed,
        s.n_lost
    );
    outln!("  flows: {}", s.n_flows);
    if let Some(masks) = info.masks {
        let (hit, total) = (masks.hits, masks.masks);
        let packets = s.n_hit + s.n_missed;
        let per_packet = if packets == 0 {
            0.0
        } else {
            hit as f64 / packets as f64
        };
        outln!("  masks: hit:{hit} total:{total} hit/pkt:{per_packet:.2}");
    }
    ports.sort_by_key(|p| p.port_no);
    for p in ports {
        match vport_type_name(p.kind) {
            None => outln!("  port {}: {}", p.port_no, p.name),
            Some(t) => outln!("  port {}: {} ({t})", p.port_no, p.name),
        }
    }
    Ok(())
}

/// The ports of the datapath whose internal device has `ifindex`.
fn ports_of(ifindex: zcnet::IfIndex) -> Result<Vec<VportInfo>, ovs::OvsError> {
    Datapath::open_ifindex(ifindex)?.vports()
}

/// The type `ovs-dpctl show` puts after a port (none for a network device: "system").
fn vport_type_name(kind: u32) -> Option<String> {
    match kind {
        1 => None,
        2 => Some("internal".into()),
        3 => Some("gre".into()),
        4 => Some("vxlan".into()),
        5 => Some("geneve".into()),
        k => Some(format!("type {k}")),
    }
}

fn flow_json(f: &FlowInfo, now_ms: u64) -> serde_json::Value {
    let unknown = match &f.actions {
        FlowActions::Unknown(why) => Some(why),
        _ => None,
    };
    serde_json::json!({
        "key": f.key_text(),
        "actions": f.actions.bytes().map(|_| f.actions_text()),
        "actions_unknown": unknown,
        "actions_refetched": matches!(f.actions, FlowActions::Refetched(_)),
        "masked": f.mask.is_some(),
        "packets": f.stats.n_packets,
        "bytes": f.stats.n_bytes,
        "used_ms_ago": f.used_ms.map(|t| now_ms.saturating_sub(t)),
        "tcp_flags": f.tcp_flags,
        "ufid": f.ufid.as_ref().map(|u| u.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    })
}
