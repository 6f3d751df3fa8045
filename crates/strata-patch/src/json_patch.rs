//! JSON patch (RFC 6902): a list of `add`/`remove`/`replace`/`move`/`copy`/`test` operations
//! applied in order, all or nothing. The operations themselves come from the `json-patch` crate;
//! this module only decides which failures are the client's document (400) and which are the
//! target's (422).

use serde_json::Value;

use crate::error::PatchError;

/// Applies the RFC 6902 patch `patch` to a copy of `target` and returns the copy.
///
/// A document that is not an array of well-formed operations (unknown `op`, missing `path` or
/// `value`, a `path` that is not a JSON pointer) is [`PatchError::Malformed`]. An operation that
/// fails against the target (a missing path, an out-of-range index, a failed `test`) is
/// [`PatchError::Invalid`]; the whole patch then fails and `target` is never changed.
///
/// As in Kubernetes, a `test` for `null` passes when the member is absent and its parent an
/// object (clients test `/metadata/finalizers` for null before adding the first one).
///
/// ```
/// use strata_patch::serde_json::json;
/// use strata_patch::{apply_json_patch, PatchError};
///
/// let pod = json!({"metadata": {"name": "web"}});
/// let patch = json!([
///     {"op": "test", "path": "/metadata/finalizers", "value": null},
///     {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]},
/// ]);
/// let out = apply_json_patch(&pod, &patch).unwrap();
/// assert_eq!(out["metadata"]["finalizers"], json!(["example.com/cleanup"]));
///
/// // Applying it again fails the test: 422, and nothing changes.
/// let err = apply_json_patch(&out, &patch).unwrap_err();
/// assert!(matches!(err, PatchError::Invalid(_)));
/// assert_eq!(err.code(), 422);
/// ```
pub fn apply_json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops: ::json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::Malformed(format!("error decoding patch: {e}")))?;
    let mut doc = target.clone();
    // The work happens on a copy that is dropped on failure, so the crate's undo log (and its
    // panic should undoing ever fail) is not needed.
    for op in ops.0 {
        if tests_absent_member_for_null(&doc, &op) {
            continue;
        }
        ::json_patch::patch_unsafe(&mut doc, std::slice::from_ref(&op))
            .map_err(|e| PatchError::Invalid(e.to_string()))?;
    }
    Ok(doc)
}

/// Whether `op` is a `test` for `null` of an object member that is absent. Kubernetes' JSON
/// patch treats an absent member as null there (clients rely on it: kube-rs adds the first
/// finalizer after testing `/metadata/finalizers` for null), where RFC 6902 would fail.
fn tests_absent_member_for_null(doc: &Value, op: &::json_patch::PatchOperation) -> bool {
    let ::json_patch::PatchOperation::Test(test) = op else {
        return false;
    };
    if !test.value.is_null() {
        return false;
    }
    let path = test.path.as_str();
    if doc.pointer(path).is_some() {
        return false;
    }
    let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
    doc.pointer(parent).is_some_and(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn testing_an_absent_member_for_null_passes() {
        let target = json!({"metadata": {"name": "x"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ]);
        let out = apply_json_patch(&target, &patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
        // A present member is compared as usual, and a missing parent still fails.
        let present = json!({"metadata": {"finalizers": ["g"]}});
        assert!(matches!(
            apply_json_patch(&present, &patch),
            Err(PatchError::Invalid(_))
        ));
        let orphan = json!([{"op": "test", "path": "/spec/x", "value": null}]);
        assert!(matches!(
            apply_json_patch(&target, &orphan),
            Err(PatchError::Invalid(_))
        ));
    }

    #[test]
    fn applies_operations_in_order() {
        let doc = json!({"metadata": {"labels": {"a": "1"}}});
        let out = apply_json_patch(
            &doc,
            &json!([
                {"op": "test", "path": "/metadata/labels/a", "value": "1"},
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
            ]),
        )
        .unwrap();
        assert_eq!(out, json!({"metadata": {"labels": {"b": "2"}}}));
    }

    #[test]
    fn a_failing_operation_fails_the_whole_patch() {
        let doc = json!({"a": 1});
        let err = apply_json_patch(
            &doc,
            &json!([
                {"op": "replace", "path": "/a", "value": 2},
                {"op": "test", "path": "/a", "value": 1},
            ]),
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(doc, json!({"a": 1}));
    }

    #[test]
    fn bad_documents_are_malformed() {
        for patch in [
            json!({"op": "add", "path": "/a", "value": 1}),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "value": 1}]),
            json!([{"op": "add", "path": "a", "value": 1}]),
            json!("[]"),
        ] {
            let err = apply_json_patch(&json!({}), &patch).unwrap_err();
            assert_eq!(err.code(), 400, "{patch}");
            assert!(
                err.to_string().starts_with("error decoding patch: "),
                "{err}"
            );
        }
    }

    #[test]
    fn an_empty_patch_is_the_identity() {
        let doc = json!({"a": [1, 2]});
        assert_eq!(apply_json_patch(&doc, &json!([])).unwrap(), doc);
    }
}
