//! A seqpacket sender's `SO_SNDTIMEO`: it sets its own (the bound of a whole-message send's wait in
//! the kernel) while it holds the socket, and `close` hands the socket back with the timeout it had.

use std::time::Duration;

use anyhow::Context;
use rustix::net::sockopt::{Timeout, set_socket_timeout, socket_timeout};
use zcnet::tx::vsock::{VMADDR_CID_LOCAL, VsockSocket, VsockType};
use zcnet::tx::{Mode, SenderConfig, VsockSender};

use crate::outcome::Outcome;
use crate::vsock::{RECEIVER_BUFFER, Receiver, WAIT};

/// With the user's own 2.5 s (and, in a second run, none): 1 s while wrapped, the user's after close.
pub fn restored_on_close(outcome: &mut Outcome) -> anyhow::Result<()> {
    for own in [Some(Duration::from_millis(2500)), None] {
        let message = 4096;
        let receiver =
            Receiver::start(VsockType::Seqpacket, message as u64, Some(RECEIVER_BUFFER))?;
        let socket = VsockSocket::connect(VsockType::Seqpacket, VMADDR_CID_LOCAL, receiver.port)
            .context("connect")?;
        set_socket_timeout(&socket, Timeout::Send, own)?;
        let mut config = SenderConfig::with_mode(Mode::Copy);
        config.send_timeout = Some(Duration::from_secs(1));
        let mut tx = VsockSender::new(socket, config);
        let wrapped = socket_timeout(tx.get_ref(), Timeout::Send)?;
        let sent = tx.send(vec![7u8; message]);
        let socket = tx.close(WAIT)?;
        let after = socket_timeout(&socket, Timeout::Send)?;
        drop(socket);
        let got = receiver.finish()?;
        let ok = sent.is_ok()
            && got.bytes == message as u64
            && wrapped == Some(Duration::from_secs(1))
            && after == own;
        let what = format!(
            "own SO_SNDTIMEO {own:?}: {wrapped:?} while wrapped (send_timeout 1 s), {after:?} after \
             close; send {:?}, {} bytes arrived",
            sent.map_err(|e| e.to_string()),
            got.bytes
        );
        let name = match own {
            Some(_) => "seqpacket-timeout-restored",
            None => "seqpacket-no-timeout-restored",
        };
        outcome.check(name, ok, &what);
    }
    Ok(())
}
