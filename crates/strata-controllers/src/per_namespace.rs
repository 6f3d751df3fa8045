//! The engine of the controllers that keep one object of a given name in every active
//! namespace: the ServiceAccount controller (`default`) and the root CA publisher
//! (`kube-root-ca.crt`).
//!
//! Work is keyed by namespace. A namespace is queued when a watch of namespaces shows it
//! (every one at the watch's start, then each change), and when the kept object in it changes
//! or goes (a watch of that object's type across all namespaces, selected by name). A pass
//! over a namespace reads the namespace and the object from the registry's watch cache (cheap,
//! and as fresh as the events that queued it); when the namespace is active and the object is
//! missing it is created, when it differs from what [`Kept::repaired`] wants it is replaced
//! under its resourceVersion. Every step is safe to repeat and safe to race with another
//! replica doing the same: a create that finds the object there (AlreadyExists) is done, a
//! replacement that lost a race (Conflict) is tried again on the newer object, and a namespace
//! that is going (NotFound, or the `NamespaceTerminating` refusal) needs nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use strata_object::{Object, Status};
use strata_registry::{
    cache, list_objects, EventType, ListOptions, RegisteredType, Registry, StreamItem,
    WatchOptions, WatchStream, WriteOptions,
};

use crate::queue::Queue;

/// The field manager of these controllers' writes: kube-controller-manager's, whose controllers
/// these are in Kubernetes.
pub(crate) const MANAGER: &str = "kube-controller-manager";

/// How soon a namespace is looked at again after a lost race, and the first backoff after a
/// failed pass.
const RETRY: Duration = Duration::from_millis(200);
/// The longest wait after failed passes in a row.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What one controller keeps in every namespace.
pub(crate) trait Kept: Send + Sync + 'static {
    /// The controller's name in logs.
    const CONTROLLER: &'static str;
    /// The kept object's type: group, version, resource.
    const RESOURCE: (&'static str, &'static str, &'static str);
    /// The kept object's name.
    const NAME: &'static str;

    /// The object to create (without namespace: the registry sets it).
    fn wanted(&self) -> Value;

    /// The object to write in place of `current`, or `None` when `current` is as wanted.
    fn repaired(&self, current: &Object) -> Option<Value>;
}

/// What a pass over one namespace came to.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Nothing more to do until something changes.
    Done,
    /// Lost a race: look again soon.
    Again,
}

/// A controller that keeps `K`'s object in every active namespace; `run` drives it.
pub(crate) struct PerNamespace<K: Kept> {
    registry: Arc<Registry>,
    namespaces: Arc<RegisteredType>,
    objects: Arc<RegisteredType>,
    kept: K,
    /// Set once every namespace that existed at start has had its first pass.
    synced: AtomicBool,
}

impl<K: Kept> PerNamespace<K> {
    /// `None` when the registry serves no namespaces or not the kept type.
    pub(crate) fn new(registry: Arc<Registry>, kept: K) -> Option<Self> {
        let namespaces = registry.lookup("", "v1", "namespaces")?;
        let (group, version, resource) = K::RESOURCE;
        let objects = registry.lookup(group, version, resource)?;
        Some(Self {
            registry,
            namespaces,
            objects,
            kept,
            synced: AtomicBool::new(false),
        })
    }

    /// Whether every namespace that existed when the controller started has had a pass.
    pub(crate) fn has_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Runs until the task is dropped or aborted.
    pub(crate) async fn run(&self) {
        let mut queue = Queue::new(RETRY, MAX_BACKOFF);
        self.first_pass(&mut queue).await;
        self.synced.store(true, Ordering::SeqCst);
        loop {
            let Some((mut namespaces, mut objects)) = self.watches().await else {
                tokio::time::sleep(RETRY).await;
                continue;
            };
            loop {
                let due = queue.next_due();
                let ended = tokio::select! {
                    item = namespaces.next() => match item {
                        Some(StreamItem::Event(EventType::Deleted, ns)) => {
                            queue.done(cache::name_of(&ns).1);
                            false
                        }
                        Some(StreamItem::Event(_, ns)) => {
                            queue.add(cache::name_of(&ns).1);
                            false
                        }
                        Some(StreamItem::Bookmark(_)) => false,
                        Some(StreamItem::Error(_)) | None => true,
                    },
                    item = objects.next() => match item {
                        // Created, changed or deleted: its namespace is looked at.
                        Some(StreamItem::Event(_, obj)) => {
                            queue.add(cache::name_of(&obj).0);
                            false
                        }
                        Some(StreamItem::Bookmark(_)) => false,
                        Some(StreamItem::Error(_)) | None => true,
                    },
                    _ = sleep_until(due) => false,
                };
                // A watch ended (or fell behind): open both again; their first events are
                // every namespace and object, so nothing is missed.
                if ended {
                    break;
                }
                self.work(&mut queue).await;
            }
        }
    }

    /// A pass over every namespace there is, read consistently; what fails is queued for
    /// retries.
    async fn first_pass(&self, queue: &mut Queue) {
        let names: Vec<String> = match self
            .registry
            .list(&self.namespaces, "", &ListOptions::default())
            .await
            .and_then(|list| list_objects(&list))
        {
            Ok(namespaces) => namespaces.iter().map(|n| n.name().to_string()).collect(),
            Err(e) => {
                tracing::warn!(controller = K::CONTROLLER, error = %e.message, "cannot list namespaces");
                return;
            }
        };
        for name in names {
            queue.add(&name);
        }
        self.work(queue).await;
    }

    /// The watch of namespaces and the watch of the kept objects in all namespaces.
    async fn watches(&self) -> Option<(WatchStream, WatchStream)> {
        let namespaces = self
            .registry
            .watch(self.namespaces.clone(), "", &WatchOptions::default())
            .await;
        let by_name = WatchOptions {
            field_selector: format!("metadata.name={}", K::NAME),
            ..WatchOptions::default()
        };
        let objects = self
            .registry
            .watch(self.objects.clone(), "", &by_name)
            .await;
        match (namespaces, objects) {
            (Ok(n), Ok(o)) => Some((n, o)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(controller = K::CONTROLLER, error = %e.message, "cannot watch");
                None
            }
        }
    }

    /// Passes over every namespace that is due.
    async fn work(&self, queue: &mut Queue) {
        for namespace in queue.due() {
            match self.sync(&namespace).await {
                Ok(Outcome::Done) => queue.done(&namespace),
                Ok(Outcome::Again) => queue.again(&namespace),
                Err(e) => {
                    let backoff = queue.failed(&namespace);
                    tracing::warn!(
                        controller = K::CONTROLLER,
                        namespace,
                        error = %e.message,
                        ?backoff,
                        "pass over a namespace failed"
                    );
                }
            }
        }
    }

    /// One pass: create the object in an active namespace that lacks it, repair one that
    /// differs.
    async fn sync(&self, namespace: &str) -> Result<Outcome, Status> {
        let ns = match self
            .registry
            .get(&self.namespaces, "", namespace, "0")
            .await
        {
            Ok(ns) => ns,
            Err(s) if s.is_not_found() => return Ok(Outcome::Done),
            Err(s) => return Err(s),
        };
        if !is_active(&ns) {
            return Ok(Outcome::Done);
        }
        let opts = WriteOptions {
            field_manager: MANAGER.into(),
            ..WriteOptions::default()
        };
        match self
            .registry
            .get(&self.objects, namespace, K::NAME, "0")
            .await
        {
            Ok(current) => {
                let Some(repaired) = self.kept.repaired(&current) else {
                    return Ok(Outcome::Done);
                };
                match self
                    .registry
                    .update(&self.objects, namespace, K::NAME, repaired, &opts)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(
                            controller = K::CONTROLLER,
                            namespace,
                            name = K::NAME,
                            "updated"
                        );
                        Ok(Outcome::Done)
                    }
                    // Deleted meanwhile: its deletion event queues the namespace again.
                    Err(s) if s.is_not_found() => Ok(Outcome::Done),
                    // Changed meanwhile (this cache was behind, or another replica wrote):
                    // look again at the newer object.
                    Err(s) if s.is_conflict() => Ok(Outcome::Again),
                    Err(s) if namespace_terminating(&s) => Ok(Outcome::Done),
                    Err(s) => Err(s),
                }
            }
            Err(s) if s.is_not_found() => {
                match self
                    .registry
                    .create(&self.objects, namespace, self.kept.wanted(), &opts)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(
                            controller = K::CONTROLLER,
                            namespace,
                            name = K::NAME,
                            "created"
                        );
                        Ok(Outcome::Done)
                    }
                    // Another replica (or a client) was first; its creation event queues the
                    // namespace again, so the object's content is still checked.
                    Err(s) if s.is_already_exists() => Ok(Outcome::Done),
                    // The namespace is gone or going: nothing belongs in it any more.
                    Err(s) if s.is_not_found() || namespace_terminating(&s) => Ok(Outcome::Done),
                    Err(s) => Err(s),
                }
            }
            Err(s) => Err(s),
        }
    }
}

/// Whether a namespace takes new content: not marked for deletion, not `Terminating`.
fn is_active(ns: &Object) -> bool {
    ns.deletion_timestamp().is_empty()
        && ns
            .as_map()
            .get("status")
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str)
            .is_none_or(|phase| phase == "Active")
}

/// Whether a write was refused because its namespace is being terminated.
fn namespace_terminating(s: &Status) -> bool {
    s.details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// Sleeps until `due`, or forever when nothing is due.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn namespace(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn only_active_namespaces_take_content() {
        assert!(is_active(&namespace(
            json!({"metadata": {"name": "a"}, "status": {"phase": "Active"}})
        )));
        assert!(is_active(&namespace(json!({"metadata": {"name": "a"}}))));
        assert!(!is_active(&namespace(
            json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}})
        )));
        assert!(!is_active(&namespace(json!({
            "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Active"}
        }))));
    }

    #[test]
    fn the_terminating_refusal_is_recognised() {
        let mut s = Status::forbidden("", "serviceaccounts", "default", "being terminated");
        assert!(!namespace_terminating(&s));
        s.details
            .as_mut()
            .unwrap()
            .causes
            .push(strata_object::StatusCause {
                reason: "NamespaceTerminating".into(),
                message: "namespace x is being terminated".into(),
                field: "metadata.namespace".into(),
            });
        assert!(namespace_terminating(&s));
    }
}
