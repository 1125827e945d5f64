//! NIC queue leases: dedicate one receive queue of a NIC to one flow (for io_uring zero-copy
//! receive or an AF_XDP socket), as one transaction that is undone exactly.
//!
//! A [`Lease`] applies, in this order and only the steps its [`LeaseSpec`] asks for: the number of
//! channels (so that the queue exists), header split (`tcp-data-split` on, `hds-thresh` 0), the
//! queue taken out of the default RSS indirection table (so that no other flow lands on it), and an
//! ntuple rule steering the flow to the queue. Before each step it reads the one setting the step
//! changes and writes it to the lease record; after each step it reads the setting back (and the
//! queue through netdev `queue-get`). When a step is refused or does not read back, the steps
//! already applied are put back, last first, and the error names the step, the call and its errno
//! ([`LeaseError`]). Dropping the lease (or [`Lease::restore`]) puts back exactly what it changed:
//! the counts it set, the ring knobs it set, the table it replaced, the rule it inserted — never a
//! rule or setting it did not make. A process that dies holding a lease leaves its record, which
//! [`restore_abandoned`] (run by `zcnet` at start and by `zcnet lease restore`) restores.
//!
//! ```no_run
//! use std::path::Path;
//! use zcnet::queue_lease::{DEFAULT_DIR, Lease, LeaseSpec};
//!
//! let spec = LeaseSpec::zcrx("eth1", 3, "tcp:9000".parse()?);
//! let lease = Lease::apply(&spec, Path::new(DEFAULT_DIR))?; // or which step was refused, and why
//! // … register io_uring zero-copy receive on eth1 queue 3 …
//! drop(lease); // every setting it changed goes back
//! // An AF_XDP socket on queue 2 needs the steering, not header split.
//! let xsk = Lease::apply(&LeaseSpec::af_xdp("eth1", 2, None), Path::new(DEFAULT_DIR))?;
//! # drop(xsk);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Kernel behaviour relied on
//! - ethtool netlink `CHANNELS_SET` and `RINGS_SET` apply all their attributes or none; a set
//!   naming a ring knob the driver lacks (`tcp-data-split`, `hds-thresh`) is `EOPNOTSUPP` before
//!   anything changes.
//! - `RINGS_GET` reports `tcp-data-split` only when the driver does (0 = unknown: no header split)
//!   and `hds-thresh` only with a non-zero maximum.
//! - `ETHTOOL_SRXFHINDIR` with size 0 sets the kernel's default spread (entry i to queue i mod the
//!   RX queues) and clears the device's "user configured" mark, so the driver again re-spreads the
//!   table when channels change; a table that equals the default spread is restored that way. (The
//!   kernel does not say whether a table equal to the default was set by a user: such a table
//!   comes back as the default, unmarked.)
//! - `ETHTOOL_SRXCLSRLINS` writes back the location used (the driver's choice for
//!   `RX_CLS_LOC_ANY`, offered when `GRXCLSRLCNT` has `RX_CLS_LOC_SPECIAL`); `SRXCLSRLDEL` deletes
//!   one location only.
//! - netdev `queue-get` (6.8) lists the queues of a device that is up; 6.15 adds the `io-uring` and
//!   `xsk` nests naming what is bound to a queue.
//! - `/run` is a tmpfs: records do not outlive a reboot, nor do the device settings they restore.

mod record;
mod steps;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use record::{DEFAULT_DIR, Record, RestoreOutcome, RestoreReport, records, restore_abandoned};
pub use steps::{FlowMatch, FlowProto, Step, Undo};

use crate::IfIndex;
use crate::sys::errno_name;
use crate::sys::ethtool::{Channels, tcp_data_split};
use crate::sys::netlink::GenlSocket;
use steps::{Device, channel_words, default_spread, rule_location, split_name, without_queue};

/// What to set up for a queue.
///
/// Start from [`LeaseSpec::new`], [`LeaseSpec::zcrx`] or [`LeaseSpec::af_xdp`] and set the fields
/// that differ ([configs](crate#configs-and-growing-enums): it is `#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSpec {
    /// The device's name (in this network namespace).
    pub iface: String,
    /// The RX queue to dedicate.
    pub queue: u32,
    /// Set the device's queue count to this first (combined channels, or RX and TX channels on a
    /// device without combined ones).
    pub channels: Option<u32>,
    /// Header split on, `hds-thresh` 0: what io_uring zcrx needs (AF_XDP does not).
    pub header_split: bool,
    /// Take the queue out of the default RSS indirection table.
    pub isolate: bool,
    /// Steer this flow to the queue with an ntuple rule.
    pub flow: Option<FlowMatch>,
}

impl LeaseSpec {
    /// Queue `queue` of `iface` with nothing changed yet: set the fields for the steps wanted (or
    /// start from [`LeaseSpec::zcrx`] or [`LeaseSpec::af_xdp`]).
    ///
    /// ```
    /// use zcnet::queue_lease::{FlowMatch, FlowProto, LeaseSpec};
    ///
    /// let mut spec = LeaseSpec::new("eth1", 3);
    /// spec.isolate = true;
    /// spec.flow = Some(FlowMatch::new(FlowProto::Udp, 4789));
    /// assert!(!spec.header_split);
    /// ```
    pub fn new(iface: &str, queue: u32) -> LeaseSpec {
        LeaseSpec {
            iface: iface.to_string(),
            queue,
            channels: None,
            header_split: false,
            isolate: false,
            flow: None,
        }
    }

    /// Everything io_uring zero-copy receive needs on `queue`: header split, `hds-thresh` 0, the
    /// queue out of the RSS table, and `flow` steered to it.
    pub fn zcrx(iface: &str, queue: u32, flow: FlowMatch) -> LeaseSpec {
        LeaseSpec {
            header_split: true,
            isolate: true,
            flow: Some(flow),
            ..LeaseSpec::new(iface, queue)
        }
    }

    /// What an AF_XDP socket on `queue` wants: the queue out of the RSS table and `flow` steered
    /// to it (no header split).
    pub fn af_xdp(iface: &str, queue: u32, flow: Option<FlowMatch>) -> LeaseSpec {
        LeaseSpec {
            isolate: true,
            flow,
            ..LeaseSpec::new(iface, queue)
        }
    }
}

/// A lease step that failed, with what was put back.
#[derive(Debug)]
pub struct LeaseError {
    /// The device.
    pub iface: String,
    /// The queue.
    pub queue: u32,
    /// The step that failed.
    pub step: Step,
    /// The call that failed, with what it asked (`ETHTOOL_MSG_RINGS_SET tcp-data-split on`).
    pub call: String,
    /// The kernel's error (or, for a setting that did not read back, `InvalidData` saying what
    /// was read).
    pub error: io::Error,
    /// The steps already applied and put back (one line each).
    pub rolled_back: Vec<String>,
    /// Steps that could not be put back: their changes stay in the lease record for
    /// `zcnet lease restore`.
    pub rollback_failed: Vec<(Step, io::Error)>,
}

impl LeaseError {
    /// The errno, when the kernel refused the call.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.error.raw_os_error()
    }

    /// The kind of the kernel's error (`PermissionDenied` without CAP_NET_ADMIN, `Unsupported`
    /// for a driver without the feature, …).
    pub fn kind(&self) -> io::ErrorKind {
        self.error.kind()
    }

    /// What the user can do about it.
    pub fn what_to_do(&self) -> &'static str {
        match (self.raw_os_error(), self.step) {
            (Some(libc::EPERM), _) => "needs CAP_NET_ADMIN (run as root)",
            (Some(libc::ENODEV), _) => "no such interface in this network namespace",
            (Some(libc::EBUSY), Step::Snapshot) => {
                "the queue is leased by a running process: end it, or lease another queue"
            }
            (Some(libc::EOPNOTSUPP), Step::HeaderSplit) => {
                "the driver has no header split: io_uring zcrx needs a NIC with it (bnxt, mlx5, \
                 gve, fbnic); an AF_XDP lease does not ask for it"
            }
            (Some(libc::EOPNOTSUPP), Step::Ntuple) => {
                "the driver has no ntuple filters: steer the flow another way (RSS alone, or a \
                 NIC with ntuple)"
            }
            (Some(libc::EOPNOTSUPP), Step::RssIsolate) => {
                "the driver has no settable RSS indirection table: lease without isolation"
            }
            (Some(libc::EOPNOTSUPP), Step::Channels) => "the driver cannot change its channels",
            (Some(libc::EINVAL), Step::Channels) => {
                "the driver refused that count: see ethtool -l for its maximum"
            }
            (Some(libc::ENOSPC), Step::Ntuple) => "the device's rule table is full",
            (Some(libc::ENOENT), Step::Snapshot) => {
                "the kernel has no ethtool or netdev netlink family (needs Linux 6.8 or later)"
            }
            _ => "see the errno; nothing the lease changed is left changed",
        }
    }
}

/// `EOPNOTSUPP (Operation not supported)`, or the text of an error that has no errno.
fn errno_text(e: &io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match e.raw_os_error() {
        Some(errno) => format!("{} ({text})", errno_name(errno)),
        None => text,
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease of {} queue {}: step {} refused: {}: {}: {}",
            self.iface,
            self.queue,
            self.step,
            self.call,
            errno_text(&self.error),
            self.what_to_do()
        )?;
        if !self.rolled_back.is_empty() {
            write!(f, "; rolled back: {}", self.rolled_back.join(", "))?;
        }
        for (step, e) in &self.rollback_failed {
            write!(
                f,
                "; step {step} NOT rolled back: {} (its record is kept: zcnet lease restore)",
                errno_text(e)
            )?;
        }
        Ok(())
    }
}

/// The kernel's error is part of the message (and in [`LeaseError::error`]): no separate source,
/// which error reporters would print a second time.
impl std::error::Error for LeaseError {}

crate::error::into_io_error!(LeaseError);

/// A dedicated NIC queue, put back as it was when dropped.
#[derive(Debug)]
pub struct Lease {
    dev: Device,
    record: Record,
    path: PathBuf,
    applied: Vec<String>,
}

/// A failure of step `step` at `call`, before rollback.
struct Failure {
    step: Step,
    call: String,
    error: io::Error,
}

fn fail(step: Step, call: impl Into<String>) -> impl FnOnce(io::Error) -> Failure {
    move |error| Failure {
        step,
        call: call.into(),
        error,
    }
}

fn mismatch(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Lease {
    /// Applies `spec` on this network namespace's device, keeping its record in `dir` (created
    /// when missing; [`DEFAULT_DIR`] for `zcnet`'s). An abandoned lease of the same queue is
    /// restored first; one whose holder runs makes this `EBUSY`.
    pub fn apply(spec: &LeaseSpec, dir: &Path) -> Result<Lease, LeaseError> {
        let error = |f: Failure| LeaseError {
            iface: spec.iface.clone(),
            queue: spec.queue,
            step: f.step,
            call: f.call,
            error: f.error,
            rolled_back: Vec::new(),
            rollback_failed: Vec::new(),
        };
        let mut lease = Lease::begin(spec, dir).map_err(error)?;
        match lease.apply_steps(spec) {
            Ok(()) => Ok(lease),
            Err(f) => {
                let (rolled_back, rollback_failed) = lease.put_back();
                Err(LeaseError {
                    rolled_back,
                    rollback_failed,
                    ..error(f)
                })
            }
        }
    }

    /// Checks the device and the record directory; no change yet.
    fn begin(spec: &LeaseSpec, dir: &Path) -> Result<Lease, Failure> {
        let ifindex = crate::sys::xdp::interface_index(&spec.iface).map_err(fail(
            Step::Snapshot,
            format!("if_nametoindex {}", spec.iface),
        ))?;
        let dev = Device::open(ifindex, &spec.iface)
            .map_err(fail(Step::Snapshot, "ethtool netlink family"))?;
        std::fs::create_dir_all(dir).map_err(fail(Step::Record, dir.display().to_string()))?;
        let here = record::netns_inode().map_err(fail(Step::Record, "/proc/thread-self/ns/net"))?;
        // Another lease of this queue: a live one refuses; an abandoned one is restored first.
        for (path, r) in records(dir).map_err(fail(Step::Record, dir.display().to_string()))? {
            let Ok(r) = r else { continue };
            if r.netns != here || r.ifindex.get() != ifindex || r.queue != spec.queue {
                continue;
            }
            if r.holder_alive() {
                return Err(fail(
                    Step::Snapshot,
                    format!("lease record {}", path.display()),
                )(io::Error::from_raw_os_error(libc::EBUSY)));
            }
        }
        restore_abandoned(dir).map_err(fail(Step::Record, dir.display().to_string()))?;
        let pid = std::process::id();
        let record = Record {
            pid,
            start: record::process_start(pid).map_err(fail(Step::Record, "/proc/self/stat"))?,
            netns: here,
            ifindex: IfIndex::new(ifindex),
            iface: spec.iface.clone(),
            queue: spec.queue,
            undo: Vec::new(),
        };
        let path = dir.join(record.file_name());
        Ok(Lease {
            dev,
            record,
            path,
            applied: Vec::new(),
        })
    }

    /// Records `undo` (before its change is made).
    fn intend(&mut self, undo: Undo) -> Result<(), Failure> {
        self.record.undo.push(undo);
        self.record
            .write(&self.path)
            .map_err(fail(Step::Record, self.path.display().to_string()))
    }

    /// Forgets the last recorded change: the kernel refused it, so nothing changed.
    fn refused(&mut self) {
        self.record.undo.pop();
        // A stale line would only restore what is already there (each undo is idempotent).
        let _ = self.write_or_remove();
    }

    fn write_or_remove(&self) -> io::Result<()> {
        if self.record.undo.is_empty() {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        } else {
            self.record.write(&self.path)
        }
    }

    /// Records `undo`, then runs `set` (a refusal forgets the record line: nothing changed) and
    /// `verify` (a failure keeps it: the change is made, and is put back with the others).
    fn step(
        &mut self,
        undo: Undo,
        set: impl FnOnce(&mut Device) -> Result<(), Failure>,
        verify: impl FnOnce(&mut Device) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        self.intend(undo)?;
        if let Err(f) = set(&mut self.dev) {
            self.refused();
            return Err(f);
        }
        verify(&mut self.dev)
    }

    fn apply_steps(&mut self, spec: &LeaseSpec) -> Result<(), Failure> {
        let channels = self
            .dev
            .nl
            .channels(self.dev.ifindex)
            .map_err(fail(Step::Snapshot, "ETHTOOL_MSG_CHANNELS_GET"))?;
        let rx_queues = match spec.channels {
            Some(n) => self.set_channels(&channels, n)?,
            None => channels.count[0] + channels.count[3],
        };
        self.verify_queue(rx_queues)?;
        if spec.header_split {
            self.split_headers()?;
        }
        if spec.isolate {
            self.isolate(rx_queues)?;
        }
        if let Some(flow) = spec.flow {
            self.add_rule(flow, spec.queue)?;
        }
        Ok(())
    }

    /// Step `channels`: `n` combined channels where the device has them, else `n` RX and TX.
    /// Returns the RX queue count after it.
    fn set_channels(&mut self, channels: &Channels, n: u32) -> Result<u32, Failure> {
        let ifindex = self.dev.ifindex;
        let mut set = [None; 4];
        let mut before = [None; 4];
        let which: &[usize] = if channels.max[3] > 0 { &[3] } else { &[0, 1] };
        for &i in which {
            set[i] = Some(n);
            before[i] = Some(channels.count[i]);
        }
        let call = format!("ETHTOOL_MSG_CHANNELS_SET {}", channel_words(&set));
        let set_call = call.clone();
        let mut rx_queues = 0;
        self.step(
            Undo::Channels(before),
            |dev| {
                dev.nl
                    .set_channels(ifindex, set)
                    .map_err(fail(Step::Channels, set_call))
            },
            |dev| {
                let now = dev
                    .nl
                    .channels(ifindex)
                    .map_err(fail(Step::Channels, "ETHTOOL_MSG_CHANNELS_GET"))?;
                if set
                    .iter()
                    .zip(now.count)
                    .any(|(s, c)| s.is_some_and(|s| s != c))
                {
                    return Err(fail(Step::Channels, call)(mismatch(format!(
                        "reads back as {}",
                        channel_words(&now.count.map(Some))
                    ))));
                }
                rx_queues = now.count[0] + now.count[3];
                Ok(())
            },
        )?;
        self.applied
            .push(format!("channels {}", channel_words(&set)));
        Ok(rx_queues)
    }

    /// Step `header-split`: `tcp-data-split` on, and `hds-thresh` 0 where the driver has that
    /// knob (a set naming it is refused otherwise).
    fn split_headers(&mut self) -> Result<(), Failure> {
        let ifindex = self.dev.ifindex;
        let rings = self
            .dev
            .nl
            .rings(ifindex)
            .map_err(fail(Step::HeaderSplit, "ETHTOOL_MSG_RINGS_GET"))?;
        let thresh = rings.hds_thresh.map(|_| 0);
        let call = if thresh.is_some() {
            "ETHTOOL_MSG_RINGS_SET tcp-data-split on hds-thresh 0"
        } else {
            "ETHTOOL_MSG_RINGS_SET tcp-data-split on"
        };
        let undo = Undo::Rings {
            tcp_data_split: Some(match rings.tcp_data_split {
                tcp_data_split::UNKNOWN => tcp_data_split::DISABLED,
                v => v,
            }),
            hds_thresh: rings.hds_thresh.map(|(t, _)| t),
        };
        self.step(
            undo,
            |dev| {
                dev.nl
                    .set_rings(ifindex, Some(tcp_data_split::ENABLED), thresh)
                    .map_err(fail(Step::HeaderSplit, call))
            },
            |dev| {
                let now = dev
                    .nl
                    .rings(ifindex)
                    .map_err(fail(Step::HeaderSplit, "ETHTOOL_MSG_RINGS_GET"))?;
                if now.tcp_data_split != tcp_data_split::ENABLED
                    || now.hds_thresh.is_some_and(|(t, _)| t != 0)
                {
                    return Err(fail(Step::HeaderSplit, call)(mismatch(format!(
                        "reads back as tcp-data-split {} hds-thresh {:?}",
                        split_name(now.tcp_data_split),
                        now.hds_thresh.map(|(t, _)| t)
                    ))));
                }
                Ok(())
            },
        )?;
        self.applied
            .push(call.trim_start_matches("ETHTOOL_MSG_RINGS_SET ").into());
        Ok(())
    }

    /// Step `rss-isolate`: the queue's entries of the default indirection table given to the
    /// other `rx_queues` in turn.
    fn isolate(&mut self, rx_queues: u32) -> Result<(), Failure> {
        let (ifindex, queue) = (self.dev.ifindex, self.record.queue);
        let table = self
            .dev
            .nl
            .rss_indir(ifindex)
            .map_err(fail(Step::RssIsolate, "ETHTOOL_MSG_RSS_GET"))?;
        if table.is_empty() {
            return Err(fail(Step::RssIsolate, "ETHTOOL_MSG_RSS_GET")(
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            ));
        }
        let call = format!("ETHTOOL_SRXFHINDIR without queue {queue}");
        let new = without_queue(&table, queue, rx_queues).ok_or_else(|| {
            fail(Step::RssIsolate, call.clone())(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rx_queues} RX queue(s): no other queue to spread the table over"),
            ))
        })?;
        let before = (table != default_spread(table.len(), rx_queues)).then_some(table);
        let set_call = call.clone();
        self.step(
            Undo::Rss(before),
            |dev| {
                dev.ioctl()
                    .and_then(|i| i.set_rxfh_indir(&new))
                    .map_err(fail(Step::RssIsolate, set_call))
            },
            |dev| {
                let now = dev
                    .nl
                    .rss_indir(ifindex)
                    .map_err(fail(Step::RssIsolate, "ETHTOOL_MSG_RSS_GET"))?;
                if now != new {
                    return Err(fail(Step::RssIsolate, call)(mismatch(format!(
                        "reads back as {now:?}"
                    ))));
                }
                Ok(())
            },
        )?;
        self.applied.push(format!(
            "queue {queue} out of the RSS table ({} entries)",
            new.len()
        ));
        Ok(())
    }

    /// The leased queue exists: netdev `queue-get` lists it (where the kernel has queue-get),
    /// and it is below the device's RX queue count.
    fn verify_queue(&self, rx_queues: u32) -> Result<(), Failure> {
        let queue = self.record.queue;
        let call = format!("netdev queue-get rx {queue}");
        if queue >= rx_queues.max(1) {
            return Err(fail(Step::Snapshot, call)(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the device has {rx_queues} RX queue(s): ask for more channels"),
            )));
        }
        let listed = GenlSocket::open().and_then(|mut s| s.netdev_queues(self.dev.ifindex));
        match listed {
            Ok(queues) if !queues.is_empty() && !queues.iter().any(|q| q.rx && q.id == queue) => {
                Err(fail(Step::Snapshot, call)(mismatch(format!(
                    "queue-get lists no RX queue {queue} ({} RX queues listed)",
                    queues.iter().filter(|q| q.rx).count()
                ))))
            }
            // Listed; or not listed at all (the device is down, or the kernel predates
            // queue-get): the channel count stands.
            _ => Ok(()),
        }
    }

    fn add_rule(&mut self, flow: FlowMatch, queue: u32) -> Result<(), Failure> {
        let snapshot = |call: &str| fail(Step::Ntuple, call.to_string());
        let ioctl = self.dev.ioctl().map_err(snapshot("socket"))?;
        let (count, table, special) = ioctl
            .rule_count()
            .map_err(snapshot("ETHTOOL_GRXCLSRLCNT"))?;
        let existing = ioctl
            .rule_locations(count)
            .map_err(snapshot("ETHTOOL_GRXCLSRLALL"))?;
        let location = rule_location(special, table, &existing).ok_or_else(|| {
            snapshot("ETHTOOL_SRXCLSRLINS")(io::Error::from_raw_os_error(libc::ENOSPC))
        })?;
        let call = format!("ETHTOOL_SRXCLSRLINS {flow} -> queue {queue}");
        let chosen = (location != crate::sys::ethtool::RX_CLS_LOC_ANY).then_some(location);
        self.intend(Undo::Rule {
            flow,
            queue,
            location: chosen,
            existing: existing.clone(),
        })?;
        let at = match ioctl.insert_rule(&flow.spec(queue, location)) {
            Ok(at) => at,
            Err(e) => {
                self.refused();
                return Err(fail(Step::Ntuple, call)(e));
            }
        };
        if let Some(Undo::Rule { location, .. }) = self.record.undo.last_mut() {
            *location = Some(at);
        }
        self.record
            .write(&self.path)
            .map_err(fail(Step::Record, self.path.display().to_string()))?;
        let got = ioctl
            .rule(at)
            .map_err(fail(Step::Ntuple, format!("ETHTOOL_GRXCLSRULE {at}")))?;
        if !flow.is(&got, queue) {
            return Err(fail(Step::Ntuple, call)(mismatch(format!(
                "the rule at {at} reads back as another flow or queue"
            ))));
        }
        self.applied
            .push(format!("ntuple rule {flow} -> queue {queue} at {at}"));
        Ok(())
    }

    /// Puts back every recorded change; removes the record when all went back.
    fn put_back(&mut self) -> (Vec<String>, Vec<(Step, io::Error)>) {
        let (done, failed) = self.record.undo_all(&mut self.dev);
        if let Err(e) = self.write_or_remove() {
            let mut failed = failed;
            failed.push((Step::Record, e));
            return (done, failed);
        }
        (done, failed)
    }

    /// What the lease set (one line per step).
    pub fn applied(&self) -> &[String] {
        &self.applied
    }

    /// The lease record file.
    pub fn record_path(&self) -> &Path {
        &self.path
    }

    /// Puts back what the lease changed, last first (what dropping it does), and says what: one
    /// line per change, or the steps that could not be put back (their record is kept for
    /// `zcnet lease restore`).
    pub fn restore(mut self) -> Result<Vec<String>, Vec<(Step, io::Error)>> {
        let (done, failed) = self.put_back();
        if failed.is_empty() {
            Ok(done)
        } else {
            Err(failed)
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.record.undo.is_empty() {
            // Failures keep their record: the next `zcnet` run or `zcnet lease restore` retries.
            let _ = self.put_back();
        }
    }
}
