//! The io_uring zero-copy receive path of a [`Receiver`](super::Receiver): a multishot `RECV_ZC` on
//! the stream, chunks borrowed from the registered area, each given back through the refill ring
//! when dropped.
//!
//! Kernel behaviour relied on (io_uring/zcrx.c, io_uring/net.c; details in the crate's `sys::zcrx`):
//! - each receive completion hands user space one reference to a buffer of the area; one refill
//!   entry with the completion's offset gives it back (the kernel ignores a second return of the
//!   same reference rather than corrupting its count, but zcnet never sends one: a chunk returns
//!   its buffer once, in `Drop`);
//! - when the area has no free buffer the receive ends with `-ENOMEM` and the bytes stay queued on
//!   the socket: given the buffers back (and, device-less, flushed), a new receive continues the
//!   stream where it stopped;
//! - when the completion queue has no room for a receive's next completion the receive ends with
//!   `-ENOSPC` after the completions it posted, and the bytes it could not post stay queued on the
//!   socket: once those completions are taken, a new receive continues the stream (an area of more
//!   buffers than the queue has entries fills it when the sender is ahead: a 4 MiB area of 4 KiB
//!   segments posts up to 1024);
//! - a device-less instance takes refill entries back only on `ZCRX_CTRL_FLUSH_RQ`; one bound to a
//!   queue takes them when its page pool refills;
//! - the copy event (7.2) fires once per arm, and the kernel's statistics count every byte it copied
//!   into the area instead of the NIC writing it there.

use std::io;
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::AsFd;

use super::{RxError, RxOp, RxStats, ZcrxBind, ZcrxConfig, ZcrxGrant, ZcrxRefusal};
use crate::sys::tcp_zc;
use crate::sys::xdp::interface_index;
use crate::sys::zcrx::{
    self, Bind, Completion, EventLayout, QueueLayout, Setup, Stage, ZCRX_FEATURE_EVENT,
    ZCRX_REG_NODEV, ZcrxEvent, ZcrxQueue,
};

/// Names a refused set-up step's errno, telling with the kernel's own answers why.
fn refusal_of_setup(stage: Stage, errno: i32, no_device: bool) -> ZcrxRefusal {
    match (stage, errno) {
        (_, libc::ENOMEM) => ZcrxRefusal::NoMemory,
        (_, libc::EPERM) => ZcrxRefusal::NotPermitted,
        // A kernel without IORING_OP_RECV_ZC refuses what it does not know anywhere in the set-up:
        // the registration (opcode 32), or already the restriction of the ring to it.
        (_, libc::EINVAL) if !zcrx::recv_zc_supported() => ZcrxRefusal::KernelTooOld,
        (Stage::Register, libc::EINVAL)
            if no_device
                && zcrx::query_zcrx()
                    .ok()
                    .flatten()
                    .is_none_or(|q| q.register_flags & u64::from(ZCRX_REG_NODEV) == 0) =>
        {
            ZcrxRefusal::NoDeviceless
        }
        (_, libc::EINVAL) => ZcrxRefusal::Invalid,
        (_, libc::EOPNOTSUPP) => ZcrxRefusal::DeviceUnsupported,
        (_, libc::ENODEV) => ZcrxRefusal::NoSuchDevice,
        (_, libc::EBUSY | libc::EEXIST) => ZcrxRefusal::QueueBusy,
        _ => ZcrxRefusal::Other,
    }
}

/// The error of a refused set-up step, named with [`refusal_of_setup`].
fn setup_error(stage: Stage, e: io::Error, no_device: bool) -> RxError {
    let refusal = refusal_of_setup(stage, e.raw_os_error().unwrap_or(0), no_device);
    RxError::zcrx(RxOp::ZcrxSetup, e, refusal)
}

/// How to set up the instance `config` describes, and whether it is device-less.
fn setup_of(config: &ZcrxConfig) -> Result<(Setup, bool), RxError> {
    let (bind, no_device) = match &config.bind {
        ZcrxBind::Queue { interface, queue } => {
            let ifindex = interface_index(interface)
                .map_err(|e| RxError::zcrx(RxOp::ZcrxSetup, e, ZcrxRefusal::NoSuchDevice))?;
            (
                Bind::Queue {
                    ifindex,
                    queue: *queue,
                },
                false,
            )
        }
        ZcrxBind::NoDevice => (Bind::NoDevice, true),
    };
    let query = zcrx::query_zcrx().ok().flatten();
    let events = (config.events && query.is_some_and(|q| q.features & ZCRX_FEATURE_EVENT != 0))
        .then(EventLayout::from_kernel)
        .and_then(Result::ok);
    let setup = Setup {
        bind,
        area_len: config.area_len,
        huge_pages: config.huge_pages,
        rx_buf_len: config.rx_buf_len.unwrap_or(0),
        refill_entries: config.refill_entries,
        ring_entries: 64,
        events,
    };
    Ok((setup, no_device))
}

/// Registers the instance `config` describes on `ring`, another process's disabled zcrx ring (a
/// broker's worker's), with its memory in a file that process maps ([`ZcrxGrant`]).
pub(crate) fn register_for(
    ring: std::os::fd::BorrowedFd<'_>,
    config: &ZcrxConfig,
) -> Result<(std::os::fd::OwnedFd, QueueLayout), RxError> {
    let (setup, no_device) = setup_of(config)?;
    ZcrxQueue::register_for(ring, &setup).map_err(|(stage, e)| setup_error(stage, e, no_device))
}

/// What the zcrx path produced.
pub(super) enum ZStep {
    /// Bytes of the area.
    Data(Range<usize>),
    /// The end of the stream.
    End,
}

/// Consecutive `-ENOMEM` ends without a byte between them after which the area counts as too small
/// for what the kernel holds back (each retry first gives every buffer back).
const MAX_DRY_RETRIES: u32 = 64;

/// The zcrx state of a receiver.
#[derive(Debug)]
pub(super) struct ZcrxPath {
    queue: ZcrxQueue,
    no_device: bool,
    armed: bool,
    ended: bool,
    /// A receive completion taken by [`ZcrxPath::ready`] and not handed out yet.
    pending: Option<Completion>,
    /// Buffers given back while the refill ring was full, in order, written before any new one.
    unreturned: Vec<(u64, u32)>,
    /// Refill entries written since the last flush (device-less).
    unflushed: u32,
    /// Flush once this many entries wait (device-less).
    flush_every: u32,
    dry_retries: u32,
    /// The broker connection of a granted instance: held as long as the instance is used.
    _broker: Option<std::os::fd::OwnedFd>,
}

impl ZcrxPath {
    pub(super) fn new(config: &ZcrxConfig) -> Result<ZcrxPath, RxError> {
        let (setup, no_device) = setup_of(config)?;
        let queue =
            ZcrxQueue::new(&setup).map_err(|(stage, e)| setup_error(stage, e, no_device))?;
        let refill = config.refill_entries.max(1).next_power_of_two();
        Ok(ZcrxPath::over(queue, no_device, refill, None))
    }

    /// The path over an instance a broker set up: its ring is enabled here, so the calling thread
    /// is its issuer.
    pub(super) fn granted(grant: ZcrxGrant) -> Result<ZcrxPath, RxError> {
        let ZcrxGrant {
            ring,
            memory,
            layout,
            bind,
            connection,
        } = grant;
        let queue = ZcrxQueue::adopt(ring, memory, &layout).map_err(|e| {
            let refusal = match e.raw_os_error() {
                Some(libc::ENOMEM) => ZcrxRefusal::NoMemory,
                Some(libc::EINVAL) => ZcrxRefusal::Invalid,
                _ => ZcrxRefusal::Other,
            };
            RxError::zcrx(RxOp::ZcrxSetup, e, refusal)
        })?;
        let no_device = bind == ZcrxBind::NoDevice;
        Ok(ZcrxPath::over(
            queue,
            no_device,
            layout.refill_entries,
            Some(connection),
        ))
    }

    fn over(
        queue: ZcrxQueue,
        no_device: bool,
        refill: u32,
        broker: Option<std::os::fd::OwnedFd>,
    ) -> ZcrxPath {
        let buffers = (queue.area_len() / queue.rx_buf_len().max(1) as usize).max(2) as u32;
        ZcrxPath {
            queue,
            no_device,
            armed: false,
            ended: false,
            pending: None,
            unreturned: Vec::new(),
            unflushed: 0,
            flush_every: (buffers / 2).min(refill / 2).max(1),
            dry_retries: 0,
            _broker: broker,
        }
    }

    /// The area's bytes of a chunk it handed out.
    pub(super) fn bytes(&self, range: Range<usize>) -> &[u8] {
        self.queue.area_bytes(range)
    }

    /// Gives a chunk's buffer back (called once, when the chunk is dropped).
    pub(super) fn give_back(&mut self, range: Range<usize>) {
        let off = self.queue.area_token() | range.start as u64;
        self.unreturned.push((off, range.len() as u32));
        self.return_buffers();
    }

    /// Writes the buffers waiting to go back into the refill ring, in order, and publishes them; a
    /// device-less instance flushes when enough wait or the ring is full. What does not fit stays
    /// for the next call: no buffer is lost.
    fn return_buffers(&mut self) {
        let mut written = 0;
        for &(off, len) in &self.unreturned {
            if !self.queue.refill(off, len) {
                break;
            }
            written += 1;
        }
        self.unreturned.drain(..written);
        if written > 0 {
            self.queue.publish_refills();
            self.unflushed += written as u32;
        }
        if self.no_device && (self.unflushed >= self.flush_every || !self.unreturned.is_empty()) {
            self.flush_refills();
        }
    }

    fn flush_refills(&mut self) {
        // A failed flush leaves the entries published for the next one: nothing is lost.
        if self.queue.flush().is_ok() {
            self.unflushed = 0;
        }
    }

    /// The next piece of the stream.
    pub(super) fn next(
        &mut self,
        stream: &TcpStream,
        stats: &mut RxStats,
    ) -> Result<ZStep, RxError> {
        loop {
            if self.ended {
                return Ok(ZStep::End);
            }
            if !self.unreturned.is_empty() {
                self.return_buffers();
            }
            self.arm(stream, stats)?;
            let Some(completion) = self.pending.take().or_else(|| self.queue.next_completion())
            else {
                self.wait(stream, stats)?;
                continue;
            };
            match completion {
                Completion::Event { kind } => self.on_event(kind, stats),
                Completion::Recv { res, off, more } => {
                    if !more {
                        self.armed = false;
                    }
                    if let Some(step) = self.on_receive(res, off, stats)? {
                        return Ok(step);
                    }
                }
            }
        }
    }

    fn arm(&mut self, stream: &TcpStream, stats: &mut RxStats) -> Result<(), RxError> {
        if !self.armed && !self.ended {
            self.queue
                .arm_recv(stream.as_fd())
                .map_err(|e| RxError::new(RxOp::ZcrxReceive, e))?;
            self.armed = true;
            stats.zcrx_arms += 1;
        }
        Ok(())
    }

    /// Whether [`ZcrxPath::next`] returns without waiting: it runs the ring's deferred work
    /// without waiting, handles events and exhausted areas, and keeps the first receive
    /// completion for `next`. Taking nothing from the stream, it may be abandoned at any point.
    #[cfg(feature = "tokio")]
    pub(super) fn ready(
        &mut self,
        stream: &TcpStream,
        stats: &mut RxStats,
    ) -> Result<bool, RxError> {
        loop {
            if self.ended || self.pending.is_some() {
                return Ok(true);
            }
            if !self.unreturned.is_empty() {
                self.return_buffers();
            }
            self.arm(stream, stats)?;
            let completion = match self.queue.next_completion() {
                Some(c) => c,
                None => {
                    self.queue
                        .enter(0)
                        .map_err(|e| RxError::new(RxOp::ZcrxReceive, e))?;
                    match self.queue.next_completion() {
                        Some(c) => c,
                        None => return Ok(false),
                    }
                }
            };
            match completion {
                Completion::Event { kind } => self.on_event(kind, stats),
                Completion::Recv { res, more, .. }
                    if res == -libc::ENOMEM || res == -libc::ENOSPC =>
                {
                    if !more {
                        self.armed = false;
                    }
                    self.on_receive(res, 0, stats)?;
                }
                receive => self.pending = Some(receive),
            }
        }
    }

    /// An eventfd the kernel signals when the ring has work for [`ZcrxPath::ready`].
    #[cfg(feature = "tokio")]
    pub(super) fn eventfd(&mut self) -> io::Result<std::os::fd::OwnedFd> {
        self.queue.register_eventfd()
    }

    fn on_receive(
        &mut self,
        res: i32,
        off: u64,
        stats: &mut RxStats,
    ) -> Result<Option<ZStep>, RxError> {
        match res {
            0 => {
                self.ended = true;
                self.read_kernel_stats(stats);
                Ok(Some(ZStep::End))
            }
            len if len > 0 => {
                let range = zcrx::decode_completion(
                    len,
                    off,
                    self.queue.area_token(),
                    self.queue.area_len(),
                )
                .ok_or_else(|| {
                    RxError::new(
                        RxOp::ZcrxReceive,
                        io::Error::other(format!(
                            "completion of {len} bytes at {off:#x} lies outside the area"
                        )),
                    )
                })?;
                self.dry_retries = 0;
                stats.zcrx_bytes += range.len() as u64;
                self.read_kernel_stats(stats);
                Ok(Some(ZStep::Data(range)))
            }
            e if e == -libc::ENOMEM => {
                // The area ran dry; every chunk handed out is back (a chunk borrows the receiver),
                // so flushing frees the area and a new receive continues the stream.
                stats.zcrx_exhausted += 1;
                self.dry_retries += 1;
                if self.dry_retries > MAX_DRY_RETRIES {
                    return Err(RxError::new(
                        RxOp::ZcrxReceive,
                        io::Error::other(format!(
                            "the area of {} bytes stayed exhausted through {MAX_DRY_RETRIES} \
                             retries with every buffer given back",
                            self.queue.area_len()
                        )),
                    ));
                }
                self.return_buffers();
                if self.unflushed > 0 || self.no_device {
                    self.flush_refills();
                }
                Ok(None)
            }
            e if e == -libc::ENOSPC => {
                // The completion queue was full: every completion before this one is taken, and
                // what the kernel could not post is still on the socket for a new receive.
                Ok(None)
            }
            e => {
                let errno = -e;
                let refusal = match errno {
                    libc::EPROTONOSUPPORT => ZcrxRefusal::NotTcp,
                    libc::EOPNOTSUPP => ZcrxRefusal::DeviceUnsupported,
                    _ => ZcrxRefusal::Other,
                };
                self.ended = matches!(errno, libc::EPROTONOSUPPORT | libc::EOPNOTSUPP);
                Err(RxError::zcrx(
                    RxOp::ZcrxReceive,
                    io::Error::from_raw_os_error(errno),
                    refusal,
                ))
            }
        }
    }

    fn on_event(&mut self, kind: i32, stats: &mut RxStats) {
        let Some(event) = self.queue.events().and_then(|l| l.event(kind)) else {
            return;
        };
        count_event(stats, event);
        // Re-armed at once: the next one fires on the next occurrence. A failed re-arm only
        // leaves that event silent; the statistics still count.
        if self.queue.arm_event(event).is_err() {
            stats.zcrx_rearm_failures += 1;
        }
        self.read_kernel_stats(stats);
    }

    fn read_kernel_stats(&self, stats: &mut RxStats) {
        match self.queue.copy_stats() {
            Some((count, bytes)) => {
                stats.zcrx_copy_count = count;
                stats.zcrx_copied_bytes = bytes;
            }
            // Device-less without statistics: the kernel copies every byte by definition.
            None if self.no_device => stats.zcrx_copied_bytes = stats.zcrx_bytes,
            None => {}
        }
    }

    /// Waits for a completion, or says `EAGAIN` on a non-blocking stream.
    fn wait(&mut self, stream: &TcpStream, stats: &mut RxStats) -> Result<(), RxError> {
        let nonblocking =
            tcp_zc::is_nonblocking(stream.as_fd()).map_err(|e| RxError::new(RxOp::Poll, e))?;
        if nonblocking {
            self.queue
                .enter(0)
                .map_err(|e| RxError::new(RxOp::ZcrxReceive, e))?;
            if self.queue.has_completion() {
                return Ok(());
            }
            return Err(RxError::new(
                RxOp::ZcrxReceive,
                io::Error::from_raw_os_error(libc::EAGAIN),
            ));
        }
        stats.polls += 1;
        self.queue
            .enter(1)
            .map_err(|e| RxError::new(RxOp::ZcrxReceive, e))
    }
}

/// Counts an event the kernel posted.
fn count_event(stats: &mut RxStats, event: ZcrxEvent) {
    match event {
        ZcrxEvent::Copy => stats.zcrx_copy_events += 1,
        ZcrxEvent::AllocFail => stats.zcrx_alloc_failures += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_failure_event_is_counted_apart_from_copies() {
        // ALLOC_FAIL comes only from a NIC queue's page pool, so it is synthesised here.
        let mut stats = RxStats::default();
        count_event(&mut stats, ZcrxEvent::AllocFail);
        count_event(&mut stats, ZcrxEvent::AllocFail);
        count_event(&mut stats, ZcrxEvent::Copy);
        assert_eq!((stats.zcrx_alloc_failures, stats.zcrx_copy_events), (2, 1));
        assert_eq!(stats.bytes(), 0);
    }

    #[test]
    fn refusals_follow_the_errno_and_the_step() {
        for (stage, errno, no_device, refusal) in [
            (
                Stage::Register,
                libc::EPERM,
                true,
                ZcrxRefusal::NotPermitted,
            ),
            (Stage::Area, libc::ENOMEM, true, ZcrxRefusal::NoMemory),
            (
                Stage::Register,
                libc::EOPNOTSUPP,
                false,
                ZcrxRefusal::DeviceUnsupported,
            ),
            (Stage::Register, libc::EBUSY, false, ZcrxRefusal::QueueBusy),
            (
                Stage::Register,
                libc::ENODEV,
                false,
                ZcrxRefusal::NoSuchDevice,
            ),
            (Stage::Ring, libc::EINVAL, false, ZcrxRefusal::Invalid),
        ] {
            assert_eq!(
                refusal_of_setup(stage, errno, no_device),
                refusal,
                "{errno}"
            );
        }
    }
}
