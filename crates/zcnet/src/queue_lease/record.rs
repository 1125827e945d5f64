//! Lease records: one text file per lease under a directory (default [`DEFAULT_DIR`]), written
//! before each change, so that the changes of a process that died holding a lease can be put back
//! by the next one ([`restore_abandoned`]).
//!
//! The file (`IFACE-qQUEUE-PID.lease`) reads, one item per line:
//! ```text
//! zcnet-lease 1
//! pid 4242
//! start 123456            (the holder's start time, /proc/PID/stat field 22: tells a reused pid)
//! netns 4026531840        (inode of the holder's /proc/self/ns/net: records of other namespaces
//!                          are left alone)
//! ifindex 2
//! iface eth0
//! queue 1
//! undo channels combined=2
//! undo rings tcp-data-split=1 hds-thresh=0
//! undo rss default        (or: undo rss 0,1,0,1,…)
//! undo ntuple tcp:9000 queue=1 location=any existing=3,4
//! ```
//! `undo` lines are in the order the steps were applied, and are restored last first. Every line
//! is written (the file replaced whole, by rename) before its change is made.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::steps::{Device, FlowMatch, Step, Undo};

use crate::IfIndex;

/// Where `zcnet` keeps lease records: a tmpfs cleared at boot, when every setting a lease made is
/// gone with the device's state anyway.
pub const DEFAULT_DIR: &str = "/run/zcnet/leases";

/// A lease record: who holds the lease, on which queue, and what to undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The holding process.
    pub pid: u32,
    /// Its start time (clock ticks after boot).
    pub start: u64,
    /// Its network namespace's inode.
    pub netns: u64,
    /// The device.
    pub ifindex: IfIndex,
    /// The device's name when the lease was taken.
    pub iface: String,
    /// The leased queue.
    pub queue: u32,
    /// The changes, in the order they were made.
    pub undo: Vec<Undo>,
}

fn undo_line(u: &Undo) -> String {
    match u {
        Undo::Channels(before) => {
            let words: Vec<String> = ["rx", "tx", "other", "combined"]
                .iter()
                .zip(before)
                .filter_map(|(n, v)| v.map(|v| format!("{n}={v}")))
                .collect();
            format!("channels {}", words.join(" "))
        }
        Undo::Rings {
            tcp_data_split,
            hds_thresh,
        } => {
            let mut s = "rings".to_string();
            if let Some(v) = tcp_data_split {
                s += &format!(" tcp-data-split={v}");
            }
            if let Some(v) = hds_thresh {
                s += &format!(" hds-thresh={v}");
            }
            s
        }
        Undo::Rss(None) => "rss default".to_string(),
        Undo::Rss(Some(t)) => format!("rss {}", list(t)),
        Undo::Rule {
            flow,
            queue,
            location,
            existing,
        } => format!(
            "ntuple {flow} queue={queue} location={} existing={}",
            location.map_or("any".to_string(), |l| l.to_string()),
            list(existing)
        ),
    }
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn parse_list(s: &str) -> Option<Vec<u32>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split(',').map(|x| x.parse().ok()).collect()
}

fn parse_undo(line: &str) -> Option<Undo> {
    let mut words = line.split(' ');
    let kind = words.next()?;
    let pairs: Vec<(&str, &str)> = words.clone().filter_map(|w| w.split_once('=')).collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    match kind {
        "channels" => {
            let mut before = [None; 4];
            for (slot, name) in before.iter_mut().zip(["rx", "tx", "other", "combined"]) {
                *slot = get(name).map(str::parse).transpose().ok()?;
            }
            Some(Undo::Channels(before))
        }
        "rings" => Some(Undo::Rings {
            tcp_data_split: get("tcp-data-split").map(str::parse).transpose().ok()?,
            hds_thresh: get("hds-thresh").map(str::parse).transpose().ok()?,
        }),
        "rss" => match words.next()? {
            "default" => Some(Undo::Rss(None)),
            t => Some(Undo::Rss(Some(parse_list(t)?))),
        },
        "ntuple" => Some(Undo::Rule {
            flow: words.next()?.parse::<FlowMatch>().ok()?,
            queue: get("queue")?.parse().ok()?,
            location: match get("location")? {
                "any" => None,
                l => Some(l.parse().ok()?),
            },
            existing: parse_list(get("existing")?)?,
        }),
        _ => None,
    }
}

impl Record {
    /// The file's text.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "zcnet-lease 1\npid {}\nstart {}\nnetns {}\nifindex {}\niface {}\nqueue {}\n",
            self.pid, self.start, self.netns, self.ifindex, self.iface, self.queue
        );
        for u in &self.undo {
            s += &format!("undo {}\n", undo_line(u));
        }
        s
    }

    /// Reads a record's text; `InvalidData` naming the first line that does not read.
    pub fn parse(text: &str) -> io::Result<Record> {
        let bad = |line: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("lease record line '{line}' does not read"),
            )
        };
        let mut lines = text.lines();
        if lines.next() != Some("zcnet-lease 1") {
            return Err(bad(text.lines().next().unwrap_or("")));
        }
        let mut r = Record {
            pid: 0,
            start: 0,
            netns: 0,
            ifindex: IfIndex::new(0),
            iface: String::new(),
            queue: 0,
            undo: Vec::new(),
        };
        for line in lines {
            let (key, value) = line.split_once(' ').ok_or_else(|| bad(line))?;
            let ok = match key {
                "pid" => value.parse().map(|v| r.pid = v).is_ok(),
                "start" => value.parse().map(|v| r.start = v).is_ok(),
                "netns" => value.parse().map(|v| r.netns = v).is_ok(),
                "ifindex" => value.parse().map(|v| r.ifindex = IfIndex::new(v)).is_ok(),
                "iface" => {
                    r.iface = value.to_string();
                    true
                }
                "queue" => value.parse().map(|v| r.queue = v).is_ok(),
                "undo" => parse_undo(value).map(|u| r.undo.push(u)).is_some(),
                _ => false,
            };
            if !ok {
                return Err(bad(line));
            }
        }
        Ok(r)
    }

    /// The record's file name in its directory.
    pub fn file_name(&self) -> String {
        format!("{}-q{}-{}.lease", self.iface, self.queue, self.pid)
    }

    /// Writes the record to `path` whole: a temporary file renamed over it.
    pub(super) fn write(&self, path: &Path) -> io::Result<()> {
        let tmp = path.with_extension("lease.tmp");
        fs::write(&tmp, self.to_text())?;
        fs::rename(&tmp, path)
    }

    /// Whether the holding process is still running (same pid, same start time).
    pub fn holder_alive(&self) -> bool {
        process_start(self.pid).is_ok_and(|s| s == self.start)
    }

    /// Puts back every change, last first, continuing past failures: what was restored (one line
    /// each), and the steps that failed with their errors. The changes that failed stay in
    /// `self.undo` (for a later try); those restored are removed.
    pub(super) fn undo_all(&mut self, dev: &mut Device) -> (Vec<String>, Vec<(Step, io::Error)>) {
        let mut done = Vec::new();
        let mut failed = Vec::new();
        let mut kept = Vec::new();
        while let Some(u) = self.undo.pop() {
            match u.undo(dev) {
                Ok(what) => done.push(what),
                Err(e) => {
                    failed.push((u.step(), e));
                    kept.push(u);
                }
            }
        }
        kept.reverse();
        self.undo = kept;
        (done, failed)
    }
}

/// Process `pid`'s start time (`/proc/PID/stat` field 22).
pub(super) fn process_start(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) is in parentheses and may hold spaces: fields resume after the
    // last ')'. Field 3 is the first after it; field 22 the 20th.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable /proc/PID/stat"))
}

/// The inode of this thread's network namespace.
pub(super) fn netns_inode() -> io::Result<u64> {
    Ok(fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// What became of one record found by [`restore_abandoned`].
#[derive(Debug)]
#[non_exhaustive]
pub enum RestoreOutcome {
    /// Every change put back (one line each); the record removed.
    Restored(Vec<String>),
    /// The holder still runs: left alone.
    Held,
    /// A lease of another network namespace: left alone (restore it from there).
    OtherNamespace,
    /// The device is gone or renamed (its settings went with it): the record removed.
    DeviceGone,
    /// Some changes could not be put back: the record keeps them, for a later try.
    Failed {
        /// What was put back.
        restored: Vec<String>,
        /// The steps that failed, with the kernel's errors.
        failed: Vec<(Step, io::Error)>,
    },
    /// The file does not read as a record: left alone.
    Unreadable(io::Error),
}

/// One record found by [`restore_abandoned`] and what became of it.
#[derive(Debug)]
pub struct RestoreReport {
    /// The record file.
    pub path: PathBuf,
    /// The record, when it read.
    pub record: Option<Record>,
    /// What was done.
    pub outcome: RestoreOutcome,
}

/// Every record file in `dir` with its parsed content (unreadable ones as errors); nothing when
/// the directory does not exist.
pub fn records(dir: &Path) -> io::Result<Vec<(PathBuf, io::Result<Record>)>> {
    let entries = match fs::read_dir(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "lease") {
            let record = fs::read_to_string(&path).and_then(|t| Record::parse(&t));
            out.push((path, record));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Restores every lease in `dir` whose holder is gone (killed, crashed) and that belongs to this
/// network namespace: each change put back exactly, last first, and the record removed. Leases
/// still held, or of other namespaces, are reported and left alone.
pub fn restore_abandoned(dir: &Path) -> io::Result<Vec<RestoreReport>> {
    let here = netns_inode()?;
    let mut out = Vec::new();
    for (path, record) in records(dir)? {
        let mut record = match record {
            Ok(r) => r,
            Err(e) => {
                out.push(RestoreReport {
                    path,
                    record: None,
                    outcome: RestoreOutcome::Unreadable(e),
                });
                continue;
            }
        };
        let outcome = if record.holder_alive() {
            RestoreOutcome::Held
        } else if record.netns != here {
            RestoreOutcome::OtherNamespace
        } else {
            restore_one(&path, &mut record)?
        };
        out.push(RestoreReport {
            path,
            record: Some(record),
            outcome,
        });
    }
    Ok(out)
}

/// Restores one abandoned record of this namespace.
fn restore_one(path: &Path, record: &mut Record) -> io::Result<RestoreOutcome> {
    let name_now = crate::sys::xdp::interface_index(&record.iface).ok();
    if name_now != Some(record.ifindex.get()) {
        fs::remove_file(path)?;
        return Ok(RestoreOutcome::DeviceGone);
    }
    let mut dev = match Device::open(record.ifindex.get(), &record.iface) {
        Ok(d) => d,
        Err(e) => {
            return Ok(RestoreOutcome::Failed {
                restored: Vec::new(),
                failed: vec![(Step::Snapshot, e)],
            });
        }
    };
    let (restored, failed) = record.undo_all(&mut dev);
    if failed.is_empty() {
        fs::remove_file(path)?;
        Ok(RestoreOutcome::Restored(restored))
    } else {
        record.write(path)?;
        Ok(RestoreOutcome::Failed { restored, failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue_lease::steps::FlowProto;

    #[test]
    fn a_record_reads_back_as_written() {
        let r = Record {
            pid: 42,
            start: 7,
            netns: 4026531840,
            ifindex: IfIndex::new(3),
            iface: "eth0".into(),
            queue: 1,
            undo: vec![
                Undo::Channels([None, None, None, Some(2)]),
                Undo::Rings {
                    tcp_data_split: Some(1),
                    hds_thresh: Some(0),
                },
                Undo::Rss(None),
                Undo::Rss(Some(vec![0, 1, 0, 1])),
                Undo::Rule {
                    flow: FlowMatch {
                        proto: FlowProto::Tcp,
                        dst_port: 9000,
                        dst_ip: Some("10.0.0.1".parse().unwrap()),
                    },
                    queue: 1,
                    location: None,
                    existing: vec![3, 4],
                },
                Undo::Rule {
                    flow: "udp:53".parse().unwrap(),
                    queue: 1,
                    location: Some(0),
                    existing: vec![],
                },
            ],
        };
        let text = r.to_text();
        assert!(text.contains("undo channels combined=2\n"), "{text}");
        assert!(text.contains("undo ntuple tcp:10.0.0.1:9000 queue=1 location=any existing=3,4\n"));
        assert_eq!(Record::parse(&text).unwrap(), r);
        assert_eq!(r.file_name(), "eth0-q1-42.lease");
    }

    #[test]
    fn a_damaged_record_names_its_line() {
        let e = Record::parse("zcnet-lease 1\npid 1\nundo rss 0,x\n").unwrap_err();
        assert!(e.to_string().contains("undo rss 0,x"), "{e}");
        assert!(Record::parse("something else\n").is_err());
    }

    #[test]
    fn this_process_is_alive_and_a_changed_start_is_not() {
        let pid = std::process::id();
        let start = process_start(pid).unwrap();
        let mut r = Record::parse(&format!("zcnet-lease 1\npid {pid}\nstart {start}\n")).unwrap();
        assert!(r.holder_alive());
        r.start += 1;
        assert!(!r.holder_alive(), "a reused pid is not the holder");
    }
}
