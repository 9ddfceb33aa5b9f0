//! One connection, below the routes: what a client may hold (SPEC §7a) — how long a
//! request head may take, how long an idle keep-alive connection stays open, how long a
//! body may pause ([`Limits`], [`TimedIo`], [`Tracked`]) — and the error envelope, with
//! a request id, on the answers hyper makes itself ([`Enveloped`]). How many
//! connections are open at once is `http::run`'s count of them.
//!
//! hyper 1 has one timer for the head, and it runs from the moment the connection waits
//! for the next request, so it cannot tell a slow head (10 s) from an idle keep-alive
//! connection (60 s). [`TimedIo`] wraps the socket instead: it knows from [`Activity`]
//! whether the connection's service has a request in flight, and while none is, it ends
//! the connection when the current deadline passes. A request in flight is never timed
//! out here (a plan may run for seconds, an event stream for hours); its body has its
//! own timeout where the server reads it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The limits of SPEC §7a; `fleet serve` flags change them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From a connection's first byte of a request (or its opening) to the end of the head.
    pub head_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long a request body may send nothing.
    pub body_timeout: Duration,
    /// Connections open at once; above it, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// The largest request head the server answers (request line and headers).
    pub max_head_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_head_bytes: 64 << 10,
        }
    }
}

/// A connection's requests as its socket sees them: how many are in flight (from the
/// service being called until its response body has been sent or dropped) and how many
/// have finished. When the last one in flight finishes, the reader is woken, so that
/// the idle deadline starts even though no byte arrived.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    finished: AtomicU64,
    reader: Mutex<Option<Waker>>,
}

impl Activity {
    /// Marks a request in flight until the guard is dropped.
    pub fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    fn finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// Remembers who to wake when the requests in flight are done.
    fn wake_when_done(&self, waker: &Waker) {
        let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        if !reader.as_ref().is_some_and(|known| known.will_wake(waker)) {
            *reader = Some(waker.clone());
        }
    }
}

/// A request in flight; see [`Activity::begin`].
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.finished.fetch_add(1, Ordering::AcqRel);
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let reader = activity.reader.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(reader) = reader {
                reader.wake();
            }
        }
    }
}

/// A response body that keeps its request in flight until hyper is done with it.
pub struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B> Tracked<B> {
    pub fn new(body: B, in_flight: InFlight) -> Tracked<B> {
        Tracked { body, _in_flight: in_flight }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// What a connection with no request in flight is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiting {
    /// The rest of a request head, which must be complete by the deadline.
    Head,
    /// The first byte of the next request on a keep-alive connection.
    Idle,
}

/// A socket that ends its connection when a head is too slow or it idles too long.
pub struct TimedIo<T> {
    io: T,
    activity: Arc<Activity>,
    limits: Limits,
    waiting: Waiting,
    /// How many requests had finished when the deadline was last set.
    finished: u64,
    deadline: Instant,
    sleep: Pin<Box<Sleep>>,
}

impl<T> TimedIo<T> {
    /// A new connection: its first request head is due within the head timeout.
    pub fn new(io: T, activity: Arc<Activity>, limits: Limits) -> TimedIo<T> {
        let deadline = Instant::now() + limits.head_timeout;
        TimedIo {
            io,
            activity,
            limits,
            waiting: Waiting::Head,
            finished: 0,
            deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
        }
    }

    fn wait(&mut self, waiting: Waiting, timeout: Duration) {
        self.waiting = waiting;
        self.deadline = Instant::now() + timeout;
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.activity.busy() {
            this.activity.wake_when_done(cx.waker());
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let finished = this.activity.finished();
        if finished != this.finished {
            this.finished = finished;
            this.wait(Waiting::Idle, this.limits.idle_timeout);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.waiting == Waiting::Idle && buf.filled().len() > before {
                    this.wait(Waiting::Head, this.limits.head_timeout);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                if this.sleep.deadline() != this.deadline {
                    this.sleep.as_mut().reset(this.deadline);
                }
                ready!(this.sleep.as_mut().poll(cx));
                let what = match this.waiting {
                    Waiting::Head => "the request head did not arrive in time",
                    Waiting::Idle => "the keep-alive connection was idle too long",
                };
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, what)))
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// hyper answers a few malformed requests itself, before any service runs: a head
/// larger than its read buffer (`431`), a request target too long (`414`), and a head
/// it cannot parse, such as one with two `Content-Length` headers (`400`). hyper 1 has
/// no hook for that answer and sends it with an empty body. [`Enveloped`] sits between
/// hyper and the connection (above TLS) and gives such an answer the error envelope of
/// SPEC §2 on its way out (docs/decisions/0021).
///
/// It knows hyper's answer by its shape alone: a head of one of those statuses with
/// `content-length: 0` and no `content-type`. Every answer of the server's own carries
/// a JSON body with its content type, so nothing else looks like it.
pub struct Enveloped<T> {
    io: T,
    /// The envelope answer that replaces hyper's, and how much of it is written.
    replacement: Option<(Vec<u8>, usize)>,
}

impl<T> Enveloped<T> {
    pub fn new(io: T) -> Enveloped<T> {
        Enveloped { io, replacement: None }
    }
}

/// The answer to send instead of `head`, when `head` is one of hyper's own.
fn envelope_for(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let (status_line, headers) = text.strip_suffix("\r\n\r\n")?.split_once("\r\n")?;
    let status = status_line.strip_prefix("HTTP/1.1 ").or_else(|| status_line.strip_prefix("HTTP/1.0 "))?;
    let headers: Vec<String> = headers.split("\r\n").map(str::to_ascii_lowercase).collect();
    let empty = headers.iter().any(|header| header == "content-length: 0");
    if !empty || headers.iter().any(|header| header.starts_with("content-type:")) {
        return None;
    }
    let error = match status.get(..3)? {
        "400" => crate::api::ApiError::new(
            crate::api::Code::InvalidArgument,
            "the request is not valid HTTP/1.1 (a malformed request line or header, or a body framed twice)",
        ),
        "414" => crate::api::ApiError::new(
            crate::api::Code::PayloadTooLarge,
            "the request target is longer than the server reads",
        ),
        "431" => crate::api::ApiError::new(
            crate::api::Code::PayloadTooLarge,
            "the request head is larger than the server reads",
        ),
        _ => return None,
    };
    // No request was read, so none named itself: the answer gets a new id.
    let id = super::request_id::RequestId::new();
    let mut body = error.body();
    body["error"]["requestId"] = serde_json::Value::from(id.as_str());
    let body = body.to_string();
    Some(
        format!(
            "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}: {id}\r\nconnection: close\r\n\r\n{body}",
            body.len(),
            super::request_id::HEADER,
        )
        .into_bytes(),
    )
}

impl<T: AsyncWrite + Unpin> Enveloped<T> {
    /// Writes what is left of the replacement answer.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                break;
            }
            let wrote = ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]))?;
            if wrote == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += wrote;
        }
        Poll::Ready(Ok(()))
    }

    /// hyper's write of `head`: replaced, and reported written whole, when it is one of
    /// hyper's own empty answers.
    fn poll_head(&mut self, cx: &mut Context<'_>, head: &[u8]) -> Option<Poll<io::Result<usize>>> {
        if self.replacement.is_none() {
            self.replacement = Some((envelope_for(head)?, 0));
        }
        Some(self.poll_replacement(cx).map_ok(|()| head.len()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Enveloped<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Enveloped<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(replaced) = this.poll_head(cx, buf) {
            return replaced;
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    /// hyper writes its own answers as one slice (a head and no body); a write of
    /// several slices is a response of the server's, passed on.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let mut slices = bufs.iter().filter(|slice| !slice.is_empty());
        if let (Some(only), None) = (slices.next(), slices.next())
            && let Some(replaced) = this.poll_head(cx, only)
        {
            return replaced;
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn limits() -> Limits {
        Limits { head_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(60), ..Limits::default() }
    }

    /// Reads once, with paused time running ahead only while the read is pending.
    async fn read(io: &mut TimedIo<tokio::io::DuplexStream>) -> io::Result<usize> {
        let mut buffer = [0; 64];
        io.read(&mut buffer).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_is_due_within_the_head_timeout_from_the_connection_and_an_idle_one_waits_longer() {
        let (client, server) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, activity.clone(), limits());
        let started = Instant::now();
        let error = read(&mut io).await.expect_err("nothing arrived");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));

        drop(client);

        // A request served, then the connection idles: the idle timeout applies.
        let (_client, server) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, activity.clone(), limits());
        drop(activity.begin());
        let started = Instant::now();
        let error = read(&mut io).await.expect_err("idle");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_is_never_timed_out_here() {
        let (mut client, server) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::default());
        let mut io = TimedIo::new(server, activity.clone(), limits());
        let in_flight = activity.begin();
        let reading = tokio::spawn(async move { read(&mut io).await.map(|read| (read, io)) });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!reading.is_finished(), "an hour in flight and still reading");
        client.write_all(b"x").await.expect("written");
        let (read, mut io) = reading.await.expect("joined").expect("read");
        assert_eq!(read, 1);
        // Finished: the wait that follows is an idle one.
        drop(in_flight);
        let started = Instant::now();
        assert_eq!(super::tests::read(&mut io).await.expect_err("idle").kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test]
    async fn hypers_own_empty_answers_get_the_envelope_and_the_servers_pass_unchanged() {
        for (head, code) in [
            (
                "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n",
                "PAYLOAD_TOO_LARGE",
            ),
            ("HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n", "INVALID_ARGUMENT"),
            ("HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n", "PAYLOAD_TOO_LARGE"),
        ] {
            // A small pipe, so that the answer is written in pieces while it is read.
            let (mut client, server) = tokio::io::duplex(64);
            let reading = tokio::spawn(async move {
                let mut answer = String::new();
                client.read_to_string(&mut answer).await.expect("read");
                answer
            });
            let mut io = Enveloped::new(server);
            io.write_all(head.as_bytes()).await.expect("written");
            io.shutdown().await.expect("shut down");
            drop(io);
            let answer = reading.await.expect("joined");
            let (answer_head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
            assert_eq!(answer_head.lines().next(), head.lines().next());
            assert!(answer_head.contains(&format!("content-length: {}", body.len())), "{answer}");
            let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
            assert_eq!(body["error"]["code"], code, "{answer}");
            let id = body["error"]["requestId"].as_str().expect("a request id");
            assert!(answer_head.contains(&format!("x-request-id: {id}\r\n")), "{answer}");
        }
        for own in [
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 308 Permanent Redirect\r\nlocation: /console\r\ncontent-length: 0\r\n\r\n",
        ] {
            let (mut client, server) = tokio::io::duplex(1024);
            let mut io = Enveloped::new(server);
            io.write_all(own.as_bytes()).await.expect("written");
            drop(io);
            let mut answer = String::new();
            client.read_to_string(&mut answer).await.expect("read");
            assert_eq!(answer, own);
        }
    }
}
