//! The runs of a bench: a driver per send path ([`mmsg`], [`af_xdp`]; the pooled senders are
//! [`crate::bench::send`]'s), the receivers on the other side ([`listen`], [`listen_udp`],
//! [`serve`]), the stream header they share ([`wire`]), the watch over a TCP sender ([`watch`]) and
//! the child process of a one-process bench ([`child`]), and the kernel's copies of a bench's
//! payload after its sends ([`copies`]).

pub(crate) mod af_xdp;
pub(crate) mod child;
pub(crate) mod copies;
pub(crate) mod listen;
pub(crate) mod listen_udp;
pub(crate) mod mmsg;
pub(crate) mod serve;
pub(crate) mod watch;
pub(crate) mod wire;
