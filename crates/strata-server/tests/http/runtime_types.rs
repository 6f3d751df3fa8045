//! Types that come and go while the server runs: a type registered on a running server is
//! routed, listed in discovery and OpenAPI, cached and watched within a second, and once removed
//! is gone from all of them, its open watches ended. The server runs in this test's process so
//! the test can reach its registry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{assert_status, storage, Http, Storage, WatchOptions, WatchStream};
use serde_json::{json, Value};
use strata_object::builtin::{closure, schema_catalog};
use strata_object::resource::{NameRule, Scope};
use strata_object::selector::UnknownFieldStyle;
use strata_object::{ResourceType, Verb};
use strata_registry::DefaultStrategy;
use strata_server::{AuthorizationMode, Backend, Config, Server};

/// `widgets.example.com/v1`, namespaced, with a small schema and no protobuf form (as custom
/// resources have none).
fn widget() -> ResourceType {
    let schema_name = "com.example.v1.Widget".to_string();
    let mut definitions = closure(
        &schema_catalog(),
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    );
    definitions.insert(
        schema_name.clone(),
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
            },
            "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "Widget", "version": "v1"}]
        }),
    );
    ResourceType {
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        list_kind: "WidgetList".into(),
        resource: "widgets".into(),
        singular: "widget".into(),
        scope: Scope::Namespaced,
        short_names: vec!["wd".into()],
        categories: vec!["all".into()],
        verbs: Verb::ALL.to_vec(),
        subresources: Vec::new(),
        name_rule: NameRule::Dns1123Subdomain,
        supports_table: true,
        printer_columns: Vec::new(),
        supports_strategic_merge: false,
        protobuf: false,
        schema_name,
        definitions,
        selectable_fields: vec!["metadata.name".into(), "metadata.namespace".into()],
        unknown_field_style: UnknownFieldStyle::NotKnown,
        custom: false,
        scale: None,
        schema_cache: Default::default(),
    }
}

/// Polls `check` every 20 ms until it holds; returns how long that took (panics after 10 s).
async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

fn lists_group(discovery: &Value, group: &str) -> bool {
    discovery["groups"]
        .as_array()
        .is_some_and(|groups| groups.iter().any(|g| g["name"] == group))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_registered_while_serving_is_served_then_removed() {
    let dir = tempfile::tempdir().unwrap();
    // On etcd (STRATA_TEST_STORAGE=etcd) the in-process server is one replica over a
    // throwaway etcd: registered types live in each replica's registry, not in the store.
    let etcd = (storage() == Storage::Etcd)
        .then(|| strata_store_etcd::testing::TestEtcd::start().expect("start /usr/bin/etcd"));
    if let Some(etcd) = &etcd {
        etcd.store("").await;
    }
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        backend: if etcd.is_some() {
            Backend::Etcd
        } else {
            Backend::RocksDb
        },
        etcd_servers: etcd.iter().map(|e| e.url.clone()).collect(),
        insecure_http: true,
        anonymous_auth: true,
        authorization_mode: AuthorizationMode::AlwaysAllow,
        ..Config::default()
    };
    let server = Server::start(config).await.expect("start the server");
    let addr = server.local_addr().unwrap().to_string();
    let registry = server.registry();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let h = Http::to(&addr);
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";

    // Not served yet.
    assert_status(&h.get(widgets).await, 404, "NotFound");
    assert!(!lists_group(&h.get_ok("/apis").await, "example.com"));

    registry
        .add_type(widget(), Arc::new(DefaultStrategy))
        .await
        .expect("register widgets");
    let took = until("discovery lists example.com", async || {
        lists_group(&h.get_ok("/apis").await, "example.com")
    })
    .await;
    assert!(took < Duration::from_secs(1), "discovery after {took:?}");
    let resources = h.get_ok("/apis/example.com/v1").await;
    assert_eq!(resources["resources"][0]["name"], "widgets");
    assert_eq!(resources["resources"][0]["shortNames"], json!(["wd"]));
    let openapi = h.get_ok("/openapi/v3").await;
    assert!(
        openapi["paths"].get("apis/example.com/v1").is_some(),
        "{openapi}"
    );
    let doc = h.get_ok("/openapi/v3/apis/example.com/v1").await;
    assert!(doc["components"]["schemas"]
        .get("com.example.v1.Widget")
        .is_some());

    // Served like any type: writes, reads from its cache, watches, field validation.
    let mut watch = WatchStream::open(
        &addr,
        &format!("{widgets}?watch=1"),
        WatchOptions::default(),
    )
    .await;
    assert_eq!(watch.status, 200);
    let r = h
        .post_json(
            &format!("{widgets}?fieldValidation=Strict"),
            &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w1"}, "spec": {"size": 3}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let event = watch.next_event().await;
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["metadata"]["name"], "w1");
    let got = h.get_ok(&format!("{widgets}/w1")).await;
    assert_eq!(got["spec"]["size"], 3);
    let list = h.get_ok(widgets).await;
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let r = h
        .post_json(
            &format!("{widgets}?fieldValidation=Strict"),
            &json!({"metadata": {"name": "w2"}, "spec": {"colour": "red"}}),
        )
        .await;
    assert_status(&r, 400, "BadRequest");

    // No protobuf form: 406 for protobuf alone, JSON when the client also takes it.
    let pb = "application/vnd.kubernetes.protobuf";
    let r = h
        .send("GET", &format!("{widgets}/w1"), None, &[("accept", pb)])
        .await;
    assert_status(&r, 406, "NotAcceptable");
    let r = h
        .send(
            "GET",
            &format!("{widgets}/w1"),
            None,
            &[(
                "accept",
                "application/vnd.kubernetes.protobuf, application/json",
            )],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.header("content-type"), "application/json");

    // Registering it twice is refused.
    let again = registry.add_type(widget(), Arc::new(DefaultStrategy)).await;
    assert_eq!(again.unwrap_err().code, 409);

    // Removed: gone from routing, discovery and OpenAPI; the open watch ends.
    assert!(registry.remove_type("example.com", "v1", "widgets"));
    let took = until("discovery drops example.com", async || {
        !lists_group(&h.get_ok("/apis").await, "example.com")
    })
    .await;
    assert!(took < Duration::from_secs(1), "discovery after {took:?}");
    assert_status(&h.get(&format!("{widgets}/w1")).await, 404, "NotFound");
    assert_eq!(h.get("/openapi/v3/apis/example.com/v1").await.code(), 404);
    assert!(watch.until_end(Duration::from_secs(5)).await.is_empty());
    assert!(!registry.remove_type("example.com", "v1", "widgets"));

    // Built-in types were never disturbed.
    h.get_ok("/api/v1/namespaces/default/serviceaccounts").await;
    let _ = stop.send(());
    serving.await.unwrap();
}
