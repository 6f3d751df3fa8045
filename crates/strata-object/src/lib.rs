//! The Strata object model: object metadata, `Status`, resource-type descriptors and name rules.
//!
//! Objects travel through the generic path as JSON value trees ([`Object`]); typed structs exist
//! only where code needs them (`Status`, discovery documents). This crate does no I/O and needs no
//! async runtime.
//!
//! ```
//! use serde_json::json;
//! use strata_object::{names, Object, ResourceVersion, Status};
//!
//! let mut cm = Object::from_value(json!({"metadata": {"name": "settings"}, "data": {"a": "1"}}))?;
//! cm.set_type_meta("v1", "ConfigMap");
//! cm.set_resource_version(&ResourceVersion::from(7).to_string());
//! assert!(names::dns1123_subdomain_errors(cm.name()).is_empty());
//!
//! // A write with a stale resourceVersion is refused with Kubernetes' Conflict.
//! let err = Status::stale_conflict("", "configmaps", cm.name());
//! assert_eq!((err.code, err.is_conflict()), (409, true));
//! # Ok::<(), strata_object::ObjectError>(())
//! ```

#![deny(missing_docs)]

pub mod builtin;
pub mod field;
pub mod go;
pub mod names;
mod object;
pub mod printer;
pub mod resource;
pub mod schema;
pub mod selector;
mod status;
mod timestamp;
mod version;

pub use object::{Object, ObjectError};
pub use resource::{GroupVersionKind, ResourceType, Scope, SubResource, Verb};
pub use selector::{FieldSelector, LabelSelector};
pub use status::{Status, StatusCause, StatusDetails, StatusListMeta, StatusReason};
pub use timestamp::{format_micro_time, format_time, format_unix, now_rfc3339, parse_time};
pub use version::ResourceVersion;

/// The strings of a JSON array, other items skipped; empty when `value` is absent or not an
/// array. Lists of names (list-map keys, RBAC rules' verbs, a review's groups) read this way.
///
/// ```
/// use serde_json::json;
/// let v = json!({"verbs": ["get", 1, "list"]});
/// assert_eq!(strata_object::strings(v.get("verbs")), ["get", "list"]);
/// assert!(strata_object::strings(v.get("none")).is_empty());
/// ```
pub fn strings(value: Option<&serde_json::Value>) -> Vec<String> {
    value
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

// Dependencies whose types and traits appear in this crate's API, re-exported so that users
// name the same versions without adding them to their own manifests.
/// `serde`, whose traits [`Status`] and its parts implement.
pub use serde;
/// `serde_json`, whose `Value` and `Map` are the value trees of [`Object`] and the schemas.
pub use serde_json;
/// `time`, whose `OffsetDateTime` and `Duration` the timestamp and printer functions take.
pub use time;

/// The examples of the crate's README.md, run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
