//! The registry's side of the watch cache: how a stored value becomes a [`CachedObject`], and
//! back into an [`Object`] where code needs the tree.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use strata_object::selector::field_value;
use strata_object::{Object, ResourceType, Status};
use strata_store::Revision;
use strata_watch::{CachedObject, Decoder};

use crate::strategy::Strategy;
use crate::version::to_resource_version;

/// Decodes the stored JSON of one type (through its strategy's `convert_from_storage`).
pub(crate) struct JsonDecoder {
    kind: String,
    api_version: String,
    fields: Vec<String>,
    strategy: Arc<dyn Strategy>,
}

impl JsonDecoder {
    pub(crate) fn new(info: &ResourceType, strategy: Arc<dyn Strategy>) -> Self {
        let mut fields = vec![
            "metadata.name".to_string(),
            "metadata.namespace".to_string(),
        ];
        for f in &info.selectable_fields {
            if !fields.contains(f) {
                fields.push(f.clone());
            }
        }
        Self {
            kind: info.kind.clone(),
            api_version: info.api_version(),
            fields,
            strategy,
        }
    }
}

impl Decoder for JsonDecoder {
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String> {
        if let Some(e) = crate::encryption::transform_error(value) {
            return Err(e);
        }
        let mut obj: Object = strata_codec::json::from_slice(value)
            .map_err(|e| e.to_string())
            .and_then(|v| Object::from_value(v).map_err(|e| e.to_string()))?;
        self.strategy.convert_from_storage(&mut obj);
        Ok(self.cached(key, obj, revision, value.len()))
    }

    fn restamp(&self, obj: &CachedObject, revision: Revision) -> Result<CachedObject, String> {
        self.decode(obj.key(), obj.json(), revision)
    }
}

impl JsonDecoder {
    /// The cache form of `obj`; `stored_len`, the length of its stored JSON, sizes the buffer
    /// the cached JSON is written into.
    fn cached(
        &self,
        key: &str,
        mut obj: Object,
        revision: Revision,
        stored_len: usize,
    ) -> CachedObject {
        obj.set_resource_version(&to_resource_version(revision).to_string());
        let labels = obj
            .labels()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let fields = self
            .fields
            .iter()
            .map(|f| (f.clone(), field_value(&obj, f).unwrap_or("").to_string()))
            .collect();
        let (json, prefix_len) = encode_with_type(&obj, &self.api_version, &self.kind, stored_len);
        CachedObject::new(key.to_string(), revision, labels, fields, json, prefix_len)
    }
}

/// Compact JSON of `obj` with `kind` and `apiVersion` first; returns the bytes and the length
/// of that `{"kind":…,"apiVersion":…` prefix. `size_hint` is about the expected length (the
/// stored JSON's).
///
/// The bytes are held exactly: the cache keeps them for the object's lifetime, and a buffer
/// grown by doubling would hold up to twice the JSON.
fn encode_with_type(
    obj: &Object,
    api_version: &str,
    kind: &str,
    size_hint: usize,
) -> (Bytes, usize) {
    // Room for the type fields and a resourceVersion the stored form may lack.
    let mut out = Vec::with_capacity(size_hint + kind.len() + api_version.len() + 64);
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut out, kind).unwrap_or_default();
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut out, api_version).unwrap_or_default();
    let prefix_len = out.len();
    for (k, v) in obj.as_map() {
        if k == "kind" || k == "apiVersion" {
            continue;
        }
        out.push(b',');
        serde_json::to_writer(&mut out, k).unwrap_or_default();
        out.push(b':');
        serde_json::to_writer(&mut out, v).unwrap_or_default();
    }
    out.push(b'}');
    out.shrink_to_fit();
    (Bytes::from(out), prefix_len)
}

/// The object tree of a cached version.
pub fn to_object(c: &CachedObject) -> Result<Object, Status> {
    strata_codec::json::from_slice(c.json())
        .ok()
        .and_then(|v: Value| Object::from_value(v).ok())
        .ok_or_else(|| Status::internal(format!("cached object {} does not decode", c.key())))
}

/// The name and namespace of a cached version.
pub fn name_of(c: &CachedObject) -> (&str, &str) {
    (
        c.field("metadata.namespace").unwrap_or(""),
        c.field("metadata.name").unwrap_or(""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached JSON does not depend on how its buffer was sized: the same bytes for any
    /// hint, and the same as serializing the object with `kind` and `apiVersion` first.
    #[test]
    fn encoding_is_the_same_whatever_the_size_hint() {
        let stored = br#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"a","namespace":"default","labels":{"app":"x"},"annotations":{"note":"\u00e9\"\n"}},"secrets":[{"name":"s"}],"n":1.5}"#;
        let obj = Object::from_value(serde_json::from_slice(stored).unwrap()).unwrap();
        let mut direct = serde_json::Map::new();
        direct.insert("kind".into(), "ServiceAccount".into());
        direct.insert("apiVersion".into(), "v1".into());
        for (k, v) in obj.as_map() {
            if k != "kind" && k != "apiVersion" {
                direct.insert(k.clone(), v.clone());
            }
        }
        let direct = serde_json::to_vec(&Value::Object(direct)).unwrap();
        for hint in [0, 10, stored.len(), 1 << 16] {
            let (json, prefix) = encode_with_type(&obj, "v1", "ServiceAccount", hint);
            assert_eq!(&json[..], &direct[..], "hint {hint}");
            assert_eq!(
                &json[..prefix],
                br#"{"kind":"ServiceAccount","apiVersion":"v1""#
            );
        }
    }
}
