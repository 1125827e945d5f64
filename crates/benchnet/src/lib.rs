//! Throwaway networks for zcnet's benchmarks (the `zcnet bench` commands) and its tests.
//!
//! Everything this crate creates is named with a `zc` prefix and the creating process's pid
//! (`zc4242-1a`), lives inside network namespaces of its own, and is removed when its owner is dropped,
//! while a panic unwinds, or when the process receives SIGINT/SIGTERM. Whatever a killed process left
//! behind is removed by [`sweep`], which runs before the first namespace of every process is created.
//! Nothing is ever attached to an interface of the host's own namespace.
//!
//! It also holds what a benchmark on such a network needs: UDP frame builders ([`frame`]), CPU
//! placement ([`cpu`]) and the termination flag that Ctrl-C sets ([`termination_flag`]). The signal
//! handlers hold this crate's only `unsafe` code. Creating namespaces needs root (CAP_SYS_ADMIN,
//! CAP_NET_ADMIN, CAP_NET_RAW). What only tests need (skipping without privileges, locked-memory
//! turns) is the `testnet` crate's.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

mod command;
pub mod cpu;
pub mod frame;
mod netns;
mod signals;
mod sweep;
mod termination;
mod veth;

pub use command::run_checked;
pub use netns::Netns;
pub use sweep::sweep;
pub use termination::termination_flag;
pub use veth::{Offloads, VethConfig, VethPair};
