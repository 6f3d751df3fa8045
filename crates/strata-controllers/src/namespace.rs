//! Namespace termination. A deleted namespace keeps the `kubernetes` finalizer in
//! `spec.finalizers` and the phase `Terminating` until this controller has deleted every
//! namespaced object in it (each object's own finalizers still hold it), reported progress in
//! the namespace's status conditions, and removed its finalizer through the `finalize`
//! sub-resource, whereupon the namespace goes.
//!
//! Work comes from a watch of namespaces (whose first events are every existing namespace, so
//! a restart resumes terminations in progress) and from retries while content remains.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::queue::Queue;
use serde_json::{json, Value};
use strata_object::resource::Scope;
use strata_object::{now_rfc3339, Object, Status};
use strata_registry::strategy::NAMESPACE_FINALIZER;
use strata_registry::{
    cache, list_objects, Body, DeleteOptions, ListOptions, PatchKind, RegisteredType, Registry,
    StreamItem, WatchOptions, WriteOptions,
};

/// The field manager of the controller's writes.
const MANAGER: &str = "namespace-controller";

/// Settings of the namespace controller.
#[derive(Clone, Debug)]
pub struct NamespaceControllerConfig {
    /// How soon a namespace whose content is not gone yet is looked at again.
    pub retry: Duration,
    /// The longest wait between retries of a namespace whose work keeps failing.
    pub max_backoff: Duration,
}

impl Default for NamespaceControllerConfig {
    fn default() -> Self {
        Self {
            retry: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// What one pass over a terminating namespace achieved.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Finalized, gone, or not terminating: nothing more to do.
    Done,
    /// Content remains (held by finalizers, or created meanwhile): look again soon.
    Remaining,
}

/// The namespace termination controller; [`NamespaceController::run`] drives it.
pub struct NamespaceController {
    registry: Arc<Registry>,
    namespaces: Arc<RegisteredType>,
    config: NamespaceControllerConfig,
}

impl std::fmt::Debug for NamespaceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceController")
            .field("config", &self.config)
            .finish()
    }
}

impl NamespaceController {
    /// `None` when the registry serves no namespaces.
    pub fn new(registry: Arc<Registry>, config: NamespaceControllerConfig) -> Option<Self> {
        let namespaces = registry.lookup("", "v1", "namespaces")?;
        Some(Self {
            registry,
            namespaces,
            config,
        })
    }

    /// Runs until the task is dropped or aborted.
    pub async fn run(self) {
        let mut queue = Queue::new(self.config.retry, self.config.max_backoff);
        loop {
            let opts = WatchOptions::default();
            let mut stream = match self
                .registry
                .watch(self.namespaces.clone(), "", &opts)
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e.message, "namespace controller: cannot watch namespaces");
                    tokio::time::sleep(self.config.retry).await;
                    continue;
                }
            };
            loop {
                match queue.next(&mut stream).await {
                    Some(Some(StreamItem::Event(_, obj)))
                        if obj.field("status.phase") == Some("Terminating") =>
                    {
                        queue.add(cache::name_of(&obj).1);
                    }
                    Some(Some(StreamItem::Event(..))) => {}
                    Some(Some(StreamItem::Bookmark(_))) => {}
                    // The watch ended (or fell behind): start a new one, which lists again.
                    Some(Some(StreamItem::Error(_))) | Some(None) => break,
                    None => {}
                }
                self.work(&mut queue).await;
            }
        }
    }

    /// Passes over every namespace that is due.
    async fn work(&self, queue: &mut Queue) {
        for name in queue.due() {
            match self.sync(&name).await {
                Ok(Outcome::Done) => queue.done(&name),
                Ok(Outcome::Remaining) => queue.again(&name),
                Err(e) => {
                    let backoff = queue.failed(&name);
                    tracing::warn!(namespace = name, error = %e.message, ?backoff, "namespace controller: termination step failed");
                }
            }
        }
    }

    /// One pass: delete the content, report, and finalize when nothing is left.
    async fn sync(&self, name: &str) -> Result<Outcome, Status> {
        let ns = match self.registry.get(&self.namespaces, "", name, "").await {
            Ok(ns) => ns,
            Err(s) if s.is_not_found() => return Ok(Outcome::Done),
            Err(s) => return Err(s),
        };
        if ns.deletion_timestamp().is_empty() || !has_our_finalizer(&ns) {
            return Ok(Outcome::Done);
        }
        let mut failures = Vec::new();
        let mut remaining = Remaining::default();
        for rt in self.namespaced_types() {
            let removal = self
                .registry
                .delete_collection(
                    &rt,
                    name,
                    &ListOptions::default(),
                    &DeleteOptions::default(),
                )
                .await;
            if let Err(e) = removal {
                failures.push(format!("{}: {}", group_resource(&rt), e.message));
            }
            let left = self
                .registry
                .list(&rt, name, &ListOptions::default())
                .await
                .and_then(|list| list_objects(&list));
            match left {
                Ok(objects) => remaining.add(&group_resource(&rt), &objects),
                Err(e) => failures.push(format!("{}: {}", group_resource(&rt), e.message)),
            }
        }
        self.report(&ns, &failures, &remaining).await?;
        if !failures.is_empty() || remaining.objects > 0 {
            return Ok(Outcome::Remaining);
        }
        self.finalize(name).await
    }

    fn namespaced_types(&self) -> Vec<Arc<RegisteredType>> {
        self.registry
            .types()
            .iter()
            .filter(|t| t.info.scope == Scope::Namespaced)
            .cloned()
            .collect()
    }

    /// Writes the five deletion conditions through `status`, when they changed.
    async fn report(
        &self,
        ns: &Object,
        failures: &[String],
        remaining: &Remaining,
    ) -> Result<(), Status> {
        let old: Vec<Value> = ns
            .as_map()
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let conditions = conditions(&old, failures, remaining, &now_rfc3339());
        if conditions == old {
            return Ok(());
        }
        let patch = json!({"status": {"conditions": conditions}});
        let opts = WriteOptions {
            field_manager: MANAGER.into(),
            subresource: "status".into(),
            ..Default::default()
        };
        self.registry
            .patch(
                &self.namespaces,
                "",
                ns.name(),
                PatchKind::Merge,
                Body::from(patch),
                &opts,
            )
            .await
            .map(|_| ())
    }

    /// Removes the `kubernetes` finalizer through `finalize`; with no finalizer left the
    /// namespace goes.
    async fn finalize(&self, name: &str) -> Result<Outcome, Status> {
        let mut ns = match self.registry.get(&self.namespaces, "", name, "").await {
            Ok(ns) => ns,
            Err(s) if s.is_not_found() => return Ok(Outcome::Done),
            Err(s) => return Err(s),
        };
        let kept: Vec<Value> = strata_registry::strategy::spec_finalizers(&ns)
            .filter(|f| *f != NAMESPACE_FINALIZER)
            .map(|f| Value::String(f.to_string()))
            .collect();
        let spec = ns.as_map_mut().entry("spec").or_insert_with(|| json!({}));
        spec["finalizers"] = Value::Array(kept);
        let opts = WriteOptions {
            field_manager: MANAGER.into(),
            subresource: "finalize".into(),
            ..Default::default()
        };
        match self
            .registry
            .update(&self.namespaces, "", name, ns.into_value(), &opts)
            .await
        {
            Ok(_) => {
                tracing::info!(namespace = name, "namespace finalized");
                Ok(Outcome::Done)
            }
            Err(s) if s.is_not_found() => Ok(Outcome::Done),
            // Changed meanwhile: the next pass sees the new state.
            Err(s) if s.is_conflict() => Ok(Outcome::Remaining),
            Err(s) => Err(s),
        }
    }
}

fn has_our_finalizer(ns: &Object) -> bool {
    strata_registry::strategy::spec_finalizers(ns).any(|f| f == NAMESPACE_FINALIZER)
}

/// `resource` for the core group, else `resource.group`, as Kubernetes prints group-resources.
fn group_resource(rt: &RegisteredType) -> String {
    if rt.info.group.is_empty() {
        rt.info.resource.clone()
    } else {
        format!("{}.{}", rt.info.resource, rt.info.group)
    }
}

/// What is left in a terminating namespace.
#[derive(Debug, Default)]
struct Remaining {
    objects: usize,
    /// Objects left per group-resource.
    by_resource: BTreeMap<String, usize>,
    /// Objects holding each finalizer.
    by_finalizer: BTreeMap<String, usize>,
}

impl Remaining {
    fn add(&mut self, resource: &str, objects: &[Object]) {
        if objects.is_empty() {
            return;
        }
        self.objects += objects.len();
        *self.by_resource.entry(resource.to_string()).or_default() += objects.len();
        for obj in objects {
            for f in obj.finalizers() {
                *self.by_finalizer.entry(f.to_string()).or_default() += 1;
            }
        }
    }
}

/// The namespace's deletion conditions after a pass, in Kubernetes' order, keeping each
/// condition's `lastTransitionTime` while its status does not change.
fn conditions(old: &[Value], failures: &[String], remaining: &Remaining, now: &str) -> Vec<Value> {
    let content = if failures.is_empty() {
        (
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".to_string(),
        )
    } else {
        (
            "True",
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                failures.len(),
                failures.join(", ")
            ),
        )
    };
    let resources = if remaining.by_resource.is_empty() {
        (
            "False",
            "ContentRemoved",
            "All content successfully removed".to_string(),
        )
    } else {
        let listed: Vec<String> = remaining
            .by_resource
            .iter()
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        (
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", listed.join(", ")),
        )
    };
    let finalizers = if remaining.by_finalizer.is_empty() {
        (
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".to_string(),
        )
    } else {
        let listed: Vec<String> = remaining
            .by_finalizer
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        (
            "True",
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                listed.join(", ")
            ),
        )
    };
    let wanted = [
        (
            "NamespaceDeletionDiscoveryFailure",
            (
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered".to_string(),
            ),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            (
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed".to_string(),
            ),
        ),
        ("NamespaceDeletionContentFailure", content),
        ("NamespaceContentRemaining", resources),
        ("NamespaceFinalizersRemaining", finalizers),
    ];
    wanted
        .into_iter()
        .map(|(kind, (status, reason, message))| {
            let previous = old.iter().find(|c| c["type"] == kind);
            let since = match previous {
                Some(c) if c["status"] == status => {
                    c["lastTransitionTime"].as_str().unwrap_or(now).to_string()
                }
                _ => now.to_string(),
            };
            json!({
                "type": kind,
                "status": status,
                "lastTransitionTime": since,
                "reason": reason,
                "message": message,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(finalizers: &[&str]) -> Object {
        Object::from_value(json!({"metadata": {"name": "x", "finalizers": finalizers}})).unwrap()
    }

    #[test]
    fn conditions_report_what_remains_and_keep_transition_times() {
        let mut left = Remaining::default();
        left.add(
            "serviceaccounts",
            &[object(&["example.com/hold"]), object(&[])],
        );
        let first = conditions(&[], &[], &left, "2026-01-01T00:00:00Z");
        assert_eq!(first.len(), 5);
        assert_eq!(first[3]["type"], "NamespaceContentRemaining");
        assert_eq!(first[3]["status"], "True");
        assert_eq!(
            first[3]["message"],
            "Some resources are remaining: serviceaccounts has 2 resource instances"
        );
        assert_eq!(
            first[4]["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
        // Same state later: nothing changes, so nothing is written.
        let again = conditions(&first, &[], &left, "2026-01-01T00:00:05Z");
        assert_eq!(again, first);
        // Content gone: the two conditions flip and take the new time.
        let done = conditions(&first, &[], &Remaining::default(), "2026-01-01T00:00:09Z");
        assert_eq!(done[3]["status"], "False");
        assert_eq!(done[3]["reason"], "ContentRemoved");
        assert_eq!(done[3]["lastTransitionTime"], "2026-01-01T00:00:09Z");
        assert_eq!(done[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }
}
