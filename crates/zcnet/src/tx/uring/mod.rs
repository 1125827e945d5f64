//! The io_uring submission path of [`crate::tx::Sender`] ([`crate::tx::SendPath::IoUring`]):
//! zero-copy send with `IORING_OP_SEND_ZC` over TCP and UDP (optionally with GSO).
//!
//! The path owns a connected socket and a ring. A send takes ownership of a byte container
//! ([`SendBuf`](crate::tx::SendBuf)) and queues it;
//! queued sends are submitted in batches as one linked chain, so a stream's bytes go out in order. On
//! a stream, consecutive buffers of a batch go out as one request up to 256 KiB
//! (`IORING_OP_SENDMSG_ZC` with an iovec per buffer): one result and one notification for
//! many sends, which is what makes 4 KiB sends cheap, and four 64 KiB ones share one too; on a
//! datagram socket each buffer is one `IORING_OP_SEND_ZC` (one datagram).
//! Each zero-copy request takes an id in the same [`CompletionTracker`](crate::tx::CompletionTracker)
//! the MSG_ZEROCOPY path uses, and its buffer stays lent until the request's notification CQE — the
//! io_uring counterpart of an error-queue completion — is turned into a one-id completion range. The
//! same [`Policy`](crate::tx::Policy) decides per send, and the same [`TxStats`](crate::tx::TxStats)
//! count every decision, with `IORING_SEND_ZC_REPORT_USAGE` telling copied from zero-copied ids.
//!
//! A [`BufferPool`](crate::tx::BufferPool) registered with [`crate::tx::Sender::register_pool`] is pinned
//! once (`IORING_REGISTER_BUFFERS`, the pool's mapping as buffer 0) and its buffers go out as fixed
//! sends (vectored ones from kernel 6.15; before, they fall back to unregistered); when `RLIMIT_MEMLOCK`
//! is too small the registration fails with a [`Fallback`](crate::Fallback) naming the limit, and the
//! sender goes on with unregistered buffers, copying the sends the kernel refuses (`ENOMEM`). A pool
//! on huge pages is declined (the kernel charges a fixed send from a huge page to the socket from
//! the page's start) and sent unregistered.
//!
//! On TCP, while the peer keeps up, the path hands the socket no more than its congestion window
//! lets it send at once: the next chain is cut to the room the bytes lent leave in the window
//! (`tcpi_snd_cwnd` × `tcpi_snd_mss`, read only when the last value read would cut the chain),
//! or waits when there is none, until notifications bring the lent bytes down or the window grows
//! ([`TxStats::window_waits`](crate::tx::TxStats::window_waits) counts the chains held). What a
//! socket holds beyond its window is sent later by whichever CPU handles the ACK that opens it,
//! and over loopback that CPU's segments arrive out of order beside the sending thread's: with a
//! full send buffer, zcnet and `io_uring_zerocopy_tx` alike met 142-297 `TCPSACKReorder` events
//! and 38 spurious retransmissions in 2 s (`nstat`), and none with the window kept. 65435-byte
//! sends rose from 0.96x the selftest's rate to 1.09x-1.10x from one frozen buffer and from
//! 0.82x-0.87x to 1.00x-1.07x from a 4 MiB pool, whose buffers lent also stay in the CPU's cache
//! (docs/measurements.md, "Side by side with the kernel's tools"). The window grows with the
//! path's bandwidth-delay product, so a long path is not held to loopback's. Where the peer's
//! receive window is the smaller (`tcpi_snd_wnd`: a peer reading slowly, or not yet), nothing is
//! held: the socket's send buffer holds what the peer has not taken, as for any writer.
//!
//! On TCP a request ends a record (`MSG_EOR`) once a MiB has been submitted since the last one
//! while a MiB or more is lent: the kernel (6.10 and later) stacks the notification of a request
//! whose bytes join an unsent segment of the previous one onto that request's, and without record
//! ends a sender keeping the socket busy would get its buffers back only when the socket drains —
//! a pool would run dry and the socket empty before each refill. While less is lent, notifications
//! are coming back (over loopback delivery copies the data and frees the pages at once), no stacked
//! run can hold more, and no record is ended: each end costs (under bbr over loopback on a VM, a
//! record end every MiB cost 6-9% of the rate, one on every request half of it).
//!
//! On TCP the path turns Nagle's algorithm off (`TCP_NODELAY`) while it owns the socket, and back
//! on when it hands the socket back if it was on. The path gathers small sends into requests
//! itself, so Nagle's algorithm has nothing to add; what it did instead was hold the short last
//! segment of a request (a 65435-byte request is one segment 48 bytes short of loopback's MSS, a
//! gathered 64 KiB one leaves 53 bytes over) until an ACK came, or until the next request's bytes
//! joined it and stacked their notifications. Over loopback under bbr on a VM, 65435-byte sends
//! ran at a median 0.86x-0.88x `io_uring_zerocopy_tx`'s rate per paired trial with it on and
//! 0.93x-1.00x with it off, 4096-byte ones at 1.18x with it on and 1.29x off (docs/measurements.md,
//! "Side by side with the kernel's tools"). With it off, gathering pays under bbr too: requests of
//! up to 256 KiB instead of one per 64 KiB send took those to 1.05x and 1.44x (see
//! `plan::GATHER_BYTES`).
//! A chain short of a full one (submitted because the caller waits: a dry pool, a flush) ends its
//! last send apart, in a request of its own: a request's one notification comes once its last
//! segment is acknowledged, and a receiver may hold the ACK of a lone short segment until its
//! delayed-ACK timer fires, so a small pool gathered whole got its buffers back 40 ms late each
//! time it ran dry (docs/measurements.md, "io_uring: small pools and delayed ACKs").
//!
//! A zero-copy request charges the process's locked-memory budget
//! ([`MemlockBudget`](crate::tx::MemlockBudget)) with its pages, as the kernel charges the user,
//! and is copied when they do not fit; a fixed send, from registered pages, charges nothing.
//!
//! io_uring finishes a request's work (a retried send, a notification) on the thread that submitted
//! it, and the ring is set up with `IORING_SETUP_COOP_TASKRUN`, so that this does not interrupt that
//! thread while it runs: it happens at its next system call or timer tick (a sleeping thread is
//! woken for it). A sender moved to another thread with requests in flight therefore sees their
//! completions once the submitting thread enters the kernel.
//!
//! A request carries at most 1 GiB and 1024 buffers, which the kernel takes whole: a longer stream
//! buffer goes out in several requests, in order, and a longer datagram is refused
//! ([`crate::tx::TxError::TooLong`]) and handed back. When a request fails, nothing queued after it is sent,
//! and the error hands back every buffer not wholly sent, in order ([`crate::tx::TxError::unsent`]).
//!
//! On an AF_VSOCK stream the virtio transport copies a request the peer lacks credit for at its
//! first try, and each later piece of it (`virtio_transport_can_zcopy` refuses an iterator longer
//! than the credit or already part sent), yet attaches the request's notification to those copied
//! packets too, and io_uring's usage report flags a copy only when no packet went zero-copy or the
//! stack copied one later (`skb_copy_ubufs`): such a request counts in
//! [`TxStats::zc_ids`](crate::tx::TxStats::zc_ids). The `sendmsg` path reports those copies.
//!
//! Kernel behaviour relied on (see `sys::uring`): two CQEs per zero-copy request, `F_MORE` on
//! failed requests too, `MSG_WAITALL` on streams, `-ECANCELED` for the rest of a broken chain,
//! `MSG_EOR` ending notification stacking, a send cut at `MAX_RW_COUNT` without an error.
//!

mod plan;
mod sender;
mod stamps;

pub(crate) use sender::UringPath;
