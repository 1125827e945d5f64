//! Parse: the flags that `zcnet bench tcp`, `udp` and `rx` share for running their two sides apart (`--listen`
//! on one host, `--connect` on the other): how long the receiver listens, whether it verifies, and
//! whether the sender opens with zcnet's header. A flag of one side given to the other is a usage
//! error (clap drops a `requires` when a flag that conflicts with the required one is present, so each
//! flag also names the other side's flag as a conflict).

use anyhow::Result;

use crate::flags;

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

/// `--max-streams` and `--idle-timeout` of `bench tcp|rx --listen`.
#[derive(Debug, clap::Args)]
pub struct ServeFlags {
    /// With --listen: streams received at once; a connection beyond them is closed at once and
    /// reported as refused.
    #[arg(long, default_value_t = 16, value_parser = flags::count, requires = "listen", conflicts_with = "connect")]
    pub max_streams: u32,
    /// With --listen: seconds a stream may bring no bytes before it is ended and reported as idle (0:
    /// never; TCP keepalive still ends a stream whose peer vanished).
    #[arg(long, default_value_t = 30.0, value_parser = flags::interval, requires = "listen", conflicts_with = "connect")]
    pub idle_timeout: f64,
}

/// Most `--max-streams`: each stream takes a thread, two descriptors and its receive buffer or window.
const MAX_STREAMS: u64 = 1024;

impl ServeFlags {
    /// Fails with a usage error when a flag is out of its range.
    pub fn check(&self) -> Result<()> {
        flags::at_most(
            "--max-streams",
            u64::from(self.max_streams),
            MAX_STREAMS,
            "a thread, two descriptors and a receive buffer each",
        )
    }
}

/// `--connect-timeout` and `--send-timeout` of the TCP senders (not with `--listen`).
#[derive(Debug, Clone, clap::Args)]
pub struct TcpTimeouts {
    /// Seconds a connect may take before the run fails (a SYN that a firewall drops is otherwise
    /// retried for about two minutes).
    #[arg(long, default_value_t = 10.0, value_parser = flags::duration, conflicts_with = "listen")]
    pub connect_timeout: f64,
    /// Seconds a sender may go without the peer acknowledging anything before the run ends, saying
    /// what was seen (a zero window: the peer does not read; no ACK: a black hole).
    #[arg(long, default_value_t = 10.0, value_parser = flags::duration, conflicts_with = "listen")]
    pub send_timeout: f64,
}

impl TcpTimeouts {
    /// The flags to pass on to a sender process of this binary.
    pub fn args(&self) -> [String; 4] {
        [
            "--connect-timeout".into(),
            self.connect_timeout.to_string(),
            "--send-timeout".into(),
            self.send_timeout.to_string(),
        ]
    }
}
