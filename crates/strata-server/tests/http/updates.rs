//! Updates over HTTP (spec §4.6, §4.7, §4.9): PUT with optimistic concurrency, the four patch
//! types, server-side apply with managedFields and conflicts, dry run, and field validation.

use std::time::Duration;

use crate::common::{assert_status, rv_of, sa_path, Reply, TestServer};
use serde_json::{json, Value};

const JSON_PATCH: &str = "application/json-patch+json";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

async fn create_sa(s: &TestServer, name: &str, extra: Value) -> Value {
    let mut body = json!({"metadata": {"name": name}});
    crate::common::merge(&mut body, &extra);
    let r = s.post_json(&sa_path("default"), &body).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn patch(s: &TestServer, path: &str, content_type: &str, body: &Value) -> Reply {
    s.http().send_json("PATCH", path, body, content_type).await
}

fn warnings(r: &Reply) -> Vec<String> {
    r.headers
        .get_all("warning")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_string(),
                        e["operation"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn put_is_optimistic_and_a_no_op_keeps_the_version() {
    let s = TestServer::start();
    let created = create_sa(&s, "p1", json!({"metadata": {"labels": {"a": "1"}}})).await;
    let path = format!("{}/p1", sa_path("default"));

    // A stale resourceVersion is 409 with Kubernetes' wording.
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let r = s.put_json(&path, &stale).await;
    assert_status(&r, 409, "Conflict");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("the object has been modified; please apply your changes to the latest version and try again"));

    // Without a resourceVersion the update is unconditional.
    let mut plain = json!({"metadata": {"name": "p1", "labels": {"a": "2"}}});
    let r = s.put_json(&path, &plain).await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let updated = r.json();
    assert!(rv_of(&updated) > rv_of(&created));
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(
        updated["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );

    // The same content again: no new resourceVersion.
    let r = s.put_json(&path, &updated).await;
    assert_eq!(r.code(), 200);
    assert_eq!(rv_of(&r.json()), rv_of(&updated));

    // The uid is immutable.
    plain["metadata"]["uid"] = json!("not-the-uid");
    let r = s.put_json(&path, &plain).await;
    assert_status(&r, 422, "Invalid");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("metadata.uid"));
}

#[tokio::test]
async fn json_patch_applies_all_or_nothing() {
    let s = TestServer::start();
    create_sa(
        &s,
        "j1",
        json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "secrets": [{"name": "s1"}]}),
    )
    .await;
    let path = format!("{}/j1", sa_path("default"));
    let ops = json!([
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "add", "path": "/metadata/labels/c", "value": "3"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "10"},
        {"op": "remove", "path": "/metadata/labels/b"},
        {"op": "copy", "from": "/metadata/labels/c", "path": "/metadata/labels/d"},
        {"op": "move", "from": "/metadata/labels/d", "path": "/metadata/labels/e"},
        {"op": "add", "path": "/secrets/-", "value": {"name": "s2"}}
    ]);
    let r = patch(&s, &path, JSON_PATCH, &ops).await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(
        v["metadata"]["labels"],
        json!({"a": "10", "c": "3", "e": "3"})
    );
    assert_eq!(v["secrets"], json!([{"name": "s1"}, {"name": "s2"}]));

    // A failing test fails the whole patch and changes nothing.
    let r = patch(
        &s,
        &path,
        JSON_PATCH,
        &json!([
            {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            {"op": "test", "path": "/metadata/labels/a", "value": "nope"}
        ]),
    )
    .await;
    assert_status(&r, 422, "Invalid");
    let got = s.get(&path).await.json();
    assert_eq!(got["metadata"]["labels"], v["metadata"]["labels"]);
    assert_eq!(rv_of(&got), rv_of(&v));

    // A path that does not exist.
    let r = patch(
        &s,
        &path,
        JSON_PATCH,
        &json!([{"op": "remove", "path": "/metadata/annotations/missing"}]),
    )
    .await;
    assert_status(&r, 422, "Invalid");

    // Not a patch document at all.
    let r = patch(&s, &path, JSON_PATCH, &json!({"op": "add"})).await;
    assert_status(&r, 400, "BadRequest");
    let r = s
        .send("PATCH", &path, Some(b"[{"), &[("content-type", JSON_PATCH)])
        .await;
    assert_status(&r, 400, "BadRequest");
}

/// A patch that turns the object into something its endpoint cannot hold (another kind, a
/// metadata field of the wrong type) is 422 on `patch`, showing the object it produced, and
/// changes nothing.
#[tokio::test]
async fn a_patch_that_leaves_no_object_of_the_kind_is_invalid() {
    let s = TestServer::start();
    let created = create_sa(&s, "pk", json!({"metadata": {"labels": {"a": "1"}}})).await;
    let path = format!("{}/pk", sa_path("default"));

    let cases = [
        (
            MERGE,
            json!({"kind": "Secret"}),
            "the kind in the data (Secret) does not match the expected kind",
        ),
        (
            JSON_PATCH,
            json!([{"op": "replace", "path": "/apiVersion", "value": "v2"}]),
            "does not match the expected API version (v1)",
        ),
        (
            MERGE,
            json!({"metadata": {"generateName": 5}}),
            "metadata.generateName: expected string",
        ),
    ];
    for (content_type, body, why) in cases {
        let r = patch(&s, &path, content_type, &body).await;
        assert_status(&r, 422, "Invalid");
        let st = r.json();
        let cause = &st["details"]["causes"][0];
        assert_eq!(cause["field"], "patch", "{st}");
        let message = cause["message"].as_str().unwrap_or_default();
        assert!(message.contains(why), "{message}");
        // The value shown (quoted) is the object the patch produced, labels and all.
        assert!(message.contains(r#"\"labels\":{\"a\":\"1\"}"#), "{message}");
    }
    let got = s.get(&path).await.json();
    assert_eq!(got["kind"], "ServiceAccount");
    assert_eq!(rv_of(&got), rv_of(&created));
}

#[tokio::test]
async fn merge_and_strategic_patches_follow_the_schema() {
    let s = TestServer::start();
    create_sa(
        &s,
        "m1",
        json!({
            "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x/one", "x/two"]},
            "secrets": [{"name": "s1"}, {"name": "s2"}],
            "imagePullSecrets": [{"name": "p1"}, {"name": "p2"}]
        }),
    )
    .await;
    let path = format!("{}/m1", sa_path("default"));

    // Merge patch: lists are replaced, null deletes.
    let r = patch(
        &s,
        &path,
        MERGE,
        &json!({"metadata": {"labels": {"b": null, "c": "3"}}, "secrets": [{"name": "s3"}]}),
    )
    .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    assert_eq!(v["secrets"], json!([{"name": "s3"}]));

    // Strategic: `secrets` merges on name, `imagePullSecrets` is replaced, finalizers merge.
    let r = patch(
        &s,
        &path,
        STRATEGIC,
        &json!({
            "metadata": {"finalizers": ["x/three"], "$deleteFromPrimitiveList/finalizers": ["x/one"]},
            "secrets": [{"name": "s4"}, {"name": "s3", "$patch": "delete"}],
            "imagePullSecrets": [{"name": "p3"}]
        }),
    )
    .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["secrets"], json!([{"name": "s4"}]));
    assert_eq!(v["imagePullSecrets"], json!([{"name": "p3"}]));
    // Elements the patch names come first, as Kubernetes orders a merged list.
    assert_eq!(v["metadata"]["finalizers"], json!(["x/three", "x/two"]));

    // `$patch: replace` on a merging list replaces it whole.
    let r = patch(
        &s,
        &path,
        STRATEGIC,
        &json!({"secrets": [{"name": "only"}, {"$patch": "replace"}]}),
    )
    .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["secrets"], json!([{"name": "only"}]));

    // A bad directive is the client's error, and a non-object merge patch is refused.
    let r = patch(
        &s,
        &path,
        STRATEGIC,
        &json!({"metadata": {"$patch": "explode"}}),
    )
    .await;
    assert!(matches!(r.code(), 400 | 422), "{}", r.code());
    let r = patch(&s, &path, MERGE, &json!([1, 2])).await;
    assert_status(&r, 400, "BadRequest");

    // A patch carrying a stale resourceVersion is a conflict.
    let r = patch(
        &s,
        &path,
        MERGE,
        &json!({"metadata": {"resourceVersion": "1", "labels": {"z": "z"}}}),
    )
    .await;
    assert_status(&r, 409, "Conflict");

    // Unknown patch types are 415; force belongs to apply only.
    let r = patch(&s, &path, "application/json", &json!({})).await;
    assert_status(&r, 415, "UnsupportedMediaType");
    let r = s
        .http()
        .send_json("PATCH", &format!("{path}?force=true"), &json!({}), MERGE)
        .await;
    assert_status(&r, 422, "Invalid");

    // Patching what does not exist is 404.
    let r = patch(
        &s,
        &format!("{}/absent", sa_path("default")),
        MERGE,
        &json!({}),
    )
    .await;
    assert_status(&r, 404, "NotFound");
}

#[tokio::test]
async fn updates_record_managed_fields() {
    let s = TestServer::start();
    let r = s
        .send(
            "POST",
            &format!("{}?fieldManager=creator", sa_path("default")),
            Some(br#"{"metadata":{"name":"mf","labels":{"app":"web"}},"secrets":[{"name":"s1"}]}"#),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let entry = &v["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "creator");
    assert_eq!(entry["operation"], "Update");
    assert_eq!(entry["apiVersion"], "v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].as_str().unwrap().ends_with('Z'));
    let fields = &entry["fieldsV1"];
    assert_eq!(fields["f:metadata"]["f:labels"]["f:app"], json!({}));
    assert!(
        fields["f:secrets"]["k:{\"name\":\"s1\"}"].is_object(),
        "{fields}"
    );

    // Without fieldManager the User-Agent names the manager, up to its first slash.
    let path = format!("{}/mf", sa_path("default"));
    let r = s
        .send(
            "PATCH",
            &path,
            Some(br#"{"metadata":{"labels":{"tier":"db"}}}"#),
            &[
                ("content-type", MERGE),
                ("user-agent", "my-controller/1.2 (linux)"),
            ],
        )
        .await;
    assert_eq!(r.code(), 200);
    let v = r.json();
    assert!(
        managers(&v).contains(&("my-controller".into(), "Update".into())),
        "{:?}",
        managers(&v)
    );

    // A manager name longer than 128 characters is refused.
    let long = "m".repeat(129);
    let r = s
        .http()
        .send_json(
            "PATCH",
            &format!("{path}?fieldManager={long}"),
            &json!({}),
            MERGE,
        )
        .await;
    assert_status(&r, 422, "Invalid");
}

#[tokio::test]
async fn server_side_apply_creates_merges_and_reports_conflicts() {
    let s = TestServer::start();
    let path = format!("{}/ssa", sa_path("default"));
    let config = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ssa\n  labels:\n    app: web\nsecrets:\n- name: s1\n";

    // fieldManager is required.
    let r = s
        .send(
            "PATCH",
            &path,
            Some(config.as_bytes()),
            &[("content-type", APPLY)],
        )
        .await;
    assert_status(&r, 422, "Invalid");

    // The first apply creates.
    let apply = |manager: &str, force: bool| {
        format!(
            "{path}?fieldManager={manager}{}",
            if force { "&force=true" } else { "" }
        )
    };
    let r = s
        .send(
            "PATCH",
            &apply("alice", false),
            Some(config.as_bytes()),
            &[("content-type", APPLY)],
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["metadata"]["labels"]["app"], "web");
    assert_eq!(
        managers(&v),
        vec![("alice".to_string(), "Apply".to_string())]
    );

    // Applying the same again is 200 and changes nothing.
    let r = s
        .send(
            "PATCH",
            &apply("alice", false),
            Some(config.as_bytes()),
            &[("content-type", APPLY)],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(rv_of(&r.json()), rv_of(&v));

    // Another manager setting a different value conflicts, naming the owner and the field.
    let bob = b"{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"ssa\",\"labels\":{\"app\":\"db\"}}}";
    let r = s
        .send(
            "PATCH",
            &apply("bob", false),
            Some(bob),
            &[("content-type", APPLY)],
        )
        .await;
    assert_status(&r, 409, "Conflict");
    let st = r.json();
    assert_eq!(
        st["message"],
        "Apply failed with 1 conflict: conflict with \"alice\": .metadata.labels.app"
    );
    assert_eq!(st["details"]["causes"][0]["reason"], "FieldManagerConflict");
    assert_eq!(st["details"]["causes"][0]["field"], ".metadata.labels.app");

    // Forced, bob takes the field.
    let r = s
        .send(
            "PATCH",
            &apply("bob", true),
            Some(bob),
            &[("content-type", APPLY)],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["labels"]["app"], "db");

    // Alice stops applying her secret: it goes, as no one else owns it.
    let r = s
        .send(
            "PATCH",
            &apply("alice", false),
            Some(b"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ssa\n"),
            &[("content-type", APPLY)],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert!(v.get("secrets").is_none_or(|s| s == &json!([])), "{v}");
    assert_eq!(v["metadata"]["labels"]["app"], "db");

    // The wrong apiVersion, and managedFields in the body, are refused.
    let r = s
        .send(
            "PATCH",
            &apply("alice", false),
            Some(b"apiVersion: v2\nkind: ServiceAccount\nmetadata:\n  name: ssa\n"),
            &[("content-type", APPLY)],
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    let r = s
        .send(
            "PATCH",
            &apply("alice", false),
            Some(b"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ssa\n  managedFields: []\n"),
            &[("content-type", APPLY)],
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    // A stale resourceVersion in the configuration is a precondition that fails.
    let r = s
        .send(
            "PATCH",
            &apply("alice", false),
            Some(b"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ssa\n  resourceVersion: \"1\"\n"),
            &[("content-type", APPLY)],
        )
        .await;
    assert_status(&r, 409, "Conflict");
}

#[tokio::test]
async fn dry_run_stores_nothing_and_emits_no_event() {
    let s = TestServer::start();
    let created = create_sa(&s, "d1", json!({})).await;
    let path = format!("{}/d1", sa_path("default"));
    let mut watch = s
        .watch(&format!(
            "{}?watch=true&resourceVersion={}",
            sa_path("default"),
            rv_of(&created)
        ))
        .await;

    let r = s
        .post_json(
            &format!("{}?dryRun=All", sa_path("default")),
            &json!({"metadata": {"name": "d2"}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["name"], "d2");
    assert_eq!(
        s.get(&format!("{}/d2", sa_path("default"))).await.code(),
        404
    );

    let r = s
        .http()
        .send_json(
            "PATCH",
            &format!("{path}?dryRun=All"),
            &json!({"metadata": {"labels": {"dry": "yes"}}}),
            MERGE,
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.json()["metadata"]["labels"]["dry"], "yes");
    let r = s
        .put_json(
            &format!("{path}?dryRun=All"),
            &json!({"metadata": {"name": "d1", "labels": {"dry": "put"}}}),
        )
        .await;
    assert_eq!(r.code(), 200);
    let r = s
        .send(
            "PATCH",
            &format!("{path}?dryRun=All&fieldManager=m"),
            Some(b"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: d1\n  labels:\n    dry: apply\n"),
            &[("content-type", APPLY)],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["metadata"]["labels"]["dry"], "apply");
    let r = s.delete(&format!("{path}?dryRun=All")).await;
    assert_eq!(r.code(), 200);

    let got = s.get(&path).await.json();
    assert_eq!(rv_of(&got), rv_of(&created));
    assert!(got["metadata"].get("labels").is_none());
    watch.expect_quiet(Duration::from_millis(500)).await;

    let r = s
        .post_json(
            &format!("{}?dryRun=Some", sa_path("default")),
            &json!({"metadata": {"name": "d3"}}),
        )
        .await;
    assert_status(&r, 422, "Invalid");
}

#[tokio::test]
async fn field_validation_levels() {
    let s = TestServer::start();
    let base = sa_path("default");
    let body = br#"{"metadata":{"name":"f1","name":"f1","bogus":1},"spec":{"x":1}}"#;
    let send = |level: &'static str, body: &'static [u8]| {
        let s = s.http();
        let path = if level.is_empty() {
            base.clone()
        } else {
            format!("{base}?fieldValidation={level}")
        };
        async move {
            s.send(
                "POST",
                &path,
                Some(body),
                &[("content-type", "application/json")],
            )
            .await
        }
    };

    // Strict: 400 naming every problem, nothing stored.
    let r = send("Strict", body).await;
    assert_status(&r, 400, "BadRequest");
    let msg = r.json()["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("ServiceAccount in version \"v1\" cannot be handled as a ServiceAccount: strict decoding error: "), "{msg}");
    for item in [
        "unknown field \"metadata.bogus\"",
        "unknown field \"spec\"",
        "duplicate field \"metadata.name\"",
    ] {
        assert!(msg.contains(item), "{msg} lacks {item}");
    }
    assert_eq!(s.get(&format!("{base}/f1")).await.code(), 404);

    // Warn (the default): stored without the unknown fields, one warning each.
    let r = send("", body).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let w = warnings(&r);
    assert!(
        w.contains(&"299 - \"unknown field \\\"spec\\\"\"".to_string()),
        "{w:?}"
    );
    assert!(
        w.contains(&"299 - \"duplicate field \\\"metadata.name\\\"\"".to_string()),
        "{w:?}"
    );
    let got = s.get(&format!("{base}/f1")).await.json();
    assert!(got.get("spec").is_none());
    assert!(got["metadata"].get("bogus").is_none());

    // Ignore: no warnings.
    let r = send("Ignore", br#"{"metadata":{"name":"f2"},"spec":{"x":1}}"#).await;
    assert_eq!(r.code(), 201);
    assert!(warnings(&r).is_empty());

    // Patches of every type: Strict is 400 naming each unknown and duplicate field by path,
    // never quoting the object (spec §4.9), and nothing changes; Warn warns.
    let path = format!("{base}/f1");
    let before = rv_of(&s.get(&path).await.json());
    let strict = format!("{path}?fieldValidation=Strict");
    let cases: [(&str, &[u8], &[&str]); 5] = [
        (
            MERGE,
            br#"{"spec":{"y":1},"metadata":{"labels":{"a":"b"},"bogus":2}}"#,
            &["unknown field \"spec\"", "unknown field \"metadata.bogus\""],
        ),
        (
            MERGE,
            br#"{"metadata":{"labels":{"a":"b","a":"c"}}}"#,
            &["duplicate field \"metadata.labels.a\""],
        ),
        (
            JSON_PATCH,
            br#"[{"op":"add","path":"/spec","value":{"y":1}}]"#,
            &["unknown field \"spec\""],
        ),
        (
            STRATEGIC,
            br#"{"secrets":[{"name":"s","bogus":1}]}"#,
            &["unknown field \"secrets[0].bogus\""],
        ),
        (
            APPLY,
            b"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: f1\nspec:\n  y: 1\n",
            &["unknown field \"spec\""],
        ),
    ];
    for (content_type, body, named) in cases {
        let query = if content_type == APPLY {
            format!("{strict}&fieldManager=m")
        } else {
            strict.clone()
        };
        let r = s
            .send(
                "PATCH",
                &query,
                Some(body),
                &[("content-type", content_type)],
            )
            .await;
        assert_status(&r, 400, "BadRequest");
        let msg = r.json()["message"].as_str().unwrap().to_string();
        assert!(
            msg.contains("strict decoding error: "),
            "{content_type}: {msg}"
        );
        for field in named {
            assert!(
                msg.contains(field),
                "{content_type}: {field} missing in {msg}"
            );
        }
        assert!(
            !msg.contains("\"uid\""),
            "{content_type}: the object is quoted: {msg}"
        );
    }
    assert_eq!(rv_of(&s.get(&path).await.json()), before);
    let r = patch(&s, &path, STRATEGIC, &json!({"spec": {"y": 1}})).await;
    assert_eq!(r.code(), 200);
    assert_eq!(warnings(&r).len(), 1);

    // YAML duplicates are found too.
    let r = s
        .send(
            "POST",
            &format!("{base}?fieldValidation=Strict"),
            Some(b"metadata:\n  name: f3\n  name: f3\n"),
            &[("content-type", "application/yaml")],
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("duplicate field \"metadata.name\""));

    // A type error wins over the level, and a bad level is refused.
    let r = send("Ignore", br#"{"metadata":{"name":7}}"#).await;
    assert_status(&r, 400, "BadRequest");
    let r = send("Loud", br#"{"metadata":{"name":"f4"}}"#).await;
    assert_status(&r, 422, "Invalid");
}

/// Clients updating one object by read-modify-write (GET, change, PUT with the version read,
/// again from the GET on 409) all finish, and no update is lost: every successful PUT made a
/// version of its own, and each client's label ends at its last value. Past a few conflicts
/// the object's reads take turns, which changes no answer.
#[tokio::test]
async fn read_modify_write_clients_all_finish_and_lose_no_update() {
    const CLIENTS: usize = 8;
    const UPDATES: u32 = 10;
    let s = TestServer::start();
    create_sa(&s, "rmw", json!({})).await;
    let path = format!("{}/rmw", sa_path("default"));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (http, path) = (s.http(), path.clone());
        clients.spawn(async move {
            let mut versions = Vec::new();
            for n in 1..=UPDATES {
                loop {
                    let r = http.get(&path).await;
                    assert_eq!(r.code(), 200);
                    let mut obj = r.json();
                    obj["metadata"]["labels"][format!("c{c}")] = json!(n.to_string());
                    let r = http.put_json(&path, &obj).await;
                    match r.code() {
                        200 => {
                            versions.push(rv_of(&r.json()));
                            break;
                        }
                        409 => assert_status(&r, 409, "Conflict"),
                        _ => panic!("{}", String::from_utf8_lossy(&r.body)),
                    }
                }
            }
            versions
        });
    }
    let mut versions = Vec::new();
    while let Some(done) = clients.join_next().await {
        versions.extend(done.unwrap());
    }
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions.len(), CLIENTS * UPDATES as usize);
    let labels = s.get(&path).await.json()["metadata"]["labels"].clone();
    for c in 0..CLIENTS {
        assert_eq!(labels[format!("c{c}")], UPDATES.to_string(), "{labels}");
    }
}

/// Clients patching and applying one object at once take turns in the server, each version
/// built on the one before even before it is stored: every write is answered with a version
/// of its own holding its change and every change before it, and none is lost. A quarter of
/// the clients ask for indented JSON, which the server renders from the object rather than
/// answering with the JSON the write made: both kinds of answer are whole objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_and_applies_of_one_object_build_on_each_other() {
    const CLIENTS: usize = 12;
    const WRITES: u32 = 8;
    let s = TestServer::start();
    create_sa(&s, "hot", json!({})).await;
    let path = format!("{}/hot", sa_path("default"));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (http, path) = (s.http(), path.clone());
        clients.spawn(async move {
            let mut answers = Vec::new();
            for n in 1..=WRITES {
                let label = json!({"metadata": {"labels": {format!("c{c}"): n.to_string()}}});
                let pretty = if c % 4 >= 2 { "pretty=true&" } else { "" };
                let r = if c % 2 == 0 {
                    let merge = format!("{path}?{pretty}");
                    http.send_json("PATCH", &merge, &label, MERGE).await
                } else {
                    let mut config = label.clone();
                    config["apiVersion"] = json!("v1");
                    config["kind"] = json!("ServiceAccount");
                    config["metadata"]["name"] = json!("hot");
                    let apply = format!("{path}?{pretty}fieldManager=client-{c}");
                    http.send_json("PATCH", &apply, &config, APPLY).await
                };
                assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
                assert_eq!(
                    r.body.windows(3).any(|w| w == b"\n  "),
                    !pretty.is_empty(),
                    "{}",
                    String::from_utf8_lossy(&r.body)
                );
                let obj = r.json();
                assert_eq!(obj["metadata"]["labels"][format!("c{c}")], n.to_string());
                assert!(obj["metadata"]["managedFields"].is_array(), "{obj}");
                assert!(obj["metadata"]["uid"].is_string(), "{obj}");
                answers.push(obj);
            }
            answers
        });
    }
    let mut answers = Vec::new();
    while let Some(done) = clients.join_next().await {
        answers.extend(done.unwrap());
    }
    // One version per write, each holding every change of the versions before it.
    answers.sort_by_key(rv_of);
    let mut versions: Vec<u64> = answers.iter().map(rv_of).collect();
    versions.dedup();
    assert_eq!(versions.len(), CLIENTS * WRITES as usize);
    for pair in answers.windows(2) {
        let (before, after) = (
            &pair[0]["metadata"]["labels"],
            &pair[1]["metadata"]["labels"],
        );
        for (k, v) in before.as_object().unwrap() {
            let (v, later) = (v.as_str().unwrap(), after[k].as_str().unwrap());
            let (v, later): (u32, u32) = (v.parse().unwrap(), later.parse().unwrap());
            assert!(later >= v, "{k}: {v} then {later}");
        }
    }
    let last = s.get(&path).await.json();
    for c in 0..CLIENTS {
        assert_eq!(
            last["metadata"]["labels"][format!("c{c}")],
            WRITES.to_string()
        );
    }
    // Each applier owns its label.
    let owners = managers(&last);
    for c in (1..CLIENTS).step_by(2) {
        assert!(
            owners.iter().any(|(m, _)| *m == format!("client-{c}")),
            "{owners:?}"
        );
    }
    assert_eq!(last, answers.last().unwrap().clone());
}
