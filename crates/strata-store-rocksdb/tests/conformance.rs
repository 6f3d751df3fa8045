//! The shared store conformance suite, run against a fresh `RocksStore` per test.

use std::sync::Arc;

use strata_store::conformance::Subject;
use strata_store_rocksdb::{RocksOptions, RocksStore};

strata_store::store_conformance_tests!(async {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let store = RocksStore::open(dir.path(), RocksOptions::default()).expect("open the store");
    Subject::with_guard(Arc::new(store), dir)
});
