//! (being written)

/// (being written)
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {}

/// (being written)
pub fn run(_args: ProbeArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
