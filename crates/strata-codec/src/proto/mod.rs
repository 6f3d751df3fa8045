//! The protobuf encoding (`application/vnd.svc.protobuf`, and Kubernetes' name
//! `application/vnd.kubernetes.protobuf`): the `k8s\0` envelope around `runtime.Unknown`, and the
//! mapping between the JSON value trees the server works on and the messages generated from
//! `proto/` (`cargo xtask codegen`).
//!
//! The mapping follows Go's JSON rules for these types: non-pointer fields are omitted when
//! empty or zero, pointer fields (`automountServiceAccountToken`, grace periods, …) keep an
//! explicit zero, `metav1.Time` is an RFC 3339 string on the JSON side and whole seconds on the
//! protobuf side, and `FieldsV1` carries its JSON object as raw bytes.

mod map;

#[allow(clippy::all, missing_docs)]
pub mod generated {
    include!("generated/mod.rs");
}

use prost::Message;
use serde_json::Value;

use crate::json::DecodeError;
use generated::k8s::io::api::authentication::v1 as authn;
use generated::k8s::io::api::core::v1 as core;
use generated::k8s::io::apimachinery::pkg::apis::meta::v1 as meta;
use generated::k8s::io::apimachinery::pkg::runtime;
pub use map::JsonForm;

/// The bytes every enveloped protobuf body starts with.
pub const MAGIC: [u8; 4] = [0x6b, 0x38, 0x73, 0x00];

/// Kinds with a protobuf form.
pub const KINDS: [&str; 7] = [
    "ServiceAccount",
    "ServiceAccountList",
    "Namespace",
    "NamespaceList",
    "Status",
    "DeleteOptions",
    "TokenRequest",
];

fn to_message<M: JsonForm + Message>(v: &Value) -> Result<Vec<u8>, DecodeError> {
    Ok(M::from_json(v).map_err(DecodeError)?.encode_to_vec())
}

fn from_message<M: JsonForm + Message + Default>(raw: &[u8]) -> Result<Value, DecodeError> {
    let m = M::decode(raw).map_err(|e| DecodeError(format!("invalid protobuf: {e}")))?;
    Ok(m.to_json())
}

/// The message bytes of an object of `kind` (without envelope).
pub fn encode_message(kind: &str, v: &Value) -> Result<Vec<u8>, DecodeError> {
    match kind {
        "ServiceAccount" => to_message::<core::ServiceAccount>(v),
        "ServiceAccountList" => to_message::<core::ServiceAccountList>(v),
        "Namespace" => to_message::<core::Namespace>(v),
        "NamespaceList" => to_message::<core::NamespaceList>(v),
        "Status" => to_message::<meta::Status>(v),
        "DeleteOptions" => to_message::<meta::DeleteOptions>(v),
        "TokenRequest" => to_message::<authn::TokenRequest>(v),
        other => Err(DecodeError(format!("{other} has no protobuf form"))),
    }
}

/// The JSON value of a message of `kind` (without `kind` and `apiVersion`).
pub fn decode_message(kind: &str, raw: &[u8]) -> Result<Value, DecodeError> {
    match kind {
        "ServiceAccount" => from_message::<core::ServiceAccount>(raw),
        "ServiceAccountList" => from_message::<core::ServiceAccountList>(raw),
        "Namespace" => from_message::<core::Namespace>(raw),
        "NamespaceList" => from_message::<core::NamespaceList>(raw),
        "Status" => from_message::<meta::Status>(raw),
        "DeleteOptions" => from_message::<meta::DeleteOptions>(raw),
        "TokenRequest" => from_message::<authn::TokenRequest>(raw),
        other => Err(DecodeError(format!(
            "no kind {other:?} is registered for protobuf"
        ))),
    }
}

/// Wraps message bytes in the envelope: `k8s\0` + `Unknown{typeMeta, raw}`.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = runtime::Unknown {
        type_meta: Some(runtime::TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(&MAGIC);
    unknown.encode(&mut out).unwrap_or_default();
    out
}

/// Encodes a whole object (its `kind` and `apiVersion` taken from the value) with envelope.
pub fn encode(v: &Value) -> Result<Vec<u8>, DecodeError> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let raw = encode_message(kind, v)?;
    Ok(envelope(api_version, kind, raw))
}

/// Opens an envelope: the type it names and the message bytes. A body without the `k8s\0`
/// prefix or with an unreadable `Unknown` is an error.
pub fn open(bytes: &[u8]) -> Result<(String, String, Vec<u8>), DecodeError> {
    let rest = bytes.strip_prefix(&MAGIC[..]).ok_or_else(|| {
        DecodeError(
            "provided protobuf data does not start with the expected \"k8s\\x00\" prefix".into(),
        )
    })?;
    let unknown = runtime::Unknown::decode(rest)
        .map_err(|e| DecodeError(format!("invalid protobuf envelope: {e}")))?;
    let tm = unknown.type_meta.unwrap_or_default();
    Ok((
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    ))
}

/// Decodes an enveloped object to its JSON value, with `kind` and `apiVersion` from the
/// envelope. `expected_kind` is used when the envelope names none.
pub fn decode(bytes: &[u8], expected_kind: &str) -> Result<Value, DecodeError> {
    let (api_version, kind, raw) = open(bytes)?;
    let kind = if kind.is_empty() {
        expected_kind.to_string()
    } else {
        kind
    };
    let mut v = decode_message(&kind, &raw)?;
    if let Value::Object(m) = &mut v {
        let mut out = serde_json::Map::new();
        out.insert("kind".into(), Value::String(kind));
        if !api_version.is_empty() {
            out.insert("apiVersion".into(), Value::String(api_version));
        }
        out.extend(std::mem::take(m));
        *m = out;
    }
    Ok(v)
}

/// One frame of a protobuf watch stream: a 4-byte big-endian length, then a `WatchEvent` whose
/// object is an enveloped object (`enveloped_object`).
pub fn watch_frame(event_type: &str, enveloped_object: &[u8]) -> Vec<u8> {
    let ev = meta::WatchEvent {
        r#type: Some(event_type.to_string()),
        object: Some(runtime::RawExtension {
            raw: Some(enveloped_object.to_vec()),
        }),
    };
    let len = ev.encoded_len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    ev.encode(&mut out).unwrap_or_default();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_account_round_trip() {
        let sa = json!({
            "kind": "ServiceAccount",
            "apiVersion": "v1",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "creationTimestamp": "2024-05-01T10:00:00Z",
                "labels": {"b": "2", "a": "1"},
                "finalizers": ["x"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": false}],
                "managedFields": [{"manager": "m", "operation": "Apply", "apiVersion": "v1",
                    "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
            },
            "secrets": [{"name": "s"}],
            "imagePullSecrets": [{"name": "r"}],
            "automountServiceAccountToken": false
        });
        let bytes = encode(&sa).unwrap();
        assert_eq!(&bytes[..4], &MAGIC);
        let back = decode(&bytes, "").unwrap();
        assert_eq!(back, sa);
    }

    #[test]
    fn lists_status_and_frames() {
        let list = json!({"kind": "NamespaceList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "9", "continue": "c", "remainingItemCount": 0},
            "items": [{"metadata": {"name": "default"}, "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}}]});
        assert_eq!(decode(&encode(&list).unwrap(), "").unwrap(), list);
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "m", "reason": "NotFound",
            "details": {"name": "x", "kind": "serviceaccounts"}, "code": 404});
        assert_eq!(decode(&encode(&status).unwrap(), "").unwrap(), status);
        let frame = watch_frame("ADDED", b"k8s\0x");
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(len, frame.len() - 4);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(open(b"{\"kind\":1}").is_err());
        assert!(open(b"k8s\0\xff\xff\xff").is_err());
        let unknown_kind = envelope("v1", "Pod", vec![]);
        assert!(decode(&unknown_kind, "").is_err());
        let sa = envelope("v1", "ServiceAccount", vec![0x0a, 0xff]);
        assert!(decode(&sa, "").is_err());
        assert!(encode(&json!({"kind": "ServiceAccount", "metadata": {"name": 5}})).is_err());
    }
}
