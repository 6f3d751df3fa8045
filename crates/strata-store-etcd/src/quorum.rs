//! Linearizable reads of etcd's current revision, shared between concurrent callers: every
//! consistent read needs one, and under load one etcd round trip answers a whole batch.
//!
//! A caller joins the batch of the next read to start, never one already in flight (that read
//! may have begun before the caller's own earlier writes were acknowledged). One task does the
//! reads back to back while callers wait.

use std::sync::{Arc, Mutex};

use etcd_client::{Client, GetOptions};
use strata_store::{Result, StoreError};
use tokio::sync::oneshot;

use crate::{unavailable, Keys};

/// etcd's current revision by a linearizable read of one key (the compaction key, present or
/// not): the answer's header carries the revision, and etcd does no work per key under the
/// prefix, as a count of the prefix would.
pub(crate) async fn revision(client: &mut Client, keys: &Keys) -> Result<i64> {
    let resp = client
        .get(
            keys.full(crate::COMPACT_KEY),
            Some(GetOptions::new().with_keys_only()),
        )
        .await
        .map_err(unavailable)?;
    Ok(resp.header().map_or(0, |h| h.revision()))
}

#[derive(Default)]
struct Pending {
    reading: bool,
    waiting: Vec<oneshot::Sender<Result<i64>>>,
}

/// The batching reader.
pub(crate) struct QuorumReads {
    client: Client,
    keys: Keys,
    pending: Mutex<Pending>,
}

impl QuorumReads {
    pub(crate) fn new(client: Client, keys: Keys) -> QuorumReads {
        QuorumReads {
            client,
            keys,
            pending: Mutex::new(Pending::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current revision, by a read that started after this call did.
    pub(crate) async fn read(self: &Arc<Self>) -> Result<i64> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut pending = self.lock();
            pending.waiting.push(tx);
            !std::mem::replace(&mut pending.reading, true)
        };
        if start {
            tokio::spawn(self.clone().drive());
        }
        rx.await
            .unwrap_or_else(|_| Err(StoreError::Unavailable("the quorum reader stopped".into())))
    }

    /// Reads for one batch after another until nobody waits.
    async fn drive(self: Arc<Self>) {
        loop {
            let batch = {
                let mut pending = self.lock();
                if pending.waiting.is_empty() {
                    pending.reading = false;
                    return;
                }
                std::mem::take(&mut pending.waiting)
            };
            let result = crate::bounded(
                "a quorum read",
                crate::retrying(|| async {
                    let mut client = self.client.clone();
                    revision(&mut client, &self.keys).await
                }),
            )
            .await;
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    }
}
