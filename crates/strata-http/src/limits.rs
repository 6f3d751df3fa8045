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
//! - Header read time: kube-apiserver's `ReadHeaderTimeout`, 32 s. An HTTP/1.1 request whose
//!   header is not complete that long after its first byte (hyper's header read timeout), and
//!   a connection that has not begun a single request that long after it was accepted (its
//!   TLS handshake done), are closed without an answer, so a client that never finishes its
//!   header holds nothing for long. Because hyper's timer also runs while an HTTP/1.1
//!   connection waits for its next request, an idle keep-alive connection is closed after
//!   32 s (kube-apiserver keeps one for 90 s).
//! - HTTP/2 streams: `--http2-max-streams-per-connection`; 0 (the default) means Go's default,
//!   250, which kube-apiserver then states explicitly in its SETTINGS.
//! - Bodies over the limit ([`read_body`]): after the 413 the rest is read and thrown away
//!   (up to [`DRAIN_FACTOR`] times the limit, for up to [`DRAIN_TIME`]), so a client still
//!   sending reads the Status. Left unread, the HTTP/2 stream would be reset once the answer
//!   ended (RST_STREAM NO_ERROR, which some clients, curl among them, take as the loss of the
//!   answer) and an HTTP/1.1 connection closed with unread bytes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;

/// The longest request header accepted: Go's `MaxHeaderBytes` default, which kube-apiserver
/// keeps.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// What Go reads past `MaxHeaderBytes` before it refuses a header.
const HEADER_SLACK: usize = 4096;

/// How long a client has to send a request's header: kube-apiserver's `ReadHeaderTimeout`.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);

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
        .header_read_timeout(HEADER_READ_TIMEOUT)
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

/// Drives `conn` (one connection) to its end, unless no request has begun on it (`started`
/// still false) after [`HEADER_READ_TIMEOUT`]: then it is dropped, which closes it. Before its
/// first request a connection is in hyper's protocol detection, which has no deadline of its
/// own; hyper's HTTP/1.1 header timeout covers the requests after.
pub(crate) async fn first_request_within<F: Future>(
    conn: F,
    started: &AtomicBool,
) -> Option<F::Output> {
    tokio::pin!(conn);
    match tokio::time::timeout(HEADER_READ_TIMEOUT, &mut conn).await {
        Ok(out) => Some(out),
        Err(_) if started.load(Ordering::Relaxed) => Some(conn.await),
        Err(_) => None,
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
