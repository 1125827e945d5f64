//! [`SenderSink`]: an [`AsyncSender`] as a `futures::Sink` of owned buffers (feature `sink`), for
//! code that forwards a stream (`SinkExt::send_all`, `StreamExt::forward`) or is generic over
//! sinks.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_sink::Sink;

use super::AsyncSender;
use crate::tx::{SendBuf, TxError, ZcSocket};

/// The operation a [`SenderSink`] waits on, owning the sender until it is done.
type Busy<S> = Pin<Box<dyn Future<Output = (AsyncSender<S>, Result<(), TxError>)> + Send>>;

/// An [`AsyncSender`] as a `futures::Sink` of owned buffers of type `B` (feature `sink`): any
/// [`SendBuf`] (`Vec<u8>`, `bytes::Bytes`, a pooled buffer …), each lent to the kernel as
/// [`AsyncSender::send`] lends it, never copied. Made by [`AsyncSender::into_sink`].
///
/// The sink's steps map onto the sender's completion semantics:
///
/// - `poll_ready`: ready once the kernel took every buffer given before (send-buffer space, room
///   in the io_uring queue), as a `send` returns — never waiting for completions;
/// - `start_send`: queues the buffer (behind what the kernel has not taken yet), in order;
/// - `poll_flush`: every buffer sent and **every loan back** (their completions read, the buffers
///   dropped — a pooled one back in its pool), as [`AsyncSender::flush`];
/// - `poll_close`: `poll_flush`; the socket stays open until the sink is dropped (or
///   [`SenderSink::into_inner`] and [`AsyncSender::close`]).
///
/// An error — a send that failed — hands back, in order, every buffer the kernel did not take,
/// inside the [`TxError`] ([`TxError::unsent`]), as the sender's own calls do; the sink may be used
/// on after it. Dropping the sink drops the sender, which delivers what it accepted (see `# Drop`
/// on [`AsyncSender`]).
///
/// Why not `AsyncWrite`: `poll_write` borrows the caller's bytes only for the call, while a
/// zero-copy send lends them to the kernel until its completion, after the call returned — an
/// `AsyncWrite` would have to copy them first. A sink of owned buffers takes them instead.
///
/// ```
/// use futures_util::{SinkExt, stream};
/// use tokio::io::AsyncReadExt;
/// use zcnet::aio::AsyncSender;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let peer = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
/// let (mut stream, _) = listener.accept().await?;
/// let reader = tokio::spawn(async move {
///     let mut got = Vec::new();
///     stream.read_to_end(&mut got).await.map(|_| got)
/// });
///
/// let bufs: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 100_000]).collect();
/// let sent = bufs.concat();
/// let mut sink = AsyncSender::from_tokio(peer, Default::default())?.into_sink();
/// sink.send_all(&mut stream::iter(bufs.into_iter().map(Ok))).await?; // flushed: every loan back
/// drop(sink); // closes the connection
/// assert!(reader.await?? == sent, "every byte, in order");
/// # Ok(())
/// # }
/// ```
pub struct SenderSink<S: ZcSocket, B> {
    /// Present while no operation is under way.
    sender: Option<AsyncSender<S>>,
    /// The operation under way, owning the sender.
    busy: Option<Busy<S>>,
    /// The items: buffers given to the sender, which holds them itself.
    items: PhantomData<fn(B)>,
}

impl<S: ZcSocket> AsyncSender<S> {
    /// This sender as a `futures::Sink` of owned buffers (feature `sink`; see [`SenderSink`]).
    #[cfg_attr(docsrs, doc(cfg(feature = "sink")))]
    pub fn into_sink<B: SendBuf>(self) -> SenderSink<S, B> {
        SenderSink {
            sender: Some(self),
            busy: None,
            items: PhantomData,
        }
    }
}

impl<S: ZcSocket, B> SenderSink<S, B> {
    /// The sender, with what it still queues and lends; or, while an operation of the sink is
    /// under way (a `poll_ready` or `poll_flush` returned `Pending`), the sink back, to poll that
    /// to its end first.
    pub fn into_inner(mut self) -> Result<AsyncSender<S>, Box<SenderSink<S, B>>> {
        match self.sender.take() {
            Some(sender) => Ok(sender),
            None => Err(Box::new(self)),
        }
    }

    /// Polls the operation under way, if any, to its end; the sender is then present again.
    fn poll_busy(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TxError>> {
        let Some(busy) = &mut self.busy else {
            return Poll::Ready(Ok(()));
        };
        let (sender, result) = ready!(busy.as_mut().poll(cx));
        self.busy = None;
        self.sender = Some(sender);
        Poll::Ready(result)
    }

    /// Runs `op` on the sender until it is done, polling it now.
    fn start<F>(
        &mut self,
        cx: &mut Context<'_>,
        op: fn(AsyncSender<S>) -> F,
    ) -> Poll<Result<(), TxError>>
    where
        F: Future<Output = (AsyncSender<S>, Result<(), TxError>)> + Send + 'static,
    {
        let sender = self.sender.take().expect(PRESENT);
        self.busy = Some(Box::pin(op(sender)));
        self.poll_busy(cx)
    }

    fn sender(&mut self) -> &mut AsyncSender<S> {
        self.sender.as_mut().expect(PRESENT)
    }
}

const PRESENT: &str = "the sender is present while no operation is under way";

/// Nothing of a sink is pinned in place: the operation under way is boxed.
impl<S: ZcSocket, B> Unpin for SenderSink<S, B> {}

impl<S: ZcSocket, B: SendBuf> Sink<B> for SenderSink<S, B> {
    type Error = TxError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TxError>> {
        let this = self.get_mut();
        ready!(this.poll_busy(cx))?;
        if this.sender().try_send_queued()? {
            return Poll::Ready(Ok(()));
        }
        this.start(cx, |mut sender| async move {
            let result = sender.send_queued().await;
            (sender, result)
        })
    }

    fn start_send(self: Pin<&mut Self>, item: B) -> Result<(), TxError> {
        self.get_mut().sender().push(item);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TxError>> {
        let this = self.get_mut();
        ready!(this.poll_busy(cx))?;
        if this.sender().holds_nothing() {
            return Poll::Ready(Ok(()));
        }
        this.start(cx, |mut sender| async move {
            let result = sender.flush().await;
            (sender, result)
        })
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), TxError>> {
        self.poll_flush(cx)
    }
}

impl<S: ZcSocket + fmt::Debug, B> fmt::Debug for SenderSink<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SenderSink")
            .field("sender", &self.sender)
            .field("busy", &self.busy.is_some())
            .finish()
    }
}
