//! The report of a bench's rows: the table or JSON with totals over rounds ([`summary`]), why auto
//! chose as it did ([`why`]), per-send latency with `--latency` ([`latency`]), and for a sweep its
//! crossover ([`crossover`], [`sweep`]) and picture ([`svg`]).

pub(crate) mod crossover;
pub(crate) mod latency;
pub(crate) mod summary;
pub(crate) mod svg;
pub(crate) mod sweep;
pub(crate) mod why;
