//! The RBAC kinds (Role, ClusterRole, RoleBinding, ClusterRoleBinding of
//! rbac.authorization.k8s.io/v1) as the generic registry serves them, over HTTP: discovery and
//! OpenAPI, the lifecycle and watch of each kind in JSON, protobuf bodies checked with an
//! independent build of Kubernetes' protos (`k8s-pb`), Kubernetes' validation messages, the
//! immutable `roleRef`, strategic merge and server-side apply driven by the schema, and kubectl's
//! `create role|clusterrole|rolebinding|clusterrolebinding`. Authorization decided by these
//! objects is the `rbac` module, not this one.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::{assert_status, run_with_timeout, rv_of, Finished, TestServer};
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{json, Value};

const GROUP: &str = "rbac.authorization.k8s.io";
const API_VERSION: &str = "rbac.authorization.k8s.io/v1";
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const K8S_PB: &str = "application/vnd.kubernetes.protobuf";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

/// One RBAC kind: its names and scope.
struct Kind {
    kind: &'static str,
    resource: &'static str,
    singular: &'static str,
    namespaced: bool,
}

const KINDS: [Kind; 4] = [
    Kind {
        kind: "Role",
        resource: "roles",
        singular: "role",
        namespaced: true,
    },
    Kind {
        kind: "ClusterRole",
        resource: "clusterroles",
        singular: "clusterrole",
        namespaced: false,
    },
    Kind {
        kind: "RoleBinding",
        resource: "rolebindings",
        singular: "rolebinding",
        namespaced: true,
    },
    Kind {
        kind: "ClusterRoleBinding",
        resource: "clusterrolebindings",
        singular: "clusterrolebinding",
        namespaced: false,
    },
];

impl Kind {
    /// The collection path (in namespace `default` for the namespaced kinds).
    fn collection(&self) -> String {
        if self.namespaced {
            format!("{RBAC}/namespaces/default/{}", self.resource)
        } else {
            format!("{RBAC}/{}", self.resource)
        }
    }

    fn binding(&self) -> bool {
        self.kind.ends_with("Binding")
    }

    /// A valid object of this kind.
    fn sample(&self, name: &str) -> Value {
        let mut v =
            json!({"apiVersion": API_VERSION, "kind": self.kind, "metadata": {"name": name}});
        if self.binding() {
            v["roleRef"] = json!({"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"});
            v["subjects"] = json!([{"kind": "User", "apiGroup": GROUP, "name": "alice"}]);
        } else {
            v["rules"] =
                json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]}]);
        }
        v
    }
}

fn role_path(name: &str) -> String {
    format!("{}/{name}", KINDS[0].collection())
}

fn role_binding_path(name: &str) -> String {
    format!("{}/{name}", KINDS[2].collection())
}

fn body_text(r: &crate::common::Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test]
async fn discovery_and_openapi_describe_the_group() {
    let s = TestServer::start();
    let groups = s.get("/apis").await.json();
    assert_eq!(groups["kind"], "APIGroupList");
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == GROUP)
        .unwrap_or_else(|| panic!("{GROUP} not in {groups}"));
    assert_eq!(group["versions"][0]["groupVersion"], API_VERSION);
    assert_eq!(group["preferredVersion"]["version"], "v1");

    let all_verbs = {
        let mut v = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        v.sort_unstable();
        v
    };
    let sorted = |verbs: &Value| {
        let mut v: Vec<String> = verbs
            .as_array()
            .unwrap_or_else(|| panic!("no verbs in {verbs}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        v.sort_unstable();
        v
    };

    let list = s.get(RBAC).await.json();
    assert_eq!(list["kind"], "APIResourceList");
    assert_eq!(list["groupVersion"], API_VERSION);
    for k in &KINDS {
        let r = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == k.resource)
            .unwrap_or_else(|| panic!("{} not in {list}", k.resource));
        assert_eq!(r["kind"], k.kind, "{r}");
        assert_eq!(r["namespaced"], k.namespaced, "{r}");
        assert_eq!(r["singularName"], k.singular, "{r}");
        assert_eq!(sorted(&r["verbs"]), all_verbs, "{r}");
    }

    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let r = s
        .send("GET", "/apis", None, &[("accept", aggregated)])
        .await;
    assert_eq!(r.header("content-type"), aggregated);
    let v = r.json();
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    let group = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == GROUP)
        .unwrap_or_else(|| panic!("{GROUP} not in {v}"));
    assert_eq!(group["versions"][0]["version"], "v1");
    let resources = group["versions"][0]["resources"].as_array().unwrap();
    assert_eq!(resources.len(), 4, "{group}");
    for k in &KINDS {
        let r = resources
            .iter()
            .find(|r| r["resource"] == k.resource)
            .unwrap_or_else(|| panic!("{} not in {group}", k.resource));
        assert_eq!(r["responseKind"]["kind"], k.kind, "{r}");
        assert_eq!(
            r["scope"],
            if k.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            },
            "{r}"
        );
        assert_eq!(sorted(&r["verbs"]), all_verbs, "{r}");
    }

    // OpenAPI v3: the group's document carries the schemas, atomic lists included.
    let index = s.get("/openapi/v3").await.json();
    let url = index["paths"]["apis/rbac.authorization.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("no RBAC document in {index}"))
        .to_string();
    let doc = s.get(&url).await.json();
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["io.k8s.api.rbac.v1.Role"]["properties"]["rules"]["x-kubernetes-list-type"],
        "atomic"
    );
    assert_eq!(
        schemas["io.k8s.api.rbac.v1.RoleRef"]["x-kubernetes-map-type"],
        "atomic"
    );
    assert!(schemas["io.k8s.api.rbac.v1.ClusterRole"]["properties"]["aggregationRule"].is_object());
    assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"].is_object());
    assert!(
        doc["paths"]["/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}"]
            ["patch"]
            .is_object()
    );
}

/// Create, get, update, list, watch and delete of one kind in JSON.
async fn lifecycle(s: &TestServer, k: &Kind) {
    let base = k.collection();
    let name = format!("life-{}", k.singular);
    let path = format!("{base}/{name}");
    let list = s.get(&base).await.json();
    assert_eq!(list["kind"], format!("{}List", k.kind), "{list}");
    assert_eq!(list["apiVersion"], API_VERSION, "{list}");
    let mut watch = s
        .watch(&format!(
            "{base}?watch=true&resourceVersion={}",
            rv_of(&list)
        ))
        .await;

    let r = s.post_json(&base, &k.sample(&name)).await;
    assert_eq!(r.code(), 201, "create {}: {}", k.kind, body_text(&r));
    let created = r.json();
    assert_eq!(created["kind"], k.kind);
    assert_eq!(created["apiVersion"], API_VERSION);
    assert!(created["metadata"]["uid"].is_string(), "{created}");
    if k.namespaced {
        assert_eq!(created["metadata"]["namespace"], "default");
    } else {
        assert!(created["metadata"].get("namespace").is_none(), "{created}");
    }
    let event = watch.next_change().await;
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_eq!(event["object"]["metadata"]["name"], name.as_str());
    assert_eq!(event["object"]["kind"], k.kind);
    assert_eq!(s.get(&path).await.json(), created);

    let mut changed = created.clone();
    changed["metadata"]["labels"] = json!({"step": "two"});
    if k.binding() {
        changed["subjects"]
            .as_array_mut()
            .unwrap()
            .push(json!({"kind": "Group", "apiGroup": GROUP, "name": "ops"}));
    } else {
        changed["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["list"]}));
    }
    let r = s.put_json(&path, &changed).await;
    assert_eq!(r.code(), 200, "update {}: {}", k.kind, body_text(&r));
    let updated = r.json();
    assert!(rv_of(&updated) > rv_of(&created));
    let list_field = if k.binding() { "subjects" } else { "rules" };
    assert_eq!(updated[list_field].as_array().unwrap().len(), 2);
    let event = watch.next_change().await;
    assert_eq!(event["type"], "MODIFIED", "{event}");
    assert_eq!(event["object"]["metadata"]["labels"]["step"], "two");

    let list = s
        .get(&format!("{base}?labelSelector=step%3Dtwo"))
        .await
        .json();
    assert_eq!(crate::common::item_names(&list), [name.as_str()], "{list}");

    let r = s.delete(&path).await;
    assert_eq!(r.code(), 200, "delete {}: {}", k.kind, body_text(&r));
    let event = watch.next_change().await;
    assert_eq!(event["type"], "DELETED", "{event}");
    assert_status(&s.get(&path).await, 404, "NotFound");
}

#[tokio::test]
async fn each_kind_has_the_full_lifecycle_and_watch() {
    let s = TestServer::start();
    for k in &KINDS {
        crate::common::within(Duration::from_secs(60), lifecycle(&s, k)).await;
    }

    // deletecollection, by label.
    let base = KINDS[0].collection();
    for name in ["batch-a", "batch-b", "kept"] {
        let mut role = KINDS[0].sample(name);
        if name != "kept" {
            role["metadata"]["labels"] = json!({"batch": "x"});
        }
        assert_eq!(s.post_json(&base, &role).await.code(), 201);
    }
    let r = s
        .send(
            "DELETE",
            &format!("{base}?labelSelector=batch%3Dx"),
            None,
            &[],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body_text(&r));
    assert_eq!(
        crate::common::item_names(&s.get(&base).await.json()),
        ["kept"],
        "deletecollection"
    );
}

fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let u = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(API_VERSION.into()),
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

/// Opens an enveloped answer: (apiVersion, kind, message bytes).
fn open(body: &[u8]) -> (String, String, Vec<u8>) {
    let rest = body
        .strip_prefix(b"k8s\0")
        .unwrap_or_else(|| panic!("no k8s\\0 prefix: {:?}", String::from_utf8_lossy(body)));
    let u = Unknown::decode(rest).expect("an Unknown envelope");
    let tm = u.type_meta.unwrap_or_default();
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        u.raw.unwrap_or_default(),
    )
}

fn pb_meta(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    })
}

/// Sends a protobuf body and asks for protobuf back.
async fn send_pb(s: &TestServer, method: &str, path: &str, body: &[u8]) -> crate::common::Reply {
    s.send(
        method,
        path,
        Some(body),
        &[("content-type", K8S_PB), ("accept", K8S_PB)],
    )
    .await
}

#[tokio::test]
async fn protobuf_roles_and_bindings_cross_with_k8s_pb() {
    let s = TestServer::start();
    // A Role as kubectl >= 1.32 posts it: protobuf in, protobuf out.
    let role = rbac::Role {
        metadata: pb_meta("pb-reader"),
        rules: vec![rbac::PolicyRule {
            verbs: vec!["get".into(), "list".into()],
            api_groups: vec![String::new()],
            resources: vec!["serviceaccounts".into()],
            resource_names: vec!["robot".into()],
            non_resource_ur_ls: Vec::new(),
        }],
    };
    let r = send_pb(
        &s,
        "POST",
        &KINDS[0].collection(),
        &envelope("Role", role.encode_to_vec()),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    assert_eq!(r.header("content-type"), K8S_PB);
    let (api_version, kind, raw) = open(&r.body);
    assert_eq!((api_version.as_str(), kind.as_str()), (API_VERSION, "Role"));
    let created = rbac::Role::decode(raw.as_slice()).expect("a Role");
    let m = created.metadata.clone().unwrap_or_default();
    assert_eq!(m.namespace.as_deref(), Some("default"));
    assert!(m.uid.is_some_and(|u| !u.is_empty()));
    assert_eq!(created.rules, role.rules);

    // get in protobuf; the JSON view agrees.
    let r = s
        .send("GET", &role_path("pb-reader"), None, &[("accept", K8S_PB)])
        .await;
    let (_, kind, raw) = open(&r.body);
    assert_eq!(kind, "Role");
    assert_eq!(rbac::Role::decode(raw.as_slice()).unwrap(), created);
    let json = s.get(&role_path("pb-reader")).await.json();
    assert_eq!(
        json["rules"],
        json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["serviceaccounts"],
                "resourceNames": ["robot"]}])
    );

    // A RoleBinding whose User subject names no group: defaulted as Kubernetes does.
    let binding = rbac::RoleBinding {
        metadata: pb_meta("pb-readers"),
        subjects: vec![
            rbac::Subject {
                kind: Some("User".into()),
                name: Some("alice".into()),
                ..Default::default()
            },
            rbac::Subject {
                kind: Some("ServiceAccount".into()),
                name: Some("robot".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
        ],
        role_ref: Some(rbac::RoleRef {
            api_group: Some(GROUP.into()),
            kind: Some("Role".into()),
            name: Some("pb-reader".into()),
        }),
    };
    let r = send_pb(
        &s,
        "POST",
        &KINDS[2].collection(),
        &envelope("RoleBinding", binding.encode_to_vec()),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    let (api_version, kind, raw) = open(&r.body);
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        (API_VERSION, "RoleBinding")
    );
    let created = rbac::RoleBinding::decode(raw.as_slice()).expect("a RoleBinding");
    assert_eq!(created.role_ref, binding.role_ref);
    assert_eq!(created.subjects[0].api_group.as_deref(), Some(GROUP));
    assert_eq!(created.subjects[1].namespace.as_deref(), Some("default"));
    let r = s
        .send(
            "GET",
            &role_binding_path("pb-readers"),
            None,
            &[("accept", K8S_PB)],
        )
        .await;
    let (_, kind, raw) = open(&r.body);
    assert_eq!(kind, "RoleBinding");
    assert_eq!(rbac::RoleBinding::decode(raw.as_slice()).unwrap(), created);

    // Lists in protobuf are the group's list kinds.
    let r = s
        .send("GET", &KINDS[2].collection(), None, &[("accept", K8S_PB)])
        .await;
    let (api_version, kind, raw) = open(&r.body);
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        (API_VERSION, "RoleBindingList")
    );
    let list = rbac::RoleBindingList::decode(raw.as_slice()).unwrap();
    assert_eq!(list.items, vec![created]);

    // A ClusterRole without aggregationRule stays without one through protobuf.
    let cluster_role = rbac::ClusterRole {
        metadata: pb_meta("pb-healthz"),
        rules: vec![rbac::PolicyRule {
            verbs: vec!["get".into()],
            non_resource_ur_ls: vec!["/healthz".into()],
            ..Default::default()
        }],
        aggregation_rule: None,
    };
    let r = send_pb(
        &s,
        "POST",
        &KINDS[1].collection(),
        &envelope("ClusterRole", cluster_role.encode_to_vec()),
    )
    .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    let json = s
        .get(&format!("{RBAC}/clusterroles/pb-healthz"))
        .await
        .json();
    assert!(json.get("aggregationRule").is_none(), "{json}");
    let r = s
        .send("GET", &KINDS[1].collection(), None, &[("accept", K8S_PB)])
        .await;
    let (_, kind, raw) = open(&r.body);
    assert_eq!(kind, "ClusterRoleList");
    let list = rbac::ClusterRoleList::decode(raw.as_slice()).unwrap();
    assert!(list
        .items
        .iter()
        .any(|c| c.metadata.as_ref().and_then(|m| m.name.as_deref()) == Some("pb-healthz")));
}

/// Posts `body` to `path` and asserts a 422 whose message is `message`.
async fn assert_invalid(s: &TestServer, path: &str, body: Value, message: &str) {
    let r = s.post_json(path, &body).await;
    assert_status(&r, 422, "Invalid");
    assert_eq!(r.json()["message"], message, "{body}");
}

#[tokio::test]
async fn validation_follows_kubernetes() {
    let s = TestServer::start();
    let roles = KINDS[0].collection();
    let cluster_roles = KINDS[1].collection();
    let bindings = KINDS[2].collection();
    let cluster_bindings = KINDS[3].collection();
    let with = |mut v: Value, patch: Value| {
        crate::common::merge(&mut v, &patch);
        v
    };

    assert_invalid(
        &s,
        &roles,
        with(
            KINDS[0].sample("no-verbs"),
            json!({"rules": [{"apiGroups": [""], "resources": ["serviceaccounts"]}]}),
        ),
        "Role.rbac.authorization.k8s.io \"no-verbs\" is invalid: rules[0].verbs: Required \
         value: verbs must contain at least one value",
    )
    .await;
    assert_invalid(
        &s,
        &roles,
        with(
            KINDS[0].sample("urls"),
            json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
        ),
        "Role.rbac.authorization.k8s.io \"urls\" is invalid: rules[0].nonResourceURLs: \
         Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource \
         URLs",
    )
    .await;
    assert_invalid(
        &s,
        &roles,
        with(
            KINDS[0].sample("half"),
            json!({"rules": [{"verbs": ["get"]}]}),
        ),
        "Role.rbac.authorization.k8s.io \"half\" is invalid: [rules[0].apiGroups: Required \
         value: resource rules must supply at least one api group, rules[0].resources: \
         Required value: resource rules must supply at least one resource]",
    )
    .await;
    assert_invalid(
        &s,
        &cluster_roles,
        with(
            KINDS[1].sample("both"),
            json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"],
                              "apiGroups": [""], "resources": ["serviceaccounts"]}]}),
        ),
        "ClusterRole.rbac.authorization.k8s.io \"both\" is invalid: rules[0].nonResourceURLs: \
         Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources \
         and non-resource URLs",
    )
    .await;
    assert_invalid(
        &s,
        &cluster_roles,
        with(KINDS[1].sample("agg"), json!({"aggregationRule": {}})),
        "ClusterRole.rbac.authorization.k8s.io \"agg\" is invalid: \
         aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector \
         required if aggregationRule is non-nil",
    )
    .await;
    // A ClusterRole may hold non-resource rules.
    let healthz = with(
        KINDS[1].sample("healthz"),
        json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
    );
    assert_eq!(s.post_json(&cluster_roles, &healthz).await.code(), 201);

    assert_invalid(
        &s,
        &bindings,
        with(
            KINDS[2].sample("pod-ref"),
            json!({"roleRef": {"kind": "Pod"}}),
        ),
        "RoleBinding.rbac.authorization.k8s.io \"pod-ref\" is invalid: roleRef.kind: \
         Unsupported value: \"Pod\": supported values: \"Role\", \"ClusterRole\"",
    )
    .await;
    assert_invalid(
        &s,
        &bindings,
        with(
            KINDS[2].sample("other-group"),
            json!({"roleRef": {"apiGroup": "example.com"}}),
        ),
        "RoleBinding.rbac.authorization.k8s.io \"other-group\" is invalid: roleRef.apiGroup: \
         Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\"",
    )
    .await;
    assert_invalid(
        &s,
        &bindings,
        json!({"metadata": {"name": "no-ref"}, "subjects": []}),
        "RoleBinding.rbac.authorization.k8s.io \"no-ref\" is invalid: [roleRef.kind: \
         Unsupported value: \"\": supported values: \"Role\", \"ClusterRole\", roleRef.name: \
         Required value]",
    )
    .await;
    assert_invalid(
        &s,
        &cluster_bindings,
        with(
            KINDS[3].sample("role-ref"),
            json!({"roleRef": {"kind": "Role"}}),
        ),
        "ClusterRoleBinding.rbac.authorization.k8s.io \"role-ref\" is invalid: roleRef.kind: \
         Unsupported value: \"Role\": supported values: \"ClusterRole\"",
    )
    .await;
    assert_invalid(
        &s,
        &bindings,
        with(
            KINDS[2].sample("robot"),
            json!({"subjects": [{"kind": "Robot", "name": "r2"}]}),
        ),
        "RoleBinding.rbac.authorization.k8s.io \"robot\" is invalid: subjects[0].kind: \
         Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
    )
    .await;
    assert_invalid(
        &s,
        &bindings,
        with(
            KINDS[2].sample("nameless"),
            json!({"subjects": [{"kind": "ServiceAccount"}]}),
        ),
        "RoleBinding.rbac.authorization.k8s.io \"nameless\" is invalid: subjects[0].name: \
         Required value",
    )
    .await;
    // A ServiceAccount subject of a ClusterRoleBinding needs a namespace; in a RoleBinding it
    // may leave it out.
    let sa = json!({"subjects": [{"kind": "ServiceAccount", "name": "robot"}]});
    assert_invalid(
        &s,
        &cluster_bindings,
        with(KINDS[3].sample("sa"), sa.clone()),
        "ClusterRoleBinding.rbac.authorization.k8s.io \"sa\" is invalid: \
         subjects[0].namespace: Required value",
    )
    .await;
    let r = s
        .post_json(&bindings, &with(KINDS[2].sample("sa"), sa))
        .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    // The causes name the fields.
    let r = s
        .post_json(
            &bindings,
            &with(
                KINDS[2].sample("causes"),
                json!({"roleRef": {"kind": "Pod"}}),
            ),
        )
        .await;
    let cause = &r.json()["details"]["causes"][0];
    assert_eq!(cause["field"], "roleRef.kind", "{cause}");
    assert_eq!(cause["reason"], "FieldValueNotSupported", "{cause}");

    // A roleRef without a group gets the RBAC group, as in Kubernetes.
    let r = s
        .post_json(
            &bindings,
            &json!({"metadata": {"name": "defaulted"},
                    "roleRef": {"kind": "ClusterRole", "name": "view"},
                    "subjects": [{"kind": "Group", "name": "ops"}]}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    let v = r.json();
    assert_eq!(v["roleRef"]["apiGroup"], GROUP);
    assert_eq!(v["subjects"][0]["apiGroup"], GROUP);
}

#[tokio::test]
async fn role_ref_cannot_change() {
    let s = TestServer::start();
    let path = role_binding_path("fixed");
    let r = s
        .post_json(&KINDS[2].collection(), &KINDS[2].sample("fixed"))
        .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    let created = r.json();
    let message = "RoleBinding.rbac.authorization.k8s.io \"fixed\" is invalid: roleRef: Invalid \
                   value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", \
                   Kind:\"ClusterRole\", Name:\"edit\"}: cannot change roleRef";

    let mut changed = created.clone();
    changed["roleRef"]["name"] = json!("edit");
    let r = s.put_json(&path, &changed).await;
    assert_status(&r, 422, "Invalid");
    assert_eq!(r.json()["message"], message);

    let r = s
        .patch_merge(&path, &json!({"roleRef": {"name": "edit"}}))
        .await;
    assert_status(&r, 422, "Invalid");
    assert_eq!(r.json()["message"], message);

    // Everything else may change, and the same roleRef written again is no change.
    let r = s
        .patch_merge(
            &path,
            &json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"},
                    "subjects": [{"kind": "Group", "apiGroup": GROUP, "name": "ops"}]}),
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body_text(&r));
    assert_eq!(r.json()["subjects"][0]["name"], "ops");
    assert_eq!(s.get(&path).await.json()["roleRef"], created["roleRef"]);
}

#[tokio::test]
async fn strategic_merge_and_apply_follow_the_schema() {
    let s = TestServer::start();
    let path = role_path("smp");
    let mut role = KINDS[0].sample("smp");
    role["metadata"]["labels"] = json!({"a": "1"});
    assert_eq!(s.post_json(&KINDS[0].collection(), &role).await.code(), 201);

    // `rules` is an atomic list: a strategic merge patch replaces it whole, while labels merge.
    let patch = json!({"metadata": {"labels": {"b": "2"}},
                       "rules": [{"apiGroups": [GROUP], "resources": ["roles"], "verbs": ["watch"]}]});
    let r = s
        .send(
            "PATCH",
            &path,
            Some(patch.to_string().as_bytes()),
            &[("content-type", STRATEGIC)],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", body_text(&r));
    let v = r.json();
    assert_eq!(v["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(v["rules"], patch["rules"]);

    // Unknown fields are refused under strict field validation, named by path (400 for a patch
    // as for a body: spec §4.9; Kubernetes answers 422 on `patch`).
    let r = s
        .send(
            "PATCH",
            &format!("{path}?fieldValidation=Strict"),
            Some(br#"{"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["x"],"colour":"red"}]}"#),
            &[("content-type", STRATEGIC)],
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    assert!(
        body_text(&r).contains(r#"strict decoding error: unknown field \"rules[0].colour\""#),
        "{}",
        body_text(&r)
    );

    // Server-side apply: roleRef is an atomic struct and subjects an atomic list, so each is one
    // field for its manager.
    let config = "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  \
                  name: applied\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  \
                  name: smp\nsubjects:\n- kind: User\n  apiGroup: rbac.authorization.k8s.io\n  \
                  name: alice\n";
    let apply = format!("{}?fieldManager=ops", role_binding_path("applied"));
    let r = s
        .send(
            "PATCH",
            &apply,
            Some(config.as_bytes()),
            &[("content-type", APPLY)],
        )
        .await;
    assert_eq!(r.code(), 201, "{}", body_text(&r));
    let v = r.json();
    let fields = &v["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(fields["f:roleRef"], json!({}), "{fields}");
    assert_eq!(fields["f:subjects"], json!({}), "{fields}");
    // Another manager changing the subjects conflicts with the first.
    let other = config.replace("alice", "bob");
    let r = s
        .send(
            "PATCH",
            &format!("{}?fieldManager=intruder", role_binding_path("applied")),
            Some(other.as_bytes()),
            &[("content-type", APPLY)],
        )
        .await;
    assert_status(&r, 409, "Conflict");
}

#[tokio::test]
async fn tables_list_the_rbac_kinds() {
    let s = TestServer::start();
    assert_eq!(
        s.post_json(&KINDS[0].collection(), &KINDS[0].sample("tabled"))
            .await
            .code(),
        201
    );
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let t = s
        .send("GET", &KINDS[0].collection(), None, &[("accept", accept)])
        .await
        .json();
    assert_eq!(t["kind"], "Table", "{t}");
    assert_eq!(t["rows"][0]["cells"][0], "tabled", "{t}");
    // The bootstrap ClusterRoles are there too.
    let t = s
        .send("GET", &KINDS[1].collection(), None, &[("accept", accept)])
        .await
        .json();
    assert!(
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["cells"][0] == "cluster-admin"),
        "{t}"
    );
}

// ---------------------------------------------------------------------------------------------
// kubectl: `create role|clusterrole|rolebinding|clusterrolebinding` (protobuf bodies from 1.37),
// `get`, and `auth can-i` (a SelfSubjectAccessReview, protobuf from 1.37).

const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// The kubectl binary `name` in /usr/local/bin or on PATH.
fn find_kubectl(name: &str) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// One kubectl against one plain-HTTP server, with its own HOME and kubeconfig.
struct Kubectl {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// `None` (with a loud notice) when the binary is not installed.
    fn new(name: &str, server: &TestServer) -> Option<Kubectl> {
        let Some(bin) = find_kubectl(name) else {
            eprintln!(
                "\n!!!!!!!! SKIPPED: {name} is not installed (run \
                 /work/shared/tools/install-clients.sh); this kubectl test asserts nothing \
                 !!!!!!!!\n"
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: strata\n  cluster:\n    server: \
             http://{}\ncontexts:\n- name: strata\n  context:\n    cluster: strata\n    \
             namespace: default\n    user: nobody\nusers:\n- name: nobody\n  user: {{}}\n\
             current-context: strata\n",
            server.client_addr()
        );
        std::fs::write(dir.path().join("kubeconfig"), config).expect("write kubeconfig");
        std::fs::create_dir_all(dir.path().join("home")).expect("home dir");
        Some(Kubectl { bin, dir })
    }

    fn run(&self, args: &[&str]) -> Finished {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path().join("home"));
        run_with_timeout(&mut cmd, self.dir.path(), KUBECTL_TIMEOUT)
    }

    /// Runs kubectl, asserts exit 0 and returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert!(
            r.success(),
            "kubectl {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
            r.status,
            r.stdout,
            r.stderr
        );
        r.stdout
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }
}

/// Whether some line of `text` starts with `first` as its first column.
fn has_row(text: &str, first: &str) -> bool {
    text.lines()
        .any(|l| l.split_whitespace().next() == Some(first))
}

fn kubectl_creates_and_reads_rbac_objects(binary: &str) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(binary, &s) else {
        return;
    };
    let out = k.ok(&[
        "create",
        "role",
        "sa-reader",
        "--verb=get",
        "--verb=list",
        "--resource=serviceaccounts",
    ]);
    assert!(
        out.contains("role.rbac.authorization.k8s.io/sa-reader created"),
        "{out}"
    );
    k.ok(&[
        "create",
        "clusterrole",
        "healthz-reader",
        "--verb=get",
        "--non-resource-url=/healthz",
    ]);
    k.ok(&[
        "create",
        "rolebinding",
        "sa-readers",
        "--role=sa-reader",
        "--user=alice",
        "--serviceaccount=default:robot",
    ]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "healthz-readers",
        "--clusterrole=healthz-reader",
        "--group=ops",
    ]);

    let role = k.json(&["get", "role", "sa-reader", "-o", "json"]);
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list"]}])
    );
    let binding = k.json(&["get", "rolebinding", "sa-readers", "-o", "json"]);
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": GROUP, "kind": "Role", "name": "sa-reader"})
    );
    let subjects = binding["subjects"].as_array().unwrap();
    assert!(
        subjects
            .iter()
            .any(|s| s["kind"] == "User" && s["name"] == "alice" && s["apiGroup"] == GROUP),
        "{binding}"
    );
    assert!(
        subjects.iter().any(|s| s["kind"] == "ServiceAccount"
            && s["name"] == "robot"
            && s["namespace"] == "default"),
        "{binding}"
    );
    let cluster_role = k.json(&["get", "clusterrole", "healthz-reader", "-o", "json"]);
    assert_eq!(
        cluster_role["rules"],
        json!([{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}])
    );
    assert!(
        cluster_role.get("aggregationRule").is_none(),
        "{cluster_role}"
    );
    let cluster_binding = k.json(&["get", "clusterrolebinding", "healthz-readers", "-o", "json"]);
    assert_eq!(cluster_binding["subjects"][0]["name"], "ops");

    assert!(has_row(&k.ok(&["get", "roles"]), "sa-reader"));
    assert!(has_row(&k.ok(&["get", "rolebindings"]), "sa-readers"));
    assert!(has_row(&k.ok(&["get", "clusterroles"]), "healthz-reader"));
    assert!(has_row(
        &k.ok(&["get", "clusterrolebindings"]),
        "healthz-readers"
    ));

    // A SelfSubjectAccessReview (anonymous requests may do everything on this server).
    let r = k.run(&["auth", "can-i", "create", "roles"]);
    assert_eq!(r.stdout.trim(), "yes", "{}", r.stderr);

    // The server refuses what Kubernetes refuses, and kubectl shows why.
    let r = k.run(&[
        "create",
        "rolebinding",
        "bad",
        "--clusterrole=view",
        "--serviceaccount=default:Not_A_Name",
    ]);
    assert!(!r.success(), "{}", r.stdout);
    assert!(
        r.stderr.contains("subjects[0].name: Invalid value"),
        "{}",
        r.stderr
    );

    k.ok(&["delete", "rolebinding", "sa-readers"]);
    k.ok(&["delete", "role", "sa-reader"]);
    let r = k.run(&["get", "role", "sa-reader"]);
    assert!(!r.success());
    assert!(r.stderr.contains("NotFound"), "{}", r.stderr);
}

#[test]
fn kubectl_1_31_creates_and_reads_rbac_objects() {
    kubectl_creates_and_reads_rbac_objects("kubectl-1.31");
}

#[test]
fn kubectl_1_37_creates_and_reads_rbac_objects() {
    kubectl_creates_and_reads_rbac_objects("kubectl-1.37");
}
