//! A receiver that hashes a TCP stream without copying it into user space — what the kernel's
//! `tcp_mmap` does: `TCP_ZEROCOPY_RECEIVE` maps received pages into a read-only window, the hash reads
//! them there, and releasing each chunk gives the pages back. It prints tcp_mmap's figures: MB, share
//! mapped, throughput and CPU per MB.
//!
//! Pages map only when each segment carries a whole page: the listener sets an MSS of one page and the
//! sender must send with MSG_ZEROCOPY. Without `--listen` the example runs both ends over loopback (a
//! zcnet zero-copy sender thread streaming 256 MiB):
//!
//! ```text
//! cargo run --release --example stream_hasher
//! cargo run --release --example stream_hasher -- --listen 127.0.0.1:9000 [--copy]
//! ```

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{StreamHash, cpu_time, cpu_us_per_mb, pseudo_random};
use zcnet::rx::{Receiver, RxConfig, RxMode, sender};
use zcnet::tx::{Mode, SenderConfig, TcpSender};

const DEMO_BYTES: usize = 256 << 20;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(unknown) = args
        .iter()
        .find(|a| a.starts_with('-') && !["--listen", "--copy"].contains(&a.as_str()))
    {
        let usage = "usage: stream_hasher [--listen ADDR:PORT] [--copy]";
        if unknown == "--help" || unknown == "-h" {
            println!("{usage}");
            return Ok(());
        }
        eprintln!("stream_hasher: unknown argument {unknown}\n{usage}");
        std::process::exit(2);
    }
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
        .map(|a| a.parse::<SocketAddr>())
        .transpose()?;
    let mode = if args.iter().any(|a| a == "--copy") {
        RxMode::Copy
    } else {
        RxMode::ZeroCopy
    };
    let listener = sender::bind_page_mss(listen.unwrap_or("127.0.0.1:0".parse()?))?;
    let demo = match listen {
        Some(addr) => {
            println!("listening on {addr}");
            None
        }
        None => {
            let addr = listener.local_addr()?;
            Some(std::thread::spawn(move || demo_sender(addr)))
        }
    };
    let (stream, peer) = listener.accept()?;
    let (bytes, hash, stats, elapsed, cpu) = hash_stream(stream, mode)?;
    let mb = bytes as f64 / 1e6;
    println!("{peer}: {mb:.1} MB, hash {:016x}", hash.finish());
    println!(
        "{:.2}% mmap'ed, {:.3} s, {:.2} Gbit/s, {:.1} µs CPU per MB{}",
        stats.mapped_pct(),
        elapsed.as_secs_f64(),
        bytes as f64 * 8.0 / elapsed.as_secs_f64() / 1e9,
        cpu_us_per_mb(cpu, bytes),
        if demo.is_some() {
            " (both ends in this process)"
        } else {
            ""
        },
    );
    if let Some(demo) = demo {
        let sent = demo.join().expect("demo sender")?;
        assert_eq!(sent.finish(), hash.finish(), "the stream arrived intact");
        println!("hash matches the sender's");
    }
    Ok(())
}

type Hashed = (u64, StreamHash, zcnet::rx::RxStats, Duration, Duration);

/// Reads `stream` to its end with a zero-copy receiver, hashing each chunk where it lies.
fn hash_stream(stream: TcpStream, mode: RxMode) -> Result<Hashed, zcnet::rx::RxError> {
    let mut config = RxConfig::default();
    config.mode = mode;
    let mut rx = Receiver::new(stream, config)?;
    let (start, cpu) = (Instant::now(), cpu_time());
    let mut hash = StreamHash::default();
    while let Some(chunk) = rx.recv()? {
        hash.update(&chunk); // mapped pages are read in place, then released
    }
    let stats = *rx.stats();
    Ok((
        stats.bytes(),
        hash,
        stats,
        start.elapsed(),
        cpu_time() - cpu,
    ))
}

/// The loopback peer: streams pseudo-random 1 MiB buffers with a zero-copy sender; returns their hash.
fn demo_sender(addr: SocketAddr) -> Result<StreamHash, Error> {
    let mut tx = TcpSender::new(
        TcpStream::connect(addr)?,
        SenderConfig::with_mode(Mode::ZeroCopy),
    );
    let mut hash = StreamHash::default();
    for i in 0..DEMO_BYTES >> 20 {
        let buf = pseudo_random(1 << 20, i as u64);
        hash.update(&buf);
        tx.send(buf)?;
    }
    tx.close(Duration::from_secs(10))?;
    Ok(hash)
}
