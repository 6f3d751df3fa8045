//! The watch cache over the in-memory reference store: state, windows, watch starts, slow
//! watchers and shared encodings.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata_store::{MemoryStore, Revision, Store};
use strata_watch::{
    CacheConfig, CacheError, CachedObject, Caches, Decoder, EventType, Filter, StartAt, WatchItem,
    WatchSpec,
};

/// Values are JSON numbers; the cached form is `{"kind":"T","apiVersion":"v1","n":<value>}`
/// with the key's last segment as `metadata.name`.
struct Numbers;

impl Decoder for Numbers {
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String> {
        let n = std::str::from_utf8(value).map_err(|e| e.to_string())?;
        let prefix = r#"{"kind":"T","apiVersion":"v1""#;
        let json = format!(r#"{prefix},"n":{n},"rv":{}}}"#, revision.get());
        let name = key.rsplit('/').next().unwrap_or("").to_string();
        Ok(CachedObject::new(
            key.to_string(),
            revision,
            vec![("n".into(), n.to_string())],
            vec![("metadata.name".into(), name)],
            Bytes::from(json),
            prefix.len(),
        ))
    }

    fn restamp(&self, obj: &CachedObject, revision: Revision) -> Result<CachedObject, String> {
        let n = obj.label("n").unwrap_or("0").to_string();
        self.decode(obj.key(), n.as_bytes(), revision)
    }
}

fn all() -> Filter {
    Arc::new(|_| true)
}

async fn setup(config: CacheConfig) -> (Arc<MemoryStore>, Arc<strata_watch::WatchCache>) {
    let store = Arc::new(MemoryStore::new());
    let caches = Arc::new(Caches::new(store.clone(), config));
    let cache = caches.add("things", "/t/", Arc::new(Numbers));
    caches.start().await.unwrap();
    (store, cache)
}

async fn put(store: &MemoryStore, key: &str, n: u32) -> Revision {
    let value = Bytes::from(n.to_string());
    match store.get(key, None).await.unwrap().0 {
        Some(kv) => {
            store
                .update(key, value, kv.mod_revision)
                .await
                .unwrap()
                .mod_revision
        }
        None => store.create(key, value).await.unwrap().mod_revision,
    }
}

async fn next_event(rx: &mut strata_watch::WatchReceiver) -> (EventType, Arc<CachedObject>) {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(WatchItem::Event(t, o))) => return (t, o),
            Ok(Some(WatchItem::Bookmark(_))) => continue,
            other => panic!("expected an event, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn lists_and_watches_follow_the_store() {
    let (store, cache) = setup(CacheConfig::default()).await;
    put(&store, "/t/a", 1).await;
    let r2 = put(&store, "/t/b", 2).await;
    put(&store, "/other/x", 9).await;
    cache.wait_for(r2, Duration::from_secs(5)).await.unwrap();
    let page = cache.list("/t/", "", 1, &all(), None);
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.remaining, 1);
    assert_eq!(page.next_key.as_deref(), Some("/t/a\0"));
    assert_eq!(&page.items[0].json_item()[..], br#"{"n":1,"rv":1}"#);
    // Knowing how many keys follow the start spares the count, with the same answer.
    let known = cache.list("/t/", "", 1, &all(), Some(2));
    assert_eq!((known.scanned, known.remaining), (1, 1));

    // A watch from the state: both objects as ADDED, then live changes.
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::State { min: r2 },
        bookmarks: false,
    };
    let mut w = cache.watch(spec, Duration::from_secs(1)).await.unwrap();
    assert_eq!(w.backlog.len(), 2);
    let r4 = put(&store, "/t/a", 5).await;
    let (t, o) = next_event(&mut w.receiver).await;
    assert_eq!((t, o.revision()), (EventType::Modified, r4));
    let (_, r5) = store.delete("/t/b", None).await.unwrap();
    let (t, o) = next_event(&mut w.receiver).await;
    assert_eq!((t, o.revision(), o.key()), (EventType::Deleted, r5, "/t/b"));

    // A watch after a past revision replays exactly the later changes of its prefix.
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::After(r2),
        bookmarks: false,
    };
    let w = cache.watch(spec, Duration::from_secs(1)).await.unwrap();
    let revs: Vec<u64> = w
        .backlog
        .iter()
        .map(|i| match i {
            WatchItem::Event(_, o) => o.revision().get(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(revs, vec![r4.get(), r5.get()]);
}

#[tokio::test]
async fn a_slow_watcher_is_closed_without_holding_up_others() {
    let config = CacheConfig {
        watcher_buffer: 4,
        ..CacheConfig::default()
    };
    let (store, cache) = setup(config).await;
    let spec = |start| WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start,
        bookmarks: false,
    };
    let mut slow = cache
        .watch(spec(StartAt::After(Revision::ZERO)), Duration::from_secs(1))
        .await
        .unwrap();
    let mut fast = cache
        .watch(spec(StartAt::After(Revision::ZERO)), Duration::from_secs(1))
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        let mut seen = 0;
        while seen < 20 {
            next_event(&mut fast.receiver).await;
            seen += 1;
        }
        seen
    });
    for i in 0..20 {
        put(&store, &format!("/t/{i}"), i).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(reader.await.unwrap(), 20);
    let mut got = 0;
    loop {
        match slow.receiver.recv().await {
            Some(WatchItem::Event(..)) => got += 1,
            Some(WatchItem::Closed(CacheError::Overflow { .. })) => break,
            other => panic!("expected events then an overflow, got {other:?}"),
        }
    }
    assert!(
        got <= 4,
        "the slow watcher got {got} events, more than its buffer"
    );
    assert!(slow.receiver.recv().await.is_none());
    assert_eq!(cache.metrics().watchers_overflowed, 1);
}

#[tokio::test]
async fn encodings_are_shared_by_every_watcher() {
    let (store, cache) = setup(CacheConfig::default()).await;
    let mut watchers = Vec::new();
    for _ in 0..5 {
        let spec = WatchSpec {
            prefix: "/t/".into(),
            filter: all(),
            start: StartAt::After(Revision::ZERO),
            bookmarks: false,
        };
        watchers.push(cache.watch(spec, Duration::from_secs(1)).await.unwrap());
    }
    for i in 0..3 {
        put(&store, &format!("/t/{i}"), i).await;
    }
    for w in &mut watchers {
        for _ in 0..3 {
            let (_, o) = next_event(&mut w.receiver).await;
            o.encoded("upper", |c| {
                Bytes::from(String::from_utf8_lossy(c.json()).to_uppercase())
            });
        }
    }
    let encodes = cache.metrics().encodes;
    assert!(encodes.contains(&("upper".to_string(), 3)), "{encodes:?}");
    assert!(encodes.contains(&("json".to_string(), 3)), "{encodes:?}");
}

#[tokio::test]
async fn compacted_starts_are_expired_and_future_reads_time_out() {
    let (store, cache) = setup(CacheConfig::default()).await;
    let r1 = put(&store, "/t/a", 1).await;
    put(&store, "/t/a", 2).await;
    let r3 = put(&store, "/t/a", 3).await;
    store.compact(r3).await.unwrap();
    let r4 = put(&store, "/t/b", 4).await;
    cache.wait_for(r4, Duration::from_secs(5)).await.unwrap();
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::After(r1),
        bookmarks: false,
    };
    let err = cache.watch(spec, Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, CacheError::Expired { .. }), "{err:?}");
    let err = cache
        .wait_for(Revision(r4.get() + 10), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        CacheError::TooLarge {
            requested: Revision(r4.get() + 10),
            current: r4
        }
    );
}

#[tokio::test]
async fn bookmarks_never_run_ahead_of_events() {
    let config = CacheConfig {
        bookmark_interval: Duration::from_millis(5),
        ..CacheConfig::default()
    };
    let (store, cache) = setup(config).await;
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::After(Revision::ZERO),
        bookmarks: true,
    };
    let mut w = cache.watch(spec, Duration::from_secs(1)).await.unwrap();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                put(&store, &format!("/t/{}", i % 7), i).await;
                if i % 20 == 0 {
                    tokio::time::sleep(Duration::from_millis(6)).await;
                }
            }
        })
    };
    let mut last_event = 0;
    let mut last_bookmark = 0;
    let mut bookmarks = 0;
    while last_event < 200 {
        match tokio::time::timeout(Duration::from_secs(5), w.receiver.recv()).await {
            Ok(Some(WatchItem::Event(_, o))) => {
                assert!(
                    o.revision().get() > last_bookmark,
                    "event behind a bookmark"
                );
                assert_eq!(o.revision().get(), last_event + 1, "gap or reorder");
                last_event = o.revision().get();
            }
            Ok(Some(WatchItem::Bookmark(r))) => {
                assert!(r.get() >= last_event);
                last_bookmark = r.get();
                bookmarks += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    writer.await.unwrap();
    assert!(bookmarks > 0);
}

/// Over a shared keyspace the store's revision moves without changes of its own (other
/// prefixes, other clients) and its history starts anywhere. The cache follows the feed's
/// progress, so a read that waits for such a revision is served instead of timing out, and
/// watches resume across the gaps.
#[tokio::test]
async fn a_shared_keyspace_moves_the_cache_without_events() {
    let store = Arc::new(MemoryStore::numbered(Revision(5000), 7));
    let caches = Arc::new(Caches::new(store.clone(), CacheConfig::default()));
    let cache = caches.add("things", "/t/", Arc::new(Numbers));
    caches.start().await.unwrap();
    let first = put(&store, "/t/a", 1).await;
    assert!(first > Revision(5000));
    cache.wait_for(first, Duration::from_secs(5)).await.unwrap();

    let foreign = store.advance(40);
    cache
        .wait_for(foreign, Duration::from_secs(5))
        .await
        .expect("progress without events reaches the cache");
    assert!(cache.revision() >= foreign);

    let second = put(&store, "/t/b", 2).await;
    assert!(second > foreign);
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::After(first),
        bookmarks: false,
    };
    cache
        .wait_for(second, Duration::from_secs(5))
        .await
        .unwrap();
    let w = cache.watch(spec, Duration::from_secs(1)).await.unwrap();
    let revs: Vec<Revision> = w
        .backlog
        .iter()
        .map(|i| match i {
            WatchItem::Event(_, o) => o.revision(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(revs, [second]);
}

/// [`Numbers`], except that a value `bad` does not decode.
struct Picky;

impl Decoder for Picky {
    fn decode(&self, key: &str, value: &[u8], revision: Revision) -> Result<CachedObject, String> {
        if value == b"bad" {
            return Err(format!("{key}: not a number"));
        }
        Numbers.decode(key, value, revision)
    }

    fn restamp(&self, obj: &CachedObject, revision: Revision) -> Result<CachedObject, String> {
        Numbers.restamp(obj, revision)
    }
}

/// A stored value for [`Picky`]: `n`, or `bad` for every multiple of `bad_every`.
fn picky_value(n: u32, bad_every: u32) -> Bytes {
    if n.is_multiple_of(bad_every) {
        Bytes::from_static(b"bad")
    } else {
        Bytes::from(n.to_string())
    }
}

/// A start with many objects (the state at the latest revision, then, for a watch from the
/// compaction point, the retained history replayed in batches) holds every key once, in key
/// order, at its own revision, with undecodable values reported as corrupt and the window's
/// events in revision order.
#[tokio::test]
async fn a_large_start_loads_every_object_in_order() {
    let store = Arc::new(MemoryStore::new());
    let value = |i: u32| picky_value(i, 97);
    for i in 0..1500u32 {
        store.create(&format!("/t/{i:05}"), value(i)).await.unwrap();
    }
    let compacted = store.current_revision();
    store.compact(compacted).await.unwrap();
    // History after the compaction point: updates, deletes and creates, replayed at start.
    for i in 0..1500u32 {
        let key = format!("/t/{i:05}");
        match i % 3 {
            0 => {
                let (kv, _) = store.get(&key, None).await.unwrap();
                let kv = kv.unwrap();
                store
                    .update(&key, value(i + 1), kv.mod_revision)
                    .await
                    .unwrap();
            }
            1 => {
                store.delete(&key, None).await.unwrap();
            }
            _ => {
                store
                    .create(&format!("/t/{i:05}-new"), value(i + 2))
                    .await
                    .unwrap();
            }
        }
    }
    let config = CacheConfig {
        feed_batch: 700,
        ..CacheConfig::default()
    };
    let caches = Arc::new(Caches::new(store.clone(), config));
    let cache = caches.add("things", "/t/", Arc::new(Picky));
    caches.start().await.unwrap();
    let now = store.current_revision();
    cache.wait_for(now, Duration::from_secs(5)).await.unwrap();

    let stored = store
        .range(strata_store::RangeRequest {
            prefix: "/t/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .kvs;
    let (good, bad): (Vec<_>, Vec<_>) = stored.iter().partition(|kv| &kv.value[..] != b"bad");
    let expected: Vec<String> = good
        .iter()
        .map(|kv| {
            format!(
                r#"{{"n":{},"rv":{}}}"#,
                std::str::from_utf8(&kv.value).unwrap(),
                kv.mod_revision.get()
            )
        })
        .collect();
    let listed = cache.list("/t/", "", 0, &all(), None);
    assert_eq!(listed.revision, now);
    let got: Vec<String> = listed
        .items
        .iter()
        .map(|o| String::from_utf8(o.json_item().to_vec()).unwrap())
        .collect();
    assert_eq!(got, expected);
    let keys: Vec<&str> = listed.items.iter().map(|o| o.key()).collect();
    let good_keys: Vec<&str> = good.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, good_keys);
    let corrupt: Vec<String> = cache
        .corrupt_under("/t/")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let bad_keys: Vec<String> = bad.iter().map(|kv| kv.key.clone()).collect();
    assert!(!bad_keys.is_empty());
    assert_eq!(corrupt, bad_keys);

    // The replayed history is in the window, in revision order, without gaps between events
    // that decoded.
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::After(compacted),
        bookmarks: false,
    };
    let w = cache.watch(spec, Duration::from_secs(1)).await.unwrap();
    let revs: Vec<u64> = w
        .backlog
        .iter()
        .map(|i| match i {
            WatchItem::Event(_, o) => o.revision().get(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert!(revs.len() > 900, "{} events replayed", revs.len());
    assert!(revs.windows(2).all(|p| p[0] < p[1]));
}

/// A cache removed while a read waits for it to reach a revision ends the wait at once (the
/// read then goes to the store) instead of holding the read until its timeout. The clock is
/// tokio's paused one, which jumps to the timeout as soon as nothing else can happen.
#[tokio::test(start_paused = true)]
async fn removing_a_cache_ends_the_waits_for_it() {
    let store = Arc::new(MemoryStore::new());
    let caches = Arc::new(Caches::new(store.clone(), CacheConfig::default()));
    let cache = caches.add("things", "/t/", Arc::new(Numbers));
    caches.start().await.unwrap();
    put(&store, "/t/a", 1).await;
    let ahead = Revision(cache.revision().get() + 100);
    let timeout = Duration::from_secs(3600);
    let started = tokio::time::Instant::now();
    let waiting = tokio::spawn({
        let cache = cache.clone();
        async move { cache.wait_for(ahead, timeout).await }
    });
    tokio::task::yield_now().await;
    caches.remove(&cache);
    let got = waiting.await.unwrap();
    assert!(matches!(got, Err(CacheError::TooLarge { .. })), "{got:?}");
    assert!(started.elapsed() < timeout, "the wait ran to its timeout");
    // Later waits on the removed cache do not start.
    let started = tokio::time::Instant::now();
    assert!(cache.wait_for(ahead, timeout).await.is_err());
    assert!(started.elapsed() < timeout);
    // A revision it has reached is still reached.
    assert!(cache.wait_for(cache.revision(), timeout).await.is_ok());
}

/// Numbers with an even value: a selection that updates move objects into and out of.
fn even() -> Filter {
    Arc::new(|o: &CachedObject| {
        o.label("n")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n.is_multiple_of(2))
    })
}

/// What a watch from `after` starts with: each event's type and object.
async fn backlog(
    cache: &strata_watch::WatchCache,
    after: Revision,
    filter: Filter,
) -> Vec<(EventType, String)> {
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter,
        start: StartAt::After(after),
        bookmarks: false,
    };
    let w = cache.watch(spec, Duration::from_secs(5)).await.unwrap();
    w.backlog
        .iter()
        .map(|i| match i {
            WatchItem::Event(t, o) => (*t, String::from_utf8(o.json_item().to_vec()).unwrap()),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// A cache started over a store with history (more keys than one page of the load) serves its
/// state at once, and a watch from before its start, asked for before the history is replayed,
/// waits for it and gets what a cache that followed the writes live gives: the same events, in
/// the same order, as seen through a selection that updates move objects into and out of.
#[tokio::test]
async fn history_replayed_after_a_start_matches_the_live_feed() {
    let store = Arc::new(MemoryStore::new());
    let live_caches = Arc::new(Caches::new(store.clone(), CacheConfig::default()));
    let live = live_caches.add("things", "/t/", Arc::new(Picky));
    live_caches.start().await.unwrap();
    let value = |n: u32| picky_value(n, 101);
    for i in 0..5000u32 {
        store.create(&format!("/t/{i:05}"), value(i)).await.unwrap();
    }
    let mid = store.current_revision();
    for i in (0..5000u32).step_by(7) {
        let key = format!("/t/{i:05}");
        match i % 3 {
            0 => {
                store.delete(&key, None).await.unwrap();
            }
            _ => {
                put(&store, &key, i + 1).await;
                put(&store, &key, i + 2).await;
            }
        }
    }
    let now = store.current_revision();
    live.wait_for(now, Duration::from_secs(5)).await.unwrap();

    let caches = Arc::new(Caches::new(store.clone(), CacheConfig::default()));
    let started = caches.add("things", "/t/", Arc::new(Picky));
    caches.start().await.unwrap();
    // Served from the state read at the start, before the history is replayed.
    assert_eq!(started.revision(), now);
    let listed = |c: &strata_watch::WatchCache| -> Vec<String> {
        c.list("/t/", "", 0, &all(), None)
            .items
            .iter()
            .map(|o| String::from_utf8(o.json_item().to_vec()).unwrap())
            .collect()
    };
    assert_eq!(listed(&started), listed(&live));
    assert_eq!(started.corrupt_under("/t/"), live.corrupt_under("/t/"));

    for after in [Revision::ZERO, mid] {
        for filter in [all(), even()] {
            let replayed = backlog(&started, after, filter.clone()).await;
            let followed = backlog(&live, after, filter).await;
            assert!(replayed.len() > 1000, "{} events", replayed.len());
            assert_eq!(replayed, followed);
        }
    }
    // A replayed version that is still current is the state's object, not a second copy.
    let spec = WatchSpec {
        prefix: "/t/".into(),
        filter: all(),
        start: StartAt::After(Revision::ZERO),
        bookmarks: false,
    };
    let replayed = started.watch(spec, Duration::from_secs(5)).await.unwrap();
    let current = started.list("/t/", "", 0, &all(), None).items;
    let mut shared = 0;
    for item in &replayed.backlog {
        if let WatchItem::Event(_, obj) = item {
            let found = current.binary_search_by(|c| c.key().cmp(obj.key()));
            if let Some(now) = found.ok().map(|i| &current[i]) {
                if now.revision() == obj.revision() {
                    assert!(Arc::ptr_eq(now, obj), "{} decoded twice", obj.key());
                    shared += 1;
                }
            }
        }
    }
    assert!(shared > 3000, "{shared} objects shared");
    // Updates flip a value's parity: through `even()` they are ADDED and DELETED events.
    for (filter, kinds) in [
        (all(), [EventType::Modified, EventType::Deleted]),
        (even(), [EventType::Added, EventType::Deleted]),
    ] {
        let seen: Vec<EventType> = backlog(&started, mid, filter)
            .await
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        for kind in kinds {
            assert!(seen.contains(&kind), "no {kind:?} event");
        }
    }
}
