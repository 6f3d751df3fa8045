//! The change feed over a keyspace that others write too: it is complete through its last
//! event, and moves past revisions made outside its prefix only on a progress notification,
//! which it takes from etcd's periodic ones (they arrive in order with the events on every
//! version) and requests only where requested ones are safe.

use std::time::Duration;

use strata_store::{Revision, Store};
use strata_store_etcd::testing::TestEtcd;

async fn feed_revision(store: &impl Store, after: Revision) -> Revision {
    store.changes(after, 0).await.unwrap().revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_follows_periodic_progress_past_other_prefixes_writes() {
    let etcd = TestEtcd::start_with(&["--experimental-watch-progress-notify-interval=200ms"])
        .expect("start /usr/bin/etcd");
    let mine = etcd.store("/mine").await;
    let other = etcd.store("/other").await;
    let first = mine.compacted_revision();
    let last = mine.create("/a", "1".into()).await.unwrap().mod_revision;
    assert!(feed_revision(&mine, first).await >= last);
    for i in 0..3 {
        other.create(&format!("/x{i}"), "y".into()).await.unwrap();
    }
    let moved = other.consistent_revision().await.unwrap();
    assert!(moved > last);
    // Nothing under /mine changed, yet within a few notification intervals the feed says it is
    // complete through the other prefix's writes, with no event of theirs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let changes = mine.changes(last, 0).await.unwrap();
        assert!(changes.events.is_empty(), "{:?}", changes.events);
        if changes.revision >= moved {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the feed stayed at {} below {moved}",
            changes.revision
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // etcd 3.4.23 may deliver a requested notification ahead of pending events: none is asked.
    assert!(!mine.request_progress());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_progress_the_feed_claims_only_what_its_events_prove() {
    let etcd = TestEtcd::start().expect("start /usr/bin/etcd");
    let mine = etcd.store("/mine").await;
    let other = etcd.store("/other").await;
    let last = mine.create("/a", "1".into()).await.unwrap().mod_revision;
    other.create("/x", "y".into()).await.unwrap();
    let moved = other.consistent_revision().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let changes = mine.changes(last, 0).await.unwrap();
    assert!(changes.events.is_empty());
    assert!(changes.revision >= last && changes.revision < moved);
    // Its next own write carries it past the other's.
    let next = mine.create("/b", "2".into()).await.unwrap().mod_revision;
    let changes = mine.changes(last, 0).await.unwrap();
    assert_eq!(changes.events.len(), 1);
    assert!(changes.revision >= next && next > moved);
}
