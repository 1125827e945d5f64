//! (being written)

/// (being written)
#[derive(Debug, clap::Args)]
pub struct TcpArgs {}

/// (being written)
pub fn run_tcp(_args: TcpArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}

/// (being written)
#[derive(Debug, clap::Args)]
pub struct UdpArgs {}

/// (being written)
pub fn run_udp(_args: UdpArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
