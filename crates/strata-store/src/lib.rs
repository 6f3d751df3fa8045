//! The storage contract of Strata: a revisioned key-value store with multi-version reads.
//!
//! Every engine (the in-memory reference engine here; RocksDB and etcd in Strata's
//! `strata-store-rocksdb` and `strata-store-etcd`) implements [`Store`] and passes the shared
//! suite in [`conformance`]. Engines store bytes under keys: they never
//! decode objects.
//!
//! The model is etcd's: one global [`Revision`] counter that every successful write advances;
//! each key remembers the revision that created it and the one that last modified it; reads name
//! a revision (or the latest); history older than the compaction point is gone.
//!
//! Revisions are ordered, not counted. The embedded engine numbers its writes 1, 2, 3…, but an
//! engine over a shared keyspace (etcd, where other prefixes and other clients write too) sees
//! its own writes with gaps between them and a history that starts anywhere. Nothing above this
//! crate may assume more than order: the conformance suite runs against a `MemoryStore` that
//! starts at 1000 and numbers in steps of three.
//!
//! # The change feed and the compaction point
//!
//! [`Store::changes`] is the one way to follow the store: the events after a revision, and the
//! revision through which that answer is complete. A scanning engine (RocksDB, memory) reads its
//! event log. An engine that is pushed events (an etcd watch) keeps one watch open from the last
//! revision it delivered and buffers what arrives; its progress notifications advance the
//! "complete through" revision when the prefix sees no writes while the shared revision moves.
//! The compaction point is what the engine knows of the backend's compaction: the revision it
//! last compacted to itself, raised whenever a read or a watch reports a newer one (etcd's
//! `ErrCompacted` and a watch cancelled with `compact_revision`); a feed read from before it
//! fails with [`StoreError::Compacted`], and the reader reloads.
//!
//! # Example
//!
//! The in-memory engine, [`MemoryStore`], shows the contract: a compare-and-swap update, a
//! read at a past revision, and the change feed.
//!
//! ```
//! use strata_store::{Bytes, Event, MemoryStore, Store, StoreError};
//!
//! # strata_store::tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let created = store.create("/registry/things/a", Bytes::from("one")).await?;
//! let updated = store
//!     .update("/registry/things/a", Bytes::from("two"), created.mod_revision)
//!     .await?;
//! assert!(updated.mod_revision > created.mod_revision);
//!
//! // A second update that names the old revision loses the race.
//! let stale = store
//!     .update("/registry/things/a", Bytes::from("three"), created.mod_revision)
//!     .await;
//! assert!(matches!(stale, Err(StoreError::Conflict { .. })));
//!
//! // The history is still there, until it is compacted.
//! let (then, _) = store.get("/registry/things/a", Some(created.mod_revision)).await?;
//! assert_eq!(then.unwrap().value, Bytes::from("one"));
//!
//! // The feed: every change after a revision, in order.
//! let changes = store.changes(created.mod_revision, 0).await?;
//! assert!(matches!(&changes.events[..], [Event::Put { prev: Some(_), .. }]));
//! assert_eq!(changes.revision, updated.mod_revision);
//! # Ok::<(), StoreError>(())
//! # }).unwrap();
//! ```
//!
//! # Writing an engine
//!
//! Implement [`Store`] (with the re-exported [`async_trait`](macro@async_trait) attribute) and instantiate the
//! conformance suite over it with [`store_conformance_tests!`]; see [`conformance`].
//!
//! # Dependencies
//!
//! The trait's signatures use [`Bytes`] (from `bytes`) and a `tokio` watch channel, and engines
//! implement it with `async-trait`: the three are re-exported ([`bytes`], [`tokio`],
//! [`async_trait`](macro@async_trait)) so an engine needs no versions of its own that could disagree.

#![deny(missing_docs)]

pub mod conformance;
mod memory;
mod revision;

pub use async_trait::async_trait;
pub use bytes::{self, Bytes};
pub use tokio;

pub use memory::MemoryStore;
pub use revision::Revision;

/// The README's examples, run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// One key's state at some revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, as given to the write that stored it.
    pub key: String,
    /// The stored bytes, as given (engines never decode them).
    pub value: Bytes,
    /// The revision of the write that created this incarnation of the key.
    pub create_revision: Revision,
    /// The revision of the last write to the key.
    pub mod_revision: Revision,
}

/// One entry of the change feed, in revision order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A create (`prev` is `None`) or an update (`prev` is the state before it).
    Put {
        /// The key's state after the write.
        kv: KeyValue,
        /// The key's state before the write; `None` for a create.
        prev: Option<KeyValue>,
    },
    /// A deletion at `revision`; `prev` is the last state before it.
    Delete {
        /// The key's last state before the deletion.
        prev: KeyValue,
        /// The revision of the deletion.
        revision: Revision,
    },
}

impl Event {
    /// The revision this event happened at.
    pub fn revision(&self) -> Revision {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }

    /// The key this event changed.
    pub fn key(&self) -> &str {
        match self {
            Event::Put { kv, .. } => &kv.key,
            Event::Delete { prev, .. } => &prev.key,
        }
    }
}

/// One read of the change feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    /// The changes after the requested revision, in revision order.
    pub events: Vec<Event>,
    /// The feed is complete through this revision: every change at or below it is in `events`
    /// or at or below the requested one. When a limit cut `events` short, it is the last
    /// event's revision; otherwise at least the revision of every write acknowledged before
    /// the read, even if this store saw no change since (a shared keyspace moved on).
    pub revision: Revision,
}

/// A range read: keys starting with `prefix`, from `start` (inclusive) on, in key order.
#[derive(Clone, Debug, Default)]
pub struct RangeRequest {
    /// Only keys that start with this string (empty: every key).
    pub prefix: String,
    /// The first key to return; empty means the start of the prefix. Must start with `prefix`
    /// when set.
    pub start: String,
    /// At most this many entries; 0 means no limit. A page holds fewer only when the range
    /// has no more keys.
    pub limit: usize,
    /// Read at this revision; `None` reads the latest.
    pub revision: Option<Revision>,
    /// The caller does not need [`RangeResponse::remaining`]: an engine may answer 0 instead of
    /// counting the keys after a full page (a reader that walks a whole range page by page
    /// would otherwise pay for counting the rest of it with every page).
    pub skip_remaining: bool,
}

/// The answer to a [`RangeRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeResponse {
    /// The entries, in key order.
    pub kvs: Vec<KeyValue>,
    /// The revision the range was read at (the latest revision when none was asked for).
    pub revision: Revision,
    /// How many keys of the range at that revision follow the returned ones (0 when none).
    pub remaining: u64,
}

/// What went wrong in storage. Engines map their own failures onto these kinds; the registry
/// turns them into `Status` responses in one place.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// The key does not exist (an update or delete of an absent key).
    #[error("key {0:?} not found")]
    NotFound(String),
    /// The key exists already (a create of a present key).
    #[error("key {0:?} already exists")]
    Exists(String),
    /// A compare-and-swap saw a different modification revision.
    #[error("key {key:?} was modified: expected revision {expected}, found {actual}")]
    Conflict {
        /// The key written.
        key: String,
        /// The modification revision the write expected.
        expected: Revision,
        /// The key's actual modification revision.
        actual: Revision,
    },
    /// The requested revision is older than the compaction point.
    #[error("revision {requested} has been compacted (oldest available {compacted})")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The compaction point: the oldest revision still readable.
        compacted: Revision,
    },
    /// The requested revision is newer than the latest.
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The latest revision of the store.
        current: Revision,
    },
    /// The request itself is wrong (a range start outside its prefix, a compaction beyond the
    /// current revision).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// Stored data could not be read back.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The value is larger than the engine accepts in one request (etcd's `--max-request-bytes`,
    /// 1.5 MiB by default).
    #[error("{0}")]
    TooLarge(String),
    /// A write the engine did not confirm in time: it may or may not have been applied.
    #[error("{0}")]
    Timeout(String),
    /// The engine cannot serve right now (I/O failure, shutdown).
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// The result of a store operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A revisioned key-value store.
///
/// Writes are linearizable and durable when they return `Ok`: a crash after that never loses
/// them. Every successful write gets a revision above every earlier one; a failed write leaves
/// no trace in the history or the feed. The [crate documentation](crate#example) has an example;
/// [`MemoryStore`] is the reference implementation.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates `key` if it does not exist. Returns the new entry (create and mod revision equal).
    /// Fails with `Exists` when the key is present.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replaces the value of `key` if its modification revision is `expected`.
    /// Fails with `NotFound` when absent and `Conflict` when the revision differs.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue>;

    /// Writes successive values of one key as consecutive updates: the first expects the key's
    /// modification revision to be `expected`, each later one the revision of the value before
    /// it. Returns the entries written, in order. A prefix may be written when a later update
    /// fails (another writer moved the key between two of them): the answer is then shorter
    /// than `values`, and an error is returned only when nothing was written. Engines that can
    /// write the whole chain in one atomic step (one WAL sync for all of it) should; the
    /// default writes the values one by one.
    ///
    /// This is how the registry writes many updates of one contended object at the rate of
    /// one: it orders them, computes each on top of the one before, and stores them together.
    async fn update_chain(
        &self,
        key: &str,
        values: Vec<Bytes>,
        expected: Revision,
    ) -> Result<Vec<KeyValue>> {
        let mut written: Vec<KeyValue> = Vec::with_capacity(values.len());
        for value in values {
            let expected = written.last().map_or(expected, |kv| kv.mod_revision);
            match self.update(key, value, expected).await {
                Ok(kv) => written.push(kv),
                Err(e) if written.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(written)
    }

    /// Deletes `key`, optionally only if its modification revision is `expected`.
    /// Returns the last state before deletion and the revision of the deletion.
    /// Fails with `NotFound` when absent and `Conflict` when the revision differs.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)>;

    /// Reads `key` at `revision` (latest when `None`). Returns the entry, if it existed then, and
    /// the revision read at. Fails with `Compacted` / `FutureRevision` for revisions outside the
    /// retained history.
    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)>;

    /// Reads a key range at one revision. Same revision errors as [`Store::get`].
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// The changes with revisions greater than `after`, in order, at most `limit` (0 = all),
    /// and how far the answer is complete (see [`Changes`]). Fails with `Compacted` when changes
    /// after `after` are no longer all retained, i.e. when `after` is older than the compaction
    /// point.
    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes>;

    /// The latest revision this store knows of: at least that of each of its own acknowledged
    /// writes (0 for an empty embedded store that never had a write).
    fn current_revision(&self) -> Revision;

    /// The latest revision as a linearizable read: every write acknowledged before the call is
    /// at or below it. An embedded engine knows it locally; a replicated one (etcd) asks its
    /// quorum. Consistent reads from the watch cache wait until the cache reaches it.
    async fn consistent_revision(&self) -> Result<Revision> {
        Ok(self.current_revision())
    }

    /// Asks the change feed to show, soon, that it is complete through the revision
    /// [`Store::consistent_revision`] reports, even when no change under this store's keys
    /// produced that revision (a shared keyspace moved on). Returns `false` when the engine
    /// cannot prove that safely: a cache waiting for such a revision then waits in vain, and
    /// consistent reads should go to the store itself after a short wait. Embedded engines own
    /// their keyspace: their feed always reaches the consistent revision.
    fn request_progress(&self) -> bool {
        true
    }

    /// Whether the stored value behind `kv` (an entry this store returned) must be rewritten by
    /// the next update even when that update stores the same bytes. A wrapper that transforms
    /// values says so for a value it read with a key it no longer writes with (encryption at
    /// rest after a key rotation, Kubernetes' "stale" data). Engines store what they are given:
    /// never.
    async fn stale(&self, _kv: &KeyValue) -> Result<bool> {
        Ok(false)
    }

    /// The compaction point: reads at revisions below it fail with `Compacted`.
    fn compacted_revision(&self) -> Revision;

    /// Discards history older than `revision`: afterwards reads at revisions `< revision` fail
    /// with `Compacted`, reads at `revision` or later still work. Compacting to a revision at or
    /// below the current compaction point is a no-op; beyond the current revision is `Invalid`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// A receiver that observes the latest revision; it changes after every write, so watchers
    /// can wake and call [`Store::changes`].
    fn subscribe(&self) -> tokio::sync::watch::Receiver<Revision>;
}
