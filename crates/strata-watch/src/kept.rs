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
use std::sync::{Mutex, Weak};

use crate::CachedObject;

/// What one kept encoding costs beyond its bytes: its entry on the object and in the
/// budget's queue, and the allocator's rounding.
pub(crate) const ENTRY_OVERHEAD: usize = 96;

/// Dead entries (of object versions gone since) the queue may hold beyond a quarter of its
/// live ones before it is swept. A dead entry still holds its object's allocation (not the
/// object's JSON), so their number stays well below the live ones'.
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
    object: Weak<CachedObject>,
    name: std::sync::Arc<str>,
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

    /// Counts an encoding just kept on `object`, and drops the longest kept while over the
    /// limit (possibly this one, if it alone exceeds it).
    pub(crate) fn admit(&self, object: Weak<CachedObject>, name: std::sync::Arc<str>, cost: usize) {
        self.used.fetch_add(cost, Ordering::Relaxed);
        self.live.fetch_add(1, Ordering::Relaxed);
        let mut order = self.lock();
        order.push_back(Queued { object, name });
        while self.used.load(Ordering::Relaxed) > self.limit {
            let Some(oldest) = order.pop_front() else {
                break;
            };
            // An object that is gone gave its bytes back when it was dropped. Dropping the
            // upgraded `Arc` here may drop the object, which touches only the counters.
            if let Some(object) = oldest.object.upgrade() {
                if let Some(cost) = object.forget(&oldest.name) {
                    self.released(cost, 1);
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let live = self.live.load(Ordering::Relaxed);
        if order.len() > live + live / 4 + SWEEP_SLACK {
            order.retain(|q| q.object.strong_count() > 0);
        }
    }

    /// `count` kept encodings of `cost` bytes in all are no longer kept.
    pub(crate) fn released(&self, cost: usize, count: usize) {
        self.used.fetch_sub(cost, Ordering::Relaxed);
        self.live.fetch_sub(count, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use strata_store::Revision;

    use super::*;
    use crate::EncodeCounter;

    fn object(budget: &Arc<KeptEncodings>) -> Arc<CachedObject> {
        let json = Bytes::from_static(br#"{"kind":"K","apiVersion":"v1"}"#);
        let mut o = CachedObject::new("k".into(), Revision(1), vec![], vec![], json, 29);
        o.set_counter(Arc::new(EncodeCounter::sharing(budget.clone())));
        Arc::new(o)
    }

    /// Asks `object` for encoding `name`; whether it had to be made.
    fn encode(object: &Arc<CachedObject>, name: &str, len: usize) -> bool {
        let mut made = false;
        object.encoded(name, |_| {
            made = true;
            Bytes::from(vec![b'x'; len])
        });
        made
    }

    #[test]
    fn the_longest_kept_go_first_once_over_the_limit() {
        let budget = Arc::new(KeptEncodings::new(3 * (100 + ENTRY_OVERHEAD)));
        let objects: Vec<_> = (0..4).map(|_| object(&budget)).collect();
        for o in &objects[..3] {
            assert!(encode(o, "yaml", 100));
        }
        assert_eq!(budget.evicted(), 0);
        assert_eq!(budget.bytes(), 3 * (100 + ENTRY_OVERHEAD));
        assert!(encode(&objects[3], "yaml", 100));
        assert_eq!(budget.evicted(), 1);
        assert_eq!(budget.bytes(), 3 * (100 + ENTRY_OVERHEAD));
        assert!(!encode(&objects[1], "yaml", 100), "still kept");
        assert!(!encode(&objects[3], "yaml", 100), "still kept");
        assert!(
            encode(&objects[0], "yaml", 100),
            "the first kept went first"
        );
    }

    #[test]
    fn dropped_objects_give_their_bytes_back_and_leave_the_queue() {
        let budget = Arc::new(KeptEncodings::unlimited());
        for _ in 0..3 * SWEEP_SLACK {
            let o = object(&budget);
            encode(&o, "protobuf", 10);
            encode(&o, "yaml", 10);
        }
        assert_eq!(budget.bytes(), 0);
        assert_eq!(budget.live.load(Ordering::Relaxed), 0);
        assert!(budget.lock().len() <= SWEEP_SLACK + 2, "swept");
    }

    #[test]
    fn an_encoding_larger_than_the_limit_is_not_kept() {
        let budget = Arc::new(KeptEncodings::new(50));
        let o = object(&budget);
        assert!(encode(&o, "table", 100));
        assert!(encode(&o, "table", 100), "made again");
        assert_eq!(budget.bytes(), 0);
        assert_eq!(budget.evicted(), 2);
    }

    #[test]
    fn a_budget_of_nothing_keeps_nothing() {
        let budget = Arc::new(KeptEncodings::new(0));
        let o = object(&budget);
        assert!(encode(&o, "cbor", 3));
        assert!(encode(&o, "cbor", 3));
        assert_eq!((budget.bytes(), budget.evicted()), (0, 0));
    }
}
