//! CustomResourceDefinitions over HTTP: a CRD is accepted and established by the server, its
//! types appear in discovery and OpenAPI, custom resources get the schema's validation and
//! defaults, the `status` and `scale` sub-resources and every served version, and deleting the
//! CRD deletes its objects and then its endpoints. On etcd (STRATA_TEST_STORAGE=etcd) writes
//! go to one replica and reads to another, so each step also shows every replica following.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{assert_status, Http, Next, Reply, TestServer};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// A namespaced CRD with two served versions (v1 stored), a schema with defaults, an enum, a
/// bound and a list map, the status and scale sub-resources, and printer columns.
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 0, "default": 1},
                                    "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                                    "selector": {"type": "string"},
                                    "ports": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"],
                                        "items": {"type": "object", "required": ["name"], "properties": {
                                            "name": {"type": "string"},
                                            "port": {"type": "integer"}
                                        }}
                                    }
                                }
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "selector": {"type": "string"}
                                }
                            }
                        }
                    }},
                    "subresources": {
                        "status": {},
                        "scale": {"specReplicasPath": ".spec.replicas",
                                  "statusReplicasPath": ".status.replicas",
                                  "labelSelectorPath": ".status.selector"}
                    },
                    "additionalPrinterColumns": [
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                        {"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "priority": 1}
                    ]
                },
                {
                    "name": "v1beta1", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
                }
            ]
        }
    })
}

/// Polls `check` every 25 ms until it holds; panics after 10 s.
async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: not within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    started.elapsed()
}

fn condition<'a>(crd: &'a Value, kind: &str) -> Option<&'a Value> {
    crd["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Creates a CRD and waits until it is established and its first served version answers on
/// every replica (a dry-run create through the writing one, a list through the reading one).
pub async fn install(h: &Http, crd: &Value, collection: &str) -> Duration {
    let r = h.post_json(CRDS, crd).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    until("established and served", async || {
        let got = h.get(&format!("{CRDS}/{name}")).await.json();
        let established = condition(&got, "Established").is_some_and(|c| c["status"] == "True");
        let listed = h.get(collection).await.code() == 200;
        let dry = h
            .post_json(
                &format!("{collection}?dryRun=All"),
                &json!({"metadata": {"name": "probe"}}),
            )
            .await
            .code();
        established && listed && dry != 404
    })
    .await
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_is_established_and_its_custom_resources_follow_the_schema() {
    let s = TestServer::start();
    let h = s.http();
    let took = install(&h, &widget_crd(), WIDGETS).await;
    eprintln!("established and served within {took:?}");

    // The server set the names and conditions.
    let crd = h.get(&format!("{CRDS}/widgets.example.com")).await.json();
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["acceptedNames"]["listKind"], "WidgetList");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    let accepted = condition(&crd, "NamesAccepted").unwrap();
    assert_eq!(accepted["reason"], "NoConflicts");
    assert_eq!(
        condition(&crd, "Established").unwrap()["reason"],
        "InitialNamesAccepted"
    );

    // Discovery, legacy and aggregated, and OpenAPI.
    let groups = h.get("/apis").await.json();
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "example.com")
        .expect("example.com in /apis");
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let resources = h.get("/apis/example.com/v1").await.json();
    let widgets = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets")
        .expect("widgets listed");
    assert_eq!(widgets["shortNames"], json!(["wd"]));
    assert_eq!(widgets["categories"], json!(["all"]));
    assert_eq!(widgets["namespaced"], true);
    let subresources: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(subresources.contains(&"widgets/status") && subresources.contains(&"widgets/scale"));
    let openapi = h.get("/openapi/v3").await.json();
    assert!(
        openapi["paths"].get("apis/example.com/v1").is_some(),
        "{openapi}"
    );
    let doc = h.get("/openapi/v3/apis/example.com/v1").await;
    assert_eq!(doc.code(), 200);
    assert!(text(&doc).contains("com.example.v1.Widget"));
    // The sub-resources are published too: status as the Widget, scale as a Scale.
    let doc = doc.json();
    let item = "/apis/example.com/v1/namespaces/{namespace}/widgets/{name}";
    let status = &doc["paths"][format!("{item}/status")];
    assert_eq!(
        status["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/com.example.v1.Widget",
        "{status}"
    );
    let scale = &doc["paths"][format!("{item}/scale")];
    for method in ["get", "put", "patch"] {
        assert_eq!(
            scale[method]["x-kubernetes-group-version-kind"]["kind"], "Scale",
            "{scale}"
        );
    }
    assert_eq!(
        scale["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.autoscaling.v1.Scale",
        "{scale}"
    );
    assert!(
        doc["components"]["schemas"]["io.k8s.api.autoscaling.v1.ScaleSpec"]["properties"]
            ["replicas"]
            .is_object()
    );

    // Create: defaults filled in, status dropped, generation 1.
    let r = h
        .post_json(
            WIDGETS,
            &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"},
                    "spec": {"ports": [{"name": "http", "port": 80}]}, "status": {"replicas": 9}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let a = r.json();
    assert_eq!(a["spec"]["replicas"], 1);
    assert_eq!(a["spec"]["mode"], "safe");
    assert!(a.get("status").is_none(), "{a}");
    assert_eq!(a["metadata"]["generation"], 1);

    // Validation: wrong type, enum, minimum, duplicate map key; all reported at once.
    let r = h
        .post_json(
            WIDGETS,
            &widget(
                "bad",
                json!({"replicas": -1, "mode": "slow",
                       "ports": [{"name": "x"}, {"name": "x"}]}),
            ),
        )
        .await;
    assert_status(&r, 422, "Invalid");
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(message.contains("spec.replicas"), "{message}");
    assert!(message.contains("spec.mode"), "{message}");
    assert!(message.contains("Duplicate value"), "{message}");
    let r = h
        .post_json(WIDGETS, &widget("typed", json!({"replicas": "three"})))
        .await;
    assert_status(&r, 422, "Invalid");
    assert!(text(&r).contains("must be of type integer"), "{}", text(&r));

    // Unknown fields are pruned with a warning, or refused with Strict.
    let r = h
        .post_json(
            WIDGETS,
            &widget("b", json!({"replicas": 2, "colour": "red"})),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    assert!(r.json()["spec"].get("colour").is_none());
    assert!(
        r.header("warning").contains("unknown field")
            && r.header("warning").contains("spec.colour"),
        "{:?}",
        r.header("warning")
    );
    let r = h
        .post_json(
            &format!("{WIDGETS}?fieldValidation=Strict"),
            &widget("c", json!({"colour": "red"})),
        )
        .await;
    assert_status(&r, 400, "BadRequest");

    // Spec changes move the generation; status writes through the main resource are ignored.
    let r = h
        .patch_merge(
            &format!("{WIDGETS}/a"),
            &json!({"spec": {"replicas": 3}, "status": {"replicas": 5}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    let a = r.json();
    assert_eq!(a["metadata"]["generation"], 2);
    assert!(a.get("status").is_none());
    // Through /status only the status changes, and the generation stays.
    let r = h
        .patch_merge(
            &format!("{WIDGETS}/a/status"),
            &json!({"spec": {"replicas": 7}, "status": {"replicas": 3, "selector": "app=a"}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    let a = r.json();
    assert_eq!(a["status"]["replicas"], 3);
    assert_eq!(a["spec"]["replicas"], 3);
    assert_eq!(a["metadata"]["generation"], 2);

    // Scale shows and changes the replicas through the paths.
    let scale = h.get(&format!("{WIDGETS}/a/scale")).await;
    assert_eq!(scale.code(), 200, "{}", text(&scale));
    let scale = scale.json();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"], json!({"replicas": 3, "selector": "app=a"}));
    let r = h
        .patch_merge(
            &format!("{WIDGETS}/a/scale"),
            &json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 5);
    let a = h.get(&format!("{WIDGETS}/a")).await.json();
    assert_eq!(a["spec"]["replicas"], 5);
    assert_eq!(a["metadata"]["generation"], 3);
    let r = h
        .patch_merge(
            &format!("{WIDGETS}/a/scale"),
            &json!({"spec": {"replicas": -2}}),
        )
        .await;
    assert_status(&r, 422, "Invalid");

    // A Scale's fields are validated as any body's: unknown and duplicate ones are refused
    // under Strict, warned of and dropped under Warn.
    let scale_body = r#"{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"a","namespace":"default"},"spec":{"replicas":4,"replicas":6,"extra":1}}"#;
    let put_scale = async |validation: &str| {
        h.send(
            "PUT",
            &format!("{WIDGETS}/a/scale?fieldValidation={validation}"),
            Some(scale_body.as_bytes()),
            &[("content-type", "application/json")],
        )
        .await
    };
    let r = put_scale("Strict").await;
    assert_status(&r, 400, "BadRequest");
    for item in [
        "unknown field \"spec.extra\"",
        "duplicate field \"spec.replicas\"",
    ] {
        let message = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(item), "{message} lacks {item}");
    }
    assert_eq!(
        h.get(&format!("{WIDGETS}/a")).await.json()["spec"]["replicas"],
        5
    );
    let r = put_scale("Warn").await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 6);
    let warnings: Vec<&str> = r
        .headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    for item in [
        "unknown field \\\"spec.extra\\\"",
        "duplicate field \\\"spec.replicas\\\"",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(item)),
            "{warnings:?} lack {item}"
        );
    }
    let r = h
        .send(
            "PATCH",
            &format!("{WIDGETS}/a/scale?fieldValidation=Strict"),
            Some(br#"{"spec":{"replicas":2,"bogus":true}}"#),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    assert!(
        r.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown field \"spec.bogus\"")),
        "{}",
        text(&r)
    );
    let r = put_scale("Ignore").await;
    assert_eq!((r.code(), r.header("warning")), (200, ""), "{}", text(&r));

    // Another served version reads the same objects in its own apiVersion.
    let beta = h
        .get("/apis/example.com/v1beta1/namespaces/default/widgets/a")
        .await;
    assert_eq!(beta.code(), 200, "{}", text(&beta));
    assert_eq!(beta.json()["apiVersion"], "example.com/v1beta1");
    assert_eq!(beta.json()["spec"]["replicas"], 6);

    // Strategic merge patch is not for custom resources.
    let r = h
        .send_json(
            "PATCH",
            &format!("{WIDGETS}/a"),
            &json!({"spec": {"replicas": 1}}),
            "application/strategic-merge-patch+json",
        )
        .await;
    assert_eq!(r.code(), 415, "{}", text(&r));

    // The declared columns, the wide one included, in Tables.
    let table = h
        .send("GET", WIDGETS, None, &[("accept", TABLE)])
        .await
        .json();
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["Name", "Replicas", "Mode"]);
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "a")
        .expect("row of a");
    assert_eq!(row["cells"][1], 6);
    assert_eq!(row["cells"][2], "safe");

    // Deleted at once, a custom resource is answered with a Status naming it, as Kubernetes
    // answers for custom resources.
    let uid = h.get(&format!("{WIDGETS}/b")).await.json()["metadata"]["uid"].clone();
    let r = h.delete(&format!("{WIDGETS}/b")).await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Success");
    assert_eq!(
        status["details"],
        json!({"name": "b", "group": "example.com", "kind": "widgets", "uid": uid})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_crd_deletes_its_objects_then_its_endpoints() {
    let s = TestServer::start();
    let h = s.http();
    install(&h, &widget_crd(), WIDGETS).await;
    for name in ["a", "b"] {
        let r = h.post_json(WIDGETS, &widget(name, json!({}))).await;
        assert_eq!(r.code(), 201, "{}", text(&r));
    }
    // One held by a finalizer: the CRD waits for it.
    let r = h
        .post_json(
            WIDGETS,
            &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));

    let r = h.delete(&format!("{CRDS}/widgets.example.com")).await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    let crd = r.json();
    assert!(crd["metadata"]["deletionTimestamp"].is_string(), "{crd}");
    assert!(crd["metadata"]["finalizers"]
        .as_array()
        .unwrap()
        .contains(&json!("customresourcecleanup.apiextensions.k8s.io")));

    until("the free objects deleted", async || {
        let list = h.get(WIDGETS).await.json();
        list["items"].as_array().is_some_and(|i| i.len() == 1)
    })
    .await;
    let crd = h.get(&format!("{CRDS}/widgets.example.com")).await.json();
    assert_eq!(
        condition(&crd, "Terminating").map(|c| c["reason"].clone()),
        Some(json!("InstanceDeletionInProgress")),
        "{crd}"
    );
    // No new objects while the definition is being deleted.
    let r = h.post_json(WIDGETS, &widget("late", json!({}))).await;
    assert_status(&r, 405, "MethodNotAllowed");
    assert!(
        text(&r).contains("create not allowed while custom resource definition is terminating"),
        "{}",
        text(&r)
    );
    // Releasing the last object lets the CRD go, and its endpoints with it.
    let r = h
        .patch_merge(
            &format!("{WIDGETS}/held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    h.wait_gone(
        &format!("{CRDS}/widgets.example.com"),
        Duration::from_secs(10),
    )
    .await;
    until("the endpoints gone", async || {
        h.get(WIDGETS).await.code() == 404 && !text(&h.get("/apis").await).contains("example.com")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_survive_a_restart_and_are_served_from_the_first_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = TestServer::start_in(dir.path(), &[]);
    let h = s.http();
    install(&h, &widget_crd(), WIDGETS).await;
    let r = h
        .post_json(WIDGETS, &widget("kept", json!({"replicas": 4})))
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    // Stopped but kept in scope: on etcd the restarted replicas find the same etcd.
    assert!(s.terminate());
    let again = TestServer::start_in(dir.path(), &[]);
    let h = again.http();
    let r = h.get(&format!("{WIDGETS}/kept")).await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_names_are_not_accepted() {
    let s = TestServer::start();
    let h = s.http();
    install(&h, &widget_crd(), WIDGETS).await;
    let mut other = widget_crd();
    other["metadata"]["name"] = json!("gadgets.example.com");
    other["spec"]["names"] = json!({"plural": "gadgets", "singular": "gadget", "kind": "Widget"});
    let r = h.post_json(CRDS, &other).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    until("names refused", async || {
        let got = h.get(&format!("{CRDS}/gadgets.example.com")).await.json();
        condition(&got, "NamesAccepted").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let got = h.get(&format!("{CRDS}/gadgets.example.com")).await.json();
    assert_eq!(
        condition(&got, "NamesAccepted").unwrap()["reason"],
        "KindConflict"
    );
    assert_eq!(condition(&got, "Established").unwrap()["status"], "False");
    assert_eq!(
        h.get("/apis/example.com/v1/namespaces/default/gadgets")
            .await
            .code(),
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_share_the_api_machinery() {
    let s = TestServer::start();
    let h = s.http();
    install(&h, &widget_crd(), WIDGETS).await;

    // Server-side apply merges the list map by its key: two managers, one port each.
    let apply = |manager: &'static str, port: Value| {
        let h = h.clone();
        async move {
            let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                              "metadata": {"name": "shared"}, "spec": {"ports": [port]}});
            h.send_json(
                "PATCH",
                &format!("{WIDGETS}/shared?fieldManager={manager}"),
                &body,
                "application/apply-patch+yaml",
            )
            .await
        }
    };
    let r = apply("alpha", json!({"name": "http", "port": 80})).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let r = apply("beta", json!({"name": "https", "port": 443})).await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    let obj = r.json();
    let ports: Vec<&str> = obj["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(ports, ["http", "https"]);
    let managers: Vec<&str> = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"alpha") && managers.contains(&"beta"),
        "{managers:?}"
    );
    // Applying another manager's port value conflicts.
    let r = apply("beta", json!({"name": "http", "port": 8080})).await;
    assert_status(&r, 409, "Conflict");

    // Watch from a resourceVersion sees later changes; lists page with continue tokens.
    let rv = h.get(WIDGETS).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = s
        .watch(&format!("{WIDGETS}?watch=true&resourceVersion={rv}"))
        .await;
    for name in ["w1", "w2", "w3"] {
        let r = h.post_json(WIDGETS, &widget(name, json!({}))).await;
        assert_eq!(r.code(), 201, "{}", text(&r));
    }
    for name in ["w1", "w2", "w3"] {
        let event = watch.next_event().await;
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], name);
        assert_eq!(event["object"]["apiVersion"], "example.com/v1");
    }
    let page = h.get(&format!("{WIDGETS}?limit=2")).await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let token = page["metadata"]["continue"].as_str().unwrap();
    let rest = h
        .get(&format!("{WIDGETS}?limit=2&continue={token}"))
        .await
        .json();
    assert_eq!(rest["items"].as_array().unwrap().len(), 2);

    // A schema change takes effect on the next request.
    let mut crd = h.get(&format!("{CRDS}/widgets.example.com")).await.json();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"]["maximum"] = json!(10);
    let r = h
        .put_json(&format!("{CRDS}/widgets.example.com"), &crd)
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    until("the new schema applies", async || {
        let r = h
            .post_json(
                &format!("{WIDGETS}?dryRun=All"),
                &widget("big", json!({"replicas": 11})),
            )
            .await;
        r.code() == 422
    })
    .await;

    // Deleting a collection deletes the custom resources; so does deleting their namespace.
    let r = h.delete(&format!("{WIDGETS}?labelSelector=")).await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    assert_eq!(h.get(WIDGETS).await.json()["items"], json!([]));
    let r = h
        .post_json(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "doomed"}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let doomed = "/apis/example.com/v1/namespaces/doomed/widgets";
    let r = h.post_json(doomed, &widget("inside", json!({}))).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let r = h.delete("/api/v1/namespaces/doomed").await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    h.wait_gone("/api/v1/namespaces/doomed", Duration::from_secs(10))
        .await;
    assert_eq!(h.get(doomed).await.json()["items"], json!([]));
}

/// A CRD whose schema carries CEL rules: one across fields, one transition rule, one with a
/// messageExpression and a reason.
fn rules_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ranges.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "ranges", "singular": "range", "kind": "Range"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"scale": {"specReplicasPath": ".spec.min",
                                           "statusReplicasPath": ".status.replicas"}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}
                    }}, "spec": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                            {"rule": "self.tags.all(t, t.startsWith('x-'))",
                             "messageExpression": "'tags must start with x-, got ' + self.tags.filter(t, !t.startsWith('x-')).join(', ')",
                             "reason": "FieldValueForbidden", "fieldPath": ".tags"}
                        ],
                        "properties": {
                            "min": {"type": "integer"},
                            "max": {"type": "integer"},
                            "mode": {"type": "string", "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": "mode is immutable"}
                            ]},
                            "tags": {"type": "array", "maxItems": 10,
                                     "items": {"type": "string", "maxLength": 20}, "default": []}
                        }
                    }}
                }}
            }]
        }
    })
}

/// Tightens the `spec` properties of the ranges CRD with `edit`, and waits until a dry-run
/// create of `probe`, which the change makes invalid, is refused.
async fn tighten_spec(h: &Http, ranges: &str, probe: &Value, edit: impl Fn(&mut Value)) {
    edit_crd(h, "ranges.example.com", |crd| {
        edit(
            &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                ["properties"],
        )
    })
    .await;
    until("the tightened schema applies", async || {
        let r = h.post_json(&format!("{ranges}?dryRun=All"), probe).await;
        r.code() == 422
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rules_validate_custom_resources() {
    let s = TestServer::start();
    let h = s.http();
    let ranges = "/apis/example.com/v1/namespaces/default/ranges";
    install(&h, &rules_crd(), ranges).await;
    let range = |name: &str, spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Range", "metadata": {"name": name}, "spec": spec});

    let r = h
        .post_json(
            ranges,
            &range(
                "ok",
                json!({"min": 1, "max": 2, "mode": "a", "tags": ["x-1"]}),
            ),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));

    let r = h
        .post_json(ranges, &range("inverted", json!({"min": 3, "max": 2})))
        .await;
    assert_status(&r, 422, "Invalid");
    let causes = r.json()["details"]["causes"].clone();
    assert_eq!(causes[0]["field"], "spec", "{causes}");
    assert!(
        causes[0]["message"]
            .as_str()
            .unwrap()
            .contains("min must not exceed max"),
        "{causes}"
    );

    let r = h
        .post_json(
            ranges,
            &range(
                "tagged",
                json!({"min": 1, "max": 2, "tags": ["x-a", "b", "c"]}),
            ),
        )
        .await;
    assert_status(&r, 422, "Invalid");
    let cause = r.json()["details"]["causes"][0].clone();
    assert_eq!(cause["field"], "spec.tags", "{cause}");
    assert_eq!(cause["reason"], "FieldValueForbidden", "{cause}");
    assert!(
        cause["message"]
            .as_str()
            .unwrap()
            .contains("tags must start with x-, got b, c"),
        "{cause}"
    );

    // The transition rule: checked on updates only, against the stored value.
    let r = h
        .patch_merge(&format!("{ranges}/ok"), &json!({"spec": {"mode": "b"}}))
        .await;
    assert_status(&r, 422, "Invalid");
    assert!(text(&r).contains("mode is immutable"), "{}", text(&r));
    let r = h
        .patch_merge(&format!("{ranges}/ok"), &json!({"spec": {"max": 5}}))
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));

    // A rule added later holds new values; a value an update leaves alone is not refused for
    // it (Kubernetes' ratcheting).
    tighten_spec(
        &h,
        ranges,
        &range("probe", json!({"min": 1, "max": 9})),
        |spec| {
            spec["max"]["x-kubernetes-validations"] =
                json!([{"rule": "self < 4", "message": "max below 4"}]);
        },
    )
    .await;
    let r = h
        .patch_merge(&format!("{ranges}/ok"), &json!({"spec": {"min": 2}}))
        .await;
    assert_eq!(r.code(), 200, "unchanged max 5 ratchets: {}", text(&r));
    // The writer is told, as Kubernetes tells it: a warning with the rule's error.
    let warning = r.header("warning");
    assert!(
        warning.starts_with("299 - ")
            && warning.contains("spec.max: Invalid value")
            && warning.contains("max below 4"),
        "{warning:?}"
    );
    let r = h
        .patch_merge(&format!("{ranges}/ok"), &json!({"spec": {"max": 6}}))
        .await;
    assert_status(&r, 422, "Invalid");
    assert!(text(&r).contains("max below 4"), "{}", text(&r));
    // So is a writer of the scale sub-resource, which changes `min` and leaves `max` alone.
    let r = h
        .patch_merge(
            &format!("{ranges}/ok/scale"),
            &json!({"spec": {"replicas": 3}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 3, "{}", text(&r));
    let warning = r.header("warning");
    assert!(warning.contains("max below 4"), "{warning:?}");

    // The schema ratchets too: a bound added later holds for the values a write changes only.
    tighten_spec(
        &h,
        ranges,
        &range("probe", json!({"min": 2, "max": 3})),
        |spec| {
            spec["min"]["maximum"] = json!(1);
        },
    )
    .await;
    let r = h
        .patch_merge(&format!("{ranges}/ok"), &json!({"spec": {"tags": ["x-2"]}}))
        .await;
    assert_eq!(r.code(), 200, "unchanged min 3 ratchets: {}", text(&r));
    let r = h
        .patch_merge(&format!("{ranges}/ok"), &json!({"spec": {"min": 4}}))
        .await;
    assert_status(&r, 422, "Invalid");
    assert!(
        text(&r).contains("spec.min in body should be less than or equal to 1"),
        "{}",
        text(&r)
    );

    // A value of the wrong type keeps the rules from running, as in Kubernetes.
    let r = h
        .post_json(ranges, &range("typo", json!({"min": "one", "max": 0})))
        .await;
    assert_status(&r, 422, "Invalid");
    let body = text(&r);
    assert!(
        body.contains("spec.min in body must be of type integer"),
        "{body}"
    );
    assert!(
        body.contains("some validation rules were not checked because the object was invalid"),
        "{body}"
    );
    assert!(!body.contains("min must not exceed max"), "{body}");

    // A rule that does not compile, or could cost too much, refuses the CRD itself.
    let mut broken = rules_crd();
    broken["metadata"]["name"] = json!("brokens.example.com");
    broken["spec"]["names"] = json!({"plural": "brokens", "kind": "Broken"});
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["x-kubernetes-validations"] = json!([{"rule": "self.min <"}]);
    let r = h.post_json(CRDS, &broken).await;
    assert_status(&r, 422, "Invalid");
    assert!(text(&r).contains("compilation failed"), "{}", text(&r));
    let mut costly = rules_crd();
    costly["metadata"]["name"] = json!("costlies.example.com");
    costly["spec"]["names"] = json!({"plural": "costlies", "kind": "Costly"});
    costly["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string"}}},
        "x-kubernetes-validations": [
            {"rule": "self.items.all(a, self.items.all(b, self.items.all(c, a + b + c != '')))"}
        ]
    });
    let r = h.post_json(CRDS, &costly).await;
    assert_status(&r, 422, "Invalid");
    assert!(text(&r).contains("cost"), "{}", text(&r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_needing_a_conversion_webhook_answer_a_clear_error() {
    let s = TestServer::start();
    let h = s.http();
    let mut crd = widget_crd();
    crd["spec"]["conversion"] = json!({
        "strategy": "Webhook",
        "webhook": {"clientConfig": {"url": "https://converter.example.com/convert"},
                    "conversionReviewVersions": ["v1"]}
    });
    install(&h, &crd, WIDGETS).await;
    let r = h.post_json(WIDGETS, &widget("a", json!({}))).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    // The storage version needs no conversion; the other answers why it cannot be served.
    let r = h
        .get("/apis/example.com/v1beta1/namespaces/default/widgets/a")
        .await;
    assert_status(&r, 503, "ServiceUnavailable");
    assert!(
        text(&r).contains("webhook conversion is not supported"),
        "{}",
        text(&r)
    );
    assert_eq!(h.get(&format!("{WIDGETS}/a")).await.code(), 200);
}

/// The moment a client sees a CRD Established, every replica serves its type: on etcd the
/// test's reads go to one replica and its writes to the other, with no wait in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_established_crd_is_served_at_once_everywhere() {
    let s = TestServer::start();
    let h = s.http();
    for i in 0..5 {
        let plural = format!("things{i}");
        let mut crd = widget_crd();
        crd["metadata"]["name"] = json!(format!("{plural}.example.com"));
        crd["spec"]["names"] =
            json!({"plural": plural, "singular": format!("thing{i}"), "kind": format!("Thing{i}")});
        let r = h.post_json(CRDS, &crd).await;
        assert_eq!(r.code(), 201, "{}", text(&r));
        until("established", async || {
            let got = h.get(&format!("{CRDS}/{plural}.example.com")).await.json();
            condition(&got, "Established").is_some_and(|c| c["status"] == "True")
        })
        .await;
        // No polling from here on: the first discovery read and the first create succeed.
        let group = h.get("/apis/example.com/v1").await;
        assert_eq!(group.code(), 200, "{}", text(&group));
        assert!(
            text(&group).contains(&format!("\"{plural}\"")),
            "{}",
            text(&group)
        );
        let collection = format!("/apis/example.com/v1/namespaces/default/{plural}");
        let r = h
            .post_json(
                &collection,
                &json!({"apiVersion": "example.com/v1", "kind": format!("Thing{i}"),
                        "metadata": {"name": "first"}}),
            )
            .await;
        assert_eq!(r.code(), 201, "{}", text(&r));
    }
}

/// Schema defaults are part of decoding a custom resource: the writer owns them, and a list
/// map whose key a default completes is tracked item by item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaulted_fields_are_owned_by_their_writer() {
    let s = TestServer::start();
    let h = s.http();
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["endpoints"] = json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["port", "protocol"],
        "items": {"type": "object", "required": ["port"], "properties": {
            "port": {"type": "integer"},
            "protocol": {"type": "string", "default": "TCP"}
        }}
    });
    install(&h, &crd, WIDGETS).await;
    let r = h
        .post_json(
            &format!("{WIDGETS}?fieldManager=author"),
            &widget(
                "e",
                json!({"endpoints": [{"port": 8080}, {"port": 53, "protocol": "UDP"}]}),
            ),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let obj = r.json();
    assert_eq!(obj["spec"]["endpoints"][0]["protocol"], "TCP");
    let fields = obj["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].clone();
    let endpoints = fields["f:endpoints"]
        .as_object()
        .expect("endpoints tracked");
    assert!(
        endpoints.contains_key(r#"k:{"port":8080,"protocol":"TCP"}"#)
            && endpoints.contains_key(r#"k:{"port":53,"protocol":"UDP"}"#),
        "{fields}"
    );
    // The defaulted scalars are the writer's too.
    assert!(
        fields.get("f:replicas").is_some() && fields.get("f:mode").is_some(),
        "{fields}"
    );
}

/// The entry of `manager` in an object's managedFields.
fn managed_entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

/// An apply through `/scale` owns the replicas as an apply to the object would: changing
/// replicas another manager owns is a conflict unless forced, a forced apply takes them over,
/// and the object's managedFields name the new owner, at the object's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_through_scale_owns_the_replicas() {
    let s = TestServer::start();
    let h = s.http();
    install(&h, &widget_crd(), WIDGETS).await;
    let apply = async |path: &str, manager: &str, force: bool, body: Value| {
        h.send(
            "PATCH",
            &format!("{path}?fieldManager={manager}&force={force}"),
            Some(body.to_string().as_bytes()),
            &[("content-type", "application/apply-patch+yaml")],
        )
        .await
    };
    let item = format!("{WIDGETS}/s");
    let scale = format!("{item}/scale");
    let config = |replicas: i64| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s"},
               "spec": {"replicas": replicas, "mode": "fast"}})
    };
    let r = apply(&item, "owner", false, config(2)).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let scale_config = |replicas: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "s"},
               "spec": {"replicas": replicas}})
    };

    // The owner of spec.replicas is the owner of the Scale's spec.replicas.
    let r = apply(&scale, "scaler", false, scale_config(4)).await;
    assert_status(&r, 409, "Conflict");
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains(r#"conflict with "owner": .spec.replicas"#),
        "{message}"
    );
    assert_eq!(h.get(&item).await.json()["spec"]["replicas"], 2);
    // Applying the replicas it already has conflicts with nobody.
    let r = apply(&scale, "scaler", false, scale_config(2)).await;
    assert_eq!(r.code(), 200, "{}", text(&r));

    // Forced, the apply takes the replicas over.
    let r = apply(&scale, "scaler", true, scale_config(4)).await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    assert_eq!(r.json()["kind"], "Scale");
    assert_eq!(r.json()["spec"]["replicas"], 4);
    let obj = h.get(&item).await.json();
    assert_eq!(obj["spec"]["replicas"], 4);
    let owner = managed_entry(&obj, "owner").expect("owner's entry");
    assert_eq!(
        owner["fieldsV1"],
        json!({"f:spec": {"f:mode": {}}}),
        "{obj}"
    );
    let scaler = managed_entry(&obj, "scaler").expect("scaler's entry");
    assert_eq!(
        (
            &scaler["operation"],
            &scaler["apiVersion"],
            &scaler["subresource"],
            &scaler["fieldsV1"]
        ),
        (
            &json!("Apply"),
            &json!("example.com/v1"),
            &json!("scale"),
            &json!({"f:spec": {"f:replicas": {}}})
        ),
        "{obj}"
    );

    // Now the object's own applier conflicts with the Scale's.
    let r = apply(&item, "owner", false, config(2)).await;
    assert_status(&r, 409, "Conflict");
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains(r#"conflict with "scaler" with subresource "scale": .spec.replicas"#),
        "{message}"
    );

    // Any other write through /scale makes its manager the owner, taking the replicas from the
    // applier.
    let r = h
        .send(
            "PATCH",
            &format!("{scale}?fieldManager=hpa"),
            Some(br#"{"spec":{"replicas":6}}"#),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", text(&r));
    let obj = h.get(&item).await.json();
    let hpa = managed_entry(&obj, "hpa").expect("hpa's entry");
    assert_eq!(
        (&hpa["operation"], &hpa["subresource"], &hpa["fieldsV1"]),
        (
            &json!("Update"),
            &json!("scale"),
            &json!({"f:spec": {"f:replicas": {}}})
        ),
        "{obj}"
    );
    assert!(managed_entry(&obj, "scaler").is_none(), "{obj}");

    // An applied Scale of the wrong version is refused.
    let mut wrong = scale_config(1);
    wrong["apiVersion"] = json!("autoscaling/v2");
    let r = apply(&scale, "scaler", true, wrong).await;
    assert_status(&r, 400, "BadRequest");
}

/// Reads the CRD `name`, changes it with `edit` and writes it back, again when the CRD
/// controller's status write came in between.
async fn edit_crd(h: &Http, name: &str, edit: impl Fn(&mut Value)) {
    let path = format!("{CRDS}/{name}");
    for _ in 0..20 {
        let mut crd = h.get(&path).await.json();
        edit(&mut crd);
        let r = h.put_json(&path, &crd).await;
        if r.code() != 409 {
            assert_eq!(r.code(), 200, "{}", text(&r));
            return;
        }
    }
    panic!("{name}: every update conflicted");
}

/// A schema change changes how stored objects read, as in Kubernetes, where the custom
/// resource's storage is rebuilt: a default added later shows on objects written before it,
/// a field removed from the schema no longer does, from the cache too, and the type's open
/// watches end so that clients list again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_reads_stored_objects_anew() {
    let s = TestServer::start();
    let h = s.http();
    install(&h, &widget_crd(), WIDGETS).await;
    let r = h.post_json(WIDGETS, &widget("old", json!({}))).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    assert_eq!(
        h.get(&format!("{WIDGETS}/old")).await.json()["spec"]["replicas"],
        1
    );
    let list_rv = h.get(WIDGETS).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = s
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={list_rv}"))
        .await;

    // A change that leaves the schema alone keeps the cache and the watch.
    edit_crd(&h, "widgets.example.com", |crd| {
        crd["spec"]["names"]["shortNames"] = json!(["wd", "wdg"]);
    })
    .await;
    let r = h.post_json(WIDGETS, &widget("during", json!({}))).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let added = watch.next_change().await;
    assert_eq!(added["object"]["metadata"]["name"], "during", "{added}");

    // A new field with a default, and a field (stored with its default) gone from the schema.
    edit_crd(&h, "widgets.example.com", |crd| {
        let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"];
        spec["tier"] = json!({"type": "string", "default": "gold"});
        spec.as_object_mut().unwrap().remove("mode");
    })
    .await;
    until("stored objects read with the new schema", async || {
        let old = h.get(&format!("{WIDGETS}/old")).await.json();
        old["spec"]["tier"] == "gold" && old["spec"].get("mode").is_none()
    })
    .await;
    let list = h.get(WIDGETS).await.json();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    assert!(
        items
            .iter()
            .all(|i| i["spec"]["tier"] == "gold" && i["spec"].get("mode").is_none()),
        "{list}"
    );
    // The watch opened before the change has ended (past any events it still had).
    loop {
        match watch.next_within(Duration::from_secs(10)).await {
            Next::End => break,
            Next::Event(e) => assert_ne!(e["type"], "ERROR", "{e}"),
            Next::Idle => panic!("the watch did not end with the schema change"),
        }
    }
    // Watching again from the list works, and sees what comes next with the default.
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let mut watch = s
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;
    let r = h.post_json(WIDGETS, &widget("new", json!({}))).await;
    assert_eq!(r.code(), 201, "{}", text(&r));
    let added = watch.next_change().await;
    assert_eq!(added["object"]["metadata"]["name"], "new", "{added}");
    assert_eq!(added["object"]["spec"]["tier"], "gold", "{added}");
}
