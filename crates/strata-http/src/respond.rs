//! Building responses: objects and Status bodies in the negotiated encoding, with the headers
//! every API response carries.

use std::io::Write;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use serde_json::Value;
use strata_object::Status;
use strata_registry::JsonListChunks;

use crate::negotiate::{ErrorFormat, Output};

/// The response body type of the frontend.
pub type Body = BoxBody<Bytes, std::convert::Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
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

/// A JSON list answered a chunk at a time (about [`LIST_CHUNK`] bytes each): a large list is
/// never copied whole into one buffer. Compact, its exact length is announced; `pretty`, each
/// chunk is indented on its way out.
pub fn streamed(
    code: u16,
    chunks: JsonListChunks,
    content_type: &'static str,
    pretty: bool,
) -> Response<Body> {
    let indenter = pretty.then(strata_codec::json::Indenter::default);
    let mut resp = Response::new(ListBody { chunks, indenter }.boxed());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The size of the chunks of a streamed list.
pub const LIST_CHUNK: usize = 64 * 1024;

struct ListBody {
    chunks: JsonListChunks,
    /// Set when the list is pretty-printed.
    indenter: Option<strata_codec::json::Indenter>,
}

impl hyper::body::Body for ListBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let chunk = this.chunks.next_chunk(LIST_CHUNK).map(|compact| {
            let Some(indenter) = this.indenter.as_mut() else {
                return compact;
            };
            let mut out = Vec::with_capacity(compact.len() * 2);
            indenter.push(&compact, &mut out);
            out
        });
        std::task::Poll::Ready(chunk.map(|c| Ok(hyper::body::Frame::data(Bytes::from(c)))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self.indenter {
            Some(_) => hyper::body::SizeHint::default(),
            None => hyper::body::SizeHint::with_exact(self.chunks.len() as u64),
        }
    }
}

/// A list in a format other than JSON, from its items' encodings (kept on each object
/// version): sent a chunk at a time, as a JSON list is, with its exact length announced.
pub fn pieces(code: u16, list: Pieces, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(list.boxed());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// How a list's format puts one item's bytes in the list.
#[derive(Clone, Copy)]
pub enum Framing {
    /// As they are (YAML sequence elements, CBOR array elements).
    Bare,
    /// As the list message's field 2 (protobuf).
    ProtobufField,
}

impl Framing {
    fn len(self, item: &[u8]) -> usize {
        match self {
            Framing::Bare => item.len(),
            Framing::ProtobufField => strata_codec::proto::list_item_len(item.len()),
        }
    }

    fn write(self, out: &mut Vec<u8>, item: &[u8]) {
        match self {
            Framing::Bare => out.extend_from_slice(item),
            Framing::ProtobufField => strata_codec::proto::write_list_item(out, item),
        }
    }
}

/// A list's bytes as the parts its codec gives (what comes before the items, the items, what
/// comes after them), copied into chunks as they are sent.
pub struct Pieces {
    head: Vec<u8>,
    items: std::vec::IntoIter<Bytes>,
    framing: Framing,
    tail: Option<Vec<u8>>,
    /// The bytes not yet sent.
    remaining: usize,
}

impl Pieces {
    /// The list `head`, `items` framed by `framing`, `tail`.
    pub fn new(head: Vec<u8>, items: Vec<Bytes>, framing: Framing, tail: Vec<u8>) -> Pieces {
        let size: usize = items.iter().map(|i| framing.len(i)).sum();
        Pieces {
            remaining: head.len() + size + tail.len(),
            head,
            items: items.into_iter(),
            framing,
            tail: Some(tail),
        }
    }
}

impl hyper::body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(mut tail) = this.tail.take() else {
            return std::task::Poll::Ready(None);
        };
        let mut out = std::mem::take(&mut this.head);
        out.reserve(LIST_CHUNK.min(this.remaining).saturating_sub(out.len()));
        while out.len() < LIST_CHUNK {
            match this.items.next() {
                Some(item) => this.framing.write(&mut out, &item),
                None => {
                    out.append(&mut tail);
                    break;
                }
            }
        }
        if !tail.is_empty() || this.items.len() > 0 {
            this.tail = Some(tail);
        }
        this.remaining = this.remaining.saturating_sub(out.len());
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(out)))))
    }

    fn is_end_stream(&self) -> bool {
        self.tail.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.remaining as u64)
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
    let Ok(collected) = body.collect().await;
    let mut encoder = gzip_encoder();
    // Writing into memory cannot fail.
    let _ = encoder.write_all(&collected.to_bytes());
    Response::from_parts(parts, full(encoder.finish().unwrap_or_default()))
}

fn gzip_encoder() -> flate2::write::GzEncoder<Vec<u8>> {
    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())
}

/// A body gzipped as it is sent.
struct Gzipped {
    body: Body,
    /// Taken when the body has ended and the gzip trailer been sent.
    encoder: Option<flate2::write::GzEncoder<Vec<u8>>>,
}

impl hyper::body::Body for Gzipped {
    type Data = Bytes;
    type Error = std::convert::Infallible;

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
                Some(Err(never)) => match never {},
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
