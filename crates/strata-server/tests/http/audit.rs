//! The audit log against the real binary: a policy file and a log path, a scripted sequence of
//! requests (writes, a read, 403s, impersonation, a 401, watches, a health check, a client's
//! Audit-ID), and the exact `audit.k8s.io/v1` Events the log then holds; size-based rotation
//! with lumberjack's backup names; a bad policy stops the server with the file and the problem.
//! On etcd every request goes to one replica, whose log is the one read (each replica writes
//! the log its flags name, and only the replica spoken to has anything to write).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{strata_bin, Http, TestServer, WatchOptions, WatchStream};

const TOKENS: &str = "admin-token,admin,1,system:masters\n\
                      alice-token,alice,2\n";

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
# Alice's gets are not recorded, whatever they touch.
- level: None
  users: [alice]
  verbs: [get]
- level: Metadata
  omitStages: [RequestReceived]
  resources:
  - group: ""
    resources: [secrets]
- level: RequestResponse
  omitStages: [RequestReceived]
  omitManagedFields: true
  resources:
  - group: ""
    resources: [configmaps]
- level: Metadata
  omitStages: [RequestReceived]
  nonResourceURLs: ["/healthz*"]
- level: Metadata
  verbs: [watch]
"#;

/// A server with an audit log, and the directories it uses.
struct Audited {
    server: TestServer,
    log: PathBuf,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// Starts a server with `policy` and the log at `<dir>/logs/audit.log`, plus `extra` flags.
fn start(policy: &str, extra: &[&str]) -> Audited {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, policy).expect("policy file");
    let log = dir.path().join("logs/audit.log");
    let mut flags = vec![
        "--authorization-mode=RBAC".to_string(),
        "--audit-policy-file".into(),
        policy_file.display().to_string(),
        "--audit-log-path".into(),
        log.display().to_string(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (server, tokens_dir) = TestServer::start_with_tokens(TOKENS, &flags);
    Audited {
        server,
        log,
        _dirs: (dir, tokens_dir),
    }
}

/// The events in the log file, one per line.
fn events(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Waits until the log holds `n` events (a watch's last event is written when its stream
/// ends, after the client went away); panics after 10 s.
async fn wait_for_events(log: &Path, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = events(log);
        if got.len() >= n {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} events in the log, expected {n}: {got:#?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_micro_time(v: &Value) -> bool {
    let s = v.as_str().unwrap_or("");
    // 2026-11-26T02:30:00.123456Z
    s.len() == 27
        && s.ends_with('Z')
        && s.as_bytes()[19] == b'.'
        && s[20..26].bytes().all(|b| b.is_ascii_digit())
}

/// Checks what every event has, then returns it without the fields that vary (auditID,
/// timestamps) for an exact comparison.
fn fixed(e: &Value) -> Value {
    assert_eq!(e["kind"], "Event", "{e}");
    assert_eq!(e["apiVersion"], "audit.k8s.io/v1", "{e}");
    assert!(is_micro_time(&e["requestReceivedTimestamp"]), "{e}");
    assert!(is_micro_time(&e["stageTimestamp"]), "{e}");
    assert!(
        e["stageTimestamp"].as_str() >= e["requestReceivedTimestamp"].as_str(),
        "{e}"
    );
    let mut e = e.clone();
    let m = e.as_object_mut().unwrap();
    for k in [
        "kind",
        "apiVersion",
        "auditID",
        "requestReceivedTimestamp",
        "stageTimestamp",
    ] {
        m.remove(k);
    }
    e
}

const ADMIN: &str = "Bearer admin-token";
const ALLOW: &str = "allow";

fn admin_user() -> Value {
    json!({"username": "admin", "uid": "1", "groups": ["system:masters", "system:authenticated"]})
}

fn allowed() -> Value {
    json!({"authorization.k8s.io/decision": ALLOW, "authorization.k8s.io/reason": ""})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sequence_leaves_exactly_the_expected_events() {
    let audited = start(POLICY, &[]);
    let (server, log) = (&audited.server, audited.log.as_path());
    // Everything goes to one replica (on etcd, the other writes a log of its own).
    let h = Http::to(&server.addr);
    let send = |method: &'static str,
                path: &'static str,
                body: Option<Value>,
                headers: Vec<(&'static str, String)>| {
        let h = h.clone();
        async move {
            let bytes = body.map(|b| serde_json::to_vec(&b).unwrap());
            let mut hs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            hs.push(("content-type", "application/json"));
            h.send(method, path, bytes.as_deref(), &hs).await
        }
    };
    let admin = || vec![("authorization", ADMIN.to_string())];

    // 1. A secret created: Metadata; the name comes from the body.
    let r = send(
        "POST",
        "/api/v1/namespaces/default/secrets",
        Some(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                    "stringData": {"password": "hunter2"}}),
        ),
        admin(),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let secret_id = r.header("audit-id").to_string();
    // 2. A ConfigMap created with a user agent: RequestResponse, managedFields left out.
    let mut hs = admin();
    hs.push(("user-agent", "audit-test/1.0".into()));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"},
                    "data": {"k": "v"}});
    let r = send(
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldManager=audit-test",
        Some(cm.clone()),
        hs,
    )
    .await;
    assert_eq!(r.code(), 201);
    let created = r.json();
    assert!(created["metadata"]["managedFields"].is_array());
    // 3. Alice lists ConfigMaps: 403, recorded with the Status and the forbid decision.
    let r = send(
        "GET",
        "/api/v1/namespaces/default/configmaps",
        None,
        vec![("authorization", "Bearer alice-token".into())],
    )
    .await;
    assert_eq!(r.code(), 403);
    let forbidden = r.json();
    // 4. Alice gets a ConfigMap: also 403, but her gets are not audited.
    let r = send(
        "GET",
        "/api/v1/namespaces/default/configmaps/cm1",
        None,
        vec![("authorization", "Bearer alice-token".into())],
    )
    .await;
    assert_eq!(r.code(), 403);
    // 5. The admin reads the secret as alice (impersonation), with a client's Audit-ID: the
    // policy judges the admin's request; alice may not read it.
    let mut hs = admin();
    hs.push(("impersonate-user", "alice".into()));
    hs.push(("audit-id", "client-chosen-id".into()));
    let r = send("GET", "/api/v1/namespaces/default/secrets/s1", None, hs).await;
    assert_eq!(r.code(), 403, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("audit-id"), "client-chosen-id");
    let impersonated = r.json();
    assert_eq!(
        impersonated["details"],
        json!({"name": "s1", "kind": "secrets"})
    );
    // 6. A bad token: 401, one ResponseStarted event without a user.
    let r = send(
        "GET",
        "/api/v1/namespaces/default/secrets",
        None,
        vec![("authorization", "Bearer wrong".into())],
    )
    .await;
    assert_eq!(r.code(), 401);
    // 7. A health check: a non-resource URL.
    let r = send("GET", "/healthz", None, admin()).await;
    assert_eq!(r.code(), 200);
    // 8. /version matches no rule: nothing recorded.
    let r = send("GET", "/version", None, admin()).await;
    assert_eq!(r.code(), 200);
    // 9. Alice may not watch ConfigMaps: a watch's response starts even when it is a 403.
    let r = send(
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true",
        None,
        vec![("authorization", "Bearer alice-token".into())],
    )
    .await;
    assert_eq!(r.code(), 403);
    let watch_forbidden = r.json();
    let before_watch = events(log).len();
    assert_eq!(before_watch, 8, "{:#?}", events(log));

    // 10. A watch of ServiceAccounts: RequestReceived, ResponseStarted, and ResponseComplete
    // when it ends.
    let opts = WatchOptions {
        headers: vec![("authorization".into(), ADMIN.into())],
        ..Default::default()
    };
    let mut w = WatchStream::open(
        &server.addr,
        "/api/v1/namespaces/default/serviceaccounts?watch=true&timeoutSeconds=1",
        opts,
    )
    .await;
    assert_eq!(w.status.as_u16(), 200);
    let watch_id = w.header("audit-id").to_string();
    w.until_end(Duration::from_secs(10)).await;
    drop(w);
    let all = wait_for_events(log, 11).await;
    assert_eq!(all.len(), 11, "{all:#?}");

    // The IDs are the responses' Audit-Id headers.
    assert_eq!(all[0]["auditID"], secret_id);
    assert_eq!(all[3]["auditID"], "client-chosen-id");
    assert_eq!(all[6]["auditID"], all[7]["auditID"]);
    for e in &all[8..11] {
        assert_eq!(e["auditID"], watch_id);
    }
    let ids: Vec<&str> = all.iter().map(|e| e["auditID"].as_str().unwrap()).collect();
    assert!(ids[..7].iter().all(|id| !id.is_empty()));
    let distinct: std::collections::BTreeSet<&str> = ids[..7].iter().copied().collect();
    assert_eq!(distinct.len(), 7, "{ids:?}");

    let ip = json!(["127.0.0.1"]);
    let mut response_object = created.clone();
    response_object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    let expected = vec![
        json!({
            "level": "Metadata", "stage": "ResponseComplete",
            "requestURI": "/api/v1/namespaces/default/secrets", "verb": "create",
            "user": admin_user(), "sourceIPs": ip,
            "objectRef": {"resource": "secrets", "namespace": "default", "name": "s1",
                          "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "code": 201},
            "annotations": allowed(),
        }),
        json!({
            "level": "RequestResponse", "stage": "ResponseComplete",
            "requestURI": "/api/v1/namespaces/default/configmaps?fieldManager=audit-test",
            "verb": "create", "user": admin_user(), "sourceIPs": ip,
            "userAgent": "audit-test/1.0",
            "objectRef": {"resource": "configmaps", "namespace": "default", "name": "cm1",
                          "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "code": 201},
            "requestObject": cm,
            "responseObject": response_object,
            "annotations": allowed(),
        }),
        json!({
            "level": "RequestResponse", "stage": "ResponseComplete",
            "requestURI": "/api/v1/namespaces/default/configmaps", "verb": "list",
            "user": {"username": "alice", "uid": "2", "groups": ["system:authenticated"]},
            "sourceIPs": ip,
            "objectRef": {"resource": "configmaps", "namespace": "default", "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "status": "Failure",
                               "message": forbidden["message"], "reason": "Forbidden",
                               "details": forbidden["details"], "code": 403},
            "responseObject": forbidden,
            "annotations": {"authorization.k8s.io/decision": "forbid",
                            "authorization.k8s.io/reason": ""},
        }),
        json!({
            "level": "Metadata", "stage": "ResponseComplete",
            "requestURI": "/api/v1/namespaces/default/secrets/s1", "verb": "get",
            "user": admin_user(),
            "impersonatedUser": {"username": "alice", "groups": ["system:authenticated"]},
            "sourceIPs": ip,
            "objectRef": {"resource": "secrets", "namespace": "default", "name": "s1",
                          "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "status": "Failure",
                               "message": impersonated["message"], "reason": "Forbidden",
                               "details": impersonated["details"], "code": 403},
            "annotations": {"authorization.k8s.io/decision": "forbid",
                            "authorization.k8s.io/reason": ""},
        }),
        json!({
            "level": "Metadata", "stage": "ResponseStarted",
            "requestURI": "/api/v1/namespaces/default/secrets", "verb": "list",
            "user": {}, "sourceIPs": ip,
            "objectRef": {"resource": "secrets", "namespace": "default", "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "status": "Failure", "message": "Unauthorized",
                               "reason": "Unauthorized", "code": 401},
        }),
        json!({
            "level": "Metadata", "stage": "ResponseComplete",
            "requestURI": "/healthz", "verb": "get",
            "user": admin_user(), "sourceIPs": ip,
            "responseStatus": {"metadata": {}, "code": 200},
        }),
    ];
    let watch_event = |stage: &str, code: bool| {
        let mut e = json!({
            "level": "Metadata", "stage": stage,
            "requestURI": "/api/v1/namespaces/default/serviceaccounts?watch=true&timeoutSeconds=1",
            "verb": "watch", "user": admin_user(), "sourceIPs": ip,
            "objectRef": {"resource": "serviceaccounts", "namespace": "default",
                          "apiVersion": "v1"},
            "annotations": allowed(),
        });
        if code {
            e["responseStatus"] = json!({"metadata": {}, "code": 200});
        }
        e
    };
    let mut expected = expected;
    let refused = |stage: &str| {
        json!({
            "level": "RequestResponse", "stage": stage,
            "requestURI": "/api/v1/namespaces/default/configmaps?watch=true", "verb": "watch",
            "user": {"username": "alice", "uid": "2", "groups": ["system:authenticated"]},
            "sourceIPs": ip,
            "objectRef": {"resource": "configmaps", "namespace": "default", "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "status": "Failure",
                               "message": watch_forbidden["message"], "reason": "Forbidden",
                               "details": watch_forbidden["details"], "code": 403},
            "responseObject": watch_forbidden,
            "annotations": {"authorization.k8s.io/decision": "forbid",
                            "authorization.k8s.io/reason": ""},
        })
    };
    expected.push(refused("ResponseStarted"));
    expected.push(refused("ResponseComplete"));
    expected.push(watch_event("RequestReceived", false));
    // RequestReceived comes before authorization: no decision yet.
    expected[8].as_object_mut().unwrap().remove("annotations");
    expected.push(watch_event("ResponseStarted", true));
    expected.push(watch_event("ResponseComplete", true));
    for (i, (got, want)) in all.iter().zip(&expected).enumerate() {
        assert_eq!(fixed(got), *want, "event {i}");
    }
    // A RequestReceived event's stage time is the time the request was received.
    assert_eq!(all[8]["stageTimestamp"], all[8]["requestReceivedTimestamp"]);

    // The counters: every event handed to the log, one level per request that reached the
    // policy.
    let metrics = h
        .send("GET", "/metrics", None, &[("authorization", ADMIN)])
        .await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let value = |name: &str, labels: &[(&str, &str)]| {
        crate::common::metric_value(&text, name, labels).unwrap_or(0.0)
    };
    assert_eq!(value("apiserver_audit_event_total", &[]), 11.0, "{text}");
    assert_eq!(
        value("apiserver_audit_level_total", &[("level", "Metadata")]),
        5.0
    );
    assert_eq!(
        value(
            "apiserver_audit_level_total",
            &[("level", "RequestResponse")]
        ),
        3.0
    );
    assert_eq!(
        value("apiserver_audit_error_total", &[("plugin", "log")]),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_rotates_by_size_keeping_maxbackup_files() {
    const ROTATING: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: [configmaps]
"#;
    let audited = start(
        ROTATING,
        &["--audit-log-maxsize=1", "--audit-log-maxbackup=2"],
    );
    let (server, log) = (&audited.server, audited.log.as_path());
    let h = Http::to(&server.addr);
    // Each create's event holds the ConfigMap twice (request and response): ~300 kB, so a
    // 1 MB file holds three and sixteen creates rotate the log five times.
    let big = "x".repeat(150 * 1024);
    let mut last_id = String::new();
    for i in 0..16 {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": format!("big-{i}")}, "data": {"k": big}});
        let bytes = serde_json::to_vec(&body).unwrap();
        let r = h
            .send(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                Some(&bytes),
                &[
                    ("authorization", ADMIN),
                    ("content-type", "application/json"),
                ],
            )
            .await;
        assert_eq!(r.code(), 201);
        last_id = r.header("audit-id").to_string();
        // Backup names carry the time to the millisecond.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dir = log.parent().unwrap();
    let mut backups = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name == "audit.log" {
            continue;
        }
        // audit-2026-11-26T02-30-00.123.log
        let stamp = name
            .strip_prefix("audit-")
            .and_then(|n| n.strip_suffix(".log"))
            .unwrap_or_else(|| panic!("unexpected file {name}"));
        assert_eq!(stamp.len(), 23, "{name}");
        assert_eq!(&stamp[10..11], "T", "{name}");
        assert_eq!(&stamp[19..20], ".", "{name}");
        backups.push(name);
    }
    backups.sort();
    assert_eq!(backups.len(), 2, "{backups:?}");
    let mut total = 0;
    for name in backups.iter().map(String::as_str).chain(["audit.log"]) {
        let path = dir.join(name);
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 1024 * 1024, "{name} is {size} bytes");
        let evs = events(&path);
        assert!(!evs.is_empty(), "{name} is empty");
        for e in &evs {
            assert_eq!(e["kind"], "Event");
            assert_eq!(e["stage"], "ResponseComplete");
            assert_eq!(e["verb"], "create");
        }
        total += evs.len();
    }
    // The newest event is in the current file; the oldest ones were removed with their files.
    let current = events(log);
    assert_eq!(current.last().unwrap()["auditID"], last_id);
    assert!(total < 16, "{total} events kept");
    // A file's names run in time order: the backups' events come before the current file's.
    let first_backup = events(&dir.join(&backups[0]));
    let n: u64 = first_backup[0]["objectRef"]["name"]
        .as_str()
        .unwrap()
        .trim_start_matches("big-")
        .parse()
        .unwrap();
    assert_eq!(n as usize, 16 - total);
}

#[test]
fn a_bad_policy_stops_the_server_naming_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("bad-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
    )
    .unwrap();
    let out = std::process::Command::new(strata_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--insecure-http"])
        .args(["--storage-backend", "memory", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--audit-policy-file")
        .arg(&policy)
        .args(["--audit-log-path", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&policy.display().to_string())
            && stderr.contains("rules[0].level: Unsupported value: \"Loud\""),
        "{stderr}"
    );
    // kube-apiserver 1.31 reads only audit.k8s.io/v1 policies.
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: None\n",
    )
    .unwrap();
    let out = std::process::Command::new(strata_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--insecure-http"])
        .args(["--storage-backend", "memory", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--audit-policy-file")
        .arg(&policy)
        .args(["--audit-log-path", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("audit.k8s.io/v1beta1"));
}
