//! Patch engines over JSON value trees: JSON patch (RFC 6902), JSON merge patch (RFC 7386),
//! strategic merge patch driven by the type's schema, and server-side apply with managedFields.
//! Pure functions; no storage, no HTTP.
//!
//! Objects are [`serde_json::Value`] trees, whatever their type; a type's OpenAPI schema, walked
//! through [`strata_object::schema::Node`], says how its lists and maps merge and which fields
//! exist. Strata's built-in types come with their schemas
//! ([`strata_object::builtin`]); for another type, read its OpenAPI
//! `components.schemas` with [`CompiledSchema::new`](strata_object::schema::CompiledSchema::new)
//! and walk from its `root()`.
//!
//! | Engine | Function | Kubernetes content type |
//! |---|---|---|
//! | JSON merge patch | [`merge_patch`] | `application/merge-patch+json` |
//! | JSON patch | [`apply_json_patch`] | `application/json-patch+json` |
//! | Strategic merge patch | [`strategic_merge`] | `application/strategic-merge-patch+json` |
//! | Server-side apply | [`apply()`], [`apply_through`] | `application/apply-patch+yaml` |
//! | managedFields of other writes | [`record_update`] | (create, update, the three patches) |
//!
//! # Example
//!
//! Two managers apply to one ServiceAccount; the second wants a label the first set to another
//! value, which is a conflict until it forces.
//!
//! ```
//! use strata_patch::serde_json::json;
//! use strata_patch::strata_object::builtin;
//! use strata_patch::{apply, ManagedFields};
//!
//! let sa = builtin::service_account();
//! let schema = sa.schema().unwrap();
//! let now = "2026-01-01T00:00:00Z";
//!
//! let mine = json!({
//!     "apiVersion": "v1", "kind": "ServiceAccount",
//!     "metadata": {"name": "builder", "labels": {"team": "a"}},
//! });
//! let live = apply(None, &mine, schema, "team-a", false, "v1", now).unwrap();
//!
//! let theirs = json!({
//!     "apiVersion": "v1", "kind": "ServiceAccount",
//!     "metadata": {"name": "builder", "labels": {"team": "b"}},
//! });
//! let err = apply(Some(&live), &theirs, schema, "team-b", false, "v1", now).unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     r#"Apply failed with 1 conflict: conflict with "team-a": .metadata.labels.team"#
//! );
//!
//! // Forcing takes the field over: team-a no longer owns anything.
//! let live = apply(Some(&live), &theirs, schema, "team-b", true, "v1", now).unwrap();
//! assert_eq!(live["metadata"]["labels"]["team"], "b");
//! let managers = ManagedFields::of_object(&live).unwrap();
//! let names: Vec<_> = managers.entries.iter().map(|e| e.manager.as_str()).collect();
//! assert_eq!(names, ["team-b"]);
//! ```
//!
//! `examples/apply_offline.rs` does the same with `k8s-openapi` types.
//!
//! # Dependencies
//!
//! `serde_json` (with its `preserve_order` feature: members keep their order, as Kubernetes
//! writes them) and `strata-object` for the schemas appear in the API and are re-exported; JSON
//! patch's operations come from the `json-patch` crate, which stays internal.

#![deny(missing_docs)]

use serde_json::Value;

pub use serde_json;
pub use strata_object;

pub mod apply;
pub mod error;
pub mod fieldpath;
pub mod json_patch;
pub mod managed;
pub mod strategic;

pub use apply::{apply, apply_through, ApplyError, Conflict};
pub use error::PatchError;
pub use fieldpath::{fields_of, FieldSet, Path, PathElement};
pub use json_patch::apply_json_patch;
pub use managed::{default_manager, record_update, ManagedFields, ManagedFieldsEntry, Operation};
pub use strategic::strategic_merge;

/// The README's examples, run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Applies an RFC 7386 merge patch to `target`: objects merge recursively, `null` removes a
/// member, anything else replaces.
///
/// ```
/// use strata_patch::merge_patch;
/// use strata_patch::serde_json::json;
///
/// let mut cm = json!({"data": {"a": "1", "b": "2"}, "items": [1, 2]});
/// merge_patch(&mut cm, &json!({"data": {"a": null, "c": "3"}, "items": [3]}));
/// assert_eq!(cm, json!({"data": {"b": "2", "c": "3"}, "items": [3]}));
/// ```
pub fn merge_patch(target: &mut Value, patch: &Value) {
    ::json_patch::merge(target, patch);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }
}
