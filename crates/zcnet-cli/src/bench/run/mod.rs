//! Run: the runs of each bench, one driver per path, and nothing that formats their report. A
//! bench's driver ([`tcp`], [`udp`], [`rx`], [`vsock`], [`xdp`], [`upcall`]) takes its flags and the
//! plan and hands its rows to the report; the pieces they share are the pooled senders of a bench of
//! sends ([`send`], [`sender`], their words on auto's choice in [`why`], per-send [`latency`]), the
//! order of their runs ([`rounds`]) and their parallel streams ([`streams`]), the other send paths
//! ([`mmsg`], [`af_xdp`]), the receivers on the other side
//! ([`listen`], [`listen_udp`], [`serve`]), the stream header they share ([`wire`]), the watch over a
//! TCP sender ([`watch`]), the network of a one-process bench ([`net`]), the process on its other
//! side ([`child`], [`peer`]), the role this process takes ([`role`]) and the kernel's copies of a
//! bench's payload after its sends ([`copies`]). A `--listen` receiver
//! prints each stream's row as it ends through the shared output ([`crate::report`]): it runs until
//! stopped.

pub(crate) mod af_xdp;
pub(crate) mod child;
pub(crate) mod copies;
pub(crate) mod latency;
pub(crate) mod listen;
pub(crate) mod listen_udp;
pub(crate) mod mmsg;
pub(crate) mod net;
pub(crate) mod peer;
pub(crate) mod role;
pub(crate) mod rounds;
pub(crate) mod rx;
pub(crate) mod send;
pub(crate) mod sender;
pub(crate) mod serve;
pub(crate) mod streams;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod upcall;
pub(crate) mod vsock;
pub(crate) mod watch;
pub(crate) mod why;
pub(crate) mod wire;
pub(crate) mod xdp;

/// Whether this CPU is QEMU's software emulation (TCG names its default CPU models "QEMU …"), where
/// timings say nothing about real hardware.
fn emulated_cpu() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
        info.lines()
            .filter(|l| l.starts_with("model name"))
            .any(|l| l.contains("QEMU"))
    })
}
