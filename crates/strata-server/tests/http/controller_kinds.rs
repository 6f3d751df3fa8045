//! The kinds controllers need beside ConfigMaps: Secret and Event (core/v1, and the same
//! objects at events.k8s.io/v1) and Lease (coordination.k8s.io/v1), over HTTP: create, read,
//! update, patch and delete, Kubernetes' validation with its 422 causes, Secrets' `stringData`
//! merge and immutability, MicroTimes, their Table columns, protobuf bodies both ways (checked
//! with the independent k8s-pb build), and kubectl 1.31 and 1.37 (`create secret generic`,
//! `get secrets|leases|events`, `events`) over TLS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::events::v1 as events;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{json, Value};

use crate::common::{assert_status, run_with_timeout, Reply, TestServer};

const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const EVENTS: &str = "/api/v1/namespaces/default/events";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
const EVENTS_V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn body(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

async fn created(s: &TestServer, path: &str, object: Value) -> Value {
    let r = s.post_json(path, &object).await;
    assert_eq!(r.code(), 201, "POST {path}: {}", body(&r));
    r.json()
}

/// Asserts a 422 whose causes are exactly these (reason, field, message) triples, in order.
fn assert_causes(r: &Reply, kind: &str, causes: &[(&str, &str, &str)]) {
    assert_status(r, 422, "Invalid");
    let v = r.json();
    assert_eq!(v["details"]["kind"], kind, "{v}");
    let got: Vec<(String, String, String)> = v["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes: {v}"))
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("reason"), s("field"), s("message"))
        })
        .collect();
    let want: Vec<(String, String, String)> = causes
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want, "{v}");
}

#[tokio::test]
async fn secrets_merge_string_data_check_types_and_stay_immutable() {
    let s = TestServer::start();
    // stringData is merged into data (winning over data's entry) and never stored or returned;
    // the type defaults to Opaque.
    let secret = created(
        &s,
        SECRETS,
        json!({"metadata": {"name": "creds"}, "data": {"user": "YWRtaW4=", "pass": "b2xk"},
               "stringData": {"pass": "s3cret", "extra": "x"}}),
    )
    .await;
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["data"],
        json!({"user": "YWRtaW4=", "pass": "czNjcmV0", "extra": "eA=="})
    );
    assert!(secret.get("stringData").is_none(), "{secret}");
    let read = s.get(&format!("{SECRETS}/creds")).await.json();
    assert_eq!(read["data"], secret["data"]);
    assert!(read.get("stringData").is_none(), "{read}");

    // Updates and patches merge stringData too.
    let mut update = read.clone();
    update["stringData"] = json!({"user": "root"});
    let r = s.put_json(&format!("{SECRETS}/creds"), &update).await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(r.json()["data"]["user"], "cm9vdA==");
    let r = s
        .patch_merge(
            &format!("{SECRETS}/creds"),
            &json!({"stringData": {"token": "t"}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    let patched = r.json();
    assert_eq!(patched["data"]["token"], "dA==");
    assert_eq!(patched["data"]["user"], "cm9vdA==");
    assert!(patched.get("stringData").is_none(), "{patched}");

    // The type cannot change (a type of the user's own: no keys of its own are required).
    let r = s
        .patch_merge(
            &format!("{SECRETS}/creds"),
            &json!({"type": "example.com/credentials"}),
        )
        .await;
    assert_causes(
        &r,
        "Secret",
        &[(
            "FieldValueInvalid",
            "type",
            "Invalid value: \"example.com/credentials\": field is immutable",
        )],
    );

    // Known types need their keys; keys follow ConfigMap's rule.
    let r = s
        .post_json(
            SECRETS,
            &json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
                    "data": {"tls.crt": "Y2VydA==", "a/b": ""}}),
        )
        .await;
    assert_causes(
        &r,
        "Secret",
        &[
            (
                "FieldValueInvalid",
                "data[a/b]",
                "Invalid value: \"a/b\": a valid config key must consist of alphanumeric \
                 characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', \
                 regex used for validation is '[-._a-zA-Z0-9]+')",
            ),
            ("FieldValueRequired", "data[tls.key]", "Required value"),
        ],
    );
    let r = s
        .post_json(
            SECRETS,
            &json!({"metadata": {"name": "token"},
                    "type": "kubernetes.io/service-account-token"}),
        )
        .await;
    assert_causes(
        &r,
        "Secret",
        &[(
            "FieldValueRequired",
            "metadata.annotations[kubernetes.io/service-account.name]",
            "Required value",
        )],
    );
    let r = s
        .post_json(
            SECRETS,
            &json!({"metadata": {"name": "ssh"}, "type": "kubernetes.io/ssh-auth",
                    "stringData": {"ssh-privatekey": ""}}),
        )
        .await;
    assert_causes(
        &r,
        "Secret",
        &[(
            "FieldValueRequired",
            "data[ssh-privatekey]",
            "Required value",
        )],
    );
    let r = s
        .post_json(
            SECRETS,
            &json!({"metadata": {"name": "docker"}, "type": "kubernetes.io/dockerconfigjson",
                    "stringData": {".dockerconfigjson": "{\"auths\": {}}"}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", body(&r));
    // At most 1 MiB of values.
    let r = s
        .post_json(
            SECRETS,
            &json!({"metadata": {"name": "big"},
                    "stringData": {"a": "x".repeat(1024 * 1024), "b": "y"}}),
        )
        .await;
    assert_causes(
        &r,
        "Secret",
        &[(
            "FieldValueTooLong",
            "data",
            "Too long: must have at most 1048576 bytes",
        )],
    );

    // Once immutable, data and immutable are fixed; metadata still changes.
    created(
        &s,
        SECRETS,
        json!({"metadata": {"name": "frozen"}, "immutable": true, "stringData": {"k": "v"}}),
    )
    .await;
    let frozen = format!("{SECRETS}/frozen");
    let r = s
        .patch_merge(&frozen, &json!({"stringData": {"k": "w"}}))
        .await;
    assert_causes(
        &r,
        "Secret",
        &[(
            "FieldValueForbidden",
            "data",
            "Forbidden: field is immutable when `immutable` is set",
        )],
    );
    assert_eq!(
        r.json()["message"],
        "Secret \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let r = s.patch_merge(&frozen, &json!({"immutable": false})).await;
    assert_causes(
        &r,
        "Secret",
        &[(
            "FieldValueForbidden",
            "immutable",
            "Forbidden: field is immutable when `immutable` is set",
        )],
    );
    let r = s
        .patch_merge(&frozen, &json!({"metadata": {"labels": {"a": "b"}}}))
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(r.json()["data"]["k"], "dg==");

    // Listing and deleting.
    let list = s.get(SECRETS).await.json();
    assert_eq!(list["kind"], "SecretList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["creds", "docker", "frozen"]);
    // Secrets select by type, as Kubernetes' field labels allow.
    let r = s
        .get(&format!(
            "{SECRETS}?fieldSelector=type%3Dkubernetes.io/dockerconfigjson"
        ))
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    let items = r.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "docker");
    let r = s.delete(&frozen).await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(s.get(&frozen).await.code(), 404);

    // Discovery.
    let v1 = s.get("/api/v1").await.json();
    let secrets = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "secrets")
        .unwrap_or_else(|| panic!("no secrets in {v1}"));
    assert_eq!(secrets["kind"], "Secret");
    assert_eq!(secrets["namespaced"], true);
}

#[tokio::test]
async fn leases_keep_micro_times_and_validate_their_spec() {
    let s = TestServer::start();
    let lease = created(
        &s,
        LEASES,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "leader"},
               "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15,
                        "acquireTime": "2025-01-01T00:00:00Z",
                        "renewTime": "2025-01-01T02:00:01.25+02:00", "leaseTransitions": 0,
                        "preferredHolder": "gated"}}),
    )
    .await;
    assert_eq!(lease["apiVersion"], "coordination.k8s.io/v1");
    // MicroTimes are written as Kubernetes writes them; the gated field is not kept.
    assert_eq!(
        lease["spec"],
        json!({"holderIdentity": "replica-a", "leaseDurationSeconds": 15,
               "acquireTime": "2025-01-01T00:00:00.000000Z",
               "renewTime": "2025-01-01T00:00:01.250000Z", "leaseTransitions": 0})
    );
    // Renewing and taking over, as leader election does.
    let mut renewed = lease.clone();
    renewed["spec"]["holderIdentity"] = json!("replica-b");
    renewed["spec"]["leaseTransitions"] = json!(1);
    renewed["spec"]["renewTime"] = json!("2025-01-01T00:00:10.123456Z");
    let r = s.put_json(&format!("{LEASES}/leader"), &renewed).await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(r.json()["spec"]["holderIdentity"], "replica-b");
    // A stale update conflicts (the lock's safety).
    let r = s.put_json(&format!("{LEASES}/leader"), &lease).await;
    assert_status(&r, 409, "Conflict");

    let r = s
        .post_json(
            LEASES,
            &json!({"metadata": {"name": "bad"},
                    "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}}),
        )
        .await;
    assert_causes(
        &r,
        "Lease",
        &[
            (
                "FieldValueInvalid",
                "spec.leaseDurationSeconds",
                "Invalid value: 0: must be greater than 0",
            ),
            (
                "FieldValueInvalid",
                "spec.leaseTransitions",
                "Invalid value: -1: must to greater or equal than 0",
            ),
        ],
    );
    assert_eq!(r.json()["details"]["group"], "coordination.k8s.io");

    // Discovery: the group, its version and the resource.
    let v1 = s.get("/apis/coordination.k8s.io/v1").await.json();
    let leases = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "leases")
        .unwrap_or_else(|| panic!("no leases in {v1}"));
    assert_eq!(leases["kind"], "Lease");
    let groups = s.get("/apis").await.json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "coordination.k8s.io"),
        "{groups}"
    );
    let r = s.delete(&format!("{LEASES}/leader")).await;
    assert_eq!(r.code(), 200, "{}", body(&r));
}

fn pod_event(name: &str) -> Value {
    json!({"metadata": {"name": name},
           "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-0",
                              "fieldPath": "spec.containers{web}"},
           "reason": "Pulled", "message": "  pulled the image\n", "type": "Normal",
           "source": {"component": "kubelet", "host": "node-1"},
           "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:05:00Z",
           "count": 4})
}

#[tokio::test]
async fn events_follow_kubernetes_validation() {
    let s = TestServer::start();
    let event = created(&s, EVENTS, pod_event("web-0.1")).await;
    assert_eq!(event["kind"], "Event");
    assert_eq!(event["count"], 4);
    // A newer recorder's event: eventTime and series are MicroTimes.
    let newer = created(
        &s,
        EVENTS,
        json!({"metadata": {"name": "web-0.2"},
               "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-0"},
               "reason": "Started", "action": "Starting", "type": "Normal",
               "eventTime": "2025-01-01T00:00:00.5Z",
               "series": {"count": 2, "lastObservedTime": "2025-01-01T00:01:00Z"},
               "reportingComponent": "example.com/controller", "reportingInstance": "pod-a"}),
    )
    .await;
    assert_eq!(newer["eventTime"], "2025-01-01T00:00:00.500000Z");
    assert_eq!(
        newer["series"]["lastObservedTime"],
        "2025-01-01T00:01:00.000000Z"
    );

    // Field selectors on the involved object and the reason.
    let r = s
        .get(&format!(
            "{EVENTS}?fieldSelector=involvedObject.name%3Dweb-0,reason%3DPulled"
        ))
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    let items = r.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "web-0.1");

    // The involved object's namespace must be the event's.
    let mut elsewhere = pod_event("web-0.3");
    elsewhere["involvedObject"]["namespace"] = json!("kube-system");
    let r = s.post_json(EVENTS, &elsewhere).await;
    assert_causes(
        &r,
        "Event",
        &[(
            "FieldValueInvalid",
            "involvedObject.namespace",
            "Invalid value: \"kube-system\": does not match event.namespace",
        )],
    );
    // An event with an eventTime names who reported it, and what was done.
    let r = s
        .post_json(
            EVENTS,
            &json!({"metadata": {"name": "web-0.4"},
                    "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-0"},
                    "eventTime": "2025-01-01T00:00:00.000000Z", "reportingInstance": "i"}),
        )
        .await;
    assert_causes(
        &r,
        "Event",
        &[
            ("FieldValueRequired", "reportingComponent", "Required value"),
            (
                "FieldValueInvalid",
                "reportingComponent",
                "Invalid value: \"\": name part must be non-empty",
            ),
            ("FieldValueRequired", "action", "Required value"),
            ("FieldValueRequired", "reason", "Required value"),
        ],
    );

    // Recorders bump the count with a patch.
    let r = s
        .patch_merge(
            &format!("{EVENTS}/web-0.1"),
            &json!({"count": 5, "lastTimestamp": "2025-01-01T00:06:00Z"}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(r.json()["count"], 5);
    let v1 = s.get("/api/v1").await.json();
    let events = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "events")
        .unwrap_or_else(|| panic!("no events in {v1}"));
    assert_eq!(events["shortNames"], json!(["ev"]));
}

/// A recorder's event as events.k8s.io/v1 writes it.
fn v1_event(name: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
           "regarding": {"kind": "Pod", "namespace": "default", "name": "web-0"},
           "note": "scaled up", "reason": "Scaled", "action": "Scaling", "type": "Normal",
           "eventTime": "2025-01-01T00:00:00.25Z",
           "reportingController": "example.com/scaler", "reportingInstance": "scaler-0"})
}

#[tokio::test]
async fn events_k8s_io_serves_the_same_objects_converted() {
    let s = TestServer::start();
    // Watch both groups from the start.
    let mut core_watch = s.watch(&format!("{EVENTS}?watch=1")).await;
    let mut v1_watch = s.watch(&format!("{EVENTS_V1}?watch=1")).await;

    // Written through events.k8s.io, read through both.
    let made = created(&s, EVENTS_V1, v1_event("scale.1")).await;
    assert_eq!(made["apiVersion"], "events.k8s.io/v1");
    assert_eq!(made["regarding"]["name"], "web-0");
    assert_eq!(made["note"], "scaled up");
    assert_eq!(made["eventTime"], "2025-01-01T00:00:00.250000Z");
    assert!(made.get("involvedObject").is_none(), "{made}");
    let core = s.get(&format!("{EVENTS}/scale.1")).await.json();
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"], made["regarding"]);
    assert_eq!(core["message"], "scaled up");
    assert_eq!(core["reportingComponent"], "example.com/scaler");
    assert!(
        core.get("regarding").is_none() && core.get("note").is_none(),
        "{core}"
    );
    assert_eq!(
        core["metadata"]["resourceVersion"],
        made["metadata"]["resourceVersion"]
    );

    // Written through the core group, read through events.k8s.io.
    created(&s, EVENTS, pod_event("web-0.1")).await;
    let v1 = s.get(&format!("{EVENTS_V1}/web-0.1")).await.json();
    assert_eq!(v1["kind"], "Event");
    assert_eq!(v1["apiVersion"], "events.k8s.io/v1");
    assert_eq!(v1["regarding"]["fieldPath"], "spec.containers{web}");
    assert_eq!(v1["deprecatedCount"], 4);
    assert_eq!(v1["deprecatedSource"]["component"], "kubelet");
    assert_eq!(v1["deprecatedFirstTimestamp"], "2025-01-01T00:00:00Z");
    assert_eq!(v1["deprecatedLastTimestamp"], "2025-01-01T00:05:00Z");

    // Each watch sees both, in its own group's form.
    for (watch, regarding, api_version) in [
        (&mut core_watch, "involvedObject", "v1"),
        (&mut v1_watch, "regarding", "events.k8s.io/v1"),
    ] {
        for name in ["scale.1", "web-0.1"] {
            let e = watch.next_change().await;
            assert_eq!(e["type"], "ADDED", "{e}");
            assert_eq!(e["object"]["metadata"]["name"], name, "{e}");
            assert_eq!(e["object"]["apiVersion"], api_version, "{e}");
            assert!(e["object"][regarding].is_object(), "{e}");
        }
    }

    // Lists, field selectors and Tables per group.
    let list = s.get(EVENTS_V1).await.json();
    assert_eq!(list["kind"], "EventList");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2), "{list}");
    let r = s
        .get(&format!(
            "{EVENTS_V1}?fieldSelector=reportingController%3Dexample.com/scaler"
        ))
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    let items = r.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "scale.1");
    let t = table(&s, &format!("{EVENTS_V1}/web-0.1")).await;
    let cells = only_row(&t);
    assert_eq!(
        cells[3..7],
        [
            json!("pod/web-0"),
            json!("spec.containers{web}"),
            json!("kubelet, node-1"),
            json!("pulled the image")
        ]
    );

    // events.k8s.io's own rules: an eventTime, a known type, no deprecated fields, a series
    // of at least two.
    let r = s
        .post_json(
            EVENTS_V1,
            &json!({"metadata": {"name": "bad"}, "type": "Bogus", "deprecatedCount": 5,
                    "regarding": {"kind": "Pod", "namespace": "default", "name": "web-0"}}),
        )
        .await;
    assert_causes(
        &r,
        "Event",
        &[
            ("FieldValueRequired", "eventTime", "Required value"),
            (
                "FieldValueInvalid",
                "type",
                "Invalid value: \"\": has invalid value: Bogus",
            ),
            (
                "FieldValueInvalid",
                "deprecatedCount",
                "Invalid value: \"\": needs to be unset",
            ),
        ],
    );
    assert_eq!(r.json()["details"]["group"], "events.k8s.io");
    let mut series = v1_event("series");
    series["series"] = json!({"count": 1, "lastObservedTime": "2025-01-01T00:00:01Z"});
    let r = s.post_json(EVENTS_V1, &series).await;
    assert_causes(
        &r,
        "Event",
        &[(
            "FieldValueInvalid",
            "series.count",
            "Invalid value: \"\": should be at least 2",
        )],
    );
    // What an event says cannot change; its series can.
    let r = s
        .patch_merge(&format!("{EVENTS_V1}/scale.1"), &json!({"note": "other"}))
        .await;
    assert_causes(
        &r,
        "Event",
        &[(
            "FieldValueInvalid",
            "note",
            "Invalid value: \"other\": field is immutable",
        )],
    );
    let r = s
        .patch_merge(
            &format!("{EVENTS_V1}/scale.1"),
            &json!({"series": {"count": 2, "lastObservedTime": "2025-01-01T00:01:00Z"}}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(
        r.json()["series"]["lastObservedTime"],
        "2025-01-01T00:01:00.000000Z"
    );
    let core = s.get(&format!("{EVENTS}/scale.1")).await.json();
    assert_eq!(core["series"]["count"], 2);
    assert_eq!(core["apiVersion"], "v1");

    // Deleting through one group deletes it from both.
    let r = s.delete(&format!("{EVENTS_V1}/web-0.1")).await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    assert_eq!(s.get(&format!("{EVENTS}/web-0.1")).await.code(), 404);

    // Discovery lists the group.
    let v1 = s.get("/apis/events.k8s.io/v1").await.json();
    let events = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "events")
        .unwrap_or_else(|| panic!("no events in {v1}"));
    assert_eq!(events["kind"], "Event");
}

async fn table(s: &TestServer, path: &str) -> Value {
    let r = s.send("GET", path, None, &[("accept", TABLE)]).await;
    assert_eq!(r.code(), 200, "GET {path}: {}", body(&r));
    let t = r.json();
    assert_eq!(t["kind"], "Table", "{t}");
    t
}

/// The columns as (name, priority).
fn columns(t: &Value) -> Vec<(String, i64)> {
    t["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no columns: {t}"))
        .iter()
        .map(|c| {
            assert!(
                c["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{c}"
            );
            assert_eq!(c["type"], "string", "{c}");
            (
                c["name"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn cols(names: &[(&str, i64)]) -> Vec<(String, i64)> {
    names.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

/// The cells of the only row.
fn only_row(t: &Value) -> Vec<Value> {
    let rows = t["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{t}");
    rows[0]["cells"].as_array().unwrap().clone()
}

#[tokio::test]
async fn tables_have_kubernetes_columns() {
    let s = TestServer::start();
    created(
        &s,
        SECRETS,
        json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
               "stringData": {"tls.crt": "c", "tls.key": "k"}}),
    )
    .await;
    let t = table(&s, SECRETS).await;
    assert_eq!(
        columns(&t),
        cols(&[("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)])
    );
    let cells = only_row(&t);
    assert_eq!(
        cells[..3],
        [json!("tls"), json!("kubernetes.io/tls"), json!(2)]
    );

    created(
        &s,
        LEASES,
        json!({"metadata": {"name": "held"}, "spec": {"holderIdentity": "replica-a"}}),
    )
    .await;
    let t = table(&s, &format!("{LEASES}/held")).await;
    assert_eq!(columns(&t), cols(&[("Name", 0), ("Holder", 0), ("Age", 0)]));
    assert_eq!(only_row(&t)[..2], [json!("held"), json!("replica-a")]);
    created(
        &s,
        LEASES,
        json!({"metadata": {"name": "free"}, "spec": {}}),
    )
    .await;
    // An unheld lease shows an empty holder, as Kubernetes prints it.
    assert_eq!(
        only_row(&table(&s, &format!("{LEASES}/free")).await)[1],
        json!("")
    );

    created(&s, EVENTS, pod_event("web-0.1")).await;
    let t = table(&s, EVENTS).await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Subobject", 1),
            ("Source", 1),
            ("Message", 0),
            ("First Seen", 1),
            ("Count", 1),
            ("Name", 1),
        ])
    );
    let cells = only_row(&t);
    // The timestamps are in the past: ages in days or years, never `<unknown>`.
    for age in [&cells[0], &cells[7]] {
        let text = age.as_str().unwrap();
        assert!(text.ends_with('d') || text.contains('y'), "{age}");
    }
    assert_eq!(
        cells[1..7],
        [
            json!("Normal"),
            json!("Pulled"),
            json!("pod/web-0"),
            json!("spec.containers{web}"),
            json!("kubelet, node-1"),
            json!("pulled the image"),
        ]
    );
    assert_eq!(cells[8..], [json!(4), json!("web-0.1")]);
    // A series gives the count; an event seen once counts 1.
    created(
        &s,
        "/api/v1/namespaces/kube-system/events",
        json!({"metadata": {"name": "once"}, "involvedObject": {"kind": "Node", "name": "n1"},
               "reason": "Ready", "action": "Check", "eventTime": "2025-01-01T00:00:00.000000Z",
               "reportingComponent": "node-controller", "reportingInstance": "cp-1"}),
    )
    .await;
    let cells = only_row(&table(&s, "/api/v1/namespaces/kube-system/events").await);
    assert_eq!(cells[3], "node/n1");
    assert_eq!(cells[5], "node-controller, cp-1");
    assert_eq!(cells[8], 1);
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let u = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(u.encode_to_vec());
    out
}

/// The message bytes of an enveloped answer of `kind`.
fn opened(r: &Reply, kind: &str) -> Vec<u8> {
    assert_eq!(r.header("content-type"), PROTOBUF, "{}", body(r));
    let rest = r.body.strip_prefix(b"k8s\0").expect("the k8s\\0 prefix");
    let u = Unknown::decode(rest).expect("an Unknown envelope");
    assert_eq!(
        u.type_meta.and_then(|t| t.kind).as_deref(),
        Some(kind),
        "{}",
        body(r)
    );
    u.raw.unwrap_or_default()
}

fn named(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    })
}

async fn post_protobuf(s: &TestServer, path: &str, bytes: Vec<u8>) -> Reply {
    let r = s
        .send(
            "POST",
            path,
            Some(&bytes),
            &[("content-type", PROTOBUF), ("accept", PROTOBUF)],
        )
        .await;
    assert_eq!(r.code(), 201, "POST {path}: {}", body(&r));
    r
}

async fn get_protobuf(s: &TestServer, path: &str) -> Reply {
    let r = s.send("GET", path, None, &[("accept", PROTOBUF)]).await;
    assert_eq!(r.code(), 200, "GET {path}: {}", body(&r));
    r
}

#[tokio::test]
async fn protobuf_round_trips_through_an_independent_build() {
    let s = TestServer::start();
    // Secret: raw bytes in protobuf, base64 in JSON; stringData merged on the way in.
    let secret = core::Secret {
        metadata: named("raw"),
        data: [("bin".to_string(), vec![0u8, 1, 2, 255])].into(),
        string_data: [("text".to_string(), "hello".to_string())].into(),
        ..Default::default()
    };
    let r = post_protobuf(
        &s,
        SECRETS,
        envelope("v1", "Secret", secret.encode_to_vec()),
    )
    .await;
    let back = core::Secret::decode(opened(&r, "Secret").as_slice()).unwrap();
    assert_eq!(back.data.get("bin"), Some(&vec![0u8, 1, 2, 255]));
    assert_eq!(back.data.get("text"), Some(&b"hello".to_vec()));
    assert!(back.string_data.is_empty());
    assert_eq!(back.r#type.as_deref(), Some("Opaque"));
    let json = s.get(&format!("{SECRETS}/raw")).await.json();
    assert_eq!(json["data"], json!({"bin": "AAEC/w==", "text": "aGVsbG8="}));
    let list = get_protobuf(&s, SECRETS).await;
    let list = core::SecretList::decode(opened(&list, "SecretList").as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].data.get("bin"), Some(&vec![0u8, 1, 2, 255]));

    // Lease: MicroTimes keep their microseconds both ways.
    let micro = |seconds: i64, nanos: i32| meta::MicroTime {
        seconds: Some(seconds),
        nanos: Some(nanos),
    };
    let lease = coordination::Lease {
        metadata: named("pb"),
        spec: Some(coordination::LeaseSpec {
            holder_identity: Some("replica-a".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(micro(1_735_689_600, 123_456_000)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    let r = post_protobuf(
        &s,
        LEASES,
        envelope("coordination.k8s.io/v1", "Lease", lease.encode_to_vec()),
    )
    .await;
    let back = coordination::Lease::decode(opened(&r, "Lease").as_slice()).unwrap();
    let spec = back.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));
    let renew = spec.renew_time.unwrap_or_default();
    assert_eq!(
        (renew.seconds, renew.nanos),
        (Some(1_735_689_600), Some(123_456_000))
    );
    let json = s.get(&format!("{LEASES}/pb")).await.json();
    assert_eq!(json["spec"]["renewTime"], "2025-01-01T00:00:00.123456Z");
    let list = get_protobuf(&s, LEASES).await;
    let list = coordination::LeaseList::decode(opened(&list, "LeaseList").as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);

    // Event: Times, MicroTimes, nested messages.
    let event = core::Event {
        metadata: named("pb.1"),
        involved_object: Some(core::ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("default".into()),
            name: Some("web-0".into()),
            ..Default::default()
        }),
        reason: Some("Pulled".into()),
        message: Some("pulled".into()),
        source: Some(core::EventSource {
            component: Some("kubelet".into()),
            host: Some("node-1".into()),
        }),
        first_timestamp: Some(meta::Time {
            seconds: Some(1_735_689_600),
            nanos: None,
        }),
        count: Some(2),
        r#type: Some("Normal".into()),
        event_time: Some(micro(1_735_689_600, 500_000_000)),
        series: Some(core::EventSeries {
            count: Some(2),
            last_observed_time: Some(micro(1_735_689_660, 1_000)),
        }),
        action: Some("Pulling".into()),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some("node-1".into()),
        ..Default::default()
    };
    let r = post_protobuf(&s, EVENTS, envelope("v1", "Event", event.encode_to_vec())).await;
    let back = core::Event::decode(opened(&r, "Event").as_slice()).unwrap();
    assert_eq!(back.involved_object, event.involved_object);
    assert_eq!(back.source, event.source);
    assert_eq!(back.event_time, event.event_time);
    assert_eq!(back.series, event.series);
    assert_eq!(back.count, Some(2));
    assert_eq!(
        back.first_timestamp.and_then(|t| t.seconds),
        Some(1_735_689_600)
    );
    let json = s.get(&format!("{EVENTS}/pb.1")).await.json();
    assert_eq!(json["eventTime"], "2025-01-01T00:00:00.500000Z");
    assert_eq!(
        json["series"]["lastObservedTime"],
        "2025-01-01T00:01:00.000001Z"
    );
    assert_eq!(json["firstTimestamp"], "2025-01-01T00:00:00Z");
    let list = get_protobuf(&s, EVENTS).await;
    let list = core::EventList::decode(opened(&list, "EventList").as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);

    // The same event through events.k8s.io/v1, in that group's message.
    let r = get_protobuf(&s, &format!("{EVENTS_V1}/pb.1")).await;
    let v1 = events::Event::decode(opened(&r, "Event").as_slice()).unwrap();
    assert_eq!(v1.regarding, event.involved_object);
    assert_eq!(v1.note.as_deref(), Some("pulled"));
    assert_eq!(v1.deprecated_count, Some(2));
    assert_eq!(v1.deprecated_source, event.source);
    assert_eq!(v1.event_time, event.event_time);
    assert_eq!(v1.reporting_controller.as_deref(), Some("kubelet"));
    let recorded = events::Event {
        metadata: named("pb.2"),
        event_time: Some(micro(1_735_689_600, 250_000_000)),
        reporting_controller: Some("example.com/scaler".into()),
        reporting_instance: Some("scaler-0".into()),
        action: Some("Scaling".into()),
        reason: Some("Scaled".into()),
        regarding: event.involved_object.clone(),
        note: Some("scaled up".into()),
        r#type: Some("Normal".into()),
        ..Default::default()
    };
    let r = post_protobuf(
        &s,
        EVENTS_V1,
        envelope("events.k8s.io/v1", "Event", recorded.encode_to_vec()),
    )
    .await;
    let back = events::Event::decode(opened(&r, "Event").as_slice()).unwrap();
    assert_eq!(back.note.as_deref(), Some("scaled up"));
    assert_eq!(back.event_time, recorded.event_time);
    let core = s.get(&format!("{EVENTS}/pb.2")).await.json();
    assert_eq!(core["message"], "scaled up");
    assert_eq!(core["eventTime"], "2025-01-01T00:00:00.250000Z");
    let list = get_protobuf(&s, EVENTS_V1).await;
    let list = events::EventList::decode(opened(&list, "EventList").as_slice()).unwrap();
    assert_eq!(list.items.len(), 2);
}

/// A custom resource's Scale is served and taken as protobuf, with Kubernetes' autoscaling/v1
/// field numbers (checked with an independent build of them).
#[tokio::test]
async fn a_scale_is_served_and_taken_as_protobuf() {
    use k8s_pb::api::autoscaling::v1 as autoscaling;
    let s = TestServer::start();
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    crate::crds::install(&s.http(), &crate::crds::widget_crd(), widgets).await;
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "w"}, "spec": {"replicas": 2}});
    created(&s, widgets, widget).await;
    let scale_path = format!("{widgets}/w/scale");

    let r = get_protobuf(&s, &scale_path).await;
    let scale = autoscaling::Scale::decode(opened(&r, "Scale").as_slice()).unwrap();
    assert_eq!(scale.metadata.and_then(|m| m.name).as_deref(), Some("w"));
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(scale.status.and_then(|s| s.replicas), Some(0));

    let put = autoscaling::Scale {
        metadata: named("w"),
        spec: Some(autoscaling::ScaleSpec { replicas: Some(5) }),
        ..Default::default()
    };
    let r = s
        .send(
            "PUT",
            &scale_path,
            Some(&envelope("autoscaling/v1", "Scale", put.encode_to_vec())),
            &[("content-type", PROTOBUF), ("accept", PROTOBUF)],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body(&r));
    let scale = autoscaling::Scale::decode(opened(&r, "Scale").as_slice()).unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(5));
    let r = s.send("GET", &format!("{widgets}/w"), None, &[]).await;
    assert_eq!(r.json()["spec"]["replicas"], 5, "{}", body(&r));
}

// ---------------------------------------------------------------------------------------------
// kubectl against a TLS server with its admin kubeconfig.

fn find_kubectl(name: &str) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Runs `bin` with `kubeconfig` and `args`, asserting success; returns stdout.
fn kubectl(bin: &Path, kubeconfig: &Path, home: &Path, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(home.join("cache"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home);
    let r = run_with_timeout(&mut cmd, home, Duration::from_secs(60));
    assert!(
        r.success(),
        "{} {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
        bin.display(),
        r.status,
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// The words of the line of `out` that starts with `first`.
fn words<'a>(out: &'a str, first: &str) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&first))
        .unwrap_or_else(|| panic!("no line starting with {first}:\n{out}"))
}

const MANIFESTS: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: controller-leader
  namespace: team
spec:
  holderIdentity: pod-a_1234
  leaseDurationSeconds: 15
  renewTime: \"2025-01-01T00:00:00.000000Z\"
---
apiVersion: v1
kind: Event
metadata:
  name: robot.1
  namespace: team
involvedObject:
  kind: ServiceAccount
  namespace: team
  name: robot
reason: Created
message: created the account
type: Normal
source:
  component: tester
firstTimestamp: \"2025-01-01T00:00:00Z\"
lastTimestamp: \"2025-01-01T00:00:00Z\"
count: 1
";

fn kubectl_controller_kinds(binary: &str) {
    let Some(bin) = find_kubectl(binary) else {
        eprintln!(
            "\n!!!!!!!! SKIPPED: {binary} is not installed (run /work/shared/tools/install-clients.sh); \
             this kubectl test asserts nothing !!!!!!!!\n"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let _s = TestServer::start_tls_in(dir.path(), &[]);
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let home = tempfile::tempdir().expect("home dir");
    let k = |args: &[&str]| kubectl(&bin, &kubeconfig, home.path(), args);

    k(&["create", "namespace", "team"]);
    k(&[
        "create",
        "secret",
        "generic",
        "db",
        "-n",
        "team",
        "--from-literal=user=admin",
        "--from-literal=password=s3cret",
    ]);
    let manifests = home.path().join("kinds.yaml");
    std::fs::write(&manifests, MANIFESTS).expect("write manifests");
    k(&["create", "-f", manifests.to_str().expect("utf-8 path")]);

    let out = k(&["get", "secrets", "-n", "team"]);
    assert_eq!(
        words(&out, "NAME"),
        ["NAME", "TYPE", "DATA", "AGE"],
        "{out}"
    );
    assert_eq!(words(&out, "db")[1..3], ["Opaque", "2"], "{out}");
    let password = k(&[
        "get",
        "secret",
        "db",
        "-n",
        "team",
        "-o",
        "jsonpath={.data.password}",
    ]);
    assert_eq!(password, "czNjcmV0");

    let out = k(&["get", "leases", "-n", "team"]);
    assert_eq!(words(&out, "NAME"), ["NAME", "HOLDER", "AGE"], "{out}");
    assert_eq!(words(&out, "controller-leader")[1], "pod-a_1234", "{out}");

    let out = k(&["get", "events", "-n", "team"]);
    assert_eq!(
        words(&out, "LAST"),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    let row = out.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[1..],
        [
            "Normal",
            "Created",
            "serviceaccount/robot",
            "created",
            "the",
            "account"
        ],
        "{out}"
    );
    // `kubectl events` lists them with its own printer.
    let out = k(&["events", "-n", "team"]);
    assert_eq!(
        words(&out, "LAST"),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.contains("Created")
            && l.contains("robot")
            && l.contains("created the account")),
        "{out}"
    );
    let out = k(&["get", "events", "-n", "team", "-o", "wide"]);
    assert_eq!(
        words(&out, "LAST"),
        [
            "LAST",
            "SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "SUBOBJECT",
            "SOURCE",
            "MESSAGE",
            "FIRST",
            "SEEN",
            "COUNT",
            "NAME"
        ],
        "{out}"
    );
}

#[test]
fn kubectl_1_31_creates_and_lists_controller_kinds() {
    kubectl_controller_kinds("kubectl-1.31");
}

#[test]
fn kubectl_1_37_creates_and_lists_controller_kinds() {
    kubectl_controller_kinds("kubectl-1.37");
}
