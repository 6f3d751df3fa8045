//! The limits of the connection layer, as kube-apiserver's Go server sets them: the size of a
//! request's header, the time a client has to send it, the streams of one HTTP/2 connection,
//! and what happens to a request body over the size limit.
//!
//! - Header size: Go's `MaxHeaderBytes`, 1 MiB, which kube-apiserver keeps; Go reads 4 KiB past
//!   it before it refuses. A longer header is answered 431 Request Header Fields Too Large
//!   ([`header_too_large`]; over HTTP/1.1 the connection is then closed). hyper's read buffer
//!   is capped at that size too, so a header far longer is refused (431) before it is all
//!   read, as is one with more than hyper's 100 fields. Over HTTP/2 the limit is also
//!   announced in SETTINGS_MAX_HEADER_LIST_SIZE.
//! - Header read time: kube-apiserver's `ReadHeaderTimeout`, 32 s, and `IdleTimeout`, 90 s.
//!   A connection that has not sent a whole request header 32 s after it was accepted (its TLS
//!   handshake done), and an HTTP/1.1 request whose header is not complete 32 s after its
//!   first byte, are closed without an answer, so a client that never finishes its header
//!   holds nothing for long. An HTTP/1.1 connection kept alive waits 90 s for the first byte
//!   of its next request, as Go's server waits, so clients that pool connections (Go's
//!   transport keeps them 90 s) do not meet a connection closing under them. [`Activity`]
//!   tracks the phases and [`supervise`] enforces them. An HTTP/2 connection, once it has
//!   begun a request, has no such deadline.
//! - HTTP/2 streams: `--http2-max-streams-per-connection`; 0 (the default) means Go's default,
//!   250, which kube-apiserver then states explicitly in its SETTINGS.
//! - Bodies over the limit ([`read_body`]): after the 413 the rest is read and thrown away
//!   (up to [`DRAIN_FACTOR`] times the limit, for up to [`DRAIN_TIME`]), so a client still
//!   sending reads the Status. Left unread, the HTTP/2 stream would be reset once the answer
//!   ended (RST_STREAM NO_ERROR, which some clients, curl among them, take as the loss of the
//!   answer) and an HTTP/1.1 connection closed with unread bytes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The longest request header accepted: Go's `MaxHeaderBytes` default, which kube-apiserver
/// keeps.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// What Go reads past `MaxHeaderBytes` before it refuses a header.
const HEADER_SLACK: usize = 4096;

/// How long a client has to send a request's header: kube-apiserver's `ReadHeaderTimeout`.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);

/// How long a kept-alive HTTP/1.1 connection waits for its next request: kube-apiserver's
/// `IdleTimeout`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The streams of one HTTP/2 connection when `--http2-max-streams-per-connection` is 0: Go's
/// default, which kube-apiserver announces explicitly.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 250;

/// How much of an oversized body is drained, in multiples of the body limit: an object that
/// grew a little past the limit still gets its Status to the client; an upload far beyond it
/// is cut off.
pub(crate) const DRAIN_FACTOR: usize = 4;

/// How long an oversized body is drained at most.
pub(crate) const DRAIN_TIME: Duration = Duration::from_secs(10);

/// The connection builder: HTTP/1.1 and HTTP/2 (by ALPN or prior knowledge) with the limits
/// above. `max_streams` is `--http2-max-streams-per-connection` (0: the default).
pub(crate) fn builder(max_streams: u32) -> auto::Builder<TokioExecutor> {
    let header_bytes = MAX_HEADER_BYTES + HEADER_SLACK;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // hyper's own timer would also run while a kept-alive connection waits; [`supervise`]
        // keeps the two deadlines apart.
        .header_read_timeout(None)
        .max_buf_size(header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(if max_streams == 0 {
            DEFAULT_HTTP2_MAX_STREAMS
        } else {
            max_streams
        })
        .max_header_list_size(u32::try_from(header_bytes).unwrap_or(u32::MAX));
    builder
}

/// What one connection is doing, as far as its deadlines go. Shared by the connection's
/// reader ([`Watched`]), its requests ([`Activity::begin`]) and [`supervise`].
pub(crate) struct Activity {
    state: Mutex<State>,
}

struct State {
    phase: Phase,
    /// When the phase began.
    since: Instant,
    /// The client spoke HTTP/2 (its first bytes were the connection preface).
    http2: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Reading a request header (or waiting for the first one): [`HEADER_READ_TIMEOUT`].
    Header,
    /// Requests in flight, their responses not yet all sent: no deadline.
    Busy(usize),
    /// HTTP/1.1, between requests: [`IDLE_TIMEOUT`] until the next one's first byte.
    Idle,
    /// HTTP/2 after its first request: no deadline.
    Open,
}

impl Activity {
    /// A connection just accepted: its first header is due within [`HEADER_READ_TIMEOUT`].
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            state: Mutex::new(State {
                phase: Phase::Header,
                since: Instant::now(),
                http2: false,
            }),
        })
    }

    /// The TLS handshake is done: the first header is due [`HEADER_READ_TIMEOUT`] from now.
    pub(crate) fn handshake_done(&self) {
        self.state().since = Instant::now();
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request's header has been read; the returned guard ends the request when dropped
    /// (with its response body, see [`crate::guarded::with_guard`]).
    pub(crate) fn begin(self: &Arc<Self>) -> RequestGuard {
        let mut st = self.state();
        st.phase = match st.phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        };
        RequestGuard(self.clone())
    }

    /// Bytes arrived: on an idle HTTP/1.1 connection, a new request's header has begun.
    fn bytes_read(&self) {
        let mut st = self.state();
        if st.phase == Phase::Idle {
            st.phase = Phase::Header;
            st.since = Instant::now();
        }
    }

    fn set_http2(&self) {
        self.state().http2 = true;
    }

    /// When the connection is to be closed if nothing changes, or `None`.
    fn deadline(&self) -> Option<Instant> {
        let st = self.state();
        match st.phase {
            Phase::Header => Some(st.since + HEADER_READ_TIMEOUT),
            Phase::Idle => Some(st.since + IDLE_TIMEOUT),
            Phase::Busy(_) | Phase::Open => None,
        }
    }
}

/// One request in flight on a connection; dropping it ends the request.
pub(crate) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut st = self.0.state();
        st.phase = match st.phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ if st.http2 => Phase::Open,
            _ => Phase::Idle,
        };
        st.since = Instant::now();
    }
}

/// Drives `conn` (one connection) to its end, unless [`Activity`] passes one of its deadlines:
/// then `conn` is dropped, which closes it without an answer, and the result is `None`.
///
/// The phases change without waking this future: it looks again at least every
/// [`HEADER_READ_TIMEOUT`], which is soon enough, because a deadline set after it looked is
/// never earlier than that.
pub(crate) async fn supervise<F: Future>(conn: F, activity: &Activity) -> Option<F::Output> {
    tokio::pin!(conn);
    loop {
        let now = Instant::now();
        let wake = match activity.deadline() {
            Some(deadline) if deadline <= now => return None,
            Some(deadline) => deadline.min(now + HEADER_READ_TIMEOUT),
            None => now + HEADER_READ_TIMEOUT,
        };
        if let Ok(out) = tokio::time::timeout_at(wake, &mut conn).await {
            return Some(out);
        }
    }
}

/// The start of HTTP/2's connection preface, which tells a prior-knowledge (or ALPN) HTTP/2
/// client from an HTTP/1.1 one.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// A connection's byte stream, reporting what it reads to its [`Activity`].
pub(crate) struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
    /// How much of [`HTTP2_PREFACE`] the first bytes matched, until the protocol is known.
    preface: Option<usize>,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched {
            inner,
            activity,
            preface: Some(0),
        }
    }

    fn saw(&mut self, bytes: &[u8]) {
        if let Some(matched) = self.preface {
            let want = &HTTP2_PREFACE[matched..];
            let n = want.len().min(bytes.len());
            self.preface = if want[..n] != bytes[..n] {
                None
            } else if matched + n == HTTP2_PREFACE.len() {
                self.activity.set_http2();
                None
            } else {
                Some(matched + n)
            };
        }
        self.activity.bytes_read();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.saw(&buf.filled()[before..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The 431 answer to a request whose header is longer than [`MAX_HEADER_BYTES`] (and Go's
/// slack), counted as Go counts it: the request line and every field with its separators.
/// hyper's read buffer only bounds the header roughly (a read may take it past the cap), so
/// the exact limit is checked here, before anything else looks at the request.
pub(crate) fn header_too_large<B>(req: &Request<B>) -> Option<Response<crate::Body>> {
    // "GET " + target + " HTTP/1.1\r\n" ...
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + 12;
    let fields: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if line + fields <= MAX_HEADER_BYTES + HEADER_SLACK {
        return None;
    }
    let mut resp = Response::new(crate::respond::full("431 Request Header Fields Too Large"));
    *resp.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    Some(resp)
}

/// A request body read up to a limit.
pub(crate) enum BodyRead {
    /// The whole body.
    Complete(Bytes),
    /// The body went past the limit; what is left of it is drained in the background.
    TooLarge,
}

/// Reads `body` up to `limit` bytes. A body that goes past it is drained, up to
/// [`DRAIN_FACTOR`] times the limit and for [`DRAIN_TIME`] at most, while the caller answers
/// 413; `declared` is its content-length, if any, which may already say it is too long.
pub(crate) async fn read_body(
    mut body: Incoming,
    limit: usize,
    declared: Option<u64>,
) -> Result<BodyRead, hyper::Error> {
    let drain_limit = limit.saturating_mul(DRAIN_FACTOR);
    if let Some(len) = declared {
        if len > limit as u64 {
            if len <= drain_limit as u64 {
                drain(body, drain_limit);
            }
            return Ok(BodyRead::TooLarge);
        }
    }
    // Most bodies come in one piece, which is returned as it is.
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    let mut read = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        read += data.len();
        if read > limit {
            drain(body, drain_limit.saturating_sub(read));
            return Ok(BodyRead::TooLarge);
        }
        match &first {
            None => first = Some(data),
            Some(f) => {
                if rest.is_empty() {
                    let expected = declared.map_or(0, |len| len as usize);
                    rest.reserve(expected.max(f.len() + data.len()));
                    rest.extend_from_slice(f);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    Ok(BodyRead::Complete(if rest.is_empty() {
        first.unwrap_or_default()
    } else {
        rest.freeze()
    }))
}

/// Reads and throws away up to `budget` more bytes of `body` in the background, for
/// [`DRAIN_TIME`] at most, then lets it go.
fn drain(mut body: Incoming, budget: usize) {
    tokio::spawn(async move {
        let drained = tokio::time::timeout(DRAIN_TIME, async {
            let mut left = budget;
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    if data.len() > left {
                        return false;
                    }
                    left -= data.len();
                }
            }
            true
        })
        .await;
        if !matches!(drained, Ok(true)) {
            tracing::debug!("stopped reading an oversized request body");
        }
    });
}
