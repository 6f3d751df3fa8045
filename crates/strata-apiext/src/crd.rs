//! A CustomResourceDefinition as the resource types it defines: one [`ResourceType`] per served
//! version, all stored under `/registry/<group>/<plural>/` in the storage version's form.

use serde_json::{json, Map, Value};
use strata_object::builtin::{closure, schema_catalog, SCALE_SCHEMA};
use strata_object::printer::{Cell, ColumnType, JsonPath, PrinterColumn};
use strata_object::resource::{
    GroupVersionKind, NameRule, ResourceType, ScalePaths, Scope, SubResource, SubResourceBehaviour,
    Verb,
};
use strata_object::selector::UnknownFieldStyle;

/// The finalizer that holds a deleted CRD until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// One served version of a CRD: its resource type and what its objects are checked against.
#[derive(Clone, Debug)]
pub struct ServedVersion {
    pub info: ResourceType,
    /// The version's `openAPIV3Schema`, as written in the CRD.
    pub schema: Value,
    /// Whether writes to the object leave `status` alone (a `status` sub-resource).
    pub status_subresource: bool,
    /// `apiVersion` of the stored objects (`<group>/<storage version>`).
    pub storage_api_version: String,
    /// Why requests at this version cannot be served: a version other than the storage one of
    /// a CRD whose objects convert through a webhook, which Strata does not call.
    pub unavailable: Option<String>,
}

/// Reads `path` of a CRD (`spec.names.plural`) as a string, or `""`.
fn text<'a>(crd: &'a Value, path: &str) -> &'a str {
    path.split('.')
        .try_fold(crd, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The names a CRD's types are served under: `status.acceptedNames` once the server accepted
/// them, else the requested `spec.names`.
fn names(crd: &Value) -> &Value {
    match crd.pointer("/status/acceptedNames") {
        Some(n)
            if n.get("plural")
                .and_then(Value::as_str)
                .is_some_and(|p| !p.is_empty()) =>
        {
            n
        }
        _ => crd.pointer("/spec/names").unwrap_or(&Value::Null),
    }
}

/// The storage version's name, if exactly one version is marked as it.
pub fn storage_version(crd: &Value) -> Option<&str> {
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let mut stored = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true));
    let first = stored.next()?;
    stored.next().is_none().then(|| text(first, "name"))
}

/// The versions a CRD serves, each as a resource type. Empty when the CRD is unusable (no
/// storage version, no names).
pub fn served_versions(crd: &Value) -> Vec<ServedVersion> {
    let group = text(crd, "spec.group");
    let names = names(crd);
    let plural = text(names, "plural");
    let kind = text(names, "kind");
    let Some(storage) = storage_version(crd) else {
        return Vec::new();
    };
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let scope = match text(crd, "spec.scope") {
        "Cluster" => Scope::Cluster,
        _ => Scope::Namespaced,
    };
    let list_kind = match text(names, "listKind") {
        "" => format!("{kind}List"),
        l => l.to_string(),
    };
    let singular = match text(names, "singular") {
        "" => kind.to_ascii_lowercase(),
        s => s.to_string(),
    };
    let webhook = text(crd, "spec.conversion.strategy") == "Webhook";
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|v| {
            let version = text(v, "name");
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
            let status_subresource = v.pointer("/subresources/status").is_some();
            let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
                spec_replicas: text(s, "specReplicasPath").to_string(),
                status_replicas: text(s, "statusReplicasPath").to_string(),
                label_selector: Some(text(s, "labelSelectorPath"))
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
            });
            let mut subresources = Vec::new();
            if status_subresource {
                subresources.push(SubResource {
                    name: "status".into(),
                    kind: GroupVersionKind::new(group, version, kind),
                    verbs: vec![Verb::Get, Verb::Patch, Verb::Update],
                    behaviour: SubResourceBehaviour::Part,
                });
            }
            if scale.is_some() {
                subresources.push(SubResource {
                    name: "scale".into(),
                    kind: GroupVersionKind::new("autoscaling", "v1", "Scale"),
                    verbs: vec![Verb::Get, Verb::Patch, Verb::Update],
                    behaviour: SubResourceBehaviour::Scale,
                });
            }
            let schema_name = format!("{}.{version}.{kind}", reversed(group));
            let mut definitions = closure(&schema_catalog(), OBJECT_META);
            for extra in [
                "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
                "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
            ] {
                definitions.extend(closure(&schema_catalog(), extra));
            }
            if scale.is_some() {
                definitions.extend(closure(&schema_catalog(), SCALE_SCHEMA));
            }
            definitions.insert(
                schema_name.clone(),
                published_schema(&schema, group, version, kind),
            );
            definitions.insert(
                format!("{}.{version}.{list_kind}", reversed(group)),
                list_schema(&schema_name, group, version, &list_kind),
            );
            let mut selectable_fields = vec!["metadata.name".to_string()];
            if scope == Scope::Namespaced {
                selectable_fields.push("metadata.namespace".into());
            }
            for f in v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(p) = f.get("jsonPath").and_then(Value::as_str) {
                    selectable_fields.push(p.trim_start_matches('.').to_string());
                }
            }
            let info = ResourceType {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                list_kind: list_kind.clone(),
                resource: plural.into(),
                singular: singular.clone(),
                scope,
                short_names: strings(names.get("shortNames")),
                categories: strings(names.get("categories")),
                verbs: Verb::ALL.to_vec(),
                subresources,
                name_rule: NameRule::Dns1123Subdomain,
                supports_table: true,
                printer_columns: printer_columns(v),
                supports_strategic_merge: false,
                protobuf: false,
                schema_name,
                definitions,
                selectable_fields,
                unknown_field_style: UnknownFieldStyle::NotSupported,
                custom: true,
                scale,
                schema_cache: Default::default(),
            };
            ServedVersion {
                info,
                schema,
                status_subresource,
                storage_api_version: format!("{group}/{storage}"),
                unavailable: (webhook && version != storage).then(|| {
                    format!(
                        "conversion webhook for {group}/{version}, Kind={kind} failed: \
                         webhook conversion is not supported by this server; \
                         use the storage version {group}/{storage}, or conversion strategy None"
                    )
                }),
            }
        })
        .collect()
}

/// `example.com` → `com.example`, the prefix of OpenAPI component names.
fn reversed(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// A version's `additionalPrinterColumns`: the name column first, then each declared one.
/// None declared means the default Table.
fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let Some(declared) = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    else {
        return Vec::new();
    };
    let mut columns = vec![PrinterColumn::new(
        "Name",
        ColumnType::String,
        "The object's name, unique among its kind in its namespace.",
        Cell::Path(JsonPath::parse(".metadata.name").expect("a valid path")),
    )
    .with_format("name")];
    for c in declared {
        let (Some(column_type), Ok(path)) = (
            ColumnType::parse(text(c, "type")),
            JsonPath::parse(text(c, "jsonPath")),
        ) else {
            continue;
        };
        let priority = c.get("priority").and_then(Value::as_i64).unwrap_or(0);
        columns.push(
            PrinterColumn::new(
                text(c, "name"),
                column_type,
                text(c, "description"),
                Cell::Path(path),
            )
            .with_format(text(c, "format"))
            .with_priority(i32::try_from(priority).unwrap_or(i32::MAX)),
        );
    }
    columns
}

/// The schema as published in OpenAPI and walked by patches and pruning: the CRD's, with
/// `apiVersion`, `kind` and `metadata` (ObjectMeta) declared at the root, embedded resources'
/// envelopes declared, and objects with no properties made explicitly empty (a structural
/// schema prunes everything from them).
fn published_schema(schema: &Value, group: &str, version: &str, kind: &str) -> Value {
    let mut s = schema.clone();
    close_empty_objects(&mut s);
    let Some(root) = s.as_object_mut() else {
        return json!({"type": "object"});
    };
    root.insert("type".into(), json!("object"));
    let props = root
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut ordered = Map::new();
    ordered.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "The versioned schema of this representation of an object."}),
    );
    ordered.insert(
        "kind".into(),
        json!({"type": "string", "description": "The REST resource this object represents."}),
    );
    ordered.insert(
        "metadata".into(),
        json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": "Standard object's metadata."}),
    );
    for (k, v) in props {
        if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            ordered.insert(k, v);
        }
    }
    root.insert("properties".into(), Value::Object(ordered));
    root.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": group, "kind": kind, "version": version}]),
    );
    s
}

/// Gives `type: object` nodes without `properties`, `additionalProperties` or
/// `x-kubernetes-preserve-unknown-fields` an empty `properties`, and embedded resources their
/// envelope fields, throughout `schema`.
fn close_empty_objects(schema: &mut Value) {
    let Some(m) = schema.as_object_mut() else {
        return;
    };
    let preserves = m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    let embedded = m.get("x-kubernetes-embedded-resource") == Some(&json!(true));
    if m.get("type").and_then(Value::as_str) == Some("object")
        && !preserves
        && !m.contains_key("properties")
        && !m.contains_key("additionalProperties")
    {
        m.insert("properties".into(), json!({}));
    }
    if embedded {
        if let Some(Value::Object(props)) = m.get_mut("properties") {
            for (k, v) in [
                ("apiVersion", json!({"type": "string"})),
                ("kind", json!({"type": "string"})),
                (
                    "metadata",
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                ),
            ] {
                props.entry(k).or_insert(v);
            }
        }
    }
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(props)) = m.get_mut(key) {
            props.values_mut().for_each(close_empty_objects);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = m.get_mut(key) {
            close_empty_objects(v);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = m.get_mut(key) {
            a.iter_mut().for_each(close_empty_objects);
        }
    }
}

fn list_schema(item: &str, group: &str, version: &str, list_kind: &str) -> Value {
    json!({
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{item}")}},
            "kind": {"type": "string"},
            "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"}]}
        },
        "x-kubernetes-group-version-kind": [{"group": group, "kind": list_kind, "version": version}]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "opaque": {"type": "object"}}},
                        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                     "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]},
                    {"name": "v1beta1", "served": true, "storage": false},
                    {"name": "v1alpha1", "served": false, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn every_served_version_is_a_type_stored_in_one_place() {
        let served = served_versions(&crd());
        let versions: Vec<&str> = served.iter().map(|s| s.info.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v1beta1"]);
        for s in &served {
            assert_eq!(s.info.key_prefix(), "/registry/example.com/widgets/");
            assert_eq!(s.storage_api_version, "example.com/v1");
            assert!(s.info.custom && !s.info.protobuf && !s.info.supports_strategic_merge);
        }
        let v1 = &served[0].info;
        assert_eq!(v1.list_kind, "WidgetList");
        assert_eq!(v1.short_names, ["wd"]);
        assert!(v1.subresource("status").is_some());
        assert_eq!(
            v1.scale.as_ref().map(|s| s.spec_replicas.as_str()),
            Some(".spec.replicas")
        );
        let names: Vec<&str> = v1.printer_columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Name", "Replicas"]);
        assert!(served[1].info.subresources.is_empty());
        assert!(served[1].info.printer_columns.is_empty());
    }

    #[test]
    fn the_published_schema_declares_the_envelope_and_closes_empty_objects() {
        let served = served_versions(&crd());
        let v1 = &served[0].info;
        let root = v1.schema().expect("a schema");
        assert!(root.property("metadata").is_some());
        let mut value = json!({"spec": {"replicas": 1, "extra": 1, "opaque": {"x": 1}}});
        let pruned = root.prune_unknown(&mut value);
        assert_eq!(value, json!({"spec": {"replicas": 1, "opaque": {}}}));
        assert_eq!(pruned.len(), 2, "{pruned:?}");
    }

    #[test]
    fn a_crd_without_one_storage_version_serves_nothing() {
        let mut c = crd();
        c["spec"]["versions"][0]["storage"] = json!(false);
        assert!(served_versions(&c).is_empty());
    }
}
