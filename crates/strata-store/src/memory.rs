//! `MemoryStore`: the in-memory reference engine. Simple over fast; it defines by example what
//! the conformance suite expects, and backs unit tests that need no disk.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use crate::{
    Changes, Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store, StoreError,
};

/// One version of a key: its state from `revision` on (`None` = deleted).
#[derive(Clone, Debug)]
struct Version {
    revision: Revision,
    kv: Option<KeyValue>,
}

#[derive(Default)]
struct State {
    current: Revision,
    compacted: Revision,
    /// How far each write moves the revision (1 unless made with [`MemoryStore::numbered`]).
    stride: u64,
    history: BTreeMap<String, Vec<Version>>,
    events: Vec<Event>,
}

impl State {
    /// The revision of the next write.
    fn next_revision(&self) -> Revision {
        Revision(self.current.0 + self.stride)
    }

    fn latest(&self, key: &str) -> Option<&KeyValue> {
        self.history.get(key)?.last()?.kv.as_ref()
    }

    fn at(&self, key: &str, rev: Revision) -> Option<&KeyValue> {
        let versions = self.history.get(key)?;
        versions
            .iter()
            .rev()
            .find(|v| v.revision <= rev)
            .and_then(|v| v.kv.as_ref())
    }

    fn check_read(&self, rev: Revision) -> Result<()> {
        if rev < self.compacted {
            return Err(StoreError::Compacted {
                requested: rev,
                compacted: self.compacted,
            });
        }
        if rev > self.current {
            return Err(StoreError::FutureRevision {
                requested: rev,
                current: self.current,
            });
        }
        Ok(())
    }

    fn record(&mut self, key: &str, kv: Option<KeyValue>, event: Event) {
        let revision = event.revision();
        self.history
            .entry(key.to_string())
            .or_default()
            .push(Version { revision, kv });
        self.events.push(event);
        self.current = revision;
    }
}

/// An engine that keeps everything in memory. Not durable; for tests and as the reference.
///
/// It keeps every version of every key until [`Store::compact`] drops them, and passes the
/// whole [`conformance`](crate::conformance) suite, numbered either way:
///
/// ```
/// use strata_store::{Bytes, MemoryStore, RangeRequest, Revision, Store};
///
/// # strata_store::tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// // As one user of a shared revision counter sees it: from 1000, in steps of 3.
/// let store = MemoryStore::numbered(Revision(1000), 3);
/// let a = store.create("/t/a", Bytes::from("1")).await.unwrap();
/// let b = store.create("/t/b", Bytes::from("2")).await.unwrap();
/// assert_eq!((a.mod_revision, b.mod_revision), (Revision(1003), Revision(1006)));
///
/// // Another prefix moved the shared counter: progress without events.
/// let moved = store.advance(10);
/// let changes = store.changes(b.mod_revision, 0).await.unwrap();
/// assert!(changes.events.is_empty());
/// assert_eq!(changes.revision, moved);
///
/// let page = store
///     .range(RangeRequest { prefix: "/t/".into(), limit: 1, ..Default::default() })
///     .await
///     .unwrap();
/// assert_eq!((page.kvs.len(), page.remaining), (1, 1));
///
/// store.compact(b.mod_revision).await.unwrap();
/// assert!(store.get("/t/a", Some(a.mod_revision)).await.is_err());
/// # });
/// ```
pub struct MemoryStore {
    state: Mutex<State>,
    notify: watch::Sender<Revision>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store whose writes are numbered 1, 2, 3…, like the embedded engine's.
    pub fn new() -> Self {
        Self::numbered(Revision::ZERO, 1)
    }

    /// A store whose history starts after `start` and whose writes are `stride` revisions apart,
    /// as one user of a shared revision counter sees its own writes (etcd, where other keys
    /// move the revision too). The conformance suite runs against such a store to show that it
    /// assumes nothing about numbering beyond order.
    pub fn numbered(start: Revision, stride: u64) -> Self {
        let state = State {
            current: start,
            compacted: start,
            stride: stride.max(1),
            ..State::default()
        };
        Self {
            state: Mutex::new(state),
            notify: watch::channel(start).0,
        }
    }

    /// Moves the revision by `by` without a change of this store's keys, as writes under other
    /// prefixes of a shared keyspace do: the feed reports the progress with no events.
    pub fn advance(&self, by: u64) -> Revision {
        let rev = {
            let mut s = self.lock();
            s.current = Revision(s.current.0 + by);
            s.current
        };
        self.notify.send_replace(rev);
        rev
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated (each write is one
        // push sequence), so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let kv = {
            let mut s = self.lock();
            if s.latest(key).is_some() {
                return Err(StoreError::Exists(key.into()));
            }
            let rev = s.next_revision();
            let kv = KeyValue {
                key: key.into(),
                value,
                create_revision: rev,
                mod_revision: rev,
            };
            s.record(
                key,
                Some(kv.clone()),
                Event::Put {
                    kv: kv.clone(),
                    prev: None,
                },
            );
            kv
        };
        self.notify.send_replace(kv.mod_revision);
        Ok(kv)
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let kv = {
            let mut s = self.lock();
            let prev = s
                .latest(key)
                .cloned()
                .ok_or_else(|| StoreError::NotFound(key.into()))?;
            if prev.mod_revision != expected {
                return Err(StoreError::Conflict {
                    key: key.into(),
                    expected,
                    actual: prev.mod_revision,
                });
            }
            let rev = s.next_revision();
            let kv = KeyValue {
                key: key.into(),
                value,
                create_revision: prev.create_revision,
                mod_revision: rev,
            };
            s.record(
                key,
                Some(kv.clone()),
                Event::Put {
                    kv: kv.clone(),
                    prev: Some(prev),
                },
            );
            kv
        };
        self.notify.send_replace(kv.mod_revision);
        Ok(kv)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let (prev, rev) = {
            let mut s = self.lock();
            let prev = s
                .latest(key)
                .cloned()
                .ok_or_else(|| StoreError::NotFound(key.into()))?;
            if let Some(expected) = expected {
                if prev.mod_revision != expected {
                    return Err(StoreError::Conflict {
                        key: key.into(),
                        expected,
                        actual: prev.mod_revision,
                    });
                }
            }
            let rev = s.next_revision();
            s.record(
                key,
                None,
                Event::Delete {
                    prev: prev.clone(),
                    revision: rev,
                },
            );
            (prev, rev)
        };
        self.notify.send_replace(rev);
        Ok((prev, rev))
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        let s = self.lock();
        let rev = revision.unwrap_or(s.current);
        s.check_read(rev)?;
        Ok((s.at(key, rev).cloned(), rev))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let s = self.lock();
        let rev = req.revision.unwrap_or(s.current);
        s.check_read(rev)?;
        let start = if req.start.is_empty() {
            req.prefix.clone()
        } else {
            if !req.start.starts_with(&req.prefix) {
                return Err(StoreError::Invalid(format!(
                    "start key {:?} is outside prefix {:?}",
                    req.start, req.prefix
                )));
            }
            req.start.clone()
        };
        let mut kvs = Vec::new();
        let mut remaining = 0u64;
        for (key, _) in s.history.range(start..) {
            if !key.starts_with(&req.prefix) {
                break;
            }
            if let Some(kv) = s.at(key, rev) {
                if req.limit == 0 || kvs.len() < req.limit {
                    kvs.push(kv.clone());
                } else if req.skip_remaining {
                    break;
                } else {
                    remaining += 1;
                }
            }
        }
        Ok(RangeResponse {
            kvs,
            revision: rev,
            remaining,
        })
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        let s = self.lock();
        if after < s.compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: s.compacted,
            });
        }
        let start = s.events.partition_point(|e| e.revision() <= after);
        let end = if limit == 0 {
            s.events.len()
        } else {
            (start + limit).min(s.events.len())
        };
        let events = s.events[start..end].to_vec();
        let revision = match events.last() {
            Some(last) if end < s.events.len() => last.revision(),
            _ => s.current,
        };
        Ok(Changes { events, revision })
    }

    fn current_revision(&self) -> Revision {
        self.lock().current
    }

    fn compacted_revision(&self) -> Revision {
        self.lock().compacted
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut s = self.lock();
        if revision > s.current {
            return Err(StoreError::Invalid(format!(
                "cannot compact to {revision}, beyond the current revision {}",
                s.current
            )));
        }
        if revision <= s.compacted {
            return Ok(());
        }
        s.compacted = revision;
        // Keep, per key, the newest version at or below the compaction point and everything
        // after it; drop keys whose state at that point is deletion and that have nothing newer.
        s.history.retain(|_, versions| {
            let keep_from = versions
                .iter()
                .rposition(|v| v.revision <= revision)
                .unwrap_or(0);
            versions.drain(..keep_from);
            !(versions.len() == 1 && versions[0].kv.is_none() && versions[0].revision <= revision)
        });
        let cut = s.events.partition_point(|e| e.revision() <= revision);
        s.events.drain(..cut);
        Ok(())
    }

    fn subscribe(&self) -> watch::Receiver<Revision> {
        self.notify.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::conformance::Subject;
    use crate::{MemoryStore, Revision};

    /// Numbered 1, 2, 3… like the embedded engine.
    mod counted {
        use super::*;
        crate::store_conformance_tests!(async { Subject::new(Arc::new(MemoryStore::new())) });
    }

    /// Numbered as one user of a shared revision counter sees it: from 1000, in steps of 3.
    mod shared_keyspace {
        use super::*;
        crate::store_conformance_tests!(async {
            Subject::new(Arc::new(MemoryStore::numbered(Revision(1000), 3)))
        });
    }
}
