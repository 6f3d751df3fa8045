//! The registry's side of the watch cache: how a stored value becomes a [`CachedObject`], and
//! back into an [`Object`] where code needs the tree.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// This server's writes from before they are stored until the watch cache reaches their
    /// events, by key: their stored bytes, laid out, and their labels and selectable fields.
    /// The cache makes a write's form from these when the event brings the same bytes,
    /// instead of decoding them again, whether the write's answer comes first or the event.
    expected: Mutex<Expected>,
}

/// The writes [`JsonDecoder`] expects events of.
#[derive(Default)]
struct Expected {
    by_key: HashMap<String, Vec<Arc<Expectation>>>,
    count: usize,
}

/// What the cache form of one write needs besides its revision.
struct Expectation {
    stored: Stored,
    labels: Vec<(String, String)>,
    fields: Vec<(String, String)>,
}

/// The most writes [`JsonDecoder`] expects events of. Beyond it, expectations are forgotten
/// (their events are decoded): only writes whose events never reach this cache linger, such
/// as those of a type removed meanwhile.
const EXPECTED_LIMIT: usize = 4096;

/// A write [`JsonDecoder::expect`]s: forgotten when dropped, unless [`Expecting::stored`]
/// said the write was stored and its event is coming.
pub(crate) struct Expecting<'a> {
    decoder: &'a JsonDecoder,
    key: &'a str,
    expectation: Option<Arc<Expectation>>,
}

impl Expecting<'_> {
    /// The write is stored: its event will come and take the expectation.
    pub(crate) fn stored(mut self) {
        self.expectation = None;
    }
}

impl Drop for Expecting<'_> {
    fn drop(&mut self) {
        if let Some(gone) = self.expectation.take() {
            let mut expected = self.decoder.expected();
            if let Some(list) = expected.by_key.get_mut(self.key) {
                let before = list.len();
                list.retain(|e| !Arc::ptr_eq(e, &gone));
                let removed = before - list.len();
                if list.is_empty() {
                    expected.by_key.remove(self.key);
                }
                expected.count -= removed;
            }
        }
    }
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
            expected: Mutex::default(),
        }
    }

    fn expected(&self) -> std::sync::MutexGuard<'_, Expected> {
        self.expected.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Expects the event of a write of `obj` under `key` as `stored`, about to be sent to the
    /// store. Nothing is expected of another type's form of an object (see [`Stored::of`]),
    /// whose decoding could differ.
    pub(crate) fn expect<'a>(
        &'a self,
        key: &'a str,
        obj: &Object,
        stored: &Stored,
    ) -> Expecting<'a> {
        let mut expecting = Expecting {
            decoder: self,
            key,
            expectation: None,
        };
        if stored.members.is_none() {
            return expecting;
        }
        let (labels, fields) = self.selectable(obj);
        let expectation = Arc::new(Expectation {
            stored: stored.clone(),
            labels,
            fields,
        });
        let mut expected = self.expected();
        if expected.count >= EXPECTED_LIMIT {
            *expected = Expected::default();
        }
        expected
            .by_key
            .entry(key.to_owned())
            .or_default()
            .push(expectation.clone());
        expected.count += 1;
        expecting.expectation = Some(expectation);
        expecting
    }

    /// The JSON of `obj`, just stored as `stored` (its resourceVersion set to that write's),
    /// copied out of the stored bytes: what a GET of that version answers, byte for byte.
    /// None when `stored` is another type's form of the object (see [`Stored::of`]).
    pub(crate) fn written(&self, obj: &Object, stored: &Stored) -> Option<Bytes> {
        let version = resource_version_of(obj);
        let (json, _) = stored.with_type(&self.api_version, &self.kind, version)?;
        Some(json)
    }

    /// The cache form of the expected write of `key` stored as `value` at `revision`, which
    /// it takes out of the expected ones; None when no write of these bytes is expected.
    fn take_expected(&self, key: &str, value: &[u8], revision: Revision) -> Option<CachedObject> {
        let expectation = {
            let mut expected = self.expected();
            let list = expected.by_key.get_mut(key)?;
            let at = list.iter().position(|e| e.stored.bytes == value)?;
            let expectation = list.swap_remove(at);
            if list.is_empty() {
                expected.by_key.remove(key);
            }
            expected.count -= 1;
            expectation
        };
        let version = Value::String(to_resource_version(revision).to_string());
        let (json, prefix_len) =
            expectation
                .stored
                .with_type(&self.api_version, &self.kind, Some(&version))?;
        Some(CachedObject::new(
            key.to_string(),
            revision,
            expectation.labels.clone(),
            expectation.fields.clone(),
            json,
            prefix_len,
        ))
    }
}

impl Decoder for JsonDecoder {
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String> {
        if let Some(e) = crate::encryption::transform_error(value) {
            return Err(e);
        }
        match self.take_expected(key, value, revision) {
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
        let (labels, fields) = self.selectable(obj);
        CachedObject::new(key.to_string(), revision, labels, fields, json, prefix_len)
    }

    /// The labels of `obj` and the values of this type's selectable fields.
    #[allow(clippy::type_complexity)]
    fn selectable(&self, obj: &Object) -> (Vec<(String, String)>, Vec<(String, String)>) {
        let labels = obj
            .labels()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let fields = self
            .fields
            .iter()
            .map(|f| (f.clone(), field_value(obj, f).unwrap_or("").to_string()))
            .collect();
        (labels, fields)
    }
}

/// An object's stored JSON (members in the object's order, no `metadata.resourceVersion`) and,
/// when it is the object's own form, where each member lies in it.
#[derive(Clone)]
pub(crate) struct Stored {
    pub(crate) bytes: Bytes,
    /// None for another type's form of the object, which the cache form is not made from.
    members: Option<Vec<Member>>,
}

/// One top-level member of stored JSON: `"name":value` at `start..end`.
#[derive(Clone)]
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

    /// Whether these are the object's own stored form, which decodes back to the object.
    pub(crate) fn is_own(&self) -> bool {
        self.members.is_some()
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

/// The length of the stored form written last: the next one starts with room for as much.
/// Writes in a row are often of one type and size, so most are written without regrowing.
/// The room goes with the bytes to the store, which may keep them a while (RocksDB's recent
/// events): a small write right after a large one holds about the large one's size, at most
/// 72 KiB, once; the write after it is sized by the small one.
static LAST_STORED_LEN: AtomicUsize = AtomicUsize::new(512);

/// The stored JSON of `obj` and where its members lie.
fn layout(obj: &Object) -> (Vec<u8>, Vec<Member>) {
    let map = obj.as_map();
    let room = LAST_STORED_LEN
        .load(Ordering::Relaxed)
        .clamp(512, 64 * 1024);
    let mut out = Vec::with_capacity(room + room / 8);
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
    LAST_STORED_LEN.store(out.len(), Ordering::Relaxed);
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

    /// The form the watch cache makes of an expected write is byte for byte what decoding its
    /// stored value gives, and what the write answers; it is taken once, by an event of the
    /// same key and bytes, whichever revision it has; a write that was not stored is forgotten.
    #[test]
    fn an_expected_write_is_the_decoded_form_and_is_taken_by_its_event() {
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
        // The stored form leaves resourceVersion out, as serializing without it would.
        let layout = Stored::encode(&obj);
        assert_eq!(&layout.bytes[..], &stored[..]);
        decoder.expect(key, &obj, &layout).stored();
        obj.set_resource_version("7");
        let json = decoder.written(&obj, &layout).unwrap();
        let decoded = decoder.decode_value(key, &stored, Revision(7)).unwrap();
        assert_eq!(json, decoded.json());
        // Copied out of the stored bytes or encoded again: the same form.
        let (encoded, _) = encode_with_type(&obj, "v1", "ServiceAccount");
        assert_eq!(json, encoded);
        // A restamp at that revision is of other content: it decodes what it is given.
        let older = decoder.decode_value(key, &stored, Revision(6)).unwrap();
        let restamped = decoder.restamp(&older, Revision(7)).unwrap();
        assert_eq!(restamped.json(), decoded.json());
        assert_eq!(decoder.expected().count, 1);
        // Another key, or other bytes, do not take it; its own event does, once.
        let other = decoder
            .decode(&format!("{key}x"), &stored, Revision(7))
            .unwrap();
        assert_eq!(other.key(), format!("{key}x"));
        let mut changed = stored.clone();
        changed.extend_from_slice(b" ");
        assert!(decoder.decode(key, &changed, Revision(7)).is_ok());
        assert_eq!(decoder.expected().count, 1);
        let taken = decoder.decode(key, &stored, Revision(7)).unwrap();
        assert_eq!((taken.key(), taken.json()), (key, &json));
        assert_eq!(taken.label("app"), Some("x"));
        assert_eq!(taken.field("metadata.name"), Some("a"));
        assert_eq!(decoder.expected().count, 0);
        assert!(decoder.expected().by_key.is_empty());
        // A write that was not stored is not expected any longer.
        drop(decoder.expect(key, &obj, &layout));
        assert_eq!(decoder.expected().count, 0);
        assert!(decoder.expected().by_key.is_empty());
        // Another type's form of the object is left to the decoder.
        let foreign = Stored::of(Cow::Owned(obj.clone()));
        decoder.expect(key, &obj, &foreign).stored();
        assert_eq!(decoder.expected().count, 0);
        assert!(decoder.written(&obj, &foreign).is_none());
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
        let json = decoder.written(&obj, &layout).unwrap();
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
