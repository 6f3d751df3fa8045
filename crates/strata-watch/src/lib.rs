//! The watch cache: per resource type, the current state and a window of recent events, kept
//! in memory from the store's ordered change feed, serving lists, gets and watches.
//!
//! One [`Caches`] reads the feed for every type ([`Caches::start`]) and hands each event to the
//! [`WatchCache`] whose key prefix it falls under. A cache decodes each stored value once, through
//! the [`Decoder`] its owner supplies (the registry knows the storage format; this crate does
//! not), into a [`CachedObject`] that carries the object's encodings: every watcher and reader of
//! that version shares them.
//!
//! Watchers get a bounded buffer each. A watcher whose buffer is full when an event arrives is
//! closed with [`CacheError::Overflow`] instead of holding up the feed: other watchers and the
//! writers never wait for a slow reader.
//!
//! # Example
//!
//! A cache of "things" over the in-memory store, whose values are plain text: list it, then
//! watch it from the list's revision.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use strata_watch::strata_store::{Bytes, MemoryStore, Revision, Store};
//! use strata_watch::{
//!     CacheConfig, CachedObject, Caches, Decoder, EventType, Filter, StartAt, WatchItem, WatchSpec,
//! };
//!
//! /// Stored values are names; the cache's JSON is `{"kind":"Thing","apiVersion":"v1","name":…}`.
//! struct Things;
//!
//! impl Decoder for Things {
//!     fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String> {
//!         let name = std::str::from_utf8(value).map_err(|e| e.to_string())?;
//!         let head = r#"{"kind":"Thing","apiVersion":"v1""#;
//!         let json = format!(r#"{head},"name":"{name}"}}"#);
//!         let labels = vec![("app".to_string(), name.to_string())];
//!         let fields = vec![("metadata.name".to_string(), name.to_string())];
//!         Ok(CachedObject::new(key.into(), revision, labels, fields, json.into(), head.len()))
//!     }
//!
//!     fn restamp(&self, obj: &CachedObject, revision: Revision) -> Result<CachedObject, String> {
//!         let name = obj.field("metadata.name").unwrap_or_default();
//!         self.decode(obj.key(), name.as_bytes(), revision)
//!     }
//! }
//!
//! # strata_watch::strata_store::tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! store.create("/things/a", Bytes::from("a")).await.unwrap();
//!
//! let caches = Arc::new(Caches::new(store.clone(), CacheConfig::default()));
//! let things = caches.add("things", "/things/", Arc::new(Things));
//! caches.start().await.unwrap();
//!
//! let everything: Filter = Arc::new(|_| true);
//! let list = things.list("/things/", "", 0, &everything, None);
//! assert_eq!(list.items.len(), 1);
//! assert_eq!(&list.items[0].json_item()[..], br#"{"name":"a"}"#);
//!
//! let spec = WatchSpec {
//!     prefix: "/things/".into(),
//!     filter: everything,
//!     start: StartAt::After(list.revision),
//!     bookmarks: false,
//! };
//! let mut watch = things.watch(spec, Duration::from_secs(1)).await.unwrap();
//! store.create("/things/b", Bytes::from("b")).await.unwrap();
//! match watch.receiver.recv().await {
//!     Some(WatchItem::Event(EventType::Added, obj)) => assert_eq!(obj.key(), "/things/b"),
//!     other => panic!("expected ADDED, got {other:?}"),
//! }
//! # });
//! ```
//!
//! # Dependencies
//!
//! The caches follow a [`strata_store::Store`] (re-exported as [`strata_store`], with its
//! `bytes` and `tokio`), need a tokio runtime with timers, and log through `tracing`.

#![deny(missing_docs)]

mod kept;
mod object;

pub use strata_store;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use strata_store::{Changes, Event, RangeRequest, Revision, Store, StoreError};
use tokio::sync::{mpsc, watch};

pub use kept::KeptEncodings;
pub use object::{CachedObject, EncodeCounter};

/// The README's examples, run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Turns a stored value into the cache's form of the object, stamped with `revision` (the
/// version's modification revision, or for a deletion the deletion's revision).
pub trait Decoder: Send + Sync {
    /// Decodes the value stored under `key`; an error keeps the key out of lists and watches
    /// (reads of it report the error, see [`WatchCache::corrupt`]).
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String>;

    /// The same object content stamped with another revision: what a watcher whose selector an
    /// update no longer matches sees, as the DELETED event of that update.
    fn restamp(&self, obj: &CachedObject, revision: Revision) -> Result<CachedObject, String>;
}

/// A predicate over cached objects (label and field selectors).
pub type Filter = Arc<dyn Fn(&CachedObject) -> bool + Send + Sync>;

/// The kind of a change a watcher sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// The object is new to the watcher: created, or changed into its selection.
    Added,
    /// The object changed and still matches.
    Modified,
    /// The object was deleted, or changed out of the watcher's selection.
    Deleted,
}

impl EventType {
    /// The Kubernetes name of the event type: `ADDED`, `MODIFIED` or `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Why the cache could not serve a request, or ended a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// The changes after `requested` are no longer all in the window; `oldest` is the oldest
    /// revision a watch can still start after.
    Expired {
        /// The revision the watch asked to start after.
        requested: Revision,
        /// The oldest revision a watch can start after now.
        oldest: Revision,
    },
    /// The cache did not reach `requested` in time.
    TooLarge {
        /// The revision waited for.
        requested: Revision,
        /// The revision the cache had reached when the wait ended.
        current: Revision,
    },
    /// The watcher's buffer filled up: it did not read fast enough.
    Overflow {
        /// The size of the buffer that filled up.
        buffered: usize,
    },
    /// The storage feed failed.
    Storage(StoreError),
}

/// One item of a watch: a change, a bookmark, or the reason the watch ended.
#[derive(Clone, Debug)]
pub enum WatchItem {
    /// A change: its type as this watcher sees it, and the object (for a deletion, its last
    /// state stamped with the deletion's revision).
    Event(EventType, Arc<CachedObject>),
    /// Every change up to this revision has been delivered before this item.
    Bookmark(Revision),
    /// The watch ended, and why; nothing follows.
    Closed(CacheError),
}

/// Sizes and intervals of the caches.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// The most events one type's window keeps (older ones are dropped first).
    pub window_events: usize,
    /// Items buffered per watcher before it is closed as too slow.
    pub watcher_buffer: usize,
    /// How often a watcher that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Events read from the store's feed per call.
    pub feed_batch: usize,
    /// Bytes of encodings other than JSON (protobuf, YAML, CBOR, Table rows, watch frames)
    /// kept on cached objects, across all the caches; past it the longest kept are dropped
    /// ([`KeptEncodings`]). 0 keeps none.
    pub kept_encodings_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            window_events: 100_000,
            watcher_buffer: 1000,
            bookmark_interval: Duration::from_secs(1),
            feed_batch: 1000,
            kept_encodings_bytes: 32 << 20,
        }
    }
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// Synthetic ADDED events for the state at some revision not older than `min`, then the
    /// changes after it.
    State {
        /// The oldest revision the state may be at (the watch waits for the cache to reach it).
        min: Revision,
    },
    /// Only the changes after this revision.
    After(Revision),
}

/// What a watcher wants.
#[derive(Clone)]
pub struct WatchSpec {
    /// Only keys under this prefix (a namespace, or the whole type).
    pub prefix: String,
    /// Only objects this keeps (selectors); an object that stops or starts matching is seen as
    /// deleted or added.
    pub filter: Filter,
    /// Where the watch starts.
    pub start: StartAt,
    /// Whether to send [`WatchItem::Bookmark`]s, every [`CacheConfig::bookmark_interval`].
    pub bookmarks: bool,
}

/// A started watch: the items to send first, then the live feed.
#[derive(Debug)]
pub struct Watch {
    /// Initial state (for [`StartAt::State`]) or the retained changes after the start revision.
    pub backlog: Vec<WatchItem>,
    /// The revision the backlog brings the watcher to.
    pub revision: Revision,
    /// The changes after [`Watch::revision`], as they happen.
    pub receiver: WatchReceiver,
}

/// The live half of a watch.
#[derive(Debug)]
pub struct WatchReceiver {
    rx: mpsc::Receiver<WatchItem>,
    overflowed: Arc<AtomicBool>,
    buffer: usize,
    closed: bool,
}

impl WatchReceiver {
    /// The next item; after the cache drops a slow watcher, one [`WatchItem::Closed`] with
    /// [`CacheError::Overflow`], then `None`.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchItem>> {
        if self.closed {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) => Poll::Ready(self.end()),
            other => other,
        }
    }

    /// An item if one is ready right now.
    pub fn try_recv(&mut self) -> Option<WatchItem> {
        if self.closed {
            return None;
        }
        match self.rx.try_recv() {
            Ok(item) => Some(item),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => self.end(),
        }
    }

    /// Waits for the next item, as [`WatchReceiver::poll_recv`] gives it.
    pub async fn recv(&mut self) -> Option<WatchItem> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn end(&mut self) -> Option<WatchItem> {
        self.closed = true;
        self.overflowed
            .load(Ordering::Acquire)
            .then_some(WatchItem::Closed(CacheError::Overflow {
                buffered: self.buffer,
            }))
    }
}

/// One page of a cached list.
#[derive(Debug)]
pub struct CachedList {
    /// The objects of the page, in key order.
    pub items: Vec<Arc<CachedObject>>,
    /// The revision the cache was at when the page was read.
    pub revision: Revision,
    /// The key to continue from when the page was cut by the limit.
    pub next_key: Option<String>,
    /// Keys of the collection the page passed over, returned or filtered out.
    pub scanned: u64,
    /// Keys of the collection after the page (before filtering).
    pub remaining: u64,
}

/// Counters of one cache, for `/metrics`.
#[derive(Clone, Debug)]
pub struct CacheMetrics {
    /// The cache's resource name, as given to [`Caches::add`].
    pub resource: String,
    /// The revision the cache has caught up to.
    pub revision: Revision,
    /// Objects in the current state.
    pub objects: usize,
    /// Events in the window.
    pub window_events: usize,
    /// Open watches.
    pub watchers: usize,
    /// Events handed to watchers since the cache was made.
    pub events_dispatched: u64,
    /// Watchers closed because their buffer filled up.
    pub watchers_overflowed: u64,
    /// `(encoding, objects encoded)`.
    pub encodes: Vec<(String, u64)>,
}

struct Watcher {
    id: u64,
    tx: mpsc::Sender<WatchItem>,
    prefix: String,
    filter: Filter,
    /// Changes at or before this revision were already given to the watcher.
    after: Revision,
    bookmarks: bool,
    next_bookmark: Instant,
    overflowed: Arc<AtomicBool>,
}

#[derive(Debug)]
struct CacheEvent {
    kind: EventType,
    object: Arc<CachedObject>,
    prev: Option<Arc<CachedObject>>,
    /// For an update: the previous content at this event's revision, made the first time a
    /// watcher sees the update as the object leaving its selection.
    left: OnceLock<Option<Arc<CachedObject>>>,
}

impl CacheEvent {
    fn new(kind: EventType, object: Arc<CachedObject>, prev: Option<Arc<CachedObject>>) -> Self {
        Self {
            kind,
            object,
            prev,
            left: OnceLock::new(),
        }
    }

    fn revision(&self) -> Revision {
        self.object.revision()
    }
}

/// An object decoded from its stored value, or why it could not be.
type Decoded = Result<Arc<CachedObject>, String>;

/// The events of one cache's history from before its state, while [`Caches::start`]'s replay
/// builds them.
struct History {
    /// The revision the replay started after.
    start: Revision,
    events: VecDeque<CacheEvent>,
    /// The latest replayed version of each key that a later version replaced by the time the
    /// caches were loaded: the previous state of that key's next event.
    latest: HashMap<Arc<str>, Arc<CachedObject>>,
}

/// Values decoded per task at least, when a load decodes on every core.
const DECODE_RUN_MIN: usize = 256;

/// Keys read per page when a cache loads its state.
const LOAD_PAGE: usize = 4096;

/// A cache's state as read from the store, in key order, before it replaces the cache's.
#[derive(Default)]
struct Loaded {
    state: Vec<(Arc<str>, Arc<CachedObject>)>,
    corrupt: BTreeMap<String, String>,
}

impl Loaded {
    /// Adds decoded values that follow the ones added before in key order.
    fn add(&mut self, decoded: Vec<(String, Decoded)>) {
        for (key, decoded) in decoded {
            match decoded {
                Ok(obj) => self.state.push((obj.shared_key(), obj)),
                Err(e) => {
                    self.corrupt.insert(key, e);
                }
            }
        }
    }
}

struct Inner {
    /// The state includes every change up to this revision.
    revision: Revision,
    /// Keyed by the object's own key (one string for both).
    state: BTreeMap<Arc<str>, Arc<CachedObject>>,
    /// Keys whose stored value does not decode, with the decoder's error. They are in no
    /// list and no watch; reads of them report the error instead.
    corrupt: BTreeMap<String, String>,
    /// The revision of the last change to this cache's objects (or of its last reset).
    changed: Revision,
    window: VecDeque<CacheEvent>,
    /// A watch can start after any revision at or above this one.
    window_start: Revision,
    watchers: Vec<Watcher>,
    next_watcher: u64,
}

/// The cache of one resource type.
pub struct WatchCache {
    resource: String,
    prefix: String,
    decoder: Arc<dyn Decoder>,
    config: CacheConfig,
    inner: Mutex<Inner>,
    revision: watch::Sender<Revision>,
    encodes: Arc<EncodeCounter>,
    dispatched: AtomicU64,
    overflowed: AtomicU64,
    /// Set by [`Caches::remove`]: the feed no longer follows the cache, so it never gets
    /// further than it is.
    removed: AtomicBool,
    /// False while [`Caches::start`]'s replay of the history from before the cache's state is
    /// still to join the window; watches from before the window wait for it.
    history: watch::Sender<bool>,
    /// Asks for that replay, which runs only once some watch needs it.
    history_wanted: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("resource", &self.resource)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Which watchers an event reaches and as what: an object that stops matching a watcher's
/// filter is DELETED for it, one that starts matching is ADDED.
/// The entries of `map` whose keys start with `prefix`, from key `from` on.
///
/// The walk is a range with both ends: it compares keys only where it starts and stops. A walk
/// that tested each key for the prefix would read every key's bytes, one more cache miss per
/// object in a list of a large cache. A prefix whose successor is not simply its last byte
/// plus one (empty, or ending past ASCII) is walked that way.
fn under<'a, K, V>(
    map: &'a BTreeMap<K, V>,
    prefix: &'a str,
    from: &str,
) -> impl Iterator<Item = (&'a K, &'a V)>
where
    K: std::borrow::Borrow<str> + Ord,
{
    use std::ops::Bound;
    let from = from.max(prefix);
    let end = match prefix.as_bytes().last() {
        Some(&b) if b < 0x7f => {
            let mut end = prefix[..prefix.len() - 1].to_string();
            end.push(char::from(b + 1));
            Some(end)
        }
        _ => None,
    };
    let bounded = end.is_some();
    let range = match end {
        // Past the end: nothing (a range whose start is past its end is refused).
        Some(end) if from >= end.as_str() => {
            map.range::<str, _>((Bound::Included(prefix), Bound::Excluded(prefix)))
        }
        Some(end) => map.range::<str, _>((Bound::Included(from), Bound::Excluded(end.as_str()))),
        None => map.range::<str, _>((Bound::Included(from), Bound::Unbounded)),
    };
    range.take_while(move |(k, _)| bounded || k.borrow().starts_with(prefix))
}

fn event_for(w_filter: &Filter, prefix: &str, ev: &CacheEvent) -> Option<EventType> {
    if !ev.object.key().starts_with(prefix) {
        return None;
    }
    let was = ev.prev.as_ref().is_some_and(|p| w_filter(p));
    match ev.kind {
        EventType::Deleted => was.then_some(EventType::Deleted),
        _ => {
            let is = w_filter(&ev.object);
            match (was, is) {
                (false, true) => Some(EventType::Added),
                (true, true) => Some(EventType::Modified),
                (true, false) => Some(EventType::Deleted),
                (false, false) => None,
            }
        }
    }
}

impl WatchCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The resource name given to [`Caches::add`].
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The revision the cache has caught up to.
    pub fn revision(&self) -> Revision {
        *self.revision.borrow()
    }

    /// Waits until the cache reaches `min`, for at most `timeout`. A cache that is removed
    /// meanwhile (or was already) stops the wait at once: it will not get there.
    pub async fn wait_for(&self, min: Revision, timeout: Duration) -> Result<(), CacheError> {
        let removed = || self.removed.load(Ordering::SeqCst);
        if self.revision() < min && !removed() {
            let mut rx = self.revision.subscribe();
            let waited = rx.wait_for(|r| *r >= min || removed());
            // Timing out leaves the revision short of `min`, which the check below reports.
            let _ = tokio::time::timeout(timeout, waited).await;
        }
        let current = self.revision();
        if current >= min {
            return Ok(());
        }
        Err(CacheError::TooLarge {
            requested: min,
            current,
        })
    }

    /// Waits up to `wait` while a start from `after`, before the window, may yet be served by
    /// the history [`Caches::start`] has not replayed yet (asking for the replay first).
    async fn wait_for_history(&self, after: Revision, wait: Duration) {
        let mut replayed = self.history.subscribe();
        if *replayed.borrow_and_update() || after >= self.lock().window_start {
            return;
        }
        self.history_wanted.notify_one();
        // Timing out leaves the start before the window, which the watch then reports.
        let _ = tokio::time::timeout(wait, replayed.wait_for(|done| *done)).await;
    }

    /// One object and the revision the cache is at.
    pub fn get(&self, key: &str) -> (Option<Arc<CachedObject>>, Revision) {
        let inner = self.lock();
        (inner.state.get(key).cloned(), inner.revision)
    }

    /// The revision of the last change to the objects of this cache: equal between two calls
    /// exactly when nothing of this type changed in between (for indexes built over a type).
    pub fn changed(&self) -> Revision {
        self.lock().changed
    }

    /// Why the value stored under `key` could not be decoded, if it could not.
    pub fn corrupt(&self, key: &str) -> Option<String> {
        self.lock().corrupt.get(key).cloned()
    }

    /// The keys under `prefix` whose stored values do not decode, with the errors.
    pub fn corrupt_under(&self, prefix: &str) -> Vec<(String, String)> {
        let inner = self.lock();
        under(&inner.corrupt, prefix, prefix)
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }

    /// A page of the objects under `prefix` from `start` (inclusive; empty = the beginning)
    /// that `filter` keeps, at most `limit` (0 = all). `keys_from_start`, when the caller knows
    /// it (a continued walk over an unchanged state), is the number of keys from `start` to the
    /// end of the collection; it spares counting the keys after the page.
    pub fn list(
        &self,
        prefix: &str,
        start: &str,
        limit: usize,
        filter: &Filter,
        keys_from_start: Option<u64>,
    ) -> CachedList {
        let inner = self.lock();
        let from = if start.is_empty() { prefix } else { start };
        let mut items = Vec::new();
        let mut range = under(&inner.state, prefix, from);
        let mut next_key = None;
        let mut scanned = 0u64;
        for (key, obj) in range.by_ref() {
            scanned += 1;
            if filter(obj) {
                items.push(obj.clone());
                if limit > 0 && items.len() == limit {
                    next_key = Some(format!("{key}\0"));
                    break;
                }
            }
        }
        let remaining = match (&next_key, keys_from_start) {
            (None, _) => 0,
            (Some(_), Some(n)) => n.saturating_sub(scanned),
            (Some(_), None) => range.count() as u64,
        };
        if remaining == 0 {
            next_key = None;
        }
        CachedList {
            items,
            revision: inner.revision,
            next_key,
            scanned,
            remaining,
        }
    }

    /// Starts a watch. Waits up to `wait` for the cache to reach a revision the start names.
    pub async fn watch(&self, spec: WatchSpec, wait: Duration) -> Result<Watch, CacheError> {
        match spec.start {
            StartAt::State { min } => self.wait_for(min, wait).await?,
            StartAt::After(n) => self.wait_for_history(n, wait).await,
        }
        let (tx, rx) = mpsc::channel(self.config.watcher_buffer.max(1));
        let overflowed = Arc::new(AtomicBool::new(false));
        let mut inner = self.lock();
        let mut backlog = Vec::new();
        let after = match spec.start {
            StartAt::State { .. } => {
                for (_, obj) in under(&inner.state, &spec.prefix, &spec.prefix) {
                    if (spec.filter)(obj) {
                        backlog.push(WatchItem::Event(EventType::Added, obj.clone()));
                    }
                }
                inner.revision
            }
            StartAt::After(n) if n < inner.window_start => {
                return Err(CacheError::Expired {
                    requested: n,
                    oldest: inner.window_start,
                })
            }
            StartAt::After(n) if n >= inner.revision => n,
            StartAt::After(n) => {
                // The window is in revision order: skip to the first event after `n`.
                let first = inner.window.partition_point(|e| e.revision() <= n);
                for ev in inner.window.range(first..) {
                    if let Some(kind) = event_for(&spec.filter, &spec.prefix, ev) {
                        if let Some(obj) = self.delivered(ev, kind) {
                            backlog.push(WatchItem::Event(kind, obj));
                        }
                    }
                }
                inner.revision
            }
        };
        let id = inner.next_watcher;
        inner.next_watcher += 1;
        inner.watchers.push(Watcher {
            id,
            tx,
            prefix: spec.prefix,
            filter: spec.filter,
            after,
            bookmarks: spec.bookmarks,
            next_bookmark: Instant::now() + self.config.bookmark_interval,
            overflowed: overflowed.clone(),
        });
        Ok(Watch {
            backlog,
            revision: after,
            receiver: WatchReceiver {
                rx,
                overflowed,
                buffer: self.config.watcher_buffer,
                closed: false,
            },
        })
    }

    /// The cache's counters now.
    pub fn metrics(&self) -> CacheMetrics {
        let inner = self.lock();
        CacheMetrics {
            resource: self.resource.clone(),
            revision: inner.revision,
            objects: inner.state.len(),
            window_events: inner.window.len(),
            watchers: inner.watchers.len(),
            events_dispatched: self.dispatched.load(Ordering::Relaxed),
            watchers_overflowed: self.overflowed.load(Ordering::Relaxed),
            encodes: self.encodes.snapshot(),
        }
    }

    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Decoded {
        match self.decoder.decode(key, value, revision) {
            Ok(mut obj) => {
                obj.set_counter(self.encodes.clone());
                self.encodes.add("json");
                Ok(Arc::new(obj))
            }
            Err(e) => {
                tracing::error!(key, %e, "watch cache: stored value does not decode; skipped");
                Err(e)
            }
        }
    }

    /// Replaces the state with a fresh read at `revision`; the window restarts there.
    fn reset(&self, kvs: Vec<strata_store::KeyValue>, revision: Revision) {
        let mut loaded = Loaded::default();
        loaded.add(self.decode_all(kvs));
        self.reset_to(loaded, revision);
    }

    /// Decodes stored values in order, each with its key.
    fn decode_all(&self, kvs: Vec<strata_store::KeyValue>) -> Vec<(String, Decoded)> {
        kvs.into_iter()
            .map(|kv| {
                let decoded = self.decode(&kv.key, &kv.value, kv.mod_revision);
                (kv.key, decoded)
            })
            .collect()
    }

    /// [`WatchCache::decode_all`] on every core: the values are split into one run per core,
    /// each decoded in a task of its own on the runtime's workers (whose allocator caches serve
    /// the requests later, where threads of their own would keep theirs idle), and the runs
    /// joined in order.
    async fn decode_in_parallel(
        self: &Arc<Self>,
        mut kvs: Vec<strata_store::KeyValue>,
    ) -> Result<Vec<(String, Decoded)>, StoreError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let run = kvs.len().div_ceil(cores).max(DECODE_RUN_MIN);
        let mut runs = Vec::new();
        while kvs.len() > run {
            let rest = kvs.split_off(run);
            runs.push(std::mem::replace(&mut kvs, rest));
        }
        runs.push(kvs);
        let tasks: Vec<_> = runs
            .into_iter()
            .map(|run| {
                let cache = self.clone();
                tokio::spawn(async move { cache.decode_all(run) })
            })
            .collect();
        let mut decoded = Vec::new();
        for task in tasks {
            let run = task
                .await
                .map_err(|e| StoreError::Unavailable(format!("decoding the state: {e}")))?;
            decoded.extend(run);
        }
        Ok(decoded)
    }

    /// Replaces the state with `loaded`, read at `revision`; the window restarts there.
    fn reset_to(&self, loaded: Loaded, revision: Revision) {
        let Loaded { state, corrupt } = loaded;
        let state: BTreeMap<_, _> = state.into_iter().collect();
        let mut inner = self.lock();
        inner.state = state;
        inner.corrupt = corrupt;
        inner.changed = revision;
        inner.window.clear();
        inner.window_start = revision;
        inner.revision = revision;
        // Watchers cannot be brought across a gap: they re-list.
        for w in inner.watchers.drain(..) {
            let _ = w.tx.try_send(WatchItem::Closed(CacheError::Expired {
                requested: w.after,
                oldest: revision,
            }));
        }
        drop(inner);
        self.revision.send_replace(revision);
    }

    /// Applies a batch of the feed (already filtered to this cache's prefix) that brings the
    /// store to `revision`, and dispatches it.
    fn apply(&self, events: &[&Event], revision: Revision, compacted: Revision) {
        let mut decoded = Vec::with_capacity(events.len());
        for ev in events {
            let obj = match ev {
                Event::Put { kv, .. } => self.decode(&kv.key, &kv.value, kv.mod_revision),
                Event::Delete { prev, revision } => self.decode(&prev.key, &prev.value, *revision),
            };
            decoded.push(obj);
        }
        let now = Instant::now();
        let mut inner = self.lock();
        for (ev, obj) in events.iter().zip(decoded) {
            let key = ev.key();
            let event = match (ev, obj) {
                (Event::Put { .. }, Ok(obj)) => {
                    inner.corrupt.remove(key);
                    let prev = inner.state.insert(obj.shared_key(), obj.clone());
                    let kind = if prev.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    };
                    CacheEvent::new(kind, obj, prev)
                }
                (Event::Delete { .. }, Ok(obj)) => {
                    let prev = inner.state.remove(key);
                    CacheEvent::new(EventType::Deleted, obj, prev)
                }
                (Event::Delete { .. }, Err(_)) => {
                    // A corrupt object removed: watchers never saw it, so they get nothing.
                    inner.corrupt.remove(key);
                    inner.state.remove(key);
                    continue;
                }
                (Event::Put { .. }, Err(e)) => {
                    // Watchers that had the object get no event for the unreadable
                    // version; reads of it report the error from now on.
                    inner.corrupt.insert(key.to_string(), e);
                    inner.state.remove(key);
                    continue;
                }
            };
            self.dispatch(&mut inner, &event);
            inner.window.push_back(event);
        }
        inner.revision = inner.revision.max(revision);
        if let Some(last) = events.last() {
            inner.changed = inner.changed.max(last.revision());
        }
        self.trim(&mut inner, compacted);
        self.bookmarks(&mut inner, now);
        let r = inner.revision;
        drop(inner);
        self.revision.send_replace(r);
    }

    /// Turns a batch of the history from before the cache's state (already filtered to this
    /// cache's prefix) into window events, without dispatching them: nobody watches from there
    /// yet. A version that is still the current one is shared with the state, not decoded again.
    fn replay(&self, events: &[&Event], history: &mut History) {
        let current: Vec<Option<Arc<CachedObject>>> = {
            let inner = self.lock();
            events
                .iter()
                .map(|ev| match ev {
                    Event::Put { kv, .. } => inner
                        .state
                        .get(kv.key.as_str())
                        .filter(|obj| obj.revision() == kv.mod_revision)
                        .cloned(),
                    Event::Delete { .. } => None,
                })
                .collect()
        };
        for (ev, current) in events.iter().zip(current) {
            let key = ev.key();
            // The version before, as the replay made it, or as stored before the replay began.
            let before = |history: &mut History, prev: &strata_store::KeyValue| {
                history
                    .latest
                    .remove(key)
                    .or_else(|| self.decode(&prev.key, &prev.value, prev.mod_revision).ok())
            };
            let event = match ev {
                Event::Put { kv, prev } => {
                    let superseded = current.is_none();
                    let obj = match current {
                        Some(obj) => Ok(obj),
                        None => self.decode(&kv.key, &kv.value, kv.mod_revision),
                    };
                    let prev = prev.as_ref().and_then(|p| before(history, p));
                    let Ok(obj) = obj else {
                        // As in `apply`: an undecodable version makes no event.
                        continue;
                    };
                    // Only a version a later event replaces is ever an event's previous state.
                    if superseded {
                        history.latest.insert(obj.shared_key(), obj.clone());
                    }
                    let kind = if prev.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    };
                    CacheEvent::new(kind, obj, prev)
                }
                Event::Delete { prev, revision } => {
                    let gone = before(history, prev);
                    match self.decode(&prev.key, &prev.value, *revision) {
                        Ok(obj) => CacheEvent::new(EventType::Deleted, obj, gone),
                        Err(_) => continue,
                    }
                }
            };
            history.events.push_back(event);
        }
    }

    /// Puts the replayed history before the window's events, if the window still starts where
    /// the state was read (`loaded_at`): a reload meanwhile, or a compaction past it, leaves
    /// the window as it is. The history's oldest events go first if both do not fit.
    fn prepend(&self, history: History, loaded_at: Revision, compacted: Revision) {
        let History {
            start, mut events, ..
        } = history;
        let mut inner = self.lock();
        if inner.window_start != loaded_at {
            return;
        }
        let room = self.config.window_events.saturating_sub(inner.window.len());
        let mut start = start;
        while events.len() > room {
            if let Some(e) = events.pop_front() {
                start = start.max(e.revision());
            }
        }
        events.extend(inner.window.drain(..));
        inner.window = events;
        inner.window_start = start;
        self.trim(&mut inner, compacted);
    }

    /// The object a watcher gets for `ev` seen as `kind`: the new state, or for an update that
    /// takes the object out of the watcher's selection, the previous content at the update's
    /// revision.
    fn delivered(&self, ev: &CacheEvent, kind: EventType) -> Option<Arc<CachedObject>> {
        if kind != EventType::Deleted || ev.kind == EventType::Deleted {
            return Some(ev.object.clone());
        }
        ev.left
            .get_or_init(|| {
                let prev = ev.prev.as_ref()?;
                match self.decoder.restamp(prev, ev.revision()) {
                    Ok(mut obj) => {
                        obj.set_counter(self.encodes.clone());
                        self.encodes.add("json");
                        Some(Arc::new(obj))
                    }
                    Err(e) => {
                        tracing::error!(key = prev.key(), %e, "watch cache: restamping failed");
                        None
                    }
                }
            })
            .clone()
    }

    fn dispatch(&self, inner: &mut Inner, ev: &CacheEvent) {
        let rev = ev.revision();
        let mut dropped = Vec::new();
        for w in &inner.watchers {
            if rev <= w.after {
                continue;
            }
            let Some(kind) = event_for(&w.filter, &w.prefix, ev) else {
                continue;
            };
            let Some(obj) = self.delivered(ev, kind) else {
                continue;
            };
            match w.tx.try_send(WatchItem::Event(kind, obj)) {
                Ok(()) => {
                    self.dispatched.fetch_add(1, Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    w.overflowed.store(true, Ordering::Release);
                    self.overflowed.fetch_add(1, Ordering::Relaxed);
                    dropped.push(w.id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => dropped.push(w.id),
            }
        }
        if !dropped.is_empty() {
            inner.watchers.retain(|w| !dropped.contains(&w.id));
        }
    }

    /// Sends a bookmark at the cache's revision to each watcher that asked for them and is due.
    /// Everything up to that revision is already in the watcher's buffer, so the bookmark is
    /// never ahead of what the watcher receives.
    fn bookmarks(&self, inner: &mut Inner, now: Instant) {
        let revision = inner.revision;
        let interval = self.config.bookmark_interval;
        let mut dropped = Vec::new();
        for w in inner.watchers.iter_mut() {
            if !w.bookmarks || now < w.next_bookmark || revision < w.after {
                continue;
            }
            w.next_bookmark = now + interval;
            match w.tx.try_send(WatchItem::Bookmark(revision)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    w.overflowed.store(true, Ordering::Release);
                    self.overflowed.fetch_add(1, Ordering::Relaxed);
                    dropped.push(w.id);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => dropped.push(w.id),
            }
        }
        if !dropped.is_empty() {
            inner.watchers.retain(|w| !dropped.contains(&w.id));
        }
    }

    /// Drops the events beyond the window's size and those at or before the store's compaction
    /// point: a watch cannot resume from history the store no longer has.
    fn trim(&self, inner: &mut Inner, compacted: Revision) {
        while inner.window.len() > self.config.window_events
            || inner
                .window
                .front()
                .is_some_and(|e| e.revision() <= compacted)
        {
            if let Some(e) = inner.window.pop_front() {
                inner.window_start = inner.window_start.max(e.revision());
            }
        }
        inner.window_start = inner.window_start.max(compacted.min(inner.revision));
    }

    /// Runs while nothing is written: bookmarks, and history the store compacted meanwhile.
    fn tick(&self, compacted: Revision) {
        let now = Instant::now();
        let mut inner = self.lock();
        self.trim(&mut inner, compacted);
        // Also forget watchers whose clients went away while nothing happened.
        inner.watchers.retain(|w| !w.tx.is_closed());
        self.bookmarks(&mut inner, now);
    }
}

/// The caches of every type, fed by one reader of the store's change feed. Caches can be
/// added and removed while it runs (types registered at run time).
pub struct Caches {
    store: Arc<dyn Store>,
    config: CacheConfig,
    caches: Mutex<Vec<Arc<WatchCache>>>,
    /// Held while a batch of the feed is applied (and while the caches reload), and while a
    /// cache added at run time loads: the new cache starts exactly where the others are.
    feeding: tokio::sync::Mutex<()>,
    /// The revision the caches are fed through; meaningful once `started`.
    fed: AtomicU64,
    started: AtomicBool,
    /// Shared with every cache: a watch that needs the history from before the start asks for
    /// its replay through it.
    history_wanted: Arc<tokio::sync::Notify>,
    /// What every cache's objects keep beyond their JSON.
    kept: Arc<KeptEncodings>,
}

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches")
            .field("config", &self.config)
            .finish()
    }
}

impl Caches {
    /// Caches over `store`, none yet: add them with [`Caches::add`], then [`Caches::start`].
    pub fn new(store: Arc<dyn Store>, config: CacheConfig) -> Self {
        let kept = Arc::new(KeptEncodings::new(config.kept_encodings_bytes));
        Self {
            store,
            config,
            caches: Mutex::new(Vec::new()),
            feeding: tokio::sync::Mutex::new(()),
            fed: AtomicU64::new(0),
            started: AtomicBool::new(false),
            history_wanted: Arc::default(),
            kept,
        }
    }

    /// The budget of the encodings the caches' objects keep beyond their JSON.
    pub fn kept_encodings(&self) -> &KeptEncodings {
        &self.kept
    }

    /// The configuration every cache shares.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Adds the cache of the type whose keys start with `prefix`, to be loaded by
    /// [`Caches::start`]. Once the caches run, use [`Caches::add_running`].
    pub fn add(&self, resource: &str, prefix: &str, decoder: Arc<dyn Decoder>) -> Arc<WatchCache> {
        let cache = self.new_cache(resource, prefix, decoder);
        self.list_caches().push(cache.clone());
        cache
    }

    /// Adds a cache while the feed runs: its state is read at the revision the other caches
    /// are at, with the feed paused meanwhile, so it misses no change and sees none twice.
    /// Before [`Caches::start`] it is [`Caches::add`].
    pub async fn add_running(
        &self,
        resource: &str,
        prefix: &str,
        decoder: Arc<dyn Decoder>,
    ) -> Result<Arc<WatchCache>, StoreError> {
        let _feed_paused = self.feeding.lock().await;
        if !self.started.load(Ordering::SeqCst) {
            return Ok(self.add(resource, prefix, decoder));
        }
        let cache = self.new_cache(resource, prefix, decoder);
        let at = Revision(self.fed.load(Ordering::SeqCst));
        let kvs = self
            .store
            .range(RangeRequest {
                prefix: prefix.to_string(),
                revision: Some(at),
                ..Default::default()
            })
            .await?
            .kvs;
        cache.reset(kvs, at);
        self.list_caches().push(cache.clone());
        Ok(cache)
    }

    /// Removes a cache: the feed no longer follows its prefix, and its watches end.
    pub fn remove(&self, cache: &Arc<WatchCache>) {
        self.list_caches().retain(|c| !Arc::ptr_eq(c, cache));
        cache.lock().watchers.clear();
        // Whoever waits for the cache to move on waits in vain: wake them.
        cache.removed.store(true, Ordering::SeqCst);
        cache.revision.send_modify(|_| {});
    }

    fn new_cache(
        &self,
        resource: &str,
        prefix: &str,
        decoder: Arc<dyn Decoder>,
    ) -> Arc<WatchCache> {
        Arc::new(WatchCache {
            resource: resource.to_string(),
            prefix: prefix.to_string(),
            decoder,
            config: self.config.clone(),
            inner: Mutex::new(Inner {
                revision: Revision::ZERO,
                state: BTreeMap::new(),
                corrupt: BTreeMap::new(),
                changed: Revision::ZERO,
                window: VecDeque::new(),
                window_start: Revision::ZERO,
                watchers: Vec::new(),
                next_watcher: 0,
            }),
            revision: watch::Sender::new(Revision::ZERO),
            encodes: Arc::new(EncodeCounter::sharing(self.kept.clone())),
            dispatched: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
            removed: AtomicBool::new(false),
            history: watch::Sender::new(true),
            history_wanted: self.history_wanted.clone(),
        })
    }

    fn list_caches(&self) -> std::sync::MutexGuard<'_, Vec<Arc<WatchCache>>> {
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every cache, in the order they were added.
    pub fn all(&self) -> Vec<Arc<WatchCache>> {
        self.list_caches().clone()
    }

    /// Loads every cache and starts the feed reader. Each cache's state is read at the store's
    /// latest revision, in pages, each page decoded on every core while the store reads the
    /// next; then the caches serve. The history the store retains from before that revision is replayed into
    /// their windows when the first watch from there asks for it (and waits for it), so a watch
    /// can resume from any revision the store still has, across restarts, while a start that
    /// no such watch follows reads and holds none of it.
    pub async fn start(self: &Arc<Self>) -> Result<(), StoreError> {
        let caches = self.all();
        for cache in &caches {
            cache.history.send_replace(false);
        }
        let loaded = {
            let _feeding = self.feeding.lock().await;
            let loaded = self.load_latest(&caches).await;
            if loaded.is_ok() {
                self.started.store(true, Ordering::SeqCst);
            }
            loaded
        };
        let after = match loaded {
            Ok(after) => after,
            Err(e) => {
                for cache in &caches {
                    cache.history.send_replace(true);
                }
                return Err(e);
            }
        };
        let this = self.clone();
        tokio::spawn(async move { this.feed(after).await });
        // Until a watch asks, the replay holds the caches weakly: one removed meanwhile (its
        // type deleted) is freed, not kept for a replay nobody needs.
        let waiting: Vec<std::sync::Weak<WatchCache>> = caches.iter().map(Arc::downgrade).collect();
        let this = self.clone();
        tokio::spawn(async move {
            this.history_wanted.notified().await;
            let caches = waiting
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .collect();
            this.replay_history(caches, after).await
        });
        Ok(())
    }

    /// Reads every cache's state at the store's latest revision (at a later one if compaction
    /// overtakes the read) and returns that revision.
    async fn load_latest(&self, caches: &[Arc<WatchCache>]) -> Result<Revision, StoreError> {
        'read: loop {
            let at = self.store.consistent_revision().await?;
            let mut states = Vec::with_capacity(caches.len());
            for cache in caches {
                match self.read_state(cache, at).await {
                    Err(StoreError::Compacted { .. }) => continue 'read,
                    read => states.push(read?),
                }
            }
            for (cache, loaded) in caches.iter().zip(states) {
                cache.reset_to(loaded, at);
            }
            self.fed.store(at.get(), Ordering::SeqCst);
            return Ok(at);
        }
    }

    /// One cache's state at `at`, read in pages of [`LOAD_PAGE`] keys: the store reads the next
    /// page while this one is decoded.
    async fn read_state(
        &self,
        cache: &Arc<WatchCache>,
        at: Revision,
    ) -> Result<Loaded, StoreError> {
        let mut loaded = Loaded::default();
        if at == Revision::ZERO {
            return Ok(loaded);
        }
        let mut next = Some(self.read_page(&cache.prefix, String::new(), at));
        while let Some(page) = next.take() {
            let page = page
                .await
                .map_err(|e| StoreError::Unavailable(format!("reading the state: {e}")))??;
            if page.kvs.len() == LOAD_PAGE {
                if let Some(last) = page.kvs.last() {
                    next = Some(self.read_page(&cache.prefix, format!("{}\0", last.key), at));
                }
            }
            loaded.add(cache.decode_in_parallel(page.kvs).await?);
        }
        Ok(loaded)
    }

    /// Starts reading one page of the keys under `prefix` from `start` at `at`, in a task of
    /// its own.
    fn read_page(
        &self,
        prefix: &str,
        start: String,
        at: Revision,
    ) -> tokio::task::JoinHandle<Result<strata_store::RangeResponse, StoreError>> {
        let store = self.store.clone();
        let request = RangeRequest {
            prefix: prefix.to_string(),
            start,
            limit: LOAD_PAGE,
            revision: Some(at),
            skip_remaining: true,
        };
        tokio::spawn(async move { store.range(request).await })
    }

    /// Replays the history the store retains up to `loaded_at`, the revision the caches were
    /// loaded at, into their windows, then lets the watches that wait for it go on.
    async fn replay_history(self: Arc<Self>, caches: Vec<Arc<WatchCache>>, loaded_at: Revision) {
        match self.read_history(&caches, loaded_at).await {
            Ok(histories) => {
                let compacted = self.store.compacted_revision();
                for (cache, history) in caches.iter().zip(histories) {
                    cache.prepend(history, loaded_at, compacted);
                }
            }
            // Watches from before the state then get `Expired`, as after a compaction.
            Err(e) => {
                tracing::warn!(%e, "watch cache: the history before the start is not replayed")
            }
        }
        for cache in &caches {
            cache.history.send_replace(true);
        }
    }

    /// The events of each cache after the compaction point up to `until`. The store reads the
    /// next batch while this one is applied, so two cores share the work.
    async fn read_history(
        &self,
        caches: &[Arc<WatchCache>],
        until: Revision,
    ) -> Result<Vec<History>, StoreError> {
        let start = self.store.compacted_revision();
        let mut histories: Vec<History> = caches
            .iter()
            .map(|_| History {
                start,
                events: VecDeque::new(),
                latest: HashMap::new(),
            })
            .collect();
        if start >= until {
            return Ok(histories);
        }
        let mut next = Some(self.read_changes(start));
        while let Some(pending) = next.take() {
            let changes = pending
                .await
                .map_err(|e| StoreError::Unavailable(format!("replay read: {e}")))??;
            let full = changes.events.len() == self.config.feed_batch;
            if full && changes.revision < until {
                next = Some(self.read_changes(changes.revision));
            }
            let events: Vec<&Event> = changes
                .events
                .iter()
                .take_while(|e| e.revision() <= until)
                .collect();
            for (cache, history) in caches.iter().zip(&mut histories) {
                let mine: Vec<&Event> = events
                    .iter()
                    .copied()
                    .filter(|e| e.key().starts_with(&cache.prefix))
                    .collect();
                cache.replay(&mine, history);
            }
        }
        Ok(histories)
    }

    /// Reloads every cache once the feed fell behind compaction: the state at the compaction
    /// point (which closes the watches), then the retained history replayed on top at once.
    async fn load(&self) -> Result<Revision, StoreError> {
        loop {
            let compacted = self.store.compacted_revision();
            match self.load_at(compacted).await {
                Err(StoreError::Compacted { .. }) => continue,
                Err(e) => return Err(e),
                Ok(()) => {}
            }
            // Replay the retained history into the windows. The store reads the next batch
            // while this one is decoded and applied, so a start with a long history keeps two
            // cores busy instead of taking turns on one.
            let mut after = compacted;
            let mut pending = self.read_changes(after);
            loop {
                let changes = match pending.await {
                    Ok(Err(StoreError::Compacted { .. })) => break,
                    Ok(read) => read?,
                    Err(e) => return Err(StoreError::Unavailable(format!("replay read: {e}"))),
                };
                after = after.max(changes.revision);
                if changes.events.len() < self.config.feed_batch {
                    self.apply(&changes.events, after);
                    return Ok(after);
                }
                pending = self.read_changes(after);
                self.apply(&changes.events, after);
            }
            // Compaction overtook the replay: start over from the new compaction point.
        }
    }

    /// Starts reading the store's next batch of changes after `after`, in a task of its own.
    fn read_changes(
        &self,
        after: Revision,
    ) -> tokio::task::JoinHandle<Result<Changes, StoreError>> {
        let (store, batch) = (self.store.clone(), self.config.feed_batch);
        tokio::spawn(async move { store.changes(after, batch).await })
    }

    async fn load_at(&self, revision: Revision) -> Result<(), StoreError> {
        for cache in self.all() {
            let kvs = if revision == Revision::ZERO {
                Vec::new()
            } else {
                self.store
                    .range(RangeRequest {
                        prefix: cache.prefix.clone(),
                        revision: Some(revision),
                        ..Default::default()
                    })
                    .await?
                    .kvs
            };
            cache.reset(kvs, revision);
        }
        Ok(())
    }

    /// Applies a batch to every cache; the caller holds `feeding`.
    fn apply(&self, events: &[Event], revision: Revision) {
        self.fed.store(revision.get(), Ordering::SeqCst);
        let compacted = self.store.compacted_revision();
        for cache in self.all() {
            let mine: Vec<&Event> = events
                .iter()
                .filter(|e| e.key().starts_with(&cache.prefix))
                .collect();
            cache.apply(&mine, revision, compacted);
        }
    }

    /// Reads the feed for as long as the process runs.
    async fn feed(self: Arc<Self>, mut after: Revision) {
        let mut notify = self.store.subscribe();
        let tick = (self.config.bookmark_interval / 2).max(Duration::from_millis(10));
        loop {
            match self.store.changes(after, self.config.feed_batch).await {
                Ok(changes) => {
                    // Progress without events (a shared keyspace moved on) advances the caches
                    // too, so reads waiting for a revision are not kept waiting.
                    if changes.revision > after || !changes.events.is_empty() {
                        after = after.max(changes.revision);
                        let _feeding = self.feeding.lock().await;
                        self.apply(&changes.events, after);
                    }
                    if changes.events.len() == self.config.feed_batch {
                        continue;
                    }
                }
                Err(StoreError::Compacted { .. }) => {
                    // Compaction passed the feed (it fell far behind): start over.
                    tracing::warn!(
                        after = after.get(),
                        "watch cache fell behind compaction; reloading"
                    );
                    let reloaded = {
                        let _feeding = self.feeding.lock().await;
                        self.load().await
                    };
                    match reloaded {
                        Ok(r) => after = r,
                        Err(e) => {
                            tracing::error!(%e, "watch cache reload failed");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                    continue;
                }
                Err(e) => {
                    tracing::error!(%e, "watch cache: reading the change feed failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
            tokio::select! {
                changed = notify.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep(tick) => {
                    let compacted = self.store.compacted_revision();
                    for cache in self.all() {
                        cache.tick(compacted);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys<'a>(map: &'a BTreeMap<String, ()>, prefix: &'a str, from: &str) -> Vec<&'a str> {
        under(map, prefix, from).map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn under_walks_exactly_the_prefix() {
        let map: BTreeMap<String, ()> = [
            "/a",
            "/a/",
            "/a/x",
            "/a/y",
            "/a/\u{e9}",
            "/a0",
            "/a.",
            "/b/x",
            "/\u{e9}/",
            "/\u{e9}/z",
            "/\u{e9}0",
        ]
        .into_iter()
        .map(|k| (k.to_string(), ()))
        .collect();
        let all = ["/a/", "/a/x", "/a/y", "/a/\u{e9}"];
        assert_eq!(keys(&map, "/a/", ""), all);
        assert_eq!(keys(&map, "/a/", "/a/"), all);
        assert_eq!(keys(&map, "/a/", "/a/x\0"), ["/a/y", "/a/\u{e9}"]);
        // A start before the prefix starts at the prefix; one past it finds nothing.
        assert_eq!(keys(&map, "/a/", "/"), all);
        assert!(keys(&map, "/a/", "/a0").is_empty());
        assert!(keys(&map, "/a/", "/z").is_empty());
        assert!(keys(&map, "/c/", "").is_empty());
        // Prefixes without a plain successor are walked key by key.
        assert_eq!(
            keys(&map, "/\u{e9}", ""),
            ["/\u{e9}/", "/\u{e9}/z", "/\u{e9}0"]
        );
        assert_eq!(
            keys(&map, "", "/b"),
            map.keys().skip(7).map(String::as_str).collect::<Vec<_>>()
        );
    }
}
