//! The default ClusterRoles and ClusterRoleBindings every server has from its first start,
//! after Kubernetes' bootstrap policy for the kinds Strata serves.

use serde_json::{json, Value};

use crate::{AUTHENTICATED, MASTERS, SERVICE_ACCOUNTS, UNAUTHENTICATED};

/// The group whose members may read `/metrics` and the health endpoints (Kubernetes'
/// `system:monitoring`).
pub const MONITORING: &str = "system:monitoring";

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];

fn all_verbs() -> Vec<&'static str> {
    READ.iter().chain(WRITE.iter()).copied().collect()
}

fn cluster_role(name: &str, rules: Value, aggregate_to: Option<&str>) -> Value {
    let mut labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    if let Some(target) = aggregate_to {
        labels[format!("rbac.authorization.k8s.io/aggregate-to-{target}")] = json!("true");
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "rules": rules,
    })
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// The default ClusterRoles, then the ClusterRoleBindings, as objects to create.
pub fn defaults() -> (Vec<Value>, Vec<Value>) {
    let rbac = "rbac.authorization.k8s.io";
    let roles = vec![
        cluster_role(
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]),
            None,
        ),
        // `admin`, `edit` and `view` are aggregated: they hold the rules of every ClusterRole
        // labelled to aggregate into them, so that new types extend them by a label.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}
            ]},
            "rules": [],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "edit", "labels": {
                "kubernetes.io/bootstrapping": "rbac-defaults",
                "rbac.authorization.k8s.io/aggregate-to-admin": "true",
            }},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}
            ]},
            "rules": [],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "view", "labels": {
                "kubernetes.io/bootstrapping": "rbac-defaults",
                "rbac.authorization.k8s.io/aggregate-to-edit": "true",
            }},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}
            ]},
            "rules": [],
        }),
        cluster_role(
            "system:aggregate-to-admin",
            json!([
                {"apiGroups": [rbac], "resources": ["roles", "rolebindings"], "verbs": all_verbs()},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
            ]),
            Some("admin"),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            json!([
                {"apiGroups": [""], "resources": ["configmaps", "secrets", "serviceaccounts"], "verbs": WRITE},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": READ},
                {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            ]),
            Some("edit"),
        ),
        cluster_role(
            "system:aggregate-to-view",
            json!([
                {"apiGroups": [""], "resources": ["configmaps", "events", "serviceaccounts", "namespaces", "namespaces/status"], "verbs": READ},
            ]),
            Some("view"),
        ),
        cluster_role(
            "system:discovery",
            json!([{"nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                "/openapi/*", "/readyz", "/version", "/version/",
            ], "verbs": ["get"]}]),
            None,
        ),
        cluster_role(
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
            ]),
            None,
        ),
        // For components that delegate authentication and authorization to the API server
        // (an aggregated API server, a proxy): it may ask whom a token is and what they may do.
        cluster_role(
            "system:auth-delegator",
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
            ]),
            None,
        ),
        cluster_role(
            "system:public-info-viewer",
            json!([{"nonResourceURLs": [
                "/healthz", "/livez", "/readyz", "/version", "/version/",
            ], "verbs": ["get"]}]),
            None,
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            json!([{"nonResourceURLs": [
                "/.well-known/openid-configuration", "/openid/v1/jwks",
            ], "verbs": ["get"]}]),
            None,
        ),
        // What a metrics scraper or a health prober needs, as Kubernetes grants it.
        cluster_role(
            "system:monitoring",
            json!([{"nonResourceURLs": [
                "/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*",
                "/readyz/*", "/healthz/*",
            ], "verbs": ["get"]}]),
            None,
        ),
    ];
    let bindings = vec![
        binding("cluster-admin", "cluster-admin", &[MASTERS]),
        binding("system:discovery", "system:discovery", &[AUTHENTICATED]),
        binding("system:basic-user", "system:basic-user", &[AUTHENTICATED]),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
        binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &[SERVICE_ACCOUNTS],
        ),
        binding("system:monitoring", "system:monitoring", &[MONITORING]),
    ];
    (roles, bindings)
}
