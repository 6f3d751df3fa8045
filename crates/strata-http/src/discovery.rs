//! Discovery documents, built from the registered resource types: the legacy `/api`,
//! `/api/<v>`, `/apis`, `/apis/<g>[/<v>]` forms and the aggregated `APIGroupDiscoveryList`.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

use strata_object::resource::Scope;
use strata_object::ResourceType;
use strata_registry::{RegisteredType, Registry};

/// The media type of aggregated discovery (v2), answered exactly so when asked for.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The virtual types (answered, never stored), listed after the registered ones.
fn virtual_types() -> &'static [ResourceType] {
    static TYPES: OnceLock<Vec<ResourceType>> = OnceLock::new();
    TYPES.get_or_init(strata_object::builtin::virtual_types)
}

/// Every type discovery lists: the registry's (a snapshot), then the virtual ones.
fn all_types(types: &[Arc<RegisteredType>]) -> Vec<&ResourceType> {
    types
        .iter()
        .map(|t| &t.info)
        .chain(virtual_types())
        .collect()
}

/// Group name → versions (in registration order) → resource types.
fn groups(types: &[Arc<RegisteredType>]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for info in all_types(types) {
        let versions = out.entry(info.group.clone()).or_default();
        if !versions.contains(&info.version) {
            versions.push(info.version.clone());
        }
    }
    out
}

/// `/api`: the core group's versions.
pub fn api_versions(host: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    })
}

/// `/apis`: every named group (the core group is not listed).
pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = groups(&registry.types())
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| api_group(&g, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if the group is served.
pub fn api_group_for(registry: &Registry, group: &str) -> Option<Value> {
    let versions = groups(&registry.types()).remove(group)?;
    let mut v = api_group(group, &versions);
    if let Value::Object(m) = &mut v {
        let rest = std::mem::take(m);
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
        m.extend(rest);
    }
    Some(v)
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv).unwrap_or(Value::Null),
    })
}

/// `/api/<v>` or `/apis/<g>/<v>`: the APIResourceList, if that group-version is served.
pub fn api_resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let served = registry.types();
    let types: Vec<_> = all_types(&served)
        .into_iter()
        .filter(|info| info.group == group && info.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for info in &types {
        let mut r = serde_json::Map::new();
        r.insert("name".into(), json!(info.resource));
        r.insert("singularName".into(), json!(info.singular));
        r.insert("namespaced".into(), json!(info.namespaced()));
        r.insert("kind".into(), json!(info.kind));
        r.insert(
            "verbs".into(),
            json!(info.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>()),
        );
        if !info.short_names.is_empty() {
            r.insert("shortNames".into(), json!(info.short_names));
        }
        if !info.categories.is_empty() {
            r.insert("categories".into(), json!(info.categories));
        }
        resources.push(Value::Object(r));
        for sub in &info.subresources {
            let mut r = serde_json::Map::new();
            r.insert(
                "name".into(),
                json!(format!("{}/{}", info.resource, sub.name)),
            );
            r.insert("singularName".into(), json!(""));
            r.insert("namespaced".into(), json!(info.namespaced()));
            if sub.kind.group != info.group || sub.kind.version != info.version {
                r.insert("group".into(), json!(sub.kind.group));
                r.insert("version".into(), json!(sub.kind.version));
            }
            r.insert("kind".into(), json!(sub.kind.kind));
            r.insert(
                "verbs".into(),
                json!(sub.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>()),
            );
            resources.push(Value::Object(r));
        }
    }
    let group_version = strata_object::resource::api_version(group, version);
    let mut doc = serde_json::Map::new();
    doc.insert("kind".into(), json!("APIResourceList"));
    if !group.is_empty() {
        doc.insert("apiVersion".into(), json!("v1"));
    }
    doc.insert("groupVersion".into(), json!(group_version));
    doc.insert("resources".into(), json!(resources));
    Some(Value::Object(doc))
}

/// The aggregated discovery document: the core group at `/api` (`core` true), the named groups
/// at `/apis`.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let served = registry.types();
    let mut items = Vec::new();
    for (group, versions) in groups(&served) {
        if group.is_empty() != core {
            continue;
        }
        let versions: Vec<Value> = versions
            .iter()
            .map(|v| {
                let resources: Vec<Value> = all_types(&served)
                    .into_iter()
                    .filter(|info| info.group == group && &info.version == v)
                    .map(|info| {
                        let subresources: Vec<Value> = info
                            .subresources
                            .iter()
                            .map(|s| {
                                json!({
                                    "subresource": s.name,
                                    "responseKind": {"group": s.kind.group, "version": s.kind.version, "kind": s.kind.kind},
                                    "verbs": s.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
                                })
                            })
                            .collect();
                        let mut r = json!({
                            "resource": info.resource,
                            "responseKind": {"group": "", "version": "", "kind": info.kind},
                            "scope": if info.scope == Scope::Namespaced { "Namespaced" } else { "Cluster" },
                            "singularResource": info.singular,
                            "verbs": info.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
                        });
                        if !info.short_names.is_empty() {
                            r["shortNames"] = json!(info.short_names);
                        }
                        if !info.categories.is_empty() {
                            r["categories"] = json!(info.categories);
                        }
                        if !subresources.is_empty() {
                            r["subresources"] = json!(subresources);
                        }
                        r
                    })
                    .collect();
                json!({"version": v, "resources": resources, "freshness": "Current"})
            })
            .collect();
        let mut metadata = json!({"creationTimestamp": null});
        if !group.is_empty() {
            metadata["name"] = json!(group);
        }
        items.push(json!({"metadata": metadata, "versions": versions}));
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}
