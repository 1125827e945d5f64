//! `--bench`: the same load served by a thread per connection with the blocking `TcpSender`, then by
//! tokio with `AsyncSender`, alternating, with the same clients (two threads reading every connection).
//!
//! Over loopback a zero-copy send is copied at delivery (`skb_copy_ubufs`), mostly in whichever
//! context transmits the segments an ACK lets go — often the client's `recv`: the zero-copy rows
//! measure where the kernel does that work as much as the senders.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zcnet::tx::{Mode, SenderConfig, TcpSender, TxStats};

use crate::common::{cpu_time, cpu_us_per_mb};
use crate::protocol::{decode_request, request};
use crate::{Error, Options, Served, serve_async};

/// The same with a thread and the blocking `TcpSender`.
fn serve_blocking(
    stream: TcpStream,
    objects: Arc<Vec<Bytes>>,
    mode: Mode,
) -> Result<TxStats, Error> {
    let mut tx = TcpSender::new(stream, SenderConfig::with_mode(mode));
    let mut req = [0u8; 8];
    while tx.get_ref().read_exact(&mut req).is_ok() {
        let (index, count) = decode_request(req);
        let object = &objects[index % objects.len()];
        for _ in 0..count {
            tx.send((object.len() as u64).to_be_bytes().to_vec())?;
            tx.send(object.clone())?;
        }
    }
    tx.flush(Duration::from_secs(30))?;
    Ok(tx.stats().clone())
}

/// A bench client: asks for `count` copies of one object and reads them all, counting bytes.
async fn draining_client(addr: SocketAddr, index: usize, count: u32) -> Result<u64, Error> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(&request(index, count)).await?;
    stream.shutdown().await?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

/// The bench's clients, the same for both servers: a two-thread runtime reading every connection.
fn bench_clients(
    addr: SocketAddr,
    connections: usize,
    count: u32,
) -> thread::JoinHandle<Result<u64, Error>> {
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for c in 0..connections {
                set.spawn(draining_client(addr, c, count));
            }
            let mut total = 0;
            while let Some(received) = set.join_next().await {
                total += received??;
            }
            Ok(total)
        })
    })
}

/// One bench run: `connections` clients each draining its share of `bytes`, served by the async or
/// the blocking server. Returns what was served and the wall time.
fn bench_run(
    o: &Options,
    objects: &Arc<Vec<Bytes>>,
    connections: usize,
    mode: Mode,
    runtime: Option<&tokio::runtime::Runtime>,
) -> Result<(Served, Duration), Error> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let per_connection = (o.bench_bytes / connections as u64 / o.object_size as u64).max(1) as u32;
    let start = Instant::now();
    let clients = bench_clients(addr, connections, per_connection);
    let mut served = Served::default();
    match runtime {
        Some(runtime) => runtime.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..connections {
                let (stream, _) = listener.accept()?;
                stream.set_nonblocking(true)?;
                let stream = tokio::net::TcpStream::from_std(stream)?;
                set.spawn(serve_async(stream, Arc::clone(objects), mode));
            }
            while let Some(stats) = set.join_next().await {
                served.add(&stats??);
            }
            Ok::<(), Error>(())
        })?,
        None => {
            let mut servers = Vec::new();
            for _ in 0..connections {
                let (stream, _) = listener.accept()?;
                let objects = Arc::clone(objects);
                servers.push(thread::spawn(move || serve_blocking(stream, objects, mode)));
            }
            for server in servers {
                served.add(&server.join().expect("server thread")?);
            }
        }
    }
    clients.join().expect("client thread")?;
    Ok((served, start.elapsed()))
}

pub(crate) fn bench(o: &Options, objects: &Arc<Vec<Bytes>>) -> Result<(), Error> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = o.workers {
        builder.worker_threads(workers);
    }
    let runtime = builder.enable_all().build()?;
    let modes = if o.mode == Mode::Auto && !std::env::args().any(|a| a == "--mode") {
        vec![Mode::ZeroCopy, Mode::Auto]
    } else {
        vec![o.mode]
    };
    for &mode in &modes {
        for &connections in &o.connections {
            let mut rates = [Vec::new(), Vec::new()];
            let mut ratios = Vec::new();
            let mut cpu = [(Duration::ZERO, 0u64); 2];
            for round in 0..o.rounds {
                // Each round runs both servers back to back, in turns first, so that a pair meets
                // the same load on a shared host; the ratio is the median of the pairs' ratios.
                let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
                for slot in order {
                    let rt = (slot == 1).then_some(&runtime);
                    let before = cpu_time();
                    let (served, elapsed) = bench_run(o, objects, connections, mode, rt)?;
                    cpu[slot].0 += cpu_time() - before;
                    cpu[slot].1 += served.bytes;
                    rates[slot].push(served.bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e9);
                }
                ratios.push(rates[1][round] / rates[0][round]);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (blocking, tokio) = (median(&mut rates[0]), median(&mut rates[1]));
            println!(
                "mode {}, {connections} connections: blocking {blocking:.2} Gbit/s \
                 ({:.0} µs CPU/MB), tokio {tokio:.2} Gbit/s ({:.0} µs CPU/MB), ratio {:.3} \
                 (median of {} paired rounds)",
                mode.name(),
                cpu_us_per_mb(cpu[0].0, cpu[0].1),
                cpu_us_per_mb(cpu[1].0, cpu[1].1),
                median(&mut ratios),
                o.rounds
            );
        }
    }
    Ok(())
}
