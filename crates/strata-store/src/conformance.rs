//! The conformance suite: behaviour every [`Store`] engine must show.
//!
//! Each `run_*` function takes a fresh [`Subject`] and panics on the first deviation. Engines
//! instantiate them all with [`store_conformance_tests!`](crate::store_conformance_tests), which
//! expands to one `#[tokio::test]` per function, each building its subject from the fixture
//! expression the engine passes.
//!
//! The suite asserts what a store over a shared keyspace can promise, nothing more: revisions
//! are strictly increasing but may start anywhere and leave gaps (other writers move the same
//! counter), and a store's feed carries its own keys only. It never compares a revision with a
//! literal number.
//!
//! # Running it against an engine
//!
//! In the engine's tests, one line makes a test per function (the calling crate needs `tokio`
//! with the `macros` and `rt-multi-thread` features among its dev-dependencies, since the tests
//! are `#[tokio::test(flavor = "multi_thread")]`):
//!
//! ```
//! #[cfg(test)]
//! mod conformance {
//!     use std::sync::Arc;
//!     use strata_store::{conformance::Subject, MemoryStore};
//!
//!     // Your engine here, fresh and empty for each test.
//!     strata_store::store_conformance_tests!(async { Subject::new(Arc::new(MemoryStore::new())) });
//! }
//! ```
//!
//! Each `run_*` function can also be called on its own, on any runtime:
//!
//! ```
//! use std::sync::Arc;
//! use strata_store::conformance::{self, Subject};
//! use strata_store::MemoryStore;
//!
//! # strata_store::tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! conformance::run_changes_feed(&Subject::new(Arc::new(MemoryStore::new()))).await;
//! conformance::run_compaction(&Subject::new(Arc::new(MemoryStore::new()))).await;
//! # });
//! ```

use std::any::Any;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::{Event, KeyValue, RangeRequest, Revision, Store, StoreError};

/// A fresh, empty store for one test, and whatever must outlive it (a temporary directory, a
/// server process). The store is dropped before the guard.
pub struct Subject {
    /// The store under test.
    pub store: Arc<dyn Store>,
    _guard: Box<dyn Any + Send>,
}

impl Subject {
    /// A store that needs nothing else kept alive.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_guard(store, ())
    }

    /// A store that needs `guard` kept alive until it is closed.
    pub fn with_guard(store: Arc<dyn Store>, guard: impl Any + Send) -> Self {
        Subject {
            store,
            _guard: Box::new(guard),
        }
    }
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject").finish_non_exhaustive()
    }
}

/// Expands to one test per conformance function. `$make` is an expression of type
/// `impl Future<Output = Subject>` (an `async` block), evaluated once per test.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make;
            run_create_and_get, run_update_compare_and_swap, run_update_chain, run_delete, run_range,
            run_reads_at_past_revisions, run_changes_feed, run_feed_progress,
            run_consistent_revision, run_compaction, run_compaction_and_the_feed,
            run_future_revisions, run_concurrent_writers, run_subscribe);
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let subject: $crate::conformance::Subject = $make.await;
                $crate::conformance::$name(&subject).await;
            }
        )*
    };
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn keys(kvs: &[KeyValue]) -> Vec<&str> {
    kvs.iter().map(|kv| kv.key.as_str()).collect()
}

/// A revision far beyond anything a test writes, for "future" reads.
fn far_beyond(r: Revision) -> Revision {
    Revision(r.0 + 1_000_000)
}

/// Create and get: a create moves the revision forward with equal create and mod revisions, a
/// second create of the key is `Exists` and leaves no trace, and values and keys are stored as
/// given (empty values, non-ASCII and control bytes in keys).
pub async fn run_create_and_get(t: &Subject) {
    let s = &t.store;
    let before = s.current_revision();
    let kv = s.create("/a/x", b("one")).await.unwrap();
    assert!(
        kv.mod_revision > before,
        "a write moves the revision forward"
    );
    assert_eq!(kv.create_revision, kv.mod_revision);
    assert_eq!(kv.value, b("one"));
    assert!(s.current_revision() >= kv.mod_revision);
    let (got, rev) = s.get("/a/x", None).await.unwrap();
    assert_eq!(got, Some(kv.clone()));
    assert!(rev >= kv.mod_revision);
    assert_eq!(
        s.create("/a/x", b("two")).await,
        Err(StoreError::Exists("/a/x".into()))
    );
    // A failed write leaves no trace: the key is unchanged and the feed has nothing new.
    assert_eq!(s.get("/a/x", None).await.unwrap().0, Some(kv.clone()));
    assert!(s
        .changes(kv.mod_revision, 0)
        .await
        .unwrap()
        .events
        .is_empty());
    let (missing, _) = s.get("/a/y", None).await.unwrap();
    assert_eq!(missing, None);
    // Empty values and keys with odd bytes are stored as given.
    let odd = s.create("/a/ü\u{1}", Bytes::new()).await.unwrap();
    assert!(odd.mod_revision > kv.mod_revision);
    assert_eq!(s.get("/a/ü\u{1}", None).await.unwrap().0, Some(odd));
}

/// Updates are compare-and-swap on the modification revision: the create revision stays, a
/// stale expected revision is `Conflict` (naming both revisions), an absent key is `NotFound`,
/// and failed updates are not in the feed.
pub async fn run_update_compare_and_swap(t: &Subject) {
    let s = &t.store;
    let first = s.create("/k", b("1")).await.unwrap();
    let second = s.update("/k", b("2"), first.mod_revision).await.unwrap();
    assert_eq!(second.create_revision, first.create_revision);
    assert!(second.mod_revision > first.mod_revision);
    match s.update("/k", b("3"), first.mod_revision).await {
        Err(StoreError::Conflict {
            key,
            expected,
            actual,
        }) => {
            assert_eq!(key, "/k");
            assert_eq!(expected, first.mod_revision);
            assert_eq!(actual, second.mod_revision);
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(s.get("/k", None).await.unwrap().0, Some(second.clone()));
    assert!(matches!(
        s.update("/missing", b("x"), second.mod_revision).await,
        Err(StoreError::NotFound(_))
    ));
    let feed = s.changes(second.mod_revision, 0).await.unwrap();
    assert!(feed.events.is_empty(), "failed updates are not in the feed");
}

/// A chain of updates lands as consecutive revisions of the key, each in the feed with the
/// one before it as its previous state; a chain that starts from a stale revision writes
/// nothing.
pub async fn run_update_chain(t: &Subject) {
    let s = &t.store;
    let first = s.create("/chain", b("0")).await.unwrap();
    let written = s
        .update_chain("/chain", vec![b("1"), b("2"), b("3")], first.mod_revision)
        .await
        .unwrap();
    let values: Vec<&[u8]> = written.iter().map(|kv| kv.value.as_ref()).collect();
    assert_eq!(values, [b"1".as_ref(), b"2", b"3"]);
    let mut before = first.clone();
    for kv in &written {
        assert!(kv.mod_revision > before.mod_revision, "revisions ascend");
        assert_eq!(kv.create_revision, first.create_revision);
        before = kv.clone();
    }
    assert_eq!(
        s.get("/chain", None).await.unwrap().0.as_ref(),
        written.last()
    );
    let feed = s.changes(first.mod_revision, 0).await.unwrap();
    let expected: Vec<Event> = written
        .iter()
        .scan(first.clone(), |prev, kv| {
            let event = Event::Put {
                kv: kv.clone(),
                prev: Some(prev.clone()),
            };
            *prev = kv.clone();
            Some(event)
        })
        .collect();
    assert_eq!(feed.events, expected);
    // Each link is readable at its own revision.
    let (middle, _) = s
        .get("/chain", Some(written[1].mod_revision))
        .await
        .unwrap();
    assert_eq!(middle.as_ref(), Some(&written[1]));

    let last = written.last().unwrap().mod_revision;
    match s
        .update_chain("/chain", vec![b("x"), b("y")], first.mod_revision)
        .await
    {
        Err(StoreError::Conflict { actual, .. }) => assert_eq!(actual, last),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert!(matches!(
        s.update_chain("/chain-missing", vec![b("x")], last).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        s.changes(last, 0).await.unwrap().events.is_empty(),
        "failed chains leave nothing in the feed"
    );
}

/// Deletes, with and without an expected revision: `Conflict` on a mismatch, the last state and
/// the deletion's revision on success, `NotFound` afterwards, and a new incarnation of the key
/// created later gets a new create revision.
pub async fn run_delete(t: &Subject) {
    let s = &t.store;
    let kv = s.create("/k", b("v")).await.unwrap();
    assert!(matches!(
        s.delete("/k", Some(far_beyond(kv.mod_revision))).await,
        Err(StoreError::Conflict { .. })
    ));
    let (prev, rev) = s.delete("/k", Some(kv.mod_revision)).await.unwrap();
    assert_eq!(prev, kv);
    assert!(rev > kv.mod_revision);
    assert_eq!(s.get("/k", None).await.unwrap().0, None);
    assert!(matches!(
        s.delete("/k", None).await,
        Err(StoreError::NotFound(_))
    ));
    // The name is free again, as a new incarnation.
    let again = s.create("/k", b("w")).await.unwrap();
    assert!(again.create_revision > rev);
    let (prev, last) = s.delete("/k", None).await.unwrap();
    assert_eq!(prev, again);
    assert!(last > again.mod_revision);
}

/// Range reads: key order, bounded by the prefix, no deleted keys, pages with `limit` and the
/// count of `remaining` keys, a continuation at the first page's revision, and `Invalid` for a
/// start key outside the prefix.
pub async fn run_range(t: &Subject) {
    let s = &t.store;
    let mut last = Revision::ZERO;
    for k in ["/r/b", "/r/a", "/r/c", "/rx/a", "/q/z", "/r/d"] {
        last = s.create(k, b(k)).await.unwrap().mod_revision;
    }
    let (_, deleted) = s.delete("/r/d", None).await.unwrap();
    assert!(deleted > last);
    let all = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        keys(&all.kvs),
        ["/r/a", "/r/b", "/r/c"],
        "key order, prefix bound, no deleted keys"
    );
    for kv in &all.kvs {
        assert_eq!(kv.value, b(&kv.key));
    }
    assert_eq!(all.remaining, 0);
    assert!(all.revision >= deleted);
    assert!(all.revision <= s.current_revision());

    let page = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(keys(&page.kvs), ["/r/a", "/r/b"]);
    assert_eq!(page.remaining, 1);
    let next = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            start: format!("{}\0", page.kvs[1].key),
            limit: 2,
            revision: Some(page.revision),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(keys(&next.kvs), ["/r/c"]);
    assert_eq!(next.remaining, 0);
    assert_eq!(next.revision, page.revision);
    // A reader that does not need the count gets the same pages; `remaining` may be 0.
    let mut walked = Vec::new();
    let mut start = String::new();
    loop {
        let page = s
            .range(RangeRequest {
                prefix: "/r/".into(),
                start: start.clone(),
                limit: 1,
                revision: Some(page.revision),
                skip_remaining: true,
            })
            .await
            .unwrap();
        assert_eq!(page.revision, next.revision);
        walked.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        match page.kvs.last() {
            Some(last) => start = format!("{}\0", last.key),
            None => break,
        }
    }
    assert_eq!(walked, ["/r/a", "/r/b", "/r/c"]);
    assert!(matches!(
        s.range(RangeRequest {
            prefix: "/r/".into(),
            start: "/q/".into(),
            ..Default::default()
        })
        .await,
        Err(StoreError::Invalid(_))
    ));
}

/// Reads at past revisions: a get or range at a revision sees the state then (including keys
/// deleted since), and a range answers with the revision it was asked for.
pub async fn run_reads_at_past_revisions(t: &Subject) {
    let s = &t.store;
    let a1 = s.create("/p/a", b("a1")).await.unwrap();
    let b1 = s.create("/p/b", b("b1")).await.unwrap();
    let a2 = s.update("/p/a", b("a2"), a1.mod_revision).await.unwrap();
    let (_, del) = s.delete("/p/b", None).await.unwrap();
    let at = |key: &'static str, rev: Revision| {
        let s = s.clone();
        async move { s.get(key, Some(rev)).await.unwrap() }
    };
    assert_eq!(
        at("/p/a", a1.mod_revision).await,
        (Some(a1.clone()), a1.mod_revision)
    );
    assert_eq!(at("/p/a", b1.mod_revision).await.0, Some(a1.clone()));
    assert_eq!(s.get("/p/a", None).await.unwrap().0, Some(a2.clone()));
    assert_eq!(at("/p/b", Revision(del.0 - 1)).await.0, Some(b1.clone()));
    assert_eq!(at("/p/b", del).await.0, None);
    if Revision(a1.mod_revision.0 - 1) >= s.compacted_revision() {
        assert_eq!(at("/p/a", Revision(a1.mod_revision.0 - 1)).await.0, None);
    }
    let snap = s
        .range(RangeRequest {
            prefix: "/p/".into(),
            revision: Some(b1.mod_revision),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(snap.kvs, vec![a1, b1.clone()]);
    assert_eq!(
        snap.revision, b1.mod_revision,
        "a range reads at the revision it names"
    );
}

/// The change feed: creates, updates (with their previous state) and deletes in revision order,
/// from any revision, including one between two events, and a feed cut by its limit that is
/// complete only through its last event.
pub async fn run_changes_feed(t: &Subject) {
    let s = &t.store;
    let start = s.current_revision();
    let a = s.create("/c/a", b("1")).await.unwrap();
    let a2 = s.update("/c/a", b("2"), a.mod_revision).await.unwrap();
    let (_, del) = s.delete("/c/a", None).await.unwrap();
    let feed = s.changes(start, 0).await.unwrap();
    assert_eq!(
        feed.events,
        vec![
            Event::Put {
                kv: a.clone(),
                prev: None
            },
            Event::Put {
                kv: a2.clone(),
                prev: Some(a.clone())
            },
            Event::Delete {
                prev: a2.clone(),
                revision: del
            },
        ]
    );
    assert!(feed.revision >= del);
    assert_eq!(s.changes(a.mod_revision, 0).await.unwrap().events.len(), 2);
    // A feed read from between two events starts after the earlier one.
    let between = Revision(a2.mod_revision.0 - 1);
    assert_eq!(
        s.changes(between, 0).await.unwrap().events[0].revision(),
        a2.mod_revision
    );
    let one = s.changes(a.mod_revision, 1).await.unwrap();
    assert_eq!(one.events.len(), 1);
    assert_eq!(
        one.revision, a2.mod_revision,
        "a feed cut short by its limit is complete only through its last event"
    );
    let rest = s.changes(one.revision, 0).await.unwrap();
    assert_eq!(rest.events.len(), 1);
    assert_eq!(rest.events[0].revision(), del);
    assert!(s.changes(del, 0).await.unwrap().events.is_empty());
}

/// The feed says how far it is complete even when it has nothing to return, so a follower can
/// tell "no change yet" from "not caught up".
pub async fn run_feed_progress(t: &Subject) {
    let s = &t.store;
    let kv = s.create("/g/a", b("1")).await.unwrap();
    let empty = s.changes(kv.mod_revision, 0).await.unwrap();
    assert!(empty.events.is_empty());
    assert!(empty.revision >= kv.mod_revision);
    // The feed never claims more than the store has.
    assert!(empty.revision <= s.consistent_revision().await.unwrap());
    let next = s.create("/g/b", b("2")).await.unwrap();
    let later = s.changes(empty.revision, 0).await.unwrap();
    assert_eq!(later.events.len(), 1);
    assert_eq!(later.events[0].revision(), next.mod_revision);
    assert!(later.revision >= next.mod_revision);
}

/// `consistent_revision` covers every acknowledged write, however many writers there are.
pub async fn run_consistent_revision(t: &Subject) {
    let s = &t.store;
    let mut tasks = Vec::new();
    for w in 0..4 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                let kv = s.create(&format!("/cr/{w}/{i}"), b("v")).await.unwrap();
                let seen = s.consistent_revision().await.unwrap();
                assert!(
                    seen >= kv.mod_revision,
                    "consistent revision {seen} is behind an acknowledged write at {}",
                    kv.mod_revision
                );
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let last = s.consistent_revision().await.unwrap();
    let all = s
        .range(RangeRequest {
            prefix: "/cr/".into(),
            revision: Some(last),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        all.kvs.len(),
        40,
        "a read at the consistent revision sees every write"
    );
}

/// Compaction: reads below the compaction point are `Compacted`, the state at the point itself
/// stays readable, compacting backwards is a no-op and beyond the current revision `Invalid`,
/// and writes go on afterwards.
pub async fn run_compaction(t: &Subject) {
    let s = &t.store;
    let a = s.create("/m/a", b("1")).await.unwrap();
    let a2 = s.update("/m/a", b("2"), a.mod_revision).await.unwrap();
    let point = s.create("/m/b", b("b")).await.unwrap().mod_revision;
    s.delete("/m/b", None).await.unwrap();
    s.create("/m/c", b("c")).await.unwrap();
    s.compact(point).await.unwrap();
    assert_eq!(s.compacted_revision(), point);
    assert!(matches!(
        s.get("/m/a", Some(a2.mod_revision)).await,
        Err(StoreError::Compacted { requested, compacted }) if requested == a2.mod_revision && compacted == point
    ));
    assert!(matches!(
        s.range(RangeRequest {
            prefix: "/m/".into(),
            revision: Some(a.mod_revision),
            ..Default::default()
        })
        .await,
        Err(StoreError::Compacted { .. })
    ));
    // The state at the compaction point itself is still readable.
    let at = s
        .range(RangeRequest {
            prefix: "/m/".into(),
            revision: Some(point),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(keys(&at.kvs), ["/m/a", "/m/b"]);
    assert_eq!(at.kvs[0], a2);
    // Compacting backwards is a no-op; beyond the head is invalid.
    s.compact(a2.mod_revision).await.unwrap();
    assert_eq!(s.compacted_revision(), point);
    assert!(matches!(
        s.compact(far_beyond(s.current_revision())).await,
        Err(StoreError::Invalid(_))
    ));
    // Writes go on after compaction, and the latest state is intact.
    let a3 = s.update("/m/a", b("3"), a2.mod_revision).await.unwrap();
    s.compact(a3.mod_revision).await.unwrap();
    let now = s
        .range(RangeRequest {
            prefix: "/m/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(keys(&now.kvs), ["/m/a", "/m/c"]);
    assert_eq!(now.kvs[0], a3);
    let (got, _) = s.get("/m/a", Some(a3.mod_revision)).await.unwrap();
    assert_eq!(got, Some(a3));
}

/// The feed keeps everything after the compaction point, and refuses to start before it.
pub async fn run_compaction_and_the_feed(t: &Subject) {
    let s = &t.store;
    let first = s.create("/n/a", b("1")).await.unwrap();
    let point = s.create("/n/b", b("2")).await.unwrap().mod_revision;
    let (_, gone) = s.delete("/n/a", None).await.unwrap();
    let last = s.create("/n/c", b("3")).await.unwrap().mod_revision;
    s.compact(point).await.unwrap();
    assert!(matches!(
        s.changes(first.mod_revision, 0).await,
        Err(StoreError::Compacted { .. })
    ));
    let later = s.changes(point, 0).await.unwrap();
    assert_eq!(
        later.events.iter().map(Event::revision).collect::<Vec<_>>(),
        [gone, last]
    );
    match &later.events[0] {
        Event::Delete { prev, .. } => assert_eq!(prev, &first),
        other => panic!("expected the delete of /n/a, got {other:?}"),
    }
    assert!(later.revision >= last);
}

/// Reads at a revision beyond the current one are `FutureRevision`, for gets and ranges.
pub async fn run_future_revisions(t: &Subject) {
    let s = &t.store;
    let kv = s.create("/f", b("x")).await.unwrap();
    let future = far_beyond(s.current_revision().max(kv.mod_revision));
    assert!(matches!(
        s.get("/f", Some(future)).await,
        Err(StoreError::FutureRevision { requested, .. }) if requested == future
    ));
    assert!(matches!(
        s.range(RangeRequest {
            prefix: "/".into(),
            revision: Some(future),
            ..Default::default()
        })
        .await,
        Err(StoreError::FutureRevision { .. })
    ));
}

/// Concurrent writers: sixteen tasks creating keys get distinct, per-writer increasing
/// revisions, the feed has every write once in revision order, and of eight contended
/// compare-and-swap updates of one key exactly one wins.
pub async fn run_concurrent_writers(t: &Subject) {
    const TASKS: usize = 16;
    const PER_TASK: usize = 25;
    let s = &t.store;
    let start = s.current_revision();
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..PER_TASK {
                let kv = s.create(&format!("/w/{t}/{i}"), b("v")).await.unwrap();
                revs.push(kv.mod_revision);
            }
            revs
        }));
    }
    let mut all = HashSet::new();
    for h in handles {
        let revs = h.await.unwrap();
        assert!(
            revs.windows(2).all(|w| w[0] < w[1]),
            "one writer's revisions increase"
        );
        for r in revs {
            assert!(all.insert(r), "revision {r} handed out twice");
        }
    }
    let total = TASKS * PER_TASK;
    assert_eq!(all.len(), total);
    let newest = *all.iter().max().unwrap();
    assert!(s.current_revision() >= newest);
    let feed = s.changes(start, 0).await.unwrap();
    let revs: Vec<Revision> = feed.events.iter().map(Event::revision).collect();
    assert!(
        revs.windows(2).all(|w| w[0] < w[1]),
        "the feed is in revision order"
    );
    assert_eq!(
        revs.iter().copied().collect::<HashSet<_>>(),
        all,
        "the feed has every write, once"
    );

    // Contended compare-and-swap on one shared key: exactly one winner.
    let shared = s.create("/w/shared", b("0")).await.unwrap();
    let mut handles = Vec::new();
    for t in 0..8 {
        let s = s.clone();
        let expected = shared.mod_revision;
        handles.push(tokio::spawn(async move {
            s.update("/w/shared", b(&t.to_string()), expected)
                .await
                .is_ok()
        }));
    }
    let mut winners = 0;
    for h in handles {
        winners += h.await.unwrap() as usize;
    }
    assert_eq!(winners, 1, "compare-and-swap admits exactly one writer");
}

/// [`Store::subscribe`]'s receiver sees the revision of a write.
pub async fn run_subscribe(t: &Subject) {
    let s = &t.store;
    let mut rx = s.subscribe();
    let kv = s.create("/s", b("x")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while *rx.borrow_and_update() < kv.mod_revision {
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("subscriber sees the write");
}
