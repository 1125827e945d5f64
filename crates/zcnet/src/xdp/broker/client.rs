//! The unprivileged side: a worker asking a [`Broker`](crate::xdp::Broker) for a queue and
//! building its [`Umem`] and [`Socket`] from the descriptors it gets.

use std::fmt;
use std::io::{self, Read, Write};
#[cfg(feature = "io-uring")]
use std::os::fd::AsRawFd;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use super::wire::{Grant, REPLY_LEN, Refusal, Reply, Request};
#[cfg(feature = "io-uring")]
use super::wire::{LAYOUT_LEN, ZcrxRequest, decode_layout};
#[cfg(feature = "io-uring")]
use crate::rx::{ZcrxBind, ZcrxConfig, ZcrxGrant};
use crate::sys::unix::{recv_with_fds, sealed_size};
#[cfg(feature = "io-uring")]
use crate::sys::zcrx::restricted_ring;

/// Submission entries of a ring set up for a broker's zcrx instance (as a receiver's own).
#[cfg(feature = "io-uring")]
const ZCRX_RING_ENTRIES: u32 = 64;
use crate::xdp::queue::copy_fallback;
use crate::xdp::umem::Inherited;
use crate::xdp::{BoundMode, Mode, Socket, SocketConfig, Umem, UmemConfig};

/// What a worker asks a broker for: one queue of one interface (in the broker's network
/// namespace), the mode to bind it in, and the UMEM and rings to set up.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueRequest {
    /// The interface.
    pub iface: String,
    /// The queue.
    pub queue: u32,
    /// The data path to ask for.
    pub mode: Mode,
    /// The UMEM (its memory is the broker's memory file; `huge_pages` must be off).
    pub umem: UmemConfig,
    /// The socket's rings (`multi_buffer` must be off).
    pub socket: SocketConfig,
}

impl QueueRequest {
    /// Queue `queue` of `iface` in [`Mode::Auto`] with the default UMEM and rings.
    pub fn new(iface: &str, queue: u32) -> QueueRequest {
        QueueRequest {
            iface: iface.to_string(),
            queue,
            mode: Mode::Auto,
            umem: UmemConfig::default(),
            socket: SocketConfig::default(),
        }
    }
}

/// Why a worker got no queue from a broker.
#[derive(Debug)]
#[non_exhaustive]
pub enum BrokerError {
    /// The broker refused, saying why.
    Refused(Refusal),
    /// Talking to the broker failed: what was tried and the error (`ENOENT` or `ECONNREFUSED`
    /// on connecting: no broker listens there; `EACCES`: the socket's directory is closed to
    /// this user).
    Io(String, io::Error),
    /// The broker's answer made no sense, as described.
    Protocol(String),
    /// The request asks for what a broker cannot hand out, as described.
    Unsupported(String),
    /// Mapping what the broker sent failed.
    Xdp(crate::xdp::Error),
}

impl BrokerError {
    /// The errno, when the kernel gave one (from talking to the broker, from mapping the rings,
    /// or from the broker's failed set-up).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            BrokerError::Io(_, e) => e.raw_os_error(),
            BrokerError::Xdp(e) => e.raw_os_error(),
            BrokerError::Refused(Refusal::Failed { errno, .. }) => Some(*errno),
            _ => None,
        }
    }

    /// The kind of failure: `PermissionDenied` for a refused uid, `AddrInUse` for a busy queue,
    /// `InvalidData` for a broken answer, `Unsupported` for what a broker cannot hand out, else
    /// the kernel error's kind.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            BrokerError::Refused(Refusal::UidNotAllowed { .. }) => io::ErrorKind::PermissionDenied,
            BrokerError::Refused(Refusal::QueueBusy { .. }) => io::ErrorKind::AddrInUse,
            BrokerError::Refused(Refusal::Failed { errno, .. }) => {
                io::Error::from_raw_os_error(*errno).kind()
            }
            BrokerError::Refused(_) => io::ErrorKind::PermissionDenied,
            BrokerError::Io(_, e) => e.kind(),
            BrokerError::Protocol(_) => io::ErrorKind::InvalidData,
            BrokerError::Unsupported(_) => io::ErrorKind::Unsupported,
            BrokerError::Xdp(e) => e.kind(),
        }
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrokerError::Refused(r) => write!(f, "the broker refused: {r}"),
            BrokerError::Io(what, _) => write!(f, "{what}"),
            BrokerError::Protocol(what) => write!(f, "the broker's answer is wrong: {what}"),
            BrokerError::Unsupported(what) => write!(f, "a broker cannot hand out {what}"),
            BrokerError::Xdp(e) => write!(f, "{e}"),
        }
    }
}

/// Display is the context and `source()` the cause, never both: `Io` names what was tried and
/// gives the kernel's error as its source; `Xdp` is transparent (its message, its source).
impl std::error::Error for BrokerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BrokerError::Io(_, e) => Some(e),
            BrokerError::Xdp(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

crate::error::into_io_error!(BrokerError);

impl From<crate::xdp::Error> for BrokerError {
    fn from(e: crate::xdp::Error) -> BrokerError {
        BrokerError::Xdp(e)
    }
}

/// A worker's way to a [`Broker`](crate::xdp::Broker) listening at a path.
///
/// ```no_run
/// use zcnet::xdp::{BrokerClient, QueueRequest};
/// let client = BrokerClient::new("/run/zcnet/xdp.sock");
/// let (mut umem, mut socket) = client.open(&QueueRequest::new("eth1", 0))?;
/// socket.fill(&mut umem, 2048)?;
/// // receive and send as with a socket bound here; no capability needed
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct BrokerClient {
    path: PathBuf,
}

impl BrokerClient {
    /// A client of the broker listening at `path`.
    pub fn new(path: impl AsRef<Path>) -> BrokerClient {
        BrokerClient {
            path: path.as_ref().to_path_buf(),
        }
    }

    /// Asks the broker for `request`'s queue: on a grant, a UMEM shared with the broker (its frames
    /// all free) and a socket bound to the queue, which the broker's program feeds. The socket
    /// holds the connection: the queue is this worker's until the socket is dropped or the
    /// process ends, and the broker detaches its program once its last worker is gone.
    pub fn open(&self, request: &QueueRequest) -> Result<(Umem, Socket), BrokerError> {
        if request.umem.huge_pages {
            return Err(BrokerError::Unsupported(
                "huge pages (the UMEM is the broker's memory file)".into(),
            ));
        }
        if request.socket.multi_buffer {
            return Err(BrokerError::Unsupported("multi-buffer sockets".into()));
        }
        let wire = Request {
            iface: request.iface.clone(),
            queue: request.queue,
            mode: request.mode,
            umem: request.umem,
            socket: request.socket,
        };
        let (grant, fds, stream) = self.exchange(&wire.encode(), &mut [])?;
        let Ok::<[OwnedFd; 3], _>([memfd, anchor, socket]) = fds.try_into() else {
            return Err(BrokerError::Protocol(
                "a grant without its three descriptors".into(),
            ));
        };
        let len = request.umem.frame_size as u64 * u64::from(request.umem.frame_count);
        match sealed_size(memfd.as_fd()) {
            Ok(Some(size)) if size >= len => {}
            _ => {
                return Err(BrokerError::Protocol(format!(
                    "the UMEM is no sealed memory file of {len} bytes"
                )));
            }
        }
        let mut umem = Umem::over_memfd(memfd.as_fd(), request.umem)?;
        let inherited = Inherited {
            mode: match grant.zerocopy {
                true => BoundMode::ZeroCopy,
                false => BoundMode::Copy,
            },
            need_wakeup: request.socket.need_wakeup,
            multi_buffer: false,
        };
        let refused = (grant.zerocopy_refused != 0).then_some(grant.zerocopy_refused);
        let fallback = copy_fallback(request.mode, refused, false);
        let socket = Socket::adopt(
            &mut umem,
            (socket, anchor),
            (&request.iface, grant.ifindex, request.queue),
            (inherited, fallback),
            request.socket,
            stream.into(),
        )?;
        Ok((umem, socket))
    }

    /// Asks the broker for a zcrx instance as `config` describes it (`huge_pages` must be off):
    /// this process sets up a ring, disabled and restricted to receiving; the broker takes a copy
    /// of it (`pidfd_getfd`: an io_uring descriptor cannot travel over the socket), registers the
    /// instance on it with its area in a memory file it shares, and keeps nothing of it. On a
    /// grant, the instance, for [`Receiver::with_zcrx_grant`](crate::rx::Receiver::with_zcrx_grant).
    /// Registering needs `CAP_NET_ADMIN`; this process needs no capability. The ring is this
    /// process's, so what the kernel charges to a ring's owner (pinned pages, against
    /// `RLIMIT_MEMLOCK`) is charged to its user.
    ///
    /// ```no_run
    /// use std::net::TcpStream;
    /// use zcnet::rx::{Receiver, RxConfig, ZcrxConfig};
    /// use zcnet::xdp::BrokerClient;
    /// let grant = BrokerClient::new("/run/zcnet/xdp.sock").open_zcrx(&ZcrxConfig::no_device())?;
    /// let stream = TcpStream::connect("192.0.2.1:5201")?;
    /// let mut rx = Receiver::with_zcrx_grant(stream, RxConfig::default(), grant)?;
    /// while let Some(chunk) = rx.recv()? {
    ///     // chunk borrows the area until dropped
    /// #   drop(chunk);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "io-uring")]
    pub fn open_zcrx(&self, config: &ZcrxConfig) -> Result<ZcrxGrant, BrokerError> {
        if config.huge_pages {
            return Err(BrokerError::Unsupported(
                "huge pages (the area is the broker's memory file)".into(),
            ));
        }
        let (iface, queue) = match &config.bind {
            ZcrxBind::Queue { interface, queue } => (interface.clone(), *queue),
            _ => (String::new(), 0),
        };
        let ring = restricted_ring(ZCRX_RING_ENTRIES)
            .map_err(|e| BrokerError::Io("set up a ring for zcrx".into(), e))?;
        let wire = ZcrxRequest {
            iface,
            queue,
            events: config.events,
            area_len: config.area_len as u64,
            refill_entries: config.refill_entries,
            rx_buf_len: config.rx_buf_len.unwrap_or(0),
            ring_fd: ring.fd().as_raw_fd(),
        };
        let mut layout = [0u8; LAYOUT_LEN];
        let (_, fds, stream) = self.exchange(&wire.encode(), &mut layout)?;
        let Ok::<[OwnedFd; 1], _>([memory]) = fds.try_into() else {
            return Err(BrokerError::Protocol(
                "a zcrx grant without its memory file".into(),
            ));
        };
        Ok(ZcrxGrant {
            ring,
            memory,
            layout: decode_layout(&layout),
            bind: config.bind.clone(),
            connection: stream.into(),
        })
    }

    /// Sends `request` and reads the broker's reply: on a grant, what it says, the descriptors
    /// that came with it and the connection (held by whatever was granted), with `extra` filled
    /// with the bytes that follow a granted reply of this kind.
    fn exchange(
        &self,
        request: &[u8],
        extra: &mut [u8],
    ) -> Result<(Grant, Vec<OwnedFd>, UnixStream), BrokerError> {
        let io = |what: &str, e| BrokerError::Io(format!("{what} {}", self.path.display()), e);
        let mut stream = UnixStream::connect(&self.path).map_err(|e| io("connect to", e))?;
        stream
            .write_all(request)
            .map_err(|e| io("send the request to", e))?;
        let mut buf = [0u8; REPLY_LEN];
        let got =
            recv_with_fds(stream.as_fd(), &mut buf).map_err(|e| io("read the reply of", e))?;
        if got.len == 0 {
            return Err(BrokerError::Protocol("it closed the connection".into()));
        }
        if got.truncated {
            return Err(BrokerError::Protocol(
                "more descriptors than a grant has".into(),
            ));
        }
        stream
            .read_exact(&mut buf[got.len..])
            .map_err(|e| io("read the reply of", e))?;
        let grant = match Reply::decode(&buf).map_err(BrokerError::Protocol)? {
            Reply::Refused(r) => return Err(BrokerError::Refused(r)),
            Reply::Granted(grant) => grant,
        };
        stream
            .read_exact(extra)
            .map_err(|e| io("read the grant of", e))?;
        Ok((grant, got.fds, stream))
    }
}
