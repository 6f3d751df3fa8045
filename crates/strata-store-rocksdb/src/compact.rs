//! Compaction: moving the compaction point and deleting the history it makes unreachable. Not
//! RocksDB's own (LSM) compaction, which runs in the background on its own.
//!
//! Only keys changed since the previous compaction point can have versions to drop: an earlier
//! compaction left every other key with at most one version at or below that point. So the work
//! is proportional to the changes being compacted away, not to the size of the store.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use rocksdb::WriteBatch;
use strata_store::{Result, Revision, StoreError};

use crate::encoding::{
    decode_change, decode_u64, history_key, is_tombstone, split_history_key, CF_CHANGES,
    CF_HISTORY, CF_META, META_COMPACTED,
};
use crate::read::{current_key, current_value};
use crate::{db_err, Shared};

/// Deletions per write batch, to bound the memory of one batch.
const DELETES_PER_BATCH: usize = 4096;

/// Moves the compaction point to `target` and deletes what only reads below it could see. The
/// caller serialises calls.
pub(crate) fn compact(shared: &Shared, target: Revision) -> Result<()> {
    let current = shared.current.load(Ordering::SeqCst);
    if target.get() > current {
        return Err(StoreError::Invalid(format!(
            "cannot compact to {target}, beyond the current revision {current}"
        )));
    }
    let old = shared.compacted.load(Ordering::SeqCst);
    if target.get() <= old {
        return Ok(());
    }
    let target = target.get();
    let (history, changes, meta) = (
        shared.cf(CF_HISTORY)?,
        shared.cf(CF_CHANGES)?,
        shared.cf(CF_META)?,
    );

    // The point is durable before anything is deleted, and published before any deletion is
    // visible (see `View::new`). A crash part-way leaves unreachable versions behind, which no
    // read ever returns.
    let mut batch = WriteBatch::default();
    batch.put_cf(meta, META_COMPACTED, target.to_be_bytes());
    shared
        .db
        .write_opt(batch, &shared.write_options())
        .map_err(db_err)?;
    shared.compacted.store(target, Ordering::SeqCst);

    let mut keys = BTreeSet::new();
    let mut feed = shared.db.raw_iterator_cf(changes);
    feed.seek((old + 1).to_be_bytes());
    while feed.valid() {
        if decode_u64(current_key(&feed)?)? > target {
            break;
        }
        keys.insert(decode_change(current_value(&feed)?)?.1.to_vec());
        feed.next();
    }
    feed.status().map_err(db_err)?;
    drop(feed);

    let mut batch = WriteBatch::default();
    let mut it = shared
        .db
        .raw_iterator_cf_opt(history, crate::read::whole_order());
    for key in &keys {
        // Versions of `key` at or below the point, oldest first; the newest of them stays
        // (it is the state at `target`) unless it is a deletion.
        let mut versions = Vec::new();
        it.seek(history_key(key, 0));
        while it.valid() {
            let (k, rev) = split_history_key(current_key(&it)?)?;
            if k != key.as_slice() || rev > target {
                break;
            }
            versions.push((rev, is_tombstone(current_value(&it)?)?));
            it.next();
        }
        it.status().map_err(db_err)?;
        let keep = match versions.last() {
            Some((_, false)) => versions.len() - 1,
            _ => versions.len(),
        };
        for (rev, _) in &versions[..keep] {
            batch.delete_cf(history, history_key(key, *rev));
        }
        if batch.len() >= DELETES_PER_BATCH {
            let full = std::mem::take(&mut batch);
            shared
                .db
                .write_opt(full, &shared.write_options())
                .map_err(db_err)?;
        }
    }
    batch.delete_range_cf(changes, 0u64.to_be_bytes(), (target + 1).to_be_bytes());
    shared
        .db
        .write_opt(batch, &shared.write_options())
        .map_err(db_err)?;
    tracing::debug!(
        from = old,
        to = target,
        keys = keys.len(),
        "compacted history"
    );
    Ok(())
}
