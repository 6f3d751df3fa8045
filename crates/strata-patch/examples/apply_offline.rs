//! Strategic merge patch and server-side apply on `k8s-openapi` objects, offline: what a
//! controller's unit tests or a `kubectl`-like tool can do without an API server.
//!
//! Run it with `cargo run -p strata-patch --example apply_offline`. It prints each step and
//! asserts what Kubernetes would store; `tests/examples.rs` runs it under `cargo test`.
//!
//! The patch engines work on JSON value trees and a type's OpenAPI schema. Typed objects go in
//! and come out through serde; the schemas of ServiceAccount and ConfigMap come with
//! `strata-object` (`strata_object::builtin`). For a type Strata does not build in (a
//! Deployment, your own custom resource), read its OpenAPI `components.schemas` with
//! `strata_object::schema::CompiledSchema::new` and walk from its `root()`.

use std::collections::BTreeMap;
use std::error::Error;

use k8s_openapi::api::core::v1::{
    ConfigMap, LocalObjectReference, ObjectReference, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use strata_patch::serde_json::{self, json, Value};
use strata_patch::strata_object::builtin;
use strata_patch::strata_object::schema::Node;
use strata_patch::{ApplyError, Conflict};

/// Applies a strategic merge patch (what `kubectl patch` sends by default) to a typed object.
pub fn strategic_patch<K>(live: &K, patch: &Value, schema: Node) -> Result<K, Box<dyn Error>>
where
    K: Serialize + DeserializeOwned,
{
    let live = serde_json::to_value(live)?;
    let patched = strata_patch::strategic_merge(&live, patch, schema)?;
    Ok(serde_json::from_value(patched)?)
}

/// Server-side apply of `applied` by `manager`, as `kubectl apply --server-side` (or
/// `Patch::Apply` in kube-rs) asks the API server to do it. `live` is `None` when the object
/// does not exist yet. `now` is the time the manager's entry records.
pub fn server_side_apply<K>(
    live: Option<&K>,
    applied: &K,
    schema: Node,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<K, ApplyError>
where
    K: Resource + Serialize + DeserializeOwned,
{
    let to_value = |obj: &K| {
        serde_json::to_value(obj).map_err(|e| ApplyError::Invalid(format!("serializing: {e}")))
    };
    let live = live.map(to_value).transpose()?;
    let applied = to_value(applied)?;
    let stored = strata_patch::apply(
        live.as_ref(),
        &applied,
        schema,
        manager,
        force,
        K::API_VERSION,
        now,
    )?;
    serde_json::from_value(stored).map_err(|e| ApplyError::Invalid(format!("decoding: {e}")))
}

/// Who owns what, from the typed object's `metadata.managedFields`.
fn owners(meta: &ObjectMeta) -> Vec<(String, String, Value)> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
                e.fields_v1.as_ref().map_or(Value::Null, |f| f.0.clone()),
            )
        })
        .collect()
}

fn print_owners(meta: &ObjectMeta) {
    for (manager, operation, fields) in owners(meta) {
        println!("    {manager} ({operation}): {fields}");
    }
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ci".into()),
            ..ObjectMeta::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// `kubectl patch serviceaccount builder -p '…'`: labels merge key by key, `secrets` merge by
/// `name` (the schema's merge key), `imagePullSecrets` (no patch strategy) are replaced.
fn strategic_merge_patch() -> Result<(), Box<dyn Error>> {
    println!("strategic merge patch of a ServiceAccount");
    let sa_type = builtin::service_account();
    let schema = sa_type.schema().ok_or("ServiceAccount has a schema")?;

    let live = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("builder".into()),
            namespace: Some("ci".into()),
            labels: Some(BTreeMap::from([("app".into(), "builder".into())])),
            ..ObjectMeta::default()
        },
        secrets: Some(vec![ObjectReference {
            name: Some("token-a".into()),
            ..ObjectReference::default()
        }]),
        image_pull_secrets: Some(vec![LocalObjectReference {
            name: "registry-a".into(),
        }]),
        ..ServiceAccount::default()
    };
    let patch = json!({
        "metadata": {"labels": {"tier": "build"}},
        "secrets": [{"name": "token-b"}],
        // What kubectl adds to keep the list in the order of the user's file.
        "$setElementOrder/secrets": [{"name": "token-a"}, {"name": "token-b"}],
        "imagePullSecrets": [{"name": "registry-b"}],
    });
    println!("  patch: {patch}");
    let patched = strategic_patch(&live, &patch, schema)?;
    println!("  result: {}", serde_json::to_string(&patched)?);

    let labels = patched.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("builder"));
    assert_eq!(labels.get("tier").map(String::as_str), Some("build"));
    let secrets: Vec<_> = patched
        .secrets
        .iter()
        .flatten()
        .filter_map(|s| s.name.as_deref())
        .collect();
    assert_eq!(secrets, ["token-a", "token-b"]);
    let pull: Vec<_> = patched
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(pull, ["registry-b"]);

    // A directive the engine does not know is the client's mistake (400 Bad Request).
    let bad = json!({"secrets": [{"$patch": "frobnicate", "name": "token-a"}]});
    let err = strategic_patch(&live, &bad, schema).expect_err("unknown directive");
    println!("  a bad patch: {err}");
    Ok(())
}

/// Two managers apply to one ConfigMap: a controller owns its settings, an operator overrides
/// one of them, which conflicts until the operator forces; then the controller stops applying
/// that key and keeps the rest.
fn server_side_apply_with_conflict() -> Result<(), Box<dyn Error>> {
    println!("server-side apply of a ConfigMap by two managers");
    let cm_type = builtin::config_map();
    let schema = cm_type.schema().ok_or("ConfigMap has a schema")?;

    // The controller creates the object by applying it.
    let desired = config_map("settings", &[("mode", "fast"), ("replicas", "3")]);
    let live = server_side_apply(
        None,
        &desired,
        schema,
        "settings-controller",
        false,
        "2026-01-01T10:00:00Z",
    )?;
    println!("  settings-controller applied; managedFields:");
    print_owners(&live.metadata);
    assert_eq!(
        owners(&live.metadata),
        [(
            "settings-controller".into(),
            "Apply".into(),
            json!({"f:data": {"f:mode": {}, "f:replicas": {}}})
        )]
    );

    // The operator applies another mode: the controller owns that field.
    let override_mode = config_map("settings", &[("mode", "safe")]);
    let err = server_side_apply(
        Some(&live),
        &override_mode,
        schema,
        "operator",
        false,
        "2026-01-01T10:05:00Z",
    )
    .expect_err("the mode belongs to the controller");
    println!("  operator applied without force: {err}");
    let ApplyError::Conflicts(conflicts) = &err else {
        return Err(format!("expected conflicts, got {err}").into());
    };
    // What a 409's Status carries: one cause per conflicting field.
    let causes: Vec<(String, String)> = conflicts
        .iter()
        .map(|c: &Conflict| (c.field(), c.cause_message()))
        .collect();
    assert_eq!(
        causes,
        [(
            ".data.mode".into(),
            r#"conflict with "settings-controller""#.into()
        )]
    );

    // With force (`kubectl apply --server-side --force-conflicts`) the operator takes it over.
    let live = server_side_apply(
        Some(&live),
        &override_mode,
        schema,
        "operator",
        true,
        "2026-01-01T10:06:00Z",
    )?;
    println!("  operator applied with force; managedFields:");
    print_owners(&live.metadata);
    assert_eq!(data(&live, "mode"), Some("safe"));
    assert_eq!(
        owners(&live.metadata),
        // Entries are kept in the order of their times, as Kubernetes sorts them.
        [
            (
                "settings-controller".into(),
                "Apply".into(),
                json!({"f:data": {"f:replicas": {}}})
            ),
            (
                "operator".into(),
                "Apply".into(),
                json!({"f:data": {"f:mode": {}}})
            ),
        ]
    );

    // The controller learns to leave the mode alone and changes the replicas: the mode stays,
    // since the operator owns it.
    let desired = config_map("settings", &[("replicas", "5")]);
    let live = server_side_apply(
        Some(&live),
        &desired,
        schema,
        "settings-controller",
        false,
        "2026-01-01T10:10:00Z",
    )?;
    println!("  settings-controller applied again: data {:?}", live.data);
    assert_eq!(data(&live, "mode"), Some("safe"));
    assert_eq!(data(&live, "replicas"), Some("5"));

    // An applied object that says another apiVersion than the endpoint's is refused.
    let mut wrong = serde_json::to_value(&desired)?;
    wrong["apiVersion"] = json!("v2");
    let err = strata_patch::apply(
        Some(&serde_json::to_value(&live)?),
        &wrong,
        schema,
        "settings-controller",
        false,
        ConfigMap::API_VERSION,
        "2026-01-01T10:11:00Z",
    )
    .expect_err("wrong apiVersion");
    println!("  an apply with apiVersion v2: {err}");
    Ok(())
}

fn data<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.data.as_ref()?.get(key).map(String::as_str)
}

/// Runs both parts; panics when a result is not what Kubernetes would store.
pub fn main() -> Result<(), Box<dyn Error>> {
    strategic_merge_patch()?;
    server_side_apply_with_conflict()?;
    Ok(())
}
