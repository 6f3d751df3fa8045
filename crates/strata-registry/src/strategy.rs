//! Strategies: the few behaviours particular to a kind (defaulting, field resets, validation),
//! plugged into the generic REST code. A kind with no special needs uses [`DefaultStrategy`].

use std::borrow::Cow;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::{json, Map, Value};
use strata_object::field::FieldError;
pub(crate) use strata_object::field::FieldErrorKind;
use strata_object::{Object, ResourceType, Status};

/// Kind-specific hooks of the write path. Every hook has a neutral default.
pub trait Strategy: Send + Sync + 'static {
    /// What decoding a request's object does for the kind, before field ownership is
    /// recorded (custom resources' schema defaults, which their writers then own, as in
    /// Kubernetes, where decoding defaults them).
    fn decoded(&self, _obj: &mut Object) {}

    /// Normalizes a new object before validation (status resets, defaults).
    fn prepare_for_create(&self, _obj: &mut Object) {}

    /// Normalizes an update of `old` into `new` before validation.
    fn prepare_for_update(&self, _new: &mut Object, _old: &Object) {}

    /// Kind-specific validation beyond object metadata.
    fn validate(&self, _obj: &Object) -> Vec<FieldError> {
        Vec::new()
    }

    /// Kind-specific checks of an update of `old` into `new` (immutable fields).
    fn validate_update(&self, _new: &Object, _old: &Object) -> Vec<FieldError> {
        Vec::new()
    }

    /// Every check of an object about to be written: `old` is the stored object on an update,
    /// `None` on a create. By default [`Strategy::validate`], plus
    /// [`Strategy::validate_update`] on updates; a kind whose checks depend on both at once
    /// (custom resources' transition rules) overrides this instead.
    fn validate_write(&self, obj: &Object, old: Option<&Object>) -> Vec<FieldError> {
        let mut errors = self.validate(obj);
        if let Some(old) = old {
            errors.extend(self.validate_update(obj, old));
        }
        errors
    }

    /// [`Strategy::validate_write`] with the warnings the checks give the writer besides (a
    /// custom resource's CEL rule failing on a value an update left unchanged).
    fn validate_write_warned(
        &self,
        obj: &Object,
        old: Option<&Object>,
    ) -> (Vec<FieldError>, Vec<String>) {
        (self.validate_write(obj, old), Vec::new())
    }

    /// Normalizes an update through sub-resource `subresource` (`status`, `finalize`) of `old`
    /// into `new`: what the sub-resource may not change is copied back from `old`.
    fn prepare_for_subresource_update(&self, _subresource: &str, _new: &mut Object, _old: &Object) {
    }

    /// Why no request for the type can be served at all right now, if none can (a custom
    /// resource version that needs a conversion webhook).
    fn unavailable(&self) -> Option<Status> {
        None
    }

    /// Why no object of the kind may be created right now, if none may (a custom resource
    /// whose definition is being deleted).
    fn forbid_create(&self) -> Option<Status> {
        None
    }

    /// Why deleting this object is refused outright, if it is.
    fn forbid_delete(&self, _obj: &Object) -> Option<String> {
        None
    }

    /// Marks an object whose deletion must wait (the first DELETE), beyond setting
    /// `deletionTimestamp`.
    fn prepare_for_delete(&self, _obj: &mut Object) {}

    /// Whether the kind's own finalizers (besides `metadata.finalizers`) still hold the object.
    fn holds_deletion(&self, _obj: &Object) -> bool {
        false
    }

    /// Turns a stored object into this type's form, for a type stored with another's objects
    /// (`strata_object::resource::COHABITING`); the stored form is usually the type's own.
    /// A strategy that overrides it says so in [`Strategy::reads_back_as_written`].
    fn convert_from_storage(&self, _obj: &mut Object) {}

    /// Whether an object just written reads back as it was: [`Strategy::convert_from_storage`]
    /// changes nothing of it. Then the next update of a contended object may build on the
    /// written object itself instead of decoding its stored bytes.
    fn reads_back_as_written(&self) -> bool {
        true
    }

    /// The form an object of this type is stored in (the inverse of
    /// [`Strategy::convert_from_storage`]): the object itself when that is its stored form, as
    /// for most types, so that storing it copies nothing.
    fn to_storage<'a>(&self, obj: &'a Object) -> Cow<'a, Object> {
        Cow::Borrowed(obj)
    }
}

/// The strategy of a built-in type (`strata_object::builtin::all()`), by its group and kind;
/// a kind without behaviour of its own gets [`DefaultStrategy`].
pub fn builtin(info: &ResourceType) -> Arc<dyn Strategy> {
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "ConfigMap") => Arc::new(ConfigMapStrategy),
        ("", "Secret") => Arc::new(crate::kinds::SecretStrategy),
        ("", "Event") => Arc::new(crate::kinds::EventStrategy),
        ("events.k8s.io", "Event") => Arc::new(crate::kinds::EventsV1Strategy),
        ("coordination.k8s.io", "Lease") => Arc::new(crate::kinds::LeaseStrategy),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => Arc::new(crate::crd::CrdStrategy),
        ("", "Namespace") => Arc::new(NamespaceStrategy),
        ("", "ServiceAccount") => Arc::new(ServiceAccountStrategy),
        ("rbac.authorization.k8s.io", "Role") => Arc::new(RbacStrategy::new(RbacKind::Role)),
        ("rbac.authorization.k8s.io", "ClusterRole") => {
            Arc::new(RbacStrategy::new(RbacKind::ClusterRole))
        }
        ("rbac.authorization.k8s.io", "RoleBinding") => {
            Arc::new(RbacStrategy::new(RbacKind::RoleBinding))
        }
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            Arc::new(RbacStrategy::new(RbacKind::ClusterRoleBinding))
        }
        _ => Arc::new(DefaultStrategy),
    }
}

/// The strategy of kinds with no special behaviour.
#[derive(Debug, Default)]
pub struct DefaultStrategy;

impl Strategy for DefaultStrategy {}

/// ServiceAccounts: secret references are kept to their names only.
#[derive(Debug, Default)]
pub struct ServiceAccountStrategy;

impl ServiceAccountStrategy {
    fn clean_secret_references(obj: &mut Object) {
        if let Some(Value::Array(secrets)) = obj.as_map_mut().get_mut("secrets") {
            for s in secrets.iter_mut() {
                if let Value::Object(m) = s {
                    let name = m.get("name").cloned();
                    m.clear();
                    if let Some(n) = name {
                        m.insert("name".into(), n);
                    }
                }
            }
        }
    }
}

impl Strategy for ServiceAccountStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        Self::clean_secret_references(obj);
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object) {
        Self::clean_secret_references(new);
    }
}

/// ConfigMaps: Kubernetes' key rules, no key in both `data` and `binaryData`, at most 1 MiB of
/// values, and nothing but metadata may change once `immutable` is true.
#[derive(Debug, Default)]
pub struct ConfigMapStrategy;

/// The most bytes a ConfigMap's values may hold together (Kubernetes' `MaxSecretSize`).
const MAX_CONFIG_MAP_SIZE: usize = 1024 * 1024;

impl ConfigMapStrategy {
    /// Why `key` cannot name a value, in Kubernetes' words (`IsConfigMapKey`); Secrets' keys
    /// follow the same rule.
    pub(crate) fn key_errors(key: &str) -> Vec<String> {
        let mut errors = Vec::new();
        if key.len() > 253 {
            errors.push("must be no more than 253 characters".to_string());
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if key.is_empty() || !key.chars().all(allowed) {
            errors.push(
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
                 (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
                 '[-._a-zA-Z0-9]+')"
                    .to_string(),
            );
        }
        match key {
            "." => errors.push("must not be '.'".into()),
            ".." => errors.push("must not be '..'".into()),
            k if k.starts_with("..") => errors.push("must not start with '..'".into()),
            _ => {}
        }
        errors
    }

    fn section<'a>(obj: &'a Object, name: &str) -> Vec<(&'a String, &'a Value)> {
        let mut entries: Vec<_> = obj
            .as_map()
            .get(name)
            .and_then(Value::as_object)
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries
    }

    fn immutable(obj: &Object) -> bool {
        obj.as_map().get("immutable") == Some(&Value::Bool(true))
    }
}

impl Strategy for ConfigMapStrategy {
    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let data = Self::section(obj, "data");
        let binary = Self::section(obj, "binaryData");
        let mut total = 0usize;
        for (key, value) in &data {
            let path = format!("data[{key}]");
            for why in Self::key_errors(key) {
                errors.push(FieldError::invalid_string(&path, key, why));
            }
            if binary.iter().any(|(k, _)| k == key) {
                errors.push(FieldError::invalid_string(
                    &path,
                    key,
                    "duplicate of key present in binaryData",
                ));
            }
            total += value.as_str().map_or(0, str::len);
        }
        for (key, value) in &binary {
            for why in Self::key_errors(key) {
                errors.push(FieldError::invalid_string(
                    &format!("binaryData[{key}]"),
                    key,
                    why,
                ));
            }
            // Field validation has checked that values are base64 strings.
            total += value
                .as_str()
                .and_then(|text| BASE64.decode(text).ok())
                .map_or(0, |bytes| bytes.len());
        }
        if total > MAX_CONFIG_MAP_SIZE {
            // The whole object: Kubernetes names it with the empty path, printed `[]`.
            errors.push(FieldError::new(
                FieldErrorKind::TooLong,
                "[]",
                None,
                format!("must have at most {MAX_CONFIG_MAP_SIZE} bytes"),
            ));
        }
        errors
    }

    fn validate_update(&self, new: &Object, old: &Object) -> Vec<FieldError> {
        if !Self::immutable(old) {
            return Vec::new();
        }
        let why = "field is immutable when `immutable` is set";
        let mut errors = Vec::new();
        if !Self::immutable(new) {
            errors.push(FieldError::forbidden("immutable", why));
        }
        for section in ["data", "binaryData"] {
            if new.as_map().get(section) != old.as_map().get(section) {
                errors.push(FieldError::forbidden(section, why));
            }
        }
        errors
    }
}

/// Namespaces: phase and finalizers are the server's; the name label is defaulted.
#[derive(Debug, Default)]
pub struct NamespaceStrategy;

/// The finalizer the server's namespace lifecycle owns.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";
/// The label every namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Namespaces the server refuses to delete.
pub const UNDELETABLE_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

impl NamespaceStrategy {
    fn default_name_label(obj: &mut Object) {
        let name = obj.name().to_string();
        if name.is_empty() {
            return;
        }
        let meta = obj.metadata_mut();
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if !labels.is_object() {
            *labels = Value::Object(Map::new());
        }
        if let Value::Object(l) = labels {
            l.insert(NAMESPACE_NAME_LABEL.into(), Value::String(name));
        }
    }
}

impl Strategy for NamespaceStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        let map = obj.as_map_mut();
        map.insert("status".into(), json!({"phase": "Active"}));
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if let Value::Object(spec) = spec {
            let finalizers = spec
                .entry("finalizers")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !finalizers.is_array() {
                *finalizers = Value::Array(Vec::new());
            }
            if let Value::Array(f) = finalizers {
                if !f.iter().any(|v| v == NAMESPACE_FINALIZER) {
                    f.push(Value::String(NAMESPACE_FINALIZER.into()));
                }
            }
        }
        Self::default_name_label(obj);
    }

    fn prepare_for_update(&self, new: &mut Object, old: &Object) {
        // The main resource cannot change finalizers or status: those belong to the
        // `finalize` and `status` sub-resources.
        let old_spec_finalizers = old
            .as_map()
            .get("spec")
            .and_then(|s| s.get("finalizers"))
            .cloned();
        let old_status = old.as_map().get("status").cloned();
        let map = new.as_map_mut();
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        if !spec.is_object() {
            *spec = json!({});
        }
        if let Value::Object(spec) = spec {
            match old_spec_finalizers {
                Some(f) => spec.insert("finalizers".into(), f),
                None => spec.remove("finalizers"),
            };
        }
        match old_status {
            Some(s) => map.insert("status".into(), s),
            None => map.remove("status"),
        };
        Self::default_name_label(new);
    }

    fn prepare_for_subresource_update(&self, subresource: &str, new: &mut Object, old: &Object) {
        let keep = match subresource {
            // `status` changes the status only; `finalize` changes `spec.finalizers` only.
            "status" => "spec",
            "finalize" => "status",
            _ => return,
        };
        let map = new.as_map_mut();
        match old.as_map().get(keep) {
            Some(v) => map.insert(keep.into(), v.clone()),
            None => map.remove(keep),
        };
        if subresource == "finalize" {
            // What the main resource keeps the server's is still the server's here.
            Self::default_name_label(new);
        }
    }

    fn prepare_for_delete(&self, obj: &mut Object) {
        // A namespace has no grace period: only the timestamp and the phase mark it.
        obj.set_meta_value("deletionGracePeriodSeconds", None);
        let map = obj.as_map_mut();
        let status = map.entry("status").or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        if let Value::Object(s) = status {
            s.insert("phase".into(), Value::String("Terminating".into()));
        }
    }

    fn holds_deletion(&self, obj: &Object) -> bool {
        spec_finalizers(obj).next().is_some()
    }

    fn forbid_delete(&self, obj: &Object) -> Option<String> {
        UNDELETABLE_NAMESPACES
            .contains(&obj.name())
            .then(|| "this namespace may not be deleted".to_string())
    }
}

/// The finalizers in a namespace's `spec.finalizers`.
pub fn spec_finalizers(obj: &Object) -> impl Iterator<Item = &str> {
    obj.as_map()
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The API group of the RBAC kinds: the only group a binding's `roleRef` may name, and the
/// group of User and Group subjects.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The RBAC kind an [`RbacStrategy`] serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RbacKind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

impl RbacKind {
    fn namespaced(self) -> bool {
        matches!(self, Self::Role | Self::RoleBinding)
    }

    fn binding(self) -> bool {
        matches!(self, Self::RoleBinding | Self::ClusterRoleBinding)
    }
}

/// The RBAC kinds, as Kubernetes treats them: a binding's `roleRef` and its User and Group
/// subjects get the RBAC group when they name none; rules, aggregation rules, role references
/// and subjects are validated with Kubernetes' messages; a binding's `roleRef` never changes.
/// Whether the writer may grant what a role or binding holds is not decided here (the
/// frontend's escalation check).
#[derive(Debug)]
pub struct RbacStrategy {
    kind: RbacKind,
}

/// The string at `key` of `v`, or `""`.
fn text<'a>(v: Option<&'a Value>, key: &str) -> &'a str {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The strings of the list at `key` of `v` (other items, which type checking refuses, are
/// skipped).
fn strings<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A binding's role reference, its group defaulted as Kubernetes defaults it.
#[derive(PartialEq)]
struct RoleRef<'a> {
    api_group: &'a str,
    kind: &'a str,
    name: &'a str,
}

impl<'a> RoleRef<'a> {
    fn of(obj: &'a Object) -> Self {
        let r = obj.as_map().get("roleRef");
        let api_group = match text(r, "apiGroup") {
            "" => RBAC_GROUP,
            group => group,
        };
        Self {
            api_group,
            kind: text(r, "kind"),
            name: text(r, "name"),
        }
    }

    /// As Go's `%#v` prints Kubernetes' internal RoleRef in a field error.
    fn go_value(&self) -> String {
        use strata_object::go::quote;
        format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            quote(self.api_group),
            quote(self.kind),
            quote(self.name)
        )
    }
}

impl RbacStrategy {
    pub fn new(kind: RbacKind) -> Self {
        Self { kind }
    }

    /// Kubernetes' defaults of the binding kinds: `roleRef.apiGroup` (set even when the
    /// client sent no `roleRef`, which Go holds as an empty struct), and the group of User and
    /// Group subjects.
    fn default_binding(obj: &mut Object) {
        let m = obj.as_map_mut();
        let role_ref = m.entry("roleRef").or_insert(Value::Null);
        if role_ref.is_null() {
            *role_ref = Value::Object(Map::new());
        }
        if let Value::Object(r) = role_ref {
            if r.get("apiGroup")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                r.insert("apiGroup".into(), json!(RBAC_GROUP));
            }
        }
        let Some(Value::Array(subjects)) = m.get_mut("subjects") else {
            return;
        };
        for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
            let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
            let group = subject
                .get("apiGroup")
                .and_then(Value::as_str)
                .unwrap_or("");
            if group.is_empty() && matches!(kind, "User" | "Group") {
                subject.insert("apiGroup".into(), json!(RBAC_GROUP));
            }
        }
    }

    /// Kubernetes' `ValidatePolicyRule`.
    fn validate_rule(&self, rule: &Value, path: &str, errors: &mut Vec<FieldError>) {
        if strings(rule, "verbs").is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = strings(rule, "nonResourceURLs");
        let has = |key: &str| !strings(rule, key).is_empty();
        if !urls.is_empty() {
            let invalid = |detail: &str| {
                FieldError::new(
                    FieldErrorKind::Invalid,
                    format!("{path}.nonResourceURLs"),
                    Some(strata_object::go::string_slice(&urls)),
                    detail,
                )
            };
            if self.kind.namespaced() {
                errors.push(invalid(
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if has("apiGroups") || has("resources") || has("resourceNames") {
                errors.push(invalid(
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            return;
        }
        if !has("apiGroups") {
            errors.push(FieldError::required(
                &format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if !has("resources") {
            errors.push(FieldError::required(
                &format!("{path}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }

    /// The rules of a role, and the aggregation rule of a ClusterRole (Kubernetes'
    /// `ValidateRole` and `ValidateClusterRole` after the metadata).
    fn validate_role(&self, obj: &Object, errors: &mut Vec<FieldError>) {
        let m = obj.as_map();
        if let Some(Value::Array(rules)) = m.get("rules") {
            for (i, rule) in rules.iter().enumerate() {
                self.validate_rule(rule, &format!("rules[{i}]"), errors);
            }
        }
        let Some(aggregation) = m.get("aggregationRule").filter(|v| !v.is_null()) else {
            return;
        };
        let path = "aggregationRule.clusterRoleSelectors";
        let selectors = aggregation
            .get("clusterRoleSelectors")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if selectors.is_empty() {
            errors.push(FieldError::required(
                path,
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, selector) in selectors.iter().enumerate() {
            let expressions = selector
                .get("matchExpressions")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (j, expr) in expressions.iter().enumerate() {
                let at = format!("{path}[{i}].matchExpressions[{j}]");
                let values = strings(expr, "values");
                match text(Some(expr), "operator") {
                    "In" | "NotIn" if values.is_empty() => errors.push(FieldError::required(
                        &format!("{at}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    )),
                    "Exists" | "DoesNotExist" if !values.is_empty() => {
                        errors.push(FieldError::forbidden(
                            &format!("{at}.values"),
                            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                        ))
                    }
                    "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                    other => errors.push(FieldError::invalid_string(
                        &format!("{at}.operator"),
                        other,
                        "not a valid selector operator",
                    )),
                }
            }
        }
    }

    /// Kubernetes' `ValidateRoleBinding` and `ValidateClusterRoleBinding` after the metadata,
    /// on a defaulted binding.
    fn validate_binding(&self, obj: &Object, errors: &mut Vec<FieldError>) {
        let role_ref = obj.as_map().get("roleRef");
        let group = text(role_ref, "apiGroup");
        if group != RBAC_GROUP {
            errors.push(FieldError::not_supported(
                "roleRef.apiGroup",
                group,
                &[RBAC_GROUP],
            ));
        }
        let kinds: &[&str] = match self.kind {
            RbacKind::ClusterRoleBinding => &["ClusterRole"],
            _ => &["Role", "ClusterRole"],
        };
        let kind = text(role_ref, "kind");
        if !kinds.contains(&kind) {
            errors.push(FieldError::not_supported("roleRef.kind", kind, kinds));
        }
        let name = text(role_ref, "name");
        if name.is_empty() {
            errors.push(FieldError::required("roleRef.name", ""));
        }
        for problem in crate::validation::path_segment_errors(name) {
            errors.push(FieldError::invalid_string("roleRef.name", name, problem));
        }
        let Some(Value::Array(subjects)) = obj.as_map().get("subjects") else {
            return;
        };
        for (i, subject) in subjects.iter().enumerate() {
            self.validate_subject(subject, &format!("subjects[{i}]"), errors);
        }
    }

    /// Kubernetes' `ValidateRoleBindingSubject`: a ServiceAccount needs a valid name, no group
    /// and, in a ClusterRoleBinding, a namespace; Users and Groups belong to the RBAC group.
    fn validate_subject(&self, subject: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let subject = Some(subject);
        let name = text(subject, "name");
        if name.is_empty() {
            errors.push(FieldError::required(&format!("{path}.name"), ""));
        }
        let group = text(subject, "apiGroup");
        match text(subject, "kind") {
            "ServiceAccount" => {
                if !name.is_empty() {
                    for problem in strata_object::names::dns1123_subdomain_errors(name) {
                        errors.push(FieldError::invalid_string(
                            &format!("{path}.name"),
                            name,
                            problem,
                        ));
                    }
                }
                if !group.is_empty() {
                    errors.push(FieldError::not_supported(
                        &format!("{path}.apiGroup"),
                        group,
                        &[""],
                    ));
                }
                if !self.kind.namespaced() && text(subject, "namespace").is_empty() {
                    errors.push(FieldError::required(&format!("{path}.namespace"), ""));
                }
            }
            "User" | "Group" => {
                if group != RBAC_GROUP {
                    errors.push(FieldError::not_supported(
                        &format!("{path}.apiGroup"),
                        group,
                        &[RBAC_GROUP],
                    ));
                }
            }
            other => errors.push(FieldError::not_supported(
                &format!("{path}.kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

impl Strategy for RbacStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        if self.kind.binding() {
            Self::default_binding(obj);
        }
    }

    fn prepare_for_update(&self, new: &mut Object, _old: &Object) {
        if self.kind.binding() {
            Self::default_binding(new);
        }
    }

    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if self.kind.binding() {
            self.validate_binding(obj, &mut errors);
        } else {
            self.validate_role(obj, &mut errors);
        }
        errors
    }

    fn validate_update(&self, new: &Object, old: &Object) -> Vec<FieldError> {
        if !self.kind.binding() {
            return Vec::new();
        }
        // Both sides defaulted, so that a binding stored without a group compares equal.
        let role_ref = RoleRef::of(new);
        if role_ref == RoleRef::of(old) {
            return Vec::new();
        }
        vec![FieldError::new(
            FieldErrorKind::Invalid,
            "roleRef",
            Some(role_ref.go_value()),
            "cannot change roleRef",
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> Object {
        Object::from_value(v).expect("the tests pass objects")
    }

    /// The descriptors' protobuf flag and the codec's message table agree, for every built-in
    /// kind and its list.
    #[test]
    fn builtin_types_with_protobuf_have_messages() {
        for info in strata_object::builtin::all() {
            let v = info.api_version();
            for kind in [&info.kind, &info.list_kind] {
                assert_eq!(
                    strata_codec::proto::has_message(&v, kind),
                    info.protobuf,
                    "{v} {kind}"
                );
            }
        }
    }

    fn config_map_problems(v: Value) -> Vec<String> {
        ConfigMapStrategy
            .validate(&object(v))
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn config_map_keys_sizes_and_immutability() {
        assert!(config_map_problems(json!({
            "metadata": {"name": "ok"},
            "data": {"a.conf": "x", "B_2-c": ""},
            "binaryData": {"blob": "AAEC"}
        }))
        .is_empty());
        let got = config_map_problems(json!({
            "metadata": {"name": "bad"},
            "data": {"a/b": "x", "..x": "y", "same": "1"},
            "binaryData": {"same": "AA=="}
        }));
        assert_eq!(
            got,
            [
                "data[..x]: Invalid value: \"..x\": must not start with '..'",
                "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                "data[same]: Invalid value: \"same\": duplicate of key present in binaryData",
            ]
        );
        let big = "x".repeat(MAX_CONFIG_MAP_SIZE);
        let got =
            config_map_problems(json!({"metadata": {"name": "big"}, "data": {"a": big, "b": "y"}}));
        assert_eq!(got, ["[]: Too long: must have at most 1048576 bytes"]);

        let old = object(json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "1"}}));
        let same = object(
            json!({"metadata": {"name": "c", "labels": {"x": "y"}}, "immutable": true, "data": {"a": "1"}}),
        );
        assert!(ConfigMapStrategy.validate_update(&same, &old).is_empty());
        let changed = object(json!({"metadata": {"name": "c"}, "data": {"a": "2"}}));
        let got: Vec<String> = ConfigMapStrategy
            .validate_update(&changed, &old)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "immutable: Forbidden: field is immutable when `immutable` is set",
                "data: Forbidden: field is immutable when `immutable` is set",
            ]
        );
        let mutable = object(json!({"metadata": {"name": "c"}, "data": {"a": "1"}}));
        assert!(ConfigMapStrategy
            .validate_update(&changed, &mutable)
            .is_empty());
    }

    /// The messages of the errors `kind` finds in `v` after its defaults.
    fn problems(kind: RbacKind, v: Value) -> Vec<String> {
        let strategy = RbacStrategy::new(kind);
        let mut obj = object(v);
        strategy.prepare_for_create(&mut obj);
        strategy
            .validate(&obj)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect()
    }

    #[test]
    fn rules_follow_kubernetes_validate_policy_rule() {
        let role = |rules: Value| json!({"metadata": {"name": "r"}, "rules": rules});
        assert!(problems(
            RbacKind::Role,
            role(json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]))
        )
        .is_empty());
        assert_eq!(
            problems(RbacKind::Role, role(json!([{"apiGroups": [""]}]))),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[0].resources: Required value: resource rules must supply at least one resource",
            ]
        );
        assert_eq!(
            problems(
                RbacKind::Role,
                role(json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}]))
            ),
            [
                "rules[0].nonResourceURLs: Invalid value: []string{\"/healthz\", \"/api/*\"}: \
              namespaced rules cannot apply to non-resource URLs"
            ]
        );
        assert!(problems(
            RbacKind::ClusterRole,
            role(json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]))
        )
        .is_empty());
        assert_eq!(
            problems(
                RbacKind::ClusterRole,
                role(
                    json!([{"verbs": ["get"], "nonResourceURLs": ["/x"], "resourceNames": ["n"]}])
                )
            ),
            [
                "rules[0].nonResourceURLs: Invalid value: []string{\"/x\"}: \
              rules cannot apply to both regular resources and non-resource URLs"
            ]
        );
    }

    #[test]
    fn aggregation_rules_need_selectors_with_valid_expressions() {
        let role = |rule: Value| json!({"metadata": {"name": "r"}, "aggregationRule": rule});
        assert_eq!(
            problems(RbacKind::ClusterRole, role(json!({}))),
            [
                "aggregationRule.clusterRoleSelectors: Required value: at least one \
              clusterRoleSelector required if aggregationRule is non-nil"
            ]
        );
        assert!(problems(RbacKind::ClusterRole, role(Value::Null)).is_empty());
        let expressions = json!({"clusterRoleSelectors": [{"matchExpressions": [
            {"key": "a", "operator": "In"},
            {"key": "b", "operator": "Exists", "values": ["x"]},
            {"key": "c", "operator": "Near", "values": ["x"]},
            {"key": "d", "operator": "NotIn", "values": ["x"]},
        ]}]});
        assert_eq!(
            problems(RbacKind::ClusterRole, role(expressions)),
            [
                "aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values: Required \
                 value: must be specified when `operator` is 'In' or 'NotIn'",
                "aggregationRule.clusterRoleSelectors[0].matchExpressions[1].values: \
                 Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "aggregationRule.clusterRoleSelectors[0].matchExpressions[2].operator: Invalid \
                 value: \"Near\": not a valid selector operator",
            ]
        );
    }

    #[test]
    fn bindings_are_defaulted_then_validated() {
        let binding = |role_ref: Value, subjects: Value| json!({"metadata": {"name": "b", "namespace": "ns"}, "roleRef": role_ref, "subjects": subjects});
        let mut obj = object(binding(
            json!({"kind": "Role", "name": "r"}),
            json!([{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "sa"}]),
        ));
        let strategy = RbacStrategy::new(RbacKind::RoleBinding);
        strategy.prepare_for_create(&mut obj);
        assert_eq!(obj.as_map()["roleRef"]["apiGroup"], RBAC_GROUP);
        assert_eq!(obj.as_map()["subjects"][0]["apiGroup"], RBAC_GROUP);
        assert!(obj.as_map()["subjects"][1].get("apiGroup").is_none());
        assert!(strategy.validate(&obj).is_empty());

        assert_eq!(
            problems(
                RbacKind::RoleBinding,
                json!({"metadata": {"name": "b", "namespace": "ns"}})
            ),
            [
                "roleRef.kind: Unsupported value: \"\": supported values: \"Role\", \"ClusterRole\"",
                "roleRef.name: Required value",
            ]
        );
        assert_eq!(
            problems(
                RbacKind::ClusterRoleBinding,
                binding(
                    json!({"apiGroup": "example.com", "kind": "Role", "name": "a/b"}),
                    json!([
                        {"kind": "ServiceAccount", "name": "Bad_Name", "apiGroup": "x"},
                        {"kind": "Robot", "name": "r"},
                        {"kind": "Group", "apiGroup": "other", "name": ""},
                    ]),
                )
            ),
            [
                "roleRef.apiGroup: Unsupported value: \"example.com\": supported values: \
                 \"rbac.authorization.k8s.io\"",
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "roleRef.name: Invalid value: \"a/b\": may not contain '/'",
                "subjects[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 \
                 subdomain must consist of lower case alphanumeric characters, '-' or '.', and \
                 must start and end with an alphanumeric character (e.g. 'example.com', regex \
                 used for validation is \
                 '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "subjects[0].apiGroup: Unsupported value: \"x\": supported values: \"\"",
                "subjects[0].namespace: Required value",
                "subjects[1].kind: Unsupported value: \"Robot\": supported values: \
                 \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[2].name: Required value",
                "subjects[2].apiGroup: Unsupported value: \"other\": supported values: \
                 \"rbac.authorization.k8s.io\"",
            ]
        );
    }

    #[test]
    fn role_ref_never_changes() {
        let strategy = RbacStrategy::new(RbacKind::RoleBinding);
        let old = object(json!({"roleRef": {"kind": "Role", "name": "a"}}));
        let mut same = object(json!({"roleRef": {"kind": "Role", "name": "a"}}));
        strategy.prepare_for_update(&mut same, &old);
        assert!(strategy.validate_update(&same, &old).is_empty());
        let changed = object(
            json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "a"}}),
        );
        let errors: Vec<String> = strategy
            .validate_update(&changed, &old)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect();
        assert_eq!(
            errors,
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", \
              Kind:\"ClusterRole\", Name:\"a\"}: cannot change roleRef"
            ]
        );
    }
}
