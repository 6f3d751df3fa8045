//! The cache's form of an object: its key, revision, the few fields selectors read, and its
//! encodings, each made at most once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use strata_store::Revision;

/// Counts how often objects were encoded, per encoding name (`json`, `table`, …).
#[derive(Debug, Default)]
pub struct EncodeCounter {
    counts: Mutex<Vec<(String, Arc<AtomicU64>)>>,
}

impl EncodeCounter {
    fn slot(&self, encoding: &str) -> Arc<AtomicU64> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = counts.iter().find(|(n, _)| n == encoding) {
            return c.clone();
        }
        let c = Arc::new(AtomicU64::new(0));
        counts.push((encoding.to_string(), c.clone()));
        c
    }

    pub fn add(&self, encoding: &str) {
        self.slot(encoding).fetch_add(1, Ordering::Relaxed);
    }

    /// `(encoding, count)` pairs, in first-use order.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .iter()
            .map(|(n, c)| (n.clone(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// One object version as the cache holds it.
///
/// The canonical encoding is JSON of the whole object, starting with its `kind` and
/// `apiVersion` (`{"kind":…,"apiVersion":…,…}`); [`CachedObject::json_item`] gives the form
/// without them that list items use. Other encodings are made on first use and kept.
#[derive(Debug)]
pub struct CachedObject {
    key: String,
    revision: Revision,
    labels: Vec<(String, String)>,
    fields: Vec<(String, String)>,
    json: Bytes,
    /// Where the fields after `kind` and `apiVersion` start in `json` (just past the comma), or
    /// `json.len() - 1` when there are none.
    rest_offset: usize,
    encodings: Mutex<Vec<(String, Bytes)>>,
    counter: Arc<EncodeCounter>,
}

impl CachedObject {
    /// Builds the cache form. `kind_prefix_len` is the length of the `{"kind":…,"apiVersion":…`
    /// prefix of `json` (before the comma that separates further fields, if any).
    pub fn new(
        key: String,
        revision: Revision,
        labels: Vec<(String, String)>,
        fields: Vec<(String, String)>,
        json: Bytes,
        kind_prefix_len: usize,
    ) -> Self {
        let rest_offset = if json.get(kind_prefix_len) == Some(&b',') {
            kind_prefix_len + 1
        } else {
            json.len().saturating_sub(1)
        };
        Self {
            key,
            revision,
            labels,
            fields,
            json,
            rest_offset,
            encodings: Mutex::new(Vec::new()),
            counter: Arc::default(),
        }
    }

    pub(crate) fn set_counter(&mut self, counter: Arc<EncodeCounter>) {
        self.counter = counter;
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object's resource version as a revision (for a deletion event: the deletion's).
    pub fn revision(&self) -> Revision {
        self.revision
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A selectable field's value (`metadata.name`, `metadata.namespace`, …).
    pub fn field(&self, path: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == path)
            .map(|(_, v)| v.as_str())
    }

    /// The whole object as JSON, `kind` and `apiVersion` first.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The object as a list item: JSON without `kind` and `apiVersion`.
    pub fn json_item(&self) -> Bytes {
        let rest = &self.json[self.rest_offset..];
        let mut b = BytesMut::with_capacity(rest.len() + 1);
        b.put_u8(b'{');
        b.put_slice(rest);
        b.freeze()
    }

    /// Appends the list-item form to `out` (no allocation of its own).
    pub fn write_json_item(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        out.extend_from_slice(&self.json[self.rest_offset..]);
    }

    /// The encoding named `encoding`, made by `make` the first time it is asked for and shared
    /// by every later caller (every watcher of the event, every reader of the object).
    pub fn encoded(&self, encoding: &str, make: impl FnOnce(&CachedObject) -> Bytes) -> Bytes {
        {
            let encodings = self.encodings.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, b)) = encodings.iter().find(|(n, _)| n == encoding) {
                return b.clone();
            }
        }
        // Made outside the lock; two racing first readers may both encode, one result is kept.
        let bytes = make(self);
        let mut encodings = self.encodings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = encodings.iter().find(|(n, _)| n == encoding) {
            return b.clone();
        }
        self.counter.add(encoding);
        encodings.push((encoding.to_string(), bytes.clone()));
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_form_drops_type_fields() {
        let json = Bytes::from_static(br#"{"kind":"K","apiVersion":"v1","metadata":{"name":"a"}}"#);
        let prefix = br#"{"kind":"K","apiVersion":"v1""#.len();
        let o = CachedObject::new("k".into(), Revision(3), vec![], vec![], json, prefix);
        assert_eq!(&o.json_item()[..], br#"{"metadata":{"name":"a"}}"#);
        let bare = Bytes::from_static(br#"{"kind":"K","apiVersion":"v1"}"#);
        let o = CachedObject::new("k".into(), Revision(3), vec![], vec![], bare, prefix);
        assert_eq!(&o.json_item()[..], b"{}");
    }

    #[test]
    fn encodings_are_made_once() {
        let json = Bytes::from_static(br#"{"kind":"K","apiVersion":"v1","a":1}"#);
        let mut o = CachedObject::new("k".into(), Revision(1), vec![], vec![], json, 29);
        let counter = Arc::new(EncodeCounter::default());
        o.set_counter(counter.clone());
        let mut calls = 0;
        for _ in 0..5 {
            o.encoded("x", |_| {
                calls += 1;
                Bytes::from_static(b"X")
            });
        }
        assert_eq!(calls, 1);
        assert_eq!(counter.snapshot(), vec![("x".to_string(), 1)]);
    }
}
