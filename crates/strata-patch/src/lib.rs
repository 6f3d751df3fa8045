//! Patch engines over JSON value trees: JSON merge patch (RFC 7386) today; JSON patch, strategic
//! merge patch and server-side apply join here. Pure functions; no storage, no HTTP.

use serde_json::Value;

/// Applies an RFC 7386 merge patch to `target`: objects merge recursively, `null` removes a
/// member, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
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
