//! Entry from tokio's own sockets: an [`AsyncSender`] or [`AsyncReceiver`] from a
//! `tokio::net::TcpStream` or `UdpSocket`, [`connect`], and [`split`] of one connection into a
//! zero-copy receiver and sender.
//!
//! Each takes the socket out of tokio's reactor (`into_std`, which keeps it non-blocking) and
//! registers it anew for what zcnet waits on (error-queue readiness for completions, a mapped
//! window for receives), so the tokio socket is consumed.

use std::io;
use std::net::{TcpStream, UdpSocket};

use super::{AsyncReceiver, AsyncSender};
use crate::rx::{Receiver, RxConfig};
use crate::tx::{Sender, SenderConfig, ZcSocket};

impl AsyncReceiver {
    /// A zero-copy receiver on a tokio TCP stream.
    ///
    /// # Errors
    ///
    /// The stream cannot leave tokio's reactor, or the receiver cannot be set up
    /// ([`crate::rx::RxError`], inside the `io::Error`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as tokio's registration does.
    pub fn from_tokio(
        stream: tokio::net::TcpStream,
        config: RxConfig,
    ) -> io::Result<AsyncReceiver> {
        AsyncReceiver::new(Receiver::new(stream.into_std()?, config)?)
    }
}

/// A tokio socket an [`AsyncSender`] can be made from ([`AsyncSender::from_tokio`]): tokio's
/// `TcpStream` and `UdpSocket`. Sealed: zcnet implements it for those two only.
pub trait TokioSocket: sealed::Sealed {
    /// The std socket it becomes out of tokio's reactor, which the sender owns.
    type Std: ZcSocket;

    /// Takes the socket out of tokio's reactor (`into_std`, which keeps it non-blocking).
    #[doc(hidden)]
    fn into_std_socket(self) -> io::Result<Self::Std>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for tokio::net::TcpStream {}
    impl Sealed for tokio::net::UdpSocket {}
}

impl TokioSocket for tokio::net::TcpStream {
    type Std = TcpStream;

    fn into_std_socket(self) -> io::Result<TcpStream> {
        self.into_std()
    }
}

impl TokioSocket for tokio::net::UdpSocket {
    type Std = UdpSocket;

    fn into_std_socket(self) -> io::Result<UdpSocket> {
        self.into_std()
    }
}

impl<S: ZcSocket> AsyncSender<S> {
    /// A zero-copy sender on a tokio TCP stream or UDP socket (a UDP socket connected, or sending
    /// with [`AsyncSender::send_to`]); the sender's type follows from the socket's, so no type
    /// needs naming: `AsyncSender::from_tokio(stream, config)`.
    ///
    /// # Errors
    ///
    /// The socket cannot leave tokio's reactor, or registering it again fails.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as tokio's registration does.
    pub fn from_tokio<T: TokioSocket<Std = S>>(
        socket: T,
        config: SenderConfig,
    ) -> io::Result<Self> {
        AsyncSender::new(Sender::new(socket.into_std_socket()?, config))
    }
}

/// One TCP connection as a zero-copy receiver and a zero-copy sender, each on its own descriptor of
/// the one socket, to be used from two tasks (or one).
///
/// The connection closes when both are dropped (each holds a descriptor); to end the sending
/// direction alone, [`AsyncSender::close`] it and `shutdown(Write)` the stream it returns.
///
/// # Errors
///
/// The stream cannot leave tokio's reactor or be duplicated, or the receiver cannot be set up.
///
/// # Panics
///
/// Outside a tokio runtime, as tokio's registration does.
pub fn split(
    stream: tokio::net::TcpStream,
    tx: SenderConfig,
    rx: RxConfig,
) -> io::Result<(AsyncReceiver, AsyncSender<TcpStream>)> {
    let stream = stream.into_std()?;
    let sending = stream.try_clone()?;
    let receiver = AsyncReceiver::new(Receiver::new(stream, rx)?)?;
    Ok((receiver, AsyncSender::new(Sender::new(sending, tx))?))
}

/// Connects to `addr` without blocking the runtime and [`split`]s the connection.
///
/// # Errors
///
/// The connection fails (each address `addr` resolves to is tried, as tokio's `connect` does), or
/// [`split`] does.
pub async fn connect(
    addr: impl tokio::net::ToSocketAddrs,
    tx: SenderConfig,
    rx: RxConfig,
) -> io::Result<(AsyncReceiver, AsyncSender<TcpStream>)> {
    split(tokio::net::TcpStream::connect(addr).await?, tx, rx)
}
