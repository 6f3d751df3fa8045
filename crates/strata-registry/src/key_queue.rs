//! Updates of one object, in order: a queue per key in front of the store.
//!
//! Without it, concurrent updates of one object each read the same version, build a new one,
//! and race to compare-and-swap it in: one wins per store round trip and every loser starts
//! over, so the CPU goes to attempts bound to fail. With it, writers of a key take turns: each
//! builds its object on top of the one before it, still unwritten, and adds the result to the
//! key's chain; a flush task writes the whole chain with [`Store::update_chain`] (one WAL sync
//! on the embedded engine) and answers every writer with its own revision. Ordering changes
//! nothing a client can see: each write still has its own revision and event, preconditions
//! (a `resourceVersion` the writer read) fail exactly as they would have, since an unwritten
//! version has no resource version to match, and other writers (another replica, a delete)
//! are still caught by the compare-and-swap the chain starts with.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strata_object::Object;
use strata_store::{KeyValue, Revision, Store, StoreError};
use tokio::sync::{oneshot, Notify};

/// How many links a chain gathers at most before it is written.
const MAX_LINKS: usize = 1024;

/// Shards of the key → queue map, so unrelated writes rarely meet on one lock.
const SHARDS: usize = 16;

/// The queues of the keys being updated right now; a key's queue lives while someone uses it.
pub(crate) struct KeyQueues {
    shards: Vec<Mutex<HashMap<String, Arc<KeyQueue>>>>,
}

/// One key's turn-taking.
pub(crate) struct KeyQueue {
    /// Writers between asking for their turn and adding their link (or giving up).
    waiting: AtomicUsize,
    /// Told when `waiting` drops to zero: the chain has everything queued so far.
    idle: Notify,
    pub(crate) chain: tokio::sync::Mutex<Chain>,
    /// Counts flushes, for a writer that must see the chain land before it acts.
    pub(crate) flushed: tokio::sync::watch::Sender<u64>,
    /// Links added and not yet written (those being written included).
    links: AtomicUsize,
}

/// The unwritten updates of a key, on top of a stored entry.
#[derive(Default)]
pub(crate) struct Chain {
    /// The stored entry the first link builds on; set with the first link.
    pub(crate) base: Option<KeyValue>,
    links: Vec<Link>,
    /// The newest version's object (without resourceVersion) and its stored bytes, kept by a
    /// writer that others were waiting behind, so the next one need not decode those bytes.
    /// It stands for the version whose bytes match, as the chain's tip or, once the chain is
    /// written, as the stored value.
    pub(crate) tip_object: Option<(Bytes, Object)>,
}

struct Link {
    /// The new value, or `None` for an update that changed nothing: it is answered with the
    /// revision of the value before it.
    value: Option<Bytes>,
    reply: oneshot::Sender<Result<Revision, StoreError>>,
}

/// What a writer waits on after adding its link.
pub(crate) type Answer = oneshot::Receiver<Result<Revision, StoreError>>;

impl Chain {
    /// The value the next link builds on when the chain has links: the newest unwritten one.
    pub(crate) fn tip(&self) -> Option<&Bytes> {
        if self.links.is_empty() {
            return None;
        }
        self.links
            .iter()
            .rev()
            .find_map(|l| l.value.as_ref())
            .or(self.base.as_ref().map(|b| &b.value))
    }
}

/// A writer's hold on its key's queue; the queue goes away with its last holder.
pub(crate) struct Entered {
    queues: Arc<KeyQueues>,
    key: String,
    /// Always set; taken out by `drop`, under the shard lock.
    queue: Option<Arc<KeyQueue>>,
}

/// Counts a writer as waiting until dropped.
pub(crate) struct Waiting<'a>(&'a KeyQueue);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl KeyQueues {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        })
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Arc<KeyQueue>>> {
        // FNV-1a: cheap, and good enough to spread keys over a few shards.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        &self.shards[(hash % SHARDS as u64) as usize]
    }

    /// The queue of `key`, made when nobody holds it.
    pub(crate) fn enter(self: &Arc<Self>, key: &str) -> Entered {
        let mut shard = lock(self.shard(key));
        let queue = shard
            .entry(key.to_owned())
            .or_insert_with(|| {
                Arc::new(KeyQueue {
                    waiting: AtomicUsize::new(0),
                    idle: Notify::new(),
                    chain: tokio::sync::Mutex::new(Chain::default()),
                    flushed: tokio::sync::watch::channel(0).0,
                    links: AtomicUsize::new(0),
                })
            })
            .clone();
        Entered {
            queues: self.clone(),
            key: key.to_owned(),
            queue: Some(queue),
        }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut shard = lock(self.queues.shard(&self.key));
        // Holders clone and drop under the shard lock, so the count is exact here: the map's
        // reference and this one mean nobody else holds the queue.
        if let Some(queue) = self.queue.take() {
            if Arc::strong_count(&queue) == 2 {
                shard.remove(&self.key);
            }
            drop(queue);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl KeyQueue {
    /// Counts the caller as waiting for its turn (see [`Waiting`]).
    pub(crate) fn wait(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(self)
    }

    /// Whether writers are waiting for their turn.
    pub(crate) fn has_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }
}

impl Entered {
    pub(crate) fn queue(&self) -> &KeyQueue {
        self.queue
            .as_deref()
            .expect("an entered queue is held until dropped")
    }

    /// Adds a link to the chain (whose lock the caller holds, and whose `base` is set) and
    /// returns what its writer waits on. The first link of a chain starts the task that writes
    /// it.
    pub(crate) fn push(
        &self,
        chain: &mut Chain,
        value: Option<Bytes>,
        store: &Arc<dyn Store>,
    ) -> Answer {
        let (reply, answer) = oneshot::channel();
        chain.links.push(Link { value, reply });
        self.queue()
            .links
            .store(chain.links.len(), Ordering::Release);
        if chain.links.len() == 1 {
            let entered = self.queues.enter(&self.key);
            tokio::spawn(flush(entered, store.clone()));
        }
        answer
    }
}

/// Waits until every writer queued for the key has added its link, writes the chain, and
/// answers each link.
async fn flush(entered: Entered, store: Arc<dyn Store>) {
    let queue = entered.queue();
    loop {
        let idle = queue.idle.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if queue.waiting.load(Ordering::Acquire) == 0
            || queue.links.load(Ordering::Acquire) >= MAX_LINKS
        {
            break;
        }
        idle.await;
    }
    // Holding the lock while the chain is written: writers that come meanwhile wait, and then
    // build on what was written.
    let mut chain = queue.chain.lock().await;
    let links = std::mem::take(&mut chain.links);
    let Some(base) = chain.base.take() else {
        for link in links {
            let _ = link.reply.send(Err(StoreError::Invalid(
                "an update chain without a base".into(),
            )));
        }
        return;
    };
    let values: Vec<Bytes> = links.iter().filter_map(|l| l.value.clone()).collect();
    let outcome = if values.is_empty() {
        Ok(Vec::new())
    } else {
        store
            .update_chain(&entered.key, values, base.mod_revision)
            .await
    };
    match outcome {
        Ok(written) => {
            let mut written = written.into_iter();
            let mut last = Some(base.mod_revision);
            for link in links {
                if link.value.is_some() {
                    last = written.next().map(|kv| kv.mod_revision);
                }
                // A link after the written prefix was built on a version that never landed:
                // its writer starts over, as after any lost compare-and-swap.
                let answer = last.ok_or_else(|| StoreError::Conflict {
                    key: entered.key.clone(),
                    expected: base.mod_revision,
                    actual: base.mod_revision,
                });
                let _ = link.reply.send(answer);
            }
        }
        Err(e) => {
            for link in links {
                let _ = link.reply.send(Err(e.clone()));
            }
        }
    }
    queue.links.store(0, Ordering::Release);
    drop(chain);
    queue.flushed.send_modify(|n| *n += 1);
}
