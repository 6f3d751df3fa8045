//! The registry's side of the watch cache: how a stored value becomes a [`CachedObject`], and
//! back into an [`Object`] where code needs the tree.

use std::borrow::Cow;
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
    /// returns its JSON, copied out of the stored bytes, which is what a GET of that version
    /// answers.
    ///
    /// None when `stored` is another type's form of the object (see [`Stored::of`]), whose
    /// decoding could differ.
    pub(crate) fn written(
        &self,
        key: &str,
        obj: &Object,
        stored: &Stored,
        revision: Revision,
    ) -> Option<Bytes> {
        let version = resource_version_of(obj);
        let (json, prefix_len) = stored.with_type(&self.api_version, &self.kind, version)?;
        let cached = self.cached_json(key, obj, revision, json, prefix_len);
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
        let (json, prefix_len) = encode_with_type(&obj, &self.api_version, &self.kind);
        Ok(self.cached_json(key, &obj, revision, json, prefix_len))
    }

    /// The cache form of `obj`, whose resourceVersion is set to `revision`'s, with its JSON
    /// already made.
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
/// when it is the object's own form, where each member lies in it.
pub(crate) struct Stored {
    pub(crate) bytes: Bytes,
    /// None for another type's form of the object, which the cache form is not made from.
    members: Option<Vec<Member>>,
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
    /// The stored form of an object as `Strategy::to_storage` gives it: the object itself
    /// (borrowed, as for most types), or another type's form of it (owned).
    pub(crate) fn of(stored: Cow<'_, Object>) -> Stored {
        match stored {
            Cow::Borrowed(own) => Stored::encode(own),
            Cow::Owned(other) => Stored {
                members: None,
                ..Stored::encode(&other)
            },
        }
    }

    /// Encodes `obj` as stored, recording its members.
    fn encode(obj: &Object) -> Stored {
        let (bytes, members) = layout(obj);
        Stored {
            bytes: Bytes::from(bytes),
            members: Some(members),
        }
    }

    /// What [`encode_with_type`] makes of the object whose `metadata.resourceVersion` is
    /// `resource_version`, copied out of the stored bytes; None for another type's form.
    fn with_type(
        &self,
        api_version: &str,
        kind: &str,
        resource_version: Option<&Value>,
    ) -> Option<(Bytes, usize)> {
        let members = self.members.as_ref()?;
        Some(cache_form(
            &self.bytes,
            members,
            api_version,
            kind,
            resource_version,
        ))
    }
}

/// The stored JSON of `obj` and where its members lie.
fn layout(obj: &Object) -> (Vec<u8>, Vec<Member>) {
    let map = obj.as_map();
    let mut out = Vec::with_capacity(512);
    let mut members = Vec::with_capacity(map.len());
    out.push(b'{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let start = out.len();
        write_member(&mut out, k, v);
        let metadata = match v {
            Value::Object(meta) if k == "metadata" => {
                // Written without resourceVersion: before the closing brace.
                Some((out.len() - 1, meta.keys().any(|k| k != "resourceVersion")))
            }
            _ => None,
        };
        members.push(Member {
            start,
            end: out.len(),
            type_field: k == "kind" || k == "apiVersion",
            metadata,
        });
    }
    out.push(b'}');
    (out, members)
}

/// The cache form of an object (see [`encode_with_type`]) from its stored JSON `bytes` laid
/// out as `members`, with `resource_version` last in its metadata.
fn cache_form(
    bytes: &[u8],
    members: &[Member],
    api_version: &str,
    kind: &str,
    resource_version: Option<&Value>,
) -> (Bytes, usize) {
    // Room for the type fields and the resourceVersion the stored form lacks.
    let mut out = Vec::with_capacity(bytes.len() + kind.len() + api_version.len() + 64);
    let prefix_len = write_type_fields(&mut out, kind, api_version);
    for m in members.iter().filter(|m| !m.type_field) {
        out.push(b',');
        match m.metadata {
            Some((close, any)) => {
                out.extend_from_slice(&bytes[m.start..close]);
                if let Some(version) = resource_version {
                    if any {
                        out.push(b',');
                    }
                    write_member(&mut out, "resourceVersion", version);
                }
                out.extend_from_slice(&bytes[close..m.end]);
            }
            None => out.extend_from_slice(&bytes[m.start..m.end]),
        }
    }
    out.push(b'}');
    out.shrink_to_fit();
    (Bytes::from(out), prefix_len)
}

/// The `metadata.resourceVersion` member of `obj`, if any.
fn resource_version_of(obj: &Object) -> Option<&Value> {
    obj.as_map()
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
}

/// Writes `"key":value`, with a `metadata` object's `resourceVersion` left out (the stored
/// form's revision stands for it).
fn write_member(out: &mut Vec<u8>, key: &str, value: &Value) {
    serde_json::to_writer(&mut *out, key).unwrap_or_default();
    out.push(b':');
    match value {
        Value::Object(meta) if key == "metadata" => {
            out.push(b'{');
            let members = meta.iter().filter(|(k, _)| *k != "resourceVersion");
            for (i, (k, v)) in members.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, k).unwrap_or_default();
                out.push(b':');
                serde_json::to_writer(&mut *out, v).unwrap_or_default();
            }
            out.push(b'}');
        }
        _ => serde_json::to_writer(&mut *out, value).unwrap_or_default(),
    }
}

/// Writes `{"kind":…,"apiVersion":…` and returns its length: how a cached object and a JSON
/// list begin.
pub(crate) fn write_type_fields(out: &mut Vec<u8>, kind: &str, api_version: &str) -> usize {
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut *out, kind).unwrap_or_default();
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut *out, api_version).unwrap_or_default();
    out.len()
}

/// The cache form of `obj`: compact JSON with `kind` and `apiVersion` (the type's) first and
/// `metadata.resourceVersion` last in its metadata, wherever the tree has them; returns the
/// bytes and the length of that `{"kind":…,"apiVersion":…` prefix. Made, like a write's, from
/// the stored form, so a version's bytes are the same whether the watch cache decoded its
/// stored value or the write that stored it made them.
///
/// The bytes are held exactly: the cache keeps them for the object's lifetime, and a buffer
/// grown by doubling would hold up to twice the JSON.
fn encode_with_type(obj: &Object, api_version: &str, kind: &str) -> (Bytes, usize) {
    let (bytes, members) = layout(obj);
    let version = resource_version_of(obj);
    cache_form(&bytes, &members, api_version, kind, version)
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

    /// The cached JSON is the object serialized with `kind` and `apiVersion` first.
    #[test]
    fn the_cache_form_is_the_object_with_its_type_first() {
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
        let (json, prefix) = encode_with_type(&obj, "v1", "ServiceAccount");
        assert_eq!(&json[..], &direct[..]);
        assert_eq!(
            &json[..prefix],
            br#"{"kind":"ServiceAccount","apiVersion":"v1""#
        );
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
        let (encoded, _) = encode_with_type(&obj, "v1", "ServiceAccount");
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
        // Another type's form of the object is left to the decoder.
        let foreign = Stored::of(Cow::Owned(obj.clone()));
        assert_eq!(&foreign.bytes[..], &stored[..]);
        assert!(decoder.written(key, &obj, &foreign, Revision(8)).is_none());
        // A form the watch cache went past is dropped by the next event.
        assert_eq!(
            decoder.written(key, &obj, &layout, Revision(8)).unwrap(),
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
        let (json, _) = encode_with_type(&empty, "v1", "ServiceAccount");
        assert_eq!(
            &json[..],
            br#"{"kind":"ServiceAccount","apiVersion":"v1","metadata":{}}"#
        );
        // At the edges too (metadata holding only the version, no metadata, type fields
        // anywhere), the form is the tree serialized with the type first and the version last.
        let cases = [
            (
                serde_json::json!({"metadata": {"resourceVersion": "9"}, "kind": "X"}),
                r#"{"kind":"ServiceAccount","apiVersion":"v1","metadata":{"resourceVersion":"9"}}"#,
            ),
            (
                serde_json::json!({"secrets": [], "apiVersion": "v9"}),
                r#"{"kind":"ServiceAccount","apiVersion":"v1","secrets":[]}"#,
            ),
            (
                serde_json::json!({"a": 1, "metadata": {"resourceVersion": "3", "name": "n"}, "b": {}}),
                r#"{"kind":"ServiceAccount","apiVersion":"v1","a":1,"metadata":{"name":"n","resourceVersion":"3"},"b":{}}"#,
            ),
        ];
        for (tree, want) in cases {
            let obj = Object::from_value(tree).unwrap();
            let (json, _) = encode_with_type(&obj, "v1", "ServiceAccount");
            assert_eq!(std::str::from_utf8(&json).unwrap(), want);
        }
    }
}
