//! One test on zcnet's side, whichever end it plays: its streams, the interval reports, its
//! results for the peer, and the report in iperf3's own shape (`start`, `intervals`, `end`) with
//! zcnet's additions (its paths, zero-copy and copied counts, CPU per MB) under `end.zcnet`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use zcnet::probe::{ResourceUsage, UsageOf, resource_usage};

use super::proto::{Cookie, Direction, Params, Results, StreamResult, stream_ids};
use super::streams::{Outcome, Running, Socket, Spec, Stop, Zc};
use crate::report::{cpu_us_per_mb, emit};

/// A stream of the test as zcnet's side sees it.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    pub id: u32,
    /// Whether zcnet's side sends on it.
    pub sender: bool,
    pub fd: i32,
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// The streams a test needs, in iperf3's order, as (sender on zcnet's side) flags: the client's
/// sending streams first. `client` says which end zcnet is.
pub fn stream_roles(params: &Params, client: bool) -> Vec<bool> {
    let n = params.parallel as usize;
    let client_sends: Vec<bool> = match params.direction() {
        Direction::Forward => vec![true; n],
        Direction::Reverse => vec![false; n],
        Direction::Bidir => [vec![true; n], vec![false; n]].concat(),
    };
    client_sends.into_iter().map(|s| s == client).collect()
}

/// How the test reports: JSON at the end, or text as it goes; interval reports every `interval`
/// seconds (0: none).
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
    pub interval: f64,
}

/// Longest wait between two looks at a running test (its end, the omit period, the intervals).
const TICK: Duration = Duration::from_millis(100);

/// A running test.
pub struct Test {
    pub params: Params,
    spec: Spec,
    zc: Zc,
    pub streams: Vec<StreamInfo>,
    pending: Vec<Option<Socket>>,
    running: Running,
    outcomes: Vec<Option<Outcome>>,
    start: Instant,
    usage: ResourceUsage,
    /// Start of the measured part (after `-O` seconds), once it began.
    measured: Option<Instant>,
    /// When the senders were stopped: the end of the test.
    stopped: Option<Instant>,
    /// Bytes each stream moved while omitted.
    omitted: Vec<u64>,
    /// Bytes at the last interval report, and when it was.
    last: (Vec<u64>, Instant),
    intervals: Vec<Value>,
    /// The `start` object of the report.
    pub start_json: Map<String, Value>,
    out: Output,
    /// Whether zcnet's side is the server.
    server: bool,
}

impl Test {
    pub fn new(params: Params, (spec, zc): (Spec, Zc), out: Output, server: bool) -> Test {
        let count = stream_roles(&params, true).len();
        let stop = Stop::new(params.num, params.blockcount);
        let now = Instant::now();
        Test {
            params,
            spec,
            zc,
            streams: Vec::new(),
            pending: Vec::new(),
            running: Running::new(stop, count),
            outcomes: (0..count).map(|_| None).collect(),
            start: now,
            usage: ResourceUsage::default(),
            measured: None,
            stopped: None,
            omitted: vec![0; count],
            last: (vec![0; count], now),
            intervals: Vec::new(),
            start_json: Map::new(),
            out,
            server,
        }
    }

    /// Adds the next stream (in stream order).
    pub fn add(&mut self, sender: bool, socket: Socket) -> io::Result<()> {
        let (fd, local, remote) = match &socket {
            Socket::Tcp(s) => (s.as_raw_fd(), s.local_addr()?, s.peer_addr()?),
            Socket::Udp(s) => (s.as_raw_fd(), s.local_addr()?, s.peer_addr()?),
        };
        let id = stream_ids(self.streams.len() + 1).last().unwrap_or(1);
        self.streams.push(StreamInfo {
            id,
            sender,
            fd,
            local,
            remote,
        });
        self.pending.push(Some(socket));
        Ok(())
    }

    /// Starts the receivers: before the peer is told to start, so that nothing it sends waits.
    pub fn start_receivers(&mut self) {
        self.launch(false);
    }

    /// Starts the senders and the clock.
    pub fn begin(&mut self) {
        self.start = Instant::now();
        self.usage = resource_usage(UsageOf::Process).unwrap_or_default();
        self.last.1 = self.start;
        if self.params.omit == 0 {
            self.measured = Some(self.start);
        }
        self.start_json
            .insert("test_start".into(), self.test_start());
        if !self.out.json {
            self.print_connected();
        }
        self.launch(true);
    }

    fn launch(&mut self, senders: bool) {
        for i in 0..self.streams.len() {
            if self.streams[i].sender == senders
                && let Some(socket) = self.pending[i].take()
            {
                self.running
                    .start(i, socket, senders, (self.spec, self.zc), Instant::now());
            }
        }
    }

    fn bytes_now(&self) -> Vec<u64> {
        self.running
            .live
            .iter()
            .map(|l| l.bytes.load(Ordering::Relaxed))
            .collect()
    }

    /// Bytes all streams moved so far, sent and received.
    pub fn totals(&self) -> (u64, u64) {
        let now = self.bytes_now();
        let sum = |sender: bool| {
            self.streams
                .iter()
                .zip(&now)
                .filter(|(s, _)| s.sender == sender)
                .map(|(_, b)| b)
                .sum()
        };
        (sum(true), sum(false))
    }

    /// Seconds since the measured part began (0 while omitting).
    pub fn elapsed(&self) -> f64 {
        let end = self.stopped.unwrap_or_else(Instant::now);
        self.measured
            .map_or(0.0, |m| end.saturating_duration_since(m).as_secs_f64())
    }

    /// Whether the test ran its `-t` (and `-O`) seconds.
    pub fn time_is_up(&self) -> bool {
        self.params.time > 0
            && self.measured.is_some()
            && self.elapsed() >= f64::from(self.params.time)
    }

    /// Whether every sender has stopped on its own (its `-n`/`-k` budget spent, or an error).
    pub fn senders_done(&self) -> bool {
        self.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.sender)
            .all(|(i, _)| self.running.finished(i))
            && self.streams.iter().any(|s| s.sender)
    }

    /// Whether the receivers got the `-n` bytes of the test (iperf3's client ends a reverse test so).
    /// (`-k` counts as that many blocks of bytes).
    pub fn received_enough(&self) -> bool {
        let got = self.totals().1;
        let blocks = self
            .params
            .blockcount
            .saturating_mul(self.spec.blksize as u64);
        (self.params.num > 0 && got >= self.params.num) || (blocks > 0 && got >= blocks)
    }

    /// Ends the omit period and reports the intervals that are due; returns how long to wait before
    /// the next look.
    pub fn tick(&mut self) -> Duration {
        let now = Instant::now();
        if self.measured.is_none() {
            let omit_end = self.start + Duration::from_secs(u64::from(self.params.omit));
            if now >= omit_end {
                self.report_interval(now, true);
                self.omitted = self.bytes_now();
                self.measured = Some(now);
            } else if self.out.interval > 0.0
                && now >= self.last.1 + Duration::from_secs_f64(self.out.interval)
            {
                self.report_interval(now, true);
            }
        } else if self.out.interval > 0.0
            && now >= self.last.1 + Duration::from_secs_f64(self.out.interval)
        {
            self.report_interval(now, false);
        }
        TICK
    }

    /// Reports the interval from the last report to `now`.
    fn report_interval(&mut self, now: Instant, omitted: bool) {
        let bytes = self.bytes_now();
        let base = if omitted {
            self.start
        } else {
            self.measured.unwrap_or(self.start)
        };
        let start = self.last.1.saturating_duration_since(base).as_secs_f64();
        let end = now.saturating_duration_since(base).as_secs_f64();
        let seconds = end - start;
        let mut rows = Vec::new();
        for (i, s) in self.streams.iter().enumerate() {
            let b = bytes[i].saturating_sub(self.last.0[i]);
            rows.push(json!({
                "socket": s.fd, "start": start, "end": end, "seconds": seconds, "bytes": b,
                "bits_per_second": bits(b, seconds), "omitted": omitted, "sender": s.sender,
            }));
        }
        self.last = (bytes, now);
        let mut interval = Map::new();
        for (name, reverse) in self.sum_names("sum", "sum_bidir_reverse") {
            let mine: Vec<&Value> = rows
                .iter()
                .filter(|r| self.direction_of(r["sender"] == true) == reverse)
                .collect();
            let b: u64 = mine.iter().map(|r| r["bytes"].as_u64().unwrap_or(0)).sum();
            let sender = mine.first().is_some_and(|r| r["sender"] == true);
            interval.insert(
                name.into(),
                json!({
                    "start": start, "end": end, "seconds": seconds, "bytes": b,
                    "bits_per_second": bits(b, seconds), "omitted": omitted, "sender": sender,
                }),
            );
        }
        if !self.out.json {
            for (r, s) in rows.iter().zip(&self.streams) {
                emit(&format!(
                    "[{:3}] {:6.2}-{:<6.2} sec {}  {}{}{}\n",
                    s.id,
                    start,
                    end,
                    transfer(r["bytes"].as_u64().unwrap_or(0)),
                    rate(r["bits_per_second"].as_f64().unwrap_or(0.0)),
                    if r["sender"] == true {
                        "  sender"
                    } else {
                        "  receiver"
                    },
                    if omitted { "  (omitted)" } else { "" },
                ));
            }
        }
        interval.insert("streams".into(), Value::Array(rows));
        self.intervals.push(Value::Object(interval));
    }

    /// The sums a report has: (name, whether it covers the reverse direction of a bidir test).
    fn sum_names(&self, name: &'static str, reverse: &'static str) -> Vec<(&'static str, bool)> {
        if self.params.direction() == Direction::Bidir {
            vec![(name, false), (reverse, true)]
        } else {
            vec![(name, false)]
        }
    }

    /// Whether a stream zcnet's side sends (`sender`) or receives goes the bidir test's reverse way
    /// (server to client). Always `false` outside bidir tests.
    fn direction_of(&self, sender: bool) -> bool {
        self.params.direction() == Direction::Bidir && sender == self.server
    }

    /// Ends the test: stops the senders and waits for them.
    pub fn stop_senders(&mut self) {
        let now = Instant::now();
        self.stopped = Some(now);
        // The last, partial interval, as iperf3 reports it at the end.
        if self.out.interval > 0.0 && self.measured.is_some() && now > self.last.1 + TICK {
            self.report_interval(now, false);
        }
        let which: Vec<usize> = (0..self.streams.len())
            .filter(|&i| self.streams[i].sender)
            .collect();
        for (i, o) in which.iter().zip(self.running.join(&which)) {
            self.outcomes[*i] = Some(o);
        }
    }

    /// Ends the receivers once each has what the peer says it sent (`sent`, by stream id; at most
    /// `wait`), or at once for streams the peer did not name.
    pub fn finish_receivers(&mut self, sent: &Results, wait: Duration) {
        let which: Vec<(usize, Option<u64>)> = (0..self.streams.len())
            .filter(|&i| !self.streams[i].sender)
            .map(|i| {
                let id = self.streams[i].id;
                let target = sent
                    .streams
                    .iter()
                    .find(|r| r.id == id)
                    .map(|r| r.bytes + self.omitted[i]);
                (i, target)
            })
            .collect();
        for ((i, _), o) in which.iter().zip(self.running.finish(&which, wait)) {
            self.outcomes[*i] = Some(o);
        }
    }

    /// Ends the receivers once their TCP streams ended (the peer closed them), at most `wait`.
    pub fn drain_receivers(&mut self, wait: Duration) {
        let which: Vec<usize> = (0..self.streams.len())
            .filter(|&i| !self.streams[i].sender)
            .collect();
        for (i, o) in which.iter().zip(self.running.drain(&which, wait)) {
            self.outcomes[*i] = Some(o);
        }
    }
}

impl Test {
    /// This side's results for the peer, once every stream ended.
    pub fn results(&self) -> Results {
        let ended = self.ended();
        let seconds = self.elapsed();
        Results {
            cpu_util_total: ended.cpu.0,
            cpu_util_user: ended.cpu.1,
            cpu_util_system: ended.cpu.2,
            // TCP retransmits are not counted on zcnet's side.
            sender_has_retransmits: i64::from(if self.streams.iter().any(|s| s.sender) {
                0
            } else {
                -1
            }),
            congestion_used: None,
            streams: self
                .streams
                .iter()
                .zip(&ended.bytes)
                .zip(&self.outcomes)
                .map(|((s, &bytes), o)| {
                    let o = o.as_ref();
                    let tally = o.and_then(|o| o.tally);
                    StreamResult {
                        id: s.id,
                        bytes,
                        retransmits: -1,
                        jitter: tally.map_or(0.0, |t| t.jitter),
                        errors: tally.map_or(0, |t| t.lost),
                        packets: match tally {
                            Some(t) => t.highest as i64,
                            None => o.map_or(0, |o| o.packets as i64),
                        },
                        start_time: 0.0,
                        end_time: seconds,
                    }
                })
                .collect(),
        }
    }

    /// Each stream's measured bytes and the CPU use (total, user, system: percent of the wall time).
    fn ended(&self) -> Ended {
        let bytes = self
            .outcomes
            .iter()
            .zip(&self.omitted)
            .map(|(o, omitted)| o.as_ref().map_or(0, |o| o.bytes.saturating_sub(*omitted)))
            .collect();
        let usage = resource_usage(UsageOf::Process)
            .unwrap_or_default()
            .since(&self.usage);
        let wall = self.start.elapsed().as_secs_f64().max(1e-9);
        let pct = |d: Duration| d.as_secs_f64() / wall * 100.0;
        Ended {
            bytes,
            cpu: (
                pct(usage.user + usage.system),
                pct(usage.user),
                pct(usage.system),
            ),
            usage,
        }
    }

    /// The streams that ended with an error, named.
    pub fn failures(&self) -> Vec<String> {
        self.streams
            .iter()
            .zip(&self.outcomes)
            .filter_map(|(s, o)| {
                let why = o
                    .as_ref()
                    .map_or(Some("it was never ended"), |o| o.error.as_deref())?;
                Some(format!(
                    "stream {} ({}): {why}",
                    s.id,
                    if s.sender { "sending" } else { "receiving" }
                ))
            })
            .collect()
    }

    /// The report of the ended test, with the peer's results; `error` when the test did not end
    /// as the protocol says.
    pub fn report(&self, peer: &Results, error: Option<&str>) -> Value {
        let ended = self.ended();
        let seconds = self.elapsed();
        let udp = self.spec.udp;
        let mut streams = Vec::new();
        let mut sums: Vec<Sum> = vec![Sum::default(); 2];
        for (i, s) in self.streams.iter().enumerate() {
            let theirs = peer
                .streams
                .iter()
                .find(|r| r.id == s.id)
                .cloned()
                .unwrap_or_default();
            let mine_bytes = ended.bytes[i];
            let their_seconds = (theirs.end_time - theirs.start_time).max(0.0);
            let (sent, sent_s, got, got_s) = if s.sender {
                (mine_bytes, seconds, theirs.bytes, their_seconds)
            } else {
                (theirs.bytes, their_seconds, mine_bytes, seconds)
            };
            let side = |bytes: u64, secs: f64, sender: bool| {
                json!({"socket": s.fd, "start": 0.0, "end": secs, "seconds": secs, "bytes": bytes,
                       "bits_per_second": bits(bytes, secs), "sender": sender})
            };
            let mut entry = Map::new();
            entry.insert("sender".into(), side(sent, sent_s, s.sender));
            entry.insert("receiver".into(), side(got, got_s, s.sender));
            let tally = if s.sender {
                theirs.clone()
            } else {
                self.results().streams[i].clone()
            };
            let packets = if s.sender {
                self.outcomes[i].as_ref().map_or(0, |o| o.packets as i64)
            } else {
                tally.packets
            };
            if udp {
                let lost_percent = if packets > 0 {
                    tally.errors as f64 * 100.0 / packets as f64
                } else {
                    0.0
                };
                let out_of_order = self.outcomes[i]
                    .as_ref()
                    .and_then(|o| o.tally)
                    .map_or(0, |t| t.out_of_order);
                entry.insert("udp".into(), json!({
                    "socket": s.fd, "start": 0.0, "end": sent_s, "seconds": sent_s, "bytes": sent,
                    "bits_per_second": bits(sent, sent_s), "jitter_ms": tally.jitter * 1000.0,
                    "lost_packets": tally.errors, "packets": packets, "lost_percent": lost_percent,
                    "out_of_order": out_of_order, "sender": s.sender,
                }));
            }
            let sum = &mut sums[usize::from(self.direction_of(s.sender))];
            sum.add(
                sent,
                got,
                (sent_s, got_s),
                (tally.errors, packets, tally.jitter),
                s.sender,
            );
            streams.push(Value::Object(entry));
        }
        let mut end = Map::new();
        end.insert("streams".into(), Value::Array(streams));
        for (k, (sent, received)) in [
            ("", ("sum_sent", "sum_received")),
            (
                "_bidir_reverse",
                ("sum_sent_bidir_reverse", "sum_received_bidir_reverse"),
            ),
        ]
        .into_iter()
        .enumerate()
        .take(self.sum_names("", "").len())
        .map(|(k, (_, names))| (k, names))
        {
            let sum = &sums[k];
            end.insert(sent.into(), sum.json(true));
            end.insert(received.into(), sum.json(false));
            if udp {
                end.insert(
                    if k == 0 { "sum" } else { "sum_bidir_reverse" }.into(),
                    sum.json(false),
                );
            }
        }
        end.insert(
            "cpu_utilization_percent".into(),
            json!({
                "host_total": ended.cpu.0, "host_user": ended.cpu.1, "host_system": ended.cpu.2,
                "remote_total": peer.cpu_util_total, "remote_user": peer.cpu_util_user,
                "remote_system": peer.cpu_util_system,
            }),
        );
        let total: u64 = ended.bytes.iter().sum();
        end.insert(
            "zcnet".into(),
            json!({
                "cpu_us_per_mb": cpu_us_per_mb(&ended.usage, total),
                "streams": self.streams.iter().zip(&self.outcomes).map(|(s, o)| {
                    let mut row = o.as_ref().map_or(Value::Null, |o| o.zc.clone());
                    if let Value::Object(m) = &mut row {
                        m.insert("id".into(), json!(s.id));
                        m.insert("sender".into(), json!(s.sender));
                    }
                    row
                }).collect::<Vec<_>>(),
            }),
        );
        let mut report = Map::new();
        report.insert("start".into(), Value::Object(self.start_json.clone()));
        report.insert("intervals".into(), Value::Array(self.intervals.clone()));
        report.insert("end".into(), Value::Object(end));
        if let Some(e) = error {
            report.insert("error".into(), json!(e));
        }
        Value::Object(report)
    }

    /// Prints the report: the JSON document, or text lines.
    pub fn print(&self, report: &Value) {
        if self.out.json {
            emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(report).unwrap_or_default()
            ));
            return;
        }
        let end = &report["end"];
        emit("- - - - - - - - - - - - - - - - - - - - - - - - -\n");
        emit("[ ID] Interval           Transfer     Bitrate\n");
        for (s, e) in self
            .streams
            .iter()
            .zip(end["streams"].as_array().into_iter().flatten())
        {
            for side in ["sender", "receiver"] {
                let r = &e[side];
                emit(&format!(
                    "[{:3}] {:6.2}-{:<6.2} sec {}  {}  {side}\n",
                    s.id,
                    0.0,
                    r["seconds"].as_f64().unwrap_or(0.0),
                    transfer(r["bytes"].as_u64().unwrap_or(0)),
                    rate(r["bits_per_second"].as_f64().unwrap_or(0.0)),
                ));
            }
            if let Some(u) = e.get("udp") {
                emit(&format!(
                    "[{:3}] jitter {:.3} ms, lost {}/{} datagrams\n",
                    s.id,
                    u["jitter_ms"].as_f64().unwrap_or(0.0),
                    u["lost_packets"],
                    u["packets"]
                ));
            }
        }
        let z = &end["zcnet"];
        for row in z["streams"].as_array().into_iter().flatten() {
            emit(&format!("zcnet stream {}: {row}\n", row["id"]));
        }
        emit(&format!(
            "zcnet: CPU {:.1}% of the wall time, {:.0} us per MB moved\n",
            end["cpu_utilization_percent"]["host_total"]
                .as_f64()
                .unwrap_or(0.0),
            z["cpu_us_per_mb"].as_f64().unwrap_or(0.0)
        ));
        if let Some(e) = report.get("error") {
            emit(&format!("zcnet iperf3: {}\n", e.as_str().unwrap_or("?")));
        }
    }

    /// The `test_start` object of the report.
    fn test_start(&self) -> Value {
        let p = &self.params;
        json!({
            "protocol": if self.spec.udp { "UDP" } else { "TCP" },
            "num_streams": p.parallel, "blksize": self.spec.blksize, "omit": p.omit,
            "duration": p.time, "bytes": p.num, "blocks": p.blockcount,
            "reverse": i32::from(p.direction() == Direction::Reverse), "tos": 0,
            "target_bitrate": self.spec.rate, "bidir": i32::from(p.direction() == Direction::Bidir),
            "fqrate": 0,
        })
    }

    /// Adds the streams to `start.connected` and prints them in text.
    fn print_connected(&mut self) {
        for s in &self.streams {
            emit(&format!(
                "[{:3}] local {} port {} connected to {} port {}{}\n",
                s.id,
                s.local.ip(),
                s.local.port(),
                s.remote.ip(),
                s.remote.port(),
                if s.sender {
                    " (zcnet sends)"
                } else {
                    " (zcnet receives)"
                }
            ));
        }
    }

    /// The `connected` array of the report's `start`.
    pub fn connected(&self) -> Value {
        Value::Array(
            self.streams
                .iter()
                .map(|s| json!({"socket": s.fd, "local_host": s.local.ip().to_string(), "local_port": s.local.port(),
                                "remote_host": s.remote.ip().to_string(), "remote_port": s.remote.port()}))
                .collect(),
        )
    }
}

/// What zcnet's side measured of an ended test.
struct Ended {
    /// Each stream's bytes after the omit period, in stream order.
    bytes: Vec<u64>,
    /// CPU use in percent of the wall time: total, user, system.
    cpu: (f64, f64, f64),
    usage: ResourceUsage,
}

/// The sums of one direction.
#[derive(Debug, Clone, Default)]
struct Sum {
    sent: u64,
    received: u64,
    sent_s: f64,
    received_s: f64,
    lost: i64,
    packets: i64,
    jitter: f64,
    streams: u32,
    /// Whether zcnet's side sends in this direction.
    sender: bool,
}

impl Sum {
    fn add(
        &mut self,
        sent: u64,
        got: u64,
        (sent_s, got_s): (f64, f64),
        (lost, packets, jitter): (i64, i64, f64),
        sender: bool,
    ) {
        self.sent += sent;
        self.received += got;
        self.sent_s = self.sent_s.max(sent_s);
        self.received_s = self.received_s.max(got_s);
        self.lost += lost;
        self.packets += packets;
        self.jitter += jitter;
        self.streams += 1;
        self.sender = sender;
    }

    fn json(&self, sent: bool) -> Value {
        let (bytes, secs) = if sent {
            (self.sent, self.sent_s)
        } else {
            (self.received, self.received_s)
        };
        let lost_percent = if self.packets > 0 {
            self.lost as f64 * 100.0 / self.packets as f64
        } else {
            0.0
        };
        json!({"start": 0.0, "end": secs, "seconds": secs, "bytes": bytes, "bits_per_second": bits(bytes, secs),
               "jitter_ms": self.jitter * 1000.0 / f64::from(self.streams.max(1)),
               "lost_packets": self.lost, "packets": self.packets, "lost_percent": lost_percent,
               "sender": self.sender})
    }
}

fn bits(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// Bytes as iperf3 prints a transfer (powers of 1024).
fn transfer(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..1024 => format!("{b:6.0} Bytes"),
        1024..1_048_576 => format!("{:6.2} KBytes", b / 1024.0),
        1_048_576..1_073_741_824 => format!("{:6.2} MBytes", b / 1_048_576.0),
        _ => format!("{:6.2} GBytes", b / 1_073_741_824.0),
    }
}

/// Bits per second as iperf3 prints a bitrate (powers of 1000).
fn rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:6.2} Gbits/sec", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:6.2} Mbits/sec", bps / 1e6)
    } else {
        format!("{:6.2} Kbits/sec", bps / 1e3)
    }
}

/// The report's `start` object: the streams, the version, the time, the cookie, and the peer under
/// `peer_key` (`connecting_to` on a client, `accepted_connection` on a server).
pub fn start_json(
    test: &Test,
    cookie: &Cookie,
    (peer_key, peer): (&str, SocketAddr),
) -> Map<String, Value> {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert("connected".into(), test.connected());
    m.insert(
        "version".into(),
        json!(format!(
            "zcnet {} (iperf3 protocol)",
            env!("CARGO_PKG_VERSION")
        )),
    );
    m.insert("timestamp".into(), json!({"timesecs": t.as_secs()}));
    m.insert(
        peer_key.into(),
        json!({"host": peer.ip().to_string(), "port": peer.port()}),
    );
    m.insert("cookie".into(), json!(cookie.text()));
    m
}
