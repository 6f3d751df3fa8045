//! `RocksStore::open_read_only`: a second, read-only view of a store that another handle holds
//! open for writing (as `strata snapshot save` reads a running server's data directory), with
//! the store's read semantics and no writes.

use bytes::Bytes;
use strata_store::{RangeRequest, Revision, Store, StoreError};
use strata_store_rocksdb::{RocksOptions, RocksStore};

#[tokio::test]
async fn a_read_only_view_of_a_store_in_use_reads_what_was_written_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let writer = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
    let a = writer.create("/k/a", Bytes::from("1")).await.unwrap();
    let b = writer.create("/k/b", Bytes::from("2")).await.unwrap();
    writer
        .update("/k/a", Bytes::from("3"), a.mod_revision)
        .await
        .unwrap();
    writer.delete("/k/b", None).await.unwrap();
    writer.create("/other", Bytes::from("x")).await.unwrap();

    // The writer still holds the directory (and its lock); the read-only view opens anyway.
    let view = RocksStore::open_read_only(dir.path()).unwrap();
    assert_eq!(view.current_revision(), writer.current_revision());
    let all = view
        .range(RangeRequest {
            prefix: "/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<&str> = all.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/k/a", "/other"]);
    assert_eq!(all.kvs[0].value, Bytes::from("3"));
    assert_eq!(all.kvs[0].create_revision, a.create_revision);
    // History is there too: `/k/b` at its creation.
    let (old, _) = view.get("/k/b", Some(b.mod_revision)).await.unwrap();
    assert_eq!(old.unwrap().value, Bytes::from("2"));

    // Later writes of the writer are not seen: the view is the store as it was when opened.
    writer.create("/k/c", Bytes::from("4")).await.unwrap();
    assert_eq!(view.get("/k/c", None).await.unwrap().0, None);

    // Writes and compaction are refused.
    for result in [
        view.create("/k/d", Bytes::from("5")).await.map(|_| ()),
        view.delete("/k/a", None).await.map(|_| ()),
        view.compact(Revision(2)).await,
    ] {
        assert!(
            matches!(&result, Err(StoreError::Unavailable(m)) if m.contains("read-only")),
            "{result:?}"
        );
    }
    drop(view);
    // The writer is unaffected.
    writer.create("/k/e", Bytes::from("6")).await.unwrap();
}

#[tokio::test]
async fn read_only_needs_an_existing_store() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        RocksStore::open_read_only(&dir.path().join("missing")),
        Err(StoreError::Unavailable(_))
    ));
    // A store written and closed opens read-only after it.
    {
        let store = RocksStore::open(dir.path(), RocksOptions::default()).unwrap();
        store.create("/k", Bytes::from("v")).await.unwrap();
    }
    let view = RocksStore::open_read_only(dir.path()).unwrap();
    assert_eq!(
        view.get("/k", None).await.unwrap().0.unwrap().value,
        Bytes::from("v")
    );
}
