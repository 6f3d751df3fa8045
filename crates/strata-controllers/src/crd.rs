//! CustomResourceDefinitions: accepting their names, establishing them, serving their types,
//! and cleaning up when one is deleted.
//!
//! Every replica runs this controller against the CRDs it watches. Serving is local (each
//! replica registers the types of the CRDs that are established, so discovery, OpenAPI and
//! routing follow the CRDs on every replica); status writes are revision-checked updates that
//! every replica computes alike, so a lost race changes nothing. For one CRD:
//!
//! 1. `NamesAccepted`: its names are checked against the accepted names of the other CRDs of
//!    its group; without conflicts they become `status.acceptedNames`.
//! 2. `Established` once the names are accepted; the storage version joins
//!    `status.storedVersions`. Its served versions are registered: on the next request
//!    after a change, the new schema, columns and sub-resources apply.
//! 3. Deleted: the registry marks it (finalizer `customresourcecleanup.apiextensions.k8s.io`,
//!    condition `Terminating`); this controller deletes every object of the type, then removes
//!    the finalizer, and stops serving the type once the CRD is gone.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use strata_apiext::crd::{served_versions, storage_version, ServedVersion, CLEANUP_FINALIZER};
use strata_object::{now_rfc3339, Object, Status};
use strata_registry::custom::CustomResourceStrategy;

use crate::queue::Queue;
use strata_registry::{
    cache, list_objects, DeleteOptions, ListOptions, RegisteredType, Registry, StreamItem,
    WatchOptions, WriteOptions,
};

/// The field manager of the controller's status writes.
const MANAGER: &str = "apiextensions-controller";

/// How soon a CRD whose objects remain is looked at again (and the first backoff after a
/// failed step).
const RETRY: Duration = Duration::from_millis(300);
/// The longest wait after failed steps in a row.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// A type this replica serves for a CRD.
struct ServedType {
    group: String,
    version: String,
    resource: String,
    strategy: Arc<CustomResourceStrategy>,
}

/// The CRD controller; [`CrdController::run`] drives it.
pub struct CrdController {
    registry: Arc<Registry>,
    crds: Arc<RegisteredType>,
    /// By CRD name: the types registered for it.
    served: tokio::sync::Mutex<HashMap<String, Vec<ServedType>>>,
    /// CRDs whose deletion this replica's watch has seen (until one of the name comes back):
    /// a catch-up that read them just before never serves them again.
    gone: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Set once the types of the stored CRDs are served and the controller follows the CRDs'
    /// changes (its first watch is open): what `/readyz`'s `informer-sync` waits for.
    synced: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for CrdController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdController").finish()
    }
}

impl CrdController {
    /// `None` when the registry serves no CRDs.
    pub fn new(registry: Arc<Registry>) -> Option<Self> {
        let crds = registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")?;
        Some(Self {
            registry,
            crds,
            served: Default::default(),
            gone: Default::default(),
            synced: Default::default(),
        })
    }

    /// Serves the types of every established CRD: done once at start, before the listener
    /// opens, so a restarted server serves its custom resources from its first request.
    pub async fn serve_existing(&self) -> Result<(), Status> {
        let list = self
            .registry
            .list(&self.crds, "", &ListOptions::default())
            .await?;
        for crd in list_objects(&list)? {
            let value = crd.into_value();
            if established(&value) {
                self.serve(&value).await;
            }
        }
        Ok(())
    }

    /// Serves every Established CRD of the store, read consistently, that this replica does
    /// not serve yet: what a request that may name a new type waits for
    /// (`Registry::catch_up_types`), so that replicas do not lag each other's CRDs.
    pub async fn catch_up(&self) {
        let list = match self
            .registry
            .list(&self.crds, "", &ListOptions::default())
            .await
        {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e.message, "crd controller: cannot list CRDs to catch up");
                return;
            }
        };
        let unserved: Vec<_> = {
            let served = self.served.lock().await;
            list.items
                .iter()
                .filter(|c| !served.contains_key(cache::name_of(c).1))
                .cloned()
                .collect()
        };
        for c in unserved {
            let Ok(crd) = cache::to_object(&c) else {
                continue;
            };
            // A CRD being deleted is never served anew: its deletion may complete (and the
            // watch withdraw its types) while this catch-up runs.
            if !crd.deletion_timestamp().is_empty() || self.is_gone(crd.name()) {
                continue;
            }
            let value = crd.into_value();
            if established(&value) {
                self.serve(&value).await;
            }
        }
    }

    /// Whether the stored CRDs' types are served ([`CrdController::serve_existing`]) and the
    /// controller follows the CRDs ([`CrdController::run`] opened its watch).
    pub fn has_synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs until the task is dropped or aborted.
    pub async fn run(self: Arc<Self>) {
        let mut queue = Queue::new(RETRY, MAX_BACKOFF);
        loop {
            let mut stream = match self
                .registry
                .watch(self.crds.clone(), "", &WatchOptions::default())
                .await
            {
                Ok(s) => {
                    self.synced.store(true, std::sync::atomic::Ordering::SeqCst);
                    s
                }
                Err(e) => {
                    tracing::warn!(error = %e.message, "crd controller: cannot watch CRDs");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            loop {
                match queue.next(&mut stream).await {
                    Some(Some(StreamItem::Event(strata_registry::EventType::Deleted, obj))) => {
                        let (_, name) = cache::name_of(&obj);
                        queue.done(name);
                        self.set_gone(name, true);
                        self.unserve(name).await;
                    }
                    Some(Some(StreamItem::Event(_, obj))) => {
                        let (_, name) = cache::name_of(&obj);
                        self.set_gone(name, false);
                        // Creates stop the moment the deletion is seen, whatever the queue.
                        if cache::to_object(&obj).is_ok_and(|o| !o.deletion_timestamp().is_empty())
                        {
                            self.stop_creates(name).await;
                        }
                        queue.add(name);
                    }
                    Some(Some(StreamItem::Bookmark(_))) | None => {}
                    // The watch ended (or fell behind): start a new one, which lists again.
                    Some(Some(StreamItem::Error(_))) | Some(None) => break,
                }
                for name in queue.due() {
                    match self.sync(&name).await {
                        Ok(true) => queue.done(&name),
                        Ok(false) => queue.again(&name),
                        Err(e) => {
                            let backoff = queue.failed(&name);
                            tracing::warn!(crd = name, error = %e.message, ?backoff, "crd controller: step failed");
                        }
                    }
                }
            }
        }
    }

    /// One pass over a CRD; true when nothing is left to do until it changes again.
    async fn sync(&self, name: &str) -> Result<bool, Status> {
        let crd = match self.registry.get(&self.crds, "", name, "").await {
            Ok(crd) => crd,
            Err(s) if s.is_not_found() => {
                self.unserve(name).await;
                return Ok(true);
            }
            Err(s) => return Err(s),
        };
        let value = crd.clone().into_value();
        if !crd.deletion_timestamp().is_empty() {
            return self.clean_up(&crd).await;
        }
        let others = self.other_crds(name, &value).await?;
        let status = desired_status(&value, &others);
        if value.get("status") != Some(&status) {
            let mut next = value.clone();
            next["status"] = status;
            let opts = WriteOptions {
                field_manager: MANAGER.into(),
                subresource: "status".into(),
                ..WriteOptions::default()
            };
            match self
                .registry
                .update(&self.crds, "", name, next, &opts)
                .await
            {
                // The write comes back as an event: serving follows from there.
                Ok(_) => return Ok(true),
                // Someone changed it meanwhile (another replica, the user): look again.
                Err(s) if s.code == 409 => return Ok(false),
                Err(s) => return Err(s),
            }
        }
        if established(&value) {
            self.serve(&value).await;
        }
        Ok(true)
    }

    /// The other CRDs of the same group.
    async fn other_crds(&self, name: &str, crd: &Value) -> Result<Vec<Value>, Status> {
        let group = crd.pointer("/spec/group").and_then(Value::as_str);
        let list = self
            .registry
            .list(&self.crds, "", &ListOptions::default())
            .await?;
        Ok(list_objects(&list)?
            .into_iter()
            .filter(|o| o.name() != name)
            .map(Object::into_value)
            .filter(|o| o.pointer("/spec/group").and_then(Value::as_str) == group)
            .collect())
    }

    /// Registers (or updates in place) the types of the CRD's served versions, and withdraws
    /// the ones it no longer serves.
    async fn serve(&self, crd: &Value) {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let versions = served_versions(crd);
        let mut served = self.served.lock().await;
        let mut current = served.remove(name).unwrap_or_default();
        let mut next = Vec::new();
        for v in versions {
            let existing = current.iter().position(|t| same_type(t, &v));
            let entry = match existing {
                Some(i) => {
                    let t = current.remove(i);
                    if t.strategy.set(&v) {
                        // Objects read from storage now read differently: reload the cache.
                        self.reload(&v).await;
                    } else {
                        self.registry.update_type(v.info.clone());
                    }
                    Some(t)
                }
                None => self.add(&v).await,
            };
            next.extend(entry);
        }
        for gone in current {
            self.registry
                .remove_type(&gone.group, &gone.version, &gone.resource);
        }
        served.insert(name.to_string(), next);
    }

    /// Serves `v` with its watch cache loaded again (its schema changed). Should the store not
    /// answer, the old cache stays, with the new description.
    async fn reload(&self, v: &ServedVersion) {
        if let Err(e) = self.registry.reload_type(v.info.clone()).await {
            warn_type(
                v,
                &e,
                "cannot reload the watch cache of a custom resource type",
            );
            self.registry.update_type(v.info.clone());
        }
    }

    async fn add(&self, v: &ServedVersion) -> Option<ServedType> {
        let strategy = Arc::new(CustomResourceStrategy::new(v));
        match self
            .registry
            .add_type(v.info.clone(), strategy.clone())
            .await
        {
            Ok(()) => Some(ServedType {
                group: v.info.group.clone(),
                version: v.info.version.clone(),
                resource: v.info.resource.clone(),
                strategy,
            }),
            Err(e) => {
                warn_type(v, &e, "cannot serve a custom resource type");
                None
            }
        }
    }

    /// Refuses creates of the CRD's objects from now on (it is being deleted).
    async fn stop_creates(&self, name: &str) {
        if let Some(types) = self.served.lock().await.get(name) {
            for t in types {
                t.strategy.set_terminating();
            }
        }
    }

    fn is_gone(&self, name: &str) -> bool {
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(name)
    }

    fn set_gone(&self, name: &str, gone: bool) {
        let mut set = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        if gone {
            set.insert(name.to_string());
        } else {
            set.remove(name);
        }
    }

    /// Stops serving every type of a CRD.
    async fn unserve(&self, name: &str) {
        let gone = self.served.lock().await.remove(name).unwrap_or_default();
        for t in gone {
            self.registry.remove_type(&t.group, &t.version, &t.resource);
        }
    }

    /// A deleted CRD: delete its objects, then let it go. True when it has been let go.
    async fn clean_up(&self, crd: &Object) -> Result<bool, Status> {
        if !crd.finalizers().contains(&CLEANUP_FINALIZER) {
            return Ok(true);
        }
        self.stop_creates(crd.name()).await;
        let value = crd.clone().into_value();
        let rt = served_versions(&value).first().and_then(|v| {
            self.registry
                .lookup(&v.info.group, &v.info.version, &v.info.resource)
        });
        if let Some(rt) = rt {
            self.registry
                .delete_collection(&rt, "", &ListOptions::default(), &DeleteOptions::default())
                .await?;
            let left = self.registry.list(&rt, "", &ListOptions::default()).await?;
            if !left.items.is_empty() {
                // Objects that finalizers hold: wait for them.
                return Ok(false);
            }
        }
        let mut next = crd.clone();
        let kept: Vec<Value> = crd
            .finalizers()
            .iter()
            .filter(|f| **f != CLEANUP_FINALIZER)
            .map(|f| json!(f))
            .collect();
        next.set_meta_value("finalizers", (!kept.is_empty()).then(|| Value::Array(kept)));
        let opts = WriteOptions {
            field_manager: MANAGER.into(),
            ..WriteOptions::default()
        };
        match self
            .registry
            .update(&self.crds, "", crd.name(), next.into_value(), &opts)
            .await
        {
            Ok(_) => Ok(true),
            Err(s) if s.is_not_found() => Ok(true),
            Err(s) if s.code == 409 => Ok(false),
            Err(s) => Err(s),
        }
    }
}

fn same_type(t: &ServedType, v: &ServedVersion) -> bool {
    t.group == v.info.group && t.version == v.info.version && t.resource == v.info.resource
}

fn condition_true(crd: &Value, kind: &str) -> bool {
    conditions(crd)
        .iter()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

fn conditions(crd: &Value) -> Vec<Value> {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether the CRD's types are to be served.
pub fn established(crd: &Value) -> bool {
    condition_true(crd, "Established")
}

/// The names a CRD asks for, with Kubernetes' defaults filled in.
fn requested_names(crd: &Value) -> Value {
    let mut names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    if names
        .get("listKind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        names["listKind"] = json!(format!("{kind}List"));
    }
    if names
        .get("singular")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        names["singular"] = json!(kind.to_ascii_lowercase());
    }
    names
}

fn accepted_names(crd: &Value) -> Value {
    crd.pointer("/status/acceptedNames")
        .cloned()
        .unwrap_or_else(|| json!({"plural": "", "kind": ""}))
}

/// Why the requested names conflict with the accepted names of `others` (same group), as
/// Kubernetes' naming controller words it: (reason, message).
fn name_conflict(names: &Value, others: &[Value]) -> Option<(&'static str, String)> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut resources = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    let mut short = BTreeSet::new();
    for o in others {
        let n = accepted_names(o);
        resources.insert(text(&n, "plural"));
        resources.insert(text(&n, "singular"));
        kinds.insert(text(&n, "kind"));
        kinds.insert(text(&n, "listKind"));
        for s in n["shortNames"].as_array().into_iter().flatten() {
            short.insert(s.as_str().unwrap_or("").to_string());
        }
    }
    resources.remove("");
    kinds.remove("");
    let plural = text(names, "plural");
    if resources.contains(&plural) {
        return Some(("PluralConflict", format!("{plural:?} is already in use")));
    }
    let singular = text(names, "singular");
    if resources.contains(&singular) {
        return Some((
            "SingularConflict",
            format!("{singular:?} is already in use"),
        ));
    }
    for s in names["shortNames"].as_array().into_iter().flatten() {
        let s = s.as_str().unwrap_or("").to_string();
        if resources.contains(&s) || short.contains(&s) {
            return Some(("ShortNamesConflict", format!("{s:?} is already in use")));
        }
    }
    let kind = text(names, "kind");
    if kinds.contains(&kind) {
        return Some(("KindConflict", format!("{kind:?} is already in use")));
    }
    let list_kind = text(names, "listKind");
    if kinds.contains(&list_kind) {
        return Some((
            "ListKindConflict",
            format!("{list_kind:?} is already in use"),
        ));
    }
    None
}

/// A condition, keeping its transition time when its status did not change.
fn condition(crd: &Value, kind: &str, status: bool, reason: &str, message: &str) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = conditions(crd).into_iter().find(|c| c["type"] == kind);
    let since = match &previous {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => json!(now_rfc3339()),
    };
    json!({
        "type": kind,
        "status": status,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    })
}

/// The status the CRD should have: names, conditions and stored versions. Equal to the
/// current one when nothing is to change (times included), so no write happens.
fn desired_status(crd: &Value, others: &[Value]) -> Value {
    let mut status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    if !status.is_object() {
        status = json!({});
    }
    let requested = requested_names(crd);
    let conflict = name_conflict(&requested, others);
    let was_established = established(crd);
    let (names_accepted, established_now) = match &conflict {
        None => {
            status["acceptedNames"] = requested;
            (
                condition(
                    crd,
                    "NamesAccepted",
                    true,
                    "NoConflicts",
                    "no conflicts found",
                ),
                condition(
                    crd,
                    "Established",
                    true,
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                ),
            )
        }
        Some((reason, message)) => {
            if status.get("acceptedNames").is_none() {
                status["acceptedNames"] = json!({"plural": "", "kind": ""});
            }
            let established = if was_established {
                conditions(crd)
                    .into_iter()
                    .find(|c| c["type"] == "Established")
                    .unwrap_or_default()
            } else {
                condition(
                    crd,
                    "Established",
                    false,
                    "NotAccepted",
                    "not all names are accepted",
                )
            };
            (
                condition(crd, "NamesAccepted", false, reason, message),
                established,
            )
        }
    };
    let mut all: Vec<Value> = conditions(crd)
        .into_iter()
        .filter(|c| c["type"] != "NamesAccepted" && c["type"] != "Established")
        .collect();
    all.insert(0, names_accepted);
    all.insert(1, established_now);
    status["conditions"] = Value::Array(all);
    let mut stored: Vec<Value> = status
        .get("storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(v) = storage_version(crd) {
        if !stored.iter().any(|s| s == v) && (conflict.is_none() || was_established) {
            stored.push(json!(v));
        }
    }
    status["storedVersions"] = Value::Array(stored);
    status
}

/// Logs that the controller could not do `what` for the type of `v`, and why.
fn warn_type(v: &ServedVersion, e: &Status, what: &str) {
    tracing::warn!(
        group = v.info.group,
        version = v.info.version,
        resource = v.info.resource,
        error = %e.message,
        "crd controller: {what}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(plural: &str, kind: &str, short: &[&str]) -> Value {
        json!({
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": plural, "kind": kind, "shortNames": short},
                     "versions": [{"name": "v1", "served": true, "storage": true}]}
        })
    }

    fn accepted(mut c: Value) -> Value {
        c["status"] = desired_status(&c, &[]);
        c
    }

    #[test]
    fn names_without_conflicts_are_accepted_and_established() {
        let s = desired_status(&crd("widgets", "Widget", &["wd"]), &[]);
        assert_eq!(s["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(s["acceptedNames"]["singular"], "widget");
        assert_eq!(s["conditions"][0]["type"], "NamesAccepted");
        assert_eq!(s["conditions"][0]["reason"], "NoConflicts");
        assert_eq!(s["conditions"][1]["type"], "Established");
        assert_eq!(s["conditions"][1]["status"], "True");
        assert_eq!(s["storedVersions"], json!(["v1"]));
        // Computed again from its own result, nothing changes.
        let mut c = crd("widgets", "Widget", &["wd"]);
        c["status"] = s.clone();
        assert_eq!(desired_status(&c, &[]), s);
    }

    #[test]
    fn conflicting_names_are_not_accepted() {
        let other = accepted(crd("widgets", "Widget", &["wd"]));
        let s = desired_status(&crd("widgets", "Gadget", &[]), std::slice::from_ref(&other));
        assert_eq!(s["conditions"][0]["status"], "False");
        assert_eq!(s["conditions"][0]["reason"], "PluralConflict");
        assert_eq!(
            s["conditions"][0]["message"],
            "\"widgets\" is already in use"
        );
        assert_eq!(s["conditions"][1]["reason"], "NotAccepted");
        assert_eq!(s["storedVersions"], json!([]));
        let s = desired_status(
            &crd("gadgets", "Gadget", &["wd"]),
            std::slice::from_ref(&other),
        );
        assert_eq!(s["conditions"][0]["reason"], "ShortNamesConflict");
        // A kind in use (its default singular, `widget`, would be taken first).
        let mut same_kind = crd("gadgets", "Widget", &[]);
        same_kind["spec"]["names"]["singular"] = json!("gadget");
        let s = desired_status(&same_kind, &[other]);
        assert_eq!(s["conditions"][0]["reason"], "KindConflict");
    }
}
