//! (being written)

/// (being written)
#[derive(Debug, clap::Subcommand)]
pub enum XdpCommand {
    /// (being written)
    Rxdrop,
}

/// (being written)
pub fn run(_cmd: XdpCommand) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
