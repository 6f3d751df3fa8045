//! Strategies: the few behaviours particular to a kind (defaulting, field resets, validation),
//! plugged into the generic REST code. A kind with no special needs uses [`DefaultStrategy`].

use serde_json::{json, Map, Value};
use strata_object::field::FieldError;
pub(crate) use strata_object::field::FieldErrorKind;
use strata_object::Object;

/// Kind-specific hooks of the write path. Every hook has a neutral default.
pub trait Strategy: Send + Sync + 'static {
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

    /// Normalizes an update through sub-resource `subresource` (`status`, `finalize`) of `old`
    /// into `new`: what the sub-resource may not change is copied back from `old`.
    fn prepare_for_subresource_update(&self, _subresource: &str, _new: &mut Object, _old: &Object) {
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

/// The RBAC kinds: rules and bindings checked as Kubernetes checks them; a binding's `roleRef`
/// never changes.
#[derive(Debug)]
pub struct RbacStrategy {
    /// `Role`, `ClusterRole`, `RoleBinding` or `ClusterRoleBinding`.
    kind: &'static str,
}

impl RbacStrategy {
    pub fn new(kind: &'static str) -> Self {
        Self { kind }
    }

    fn validate_rules(&self, obj: &Object, errors: &mut Vec<FieldError>) {
        let Some(Value::Array(rules)) = obj.as_map().get("rules") else {
            return;
        };
        let list = |rule: &Value, key: &str| -> usize {
            rule.get(key).and_then(Value::as_array).map_or(0, Vec::len)
        };
        for (i, rule) in rules.iter().enumerate() {
            let path = format!("rules[{i}]");
            if list(rule, "verbs") == 0 {
                errors.push(FieldError::required(
                    &format!("{path}.verbs"),
                    "verbs must contain at least one value",
                ));
            }
            let urls = list(rule, "nonResourceURLs");
            if urls > 0 {
                if self.kind == "Role" {
                    errors.push(FieldError::new(
                        crate::strategy::FieldErrorKind::Invalid,
                        format!("{path}.nonResourceURLs"),
                        Some(format!("{}", rule["nonResourceURLs"])),
                        "namespaced rules cannot apply to non-resource URLs",
                    ));
                }
                if list(rule, "apiGroups") > 0 || list(rule, "resources") > 0 {
                    errors.push(FieldError::new(
                        crate::strategy::FieldErrorKind::Invalid,
                        format!("{path}.nonResourceURLs"),
                        Some(format!("{}", rule["nonResourceURLs"])),
                        "rules cannot apply to both regular resources and non-resource URLs",
                    ));
                }
            } else {
                if list(rule, "apiGroups") == 0 {
                    errors.push(FieldError::required(
                        &format!("{path}.apiGroups"),
                        "resource rules must supply at least one api group",
                    ));
                }
                if list(rule, "resources") == 0 {
                    errors.push(FieldError::required(
                        &format!("{path}.resources"),
                        "resource rules must supply at least one resource",
                    ));
                }
            }
        }
    }

    fn validate_binding(&self, obj: &Object, errors: &mut Vec<FieldError>) {
        let role_ref = obj.as_map().get("roleRef");
        let text = |v: Option<&Value>, k: &str| {
            v.and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match role_ref {
            None | Some(Value::Null) => {
                errors.push(FieldError::required("roleRef", ""));
            }
            Some(_) => {
                let kind = text(role_ref, "kind");
                let allowed: &[&str] = if self.kind == "ClusterRoleBinding" {
                    &["ClusterRole"]
                } else {
                    &["Role", "ClusterRole"]
                };
                if !allowed.contains(&kind.as_str()) {
                    errors.push(FieldError::not_supported("roleRef.kind", &kind, allowed));
                }
                let group = text(role_ref, "apiGroup");
                if group != "rbac.authorization.k8s.io" {
                    errors.push(FieldError::not_supported(
                        "roleRef.apiGroup",
                        &group,
                        &["rbac.authorization.k8s.io"],
                    ));
                }
                if text(role_ref, "name").is_empty() {
                    errors.push(FieldError::required("roleRef.name", ""));
                }
            }
        }
        let Some(Value::Array(subjects)) = obj.as_map().get("subjects") else {
            return;
        };
        for (i, subject) in subjects.iter().enumerate() {
            let kind = text(Some(subject), "kind");
            if !["User", "Group", "ServiceAccount"].contains(&kind.as_str()) {
                errors.push(FieldError::not_supported(
                    &format!("subjects[{i}].kind"),
                    &kind,
                    &["ServiceAccount", "User", "Group"],
                ));
            }
            if text(Some(subject), "name").is_empty() {
                errors.push(FieldError::required(&format!("subjects[{i}].name"), ""));
            }
        }
    }
}

impl Strategy for RbacStrategy {
    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        let mut errors = Vec::new();
        match self.kind {
            "Role" | "ClusterRole" => self.validate_rules(obj, &mut errors),
            _ => self.validate_binding(obj, &mut errors),
        }
        errors
    }

    fn validate_update(&self, new: &Object, old: &Object) -> Vec<FieldError> {
        if self.kind.ends_with("Binding")
            && new.as_map().get("roleRef") != old.as_map().get("roleRef")
        {
            return vec![FieldError::new(
                crate::strategy::FieldErrorKind::Invalid,
                "roleRef",
                Some(format!(
                    "{}",
                    new.as_map().get("roleRef").cloned().unwrap_or(Value::Null)
                )),
                "cannot change roleRef",
            )];
        }
        Vec::new()
    }
}
