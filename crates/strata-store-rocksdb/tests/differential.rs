//! A randomized comparison of `RocksStore` with the in-memory reference engine: the same writes
//! and compactions must give the same answers to every read, before and after a reopen.

use std::path::Path;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use strata_store::{MemoryStore, RangeRequest, Revision, Store};
use strata_store_rocksdb::{RocksOptions, RocksStore};

/// A seeded generator (deterministic per seed; each seed is printed before it runs).
struct Rng(StdRng);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n.max(1))
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Keys that stress the layout: one key a prefix of others, a 0x01 byte, non-ASCII, empty value
/// keys sharing prefixes with other ranges.
const KEYS: &[&str] = &[
    "/a", "/a/b", "/a/b/c", "/a\u{1}", "/a/ü", "/b/x", "/b/y", "/bb", "/c/1", "/c/10", "/c/2",
];
const PREFIXES: &[&str] = &["", "/", "/a", "/a/", "/b", "/b/", "/c/", "/z"];

fn open(dir: &Path) -> RocksStore {
    RocksStore::open(
        dir,
        RocksOptions {
            sync: false,
            ..RocksOptions::default()
        },
    )
    .expect("open the store")
}

async fn apply_random_write(rng: &mut Rng, mem: &MemoryStore, rocks: &RocksStore) {
    let key = rng.pick(KEYS);
    let value = Bytes::from(format!("v{}", rng.below(1000)).repeat(rng.below(3) as usize));
    let current = mem.current_revision().get();
    // Mostly the right expected revision, sometimes a stale or absent one.
    let expected = match mem.get(key, None).await.unwrap().0 {
        Some(kv) if rng.below(4) > 0 => kv.mod_revision,
        _ => Revision(rng.below(current + 2)),
    };
    match rng.below(10) {
        0..=3 => assert_eq!(
            mem.create(key, value.clone()).await,
            rocks.create(key, value).await,
            "create {key}"
        ),
        4..=6 => assert_eq!(
            mem.update(key, value.clone(), expected).await,
            rocks.update(key, value, expected).await,
            "update {key} expecting {expected}"
        ),
        7 => assert_eq!(
            mem.delete(key, None).await,
            rocks.delete(key, None).await,
            "delete {key}"
        ),
        8 => assert_eq!(
            mem.delete(key, Some(expected)).await,
            rocks.delete(key, Some(expected)).await,
            "delete {key} expecting {expected}"
        ),
        _ => {
            let to = Revision(rng.below(current + 2));
            assert_eq!(
                mem.compact(to).await,
                rocks.compact(to).await,
                "compact {to}"
            );
        }
    }
}

async fn compare_reads(rng: &mut Rng, mem: &MemoryStore, rocks: &RocksStore) {
    assert_eq!(mem.current_revision(), rocks.current_revision());
    assert_eq!(mem.compacted_revision(), rocks.compacted_revision());
    let current = mem.current_revision().get();
    for _ in 0..4 {
        let rev = match rng.below(4) {
            0 => None,
            _ => Some(Revision(rng.below(current + 2))),
        };
        for key in KEYS {
            assert_eq!(
                mem.get(key, rev).await,
                rocks.get(key, rev).await,
                "get {key} at {rev:?}"
            );
        }
        let prefix = rng.pick(PREFIXES);
        let start = match rng.below(3) {
            0 => String::new(),
            1 => rng.pick(KEYS).to_string(),
            _ => format!("{}\0", rng.pick(KEYS)),
        };
        let req = RangeRequest {
            prefix: prefix.into(),
            start,
            limit: rng.below(4) as usize,
            revision: rev,
            skip_remaining: rng.below(2) == 1,
        };
        assert_eq!(
            mem.range(req.clone()).await,
            rocks.range(req.clone()).await,
            "{req:?}"
        );
        let after = Revision(rng.below(current + 2));
        let limit = rng.below(5) as usize;
        assert_eq!(
            mem.changes(after, limit).await,
            rocks.changes(after, limit).await,
            "changes after {after} limit {limit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_the_memory_engine() {
    for seed in 1..=6u64 {
        eprintln!("seed {seed}");
        let mut rng = Rng(StdRng::seed_from_u64(seed));
        let dir = tempfile::tempdir().unwrap();
        let mem = MemoryStore::new();
        let mut rocks = open(dir.path());
        for step in 0..400 {
            apply_random_write(&mut rng, &mem, &rocks).await;
            if step % 10 == 0 {
                compare_reads(&mut rng, &mem, &rocks).await;
            }
            if step % 150 == 149 {
                drop(rocks);
                rocks = open(dir.path());
                compare_reads(&mut rng, &mem, &rocks).await;
            }
        }
        compare_reads(&mut rng, &mem, &rocks).await;
    }
}
