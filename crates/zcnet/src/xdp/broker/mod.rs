//! AF_XDP with least privilege: a privileged [`Broker`] sets queues up and hands their descriptors
//! to unprivileged workers ([`BrokerClient`]) over a Unix socket.
//!
//! The broker loads the redirect program, creates each worker's AF_XDP sockets (the queue's socket,
//! which owns the fill and completion rings, and the worker's socket with its rx and tx rings),
//! registers the UMEM on them — a sealed memory file it creates, so that the worker maps the very
//! pages the kernel pinned — binds them to the queue, puts the worker's socket in the XSKMAP, and
//! sends the three descriptors with its reply ([`wire`] describes the protocol). The worker maps
//! the rings and the memory file and runs a [`Socket`](crate::xdp::Socket) as if it had bound it:
//! no capability, and no locked-memory limit, is needed on its side.
//!
//! It also registers zcrx instances (feature `io-uring`) on rings its workers set up, disabled and
//! restricted, and shares each area's memory file; a worker then receives through the instance
//! ([`Receiver::with_zcrx_grant`](crate::rx::Receiver::with_zcrx_grant)) with no capability.
//!
//! Kernel behaviour relied on:
//! - The capability checks of AF_XDP are at `socket(2)` (CAP_NET_RAW); programs, maps and links
//!   need CAP_BPF and CAP_NET_ADMIN. Using a bound socket — mapping its rings, `poll`, `sendto`,
//!   `getsockopt` — checks none (`net/xdp/xsk.c`).
//! - The rings of a bound socket can be mapped, the fill and completion rings through the queue's
//!   socket that set the pool up (kernel 6.4+; `EBUSY` before, which the worker reports).
//! - `XDP_UMEM_REG` pins the pages of the registering process's mapping, charged to it (a broker
//!   run as root has CAP_IPC_LOCK); pages of a memory file (shmem) may be pinned long-term.
//! - A socket is released when its last descriptor closes, everywhere; release takes it out of
//!   every XSKMAP. A worker's sockets are its alone once the broker closed its copies, so its end
//!   frees the queue, and closes its connection, which the broker reads as end of file.
//! - A BPF link detaches its program when its last descriptor closes: the broker's, on any exit.
//! - Registering a zcrx instance needs `CAP_NET_ADMIN` of the registering task, and works on a
//!   ring still disabled (`IORING_SETUP_R_DISABLED`), whose restrictions apply only from its
//!   enabling and whose single issuer is the task that enables it; using the instance checks no
//!   capability. An io_uring descriptor cannot travel with `SCM_RIGHTS` (`EINVAL`, 6.7+): the
//!   broker takes its copy of the worker's ring with `pidfd_getfd`, on the pidfd of the process
//!   that connected (`SO_PEERPIDFD`), and closes it once the instance is registered, so the
//!   instance ends with the worker's ring.

mod client;
mod server;
mod wire;

pub use client::{BrokerClient, BrokerError, QueueRequest};
pub use server::{Broker, BrokerConfig, Event};
pub use wire::Refusal;
