//! The protobuf encoding (`application/vnd.svc.protobuf`, and Kubernetes' name
//! `application/vnd.kubernetes.protobuf`): the `k8s\0` envelope around `runtime.Unknown`, and the
//! mapping between the JSON value trees the server works on and the messages generated from
//! `proto/` (`cargo xtask codegen`).
//!
//! The mapping follows Go's JSON rules for these types: non-pointer fields are omitted when
//! empty or zero, pointer fields (`automountServiceAccountToken`, grace periods, …) keep an
//! explicit zero, `metav1.Time` is an RFC 3339 string on the JSON side and whole seconds on the
//! protobuf side, and `FieldsV1` carries its JSON object as raw bytes.
//!
//! ```
//! use serde_json::json;
//! use strata_codec::proto;
//!
//! let sa = json!({
//!     "kind": "ServiceAccount",
//!     "apiVersion": "v1",
//!     "metadata": {"name": "builder", "namespace": "ci",
//!                  "creationTimestamp": "2024-05-01T10:00:00Z"},
//!     "automountServiceAccountToken": false,
//! });
//! let bytes = proto::encode(&sa)?;
//! assert!(bytes.starts_with(&proto::MAGIC));
//!
//! let (api_version, kind, _message) = proto::open(&bytes)?;
//! assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "ServiceAccount"));
//! assert_eq!(proto::decode(&bytes, "v1", "ServiceAccount")?, sa);
//!
//! // Only the kinds generated from `proto/` have a protobuf form.
//! assert!(proto::has_message("rbac.authorization.k8s.io/v1", "Role"));
//! assert!(proto::encode(&json!({"kind": "Widget", "apiVersion": "example.com/v1"})).is_err());
//! # Ok::<(), strata_codec::json::DecodeError>(())
//! ```

mod map;
mod write;

/// The message types prost generates from the `.proto` files of Kubernetes' API under `proto/`
/// (`cargo xtask codegen`), one module per protobuf package (`k8s::io::api::core::v1`, ...).
///
/// Their fields are documented by the `.proto` comments they came from, where those have any;
/// the generator writes the rest without documentation, and this code is regenerated rather
/// than edited, so `missing_docs` (and clippy) are allowed here.
#[allow(clippy::all, missing_docs)]
pub mod generated {
    include!("generated/mod.rs");
}

use prost::Message;
use serde_json::Value;

use crate::json::DecodeError;
use generated::k8s::io::api::authentication::v1 as authn;
use generated::k8s::io::api::authorization::v1 as authz;
use generated::k8s::io::api::autoscaling::v1 as autoscaling;
use generated::k8s::io::api::coordination::v1 as coordination;
use generated::k8s::io::api::core::v1 as core;
use generated::k8s::io::api::events::v1 as events;
use generated::k8s::io::api::rbac::v1 as rbac;
use generated::k8s::io::apimachinery::pkg::apis::meta::v1 as meta;
use generated::k8s::io::apimachinery::pkg::runtime;
pub use map::JsonForm;
use write::WriteProto;

/// The bytes every enveloped protobuf body starts with.
pub const MAGIC: [u8; 4] = [0x6b, 0x38, 0x73, 0x00];

/// A message type with a protobuf form, and the functions that code it.
struct MessageType {
    /// `None` for the meta kinds (Status, DeleteOptions), which every group version carries.
    group_version: Option<(&'static str, &'static str)>,
    kind: &'static str,
    /// Through the generated prost type: the reference, and the source of error messages.
    encode: fn(&Value) -> Result<Vec<u8>, DecodeError>,
    decode: fn(&[u8]) -> Result<Value, DecodeError>,
    /// Straight from the value tree (`write.rs`), byte for byte what `encode` makes; `None`
    /// for messages with a map of lists (`extra`), which the direct writer does not write.
    write: Option<fn(&Value, &mut Vec<u8>) -> write::Written>,
}

/// Declares the message table: `group version Kind => prost type`, `direct` where the direct
/// writer serves it. This is the only list of protobuf kinds.
macro_rules! message_types {
    ($( $group:tt $version:tt $kind:literal => $ty:ty $(, $direct:ident)? ;)*) => {
        const MESSAGE_TYPES: &[MessageType] = &[$(
            MessageType {
                group_version: message_types!(@gv $group $version),
                kind: $kind,
                encode: to_message::<$ty>,
                decode: from_message::<$ty>,
                write: message_types!(@write $ty $(, $direct)?),
            },
        )*];
    };
    (@gv * *) => { None };
    (@gv $group:literal $version:literal) => { Some(($group, $version)) };
    (@write $ty:ty) => { None };
    (@write $ty:ty, direct) => { Some(<$ty as WriteProto>::write_proto) };
}

message_types! {
    "" "v1" "ServiceAccount" => core::ServiceAccount, direct;
    "" "v1" "ServiceAccountList" => core::ServiceAccountList, direct;
    "" "v1" "Namespace" => core::Namespace, direct;
    "" "v1" "NamespaceList" => core::NamespaceList, direct;
    "" "v1" "ConfigMap" => core::ConfigMap, direct;
    "" "v1" "ConfigMapList" => core::ConfigMapList, direct;
    "" "v1" "Secret" => core::Secret, direct;
    "" "v1" "SecretList" => core::SecretList, direct;
    "" "v1" "Event" => core::Event, direct;
    "" "v1" "EventList" => core::EventList, direct;
    "autoscaling" "v1" "Scale" => autoscaling::Scale, direct;
    "coordination.k8s.io" "v1" "Lease" => coordination::Lease, direct;
    "coordination.k8s.io" "v1" "LeaseList" => coordination::LeaseList, direct;
    "events.k8s.io" "v1" "Event" => events::Event, direct;
    "events.k8s.io" "v1" "EventList" => events::EventList, direct;
    * * "Status" => meta::Status, direct;
    * * "DeleteOptions" => meta::DeleteOptions, direct;
    "authentication.k8s.io" "v1" "TokenRequest" => authn::TokenRequest, direct;
    "authentication.k8s.io" "v1" "SelfSubjectReview" => authn::SelfSubjectReview;
    "authentication.k8s.io" "v1" "TokenReview" => authn::TokenReview;
    "rbac.authorization.k8s.io" "v1" "Role" => rbac::Role, direct;
    "rbac.authorization.k8s.io" "v1" "RoleList" => rbac::RoleList, direct;
    "rbac.authorization.k8s.io" "v1" "ClusterRole" => rbac::ClusterRole, direct;
    "rbac.authorization.k8s.io" "v1" "ClusterRoleList" => rbac::ClusterRoleList, direct;
    "rbac.authorization.k8s.io" "v1" "RoleBinding" => rbac::RoleBinding, direct;
    "rbac.authorization.k8s.io" "v1" "RoleBindingList" => rbac::RoleBindingList, direct;
    "rbac.authorization.k8s.io" "v1" "ClusterRoleBinding" => rbac::ClusterRoleBinding, direct;
    "rbac.authorization.k8s.io" "v1" "ClusterRoleBindingList" => rbac::ClusterRoleBindingList, direct;
    "authorization.k8s.io" "v1" "SubjectAccessReview" => authz::SubjectAccessReview;
    "authorization.k8s.io" "v1" "SelfSubjectAccessReview" => authz::SelfSubjectAccessReview, direct;
    "authorization.k8s.io" "v1" "LocalSubjectAccessReview" => authz::LocalSubjectAccessReview;
    "authorization.k8s.io" "v1" "SelfSubjectRulesReview" => authz::SelfSubjectRulesReview;
}

/// `("", "v1")` for `v1`, `("rbac.authorization.k8s.io", "v1")` for the group form.
fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

fn message_type(api_version: &str, kind: &str) -> Option<&'static MessageType> {
    let gv = split_api_version(api_version);
    MESSAGE_TYPES
        .iter()
        .find(|m| m.kind == kind && m.group_version.is_none_or(|declared| declared == gv))
}

/// Whether objects of `kind` in `api_version` have a protobuf form.
pub fn has_message(api_version: &str, kind: &str) -> bool {
    message_type(api_version, kind).is_some()
}

/// Every message type, as (apiVersion, kind); the meta kinds under `v1`.
pub fn message_types() -> impl Iterator<Item = (String, &'static str)> {
    MESSAGE_TYPES.iter().map(|m| {
        let api_version = match m.group_version {
            None | Some(("", _)) => m.group_version.map_or("v1", |(_, v)| v).to_string(),
            Some((group, version)) => format!("{group}/{version}"),
        };
        (api_version, m.kind)
    })
}

fn no_form(api_version: &str, kind: &str) -> DecodeError {
    DecodeError(format!(
        "no kind {kind:?} is registered for protobuf in version {api_version:?}"
    ))
}

fn to_message<M: JsonForm + Message>(v: &Value) -> Result<Vec<u8>, DecodeError> {
    Ok(M::from_json(v).map_err(DecodeError)?.encode_to_vec())
}

fn from_message<M: JsonForm + Message + Default>(raw: &[u8]) -> Result<Value, DecodeError> {
    let m = M::decode(raw).map_err(|e| DecodeError(format!("invalid protobuf: {e}")))?;
    Ok(m.to_json())
}

/// Appends the message bytes of `v` written straight from the tree (`write.rs`). `None` when
/// `v` does not fit the message or the type has no direct writer: the prost path then says why.
fn write_message(message: &MessageType, v: &Value, out: &mut Vec<u8>) -> Option<()> {
    message.write.and_then(|write| write(v, out).ok())
}

/// The message bytes of an object of `kind` in `api_version` (without envelope).
pub fn encode_message(api_version: &str, kind: &str, v: &Value) -> Result<Vec<u8>, DecodeError> {
    let message = message_type(api_version, kind).ok_or_else(|| no_form(api_version, kind))?;
    let mut out = Vec::new();
    if write_message(message, v, &mut out).is_some() {
        return Ok(out);
    }
    (message.encode)(v)
}

/// The JSON value of a message of `kind` in `api_version` (without `kind` and `apiVersion`).
pub fn decode_message(api_version: &str, kind: &str, raw: &[u8]) -> Result<Value, DecodeError> {
    let message = message_type(api_version, kind).ok_or_else(|| no_form(api_version, kind))?;
    (message.decode)(raw)
}

/// The enveloped protobuf of a list (`<Kind>List`: ListMeta in field 1, the items in field 2)
/// from the message bytes of its items, as [`encode_message`] made them: a list is assembled
/// from per-object encodings made once, not encoded whole.
pub fn list_envelope<'a>(
    api_version: &str,
    list_kind: &str,
    resource_version: &str,
    continue_token: &str,
    remaining_item_count: Option<u64>,
    items: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let items: Vec<&[u8]> = items.into_iter().collect();
    let (head, tail) = list_parts(
        api_version,
        list_kind,
        resource_version,
        continue_token,
        remaining_item_count,
        items.iter().map(|i| i.len()),
    );
    let size: usize = items.iter().map(|i| list_item_len(i.len())).sum();
    let mut out = Vec::with_capacity(head.len() + size + tail.len());
    out.extend_from_slice(&head);
    for item in items {
        write_list_item(&mut out, item);
    }
    out.extend_from_slice(&tail);
    out
}

/// What [`list_envelope`] writes before the items and after them, given the lengths of the
/// items' messages: a writer that has the messages sends the list a piece at a time, each item
/// framed by [`write_list_item`].
pub fn list_parts(
    api_version: &str,
    list_kind: &str,
    resource_version: &str,
    continue_token: &str,
    remaining_item_count: Option<u64>,
    item_lens: impl IntoIterator<Item = usize>,
) -> (Vec<u8>, Vec<u8>) {
    let mut meta = Vec::new();
    if !resource_version.is_empty() {
        write::bytes_field(&mut meta, 2, resource_version.as_bytes());
    }
    if !continue_token.is_empty() {
        write::bytes_field(&mut meta, 3, continue_token.as_bytes());
    }
    if let Some(n) = remaining_item_count {
        write::varint(&mut meta, 4 << 3);
        write::varint(&mut meta, n);
    }
    let mut list_meta = Vec::with_capacity(meta.len() + 4);
    write::bytes_field(&mut list_meta, 1, &meta);
    let raw_len = list_meta.len() + item_lens.into_iter().map(list_item_len).sum::<usize>();
    // The envelope's fields in order: typeMeta (1), raw (2) holding the list's message, then
    // contentEncoding (3) and contentType (4).
    let type_meta = runtime::TypeMeta {
        api_version: Some(api_version.to_string()),
        kind: Some(list_kind.to_string()),
    };
    let mut head = Vec::with_capacity(MAGIC.len() + 64 + list_meta.len());
    head.extend_from_slice(&MAGIC);
    prost::encoding::message::encode(1, &type_meta, &mut head);
    write::varint(&mut head, 2 << 3 | 2);
    write::varint(&mut head, raw_len as u64);
    head.extend_from_slice(&list_meta);
    let rest = runtime::Unknown {
        type_meta: None,
        raw: None,
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    (head, rest.encode_to_vec())
}

/// Appends one item's message to a list as [`list_envelope`] frames it (the list's field 2).
pub fn write_list_item(out: &mut Vec<u8>, item: &[u8]) {
    write::bytes_field(out, 2, item);
}

/// The bytes [`write_list_item`] writes for a message of `len` bytes.
pub fn list_item_len(len: usize) -> usize {
    1 + write::varint_len(len as u64) + len
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
    unknown.encode_raw(&mut out);
    out
}

/// Encodes a whole object (its `kind` and `apiVersion` taken from the value) with envelope.
pub fn encode(v: &Value) -> Result<Vec<u8>, DecodeError> {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let message = message_type(api_version, kind).ok_or_else(|| no_form(api_version, kind))?;
    // The envelope `envelope` builds, with the message written in place rather than copied.
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(&MAGIC);
    let type_meta = write::begin_len(&mut out, 1);
    write::bytes_field(&mut out, 1, api_version.as_bytes());
    write::bytes_field(&mut out, 2, kind.as_bytes());
    write::end_len(&mut out, type_meta);
    let estimate = estimated_len(api_version, kind, v);
    out.reserve(estimate);
    let raw = write::begin_len_reserving(&mut out, 2, write::varint_len(estimate as u64));
    if write_message(message, v, &mut out).is_some() {
        write::end_len(&mut out, raw);
        write::bytes_field(&mut out, 3, b"");
        write::bytes_field(&mut out, 4, b"");
        return Ok(out);
    }
    let raw = (message.encode)(v)?;
    Ok(envelope(api_version, kind, raw))
}

/// A guess of the message size of `v`, so that a long list is written without growing or moving
/// it: for a list, its item count times the size of its first item; 0 otherwise.
fn estimated_len(api_version: &str, kind: &str, v: &Value) -> usize {
    let (Some(item), Some(items)) = (
        kind.strip_suffix("List")
            .and_then(|item_kind| message_type(api_version, item_kind)),
        v.get("items").and_then(Value::as_array),
    ) else {
        return 0;
    };
    let mut first = Vec::new();
    match items.first() {
        Some(v) if write_message(item, v, &mut first).is_some() => {
            // Each item also takes a key and a length of about three bytes.
            items.len().saturating_mul(first.len() + 4)
        }
        _ => 0,
    }
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
/// envelope; `expected_api_version` and `expected_kind` stand in where the envelope names none.
pub fn decode(
    bytes: &[u8],
    expected_api_version: &str,
    expected_kind: &str,
) -> Result<Value, DecodeError> {
    let (api_version, kind, raw) = open(bytes)?;
    let or = |named: String, expected: &str| {
        if named.is_empty() {
            expected.to_string()
        } else {
            named
        }
    };
    let kind = or(kind, expected_kind);
    let api_version = or(api_version, expected_api_version);
    let mut v = decode_message(&api_version, &kind, &raw)?;
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
    ev.encode_raw(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A list written from its parts equals the envelope of the list's message built whole.
    #[test]
    fn list_parts_frame_the_lists_message() {
        let items: Vec<Vec<u8>> = vec![vec![], vec![7; 3], vec![9; 200], vec![1; 20_000]];
        for n in 0..=items.len() {
            for (rv, cont, remaining) in [("", "", None), ("42", "tok", Some(300))] {
                let mut raw = Vec::new();
                let mut meta = Vec::new();
                if !rv.is_empty() {
                    write::bytes_field(&mut meta, 2, rv.as_bytes());
                    write::bytes_field(&mut meta, 3, cont.as_bytes());
                    write::varint(&mut meta, 4 << 3);
                    write::varint(&mut meta, 300);
                }
                write::bytes_field(&mut raw, 1, &meta);
                for item in &items[..n] {
                    write::bytes_field(&mut raw, 2, item);
                }
                let want = envelope("v1", "ServiceAccountList", raw);
                let got = list_envelope(
                    "v1",
                    "ServiceAccountList",
                    rv,
                    cont,
                    remaining,
                    items[..n].iter().map(|i| &i[..]),
                );
                assert_eq!(got, want, "{n} items, rv {rv:?}");
            }
        }
    }

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
        let back = decode(&bytes, "", "").unwrap();
        assert_eq!(back, sa);
    }

    #[test]
    fn lists_status_and_frames() {
        let list = json!({"kind": "NamespaceList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "9", "continue": "c", "remainingItemCount": 0},
            "items": [{"metadata": {"name": "default"}, "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}}]});
        assert_eq!(decode(&encode(&list).unwrap(), "", "").unwrap(), list);
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "m", "reason": "NotFound",
            "details": {"name": "x", "kind": "serviceaccounts"}, "code": 404});
        assert_eq!(decode(&encode(&status).unwrap(), "", "").unwrap(), status);
        let frame = watch_frame("ADDED", b"k8s\0x");
        let len = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(len, frame.len() - 4);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(open(b"{\"kind\":1}").is_err());
        assert!(open(b"k8s\0\xff\xff\xff").is_err());
        let unknown_kind = envelope("v1", "Pod", vec![]);
        assert!(decode(&unknown_kind, "", "").is_err());
        let sa = envelope("v1", "ServiceAccount", vec![0x0a, 0xff]);
        assert!(decode(&sa, "", "").is_err());
        assert!(encode(&json!({"kind": "ServiceAccount", "metadata": {"name": 5}})).is_err());
    }

    /// A time outside RFC 3339's years (0000 to 9999) has no JSON form: it is left out, so the
    /// decoded object encodes again (it used to become `""`, which does not).
    #[test]
    fn times_without_an_rfc3339_form_are_left_out() {
        // ServiceAccount{metadata{name: "a", creationTimestamp{seconds: -100000000000}}}.
        let raw = [
            0x0a, 0x10, 0x0a, 0x01, 0x61, 0x42, 0x0b, 0x08, 0x80, 0xb0, 0xa4, 0xbc, 0x8b, 0xfd,
            0xff, 0xff, 0xff, 0x01,
        ];
        let v = decode_message("v1", "ServiceAccount", &raw).unwrap();
        assert_eq!(v, json!({"metadata": {"name": "a"}}));
        assert!(encode_message("v1", "ServiceAccount", &v).is_ok());
    }

    /// The golden fixtures' objects (`testdata/HEAD`), every field of every message set.
    fn fixture_objects() -> Vec<Value> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/HEAD");
        let mut objects = Vec::new();
        for entry in std::fs::read_dir(dir).expect("testdata/HEAD") {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                // A watch event (no kind of its own) carries its object; Secrets and Events
                // have a `type` too.
                objects.push(if v["type"].is_string() && v.get("kind").is_none() {
                    v["object"].clone()
                } else {
                    v
                });
            }
        }
        assert!(objects.len() >= 7, "fixtures missing");
        objects
    }

    /// One object of each RBAC kind and access review, every field set: the kinds the golden
    /// fixtures do not cover.
    fn rbac_and_review_objects() -> Vec<Value> {
        let rbac = "rbac.authorization.k8s.io/v1";
        let authz = "authorization.k8s.io/v1";
        let meta = |name: &str, namespace: Option<&str>| {
            let mut m = json!({
                "name": name, "uid": "0b6f1d2c-5e8a-4c1e-9a37-2f4d8c6b1a90",
                "resourceVersion": "41", "creationTimestamp": "2025-03-04T05:06:07Z",
                "labels": {"team": "a"}, "annotations": {"note": "x"},
                "managedFields": [{"manager": "kubectl-create", "operation": "Update",
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "time": "2025-03-04T05:06:07Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:rules": {}}}]
            });
            if let Some(ns) = namespace {
                m["namespace"] = json!(ns);
            }
            m
        };
        let role = json!({"metadata": meta("reader", Some("team-a")), "rules": [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["serviceaccounts"],
             "resourceNames": ["builder"]},
            {"verbs": ["*"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"]},
        ]});
        let cluster_role = json!({"metadata": meta("aggregate", None),
        "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}],
        "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"aggregate-to": "this"}},
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                                  {"key": "legacy", "operator": "DoesNotExist"}]},
        ]}});
        let subjects = json!([
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
            {"kind": "ServiceAccount", "name": "builder", "namespace": "team-a"},
        ]);
        let role_binding = json!({"metadata": meta("readers", Some("team-a")),
            "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}});
        let cluster_role_binding = json!({"metadata": meta("aggregators", None),
            "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "aggregate"}});
        let typed = |kind: &str, api_version: &str, v: &Value| {
            let mut out = json!({"kind": kind, "apiVersion": api_version});
            out.as_object_mut()
                .unwrap()
                .extend(v.as_object().unwrap().clone());
            out
        };
        let list = |kind: &str, item: &Value| {
            let mut second = item.clone();
            second["metadata"] = json!({"name": "second"});
            json!({"kind": kind, "apiVersion": rbac,
                   "metadata": {"resourceVersion": "42", "continue": "c", "remainingItemCount": 3},
                   "items": [item, second]})
        };
        let status = json!({"allowed": false, "denied": true, "reason": "no rule",
                            "evaluationError": "role \"gone\" not found"});
        let resource = json!({"namespace": "team-a", "verb": "update",
            "group": "rbac.authorization.k8s.io", "version": "v1", "resource": "rolebindings",
            "subresource": "status", "name": "readers"});
        vec![
            typed("Role", rbac, &role),
            list("RoleList", &role),
            typed("ClusterRole", rbac, &cluster_role),
            list("ClusterRoleList", &cluster_role),
            typed("RoleBinding", rbac, &role_binding),
            list("RoleBindingList", &role_binding),
            typed("ClusterRoleBinding", rbac, &cluster_role_binding),
            list("ClusterRoleBindingList", &cluster_role_binding),
            json!({"kind": "SubjectAccessReview", "apiVersion": authz,
                "metadata": {"name": "check"},
                "spec": {"resourceAttributes": resource, "user": "alice",
                         "groups": ["system:authenticated"], "uid": "u-1",
                         "extra": {"scopes": ["a", "b"]}},
                "status": status}),
            json!({"kind": "SelfSubjectAccessReview", "apiVersion": authz, "metadata": {},
                "spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}},
                "status": status}),
            json!({"kind": "LocalSubjectAccessReview", "apiVersion": authz,
                "metadata": {"namespace": "team-a"},
                "spec": {"resourceAttributes": resource, "user": "bob"},
                "status": {"allowed": true}}),
        ]
    }

    /// One Secret, Event and Lease with every field set, and their lists: the controllers'
    /// kinds, which the golden fixtures do not cover. Their JSON is as Go writes it (MicroTimes
    /// with six digits in UTC), so that they also round-trip.
    fn controller_kind_objects() -> Vec<Value> {
        let meta = |name: &str| {
            json!({"name": name, "namespace": "team-a",
                   "uid": "0b6f1d2c-5e8a-4c1e-9a37-2f4d8c6b1a90", "resourceVersion": "7",
                   "creationTimestamp": "2025-03-04T05:06:07Z", "labels": {"team": "a"}})
        };
        let secret = json!({"kind": "Secret", "apiVersion": "v1", "metadata": meta("creds"),
            "immutable": true, "data": {"blank": "", "key": "AAEC/w==", "tls.crt": "Y2VydA=="},
            "type": "kubernetes.io/tls"});
        let event = json!({"kind": "Event", "apiVersion": "v1", "metadata": meta("pod.17"),
            "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": "web-0",
                               "uid": "u-1", "apiVersion": "v1", "resourceVersion": "3",
                               "fieldPath": "spec.containers{web}"},
            "reason": "Pulled", "message": "pulled the image",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2025-03-04T05:06:07Z", "lastTimestamp": "2025-03-04T05:07:07Z",
            "count": 3, "type": "Normal", "eventTime": "2025-03-04T05:06:07.123456Z",
            "series": {"count": 2, "lastObservedTime": "2025-03-04T05:07:07.000001Z"},
            "action": "Pulling", "related": {"kind": "Node", "name": "node-1"},
            "reportingComponent": "kubelet", "reportingInstance": "node-1"});
        let lease = json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": meta("leader"),
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 15,
                     "acquireTime": "1969-07-20T20:17:40.500000Z",
                     "renewTime": "2025-03-04T05:06:07.000000Z", "leaseTransitions": 0}});
        let list = |kind: &str, api_version: &str, item: &Value| {
            let mut item = item.clone();
            let object = item.as_object_mut().unwrap();
            object.remove("kind");
            object.remove("apiVersion");
            json!({"kind": kind, "apiVersion": api_version,
                   "metadata": {"resourceVersion": "42"}, "items": [item]})
        };
        let v1_event = json!({"kind": "Event", "apiVersion": "events.k8s.io/v1",
            "metadata": meta("pod.18"), "eventTime": "2025-03-04T05:06:07.123456Z",
            "series": {"count": 2, "lastObservedTime": "2025-03-04T05:07:07.000001Z"},
            "reportingController": "example.com/scaler", "reportingInstance": "scaler-0",
            "action": "Scaling", "reason": "Scaled",
            "regarding": {"kind": "Deployment", "namespace": "team-a", "name": "web"},
            "related": {"kind": "Pod", "name": "web-0"}, "note": "scaled up", "type": "Normal",
            "deprecatedSource": {"component": "scaler"},
            "deprecatedFirstTimestamp": "2025-03-04T05:06:07Z",
            "deprecatedLastTimestamp": "2025-03-04T05:07:07Z", "deprecatedCount": 2});
        let scale = json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": meta("web"), "spec": {"replicas": 3},
            "status": {"replicas": 0, "selector": "app=web"}});
        vec![
            scale,
            list("EventList", "events.k8s.io/v1", &v1_event),
            v1_event,
            list("SecretList", "v1", &secret),
            list("EventList", "v1", &event),
            list("LeaseList", "coordination.k8s.io/v1", &lease),
            secret,
            event,
            lease,
        ]
    }

    #[test]
    fn controller_kinds_round_trip() {
        for v in controller_kind_objects() {
            let bytes = encode(&v).unwrap();
            assert_eq!(decode(&bytes, "", "").unwrap(), v, "{}", v["kind"]);
        }
        // A MicroTime with more digits or another offset comes back as Go writes it.
        let lease = json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"name": "l"}, "spec": {"renewTime": "2025-03-04T07:06:07.1234567+02:00"}});
        let back = decode(&encode(&lease).unwrap(), "", "").unwrap();
        assert_eq!(back["spec"]["renewTime"], "2025-03-04T05:06:07.123456Z");
        // Secret values are raw bytes in protobuf; stringData keeps its text.
        let secret = json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"},
            "stringData": {"a": "plain"}, "data": {"b": "/w=="}});
        let raw = encode_message("v1", "Secret", &secret).unwrap();
        assert!(raw.windows(3).any(|w| w == [b'b', 0x12, 0x01]), "{raw:?}");
        assert_eq!(decode(&encode(&secret).unwrap(), "", "").unwrap(), secret);
        // A Scale's fields have Kubernetes' numbers: spec (2) holds replicas (1), status (3)
        // holds replicas (1), written even when 0, and selector (2).
        let scale = json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "w"}, "spec": {"replicas": 5},
            "status": {"replicas": 0, "selector": "a=b"}});
        let raw = encode_message("autoscaling/v1", "Scale", &scale).unwrap();
        let tail = [
            0x12, 0x02, 0x08, 0x05, 0x1a, 0x07, 0x08, 0x00, 0x12, 0x03, b'a', b'=', b'b',
        ];
        assert!(raw.ends_with(&tail), "{raw:?}");
    }

    /// The fixtures' objects and the RBAC and review objects the direct writer writes.
    fn sample_objects() -> Vec<Value> {
        let mut objects = fixture_objects();
        objects.extend(controller_kind_objects());
        objects.extend(rbac_and_review_objects().into_iter().filter(|v| {
            !matches!(
                v["kind"].as_str(),
                Some("SubjectAccessReview" | "LocalSubjectAccessReview")
            )
        }));
        objects
    }

    /// The RBAC kinds and access reviews round-trip through protobuf, their JSON form as Go
    /// writes it (an absent pointer, as `aggregationRule` or `resourceAttributes`, stays
    /// absent), and within their group's apiVersion.
    #[test]
    fn rbac_and_reviews_round_trip() {
        for v in rbac_and_review_objects() {
            let bytes = encode(&v).unwrap();
            assert_eq!(decode(&bytes, "", "").unwrap(), v, "{}", v["kind"]);
        }
        let bare = json!({"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1",
                          "metadata": {"name": "plain"}});
        assert_eq!(decode(&encode(&bare).unwrap(), "", "").unwrap(), bare);
        let review = json!({"kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1", "metadata": {},
            "spec": {"resourceAttributes": {"verb": "get", "resource": "roles"}}, "status": {}});
        assert_eq!(decode(&encode(&review).unwrap(), "", "").unwrap(), review);
    }

    /// The direct writer agrees with prost: the same bytes when prost accepts the value, a
    /// refusal when prost reports an error.
    fn same_as_prost(api_version: &str, kind: &str, v: &Value) -> Result<(), String> {
        let message = message_type(api_version, kind).ok_or_else(|| format!("no {kind}"))?;
        let mut direct = Vec::new();
        let direct = write_message(message, v, &mut direct).map(|()| direct);
        match ((message.encode)(v), direct) {
            (Ok(expected), Some(got)) if expected == got => Ok(()),
            (Ok(_), Some(_)) => Err(format!("{kind}: other bytes than prost for {v}")),
            (Ok(_), None) => Err(format!("{kind}: refused a value prost accepts: {v}")),
            (Err(_), None) => Ok(()),
            (Err(e), Some(_)) => Err(format!("{kind}: accepted a value prost rejects ({e}): {v}")),
        }
    }

    #[test]
    fn direct_writer_matches_prost_on_the_fixtures() {
        for v in sample_objects() {
            let kind = v["kind"].as_str().unwrap().to_string();
            let api_version = v["apiVersion"].as_str().unwrap().to_string();
            let message = message_type(&api_version, &kind).unwrap();
            let mut out = Vec::new();
            assert!(
                write_message(message, &v, &mut out).is_some(),
                "{kind} fell back to prost"
            );
            same_as_prost(&api_version, &kind, &v).unwrap();
        }
    }

    /// Mutations of the sample objects (values replaced by others of every JSON type, members
    /// removed, members reordered) give the same result from both paths.
    #[test]
    fn direct_writer_matches_prost_on_mutated_fixtures() {
        let replacements = [
            Value::Null,
            json!(""),
            json!("x"),
            json!(0),
            json!(-1),
            json!(2_147_483_648_i64),
            json!(u64::MAX),
            json!(1.5),
            json!(true),
            json!([]),
            json!(["a", ""]),
            json!([{}]),
            json!({}),
            json!({"": "", "b": "1", "a": ""}),
            json!("2024-01-01T00:00:00+02:00"),
            json!("1969-07-20T20:17:40.5Z"),
            json!("2024-02-30T00:00:00Z"),
        ];
        // A fixed seed: the same mutations on every run.
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0x9e37_79b9);
        let mut next = move |n: usize| rand::Rng::random_range(&mut rng, 0..n);
        let mut failures = Vec::new();
        for v in sample_objects() {
            let kind = v["kind"].as_str().unwrap().to_string();
            let api_version = v["apiVersion"].as_str().unwrap().to_string();
            for _ in 0..1000 {
                let mut mutated = v.clone();
                for _ in 0..1 + next(3) {
                    mutate(&mut mutated, &mut next, &replacements);
                }
                if let Err(e) = same_as_prost(&api_version, &kind, &mutated) {
                    failures.push(e);
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Replaces, removes or reorders at one random place in `node`.
    fn mutate(node: &mut Value, next: &mut impl FnMut(usize) -> usize, replacements: &[Value]) {
        let replacement = replacements[next(replacements.len())].clone();
        let len = match &*node {
            Value::Object(m) => m.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        if len == 0 {
            *node = replacement;
            return;
        }
        let i = next(len);
        let here = next(3) == 0;
        match node {
            Value::Object(m) => {
                let key = m.keys().nth(i).cloned().unwrap_or_default();
                match (here, next(3)) {
                    (true, 0) => {
                        m.shift_remove(&key);
                    }
                    (true, 1) => {
                        let reversed: Vec<_> = std::mem::take(m).into_iter().rev().collect();
                        m.extend(reversed);
                    }
                    (true, _) => m[&key] = replacement,
                    (false, _) => mutate(&mut m[&key], next, replacements),
                }
            }
            Value::Array(a) if here => a[i] = replacement,
            Value::Array(a) => mutate(&mut a[i], next, replacements),
            _ => {}
        }
    }
}

#[cfg(test)]
mod review_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_assembled_from_items_decode_like_encoded_lists() {
        let items = [
            json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"x": "1"}}, "secrets": [{"name": "s"}]}),
            json!({"metadata": {"name": "b", "namespace": "ns"}, "automountServiceAccountToken": false}),
        ];
        let list = json!({"kind": "ServiceAccountList", "apiVersion": "v1",
                          "metadata": {"resourceVersion": "42", "continue": "c", "remainingItemCount": 7},
                          "items": items});
        let whole = encode(&list).unwrap();
        let raws: Vec<Vec<u8>> = items
            .iter()
            .map(|i| encode_message("v1", "ServiceAccount", i).unwrap())
            .collect();
        let assembled = list_envelope(
            "v1",
            "ServiceAccountList",
            "42",
            "c",
            Some(7),
            raws.iter().map(Vec::as_slice),
        );
        assert_eq!(
            decode(&assembled, "v1", "ServiceAccountList").unwrap(),
            decode(&whole, "v1", "ServiceAccountList").unwrap()
        );
    }

    #[test]
    fn access_reviews_round_trip() {
        let review = authz::SelfSubjectAccessReview {
            metadata: None,
            spec: Some(authz::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authz::ResourceAttributes {
                    namespace: Some("default".into()),
                    verb: Some("list".into()),
                    resource: Some("serviceaccounts".into()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            status: None,
        };
        let v = decode_message(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            &review.encode_to_vec(),
        )
        .unwrap();
        assert_eq!(v["spec"]["resourceAttributes"]["verb"], "list", "{v}");
    }

    /// SelfSubjectRulesReview and TokenReview, every field set, round-trip through protobuf
    /// with their JSON form as Go writes it; a request as kubectl posts it decodes.
    #[test]
    fn rules_and_token_reviews_round_trip() {
        let rules = json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {"namespace": "team"},
        "status": {
            "resourceRules": [
                {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"],
                 "resourceNames": ["one"]},
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
            ],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*"]}],
            "incomplete": true,
            "evaluationError": "clusterrole.rbac.authorization.k8s.io \"x\" not found",
        }});
        let back = decode(&encode(&rules).unwrap(), "", "").unwrap();
        let mut want = rules.clone();
        want["metadata"] = json!({});
        assert_eq!(back, want);
        let token = json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "spec": {"token": "abc", "audiences": ["api", "other"]},
        "status": {
            "authenticated": true,
            "user": {"username": "system:serviceaccount:ns:robot", "uid": "u-1",
                     "groups": ["system:serviceaccounts", "system:authenticated"],
                     "extra": {"authentication.kubernetes.io/credential-id": ["JTI=j"]}},
            "audiences": ["api"],
            "error": "why",
        }});
        assert_eq!(decode(&encode(&token).unwrap(), "", "").unwrap(), token);
        let asked = authz::SelfSubjectRulesReview {
            metadata: None,
            spec: Some(authz::SelfSubjectRulesReviewSpec {
                namespace: Some("default".into()),
            }),
            status: None,
        };
        let v = decode_message(
            "authorization.k8s.io/v1",
            "SelfSubjectRulesReview",
            &asked.encode_to_vec(),
        )
        .unwrap();
        assert_eq!(v["spec"]["namespace"], "default", "{v}");
    }
}
