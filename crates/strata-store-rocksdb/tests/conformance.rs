//! The shared store conformance suite, run against a fresh `RocksStore` per test.

use async_trait::async_trait;
use bytes::Bytes;
use strata_store::{Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store};
use strata_store_rocksdb::{RocksOptions, RocksStore};
use tempfile::TempDir;

/// A store in a temporary directory that lives as long as the store does.
struct TempRocks {
    // Declared first so the database closes before its directory is removed.
    store: RocksStore,
    _dir: TempDir,
}

impl TempRocks {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let store = RocksStore::open(dir.path(), RocksOptions::default()).expect("open the store");
        TempRocks { store, _dir: dir }
    }
}

#[async_trait]
impl Store for TempRocks {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.store.create(key, value).await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.store.update(key, value, expected).await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        self.store.delete(key, expected).await
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        self.store.get(key, revision).await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.store.range(req).await
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Vec<Event>> {
        self.store.changes(after, limit).await
    }

    fn current_revision(&self) -> Revision {
        self.store.current_revision()
    }

    fn compacted_revision(&self) -> Revision {
        self.store.compacted_revision()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.store.compact(revision).await
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<Revision> {
        self.store.subscribe()
    }
}

strata_store::store_conformance_tests!(TempRocks::new());
