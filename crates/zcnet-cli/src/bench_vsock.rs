//! (being written)

/// (being written)
#[derive(Debug, clap::Args)]
pub struct VsockArgs {}

/// (being written)
pub fn run(_args: VsockArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
