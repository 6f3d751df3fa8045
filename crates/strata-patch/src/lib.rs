//! Patch engines over JSON value trees: JSON patch (RFC 6902), JSON merge patch (RFC 7386),
//! strategic merge patch driven by the type's schema, and server-side apply with managedFields.
//! Pure functions; no storage, no HTTP.

use serde_json::Value;

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

/// Applies an RFC 7386 merge patch to `target`: objects merge recursively, `null` removes a
/// member, anything else replaces.
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
