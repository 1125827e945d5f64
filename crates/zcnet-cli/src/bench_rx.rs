//! (being written)

/// (being written)
#[derive(Debug, clap::Args)]
pub struct RxArgs {}

/// (being written)
pub fn run(_args: RxArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
