//! The memory budget of the encodings kept on cached object versions.
//!
//! A cached object holds its JSON for as long as it is current. Its other encodings (protobuf,
//! YAML, CBOR, Table rows, watch event frames) are made on first use and kept on the object
//! version, so the next list or watcher copies them instead of encoding again. Kept without
//! bound, one list of every object in a rarely used format would double the cache's memory
//! until each object changes. So every kept encoding counts against one budget shared by all
//! the caches of a [`crate::Caches`]; past it, the encodings kept longest ago are dropped
//! first. A dropped encoding is made again when next asked for. Readers that hold one keep
//! their copy: dropping only ends the cache's share of it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

/// What one kept encoding costs beyond its bytes: its entry on the object and in the
/// budget's queue, and the allocator's rounding.
const ENTRY_OVERHEAD: usize = 96;

/// Dead entries (of object versions gone since) the queue may hold beyond its live ones
/// before it is swept.
const SWEEP_SLACK: usize = 1024;

/// The budget of kept encodings: a limit in bytes, what is kept now and the order it was
/// kept in.
///
/// ```
/// use strata_watch::KeptEncodings;
///
/// let budget = KeptEncodings::new(64 << 20);
/// assert_eq!(budget.limit(), 64 << 20);
/// assert_eq!(budget.bytes(), 0);
/// assert_eq!(budget.evicted(), 0);
/// ```
#[derive(Debug)]
pub struct KeptEncodings {
    limit: usize,
    /// Bytes kept now, [`ENTRY_OVERHEAD`] included.
    used: AtomicUsize,
    /// Encodings kept now.
    live: AtomicUsize,
    evicted: AtomicU64,
    /// Every kept encoding, the longest kept first; also entries of object versions dropped
    /// since, until a sweep or the front reaches them.
    order: Mutex<VecDeque<Queued>>,
}

#[derive(Debug)]
struct Queued {
    slot: Weak<Slot>,
    name: Arc<str>,
}

impl KeptEncodings {
    /// A budget of `limit` bytes; 0 keeps nothing, `usize::MAX` keeps everything.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            used: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
            order: Mutex::new(VecDeque::new()),
        }
    }

    /// A budget without a limit.
    pub fn unlimited() -> Self {
        Self::new(usize::MAX)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The bytes of the encodings kept now, with their bookkeeping.
    pub fn bytes(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// How many kept encodings were dropped to stay within the limit.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub(crate) fn keeps_any(&self) -> bool {
        self.limit > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.order.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an encoding just kept in `slot`, and drops the longest kept while over the limit
    /// (possibly this one, if it alone exceeds it).
    fn admit(&self, slot: &Arc<Slot>, name: Arc<str>, cost: usize) {
        self.used.fetch_add(cost, Ordering::Relaxed);
        self.live.fetch_add(1, Ordering::Relaxed);
        let mut order = self.lock();
        order.push_back(Queued {
            slot: Arc::downgrade(slot),
            name,
        });
        while self.used.load(Ordering::Relaxed) > self.limit {
            let Some(oldest) = order.pop_front() else {
                break;
            };
            // A slot that is gone gave its bytes back when it was dropped. Dropping the
            // upgraded `Arc` here may drop the slot, which touches only the counters.
            if let Some(slot) = oldest.slot.upgrade() {
                if let Some(cost) = slot.remove(&oldest.name) {
                    self.used.fetch_sub(cost, Ordering::Relaxed);
                    self.live.fetch_sub(1, Ordering::Relaxed);
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if order.len() > 2 * self.live.load(Ordering::Relaxed) + SWEEP_SLACK {
            order.retain(|q| q.slot.strong_count() > 0);
        }
    }
}

/// One object version's kept encodings.
#[derive(Debug)]
pub(crate) struct Slot {
    budget: Arc<KeptEncodings>,
    entries: Mutex<Vec<(Arc<str>, Bytes)>>,
}

impl Slot {
    pub(crate) fn new(budget: Arc<KeptEncodings>) -> Self {
        Self {
            budget,
            entries: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<str>, Bytes)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, name: &str) -> Option<Bytes> {
        self.lock()
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, b)| b.clone())
    }

    /// Keeps `bytes` as `name` within the budget, unless a racing reader kept one first:
    /// then that one is the answer.
    pub(crate) fn keep(self: &Arc<Self>, name: Arc<str>, bytes: &Bytes) -> Result<(), Bytes> {
        {
            let mut entries = self.lock();
            if let Some((_, kept)) = entries.iter().find(|(n, _)| *n == name) {
                return Err(kept.clone());
            }
            entries.push((name.clone(), bytes.clone()));
        }
        // Not under the entries' lock: keeping may drop encodings of any object, this one too.
        self.budget.admit(self, name, bytes.len() + ENTRY_OVERHEAD);
        Ok(())
    }

    /// Drops encoding `name`; its cost when it was kept.
    fn remove(&self, name: &str) -> Option<usize> {
        let mut entries = self.lock();
        let at = entries.iter().position(|(n, _)| &**n == name)?;
        let (_, bytes) = entries.swap_remove(at);
        Some(bytes.len() + ENTRY_OVERHEAD)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let entries = self.entries.get_mut().unwrap_or_else(|e| e.into_inner());
        let cost: usize = entries.iter().map(|(_, b)| b.len() + ENTRY_OVERHEAD).sum();
        self.budget.used.fetch_sub(cost, Ordering::Relaxed);
        self.budget.live.fetch_sub(entries.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(slot: &Arc<Slot>, name: &str, len: usize) {
        slot.keep(Arc::from(name), &Bytes::from(vec![b'x'; len]))
            .expect("not kept before");
    }

    #[test]
    fn the_longest_kept_go_first_once_over_the_limit() {
        let budget = Arc::new(KeptEncodings::new(3 * (100 + ENTRY_OVERHEAD)));
        let slots: Vec<Arc<Slot>> = (0..4)
            .map(|_| Arc::new(Slot::new(budget.clone())))
            .collect();
        for slot in &slots[..3] {
            kept(slot, "yaml", 100);
        }
        assert_eq!(budget.evicted(), 0);
        assert_eq!(budget.bytes(), 3 * (100 + ENTRY_OVERHEAD));
        kept(&slots[3], "yaml", 100);
        assert_eq!(budget.evicted(), 1);
        assert!(slots[0].get("yaml").is_none(), "the first kept went first");
        assert!(slots[1].get("yaml").is_some());
        assert!(slots[3].get("yaml").is_some());
        assert_eq!(budget.bytes(), 3 * (100 + ENTRY_OVERHEAD));
    }

    #[test]
    fn dropped_objects_give_their_bytes_back_and_leave_the_queue() {
        let budget = Arc::new(KeptEncodings::unlimited());
        for _ in 0..3 * SWEEP_SLACK {
            let slot = Arc::new(Slot::new(budget.clone()));
            kept(&slot, "protobuf", 10);
            kept(&slot, "yaml", 10);
        }
        assert_eq!(budget.bytes(), 0);
        assert_eq!(budget.live.load(Ordering::Relaxed), 0);
        assert!(budget.lock().len() <= SWEEP_SLACK + 2, "swept");
    }

    #[test]
    fn an_encoding_larger_than_the_limit_is_not_kept() {
        let budget = Arc::new(KeptEncodings::new(50));
        let slot = Arc::new(Slot::new(budget.clone()));
        kept(&slot, "table", 100);
        assert!(slot.get("table").is_none());
        assert_eq!(budget.bytes(), 0);
        assert_eq!(budget.evicted(), 1);
    }

    #[test]
    fn a_racing_second_encoding_gets_the_first() {
        let budget = Arc::new(KeptEncodings::unlimited());
        let slot = Arc::new(Slot::new(budget.clone()));
        kept(&slot, "cbor", 3);
        let again = slot.keep(Arc::from("cbor"), &Bytes::from_static(b"yyy"));
        assert_eq!(again, Err(Bytes::from_static(b"xxx")));
        assert_eq!(budget.bytes(), 3 + ENTRY_OVERHEAD);
    }
}
