//! Pruning of unknown fields, as Kubernetes' structural pruning does it: an object keeps only
//! the fields its schema specifies (`properties`, or any key under `additionalProperties`),
//! except below `x-kubernetes-preserve-unknown-fields`, and an embedded resource (or the
//! resource root) always keeps `apiVersion`, `kind` and `metadata`.

use serde_json::Value;

use crate::schema::{AdditionalProperties, Schema};

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Removes the fields of `object` that `schema` does not specify and returns their paths,
/// sorted (`spec.foo`, `spec.items[0].bar`: what Kubernetes' field validation reports as
/// `unknown field "spec.foo"`). `is_resource_root` treats `object` as a whole resource, whose
/// `apiVersion`, `kind` and `metadata` stay.
pub fn prune(schema: &Schema, object: &mut Value, is_resource_root: bool) -> Vec<String> {
    let mut pruned = Vec::new();
    walk(object, Some(schema), is_resource_root, "", &mut pruned);
    pruned.sort();
    pruned
}

/// Whether [`prune`] would remove anything from `value` (a `default`, for instance).
pub fn has_unknown_fields(schema: &Schema, value: &Value, is_resource_root: bool) -> bool {
    let mut copy = value.clone();
    !prune(schema, &mut copy, is_resource_root).is_empty() || copy != *value
}

fn key_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The schema of an object's key outside `properties`: `Some(None)` for
/// `additionalProperties: true` (whose values Kubernetes prunes as unspecified), `None` when
/// no other key is allowed.
fn other_key_schema(s: &Schema) -> Option<Option<&Schema>> {
    match &s.additional_properties {
        Some(AdditionalProperties::Schema(v)) => Some(Some(v)),
        Some(AdditionalProperties::Allows(_)) => Some(None),
        None => None,
    }
}

/// Prunes `x`, of schema `s`; `root` when `x` is the resource itself, which keeps its
/// `apiVersion`, `kind` and `metadata` as an embedded resource does.
fn walk(x: &mut Value, s: Option<&Schema>, root: bool, path: &str, pruned: &mut Vec<String>) {
    if let Some(s) = s.filter(|s| s.preserve_unknown_fields) {
        skip(x, s, root, path, pruned);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(s) = s else {
                for k in map.keys() {
                    pruned.push(key_path(path, k));
                }
                map.clear();
                return;
            };
            map.retain(|k, v| {
                if (root || s.embedded_resource) && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                let child = key_path(path, k);
                if let Some(prop) = s.property(k) {
                    walk(v, Some(prop), false, &child, pruned);
                    true
                } else if let Some(values) = other_key_schema(s) {
                    walk(v, values, false, &child, pruned);
                    true
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                        pruned.push(child);
                    }
                    false
                }
            });
        }
        Value::Array(items) => {
            let item = s.and_then(|s| s.items.as_deref());
            for (i, v) in items.iter_mut().enumerate() {
                walk(v, item, false, &format!("{path}[{i}]"), pruned);
            }
        }
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown keys stay, specified ones are pruned
/// by their own schemas.
fn skip(x: &mut Value, s: &Schema, root: bool, path: &str, pruned: &mut Vec<String>) {
    match x {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if (root || s.embedded_resource) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = key_path(path, k);
                if let Some(prop) = s.property(k) {
                    walk(v, Some(prop), false, &child, pruned);
                } else if let Some(values) = other_key_schema(s) {
                    walk(v, values, false, &child, pruned);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &s.items {
                for (i, v) in items.iter_mut().enumerate() {
                    skip(v, item, false, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}
