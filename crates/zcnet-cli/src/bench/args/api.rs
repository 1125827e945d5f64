//! Parse: the values of `zcnet bench tcp|udp --api`, the send APIs a bench compares side by side.
//! The senders they name are built by [`crate::bench::run::sender`].

/// Which kernel interface sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    /// `sendmsg(MSG_ZEROCOPY)` with completions on the error queue.
    Sendmsg,
    /// io_uring `IORING_OP_SEND_ZC` from registered buffers, notifications as CQEs.
    #[value(name = "io_uring")]
    IoUring,
    /// `sendmmsg(2)`, `--batch` datagrams a call, always copied (`bench udp --mode copy` only).
    // No socket sender: see crate::bench::run::mmsg.
    Sendmmsg,
    /// An AF_XDP UDP endpoint on the sending veth end (`bench udp --sink xdp-drop` only).
    // No socket sender: see crate::bench::run::af_xdp.
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
