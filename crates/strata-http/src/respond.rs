//! Building responses: objects and Status bodies in the negotiated encoding, with the headers
//! every API response carries.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use serde_json::Value;
use strata_object::Status;

/// The response body type of the frontend.
pub type Body = BoxBody<Bytes, std::convert::Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// How a response body is rendered.
#[derive(Clone, Copy, Debug, Default)]
pub struct Render {
    pub pretty: bool,
    /// Errors go out as YAML: the client accepts YAML before JSON.
    pub yaml: bool,
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
    let mut resp = if render.yaml {
        yaml(code, &s.to_value())
    } else {
        json(code, &s.to_value(), render, "application/json")
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
