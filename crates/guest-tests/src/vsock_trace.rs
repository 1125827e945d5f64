//! The kernel's own account of the vsock packets it builds: the `virtio_transport_alloc_pkt`
//! tracepoint says of each whether its payload stays in the sender's pages (`zcopy`) or was
//! copied, whatever the completion later reports.

use std::path::Path;

use anyhow::Context;

const TRACING: &str = "/sys/kernel/tracing";
const EVENT: &str = "events/vsock/virtio_transport_alloc_pkt/enable";

/// Data packets built while the trace was on: taken from the sender's pages, and copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Packets {
    pub(crate) zero_copied: u64,
    pub(crate) copied: u64,
}

/// The tracepoint, on from [`PacketTrace::start`] to [`PacketTrace::finish`].
pub(crate) struct PacketTrace;

impl PacketTrace {
    /// Mounts tracefs when it is not, empties the trace buffer and turns the event on.
    pub(crate) fn start() -> anyhow::Result<PacketTrace> {
        let root = Path::new(TRACING);
        if !root.join("trace").exists() {
            let status = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACING])
                .status()
                .context("mount tracefs")?;
            anyhow::ensure!(status.success(), "mount -t tracefs: {status}");
        }
        std::fs::write(root.join("trace"), "").context("empty the trace buffer")?;
        std::fs::write(root.join(EVENT), "1").context("turn virtio_transport_alloc_pkt on")?;
        Ok(PacketTrace)
    }

    /// Turns the event off and counts the data packets (`op=RW`, a length above 0) it recorded.
    pub(crate) fn finish(self) -> anyhow::Result<Packets> {
        let root = Path::new(TRACING);
        std::fs::write(root.join(EVENT), "0").context("turn virtio_transport_alloc_pkt off")?;
        let text = std::fs::read_to_string(root.join("trace")).context("read the trace")?;
        let mut packets = Packets::default();
        for line in text
            .lines()
            .filter(|l| l.contains("op=RW") && !l.contains(" len=0 "))
        {
            match line.split("zcopy=").nth(1).map(str::trim) {
                Some("true" | "1") => packets.zero_copied += 1,
                Some("false" | "0") => packets.copied += 1,
                other => anyhow::bail!("a trace line without zcopy ({other:?}): {line}"),
            }
        }
        Ok(packets)
    }
}
