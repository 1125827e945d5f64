//! The send APIs `zcnet bench tcp|udp --api` compares side by side: MSG_ZEROCOPY `sendmsg`
//! ([`zcnet::tx::Sender`]) and io_uring `SEND_ZC` ([`zcnet::uring::UringSender`], with the bench's
//! pool registered for fixed sends). Both share the policy, the tracker and the stats, so one row
//! shape serves both. The batched copy sender (`sendmmsg`) and the AF_XDP endpoint have rows of
//! their own (`crate::bench_send_mmsg`, `crate::bench_send_xdp`).

use std::net::UdpSocket;
use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::Value;
use zcnet::tx::{BufferPool, PooledBuf, Sender, SenderConfig, TxStats, ZcSocket};
use zcnet::uring::{UringConfig, UringSender};

/// Which kernel interface sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    /// `sendmsg(MSG_ZEROCOPY)` with completions on the error queue.
    Sendmsg,
    /// io_uring `IORING_OP_SEND_ZC` from registered buffers, notifications as CQEs.
    #[value(name = "io_uring")]
    IoUring,
    /// `sendmmsg(2)`, `--batch` datagrams a call, always copied (`bench udp --mode copy` only): no
    /// socket sender, see `crate::bench_send_mmsg`.
    Sendmmsg,
    /// `zcnet::xdp::UdpEndpoint` on the sending veth end (`bench udp --sink xdp-drop` only): no
    /// socket sender, see `crate::bench_send_xdp`.
    #[value(name = "af_xdp")]
    AfXdp,
}

impl Api {
    /// The API's name in rows.
    pub fn name(self) -> &'static str {
        match self {
            Api::Sendmsg => "sendmsg",
            Api::IoUring => "io_uring",
            Api::Sendmmsg => "sendmmsg",
            Api::AfXdp => "af_xdp",
        }
    }
}

/// A zero-copy sender of either API.
pub enum ApiSender<S: ZcSocket> {
    /// MSG_ZEROCOPY.
    Sendmsg(Box<Sender<S>>),
    /// io_uring SEND_ZC.
    IoUring(Box<UringSender<S>>),
}

impl<S: ZcSocket> ApiSender<S> {
    /// A sender of `api` over `socket` with `config` (for io_uring: its policy and send timeout); the
    /// io_uring one registers `pool` (a failed registration is reported in the row, not fatal).
    pub fn new(api: Api, socket: S, config: SenderConfig, pool: &BufferPool) -> Result<Self> {
        Ok(match api {
            Api::Sendmsg => ApiSender::Sendmsg(Box::new(Sender::new(socket, config))),
            Api::IoUring => {
                let config = UringConfig {
                    policy: config.policy,
                    send_timeout: config.send_timeout,
                    ..Default::default()
                };
                let mut tx = UringSender::new(socket, config)?;
                // The reason stays in the sender's registration status, which the row shows.
                let _ = tx.register_pool(pool);
                ApiSender::IoUring(Box::new(tx))
            }
            Api::Sendmmsg => bail!("sendmmsg sends batches of copies, not pooled buffers"),
            Api::AfXdp => bail!("af_xdp sends through an AF_XDP UDP endpoint, not a socket"),
        })
    }

    /// Sends one buffer (lent until its completion).
    pub fn send(&mut self, buf: PooledBuf) -> Result<()> {
        match self {
            ApiSender::Sendmsg(tx) => tx.send(buf)?,
            ApiSender::IoUring(tx) => tx.send(buf)?,
        }
        Ok(())
    }

    /// Waits up to `timeout` for completions to release buffers.
    pub fn wait_completions(&mut self, timeout: Duration) -> Result<()> {
        match self {
            ApiSender::Sendmsg(tx) => tx.wait_completions(timeout).map(drop)?,
            ApiSender::IoUring(tx) => tx.wait_completions(timeout).map(drop)?,
        }
        Ok(())
    }

    /// Waits until every buffer is back.
    pub fn flush(&mut self, timeout: Duration) -> Result<()> {
        match self {
            ApiSender::Sendmsg(tx) => tx.flush(timeout)?,
            ApiSender::IoUring(tx) => tx.flush(timeout)?,
        }
        Ok(())
    }

    /// Flushes and returns the socket.
    pub fn close(self, timeout: Duration) -> Result<S> {
        Ok(match self {
            ApiSender::Sendmsg(tx) => tx.close(timeout)?,
            ApiSender::IoUring(tx) => tx.close(timeout)?,
        })
    }

    /// The counters.
    pub fn stats(&self) -> &TxStats {
        match self {
            ApiSender::Sendmsg(tx) => tx.stats(),
            ApiSender::IoUring(tx) => tx.stats(),
        }
    }

    /// `true` when zero-copy is used, else why not.
    pub fn zerocopy(&self) -> Value {
        let reason = match self {
            ApiSender::Sendmsg(tx) => tx.zerocopy_status().err().map(ToString::to_string),
            ApiSender::IoUring(tx) => tx.zerocopy_status().err().map(ToString::to_string),
        };
        reason.map_or(Value::Bool(true), Value::String)
    }

    /// For io_uring: `true` when the pool is registered (fixed sends), else why not; null otherwise.
    pub fn registered(&self) -> Value {
        match self {
            ApiSender::Sendmsg(_) => Value::Null,
            ApiSender::IoUring(tx) => tx
                .registration_status()
                .err()
                .map_or(Value::Bool(true), |r| Value::String(r.to_string())),
        }
    }
}

impl ApiSender<UdpSocket> {
    /// Sets the UDP GSO segment size.
    pub fn set_gso_segment(&mut self, segment: Option<u16>) -> Result<()> {
        match self {
            ApiSender::Sendmsg(tx) => tx.set_gso_segment(segment),
            ApiSender::IoUring(tx) => tx.set_gso_segment(segment)?,
        }
        Ok(())
    }
}
