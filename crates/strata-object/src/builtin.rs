//! The built-in resource types: ServiceAccount, Namespace, ConfigMap, Secret and Event (core/v1),
//! Lease (coordination.k8s.io/v1), Event (events.k8s.io/v1, the core Events' objects),
//! CustomResourceDefinition (apiextensions.k8s.io/v1) and the RBAC kinds
//! (rbac.authorization.k8s.io/v1).
//!
//! Each is a [`ResourceType`] value; their OpenAPI schemas come from `schemas/core-v1.json`,
//! `schemas/coordination-v1.json`, `schemas/events-v1.json`, `schemas/apiextensions-v1.json` and
//! `schemas/rbac-v1.json` (and the Scale of custom resources' `scale` sub-resource from
//! `schemas/autoscaling-v1.json`), and their printer columns are Kubernetes' (Role, ClusterRole and
//! CustomResourceDefinition have none: Kubernetes gives them the default Table too).
//! Behaviour particular to a kind (namespace phases, secret-reference cleanup) lives in the
//! registry's strategies, not here.

use serde_json::{Map, Value};

use crate::printer::{Cell, ColumnType, EventCell, JsonPath, PrinterColumn, SubjectKind};
use crate::resource::{
    GroupVersionKind, NameRule, ResourceType, Scope, SubResource, SubResourceBehaviour, Verb,
};
use crate::selector::UnknownFieldStyle;

const CORE_V1_SCHEMAS: &str = include_str!("../schemas/core-v1.json");
const RBAC_V1_SCHEMAS: &str = include_str!("../schemas/rbac-v1.json");
const COORDINATION_V1_SCHEMAS: &str = include_str!("../schemas/coordination-v1.json");
const EVENTS_V1_SCHEMAS: &str = include_str!("../schemas/events-v1.json");
const APIEXTENSIONS_V1_SCHEMAS: &str = include_str!("../schemas/apiextensions-v1.json");
const AUTOSCALING_V1_SCHEMAS: &str = include_str!("../schemas/autoscaling-v1.json");

/// Every component schema of the built-in types, keyed by component name.
pub fn schema_catalog() -> Map<String, Value> {
    let mut catalog = Map::new();
    for file in [
        CORE_V1_SCHEMAS,
        RBAC_V1_SCHEMAS,
        COORDINATION_V1_SCHEMAS,
        EVENTS_V1_SCHEMAS,
        APIEXTENSIONS_V1_SCHEMAS,
        AUTOSCALING_V1_SCHEMAS,
    ] {
        // The files are compiled in and checked by a unit test below.
        if let Ok(Value::Object(m)) = serde_json::from_str(file) {
            catalog.extend(m);
        }
    }
    catalog
}

/// The components reachable from `root` through `$ref`s, `root` included.
pub fn closure(catalog: &Map<String, Value>, root: &str) -> Map<String, Value> {
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "$ref" {
                        if let Some(r) = v.as_str().and_then(|s| s.rsplit('/').next()) {
                            out.push(r.to_string());
                        }
                    } else {
                        refs(v, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut result = Map::new();
    let mut todo = vec![root.to_string()];
    while let Some(name) = todo.pop() {
        if result.contains_key(&name) {
            continue;
        }
        if let Some(schema) = catalog.get(&name) {
            refs(schema, &mut todo);
            result.insert(name, schema.clone());
        }
    }
    result
}

fn core_v1(kind: &str, resource: &str, singular: &str, scope: Scope) -> ResourceType {
    built_in("", "io.k8s.api.core.v1", kind, resource, singular, scope)
}

/// A built-in type of `group`/v1 whose schemas are `<package>.<Kind>` and `<Kind>List`.
fn built_in(
    group: &str,
    package: &str,
    kind: &str,
    resource: &str,
    singular: &str,
    scope: Scope,
) -> ResourceType {
    let catalog = schema_catalog();
    let schema_name = format!("{package}.{kind}");
    let mut definitions = closure(&catalog, &schema_name);
    // The list kind and the shared meta kinds go into the same OpenAPI document.
    for extra in [
        format!("{package}.{kind}List"),
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions".into(),
    ] {
        for (k, v) in closure(&catalog, &extra) {
            definitions.insert(k, v);
        }
    }
    ResourceType {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        resource: resource.into(),
        singular: singular.into(),
        scope,
        short_names: Vec::new(),
        categories: Vec::new(),
        verbs: Vec::new(),
        subresources: Vec::new(),
        name_rule: NameRule::Dns1123Subdomain,
        supports_table: true,
        printer_columns: Vec::new(),
        supports_strategic_merge: true,
        protobuf: true,
        schema_name,
        definitions,
        selectable_fields: vec!["metadata.name".into(), "metadata.namespace".into()],
        unknown_field_style: UnknownFieldStyle::NotKnown,
        custom: false,
        scale: None,
        schema_cache: Default::default(),
    }
}

/// `serviceaccounts` (core/v1 ServiceAccount, namespaced, short name `sa`).
pub fn service_account() -> ResourceType {
    let mut t = core_v1(
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        Scope::Namespaced,
    );
    t.short_names = vec!["sa".into()];
    t.verbs = Verb::ALL.to_vec();
    t.subresources = vec![SubResource {
        name: "token".into(),
        kind: GroupVersionKind::new("authentication.k8s.io", "v1", "TokenRequest"),
        verbs: vec![Verb::Create],
        behaviour: SubResourceBehaviour::TokenRequest,
    }];
    let secrets = field_doc(&t, "io.k8s.api.core.v1.ServiceAccount", "secrets");
    t.printer_columns = vec![
        name_column(&t),
        PrinterColumn::new(
            "Secrets",
            ColumnType::String,
            &secrets,
            Cell::Count(vec![path(".secrets")]),
        ),
        age_column(&t),
    ];
    t
}

/// `configmaps` (core/v1 ConfigMap, namespaced, short name `cm`).
pub fn config_map() -> ResourceType {
    let mut t = core_v1("ConfigMap", "configmaps", "configmap", Scope::Namespaced);
    t.short_names = vec!["cm".into()];
    t.verbs = Verb::ALL.to_vec();
    let data = field_doc(&t, "io.k8s.api.core.v1.ConfigMap", "data");
    t.printer_columns = vec![
        name_column(&t),
        PrinterColumn::new(
            "Data",
            ColumnType::String,
            &data,
            Cell::Count(vec![path(".data"), path(".binaryData")]),
        ),
        age_column(&t),
    ];
    t
}

/// `secrets` (core/v1 Secret, namespaced).
pub fn secret() -> ResourceType {
    let mut t = core_v1("Secret", "secrets", "secret", Scope::Namespaced);
    t.verbs = Verb::ALL.to_vec();
    // Kubernetes' field-label conversion for Secrets adds the type.
    t.selectable_fields.push("type".into());
    let component = "io.k8s.api.core.v1.Secret";
    t.printer_columns = vec![
        name_column(&t),
        PrinterColumn::new(
            "Type",
            ColumnType::String,
            &field_doc(&t, component, "type"),
            Cell::Path(path(".type")),
        ),
        PrinterColumn::new(
            "Data",
            ColumnType::String,
            &field_doc(&t, component, "data"),
            Cell::Count(vec![path(".data")]),
        ),
        age_column(&t),
    ];
    t
}

/// `events` (core/v1 Event, namespaced, short name `ev`).
pub fn event() -> ResourceType {
    let mut t = core_v1("Event", "events", "event", Scope::Namespaced);
    t.short_names = vec!["ev".into()];
    t.verbs = Verb::ALL.to_vec();
    // Kubernetes' field-label conversion for Events: the involved object, reason, reporting
    // component and type besides the name and namespace (its `source`, which stands for
    // `source.component`, is not offered).
    t.selectable_fields.extend(
        [
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        ]
        .map(String::from),
    );
    t.printer_columns = event_columns(&t);
    t
}

/// `events` of `events.k8s.io/v1` (namespaced, short name `ev`): the same objects as core/v1
/// Events, stored with them (`resource::COHABITING`) and converted by the registry's strategy
/// (`regarding` for `involvedObject`, `note` for `message`, `deprecated…` for the core group's
/// source, timestamps and count).
pub fn events_v1() -> ResourceType {
    let mut t = built_in(
        "events.k8s.io",
        "io.k8s.api.events.v1",
        "Event",
        "events",
        "event",
        Scope::Namespaced,
    );
    t.short_names = vec!["ev".into()];
    t.verbs = Verb::ALL.to_vec();
    // Kubernetes' field-label conversion for events.k8s.io Events.
    t.selectable_fields.extend(
        [
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ]
        .map(String::from),
    );
    t.printer_columns = event_columns(&t);
    t
}

/// Kubernetes' Event columns, in its order, with descriptions from the core/v1 schema (both
/// groups print them alike).
fn event_columns(t: &ResourceType) -> Vec<PrinterColumn> {
    let catalog = schema_catalog();
    let doc = |component: &str, field: &str| {
        catalog
            .get(component)
            .and_then(|c| c.get("properties"))
            .and_then(|p| p.get(field))
            .and_then(|f| f.get("description"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let event = |field: &str| doc("io.k8s.api.core.v1.Event", field);
    let column = |name: &str, doc: String, cell: EventCell| {
        PrinterColumn::new(name, ColumnType::String, &doc, Cell::Event(cell))
    };
    vec![
        column("Last Seen", event("lastTimestamp"), EventCell::LastSeen),
        PrinterColumn::new(
            "Type",
            ColumnType::String,
            &event("type"),
            Cell::Text(path(".type")),
        ),
        PrinterColumn::new(
            "Reason",
            ColumnType::String,
            &event("reason"),
            Cell::Text(path(".reason")),
        ),
        column("Object", event("involvedObject"), EventCell::Object),
        column(
            "Subobject",
            doc("io.k8s.api.core.v1.ObjectReference", "fieldPath"),
            EventCell::Subobject,
        )
        .with_priority(1),
        column("Source", event("source"), EventCell::Source).with_priority(1),
        column("Message", event("message"), EventCell::Message),
        column("First Seen", event("firstTimestamp"), EventCell::FirstSeen).with_priority(1),
        column("Count", event("count"), EventCell::Count).with_priority(1),
        name_column(t).with_priority(1),
    ]
}

/// `leases` (coordination.k8s.io/v1 Lease, namespaced).
pub fn lease() -> ResourceType {
    let mut t = built_in(
        "coordination.k8s.io",
        "io.k8s.api.coordination.v1",
        "Lease",
        "leases",
        "lease",
        Scope::Namespaced,
    );
    t.verbs = Verb::ALL.to_vec();
    let holder = t
        .definitions
        .get("io.k8s.api.coordination.v1.LeaseSpec")
        .and_then(|c| c.pointer("/properties/holderIdentity/description"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    t.printer_columns = vec![
        name_column(&t),
        PrinterColumn::new(
            "Holder",
            ColumnType::String,
            &holder,
            Cell::Text(path(".spec.holderIdentity")),
        ),
        age_column(&t),
    ];
    t
}

/// `customresourcedefinitions` (apiextensions.k8s.io/v1 CustomResourceDefinition,
/// cluster-scoped, short names `crd` and `crds`, category `api-extensions`, with a `status`
/// sub-resource). No protobuf form; its Tables are the default (`Name`, `Created At`), as
/// Kubernetes' are.
pub fn custom_resource_definition() -> ResourceType {
    let mut t = built_in(
        "apiextensions.k8s.io",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        Scope::Cluster,
    );
    t.short_names = vec!["crd".into(), "crds".into()];
    t.categories = vec!["api-extensions".into()];
    t.verbs = Verb::ALL.to_vec();
    t.protobuf = false;
    t.subresources = vec![SubResource {
        name: "status".into(),
        kind: t.gvk(),
        verbs: vec![Verb::Get, Verb::Patch, Verb::Update],
        behaviour: SubResourceBehaviour::Part,
    }];
    t
}

/// `namespaces` (core/v1 Namespace, cluster-scoped, short name `ns`).
pub fn namespace() -> ResourceType {
    let mut t = core_v1("Namespace", "namespaces", "namespace", Scope::Cluster);
    t.short_names = vec!["ns".into()];
    t.verbs = Verb::ALL
        .into_iter()
        .filter(|v| *v != Verb::DeleteCollection)
        .collect();
    t.name_rule = NameRule::Dns1123Label;
    // Namespaces have their own field-label conversion: the name and the phase.
    t.selectable_fields = vec!["metadata.name".into(), "status.phase".into()];
    t.unknown_field_style = UnknownFieldStyle::NotSupported;
    let ns = GroupVersionKind::new("", "v1", "Namespace");
    t.subresources = vec![
        SubResource {
            name: "finalize".into(),
            kind: ns.clone(),
            verbs: vec![Verb::Update],
            behaviour: SubResourceBehaviour::Part,
        },
        SubResource {
            name: "status".into(),
            kind: ns,
            verbs: vec![Verb::Get, Verb::Patch, Verb::Update],
            behaviour: SubResourceBehaviour::Part,
        },
    ];
    t.printer_columns = vec![
        name_column(&t),
        PrinterColumn::new(
            "Status",
            ColumnType::String,
            "The status of the namespace",
            Cell::Path(path(".status.phase")),
        ),
        age_column(&t),
    ];
    t
}

fn rbac_v1(kind: &str, resource: &str, singular: &str, scope: Scope) -> ResourceType {
    let mut t = built_in(
        "rbac.authorization.k8s.io",
        "io.k8s.api.rbac.v1",
        kind,
        resource,
        singular,
        scope,
    );
    t.verbs = Verb::ALL.to_vec();
    t.name_rule = NameRule::PathSegment;
    t
}

/// Kubernetes' columns for a binding kind: name, role, age, and (wide) its subjects.
/// `noun` is how the descriptions name the kind (`roleBinding`).
fn binding_columns(t: &ResourceType, noun: &str) -> Vec<PrinterColumn> {
    let role = field_doc(t, &format!("io.k8s.api.rbac.v1.{}", t.kind), "roleRef");
    let subjects = |name: &str, kind: SubjectKind| {
        PrinterColumn::new(
            name,
            ColumnType::String,
            &format!("{name} in the {noun}"),
            Cell::Subjects(kind),
        )
        .with_priority(1)
    };
    vec![
        name_column(t),
        PrinterColumn::new("Role", ColumnType::String, &role, Cell::RoleRef),
        age_column(t),
        subjects("Users", SubjectKind::User),
        subjects("Groups", SubjectKind::Group),
        subjects("ServiceAccounts", SubjectKind::ServiceAccount),
    ]
}

/// A compiled-in path (checked by the unit tests below).
fn path(text: &str) -> JsonPath {
    JsonPath::parse(text).unwrap_or_else(|e| panic!("built-in printer column path {text}: {e}"))
}

/// The description of `field` of the component schema `component`, as the type's OpenAPI
/// shows it (Kubernetes takes these column descriptions from its API documentation).
fn field_doc(t: &ResourceType, component: &str, field: &str) -> String {
    t.definitions
        .get(component)
        .and_then(|c| c.get("properties"))
        .and_then(|p| p.get(field))
        .and_then(|f| f.get("description"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The `Name` column every kind's Table starts with.
fn name_column(t: &ResourceType) -> PrinterColumn {
    PrinterColumn::new(
        "Name",
        ColumnType::String,
        &field_doc(t, OBJECT_META, "name"),
        Cell::Path(path(".metadata.name")),
    )
    .with_format("name")
}

/// The `Age` column: the time since creation, as Kubernetes writes durations.
fn age_column(t: &ResourceType) -> PrinterColumn {
    PrinterColumn::new(
        "Age",
        ColumnType::String,
        &field_doc(t, OBJECT_META, "creationTimestamp"),
        Cell::Age,
    )
}

/// `roles` (rbac.authorization.k8s.io/v1 Role, namespaced). Its Tables are the default
/// (`Name`, `Created At`), as Kubernetes' are.
pub fn role() -> ResourceType {
    rbac_v1("Role", "roles", "role", Scope::Namespaced)
}

/// `clusterroles` (rbac.authorization.k8s.io/v1 ClusterRole, cluster-scoped); default Tables.
pub fn cluster_role() -> ResourceType {
    rbac_v1("ClusterRole", "clusterroles", "clusterrole", Scope::Cluster)
}

/// `rolebindings` (rbac.authorization.k8s.io/v1 RoleBinding, namespaced).
pub fn role_binding() -> ResourceType {
    let mut t = rbac_v1(
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        Scope::Namespaced,
    );
    t.printer_columns = binding_columns(&t, "roleBinding");
    t
}

/// `clusterrolebindings` (rbac.authorization.k8s.io/v1 ClusterRoleBinding, cluster-scoped).
pub fn cluster_role_binding() -> ResourceType {
    let mut t = rbac_v1(
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
        Scope::Cluster,
    );
    t.printer_columns = binding_columns(&t, "clusterRoleBinding");
    t
}

/// A type that is only ever POSTed and answered, never stored (the access reviews): it is
/// listed in discovery, and its requests have handlers of their own.
fn virtual_type(group: &str, kind: &str, resource: &str, scope: Scope) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        list_kind: String::new(),
        resource: resource.into(),
        singular: kind.to_ascii_lowercase(),
        scope,
        short_names: Vec::new(),
        categories: Vec::new(),
        verbs: vec![Verb::Create],
        subresources: Vec::new(),
        name_rule: NameRule::PathSegment,
        supports_table: false,
        printer_columns: Vec::new(),
        supports_strategic_merge: false,
        protobuf: true,
        schema_name: String::new(),
        definitions: Map::new(),
        selectable_fields: Vec::new(),
        unknown_field_style: UnknownFieldStyle::NotKnown,
        custom: false,
        scale: None,
        schema_cache: Default::default(),
    }
}

/// The virtual types Strata answers: SelfSubjectReview and TokenReview
/// (`authentication.k8s.io`), the access reviews and SelfSubjectRulesReview
/// (`authorization.k8s.io`).
pub fn virtual_types() -> Vec<ResourceType> {
    let authn = "authentication.k8s.io";
    let authz = "authorization.k8s.io";
    vec![
        virtual_type(
            authn,
            "SelfSubjectReview",
            "selfsubjectreviews",
            Scope::Cluster,
        ),
        virtual_type(authn, "TokenReview", "tokenreviews", Scope::Cluster),
        virtual_type(
            authz,
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
            Scope::Namespaced,
        ),
        virtual_type(
            authz,
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            Scope::Cluster,
        ),
        virtual_type(
            authz,
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            Scope::Cluster,
        ),
        virtual_type(
            authz,
            "SubjectAccessReview",
            "subjectaccessreviews",
            Scope::Cluster,
        ),
    ]
}

/// The component name of the autoscaling/v1 Scale schema (see [`scale`]).
pub const SCALE_SCHEMA: &str = "io.k8s.api.autoscaling.v1.Scale";

/// `autoscaling/v1` Scale: the body a custom resource's `scale` sub-resource reads and writes.
/// It is no resource of its own; its schema is what field validation checks a Scale against.
pub fn scale() -> ResourceType {
    let mut t = built_in(
        "autoscaling",
        "io.k8s.api.autoscaling.v1",
        "Scale",
        "scale",
        "scale",
        Scope::Namespaced,
    );
    t.supports_table = false;
    t.selectable_fields = Vec::new();
    t
}

/// All built-in types, in discovery order.
pub fn all() -> Vec<ResourceType> {
    vec![
        config_map(),
        event(),
        namespace(),
        secret(),
        service_account(),
        custom_resource_definition(),
        lease(),
        events_v1(),
        cluster_role_binding(),
        cluster_role(),
        role_binding(),
        role(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_parses_and_refs_resolve() {
        let catalog = schema_catalog();
        assert!(catalog.len() > 10);
        for t in all().into_iter().chain([scale()]) {
            assert!(t.schema().is_some(), "{}", t.kind);
            let text = serde_json::to_string(&t.definitions).unwrap();
            for part in text.split("#/components/schemas/").skip(1) {
                let name = part.split('"').next().unwrap();
                assert!(t.definitions.contains_key(name), "{} misses {name}", t.kind);
            }
        }
    }

    #[test]
    fn printer_columns_match_kubernetes() {
        let names = |t: &ResourceType| -> Vec<(String, &'static str, i32)> {
            t.printer_columns
                .iter()
                .map(|c| (c.name.clone(), c.column_type.as_str(), c.priority))
                .collect()
        };
        let s = |n: &str, p: i32| (n.to_string(), "string", p);
        assert_eq!(
            names(&service_account()),
            [s("Name", 0), s("Secrets", 0), s("Age", 0)]
        );
        assert_eq!(
            names(&namespace()),
            [s("Name", 0), s("Status", 0), s("Age", 0)]
        );
        assert_eq!(
            names(&config_map()),
            [s("Name", 0), s("Data", 0), s("Age", 0)]
        );
        for t in [role_binding(), cluster_role_binding()] {
            assert_eq!(
                names(&t),
                [
                    s("Name", 0),
                    s("Role", 0),
                    s("Age", 0),
                    s("Users", 1),
                    s("Groups", 1),
                    s("ServiceAccounts", 1)
                ]
            );
        }
        assert_eq!(
            names(&secret()),
            [s("Name", 0), s("Type", 0), s("Data", 0), s("Age", 0)]
        );
        assert_eq!(names(&lease()), [s("Name", 0), s("Holder", 0), s("Age", 0)]);
        assert_eq!(names(&event()), names(&events_v1()));
        assert_eq!(
            names(&event()),
            [
                s("Last Seen", 0),
                s("Type", 0),
                s("Reason", 0),
                s("Object", 0),
                s("Subobject", 1),
                s("Source", 1),
                s("Message", 0),
                s("First Seen", 1),
                s("Count", 1),
                s("Name", 1)
            ]
        );
        assert!(role().printer_columns.is_empty());
        assert!(cluster_role().printer_columns.is_empty());
        assert!(custom_resource_definition().printer_columns.is_empty());
        for t in all() {
            for c in &t.printer_columns {
                assert!(!c.description.is_empty(), "{} {}", t.kind, c.name);
                assert_eq!(c.format == "name", c.name == "Name");
            }
        }
    }

    /// The CustomResourceDefinition descriptor is Kubernetes': names, scope, no protobuf, a
    /// status sub-resource; and its schema keeps a whole `openAPIV3Schema` (nested schemas,
    /// free-form defaults and enums) while pruning what JSONSchemaProps does not declare.
    #[test]
    fn custom_resource_definition_type() {
        let t = custom_resource_definition();
        assert_eq!(t.api_version(), "apiextensions.k8s.io/v1");
        assert_eq!(t.short_names, ["crd", "crds"]);
        assert_eq!(t.categories, ["api-extensions"]);
        assert!(!t.namespaced() && !t.protobuf && t.supports_strategic_merge);
        assert_eq!(t.subresource("status").unwrap().kind, t.gvk());
        assert_eq!(
            t.key("", "widgets.example.com"),
            "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"
        );
        let schema = serde_json::json!({
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.a > 0", "message": "m"}],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["a"],
                    "properties": {
                        "a": {"type": "integer", "default": 3, "enum": [1, 3, {"x": 1}]},
                        "m": {"type": "object", "additionalProperties": {"type": "string"}},
                        "l": {"type": "array", "items": {"type": "string"},
                              "x-kubernetes-list-type": "set"},
                        "any": {"x-kubernetes-preserve-unknown-fields": true,
                                "example": {"free": [1, 2]}}
                    }
                }
            }
        });
        let mut crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget", "bogus": 1},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": schema.clone()}}]
            },
            "status": {"storedVersions": ["v1"], "conditions": [
                {"type": "Established", "status": "True"}]}
        });
        let node = t.schema().unwrap();
        assert_eq!(node.check_types(&crd), Ok(()));
        assert_eq!(node.prune_unknown(&mut crd), ["spec.names.bogus"]);
        assert_eq!(
            crd.pointer("/spec/versions/0/schema/openAPIV3Schema"),
            Some(&schema)
        );
        let conditions = node
            .property("status")
            .and_then(|s| s.property("conditions"))
            .unwrap();
        assert_eq!(
            conditions.list_type(),
            &crate::schema::ListType::Map(vec!["type".into()])
        );
    }
}
