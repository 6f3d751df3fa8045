//! `strata-store-rocksdb`: the durable [`Store`] engine of Strata, on RocksDB. It keeps each
//! key's versions (MVCC) until compaction; it stores bytes, never decodes objects, and does not
//! replicate.
//!
//! # On-disk layout
//!
//! One RocksDB database with three column families (integers are `u64` big-endian, so byte order
//! is numeric order):
//!
//! | family    | key                         | value                                          |
//! |-----------|-----------------------------|------------------------------------------------|
//! | `history` | `<key> 0x00 <revision>`     | `0x00 <create_revision> <value>` (live) or `0x01` (deleted) |
//! | `changes` | `<revision>`                | `<kind> <key>`, kind `0x00` put, `0x01` delete  |
//! | `meta`    | `format`, `current`, `compacted` | the layout version, the latest revision, the compaction point |
//!
//! Keys may not contain `0x00` (writes and gets of such keys fail with `Invalid`); that makes all
//! versions of a key contiguous and ordered by revision, and keeps key order equal to string
//! order. A key's state at revision `r` is its newest `history` entry at or below `r` (one
//! `seek_for_prev`, which skips the tables whose bloom filter of user keys, `history`'s prefix
//! extractor, says they lack the key). An event's previous state is the `history` entry just
//! before the one the change wrote. There is no in-memory index: opening reads three `meta`
//! values, whatever the size of the store.
//!
//! # Writes: one writer thread, group commit
//!
//! All writes go through a channel to one thread. It drains what is queued, checks every request
//! in order against the committed state plus the earlier requests of the batch, gives the ones
//! that pass consecutive revisions (a failed check consumes none), and writes the whole batch,
//! with `meta/current`, as one `WriteBatch`, synced to the WAL when [`RocksOptions::sync`] is on.
//! Only then does it publish the revision (to [`Store::current_revision`] and
//! [`Store::subscribe`]) and answer every request of the batch. Writers that arrive during a sync
//! share the next one; [`RocksStore::stats`] counts batches and writes, and how long the batches
//! took to commit.
//!
//! # Reads
//!
//! Reads run over a RocksDB snapshot taken after loading the published revision, so they see
//! every acknowledged write, and nothing later than what they report. Ranges run on tokio's
//! blocking pool; a point read ([`Store::get`]) runs where it is asked as long as the memtables
//! and the block cache can answer it, and moves to the blocking pool only when it would read the
//! disk ([`RocksStats::disk_gets`] counts those).
//! The change feed is the exception while it follows the writer closely: the writer keeps the
//! events of its latest batches in memory (the newest 4,096, at most 16 MiB of keys and values),
//! before publishing their revision, and [`Store::changes`] answers from them, without a snapshot,
//! when they cover the whole request. Older revisions, and every feed after a restart, are read
//! from `changes` and `history`.
//!
//! # Compaction and recovery
//!
//! [`Store::compact`] persists and publishes the new compaction point, then deletes the versions
//! and change records only reads below it could see. After a restart, `open` resumes from
//! `meta/current` and `meta/compacted`; RocksDB's WAL replay restores every synced batch.
//!
//! # Read-only views
//!
//! [`RocksStore::open_read_only`] opens the directory in RocksDB's read-only mode, which takes no
//! lock: it sees the store as it was when opened (including a running server's acknowledged
//! writes, replayed from its WAL), serves every read, and refuses writes and compaction.
//! `strata snapshot save` reads a running server's data directory this way.

mod compact;
mod encoding;
mod read;
mod recent;
mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    DBRawIteratorWithThreadMode, DBWithThreadMode, ErrorKind, Options, SingleThreaded,
    SliceTransform, WriteBatch, WriteOptions,
};
use strata_store::{
    Changes, Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store, StoreError,
};
use tokio::sync::{oneshot, watch};

use crate::encoding::{
    check_key, decode_u64, history_prefix, is_history_key, CF_CHANGES, CF_HISTORY, CF_META,
    FORMAT_VERSION, META_COMPACTED, META_CURRENT, META_FORMAT,
};
use crate::read::View;
use crate::writer::{Op, Reply, Request};

/// Named explicitly so another crate enabling `multi-threaded-cf` cannot change our types.
pub(crate) type Db = DBWithThreadMode<SingleThreaded>;
pub(crate) type Iter<'a> = DBRawIteratorWithThreadMode<'a, Db>;

/// The block cache all column families share.
const BLOCK_CACHE_BYTES: usize = 8 << 20;

/// How to open a [`RocksStore`].
#[derive(Clone, Debug)]
pub struct RocksOptions {
    /// Fsync the WAL before acknowledging a write (default `true`). Without it a machine crash
    /// may lose acknowledged writes; a process crash still does not.
    pub sync: bool,
    /// Open with RocksDB's background compactions held back until
    /// [`RocksStore::resume_compactions`] (default `false`). A server opens its store this way
    /// so that the read of the whole store at start-up does not share the CPU with the
    /// compaction that the writes before a restart left due.
    pub defer_compactions: bool,
}

impl Default for RocksOptions {
    fn default() -> Self {
        Self {
            sync: true,
            defer_compactions: false,
        }
    }
}

/// The upper bounds, in seconds, of the buckets [`RocksStats::commit_buckets`] counts commit
/// times in: 1 ms doubling up to 8.192 s, the buckets etcd uses for its WAL fsyncs
/// (`etcd_disk_wal_fsync_duration_seconds`), so that the two engines' figures compare.
pub const COMMIT_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192,
];

/// Counters since open, to observe group commit and where point reads are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RocksStats {
    /// Write batches committed (each one WAL sync when `sync` is on).
    pub batches: u64,
    /// How long the committed batches took to write (WAL, memtables and, with `sync`, the
    /// WAL's fsync), in nanoseconds, all together.
    pub commit_nanos: u64,
    /// The committed batches by how long they took: `commit_buckets[i]` counts those that took
    /// more than `COMMIT_BUCKETS[i - 1]` and at most [`COMMIT_BUCKETS`]`[i]` seconds. Slower
    /// ones are counted only in `batches`.
    pub commit_buckets: [u64; COMMIT_BUCKETS.len()],
    /// Successful writes, i.e. revisions handed out.
    pub writes: u64,
    /// Point reads (`get`) that needed the disk and ran on the blocking pool; the others were
    /// answered from memory where they were asked.
    pub disk_gets: u64,
}

/// State shared by the store handle, the writer thread and blocking read tasks.
pub(crate) struct Shared {
    pub(crate) db: Db,
    sync: bool,
    /// The latest published revision: every write up to it is committed.
    pub(crate) current: AtomicU64,
    /// The compaction point as readers must honour it.
    pub(crate) compacted: AtomicU64,
    pub(crate) notify: watch::Sender<Revision>,
    pub(crate) batches: AtomicU64,
    /// See [`RocksStats::commit_nanos`] and [`RocksStats::commit_buckets`].
    pub(crate) commit_nanos: AtomicU64,
    pub(crate) commit_buckets: [AtomicU64; COMMIT_BUCKETS.len()],
    pub(crate) writes: AtomicU64,
    pub(crate) disk_gets: AtomicU64,
    /// The newest events, as the writer committed them.
    recent: Mutex<recent::Recent>,
}

impl Shared {
    /// Reads the layout version, the current revision and the compaction point of an opened
    /// database; `writable` records the layout version of a new one.
    fn load(db: Db, sync: bool, path: &Path, writable: bool) -> Result<Shared> {
        let shared = Shared {
            db,
            sync,
            current: AtomicU64::new(0),
            compacted: AtomicU64::new(0),
            notify: watch::channel(Revision::ZERO).0,
            batches: AtomicU64::new(0),
            commit_nanos: AtomicU64::new(0),
            commit_buckets: Default::default(),
            writes: AtomicU64::new(0),
            disk_gets: AtomicU64::new(0),
            recent: Mutex::default(),
        };
        let meta = shared.cf(CF_META)?;
        let read = |name: &[u8]| -> Result<Option<u64>> {
            match shared.db.get_pinned_cf(meta, name).map_err(db_err)? {
                Some(raw) => Ok(Some(decode_u64(&raw)?)),
                None => Ok(None),
            }
        };
        match read(META_FORMAT)? {
            Some(FORMAT_VERSION) => {}
            Some(other) => {
                return Err(StoreError::Corrupt(format!(
                    "{} holds layout version {other}, this engine reads {FORMAT_VERSION}",
                    path.display()
                )))
            }
            None if !writable => {
                return Err(StoreError::Corrupt(format!(
                    "{} is not a Strata store (it records no layout version)",
                    path.display()
                )))
            }
            None => {
                let mut batch = WriteBatch::default();
                batch.put_cf(meta, META_FORMAT, FORMAT_VERSION.to_be_bytes());
                shared
                    .db
                    .write_opt(batch, &shared.write_options())
                    .map_err(db_err)?;
            }
        }
        let current = read(META_CURRENT)?.unwrap_or(0);
        let compacted = read(META_COMPACTED)?.unwrap_or(0);
        if compacted > current {
            return Err(StoreError::Corrupt(format!(
                "compaction point {compacted} is beyond the current revision {current}"
            )));
        }
        shared.current.store(current, Ordering::SeqCst);
        shared.compacted.store(compacted, Ordering::SeqCst);
        shared.notify.send_replace(Revision(current));
        Ok(shared)
    }

    pub(crate) fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(name)
            .ok_or_else(|| StoreError::Unavailable(format!("column family {name} is not open")))
    }

    /// Keeps the events of a committed batch for the change feed.
    pub(crate) fn keep_recent(&self, events: Vec<Event>) {
        self.recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend(events);
    }

    /// The change feed after `after` from the events kept in memory, or `None` when they do not
    /// hold all of it (the feed then reads the database). Same answers as
    /// [`View::changes`](read::View::changes).
    fn recent_changes(&self, after: Revision, limit: usize) -> Option<Result<Changes>> {
        // As a view does: `current` first, then `compacted`. The writer keeps a batch's events
        // before it publishes their revision, so every event up to `current` is kept or dropped.
        let current = self.current.load(Ordering::SeqCst);
        let compacted = self.compacted.load(Ordering::SeqCst);
        if let Err(e) = read::not_compacted(after, compacted) {
            return Some(Err(e));
        }
        let events = self
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .between(after.get(), current, limit)?;
        Some(Ok(read::changes_through(events, limit, current)))
    }

    /// Counts a committed batch that took `took` to write.
    pub(crate) fn committed(&self, took: std::time::Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.commit_nanos.fetch_add(nanos, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        if let Some(i) = COMMIT_BUCKETS.iter().position(|&le| seconds <= le) {
            self.commit_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn write_options(&self) -> WriteOptions {
        let mut opts = WriteOptions::default();
        opts.set_sync(self.sync);
        opts
    }
}

/// Maps a RocksDB failure onto the store's error kinds.
pub(crate) fn db_err(e: rocksdb::Error) -> StoreError {
    match e.kind() {
        ErrorKind::Corruption => StoreError::Corrupt(e.into_string()),
        _ => StoreError::Unavailable(e.into_string()),
    }
}

fn read_only() -> StoreError {
    StoreError::Unavailable("the store is open read-only".into())
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the store's writer has stopped".into())
}

/// A [`Store`] on a RocksDB database in one directory.
///
/// Dropping it stops the writer thread (after it has answered everything queued) and closes the
/// database once no read is running, so the directory can be opened again.
pub struct RocksStore {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    requests: Option<Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    /// Compactions run one at a time.
    compacting: tokio::sync::Mutex<()>,
    /// Opened with [`RocksStore::open_read_only`]: no writer, no compaction.
    read_only: bool,
}

impl RocksStore {
    /// Opens the store in `path`, creating the directory and an empty store if needed, and
    /// resumes from the recorded revision and compaction point. Blocks on disk I/O (WAL replay):
    /// from async code, call it inside `spawn_blocking` when that matters.
    ///
    /// Fails with `Unavailable` when the database cannot be opened (for instance while another
    /// process holds it) and `Corrupt` when its contents are not this engine's layout.
    pub fn open(path: &Path, options: RocksOptions) -> Result<RocksStore> {
        std::fs::create_dir_all(path).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", path.display()))
        })?;
        // One small block cache for every column family. Without it each family gets its own
        // 32 MiB default, which the start's read of the whole history fills: resident memory
        // the watch cache (which serves reads) makes redundant.
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let mut tables = BlockBasedOptions::default();
        tables.set_block_cache(&cache);
        // History tables keep a bloom filter of their user keys (10 bits each, about 1%
        // false positives), which lookups of one key use (`read::one_key`).
        let mut history_tables = BlockBasedOptions::default();
        history_tables.set_block_cache(&cache);
        history_tables.set_bloom_filter(10.0, false);
        history_tables.set_whole_key_filtering(false);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_compression_type(DBCompressionType::Lz4);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_block_based_table_factory(&tables);
        // Levels 0 and 1 stay uncompressed: they are rewritten soonest and most often, and
        // compressing every flush and every compaction into them was most of the background
        // CPU of a write-heavy load (LZ4 took 4–5 µs per 2 KiB create). Deeper levels, where
        // most of a large store's bytes end up, are compressed.
        let per_level = [
            DBCompressionType::None,
            DBCompressionType::None,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
        ];
        let families = [CF_HISTORY, CF_CHANGES, CF_META].map(|name| {
            let mut cf_opts = Options::default();
            cf_opts.set_compression_type(DBCompressionType::Lz4);
            cf_opts.set_compression_per_level(&per_level);
            cf_opts.set_disable_auto_compactions(options.defer_compactions);
            if name == CF_HISTORY {
                cf_opts.set_block_based_table_factory(&history_tables);
                cf_opts.set_prefix_extractor(SliceTransform::create(
                    "strata.history-user-key",
                    history_prefix,
                    Some(is_history_key),
                ));
                cf_opts.set_memtable_prefix_bloom_ratio(0.02);
            } else {
                cf_opts.set_block_based_table_factory(&tables);
            }
            ColumnFamilyDescriptor::new(name, cf_opts)
        });
        let db = Db::open_cf_descriptors(&db_opts, path, families).map_err(db_err)?;

        let shared = Shared::load(db, options.sync, path, true)?;
        let shared = Arc::new(shared);
        let (requests, queue) = std::sync::mpsc::channel();
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("strata-rocksdb-writer".into())
                .spawn(move || writer::run(shared, queue))
                .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?
        };
        Ok(RocksStore {
            shared,
            requests: Some(requests),
            writer: Some(writer),
            compacting: tokio::sync::Mutex::new(()),
            read_only: false,
        })
    }

    /// Opens the store in `path` for reading only, as it was when opened: RocksDB's read-only
    /// mode takes no lock, so this works while a server holds the directory (its later writes
    /// are not seen) as well as on a stopped one. Reads keep every [`Store`] semantic; writes
    /// and compaction fail with `Unavailable`. Fails with `Unavailable` when `path` holds no
    /// store and `Corrupt` when it holds another layout.
    pub fn open_read_only(path: &Path) -> Result<RocksStore> {
        if !path.join("CURRENT").exists() {
            return Err(StoreError::Unavailable(format!(
                "{} holds no store",
                path.display()
            )));
        }
        let db_opts = Options::default();
        let db =
            Db::open_cf_for_read_only(&db_opts, path, [CF_HISTORY, CF_CHANGES, CF_META], false)
                .map_err(db_err)?;
        let shared = Shared::load(db, false, path, false)?;
        Ok(RocksStore {
            shared: Arc::new(shared),
            requests: None,
            writer: None,
            compacting: tokio::sync::Mutex::new(()),
            read_only: true,
        })
    }

    /// Write batches and writes committed since open, how long the batches took, and point reads
    /// that needed the disk. With concurrent writers `batches` stays below `writes`: that is
    /// group commit at work.
    pub fn stats(&self) -> RocksStats {
        RocksStats {
            batches: self.shared.batches.load(Ordering::Relaxed),
            commit_nanos: self.shared.commit_nanos.load(Ordering::Relaxed),
            commit_buckets: std::array::from_fn(|i| {
                self.shared.commit_buckets[i].load(Ordering::Relaxed)
            }),
            writes: self.shared.writes.load(Ordering::Relaxed),
            disk_gets: self.shared.disk_gets.load(Ordering::Relaxed),
        }
    }

    /// Hands `op` to the writer; resolves once it is committed (or refused).
    async fn write(&self, op: Op) -> Result<(KeyValue, Revision)> {
        let (reply, answer) = oneshot::channel();
        self.send(Request {
            op,
            reply: Reply::One(reply),
        })?;
        answer.await.map_err(|_| stopped())?
    }

    /// Queues a request for the writer thread.
    fn send(&self, request: Request) -> Result<()> {
        if self.read_only {
            return Err(read_only());
        }
        self.requests
            .as_ref()
            .ok_or_else(stopped)?
            .send(request)
            .map_err(|_| stopped())
    }

    /// Runs `f` on the blocking pool, off the async workers.
    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Shared) -> Result<T> + Send + 'static,
    {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || f(&shared))
            .await
            .map_err(|e| StoreError::Unavailable(format!("storage task failed: {e}")))?
    }

    /// Lets RocksDB's background compactions run, after an open with
    /// [`RocksOptions::defer_compactions`]; any that are due start now.
    pub fn resume_compactions(&self) -> Result<()> {
        for name in [CF_HISTORY, CF_CHANGES, CF_META] {
            let cf = self.shared.cf(name)?;
            self.shared
                .db
                .set_options_cf(cf, &[("disable_auto_compactions", "false")])
                .map_err(db_err)?;
        }
        Ok(())
    }
}

impl Drop for RocksStore {
    fn drop(&mut self) {
        // Closing the channel ends the writer once the queue is empty; joining it means the
        // database is released when this handle is gone (reads still running keep it open).
        drop(self.requests.take());
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("the RocksDB writer thread panicked");
            }
        }
        // Everything written is durable in the write-ahead log already; writing the memtables
        // out to tables now spares the next start replaying that log (the slowest part of a
        // start after many writes).
        if !self.read_only {
            for name in [CF_HISTORY, CF_CHANGES, CF_META] {
                let flushed = self
                    .shared
                    .cf(name)
                    .and_then(|cf| self.shared.db.flush_cf(cf).map_err(db_err));
                if let Err(e) = flushed {
                    tracing::warn!(error = %e, family = name, "flushing at close failed; the next start replays the log");
                }
            }
        }
    }
}

#[async_trait]
impl Store for RocksStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        check_key(key)?;
        let key = key.to_owned();
        Ok(self.write(Op::Create { key, value }).await?.0)
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        check_key(key)?;
        let key = key.to_owned();
        let op = Op::Update {
            key,
            value,
            expected,
        };
        Ok(self.write(op).await?.0)
    }

    async fn update_chain(
        &self,
        key: &str,
        values: Vec<Bytes>,
        expected: Revision,
    ) -> Result<Vec<KeyValue>> {
        check_key(key)?;
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = oneshot::channel();
        self.send(Request {
            op: Op::Chain {
                key: key.to_owned(),
                values,
                expected,
            },
            reply: Reply::Chain(reply),
        })?;
        answer.await.map_err(|_| stopped())?
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        check_key(key)?;
        let key = key.to_owned();
        self.write(Op::Delete { key, expected }).await
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        check_key(key)?;
        // Most point reads find the key in the memtables or the block cache: answered here,
        // without the two thread hand-offs of the blocking pool (about 0.1 ms of a write's
        // latency on a virtual machine). One that would wait for the disk goes to the pool.
        {
            let view = View::new(&self.shared);
            let rev = view.resolve(revision)?;
            if let Some(kv) = view.get_in_memory(key, rev)? {
                return Ok((kv, Revision(rev)));
            }
        }
        self.shared.disk_gets.fetch_add(1, Ordering::Relaxed);
        let key = key.to_owned();
        self.blocking(move |shared| {
            let view = View::new(shared);
            let rev = view.resolve(revision)?;
            Ok((view.get(&key, rev)?, Revision(rev)))
        })
        .await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.blocking(move |shared| View::new(shared).range(&req))
            .await
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        if let Some(answer) = self.shared.recent_changes(after, limit) {
            return answer;
        }
        self.blocking(move |shared| View::new(shared).changes(after, limit))
            .await
    }

    fn current_revision(&self) -> Revision {
        Revision(self.shared.current.load(Ordering::SeqCst))
    }

    fn compacted_revision(&self) -> Revision {
        Revision(self.shared.compacted.load(Ordering::SeqCst))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        if self.read_only {
            return Err(read_only());
        }
        let _one_at_a_time = self.compacting.lock().await;
        self.blocking(move |shared| compact::compact(shared, revision))
            .await
    }

    fn subscribe(&self) -> watch::Receiver<Revision> {
        self.shared.notify.subscribe()
    }
}
