//! Engine-specific guarantees of `RocksStore` beyond the shared suite: reopening, surviving a
//! SIGKILL, group commit, and reads racing compaction.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use strata_store::{Event, RangeRequest, Revision, Store, StoreError};
use strata_store_rocksdb::{RocksOptions, RocksStore, COMMIT_BUCKETS};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn open(dir: &Path) -> RocksStore {
    RocksStore::open(dir, RocksOptions::default()).expect("open the store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_keeps_data_revisions_and_compaction_point() {
    let dir = tempfile::tempdir().unwrap();
    let (a, a2) = {
        let s = open(dir.path());
        let a = s.create("/m/a", b("1")).await.unwrap(); // 1
        let a2 = s.update("/m/a", b("2"), a.mod_revision).await.unwrap(); // 2
        s.create("/m/b", b("b")).await.unwrap(); // 3
        s.delete("/m/b", None).await.unwrap(); // 4
        s.create("/m/c", b("c")).await.unwrap(); // 5
        s.compact(Revision(3)).await.unwrap();
        (a, a2)
    };

    let s = open(dir.path());
    assert_eq!(s.current_revision(), Revision(5));
    assert_eq!(s.compacted_revision(), Revision(3));
    assert_eq!(*s.subscribe().borrow(), Revision(5));
    assert_eq!(s.get("/m/a", None).await.unwrap().0, Some(a2.clone()));
    assert_eq!(a2.create_revision, a.create_revision);
    assert_eq!(s.get("/m/b", None).await.unwrap().0, None);
    assert_eq!(
        s.get("/m/b", Some(Revision(3)))
            .await
            .unwrap()
            .0
            .map(|kv| kv.value),
        Some(b("b"))
    );
    assert!(matches!(
        s.get("/m/a", Some(Revision(2))).await,
        Err(StoreError::Compacted { .. })
    ));
    let feed = s.changes(Revision(3), 0).await.unwrap().events;
    assert_eq!(
        feed.iter().map(Event::revision).collect::<Vec<_>>(),
        [Revision(4), Revision(5)]
    );
    let kv = s.update("/m/a", b("3"), a2.mod_revision).await.unwrap();
    assert_eq!(
        kv.mod_revision,
        Revision(6),
        "revisions continue after reopen"
    );
    drop(s);

    let s = open(dir.path());
    assert_eq!(s.current_revision(), Revision(6));
    assert_eq!(s.get("/m/a", None).await.unwrap().0, Some(kv));
}

/// History tables keep bloom filters of user keys, which lookups of one key (every create's
/// existence check, every get) consult. Keys that extend one another (`/r/a`, `/r/a/b`,
/// `/r/ab`) are still told apart when their versions sit in tables (after a reopen), and
/// ranges across them keep key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_of_one_key_tell_keys_sharing_a_prefix_apart_in_tables() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        s.create("/r/a/b", b("ab")).await.unwrap();
        let v1 = s.create("/r/ab", b("1")).await.unwrap();
        s.update("/r/ab", b("2"), v1.mod_revision).await.unwrap();
    }
    let s = open(dir.path());
    assert!(matches!(
        s.create("/r/ab", b("x")).await,
        Err(StoreError::Exists(_))
    ));
    assert!(matches!(
        s.create("/r/a/b", b("x")).await,
        Err(StoreError::Exists(_))
    ));
    assert_eq!(s.get("/r/a", None).await.unwrap().0, None);
    s.create("/r/a", b("a")).await.unwrap();
    for (key, value) in [("/r/a", "a"), ("/r/a/b", "ab"), ("/r/ab", "2")] {
        let kv = s.get(key, None).await.unwrap().0.expect(key);
        assert_eq!(kv.value, b(value), "{key}");
    }
    assert_eq!(s.get("/r/b", None).await.unwrap().0, None);
    let listed = s
        .range(RangeRequest {
            prefix: "/r/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<&str> = listed.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/r/a", "/r/a/b", "/r/ab"]);
    // The version before the update is still found at its revision, through a table.
    let old = s.get("/r/ab", Some(Revision(2))).await.unwrap().0.unwrap();
    assert_eq!(old.value, b("1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_open_of_the_same_directory_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let _first = open(dir.path());
    assert!(matches!(
        RocksStore::open(dir.path(), RocksOptions::default()),
        Err(StoreError::Unavailable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_nul_bytes_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    assert!(matches!(
        s.create("/a\0b", b("x")).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.get("/a\0b", None).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(s.current_revision(), Revision(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_share_write_batches() {
    const TASKS: usize = 64;
    const PER_TASK: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(open(dir.path()));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..PER_TASK {
                    s.create(&format!("/g/{t}/{i}"), b("v")).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let stats = s.stats();
    assert_eq!(stats.writes, (TASKS * PER_TASK) as u64);
    assert!(
        stats.batches < stats.writes,
        "concurrent writes should share syncs: {stats:?}"
    );
    // Every committed batch was timed, and each time falls in one bucket unless it took longer
    // than the last bound (8 s, which a test's batch does not).
    assert!(stats.commit_nanos > 0, "{stats:?}");
    assert_eq!(stats.commit_buckets.iter().sum::<u64>(), stats.batches);
    assert_eq!(COMMIT_BUCKETS.len(), stats.commit_buckets.len());
    assert!(COMMIT_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    // Failed preconditions consume nothing.
    assert!(s.create("/g/0/0", b("v")).await.is_err());
    assert_eq!(s.stats(), stats);
}

/// A point read that the memtables or the block cache can answer is answered where it was
/// asked; one that needs the disk (after a reopen: the data flushed, the cache empty) reads it
/// there, with the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_reads_go_to_the_disk_only_when_memory_lacks_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let (a, c) = {
        let s = open(dir.path());
        let a = s.create("/r/a", b("1")).await.unwrap();
        let c = s.create("/r/c", b("3")).await.unwrap();
        assert_eq!(s.get("/r/a", None).await.unwrap().0, Some(a.clone()));
        assert_eq!(s.get("/r/b", None).await.unwrap().0, None);
        assert_eq!(s.stats().disk_gets, 0, "the memtable holds every version");
        (a, c)
    };
    // Closing flushed the memtables: the versions are in a table file only.
    let s = open(dir.path());
    assert_eq!(s.get("/r/a", None).await.unwrap().0, Some(a.clone()));
    assert_eq!(s.stats().disk_gets, 1);
    // The block read is in the cache now: the same table answers from memory, at any revision.
    assert_eq!(s.get("/r/c", None).await.unwrap().0, Some(c));
    assert_eq!(
        s.get("/r/a", Some(a.mod_revision)).await.unwrap().0,
        Some(a)
    );
    assert_eq!(s.get("/r/b", None).await.unwrap().0, None);
    assert_eq!(s.stats().disk_gets, 1);
}

/// Every revision belongs to a write of the one key, so a read at revision `r` must see the
/// version written at exactly `r`, or report `r` compacted, however compaction races it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_compaction_see_exact_versions() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(
        RocksStore::open(
            dir.path(),
            RocksOptions {
                sync: false,
                ..RocksOptions::default()
            },
        )
        .unwrap(),
    );
    let first = s.create("/k", b("0")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);

    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            let mut rev = first.mod_revision;
            while Instant::now() < deadline {
                rev = s
                    .update("/k", b(&rev.to_string()), rev)
                    .await
                    .unwrap()
                    .mod_revision;
            }
        })
    };
    let compactor = {
        let s = s.clone();
        tokio::spawn(async move {
            while Instant::now() < deadline {
                let to = Revision(s.current_revision().get().saturating_sub(2));
                s.compact(to).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    let mut readers = Vec::new();
    for _ in 0..2 {
        let s = s.clone();
        readers.push(tokio::spawn(async move {
            let mut checked = 0u64;
            while Instant::now() < deadline {
                let r = s.current_revision();
                match s.get("/k", Some(r)).await {
                    Ok((Some(kv), at)) => {
                        assert_eq!((kv.mod_revision, at), (r, r));
                        checked += 1;
                    }
                    Err(StoreError::Compacted { .. }) => {}
                    other => panic!("read at {r}: {other:?}"),
                }
                let req = RangeRequest {
                    prefix: "/".into(),
                    revision: Some(r),
                    ..Default::default()
                };
                match s.range(req).await {
                    Ok(page) => assert_eq!(
                        page.kvs
                            .iter()
                            .map(|kv| kv.mod_revision)
                            .collect::<Vec<_>>(),
                        [r]
                    ),
                    Err(StoreError::Compacted { .. }) => {}
                    Err(e) => panic!("range at {r}: {e:?}"),
                }
                // The changes after the compaction point always include the previous version.
                let after = s.compacted_revision();
                match s.changes(after, 1).await {
                    Ok(changes) => {
                        if let Some(Event::Put { kv, prev }) = changes.events.first() {
                            assert_eq!(kv.mod_revision, after.next());
                            let expected_prev = (after > Revision::ZERO).then_some(after);
                            assert_eq!(prev.as_ref().map(|p| p.mod_revision), expected_prev);
                        }
                    }
                    Err(StoreError::Compacted { .. }) => {}
                    Err(e) => panic!("changes after {after}: {e:?}"),
                }
            }
            checked
        }));
    }
    writer.await.unwrap();
    compactor.await.unwrap();
    let mut checked = 0;
    for r in readers {
        checked += r.await.unwrap();
    }
    assert!(checked > 0, "no read succeeded");
}

/// Set in the child process of [`acknowledged_writes_survive_sigkill`]: the store directory.
const CRASH_CHILD_DIR: &str = "STRATA_ROCKSDB_CRASH_CHILD_DIR";
const CRASH_TEST: &str = "acknowledged_writes_survive_sigkill";

/// The test re-runs its own binary as a writer, SIGKILLs it mid-stream, and checks that every
/// write the child acknowledged (printed) is in the reopened store.
#[test]
fn acknowledged_writes_survive_sigkill() {
    if let Some(dir) = std::env::var_os(CRASH_CHILD_DIR) {
        crash_child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CRASH_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CRASH_CHILD_DIR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the writer child");
    let stdout = child.stdout.take().unwrap();
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acks = Vec::new();
        let mut out = BufReader::new(stdout);
        let mut line = Vec::new();
        // Only complete lines count: the child may die in the middle of one.
        while out.read_until(b'\n', &mut line).unwrap_or(0) > 0 && line.ends_with(b"\n") {
            let text = String::from_utf8_lossy(&line);
            if let ["ACK", key, rev] = text.split_whitespace().collect::<Vec<_>>()[..] {
                acks.push((key.to_string(), Revision(rev.parse().unwrap())));
                let _ = first_tx.send(());
            }
            line.clear();
        }
        acks
    });
    first_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the child acknowledged no write");
    std::thread::sleep(Duration::from_secs(1));
    child.kill().expect("SIGKILL the child");
    child.wait().unwrap();
    let acks = reader.join().unwrap();
    assert!(acks.len() > 1, "too few writes to test: {}", acks.len());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = open(dir.path());
        let max = acks.iter().map(|(_, rev)| *rev).max().unwrap();
        assert!(s.current_revision() >= max);
        for (key, rev) in &acks {
            let kv = s.get(key, None).await.unwrap().0;
            let kv = kv.unwrap_or_else(|| panic!("acknowledged {key} at {rev} was lost"));
            assert_eq!((kv.mod_revision, &kv.value[..]), (*rev, key.as_bytes()));
        }
        // The history that survived is gap-free: no batch was half-applied.
        let feed = s.changes(Revision(0), 0).await.unwrap().events;
        let revs: Vec<u64> = feed.iter().map(|e| e.revision().get()).collect();
        assert_eq!(revs, (1..=s.current_revision().get()).collect::<Vec<_>>());
        let kv = s.create("/after-crash", b("x")).await.unwrap();
        assert!(kv.mod_revision > max);
        eprintln!(
            "{} acknowledged writes survived; {} recovered",
            acks.len(),
            revs.len()
        );
    });
}

/// The child side: 32 tasks create keys forever, printing each acknowledged one. Exits when the
/// parent stops reading, and after two minutes in any case.
fn crash_child(dir: &Path) -> ! {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = Arc::new(open(dir));
        let deadline = Instant::now() + Duration::from_secs(120);
        let tasks: Vec<_> = (0..32)
            .map(|t| {
                let s = s.clone();
                tokio::spawn(async move {
                    for i in 0.. {
                        let key = format!("/crash/{t}/{i}");
                        let kv = s.create(&key, b(&key)).await.unwrap();
                        let mut out = std::io::stdout().lock();
                        let printed = writeln!(out, "ACK {key} {}", kv.mod_revision)
                            .and_then(|()| out.flush());
                        if printed.is_err() || Instant::now() > deadline {
                            std::process::exit(0);
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    std::process::exit(0)
}
