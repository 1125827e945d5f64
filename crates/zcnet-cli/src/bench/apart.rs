//! Flags that `zcnet bench tcp`, `udp` and `rx` share for running their two sides apart (`--listen`
//! on one host, `--connect` on the other): how long the receiver listens, whether it verifies, and
//! whether the sender opens with zcnet's header. A flag of one side given to the other is a usage
//! error (clap drops a `requires` when a flag that conflicts with the required one is present, so each
//! flag also names the other side's flag as a conflict).

/// `--once`, `--no-verify` and `--raw` (each bench declares its own `--listen` and `--connect`, which
/// these require or refuse).
#[derive(Debug, clap::Args)]
pub struct ApartFlags {
    /// With --listen: exit after one stream.
    #[arg(long, requires = "listen", conflicts_with = "connect")]
    pub once: bool,
    /// Do not have the receiver check every byte against the pattern (for peak figures; the sender
    /// asks it in its header, so not with --listen).
    #[arg(long, conflicts_with = "listen")]
    pub no_verify: bool,
    /// With --connect: send no zcnet header (for the kernel's tools: `msg_zerocopy -r` for tcp and
    /// udp, `tcp_mmap -s` for rx).
    #[arg(long, requires = "connect", conflicts_with = "listen")]
    pub raw: bool,
}

impl ApartFlags {
    /// Whether a `--listen` receiver stops after the stream it has just reported: with `--once`, or
    /// when Ctrl-C `interrupted` that stream.
    pub fn stop_after(&self, interrupted: bool) -> bool {
        self.once || interrupted
    }
}
