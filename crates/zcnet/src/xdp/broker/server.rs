//! The privileged side: a [`Broker`] listening on a Unix socket, granting queues of its allow-list
//! to workers whose credentials it allows, and keeping each interface's redirect program attached
//! exactly while a worker holds one of its queues.

use std::collections::HashMap;
use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::wire::{Grant, Message, REQUEST_LEN, Refusal, Reply, Request};
#[cfg(feature = "io-uring")]
use super::wire::{ZcrxRequest, encode_layout};
#[cfg(feature = "io-uring")]
use crate::rx::{ZcrxBind, ZcrxConfig};
use crate::sys::unix::{peer_credentials, sealed_memfd, send_with_fds};
#[cfg(feature = "io-uring")]
use crate::sys::unix::{peer_pidfd, take_fd};
#[cfg(feature = "io-uring")]
use crate::sys::zcrx_ring::is_ring;
use crate::xdp::{
    AttachMode, BoundMode, Error, FrameMatch, Result, Socket, Umem, XdpLink, XdpProgram,
};

/// What a [`Broker`] hands out, and to whom.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokerConfig {
    /// The queues it may hand out: (interface, queue), interfaces of its network namespace.
    pub allow: Vec<(String, u32)>,
    /// The uids whose workers it serves.
    pub uids: Vec<u32>,
    /// The gids whose workers it serves (a worker is served when its uid or its gid is listed).
    pub gids: Vec<u32>,
    /// Which frames of a granted queue its program redirects to the worker's socket; the others
    /// go on to the network stack.
    pub matching: FrameMatch,
    /// Where the program runs.
    pub attach: AttachMode,
    /// The zcrx instances it registers for workers (feature `io-uring`): receive queues of its
    /// interfaces, or device-less ones.
    #[cfg(feature = "io-uring")]
    pub zcrx: Vec<ZcrxBind>,
    /// The largest UMEM or zcrx area it registers for one worker, in bytes (it pins that memory).
    pub max_umem_bytes: u64,
    /// How long a peer that connected has to send its whole request: the socket is open to every
    /// user, so one that says nothing is dropped after this instead of holding a broker thread.
    pub request_timeout: Duration,
}

impl BrokerConfig {
    /// Hands out the queues of `allow` to no one yet (add uids or gids), redirecting every frame
    /// ([`FrameMatch::All`]) in driver mode, with UMEMs of at most 64 MiB, giving a peer 5 seconds
    /// to send its request.
    pub fn new(allow: Vec<(String, u32)>) -> BrokerConfig {
        BrokerConfig {
            allow,
            uids: Vec::new(),
            gids: Vec::new(),
            matching: FrameMatch::All,
            attach: AttachMode::Driver,
            #[cfg(feature = "io-uring")]
            zcrx: Vec::new(),
            max_umem_bytes: 64 << 20,
            request_timeout: Duration::from_secs(5),
        }
    }

    /// The highest allowed queue of `iface`.
    fn highest_queue(&self, iface: &str) -> Option<u32> {
        self.allow
            .iter()
            .filter(|(i, _)| i == iface)
            .map(|&(_, q)| q)
            .max()
    }
}

/// What a [`Broker`] did, for its log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A worker was given a queue.
    Granted {
        /// The worker's pid, uid and gid (`SO_PEERCRED`).
        peer: (i32, u32, u32),
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
        /// The data path the socket got.
        mode: BoundMode,
    },
    /// A worker was refused.
    Refused {
        /// The worker's pid, uid and gid.
        peer: (i32, u32, u32),
        /// Why.
        refusal: Refusal,
    },
    /// The redirect program was attached to an interface (its first queue was granted).
    Attached {
        /// The interface.
        iface: String,
    },
    /// A worker's connection closed (it ended or was killed): its queue is free again.
    Released {
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
    },
    /// The last worker on an interface is gone: its program was detached.
    Detached {
        /// The interface.
        iface: String,
    },
    /// A worker was given a zcrx instance.
    GrantedZcrx {
        /// The worker's pid, uid and gid.
        peer: (i32, u32, u32),
        /// Where it receives from: "IFACE queue N" or "no device".
        on: String,
        /// The area's length in bytes.
        area_len: u64,
    },
    /// The connection of a worker given a zcrx instance closed: the instance is gone with it.
    ReleasedZcrx {
        /// Where it received from.
        on: String,
    },
    /// A peer sent no whole request within [`BrokerConfig::request_timeout`]: dropped.
    Silent {
        /// The peer's pid, uid and gid.
        peer: (i32, u32, u32),
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Granted {
                peer: (pid, uid, gid),
                iface,
                queue,
                mode,
            } => write!(
                f,
                "granted {iface} queue {queue} ({mode}) to pid {pid} uid {uid} gid {gid}"
            ),
            Event::Refused {
                peer: (pid, uid, gid),
                refusal,
            } => write!(f, "refused pid {pid} uid {uid} gid {gid}: {refusal}"),
            Event::Attached { iface } => write!(f, "attached the redirect program to {iface}"),
            Event::Released { iface, queue } => write!(f, "released {iface} queue {queue}"),
            Event::Detached { iface } => write!(f, "detached the program from {iface}"),
            Event::GrantedZcrx {
                peer: (pid, uid, gid),
                on,
                area_len,
            } => write!(
                f,
                "granted a zcrx instance on {on} ({area_len}-byte area) to pid {pid} uid {uid} \
                 gid {gid}"
            ),
            Event::ReleasedZcrx { on } => write!(f, "released the zcrx instance on {on}"),
            Event::Silent {
                peer: (pid, uid, gid),
            } => write!(
                f,
                "dropped pid {pid} uid {uid} gid {gid}: no whole request in time"
            ),
        }
    }
}

/// The redirect program of one interface, attached while any of its queues is granted.
#[derive(Debug)]
struct Attached {
    // Fields drop in order: the link first, so the program is detached before its map goes.
    _link: XdpLink,
    program: XdpProgram,
    granted: usize,
}

/// What the broker's connections share.
#[derive(Debug)]
struct Shared {
    config: BrokerConfig,
    granted: Mutex<Granted>,
}

/// The granted queues and the programs attached for them.
#[derive(Debug, Default)]
struct Granted {
    queues: Vec<(String, u32)>,
    programs: HashMap<String, Attached>,
}

/// A queue set up for a worker: the broker's copies of what it sends, dropped once sent.
struct Handout {
    socket: Socket,
    /// Unmapped once sent: the kernel keeps the registered pages pinned.
    _umem: Umem,
    memfd: OwnedFd,
    grant: Grant,
}

/// The privileged half of AF_XDP's privilege split: it loads the redirect program, creates the
/// AF_XDP sockets (registering each worker's UMEM, a sealed memory file it then shares) and fills
/// the XSKMAP, and passes the descriptors to unprivileged workers over a Unix socket
/// (`SCM_RIGHTS`); a worker ([`BrokerClient`](crate::xdp::BrokerClient)) then receives and sends
/// with no capability at all.
///
/// Each connection asks for one queue. The broker grants it when the worker's uid or gid
/// (`SO_PEERCRED`) is allowed, the queue is on its allow-list and nobody holds it; it refuses
/// otherwise, with a typed [`Refusal`]. The queue stays the worker's until the connection closes —
/// the worker ended, in any way, or dropped its socket — and the broker detaches an interface's
/// program when its last worker is gone. Its programs hang on BPF links only it holds, so when the
/// broker itself ends, even by `SIGKILL`, nothing stays attached.
#[derive(Debug)]
pub struct Broker {
    listener: UnixListener,
    shared: Arc<Shared>,
}

impl Broker {
    /// Listens on a new Unix socket at `path` (which must not exist), readable and writable by
    /// every user: who is served is decided by `config`'s uids and gids, from each worker's
    /// credentials.
    pub fn bind(path: &Path, config: BrokerConfig) -> Result<Broker> {
        let at = |what: &str, e| Error::new(format!("{what} {}", path.display()), e, "");
        let listener = UnixListener::bind(path).map_err(|e| at("listen on", e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| at("make world-writable", e))?;
        Ok(Broker {
            listener,
            shared: Arc::new(Shared {
                config,
                granted: Mutex::default(),
            }),
        })
    }

    /// Serves workers until accepting fails, each connection on a thread of its own, telling
    /// `log` what it does.
    pub fn serve(&self, log: impl Fn(&Event) + Send + Sync + 'static) -> Result<()> {
        let log = Arc::new(log);
        loop {
            let (stream, _) = self
                .listener
                .accept()
                .map_err(|e| Error::new("accept a worker", e, ""))?;
            let shared = Arc::clone(&self.shared);
            let log = Arc::clone(&log);
            std::thread::spawn(move || shared.serve_worker(stream, &*log));
        }
    }
}

impl Shared {
    /// Answers the one request of the worker on `stream`; a granted queue is released when the
    /// connection closes.
    fn serve_worker(&self, mut stream: UnixStream, log: &(dyn Fn(&Event) + Send + Sync)) {
        let Ok(cred) = peer_credentials(stream.as_fd()) else {
            return;
        };
        let peer = (cred.pid, cred.uid, cred.gid);
        let mut buf = [0u8; REQUEST_LEN];
        // A peer gone before its request is served by nobody; one that says nothing is dropped.
        let deadline = Instant::now().checked_add(self.config.request_timeout);
        let len = match read_request(&mut stream, &mut buf, deadline) {
            Ok(len) => len,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                log(&Event::Silent { peer });
                return;
            }
            Err(_) => return,
        };
        // A granted worker's connection stays open as long as it holds its queue.
        if stream.set_read_timeout(None).is_err() {
            return;
        }
        let allowed = self.config.uids.contains(&cred.uid) || self.config.gids.contains(&cred.gid);
        match Message::decode(&buf[..len]) {
            Err(refusal) => refuse(&mut stream, peer, refusal, log),
            Ok(_) if !allowed => {
                let refusal = Refusal::UidNotAllowed {
                    uid: cred.uid,
                    gid: cred.gid,
                };
                refuse(&mut stream, peer, refusal, log);
            }
            Ok(Message::Queue(request)) => self.serve_queue(stream, peer, &request, log),
            #[cfg(feature = "io-uring")]
            Ok(Message::Zcrx(request)) => self.serve_zcrx(stream, peer, &request, log),
            #[cfg(not(feature = "io-uring"))]
            Ok(Message::Zcrx(_)) => {
                let refusal = Refusal::ZcrxNotAllowed("any (built without io-uring)".into());
                refuse(&mut stream, peer, refusal, log);
            }
        }
    }

    /// Grants `request`'s AF_XDP queue, and releases it when the connection closes.
    fn serve_queue(
        &self,
        mut stream: UnixStream,
        peer: (i32, u32, u32),
        request: &Request,
        log: &(dyn Fn(&Event) + Send + Sync),
    ) {
        let handout = match self.grant(request, log) {
            Ok(handout) => handout,
            Err(refusal) => return refuse(&mut stream, peer, refusal, log),
        };
        let (socket_fd, anchor_fd) = handout.socket.fds();
        let reply = Reply::Granted(handout.grant).encode();
        let sent = send_with_fds(
            stream.as_fd(),
            &reply,
            &[handout.memfd.as_fd(), anchor_fd, socket_fd],
        );
        if sent.is_ok() {
            log(&Event::Granted {
                peer,
                iface: request.iface.clone(),
                queue: request.queue,
                mode: handout.socket.mode(),
            });
        }
        // The worker holds the only descriptors now: its ending closes the sockets, and the
        // kernel takes them out of the map.
        drop(handout);
        wait_for_end(&mut stream);
        self.release(&request.iface, request.queue, log);
    }

    /// Registers `request`'s zcrx instance on the worker's ring, still disabled (the worker that
    /// enables it is its issuer) and restricted to receiving, and hands it the memory file holding
    /// the refill ring and the area. The broker keeps no descriptor of the ring, so the instance
    /// is gone when the worker ends; the connection's end is logged.
    #[cfg(feature = "io-uring")]
    fn serve_zcrx(
        &self,
        mut stream: UnixStream,
        peer: (i32, u32, u32),
        request: &ZcrxRequest,
        log: &(dyn Fn(&Event) + Send + Sync),
    ) {
        let (config, on) = match self.zcrx_config(request) {
            Ok(found) => found,
            Err(refusal) => return refuse(&mut stream, peer, refusal, log),
        };
        let ring = match worker_ring(&stream, request.ring_fd) {
            Ok(ring) => ring,
            Err(refusal) => return refuse(&mut stream, peer, refusal, log),
        };
        let (memory, layout) = match crate::rx::zcrx_path::register_for(ring.as_fd(), &config) {
            Ok(registered) => registered,
            Err(e) => {
                // A queue held by another instance is EBUSY or EEXIST; EEXIST also means a ring
                // the worker enabled already (its issuer is not the broker).
                let refusal = match e.raw_os_error() {
                    Some(libc::EBUSY | libc::EEXIST) if !request.iface.is_empty() => {
                        Refusal::QueueBusy {
                            iface: request.iface.clone(),
                            queue: request.queue,
                        }
                    }
                    errno => Refusal::Failed {
                        errno: errno.unwrap_or(0),
                        what: e.to_string(),
                    },
                };
                return refuse(&mut stream, peer, refusal, log);
            }
        };
        drop(ring);
        // The layout that follows says all there is: the reply's words stay zero.
        let grant = Grant {
            ifindex: 0,
            zerocopy: false,
            zerocopy_refused: 0,
        };
        let mut reply = Reply::Granted(grant).encode().to_vec();
        reply.extend_from_slice(&encode_layout(&layout));
        match send_with_fds(stream.as_fd(), &reply, &[memory.as_fd()]) {
            Ok(_) => log(&Event::GrantedZcrx {
                peer,
                on: on.clone(),
                area_len: layout.area_len,
            }),
            // The worker learns nothing more: it sees the connection close.
            Err(_) => return,
        }
        drop(memory);
        wait_for_end(&mut stream);
        log(&Event::ReleasedZcrx { on });
    }

    /// What `request` asks to register, and how the log names it; or why it is refused.
    #[cfg(feature = "io-uring")]
    fn zcrx_config(
        &self,
        request: &ZcrxRequest,
    ) -> std::result::Result<(ZcrxConfig, String), Refusal> {
        let (bind, on) = match request.iface.as_str() {
            "" => (ZcrxBind::NoDevice, "no device".to_string()),
            iface => (
                ZcrxBind::Queue {
                    interface: iface.to_string(),
                    queue: request.queue,
                },
                format!("{iface} queue {}", request.queue),
            ),
        };
        if !self.config.zcrx.contains(&bind) {
            return Err(Refusal::ZcrxNotAllowed(on));
        }
        if request.area_len > self.config.max_umem_bytes {
            return Err(Refusal::TooLarge(format!(
                "a {}-byte zcrx area, above the broker's {} bytes",
                request.area_len, self.config.max_umem_bytes
            )));
        }
        if request.refill_entries > MAX_REFILL_ENTRIES {
            return Err(Refusal::TooLarge(format!(
                "{} refill entries, above the kernel's {MAX_REFILL_ENTRIES}",
                request.refill_entries
            )));
        }
        let mut config = ZcrxConfig::default()
            .with_area_len(request.area_len as usize)
            .with_refill_entries(request.refill_entries)
            .with_events(request.events);
        config.bind = bind;
        if request.rx_buf_len != 0 {
            config = config.with_rx_buf_len(request.rx_buf_len);
        }
        Ok((config, on))
    }

    /// Sets up `request`'s queue, attaching the interface's program if no queue of it was granted
    /// yet, or refuses it.
    fn grant(
        &self,
        request: &Request,
        log: &(dyn Fn(&Event) + Send + Sync),
    ) -> std::result::Result<Handout, Refusal> {
        let (iface, queue) = (request.iface.as_str(), request.queue);
        let key = (request.iface.clone(), queue);
        if !self.config.allow.contains(&key) {
            return Err(Refusal::QueueNotAllowed {
                iface: key.0,
                queue,
            });
        }
        let len = u64::from(request.umem.frame_size as u32) * u64::from(request.umem.frame_count);
        if len > self.config.max_umem_bytes {
            return Err(Refusal::TooLarge(format!(
                "a {len}-byte UMEM, above the broker's {} bytes",
                self.config.max_umem_bytes
            )));
        }
        let mut granted = self.granted.lock().unwrap_or_else(PoisonError::into_inner);
        if granted.queues.contains(&key) {
            return Err(Refusal::QueueBusy {
                iface: key.0,
                queue,
            });
        }
        let failed = |e: Error| match e.raw_os_error() {
            Some(libc::EBUSY) => Refusal::QueueBusy {
                iface: iface.to_string(),
                queue,
            },
            errno => Refusal::Failed {
                errno: errno.unwrap_or(0),
                what: e.to_string(),
            },
        };
        let ifindex = crate::xdp::interface_index(iface).map_err(failed)?;
        let memfd = sealed_memfd(c"zcnet-umem", len)
            .map_err(|e| failed(Error::new("create the UMEM's memory file", e, "")))?;
        let mut umem = Umem::over_memfd(memfd.as_fd(), request.umem).map_err(failed)?;
        let socket = Socket::bind_with(&mut umem, iface, queue, request.mode, request.socket)
            .map_err(failed)?;
        if !granted.programs.contains_key(iface) {
            let highest = self.config.highest_queue(iface).unwrap_or(queue);
            let attached = self.attach(iface, highest).map_err(failed)?;
            granted.programs.insert(iface.to_string(), attached);
            log(&Event::Attached {
                iface: iface.to_string(),
            });
        }
        let attached = granted.programs.get_mut(iface).expect("attached above");
        let map = attached
            .program
            .xsk_map()
            .expect("a redirect program has an XSKMAP");
        if let Err(e) = map.insert(queue, &socket) {
            if attached.granted == 0 {
                granted.programs.remove(iface);
                log(&Event::Detached {
                    iface: iface.to_string(),
                });
            }
            return Err(failed(e));
        }
        attached.granted += 1;
        granted.queues.push(key);
        let grant = Grant {
            ifindex: ifindex.into(),
            zerocopy: socket.mode() == BoundMode::ZeroCopy,
            zerocopy_refused: socket
                .zerocopy_status()
                .err()
                .and_then(|f| f.raw_os_error())
                .unwrap_or(0),
        };
        Ok(Handout {
            socket,
            _umem: umem,
            memfd,
            grant,
        })
    }

    /// Loads the redirect program for queues up to `highest` and attaches it to `iface`.
    fn attach(&self, iface: &str, highest: u32) -> Result<Attached> {
        let program = XdpProgram::redirect_to_xsk(highest + 1, self.config.matching)?;
        let link = program.attach_to(iface, self.config.attach)?;
        Ok(Attached {
            _link: link,
            program,
            granted: 0,
        })
    }

    /// Frees `queue` of `iface`, emptying its map slot, and detaches the interface's program when
    /// it was its last granted queue.
    fn release(&self, iface: &str, queue: u32, log: &(dyn Fn(&Event) + Send + Sync)) {
        let mut granted = self.granted.lock().unwrap_or_else(PoisonError::into_inner);
        granted
            .queues
            .retain(|(i, q)| (i.as_str(), *q) != (iface, queue));
        log(&Event::Released {
            iface: iface.to_string(),
            queue,
        });
        let Some(attached) = granted.programs.get_mut(iface) else {
            return;
        };
        if let Some(map) = attached.program.xsk_map() {
            // A socket the worker's children still hold must not keep receiving.
            let _ = map.remove(queue);
        }
        attached.granted -= 1;
        if attached.granted == 0 {
            granted.programs.remove(iface);
            log(&Event::Detached {
                iface: iface.to_string(),
            });
        }
    }
}

/// The most refill entries a zcrx instance takes (the kernel's `IO_RQ_MAX_ENTRIES`).
#[cfg(feature = "io-uring")]
const MAX_REFILL_ENTRIES: u32 = 32768;

/// The broker's copy of the ring the worker connected on `stream` names as its descriptor
/// `ring_fd`, taken with `pidfd_getfd` (an io_uring descriptor cannot travel with `SCM_RIGHTS`):
/// that needs ptrace rights over the worker (root with `CAP_SYS_PTRACE`).
#[cfg(feature = "io-uring")]
fn worker_ring(stream: &UnixStream, ring_fd: i32) -> std::result::Result<OwnedFd, Refusal> {
    let failed = |what: &str, e: std::io::Error| Refusal::Failed {
        errno: e.raw_os_error().unwrap_or(0),
        what: format!("{what}: {e}"),
    };
    let pidfd = peer_pidfd(stream.as_fd())
        .map_err(|e| failed("the worker's pidfd (SO_PEERPIDFD, Linux 6.5)", e))?;
    let ring = take_fd(pidfd.as_fd(), ring_fd).map_err(|e| {
        failed(
            "take the worker's ring (pidfd_getfd needs CAP_SYS_PTRACE over the worker)",
            e,
        )
    })?;
    if !is_ring(ring.as_fd()) {
        return Err(Refusal::Malformed(format!(
            "the worker's descriptor {ring_fd} is no io_uring"
        )));
    }
    Ok(ring)
}

/// Tells the worker on `stream` why it gets nothing, logged first: the log's order is the order in
/// which workers learn.
fn refuse(
    stream: &mut UnixStream,
    peer: (i32, u32, u32),
    refusal: Refusal,
    log: &(dyn Fn(&Event) + Send + Sync),
) {
    let reply = Reply::Refused(refusal.clone()).encode();
    log(&Event::Refused { peer, refusal });
    let _ = stream.write_all(&reply);
}

/// Waits for the worker's end: whatever it sends is ignored; end of file (or an error) means it
/// is gone.
fn wait_for_end(stream: &mut UnixStream) {
    let mut sink = [0u8; 64];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

/// Reads a request from `stream` into `buf` (until it is full or the peer stops sending) by
/// `deadline` (`TimedOut` or `WouldBlock` past it): its length.
fn read_request(
    stream: &mut UnixStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> std::io::Result<usize> {
    let mut len = 0;
    while len < buf.len() {
        // The whole request by the deadline, however it is cut up.
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ErrorKind::TimedOut.into());
            }
            stream.set_read_timeout(Some(left))?;
        }
        match stream.read(&mut buf[len..])? {
            0 => break,
            n => len += n,
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A broker on a socket of its own, serving on a thread, its events sent to the receiver.
    fn serving(
        name: &str,
        configure: impl FnOnce(&mut BrokerConfig),
    ) -> (std::path::PathBuf, mpsc::Receiver<Event>) {
        let path = std::env::temp_dir().join(format!("zcnet-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut config = BrokerConfig::new(vec![("lo".to_string(), 0)]);
        configure(&mut config);
        let broker = Broker::bind(&path, config).expect("bind the broker");
        let (events, seen) = mpsc::channel();
        let events = Mutex::new(events);
        std::thread::spawn(move || {
            broker.serve(move |e| {
                let _ = events.lock().unwrap().send(e.clone());
            })
        });
        (path, seen)
    }

    /// A peer that sends nothing, or its request a byte at a time too slowly, is dropped at the
    /// deadline: the broker logs it and closes the connection, holding no thread for it.
    #[test]
    fn a_silent_or_dripping_peer_is_dropped_at_the_deadline() {
        let timeout = Duration::from_millis(300);
        let (path, seen) = serving("silent", |c| c.request_timeout = timeout);
        let me = rustix::process::getuid().as_raw();
        for drip in [false, true] {
            let mut peer = UnixStream::connect(&path).expect("connect");
            let start = Instant::now();
            if drip {
                for _ in 0..5 {
                    let _ = peer.write_all(&[0]);
                    std::thread::sleep(timeout / 4);
                }
            }
            let event = seen
                .recv_timeout(Duration::from_secs(10))
                .expect("an event");
            assert!(
                matches!(event, Event::Silent { peer: (_, uid, _) } if uid == me),
                "{event:?}"
            );
            let waited = start.elapsed();
            assert!(waited >= timeout && waited < timeout * 10, "{waited:?}");
            // Closed: end of file, or a reset when the broker left dripped bytes unread.
            let mut rest = Vec::new();
            peer.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            match peer.read_to_end(&mut rest) {
                Ok(0) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                other => panic!("the connection is still open: {other:?}"),
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    /// A broker serving this user device-less zcrx instances.
    #[cfg(feature = "io-uring")]
    fn serving_zcrx(name: &str) -> (std::path::PathBuf, mpsc::Receiver<Event>) {
        let me = rustix::process::getuid().as_raw();
        serving(name, |c| {
            c.uids = vec![me];
            c.zcrx = vec![crate::rx::ZcrxBind::NoDevice];
        })
    }

    /// A zcrx request reaches the kernel's registration on the worker's own ring, which the broker
    /// takes with `pidfd_getfd`: granted where the kernel has device-less zcrx (7.1+) and the
    /// broker `CAP_NET_ADMIN`, else refused with the registration's errno and zcnet's reason —
    /// never for want of the ring. A queue off the broker's list is refused by name.
    #[cfg(feature = "io-uring")]
    #[test]
    fn a_zcrx_request_reaches_the_registration_on_the_workers_ring() {
        use crate::rx::ZcrxConfig;
        use crate::xdp::{BrokerClient, BrokerError};
        let (path, seen) = serving_zcrx("zcrx");
        let client = BrokerClient::new(&path);
        match client.open_zcrx(&ZcrxConfig::no_device().with_area_len(1 << 20)) {
            Ok(grant) => {
                assert_eq!(grant.area_len(), 1 << 20);
                let event = seen.recv_timeout(Duration::from_secs(10)).unwrap();
                assert!(matches!(event, Event::GrantedZcrx { .. }), "{event:?}");
            }
            Err(BrokerError::Refused(Refusal::Failed { errno, what })) => {
                assert!(
                    matches!(errno, libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM),
                    "{errno}: {what}"
                );
                assert!(what.contains("zero-copy receive"), "{what}");
            }
            Err(BrokerError::Io(what, e)) => {
                testnet::skip(
                    "a_zcrx_request_reaches_the_registration_on_the_workers_ring",
                    &format!("{what}: {e}"),
                );
                return;
            }
            Err(e) => panic!("{e:?}"),
        }
        let refused = client.open_zcrx(&ZcrxConfig::queue("lo", 0));
        assert!(
            matches!(
                &refused,
                Err(BrokerError::Refused(Refusal::ZcrxNotAllowed(on))) if on == "lo queue 0"
            ),
            "{refused:?}"
        );
        let _ = std::fs::remove_file(&path);
    }

    /// A request naming a descriptor that is no io_uring is refused as malformed before anything is
    /// registered.
    #[cfg(feature = "io-uring")]
    #[test]
    fn a_zcrx_request_naming_no_ring_is_refused() {
        use super::super::wire::{REPLY_LEN, ZcrxRequest};
        use std::os::fd::AsRawFd;
        let (path, _seen) = serving_zcrx("zcrx-no-ring");
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let request = ZcrxRequest {
            iface: String::new(),
            queue: 0,
            events: false,
            area_len: 1 << 20,
            refill_entries: 64,
            rx_buf_len: 0,
            ring_fd: file.as_raw_fd(),
        };
        let mut peer = UnixStream::connect(&path).unwrap();
        peer.write_all(&request.encode()).unwrap();
        let mut reply = [0u8; REPLY_LEN];
        peer.read_exact(&mut reply).unwrap();
        match Reply::decode(&reply) {
            Ok(Reply::Refused(Refusal::Malformed(what))) => {
                assert!(what.contains("no io_uring"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_file(&path);
    }
}
