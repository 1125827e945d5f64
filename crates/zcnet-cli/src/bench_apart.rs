//! Flags that `zcnet bench tcp`, `udp` and `rx` share for running their two sides apart (`--listen`
//! on one host, `--connect` on the other): how long the receiver listens, whether it verifies, and
//! whether the sender opens with zcnet's header.

/// `--once`, `--no-verify` and `--raw` (each bench declares its own `--listen` and `--connect`, which
/// these require).
#[derive(Debug, clap::Args)]
pub struct ApartFlags {
    /// With --listen: exit after one stream.
    #[arg(long, requires = "listen")]
    pub once: bool,
    /// Do not have the receiver check every byte against the pattern (for peak figures).
    #[arg(long)]
    pub no_verify: bool,
    /// With --connect: send no zcnet header (for the kernel's tools: `msg_zerocopy -r` for tcp and
    /// udp, `tcp_mmap -s` for rx).
    #[arg(long, requires = "connect")]
    pub raw: bool,
}

impl ApartFlags {
    /// Whether a `--listen` receiver stops after the stream it has just reported: with `--once`, or
    /// when Ctrl-C `interrupted` that stream.
    pub fn stop_after(&self, interrupted: bool) -> bool {
        self.once || interrupted
    }
}
