//! The blocking API in twenty lines: a `TcpSender` lends each `Vec` to the kernel with MSG_ZEROCOPY,
//! keeps it until the completion covering it arrives on the socket's error queue, and counts how the
//! kernel treated every send. Over loopback the kernel copies at delivery, so completions say "copied"
//! and the default policy goes back to copying. Run: `cargo run --release --example blocking`.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use zcnet::tx::{SenderConfig, TcpSender};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || listener.accept()?.0.read_to_end(&mut Vec::new()));
    let mut tx = TcpSender::new(TcpStream::connect(addr)?, SenderConfig::default());
    for i in 0..64u8 {
        tx.send(vec![i; 1 << 20])?; // lent to the kernel until its completion
    }
    tx.flush(Duration::from_secs(5))?; // every buffer back
    let stats = tx.stats().clone();
    drop(tx); // closes the connection: the reader sees the end
    println!("received {} bytes", reader.join().expect("reader")?);
    println!(
        "ids zero-copied {}, copied {}; {stats:?}",
        stats.zc_ids, stats.copied_ids
    );
    Ok(())
}
