//! Strategic merge patch: Kubernetes' schema-aware merge patch, the default of `kubectl patch` and
//! what client-side `kubectl apply`, `edit` and `diff` send. Not server-side apply, and not RFC
//! 7386 merge patch (which this falls back to where the schema says nothing).
//!
//! The rules, by what the schema says about a field:
//!
//! - Objects merge key by key, recursively; a `null` value removes the key. A field with patch
//!   strategy `replace` is replaced whole.
//! - Lists with patch strategy `merge` and a merge key merge element by element: a patch element
//!   merges into the live element with the same key value, an unmatched one is added. Lists of
//!   scalars with strategy `merge` are ordered sets: the union of live and patch values.
//! - Every other list, and every list the schema does not know, is replaced by the patch's.
//!
//! Directives, none of which ever reaches the result:
//!
//! - `$patch: replace` in an object replaces the object; `$patch: delete` removes it. As a list
//!   element, `{"$patch": "replace"}` makes the patch's other elements the whole list, and
//!   `{"$patch": "delete", <key>: v}` removes the live elements whose merge key is `v`.
//!   `$patch: merge` is the default spelled out and changes nothing.
//! - `$deleteFromPrimitiveList/<field>: [v…]` removes values from a merged list of scalars.
//! - `$setElementOrder/<field>: [...]` gives the final relative order of the listed elements
//!   (merge-key stubs for lists of objects, the values for scalars).
//! - `$retainKeys: [k…]` drops the keys of the live object that are not listed.
//!
//! Ordering follows Kubernetes: elements named by the patch (in `$setElementOrder` if present,
//! else in the patch list) keep the patch's order, elements only on the server keep theirs, and
//! the two are interleaved by the live order where both are known; an element new to the list
//! goes before the server-only elements that follow the last patch element placed.

use serde_json::{Map, Value};
use strata_object::schema::Node;

use crate::error::PatchError;

type Object = Map<String, Value>;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// Applies the strategic merge patch `patch` to `original`, an object of the kind whose schema is
/// `schema`, and returns the patched object. `original` is not changed.
///
/// `patch` must be a JSON object, else [`PatchError::Malformed`]. Directives of the wrong type,
/// an unknown `$patch` value, or list elements without their merge key are also
/// [`PatchError::Malformed`]; lists of lists and patch keys outside their own `$retainKeys` are
/// [`PatchError::Invalid`]. A `$patch: delete` at the root yields an empty object, which the
/// caller's decoding then rejects.
///
/// A ServiceAccount's `secrets` merge by `name` (an element new to the list goes before the
/// live ones after the patch's last known element, as in Kubernetes; `$setElementOrder/secrets`
/// would say the order); its `imagePullSecrets` are replaced:
///
/// ```
/// use strata_patch::serde_json::json;
/// use strata_patch::strata_object::builtin;
/// use strata_patch::strategic_merge;
///
/// let sa = builtin::service_account();
/// let live = json!({
///     "metadata": {"name": "builder"},
///     "secrets": [{"name": "token-a"}, {"name": "token-b"}],
///     "imagePullSecrets": [{"name": "registry-a"}],
/// });
/// let patch = json!({
///     "secrets": [{"name": "token-c"}, {"$patch": "delete", "name": "token-a"}],
///     "imagePullSecrets": [{"name": "registry-b"}],
/// });
/// let out = strategic_merge(&live, &patch, sa.schema().unwrap()).unwrap();
/// assert_eq!(out["secrets"], json!([{"name": "token-c"}, {"name": "token-b"}]));
/// assert_eq!(out["imagePullSecrets"], json!([{"name": "registry-b"}]));
/// ```
pub fn strategic_merge(
    original: &Value,
    patch: &Value,
    schema: Node<'_>,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(format!(
            "invalid JSON document: a strategic merge patch must be a JSON object, not {}",
            type_name(patch)
        )));
    };
    let merged = merge_object(original.as_object(), patch, Field(Some(schema)))?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

/// The patch metadata of one field: its schema node, if the schema knows the field.
#[derive(Clone, Copy)]
struct Field<'a>(Option<Node<'a>>);

impl<'a> Field<'a> {
    fn child(self, key: &str) -> Field<'a> {
        Field(self.0.and_then(|n| n.child(key)))
    }

    fn items(self) -> Field<'a> {
        Field(self.0.and_then(|n| n.items()))
    }

    fn strategy(self, strategy: &str) -> bool {
        self.0.is_some_and(|n| n.has_patch_strategy(strategy))
    }

    /// The merge key, for lists merged element-wise; `None` for scalar sets and other lists.
    fn merge_key(self) -> Option<&'a str> {
        if self.strategy("merge") {
            self.0.and_then(|n| n.patch_merge_key())
        } else {
            None
        }
    }
}

/// Merges `patch` into `original` (absent: an empty object). `Ok(None)` means the object is to be
/// removed (`$patch: delete`).
fn merge_object(
    original: Option<&Object>,
    patch: &Object,
    field: Field<'_>,
) -> Result<Option<Object>, PatchError> {
    if let Some(directive) = patch.get(PATCH) {
        match directive.as_str() {
            Some("replace") => {
                let mut rest = patch.clone();
                rest.shift_remove(PATCH);
                return merge_object(None, &rest, field);
            }
            Some("delete") => return Ok(None),
            Some("merge") => {}
            _ => return Err(bad_patch_type(directive, patch)),
        }
    }

    let mut out = original.cloned().unwrap_or_default();
    if let Some(keys) = patch.get(RETAIN_KEYS) {
        retain_keys(&mut out, keys, patch)?;
    }

    // Lists with an element order are merged here, together with their patch list.
    let mut ordered: Vec<&str> = Vec::new();
    for (key, order) in patch {
        let Some(rest) = key.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let bad = || PatchError::Malformed("invalid patch format of setElementOrder list".into());
        let name = directive_field(rest).ok_or_else(bad)?;
        let Value::Array(order) = order else {
            return Err(bad());
        };
        let list_field = field.child(name);
        let patch_list = match patch.get(name) {
            None => None,
            Some(Value::Array(list)) => Some(list.as_slice()),
            Some(other) => {
                return Err(PatchError::Malformed(format!(
                    "{SET_ELEMENT_ORDER}/{name} requires {name} to be a list, not {}",
                    type_name(other)
                )))
            }
        };
        let live = match out.get(name) {
            Some(Value::Array(list)) => Some(list.as_slice()),
            _ => None,
        };
        let key = list_field.merge_key();
        check_element_order(patch_list, order, key)?;
        let merged = match (live, patch_list) {
            (None, None) => continue,
            (Some(live), None) => live.to_vec(),
            (live, Some(patch_list)) => {
                merge_list(live.unwrap_or_default(), patch_list, list_field)?
            }
        };
        let merged = normalize_order(merged, order, live.unwrap_or_default(), key);
        out.insert(name.to_string(), Value::Array(merged));
        ordered.push(name);
    }

    let mut deletions: Vec<(&str, &[Value])> = Vec::new();
    for (key, value) in patch {
        if key == PATCH || key == RETAIN_KEYS || key.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        if let Some(rest) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let bad = || PatchError::Malformed("invalid patch format of primitive list".into());
            let name = directive_field(rest).ok_or_else(bad)?;
            let Value::Array(values) = value else {
                return Err(bad());
            };
            deletions.push((name, values));
            continue;
        }
        if ordered.contains(&key.as_str()) {
            continue;
        }
        if value.is_null() {
            out.shift_remove(key);
            continue;
        }
        let child = field.child(key);
        let merged = match (out.get(key), value) {
            (Some(Value::Object(live)), Value::Object(p)) => {
                let live = (!child.strategy("replace")).then_some(live);
                merge_object(live, p, child)?.map(Value::Object)
            }
            (Some(Value::Array(live)), Value::Array(p)) => {
                Some(Value::Array(merge_list(live, p, child)?))
            }
            _ => fresh(value, child)?,
        };
        match merged {
            Some(v) => {
                out.insert(key.clone(), v);
            }
            None => {
                out.shift_remove(key);
            }
        }
    }

    // Deletions come after additions, whatever their order in the patch.
    for (name, values) in deletions {
        if let Some(Value::Array(list)) = out.get_mut(name) {
            list.retain(|v| !values.contains(v));
        }
    }
    Ok(Some(out))
}

/// A patch value for a field the live object does not have (or has with another type): the
/// value merged into nothing, so that its directives are applied and its `null`s dropped.
fn fresh(value: &Value, field: Field<'_>) -> Result<Option<Value>, PatchError> {
    Ok(match value {
        Value::Object(p) => merge_object(None, p, field)?.map(Value::Object),
        Value::Array(p) => Some(Value::Array(merge_list(&[], p, field)?)),
        Value::Null => None,
        scalar => Some(scalar.clone()),
    })
}

/// Merges a patch list into a live list according to the field's patch strategy.
fn merge_list(live: &[Value], patch: &[Value], field: Field<'_>) -> Result<Vec<Value>, PatchError> {
    let items = field.items();
    if !field.strategy("merge") {
        // Replaced whole. Kubernetes drops directive elements from lists it takes as they are.
        let mut out = Vec::with_capacity(patch.len());
        for element in patch {
            if element.get(PATCH).is_some() {
                continue;
            }
            if element.is_null() {
                out.push(Value::Null);
            } else if let Some(v) = fresh(element, items)? {
                out.push(v);
            }
        }
        return Ok(out);
    }

    if live.is_empty() && patch.is_empty() {
        return Ok(Vec::new());
    }
    let objects = check_element_types(live, patch)?;
    if !objects {
        // An ordered set of scalars: the union, first occurrence wins.
        let mut merged: Vec<Value> = Vec::with_capacity(live.len() + patch.len());
        for v in live.iter().chain(patch) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        return Ok(normalize_order(merged, patch, live, None));
    }

    let Some(key) = field.merge_key() else {
        return Err(PatchError::Invalid(
            "cannot merge a list of objects that has no patch merge key".into(),
        ));
    };
    let mut merged: Vec<Value> = live.to_vec();
    let mut elements: Vec<&Object> = Vec::with_capacity(patch.len());
    let mut replace = false;
    for element in patch.iter().filter_map(Value::as_object) {
        let Some(directive) = element.get(PATCH) else {
            elements.push(element);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let value = element.get(key).ok_or_else(|| no_merge_key(element, key))?;
                merged.retain(|e| e.get(key) != Some(value));
            }
            Some("replace") => replace = true,
            // `{"$patch": "merge"}` alone says what the strategy already does.
            Some("merge") if !element.contains_key(key) => {}
            Some("merge") => elements.push(element),
            _ => return Err(bad_patch_type(directive, element)),
        }
    }

    if replace {
        let mut out = Vec::with_capacity(elements.len());
        for element in elements {
            if !element.contains_key(key) {
                return Err(no_merge_key(element, key));
            }
            if let Some(v) = merge_object(None, element, items)? {
                out.push(Value::Object(v));
            }
        }
        return Ok(out);
    }

    // The server order is the live list after deletions, as in Kubernetes.
    let server = merged.clone();
    let mut order = Vec::with_capacity(elements.len());
    for element in elements {
        let value = element.get(key).ok_or_else(|| no_merge_key(element, key))?;
        match merged.iter().position(|e| e.get(key) == Some(value)) {
            Some(i) => match merge_object(merged[i].as_object(), element, items)? {
                Some(v) => merged[i] = Value::Object(v),
                None => {
                    merged.remove(i);
                }
            },
            None => {
                if let Some(v) = merge_object(None, element, items)? {
                    merged.push(Value::Object(v));
                }
            }
        }
        order.push(Value::Object(element.clone()));
    }
    Ok(normalize_order(merged, &order, &server, Some(key)))
}

/// Checks that the elements of a merging list share one type that is not a list, and says
/// whether that type is object.
fn check_element_types(live: &[Value], patch: &[Value]) -> Result<bool, PatchError> {
    let mut first: Option<&Value> = None;
    for v in live.iter().chain(patch) {
        if v.is_array() {
            return Err(PatchError::Invalid(
                "lists of lists are not supported".into(),
            ));
        }
        match first {
            None => first = Some(v),
            Some(f) if std::mem::discriminant(f) != std::mem::discriminant(v) => {
                return Err(PatchError::Invalid(format!(
                    "list element types are not identical: {} and {}",
                    type_name(f),
                    type_name(v)
                )));
            }
            Some(_) => {}
        }
    }
    Ok(first.is_some_and(Value::is_object))
}

/// Checks a `$setElementOrder` list against its patch list: every order entry names an element
/// (by merge key for lists of objects), and the patch list's elements appear in the order list,
/// in the same relative order. Deletions and other directive elements are exempt.
fn check_element_order(
    patch: Option<&[Value]>,
    order: &[Value],
    key: Option<&str>,
) -> Result<(), PatchError> {
    if let Some(key) = key {
        for entry in order {
            match entry.as_object() {
                Some(m) if m.contains_key(key) => {}
                Some(m) => return Err(no_merge_key(m, key)),
                None => {
                    return Err(PatchError::Malformed(
                        "invalid patch format of setElementOrder list".into(),
                    ))
                }
            }
        }
    }
    let Some(patch) = patch else {
        return Ok(());
    };
    if let Some(key) = key {
        if let Some(m) = patch
            .iter()
            .filter_map(Value::as_object)
            .find(|m| !m.contains_key(PATCH) && !m.contains_key(key))
        {
            return Err(no_merge_key(m, key));
        }
    }
    // Walk the order list once, ticking off the patch elements as they come up.
    let mut pending = patch.iter().filter(|e| e.get(PATCH).is_none()).peekable();
    for entry in order {
        let next_id = pending.peek().and_then(|next| identity(next, key));
        if next_id.is_some() && next_id == identity(entry, key) {
            pending.next();
        }
    }
    if pending.peek().is_some() {
        return Err(PatchError::Malformed(format!(
            "the order of the patch list does not match its {SET_ELEMENT_ORDER} list"
        )));
    }
    Ok(())
}

/// Orders a merged list: the elements named in `order` (the patch's order) in that order, the
/// others in `server` order, interleaved so that a server-only element goes before a patch
/// element only when both are in `server` and it came first there.
fn normalize_order(
    merged: Vec<Value>,
    order: &[Value],
    server: &[Value],
    key: Option<&str>,
) -> Vec<Value> {
    let position = |list: &[Value], item: &Value| -> Option<usize> {
        let id = identity(item, key)?;
        list.iter().position(|e| identity(e, key) == Some(id))
    };
    let mut named: Vec<(usize, Option<usize>, Value)> = Vec::new();
    let mut server_only: Vec<(Option<usize>, Value)> = Vec::new();
    for item in merged {
        let at_server = position(server, &item);
        match position(order, &item) {
            Some(p) => named.push((p, at_server, item)),
            None => server_only.push((at_server, item)),
        }
    }
    named.sort_by_key(|(p, _, _)| *p);
    server_only.sort_by_key(|(s, _)| s.unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(named.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = named.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((l, _)), Some((_, r, _))) => matches!((l, r), (Some(l), Some(r)) if l < r),
        };
        if take_left {
            out.extend(left.next().map(|(_, v)| v));
        } else {
            out.extend(right.next().map(|(_, _, v)| v));
        }
    }
    out
}

/// What identifies a list element: its merge-key value, or the whole value for lists without one.
fn identity<'v>(item: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    match key {
        Some(key) => item.get(key),
        None => Some(item),
    }
}

/// Drops the keys of `out` not named in `$retainKeys`, after checking that the patch only sets
/// keys it retains.
fn retain_keys(out: &mut Object, keys: &Value, patch: &Object) -> Result<(), PatchError> {
    let Value::Array(keys) = keys else {
        return Err(PatchError::Malformed(
            "invalid patch format of retainKeys".into(),
        ));
    };
    let retained = |k: &str| keys.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch {
        let directive = k == PATCH
            || k == RETAIN_KEYS
            || k.starts_with(SET_ELEMENT_ORDER)
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST);
        if !directive && !v.is_null() && !retained(k) {
            return Err(PatchError::Invalid(format!(
                "patch content doesn't match retainKeys list: {k} is not retained"
            )));
        }
    }
    out.retain(|k, _| retained(k));
    Ok(())
}

/// The field a prefixed directive names: `rest` is what follows the prefix, `/<field>`.
fn directive_field(rest: &str) -> Option<&str> {
    rest.strip_prefix('/').filter(|f| !f.is_empty())
}

fn bad_patch_type(directive: &Value, within: &Object) -> PatchError {
    PatchError::Malformed(format!(
        "unknown patch type: {directive} in map: {}",
        Value::Object(within.clone())
    ))
}

fn no_merge_key(element: &Object, key: &str) -> PatchError {
    PatchError::Malformed(format!(
        "map: {} does not contain declared merge key: {key}",
        Value::Object(element.clone())
    ))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_object::builtin;

    fn sa(original: Value, patch: Value) -> Result<Value, PatchError> {
        let rt = builtin::service_account();
        strategic_merge(&original, &patch, rt.schema().unwrap())
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        let out = sa(
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}}),
            json!({"metadata": {"labels": {"x": null, "z": "3"}}}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "a", "labels": {"y": "2", "z": "3"}}})
        );
    }

    #[test]
    fn merge_key_lists_merge_and_new_elements_go_first() {
        let out = sa(
            json!({"secrets": [{"name": "a", "namespace": "n"}, {"name": "b"}]}),
            json!({"secrets": [{"name": "c"}, {"name": "a", "namespace": null}]}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"secrets": [{"name": "c"}, {"name": "a"}, {"name": "b"}]})
        );
    }

    #[test]
    fn atomic_lists_are_replaced() {
        let out = sa(
            json!({"imagePullSecrets": [{"name": "a"}, {"name": "b"}]}),
            json!({"imagePullSecrets": [{"name": "c"}]}),
        )
        .unwrap();
        assert_eq!(out, json!({"imagePullSecrets": [{"name": "c"}]}));
    }

    #[test]
    fn element_order_interleaves_server_only_items() {
        // Live [b e a c d], patch order [a b f]: e was before a on the server, so it stays in
        // front; c and d came after every named element that the server also knows.
        let out = sa(
            json!({"metadata": {"finalizers": ["b", "e", "a", "c", "d"]}}),
            json!({"metadata": {
                "$setElementOrder/finalizers": ["a", "b", "f"],
                "$deleteFromPrimitiveList/finalizers": ["c"],
                "finalizers": ["f"],
            }}),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["e", "a", "b", "f", "d"])
        );
    }

    #[test]
    fn order_without_directive_follows_the_patch() {
        // Live [B C A], patch [A' B' D]: C is only on the server and came before A there.
        let out = sa(
            json!({"secrets": [{"name": "B"}, {"name": "C"}, {"name": "A"}]}),
            json!({"secrets": [{"name": "A", "kind": "x"}, {"name": "B", "kind": "x"}, {"name": "D"}]}),
        )
        .unwrap();
        let names: Vec<&str> = out["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["C", "A", "B", "D"]);
    }

    #[test]
    fn directives_never_reach_new_fields() {
        let out = sa(
            json!({"metadata": {"name": "a"}}),
            json!({
                "metadata": {"annotations": {"$patch": "replace", "k": "v", "gone": null}},
                "secrets": [{"name": "x"}, {"name": "y", "$patch": "delete"}],
                "spec": {"$patch": "delete"},
            }),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "a", "annotations": {"k": "v"}}, "secrets": [{"name": "x"}]})
        );
    }

    #[test]
    fn error_classes() {
        let live = json!({"secrets": [{"name": "a"}], "metadata": {"finalizers": ["f"]}});
        let cases = [
            (json!([]), 400),
            (json!({"$patch": "explode"}), 400),
            (json!({"secrets": [{"$patch": "delete"}]}), 400),
            (json!({"secrets": [{"namespace": "n"}]}), 400),
            (json!({"$setElementOrder/secrets": {"name": "a"}}), 400),
            (
                json!({"$setElementOrder/secrets": [{"namespace": "a"}]}),
                400,
            ),
            (
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "f"}}),
                400,
            ),
            (json!({"metadata": {"$retainKeys": "name"}}), 400),
            (
                json!({"metadata": {"$retainKeys": ["name"], "labels": {"a": "b"}}}),
                422,
            ),
            (json!({"metadata": {"finalizers": [["g"]]}}), 422),
            (json!({"metadata": {"finalizers": [1, "g"]}}), 422),
        ];
        for (patch, code) in cases {
            let err = sa(live.clone(), patch.clone()).unwrap_err();
            assert_eq!(err.code(), code, "{patch}: {err}");
        }
    }

    #[test]
    fn root_delete_empties_the_object() {
        let out = sa(
            json!({"metadata": {"name": "a"}}),
            json!({"$patch": "delete"}),
        )
        .unwrap();
        assert_eq!(out, json!({}));
    }
}
