//! Resource-type descriptors: everything routing, discovery, OpenAPI and the generic registry
//! need to know about a kind, as data.
//!
//! The built-in types' descriptors come from [`crate::builtin`]; a custom resource's are built
//! from its CustomResourceDefinition by the server.
//!
//! ```
//! use strata_object::{builtin, Scope, Verb};
//!
//! let sa = builtin::service_account();
//! assert_eq!((sa.api_version(), sa.kind.as_str()), ("v1".to_string(), "ServiceAccount"));
//! assert_eq!(sa.scope, Scope::Namespaced);
//! assert!(sa.has_verb(Verb::Watch));
//! assert!(sa.subresource("token").is_some());
//! // kube-apiserver's etcd key layout.
//! assert_eq!(sa.key("default", "builder"), "/registry/serviceaccounts/default/builder");
//! ```

use serde_json::{Map, Value};

/// Whether objects live in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Each object belongs to a namespace (`/api/v1/namespaces/<ns>/serviceaccounts`).
    Namespaced,
    /// Objects belong to no namespace (`/api/v1/namespaces`).
    Cluster,
}

/// The API verbs of spec §1 that discovery advertises and authorization checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// `create` (POST).
    Create,
    /// `delete` (DELETE of one object).
    Delete,
    /// `deletecollection` (DELETE of a collection).
    DeleteCollection,
    /// `get` (GET of one object).
    Get,
    /// `list` (GET of a collection).
    List,
    /// `patch` (PATCH, including server-side apply).
    Patch,
    /// `update` (PUT).
    Update,
    /// `watch` (GET with `watch=true`).
    Watch,
}

impl Verb {
    /// The verb as discovery and RBAC spell it (`"deletecollection"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Get => "get",
            Self::List => "list",
            Self::Patch => "patch",
            Self::Update => "update",
            Self::Watch => "watch",
        }
    }

    /// Every verb, in alphabetical order.
    pub const ALL: [Verb; 8] = [
        Verb::Create,
        Verb::Delete,
        Verb::DeleteCollection,
        Verb::Get,
        Verb::List,
        Verb::Patch,
        Verb::Update,
        Verb::Watch,
    ];
}

/// Group, version and kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct GroupVersionKind {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version, such as `v1`.
    pub version: String,
    /// The kind, such as `ServiceAccount`.
    pub kind: String,
}

impl GroupVersionKind {
    /// A GroupVersionKind from its three parts.
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// `v1` for the core group, `<group>/<version>` otherwise.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }
}

/// `v1` for the core group, `<group>/<version>` otherwise.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// A sub-resource below an object (`serviceaccounts/token`, `namespaces/status`).
#[derive(Clone, Debug, PartialEq)]
pub struct SubResource {
    /// The name after the object's, such as `status` or `token`.
    pub name: String,
    /// The kind served and accepted, which may belong to another group.
    pub kind: GroupVersionKind,
    /// The verbs it serves.
    pub verbs: Vec<Verb>,
    /// What requests to it do.
    pub behaviour: SubResourceBehaviour,
}

/// What a sub-resource's requests do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubResourceBehaviour {
    /// A part of the object (`status`, `finalize`): a read returns the object, a write
    /// changes only that part (the kind's strategy says which).
    Part,
    /// A request answered and not stored (`serviceaccounts/token`: a TokenRequest in, the same
    /// with a token out).
    TokenRequest,
    /// An `autoscaling/v1` Scale read from and written to the object through the type's
    /// [`ScalePaths`] (a custom resource's `scale` sub-resource).
    Scale,
}

/// Where a custom resource keeps what its `scale` sub-resource shows (CRD
/// `subresources.scale`): JSONPaths such as `.spec.replicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// Desired replicas, `.spec.…`; Scale's `spec.replicas`.
    pub spec_replicas: String,
    /// Observed replicas, `.status.…`; Scale's `status.replicas`.
    pub status_replicas: String,
    /// The serialized label selector, `.spec.…` or `.status.…`; Scale's `status.selector`.
    pub label_selector: Option<String>,
}

/// Which rule names of this type must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain, at most 253 characters (most kinds).
    Dns1123Subdomain,
    /// Any name usable as one URL path segment: not `.` or `..`, no `/` or `%` (the RBAC
    /// kinds, whose names such as `system:discovery` are not DNS names).
    PathSegment,
    /// DNS-1123 label, at most 63 characters (namespaces).
    Dns1123Label,
}

/// Resources served in one group and stored with the objects of another, as Kubernetes'
/// cohabiting resources: (served group, resource) and (stored group, resource). The served
/// type's strategy converts between the two forms.
pub const COHABITING: [(GroupResource, GroupResource); 1] =
    [(("events.k8s.io", "events"), ("", "events"))];

/// A group and a plural resource name.
pub type GroupResource = (&'static str, &'static str);

/// The one description of a resource type that every layer reads.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version served, such as `v1`.
    pub version: String,
    /// The kind, such as `ServiceAccount`.
    pub kind: String,
    /// The kind of its lists, such as `ServiceAccountList`.
    pub list_kind: String,
    /// The plural name used in URLs.
    pub resource: String,
    /// The singular name (`serviceaccount`), which kubectl also accepts.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub scope: Scope,
    /// Short names discovery advertises (`sa`).
    pub short_names: Vec<String>,
    /// Categories discovery advertises (`all`).
    pub categories: Vec<String>,
    /// The verbs served on the resource.
    pub verbs: Vec<Verb>,
    /// The sub-resources below its objects.
    pub subresources: Vec<SubResource>,
    /// The rule its objects' names must follow.
    pub name_rule: NameRule,
    /// Whether the type has the default Table conversion (custom resources may not).
    pub supports_table: bool,
    /// The columns of its Tables, in order; empty means the default `Name` / `Created At`
    /// (spec §2.6).
    pub printer_columns: Vec<crate::printer::PrinterColumn>,
    /// Whether strategic merge patch is allowed (built-in types only).
    pub supports_strategic_merge: bool,
    /// Whether the kind (and its list) has a protobuf form; custom resources have none, and
    /// a client asking only for protobuf gets 406.
    pub protobuf: bool,
    /// The OpenAPI component name of the kind's schema, e.g. `io.k8s.api.core.v1.ServiceAccount`.
    pub schema_name: String,
    /// The OpenAPI component schemas the kind's schema needs, keyed by component name; `$ref`s
    /// point at `#/components/schemas/<name>`.
    pub definitions: Map<String, Value>,
    /// The fields a `fieldSelector` may name (dotted paths such as `metadata.name`).
    pub selectable_fields: Vec<String>,
    /// How a field selector naming another field is refused.
    pub unknown_field_style: crate::selector::UnknownFieldStyle,
    /// Defined by a CustomResourceDefinition: values of the wrong type are validation causes
    /// (422), as Kubernetes reports them for custom resources, rather than decoding errors.
    pub custom: bool,
    /// The paths of the `scale` sub-resource, when the type has one.
    pub scale: Option<ScalePaths>,
    /// The schema read for walking, filled on first use; start it with
    /// `SchemaCache::default()`.
    pub schema_cache: crate::schema::SchemaCache,
}

impl ResourceType {
    /// The type's group, version and kind.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::new(&self.group, &self.version, &self.kind)
    }

    /// `v1` for the core group, `<group>/<version>` otherwise.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// Whether objects live in a namespace.
    pub fn namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// Whether the resource serves `verb`.
    pub fn has_verb(&self, verb: Verb) -> bool {
        self.verbs.contains(&verb)
    }

    /// The sub-resource of that name, if the type has one.
    pub fn subresource(&self, name: &str) -> Option<&SubResource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// The group and resource whose keys hold this type's objects: its own, or those of the
    /// resource it shares storage with ([`COHABITING`]).
    pub fn storage_resource(&self) -> (&str, &str) {
        COHABITING
            .iter()
            .find(|(served, _)| *served == (self.group.as_str(), self.resource.as_str()))
            .map_or(
                (self.group.as_str(), self.resource.as_str()),
                |(_, stored)| *stored,
            )
    }

    /// The storage key prefix for objects of this type (ends with `/`).
    pub fn key_prefix(&self) -> String {
        self.key_with(&[])
    }

    /// The storage key of one object.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        match self.scope {
            Scope::Namespaced => self.key_with(&[namespace, "/", name]),
            Scope::Cluster => self.key_with(&[name]),
        }
    }

    /// The key prefix of one namespace's objects (or of all objects when `namespace` is empty).
    pub fn collection_prefix(&self, namespace: &str) -> String {
        if namespace.is_empty() || self.scope == Scope::Cluster {
            self.key_prefix()
        } else {
            self.key_with(&[namespace, "/"])
        }
    }

    /// [`ResourceType::key_prefix`] followed by `rest`, made in one allocation (every request
    /// about an object makes its key).
    fn key_with(&self, rest: &[&str]) -> String {
        let (group, resource) = self.storage_resource();
        let parts = [
            "/registry/",
            group,
            if group.is_empty() { "" } else { "/" },
            resource,
            "/",
        ];
        let len = parts.iter().chain(rest).map(|p| p.len()).sum();
        let mut out = String::with_capacity(len);
        for part in parts.iter().chain(rest) {
            out.push_str(part);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::builtin;

    #[test]
    fn keys_follow_scope() {
        let sa = builtin::service_account();
        assert_eq!(
            sa.key("default", "x"),
            "/registry/serviceaccounts/default/x"
        );
        assert_eq!(sa.collection_prefix(""), "/registry/serviceaccounts/");
        let ns = builtin::namespace();
        assert_eq!(ns.key("", "x"), "/registry/namespaces/x");
        assert_eq!(ns.collection_prefix("ignored"), "/registry/namespaces/");
        // A type of a named group keeps its group in its keys.
        let lease = builtin::lease();
        assert_eq!(lease.key_prefix(), "/registry/coordination.k8s.io/leases/");
        assert_eq!(
            lease.key("kube-system", "l"),
            "/registry/coordination.k8s.io/leases/kube-system/l"
        );
        assert_eq!(
            lease.collection_prefix("kube-system"),
            "/registry/coordination.k8s.io/leases/kube-system/"
        );
        let crd = builtin::custom_resource_definition();
        assert_eq!(
            crd.key("", "a.b.c"),
            "/registry/apiextensions.k8s.io/customresourcedefinitions/a.b.c"
        );
        // events.k8s.io Events live under the core group's keys.
        assert_eq!(builtin::events_v1().key("ns", "e"), "/registry/events/ns/e");
    }
}
