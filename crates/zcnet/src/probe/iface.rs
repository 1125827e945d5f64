//! Per-interface findings: MTU and queues from sysfs, XDP features and AF_XDP TX metadata from
//! netdev generic netlink (read-only) and a UMEM registered with TX metadata room on a throwaway
//! socket (see [`crate::xdp::TxMetadata`]), what io_uring zcrx needs of its queues
//! ([`super::nic_queues`]), and, on request, an AF_XDP XDP_ZEROCOPY bind.

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
    // The UMEM question is the kernel's, the same for every interface: asked once.
    let umem = crate::xdp::tx_metadata::probe_umem();
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
        out.push(tx_metadata(&netdev, ifindex, &umem).on(name));
        out.extend(super::nic_queues::rows(name, ifindex));
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

/// AF_XDP TX metadata on one interface: what copy mode gets (the kernel's, from the UMEM
/// registration) and what zero-copy mode gets (the driver's `xsk-features`). Yes when the driver
/// computes checksums in zero-copy mode, partial when only copy mode has TX metadata.
fn tx_metadata(
    netdev: &io::Result<Vec<sys::netlink::NetdevXdp>>,
    ifindex: u32,
    umem: &crate::xdp::Result<Option<i32>>,
) -> Finding {
    use sys::netlink::{xdp_act, xsk_flags};
    let copy = match umem {
        Ok(None) => "copy mode: a UMEM with tx_metadata_len 16 registers: checksum offload (the \
                     kernel's transmit path completes it), software completion timestamps"
            .to_string(),
        Ok(Some(errno)) => format!(
            "copy mode: {} (a UMEM with TX metadata room refused: no TX metadata)",
            sys::errno_name(*errno)
        ),
        Err(e) => format!("copy mode: not probed ({e})"),
    };
    let dev = netdev
        .as_ref()
        .ok()
        .and_then(|devs| devs.iter().find(|d| d.ifindex == ifindex));
    let zero_copy = match dev {
        None => "zero-copy: not listed by netdev netlink".to_string(),
        Some(d) if d.xdp_features & xdp_act::XSK_ZEROCOPY == 0 => {
            "zero-copy: none (no xsk zero-copy)".to_string()
        }
        Some(d) => match d.xsk_features {
            None => "zero-copy: xsk-features not reported (a kernel before 6.8)".to_string(),
            Some(0) => {
                "zero-copy: xsk-features none (the driver acts on no TX metadata)".to_string()
            }
            Some(f) => format!("zero-copy: xsk-features {}", xsk_flags::names(f).join(",")),
        },
    };
    let copy_ok = matches!(umem, Ok(None));
    let driver_checksum = dev.is_some_and(|d| {
        d.xdp_features & xdp_act::XSK_ZEROCOPY != 0
            && d.xsk_features
                .is_some_and(|f| f & xsk_flags::TX_CHECKSUM != 0)
    });
    let support = match (copy_ok, driver_checksum) {
        (true, true) => Support::Yes,
        (true, false) => Support::Partial,
        (false, _) => Support::No,
    };
    Finding::new("xdp.tx_metadata", support, format!("{copy}; {zero_copy}"))
}

/// Tries an XDP_ZEROCOPY bind on queue 0 (no program attached, socket closed at once).
fn xsk_zero_copy_bind(iface: &str) -> Finding {
    match crate::xdp::probe_zero_copy(iface, 0) {
        Ok(Ok(())) => Finding::new(
            "xdp.xsk_zerocopy_bind",
            Support::Yes,
            "XDP_ZEROCOPY bind on queue 0 succeeded",
        ),
        Ok(Err(refused)) => Finding::new(
            "xdp.xsk_zerocopy_bind",
            Support::No,
            format!(
                "{} (XDP_ZEROCOPY bind on queue 0 refused: copy mode only)",
                sys::errno_name(refused.raw_os_error().unwrap_or(0))
            ),
        ),
        Err(e) => Finding::new("xdp.xsk_zerocopy_bind", Support::No, e.to_string()),
    }
}
