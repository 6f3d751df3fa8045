//! The single writer thread and its group commit. Not reads: those run on snapshots elsewhere.
//!
//! Every write request goes through one channel to one thread. The thread takes whatever is
//! queued (up to [`MAX_BATCH`]), checks each request in arrival order against the committed state
//! plus the earlier requests of the same batch, assigns consecutive revisions to the ones that
//! pass, writes them all in one `WriteBatch` (one WAL fsync when `sync` is on), publishes the new
//! revision, and only then answers every request of the batch. Requests that queue up while a
//! batch is syncing share the next sync.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rocksdb::WriteBatch;
use strata_store::{Event, KeyValue, Result, Revision, StoreError};
use tokio::sync::oneshot;

use crate::encoding::{
    decode_record, encode_change, encode_live, encode_tombstone, history_key, CF_CHANGES,
    CF_HISTORY, CF_META, META_CURRENT,
};
use crate::read::version_at;
use crate::{db_err, Iter, Shared};

/// The most requests one batch carries, so one batch's latency and memory stay bounded.
const MAX_BATCH: usize = 1024;

pub(crate) enum Op {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
    /// Successive updates of one key (`Store::update_chain`): staged together, so the whole
    /// chain lands in one batch or not at all.
    Chain {
        key: String,
        values: Vec<Bytes>,
        expected: Revision,
    },
}

/// What a write answers: the entry written (for a delete, the last state before it) and the
/// revision of the write.
pub(crate) type Outcome = (KeyValue, Revision);

pub(crate) struct Request {
    pub(crate) op: Op,
    pub(crate) reply: Reply,
}

/// Where a request's answer goes: one entry, or a chain's entries.
pub(crate) enum Reply {
    One(oneshot::Sender<Result<Outcome>>),
    Chain(oneshot::Sender<Result<Vec<KeyValue>>>),
}

/// What a staged request produced, matching its [`Reply`].
enum Answer {
    One(Outcome),
    Chain(Vec<KeyValue>),
}

impl Reply {
    fn send(self, answer: Result<Answer>) {
        // The caller may have given up waiting; the write stands either way.
        match self {
            Reply::One(tx) => {
                let _ = tx.send(answer.and_then(Answer::one));
            }
            Reply::Chain(tx) => {
                let _ = tx.send(answer.and_then(Answer::chain));
            }
        }
    }
}

impl Answer {
    fn one(self) -> Result<Outcome> {
        match self {
            Answer::One(outcome) => Ok(outcome),
            Answer::Chain(_) => Err(mismatched()),
        }
    }

    fn chain(self) -> Result<Vec<KeyValue>> {
        match self {
            Answer::Chain(kvs) => Ok(kvs),
            Answer::One(_) => Err(mismatched()),
        }
    }
}

fn mismatched() -> StoreError {
    StoreError::Invalid("a write was answered in another request's form".into())
}

/// Runs until every sender is gone and the queue is empty.
pub(crate) fn run(shared: Arc<Shared>, requests: Receiver<Request>) {
    let mut current = shared.current.load(Ordering::SeqCst);
    while let Ok(first) = requests.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(req) => batch.push(req),
                Err(_) => break,
            }
        }
        commit(&shared, &mut current, batch);
    }
}

/// Checks, writes and answers one batch; `current` is the last committed revision.
fn commit(shared: &Shared, current: &mut u64, requests: Vec<Request>) {
    let mut staged = Staged {
        batch: WriteBatch::default(),
        pending: HashMap::new(),
        next: *current,
        events: Vec::new(),
    };
    let mut answers = Vec::with_capacity(requests.len());
    match shared.cf(CF_HISTORY) {
        Ok(history) => {
            // Sees exactly the committed state: this thread is the only one that adds versions.
            let mut it = shared
                .db
                .raw_iterator_cf_opt(history, crate::read::one_key());
            for req in requests {
                let result = staged.apply(shared, &mut it, req.op);
                answers.push((req.reply, result));
            }
        }
        Err(e) => answers.extend(requests.into_iter().map(|r| (r.reply, Err(e.clone())))),
    }

    if staged.next > *current {
        let written = shared.cf(CF_META).and_then(|meta| {
            staged
                .batch
                .put_cf(meta, META_CURRENT, staged.next.to_be_bytes());
            let started = Instant::now();
            shared
                .db
                .write_opt(staged.batch, &shared.write_options())
                .map_err(db_err)
                .map(|()| started.elapsed())
        });
        match written {
            Ok(took) => {
                shared
                    .writes
                    .fetch_add(staged.next - *current, Ordering::Relaxed);
                shared.committed(took);
                *current = staged.next;
                // Kept before publishing: a feed read of the new revision finds its events.
                shared.keep_recent(staged.events);
                // Publish before answering: a read that starts after an answer must see it.
                shared.current.store(*current, Ordering::SeqCst);
                shared.notify.send_replace(Revision(*current));
            }
            Err(e) => {
                tracing::error!(error = %e, "write batch failed; failing its {} requests", answers.len());
                // Precondition answers may rest on writes of this batch that did not land.
                for (_, result) in &mut answers {
                    *result = Err(e.clone());
                }
            }
        }
    }
    for (reply, result) in answers {
        reply.send(result);
    }
}

/// A batch being assembled.
struct Staged {
    batch: WriteBatch,
    /// The state of keys written earlier in this batch (`None` = deleted), which the database
    /// does not show yet.
    pending: HashMap<String, Option<KeyValue>>,
    /// The last revision handed out.
    next: u64,
    /// The events of the staged writes, in revision order.
    events: Vec<Event>,
}

impl Staged {
    fn latest(&self, it: &mut Iter<'_>, key: &str) -> Result<Option<KeyValue>> {
        if let Some(state) = self.pending.get(key) {
            return Ok(state.clone());
        }
        match version_at(it, key.as_bytes(), u64::MAX)? {
            Some((rev, raw)) => decode_record(&raw)?.into_kv(key.as_bytes(), rev),
            None => Ok(None),
        }
    }

    /// Checks one request and stages it on success; a failed check consumes no revision.
    fn apply(&mut self, shared: &Shared, it: &mut Iter<'_>, op: Op) -> Result<Answer> {
        let (history, changes) = (shared.cf(CF_HISTORY)?, shared.cf(CF_CHANGES)?);
        let rev = self.next + 1;
        let outcome = match op {
            Op::Chain {
                key,
                values,
                expected,
            } => {
                let Some(prev) = self.latest(it, &key)? else {
                    return Err(StoreError::NotFound(key));
                };
                check_expected(&key, expected, prev.mod_revision)?;
                let create_revision = prev.create_revision;
                let mut written: Vec<KeyValue> = Vec::with_capacity(values.len());
                for value in values {
                    self.next += 1;
                    let kv = KeyValue {
                        key: key.clone(),
                        value,
                        create_revision,
                        mod_revision: Revision(self.next),
                    };
                    let before = written.last().cloned().unwrap_or_else(|| prev.clone());
                    written.push(self.put(history, changes, kv, Some(before), self.next).0);
                }
                return Ok(Answer::Chain(written));
            }
            Op::Create { key, value } => {
                if self.latest(it, &key)?.is_some() {
                    return Err(StoreError::Exists(key));
                }
                let kv = KeyValue {
                    key,
                    value,
                    create_revision: Revision(rev),
                    mod_revision: Revision(rev),
                };
                self.put(history, changes, kv, None, rev)
            }
            Op::Update {
                key,
                value,
                expected,
            } => {
                let Some(prev) = self.latest(it, &key)? else {
                    return Err(StoreError::NotFound(key));
                };
                check_expected(&key, expected, prev.mod_revision)?;
                let kv = KeyValue {
                    key,
                    value,
                    create_revision: prev.create_revision,
                    mod_revision: Revision(rev),
                };
                self.put(history, changes, kv, Some(prev), rev)
            }
            Op::Delete { key, expected } => {
                let Some(prev) = self.latest(it, &key)? else {
                    return Err(StoreError::NotFound(key));
                };
                if let Some(expected) = expected {
                    check_expected(&key, expected, prev.mod_revision)?;
                }
                let k = key.as_bytes();
                self.batch
                    .put_cf(history, history_key(k, rev), encode_tombstone());
                self.batch
                    .put_cf(changes, rev.to_be_bytes(), encode_change(true, k));
                self.pending.insert(key, None);
                self.events.push(Event::Delete {
                    prev: prev.clone(),
                    revision: Revision(rev),
                });
                (prev, Revision(rev))
            }
        };
        self.next = rev;
        Ok(Answer::One(outcome))
    }

    fn put(
        &mut self,
        history: &rocksdb::ColumnFamily,
        changes: &rocksdb::ColumnFamily,
        kv: KeyValue,
        prev: Option<KeyValue>,
        rev: u64,
    ) -> Outcome {
        let k = kv.key.as_bytes();
        self.batch.put_cf(
            history,
            history_key(k, rev),
            encode_live(kv.create_revision.get(), &kv.value),
        );
        self.batch
            .put_cf(changes, rev.to_be_bytes(), encode_change(false, k));
        self.pending.insert(kv.key.clone(), Some(kv.clone()));
        self.events.push(Event::Put {
            kv: kv.clone(),
            prev,
        });
        (kv, Revision(rev))
    }
}

fn check_expected(key: &str, expected: Revision, actual: Revision) -> Result<()> {
    if expected != actual {
        return Err(StoreError::Conflict {
            key: key.into(),
            expected,
            actual,
        });
    }
    Ok(())
}
