//! Turns for the readers of an object that clients update by read-modify-write.
//!
//! A client that reads an object, changes it and writes it back with the `resourceVersion` it
//! read (a PUT with that precondition) races every other client doing the same: each write
//! fails all the others with 409, they read again, and the first PUT to arrive wins the next
//! version. Which client that is comes down to timing, so with many clients one may lose
//! hundreds of rounds in a row, and each round costs every client a read and a failed write.
//!
//! Once updates of an object fail that way again and again ([`CONTENDED_AFTER`] times within
//! [`QUIET`]), consistent reads of the object take turns: one reader is answered, and the next one when the object has been written (by
//! anyone) or when the turn has lasted [`TURN`] without a write. Readers wait in arrival
//! order, so clients that read in order to write get the current version one at a time,
//! first come first served, and their writes find the version they read. No answer changes:
//! a consistent read answered later shows the object as it was at a moment within the
//! request, and a stale precondition still fails with 409. Reads of an object stop taking
//! turns [`QUIET`] after its last conflict, or its last write while readers waited; a client
//! whose update meets one conflict now and then never makes anyone wait.
//!
//! The turns are this server's own: replicas over one store each keep theirs, and a write
//! through another replica ends a turn only by its timeout.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The longest a reader's turn lasts without a write to the object.
pub(crate) const TURN: Duration = Duration::from_millis(10);
/// How long after its last conflict (or its last write while readers waited) an object's
/// reads take turns.
pub(crate) const QUIET: Duration = Duration::from_secs(1);
/// How many conflicts within [`QUIET`] make an object's reads take turns.
pub(crate) const CONTENDED_AFTER: u32 = 3;
/// The longest a reader waits in line, whatever happens to the turns ahead of it.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(1);

/// Shards of the key → turns map.
const SHARDS: usize = 16;
/// A shard holding more objects than this drops those no longer contended when it gains one.
const SWEEP_ABOVE: usize = 64;

/// The objects whose reads take turns.
pub(crate) struct ReadTurns {
    shards: Vec<Mutex<HashMap<String, Turns>>>,
}

/// One object's turns.
struct Turns {
    /// Conflicts since `counted_since`, less than [`QUIET`] ago.
    conflicts: u32,
    counted_since: Instant,
    /// Until when reads of the object take turns.
    contended_until: Instant,
    /// When the current reader's turn began; `None` when nobody holds one.
    turn: Option<Instant>,
    /// Readers waiting for a turn, the first in line first.
    line: VecDeque<oneshot::Sender<()>>,
}

impl Turns {
    /// Ends the current turn and gives the next one to the first reader still waiting.
    fn pass(&mut self, now: Instant) {
        self.turn = None;
        while let Some(next) = self.line.pop_front() {
            // A reader that stopped waiting (its request ended) has dropped its receiver.
            if next.send(()).is_ok() {
                self.turn = Some(now);
                return;
            }
        }
    }

    fn turn_over(&self, now: Instant) -> bool {
        self.turn.is_none_or(|began| now >= began + TURN)
    }

    fn contended(&self, now: Instant) -> bool {
        now < self.contended_until || !self.line.is_empty()
    }

    /// Neither contended nor counting conflicts: nothing to keep.
    fn idle(&self, now: Instant) -> bool {
        !self.contended(now) && now >= self.counted_since + QUIET
    }
}

impl ReadTurns {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, HashMap<String, Turns>> {
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        self.shards[(hash % SHARDS as u64) as usize]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An update of `key` failed on a stale `resourceVersion`: counted, and once there are
    /// enough, its reads take turns.
    pub(crate) fn conflicted(&self, key: &str) {
        let now = Instant::now();
        let mut shard = self.shard(key);
        if !shard.contains_key(key) && shard.len() >= SWEEP_ABOVE {
            shard.retain(|_, t| !t.idle(now));
        }
        let turns = shard.entry(key.to_owned()).or_insert_with(|| Turns {
            conflicts: 0,
            counted_since: now,
            contended_until: now,
            turn: None,
            line: VecDeque::new(),
        });
        if now >= turns.counted_since + QUIET {
            turns.conflicts = 0;
            turns.counted_since = now;
        }
        turns.conflicts += 1;
        if turns.conflicts >= CONTENDED_AFTER {
            turns.contended_until = now + QUIET;
        }
    }

    /// `key` was written (or deleted): the reader holding the turn is done with it.
    pub(crate) fn wrote(&self, key: &str) {
        let now = Instant::now();
        let mut shard = self.shard(key);
        let Some(turns) = shard.get_mut(key) else {
            return;
        };
        if !turns.line.is_empty() {
            turns.contended_until = now + QUIET;
        }
        turns.pass(now);
        if turns.idle(now) {
            shard.remove(key);
        }
    }

    /// Waits for this reader's turn to read `key`; at once when its reads take no turns.
    pub(crate) async fn take(&self, key: &str) {
        let start = Instant::now();
        let mut answer = {
            let mut shard = self.shard(key);
            let Some(turns) = shard.get_mut(key) else {
                return;
            };
            if !turns.contended(start) {
                if turns.idle(start) {
                    shard.remove(key);
                }
                return;
            }
            if turns.turn_over(start) {
                if turns.line.is_empty() {
                    turns.turn = Some(start);
                    return;
                }
                turns.pass(start);
            }
            let (tx, rx) = oneshot::channel();
            turns.line.push_back(tx);
            rx
        };
        loop {
            let waited = start.elapsed();
            if waited >= MAX_WAIT {
                return;
            }
            match tokio::time::timeout(TURN.min(MAX_WAIT - waited), &mut answer).await {
                // Given the turn (or dropped from a line that is gone).
                Ok(_) => return,
                // The turn ahead has lasted too long: the next reader in line gets it, which
                // may be this one.
                Err(_) => {
                    let now = Instant::now();
                    if let Some(turns) = self.shard(key).get_mut(key) {
                        if turns.turn_over(now) {
                            turns.pass(now);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contend(turns: &ReadTurns) {
        for _ in 0..CONTENDED_AFTER {
            turns.conflicted("/k");
        }
    }

    #[tokio::test]
    async fn fewer_conflicts_than_contention_take_no_turns() {
        let turns = ReadTurns::new();
        for _ in 1..CONTENDED_AFTER {
            turns.conflicted("/k");
        }
        for _ in 0..3 {
            tokio::time::timeout(Duration::from_millis(1), turns.take("/k"))
                .await
                .expect("no turn to wait for");
        }
    }

    #[tokio::test]
    async fn reads_of_an_object_without_conflicts_take_no_turns() {
        let turns = ReadTurns::new();
        turns.wrote("/k");
        for _ in 0..3 {
            tokio::time::timeout(Duration::from_millis(1), turns.take("/k"))
                .await
                .expect("no turn to wait for");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn after_repeated_conflicts_readers_are_answered_one_per_write_in_arrival_order() {
        let turns = std::sync::Arc::new(ReadTurns::new());
        contend(&turns);
        // The first reader gets the turn at once.
        turns.take("/k").await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for reader in 0..3 {
            let (turns, tx) = (turns.clone(), tx.clone());
            tokio::spawn(async move {
                turns.take("/k").await;
                tx.send(reader).unwrap();
            });
            // Each is in line before the next arrives.
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(rx.try_recv().is_err(), "nobody is answered before a write");
        for reader in 0..3 {
            turns.wrote("/k");
            assert_eq!(rx.recv().await, Some(reader));
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(rx.try_recv().is_err(), "one reader per write");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_without_a_write_passes_on_after_its_time() {
        let turns = std::sync::Arc::new(ReadTurns::new());
        contend(&turns);
        turns.take("/k").await;
        let began = tokio::time::Instant::now();
        let waiter = tokio::spawn({
            let turns = turns.clone();
            async move { turns.take("/k").await }
        });
        waiter.await.unwrap();
        let waited = began.elapsed();
        assert!(waited >= TURN && waited < 2 * TURN, "{waited:?}");
    }

    #[tokio::test]
    async fn reads_stop_taking_turns_once_the_object_is_quiet() {
        let turns = ReadTurns::new();
        contend(&turns);
        {
            let mut shard = turns.shard("/k");
            let t = shard.get_mut("/k").unwrap();
            t.contended_until = Instant::now();
            t.counted_since = Instant::now() - QUIET;
            t.turn = Some(Instant::now());
        }
        tokio::time::timeout(Duration::from_millis(1), turns.take("/k"))
            .await
            .expect("a quiet object's reads do not wait");
        assert!(turns.shard("/k").is_empty());
    }
}
