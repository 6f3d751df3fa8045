//! The change feed: one long-lived etcd watch over the prefix, followed by a background task
//! into a bounded buffer that [`Store::changes`](strata_store::Store::changes) serves from.
//!
//! The buffer holds the events in `(base, through]`, in revision order. `through` moves with
//! every event and with every progress notification etcd sends on the stream (periodic ones
//! always arrive in order with the events; requested ones only on versions where that holds,
//! see [`Feed::progress_safe`]). When the buffer is full the oldest event is dropped and `base`
//! becomes its revision, so an event at `base` exists in etcd's history: a reader from before
//! `base` reads etcd's history up to that event with a one-shot watch.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions, WatchResponse};
use strata_store::{Event, Revision, StoreError};
use tokio::sync::{watch, Notify};

use crate::Keys;

/// How many events the buffer keeps; readers further behind read etcd's history.
pub(crate) const CAPACITY: usize = 20_000;

/// The buffer and what it proves.
#[derive(Debug, Default)]
struct Buffer {
    base: Revision,
    through: Revision,
    events: VecDeque<Event>,
}

/// What [`Feed::read`] found.
pub(crate) enum Read {
    /// Events after the requested revision (at most the limit) and how far they are complete.
    Buffered(Vec<Event>, Revision),
    /// The request starts before the buffer: read etcd's history through `base`.
    Before { base: Revision },
}

/// The buffered feed, shared by the store and its follower task.
pub(crate) struct Feed {
    buffer: Mutex<Buffer>,
    /// Announces `through` to [`Store::subscribe`](strata_store::Store::subscribe)rs.
    pub(crate) notify: watch::Sender<Revision>,
    /// Asks the follower to request a progress notification.
    wake: Notify,
    /// Whether requested progress notifications are safe on the etcd in use.
    pub(crate) progress_safe: bool,
    compacted: Arc<AtomicU64>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("progress_safe", &self.progress_safe)
            .finish_non_exhaustive()
    }
}

/// Whether an etcd server of `version` delivers a requested progress notification only after
/// the events before it. etcd issue 15220 was fixed in 3.4.31 and 3.5.13; kube-apiserver
/// requests progress only from those versions on, and so does this store.
pub(crate) fn progress_safe(version: &str) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, m) => m >= 6,
        (m, _) => m > 3,
    }
}

impl Feed {
    /// A feed complete through `start`, where nothing before `start` is buffered.
    pub(crate) fn new(start: Revision, progress_safe: bool, compacted: Arc<AtomicU64>) -> Feed {
        let (notify, _) = watch::channel(start);
        Feed {
            buffer: Mutex::new(Buffer {
                base: start,
                through: start,
                events: VecDeque::new(),
            }),
            notify,
            wake: Notify::new(),
            progress_safe,
            compacted,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How far the feed is complete.
    pub(crate) fn through(&self) -> Revision {
        self.lock().through
    }

    /// Waits until the feed is complete through `target`, for at most `timeout`.
    pub(crate) async fn wait_through(&self, target: Revision, timeout: Duration) {
        let mut rx = self.notify.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|r| *r >= target)).await;
    }

    /// The buffered events after `after`, at most `limit` (0 = all).
    pub(crate) fn read(&self, after: Revision, limit: usize) -> Read {
        let buffer = self.lock();
        if after < buffer.base {
            return Read::Before { base: buffer.base };
        }
        let first = buffer.events.partition_point(|e| e.revision() <= after);
        let available = buffer.events.len() - first;
        let take = if limit == 0 {
            available
        } else {
            available.min(limit)
        };
        let events: Vec<Event> = buffer.events.range(first..first + take).cloned().collect();
        let through = if take < available {
            events.last().map_or(after, Event::revision)
        } else {
            buffer.through.max(after)
        };
        Read::Buffered(events, through)
    }

    /// Asks the follower for a progress notification; `false` when that is not safe here.
    pub(crate) fn request_progress(&self) -> bool {
        if self.progress_safe {
            self.wake.notify_one();
        }
        self.progress_safe
    }

    fn push(&self, events: Vec<Event>, through: Revision) {
        let mut buffer = self.lock();
        for event in events {
            buffer.events.push_back(event);
        }
        while buffer.events.len() > CAPACITY {
            if let Some(dropped) = buffer.events.pop_front() {
                buffer.base = dropped.revision();
            }
        }
        if through > buffer.through {
            buffer.through = through;
            drop(buffer);
            self.notify.send_replace(through);
        }
    }

    /// History before `point` is gone and the follower missed some of it: start over there.
    fn restart_at(&self, point: Revision) {
        let mut buffer = self.lock();
        buffer.events.clear();
        buffer.base = point;
        buffer.through = buffer.through.max(point);
        let through = buffer.through;
        drop(buffer);
        self.notify.send_replace(through);
    }
}

/// Converts a watch response's events; `Err` for a delete without its previous value, which
/// cannot be followed. Events of the store's own bookkeeping keys are left out.
pub(crate) fn convert(keys: &Keys, resp: &WatchResponse) -> Result<Vec<Event>, StoreError> {
    let mut out = Vec::with_capacity(resp.events().len());
    for e in resp.events() {
        let Some(kv) = e.kv() else { continue };
        if keys.is_internal(kv.key()) {
            continue;
        }
        let revision = Revision(kv.mod_revision() as u64);
        out.push(match e.event_type() {
            EventType::Put => Event::Put {
                kv: keys.kv(kv),
                prev: e.prev_kv().map(|p| keys.kv(p)),
            },
            EventType::Delete => match e.prev_kv() {
                Some(prev) => Event::Delete {
                    prev: keys.kv(prev),
                    revision,
                },
                None => {
                    return Err(StoreError::Corrupt(format!(
                        "a delete event at revision {revision} without its previous value"
                    )))
                }
            },
        });
    }
    Ok(out)
}

/// The revision of the last event of a response, internal keys included.
fn last_revision(resp: &WatchResponse) -> Option<Revision> {
    resp.events()
        .last()
        .and_then(|e| e.kv())
        .map(|kv| Revision(kv.mod_revision() as u64))
}

/// Follows the prefix for as long as the store lives: one watch from `through + 1` with
/// previous values and progress notifications; on a broken stream it watches again from
/// where it was complete.
pub(crate) async fn follow(client: Client, keys: Keys, feed: Arc<Feed>) {
    let (start, end) = keys.scope();
    loop {
        let from = feed.through();
        let mut client = client.clone();
        let options = WatchOptions::new()
            .with_range(end.clone())
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(from.0 as i64 + 1);
        let mut stream = match client.watch(start.clone(), Some(options)).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(%e, "etcd watch: cannot open; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            let resp = tokio::select! {
                resp = stream.message() => resp,
                _ = feed.wake.notified() => {
                    if let Err(e) = stream.request_progress().await {
                        tracing::debug!(%e, "etcd watch: progress request failed");
                        break;
                    }
                    continue;
                }
            };
            let resp = match resp {
                Ok(Some(resp)) => resp,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(%e, "etcd watch: stream failed; watching again");
                    break;
                }
            };
            if resp.compact_revision() > 0 {
                // The follower fell behind compaction: readers before the point get
                // `Compacted` and reload; the feed goes on from the point.
                let point = resp.compact_revision() as u64;
                feed.compacted.fetch_max(point, Ordering::SeqCst);
                tracing::warn!(point, "etcd watch: history compacted under the feed");
                feed.restart_at(Revision(point));
                break;
            }
            if resp.canceled() {
                break;
            }
            if resp.created() {
                continue;
            }
            match last_revision(&resp) {
                Some(last) => match convert(&keys, &resp) {
                    Ok(events) => feed.push(events, last),
                    Err(e) => {
                        tracing::error!(%e, "etcd watch: cannot follow");
                        break;
                    }
                },
                // A progress notification: nothing under the prefix up to its revision.
                None => {
                    let revision = Revision(resp.header().map_or(0, |h| h.revision()) as u64);
                    feed.push(Vec::new(), revision);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads etcd's history after `after` up to and including `base` (an event exists there), at
/// most `limit` events, with a one-shot watch: for readers further behind than the buffer.
pub(crate) async fn history(
    client: &Client,
    keys: &Keys,
    after: Revision,
    base: Revision,
    limit: usize,
) -> Result<(Vec<Event>, Revision), StoreError> {
    let (start, end) = keys.scope();
    let options = WatchOptions::new()
        .with_range(end)
        .with_prev_key()
        .with_start_revision(after.0 as i64 + 1);
    let mut client = client.clone();
    let mut stream = client
        .watch(start, Some(options))
        .await
        .map_err(crate::unavailable)?;
    let mut events = Vec::new();
    let mut through = after;
    while through < base {
        let resp = match stream.message().await {
            Ok(Some(resp)) => resp,
            Ok(None) => break,
            Err(e) => return Err(crate::unavailable(e)),
        };
        if resp.compact_revision() > 0 {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: Revision(resp.compact_revision() as u64),
            });
        }
        let Some(last) = last_revision(&resp) else {
            continue;
        };
        for event in convert(keys, &resp)? {
            if event.revision() > base || (limit > 0 && events.len() == limit) {
                return Ok((events, through));
            }
            through = event.revision();
            events.push(event);
        }
        through = through.max(last.min(base));
    }
    Ok((events, through))
}

/// A record of a key, as a helper for tests of the conversion.
#[cfg(test)]
pub(crate) fn key_value(key: &str, rev: u64) -> strata_store::KeyValue {
    strata_store::KeyValue {
        key: key.into(),
        value: bytes::Bytes::new(),
        create_revision: Revision(rev),
        mod_revision: Revision(rev),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_with_safe_progress_requests() {
        assert!(!progress_safe("3.4.23"));
        assert!(progress_safe("3.4.31"));
        assert!(!progress_safe("3.5.12"));
        assert!(progress_safe("3.5.13"));
        assert!(progress_safe("3.6.0"));
        assert!(!progress_safe("garbage"));
    }

    fn put(rev: u64) -> Event {
        Event::Put {
            kv: key_value("/k", rev),
            prev: None,
        }
    }

    #[test]
    fn reads_are_complete_through_the_buffer_or_the_last_event_of_a_cut() {
        let feed = Feed::new(Revision(10), false, Arc::new(AtomicU64::new(1)));
        feed.push(vec![put(11), put(12), put(14)], Revision(14));
        feed.push(Vec::new(), Revision(20));
        let Read::Buffered(all, through) = feed.read(Revision(10), 0) else {
            panic!("buffered")
        };
        assert_eq!(all.len(), 3);
        assert_eq!(through, Revision(20));
        let Read::Buffered(cut, through) = feed.read(Revision(11), 1) else {
            panic!("buffered")
        };
        assert_eq!(cut[0].revision(), Revision(12));
        assert_eq!(through, Revision(12));
        assert!(matches!(feed.read(Revision(9), 0), Read::Before { base } if base == Revision(10)));
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_and_moves_its_base_there() {
        let feed = Feed::new(Revision(0), false, Arc::new(AtomicU64::new(1)));
        let events: Vec<Event> = (1..=CAPACITY as u64 + 2).map(put).collect();
        feed.push(events, Revision(CAPACITY as u64 + 2));
        assert!(matches!(feed.read(Revision(1), 0), Read::Before { base } if base == Revision(2)));
        let Read::Buffered(rest, _) = feed.read(Revision(2), 0) else {
            panic!("buffered")
        };
        assert_eq!(rest.len(), CAPACITY);
    }
}
