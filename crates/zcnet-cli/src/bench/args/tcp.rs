//! Parse: the flags of `zcnet bench tcp`.

use crate::bench::args::Common;
use crate::bench::args::apart::{ServeFlags, TcpTimeouts};

/// Options of `zcnet bench tcp`.
#[derive(Debug, clap::Args)]
pub(crate) struct TcpArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    #[command(flatten)]
    pub(crate) serve: ServeFlags,
    #[command(flatten)]
    pub(crate) timeouts: TcpTimeouts,
}
