//! OpenAPI v3 documents generated from the registered resource types: the `/openapi/v3` index
//! and one document per group-version with paths, operations and component schemas.
//!
//! kubectl reads these to decide that the server validates fields itself (it looks for a
//! `fieldValidation` parameter on the kind's PATCH operation) and for `kubectl explain`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha512};
use strata_object::builtin;
use strata_object::resource::{api_version, SubResourceBehaviour, Verb};
use strata_registry::{RegisteredType, Registry};

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// The path of a group-version document below `/openapi/v3/` (`api/v1`, `apis/<g>/<v>`).
fn doc_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every group-version document, keyed by its path below `/openapi/v3/`.
pub fn documents(registry: &Registry) -> BTreeMap<String, Value> {
    let types = registry.types();
    let mut by_gv: BTreeMap<(String, String), Vec<&RegisteredType>> = BTreeMap::new();
    for t in types.iter() {
        by_gv
            .entry((t.info.group.clone(), t.info.version.clone()))
            .or_default()
            .push(t);
    }
    by_gv
        .into_iter()
        .map(|((g, v), types)| (doc_path(&g, &v), group_version_document(&g, &v, &types)))
        .collect()
}

/// A stable hash of a document, used in `serverRelativeURL` so clients can cache.
pub fn hash(doc: &Value) -> String {
    let bytes = strata_codec::json::compact(doc);
    Sha512::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// The `/openapi/v3` index.
pub fn index(docs: &BTreeMap<String, Value>) -> Value {
    let paths: Map<String, Value> = docs
        .iter()
        .map(|(path, doc)| {
            (
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", hash(doc))}),
            )
        })
        .collect();
    json!({ "paths": paths })
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn query(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": ty, "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut p = vec![
        query("dryRun", "string", "When present, the only allowed value is All: every stage runs but nothing is persisted."),
        query("fieldManager", "string", "The name of the actor making the change, recorded in managedFields."),
        query("fieldValidation", "string", "How to treat unknown or duplicate fields: Ignore, Warn (default) or Strict."),
    ];
    if patch {
        p.push(query(
            "force",
            "boolean",
            "Apply requests only: take ownership of conflicting fields.",
        ));
    }
    p
}

fn list_params() -> Vec<Value> {
    vec![
        query(
            "allowWatchBookmarks",
            "boolean",
            "Ask for BOOKMARK events in a watch.",
        ),
        query(
            "continue",
            "string",
            "The token from the previous chunk of a chunked list.",
        ),
        query(
            "fieldSelector",
            "string",
            "Restrict results by field values.",
        ),
        query("labelSelector", "string", "Restrict results by labels."),
        query(
            "limit",
            "integer",
            "The maximum number of items in one chunk.",
        ),
        query(
            "resourceVersion",
            "string",
            "The resource version to read at; see the resource-version rules.",
        ),
        query(
            "resourceVersionMatch",
            "string",
            "How resourceVersion is matched: Exact or NotOlderThan.",
        ),
        query(
            "sendInitialEvents",
            "boolean",
            "Stream the current state as ADDED events before changes.",
        ),
        query(
            "timeoutSeconds",
            "integer",
            "End a list or watch after this many seconds.",
        ),
        query(
            "watch",
            "boolean",
            "Stream changes instead of returning a list.",
        ),
    ]
}

fn delete_params() -> Vec<Value> {
    vec![
        query(
            "dryRun",
            "string",
            "When present, the only allowed value is All.",
        ),
        query(
            "gracePeriodSeconds",
            "integer",
            "Seconds before the object is deleted.",
        ),
        query(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "boolean",
            "Force the deletion of an object that cannot be read from storage.",
        ),
        query(
            "orphanDependents",
            "boolean",
            "Deprecated: use propagationPolicy.",
        ),
        query(
            "propagationPolicy",
            "string",
            "Orphan, Background or Foreground.",
        ),
    ]
}

fn responses(codes: &[&str], schema: &str) -> Value {
    let mut r = Map::new();
    for code in codes {
        r.insert(
            code.to_string(),
            json!({"description": status_text(code), "content": {"application/json": {"schema": schema_ref(schema)}}}),
        );
    }
    r.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(r)
}

fn status_text(code: &str) -> &'static str {
    match code {
        "200" => "OK",
        "201" => "Created",
        "202" => "Accepted",
        _ => "Response",
    }
}

fn body(schema: &str, types: &[&str]) -> Value {
    let content: Map<String, Value> = types
        .iter()
        .map(|t| (t.to_string(), json!({"schema": schema_ref(schema)})))
        .collect();
    json!({"content": content, "required": true})
}

/// `CoreV1`, `RbacAuthorizationV1`: the group-version part of operation ids.
fn op_group_version(group: &str, version: &str) -> String {
    let group = if group.is_empty() {
        "core"
    } else {
        group.split('.').next().unwrap_or(group)
    };
    let mut s = String::new();
    for part in group.split(['.', '-']) {
        let mut c = part.chars();
        if let Some(f) = c.next() {
            s.extend(f.to_uppercase());
            s.push_str(c.as_str());
        }
    }
    let mut v = version.chars();
    if let Some(f) = v.next() {
        s.extend(f.to_uppercase());
        s.push_str(v.as_str());
    }
    s
}

fn operation(
    t: &RegisteredType,
    action: &str,
    id: String,
    parameters: Vec<Value>,
    request: Option<Value>,
    responses: Value,
) -> Value {
    let info = &t.info;
    let mut op = json!({
        "tags": [op_group_version(&info.group, &info.version)],
        "description": format!("{action} {}", info.kind),
        "operationId": id,
        "responses": responses,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": info.group, "version": info.version, "kind": info.kind},
    });
    if !parameters.is_empty() {
        op["parameters"] = json!(parameters);
    }
    if let Some(r) = request {
        op["requestBody"] = r;
    }
    op
}

fn group_version_document(group: &str, version: &str, types: &[&RegisteredType]) -> Value {
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let gv = op_group_version(group, version);
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let path_param = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "description": what, "schema": {"type": "string", "uniqueItems": true}});
    let pretty = query("pretty", "string", "If 'true', the output is indented.");
    for t in types {
        let info = &t.info;
        for (k, v) in &info.definitions {
            schemas.insert(k.clone(), v.clone());
        }
        let kind_schema = info.schema_name.clone();
        let list_schema = kind_schema.replace(&info.kind, &info.list_kind);
        let namespaced = info.namespaced();
        let scoped = if namespaced { "Namespaced" } else { "" };
        let kind = &info.kind;
        let (collection, item) = if namespaced {
            (
                format!("{prefix}/namespaces/{{namespace}}/{}", info.resource),
                format!(
                    "{prefix}/namespaces/{{namespace}}/{}/{{name}}",
                    info.resource
                ),
            )
        } else {
            (
                format!("{prefix}/{}", info.resource),
                format!("{prefix}/{}/{{name}}", info.resource),
            )
        };
        let mut coll = Map::new();
        let mut params = vec![pretty.clone()];
        if namespaced {
            params.insert(0, path_param("namespace", "The namespace of the objects."));
        }
        coll.insert("parameters".into(), json!(params));
        if info.has_verb(Verb::List) {
            coll.insert(
                "get".into(),
                operation(
                    t,
                    "list",
                    format!("list{gv}{scoped}{kind}"),
                    list_params(),
                    None,
                    responses(&["200"], &list_schema),
                ),
            );
        }
        if info.has_verb(Verb::Create) {
            coll.insert(
                "post".into(),
                operation(
                    t,
                    "post",
                    format!("create{gv}{scoped}{kind}"),
                    write_params(false),
                    Some(body(
                        &kind_schema,
                        &["application/json", "application/yaml"],
                    )),
                    responses(&["200", "201", "202"], &kind_schema),
                ),
            );
        }
        if info.has_verb(Verb::DeleteCollection) {
            let mut p = delete_params();
            p.extend(list_params());
            coll.insert(
                "delete".into(),
                operation(
                    t,
                    "deletecollection",
                    format!("deletecollection{gv}{scoped}{kind}"),
                    p,
                    Some(body(&format!("{META}DeleteOptions"), &["application/json"])),
                    responses(&["200"], &format!("{META}Status")),
                ),
            );
        }
        paths.insert(collection, Value::Object(coll));

        // Only the patch types the kind accepts: kubectl's client-side apply sends a strategic
        // merge patch when the operation lists one (custom resources get JSON merge patches, as
        // kube-apiserver publishes them without it).
        let mut patch_types = vec![
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
        ];
        if info.supports_strategic_merge {
            patch_types.push("application/strategic-merge-patch+json");
        }
        let mut one = Map::new();
        let mut params = vec![
            path_param("name", &format!("The name of the {kind}.")),
            pretty.clone(),
        ];
        if namespaced {
            params.insert(1, path_param("namespace", "The namespace of the object."));
        }
        one.insert("parameters".into(), json!(params));
        if info.has_verb(Verb::Get) {
            one.insert(
                "get".into(),
                operation(
                    t,
                    "get",
                    format!("read{gv}{scoped}{kind}"),
                    Vec::new(),
                    None,
                    responses(&["200"], &kind_schema),
                ),
            );
        }
        if info.has_verb(Verb::Update) {
            one.insert(
                "put".into(),
                operation(
                    t,
                    "put",
                    format!("replace{gv}{scoped}{kind}"),
                    write_params(false),
                    Some(body(
                        &kind_schema,
                        &["application/json", "application/yaml"],
                    )),
                    responses(&["200", "201"], &kind_schema),
                ),
            );
        }
        if info.has_verb(Verb::Patch) {
            schemas.insert(
                format!("{META}Patch"),
                json!({"type": "object", "description": "A patch document; its format is given by the request's Content-Type."}),
            );
            one.insert(
                "patch".into(),
                operation(
                    t,
                    "patch",
                    format!("patch{gv}{scoped}{kind}"),
                    write_params(true),
                    Some(body(&format!("{META}Patch"), &patch_types)),
                    responses(&["200", "201"], &kind_schema),
                ),
            );
        }
        if info.has_verb(Verb::Delete) {
            one.insert(
                "delete".into(),
                operation(
                    t,
                    "delete",
                    format!("delete{gv}{scoped}{kind}"),
                    delete_params(),
                    Some(body(&format!("{META}DeleteOptions"), &["application/json"])),
                    responses(&["200", "202"], &kind_schema),
                ),
            );
        }
        // The sub-resources that read and write a part of the object, or its Scale.
        for sub in &info.subresources {
            let schema = match sub.behaviour {
                SubResourceBehaviour::Part => kind_schema.clone(),
                SubResourceBehaviour::Scale => builtin::SCALE_SCHEMA.to_string(),
                _ => continue,
            };
            let mut name = sub.name.chars();
            let suffix: String = name
                .next()
                .into_iter()
                .flat_map(char::to_uppercase)
                .chain(name)
                .collect();
            let mut ops = Map::new();
            ops.insert("parameters".into(), json!(params));
            for verb in &sub.verbs {
                let (method, id, parameters, request, codes) = match verb {
                    Verb::Get => ("get", "read", Vec::new(), None, &["200"][..]),
                    Verb::Update => (
                        "put",
                        "replace",
                        write_params(false),
                        Some(body(&schema, &["application/json", "application/yaml"])),
                        &["200", "201"][..],
                    ),
                    Verb::Patch => (
                        "patch",
                        "patch",
                        write_params(true),
                        Some(body(&format!("{META}Patch"), &patch_types)),
                        &["200", "201"][..],
                    ),
                    _ => continue,
                };
                let mut op = operation(
                    t,
                    method,
                    format!("{id}{gv}{scoped}{kind}{suffix}"),
                    parameters,
                    request,
                    responses(codes, &schema),
                );
                op["x-kubernetes-group-version-kind"] = json!({
                    "group": sub.kind.group, "version": sub.kind.version, "kind": sub.kind.kind,
                });
                ops.insert(method.into(), op);
            }
            paths.insert(format!("{item}/{}", sub.name), Value::Object(ops));
        }
        paths.insert(item, Value::Object(one));

        if namespaced && info.has_verb(Verb::List) {
            paths.insert(
                format!("{prefix}/{}", info.resource),
                json!({
                    "parameters": [pretty.clone()],
                    "get": operation(t, "list", format!("list{gv}{kind}ForAllNamespaces"), list_params(), None, responses(&["200"], &list_schema)),
                }),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Strata", "version": api_version(group, version)},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn patch_operations_declare_field_validation() {
        let registry = Registry::with_builtin_types(
            Arc::new(strata_store::MemoryStore::new()),
            Default::default(),
        );
        let docs = documents(&registry);
        let doc = &docs["api/v1"];
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/serviceaccounts/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ServiceAccount"
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"fieldValidation"));
        // A built-in kind takes strategic merge patches (custom resources' operations omit it).
        assert!(
            patch["requestBody"]["content"]["application/strategic-merge-patch+json"].is_object()
        );
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.ServiceAccount"].is_object());
        let idx = index(&docs);
        assert!(idx["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .starts_with("/openapi/v3/api/v1?hash="));
    }
}
