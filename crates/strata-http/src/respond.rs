//! Building responses: objects and Status bodies in the negotiated encoding, with the headers
//! every API response carries.

use std::io::Write;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use serde_json::Value;
use strata_codec::proto;
use strata_object::Status;
use strata_registry::JsonListChunks;

use crate::negotiate::{ErrorFormat, Output};

/// The response body type of the frontend.
pub type Body = BoxBody<Bytes, BodyError>;

/// Why a body stopped before its end: the server cannot go on with an answer it has started
/// (its status and first bytes are sent), so the connection carrying it is broken off and the
/// client sees an incomplete answer rather than a wrong one.
#[derive(Debug)]
pub struct BodyError(String);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BodyError {}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// How a response body is rendered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Render {
    pub pretty: bool,
    /// The encoding of error Status bodies (the client's first acceptable plain format).
    pub errors: ErrorFormat,
}

/// A JSON response with `code` and `content_type`.
pub fn json(code: u16, value: &Value, render: Render, content_type: &str) -> Response<Body> {
    let body = strata_codec::json::encode(value, render.pretty);
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// A response of raw bytes with `code` and `content_type`.
pub fn bytes(code: u16, body: impl Into<Bytes>, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The size of the chunks of a list answered a chunk at a time.
pub const LIST_CHUNK: usize = 64 * 1024;

/// Where the bytes of an answer sent a chunk at a time come from.
pub trait Chunks: Send + Sync + 'static {
    /// The next chunk: at least `size` bytes unless the end comes first, `None` after the last,
    /// an error when the rest cannot be made (the answer is then broken off).
    fn next_chunk(&mut self, size: usize) -> Option<Result<Vec<u8>, String>>;

    /// The number of bytes still to come, when it is known.
    fn remaining(&self) -> Option<usize>;
}

impl Chunks for JsonListChunks {
    fn next_chunk(&mut self, size: usize) -> Option<Result<Vec<u8>, String>> {
        JsonListChunks::next_chunk(self, size).map(Ok)
    }

    fn remaining(&self) -> Option<usize> {
        Some(self.len())
    }
}

/// A list answered a chunk at a time (about [`LIST_CHUNK`] bytes each): a large list is never
/// copied whole into one buffer. Its length is announced when known; `pretty` (JSON only),
/// each chunk is indented on its way out, and the length is not.
pub fn chunked(
    code: u16,
    chunks: impl Chunks,
    content_type: &'static str,
    pretty: bool,
) -> Response<Body> {
    let body = Chunked {
        chunks: Box::new(chunks),
        indenter: pretty.then(strata_codec::json::Indenter::default),
        done: false,
    };
    let mut resp = Response::new(body.boxed());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

struct Chunked {
    chunks: Box<dyn Chunks>,
    /// Set when the answer is pretty-printed JSON.
    indenter: Option<strata_codec::json::Indenter>,
    done: bool,
}

impl hyper::body::Body for Chunked {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.done {
            return std::task::Poll::Ready(None);
        }
        let chunk = match this.chunks.next_chunk(LIST_CHUNK) {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => {
                tracing::error!(error = %e, "an answer sent in chunks was broken off");
                this.done = true;
                return std::task::Poll::Ready(Some(Err(BodyError(e))));
            }
            None => {
                this.done = true;
                return std::task::Poll::Ready(None);
            }
        };
        let chunk = match this.indenter.as_mut() {
            Some(indenter) => {
                let mut out = Vec::with_capacity(chunk.len() * 2);
                indenter.push(&chunk, &mut out);
                out
            }
            None => chunk,
        };
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(chunk)))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match (&self.indenter, self.chunks.remaining()) {
            (None, Some(n)) => hyper::body::SizeHint::with_exact(n as u64),
            _ => hyper::body::SizeHint::default(),
        }
    }
}

/// The items of a list sent a chunk at a time ([`Pieces`]), written one after another into the
/// chunks as they are made.
pub trait Items: Send + Sync + 'static {
    /// Writes the next item (with what separates it from the one before) to `out`: `Ok(false)`
    /// when none is left, an error when it cannot be written.
    fn write_next(&mut self, out: &mut Vec<u8>) -> Result<bool, String>;

    /// Whether every item has been written.
    fn is_done(&self) -> bool;

    /// The bytes the items not yet written will take, when that is known.
    fn remaining(&self) -> Option<usize>;
}

/// The items of a protobuf list, made beforehand (the list's envelope tells their length
/// before them), each written as the list message's field 2.
pub struct ProtobufItems {
    items: std::vec::IntoIter<Bytes>,
    remaining: usize,
}

impl ProtobufItems {
    pub fn new(items: Vec<Bytes>) -> Self {
        ProtobufItems {
            remaining: items.iter().map(|i| proto::list_item_len(i.len())).sum(),
            items: items.into_iter(),
        }
    }
}

impl Items for ProtobufItems {
    fn write_next(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
        let Some(item) = self.items.next() else {
            return Ok(false);
        };
        proto::write_list_item(out, &item);
        self.remaining -= proto::list_item_len(item.len());
        Ok(true)
    }

    fn is_done(&self) -> bool {
        self.items.len() == 0
    }

    fn remaining(&self) -> Option<usize> {
        Some(self.remaining)
    }
}

/// A list's bytes as the parts its codec gives (what comes before the items, the items, what
/// comes after them), copied into chunks as they are sent.
pub struct Pieces<I> {
    head: Vec<u8>,
    items: I,
    /// Taken with the last chunk.
    tail: Option<Vec<u8>>,
}

impl<I: Items> Pieces<I> {
    /// The list `head`, `items`, `tail`.
    pub fn of(head: Vec<u8>, items: I, tail: Vec<u8>) -> Self {
        Pieces {
            head,
            items,
            tail: Some(tail),
        }
    }
}

impl<I: Items> Chunks for Pieces<I> {
    fn next_chunk(&mut self, size: usize) -> Option<Result<Vec<u8>, String>> {
        let mut tail = self.tail.take()?;
        let mut out = std::mem::take(&mut self.head);
        let room = strata_registry::chunk_capacity(size);
        out.reserve(
            room.min(self.remaining().unwrap_or(room))
                .saturating_sub(out.len()),
        );
        while out.len() < size {
            match self.items.write_next(&mut out) {
                Ok(true) => {}
                Ok(false) => {
                    out.append(&mut tail);
                    break;
                }
                Err(e) => return Some(Err(e)),
            }
        }
        // Until the tail is written, there is another chunk.
        if !tail.is_empty() || !self.items.is_done() {
            self.tail = Some(tail);
        }
        Some(Ok(out))
    }

    fn remaining(&self) -> Option<usize> {
        match &self.tail {
            Some(tail) => Some(self.head.len() + self.items.remaining()? + tail.len()),
            None => Some(0),
        }
    }
}

/// A value (with `kind` and `apiVersion`) in a plain output format: JSON, YAML or protobuf.
/// A kind with no protobuf form falls back to JSON (negotiation keeps that from happening).
pub fn value(code: u16, v: &Value, output: &Output, render: Render) -> Response<Body> {
    match output {
        Output::Yaml => yaml(code, v),
        Output::Protobuf(name) => match strata_codec::proto::encode(v) {
            Ok(b) => bytes(code, b, name),
            Err(_) => json(code, v, render, "application/json"),
        },
        Output::Cbor => bytes(code, strata_codec::cbor::encode(v), crate::negotiate::CBOR),
        Output::Json | Output::Table(_) => json(code, v, render, "application/json"),
    }
}

/// Adds one `Warning: 299 - "<text>"` header per warning (RFC 9111 §5.5 form, as Kubernetes
/// sends them): quotes and backslashes escaped, items with control characters dropped, repeats
/// sent once, and the whole kept under 4096 characters by truncating items to 256.
pub fn add_warnings(resp: &mut Response<Body>, warnings: &[String]) {
    const BUDGET: usize = 4096;
    const TRUNCATED: usize = 256;
    let mut seen: Vec<&str> = Vec::new();
    for w in warnings {
        if !seen.contains(&w.as_str()) && !w.chars().any(char::is_control) {
            seen.push(w);
        }
    }
    let total: usize = seen.iter().map(|w| w.chars().count()).sum();
    for w in seen {
        let text: String = if total > BUDGET {
            w.chars().take(TRUNCATED).collect()
        } else {
            w.to_string()
        };
        let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_bytes(format!("299 - \"{escaped}\"").as_bytes()) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
}

/// A YAML response with `code`.
pub fn yaml(code: u16, value: &Value) -> Response<Body> {
    let mut resp = Response::new(full(strata_codec::yaml::encode(value)));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    resp
}

/// A Status response; its `code` is the HTTP status, and `Retry-After` mirrors
/// `details.retryAfterSeconds`.
pub fn status(s: &Status, render: Render) -> Response<Body> {
    let code = if s.code == 0 { 500 } else { s.code };
    let mut resp = match render.errors {
        ErrorFormat::Yaml => yaml(code, &s.to_value()),
        ErrorFormat::Protobuf(name) => value(code, &s.to_value(), &Output::Protobuf(name), render),
        ErrorFormat::Cbor => value(code, &s.to_value(), &Output::Cbor, render),
        ErrorFormat::Json => json(code, &s.to_value(), render, "application/json"),
    };
    if let Some(secs) = s.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// A plain-text response (used only outside the API prefixes, as Kubernetes does).
pub fn text(code: u16, body: &'static str) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Marks a response whose body may be gzipped (a get or list answer, never a watch stream).
#[derive(Clone, Copy, Debug)]
pub struct Compressible;

/// Whether `Accept-Encoding` allows gzip (present with a non-zero quality).
pub fn accepts_gzip(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .next()
                .unwrap_or(1.0);
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && q > 0.0
        })
}

/// Gzips a response body and labels it `Content-Encoding: gzip`. A body known to be short is
/// compressed at once and its length announced; any other (a list streamed a chunk at a time)
/// is compressed a frame at a time, so it is never held whole, compressed or not.
pub async fn gzip(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    parts
        .headers
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    let short = hyper::body::Body::size_hint(&body)
        .exact()
        .is_some_and(|n| n <= LIST_CHUNK as u64);
    if !short {
        let encoder = Some(gzip_encoder());
        return Response::from_parts(parts, Gzipped { body, encoder }.boxed());
    }
    let collected = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Response::from_parts(parts, broken_off(e)),
    };
    let mut encoder = gzip_encoder();
    // Writing into memory cannot fail.
    let _ = encoder.write_all(&collected);
    Response::from_parts(parts, full(encoder.finish().unwrap_or_default()))
}

fn gzip_encoder() -> flate2::write::GzEncoder<Vec<u8>> {
    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())
}

/// A body that fails at once with `error`: the answer whose body failed before its first
/// byte was sent.
pub(crate) fn broken_off(error: BodyError) -> Body {
    Chunked {
        chunks: Box::new(Failed(Some(error.0))),
        indenter: None,
        done: false,
    }
    .boxed()
}

/// Chunks whose first is an error.
struct Failed(Option<String>);

impl Chunks for Failed {
    fn next_chunk(&mut self, _: usize) -> Option<Result<Vec<u8>, String>> {
        self.0.take().map(Err)
    }

    fn remaining(&self) -> Option<usize> {
        None
    }
}

/// A body gzipped as it is sent.
struct Gzipped {
    body: Body,
    /// Taken when the body has ended and the gzip trailer been sent.
    encoder: Option<flate2::write::GzEncoder<Vec<u8>>>,
}

impl hyper::body::Body for Gzipped {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            let Some(encoder) = this.encoder.as_mut() else {
                return Poll::Ready(None);
            };
            let out = match std::task::ready!(std::pin::Pin::new(&mut this.body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    let _ = encoder.write_all(&data);
                    std::mem::take(encoder.get_mut())
                }
                Some(Err(e)) => {
                    this.encoder = None;
                    return Poll::Ready(Some(Err(e)));
                }
                None => match this.encoder.take() {
                    Some(encoder) => encoder.finish().unwrap_or_default(),
                    None => Vec::new(),
                },
            };
            // Deflate holds input back until it has a block: ask for more until bytes come.
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(out)))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However the list is cut into chunks, the chunks make head, items and tail, and the
    /// length told before each chunk is what is still to come.
    #[test]
    fn pieces_send_every_byte_once_and_tell_what_is_left() {
        let items: Vec<Bytes> = (0..40)
            .map(|i| Bytes::from(vec![b'a' + (i % 26) as u8; i * 37]))
            .collect();
        for (count, tail) in [(0, "tail"), (1, ""), (2, "tail"), (40, ""), (40, "tail")] {
            for size in [1, 50, 700, 1 << 20] {
                let mut want = b"head".to_vec();
                for item in &items[..count] {
                    proto::write_list_item(&mut want, item);
                }
                want.extend_from_slice(tail.as_bytes());
                let mut pieces = Pieces::of(
                    b"head".to_vec(),
                    ProtobufItems::new(items[..count].to_vec()),
                    tail.as_bytes().to_vec(),
                );
                let mut got = Vec::new();
                while let Some(chunk) = {
                    assert_eq!(pieces.remaining(), Some(want.len() - got.len()));
                    pieces.next_chunk(size)
                } {
                    got.extend_from_slice(&chunk.unwrap());
                }
                assert_eq!(got, want, "{count} items, chunks of {size}");
            }
        }
    }

    /// Items of which the one numbered `fails` cannot be written; `told` is the length they
    /// claim.
    struct Failing {
        next: usize,
        fails: usize,
        told: Option<usize>,
    }

    impl Items for Failing {
        fn write_next(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
            if self.next == self.fails {
                return Err(format!("item {} cannot be written", self.next));
            }
            out.extend_from_slice(&[b'x'; 1000]);
            self.next += 1;
            Ok(true)
        }

        fn is_done(&self) -> bool {
            false
        }

        fn remaining(&self) -> Option<usize> {
            self.told
        }
    }

    /// An item that cannot be written breaks the answer off after the chunks before it: the
    /// body ends in an error, never in a tail that would make the truncated list look whole.
    #[tokio::test]
    async fn an_item_that_cannot_be_written_breaks_the_answer_off() {
        for gzipped in [false, true] {
            let items = Failing {
                next: 0,
                fails: 2 * LIST_CHUNK / 1000,
                told: None,
            };
            let mut resp = chunked(
                200,
                Pieces::of(b"[".to_vec(), items, b"]".to_vec()),
                "application/json",
                false,
            );
            if gzipped {
                resp = gzip(resp).await;
            }
            let mut body = resp.into_body();
            let mut sent = 0;
            let error = loop {
                match body.frame().await {
                    Some(Ok(frame)) => sent += frame.into_data().map_or(0, |d| d.len()),
                    Some(Err(e)) => break e,
                    None => panic!("the body ended without its error (gzip {gzipped})"),
                }
            };
            assert!(sent > 0, "the chunks before the failure are sent");
            assert_eq!(error.to_string(), "item 131 cannot be written");
            assert!(body.frame().await.is_none(), "nothing after the error");
        }
        // A short body (compressed whole, at once) that fails: the error still comes.
        let items = Failing {
            next: 0,
            fails: 0,
            told: Some(10),
        };
        let resp = chunked(
            200,
            Pieces::of(Vec::new(), items, Vec::new()),
            "application/json",
            false,
        );
        let mut body = gzip(resp).await.into_body();
        assert!(matches!(body.frame().await, Some(Err(_))));
    }
}
