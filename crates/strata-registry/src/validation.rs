//! Validation of object metadata on create and update, worded as Kubernetes words it.

use serde_json::Value;
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::names::{dns1123_label_errors, dns1123_subdomain_errors};
use strata_object::resource::NameRule;
use strata_object::{Object, ResourceType};

/// Checks name, namespace and label/annotation shapes of an object about to be stored.
pub fn validate_object_meta(info: &ResourceType, obj: &Object) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = obj.name();
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        let problems = match info.name_rule {
            NameRule::Dns1123Subdomain => dns1123_subdomain_errors(name),
            NameRule::Dns1123Label => dns1123_label_errors(name),
            NameRule::PathSegment => path_segment_errors(name),
        };
        for p in problems {
            errs.push(FieldError::invalid_string("metadata.name", name, p));
        }
    }
    if info.namespaced() {
        let ns = obj.namespace();
        if ns.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for p in dns1123_label_errors(ns) {
                errs.push(FieldError::invalid_string("metadata.namespace", ns, p));
            }
        }
    } else if !obj.namespace().is_empty() {
        errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }
    for (k, _) in obj.labels() {
        if !is_qualified_name(k) {
            errs.push(FieldError::invalid_string(
                "metadata.labels",
                k,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ));
        }
    }
    for (k, v) in obj.labels() {
        if !is_label_value(v) {
            errs.push(FieldError::invalid_string(
                &format!("metadata.labels.{k}"),
                v,
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            ));
        }
    }
    let annotations_size: usize = obj
        .meta_value("annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    if annotations_size > 256 * 1024 {
        errs.push(FieldError::new(
            FieldErrorKind::TooLong,
            "metadata.annotations",
            None,
            "must have at most 262144 bytes",
        ));
    }
    errs
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => dns1123_subdomain_errors(prefix).is_empty() && is_name_part(name),
        None => is_name_part(s),
    }
}

fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

/// Carries the server-owned fields of `old` into `new` and reports changes to immutable ones.
pub fn validate_object_meta_update(
    info: &ResourceType,
    new: &mut Object,
    old: &Object,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if new.uid().is_empty() {
        new.set_uid(old.uid());
    } else if new.uid() != old.uid() {
        errs.push(FieldError::invalid_string(
            "metadata.uid",
            new.uid(),
            "field is immutable",
        ));
    }
    if new.name() != old.name() {
        errs.push(FieldError::invalid_string(
            "metadata.name",
            new.name(),
            "field is immutable",
        ));
    }
    if info.namespaced() && new.namespace() != old.namespace() {
        errs.push(FieldError::invalid_string(
            "metadata.namespace",
            new.namespace(),
            "field is immutable",
        ));
    }
    new.set_creation_timestamp(old.creation_timestamp());
    for field in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        new.set_meta_value(field, old.meta_value(field).cloned());
    }
    if !old.deletion_timestamp().is_empty() {
        let old_f = old.finalizers();
        let added: Vec<String> = new
            .finalizers()
            .into_iter()
            .filter(|f| !old_f.contains(f))
            .map(|f| format!("{f:?}"))
            .collect();
        if !added.is_empty() {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    added.join(", ")
                ),
            ));
        }
    }
    errs
}

/// Why `name` cannot be one URL path segment (Kubernetes' `IsValidPathSegmentName`): the rule
/// of RBAC names, and so of the name a `roleRef` points at.
pub(crate) fn path_segment_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    let mut errs = Vec::new();
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}
