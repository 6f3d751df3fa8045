//! The Strata storage engine on etcd v3: the [`Store`] trait over an etcd cluster, under a key
//! prefix (`/registry` by default, as kube-apiserver lays its keys out), so that several
//! stateless Strata replicas share one store. The only crate that links the etcd client.
//!
//! The mapping follows kube-apiserver's:
//! - a revision is etcd's revision; a create is `Txn(If create_revision(key) == 0 → Put)`, an
//!   update or a conditional delete `Txn(If mod_revision(key) == expected → Put/Delete; else
//!   Get)`, so a failed write leaves no trace;
//! - reads name etcd revisions; etcd's "required revision has been compacted" and "is a future
//!   revision" become [`StoreError::Compacted`] and [`StoreError::FutureRevision`];
//! - the change feed is etcd's watch from `after + 1` with previous values. Each call to
//!   [`Store::changes`] reads what etcd has up to the revision a quorum read reports, and says
//!   it is complete only through the last event it received: etcd 3.4 may deliver a requested
//!   progress notification ahead of pending events, so progress is never taken from one. An
//!   idle prefix therefore reports no progress while other prefixes move the shared revision;
//!   consistent reads must then be served from etcd itself (not done yet);
//! - compaction is etcd's, physical; the compaction point is the highest one this store has
//!   made or been told of (at connect time by a watch from revision 1).
//!
//! Keys in the [`Store`] API are the part after the prefix.

pub mod load;
pub mod testing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, DeleteOptions, EventType, GetOptions,
    PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use strata_store::{
    Changes, Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store, StoreError,
};
use tokio::sync::watch;

/// How long [`Store::changes`] waits for the next message of its watch before it takes the
/// events it has as all there are up to the quorum revision (only an idle prefix in a
/// keyspace that others write waits this long: otherwise the events reach that revision).
const QUIET: Duration = Duration::from_secs(1);

/// An etcd cluster as a [`Store`], under one key prefix.
pub struct EtcdStore {
    client: Client,
    prefix: String,
    current: AtomicU64,
    compacted: AtomicU64,
    notify: watch::Sender<Revision>,
    follower: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

fn unavailable(e: etcd_client::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// The key range of everything under `prefix`, as etcd takes it: the first key and the range
/// end. An empty prefix is the whole keyspace (`"\0"` to `"\0"`).
fn scope(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let start = if prefix.is_empty() {
        vec![0]
    } else {
        prefix.as_bytes().to_vec()
    };
    (start, prefix_end(prefix.as_bytes()))
}

/// The first key after every key that starts with `prefix` (etcd's range end of a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: to the end of the keyspace.
    vec![0]
}

impl EtcdStore {
    /// Connects to `endpoints` and serves the keys under `prefix` (no trailing slash, e.g.
    /// `/registry`).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<EtcdStore> {
        let mut client = Client::connect(endpoints, None)
            .await
            .map_err(unavailable)?;
        let prefix = prefix.trim_end_matches('/').to_string();
        // The current revision, and the compaction point: a watch from revision 1 is cancelled
        // with the compaction revision when history was compacted.
        let (start, end) = scope(&prefix);
        let header = quorum_revision(&mut client, &prefix).await?.max(1) as u64;
        let mut probe = client
            .watch(
                start,
                Some(WatchOptions::new().with_range(end).with_start_revision(1)),
            )
            .await
            .map_err(unavailable)?;
        let mut compacted = 1u64;
        if let Ok(Ok(Some(resp))) =
            tokio::time::timeout(Duration::from_millis(200), probe.message()).await
        {
            if resp.compact_revision() > 0 {
                compacted = resp.compact_revision() as u64;
            }
        }
        let (notify, _) = watch::channel(Revision(header));
        let follower = tokio::spawn(follow(
            client.clone(),
            prefix.clone(),
            header,
            notify.clone(),
        ));
        Ok(EtcdStore {
            client,
            prefix,
            current: AtomicU64::new(header),
            compacted: AtomicU64::new(compacted),
            notify,
            follower,
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn kv(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        let key = String::from_utf8_lossy(kv.key());
        KeyValue {
            key: key
                .strip_prefix(self.prefix.as_str())
                .unwrap_or(&key)
                .to_string(),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: Revision(kv.create_revision() as u64),
            mod_revision: Revision(kv.mod_revision() as u64),
        }
    }

    /// Records a revision etcd reported; returns it.
    fn saw(&self, revision: i64) -> Revision {
        let r = revision.max(0) as u64;
        self.current.fetch_max(r, Ordering::SeqCst);
        Revision(r)
    }

    fn header_revision(&self, header: Option<&etcd_client::ResponseHeader>) -> Revision {
        self.saw(header.map_or(0, |h| h.revision()))
    }

    /// etcd's revision errors as the store's.
    fn read_error(&self, e: etcd_client::Error, requested: Revision) -> StoreError {
        let text = e.to_string();
        if text.contains("required revision has been compacted") {
            let compacted = self.compacted.load(Ordering::SeqCst).max(requested.0 + 1);
            self.compacted.fetch_max(compacted, Ordering::SeqCst);
            StoreError::Compacted {
                requested,
                compacted: Revision(compacted),
            }
        } else if text.contains("required revision is a future revision") {
            StoreError::FutureRevision {
                requested,
                current: Revision(self.current.load(Ordering::SeqCst)),
            }
        } else {
            StoreError::Unavailable(text)
        }
    }

    /// Checks a read revision against what this store knows before asking etcd (revision 0
    /// means "latest" to etcd, and "before everything" here).
    fn check_read(&self, revision: Option<Revision>) -> Result<i64> {
        let Some(r) = revision else {
            return Ok(0);
        };
        let compacted = self.compacted.load(Ordering::SeqCst);
        if r.0 < compacted {
            return Err(StoreError::Compacted {
                requested: r,
                compacted: Revision(compacted),
            });
        }
        Ok(r.0 as i64)
    }

    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse> {
        let mut client = self.client.clone();
        let resp = client.txn(txn).await.map_err(unavailable)?;
        self.header_revision(resp.header());
        Ok(resp)
    }

    /// The current value of `key` in a failed transaction's `Get`.
    fn fetched(&self, resp: &etcd_client::TxnResponse) -> Option<KeyValue> {
        resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| self.kv(kv)),
            _ => None,
        })
    }
}

/// etcd's current revision by a linearizable read (a count of the prefix, so nothing is sent).
async fn quorum_revision(client: &mut Client, prefix: &str) -> Result<i64> {
    let (start, end) = scope(prefix);
    let resp = client
        .get(
            start,
            Some(GetOptions::new().with_range(end).with_count_only()),
        )
        .await
        .map_err(unavailable)?;
    Ok(resp.header().map_or(0, |h| h.revision()))
}

/// Follows the prefix for [`Store::subscribe`]: every event moves the announced revision. On a
/// broken stream it starts again from the last revision seen.
async fn follow(client: Client, prefix: String, from: u64, notify: watch::Sender<Revision>) {
    let mut after = from;
    let (start, end) = scope(&prefix);
    loop {
        let mut client = client.clone();
        let options = WatchOptions::new()
            .with_range(end.clone())
            .with_start_revision(after as i64 + 1);
        if let Ok(mut stream) = client.watch(start.clone(), Some(options)).await {
            while let Ok(Some(resp)) = stream.message().await {
                if resp.compact_revision() > 0 {
                    after = resp.compact_revision() as u64;
                    break;
                }
                if let Some(last) = resp.events().last().and_then(|e| e.kv()) {
                    after = after.max(last.mod_revision() as u64);
                    notify.send_replace(Revision(after));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let full = self.full(key);
        let txn = Txn::new()
            .when([Compare::create_revision(full.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(full.clone(), value.to_vec(), None)])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(StoreError::Exists(key.into()));
        }
        let rev = self.header_revision(resp.header());
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: rev,
            mod_revision: rev,
        })
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let full = self.full(key);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                full.clone(),
                CompareOp::Equal,
                expected.0 as i64,
            )])
            .and_then([TxnOp::put(
                full.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(match self.fetched(&resp) {
                None => StoreError::NotFound(key.into()),
                Some(current) => StoreError::Conflict {
                    key: key.into(),
                    expected,
                    actual: current.mod_revision,
                },
            });
        }
        let rev = self.header_revision(resp.header());
        let created = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Put(put) => put.prev_key().map(|kv| kv.create_revision()),
                _ => None,
            })
            .map_or(rev, |r| Revision(r as u64));
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: created,
            mod_revision: rev,
        })
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let full = self.full(key);
        let condition = match expected {
            Some(r) => Compare::mod_revision(full.clone(), CompareOp::Equal, r.0 as i64),
            None => Compare::create_revision(full.clone(), CompareOp::Greater, 0),
        };
        let txn = Txn::new()
            .when([condition])
            .and_then([TxnOp::delete(
                full.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.txn(txn).await?;
        if !resp.succeeded() {
            return Err(match (self.fetched(&resp), expected) {
                (Some(current), Some(expected)) => StoreError::Conflict {
                    key: key.into(),
                    expected,
                    actual: current.mod_revision,
                },
                _ => StoreError::NotFound(key.into()),
            });
        }
        let rev = self.header_revision(resp.header());
        let prev = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Delete(d) => d.prev_kvs().first().map(|kv| self.kv(kv)),
                _ => None,
            })
            .ok_or_else(|| StoreError::NotFound(key.into()))?;
        Ok((prev, rev))
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        let at = self.check_read(revision)?;
        let mut client = self.client.clone();
        let resp = client
            .get(self.full(key), Some(GetOptions::new().with_revision(at)))
            .await
            .map_err(|e| self.read_error(e, revision.unwrap_or_default()))?;
        let header = self.header_revision(resp.header());
        let read_at = revision.unwrap_or(header);
        Ok((resp.kvs().first().map(|kv| self.kv(kv)), read_at))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        if !req.start.is_empty() && !req.start.starts_with(&req.prefix) {
            return Err(StoreError::Invalid(format!(
                "start key {:?} is outside prefix {:?}",
                req.start, req.prefix
            )));
        }
        let at = self.check_read(req.revision)?;
        let full_prefix = self.full(&req.prefix);
        let start = if req.start.is_empty() {
            full_prefix.clone()
        } else {
            self.full(&req.start)
        };
        let mut options = GetOptions::new()
            .with_range(prefix_end(full_prefix.as_bytes()))
            .with_revision(at);
        if req.limit > 0 {
            options = options.with_limit(req.limit as i64);
        }
        let mut client = self.client.clone();
        let resp = client
            .get(start, Some(options))
            .await
            .map_err(|e| self.read_error(e, req.revision.unwrap_or_default()))?;
        let header = self.header_revision(resp.header());
        let kvs: Vec<KeyValue> = resp.kvs().iter().map(|kv| self.kv(kv)).collect();
        let remaining = (resp.count().max(0) as u64).saturating_sub(kvs.len() as u64);
        Ok(RangeResponse {
            kvs,
            revision: req.revision.unwrap_or(header),
            remaining,
        })
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        let compacted = self.compacted.load(Ordering::SeqCst);
        if after.0 < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: Revision(compacted),
            });
        }
        let target = self.consistent_revision().await?;
        if after >= target {
            return Ok(Changes {
                events: Vec::new(),
                revision: after,
            });
        }
        let mut client = self.client.clone();
        let (start, end) = scope(&self.prefix);
        let options = WatchOptions::new()
            .with_range(end)
            .with_prev_key()
            .with_start_revision(after.0 as i64 + 1);
        let mut stream = client
            .watch(start, Some(options))
            .await
            .map_err(unavailable)?;
        let mut events = Vec::new();
        let mut through = after;
        'read: loop {
            let resp = match tokio::time::timeout(QUIET, stream.message()).await {
                // Quiet: the prefix has nothing more up to `target` that has arrived.
                Err(_) => break,
                Ok(Ok(Some(resp))) => resp,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => return Err(unavailable(e)),
            };
            if resp.compact_revision() > 0 {
                let point = resp.compact_revision() as u64;
                self.compacted.fetch_max(point, Ordering::SeqCst);
                return Err(StoreError::Compacted {
                    requested: after,
                    compacted: Revision(point),
                });
            }
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let revision = Revision(kv.mod_revision() as u64);
                if revision > target || (limit > 0 && events.len() == limit) {
                    break 'read;
                }
                let event = match e.event_type() {
                    EventType::Put => Event::Put {
                        kv: self.kv(kv),
                        prev: e.prev_kv().map(|p| self.kv(p)),
                    },
                    EventType::Delete => match e.prev_kv() {
                        Some(prev) => Event::Delete {
                            prev: self.kv(prev),
                            revision,
                        },
                        // A delete without its previous value cannot be followed.
                        None => {
                            return Err(StoreError::Corrupt(format!(
                                "a delete event at revision {revision} without its previous value"
                            )))
                        }
                    },
                };
                events.push(event);
                through = revision;
            }
            if through >= target {
                break;
            }
        }
        Ok(Changes {
            events,
            revision: through,
        })
    }

    fn current_revision(&self) -> Revision {
        Revision(self.current.load(Ordering::SeqCst))
    }

    async fn consistent_revision(&self) -> Result<Revision> {
        let mut client = self.client.clone();
        let revision = quorum_revision(&mut client, &self.prefix).await?;
        Ok(self.saw(revision))
    }

    fn compacted_revision(&self) -> Revision {
        Revision(self.compacted.load(Ordering::SeqCst))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.consistent_revision().await?;
        if revision > current {
            return Err(StoreError::Invalid(format!(
                "cannot compact to {revision}, beyond the current revision {current}"
            )));
        }
        if revision.0 <= self.compacted.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut client = self.client.clone();
        match client
            .compact(
                revision.0 as i64,
                Some(CompactionOptions::new().with_physical()),
            )
            .await
        {
            Ok(_) => {}
            // Someone compacted further already: the goal is reached.
            Err(e)
                if e.to_string()
                    .contains("required revision has been compacted") => {}
            Err(e) => return Err(unavailable(e)),
        }
        self.compacted.fetch_max(revision.0, Ordering::SeqCst);
        Ok(())
    }

    fn subscribe(&self) -> watch::Receiver<Revision> {
        self.notify.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/registry"), b"/registrz");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
    }
}
