//! The strategies of the kinds controllers need beside ConfigMaps: Secrets (core/v1), Events
//! (core/v1, and the same objects at events.k8s.io/v1) and Leases (coordination.k8s.io/v1), with
//! Kubernetes' defaulting, conversion and validation.

use std::borrow::Cow;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{Map, Value};
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::names::dns1123_subdomain_errors;
use strata_object::{format_micro_time, parse_time, Object};

use crate::strategy::{ConfigMapStrategy, Strategy};

/// The most bytes a Secret's values may hold together (Kubernetes' `MaxSecretSize`).
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// The Secret type of objects that give none.
pub const SECRET_TYPE_OPAQUE: &str = "Opaque";

/// The annotation a service-account token Secret must carry.
const SERVICE_ACCOUNT_NAME_KEY: &str = "kubernetes.io/service-account.name";

/// Why a `metav1.MicroTime` value is refused.
const NOT_A_TIME: &str = "must be an RFC 3339 time, e.g. 2006-01-02T15:04:05.000000Z";

fn immutable(obj: &Object) -> bool {
    obj.as_map().get("immutable") == Some(&Value::Bool(true))
}

/// Rewrites the MicroTime at `path` (object keys from the top) as Kubernetes writes one: UTC,
/// six fractional digits. A value that is not a time is left for validation to report.
fn normalize_micro_time(obj: &mut Object, path: &[&str]) {
    let mut at: Option<&mut Value> = None;
    for (i, key) in path.iter().enumerate() {
        at = if i == 0 {
            obj.as_map_mut().get_mut(*key)
        } else {
            at.and_then(|v| v.get_mut(*key))
        };
    }
    if let Some(v) = at {
        if let Some(t) = v.as_str().and_then(parse_time) {
            let text = format_micro_time(t);
            if !text.is_empty() {
                *v = Value::String(text);
            }
        }
    }
}

/// [`normalize_micro_time`] at each of `paths`.
fn normalize_micro_times(obj: &mut Object, paths: &[&[&str]]) {
    for path in paths {
        normalize_micro_time(obj, path);
    }
}

/// [`check_micro_time`] at each of `paths`.
fn micro_time_errors(obj: &Object, paths: &[&[&str]]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for path in paths {
        check_micro_time(obj, path, &mut errors);
    }
    errors
}

/// The MicroTime fields of an Event, in both groups' shapes.
const EVENT_MICRO_TIMES: &[&[&str]] = &[&["eventTime"], &["series", "lastObservedTime"]];

/// The MicroTime fields of a Lease.
const LEASE_MICRO_TIMES: &[&[&str]] = &[&["spec", "acquireTime"], &["spec", "renewTime"]];

/// An error for each value at `path` that is set but is not an RFC 3339 time.
fn check_micro_time(obj: &Object, path: &[&str], errors: &mut Vec<FieldError>) {
    let mut at = obj.as_map().get(path[0]);
    for key in &path[1..] {
        at = at.and_then(|v| v.get(*key));
    }
    if let Some(Value::String(s)) = at {
        if parse_time(s).is_none() {
            errors.push(FieldError::invalid_string(&path.join("."), s, NOT_A_TIME));
        }
    }
}

/// Secrets: `stringData` merged into `data` (and never stored), the type defaulted to Opaque
/// and fixed once set, Kubernetes' key rules, the required keys of the known types, at most
/// 1 MiB of values, and nothing but metadata may change once `immutable` is true.
#[derive(Debug, Default)]
pub struct SecretStrategy;

impl SecretStrategy {
    /// Kubernetes' conversion of a written Secret: each `stringData` value, as bytes, replaces
    /// the `data` entry of its key; `stringData` goes. Then the type defaults to Opaque.
    fn normalize(obj: &mut Object) {
        let map = obj.as_map_mut();
        if let Some(Value::Object(entries)) = map.remove("stringData") {
            if !entries.is_empty() {
                let data = map
                    .entry("data")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !data.is_object() {
                    *data = Value::Object(Map::new());
                }
                if let Value::Object(data) = data {
                    for (k, v) in entries {
                        let text = v.as_str().unwrap_or_default();
                        data.insert(k, Value::String(BASE64.encode(text)));
                    }
                }
            }
        }
        let typed = map
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        if !typed {
            map.insert("type".into(), Value::String(SECRET_TYPE_OPAQUE.into()));
        }
    }

    /// The decoded values of `data`, by key, in key order; a value that is not base64 is
    /// reported and left out.
    fn data(obj: &Object, errors: &mut Vec<FieldError>) -> Vec<(String, Vec<u8>)> {
        let mut entries = Vec::new();
        if let Some(Value::Object(m)) = obj.as_map().get("data") {
            for (k, v) in m {
                let text = v.as_str().unwrap_or_default();
                match BASE64.decode(text) {
                    Ok(bytes) => entries.push((k.clone(), bytes)),
                    Err(e) => errors.push(FieldError::new(
                        FieldErrorKind::Invalid,
                        format!("data[{k}]"),
                        Some("\"<secret contents redacted>\"".into()),
                        format!("illegal base64 data: {e}"),
                    )),
                }
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    fn secret_type(obj: &Object) -> &str {
        obj.as_map()
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The checks particular to the known types.
    fn type_errors(obj: &Object, data: &[(String, Vec<u8>)], errors: &mut Vec<FieldError>) {
        let value = |key: &str| data.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        let required = |key: &str| FieldError::required(&format!("data[{key}]"), "");
        let json_object = |key: &str, errors: &mut Vec<FieldError>| match value(key) {
            None => errors.push(required(key)),
            Some(bytes) => {
                if let Err(e) = serde_json::from_slice::<Map<String, Value>>(bytes) {
                    errors.push(FieldError::new(
                        FieldErrorKind::Invalid,
                        format!("data[{key}]"),
                        Some("\"<secret contents redacted>\"".into()),
                        e.to_string(),
                    ));
                }
            }
        };
        match Self::secret_type(obj) {
            "kubernetes.io/service-account-token" => {
                let named = obj
                    .meta_value("annotations")
                    .and_then(|a| a.get(SERVICE_ACCOUNT_NAME_KEY))
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                if !named {
                    errors.push(FieldError::required(
                        &format!("metadata.annotations[{SERVICE_ACCOUNT_NAME_KEY}]"),
                        "",
                    ));
                }
            }
            "kubernetes.io/dockercfg" => json_object(".dockercfg", errors),
            "kubernetes.io/dockerconfigjson" => json_object(".dockerconfigjson", errors),
            // Either may be empty, but one of them must be there.
            "kubernetes.io/basic-auth"
                if value("username").is_none() && value("password").is_none() =>
            {
                errors.push(required("username"));
                errors.push(required("password"));
            }
            "kubernetes.io/ssh-auth" if value("ssh-privatekey").is_none_or(|v| v.is_empty()) => {
                errors.push(required("ssh-privatekey"));
            }
            "kubernetes.io/tls" => {
                for key in ["tls.crt", "tls.key"] {
                    if value(key).is_none() {
                        errors.push(required(key));
                    }
                }
            }
            // Opaque, bootstrap tokens (checked by their authenticator, not here) and types
            // of the users' own: no particular keys.
            _ => {}
        }
    }
}

impl Strategy for SecretStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        Self::normalize(obj);
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object) {
        Self::normalize(new);
    }

    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let data = Self::data(obj, &mut errors);
        let mut total = 0usize;
        for (key, value) in &data {
            for why in ConfigMapStrategy::key_errors(key) {
                errors.push(FieldError::invalid_string(
                    &format!("data[{key}]"),
                    key,
                    why,
                ));
            }
            total += value.len();
        }
        if total > MAX_SECRET_SIZE {
            errors.push(FieldError::new(
                FieldErrorKind::TooLong,
                "data",
                None,
                format!("must have at most {MAX_SECRET_SIZE} bytes"),
            ));
        }
        Self::type_errors(obj, &data, &mut errors);
        errors
    }

    fn validate_update(&self, new: &Object, old: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let (new_type, old_type) = (Self::secret_type(new), Self::secret_type(old));
        if new_type != old_type {
            errors.push(FieldError::invalid_string(
                "type",
                new_type,
                "field is immutable",
            ));
        }
        if immutable(old) {
            let why = "field is immutable when `immutable` is set";
            if !immutable(new) {
                errors.push(FieldError::forbidden("immutable", why));
            }
            let data = |o: &Object| o.as_map().get("data").cloned().unwrap_or(Value::Null);
            let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
            let (a, b) = (data(new), data(old));
            if a != b && !(empty(&a) && empty(&b)) {
                errors.push(FieldError::forbidden("data", why));
            }
        }
        errors
    }
}

/// Why `value` is not a qualified name (`[prefix/]name`), in Kubernetes' words
/// (`IsQualifiedName`).
fn qualified_name_errors(value: &str) -> Vec<String> {
    const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
    let parts: Vec<&str> = value.split('/').collect();
    let mut errors = Vec::new();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                for why in dns1123_subdomain_errors(prefix) {
                    errors.push(format!("prefix part {why}"));
                }
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and \
                 must start and end with an alphanumeric character (e.g. 'MyName',  or \
                 'my.name',  or '123-abc', regex used for validation is '{NAME_FMT}') with an \
                 optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".into());
        return errors;
    }
    if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".into());
    }
    let b = name.as_bytes();
    let fits = b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric();
    if !fits {
        errors.push(format!(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start \
             and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
             '123-abc', regex used for validation is '{NAME_FMT}')"
        ));
    }
    errors
}

/// The most characters of an Event's `reportingInstance`, `action` and `reason`.
const EVENT_FIELD_LIMIT: usize = 128;
/// The most characters of an Event's `message`.
const EVENT_MESSAGE_LIMIT: usize = 1024;

/// Events (core/v1): Kubernetes' validation of Events written through the core group: the
/// involved object's namespace agrees with the event's, and an event with an `eventTime` (the
/// newer recorders') names its reporting component and instance, action and reason.
#[derive(Debug, Default)]
pub struct EventStrategy;

impl Strategy for EventStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        normalize_micro_times(obj, EVENT_MICRO_TIMES);
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object) {
        normalize_micro_times(new, EVENT_MICRO_TIMES);
    }

    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = micro_time_errors(obj, EVENT_MICRO_TIMES);
        errors.extend(legacy_event_errors(obj, "reportingComponent"));
        errors
    }
}

/// Kubernetes' checks of every Event, whatever group it is written through (`obj` in the
/// core/v1 form; `reporting` is how the request's group names the reporting controller).
fn legacy_event_errors(obj: &Object, reporting: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let map = obj.as_map();
    let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or_default();
    let involved_namespace = map
        .get("involvedObject")
        .and_then(|o| o.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = obj.namespace();
    let mismatch = || {
        FieldError::invalid_string(
            "involvedObject.namespace",
            involved_namespace,
            "does not match event.namespace",
        )
    };
    let event_time = map
        .get("eventTime")
        .and_then(Value::as_str)
        .and_then(parse_time);
    match event_time {
        None => {
            // Old clients may leave the involved object's namespace out for events in
            // `default`.
            let agrees = if involved_namespace.is_empty() {
                namespace.is_empty() || namespace == "default"
            } else {
                namespace == involved_namespace
            };
            if !agrees {
                errors.push(mismatch());
            }
        }
        Some(_) => {
            if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system"
            {
                errors.push(mismatch());
            }
            let component = text("reportingComponent");
            if component.is_empty() {
                errors.push(FieldError::required(reporting, ""));
            }
            for why in qualified_name_errors(component) {
                errors.push(FieldError::invalid_string(reporting, component, why));
            }
            let limited = |field: &str, limit: usize, errors: &mut Vec<FieldError>| {
                if text(field).chars().count() > limit {
                    errors.push(FieldError::invalid_string(
                        field,
                        "",
                        format!("can have at most {limit} characters"),
                    ));
                }
            };
            for field in ["reportingInstance", "action", "reason"] {
                if text(field).is_empty() {
                    errors.push(FieldError::required(field, ""));
                }
                limited(field, EVENT_FIELD_LIMIT, &mut errors);
            }
            limited("message", EVENT_MESSAGE_LIMIT, &mut errors);
        }
    }
    errors
}

/// The fields events.k8s.io/v1 names otherwise than core/v1: (core name, events.k8s.io name).
const EVENT_RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// Renames an Event's fields into the other group's names (`to_v1`: core/v1 to
/// events.k8s.io/v1) and sets the apiVersion it carries, if any. Renaming what is already in
/// the target form changes nothing.
fn convert_event(obj: &mut Object, to_v1: bool) {
    let map = obj.as_map_mut();
    for (core, v1) in EVENT_RENAMES {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(v) = map.shift_remove(from) {
            map.insert(to.into(), v);
        }
    }
    if map.contains_key("apiVersion") {
        let api_version = if to_v1 { "events.k8s.io/v1" } else { "v1" };
        map.insert("apiVersion".into(), Value::String(api_version.into()));
    }
}

/// Events served at events.k8s.io/v1: the core/v1 Events' objects, stored in the core form and
/// renamed on the way in and out, with Kubernetes' stricter validation of this group (an
/// `eventTime`, a Normal or Warning type, a valid series, no deprecated fields on create, and
/// the descriptive fields immutable).
#[derive(Debug, Default)]
pub struct EventsV1Strategy;

impl EventsV1Strategy {
    fn series_errors(obj: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if let Some(series) = obj.as_map().get("series").filter(|s| s.is_object()) {
            if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
                errors.push(FieldError::invalid_string(
                    "series.count",
                    "",
                    "should be at least 2",
                ));
            }
            if series.get("lastObservedTime").is_none_or(Value::is_null) {
                errors.push(FieldError::required("series.lastObservedTime", ""));
            }
        }
        errors
    }
}

impl Strategy for EventsV1Strategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        normalize_micro_times(obj, EVENT_MICRO_TIMES);
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object) {
        normalize_micro_times(new, EVENT_MICRO_TIMES);
    }

    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = micro_time_errors(obj, EVENT_MICRO_TIMES);
        let mut core = obj.clone();
        convert_event(&mut core, false);
        errors.extend(legacy_event_errors(&core, "reportingController"));
        errors.extend(Self::series_errors(obj));
        let map = obj.as_map();
        let set = |k: &str| map.get(k).is_some_and(|v| !v.is_null());
        if !set("eventTime") {
            errors.push(FieldError::required("eventTime", ""));
        }
        let kind = map.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != "Normal" && kind != "Warning" {
            errors.push(FieldError::invalid_string(
                "type",
                "",
                format!("has invalid value: {kind}"),
            ));
        }
        let unset = |field: &str| FieldError::invalid_string(field, "", "needs to be unset");
        for field in ["deprecatedFirstTimestamp", "deprecatedLastTimestamp"] {
            if map
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
            {
                errors.push(unset(field));
            }
        }
        if map
            .get("deprecatedCount")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            != 0
        {
            errors.push(unset("deprecatedCount"));
        }
        let source = |k: &str| {
            map.get("deprecatedSource")
                .and_then(|s| s.get(k))
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        if source("component") || source("host") {
            errors.push(unset("deprecatedSource"));
        }
        errors
    }

    fn validate_update(&self, new: &Object, old: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let (n, o) = (new.as_map(), old.as_map());
        let absent = Value::Null;
        for field in [
            "regarding",
            "reason",
            "note",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
            "type",
            "eventTime",
            "action",
            "related",
            "reportingController",
            "reportingInstance",
        ] {
            let (a, b) = (
                n.get(field).unwrap_or(&absent),
                o.get(field).unwrap_or(&absent),
            );
            if a != b {
                let value = match a {
                    Value::String(s) => strata_object::go::quote(s),
                    other => other.to_string(),
                };
                errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    field,
                    Some(value),
                    "field is immutable",
                ));
            }
        }
        errors
    }

    fn reads_back_as_written(&self) -> bool {
        false
    }

    fn convert_from_storage(&self, obj: &mut Object) {
        convert_event(obj, true);
    }

    fn to_storage<'a>(&self, obj: &'a Object) -> Cow<'a, Object> {
        let mut stored = obj.clone();
        convert_event(&mut stored, false);
        Cow::Owned(stored)
    }
}

/// Leases (coordination.k8s.io/v1): MicroTimes written as Kubernetes writes them, a positive
/// duration and a non-negative transition count. The 1.31 fields behind feature gates
/// (`strategy`, `preferredHolder`) are not in the schema, so they are pruned as unknown.
#[derive(Debug, Default)]
pub struct LeaseStrategy;

impl Strategy for LeaseStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        normalize_micro_times(obj, LEASE_MICRO_TIMES);
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object) {
        normalize_micro_times(new, LEASE_MICRO_TIMES);
    }

    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = micro_time_errors(obj, LEASE_MICRO_TIMES);
        let spec = obj.as_map().get("spec");
        let int = |k: &str| spec.and_then(|s| s.get(k)).and_then(Value::as_i64);
        let invalid = |field: &str, n: i64, why: &str| {
            FieldError::new(FieldErrorKind::Invalid, field, Some(n.to_string()), why)
        };
        if let Some(n) = int("leaseDurationSeconds").filter(|n| *n <= 0) {
            errors.push(invalid(
                "spec.leaseDurationSeconds",
                n,
                "must be greater than 0",
            ));
        }
        if let Some(n) = int("leaseTransitions").filter(|n| *n < 0) {
            // Kubernetes' wording, as it is.
            errors.push(invalid(
                "spec.leaseTransitions",
                n,
                "must to greater or equal than 0",
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: Value) -> Object {
        Object::from_value(v).expect("the tests pass objects")
    }

    fn problems(strategy: &dyn Strategy, v: Value) -> Vec<String> {
        strategy
            .validate(&object(v))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn string_data_merges_into_data_and_the_type_defaults() {
        let mut s = object(json!({"metadata": {"name": "s"},
            "data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "plain", "c": ""}}));
        SecretStrategy.prepare_for_create(&mut s);
        assert_eq!(
            s.into_value(),
            json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "cGxhaW4=", "c": ""},
                   "type": "Opaque"})
        );
    }

    #[test]
    fn secret_types_require_their_keys() {
        let got = problems(
            &SecretStrategy,
            json!({"metadata": {"name": "t"}, "type": "kubernetes.io/tls",
                   "data": {"tls.crt": "", "bad/key": "", "x": "!!!!"}}),
        );
        assert_eq!(
            got,
            [
                "data[x]: Invalid value: \"<secret contents redacted>\": illegal base64 data: Invalid symbol 33, offset 0.",
                "data[bad/key]: Invalid value: \"bad/key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                "data[tls.key]: Required value",
            ]
        );
        let got = problems(
            &SecretStrategy,
            json!({"metadata": {"name": "t"}, "type": "kubernetes.io/service-account-token"}),
        );
        assert_eq!(
            got,
            ["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
        let got = problems(
            &SecretStrategy,
            json!({"metadata": {"name": "t"}, "type": "kubernetes.io/basic-auth"}),
        );
        assert_eq!(
            got,
            [
                "data[username]: Required value",
                "data[password]: Required value"
            ]
        );
        let ok = json!({"metadata": {"name": "t"}, "type": "kubernetes.io/dockerconfigjson",
                        "data": {".dockerconfigjson": BASE64.encode("{\"auths\": {}}")}});
        assert!(problems(&SecretStrategy, ok).is_empty());
        let big = BASE64.encode(vec![0u8; MAX_SECRET_SIZE + 1]);
        let got = problems(
            &SecretStrategy,
            json!({"metadata": {"name": "t"}, "data": {"a": big}}),
        );
        assert_eq!(got, ["data: Too long: must have at most 1048576 bytes"]);
    }

    #[test]
    fn immutable_secrets_keep_their_data_and_type() {
        let old = object(json!({"metadata": {"name": "s"}, "immutable": true,
                               "type": "Opaque", "data": {"a": "eA=="}}));
        let new = object(json!({"metadata": {"name": "s"}, "type": "other",
                               "data": {"a": "eQ=="}}));
        let got: Vec<String> = SecretStrategy
            .validate_update(&new, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "type: Invalid value: \"other\": field is immutable",
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set",
            ]
        );
    }

    #[test]
    fn leases_and_events_follow_kubernetes() {
        let got = problems(
            &LeaseStrategy,
            json!({"metadata": {"name": "l"},
                   "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1, "renewTime": "x"}}),
        );
        assert_eq!(
            got,
            [
                "spec.renewTime: Invalid value: \"x\": must be an RFC 3339 time, e.g. 2006-01-02T15:04:05.000000Z",
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must to greater or equal than 0",
            ]
        );
        let mut lease = object(json!({"metadata": {"name": "l"},
            "spec": {"renewTime": "2025-01-01T02:00:00.5+02:00"}}));
        LeaseStrategy.prepare_for_create(&mut lease);
        assert_eq!(
            lease.as_map()["spec"]["renewTime"],
            "2025-01-01T00:00:00.500000Z"
        );
        let got = problems(
            &EventStrategy,
            json!({"metadata": {"name": "e", "namespace": "a"},
                   "involvedObject": {"namespace": "b"}}),
        );
        assert_eq!(
            got,
            ["involvedObject.namespace: Invalid value: \"b\": does not match event.namespace"]
        );
        let got = problems(
            &EventStrategy,
            json!({"metadata": {"name": "e", "namespace": "a"},
                   "involvedObject": {"namespace": "a"}, "eventTime": "2025-01-01T00:00:00.000000Z",
                   "reportingComponent": "a/b/c", "reportingInstance": "i", "reason": "R"}),
        );
        assert_eq!(
            got,
            [
                "reportingComponent: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                "action: Required value",
            ]
        );
        assert_eq!(
            qualified_name_errors("example.com/controller"),
            Vec::<String>::new()
        );
    }
}
