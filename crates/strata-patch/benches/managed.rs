//! The managedFields a create records (`managed::record_update` with no old object), on a
//! custom resource shaped like `cargo xtask bench --only crd`'s WebApp (nested objects, two list
//! maps, a string map) and on a ServiceAccount with the built-in schema. Each iteration clones
//! the object first, as a create owns its body; `clone` alone is measured beside it.
//!
//! Also a server-side apply to a ServiceAccount that `managers` managers share, each owning
//! one label it sets (`cargo xtask bench --only updates`' contended apply, without the
//! server): one manager changing its label's value, with 64 managers and with one.
//!
//! Run with `cargo bench -p strata-patch --bench managed`; results are in
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use strata_object::builtin;
use strata_object::schema::{CompiledSchema, Node};
use strata_patch::apply;
use strata_patch::managed::record_update;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NOW: &str = "2026-11-28T04:00:00Z";

fn web_app_schema() -> CompiledSchema {
    let quantity = json!({"x-kubernetes-int-or-string": true});
    let resources = json!({"type": "object", "properties": {"cpu": quantity, "memory": quantity}});
    let definitions = json!({
        "WebApp": {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": "#/components/schemas/Meta"},
            "spec": {"type": "object", "properties": {
                "image": {"type": "string"},
                "minReplicas": {"type": "integer"},
                "maxReplicas": {"type": "integer"},
                "tier": {"type": "string"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "properties": {
                              "name": {"type": "string"}, "port": {"type": "integer"},
                              "protocol": {"type": "string"}}}},
                "env": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {
                            "name": {"type": "string"}, "value": {"type": "string"}}}},
                "resources": {"type": "object",
                              "properties": {"requests": resources, "limits": resources}},
                "selector": {"type": "object", "additionalProperties": {"type": "string"}},
                "rollout": {"type": "object", "properties": {
                    "strategy": {"type": "string"},
                    "maxSurge": {"x-kubernetes-int-or-string": true},
                    "maxUnavailable": {"x-kubernetes-int-or-string": true}}},
                "owner": {"type": "string"}
            }},
            "status": {"type": "object", "properties": {"readyReplicas": {"type": "integer"}}}
        }},
        "Meta": {"type": "object", "properties": {
            "name": {"type": "string"}, "namespace": {"type": "string"},
            "uid": {"type": "string"}, "creationTimestamp": {"type": "string"},
            "generateName": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "managedFields": {"type": "array", "items": {"type": "object"}}
        }}
    });
    CompiledSchema::new(definitions.as_object().expect("an object"), "WebApp")
        .expect("the root is defined")
}

fn metadata() -> Value {
    json!({
        "name": "w-x7k2p", "namespace": "bench", "uid": "0b6f6d8e-8c5a-4a7e-9a53-3b1f0e2d4c11",
        "creationTimestamp": NOW,
        "labels": {"app.kubernetes.io/name": "shop", "app.kubernetes.io/component": "frontend",
                   "app.kubernetes.io/part-of": "storefront", "team": "payments"},
        "annotations": {"bench.strata.dev/owner": "shop-team@example.com",
                        "bench.strata.dev/runbook": "https://runbooks.example.com/storefront/frontend"}
    })
}

fn web_app() -> Value {
    json!({
        "apiVersion": "bench.strata.dev/v1", "kind": "WebApp", "metadata": metadata(),
        "spec": {
            "image": "registry.example.com/shop/frontend:v1.24.3",
            "minReplicas": 2, "maxReplicas": 12, "tier": "frontend",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                      {"name": "metrics", "port": 9090, "protocol": "TCP"},
                      {"name": "dns", "port": 5353, "protocol": "UDP"}],
            "env": [{"name": "MODE", "value": "production"},
                    {"name": "LOG_LEVEL", "value": "info"},
                    {"name": "CACHE_URL", "value": "redis://cache.shop.svc:6379/0"},
                    {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-beta"}],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                          "limits": {"cpu": 2, "memory": "1Gi"}},
            "selector": {"app": "shop", "component": "frontend"},
            "rollout": {"strategy": "RollingUpdate", "maxSurge": "25%", "maxUnavailable": 0},
            "owner": "shop-team@example.com"
        }
    })
}

fn service_account() -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(),
        "secrets": [{"name": "shop-frontend-token"}, {"name": "shop-frontend-tls"},
                    {"name": "shop-frontend-oauth"}],
        "imagePullSecrets": [{"name": "registry-example-com"}, {"name": "registry-mirror"}],
        "automountServiceAccountToken": false
    })
}

fn bench_create(c: &mut Criterion, name: &str, object: &Value, schema: Node) {
    c.bench_function(&format!("clone/{name}"), |b| {
        b.iter(|| black_box(object.clone()))
    });
    c.bench_function(&format!("create-managed-fields/{name}"), |b| {
        b.iter(|| {
            let mut new = object.clone();
            record_update(None, &mut new, schema, "bench", "v1", None, NOW);
            black_box(new)
        })
    });
}

/// A ServiceAccount as `managers` appliers leave it, each having applied label
/// `client-<i>`.
fn shared_service_account(managers: usize, schema: Node) -> Value {
    let mut live: Option<Value> = None;
    for i in 0..managers {
        let config = label_config(i, "v0");
        let applied = apply(
            live.as_ref(),
            &config,
            schema,
            &format!("client-{i}"),
            false,
            "v1",
            NOW,
        );
        live = Some(applied.expect("each manager owns its own label"));
    }
    live.expect("at least one manager")
}

fn label_config(i: usize, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": "shared", "namespace": "default",
                        "labels": {format!("client-{i}"): value}}})
}

fn bench_apply(c: &mut Criterion, managers: usize, schema: Node) {
    let live = shared_service_account(managers, schema);
    let config = label_config(managers / 2, "v1");
    let manager = format!("client-{}", managers / 2);
    c.bench_function(&format!("apply-label/{managers}-managers"), |b| {
        b.iter(|| {
            let applied = apply(Some(&live), &config, schema, &manager, false, "v1", NOW);
            black_box(applied.expect("the manager owns the label it changes"))
        })
    });
}

fn managed(c: &mut Criterion) {
    let web_app_schema = web_app_schema();
    bench_create(c, "web-app", &web_app(), web_app_schema.root());
    let sa = builtin::service_account();
    let sa_schema = sa.schema().expect("the built-in kind has a schema");
    bench_create(c, "service-account", &service_account(), sa_schema);
    bench_apply(c, 1, sa_schema);
    bench_apply(c, 64, sa_schema);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = managed
}
criterion_main!(benches);
