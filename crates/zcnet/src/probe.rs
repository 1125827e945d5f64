//! What this host supports, each feature measured by using it.
//!
//! Every check does the real thing on a throwaway socket (set the option, send over loopback, read the
//! completion, map received pages) and reports [`Support`] with the reason: the errno name when the
//! kernel refused, or the measured value. Nothing here attaches to or sends on a real interface:
//! interface facts come from sysfs and netdev generic netlink (read-only), and the one intrusive check
//! (an XDP_ZEROCOPY bind) runs only on interfaces the caller names and opts into.

use std::fmt;
use std::io;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use crate::rx;
use crate::sys;
use crate::sys::errno::error_name;
use crate::tx::{Mode, SenderConfig, TcpSender, TxStats, UdpSender, tcp_loopback_check};

/// Whether a feature works here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// It works as intended.
    Yes,
    /// It is accepted but does not deliver its benefit here (e.g. zero-copy sends that the kernel
    /// copies anyway).
    Partial,
    /// The kernel refused it or it is absent.
    No,
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Support::Yes => "yes",
            Support::Partial => "partial",
            Support::No => "no",
        })
    }
}

/// One probed feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Short stable name, e.g. `tcp.so_zerocopy` or `xdp.xsk_zerocopy`.
    pub feature: String,
    /// The interface it concerns, for per-interface rows.
    pub iface: Option<String>,
    /// The verdict.
    pub support: Support,
    /// Why: an errno name, a measured value, or what was observed.
    pub reason: String,
}

impl Finding {
    fn new(feature: &str, support: Support, reason: impl Into<String>) -> Finding {
        Finding {
            feature: feature.to_string(),
            iface: None,
            support,
            reason: reason.into(),
        }
    }

    fn on(mut self, iface: &str) -> Finding {
        self.iface = Some(iface.to_string());
        self
    }

    /// `Yes` with `ok` as the reason, or `No` with the error's errno name and text.
    fn from_result<T>(
        feature: &str,
        result: io::Result<T>,
        ok: impl FnOnce(T) -> String,
    ) -> Finding {
        match result {
            Ok(v) => Finding::new(feature, Support::Yes, ok(v)),
            Err(e) => Finding::new(feature, Support::No, refusal(&e)),
        }
    }
}

/// `"EOPNOTSUPP (Operation not supported)"`: errno name first, then the system's text.
pub fn refusal(e: &io::Error) -> String {
    let name = error_name(e);
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    format!("{name} ({text})")
}

/// What to probe beyond the host-wide features.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Interfaces to describe; `None` = every interface of this network namespace.
    pub ifaces: Option<Vec<String>>,
    /// Also try an AF_XDP XDP_ZEROCOPY bind on queue 0 of each named interface. This reconfigures the
    /// queue of a real NIC for a moment: only for interfaces the caller owns.
    pub try_xsk_bind: bool,
}

/// Runs every check and returns the findings in a stable order.
pub fn probe(opts: &ProbeOptions) -> Vec<Finding> {
    let mut out = vec![kernel()];
    out.push(so_zerocopy(
        "tcp.so_zerocopy",
        libc::AF_INET,
        libc::SOCK_STREAM,
    ));
    out.push(so_zerocopy(
        "udp.so_zerocopy",
        libc::AF_INET,
        libc::SOCK_DGRAM,
    ));
    out.push(so_zerocopy(
        "vsock.so_zerocopy",
        libc::AF_VSOCK,
        libc::SOCK_STREAM,
    ));
    out.push(loopback_send(
        "tcp.msg_zerocopy_loopback",
        tcp_zerocopy_stats(),
    ));
    out.push(loopback_send(
        "udp.msg_zerocopy_loopback",
        udp_zerocopy_stats(),
    ));
    out.push(zerocopy_receive());
    out.extend(uring());
    out.push(Finding::from_result(
        "xdp.socket",
        sys::socket::socket(libc::AF_XDP, libc::SOCK_RAW, 0),
        |_| "AF_XDP socket created".into(),
    ));
    out.extend(vsock());
    out.extend(interfaces(opts));
    out.extend(limits());
    out
}

fn kernel() -> Finding {
    Finding::from_result("kernel", sys::socket::kernel_release(), |r| r)
}

fn so_zerocopy(feature: &str, domain: i32, kind: i32) -> Finding {
    let result = sys::socket::socket(domain, kind, 0).and_then(|fd| {
        sys::socket::set_int_option(fd.as_fd(), libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)
    });
    Finding::from_result(feature, result, |_| {
        "setsockopt(SO_ZEROCOPY) accepted".into()
    })
}

/// Sends this many MSG_ZEROCOPY writes over loopback and reads their completions.
const LOOPBACK_SENDS: usize = 8;
/// Bytes per loopback write: far above any copy threshold.
const LOOPBACK_SEND_SIZE: usize = 64 * 1024;

/// A verdict on zero-copy sends from the completions they produced.
fn loopback_send(feature: &str, stats: Result<TxStats, String>) -> Finding {
    match stats {
        Err(reason) => Finding::new(feature, Support::No, reason),
        Ok(s) if s.zc_ids > 0 => Finding::new(
            feature,
            Support::Yes,
            format!("{} ids zero-copied, {} copied", s.zc_ids, s.copied_ids),
        ),
        Ok(s) if s.copied_ids > 0 => Finding::new(
            feature,
            Support::Partial,
            format!(
                "every completion copied ({} ids, SO_EE_CODE_ZEROCOPY_COPIED): delivery to a local socket copies",
                s.copied_ids
            ),
        ),
        Ok(s) => Finding::new(
            feature,
            Support::No,
            format!(
                "no zero-copy send happened ({} copies: {:?})",
                s.copy_calls, s
            ),
        ),
    }
}

/// One MSG_ZEROCOPY write of [`LOOPBACK_SENDS`] x [`LOOPBACK_SEND_SIZE`] bytes over TCP loopback.
fn tcp_zerocopy_stats() -> Result<TxStats, String> {
    let check = tcp_loopback_check(LOOPBACK_SENDS * LOOPBACK_SEND_SIZE, Duration::from_secs(5))
        .map_err(|e| refusal(&e))?;
    check.zerocopy?;
    Ok(check.stats)
}

/// Sends [`LOOPBACK_SENDS`] zero-copy datagrams to a local UDP socket.
fn udp_zerocopy_stats() -> Result<TxStats, String> {
    let io = |e: io::Error| refusal(&e);
    let receiver = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
    let sender = UdpSocket::bind("127.0.0.1:0").map_err(io)?;
    sender
        .connect(receiver.local_addr().map_err(io)?)
        .map_err(io)?;
    let mut tx = UdpSender::new(sender, SenderConfig::with_mode(Mode::ZeroCopy));
    tx.zerocopy_status().map_err(str::to_string)?;
    for _ in 0..LOOPBACK_SENDS {
        tx.send(vec![0x5a; 8 * 1024]).map_err(|e| e.to_string())?;
    }
    tx.flush(Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    Ok(tx.stats().clone())
}

/// TCP_ZEROCOPY_RECEIVE over loopback at MSS 4096: the share of a stream that maps, with a
/// MSG_ZEROCOPY sender (whole pages per segment) and with a plain `write()` sender.
fn zerocopy_receive() -> Finding {
    const FEATURE: &str = "tcp.zerocopy_receive";
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let zerocopy = rx::measure_loopback(ip, |client| {
        let mut tx = TcpSender::new(client, SenderConfig::with_mode(Mode::ZeroCopy));
        for _ in 0..LOOPBACK_SENDS {
            tx.send(vec![0x5a; LOOPBACK_SEND_SIZE])?;
        }
        tx.flush(Duration::from_secs(5))?;
        tx.close(Duration::from_secs(5))
            .map(drop)
            .map_err(io::Error::from)
    });
    let plain = rx::measure_loopback(ip, |mut client| {
        (0..LOOPBACK_SENDS).try_for_each(|_| client.write_all(&[0x5a; LOOPBACK_SEND_SIZE]))
    });
    match (zerocopy, plain) {
        (Err(e), _) | (_, Err(e)) => Finding::new(FEATURE, Support::No, e.to_string()),
        (Ok(zc), Ok(plain)) => {
            let support = match zc.mapped_pct() {
                p if p >= 99.0 => Support::Yes,
                p if p > 0.0 => Support::Partial,
                _ => Support::No,
            };
            Finding::new(
                FEATURE,
                support,
                format!(
                    "{:.1}% of bytes mapped with a MSG_ZEROCOPY sender, {:.1}% with a plain sender (loopback, MSS 4096)",
                    zc.mapped_pct(),
                    plain.mapped_pct()
                ),
            )
        }
    }
}

/// AF_VSOCK: this host's context id, its transports, and whether a loopback transport exists
/// (decided by a bind, never by connecting).
fn vsock() -> Vec<Finding> {
    let cid = Finding::from_result("vsock.local_cid", sys::vsock::local_cid(), |c| {
        format!("CID {c}")
    });
    const TRANSPORTS: [(&str, &str); 5] = [
        ("vsock_loopback", "loopback"),
        ("vmw_vsock_virtio_transport", "virtio (guest)"),
        ("vhost_vsock", "vhost (host)"),
        ("hv_sock", "hyper-v"),
        ("vmw_vsock_vmci_transport", "vmci"),
    ];
    let loaded: Vec<&str> = TRANSPORTS
        .iter()
        .filter(|(module, _)| std::path::Path::new(&format!("/sys/module/{module}")).exists())
        .map(|(_, name)| *name)
        .collect();
    let loopback = match sys::vsock::loopback_available() {
        Ok(()) => Finding::new(
            "vsock.loopback",
            Support::Yes,
            "bind to VMADDR_CID_LOCAL succeeded",
        ),
        Err(reason) => Finding::new("vsock.loopback", Support::No, reason),
    };
    let transports = if loaded.is_empty() {
        Finding::new(
            "vsock.transports",
            Support::No,
            "no vsock transport module loaded",
        )
    } else {
        Finding::new("vsock.transports", Support::Yes, loaded.join(", "))
    };
    vec![cid, transports, loopback]
}

#[cfg(feature = "io-uring")]
fn uring() -> Vec<Finding> {
    let ops = match sys::uring::zero_copy_opcodes() {
        Ok(ops) => ops,
        Err(e) => {
            return vec![
                Finding::new("io_uring.send_zc", Support::No, refusal(&e)),
                Finding::new("io_uring.send_zc_report_usage", Support::No, refusal(&e)),
            ];
        }
    };
    let send_zc = if ops.send_zc {
        Finding::new(
            "io_uring.send_zc",
            Support::Yes,
            format!("opcode supported; sendmsg_zc: {}", ops.sendmsg_zc),
        )
    } else {
        Finding::new(
            "io_uring.send_zc",
            Support::No,
            "opcode not supported by IORING_REGISTER_PROBE",
        )
    };
    let usage = if !ops.send_zc {
        Finding::new("io_uring.send_zc_report_usage", Support::No, "no SEND_ZC")
    } else {
        let sent = (|| {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let client = TcpStream::connect(listener.local_addr()?)?;
            let _server = listener.accept()?;
            sys::uring::send_zc_reporting_usage(client.as_fd(), &[0x5a; 16384])
        })();
        match sent {
            Ok(r) if r.copied => Finding::new(
                "io_uring.send_zc_report_usage",
                Support::Yes,
                "notification reports usage; loopback send was copied (local delivery)",
            ),
            Ok(_) => Finding::new(
                "io_uring.send_zc_report_usage",
                Support::Yes,
                "notification reports usage; loopback send was not copied",
            ),
            Err(e) => Finding::new("io_uring.send_zc_report_usage", Support::No, refusal(&e)),
        }
    };
    vec![send_zc, usage]
}

#[cfg(not(feature = "io-uring"))]
fn uring() -> Vec<Finding> {
    vec![Finding::new(
        "io_uring.send_zc",
        Support::No,
        "zcnet built without the io-uring feature",
    )]
}

fn read_sys(iface: &str, file: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/{file}")).map(|s| s.trim().to_string())
}

fn interfaces(opts: &ProbeOptions) -> Vec<Finding> {
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
    Finding::new(
        "xdp.features",
        support,
        format!(
            "{list}; xsk zero-copy {}",
            if support == Support::Yes {
                "advertised"
            } else {
                "not advertised"
            }
        ),
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

fn limits() -> Vec<Finding> {
    let memlock = Finding::from_result(
        "limit.memlock",
        sys::socket::memlock_limit(),
        |(soft, hard)| {
            let show =
                |v: Option<u64>| v.map_or("unlimited".to_string(), |b| format!("{} KiB", b / 1024));
            let exempt = if sys::socket::effective_uid() == 0 {
                " (root: exempt)"
            } else {
                ""
            };
            format!(
                "RLIMIT_MEMLOCK soft {} hard {}{exempt}",
                show(soft),
                show(hard)
            )
        },
    );
    let optmem = Finding::from_result(
        "limit.optmem_max",
        std::fs::read_to_string("/proc/sys/net/core/optmem_max"),
        |v| format!("net.core.optmem_max = {} bytes", v.trim()),
    );
    vec![memlock, optmem]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_leads_with_the_errno_name() {
        let r = refusal(&io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert!(r.starts_with("EOPNOTSUPP ("), "{r}");
    }

    #[test]
    fn host_wide_rows_are_present_once_each() {
        let rows = probe(&ProbeOptions {
            ifaces: Some(vec!["lo".into()]),
            try_xsk_bind: false,
        });
        for f in [
            "kernel",
            "tcp.so_zerocopy",
            "udp.so_zerocopy",
            "xdp.socket",
            "limit.optmem_max",
        ] {
            assert_eq!(
                rows.iter().filter(|r| r.feature == f).count(),
                1,
                "{f}: {rows:?}"
            );
        }
        let tcp = rows
            .iter()
            .find(|r| r.feature == "tcp.so_zerocopy")
            .unwrap();
        assert_eq!(tcp.support, Support::Yes, "{tcp:?}");
        let lo = rows.iter().find(|r| r.feature == "iface").unwrap();
        assert!(lo.reason.contains("ifindex 1"), "{lo:?}");
    }
}
