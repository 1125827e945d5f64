//! Run: the role this process takes in a bench of sends — with `--listen` the receiver (Ctrl-C
//! watched from then on), and as the one-process mode's receiver a process that ends with its parent.

use std::io::Read;
use std::net::SocketAddr;
use std::thread;

use anyhow::Result;

use crate::bench::args::{Common, listen_addr};
use crate::live;

/// With `--listen`, the address to listen on, Ctrl-C watched from now on; `None` for a sender. The
/// one-process mode's receiver (`--exit-with-parent`) starts watching its standard input here.
pub(crate) fn receiver_role(common: &Common) -> Result<Option<SocketAddr>> {
    if common.exit_with_parent {
        exit_with_parent();
    }
    let Some(spec) = &common.listen else {
        return Ok(None);
    };
    live::watch_interrupts()?;
    listen_addr(spec, common.ipv6).map(Some)
}

/// Ends this process when standard input closes: the one-process mode's receiver must not outlive
/// the bench that started it, however that bench ends.
pub(crate) fn exit_with_parent() {
    thread::spawn(|| {
        let mut sink = [0u8; 64];
        while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(3);
    });
}
