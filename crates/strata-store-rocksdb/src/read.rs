//! Reads at one revision over a RocksDB snapshot: `get`, `range` and the change feed. Not
//! writes, not compaction.

use std::sync::atomic::Ordering;

use rocksdb::{ErrorKind, ReadOptions, ReadTier, SnapshotWithThreadMode};
use strata_store::{
    Changes, Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, StoreError,
};

use crate::encoding::{
    after_key_versions, decode_change, decode_record, decode_u64, history_key, is_tombstone,
    split_history_key, CF_CHANGES, CF_HISTORY,
};
use crate::{db_err, Db, Iter, Shared};

/// Versions of one key stepped over one by one before a range read seeks instead: after
/// compaction most keys have one or two versions, and `next` is cheaper than a seek.
const LINEAR_STEPS: usize = 4;

/// A consistent view: a snapshot holding every write up to `current`, and none of the deletions
/// made by compactions beyond `compacted`.
pub(crate) struct View<'a> {
    shared: &'a Shared,
    snap: SnapshotWithThreadMode<'a, Db>,
    current: u64,
    compacted: u64,
}

impl<'a> View<'a> {
    pub(crate) fn new(shared: &'a Shared) -> View<'a> {
        // The order is the point. The writer commits before it publishes `current`, so reading
        // `current` first means the snapshot holds every write up to it. Compaction publishes
        // `compacted` before it deletes, so reading `compacted` last means that if it is still
        // the old point, the snapshot predates any deletion for a newer one.
        let current = shared.current.load(Ordering::SeqCst);
        let snap = shared.db.snapshot();
        let compacted = shared.compacted.load(Ordering::SeqCst);
        View {
            shared,
            snap,
            current,
            compacted,
        }
    }

    /// The revision to read at, or the error for one outside the retained history.
    pub(crate) fn resolve(&self, revision: Option<Revision>) -> Result<u64> {
        let rev = revision.map_or(self.current, Revision::get);
        if rev < self.compacted {
            return Err(StoreError::Compacted {
                requested: Revision(rev),
                compacted: Revision(self.compacted),
            });
        }
        if rev > self.current {
            return Err(StoreError::FutureRevision {
                requested: Revision(rev),
                current: Revision(self.current),
            });
        }
        Ok(rev)
    }

    /// An iterator over the whole of `cf`, in key order.
    fn iter(&self, cf: &str) -> Result<Iter<'_>> {
        Ok(self
            .snap
            .raw_iterator_cf_opt(self.shared.cf(cf)?, whole_order()))
    }

    /// `key` as of `rev` (already resolved), `None` when absent then.
    pub(crate) fn get(&self, key: &str, rev: u64) -> Result<Option<KeyValue>> {
        self.read_through(ReadTier::All, key, rev)?.ok_or_else(|| {
            StoreError::Unavailable("a read of every tier came back incomplete".into())
        })
    }

    /// [`View::get`] from what RocksDB holds in memory (its memtables and block cache), or
    /// `None` when the answer is on disk only.
    pub(crate) fn get_in_memory(&self, key: &str, rev: u64) -> Result<Option<Option<KeyValue>>> {
        self.read_through(ReadTier::BlockCache, key, rev)
    }

    /// [`View::get`] through `tier`, or `None` when the answer lies beyond it.
    fn read_through(
        &self,
        tier: ReadTier,
        key: &str,
        rev: u64,
    ) -> Result<Option<Option<KeyValue>>> {
        let mut options = one_key();
        options.set_read_tier(tier);
        let mut it = self
            .snap
            .raw_iterator_cf_opt(self.shared.cf(CF_HISTORY)?, options);
        it.seek_for_prev(history_key(key.as_bytes(), rev));
        if let Err(e) = it.status() {
            return match e.kind() {
                ErrorKind::Incomplete => Ok(None),
                _ => Err(db_err(e)),
            };
        }
        match landed_on(&it, key.as_bytes())? {
            Some((mod_rev, raw)) => decode_record(&raw)?
                .into_kv(key.as_bytes(), mod_rev)
                .map(Some),
            None => Ok(Some(None)),
        }
    }

    pub(crate) fn range(&self, req: &RangeRequest) -> Result<RangeResponse> {
        let rev = self.resolve(req.revision)?;
        let start = if req.start.is_empty() {
            req.prefix.as_bytes()
        } else if req.start.starts_with(&req.prefix) {
            req.start.as_bytes()
        } else {
            return Err(StoreError::Invalid(format!(
                "start key {:?} is outside prefix {:?}",
                req.start, req.prefix
            )));
        };
        let prefix = req.prefix.as_bytes();
        let mut it = self.iter(CF_HISTORY)?;
        it.seek(start);
        let mut kvs = Vec::new();
        let mut remaining = 0u64;
        while it.valid() {
            let key = split_history_key(current_key(&it)?)?.0.to_vec();
            if key.as_slice() < start {
                // Only when `start` is `<key> 0x00…`: the seek landed inside that key's versions.
                it.seek(after_key_versions(&key));
                continue;
            }
            if !key.starts_with(prefix) {
                break;
            }
            let Some((mod_rev, raw)) = group_version_at(&mut it, &key, rev)? else {
                continue;
            };
            if req.limit == 0 || kvs.len() < req.limit {
                if let Some(kv) = decode_record(&raw)?.into_kv(&key, mod_rev)? {
                    kvs.push(kv);
                }
            } else if req.skip_remaining {
                break;
            } else if !is_tombstone(&raw)? {
                remaining += 1;
            }
        }
        it.status().map_err(db_err)?;
        Ok(RangeResponse {
            kvs,
            revision: Revision(rev),
            remaining,
        })
    }

    pub(crate) fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        not_compacted(after, self.compacted)?;
        let mut events: Vec<Event> = Vec::new();
        if after.get() >= self.current {
            return Ok(changes_through(events, limit, self.current));
        }
        let mut feed = self.iter(CF_CHANGES)?;
        let mut hist = self.iter(CF_HISTORY)?;
        feed.seek(after.next().to_be_bytes());
        while feed.valid() && (limit == 0 || events.len() < limit) {
            let rev = decode_u64(current_key(&feed)?)?;
            if rev > self.current {
                // Committed but not yet published: it belongs to a later read.
                break;
            }
            let (delete, key) = decode_change(current_value(&feed)?)?;
            events.push(self.event(&mut hist, key, rev, delete)?);
            feed.next();
        }
        feed.status().map_err(db_err)?;
        Ok(changes_through(events, limit, self.current))
    }

    /// The event for the change of `key` at `rev`: the version written then and the one before.
    fn event(&self, hist: &mut Iter<'_>, key: &[u8], rev: u64, delete: bool) -> Result<Event> {
        let missing =
            || StoreError::Corrupt(format!("change at revision {rev} has no history entry"));
        let (found, raw) = version_at(hist, key, rev)?.ok_or_else(missing)?;
        if found != rev {
            return Err(missing());
        }
        let now = decode_record(&raw)?.into_kv(key, rev)?;
        // The version before is the previous entry of the same key, if any.
        hist.prev();
        let prev = if hist.valid() {
            match split_history_key(current_key(hist)?)? {
                (k, prev_rev) if k == key => {
                    decode_record(current_value(hist)?)?.into_kv(key, prev_rev)?
                }
                _ => None,
            }
        } else {
            hist.status().map_err(db_err)?;
            None
        };
        match (delete, now, prev) {
            (false, Some(kv), prev) => Ok(Event::Put { kv, prev }),
            (true, None, Some(prev)) => Ok(Event::Delete {
                prev,
                revision: Revision(rev),
            }),
            _ => Err(StoreError::Corrupt(format!(
                "change at revision {rev} does not match the history of its key"
            ))),
        }
    }
}

/// Reading options for iterating across keys: in key order whatever the family's prefix
/// extractor (history's would otherwise confine a seek to one user key).
pub(crate) fn whole_order() -> ReadOptions {
    let mut o = ReadOptions::default();
    o.set_total_order_seek(true);
    o
}

/// Reading options for an iterator that only ever looks at the versions of one user key per
/// seek ([`version_at`]): history's bloom filters let it skip tables without that key.
pub(crate) fn one_key() -> ReadOptions {
    let mut o = ReadOptions::default();
    o.set_prefix_same_as_start(true);
    o
}

/// The newest version of `key` at or below `rev`: its revision and raw record. With a
/// [`one_key`] iterator the answer is exact for `key`; what it lands on otherwise is ignored.
pub(crate) fn version_at(
    it: &mut Iter<'_>,
    key: &[u8],
    rev: u64,
) -> Result<Option<(u64, Vec<u8>)>> {
    it.seek_for_prev(history_key(key, rev));
    landed_on(it, key)
}

/// The version of `key` an iterator that sought it stands on: its revision and raw record, or
/// `None` when it stands elsewhere.
fn landed_on(it: &Iter<'_>, key: &[u8]) -> Result<Option<(u64, Vec<u8>)>> {
    if !it.valid() {
        it.status().map_err(db_err)?;
        return Ok(None);
    }
    match split_history_key(current_key(it)?)? {
        (k, found) if k == key => Ok(Some((found, current_value(it)?.to_vec()))),
        _ => Ok(None),
    }
}

/// Like [`version_at`], for an iterator standing on the first version of `key`; leaves it on the
/// first entry of the next key.
fn group_version_at(it: &mut Iter<'_>, key: &[u8], rev: u64) -> Result<Option<(u64, Vec<u8>)>> {
    let mut best = None;
    for step in 0.. {
        if !it.valid() {
            it.status().map_err(db_err)?;
            return Ok(best);
        }
        let (k, found) = split_history_key(current_key(it)?)?;
        if k != key {
            return Ok(best);
        }
        if found > rev {
            break;
        }
        if step == LINEAR_STEPS {
            best = version_at(it, key, rev)?;
            break;
        }
        best = Some((found, current_value(it)?.to_vec()));
        it.next();
    }
    it.seek(after_key_versions(key));
    Ok(best)
}

pub(crate) fn current_key<'i>(it: &'i Iter<'_>) -> Result<&'i [u8]> {
    it.key()
        .ok_or_else(|| StoreError::Unavailable("iterator lost its position".into()))
}

pub(crate) fn current_value<'i>(it: &'i Iter<'_>) -> Result<&'i [u8]> {
    it.value()
        .ok_or_else(|| StoreError::Unavailable("iterator lost its position".into()))
}

/// Refuses a change feed starting at `after` once the changes after it are compacted away.
pub(crate) fn not_compacted(after: Revision, compacted: u64) -> Result<()> {
    if after.get() < compacted {
        return Err(StoreError::Compacted {
            requested: after,
            compacted: Revision(compacted),
        });
    }
    Ok(())
}

/// The changes read up to `current` (the revision published when the read began): complete
/// through `current`, or, when cut short by `limit`, only through the last event returned.
pub(crate) fn changes_through(events: Vec<Event>, limit: usize, current: u64) -> Changes {
    let revision = match events.last() {
        Some(last) if limit != 0 && events.len() == limit => last.revision(),
        _ => Revision(current),
    };
    Changes { events, revision }
}
