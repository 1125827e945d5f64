//! Per-interface rows for io_uring zero-copy receive on a NIC queue: header split, `hds-thresh`,
//! and the queues as netdev `queue-get` lists them with what holds each one. All read-only: ethtool
//! netlink `RINGS_GET`, netdev `queue-get`, rtnetlink `RTM_GETLINK`.

use super::{Finding, Support, refusal};
use crate::sys;
use crate::sys::ethtool::{EthtoolNl, Rings, tcp_data_split};

/// The zcrx rows of interface `name` (`ifindex`).
pub(super) fn rows(name: &str, ifindex: u32) -> Vec<Finding> {
    let rings = EthtoolNl::open().and_then(|mut nl| nl.rings(ifindex));
    let mut out = match rings {
        Ok(r) => vec![header_split(&r), hds_thresh(&r)],
        Err(e) => {
            let why = format!(
                "{} (ethtool rings get: the driver reports no ring parameters, so no header split)",
                refusal(&e)
            );
            vec![
                Finding::new("zcrx.header_split", Support::No, why.clone()),
                Finding::new("zcrx.hds_thresh", Support::No, why),
            ]
        }
    };
    out.push(queues(ifindex));
    out.into_iter().map(|f| f.on(name)).collect()
}

fn header_split(r: &Rings) -> Finding {
    match r.tcp_data_split {
        tcp_data_split::ENABLED => Finding::new("zcrx.header_split", Support::Yes, "on"),
        tcp_data_split::DISABLED => Finding::new(
            "zcrx.header_split",
            Support::Partial,
            "supported, off (zcnet lease apply --header-split turns it on)",
        ),
        _ => Finding::new(
            "zcrx.header_split",
            Support::No,
            "the driver reports no tcp-data-split: no header split, which zcrx needs",
        ),
    }
}

fn hds_thresh(r: &Rings) -> Finding {
    match r.hds_thresh {
        Some((0, max)) => Finding::new("zcrx.hds_thresh", Support::Yes, format!("0 (max {max})")),
        Some((t, max)) => Finding::new(
            "zcrx.hds_thresh",
            Support::Partial,
            format!("{t} (max {max}): zcrx needs 0 (zcnet lease apply --header-split sets it)"),
        ),
        None => Finding::new(
            "zcrx.hds_thresh",
            Support::No,
            "not reported: the driver has no hds-thresh setting",
        ),
    }
}

/// The RX queues netdev `queue-get` lists, and what holds each: the device's XDP program (every
/// queue), an AF_XDP socket, an io_uring zcrx area, a devmem dma-buf. Whether the driver has the
/// queue management ops that zcrx needs is not reported by any kernel interface: only a zcrx
/// registration on the queue tells, so the row does not claim it.
fn queues(ifindex: u32) -> Finding {
    let listed = sys::netlink::GenlSocket::open().and_then(|mut s| s.netdev_queues(ifindex));
    let queues = match listed {
        Ok(q) => q,
        Err(e) => {
            return Finding::new(
                "zcrx.queues",
                Support::No,
                format!("netdev queue-get: {} (needs Linux 6.8)", refusal(&e)),
            );
        }
    };
    let rx: Vec<_> = queues.iter().filter(|q| q.rx).collect();
    if rx.is_empty() {
        return Finding::new(
            "zcrx.queues",
            Support::No,
            "netdev queue-get lists no RX queue (the device is down)",
        );
    }
    let xdp = sys::netlink::GenlSocket::open_route()
        .and_then(|mut s| sys::rtnetlink::link_get(&mut s, ifindex))
        .ok()
        .and_then(|l| l.xdp_prog);
    let held: Vec<String> = rx
        .iter()
        .filter_map(|q| {
            let holders: Vec<&str> = [
                (q.xsk, "AF_XDP socket"),
                (q.io_uring, "io_uring zcrx"),
                (q.dmabuf.is_some(), "devmem dma-buf"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, what)| *what)
            .collect();
            (!holders.is_empty()).then(|| format!("rx {}: {}", q.id, holders.join(", ")))
        })
        .collect();
    let mut reason = format!(
        "{} RX queue(s) listed by netdev queue-get; {}",
        rx.len(),
        if held.is_empty() {
            "none held by an AF_XDP socket, io_uring zcrx or devmem (kernels from 6.15 report these)"
                .to_string()
        } else {
            held.join("; ")
        }
    );
    if let Some(id) = xdp {
        reason += &format!("; XDP program id {id} on the device (every queue)");
    }
    reason +=
        "; queue management ops (which zcrx needs) are not reported: a zcrx registration tells";
    Finding::new("zcrx.queues", Support::Yes, reason)
}
