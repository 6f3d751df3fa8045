//! RBAC authorization against the real binary: a matrix of users × verbs × scopes allowed and
//! denied through Roles, ClusterRoles and their bindings (ServiceAccounts included), Kubernetes'
//! 403 wording, dry run authorized like the real request, escalation refused, the default
//! cluster roles, and access reviews.

use crate::common::{sa_path, Http, Reply, TestServer};
use serde_json::{json, Value};

const TOKENS: &str = "admin-token,admin,1,system:masters\n\
                      alice-token,alice,2\n\
                      bob-token,bob,3\n\
                      carol-token,carol,4\n\
                      dave-token,dave,5,\"auditors\"\n";

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

fn start() -> (TestServer, tempfile::TempDir) {
    TestServer::start_with_tokens(TOKENS, &["--authorization-mode=RBAC"])
}

async fn call(h: &Http, token: &str, method: &str, path: &str, body: Option<&Value>) -> Reply {
    h.as_token(token, method, path, body).await
}

async fn admin(h: &Http, method: &str, path: &str, body: Value) -> Value {
    let r = call(h, "admin-token", method, path, Some(&body)).await;
    assert!(
        r.code() == 200 || r.code() == 201,
        "{method} {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

fn role(ns: &str, name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
           "metadata": {"name": name, "namespace": ns}, "rules": rules})
}

fn role_binding(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": name, "namespace": ns},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
           "subjects": subjects})
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

async fn setup(h: &Http) {
    for ns in ["team-a", "team-b"] {
        admin(
            h,
            "POST",
            "/api/v1/namespaces",
            json!({"metadata": {"name": ns}}),
        )
        .await;
        for name in ["x1", "x2"] {
            admin(h, "POST", &sa_path(ns), json!({"metadata": {"name": name}})).await;
        }
    }
    let ns_rbac = |ns: &str, kind: &str| format!("{RBAC}/namespaces/{ns}/{kind}");
    admin(
        h,
        "POST",
        &ns_rbac("team-a", "roles"),
        role(
            "team-a",
            "sa-reader",
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list", "watch"]}]),
        ),
    )
    .await;
    admin(
        h,
        "POST",
        &ns_rbac("team-a", "roles"),
        role(
            "team-a",
            "one-sa",
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "delete"], "resourceNames": ["x1"]}]),
        ),
    )
    .await;
    admin(
        h,
        "POST",
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "sa-creator"},
               "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create"]}]}),
    )
    .await;
    admin(
        h,
        "POST",
        &ns_rbac("team-a", "rolebindings"),
        role_binding(
            "team-a",
            "alice-reads",
            "Role",
            "sa-reader",
            json!([user("alice"), {"kind": "ServiceAccount", "name": "x2"}]),
        ),
    )
    .await;
    admin(
        h,
        "POST",
        &ns_rbac("team-a", "rolebindings"),
        role_binding("team-a", "bob-one", "Role", "one-sa", json!([user("bob")])),
    )
    .await;
    admin(
        h,
        "POST",
        &ns_rbac("team-b", "rolebindings"),
        role_binding(
            "team-b",
            "bob-creates",
            "ClusterRole",
            "sa-creator",
            json!([user("bob")]),
        ),
    )
    .await;
    admin(
        h,
        "POST",
        &format!("{RBAC}/clusterrolebindings"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "auditors-view"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "auditors"}]}),
    )
    .await;
}

#[tokio::test]
async fn a_matrix_of_subjects_verbs_and_scopes() {
    let (s, _dir) = start();
    let h = s.http();
    setup(&h).await;
    let new_sa = json!({"metadata": {"name": "new"}});
    let sa = |ns: &str, name: &str| format!("{}/{name}", sa_path(ns));
    // (token, method, path, body, allowed)
    let cases: Vec<(&str, &str, String, Option<Value>, bool)> = vec![
        // alice: a Role bound in team-a, read only.
        ("alice-token", "GET", sa_path("team-a"), None, true),
        ("alice-token", "GET", sa("team-a", "x1"), None, true),
        (
            "alice-token",
            "GET",
            format!("{}?watch=true&timeoutSeconds=1", sa_path("team-a")),
            None,
            true,
        ),
        ("alice-token", "GET", sa_path("team-b"), None, false),
        (
            "alice-token",
            "GET",
            "/api/v1/serviceaccounts".into(),
            None,
            false,
        ),
        (
            "alice-token",
            "POST",
            sa_path("team-a"),
            Some(new_sa.clone()),
            false,
        ),
        (
            "alice-token",
            "POST",
            format!("{}?dryRun=All", sa_path("team-a")),
            Some(new_sa.clone()),
            false,
        ),
        (
            "alice-token",
            "PATCH",
            sa("team-a", "x1"),
            Some(json!({})),
            false,
        ),
        ("alice-token", "DELETE", sa("team-a", "x1"), None, false),
        ("alice-token", "DELETE", sa_path("team-a"), None, false),
        (
            "alice-token",
            "POST",
            format!("{}/token", sa("team-a", "x1")),
            Some(json!({})),
            false,
        ),
        (
            "alice-token",
            "GET",
            "/api/v1/namespaces".into(),
            None,
            false,
        ),
        // Every authenticated user may discover.
        ("alice-token", "GET", "/api".into(), None, true),
        ("alice-token", "GET", "/apis".into(), None, true),
        // bob: a ClusterRole bound in team-b only, and a rule for one name in team-a.
        (
            "bob-token",
            "POST",
            sa_path("team-b"),
            Some(new_sa.clone()),
            true,
        ),
        (
            "bob-token",
            "POST",
            sa_path("team-a"),
            Some(new_sa.clone()),
            false,
        ),
        ("bob-token", "GET", sa("team-a", "x1"), None, true),
        ("bob-token", "GET", sa("team-a", "x2"), None, false),
        ("bob-token", "GET", sa_path("team-a"), None, false),
        (
            "bob-token",
            "GET",
            format!("{}?fieldSelector=metadata.name%3Dx1", sa_path("team-a")),
            None,
            false,
        ),
        // dave: the aggregated `view` through a group, everywhere.
        (
            "dave-token",
            "GET",
            "/api/v1/serviceaccounts".into(),
            None,
            true,
        ),
        ("dave-token", "GET", sa("team-b", "x2"), None, true),
        ("dave-token", "GET", "/api/v1/namespaces".into(), None, true),
        (
            "dave-token",
            "POST",
            sa_path("team-b"),
            Some(json!({"metadata": {"name": "d"}})),
            false,
        ),
        ("dave-token", "DELETE", sa("team-b", "x2"), None, false),
        // carol: nothing bound.
        ("carol-token", "GET", sa("team-a", "x1"), None, false),
        (
            "carol-token",
            "GET",
            format!("{RBAC}/clusterroles"),
            None,
            false,
        ),
    ];
    for (token, method, path, body, allowed) in &cases {
        let r = call(&h, token, method, path, body.as_ref()).await;
        if *allowed {
            assert!(
                r.code() < 400,
                "{token} {method} {path}: {}",
                String::from_utf8_lossy(&r.body)
            );
        } else {
            assert_eq!(
                r.code(),
                403,
                "{token} {method} {path}: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert_eq!(r.json()["reason"], "Forbidden");
        }
    }
    // bob's named rule also covers deleting that one.
    let r = call(&h, "bob-token", "DELETE", &sa("team-a", "x1"), None).await;
    assert_eq!(r.code(), 200);

    // Kubernetes' wording, for a collection, a name, and the cluster scope.
    let m = |r: Reply| r.json()["message"].as_str().unwrap().to_string();
    assert_eq!(
        m(call(&h, "alice-token", "GET", &sa_path("team-b"), None).await),
        "serviceaccounts is forbidden: User \"alice\" cannot list resource \"serviceaccounts\" in API group \"\" in the namespace \"team-b\""
    );
    assert_eq!(
        m(call(&h, "bob-token", "GET", &sa("team-a", "x2"), None).await),
        "serviceaccounts \"x2\" is forbidden: User \"bob\" cannot get resource \"serviceaccounts\" in API group \"\" in the namespace \"team-a\""
    );
    assert_eq!(
        m(call(&h, "alice-token", "GET", "/api/v1/serviceaccounts", None).await),
        "serviceaccounts is forbidden: User \"alice\" cannot list resource \"serviceaccounts\" in API group \"\" at the cluster scope"
    );
    let r = call(&h, "carol-token", "GET", "/metrics", None).await;
    assert_eq!(r.code(), 403);
    assert_eq!(
        m(r),
        "forbidden: User \"carol\" cannot get path \"/metrics\""
    );

    // A ServiceAccount subject: x2's token reads team-a.
    let token = admin(
        &h,
        "POST",
        &format!("{}/token", sa("team-a", "x2")),
        json!({}),
    )
    .await;
    let token = token["status"]["token"].as_str().unwrap().to_string();
    assert_eq!(
        call(&h, &token, "GET", &sa_path("team-a"), None)
            .await
            .code(),
        200
    );
    assert_eq!(
        call(&h, &token, "GET", &sa_path("team-b"), None)
            .await
            .code(),
        403
    );

    // Permissions follow the bindings as they change.
    let binding = format!("{RBAC}/namespaces/team-a/rolebindings/alice-reads");
    admin(&h, "DELETE", &binding, json!({})).await;
    let gone = async {
        for _ in 0..50 {
            if call(&h, "alice-token", "GET", &sa_path("team-a"), None)
                .await
                .code()
                == 403
            {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    };
    assert!(
        gone.await,
        "alice still reads team-a after her binding was deleted"
    );
}

#[tokio::test]
async fn the_default_cluster_roles_exist_and_masters_do_everything() {
    let (s, _dir) = start();
    let h = s.http();
    for name in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
    ] {
        let r = call(
            &h,
            "admin-token",
            "GET",
            &format!("{RBAC}/clusterroles/{name}"),
            None,
        )
        .await;
        assert_eq!(
            r.code(),
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = call(
        &h,
        "admin-token",
        "GET",
        &format!("{RBAC}/clusterrolebindings/cluster-admin"),
        None,
    )
    .await;
    assert_eq!(r.json()["subjects"][0]["name"], "system:masters");
}

#[tokio::test]
async fn granting_what_one_does_not_hold_is_refused() {
    let (s, _dir) = start();
    let h = s.http();
    setup(&h).await;
    // alice may manage roles and bindings in team-a, and holds sa-reader there.
    admin(
        &h,
        "POST",
        &format!("{RBAC}/namespaces/team-a/roles"),
        role(
            "team-a",
            "role-maker",
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "patch", "get"]}]),
        ),
    )
    .await;
    admin(
        &h,
        "POST",
        &format!("{RBAC}/namespaces/team-a/rolebindings"),
        role_binding(
            "team-a",
            "alice-makes",
            "Role",
            "role-maker",
            json!([user("alice")]),
        ),
    )
    .await;
    let roles = format!("{RBAC}/namespaces/team-a/roles");
    let bindings = format!("{RBAC}/namespaces/team-a/rolebindings");
    // What she holds she may grant.
    let ok = role(
        "team-a",
        "readers",
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list"]}]),
    );
    assert_eq!(
        call(&h, "alice-token", "POST", &roles, Some(&ok))
            .await
            .code(),
        201
    );
    let ok = role_binding(
        "team-a",
        "carol-reads",
        "Role",
        "readers",
        json!([user("carol")]),
    );
    assert_eq!(
        call(&h, "alice-token", "POST", &bindings, Some(&ok))
            .await
            .code(),
        201
    );
    assert_eq!(
        call(&h, "carol-token", "GET", &sa_path("team-a"), None)
            .await
            .code(),
        200
    );
    // More than she holds: refused, dry run too.
    let more = role(
        "team-a",
        "deleters",
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "delete"]}]),
    );
    for path in [roles.clone(), format!("{roles}?dryRun=All")] {
        let r = call(&h, "alice-token", "POST", &path, Some(&more)).await;
        assert_eq!(r.code(), 403, "{}", String::from_utf8_lossy(&r.body));
        let msg = r.json()["message"].as_str().unwrap().to_string();
        assert!(
            msg.starts_with(
                "roles.rbac.authorization.k8s.io \"deleters\" is forbidden: user \"alice\""
            ),
            "{msg}"
        );
        assert!(
            msg.contains("is attempting to grant RBAC permissions not currently held"),
            "{msg}"
        );
        assert!(msg.contains("Verbs:[\"get\" \"delete\"]"), "{msg}");
    }
    // Widening a role she may update, by patch: refused.
    let r = h
        .send(
            "PATCH",
            &format!("{roles}/readers"),
            Some(br#"{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}"#),
            &[
                ("authorization", "Bearer alice-token"),
                ("content-type", "application/merge-patch+json"),
            ],
        )
        .await;
    assert_eq!(r.code(), 403, "{}", String::from_utf8_lossy(&r.body));
    // Binding a role she does not hold: refused; with `bind` on it: allowed.
    let admin_binding = role_binding(
        "team-a",
        "carol-admin",
        "ClusterRole",
        "admin",
        json!([user("carol")]),
    );
    assert_eq!(
        call(&h, "alice-token", "POST", &bindings, Some(&admin_binding))
            .await
            .code(),
        403
    );
    admin(
        &h,
        "POST",
        &roles,
        role(
            "team-a",
            "binder",
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["admin"]}]),
        ),
    )
    .await;
    admin(
        &h,
        "POST",
        &bindings,
        role_binding(
            "team-a",
            "alice-binds",
            "Role",
            "binder",
            json!([user("alice")]),
        ),
    )
    .await;
    let r = call(&h, "alice-token", "POST", &bindings, Some(&admin_binding)).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn access_reviews_answer_for_oneself_and_for_others() {
    let (s, _dir) = start();
    let h = s.http();
    setup(&h).await;
    let ssar = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
               "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "resource": "serviceaccounts"}}})
    };
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let r = call(
        &h,
        "alice-token",
        "POST",
        path,
        Some(&ssar("list", "team-a")),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["kind"], "SelfSubjectAccessReview");
    assert_eq!(r.json()["status"]["allowed"], true);
    let r = call(
        &h,
        "alice-token",
        "POST",
        path,
        Some(&ssar("delete", "team-a")),
    )
    .await;
    assert_eq!(r.json()["status"]["allowed"], false);
    let r = call(
        &h,
        "alice-token",
        "POST",
        path,
        Some(&json!({"spec": {"nonResourceAttributes": {"path": "/api", "verb": "get"}}})),
    )
    .await;
    assert_eq!(r.json()["status"]["allowed"], true);
    let r = call(&h, "alice-token", "POST", path, Some(&json!({"spec": {}}))).await;
    assert_eq!(r.code(), 422);

    // About someone else: only who may create SubjectAccessReviews may ask.
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": {"user": "bob", "resourceAttributes": {"namespace": "team-b", "verb": "create", "resource": "serviceaccounts"}}});
    let sar_path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let r = call(&h, "admin-token", "POST", sar_path, Some(&sar)).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"]["allowed"], true);
    let mut other = sar.clone();
    other["spec"]["resourceAttributes"]["namespace"] = json!("team-a");
    assert_eq!(
        call(&h, "admin-token", "POST", sar_path, Some(&other))
            .await
            .json()["status"]["allowed"],
        false
    );
    assert_eq!(
        call(&h, "alice-token", "POST", sar_path, Some(&sar))
            .await
            .code(),
        403
    );
    let mut nobody = sar.clone();
    nobody["spec"]["user"] = json!("");
    assert_eq!(
        call(&h, "admin-token", "POST", sar_path, Some(&nobody))
            .await
            .code(),
        422
    );
}

#[tokio::test]
async fn impersonation_needs_permission_and_then_acts_as_the_other_user() {
    let (s, _dir) = start();
    let h = s.http();
    setup(&h).await;
    let as_user = |token: &'static str, who: &'static str, path: String| {
        let h = h.clone();
        async move {
            let auth = format!("Bearer {token}");
            h.send(
                "GET",
                &path,
                None,
                &[("authorization", auth.as_str()), ("impersonate-user", who)],
            )
            .await
        }
    };
    // The admin (system:masters) may impersonate; the request is then alice's.
    assert_eq!(
        as_user("admin-token", "alice", sa_path("team-a"))
            .await
            .code(),
        200
    );
    let r = as_user("admin-token", "alice", sa_path("team-b")).await;
    assert_eq!(r.code(), 403);
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("User \"alice\""));
    let me = h
        .send(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(b"{}"),
            &[
                ("authorization", "Bearer admin-token"),
                ("impersonate-user", "alice"),
                ("impersonate-group", "auditors"),
                ("content-type", "application/json"),
            ],
        )
        .await
        .json();
    assert_eq!(me["status"]["userInfo"]["username"], "alice");
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        json!(["auditors", "system:authenticated"])
    );
    // alice may not impersonate anyone.
    let r = as_user("alice-token", "bob", sa_path("team-a")).await;
    assert_eq!(r.code(), 403);
    assert_eq!(
        r.json()["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
}

#[tokio::test]
async fn forced_deletion_also_needs_unsafe_delete_ignore_read_errors() {
    let (s, _dir) = TestServer::start_with_tokens(
        TOKENS,
        &[
            "--authorization-mode=RBAC",
            "--feature-gates",
            "AllowUnsafeMalformedObjectDeletion=true",
        ],
    );
    let h = s.http();
    setup(&h).await;
    // bob may delete x1 in team-a (one-sa), but not force it out.
    let force = json!({"ignoreStoreReadErrorWithClusterBreakingPotential": true});
    let path = format!("{}/x1", sa_path("team-a"));
    let r = call(&h, "bob-token", "DELETE", &path, Some(&force)).await;
    assert_eq!(r.code(), 403, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()["message"],
        "serviceaccounts \"x1\" is forbidden: User \"bob\" cannot unsafe-delete-ignore-read-errors resource \"serviceaccounts\" in API group \"\" in the namespace \"team-a\""
    );
    // With the verb granted, the request reaches the store: x1 is readable, so it is refused
    // as Kubernetes refuses it (the option is for unreadable objects only).
    admin(
        &h,
        "POST",
        &format!("{RBAC}/namespaces/team-a/roles"),
        role(
            "team-a",
            "unsafe",
            json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["unsafe-delete-ignore-read-errors"]}]),
        ),
    )
    .await;
    admin(
        &h,
        "POST",
        &format!("{RBAC}/namespaces/team-a/rolebindings"),
        role_binding(
            "team-a",
            "bob-unsafe",
            "Role",
            "unsafe",
            json!([user("bob")]),
        ),
    )
    .await;
    let r = call(&h, "bob-token", "DELETE", &path, Some(&force)).await;
    assert_eq!(r.code(), 422, "{}", String::from_utf8_lossy(&r.body));
    // Without delete itself, the unsafe verb alone does not do.
    let r = call(&h, "carol-token", "DELETE", &path, Some(&force)).await;
    assert_eq!(r.code(), 403);
}

/// As in Kubernetes: `edit` writes ConfigMaps and Secrets and reads Secrets; `view` reads
/// ConfigMaps and Events but not Secrets.
#[tokio::test]
async fn edit_and_view_cover_configmaps_secrets_and_events() {
    let (s, _dir) = start();
    let h = s.http();
    setup(&h).await;
    for (name, role, who) in [
        ("bob-edits", "edit", "bob"),
        ("carol-views", "view", "carol"),
    ] {
        admin(
            &h,
            "POST",
            &format!("{RBAC}/namespaces/team-a/rolebindings"),
            role_binding("team-a", name, "ClusterRole", role, json!([user(who)])),
        )
        .await;
    }
    let cm = json!({"metadata": {"name": "settings"}, "data": {"k": "v"}});
    let secret = json!({"metadata": {"name": "creds"}, "stringData": {"password": "p"}});
    let core = "/api/v1/namespaces/team-a";
    let r = call(
        &h,
        "bob-token",
        "POST",
        &format!("{core}/configmaps"),
        Some(&cm),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let r = call(
        &h,
        "bob-token",
        "POST",
        &format!("{core}/secrets"),
        Some(&secret),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let r = call(
        &h,
        "bob-token",
        "GET",
        &format!("{core}/secrets/creds"),
        None,
    )
    .await;
    assert_eq!(r.code(), 200);
    for path in ["configmaps/settings", "configmaps", "events"] {
        let r = call(&h, "carol-token", "GET", &format!("{core}/{path}"), None).await;
        assert_eq!(r.code(), 200, "view reads {path}");
    }
    for path in ["secrets/creds", "secrets"] {
        let r = call(&h, "carol-token", "GET", &format!("{core}/{path}"), None).await;
        assert_eq!(r.code(), 403, "view does not read {path}");
    }
    let r = call(
        &h,
        "carol-token",
        "POST",
        &format!("{core}/configmaps"),
        Some(&cm),
    )
    .await;
    assert_eq!(r.code(), 403);
}
