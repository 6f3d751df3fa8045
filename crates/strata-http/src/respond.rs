//! Building responses: objects and Status bodies in the negotiated encoding, with the headers
//! every API response carries.

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

/// A JSON list answered a chunk at a time (about [`LIST_CHUNK`] bytes each), with its exact
/// length announced: a large list is never copied whole into one buffer.
pub fn streamed(code: u16, chunks: JsonListChunks, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(ListBody(chunks).boxed());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// The size of the chunks of a streamed list.
pub const LIST_CHUNK: usize = 64 * 1024;

struct ListBody(JsonListChunks);

impl hyper::body::Body for ListBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let chunk = self.0.next_chunk(LIST_CHUNK);
        std::task::Poll::Ready(chunk.map(|c| Ok(hyper::body::Frame::data(Bytes::from(c)))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.0.len() as u64)
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

/// Gzips a full response body and labels it `Content-Encoding: gzip`.
pub async fn gzip(resp: Response<Body>) -> Response<Body> {
    use std::io::Write;
    let (mut parts, body) = resp.into_parts();
    let Ok(collected) = body.collect().await;
    let bytes = collected.to_bytes();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let compressed = enc.write_all(&bytes).and_then(|_| enc.finish());
    match compressed {
        Ok(out) => {
            parts
                .headers
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            parts.headers.remove(header::CONTENT_LENGTH);
            parts
                .headers
                .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            Response::from_parts(parts, full(out))
        }
        Err(_) => Response::from_parts(parts, full(bytes)),
    }
}
