//! Authentication against the real binary: 401 without acceptable credentials, static tokens
//! from `--token-auth-file`, ServiceAccount tokens (refused once their ServiceAccount is
//! deleted or recreated), the anonymous user, and SelfSubjectReview.

use std::time::Duration;

use crate::common::{assert_status, sa_path, Http, Reply, TestServer};
use serde_json::{json, Value};

const TOKENS: &str =
    "admin-token,admin,uid-admin,\"system:masters,ops\"\nalice-token,alice,uid-alice\n";

fn start_locked() -> (TestServer, tempfile::TempDir) {
    TestServer::start_with_tokens(TOKENS, &[])
}

async fn as_user(h: &Http, token: &str, method: &str, path: &str, body: Option<&Value>) -> Reply {
    h.as_token(token, method, path, body).await
}

async fn whoami(h: &Http, token: Option<&str>) -> Reply {
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    match token {
        Some(t) => as_user(h, t, "POST", path, Some(&body)).await,
        None => h.post_json(path, &body).await,
    }
}

fn assert_unauthorized(r: &Reply) {
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
    );
    assert_eq!(r.code(), 401);
}

#[tokio::test]
async fn every_operation_needs_credentials_when_anonymous_access_is_off() {
    let (s, _dir) = start_locked();
    let h = s.http();
    let sa = format!("{}/x", sa_path("default"));
    let body = json!({"metadata": {"name": "x"}});
    let requests: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", sa.clone(), None),
        ("GET", sa_path("default"), None),
        ("GET", "/api/v1/serviceaccounts".into(), None),
        ("GET", format!("{}?watch=true", sa_path("default")), None),
        ("POST", sa_path("default"), Some(body.clone())),
        ("PUT", sa.clone(), Some(body.clone())),
        ("PATCH", sa.clone(), Some(json!({}))),
        ("DELETE", sa.clone(), None),
        ("DELETE", sa_path("default"), None),
        ("POST", format!("{sa}/token"), Some(json!({}))),
        ("GET", "/api/v1/namespaces".into(), None),
        ("GET", "/api".into(), None),
        ("GET", "/apis".into(), None),
        ("GET", "/api/v1".into(), None),
        ("GET", "/openapi/v3".into(), None),
        (
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews".into(),
            Some(json!({})),
        ),
    ];
    for (method, path, body) in &requests {
        let bytes = body.as_ref().map(|b| serde_json::to_vec(b).unwrap());
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("Bearer "),
            Some("Basic YTpi"),
        ] {
            let mut headers = vec![("content-type", "application/json")];
            if let Some(a) = auth {
                headers.push(("authorization", a));
            }
            let r = h.send(method, path, bytes.as_deref(), &headers).await;
            assert_eq!(r.code(), 401, "{method} {path} with {auth:?}: {r:?}");
            assert_unauthorized(&r);
        }
    }
    // Health and version stay open.
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        assert_eq!(h.get(path).await.code(), 200, "{path}");
    }
    // The same requests with a valid token pass authentication.
    let r = as_user(&h, "alice-token", "GET", &sa_path("default"), None).await;
    assert_eq!(r.code(), 200, "{r:?}");
    let r = as_user(&h, "admin-token", "POST", &sa_path("default"), Some(&body)).await;
    assert_eq!(r.code(), 201, "{r:?}");
}

#[tokio::test]
async fn static_tokens_name_their_users() {
    let (s, _dir) = start_locked();
    let h = s.http();
    let r = whoami(&h, Some("admin-token")).await;
    assert_eq!(r.code(), 201, "{r:?}");
    let review = r.json();
    assert_eq!(review["kind"], "SelfSubjectReview");
    assert_eq!(review["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(
        review["status"]["userInfo"],
        json!({"username": "admin", "uid": "uid-admin",
               "groups": ["system:masters", "ops", "system:authenticated"]})
    );
    let alice = whoami(&h, Some("alice-token")).await.json();
    assert_eq!(alice["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        alice["status"]["userInfo"]["groups"],
        json!(["system:authenticated"])
    );
    assert_unauthorized(&whoami(&h, Some("nobody-token")).await);
    assert_unauthorized(&whoami(&h, None).await);
}

#[tokio::test]
async fn anonymous_requests_are_system_anonymous_by_default_but_bad_tokens_are_not() {
    let s = TestServer::start();
    let h = s.http();
    let r = whoami(&h, None).await;
    assert_eq!(r.code(), 201);
    assert_eq!(
        r.json()["status"]["userInfo"],
        json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]})
    );
    assert_eq!(h.get(&sa_path("default")).await.code(), 200);
    // A token nobody accepts is a 401 even so.
    assert_unauthorized(&as_user(&h, "made-up", "GET", &sa_path("default"), None).await);
    assert_status(
        &h.send(
            "GET",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            None,
            &[],
        )
        .await,
        405,
        "MethodNotAllowed",
    );
}

#[tokio::test]
async fn service_account_tokens_authenticate_until_their_account_is_gone() {
    let (mut s, dir) = start_locked();
    let h = s.http();
    let admin = |method: &'static str, path: String, body: Option<Value>| {
        let h = h.clone();
        async move { as_user(&h, "admin-token", method, &path, body.as_ref()).await }
    };
    let r = admin(
        "POST",
        "/api/v1/namespaces".into(),
        Some(json!({"metadata": {"name": "bots"}})),
    )
    .await;
    assert_eq!(r.code(), 201);
    let r = admin(
        "POST",
        sa_path("bots"),
        Some(json!({"metadata": {"name": "robot"}})),
    )
    .await;
    assert_eq!(r.code(), 201);
    let robot = r.json();
    let issue = |h: Http| async move {
        let r = as_user(
            &h,
            "admin-token",
            "POST",
            &format!("{}/robot/token", sa_path("bots")),
            Some(&json!({"spec": {"expirationSeconds": 600}})),
        )
        .await;
        assert_eq!(r.code(), 201, "{r:?}");
        r.json()["status"]["token"].as_str().unwrap().to_string()
    };
    let token = issue(h.clone()).await;

    let me = whoami(&h, Some(&token)).await;
    assert_eq!(me.code(), 201, "{me:?}");
    let info = &me.json()["status"]["userInfo"];
    assert_eq!(info["username"], "system:serviceaccount:bots:robot");
    assert_eq!(info["uid"], robot["metadata"]["uid"]);
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:bots",
            "system:authenticated"
        ])
    );
    assert!(
        info["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .unwrap()
            .starts_with("JTI=")
    );
    let r = as_user(&h, &token, "GET", &sa_path("bots"), None).await;
    assert_eq!(r.code(), 200);

    // A token for another audience is not for this API.
    let r = as_user(
        &h,
        "admin-token",
        "POST",
        &format!("{}/robot/token", sa_path("bots")),
        Some(&json!({"spec": {"audiences": ["vault"]}})),
    )
    .await;
    let vault = r.json()["status"]["token"].as_str().unwrap().to_string();
    assert_unauthorized(&whoami(&h, Some(&vault)).await);
    // A tampered token is refused.
    let mut tampered = token.clone();
    tampered.pop();
    tampered.push(if token.ends_with('A') { 'B' } else { 'A' });
    assert_unauthorized(&whoami(&h, Some(&tampered)).await);

    // Deleted: refused. Recreated under the same name (a new uid): still refused.
    let r = admin("DELETE", format!("{}/robot", sa_path("bots")), None).await;
    assert_eq!(r.code(), 200);
    assert_unauthorized(&whoami(&h, Some(&token)).await);
    let r = admin(
        "POST",
        sa_path("bots"),
        Some(json!({"metadata": {"name": "robot"}})),
    )
    .await;
    assert_eq!(r.code(), 201);
    assert_unauthorized(&whoami(&h, Some(&token)).await);
    let fresh = issue(h.clone()).await;
    assert_eq!(whoami(&h, Some(&fresh)).await.code(), 201);

    // The signing key survives a restart: the fresh token still works after one. (The old
    // handle stays in scope: on etcd it keeps the etcd the restarted server finds.)
    s.kill();
    let file = dir.path().join("tokens.csv");
    let s = TestServer::start_in(
        &dir.path().join("data"),
        &[
            "--anonymous-auth=false",
            "--token-auth-file",
            file.to_str().unwrap(),
        ],
    );
    let h = s.http();
    tokio::time::timeout(Duration::from_secs(10), async {
        assert_eq!(whoami(&h, Some(&fresh)).await.code(), 201);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_bad_token_file_stops_the_server_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.csv");
    std::fs::write(&file, "only,two\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--storage-backend",
            "memory",
        ])
        .arg("--token-auth-file")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 1"), "{err}");
}
