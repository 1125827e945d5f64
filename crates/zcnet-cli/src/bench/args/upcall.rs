//! Parse: the flags of `zcnet bench upcall`.

use crate::ovs::switch::DispatchArg;

/// `--features`: which upcall format the datapath is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FeatureArg {
    /// No OVS_DP_F_UNALIGNED: the kernel copies the packet into a padded upcall.
    Aligned,
    /// OVS_DP_F_UNALIGNED: the kernel attaches the packet with skb_zerocopy().
    Unaligned,
}

impl FeatureArg {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FeatureArg::Aligned => "aligned",
            FeatureArg::Unaligned => "unaligned",
        }
    }
}

/// `--load`: how many distinct flows the offered frames belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LoadArg {
    /// Every frame a new flow: every frame misses.
    Many,
    /// A few flows: after their first misses, frames hit.
    Few,
}

impl LoadArg {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LoadArg::Many => "many",
            LoadArg::Few => "few",
        }
    }
}

/// Arguments of `zcnet bench upcall`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct UpcallArgs {
    /// Upcall formats to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [FeatureArg::Aligned, FeatureArg::Unaligned])]
    pub(crate) features: Vec<FeatureArg>,
    /// Offered loads.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [LoadArg::Many, LoadArg::Few])]
    pub(crate) load: Vec<LoadArg>,
    /// Frame size in bytes (the seed's table used 1200).
    #[arg(long, default_value_t = 1200, value_parser = crate::flags::size)]
    pub(crate) size: usize,
    /// Distinct flows of the `few` load.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) flows: u16,
    /// Upcall dispatch.
    #[arg(long, value_enum, default_value_t = DispatchArg::PerVport)]
    pub(crate) dispatch: DispatchArg,
    /// Seconds per row.
    #[arg(long, default_value_t = 3.0, value_parser = crate::flags::duration)]
    pub(crate) duration: f64,
    /// One JSON object per interval and per row.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds between interval lines (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = crate::flags::interval)]
    pub(crate) interval: f64,
}
