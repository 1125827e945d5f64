//! An object server — the storage/CDN case: many clients fetch the same large in-memory objects, and
//! each object is one `bytes::Bytes` lent to every connection at once. `AsyncSender` sends it with
//! MSG_ZEROCOPY from the one copy in memory; the kernel holds a reference per send until its
//! completion, so nothing is copied in user space and the object may be dropped or replaced at any
//! time. At exit it prints how the kernel treated the sends (ids zero-copied and copied) and the CPU
//! time per MB served. Over loopback the kernel copies at delivery, so completions say "copied".
//!
//! ```text
//! cargo run --release --example object_server -- [--mode copy|zerocopy|auto] [--clients 16]
//!     [--requests 32] [--objects 4] [--object-mib 8] [--listen 127.0.0.1:9000]
//! cargo run --release --example object_server -- --bench [--mode …] [--connections 1,16] [--rounds 3]
//!     [--mib 1024] [--workers N]
//! ```
//!
//! Without `--listen` it runs its own clients over loopback, each verifying every object it gets
//! where it was received: the clients parse the length-prefixed answers with `AsyncBufRead`
//! (`fill_buf`/`consume` on a zero-copy `AsyncReceiver`), hashing the bytes in place.
//! A request is 8 bytes (object index, count, both big-endian u32); each answer is the object's
//! length (u64, big-endian) and its bytes. `--bench` serves the same load with a thread per
//! connection and the blocking `TcpSender`, then with tokio and `AsyncSender` (a runtime of
//! `--workers` threads, by default one per core), back to back in each round, to the same two client
//! threads. It prints the median rate of each, the median of the rounds' tokio/blocking ratios, and
//! the process's CPU time per MB, for each connection count and send mode (zerocopy and auto unless
//! `--mode` picks one). On a host shared with other work single rates swing from run to run: read the
//! ratio and the CPU per MB.

mod bench;
#[path = "../common/mod.rs"]
mod common;
mod protocol;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{StreamHash, cpu_time, cpu_us_per_mb, pseudo_random};
use protocol::{decode_request, request};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use zcnet::aio;
use zcnet::rx::RxConfig;
use zcnet::tx::{Mode, SenderConfig, TxStats};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone)]
pub(crate) struct Options {
    mode: Mode,
    clients: usize,
    requests: u32,
    objects: usize,
    object_size: usize,
    listen: Option<SocketAddr>,
    bench: bool,
    connections: Vec<usize>,
    rounds: usize,
    bench_bytes: u64,
    workers: Option<usize>,
}

const USAGE: &str = "\
usage: object_server [--mode copy|zerocopy|auto] [--clients N] [--requests N] [--objects N]
                     [--object-mib MIB] [--listen ADDR:PORT]
       object_server --bench [--mode copy|zerocopy|auto] [--connections N,N…] [--rounds N] [--mib MIB]
                     [--workers N]
Serves in-memory objects with MSG_ZEROCOPY (see the top of examples/object_server/main.rs).
";

fn parse_mode(name: &str) -> Result<Mode, Error> {
    match name {
        "copy" => Ok(Mode::Copy),
        "zerocopy" => Ok(Mode::ZeroCopy),
        "auto" => Ok(Mode::Auto),
        other => Err(format!("--mode {other}: expected copy, zerocopy or auto").into()),
    }
}

fn options() -> Result<Options, Error> {
    let mut o = Options {
        mode: Mode::Auto,
        clients: 16,
        requests: 32,
        objects: 4,
        object_size: 8 << 20,
        listen: None,
        bench: false,
        connections: vec![1, 16],
        rounds: 3,
        bench_bytes: 1 << 30,
        workers: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = || args.get(i + 1).ok_or(format!("{} needs a value", args[i]));
        match args[i].as_str() {
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--bench" => {
                o.bench = true;
                i += 1;
                continue;
            }
            "--mode" => o.mode = parse_mode(value()?)?,
            "--clients" => o.clients = value()?.parse()?,
            "--requests" => o.requests = value()?.parse()?,
            "--objects" => o.objects = value()?.parse::<usize>()?.max(1),
            "--object-mib" => o.object_size = value()?.parse::<usize>()? << 20,
            "--listen" => o.listen = Some(value()?.parse()?),
            "--connections" => {
                o.connections = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--rounds" => o.rounds = value()?.parse::<usize>()?.max(1),
            "--mib" => o.bench_bytes = value()?.parse::<u64>()? << 20,
            "--workers" => o.workers = Some(value()?.parse::<usize>()?.max(1)),
            other => {
                eprint!("object_server: unknown argument {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    Ok(o)
}

/// The objects: pseudo-random bytes, each one `Bytes` shared by every connection.
fn make_objects(count: usize, size: usize) -> Vec<Bytes> {
    (0..count)
        .map(|i| Bytes::from(pseudo_random(size, i as u64 + 1)))
        .collect()
}

/// Totals over every connection a server served.
#[derive(Debug, Default)]
struct Served {
    bytes: u64,
    zc_ids: u64,
    copied_ids: u64,
    zc_calls: u64,
    copy_calls: u64,
}

impl Served {
    fn add(&mut self, stats: &TxStats) {
        self.bytes += stats.bytes;
        self.zc_ids += stats.zc_ids;
        self.copied_ids += stats.copied_ids;
        self.zc_calls += stats.zc_calls;
        self.copy_calls += stats.copy_calls;
    }
}

/// Serves one connection with tokio: the connection is split into a zero-copy receiver, which
/// reads the requests, and an `AsyncSender` that lends each object's `Bytes` to the kernel.
async fn serve_async(
    stream: tokio::net::TcpStream,
    objects: Arc<Vec<Bytes>>,
    mode: Mode,
) -> Result<TxStats, Error> {
    let (mut requests, mut tx) =
        aio::split(stream, SenderConfig::with_mode(mode), RxConfig::default())?;
    let mut req = [0u8; 8];
    while requests.read_exact(&mut req).await.is_ok() {
        let (index, count) = decode_request(req);
        let object = &objects[index % objects.len()];
        for _ in 0..count {
            tx.send((object.len() as u64).to_be_bytes().to_vec())
                .await?;
            tx.send(object.clone()).await?;
        }
    }
    tx.flush().await?;
    Ok(tx.stats().clone())
}

/// A demo client: fetches `requests` objects one at a time and checks each against its hash,
/// hashing each answer's bytes where they were received (`AsyncBufRead`: mapped pages or the
/// receiver's copy buffer), never copying them.
async fn verifying_client(
    addr: SocketAddr,
    hashes: Arc<Vec<u64>>,
    requests: u32,
    seed: usize,
) -> Result<u64, Error> {
    let (mut rx, mut tx) = aio::connect(addr, SenderConfig::default(), RxConfig::default()).await?;
    let mut received = 0;
    for r in 0..requests as usize {
        let index = (seed * 7 + r) % hashes.len();
        tx.send(request(index, 1).to_vec()).await?;
        let mut len = [0u8; 8];
        rx.read_exact(&mut len).await?;
        let mut left = u64::from_be_bytes(len);
        received += left;
        let mut hash = StreamHash::default();
        while left > 0 {
            let lent = rx.fill_buf().await?;
            if lent.is_empty() {
                return Err("the server closed mid-object".into());
            }
            let n = lent.len().min(left as usize);
            hash.update(&lent[..n]);
            rx.consume(n);
            left -= n as u64;
        }
        if hash.finish() != hashes[index] {
            return Err(format!("object {index} arrived corrupted").into());
        }
    }
    tx.close().await?;
    Ok(received)
}

fn print_summary(what: &str, served: &Served, elapsed: Duration, cpu: Duration) {
    println!(
        "{what}: {:.1} MB in {:.2} s ({:.2} Gbit/s); sendmsg zero-copy {} copy {}; \
         ids zero-copied {}, copied {}; {:.1} µs CPU per MB",
        served.bytes as f64 / 1e6,
        elapsed.as_secs_f64(),
        served.bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e9,
        served.zc_calls,
        served.copy_calls,
        served.zc_ids,
        served.copied_ids,
        cpu_us_per_mb(cpu, served.bytes),
    );
}

fn main() -> Result<(), Error> {
    let o = options()?;
    let objects = Arc::new(make_objects(o.objects, o.object_size));
    if o.bench {
        return bench::bench(&o, &objects);
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(serve_demo(o, objects))
}

async fn serve_demo(o: Options, objects: Arc<Vec<Bytes>>) -> Result<(), Error> {
    let listener =
        tokio::net::TcpListener::bind(o.listen.unwrap_or("127.0.0.1:0".parse()?)).await?;
    let addr = listener.local_addr()?;
    let served = Arc::new(Mutex::new(Served::default()));
    let (start, cpu) = (Instant::now(), cpu_time());
    let clients = if o.listen.is_some() {
        println!(
            "serving {} objects of {} bytes on {addr}",
            objects.len(),
            o.object_size
        );
        None
    } else {
        let hashes: Arc<Vec<u64>> = Arc::new(
            objects
                .iter()
                .map(|b| {
                    let mut h = StreamHash::default();
                    h.update(b);
                    h.finish()
                })
                .collect(),
        );
        let mut set = tokio::task::JoinSet::new();
        for c in 0..o.clients {
            set.spawn(verifying_client(addr, Arc::clone(&hashes), o.requests, c));
        }
        Some(set)
    };
    let mut connections = tokio::task::JoinSet::new();
    let accept = async {
        loop {
            let (stream, _) = listener.accept().await?;
            let (objects, served) = (Arc::clone(&objects), Arc::clone(&served));
            connections.spawn(async move {
                let stats = serve_async(stream, objects, o.mode).await?;
                served.lock().expect("served").add(&stats);
                Ok::<_, Error>(())
            });
        }
        #[allow(unreachable_code)]
        Ok::<(), Error>(())
    };
    match clients {
        None => {
            tokio::select! {
                r = accept => r?,
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Some(mut clients) => {
            let done = async {
                while let Some(client) = clients.join_next().await {
                    client??;
                }
                Ok::<(), Error>(())
            };
            tokio::select! {
                r = accept => r?,
                r = done => r?,
            }
            println!("{} clients verified {} objects each", o.clients, o.requests);
        }
    }
    while let Some(connection) = connections.join_next().await {
        connection??;
    }
    let served = served.lock().expect("served");
    print_summary(
        &format!("served ({})", o.mode.name()),
        &served,
        start.elapsed(),
        cpu_time() - cpu,
    );
    Ok(())
}
