//! Request bodies: size limits, content types, and decoding into values (duplicates recorded
//! for field validation).

use bytes::Bytes;
use http::{header, Method, Request};
use hyper::body::Incoming;
use serde_json::{json, Value};
use strata_object::{GroupVersionKind, Status};

use super::header_str;
use crate::limits::{read_body, BodyRead};
use crate::negotiate;
use crate::Frontend;

/// Reads and decodes an object request body, checking size and content type. JSON and YAML
/// bodies report their duplicate members for field validation.
pub(crate) async fn object_body(
    fe: &Frontend,
    req: Request<Incoming>,
    expected: &GroupVersionKind,
) -> Result<strata_registry::Body, Status> {
    let content_type = header_str(req.headers(), header::CONTENT_TYPE).to_string();
    let format = fe.config.formats.body_format(&content_type)?;
    let bytes = body_bytes(fe, req).await?;
    decode_strict(format, &bytes, expected)
}

/// Decodes a request body; a protobuf body's envelope names its type, else `expected` is
/// assumed.
pub(crate) fn decode_body(
    format: negotiate::BodyFormat,
    bytes: &[u8],
    expected: &GroupVersionKind,
) -> Result<Value, Status> {
    decode_strict(format, bytes, expected).map(|b| b.value)
}

pub(crate) fn decode_strict(
    format: negotiate::BodyFormat,
    bytes: &[u8],
    expected: &GroupVersionKind,
) -> Result<strata_registry::Body, Status> {
    let decoded = match format {
        negotiate::BodyFormat::Json => strata_codec::strict::json(bytes),
        negotiate::BodyFormat::Yaml => strata_codec::strict::yaml(bytes),
        // Neither protobuf nor CBOR can carry a duplicate field: CBOR's decoder refuses
        // repeated map keys outright, as Kubernetes' does.
        negotiate::BodyFormat::Protobuf => {
            strata_codec::proto::decode(bytes, &expected.api_version(), &expected.kind).map(
                |value| strata_codec::strict::Decoded {
                    value,
                    duplicates: Vec::new(),
                },
            )
        }
        negotiate::BodyFormat::Cbor => {
            strata_codec::cbor::decode(bytes).map(|value| strata_codec::strict::Decoded {
                value,
                duplicates: Vec::new(),
            })
        }
    };
    decoded
        .map(|d| strata_registry::Body {
            value: d.value,
            duplicates: d.duplicates,
        })
        .map_err(|e| Status::bad_request(e.to_string()))
}

pub(crate) async fn body_bytes(fe: &Frontend, req: Request<Incoming>) -> Result<Bytes, Status> {
    let limit = fe.config.max_body_bytes;
    // A content-length over the limit is refused before anything is read.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // The request's audit keeps the body when its level records it.
    let audit = crate::audit::of(&req).map(|a| {
        (
            a,
            header_str(req.headers(), header::CONTENT_TYPE).to_string(),
        )
    });
    match read_body(req.into_body(), limit, declared).await {
        Ok(BodyRead::Complete(b)) => {
            if let Some((audit, content_type)) = audit {
                audit.note_body(&b, &content_type);
            }
            Ok(b)
        }
        Ok(BodyRead::TooLarge) => Err(Status::too_large(limit)),
        Err(e) => Err(Status::bad_request(format!(
            "failed to read the request body: {e}"
        ))),
    }
}

/// The body of a POST to a virtual type (the reviews): an object of `kind` (or of no stated
/// kind; an empty body is an empty object), in any accepted encoding. Other methods are 405.
pub(crate) async fn virtual_body(
    fe: &Frontend,
    req: Request<Incoming>,
    group: &str,
    kind: &str,
) -> Result<Value, Status> {
    if req.method() != Method::POST {
        return Err(Status::method_not_allowed());
    }
    let content_type = header_str(req.headers(), header::CONTENT_TYPE).to_string();
    let bytes = body_bytes(fe, req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let format = fe.config.formats.body_format(&content_type)?;
    let body = decode_body(format, &bytes, &GroupVersionKind::new(group, "v1", kind))?;
    if !body.is_object() {
        return Err(Status::bad_request(format!("a {kind} must be an object")));
    }
    if let Some(other) = body
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| *k != kind)
    {
        return Err(Status::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: the kind in the data ({other}) does not match"
        )));
    }
    Ok(body)
}
