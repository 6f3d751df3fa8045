//! The in-flight limits (`--max-requests-inflight`, `--max-mutating-requests-inflight`), as
//! kube-apiserver's max-in-flight filter applies them: requests beyond a limit are answered 429
//! at once instead of queueing; long-running requests (watches) and `system:masters` are not
//! counted; health checks are answered before anything is counted.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Which limit a request counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    ReadOnly,
    Mutating,
}

impl Kind {
    /// Reads (GET, HEAD, OPTIONS) are read-only; every other method mutates.
    pub fn of(method: &http::Method) -> Kind {
        match *method {
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS => Kind::ReadOnly,
            _ => Kind::Mutating,
        }
    }
}

/// The two counters and their limits (0: unlimited).
#[derive(Debug, Default)]
pub struct Limits {
    read_only: AtomicUsize,
    mutating: AtomicUsize,
    max_read_only: usize,
    max_mutating: usize,
}

/// A counted request; it stops counting when dropped.
#[derive(Debug)]
pub struct Slot<'a> {
    counter: &'a AtomicUsize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Limits {
    pub fn new(max_read_only: usize, max_mutating: usize) -> Self {
        Self {
            max_read_only,
            max_mutating,
            ..Self::default()
        }
    }

    /// Counts a request of `kind`, or `None` when its limit is reached.
    pub fn enter(&self, kind: Kind) -> Option<Slot<'_>> {
        let (counter, max) = match kind {
            Kind::ReadOnly => (&self.read_only, self.max_read_only),
            Kind::Mutating => (&self.mutating, self.max_mutating),
        };
        let before = counter.fetch_add(1, Ordering::SeqCst);
        let slot = Slot { counter };
        (max == 0 || before < max).then_some(slot)
    }

    /// The requests of `kind` being served now.
    #[cfg(test)]
    pub fn current(&self, kind: Kind) -> usize {
        match kind {
            Kind::ReadOnly => self.read_only.load(Ordering::SeqCst),
            Kind::Mutating => self.mutating.load(Ordering::SeqCst),
        }
    }
}

/// Whether a request is long-running and so never counted: a watch (`?watch=true` or a
/// `/watch/` path).
pub fn long_running(path: &str, query: &crate::query::Query) -> bool {
    let watch = query
        .get("watch")
        .is_some_and(|v| matches!(v, "true" | "1" | "True" | "TRUE" | "t" | "T"));
    watch || path.starts_with("/api/v1/watch/") || path.contains("/watch/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_counts_its_kind_and_frees_on_drop() {
        let limits = Limits::new(2, 1);
        let a = limits.enter(Kind::ReadOnly).expect("first read");
        let b = limits.enter(Kind::ReadOnly).expect("second read");
        assert!(limits.enter(Kind::ReadOnly).is_none(), "third read refused");
        let w = limits
            .enter(Kind::Mutating)
            .expect("a write has its own limit");
        assert!(limits.enter(Kind::Mutating).is_none());
        drop(a);
        assert_eq!(limits.current(Kind::ReadOnly), 1);
        assert!(limits.enter(Kind::ReadOnly).is_some());
        drop((b, w));
        assert_eq!(limits.current(Kind::ReadOnly), 0);
        assert_eq!(limits.current(Kind::Mutating), 0);
        let unlimited = Limits::new(0, 0);
        let held: Vec<_> = (0..1000)
            .map(|_| unlimited.enter(Kind::Mutating).unwrap())
            .collect();
        assert_eq!(held.len(), 1000);
    }

    #[test]
    fn methods_and_watches_are_classified() {
        assert_eq!(Kind::of(&http::Method::GET), Kind::ReadOnly);
        assert_eq!(Kind::of(&http::Method::PATCH), Kind::Mutating);
        let q = |s: &str| crate::query::Query::parse(Some(s));
        assert!(long_running("/api/v1/pods", &q("watch=true")));
        assert!(long_running("/api/v1/watch/namespaces/x/pods", &q("")));
        assert!(!long_running("/api/v1/pods", &q("watch=false")));
    }
}
