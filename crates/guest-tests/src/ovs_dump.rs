//! Dumps that tell the truth, checked in the guest on datapaths of their own after the main Open
//! vSwitch run:
//! 1. a flow whose action list is too long for the kernel's dump message (the kernel then leaves
//!    `OVS_FLOW_ATTR_ACTIONS` out of it) reads with its real actions through the library and
//!    through `zcnet dp dump-flows`, read again by its key, or by its UFID when `ovs-dpctl add-flow`
//!    installed it under one; and a drop flow beside it still reads as `drop`;
//! 2. a handle kept on a datapath deleted since — by zcnet, or by Open vSwitch's
//!    `ovs-dpctl del-dp` — reads its flows and vports as an error naming `ENODEV`, not as none.

use anyhow::Context;
use zcnet::ovs::{
    Datapath, DatapathConfig, DpFlow, FlowActions, FlowInfo, OvsErrorKind, UpcallSocket,
};

use crate::outcome::Outcome;

/// Output actions in the long list: 8 bytes each, 32,720 bytes in all — within the kernel's
/// 32 KiB of actions per flow (`MAX_ACTIONS_BUFSIZE`, less its 24-byte header), beyond what a
/// dump message (at most 32 KiB less the skb's overhead) holds with the flow's key and mask.
const LONG_LIST: u32 = 4090;

/// Runs both checks.
pub fn run(outcome: &mut Outcome) -> anyhow::Result<()> {
    long_actions(outcome)?;
    gone_datapath(outcome)?;
    Ok(())
}

/// The match of the long flow and of the drop flow beside it.
const LONG_KEY: &str = "in_port(1),eth(),eth_type(0x0800),ipv4(src=10.8.0.1,frag=no)";
const DROP_KEY: &str = "in_port(1),eth(),eth_type(0x0800),ipv4(src=10.8.0.2,frag=no)";

fn long_actions(outcome: &mut Outcome) -> anyhow::Result<()> {
    let upcalls = UpcallSocket::open()?;
    let name = format!("zc{}-l", std::process::id());
    let mut dp = Datapath::create(&name, DatapathConfig::default(), &upcalls)
        .with_context(|| format!("create {name}"))?;
    let ports: Vec<String> = (1..=LONG_LIST).map(|p| p.to_string()).collect();
    let long = DpFlow::parse(LONG_KEY, Some(&ports.join(",")))?;
    let drop = DpFlow::parse(DROP_KEY, Some("drop"))?;
    dp.install(&long).context("install the long flow")?;
    dp.install(&drop).context("install the drop flow")?;

    let flows = dp.flows()?;
    let find = |src: &str| -> Option<&FlowInfo> {
        flows
            .iter()
            .find(|f| f.key_text().contains(&format!("src={src},")))
    };
    let long_read = find("10.8.0.1").map(|f| &f.actions);
    let drop_read = find("10.8.0.2").map(|f| &f.actions);
    // Refetched, not Dumped: the kernel did leave the long list out of the dump.
    outcome.check(
        "dump-long-actions",
        long_read == Some(&FlowActions::Refetched(long.actions.clone()))
            && drop_read == Some(&FlowActions::Dumped(Vec::new())),
        &format!(
            "a flow of {LONG_LIST} output actions ({} bytes) read back by Datapath::flows as {} (want all, refetched after the dump left them out); the drop flow as {}",
            long.actions.len(),
            summary(long_read),
            summary(drop_read),
        ),
    );

    let out = std::process::Command::new("zcnet")
        .args(["dp", "dump-flows", &name])
        .output()
        .context("run zcnet dp dump-flows")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line_of = |src: &str| {
        text.lines()
            .find(|l| l.contains(&format!("src={src},")))
            .unwrap_or("")
            .to_string()
    };
    let (long_line, drop_line) = (line_of("10.8.0.1"), line_of("10.8.0.2"));
    let long_shown = long_line
        .split_once("actions:")
        .map_or("", |(_, a)| a)
        .to_string();
    outcome.check(
        "cli-dump-long-actions",
        out.status.success()
            && long_shown == ports.join(",")
            && drop_line.ends_with("actions:drop"),
        &format!(
            "zcnet dp dump-flows {name} ({}): the long flow's actions print as `{}…` ({} bytes, want `1,2,3,…,{LONG_LIST}`); the drop flow's line ends `{}`; stderr: {}",
            out.status,
            long_shown.chars().take(40).collect::<String>(),
            long_shown.len(),
            &drop_line[drop_line.len().saturating_sub(20)..],
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    );

    // The same list installed by Open vSwitch's own tool under a UFID: the dump names the flow by
    // it, and the flow is read again by it.
    let key = "in_port(1),eth(),eth_type(0x0800),ipv4(src=10.8.0.3,frag=no)";
    let flow = format!("ufid:{UFID},{key}");
    crate::ovs::ovs_dpctl(&["add-flow", &name, &flow, &ports.join(",")])?;
    let flows = dp.flows()?;
    let read = flows
        .iter()
        .find(|f| f.key_text().contains("src=10.8.0.3,"));
    outcome.check(
        "dump-long-actions-ufid",
        read.is_some_and(|f| {
            f.ufid.is_some() && f.actions == FlowActions::Refetched(long.actions.clone())
        }),
        &format!(
            "a flow of {LONG_LIST} output actions added by ovs-dpctl with ufid:{UFID} read back by Datapath::flows with UFID {:?} and actions {} (want its UFID, and all actions refetched)",
            read.and_then(|f| f.ufid.as_ref()).map(|u| u.len()),
            summary(read.map(|f| &f.actions)),
        ),
    );
    Ok(())
}

/// The UFID the long flow is installed under by `ovs-dpctl add-flow` (a UUID, as Open vSwitch
/// writes them).
const UFID: &str = "2f3c4a5b-6d7e-4f80-9a1b-2c3d4e5f6071";

/// How a flow's actions were read, in a few words.
fn summary(actions: Option<&FlowActions>) -> String {
    match actions {
        None => "no such flow".into(),
        Some(FlowActions::Dumped(a)) => format!("{} bytes from the dump", a.len()),
        Some(FlowActions::Refetched(a)) => format!("{} bytes refetched", a.len()),
        Some(FlowActions::Unknown(why)) => format!("unknown: {why}"),
        Some(other) => format!("{other:?}"),
    }
}

fn gone_datapath(outcome: &mut Outcome) -> anyhow::Result<()> {
    // Deleted through zcnet, by the handle that created it.
    let upcalls = UpcallSocket::open()?;
    let name = format!("zc{}-x", std::process::id());
    let created = Datapath::create(&name, DatapathConfig::default(), &upcalls)?;
    let mut kept = Datapath::open(&name)?;
    created.delete()?;
    let by_zcnet = reads_of_gone(&mut kept);

    // Deleted by Open vSwitch's own tool.
    let name = format!("zc{}-y", std::process::id());
    crate::ovs::ovs_dpctl(&["add-dp", &name])?;
    let mut kept = Datapath::open(&name)?;
    crate::ovs::ovs_dpctl(&["del-dp", &name])?;
    let by_ovs = reads_of_gone(&mut kept);

    outcome.check(
        "gone-datapath",
        by_zcnet.0 && by_ovs.0,
        &format!(
            "a handle kept on a datapath deleted by zcnet reads {}; one deleted by ovs-dpctl del-dp reads {}",
            by_zcnet.1, by_ovs.1
        ),
    );
    Ok(())
}

/// Whether `dp`'s flows and vports read as "datapath gone" errors naming `ENODEV`, and what they
/// read as.
fn reads_of_gone(dp: &mut Datapath) -> (bool, String) {
    let flows = dp.flows();
    let vports = dp.vports();
    let gone = |e: &zcnet::ovs::OvsError| {
        e.raw_os_error() == Some(libc::ENODEV) && e.ovs_kind() == OvsErrorKind::DatapathGone
    };
    let ok = matches!(&flows, Err(e) if gone(e)) && matches!(&vports, Err(e) if gone(e));
    let shown = |r: Result<usize, String>| match r {
        Ok(n) => format!("Ok with {n} entries"),
        Err(e) => format!("Err({e})"),
    };
    (
        ok,
        format!(
            "flows: {}, vports: {}",
            shown(flows.map(|f| f.len()).map_err(|e| e.to_string())),
            shown(vports.map(|v| v.len()).map_err(|e| e.to_string()))
        ),
    )
}
