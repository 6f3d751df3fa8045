//! The cache's form of an object: its key, revision, the few fields selectors read, and its
//! encodings, each made once and kept while the budget of kept encodings allows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use strata_store::Revision;

use crate::kept::KeptEncodings;

/// Counts how often objects were encoded, per encoding name (`json`, `table`, …), and holds
/// the budget their kept encodings count against.
#[derive(Debug)]
pub struct EncodeCounter {
    counts: Mutex<Vec<(Arc<str>, Arc<AtomicU64>)>>,
    budget: Arc<KeptEncodings>,
}

impl Default for EncodeCounter {
    /// A counter whose objects keep every encoding.
    fn default() -> Self {
        Self::sharing(Arc::new(KeptEncodings::unlimited()))
    }
}

impl EncodeCounter {
    /// A counter whose objects keep their encodings within `budget`.
    pub fn sharing(budget: Arc<KeptEncodings>) -> Self {
        Self {
            counts: Mutex::default(),
            budget,
        }
    }

    /// The name as kept on objects (one allocation per name), and its count.
    fn slot(&self, encoding: &str) -> (Arc<str>, Arc<AtomicU64>) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((n, c)) = counts.iter().find(|(n, _)| &**n == encoding) {
            return (n.clone(), c.clone());
        }
        let slot = (Arc::<str>::from(encoding), Arc::new(AtomicU64::new(0)));
        counts.push(slot.clone());
        slot
    }

    /// Counts one encoding into `encoding`.
    pub fn add(&self, encoding: &str) {
        self.slot(encoding).1.fetch_add(1, Ordering::Relaxed);
    }

    /// `(encoding, count)` pairs, in first-use order.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .iter()
            .map(|(n, c)| (n.to_string(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Name-value pairs (labels, selectable fields) packed into one string: a cache holds one
/// object per key for as long as it lives, so two allocations per set instead of two per
/// string and one for the list keep its memory close to the objects' JSON.
#[derive(Debug)]
struct Pairs {
    /// Every name and value, one after another.
    text: Box<str>,
    /// Where each name and each value ends in `text`: pair `i`'s name ends at `ends[2i]`, its
    /// value at `ends[2i + 1]`.
    ends: Box<[u32]>,
}

impl Pairs {
    fn new<'a>(pairs: impl Iterator<Item = &'a (String, String)> + Clone) -> Self {
        let len = pairs.clone().map(|(k, v)| k.len() + v.len()).sum();
        let mut text = String::with_capacity(len);
        let mut ends = Vec::with_capacity(pairs.clone().count() * 2);
        for (k, v) in pairs {
            text.push_str(k);
            ends.push(offset(text.len()));
            text.push_str(v);
            ends.push(offset(text.len()));
        }
        Self {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut start = 0;
        self.ends.chunks_exact(2).map(move |e| {
            let (k_end, v_end) = (e[0] as usize, e[1] as usize);
            let pair = (&self.text[start..k_end], &self.text[k_end..v_end]);
            start = v_end;
            pair
        })
    }

    /// The value of the first pair called `name` among those in `range` (by position).
    fn get(&self, name: &str, range: impl std::ops::RangeBounds<usize>) -> Option<&str> {
        self.iter()
            .enumerate()
            .find(|(i, (k, _))| range.contains(i) && *k == name)
            .map(|(_, (_, v))| v)
    }
}

/// A position in a [`Pairs`] text. Labels and selectable fields are small (the API server
/// bounds a whole object far below 4 GiB).
fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// One object version as the cache holds it.
///
/// The canonical encoding is JSON of the whole object, starting with its `kind` and
/// `apiVersion` (`{"kind":…,"apiVersion":…,…}`); [`CachedObject::json_item`] gives the form
/// without them that list items use. Other encodings are made on first use and kept, within
/// the budget of the counter the cache gives the object ([`KeptEncodings`]).
///
/// ```
/// use strata_watch::strata_store::{Bytes, Revision};
/// use strata_watch::CachedObject;
///
/// let head = r#"{"kind":"ConfigMap","apiVersion":"v1""#;
/// let json = format!(r#"{head},"metadata":{{"name":"a"}}}}"#);
/// let obj = std::sync::Arc::new(CachedObject::new(
///     "/registry/configmaps/default/a".into(),
///     Revision(7),
///     vec![("app".into(), "web".into())],
///     vec![("metadata.name".into(), "a".into())],
///     Bytes::from(json),
///     head.len(),
/// ));
/// assert_eq!(obj.label("app"), Some("web"));
/// assert_eq!(obj.field("metadata.name"), Some("a"));
/// assert_eq!(&obj.json_item()[..], br#"{"metadata":{"name":"a"}}"#);
///
/// // An encoding is made once and shared by every later reader.
/// let yaml = obj.encoded("yaml", |_| Bytes::from("metadata:\n  name: a\n"));
/// let again = obj.encoded("yaml", |_| unreachable!("made once"));
/// assert_eq!(yaml, again);
/// ```
#[derive(Debug)]
pub struct CachedObject {
    key: Arc<str>,
    revision: Revision,
    /// The labels, then the selectable fields.
    pairs: Pairs,
    /// How many of `pairs` are labels.
    labels: u32,
    json: Bytes,
    /// Where the fields after `kind` and `apiVersion` start in `json` (just past the comma), or
    /// `json.len() - 1` when there are none.
    rest_offset: usize,
    /// The other encodings kept, each counted in the counter's budget.
    kept: Mutex<Vec<(Arc<str>, Bytes)>>,
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
            key: key.into(),
            revision,
            pairs: Pairs::new(labels.iter().chain(&fields)),
            labels: offset(labels.len()),
            json,
            rest_offset,
            kept: Mutex::new(Vec::new()),
            counter: uncounted(),
        }
    }

    /// Before any encoding is kept: the kept ones count in the counter's budget.
    pub(crate) fn set_counter(&mut self, counter: Arc<EncodeCounter>) {
        debug_assert!(self.lock_kept().is_empty());
        self.counter = counter;
    }

    /// The store key the object lives under.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key, shared with the cache's index of objects.
    pub(crate) fn shared_key(&self) -> Arc<str> {
        self.key.clone()
    }

    /// The object's resource version as a revision (for a deletion event: the deletion's).
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The value of label `key`, as the decoder gave it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.pairs.get(key, ..self.labels as usize)
    }

    /// A selectable field's value (`metadata.name`, `metadata.namespace`, …).
    pub fn field(&self, path: &str) -> Option<&str> {
        self.pairs.get(path, self.labels as usize..)
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

    /// The length of the list-item form ([`CachedObject::json_item`]).
    pub fn json_item_len(&self) -> usize {
        1 + self.json.len() - self.rest_offset
    }

    /// Appends the list-item form to `out` (no allocation of its own).
    pub fn write_json_item(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        out.extend_from_slice(&self.json[self.rest_offset..]);
    }

    /// The encoding named `encoding`, made by `make` the first time it is asked for and shared
    /// by every later caller (every watcher of the event, every reader of the object) while
    /// the budget keeps it. The object is asked for by its `Arc`: the budget refers back to it
    /// without keeping it alive.
    pub fn encoded(
        self: &Arc<Self>,
        encoding: &str,
        make: impl FnOnce(&CachedObject) -> Bytes,
    ) -> Bytes {
        if let Some(kept) = self.kept_as(encoding) {
            return kept;
        }
        // Made outside the lock; two racing first readers may both encode, one result is kept.
        let bytes = make(self);
        let (name, count) = self.counter.slot(encoding);
        let budget = &self.counter.budget;
        if !budget.keeps_any() {
            count.fetch_add(1, Ordering::Relaxed);
            return bytes;
        }
        {
            let mut kept = self.lock_kept();
            if let Some((_, first)) = kept.iter().find(|(n, _)| *n == name) {
                return first.clone();
            }
            kept.push((name.clone(), bytes.clone()));
        }
        count.fetch_add(1, Ordering::Relaxed);
        // Not under the object's lock: keeping may drop encodings of any object, this one too.
        budget.admit(Arc::downgrade(self), name, kept_cost(&bytes));
        bytes
    }

    /// Calls `with` on the kept encoding named `encoding`, if there is one, and gives what it
    /// returns. Unlike [`CachedObject::encoded`] it neither makes the encoding nor takes a
    /// share of its bytes: a reader that copies them at once (a list writing its items) spares
    /// the count of readers it would otherwise raise and lower. `with` runs under the object's
    /// lock, so it must be short and must not ask this object for its encodings.
    pub fn with_kept<R>(&self, encoding: &str, with: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let kept = self.lock_kept();
        let (_, bytes) = kept.iter().find(|(n, _)| &**n == encoding)?;
        Some(with(bytes))
    }

    fn lock_kept(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<str>, Bytes)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kept_as(&self, encoding: &str) -> Option<Bytes> {
        self.lock_kept()
            .iter()
            .find(|(n, _)| &**n == encoding)
            .map(|(_, b)| b.clone())
    }

    /// Drops the kept encoding `name` for the budget; what it cost.
    pub(crate) fn forget(&self, name: &str) -> Option<usize> {
        let mut kept = self.lock_kept();
        let at = kept.iter().position(|(n, _)| &**n == name)?;
        let (_, bytes) = kept.swap_remove(at);
        Some(kept_cost(&bytes))
    }
}

/// The counter of objects made outside a cache, until a cache gives them its own: one for the
/// process, so that making an object allocates no counter.
fn uncounted() -> Arc<EncodeCounter> {
    static UNCOUNTED: OnceLock<Arc<EncodeCounter>> = OnceLock::new();
    UNCOUNTED.get_or_init(Arc::default).clone()
}

/// What a kept encoding counts against the budget.
fn kept_cost(bytes: &Bytes) -> usize {
    bytes.len() + crate::kept::ENTRY_OVERHEAD
}

impl Drop for CachedObject {
    /// The version is gone: its kept encodings leave the budget with it.
    fn drop(&mut self) {
        let kept = self.kept.get_mut().unwrap_or_else(|e| e.into_inner());
        if !kept.is_empty() {
            let cost = kept.iter().map(|(_, b)| kept_cost(b)).sum();
            self.counter.budget.released(cost, kept.len());
        }
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
    fn labels_and_fields_are_found_by_name() {
        let json = Bytes::from_static(br#"{"kind":"K","apiVersion":"v1"}"#);
        let labels = vec![
            ("app".to_string(), "web".to_string()),
            ("empty".to_string(), String::new()),
            ("tier".to_string(), "front ünd".to_string()),
        ];
        let fields = vec![
            ("metadata.name".to_string(), "a".to_string()),
            ("metadata.namespace".to_string(), String::new()),
        ];
        let o = CachedObject::new("k".into(), Revision(1), labels, fields, json, 29);
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.label("empty"), Some(""));
        assert_eq!(o.label("tier"), Some("front ünd"));
        assert_eq!(o.label("ap"), None);
        assert_eq!(o.label("webtier"), None);
        assert_eq!(o.field("metadata.name"), Some("a"));
        assert_eq!(o.field("metadata.namespace"), Some(""));
        assert_eq!(o.field("spec.x"), None);
        // Labels and fields are apart: a label named like a field is not that field.
        let o = CachedObject::new(
            "k".into(),
            Revision(1),
            vec![("metadata.name".to_string(), "label".to_string())],
            vec![("metadata.name".to_string(), "field".to_string())],
            json_of(),
            29,
        );
        assert_eq!(o.label("metadata.name"), Some("label"));
        assert_eq!(o.field("metadata.name"), Some("field"));
        let none = CachedObject::new(
            "k".into(),
            Revision(1),
            vec![],
            vec![],
            Bytes::from_static(b"{}"),
            1,
        );
        assert_eq!(none.label("app"), None);
        // The first pair of a name wins, as the lookup in a list of pairs did.
        let twice = vec![
            ("a".to_string(), "1".to_string()),
            ("a".to_string(), "2".to_string()),
        ];
        let o = CachedObject::new("k".into(), Revision(1), twice, vec![], json_of(), 29);
        assert_eq!(o.label("a"), Some("1"));
    }

    fn json_of() -> Bytes {
        Bytes::from_static(br#"{"kind":"K","apiVersion":"v1"}"#)
    }

    #[test]
    fn an_object_is_no_larger_than_its_allocation_class() {
        // A cache holds one per stored object: 144 bytes and the `Arc`'s two counts fill an
        // allocation of 160 bytes exactly. A field more would cost the next class up.
        assert!(std::mem::size_of::<CachedObject>() <= 144);
    }

    #[test]
    fn encodings_are_made_once() {
        let json = Bytes::from_static(br#"{"kind":"K","apiVersion":"v1","a":1}"#);
        let mut o = CachedObject::new("k".into(), Revision(1), vec![], vec![], json, 29);
        let counter = Arc::new(EncodeCounter::default());
        o.set_counter(counter.clone());
        let o = Arc::new(o);
        let mut calls = 0;
        for _ in 0..5 {
            o.encoded("x", |_| {
                calls += 1;
                Bytes::from_static(b"X")
            });
        }
        assert_eq!(calls, 1);
        assert_eq!(counter.snapshot(), vec![("x".to_string(), 1)]);
        assert_eq!(o.with_kept("x", <[u8]>::to_vec), Some(b"X".to_vec()));
        assert_eq!(o.with_kept("y", <[u8]>::to_vec), None);
    }
}
