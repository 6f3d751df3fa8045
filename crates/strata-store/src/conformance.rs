//! The conformance suite: behaviour every [`Store`] engine must show.
//!
//! Each `run_*` function takes a fresh, empty store and panics on the first deviation. Engines
//! call them all through [`store_conformance_tests!`](crate::store_conformance_tests), which
//! expands to one `#[tokio::test]` per function.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;

use crate::{Event, RangeRequest, Revision, Store, StoreError};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Expands to one test per conformance function; `$make` builds a fresh empty store (it may
/// refer to a temporary directory kept alive by the engine value itself).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make;
            run_create_and_get, run_update_compare_and_swap, run_delete, run_range,
            run_reads_at_past_revisions, run_changes_feed, run_compaction,
            run_future_revisions, run_concurrent_writers, run_subscribe);
    };
    (@tests $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let store = std::sync::Arc::new($make);
                $crate::conformance::$name(store).await;
            }
        )*
    };
}

pub async fn run_create_and_get<S: Store>(s: Arc<S>) {
    assert_eq!(s.current_revision(), Revision(0));
    let kv = s.create("/a/x", b("one")).await.unwrap();
    assert_eq!(kv.create_revision, Revision(1));
    assert_eq!(kv.mod_revision, Revision(1));
    assert_eq!(kv.value, b("one"));
    let (got, rev) = s.get("/a/x", None).await.unwrap();
    assert_eq!(got, Some(kv));
    assert_eq!(rev, Revision(1));
    assert_eq!(
        s.create("/a/x", b("two")).await,
        Err(StoreError::Exists("/a/x".into()))
    );
    assert_eq!(
        s.current_revision(),
        Revision(1),
        "a failed write uses no revision"
    );
    let (missing, _) = s.get("/a/y", None).await.unwrap();
    assert_eq!(missing, None);
    // Empty values and keys with odd bytes are stored as given.
    let kv = s.create("/a/ü\u{1}", Bytes::new()).await.unwrap();
    assert_eq!(s.get("/a/ü\u{1}", None).await.unwrap().0, Some(kv));
}

pub async fn run_update_compare_and_swap<S: Store>(s: Arc<S>) {
    let first = s.create("/k", b("1")).await.unwrap();
    let second = s.update("/k", b("2"), first.mod_revision).await.unwrap();
    assert_eq!(second.create_revision, first.create_revision);
    assert_eq!(second.mod_revision, Revision(2));
    match s.update("/k", b("3"), first.mod_revision).await {
        Err(StoreError::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, Revision(1));
            assert_eq!(actual, Revision(2));
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(s.get("/k", None).await.unwrap().0.unwrap().value, b("2"));
    assert!(matches!(
        s.update("/missing", b("x"), Revision(1)).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.current_revision(), Revision(2));
}

pub async fn run_delete<S: Store>(s: Arc<S>) {
    let kv = s.create("/k", b("v")).await.unwrap();
    assert!(matches!(
        s.delete("/k", Some(Revision(99))).await,
        Err(StoreError::Conflict { .. })
    ));
    let (prev, rev) = s.delete("/k", Some(kv.mod_revision)).await.unwrap();
    assert_eq!(prev, kv);
    assert_eq!(rev, Revision(2));
    assert_eq!(s.get("/k", None).await.unwrap().0, None);
    assert!(matches!(
        s.delete("/k", None).await,
        Err(StoreError::NotFound(_))
    ));
    // The name is free again, as a new incarnation.
    let again = s.create("/k", b("w")).await.unwrap();
    assert_eq!(again.create_revision, Revision(3));
    let (prev, _) = s.delete("/k", None).await.unwrap();
    assert_eq!(prev.value, b("w"));
}

pub async fn run_range<S: Store>(s: Arc<S>) {
    for k in ["/r/b", "/r/a", "/r/c", "/rx/a", "/q/z", "/r/d"] {
        s.create(k, b(k)).await.unwrap();
    }
    s.delete("/r/d", None).await.unwrap();
    let all = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<_> = all.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(
        keys,
        ["/r/a", "/r/b", "/r/c"],
        "key order, prefix bound, no deleted keys"
    );
    assert_eq!(all.remaining, 0);
    assert_eq!(all.revision, s.current_revision());

    let page = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.kvs.len(), 2);
    assert_eq!(page.remaining, 1);
    let next = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            start: format!("{}\0", page.kvs[1].key),
            limit: 2,
            revision: Some(page.revision),
        })
        .await
        .unwrap();
    let keys: Vec<_> = next.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/r/c"]);
    assert_eq!(next.remaining, 0);
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

pub async fn run_reads_at_past_revisions<S: Store>(s: Arc<S>) {
    let a1 = s.create("/p/a", b("a1")).await.unwrap();
    let b1 = s.create("/p/b", b("b1")).await.unwrap();
    let a2 = s.update("/p/a", b("a2"), a1.mod_revision).await.unwrap();
    let (_, del) = s.delete("/p/b", None).await.unwrap();
    assert_eq!(
        s.get("/p/a", Some(a1.mod_revision)).await.unwrap().0,
        Some(a1.clone())
    );
    assert_eq!(
        s.get("/p/a", Some(b1.mod_revision)).await.unwrap().0,
        Some(a1.clone())
    );
    assert_eq!(s.get("/p/a", None).await.unwrap().0, Some(a2.clone()));
    assert_eq!(
        s.get("/p/b", Some(Revision(del.0 - 1))).await.unwrap().0,
        Some(b1.clone())
    );
    assert_eq!(s.get("/p/b", Some(del)).await.unwrap().0, None);
    assert_eq!(s.get("/p/a", Some(Revision(0))).await.unwrap().0, None);
    let snap = s
        .range(RangeRequest {
            prefix: "/p/".into(),
            revision: Some(b1.mod_revision),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(snap.kvs, vec![a1, b1]);
    assert_eq!(snap.revision, Revision(2));
}

pub async fn run_changes_feed<S: Store>(s: Arc<S>) {
    let a = s.create("/c/a", b("1")).await.unwrap();
    let a2 = s.update("/c/a", b("2"), a.mod_revision).await.unwrap();
    let (_, del) = s.delete("/c/a", None).await.unwrap();
    let events = s.changes(Revision(0), 0).await.unwrap();
    assert_eq!(
        events,
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
    assert_eq!(s.changes(Revision(1), 0).await.unwrap().len(), 2);
    assert_eq!(s.changes(Revision(1), 1).await.unwrap().len(), 1);
    assert!(s.changes(del, 0).await.unwrap().is_empty());
}

pub async fn run_compaction<S: Store>(s: Arc<S>) {
    let a = s.create("/m/a", b("1")).await.unwrap(); // 1
    let a2 = s.update("/m/a", b("2"), a.mod_revision).await.unwrap(); // 2
    s.create("/m/b", b("b")).await.unwrap(); // 3
    s.delete("/m/b", None).await.unwrap(); // 4
    s.create("/m/c", b("c")).await.unwrap(); // 5
    s.compact(Revision(3)).await.unwrap();
    assert_eq!(s.compacted_revision(), Revision(3));
    assert!(matches!(
        s.get("/m/a", Some(Revision(2))).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(matches!(
        s.range(RangeRequest {
            prefix: "/m/".into(),
            revision: Some(Revision(1)),
            ..Default::default()
        })
        .await,
        Err(StoreError::Compacted { .. })
    ));
    // The state at the compaction point itself is still readable.
    let at3 = s
        .range(RangeRequest {
            prefix: "/m/".into(),
            revision: Some(Revision(3)),
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<_> = at3.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/m/a", "/m/b"]);
    assert_eq!(at3.kvs[0], a2);
    assert!(matches!(
        s.changes(Revision(2), 0).await,
        Err(StoreError::Compacted { .. })
    ));
    let later = s.changes(Revision(3), 0).await.unwrap();
    assert_eq!(
        later.iter().map(Event::revision).collect::<Vec<_>>(),
        [Revision(4), Revision(5)]
    );
    // Compacting backwards is a no-op; beyond the head is invalid.
    s.compact(Revision(2)).await.unwrap();
    assert_eq!(s.compacted_revision(), Revision(3));
    assert!(matches!(
        s.compact(Revision(99)).await,
        Err(StoreError::Invalid(_))
    ));
    // Writes go on after compaction, and the latest state is intact.
    s.update("/m/a", b("3"), a2.mod_revision).await.unwrap();
    assert_eq!(s.current_revision(), Revision(6));
    s.compact(Revision(6)).await.unwrap();
    let now = s
        .range(RangeRequest {
            prefix: "/m/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<_> = now.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/m/a", "/m/c"]);
}

pub async fn run_future_revisions<S: Store>(s: Arc<S>) {
    s.create("/f", b("x")).await.unwrap();
    assert!(matches!(
        s.get("/f", Some(Revision(5))).await,
        Err(StoreError::FutureRevision { .. })
    ));
    assert!(matches!(
        s.range(RangeRequest {
            prefix: "/".into(),
            revision: Some(Revision(2)),
            ..Default::default()
        })
        .await,
        Err(StoreError::FutureRevision { .. })
    ));
}

pub async fn run_concurrent_writers<S: Store>(s: Arc<S>) {
    const TASKS: usize = 16;
    const PER_TASK: usize = 25;
    let mut handles = Vec::new();
    for t in 0..TASKS {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..PER_TASK {
                let kv = s.create(&format!("/w/{t}/{i}"), b("v")).await.unwrap();
                revs.push(kv.mod_revision);
            }
            // Contended compare-and-swap on one shared key: exactly one winner per round.
            revs
        }));
    }
    let mut all = HashSet::new();
    for h in handles {
        for r in h.await.unwrap() {
            assert!(all.insert(r), "revision {r} handed out twice");
        }
    }
    let total = (TASKS * PER_TASK) as u64;
    assert_eq!(s.current_revision(), Revision(total));
    assert_eq!(all.len() as u64, total);
    let events = s.changes(Revision(0), 0).await.unwrap();
    let revs: Vec<u64> = events.iter().map(|e| e.revision().0).collect();
    assert_eq!(
        revs,
        (1..=total).collect::<Vec<_>>(),
        "feed is gap-free and ordered"
    );

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

pub async fn run_subscribe<S: Store>(s: Arc<S>) {
    let mut rx = s.subscribe();
    let kv = s.create("/s", b("x")).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while *rx.borrow_and_update() < kv.mod_revision {
            rx.changed().await.unwrap();
        }
    })
    .await
    .expect("subscriber sees the write");
}
