//! `RocksOptions::defer_compactions`: a store opened with it runs no background compaction
//! until `RocksStore::resume_compactions`, which starts the compactions that are due.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_store::{RangeRequest, Store};
use strata_store_rocksdb::{RocksOptions, RocksStore};

fn deferred() -> RocksOptions {
    RocksOptions {
        sync: false,
        defer_compactions: true,
    }
}

/// The table files in the store's directory.
fn tables(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sst"))
        })
        .count()
}

#[tokio::test]
async fn deferred_compactions_wait_for_resume_and_then_run() {
    let dir = tempfile::tempdir().unwrap();
    // Each close writes the memtables out as new level-0 tables: six opens leave more of them
    // than RocksDB's trigger for a compaction (four per family). The same keys are written in
    // every round, so that a compaction merges the tables rather than moving them down.
    for round in 0..6 {
        let store = RocksStore::open(dir.path(), deferred()).unwrap();
        for i in 0..50 {
            let key = format!("/k/{i}");
            let value = Bytes::from(format!("{round}").repeat(100));
            match store.get(&key, None).await.unwrap().0 {
                Some(kv) => store.update(&key, value, kv.mod_revision).await.map(drop),
                None => store.create(&key, value).await.map(drop),
            }
            .unwrap();
        }
    }
    let left = tables(dir.path());
    assert!(left >= 12, "{left} tables");
    let store = RocksStore::open(dir.path(), deferred()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(tables(dir.path()), left, "a compaction ran before resume");

    store.resume_compactions().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tables(dir.path()) >= left {
        assert!(Instant::now() < deadline, "no compaction after resume");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Compacted, the store reads the same.
    let all = store
        .range(RangeRequest {
            prefix: "/k/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), 50);
    assert!(all.kvs.iter().all(|kv| kv.value.starts_with(b"5")));
}
