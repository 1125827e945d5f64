//! Report: what a bench's runs hand over, made into its output and nothing run again — the end of a
//! bench of sends ([`sends`]: the table or JSON with totals over rounds, [`summary`]; per-send
//! [`latency`] with `--latency`; the sum of a run's parallel streams, [`streams`]), and for a sweep
//! its crossover ([`crossover`], [`sweep`]) and picture ([`svg`]), the formats siblings fed the
//! same rows.

pub(crate) mod crossover;
pub(crate) mod latency;
pub(crate) mod rx;
pub(crate) mod sends;
pub(crate) mod streams;
pub(crate) mod summary;
pub(crate) mod svg;
pub(crate) mod sweep;
pub(crate) mod upcall;
pub(crate) mod vsock;
pub(crate) mod xdp;
