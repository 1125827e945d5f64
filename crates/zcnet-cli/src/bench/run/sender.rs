//! Run: the sender of an `--api` ([`Api`]): one [`zcnet::tx::Sender`] on its MSG_ZEROCOPY
//! `sendmsg` path or its io_uring `SEND_ZC` path (with the bench's pool registered for fixed sends).
//! Both share the policy, the tracker and the stats, so one row shape serves both. The batched copy
//! sender (`sendmmsg`) and the AF_XDP endpoint have drivers and rows of their own
//! ([`crate::bench::run::mmsg`], [`crate::bench::run::af_xdp`]).

use anyhow::{Result, bail};
use serde_json::Value;
use zcnet::tx::{BufferPool, SendPath, Sender, SenderConfig, ZcSocket};

use crate::bench::args::api::Api;

/// A sender on `api`'s submission path over `socket` with `config` (its policy and send timeout);
/// on io_uring it registers `pool` (a failed registration is reported in the row, not fatal). A
/// sender that could not take the path asked for is an error (the API not measured, and why): a row
/// must measure its API, so the bench does not send another way instead.
pub fn sender<S: ZcSocket>(
    api: Api,
    socket: S,
    config: SenderConfig,
    pool: &BufferPool,
) -> Result<Sender<S>> {
    let path = match api {
        Api::Sendmsg => SendPath::SENDMSG,
        Api::IoUring => SendPath::IO_URING,
        Api::Sendmmsg => bail!("sendmmsg sends batches of copies, not pooled buffers"),
        Api::AfXdp => bail!("af_xdp sends through an AF_XDP UDP endpoint, not a socket"),
    };
    let mut config = config;
    config.path = path;
    let mut tx = Sender::new(socket, config);
    if let Err(why) = tx.path_status() {
        bail!("{} not measured: {why}", api.name());
    }
    if api == Api::IoUring {
        // The reason stays in the sender's registration status, which the row shows.
        let _ = tx.register_pool(pool);
    }
    Ok(tx)
}

/// `true` when `tx` sends zero-copy, else why not.
pub fn zerocopy<S: ZcSocket>(tx: &Sender<S>) -> Value {
    let reason = tx.zerocopy_status().err().map(ToString::to_string);
    reason.map_or(Value::Bool(true), Value::String)
}

/// For io_uring: `true` when the pool is registered (fixed sends), else why not; null for sendmsg,
/// which has no registered buffers.
pub fn registered<S: ZcSocket>(tx: &Sender<S>) -> Value {
    match tx.path() {
        SendPath::IoUring { .. } => tx
            .registration_status()
            .err()
            .map_or(Value::Bool(true), |r| Value::String(r.to_string())),
        _ => Value::Null,
    }
}
