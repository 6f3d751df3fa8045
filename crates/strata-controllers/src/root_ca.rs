//! The root CA publisher, as kube-controller-manager runs it: every active namespace has the
//! ConfigMap `kube-root-ca.crt`, whose `ca.crt` holds the CA bundle that verifies the API
//! server's serving certificate, so that workloads can trust the server they reach at
//! `kubernetes.default.svc`. The ConfigMap is created when the namespace appears, recreated
//! when deleted, and rewritten when its data is not exactly that bundle (other keys are
//! removed) or its `kubernetes.io/description` annotation is missing; other annotations and
//! labels are kept.
//!
//! Which bundle is published is the server's choice (see `strata serve --root-ca-file`); every
//! replica over one store must publish the same one, or they rewrite each other's.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use strata_object::Object;
use strata_registry::Registry;

use crate::per_namespace::{Kept, PerNamespace};

/// The ConfigMap's name.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// The data key holding the bundle.
pub const CA_KEY: &str = "ca.crt";
/// The annotation that says what the ConfigMap is for.
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// Its value.
pub const DESCRIPTION: &str = "The CA bundle that verifies the API server's serving certificate, \
for clients in the cluster reaching it at its internal addresses (kubernetes.default.svc). \
Kept by the server; other uses are not guaranteed.";

/// The `kube-root-ca.crt` ConfigMap holding `bundle`.
struct RootCa {
    bundle: String,
}

impl RootCa {
    fn data(&self) -> Value {
        json!({ CA_KEY: self.bundle })
    }
}

impl Kept for RootCa {
    const CONTROLLER: &'static str = "root-ca-certificate-publisher-controller";
    const RESOURCE: (&'static str, &'static str, &'static str) = ("", "v1", "configmaps");
    const NAME: &'static str = ROOT_CA_CONFIG_MAP;

    fn wanted(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": ROOT_CA_CONFIG_MAP,
                "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION},
            },
            "data": self.data(),
        })
    }

    fn repaired(&self, current: &Object) -> Option<Value> {
        let map = current.as_map();
        let data_ok = map.get("data") == Some(&self.data());
        let described = map
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
            .and_then(Value::as_str)
            .is_some_and(|d| !d.is_empty());
        if data_ok && described {
            return None;
        }
        let mut repaired = current.as_map().clone();
        repaired.insert("data".into(), self.data());
        let metadata = repaired
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()?;
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        if !described {
            annotations[DESCRIPTION_ANNOTATION] = json!(DESCRIPTION);
        }
        Some(Value::Object(repaired))
    }
}

/// Keeps `kube-root-ca.crt` in every active namespace; [`RootCaPublisher::run`] drives it.
/// Several replicas may run it at once, publishing the same bundle.
pub struct RootCaPublisher(PerNamespace<RootCa>);

impl std::fmt::Debug for RootCaPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootCaPublisher").finish()
    }
}

impl RootCaPublisher {
    /// Publishes `bundle` (PEM certificates); `None` when the registry serves no namespaces
    /// or no ConfigMaps.
    pub fn new(registry: Arc<Registry>, bundle: String) -> Option<Self> {
        PerNamespace::new(registry, RootCa { bundle }).map(Self)
    }

    /// Whether every namespace that existed at start has had its first pass.
    pub fn has_synced(&self) -> bool {
        self.0.has_synced()
    }

    /// Runs until the task is dropped or aborted.
    pub async fn run(self: Arc<Self>) {
        self.0.run().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn what_is_published_and_what_is_repaired() {
        let ca = RootCa {
            bundle: "PEM".into(),
        };
        let wanted = ca.wanted();
        assert_eq!(wanted["data"], json!({"ca.crt": "PEM"}));
        assert_eq!(
            wanted["metadata"]["annotations"][DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
        // As wanted, with labels and another description of the operator's: left alone.
        let fine = config_map(json!({
            "metadata": {"name": ROOT_CA_CONFIG_MAP, "labels": {"a": "b"},
                         "annotations": {DESCRIPTION_ANNOTATION: "ours"}},
            "data": {"ca.crt": "PEM"},
        }));
        assert_eq!(ca.repaired(&fine), None);
        // Another bundle and an extra key: the data is replaced, the annotations kept.
        let stale = config_map(json!({
            "metadata": {"name": ROOT_CA_CONFIG_MAP, "resourceVersion": "7",
                         "annotations": {DESCRIPTION_ANNOTATION: "ours", "x": "y"}},
            "data": {"ca.crt": "OLD", "extra": "1"},
        }));
        let fixed = ca.repaired(&stale).unwrap();
        assert_eq!(fixed["data"], json!({"ca.crt": "PEM"}));
        assert_eq!(
            fixed["metadata"]["annotations"],
            json!({DESCRIPTION_ANNOTATION: "ours", "x": "y"})
        );
        assert_eq!(fixed["metadata"]["resourceVersion"], "7");
        // The description missing (or empty): added, the data being right.
        for annotations in [json!(null), json!({DESCRIPTION_ANNOTATION: ""})] {
            let mut v = json!({
                "metadata": {"name": ROOT_CA_CONFIG_MAP},
                "data": {"ca.crt": "PEM"},
            });
            if !annotations.is_null() {
                v["metadata"]["annotations"] = annotations;
            }
            let fixed = ca.repaired(&config_map(v)).unwrap();
            assert_eq!(
                fixed["metadata"]["annotations"][DESCRIPTION_ANNOTATION],
                DESCRIPTION
            );
        }
        // No data at all.
        let empty = config_map(json!({"metadata": {"name": ROOT_CA_CONFIG_MAP}}));
        assert_eq!(
            ca.repaired(&empty).unwrap()["data"],
            json!({"ca.crt": "PEM"})
        );
    }
}
