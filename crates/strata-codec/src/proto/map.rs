//! The JSON form of each generated message, declared field by field in Go's JSON order, with
//! the protobuf field numbers.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{Map, Value};

use super::generated::k8s::io::api::authentication::v1 as authn;
use super::generated::k8s::io::api::authorization::v1 as authz;
use super::generated::k8s::io::api::autoscaling::v1 as autoscaling;
use super::generated::k8s::io::api::coordination::v1 as coordination;
use super::generated::k8s::io::api::core::v1 as core;
use super::generated::k8s::io::api::events::v1 as events;
use super::generated::k8s::io::api::rbac::v1 as rbac;
use super::generated::k8s::io::apimachinery::pkg::apis::meta::v1 as meta;
use super::write;

/// A message with a JSON form.
///
/// Every generated message the codec serves implements it: the JSON form is the one Go's
/// `encoding/json` gives the Kubernetes type (field names, omitted empty fields, times as RFC
/// 3339 strings).
pub trait JsonForm: Sized + Default {
    /// The message as a JSON value tree.
    fn to_json(&self) -> Value;
    /// The message from a JSON value tree; the error names the field of the wrong type.
    fn from_json(v: &Value) -> Result<Self, String>;
}

fn wrong(key: &str, want: &str, got: &Value) -> String {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    format!("field {key}: expected {want}, got {got}")
}

fn present<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// How one field maps between its message type `T` and JSON.
trait Field<T> {
    fn put(m: &mut Map<String, Value>, key: &str, v: &T);
    fn get(m: &Map<String, Value>, key: &str) -> Result<T, String>;
}

fn string_of(m: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match present(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(wrong(key, "string", other)),
    }
}

fn int_of(m: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match present(m, key) {
        None => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| wrong(key, "integer", v)),
    }
}

/// A non-pointer string: omitted when empty.
struct Str;
impl Field<Option<String>> for Str {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<String>) {
        if let Some(s) = v.as_ref().filter(|s| !s.is_empty()) {
            m.insert(key.into(), Value::String(s.clone()));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
        string_of(m, key)
    }
}

/// A pointer string: kept when set, even empty.
struct PtrStr;
impl Field<Option<String>> for PtrStr {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<String>) {
        if let Some(s) = v {
            m.insert(key.into(), Value::String(s.clone()));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
        string_of(m, key)
    }
}

/// A non-pointer integer: omitted when zero.
struct Int;
impl Field<Option<i64>> for Int {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<i64>) {
        if let Some(n) = v.filter(|n| *n != 0) {
            m.insert(key.into(), n.into());
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
        int_of(m, key)
    }
}

/// A pointer integer: kept when set, even zero.
struct PtrInt;
impl Field<Option<i64>> for PtrInt {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<i64>) {
        if let Some(n) = v {
            m.insert(key.into(), (*n).into());
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
        int_of(m, key)
    }
}

/// A non-pointer 32-bit integer: omitted when zero.
struct Int32;
impl Field<Option<i32>> for Int32 {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<i32>) {
        if let Some(n) = v.filter(|n| *n != 0) {
            m.insert(key.into(), n.into());
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<i32>, String> {
        match int_of(m, key)? {
            None => Ok(None),
            Some(n) => i32::try_from(n)
                .map(Some)
                .map_err(|_| format!("field {key}: {n} does not fit in 32 bits")),
        }
    }
}

/// A pointer boolean: kept when set, even false.
struct PtrBool;
impl Field<Option<bool>> for PtrBool {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<bool>) {
        if let Some(b) = v {
            m.insert(key.into(), Value::Bool(*b));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
        match present(m, key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(wrong(key, "boolean", other)),
        }
    }
}

/// A pointer 32-bit integer: kept when set, even zero.
struct PtrInt32;
impl Field<Option<i32>> for PtrInt32 {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<i32>) {
        if let Some(n) = v {
            m.insert(key.into(), (*n).into());
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<i32>, String> {
        Int32::get(m, key)
    }
}

/// A list of strings: omitted when empty.
struct Strs;
impl Field<Vec<String>> for Strs {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Vec<String>) {
        if !v.is_empty() {
            m.insert(key.into(), v.clone().into());
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
        match present(m, key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(String::from)
                        .ok_or_else(|| wrong(key, "string", v))
                })
                .collect(),
            Some(other) => Err(wrong(key, "array", other)),
        }
    }
}

/// A string map: omitted when empty.
struct StrMap;
impl Field<BTreeMap<String, String>> for StrMap {
    fn put(m: &mut Map<String, Value>, key: &str, v: &BTreeMap<String, String>) {
        if !v.is_empty() {
            let obj: Map<String, Value> = v
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            m.insert(key.into(), Value::Object(obj));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, String>, String> {
        match present(m, key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(o)) => o
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(wrong(&format!("{key}.{k}"), "string", other)),
                })
                .collect(),
            Some(other) => Err(wrong(key, "object", other)),
        }
    }
}

/// A byte-string map (`ConfigMap.binaryData`): base64 strings on the JSON side, as Go writes
/// `[]byte`; omitted when empty.
struct BytesMap;
impl Field<BTreeMap<String, Vec<u8>>> for BytesMap {
    fn put(m: &mut Map<String, Value>, key: &str, v: &BTreeMap<String, Vec<u8>>) {
        if !v.is_empty() {
            let obj: Map<String, Value> = v
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(STANDARD.encode(v))))
                .collect();
            m.insert(key.into(), Value::Object(obj));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, Vec<u8>>, String> {
        match present(m, key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(o)) => o
                .iter()
                .map(|(k, v)| {
                    let field = format!("{key}.{k}");
                    let text = v.as_str().ok_or_else(|| wrong(&field, "string", v))?;
                    let bytes = STANDARD
                        .decode(text)
                        .map_err(|e| format!("field {field}: illegal base64 data: {e}"))?;
                    Ok((k.clone(), bytes))
                })
                .collect(),
            Some(other) => Err(wrong(key, "object", other)),
        }
    }
}

/// The `ExtraValue` messages (a list of strings) of the authentication and authorization
/// groups.
trait StringList {
    fn items(&self) -> &[String];
    fn from_items(items: Vec<String>) -> Self;
}

impl StringList for authn::ExtraValue {
    fn items(&self) -> &[String] {
        &self.items
    }
    fn from_items(items: Vec<String>) -> Self {
        Self { items }
    }
}

impl StringList for authz::ExtraValue {
    fn items(&self) -> &[String] {
        &self.items
    }
    fn from_items(items: Vec<String>) -> Self {
        Self { items }
    }
}

/// `extra` of UserInfo and SubjectAccessReviewSpec: a map of string lists in JSON, of
/// `ExtraValue{items}` in protobuf.
struct ExtraMap;
impl<T: StringList> Field<BTreeMap<String, T>> for ExtraMap {
    fn put(m: &mut Map<String, Value>, key: &str, v: &BTreeMap<String, T>) {
        if !v.is_empty() {
            let obj: Map<String, Value> = v
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.items().to_vec())))
                .collect();
            m.insert(key.into(), Value::Object(obj));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, T>, String> {
        match present(m, key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(o)) => o
                .iter()
                .map(|(k, v)| {
                    let items = match v {
                        Value::Array(a) => a
                            .iter()
                            .map(|i| match i {
                                Value::String(s) => Ok(s.clone()),
                                other => Err(wrong(&format!("{key}.{k}"), "string", other)),
                            })
                            .collect::<Result<Vec<_>, _>>()?,
                        other => return Err(wrong(&format!("{key}.{k}"), "array", other)),
                    };
                    Ok((k.clone(), T::from_items(items)))
                })
                .collect(),
            Some(other) => Err(wrong(key, "object", other)),
        }
    }
}

/// A `metav1.Time`: an RFC 3339 string in JSON, whole seconds in protobuf; the zero time, and
/// times RFC 3339 cannot write, are omitted.
struct Time;
impl Field<Option<meta::Time>> for Time {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<meta::Time>) {
        let Some(secs) = v.as_ref().and_then(|t| t.seconds).filter(|s| *s != 0) else {
            return;
        };
        let Ok(t) = time::OffsetDateTime::from_unix_timestamp(secs) else {
            return;
        };
        // Years outside 0000 to 9999 have no RFC 3339 form (formatting gives ""): left out, like
        // times beyond what `time` represents, so that the object still encodes.
        let text = strata_object::format_time(t);
        if !text.is_empty() {
            m.insert(key.into(), Value::String(text));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<meta::Time>, String> {
        let Some(s) = string_of(m, key)? else {
            return Ok(None);
        };
        let t = strata_object::parse_time(&s)
            .ok_or_else(|| format!("field {key}: {s:?} is not an RFC 3339 time"))?;
        Ok(Some(meta::Time {
            seconds: Some(t.unix_timestamp()),
            nanos: None,
        }))
    }
}

/// A `metav1.MicroTime`: RFC 3339 in UTC with six fractional digits in JSON, seconds and
/// nanoseconds (whole microseconds) in protobuf; the zero time, and times RFC 3339 cannot
/// write, are omitted.
struct MicroTime;
impl Field<Option<meta::MicroTime>> for MicroTime {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<meta::MicroTime>) {
        let Some(t) = v else {
            return;
        };
        let (secs, nanos) = (t.seconds.unwrap_or(0), t.nanos.unwrap_or(0));
        if secs == 0 && nanos == 0 {
            return;
        }
        let Some(t) = time::OffsetDateTime::from_unix_timestamp(secs)
            .ok()
            .and_then(|t| t.replace_nanosecond(u32::try_from(nanos).ok()?).ok())
        else {
            return;
        };
        let text = strata_object::format_micro_time(t);
        if !text.is_empty() {
            m.insert(key.into(), Value::String(text));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<meta::MicroTime>, String> {
        let Some(s) = string_of(m, key)? else {
            return Ok(None);
        };
        let t = strata_object::parse_time(&s)
            .ok_or_else(|| format!("field {key}: {s:?} is not an RFC 3339 time"))?;
        let nanos = micro_nanos(t);
        Ok(Some(meta::MicroTime {
            seconds: Some(t.unix_timestamp()),
            nanos: (nanos != 0).then_some(nanos),
        }))
    }
}

/// The nanoseconds of `t` within its second, cut to whole microseconds (MicroTime's precision).
pub(super) fn micro_nanos(t: time::OffsetDateTime) -> i32 {
    // Below 10^9, so it fits.
    (t.nanosecond() / 1000 * 1000) as i32
}

/// A `FieldsV1`: a JSON object, carried as its raw bytes.
struct Fields;
impl Field<Option<meta::FieldsV1>> for Fields {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<meta::FieldsV1>) {
        let Some(raw) = v.as_ref().and_then(|f| f.raw.as_ref()) else {
            return;
        };
        if let Ok(value) = serde_json::from_slice::<Value>(raw) {
            m.insert(key.into(), value);
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<meta::FieldsV1>, String> {
        match present(m, key) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(meta::FieldsV1 {
                raw: Some(crate::json::compact(v)),
            })),
            Some(other) => Err(wrong(key, "object", other)),
        }
    }
}

/// An embedded non-pointer struct: always written (`{}` when empty), as Go does.
struct Obj;
impl<T: JsonForm> Field<Option<T>> for Obj {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<T>) {
        let value = match v {
            Some(t) => t.to_json(),
            None => Value::Object(Map::new()),
        };
        m.insert(key.into(), value);
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<T>, String> {
        present(m, key).map(T::from_json).transpose()
    }
}

/// A pointer to a struct: omitted when unset.
struct PtrObj;
impl<T: JsonForm> Field<Option<T>> for PtrObj {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Option<T>) {
        if let Some(t) = v {
            m.insert(key.into(), t.to_json());
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Option<T>, String> {
        present(m, key).map(T::from_json).transpose()
    }
}

/// A list of structs: omitted when empty.
struct Objs;
impl<T: JsonForm> Field<Vec<T>> for Objs {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Vec<T>) {
        if !v.is_empty() {
            m.insert(key.into(), Value::Array(v.iter().map(T::to_json).collect()));
        }
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Vec<T>, String> {
        match present(m, key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a.iter().map(T::from_json).collect(),
            Some(other) => Err(wrong(key, "array", other)),
        }
    }
}

/// A list's items: always written (`[]` when empty), as Go does.
struct Items;
impl<T: JsonForm> Field<Vec<T>> for Items {
    fn put(m: &mut Map<String, Value>, key: &str, v: &Vec<T>) {
        m.insert(key.into(), Value::Array(v.iter().map(T::to_json).collect()));
    }
    fn get(m: &Map<String, Value>, key: &str) -> Result<Vec<T>, String> {
        Objs::get(m, key)
    }
}

/// Declares a message's JSON form: per field, in Go's JSON order, the JSON name, the field kind
/// (how it maps) and the protobuf field number. It implements `JsonForm` (through the prost
/// message) and `WriteProto` (protobuf straight from JSON, `write.rs`); both read these lines.
macro_rules! json_form {
    ($ty:ty { $($field:ident : $json:literal => $kind:ident @ $tag:literal),* $(,)? }) => {
        impl JsonForm for $ty {
            fn to_json(&self) -> Value {
                let mut m = Map::new();
                $( <$kind as Field<_>>::put(&mut m, $json, &self.$field); )*
                Value::Object(m)
            }
            fn from_json(v: &Value) -> Result<Self, String> {
                let m = v.as_object().ok_or_else(|| wrong(stringify!($ty), "object", v))?;
                Ok(Self {
                    $( $field: <$kind as Field<_>>::get(m, $json)?, )*
                })
            }
        }

        impl write::WriteProto for $ty {
            fn write_proto(v: &Value, out: &mut Vec<u8>) -> write::Written {
                /// The fields' positions in the declaration.
                // Variants take the fields' names so that the macro can name them.
                #[allow(non_camel_case_types)]
                enum Slot { $($field),* }
                const TAGS: &[u32] = &[$($tag),*];
                const N: usize = TAGS.len();
                const ORDER: [usize; N] = write::tag_order([$($tag),*]);
                let writers: [write::WriteFn; N] =
                    [$( write::writer::<$ty, _, write::$kind>(|m| &m.$field) ),*];
                let m = v.as_object().ok_or(write::Reject)?;
                let mut slots: [Option<&Value>; N] = [None; N];
                for (k, v) in m {
                    let slot = match k.as_str() {
                        $( $json => Slot::$field as usize, )*
                        _ => continue,
                    };
                    if !v.is_null() {
                        slots[slot] = Some(v);
                    }
                }
                for i in ORDER {
                    writers[i](out, TAGS[i], slots[i])?;
                }
                Ok(())
            }
        }
    };
}

json_form!(meta::ObjectMeta {
    name: "name" => Str @ 1,
    generate_name: "generateName" => Str @ 2,
    namespace: "namespace" => Str @ 3,
    self_link: "selfLink" => Str @ 4,
    uid: "uid" => Str @ 5,
    resource_version: "resourceVersion" => Str @ 6,
    generation: "generation" => Int @ 7,
    creation_timestamp: "creationTimestamp" => Time @ 8,
    deletion_timestamp: "deletionTimestamp" => Time @ 9,
    deletion_grace_period_seconds: "deletionGracePeriodSeconds" => PtrInt @ 10,
    labels: "labels" => StrMap @ 11,
    annotations: "annotations" => StrMap @ 12,
    owner_references: "ownerReferences" => Objs @ 13,
    finalizers: "finalizers" => Strs @ 14,
    managed_fields: "managedFields" => Objs @ 17,
});

json_form!(meta::OwnerReference {
    api_version: "apiVersion" => Str @ 5,
    kind: "kind" => Str @ 1,
    name: "name" => Str @ 3,
    uid: "uid" => Str @ 4,
    controller: "controller" => PtrBool @ 6,
    block_owner_deletion: "blockOwnerDeletion" => PtrBool @ 7,
});

json_form!(meta::ManagedFieldsEntry {
    manager: "manager" => Str @ 1,
    operation: "operation" => Str @ 2,
    api_version: "apiVersion" => Str @ 3,
    time: "time" => Time @ 4,
    fields_type: "fieldsType" => Str @ 6,
    fields_v1: "fieldsV1" => Fields @ 7,
    subresource: "subresource" => Str @ 8,
});

json_form!(meta::ListMeta {
    self_link: "selfLink" => Str @ 1,
    resource_version: "resourceVersion" => Str @ 2,
    r#continue: "continue" => Str @ 3,
    remaining_item_count: "remainingItemCount" => PtrInt @ 4,
});

json_form!(meta::StatusCause {
    reason: "reason" => Str @ 1,
    message: "message" => Str @ 2,
    field: "field" => Str @ 3,
});

json_form!(meta::StatusDetails {
    name: "name" => Str @ 1,
    group: "group" => Str @ 2,
    kind: "kind" => Str @ 3,
    uid: "uid" => Str @ 6,
    causes: "causes" => Objs @ 4,
    retry_after_seconds: "retryAfterSeconds" => Int32 @ 5,
});

json_form!(meta::Status {
    metadata: "metadata" => Obj @ 1,
    status: "status" => Str @ 2,
    message: "message" => Str @ 3,
    reason: "reason" => Str @ 4,
    details: "details" => PtrObj @ 5,
    code: "code" => Int32 @ 6,
});

json_form!(meta::Preconditions {
    uid: "uid" => PtrStr @ 1,
    resource_version: "resourceVersion" => PtrStr @ 2,
});

json_form!(meta::DeleteOptions {
    grace_period_seconds: "gracePeriodSeconds" => PtrInt @ 1,
    preconditions: "preconditions" => PtrObj @ 2,
    orphan_dependents: "orphanDependents" => PtrBool @ 3,
    propagation_policy: "propagationPolicy" => PtrStr @ 4,
    dry_run: "dryRun" => Strs @ 5,
    ignore_store_read_error_with_cluster_breaking_potential:
        "ignoreStoreReadErrorWithClusterBreakingPotential" => PtrBool @ 6,
});

json_form!(core::ObjectReference {
    kind: "kind" => Str @ 1,
    namespace: "namespace" => Str @ 2,
    name: "name" => Str @ 3,
    uid: "uid" => Str @ 4,
    api_version: "apiVersion" => Str @ 5,
    resource_version: "resourceVersion" => Str @ 6,
    field_path: "fieldPath" => Str @ 7,
});

json_form!(core::LocalObjectReference {
    name: "name" => Str @ 1,
});

json_form!(core::ServiceAccount {
    metadata: "metadata" => Obj @ 1,
    secrets: "secrets" => Objs @ 2,
    image_pull_secrets: "imagePullSecrets" => Objs @ 3,
    automount_service_account_token: "automountServiceAccountToken" => PtrBool @ 4,
});

json_form!(core::ConfigMap {
    metadata: "metadata" => Obj @ 1,
    immutable: "immutable" => PtrBool @ 4,
    data: "data" => StrMap @ 2,
    binary_data: "binaryData" => BytesMap @ 3,
});

json_form!(core::Secret {
    metadata: "metadata" => Obj @ 1,
    immutable: "immutable" => PtrBool @ 5,
    data: "data" => BytesMap @ 2,
    string_data: "stringData" => StrMap @ 4,
    r#type: "type" => Str @ 3,
});

json_form!(core::SecretList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(core::EventSource {
    component: "component" => Str @ 1,
    host: "host" => Str @ 2,
});

json_form!(core::EventSeries {
    count: "count" => Int32 @ 1,
    last_observed_time: "lastObservedTime" => MicroTime @ 2,
});

json_form!(core::Event {
    metadata: "metadata" => Obj @ 1,
    involved_object: "involvedObject" => Obj @ 2,
    reason: "reason" => Str @ 3,
    message: "message" => Str @ 4,
    source: "source" => Obj @ 5,
    first_timestamp: "firstTimestamp" => Time @ 6,
    last_timestamp: "lastTimestamp" => Time @ 7,
    count: "count" => Int32 @ 8,
    r#type: "type" => Str @ 9,
    event_time: "eventTime" => MicroTime @ 10,
    series: "series" => PtrObj @ 11,
    action: "action" => Str @ 12,
    related: "related" => PtrObj @ 13,
    reporting_component: "reportingComponent" => Str @ 14,
    reporting_instance: "reportingInstance" => Str @ 15,
});

json_form!(core::EventList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(events::EventSeries {
    count: "count" => Int32 @ 1,
    last_observed_time: "lastObservedTime" => MicroTime @ 2,
});

json_form!(events::Event {
    metadata: "metadata" => Obj @ 1,
    event_time: "eventTime" => MicroTime @ 2,
    series: "series" => PtrObj @ 3,
    reporting_controller: "reportingController" => Str @ 4,
    reporting_instance: "reportingInstance" => Str @ 5,
    action: "action" => Str @ 6,
    reason: "reason" => Str @ 7,
    regarding: "regarding" => Obj @ 8,
    related: "related" => PtrObj @ 9,
    note: "note" => Str @ 10,
    r#type: "type" => Str @ 11,
    deprecated_source: "deprecatedSource" => Obj @ 12,
    deprecated_first_timestamp: "deprecatedFirstTimestamp" => Time @ 13,
    deprecated_last_timestamp: "deprecatedLastTimestamp" => Time @ 14,
    deprecated_count: "deprecatedCount" => Int32 @ 15,
});

json_form!(events::EventList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(autoscaling::ScaleSpec {
    replicas: "replicas" => Int32 @ 1,
});

// `status.replicas` has no omitempty: a Scale shows 0 replicas.
json_form!(autoscaling::ScaleStatus {
    replicas: "replicas" => PtrInt32 @ 1,
    selector: "selector" => Str @ 2,
});

json_form!(autoscaling::Scale {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(coordination::LeaseSpec {
    holder_identity: "holderIdentity" => PtrStr @ 1,
    lease_duration_seconds: "leaseDurationSeconds" => PtrInt32 @ 2,
    acquire_time: "acquireTime" => MicroTime @ 3,
    renew_time: "renewTime" => MicroTime @ 4,
    lease_transitions: "leaseTransitions" => PtrInt32 @ 5,
});

json_form!(coordination::Lease {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
});

json_form!(coordination::LeaseList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(core::ConfigMapList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(core::ServiceAccountList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(core::NamespaceSpec {
    finalizers: "finalizers" => Strs @ 1,
});

json_form!(core::NamespaceCondition {
    r#type: "type" => Str @ 1,
    status: "status" => Str @ 2,
    last_transition_time: "lastTransitionTime" => Time @ 4,
    reason: "reason" => Str @ 5,
    message: "message" => Str @ 6,
});

json_form!(core::NamespaceStatus {
    phase: "phase" => Str @ 1,
    conditions: "conditions" => Objs @ 2,
});

json_form!(core::Namespace {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(core::NamespaceList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(authn::BoundObjectReference {
    kind: "kind" => Str @ 1,
    api_version: "apiVersion" => Str @ 2,
    name: "name" => Str @ 3,
    u_id: "uid" => Str @ 4,
});

json_form!(authn::TokenRequestSpec {
    audiences: "audiences" => Strs @ 1,
    bound_object_ref: "boundObjectRef" => PtrObj @ 3,
    expiration_seconds: "expirationSeconds" => PtrInt @ 4,
});

json_form!(authn::TokenRequestStatus {
    token: "token" => Str @ 1,
    expiration_timestamp: "expirationTimestamp" => Time @ 2,
});

json_form!(authn::UserInfo {
    username: "username" => PtrStr @ 1,
    uid: "uid" => PtrStr @ 2,
    groups: "groups" => Strs @ 3,
    extra: "extra" => ExtraMap @ 4,
});

json_form!(authn::SelfSubjectReviewStatus {
    user_info: "userInfo" => PtrObj @ 1,
});

json_form!(authn::SelfSubjectReview {
    metadata: "metadata" => Obj @ 1,
    status: "status" => Obj @ 2,
});

json_form!(authn::TokenRequest {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(authn::TokenReviewSpec {
    token: "token" => Str @ 1,
    audiences: "audiences" => Strs @ 2,
});

json_form!(authn::TokenReviewStatus {
    authenticated: "authenticated" => PtrBool @ 1,
    user: "user" => Obj @ 2,
    audiences: "audiences" => Strs @ 4,
    error: "error" => Str @ 3,
});

json_form!(authn::TokenReview {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(meta::LabelSelectorRequirement {
    key: "key" => Str @ 1,
    operator: "operator" => Str @ 2,
    values: "values" => Strs @ 3,
});

json_form!(meta::LabelSelector {
    match_labels: "matchLabels" => StrMap @ 1,
    match_expressions: "matchExpressions" => Objs @ 2,
});

json_form!(rbac::PolicyRule {
    verbs: "verbs" => Strs @ 1,
    api_groups: "apiGroups" => Strs @ 2,
    resources: "resources" => Strs @ 3,
    resource_names: "resourceNames" => Strs @ 4,
    non_resource_ur_ls: "nonResourceURLs" => Strs @ 5,
});

json_form!(rbac::AggregationRule {
    cluster_role_selectors: "clusterRoleSelectors" => Objs @ 1,
});

json_form!(rbac::Role {
    metadata: "metadata" => Obj @ 1,
    rules: "rules" => Objs @ 2,
});

json_form!(rbac::RoleList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(rbac::ClusterRole {
    metadata: "metadata" => Obj @ 1,
    rules: "rules" => Objs @ 2,
    aggregation_rule: "aggregationRule" => PtrObj @ 3,
});

json_form!(rbac::ClusterRoleList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(rbac::Subject {
    kind: "kind" => Str @ 1,
    api_group: "apiGroup" => Str @ 2,
    name: "name" => Str @ 3,
    namespace: "namespace" => Str @ 4,
});

json_form!(rbac::RoleRef {
    api_group: "apiGroup" => Str @ 1,
    kind: "kind" => Str @ 2,
    name: "name" => Str @ 3,
});

json_form!(rbac::RoleBinding {
    metadata: "metadata" => Obj @ 1,
    subjects: "subjects" => Objs @ 2,
    role_ref: "roleRef" => Obj @ 3,
});

json_form!(rbac::RoleBindingList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(rbac::ClusterRoleBinding {
    metadata: "metadata" => Obj @ 1,
    subjects: "subjects" => Objs @ 2,
    role_ref: "roleRef" => Obj @ 3,
});

json_form!(rbac::ClusterRoleBindingList {
    metadata: "metadata" => Obj @ 1,
    items: "items" => Items @ 2,
});

json_form!(authz::ResourceAttributes {
    namespace: "namespace" => Str @ 1,
    verb: "verb" => Str @ 2,
    group: "group" => Str @ 3,
    version: "version" => Str @ 4,
    resource: "resource" => Str @ 5,
    subresource: "subresource" => Str @ 6,
    name: "name" => Str @ 7,
});

json_form!(authz::NonResourceAttributes {
    path: "path" => Str @ 1,
    verb: "verb" => Str @ 2,
});

json_form!(authz::SubjectAccessReviewSpec {
    resource_attributes: "resourceAttributes" => PtrObj @ 1,
    non_resource_attributes: "nonResourceAttributes" => PtrObj @ 2,
    user: "user" => Str @ 3,
    groups: "groups" => Strs @ 4,
    extra: "extra" => ExtraMap @ 5,
    uid: "uid" => Str @ 6,
});

json_form!(authz::SelfSubjectAccessReviewSpec {
    resource_attributes: "resourceAttributes" => PtrObj @ 1,
    non_resource_attributes: "nonResourceAttributes" => PtrObj @ 2,
});

json_form!(authz::SubjectAccessReviewStatus {
    allowed: "allowed" => PtrBool @ 1,
    denied: "denied" => PtrBool @ 4,
    reason: "reason" => Str @ 2,
    evaluation_error: "evaluationError" => Str @ 3,
});

json_form!(authz::SubjectAccessReview {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(authz::SelfSubjectAccessReview {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(authz::LocalSubjectAccessReview {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});

json_form!(authz::ResourceRule {
    verbs: "verbs" => Strs @ 1,
    api_groups: "apiGroups" => Strs @ 2,
    resources: "resources" => Strs @ 3,
    resource_names: "resourceNames" => Strs @ 4,
});

json_form!(authz::NonResourceRule {
    verbs: "verbs" => Strs @ 1,
    non_resource_ur_ls: "nonResourceURLs" => Strs @ 2,
});

json_form!(authz::SelfSubjectRulesReviewSpec {
    namespace: "namespace" => Str @ 1,
});

json_form!(authz::SubjectRulesReviewStatus {
    resource_rules: "resourceRules" => Objs @ 1,
    non_resource_rules: "nonResourceRules" => Objs @ 2,
    incomplete: "incomplete" => PtrBool @ 3,
    evaluation_error: "evaluationError" => Str @ 4,
});

json_form!(authz::SelfSubjectRulesReview {
    metadata: "metadata" => Obj @ 1,
    spec: "spec" => Obj @ 2,
    status: "status" => Obj @ 3,
});
