//! What this host supports, each feature measured by using it.
//!
//! Every check does the real thing on a throwaway socket (set the option, send over loopback, read the
//! completion, map received pages) and reports [`Support`] with the reason: the errno name when the
//! kernel refused, or the measured value. Nothing here attaches to or sends on a real interface:
//! interface facts come from sysfs and netdev generic netlink (read-only), and the one intrusive check
//! (an XDP_ZEROCOPY bind) runs only on interfaces the caller names and opts into.

use std::fmt;
use std::io;
use std::os::fd::AsFd;

use crate::sys;
use crate::sys::errno::error_name;

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
    out.extend(uring());
    out.push(Finding::from_result(
        "xdp.socket",
        sys::socket::socket(libc::AF_XDP, libc::SOCK_RAW, 0),
        |_| "AF_XDP socket created".into(),
    ));
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

#[cfg(feature = "io-uring")]
fn uring() -> Vec<Finding> {
    use std::net::{TcpListener, TcpStream};
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
