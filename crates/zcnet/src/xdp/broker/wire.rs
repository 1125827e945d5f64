//! The broker's wire protocol: one request from the worker, one reply from the broker, both of a
//! fixed length, little-endian, each starting with the magic `zcxb` and the protocol version.
//!
//! Request ([`REQUEST_LEN`] bytes): magic, version (u16), kind (u16), then by kind:
//! - 1, open an AF_XDP queue: interface name (16 bytes, NUL-padded), queue (u32), mode (u8: 0
//!   auto, 1 copy, 2 zero-copy), need_wakeup (u8), 2 zero bytes, then u32s: frame size, frame
//!   count, fill, completion, rx and tx ring entries, headroom, and 4 zero bytes;
//! - 2, register a zcrx instance: interface name (empty: no device), queue (u32), events (u8),
//!   3 zero bytes, area length (u64), refill entries (u32), buffer length (u32, 0: the kernel's
//!   choice), the worker's descriptor number of its disabled ring (u32), and 12 zero bytes. (An
//!   io_uring descriptor cannot travel with `SCM_RIGHTS`: the broker takes its copy with
//!   `pidfd_getfd`.)
//!
//! Reply ([`REPLY_LEN`] bytes): magic, version (u16), status (u16: 0 granted, else the refusal),
//! then three u32s whose meaning depends on the status, then 104 bytes of UTF-8 text (NUL-padded).
//! A granted AF_XDP queue's reply carries three descriptors (`SCM_RIGHTS`): the UMEM's memory
//! file, the queue's socket (which owns the fill and completion rings) and the worker's socket. A
//! granted zcrx instance's reply (its three words zero) is followed by [`LAYOUT_LEN`] bytes of its layout (u32s: the
//! instance id, buffer length, refill entries, refill head, tail and entries offsets, region
//! length, statistics offset (`u32::MAX`: none); then u64s: the area token and the area length)
//! and carries one descriptor: the memory file holding the refill region and, after it, the area.
//!
//! A reply's header (magic, version, status) keeps its place in every version, so a worker always
//! reads a broker's refusal of its version.

use std::fmt;

#[cfg(feature = "io-uring")]
use crate::sys::zcrx::QueueLayout;
use crate::xdp::{FrameSize, Mode, SocketConfig, UmemConfig};

/// The protocol version this zcnet speaks.
pub const VERSION: u16 = 1;
/// Bytes of a request.
pub const REQUEST_LEN: usize = 64;
/// Bytes of a reply.
pub const REPLY_LEN: usize = 128;

const MAGIC: [u8; 4] = *b"zcxb";
/// Request kind: open a queue.
const OPEN_QUEUE: u16 = 1;
/// Request kind: register a zcrx instance.
const OPEN_ZCRX: u16 = 2;
/// Bytes of a zcrx instance's layout after its granted reply.
#[cfg(feature = "io-uring")]
pub const LAYOUT_LEN: usize = 48;
/// Bytes of an interface name (`IFNAMSIZ`, with its NUL).
const IFNAME_LEN: usize = 16;
const TEXT_AT: usize = 24;

/// A worker's request for a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub iface: String,
    pub queue: u32,
    pub mode: Mode,
    pub umem: UmemConfig,
    pub socket: SocketConfig,
}

/// A worker's request for a zcrx instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZcrxRequest {
    /// The interface (empty: no device).
    pub iface: String,
    pub queue: u32,
    pub events: bool,
    pub area_len: u64,
    pub refill_entries: u32,
    /// 0: the kernel's choice.
    pub rx_buf_len: u32,
    /// The worker's descriptor of the ring to register the instance on.
    pub ring_fd: i32,
}

/// What a worker asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    Queue(Request),
    Zcrx(ZcrxRequest),
}

/// Why a broker refused a request, as the worker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The broker speaks another protocol version (its own is given): run the same zcnet release on
    /// both sides.
    Version {
        /// The broker's version.
        broker: u16,
    },
    /// The worker's uid and gid (as the broker saw them, `SO_PEERCRED`) are on none of its lists:
    /// add one to the broker's `--allow-uid` or `--allow-gid`.
    UidNotAllowed {
        /// The worker's uid.
        uid: u32,
        /// The worker's gid.
        gid: u32,
    },
    /// The queue is not on the broker's allow-list (`--allow IFACE:QUEUE`).
    QueueNotAllowed {
        /// The interface asked for.
        iface: String,
        /// The queue asked for.
        queue: u32,
    },
    /// The broker registers no zcrx instance there (`--allow-zcrx`): the interface and queue, or
    /// "no device".
    ZcrxNotAllowed(String),
    /// Another worker holds the queue (or another program's AF_XDP socket is bound there): wait
    /// for it to end, or ask for another queue.
    QueueBusy {
        /// The interface asked for.
        iface: String,
        /// The queue asked for.
        queue: u32,
    },
    /// The request asks for more than the broker hands out (its UMEM size limit), as described.
    TooLarge(String),
    /// The broker could not set the queue up: the kernel's errno and what failed (see the broker's
    /// log).
    Failed {
        /// The errno of the failing step (0 when it had none).
        errno: i32,
        /// What failed, as the broker reported it.
        what: String,
    },
    /// The broker could not read the request.
    Malformed(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Version { broker } => write!(
                f,
                "the broker speaks protocol version {broker}, this worker {VERSION}: run the same \
                 zcnet release on both sides"
            ),
            Refusal::UidNotAllowed { uid, gid } => write!(
                f,
                "uid {uid} (gid {gid}) is not allowed: add it to the broker's --allow-uid or \
                 --allow-gid"
            ),
            Refusal::QueueNotAllowed { iface, queue } => write!(
                f,
                "{iface} queue {queue} is not on the broker's allow-list (--allow {iface}:{queue})"
            ),
            Refusal::ZcrxNotAllowed(what) => write!(
                f,
                "the broker registers no zcrx instance on {what} (its --allow-zcrx)"
            ),
            Refusal::QueueBusy { iface, queue } => write!(
                f,
                "{iface} queue {queue} is busy: another worker (or another AF_XDP program) holds it"
            ),
            Refusal::TooLarge(what) => write!(f, "the request exceeds the broker's limits: {what}"),
            Refusal::Failed { errno, what } => write!(
                f,
                "the broker could not set the queue up: {what} ({})",
                crate::sys::errno_name(*errno)
            ),
            Refusal::Malformed(what) => write!(f, "the broker could not read the request: {what}"),
        }
    }
}

/// A broker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The queue is the worker's; its descriptors come with the reply.
    Granted(Grant),
    /// Refused.
    Refused(Refusal),
}

/// What a granted reply says besides its descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The interface's index in the broker's network namespace.
    pub ifindex: u32,
    /// Whether the queue was bound in zero-copy mode.
    pub zerocopy: bool,
    /// The errno of the zero-copy bind that [`Mode::Auto`] fell back from (0: none).
    pub zerocopy_refused: i32,
}

/// The status word of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
enum Status {
    Granted = 0,
    Version = 1,
    UidNotAllowed = 2,
    QueueNotAllowed = 3,
    QueueBusy = 4,
    TooLarge = 5,
    Failed = 6,
    Malformed = 7,
    ZcrxNotAllowed = 8,
}

impl Status {
    fn from_u16(v: u16) -> Option<Status> {
        [
            Status::Granted,
            Status::Version,
            Status::UidNotAllowed,
            Status::QueueNotAllowed,
            Status::QueueBusy,
            Status::TooLarge,
            Status::Failed,
            Status::Malformed,
            Status::ZcrxNotAllowed,
        ]
        .into_iter()
        .find(|s| *s as u16 == v)
    }
}

fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn u16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from(u32_at(buf, at)) | u64::from(u32_at(buf, at + 4)) << 32
}

/// Writes `text` NUL-padded into `field`, cut at a character boundary to fit.
fn put_text(field: &mut [u8], text: &str) {
    let mut end = text.len().min(field.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    field[..end].copy_from_slice(&text.as_bytes()[..end]);
}

/// The NUL-padded text of `field`.
fn text_of(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// The magic and version of a message, or why they are not this protocol's.
fn header(buf: &[u8]) -> Result<u16, Refusal> {
    if buf.len() < 6 || buf[..4] != MAGIC {
        return Err(Refusal::Malformed("not a zcnet broker message".into()));
    }
    Ok(u16_at(buf, 4))
}

/// A request of `kind` for queue `queue` of `iface`: the header and the fields every request has;
/// the rest of its bytes zero.
fn request_head(kind: u16, iface: &str, queue: u32) -> [u8; REQUEST_LEN] {
    let mut buf = [0u8; REQUEST_LEN];
    buf[..4].copy_from_slice(&MAGIC);
    put_u16(&mut buf, 4, VERSION);
    put_u16(&mut buf, 6, kind);
    put_text(&mut buf[8..8 + IFNAME_LEN - 1], iface);
    put_u32(&mut buf, 24, queue);
    buf
}

impl Request {
    /// The request's bytes.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut buf = request_head(OPEN_QUEUE, &self.iface, self.queue);
        buf[28] = match self.mode {
            Mode::Auto => 0,
            Mode::Copy => 1,
            Mode::ZeroCopy => 2,
        };
        buf[29] = u8::from(self.socket.need_wakeup);
        let words = [
            self.umem.frame_size as u32,
            self.umem.frame_count,
            self.umem.fill_size,
            self.umem.completion_size,
            self.socket.rx_size,
            self.socket.tx_size,
            self.umem.headroom,
        ];
        for (i, w) in words.into_iter().enumerate() {
            put_u32(&mut buf, 32 + 4 * i, w);
        }
        buf
    }

    /// The request in `buf`, or the refusal it earns: another version, or bytes that are no
    /// request.
    #[cfg(test)]
    pub fn decode(buf: &[u8]) -> Result<Request, Refusal> {
        match Message::decode(buf)? {
            Message::Queue(request) => Ok(request),
            Message::Zcrx(_) => Err(Refusal::Malformed("a zcrx request".into())),
        }
    }

    /// The request in `buf`, whose header [`Message::decode`] checked.
    fn decode_body(buf: &[u8]) -> Result<Request, Refusal> {
        let iface = text_of(&buf[8..8 + IFNAME_LEN]);
        let malformed = |what: &str| Refusal::Malformed(what.to_string());
        let mode = match buf[28] {
            0 => Mode::Auto,
            1 => Mode::Copy,
            2 => Mode::ZeroCopy,
            _ => return Err(malformed("unknown mode")),
        };
        let need_wakeup = match buf[29] {
            0 => false,
            1 => true,
            _ => return Err(malformed("need_wakeup neither 0 nor 1")),
        };
        let frame_size = match u32_at(buf, 32) {
            2048 => FrameSize::Half,
            4096 => FrameSize::Page,
            _ => return Err(malformed("frame size neither 2048 nor 4096")),
        };
        let umem = UmemConfig {
            frame_size,
            frame_count: u32_at(buf, 36),
            fill_size: u32_at(buf, 40),
            completion_size: u32_at(buf, 44),
            headroom: u32_at(buf, 56),
            huge_pages: false,
        };
        let socket = SocketConfig {
            rx_size: u32_at(buf, 48),
            tx_size: u32_at(buf, 52),
            need_wakeup,
            multi_buffer: false,
        };
        Ok(Request {
            iface,
            queue: u32_at(buf, 24),
            mode,
            umem,
            socket,
        })
    }
}

impl Message {
    /// The request in `buf`, or the refusal it earns: another version, or bytes that are no
    /// request.
    pub fn decode(buf: &[u8]) -> Result<Message, Refusal> {
        let version = header(buf)?;
        if version != VERSION {
            return Err(Refusal::Version { broker: VERSION });
        }
        let kind = if buf.len() == REQUEST_LEN {
            u16_at(buf, 6)
        } else {
            0
        };
        match kind {
            OPEN_QUEUE => Request::decode_body(buf).map(Message::Queue),
            OPEN_ZCRX => ZcrxRequest::decode_body(buf).map(Message::Zcrx),
            _ => Err(Refusal::Malformed(format!(
                "a {}-byte message of kind {}",
                buf.len(),
                u16_at(buf, 6)
            ))),
        }
    }
}

impl ZcrxRequest {
    /// The request's bytes.
    #[cfg(any(feature = "io-uring", test))]
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut buf = request_head(OPEN_ZCRX, &self.iface, self.queue);
        buf[28] = u8::from(self.events);
        buf[32..40].copy_from_slice(&self.area_len.to_le_bytes());
        put_u32(&mut buf, 40, self.refill_entries);
        put_u32(&mut buf, 44, self.rx_buf_len);
        put_u32(&mut buf, 48, self.ring_fd as u32);
        buf
    }

    /// The request in `buf`, whose header [`Message::decode`] checked.
    fn decode_body(buf: &[u8]) -> Result<ZcrxRequest, Refusal> {
        let events = match buf[28] {
            0 => false,
            1 => true,
            _ => return Err(Refusal::Malformed("events neither 0 nor 1".into())),
        };
        Ok(ZcrxRequest {
            iface: text_of(&buf[8..8 + IFNAME_LEN]),
            queue: u32_at(buf, 24),
            events,
            area_len: u64_at(buf, 32),
            refill_entries: u32_at(buf, 40),
            rx_buf_len: u32_at(buf, 44),
            ring_fd: u32_at(buf, 48) as i32,
        })
    }
}

/// A zcrx instance's layout's bytes.
#[cfg(feature = "io-uring")]
pub(crate) fn encode_layout(layout: &QueueLayout) -> [u8; LAYOUT_LEN] {
    let mut buf = [0u8; LAYOUT_LEN];
    for (i, w) in layout_words(layout).into_iter().enumerate() {
        put_u32(&mut buf, 4 * i, w);
    }
    buf[LAYOUT_U64S..LAYOUT_U64S + 8].copy_from_slice(&layout.area_token.to_le_bytes());
    buf[LAYOUT_U64S + 8..LAYOUT_U64S + 16].copy_from_slice(&layout.area_len.to_le_bytes());
    buf
}

/// The layout in `buf` (every offset in it is checked when the worker maps it).
#[cfg(feature = "io-uring")]
pub(crate) fn decode_layout(buf: &[u8; LAYOUT_LEN]) -> QueueLayout {
    let w = |i: usize| u32_at(buf, 4 * i);
    QueueLayout {
        zcrx_id: w(0),
        rx_buf_len: w(1),
        refill_entries: w(2),
        refill_head: w(3),
        refill_tail: w(4),
        refill_rqes: w(5),
        region_len: w(6),
        stats_off: Some(w(7)).filter(|&o| o != u32::MAX),
        area_token: u64_at(buf, LAYOUT_U64S),
        area_len: u64_at(buf, LAYOUT_U64S + 8),
    }
}

/// Where a layout's u64s start.
#[cfg(feature = "io-uring")]
const LAYOUT_U64S: usize = 4 * 8;

/// A layout's u32s, in their order on the wire.
#[cfg(feature = "io-uring")]
fn layout_words(l: &QueueLayout) -> [u32; 8] {
    [
        l.zcrx_id,
        l.rx_buf_len,
        l.refill_entries,
        l.refill_head,
        l.refill_tail,
        l.refill_rqes,
        l.region_len,
        l.stats_off.unwrap_or(u32::MAX),
    ]
}

impl Reply {
    /// The reply's bytes.
    pub fn encode(&self) -> [u8; REPLY_LEN] {
        let mut buf = [0u8; REPLY_LEN];
        buf[..4].copy_from_slice(&MAGIC);
        put_u16(&mut buf, 4, VERSION);
        let (status, words, text): (Status, [u32; 3], &str) = match self {
            Reply::Granted(g) => (
                Status::Granted,
                [g.zerocopy_refused as u32, g.ifindex, u32::from(g.zerocopy)],
                "",
            ),
            Reply::Refused(r) => match r {
                Refusal::Version { broker } => (Status::Version, [u32::from(*broker), 0, 0], ""),
                Refusal::UidNotAllowed { uid, gid } => (Status::UidNotAllowed, [0, *uid, *gid], ""),
                Refusal::QueueNotAllowed { iface, queue } => {
                    (Status::QueueNotAllowed, [0, *queue, 0], iface)
                }
                Refusal::QueueBusy { iface, queue } => (Status::QueueBusy, [0, *queue, 0], iface),
                Refusal::TooLarge(what) => (Status::TooLarge, [0; 3], what),
                Refusal::Failed { errno, what } => (Status::Failed, [*errno as u32, 0, 0], what),
                Refusal::Malformed(what) => (Status::Malformed, [0; 3], what),
                Refusal::ZcrxNotAllowed(what) => (Status::ZcrxNotAllowed, [0; 3], what),
            },
        };
        put_u16(&mut buf, 6, status as u16);
        for (i, w) in words.into_iter().enumerate() {
            put_u32(&mut buf, 8 + 4 * i, w);
        }
        put_text(&mut buf[TEXT_AT..], text);
        buf
    }

    /// The reply in `buf`; `Err` with what is wrong when it is none.
    pub fn decode(buf: &[u8]) -> Result<Reply, String> {
        let version = header(buf).map_err(|r| r.to_string())?;
        if buf.len() != REPLY_LEN {
            return Err(format!("a {}-byte reply", buf.len()));
        }
        let status = u16_at(buf, 6);
        let word = |i: usize| u32_at(buf, 8 + 4 * i);
        let text = text_of(&buf[TEXT_AT..]);
        let refused = |r| Ok(Reply::Refused(r));
        match Status::from_u16(status) {
            Some(Status::Version) => refused(Refusal::Version {
                broker: word(0) as u16,
            }),
            _ if version != VERSION => refused(Refusal::Version { broker: version }),
            Some(Status::Granted) => Ok(Reply::Granted(Grant {
                zerocopy_refused: word(0) as i32,
                ifindex: word(1),
                zerocopy: word(2) != 0,
            })),
            Some(Status::UidNotAllowed) => refused(Refusal::UidNotAllowed {
                uid: word(1),
                gid: word(2),
            }),
            Some(Status::QueueNotAllowed) => refused(Refusal::QueueNotAllowed {
                iface: text,
                queue: word(1),
            }),
            Some(Status::QueueBusy) => refused(Refusal::QueueBusy {
                iface: text,
                queue: word(1),
            }),
            Some(Status::TooLarge) => refused(Refusal::TooLarge(text)),
            Some(Status::Failed) => refused(Refusal::Failed {
                errno: word(0) as i32,
                what: text,
            }),
            Some(Status::Malformed) => refused(Refusal::Malformed(text)),
            Some(Status::ZcrxNotAllowed) => refused(Refusal::ZcrxNotAllowed(text)),
            None => Err(format!("unknown reply status {status}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            iface: "veth0".into(),
            queue: 3,
            mode: Mode::Copy,
            umem: UmemConfig {
                frame_count: 1024,
                fill_size: 512,
                headroom: 256,
                ..UmemConfig::default()
            },
            socket: SocketConfig {
                rx_size: 256,
                tx_size: 128,
                need_wakeup: false,
                multi_buffer: false,
            },
        }
    }

    #[test]
    fn a_request_reads_back_as_itself() {
        let r = request();
        assert_eq!(Request::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn a_zcrx_request_reads_back_as_itself_and_not_as_a_queue() {
        let r = ZcrxRequest {
            iface: String::new(),
            queue: 0,
            events: true,
            area_len: 5 << 30,
            refill_entries: 4096,
            rx_buf_len: 0,
            ring_fd: 7,
        };
        let buf = r.encode();
        assert_eq!(Message::decode(&buf), Ok(Message::Zcrx(r)));
        assert!(matches!(Request::decode(&buf), Err(Refusal::Malformed(_))));
        let mut bad = buf;
        bad[28] = 2;
        assert!(matches!(Message::decode(&bad), Err(Refusal::Malformed(_))));
        let mut unknown = buf;
        unknown[6] = 3;
        assert!(matches!(
            Message::decode(&unknown),
            Err(Refusal::Malformed(_))
        ));
    }

    #[cfg(feature = "io-uring")]
    #[test]
    fn a_zcrx_layout_reads_back_as_itself() {
        let mut layout = QueueLayout {
            zcrx_id: 3,
            area_token: 1 << 48,
            area_len: 6 << 30,
            rx_buf_len: 4096,
            refill_entries: 4096,
            refill_head: 0,
            refill_tail: 64,
            refill_rqes: 128,
            region_len: 69632,
            stats_off: Some(69600),
        };
        assert_eq!(decode_layout(&encode_layout(&layout)), layout);
        layout.stats_off = None;
        assert_eq!(decode_layout(&encode_layout(&layout)), layout);
    }

    #[test]
    fn an_interface_name_is_cut_to_fit_with_its_nul() {
        let mut r = request();
        r.iface = "a-name-longer-than-ifnamsiz".into();
        assert_eq!(
            Request::decode(&r.encode()).unwrap().iface,
            "a-name-longer-t"
        );
    }

    #[test]
    fn every_reply_reads_back_as_itself() {
        let replies = [
            Reply::Granted(Grant {
                ifindex: 7,
                zerocopy: false,
                zerocopy_refused: libc::EOPNOTSUPP,
            }),
            Reply::Refused(Refusal::Version { broker: 9 }),
            Reply::Refused(Refusal::UidNotAllowed {
                uid: 1000,
                gid: 100,
            }),
            Reply::Refused(Refusal::QueueNotAllowed {
                iface: "eth1".into(),
                queue: 2,
            }),
            Reply::Refused(Refusal::QueueBusy {
                iface: "eth1".into(),
                queue: 0,
            }),
            Reply::Refused(Refusal::TooLarge("a 1 GiB UMEM".into())),
            Reply::Refused(Refusal::Failed {
                errno: libc::ENODEV,
                what: "bind".into(),
            }),
            Reply::Refused(Refusal::Malformed("unknown mode".into())),
            Reply::Refused(Refusal::ZcrxNotAllowed("no device".into())),
        ];
        for reply in replies {
            assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn another_version_is_refused_by_name_and_bad_bytes_as_malformed() {
        let mut buf = request().encode();
        buf[4] = 2;
        assert_eq!(
            Request::decode(&buf),
            Err(Refusal::Version { broker: VERSION })
        );
        assert!(matches!(
            Request::decode(b"GET / HTTP/1.1\r\n"),
            Err(Refusal::Malformed(_))
        ));
        let mut buf = request().encode();
        buf[28] = 9;
        assert_eq!(
            Request::decode(&buf),
            Err(Refusal::Malformed("unknown mode".into()))
        );
        let mut reply = Reply::Granted(Grant {
            ifindex: 1,
            zerocopy: true,
            zerocopy_refused: 0,
        })
        .encode();
        reply[4] = 2;
        assert_eq!(
            Reply::decode(&reply),
            Ok(Reply::Refused(Refusal::Version { broker: 2 }))
        );
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        let what = "é".repeat(100);
        let reply = Reply::Refused(Refusal::TooLarge(what)).encode();
        let Ok(Reply::Refused(Refusal::TooLarge(back))) = Reply::decode(&reply) else {
            panic!("not read back");
        };
        assert_eq!(back, "é".repeat(52));
    }
}
