//! The registry's side of the watch cache: how a stored value becomes a [`CachedObject`], and
//! back into an [`Object`] where code needs the tree.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
    /// Cache forms of this server's own writes, by revision, until the watch cache reaches
    /// their events: it takes them instead of decoding the bytes it was just given again.
    written: Mutex<BTreeMap<Revision, CachedObject>>,
}

/// The most cache forms of writes [`JsonDecoder`] holds for events not reached yet; beyond it
/// the oldest is dropped (and decoded when its event comes).
const WRITTEN_LIMIT: usize = 4096;

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
            written: Mutex::default(),
        }
    }

    /// The cache form of `obj`, just stored under `key` at `revision` as `stored` (its
    /// resourceVersion set to that revision), kept for the watch cache's event of that write;
    /// returns its JSON, which is what a GET of that version answers. The JSON is copied out
    /// of the stored bytes when their layout is known.
    ///
    /// None for an object stored in another type's form, whose decoding could differ.
    pub(crate) fn written(
        &self,
        key: &str,
        obj: &Object,
        stored: &Stored,
        revision: Revision,
    ) -> Option<Bytes> {
        if !matches!(self.strategy.to_storage(obj), std::borrow::Cow::Borrowed(_)) {
            return None;
        }
        let version = obj
            .as_map()
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"));
        let cached = match stored.with_type(&self.api_version, &self.kind, version) {
            Some((json, prefix_len)) => self.cached_json(key, obj, revision, json, prefix_len),
            None => self.cached(key, obj, revision, stored.bytes.len()),
        };
        let json = cached.json().clone();
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if written.len() >= WRITTEN_LIMIT {
            written.pop_first();
        }
        written.insert(revision, cached);
        Some(json)
    }

    /// The cache form [`JsonDecoder::written`] kept for `key` at `revision`, if any. Forms of
    /// earlier revisions are dropped: the watch cache asks in revision order, so it has gone
    /// past them (their writes' answers came after their events).
    fn take_written(&self, key: &str, revision: Revision) -> Option<CachedObject> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(first) = written.first_entry() {
            if *first.key() >= revision {
                break;
            }
            first.remove();
        }
        match written.first_entry() {
            Some(first) if *first.key() == revision && first.get().key() == key => {
                Some(first.remove())
            }
            _ => None,
        }
    }
}

impl Decoder for JsonDecoder {
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String> {
        if let Some(e) = crate::encryption::transform_error(value) {
            return Err(e);
        }
        match self.take_written(key, revision) {
            Some(cached) => Ok(cached),
            None => self.decode_value(key, value, revision),
        }
    }

    fn restamp(&self, obj: &CachedObject, revision: Revision) -> Result<CachedObject, String> {
        // Not a written form: the one at `revision` is the new content, this is the old.
        self.decode_value(obj.key(), obj.json(), revision)
    }
}

impl JsonDecoder {
    fn decode_value(
        &self,
        key: &str,
        value: &[u8],
        revision: Revision,
    ) -> Result<CachedObject, String> {
        let mut obj: Object = strata_codec::json::from_slice(value)
            .map_err(|e| e.to_string())
            .and_then(|v| Object::from_value(v).map_err(|e| e.to_string()))?;
        self.strategy.convert_from_storage(&mut obj);
        obj.set_resource_version(&to_resource_version(revision).to_string());
        Ok(self.cached(key, &obj, revision, value.len()))
    }

    /// The cache form of `obj`, whose resourceVersion is set to `revision`'s; `stored_len`, the
    /// length of its stored JSON, sizes the buffer the cached JSON is written into.
    fn cached(
        &self,
        key: &str,
        obj: &Object,
        revision: Revision,
        stored_len: usize,
    ) -> CachedObject {
        let (json, prefix_len) = encode_with_type(obj, &self.api_version, &self.kind, stored_len);
        self.cached_json(key, obj, revision, json, prefix_len)
    }

    /// The cache form of `obj` with its JSON already made.
    fn cached_json(
        &self,
        key: &str,
        obj: &Object,
        revision: Revision,
        json: Bytes,
        prefix_len: usize,
    ) -> CachedObject {
        let labels = obj
            .labels()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let fields = self
            .fields
            .iter()
            .map(|f| (f.clone(), field_value(obj, f).unwrap_or("").to_string()))
            .collect();
        CachedObject::new(key.to_string(), revision, labels, fields, json, prefix_len)
    }
}

/// An object's stored JSON (members in the object's order, no `metadata.resourceVersion`) and,
/// when it was written from the object itself, where each member lies in it.
pub(crate) struct Stored {
    pub(crate) bytes: Bytes,
    members: Vec<Member>,
}

/// One top-level member of stored JSON: `"name":value` at `start..end`.
struct Member {
    start: usize,
    end: usize,
    /// `kind` or `apiVersion`, which the cache form writes first, from the type.
    type_field: bool,
    /// For `metadata`: where its closing brace is, and whether anything precedes it.
    metadata: Option<(usize, bool)>,
}

impl Stored {
    /// Stored bytes whose layout is not known.
    pub(crate) fn opaque(bytes: Bytes) -> Stored {
        Stored {
            bytes,
            members: Vec::new(),
        }
    }

    /// Encodes `obj` as stored, recording its members.
    pub(crate) fn encode(obj: &Object) -> Stored {
        let map = obj.as_map();
        let mut out = Vec::with_capacity(512);
        let mut members = Vec::with_capacity(map.len());
        out.push(b'{');
        for (i, (k, v)) in map.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let start = out.len();
            serde_json::to_writer(&mut out, k).unwrap_or_default();
            out.push(b':');
            let metadata = match v {
                Value::Object(meta) if k == "metadata" => {
                    let mut any = false;
                    out.push(b'{');
                    for (mk, mv) in meta.iter().filter(|(mk, _)| *mk != "resourceVersion") {
                        if any {
                            out.push(b',');
                        }
                        any = true;
                        serde_json::to_writer(&mut out, mk).unwrap_or_default();
                        out.push(b':');
                        serde_json::to_writer(&mut out, mv).unwrap_or_default();
                    }
                    let close = out.len();
                    out.push(b'}');
                    Some((close, any))
                }
                _ => {
                    serde_json::to_writer(&mut out, v).unwrap_or_default();
                    None
                }
            };
            members.push(Member {
                start,
                end: out.len(),
                type_field: k == "kind" || k == "apiVersion",
                metadata,
            });
        }
        out.push(b'}');
        Stored {
            bytes: Bytes::from(out),
            members,
        }
    }

    /// What [`encode_with_type`] makes of the object whose `metadata.resourceVersion` is
    /// `resource_version`, copied out of the stored bytes; None when their layout is not known.
    fn with_type(
        &self,
        api_version: &str,
        kind: &str,
        resource_version: Option<&Value>,
    ) -> Option<(Bytes, usize)> {
        if self.members.is_empty() {
            return None;
        }
        let bytes = &self.bytes[..];
        let mut out = Vec::with_capacity(bytes.len() + kind.len() + api_version.len() + 64);
        out.extend_from_slice(b"{\"kind\":");
        serde_json::to_writer(&mut out, kind).unwrap_or_default();
        out.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut out, api_version).unwrap_or_default();
        let prefix_len = out.len();
        for m in self.members.iter().filter(|m| !m.type_field) {
            out.push(b',');
            match m.metadata {
                Some((close, any)) => {
                    out.extend_from_slice(&bytes[m.start..close]);
                    if let Some(version) = resource_version {
                        if any {
                            out.push(b',');
                        }
                        out.extend_from_slice(b"\"resourceVersion\":");
                        serde_json::to_writer(&mut out, version).unwrap_or_default();
                    }
                    out.extend_from_slice(&bytes[close..m.end]);
                }
                None => out.extend_from_slice(&bytes[m.start..m.end]),
            }
        }
        out.push(b'}');
        out.shrink_to_fit();
        Some((Bytes::from(out), prefix_len))
    }
}

/// Compact JSON of `obj` with `kind` and `apiVersion` first and `metadata.resourceVersion`
/// last in its metadata, wherever the tree has them; returns the bytes and the length of that
/// `{"kind":…,"apiVersion":…` prefix. `size_hint` is about the expected length (the stored
/// JSON's). A version's bytes are thus the same whether the watch cache decoded its stored
/// value or the write that stored it made them.
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
        match v {
            Value::Object(meta) if k == "metadata" => write_metadata(&mut out, meta),
            _ => serde_json::to_writer(&mut out, v).unwrap_or_default(),
        }
    }
    out.push(b'}');
    out.shrink_to_fit();
    (Bytes::from(out), prefix_len)
}

/// `metadata` as compact JSON with its `resourceVersion`, if any, last.
fn write_metadata(out: &mut Vec<u8>, meta: &serde_json::Map<String, Value>) {
    let mut separator = b'{';
    let members = meta.iter().filter(|(k, _)| *k != "resourceVersion");
    for (k, v) in members.chain(meta.get_key_value("resourceVersion")) {
        out.push(separator);
        separator = b',';
        serde_json::to_writer(&mut *out, k).unwrap_or_default();
        out.push(b':');
        serde_json::to_writer(&mut *out, v).unwrap_or_default();
    }
    if separator == b'{' {
        out.push(b'{');
    }
    out.push(b'}');
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

    fn service_accounts() -> JsonDecoder {
        let info = strata_object::builtin::service_account();
        let strategy = crate::strategy::builtin(&info);
        JsonDecoder::new(&info, strategy)
    }

    /// What a write hands the watch cache is byte for byte what decoding its stored value
    /// gives, it is taken once, by its own event, and a restamp never takes it.
    #[test]
    fn a_written_form_is_the_decoded_form_and_is_taken_by_its_event() {
        let decoder = service_accounts();
        let key = "/registry/serviceaccounts/default/a";
        let mut obj = Object::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "a", "namespace": "default", "labels": {"app": "x"},
                         "annotations": {"note": "é\"\n"}, "uid": "u"},
            "secrets": [{"name": "s"}], "automountServiceAccountToken": false
        }))
        .unwrap();
        let stored = serde_json::to_vec(&obj.as_value()).unwrap();
        obj.set_resource_version("7");
        // The stored form leaves resourceVersion out, as serializing without it would.
        let layout = Stored::encode(&obj);
        assert_eq!(&layout.bytes[..], &stored[..]);
        let json = decoder.written(key, &obj, &layout, Revision(7)).unwrap();
        let decoded = decoder.decode_value(key, &stored, Revision(7)).unwrap();
        assert_eq!(json, decoded.json());
        // Copied out of the stored bytes or encoded again: the same form.
        let (encoded, _) = encode_with_type(&obj, "v1", "ServiceAccount", 0);
        assert_eq!(json, encoded);
        // A restamp at that revision is of other content: it decodes what it is given.
        let older = decoder.decode_value(key, &stored, Revision(6)).unwrap();
        let restamped = decoder.restamp(&older, Revision(7)).unwrap();
        assert_eq!(restamped.json(), decoded.json());
        assert_eq!(decoder.written.lock().unwrap().len(), 1);
        // Another key at that revision does not take it; its own event does, once.
        let other = decoder
            .decode(&format!("{key}x"), &stored, Revision(7))
            .unwrap();
        assert_eq!(other.key(), format!("{key}x"));
        let taken = decoder.decode(key, &stored, Revision(7)).unwrap();
        assert_eq!((taken.key(), taken.json()), (key, &json));
        assert!(decoder.written.lock().unwrap().is_empty());
        // A form the watch cache went past is dropped by the next event.
        let opaque = Stored::opaque(Bytes::from(stored.clone()));
        assert_eq!(
            decoder.written(key, &obj, &opaque, Revision(8)).unwrap(),
            json
        );
        decoder.decode(key, &stored, Revision(9)).unwrap();
        assert!(decoder.written.lock().unwrap().is_empty());
    }

    /// A write whose resourceVersion sits anywhere in its metadata makes the bytes decoding
    /// the stored value (which has none) makes: resourceVersion last.
    #[test]
    fn resource_version_goes_last_whichever_way_the_form_is_made() {
        let decoder = service_accounts();
        let obj = Object::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "a", "resourceVersion": "7", "namespace": "default"}
        }))
        .unwrap();
        let mut stored = obj.clone();
        stored.set_meta_value("resourceVersion", None);
        let stored = serde_json::to_vec(&stored.as_value()).unwrap();
        let layout = Stored::encode(&obj);
        assert_eq!(&layout.bytes[..], &stored[..]);
        let json = decoder.written("k", &obj, &layout, Revision(7)).unwrap();
        assert_eq!(
            &json[..],
            br#"{"kind":"ServiceAccount","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"7"}}"#
        );
        let decoded = decoder.decode_value("k", &stored, Revision(7)).unwrap();
        assert_eq!(&json, decoded.json());
        let empty = Object::from_value(serde_json::json!({"metadata": {}})).unwrap();
        let (json, _) = encode_with_type(&empty, "v1", "ServiceAccount", 0);
        assert_eq!(
            &json[..],
            br#"{"kind":"ServiceAccount","apiVersion":"v1","metadata":{}}"#
        );
        // Copying out of stored bytes agrees at the edges: metadata holding only the version,
        // no metadata, and type fields anywhere.
        for tree in [
            serde_json::json!({"metadata": {"resourceVersion": "9"}, "kind": "X"}),
            serde_json::json!({"secrets": [], "apiVersion": "v9"}),
            serde_json::json!({"a": 1, "metadata": {"name": "n", "resourceVersion": "3"}, "b": {}}),
        ] {
            let obj = Object::from_value(tree).unwrap();
            let version = obj
                .as_map()
                .get("metadata")
                .and_then(|m| m.get("resourceVersion"));
            let copied = Stored::encode(&obj)
                .with_type("v1", "ServiceAccount", version)
                .unwrap();
            assert_eq!(copied, encode_with_type(&obj, "v1", "ServiceAccount", 0));
        }
    }
}
