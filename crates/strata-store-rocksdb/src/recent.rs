//! The newest committed events, kept in memory by the writer thread, so that the change feed of
//! a running store hands out what was just written without reading it back from the database.
//! Not durable and not complete: after a restart, or for revisions older than what it keeps, the
//! feed reads the `changes` and `history` families instead (`read::View::changes`).

use std::collections::VecDeque;

use strata_store::{Event, KeyValue};

/// At most this many events are kept...
const MAX_EVENTS: usize = 4096;
/// ...and at most this many bytes of their keys and values.
const MAX_BYTES: usize = 16 << 20;

/// Events of consecutive revisions, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    events: VecDeque<Event>,
    bytes: usize,
}

fn kv_bytes(kv: &KeyValue) -> usize {
    kv.key.len() + kv.value.len()
}

fn event_bytes(e: &Event) -> usize {
    match e {
        Event::Put { kv, prev } => kv_bytes(kv) + prev.as_ref().map_or(0, kv_bytes),
        Event::Delete { prev, .. } => kv_bytes(prev),
    }
}

impl Recent {
    /// Appends the events of a committed batch, oldest first, and drops the oldest kept events
    /// beyond the bounds. Events that do not continue the kept revisions (which the writer never
    /// produces) replace them, so the kept events stay consecutive.
    pub(crate) fn extend(&mut self, events: Vec<Event>) {
        for e in events {
            let follows = self
                .events
                .back()
                .is_none_or(|last| last.revision().get() + 1 == e.revision().get());
            if !follows {
                self.events.clear();
                self.bytes = 0;
            }
            self.bytes += event_bytes(&e);
            self.events.push_back(e);
        }
        while self.events.len() > MAX_EVENTS || (self.bytes > MAX_BYTES && self.events.len() > 1) {
            if let Some(old) = self.events.pop_front() {
                self.bytes -= event_bytes(&old);
            }
        }
    }

    /// The events after revision `after` up to and including `through`, at most `limit` of them
    /// (0: no limit), or `None` when some of them are no longer (or not yet) kept.
    pub(crate) fn between(&self, after: u64, through: u64, limit: usize) -> Option<Vec<Event>> {
        if through <= after {
            return Some(Vec::new());
        }
        let first = self.events.front()?.revision().get();
        let last = self.events.back()?.revision().get();
        if first > after + 1 || last < through {
            return None;
        }
        let start = usize::try_from(after + 1 - first).ok()?;
        let wanted = usize::try_from(through - after).ok()?;
        let count = if limit == 0 {
            wanted
        } else {
            wanted.min(limit)
        };
        Some(self.events.range(start..start + count).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use strata_store::Revision;

    fn put(rev: u64, size: usize) -> Event {
        Event::Put {
            kv: KeyValue {
                key: format!("k{rev}"),
                value: Bytes::from(vec![b'x'; size]),
                create_revision: Revision(rev),
                mod_revision: Revision(rev),
            },
            prev: None,
        }
    }

    fn revisions(events: &[Event]) -> Vec<u64> {
        events.iter().map(|e| e.revision().get()).collect()
    }

    #[test]
    fn serves_only_ranges_it_holds_whole() {
        let mut recent = Recent::default();
        assert_eq!(recent.between(3, 3, 0), Some(Vec::new()));
        assert_eq!(recent.between(3, 4, 0), None);
        recent.extend((5..=9).map(|r| put(r, 10)).collect());
        assert_eq!(
            revisions(&recent.between(4, 9, 0).unwrap()),
            [5, 6, 7, 8, 9]
        );
        assert_eq!(revisions(&recent.between(6, 8, 0).unwrap()), [7, 8]);
        assert_eq!(revisions(&recent.between(6, 9, 2).unwrap()), [7, 8]);
        // Revision 4 and 10 are not kept: a feed needing them reads the database.
        assert_eq!(recent.between(3, 9, 0), None);
        assert_eq!(recent.between(8, 10, 0), None);
    }

    #[test]
    fn keeps_the_newest_within_its_bounds() {
        let mut recent = Recent::default();
        recent.extend((1..=(MAX_EVENTS as u64 + 10)).map(|r| put(r, 1)).collect());
        assert_eq!(recent.events.len(), MAX_EVENTS);
        assert_eq!(recent.between(9, 11, 0), None);
        assert_eq!(revisions(&recent.between(10, 13, 0).unwrap()), [11, 12, 13]);

        let big = MAX_BYTES / 4;
        let mut recent = Recent::default();
        recent.extend((1..=6).map(|r| put(r, big)).collect());
        assert!(recent.bytes <= MAX_BYTES);
        assert_eq!(revisions(&recent.between(3, 6, 0).unwrap()), [4, 5, 6]);
        assert_eq!(recent.between(2, 6, 0), None);
    }

    #[test]
    fn a_gap_in_revisions_starts_over() {
        let mut recent = Recent::default();
        recent.extend(vec![put(1, 1), put(2, 1)]);
        recent.extend(vec![put(5, 1)]);
        assert_eq!(recent.between(1, 2, 0), None);
        assert_eq!(revisions(&recent.between(4, 5, 0).unwrap()), [5]);
    }
}
