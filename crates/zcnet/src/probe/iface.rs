//! Per-interface findings: MTU and queues from sysfs, XDP features from netdev generic netlink
//! (read-only), and, on request, an AF_XDP XDP_ZEROCOPY bind.

use std::io;

use super::{Finding, ProbeOptions, Support, refusal};
use crate::sys;

fn read_sys(iface: &str, file: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{file}")).map(|s| s.trim().to_string())
}

pub(super) fn interfaces(opts: &ProbeOptions) -> Vec<Finding> {
    let names: Vec<String> = match &opts.ifaces {
        Some(list) => list.clone(),
        None => {
            let mut all: Vec<String> = std::fs::read_dir("/sys/class/net")
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            all.sort();
            all
        }
    };
    let netdev = sys::netlink::GenlSocket::open().and_then(|mut s| s.netdev_devices());
    let mut out = Vec::new();
    for name in &names {
        let ifindex = match read_sys(name, "ifindex").map(|s| s.parse::<u32>()) {
            Ok(Ok(i)) => i,
            _ => {
                out.push(Finding::new("iface", Support::No, "ENODEV (no such interface)").on(name));
                continue;
            }
        };
        let mtu = read_sys(name, "mtu").unwrap_or_else(|_| "?".into());
        let rx_queues = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                    .count()
            })
            .unwrap_or(0);
        out.push(
            Finding::new(
                "iface",
                Support::Yes,
                format!("ifindex {ifindex}, mtu {mtu}, {rx_queues} rx queues"),
            )
            .on(name),
        );
        out.push(xdp_features(&netdev, ifindex).on(name));
        if opts.try_xsk_bind {
            out.push(xsk_zero_copy_bind(name).on(name));
        }
    }
    out
}

fn xdp_features(netdev: &io::Result<Vec<sys::netlink::NetdevXdp>>, ifindex: u32) -> Finding {
    use sys::netlink::xdp_act;
    let devs = match netdev {
        Ok(devs) => devs,
        Err(e) => {
            return Finding::new(
                "xdp.features",
                Support::No,
                format!("netdev netlink: {}", refusal(e)),
            );
        }
    };
    let Some(dev) = devs.iter().find(|d| d.ifindex == ifindex) else {
        return Finding::new("xdp.features", Support::No, "not listed by netdev netlink");
    };
    let names = xdp_act::names(dev.xdp_features);
    let support = if dev.xdp_features & xdp_act::XSK_ZEROCOPY != 0 {
        Support::Yes
    } else if dev.xdp_features & xdp_act::REDIRECT != 0 {
        Support::Partial
    } else {
        Support::No
    };
    let list = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(",")
    };
    // Zero-copy multi-buffer (XDP_USE_SG) needs the driver to take frames of several segments.
    let zero_copy = match (support, dev.xdp_zc_max_segs) {
        (Support::Yes, 0 | 1) => "advertised, without multi-buffer (xdp_zc_max_segs 1)".to_string(),
        (Support::Yes, n) => format!("advertised, multi-buffer up to {n} frames"),
        _ => "not advertised".to_string(),
    };
    Finding::new(
        "xdp.features",
        support,
        format!("{list}; xsk zero-copy {zero_copy}"),
    )
}

/// Tries an XDP_ZEROCOPY bind on queue 0 (no program attached, socket closed at once).
fn xsk_zero_copy_bind(iface: &str) -> Finding {
    match crate::xdp::probe_zero_copy(iface, 0) {
        Ok(None) => Finding::new(
            "xdp.xsk_zerocopy_bind",
            Support::Yes,
            "XDP_ZEROCOPY bind on queue 0 succeeded",
        ),
        Ok(Some(errno)) => Finding::new(
            "xdp.xsk_zerocopy_bind",
            Support::No,
            format!(
                "{} (XDP_ZEROCOPY bind on queue 0 refused: copy mode only)",
                sys::errno_name(errno)
            ),
        ),
        Err(e) => Finding::new("xdp.xsk_zerocopy_bind", Support::No, e.to_string()),
    }
}
