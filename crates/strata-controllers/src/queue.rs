//! The work queue the controllers share: object names due for a pass at some instant, with
//! exponential backoff for names whose passes fail, fed by a watch.

use std::collections::HashMap;
use std::time::Duration;

use strata_registry::{StreamItem, WatchStream};
use tokio::time::Instant;

/// A name waiting for its next pass.
struct Pending {
    due: Instant,
    failures: u32,
}

/// Names due for a pass, each at most once.
pub(crate) struct Queue {
    pending: HashMap<String, Pending>,
    /// How soon a name is looked at again after a pass that left work.
    retry: Duration,
    /// The longest wait after repeated failures.
    max_backoff: Duration,
}

impl Queue {
    pub(crate) fn new(retry: Duration, max_backoff: Duration) -> Self {
        Self {
            pending: HashMap::new(),
            retry,
            max_backoff,
        }
    }

    /// Due now, unless already waiting (its backoff is kept).
    pub(crate) fn add(&mut self, name: &str) {
        self.pending.entry(name.to_string()).or_insert(Pending {
            due: Instant::now(),
            failures: 0,
        });
    }

    /// Nothing more to do for `name` until it changes.
    pub(crate) fn done(&mut self, name: &str) {
        self.pending.remove(name);
    }

    /// The pass left work: look again after the retry interval.
    pub(crate) fn again(&mut self, name: &str) {
        let p = self.pending.entry(name.to_string()).or_insert(Pending {
            due: Instant::now(),
            failures: 0,
        });
        p.failures = 0;
        p.due = Instant::now() + self.retry;
    }

    /// The pass failed: look again after a backoff that doubles with each failure in a row.
    /// Returns the backoff.
    pub(crate) fn failed(&mut self, name: &str) -> Duration {
        let p = self.pending.entry(name.to_string()).or_insert(Pending {
            due: Instant::now(),
            failures: 0,
        });
        p.failures += 1;
        let backoff = self
            .retry
            .saturating_mul(1 << p.failures.min(6))
            .min(self.max_backoff);
        p.due = Instant::now() + backoff;
        backoff
    }

    /// The names due now.
    pub(crate) fn due(&self) -> Vec<String> {
        let now = Instant::now();
        self.pending
            .iter()
            .filter(|(_, p)| p.due <= now)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// When the earliest pending name falls due; `None` when none is pending.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.due).min()
    }

    /// The next item of `stream`, or `None` when a pending name falls due first.
    pub(crate) async fn next(&self, stream: &mut WatchStream) -> Option<Option<StreamItem>> {
        match self.next_due() {
            Some(due) => tokio::select! {
                item = stream.next() => Some(item),
                _ = tokio::time::sleep_until(due) => None,
            },
            None => Some(stream.next().await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_and_successes_reset() {
        let mut q = Queue::new(Duration::from_millis(100), Duration::from_secs(1));
        q.add("a");
        assert_eq!(q.due(), ["a"]);
        assert_eq!(q.failed("a"), Duration::from_millis(200));
        assert_eq!(q.failed("a"), Duration::from_millis(400));
        assert!(q.due().is_empty());
        for _ in 0..5 {
            q.failed("a");
        }
        assert_eq!(q.failed("a"), Duration::from_secs(1));
        q.again("a");
        assert!(q.due().is_empty());
        let mut now = Queue::new(Duration::ZERO, Duration::ZERO);
        now.again("b");
        assert_eq!(now.due(), ["b"]);
        q.done("a");
        assert!(q.due().is_empty());
    }
}
