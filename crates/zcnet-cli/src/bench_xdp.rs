//! (being written)

/// (being written)
#[derive(Debug, clap::Args)]
pub struct BenchXdpArgs {}

/// (being written)
pub fn run(_args: BenchXdpArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
