//! Defaulting of custom resources from their schema's `default` values, as Kubernetes'
//! structural defaulting does it on writes and on reads of stored objects:
//!
//! 1. `null` values of fields that are neither `nullable` nor defaulted are dropped (Kubernetes
//!    does this while decoding, right after pruning unknown fields);
//! 2. every absent property that has a `default` gets a copy of it, at every level (object
//!    properties, array items, `additionalProperties` values), and so does a `null` where the
//!    schema is not `nullable`; a defaulted object is then walked like any other, so its own
//!    properties' defaults apply too.
//!
//! The root `metadata`, `apiVersion` and `kind` are never defaulted (a CRD may not declare
//! defaults there). Applying twice changes nothing more.

use serde_json::Value;

use crate::schema::Schema;

/// Fills in `default`s that `object` lacks, as Kubernetes does on writes and on reads of stored
/// objects.
pub fn apply_defaults(schema: &Value, object: &mut Value) {
    apply_defaults_with(&Schema::parse(schema), object)
}

/// [`apply_defaults`] with a schema parsed once.
pub fn apply_defaults_with(schema: &Schema, object: &mut Value) {
    prune_nulls(object, Some(schema));
    default(object, schema, true);
}

/// Kubernetes' `PruneNonNullableNullsWithoutDefaults`: removes the object fields whose value is
/// `null` though their schema is not `nullable` and has no `default`.
pub fn prune_nulls(x: &mut Value, s: Option<&Schema>) {
    match x {
        Value::Object(map) => {
            if map.values().any(Value::is_null) {
                map.retain(|k, v| {
                    let fs = s.and_then(|s| s.field(k));
                    !(v.is_null() && fs.is_some_and(|fs| !fs.nullable && fs.default.is_none()))
                });
            }
            for (k, v) in map.iter_mut() {
                if v.is_object() || v.is_array() {
                    prune_nulls(v, s.and_then(|s| s.field(k)));
                }
            }
        }
        Value::Array(items) => {
            let item = s.and_then(|s| s.items.as_deref());
            for v in items {
                prune_nulls(v, item);
            }
        }
        _ => {}
    }
}

/// A `null` that its (non-`nullable`) schema's default replaces.
fn defaultable_null<'a>(x: &Value, s: &'a Schema) -> Option<&'a Value> {
    if x.is_null() && !s.nullable {
        s.default.as_ref()
    } else {
        None
    }
}

const META_FIELDS: [&str; 3] = ["metadata", "apiVersion", "kind"];

fn default(x: &mut Value, s: &Schema, root: bool) {
    if !s.has_default {
        return;
    }
    match x {
        Value::Object(map) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else {
                    continue;
                };
                if root && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                match map.get_mut(k) {
                    None => {
                        map.insert(k.clone(), d.clone());
                    }
                    Some(v) if v.is_null() && !prop.nullable => *v = d.clone(),
                    Some(_) => {}
                }
            }
            for (k, v) in map.iter_mut() {
                if root && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.property(k) {
                    default(v, prop, false);
                } else if let Some(values) = s.additional_schema() {
                    if let Some(d) = defaultable_null(v, values) {
                        *v = d.clone();
                    }
                    default(v, values, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &s.items {
                for v in items {
                    if let Some(d) = defaultable_null(v, item) {
                        *v = d.clone();
                    }
                    default(v, item, false);
                }
            }
        }
        _ => {}
    }
}
