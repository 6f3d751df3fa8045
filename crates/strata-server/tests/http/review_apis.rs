//! SelfSubjectRulesReview and TokenReview against the real binary: the rules RBAC grants a
//! token user (their Roles, ClusterRoles bound in a namespace or cluster-wide, group subjects
//! and `system:authenticated`'s defaults) with the evaluation error of a binding whose role is
//! missing, AlwaysAllow's rule, `kubectl auth can-i --list` (1.31 JSON, 1.37 protobuf) showing
//! those rules, and TokenReview through the Python client (ServiceAccount and static tokens,
//! audiences, deleted accounts, `system:auth-delegator`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{run_with_timeout, Http, TestServer};
use serde_json::{json, Value};

const TOKENS: &str = "admin-token,admin,1,system:masters\n\
                      alice-token,alice,2,\"devs\"\n\
                      bob-token,bob,3\n\
                      proxy-token,proxy,4\n";

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const RULES: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

fn start() -> (TestServer, tempfile::TempDir) {
    TestServer::start_with_tokens(TOKENS, &["--authorization-mode=RBAC"])
}

async fn admin(h: &Http, path: &str, body: Value) -> Value {
    let r = h.as_token("admin-token", "POST", path, Some(&body)).await;
    assert!(
        r.code() == 201,
        "POST {path}: {} {}",
        r.code(),
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

fn binding(kind: &str, ns: Option<&str>, name: &str, role: (&str, &str), subject: Value) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
           "subjects": [subject]})
}

fn subject(kind: &str, name: &str) -> Value {
    json!({"kind": kind, "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

/// Namespace `team-a` with: Role `app-reader` (configmaps and serviceaccounts read, one
/// secret by name) bound to alice; ClusterRole `lease-writer` bound there to group `devs`
/// (alice's); a RoleBinding of alice to a Role that does not exist; and cluster-wide,
/// ClusterRole `metrics-reader` (`get /metrics`) bound to alice.
async fn setup(h: &Http) {
    admin(
        h,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "team-a"}}),
    )
    .await;
    admin(
        h,
        &format!("{RBAC}/namespaces/team-a/roles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "app-reader", "namespace": "team-a"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps", "serviceaccounts"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["app-secret"],
             "verbs": ["get"]},
        ]}),
    )
    .await;
    for (name, rules) in [
        (
            "lease-writer",
            json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "update"]}]),
        ),
        (
            "metrics-reader",
            json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        ),
    ] {
        admin(
            h,
            &format!("{RBAC}/clusterroles"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": name}, "rules": rules}),
        )
        .await;
    }
    let rolebindings = format!("{RBAC}/namespaces/team-a/rolebindings");
    for b in [
        binding(
            "RoleBinding",
            Some("team-a"),
            "alice-reads",
            ("Role", "app-reader"),
            subject("User", "alice"),
        ),
        binding(
            "RoleBinding",
            Some("team-a"),
            "devs-leases",
            ("ClusterRole", "lease-writer"),
            subject("Group", "devs"),
        ),
        binding(
            "RoleBinding",
            Some("team-a"),
            "alice-ghost",
            ("Role", "ghost"),
            subject("User", "alice"),
        ),
    ] {
        admin(h, &rolebindings, b).await;
    }
    admin(
        h,
        &format!("{RBAC}/clusterrolebindings"),
        binding(
            "ClusterRoleBinding",
            None,
            "alice-metrics",
            ("ClusterRole", "metrics-reader"),
            subject("User", "alice"),
        ),
    )
    .await;
}

async fn rules_review(h: &Http, token: &str, namespace: &str) -> Value {
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                      "spec": {"namespace": namespace}});
    let r = h.as_token(token, "POST", RULES, Some(&body)).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// The rules `system:authenticated` has on every Kubernetes control plane (system:basic-user,
/// system:discovery, system:public-info-viewer), as a SelfSubjectRulesReview lists them.
fn authenticated_rules() -> (Vec<Value>, Vec<Value>) {
    let resource = vec![
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
               "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
               "resources": ["selfsubjectreviews"]}),
    ];
    let non_resource = vec![
        json!({"verbs": ["get"], "nonResourceURLs": [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
            "/readyz", "/version", "/version/"]}),
        json!({"verbs": ["get"], "nonResourceURLs": [
            "/healthz", "/livez", "/readyz", "/version", "/version/"]}),
    ];
    (resource, non_resource)
}

/// Sorted copies, to compare lists whose order Kubernetes leaves open.
fn sorted(list: &Value) -> Vec<String> {
    let mut items: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(Value::to_string)
        .collect();
    items.sort();
    items
}

fn sorted_of(list: Vec<Value>) -> Vec<String> {
    sorted(&Value::Array(list))
}

#[tokio::test]
async fn rules_reviews_list_what_rbac_grants() {
    let (s, _dir) = start();
    let h = s.http();
    setup(&h).await;
    let (common, common_urls) = authenticated_rules();

    // In team-a: the Role, the ClusterRole bound to alice's group, the cluster-wide binding and
    // the defaults; the binding to a missing Role is reported, not fatal.
    let review = rules_review(&h, "alice-token", "team-a").await;
    assert_eq!(review["kind"], "SelfSubjectRulesReview", "{review}");
    assert_eq!(review["apiVersion"], "authorization.k8s.io/v1");
    let status = &review["status"];
    let mut want = common.clone();
    want.extend([
        json!({"verbs": ["get", "list", "watch"], "apiGroups": [""],
               "resources": ["configmaps", "serviceaccounts"]}),
        json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"],
               "resourceNames": ["app-secret"]}),
        json!({"verbs": ["create", "update"], "apiGroups": ["coordination.k8s.io"],
               "resources": ["leases"]}),
    ]);
    assert_eq!(
        sorted(&status["resourceRules"]),
        sorted_of(want),
        "{status}"
    );
    let mut want_urls = common_urls.clone();
    want_urls.push(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}));
    assert_eq!(
        sorted(&status["nonResourceRules"]),
        sorted_of(want_urls.clone()),
        "{status}"
    );
    assert_eq!(status["incomplete"], false, "{status}");
    assert_eq!(
        status["evaluationError"],
        "role.rbac.authorization.k8s.io \"ghost\" not found"
    );

    // Elsewhere only the cluster-wide bindings count.
    let review = rules_review(&h, "alice-token", "default").await;
    let status = &review["status"];
    assert_eq!(
        sorted(&status["resourceRules"]),
        sorted_of(common.clone()),
        "{status}"
    );
    assert_eq!(
        sorted(&status["nonResourceRules"]),
        sorted_of(want_urls),
        "{status}"
    );
    assert!(status.get("evaluationError").is_none(), "{status}");

    // Someone bound to nothing has what every authenticated user has.
    let review = rules_review(&h, "bob-token", "team-a").await;
    assert_eq!(
        sorted(&review["status"]["resourceRules"]),
        sorted_of(common)
    );
    assert_eq!(
        sorted(&review["status"]["nonResourceRules"]),
        sorted_of(common_urls)
    );

    // A role created later counts at once; its binding's error goes.
    admin(
        &h,
        &format!("{RBAC}/namespaces/team-a/roles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "ghost", "namespace": "team-a"},
               "rules": [{"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["patch"]}]}),
    )
    .await;
    let review = rules_review(&h, "alice-token", "team-a").await;
    assert!(
        review["status"].get("evaluationError").is_none(),
        "{review}"
    );
    assert!(
        sorted(&review["status"]["resourceRules"]).contains(
            &json!({"verbs": ["patch"], "apiGroups": ["apps"], "resources": ["deployments/scale"]})
                .to_string()
        ),
        "{review}"
    );

    // The namespace is required; only POST is served.
    let r = h
        .as_token(
            "alice-token",
            "POST",
            RULES,
            Some(&json!({"kind": "SelfSubjectRulesReview", "spec": {}})),
        )
        .await;
    assert_eq!(r.code(), 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["message"], "no namespace on request");
    let r = h.as_token("admin-token", "GET", RULES, None).await;
    assert_eq!(r.code(), 405, "{}", String::from_utf8_lossy(&r.body));
    // Without the default binding of system:basic-user, nobody may ask.
    let r = h
        .as_token(
            "admin-token",
            "DELETE",
            &format!("{RBAC}/clusterrolebindings/system:basic-user"),
            None,
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let body = json!({"kind": "SelfSubjectRulesReview", "spec": {"namespace": "team-a"}});
    let r = h.as_token("bob-token", "POST", RULES, Some(&body)).await;
    assert_eq!(r.code(), 403, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn rules_reviews_under_always_allow_allow_everything() {
    let s = TestServer::start();
    let r = s
        .post_json(
            RULES,
            &json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
                    "spec": {"namespace": "default"}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(
        v["status"],
        json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        })
    );
}

#[tokio::test]
async fn reviews_are_discovered_and_token_reviews_check_their_body() {
    let (s, _dir) = start();
    let h = s.http();
    for (path, resource) in [
        ("/apis/authorization.k8s.io/v1", "selfsubjectrulesreviews"),
        ("/apis/authentication.k8s.io/v1", "tokenreviews"),
    ] {
        let r = h.as_token("bob-token", "GET", path, None).await;
        let list = r.json();
        let found = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == resource)
            .unwrap_or_else(|| panic!("{resource} not in {list}"))
            .clone();
        assert_eq!(found["verbs"], json!(["create"]), "{found}");
        assert_eq!(found["namespaced"], false, "{found}");
    }
    let ok = |body: Value| {
        let h = h.clone();
        async move {
            let r = h
                .as_token("admin-token", "POST", TOKEN_REVIEWS, Some(&body))
                .await;
            (r.code(), r.json())
        }
    };
    let (code, v) = ok(json!({"kind": "TokenReview", "spec": {}})).await;
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v["message"],
        "token is required for TokenReview in authentication"
    );
    let (code, v) = ok(json!({"kind": "SelfSubjectReview", "spec": {"token": "x"}})).await;
    assert_eq!(code, 400, "{v}");
    // A static token: the server's own audience; none other.
    let (code, v) = ok(json!({"spec": {"token": "alice-token"}})).await;
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["kind"], "TokenReview");
    assert_eq!(v["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(v["status"]["authenticated"], true, "{v}");
    assert_eq!(
        v["status"]["user"],
        json!({"username": "alice", "uid": "2", "groups": ["devs", "system:authenticated"]})
    );
    assert_eq!(v["status"]["audiences"].as_array().map(Vec::len), Some(1));
    let (_, v) = ok(json!({"spec": {"token": "alice-token", "audiences": ["vault"]}})).await;
    assert_eq!(
        v["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    let (_, v) = ok(json!({"spec": {"token": "not-a-token"}})).await;
    assert_eq!(
        v["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
}

// ---------------------------------------------------------------------------------------------
// kubectl auth can-i --list

/// kubectl's table as rows of (resource, non-resource URLs, resource names, verbs sorted), in
/// kubectl's words (`[a b]` lists, `resource.group`), sorted; cut at the header's columns.
fn can_i_rows(text: &str) -> Vec<(String, String, String, String)> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    assert!(header.starts_with("Resources"), "{text}");
    let urls = header.find("Non-Resource URLs").expect("URL column");
    let names = header.find("Resource Names").expect("names column");
    let verbs = header.find("Verbs").expect("verbs column");
    let mut rows: Vec<_> = lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let cut = |from: usize, to: usize| {
                l.get(from..to.min(l.len()))
                    .unwrap_or("")
                    .trim()
                    .to_string()
            };
            let mut v: Vec<&str> = l
                .get(verbs..)
                .unwrap_or("")
                .trim()
                .trim_matches(|c| c == '[' || c == ']')
                .split(' ')
                .collect();
            v.sort();
            (
                cut(0, urls),
                cut(urls, names),
                cut(names, verbs),
                format!("[{}]", v.join(" ")),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn row(resource: &str, urls: &str, names: &str, verbs: &str) -> (String, String, String, String) {
    (resource.into(), urls.into(), names.into(), verbs.into())
}

/// What `kubectl auth can-i --list` shows any authenticated user, Kubernetes' defaults: one
/// row per URL of system:discovery and system:public-info-viewer (those of both twice).
fn authenticated_rows() -> Vec<(String, String, String, String)> {
    let mut rows = vec![
        row(
            "selfsubjectaccessreviews.authorization.k8s.io",
            "[]",
            "[]",
            "[create]",
        ),
        row(
            "selfsubjectrulesreviews.authorization.k8s.io",
            "[]",
            "[]",
            "[create]",
        ),
        row(
            "selfsubjectreviews.authentication.k8s.io",
            "[]",
            "[]",
            "[create]",
        ),
    ];
    for url in [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
        "/healthz",
        "/livez",
        "/readyz",
        "/version",
        "/version/",
    ] {
        rows.push(row("", &format!("[{url}]"), "[]", "[get]"));
    }
    rows
}

fn kubectl_binary(name: &str) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    let found = dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file());
    if found.is_none() {
        eprintln!(
            "\n!!!!!!!! SKIPPED: {name} is not installed (run /work/shared/tools/install-clients.sh); \
             this kubectl test asserts nothing !!!!!!!!\n"
        );
    }
    found
}

/// [`setup`] as a manifest for `kubectl apply`.
const SETUP: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: app-reader
  namespace: team-a
rules:
- apiGroups: [\"\"]
  resources: [configmaps, serviceaccounts]
  verbs: [get, list, watch]
- apiGroups: [\"\"]
  resources: [secrets]
  resourceNames: [app-secret]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: lease-writer
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: metrics-reader
rules:
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: alice-reads
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app-reader}
subjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: devs-leases
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lease-writer}
subjects: [{kind: Group, apiGroup: rbac.authorization.k8s.io, name: devs}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: alice-ghost
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ghost}
subjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: alice-metrics
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: metrics-reader}
subjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: alice}]
";

/// kubectl (which sends bearer tokens only over TLS) against the default TLS server with the
/// token users of [`TOKENS`]: the admin applies [`SETUP`], then alice lists her rules
/// cluster-wide and in team-a.
fn can_i_list(binary: &str) {
    let Some(bin) = kubectl_binary(binary) else {
        return;
    };
    let tokens = tempfile::tempdir().expect("temp dir");
    let token_file = tokens.path().join("tokens.csv");
    std::fs::write(&token_file, TOKENS).expect("token file");
    let manifest = tokens.path().join("setup.yaml");
    std::fs::write(&manifest, SETUP).expect("manifest");
    let dir = tempfile::tempdir().expect("temp dir");
    let _s = TestServer::start_tls_in(
        dir.path(),
        &[
            "--token-auth-file",
            token_file.to_str().expect("utf-8 path"),
        ],
    );
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let home = tokens.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let kubectl = |args: &[&str]| {
        let mut cmd = Command::new(&bin);
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home);
        let r = run_with_timeout(&mut cmd, tokens.path(), Duration::from_secs(60));
        assert!(
            r.success(),
            "{binary} {args:?} failed\nstdout:\n{}\nstderr:\n{}",
            r.stdout,
            r.stderr
        );
        // Kubernetes' RBAC reports a missing role without calling the list incomplete, so
        // kubectl warns about nothing.
        assert!(!r.stderr.contains("incomplete"), "{}", r.stderr);
        r.stdout
    };
    kubectl(&["apply", "-f", manifest.to_str().expect("utf-8 path")]);
    let mut everywhere = authenticated_rows();
    everywhere.push(row("", "[/metrics]", "[]", "[get]"));
    let mut want = everywhere.clone();
    want.sort();
    let out = kubectl(&["--token", "alice-token", "auth", "can-i", "--list"]);
    assert_eq!(can_i_rows(&out), want, "{out}");

    let mut want = everywhere;
    want.extend([
        row("configmaps", "[]", "[]", "[get list watch]"),
        row("serviceaccounts", "[]", "[]", "[get list watch]"),
        row("secrets", "[]", "[app-secret]", "[get]"),
        row("leases.coordination.k8s.io", "[]", "[]", "[create update]"),
    ]);
    want.sort();
    let out = kubectl(&[
        "--token",
        "alice-token",
        "auth",
        "can-i",
        "--list",
        "-n",
        "team-a",
    ]);
    assert_eq!(can_i_rows(&out), want, "{out}");
}

#[test]
fn kubectl_1_31_auth_can_i_list() {
    can_i_list("kubectl-1.31");
}

#[test]
fn kubectl_1_37_auth_can_i_list() {
    can_i_list("kubectl-1.37");
}

// ---------------------------------------------------------------------------------------------
// TokenReview through the Python client

const TOKEN_REVIEW_SCRIPT: &str = r#"
import base64
import json
import sys

from kubernetes import client
from kubernetes.client.rest import ApiException


def api(token):
    cfg = client.Configuration()
    cfg.host = "http://" + sys.argv[1]
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


admin = api("admin-token")
proxy = api("proxy-token")
core = client.CoreV1Api(admin)
rbac = client.RbacAuthorizationV1Api(admin)


def review(caller, token, audiences=None):
    spec = client.V1TokenReviewSpec(token=token, audiences=audiences)
    return client.AuthenticationV1Api(caller).create_token_review(client.V1TokenReview(spec=spec))


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


sa = core.create_namespaced_service_account(
    "default", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot"))
)
token = core.create_namespaced_service_account_token(
    "robot", "default", client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
).status.token
api_audiences = claims(token)["aud"]
assert len(api_audiences) == 1, api_audiences

# Without create on tokenreviews: 403.
try:
    review(proxy, token)
    raise AssertionError("proxy may not review tokens yet")
except ApiException as e:
    assert e.status == 403, (e.status, e.body)
    body = json.loads(e.body)
    assert body["reason"] == "Forbidden", body
    assert 'cannot create resource "tokenreviews" in API group "authentication.k8s.io"' in body["message"], body

# The default ClusterRole, as Kubernetes has it, bound to the proxy.
# (Found in the list: the client escapes the name's colon, which Strata's paths do not decode.)
delegator = [r for r in rbac.list_cluster_role().items if r.metadata.name == "system:auth-delegator"][0]
rules = sorted((r.api_groups, r.resources, r.verbs) for r in delegator.rules)
assert rules == [
    (["authentication.k8s.io"], ["tokenreviews"], ["create"]),
    (["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
], rules
rbac.create_cluster_role_binding(
    client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name="proxy-delegates"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="system:auth-delegator"),
        subjects=[client.RbacV1Subject(kind="User", name="proxy", api_group="rbac.authorization.k8s.io")],
    )
)

# A valid ServiceAccount token: who, with the server's audience.
r = review(proxy, token)
assert r.kind == "TokenReview" and r.api_version == "authentication.k8s.io/v1", r
assert r.status.authenticated is True, r.status
assert r.status.error is None, r.status
user = r.status.user
assert user.username == "system:serviceaccount:default:robot", user
assert user.uid == sa.metadata.uid, (user.uid, sa.metadata.uid)
assert user.groups == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"], user
assert user.extra == {"authentication.kubernetes.io/credential-id": ["JTI=" + claims(token)["jti"]]}, user.extra
assert r.status.audiences == api_audiences, r.status.audiences
r = review(proxy, token, api_audiences + ["other"])
assert r.status.authenticated is True and r.status.audiences == api_audiences, r.status

# Another audience than the token's: not authenticated, and why.
r = review(proxy, token, ["elsewhere"])
assert not r.status.authenticated, r.status
assert r.status.error == 'token audiences %s is invalid for the target audiences ["elsewhere"]' % (
    "[" + " ".join(json.dumps(a) for a in api_audiences) + "]"
), r.status.error
assert not r.status.user.username, r.status.user

# A token for an audience of its own is good for that audience only.
vault = core.create_namespaced_service_account_token(
    "robot", "default", client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=["vault"]))
).status.token
r = review(proxy, vault, ["vault", "other"])
assert r.status.authenticated is True and r.status.audiences == ["vault"], r.status
r = review(proxy, vault)
assert not r.status.authenticated, r.status
assert "is invalid for the target audiences" in r.status.error, r.status

# A static token: the server's audience.
r = review(proxy, "bob-token")
assert r.status.authenticated is True, r.status
assert r.status.user.username == "bob" and r.status.user.groups == ["system:authenticated"], r.status
assert r.status.audiences == api_audiences, r.status
r = review(proxy, "no-such-token")
assert not r.status.authenticated and r.status.error == "invalid bearer token", r.status

# Once the ServiceAccount is deleted its tokens authenticate nobody.
core.delete_namespaced_service_account("robot", "default")
r = review(proxy, token)
assert not r.status.authenticated, r.status
assert r.status.error == 'serviceaccounts "robot" not found', r.status.error
# Created again under the same name (another uid): the old token still authenticates nobody.
core.create_namespaced_service_account(
    "default", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="robot"))
)
r = review(proxy, token)
assert not r.status.authenticated, r.status
assert "does not match claim" in r.status.error, r.status.error

# Taking the binding away takes the permission away.
rbac.delete_cluster_role_binding("proxy-delegates")
try:
    review(proxy, token)
    raise AssertionError("the binding is gone")
except ApiException as e:
    assert e.status == 403, (e.status, e.body)
print("OK")
"#;

#[test]
fn python_token_review() {
    if !crate::python_client::python_client_available() {
        return;
    }
    let (s, _dir) = start();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("token_review.py");
    std::fs::write(&script, TOKEN_REVIEW_SCRIPT).expect("write the script");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg(s.client_addr())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let run = run_with_timeout(&mut cmd, tmp.path(), Duration::from_secs(120));
    assert!(
        run.success() && run.stdout.lines().last() == Some("OK"),
        "the Python client script failed ({})\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
}
