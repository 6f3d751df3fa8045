//! The deletion lifecycle over HTTP against the real binary: finalizers and two-phase
//! deletion, DeleteOptions in every form, deletecollection, namespace termination (with its
//! sub-resources and a restart in the middle), and forced deletion of unreadable objects.

use std::time::Duration;

use crate::common::{
    assert_status, item_names, own_item_names, rv_of, sa_path, within, Http, TestServer,
};
use prost::Message;
use serde_json::{json, Value};

const NS: &str = "/api/v1/namespaces";

fn sa(ns: &str, name: &str) -> String {
    format!("{}/{name}", sa_path(ns))
}

fn ns_path(name: &str) -> String {
    format!("{NS}/{name}")
}

async fn create_held_sa(h: &Http, ns: &str, name: &str, finalizers: &[&str]) -> Value {
    let r = h
        .post_json(
            &sa_path(ns),
            &json!({"metadata": {"name": name, "finalizers": finalizers}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

#[tokio::test]
async fn finalizers_hold_an_object_until_the_last_one_is_removed() {
    let s = TestServer::start();
    let h = s.http();
    h.create_namespace("fin").await;
    let created = create_held_sa(&h, "fin", "held", &["example.com/a", "example.com/b"]).await;
    let mut watch = s
        .watch(&format!(
            "{}?watch=true&resourceVersion={}&fieldSelector=metadata.name%21%3Ddefault",
            sa_path("fin"),
            rv_of(&created)
        ))
        .await;

    // The first DELETE marks the object and answers with it.
    let first = h.delete(&sa("fin", "held")).await;
    assert_eq!(
        first.code(),
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let marked = first.json();
    assert_eq!(marked["kind"], "ServiceAccount");
    let stamp = marked["metadata"]["deletionTimestamp"].clone();
    assert!(stamp.is_string(), "{marked}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    let ev = watch.next_change().await;
    assert_eq!(ev["type"], "MODIFIED");
    assert_eq!(ev["object"]["metadata"]["deletionTimestamp"], stamp);

    // Still readable, listable and updatable.
    assert_eq!(
        h.get_ok(&sa("fin", "held")).await["metadata"]["uid"],
        created["metadata"]["uid"]
    );
    assert_eq!(own_item_names(&h.get_ok(&sa_path("fin")).await), ["held"]);
    let labelled = h
        .patch_merge(
            &sa("fin", "held"),
            &json!({"metadata": {"labels": {"k": "v"}}}),
        )
        .await;
    assert_eq!(labelled.code(), 200);
    assert_eq!(watch.next_change().await["type"], "MODIFIED");

    // A second DELETE changes nothing, not even the timestamp.
    std::thread::sleep(Duration::from_millis(1100));
    let second = h.delete(&sa("fin", "held")).await.json();
    assert_eq!(second["metadata"]["deletionTimestamp"], stamp);
    assert_eq!(rv_of(&second), rv_of(&labelled.json()));

    // No new finalizer once deletion started.
    let added = h
        .patch_merge(
            &sa("fin", "held"),
            &json!({"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}}),
        )
        .await;
    assert_status(&added, 422, "Invalid");
    assert!(
        added.json()["message"]
            .as_str()
            .unwrap()
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        added.json()
    );

    // Finalizers go in any order; the last one's removal removes the object.
    let one_left = h
        .patch_merge(
            &sa("fin", "held"),
            &json!({"metadata": {"finalizers": ["example.com/a"]}}),
        )
        .await;
    assert_eq!(one_left.code(), 200);
    assert_eq!(watch.next_change().await["type"], "MODIFIED");
    let gone = h
        .patch_merge(
            &sa("fin", "held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(gone.code(), 200, "{}", String::from_utf8_lossy(&gone.body));
    let ev = watch.next_change().await;
    assert_eq!(ev["type"], "DELETED");
    assert_eq!(ev["object"]["metadata"]["name"], "held");
    assert_status(&h.get(&sa("fin", "held")).await, 404, "NotFound");

    // The name is free at once.
    let again = h.create_sa("fin", "held", Value::Null).await;
    assert_ne!(again["metadata"]["uid"], created["metadata"]["uid"]);

    // Without finalizers the first DELETE removes the object and returns it.
    let r = h.delete(&sa("fin", "held")).await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.json()["metadata"]["uid"], again["metadata"]["uid"]);
    assert!(r.json()["metadata"]["deletionTimestamp"].is_null());
    assert_status(&h.get(&sa("fin", "held")).await, 404, "NotFound");
}

#[tokio::test]
async fn delete_options_from_body_or_query() {
    let s = TestServer::start();
    let h = s.http();
    h.create_namespace("opts").await;
    let x = h.create_sa("opts", "x", Value::Null).await;

    // Preconditions: a mismatch is 409 with Kubernetes' wording; nothing is deleted.
    let r = h
        .delete_json(
            &sa("opts", "x"),
            &json!({"preconditions": {"uid": "not-it"}}),
        )
        .await;
    assert_status(&r, 409, "Conflict");
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on ServiceAccount \"x\": the UID in the precondition (not-it) does not match the UID in record ({}). The object might have been deleted and then recreated",
            x["metadata"]["uid"].as_str().unwrap()
        )
    );
    let r = h
        .delete_json(
            &sa("opts", "x"),
            &json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": "1"}}),
        )
        .await;
    assert_status(&r, 409, "Conflict");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("the ResourceVersion in the precondition (1) does not match"));

    // Invalid options: 422 DeleteOptions.meta.k8s.io.
    for (body, needle) in [
        (
            json!({"propagationPolicy": "Sideways"}),
            "propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"",
        ),
        (
            json!({"propagationPolicy": "Orphan", "orphanDependents": true}),
            "orphanDependents and deletionPropagation cannot be both set",
        ),
        (
            json!({"dryRun": ["Some"]}),
            "dryRun: Unsupported value",
        ),
    ] {
        let r = h.delete_json(&sa("opts", "x"), &body).await;
        assert_status(&r, 422, "Invalid");
        let msg = r.json()["message"].as_str().unwrap().to_string();
        assert!(msg.starts_with("DeleteOptions.meta.k8s.io \"\" is invalid: "), "{msg}");
        assert!(msg.contains(needle), "{msg}");
    }
    let r = h
        .delete(&format!("{}?propagationPolicy=Sideways", sa("opts", "x")))
        .await;
    assert_status(&r, 422, "Invalid");
    // Malformed options: 400.
    for (query, body) in [
        ("?gracePeriodSeconds=soon", None),
        ("?orphanDependents=maybe", None),
        ("", Some(&b"{\"gracePeriodSeconds\": \"soon\"}"[..])),
        ("", Some(&b"{not json"[..])),
    ] {
        let r = h
            .send(
                "DELETE",
                &format!("{}{query}", sa("opts", "x")),
                body,
                &[("content-type", "application/json")],
            )
            .await;
        assert_status(&r, 400, "BadRequest");
    }
    let r = h
        .send(
            "DELETE",
            &sa("opts", "x"),
            Some(b"{}"),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");

    // Dry run, in the body and in the query: the answer is the object, nothing changes.
    for r in [
        h.delete_json(&sa("opts", "x"), &json!({"dryRun": ["All"]}))
            .await,
        h.delete(&format!("{}?dryRun=All", sa("opts", "x"))).await,
    ] {
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["metadata"]["name"], "x");
    }
    assert_eq!(rv_of(&h.get_ok(&sa("opts", "x")).await), rv_of(&x));

    // Every policy, grace period and matching preconditions: deleted.
    let r = h
        .delete_json(
            &sa("opts", "x"),
            &json!({
                "gracePeriodSeconds": 0,
                "propagationPolicy": "Foreground",
                "preconditions": {"uid": x["metadata"]["uid"], "resourceVersion": x["metadata"]["resourceVersion"]},
            }),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    assert_status(&h.get(&sa("opts", "x")).await, 404, "NotFound");
    for policy in ["Orphan", "Background"] {
        h.create_sa("opts", "y", Value::Null).await;
        let r = h
            .delete(&format!(
                "{}?propagationPolicy={policy}&gracePeriodSeconds=5",
                sa("opts", "y")
            ))
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        assert_status(&h.get(&sa("opts", "y")).await, 404, "NotFound");
    }

    // YAML and protobuf bodies carry the same options.
    let z = h.create_sa("opts", "z", Value::Null).await;
    let yaml = "kind: DeleteOptions\napiVersion: v1\npreconditions:\n  uid: wrong\n";
    let r = h
        .send(
            "DELETE",
            &sa("opts", "z"),
            Some(yaml.as_bytes()),
            &[("content-type", "application/yaml")],
        )
        .await;
    assert_status(&r, 409, "Conflict");
    let options = k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions {
        preconditions: Some(k8s_pb::apimachinery::pkg::apis::meta::v1::Preconditions {
            uid: Some(z["metadata"]["uid"].as_str().unwrap().to_string()),
            resource_version: None,
        }),
        dry_run: vec!["All".into()],
        ..Default::default()
    };
    let r = h
        .send(
            "DELETE",
            &sa("opts", "z"),
            Some(&envelope("DeleteOptions", &options.encode_to_vec())),
            &[("content-type", "application/vnd.kubernetes.protobuf")],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    h.get_ok(&sa("opts", "z")).await;

    // `orphanDependents: false` on an object that finalizers keep: 202.
    create_held_sa(&h, "opts", "held", &["example.com/x"]).await;
    let r = h
        .delete_json(&sa("opts", "held"), &json!({"orphanDependents": false}))
        .await;
    assert_eq!(r.code(), 202, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());
}

/// A protobuf envelope (`k8s\0` + Unknown) around `raw`.
fn envelope(kind: &str, raw: &[u8]) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("v1".into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw.to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selectors_pick_and_answers_a_status() {
    let s = TestServer::start();
    let h = s.http();
    h.create_namespace("coll").await;
    for i in 0..5 {
        h.create_sa("coll", &format!("app-{i}"), json!({"app": "demo"}))
            .await;
    }
    h.create_sa("coll", "other", json!({"app": "else"})).await;
    let held = h
        .post_json(
            &sa_path("coll"),
            &json!({"metadata": {"name": "app-held", "labels": {"app": "demo"}, "finalizers": ["example.com/x"]}}),
        )
        .await;
    assert_eq!(held.code(), 201);

    // Dry run: a success, and nothing changes.
    let r = h
        .delete(&format!(
            "{}?labelSelector=app%3Ddemo&dryRun=All",
            sa_path("coll")
        ))
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(own_item_names(&h.get_ok(&sa_path("coll")).await).len(), 7);

    let r = h
        .delete(&format!("{}?labelSelector=app%3Ddemo", sa_path("coll")))
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Success");
    let left = h.get_ok(&sa_path("coll")).await;
    assert_eq!(own_item_names(&left), ["app-held", "other"]);
    assert!(left["items"][0]["metadata"]["deletionTimestamp"].is_string());

    // A field selector picks by name.
    let r = h
        .delete(&format!(
            "{}?fieldSelector=metadata.name%3Dother",
            sa_path("coll")
        ))
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        own_item_names(&h.get_ok(&sa_path("coll")).await),
        ["app-held"]
    );

    // Namespaces have no deletecollection.
    assert_status(&h.delete(NS).await, 405, "MethodNotAllowed");
}

#[tokio::test]
async fn a_deleted_namespace_terminates_its_content_then_goes() {
    let s = TestServer::start();
    let h = s.http();
    h.create_namespace("doomed").await;
    h.create_sa("doomed", "plain", Value::Null).await;
    create_held_sa(&h, "doomed", "held", &["example.com/hold"]).await;
    let mut watch = s
        .watch(&format!(
            "{NS}?watch=true&fieldSelector=metadata.name%3Ddoomed"
        ))
        .await;
    assert_eq!(watch.next_change().await["type"], "ADDED");

    let r = h.delete(&ns_path("doomed")).await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let ns = r.json();
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));

    // Nothing new goes in.
    let r = h
        .post_json(&sa_path("doomed"), &json!({"metadata": {"name": "late"}}))
        .await;
    assert_status(&r, 403, "Forbidden");
    let body = r.json();
    assert_eq!(
        body["message"],
        "serviceaccounts \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "NamespaceTerminating"
    );
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.namespace");

    // The controller deletes what it can; the held object waits for its finalizer, and the
    // namespace reports it.
    h.wait_gone(&sa("doomed", "plain"), Duration::from_secs(20))
        .await;
    let conditions = within(Duration::from_secs(20), async {
        loop {
            let ns = h.get_ok(&ns_path("doomed")).await;
            let conditions = ns["status"]["conditions"].clone();
            let remaining = conditions
                .as_array()
                .and_then(|c| {
                    c.iter()
                        .find(|c| c["type"] == "NamespaceFinalizersRemaining")
                })
                .cloned();
            if let Some(c) = remaining {
                if c["status"] == "True" {
                    return conditions;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let types: Vec<&str> = conditions
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "NamespaceDeletionDiscoveryFailure",
            "NamespaceDeletionGroupVersionParsingFailure",
            "NamespaceDeletionContentFailure",
            "NamespaceContentRemaining",
            "NamespaceFinalizersRemaining"
        ]
    );
    assert_eq!(
        conditions[4]["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    assert!(h.get_ok(&sa("doomed", "held")).await["metadata"]["deletionTimestamp"].is_string());

    // The last finalizer goes: so does the object, then the namespace.
    let r = h
        .patch_merge(
            &sa("doomed", "held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code(), 200);
    h.wait_gone(&ns_path("doomed"), Duration::from_secs(20))
        .await;
    within(Duration::from_secs(20), async {
        loop {
            let ev = watch.next_change().await;
            if ev["type"] == "DELETED" {
                assert_eq!(ev["object"]["metadata"]["name"], "doomed");
                break;
            }
            assert_eq!(ev["type"], "MODIFIED");
        }
    })
    .await;
    // And the name can be used again.
    h.create_namespace("doomed").await;
}

#[tokio::test]
async fn namespace_status_and_finalize_subresources() {
    let s = TestServer::start();
    let h = s.http();
    let created = h.create_namespace("subs").await;
    let status = h.get_ok(&format!("{}/status", ns_path("subs"))).await;
    assert_eq!(status["kind"], "Namespace");
    assert_eq!(status["status"]["phase"], "Active");

    // The main resource cannot touch spec.finalizers or status.
    let mut body = created.clone();
    body["spec"]["finalizers"] = json!([]);
    body["status"] = json!({"phase": "Terminating"});
    body["metadata"]["resourceVersion"] = Value::Null;
    let r = h.put_json(&ns_path("subs"), &body).await.json();
    assert_eq!(r["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(r["status"]["phase"], "Active");

    // `status` changes the status only.
    let mut body = r.clone();
    body["spec"]["finalizers"] = json!([]);
    body["status"]["conditions"] =
        json!([{"type": "Custom", "status": "True", "reason": "Test", "message": "m"}]);
    let r = h
        .put_json(&format!("{}/status", ns_path("subs")), &body)
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let r = r.json();
    assert_eq!(r["status"]["conditions"][0]["type"], "Custom");
    assert_eq!(r["spec"]["finalizers"], json!(["kubernetes"]));
    let r = h
        .patch_merge(
            &format!("{}/status", ns_path("subs")),
            &json!({"status": {"conditions": null}, "spec": {"finalizers": []}}),
        )
        .await;
    assert_eq!(r.code(), 200);
    assert!(r.json()["status"]["conditions"].is_null());
    assert_eq!(r.json()["spec"]["finalizers"], json!(["kubernetes"]));

    // `finalize` changes spec.finalizers only, and is PUT only.
    let mut body = r.json();
    body["spec"]["finalizers"] = json!(["example.com/mine", "kubernetes"]);
    body["status"]["phase"] = json!("Terminating");
    let r = h
        .put_json(&format!("{}/finalize", ns_path("subs")), &body)
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["spec"]["finalizers"],
        json!(["example.com/mine", "kubernetes"])
    );
    assert_eq!(r.json()["status"]["phase"], "Active");
    assert_status(
        &h.patch_merge(&format!("{}/finalize", ns_path("subs")), &json!({}))
            .await,
        405,
        "MethodNotAllowed",
    );

    // Deleting it: the controller removes `kubernetes`, the other finalizer keeps it.
    assert_eq!(h.delete(&ns_path("subs")).await.code(), 200);
    let ns = within(Duration::from_secs(20), async {
        loop {
            let ns = h.get_ok(&ns_path("subs")).await;
            if ns["spec"]["finalizers"] == json!(["example.com/mine"]) {
                return ns;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(ns["status"]["phase"], "Terminating");
    // Whoever owns the other finalizer finalizes too: then it goes.
    let mut body = ns.clone();
    body["spec"]["finalizers"] = json!([]);
    let r = h
        .put_json(&format!("{}/finalize", ns_path("subs")), &body)
        .await;
    assert_eq!(r.code(), 200);
    assert_status(&h.get(&ns_path("subs")).await, 404, "NotFound");

    // The bootstrap namespaces cannot be deleted.
    for name in ["default", "kube-system", "kube-public"] {
        let r = h.delete(&ns_path(name)).await;
        assert_status(&r, 403, "Forbidden");
        assert_eq!(
            r.json()["message"],
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
    }
}

#[tokio::test]
async fn namespace_termination_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = TestServer::start_in(dir.path(), &[]);
    let h = s.http();
    h.create_namespace("resume").await;
    create_held_sa(&h, "resume", "held", &["example.com/hold"]).await;
    assert_eq!(h.delete(&ns_path("resume")).await.code(), 200);
    s.kill();

    // Content created while the server was down cannot exist, but the held object is still
    // there: releasing it after the restart must let the namespace go.
    let s = TestServer::start_in(dir.path(), &[]);
    let h = s.http();
    let ns = h.get_ok(&ns_path("resume")).await;
    assert_eq!(ns["status"]["phase"], "Terminating");
    let r = h
        .patch_merge(
            &sa("resume", "held"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.code(), 200);
    h.wait_gone(&ns_path("resume"), Duration::from_secs(20))
        .await;
}

#[tokio::test]
async fn a_namespace_with_a_thousand_service_accounts_terminates() {
    let s = TestServer::start();
    let h = s.http();
    h.create_namespace("big").await;
    let mut tasks = Vec::new();
    for worker in 0..16 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..1000).step_by(16) {
                h.create_sa("big", &format!("sa-{i:04}"), json!({"n": i.to_string()}))
                    .await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The thousand and the namespace's default ServiceAccount.
    h.wait_default_sa("big").await;
    let list = h.get_ok(&format!("{}?limit=1", sa_path("big"))).await;
    assert_eq!(list["metadata"]["remainingItemCount"], 1000);

    assert_eq!(h.delete(&ns_path("big")).await.code(), 200);
    h.wait_gone(&ns_path("big"), Duration::from_secs(120)).await;
    let all = h.get_ok("/api/v1/serviceaccounts").await;
    assert!(
        !item_names(&all).iter().any(|n| n.starts_with("sa-")),
        "left over: {all}"
    );
}

#[tokio::test]
async fn an_unreadable_object_can_be_forced_out_only_with_the_gate_and_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let gate = ["--feature-gates", "AllowUnsafeMalformedObjectDeletion=true"];
    let mut s = TestServer::start_in(dir.path(), &gate);
    let h = s.http();
    h.create_namespace("broken").await;
    create_held_sa(&h, "broken", "bad", &["example.com/hold"]).await;
    h.create_sa("broken", "good", Value::Null).await;
    assert!(s.terminate());
    match s.etcd() {
        None => corrupt(dir.path(), "/registry/serviceaccounts/broken/bad"),
        Some(etcd) => corrupt_in_etcd(etcd, "/registry/serviceaccounts/broken/bad").await,
    }

    // Without the gate the option is ignored: the object can be neither read nor deleted.
    let mut s = TestServer::start_in(dir.path(), &[]);
    let h = s.http();
    let r = h.get(&sa("broken", "bad")).await;
    assert_status(&r, 500, "InternalError");
    let msg = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("Internal error occurred: StorageError: corrupt object, Code: 7, Key: /registry/serviceaccounts/broken/bad"),
        "{msg}"
    );
    let r = h.get(&sa_path("broken")).await;
    assert_status(&r, 500, "InternalError");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("/registry/serviceaccounts/broken/bad"));
    assert_status(&h.delete(&sa("broken", "bad")).await, 500, "InternalError");
    let force = json!({"ignoreStoreReadErrorWithClusterBreakingPotential": true});
    assert_status(
        &h.delete_json(&sa("broken", "bad"), &force).await,
        500,
        "InternalError",
    );
    let r = h
        .delete_json(
            &sa("broken", "good"),
            &json!({"ignoreStoreReadErrorWithClusterBreakingPotential": true, "gracePeriodSeconds": 0}),
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    // Other objects are unaffected.
    h.get_ok(&sa("broken", "good")).await;
    assert!(s.terminate());

    let s = TestServer::start_in(dir.path(), &gate);
    let h = s.http();
    assert_status(&h.delete(&sa("broken", "bad")).await, 500, "InternalError");
    // The option excludes every other option: 400 naming each conflicting one (spec §7), for
    // an unreadable and a readable object alike, and nothing is removed.
    for name in ["bad", "good"] {
        let r = h
            .delete_json(
                &sa("broken", name),
                &json!({"ignoreStoreReadErrorWithClusterBreakingPotential": true, "dryRun": ["All"], "gracePeriodSeconds": 0, "preconditions": {"uid": "x"}, "propagationPolicy": "Background"}),
            )
            .await;
        assert_status(&r, 400, "BadRequest");
        let msg = r.json()["message"].as_str().unwrap().to_string();
        for field in [
            "dryRun",
            "gracePeriodSeconds",
            "preconditions",
            "propagationPolicy",
        ] {
            assert!(
                msg.contains(&format!(
                    "ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: cannot be set together with .{field}"
                )),
                "{msg}"
            );
        }
        let r = h
            .delete(&format!(
                "{}?orphanDependents=true&ignoreStoreReadErrorWithClusterBreakingPotential=true",
                sa("broken", name)
            ))
            .await;
        assert_status(&r, 400, "BadRequest");
        assert!(r.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("cannot be set together with .orphanDependents"));
    }
    h.get_ok(&sa("broken", "good")).await;
    // A readable object is refused.
    let r = h.delete_json(&sa("broken", "good"), &force).await;
    assert_status(&r, 422, "Invalid");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("is exclusively used to delete corrupt object(s)"));
    h.get_ok(&sa("broken", "good")).await;
    // deletecollection never forces.
    assert_status(
        &h.delete_json(&sa_path("broken"), &force).await,
        422,
        "Invalid",
    );

    // The forced delete: its finalizer is ignored, and it is gone.
    let r = h.delete_json(&sa("broken", "bad"), &force).await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Success");
    assert_eq!(status["details"]["name"], "bad");
    assert_status(&h.get(&sa("broken", "bad")).await, 404, "NotFound");
    assert_eq!(
        own_item_names(&h.get_ok(&sa_path("broken")).await),
        ["good"]
    );
    assert_status(
        &h.delete_json(&sa("broken", "bad"), &force).await,
        404,
        "NotFound",
    );
}

/// Overwrites a stored value in etcd with bytes that are not an object, straight through the
/// etcd engine (the key is the registry's, which is also the etcd key under `/registry`).
async fn corrupt_in_etcd(etcd: &strata_store_etcd::testing::TestEtcd, key: &str) {
    use strata_store::Store;
    let store = etcd.store("").await;
    let (kv, _) = store.get(key, None).await.expect("read the stored value");
    let kv = kv.unwrap_or_else(|| panic!("{key} is not in etcd"));
    store
        .update(
            key,
            bytes::Bytes::from_static(b"{\"metadata\": not json"),
            kv.mod_revision,
        )
        .await
        .expect("overwrite the stored value");
}

/// Overwrites a stored value with bytes that are not an object, through `strata debug put-raw`
/// on the stopped server's data directory.
fn corrupt(data_dir: &std::path::Path, key: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["debug", "put-raw", "--data-dir"])
        .arg(data_dir)
        .args([key, "{\"metadata\": not json"])
        .output()
        .expect("run strata debug put-raw");
    assert!(
        out.status.success(),
        "put-raw failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The object a delete answers with carries the deletion's resourceVersion, the one the DELETED
/// watch event carries, whether the delete removes it at once or its last finalizer goes.
#[tokio::test]
async fn a_deleted_object_answers_at_the_revision_of_its_deletion() {
    within(Duration::from_secs(60), async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("gone").await;
        let plain = h.create_sa("gone", "plain", Value::Null).await;
        let mut watch = crate::common::WatchStream::open(
            &s.addr,
            &format!(
                "{}?watch=1&resourceVersion={}&fieldSelector=metadata.name%21%3Ddefault",
                sa_path("gone"),
                rv_of(&plain)
            ),
            Default::default(),
        )
        .await;
        let r = h.delete(&format!("{}/plain", sa_path("gone"))).await;
        assert_eq!(r.code(), 200);
        let answered = r.json();
        let event = watch.next_event().await;
        assert_eq!(event["type"], "DELETED");
        assert_eq!(rv_of(&answered), rv_of(&event["object"]));
        assert!(rv_of(&answered) > rv_of(&plain));

        // Held by a finalizer: the update that removes it deletes, and answers alike.
        let held = create_held_sa(&h, "gone", "held", &["example.com/hold"]).await;
        let added = watch.next_event().await;
        assert_eq!(added["type"], "ADDED");
        let r = h.delete(&format!("{}/held", sa_path("gone"))).await;
        assert_eq!(r.code(), 200);
        let marked = watch.next_event().await;
        assert_eq!(marked["type"], "MODIFIED");
        let r = h
            .patch_merge(
                &format!("{}/held", sa_path("gone")),
                &json!({"metadata": {"finalizers": null}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let answered = r.json();
        let event = watch.next_event().await;
        assert_eq!(event["type"], "DELETED");
        assert_eq!(event["object"]["metadata"]["name"], "held");
        assert_eq!(rv_of(&answered), rv_of(&event["object"]));
        assert!(rv_of(&answered) > rv_of(&held));
    })
    .await;
}
