//! Custom resources: the strategy of a type a CustomResourceDefinition defines (schema
//! validation, defaulting, CEL rules, the `status` sub-resource, `metadata.generation`, the
//! storage version), and the `scale` sub-resource.
//!
//! A served version's strategy can be changed in place ([`CustomResourceStrategy::set`]), so a
//! CRD update takes effect on the next request without dropping the type's watch cache.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::{json, Map, Value};
use strata_apiext::cel::Rules;
use strata_apiext::crd::ServedVersion;
use strata_apiext::schema::Schema;
use strata_apiext::validate;
use strata_object::field::FieldError;
use strata_object::resource::{ResourceType, ScalePaths};
use strata_object::{Object, Status};
use strata_patch::{ManagedFields, PathElement};

use crate::strategy::Strategy;
use crate::writes::Ownership;
use crate::{write, Body, PatchKind, RegisteredType, Registry, WriteOptions};

/// What a custom resource of one served version is checked against.
#[derive(Debug)]
struct Compiled {
    /// The version's schema, parsed once (patterns compiled).
    schema: Schema,
    /// The schema as the CRD gives it, to tell whether a change of the CRD changes it.
    source: Value,
    rules: Rules,
    status_subresource: bool,
    api_version: String,
    storage_api_version: String,
    /// The plural, for errors.
    resource: String,
    /// Why requests at this version are refused (see `ServedVersion::unavailable`).
    unavailable: Option<String>,
}

/// The strategy of one served version of a CustomResourceDefinition.
#[derive(Debug)]
pub struct CustomResourceStrategy {
    compiled: RwLock<Arc<Compiled>>,
    /// The definition is being deleted: no new objects.
    terminating: AtomicBool,
}

impl CustomResourceStrategy {
    pub fn new(version: &ServedVersion) -> Self {
        Self {
            compiled: RwLock::new(Arc::new(Self::compile(version))),
            terminating: AtomicBool::new(false),
        }
    }

    /// Replaces the schema, rules and sub-resources (the CRD changed). True when the schema
    /// changed, and with it what reading a stored object gives (pruning, defaults).
    pub fn set(&self, version: &ServedVersion) -> bool {
        let compiled = Arc::new(Self::compile(version));
        let old = std::mem::replace(
            &mut *self.compiled.write().unwrap_or_else(|e| e.into_inner()),
            compiled,
        );
        old.source != version.schema
    }

    /// Marks the definition as being deleted (creates answer 405 from now on).
    pub fn set_terminating(&self) {
        self.terminating.store(true, Ordering::SeqCst);
    }

    fn compile(version: &ServedVersion) -> Compiled {
        // The CRD's rules were checked when it was written; one that no longer compiles (a CRD
        // stored by another server) fails the writes it would check, naming why, as Kubernetes
        // reports it, and the others still apply.
        let rules = Rules::compile_stored(&version.schema);
        Compiled {
            schema: Schema::parse(&version.schema),
            source: version.schema.clone(),
            rules,
            status_subresource: version.status_subresource,
            api_version: version.info.api_version(),
            storage_api_version: version.storage_api_version.clone(),
            resource: version.info.resource.clone(),
            unavailable: version.unavailable.clone(),
        }
    }

    fn current(&self) -> Arc<Compiled> {
        self.compiled
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether `new` differs from `old` beyond metadata (and status, when it has its own
    /// sub-resource): what moves `metadata.generation`.
    fn spec_changed(c: &Compiled, new: &Object, old: &Object) -> bool {
        let rest = |o: &Object| -> Map<String, Value> {
            o.as_map()
                .iter()
                .filter(|(k, _)| {
                    let envelope = matches!(k.as_str(), "metadata" | "apiVersion" | "kind");
                    let own_status = c.status_subresource && k.as_str() == "status";
                    !envelope && !own_status
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        rest(new) != rest(old)
    }

    fn default(c: &Compiled, obj: &mut Object) {
        Self::with_value(obj, |value| {
            strata_apiext::defaults::apply_defaults_with(&c.schema, value)
        });
    }

    /// Runs `change` on `obj` as a JSON value.
    fn with_value(obj: &mut Object, change: impl FnOnce(&mut Value)) {
        let mut value = Value::Object(std::mem::take(obj.as_map_mut()));
        change(&mut value);
        if let Value::Object(m) = value {
            *obj.as_map_mut() = m;
        }
    }
}

fn generation(obj: &Object) -> i64 {
    obj.meta_value("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

impl Strategy for CustomResourceStrategy {
    fn decoded(&self, obj: &mut Object) {
        Self::default(&self.current(), obj);
    }

    fn unavailable(&self) -> Option<Status> {
        self.current()
            .unavailable
            .as_ref()
            .map(|why| Status::service_unavailable(why.clone()))
    }

    fn forbid_create(&self) -> Option<Status> {
        if !self.terminating.load(Ordering::SeqCst) {
            return None;
        }
        let c = self.current();
        let mut refused = Status::method_not_allowed_for(&c.resource, "create");
        refused.message =
            "create not allowed while custom resource definition is terminating".into();
        Some(refused)
    }

    fn prepare_for_create(&self, obj: &mut Object) {
        let c = self.current();
        if c.status_subresource {
            obj.as_map_mut().remove("status");
        }
        // Defaults were applied when the body was decoded (`decoded`).
        obj.set_meta_value("generation", Some(json!(1)));
    }

    fn prepare_for_update(&self, new: &mut Object, old: &Object) {
        let c = self.current();
        if c.status_subresource {
            match old.as_map().get("status") {
                Some(s) => new.as_map_mut().insert("status".into(), s.clone()),
                None => new.as_map_mut().remove("status"),
            };
        }
        let mut next = generation(old);
        if Self::spec_changed(&c, new, old) {
            next += 1;
        }
        new.set_meta_value("generation", Some(json!(next.max(1))));
    }

    fn prepare_for_subresource_update(&self, subresource: &str, new: &mut Object, old: &Object) {
        match subresource {
            // Only the status changes; everything else, metadata included, stays as it was
            // (managedFields record the status writer).
            "status" => {
                let status = new.as_map_mut().remove("status");
                let managed = new.meta_value("managedFields").cloned();
                let mut next = old.clone();
                match status {
                    Some(s) => next.as_map_mut().insert("status".into(), s),
                    None => next.as_map_mut().remove("status"),
                };
                next.set_meta_value("managedFields", managed);
                *new = next;
            }
            // The replicas changed through `scale`: an update of the object like any other.
            "scale" => self.prepare_for_update(new, old),
            _ => {}
        }
    }

    fn validate_write(&self, obj: &Object, old: Option<&Object>) -> Vec<FieldError> {
        self.validate_write_warned(obj, old).0
    }

    fn validate_write_warned(
        &self,
        obj: &Object,
        old: Option<&Object>,
    ) -> (Vec<FieldError>, Vec<String>) {
        let c = self.current();
        let value = obj.as_value();
        // On an update, what failed the schema but the update left unchanged is not the
        // writer's fault (ratcheting): Kubernetes lets the update through, and so do CEL rules.
        let mut errors = match old {
            Some(old) => validate::validate_update_with(&c.schema, value, old.as_value()),
            None => validate::validate_with(&c.schema, value),
        };
        let mut warnings = Vec::new();
        if !c.rules.is_empty() {
            match validate::rules_blocked_by(&errors) {
                Some(blocked) => errors.push(blocked),
                None => {
                    // Kubernetes tells the writer about the ratcheted failures as warnings.
                    let evaluated = c.rules.evaluate(value, old.map(Object::as_value));
                    errors.extend(evaluated.errors);
                    warnings = evaluated.warnings;
                }
            }
        }
        (errors, warnings)
    }

    fn reads_back_as_written(&self) -> bool {
        false
    }

    fn convert_from_storage(&self, obj: &mut Object) {
        let c = self.current();
        obj.as_map_mut()
            .insert("apiVersion".into(), Value::String(c.api_version.clone()));
        // Read as Kubernetes reads a stored object: what the schema no longer describes (a
        // field removed from it since the object was written) is dropped, then defaults apply.
        Self::with_value(obj, |value| {
            strata_apiext::prune::prune(&c.schema, value, true);
            strata_apiext::defaults::apply_defaults_with(&c.schema, value);
        });
    }

    fn to_storage<'a>(&self, obj: &'a Object) -> Cow<'a, Object> {
        let c = self.current();
        if obj.api_version() == c.storage_api_version {
            return Cow::Borrowed(obj);
        }
        let mut stored = obj.clone();
        stored.as_map_mut().insert(
            "apiVersion".into(),
            Value::String(c.storage_api_version.clone()),
        );
        Cow::Owned(stored)
    }
}

/// The value at a dotted path such as `.spec.replicas`.
fn at<'a>(obj: &'a Object, path: &str) -> Option<&'a Value> {
    let mut parts = path.trim_start_matches('.').split('.');
    let first = obj.as_map().get(parts.next()?)?;
    parts.try_fold(first, |v, k| v.get(k))
}

/// Sets the value at a dotted path, creating the objects on the way.
fn set_at(obj: &mut Object, path: &str, value: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let Some((last, parents)) = parts.split_last() else {
        return;
    };
    let mut map = obj.as_map_mut();
    for p in parents {
        let entry = map.entry(p.to_string()).or_insert_with(|| json!({}));
        if !entry.is_object() {
            *entry = json!({});
        }
        let Value::Object(next) = entry else {
            return;
        };
        map = next;
    }
    map.insert(last.to_string(), value);
}

/// An `autoscaling/v1` Scale showing `obj` through `paths`.
pub fn scale_of(obj: &Object, paths: &ScalePaths) -> Value {
    let int = |p: &str| at(obj, p).and_then(Value::as_i64).unwrap_or(0);
    let mut metadata = Map::new();
    for key in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = obj.meta_value(key).filter(|v| *v != &json!("")) {
            metadata.insert(key.into(), v.clone());
        }
    }
    let mut spec = Map::new();
    let replicas = int(&paths.spec_replicas);
    if replicas != 0 {
        spec.insert("replicas".into(), json!(replicas));
    }
    let mut status = Map::new();
    status.insert("replicas".into(), json!(int(&paths.status_replicas)));
    if let Some(selector) = paths
        .label_selector
        .as_deref()
        .and_then(|p| at(obj, p))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        status.insert("selector".into(), json!(selector));
    }
    json!({
        "kind": "Scale",
        "apiVersion": SCALE_VERSION,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// The replicas a Scale asks for, checked as Kubernetes checks a Scale.
fn desired_replicas(scale: &Value, name: &str) -> Result<(i64, String), Status> {
    let invalid = |e: FieldError| Status::invalid("autoscaling", "Scale", name, &[e]);
    if let Some(kind) = scale.get("kind").and_then(Value::as_str) {
        if !kind.is_empty() && kind != "Scale" {
            return Err(Status::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind (Scale)"
            )));
        }
    }
    let replicas = match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().ok_or_else(|| {
            Status::bad_request(format!(
                "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: expected an integer, got {v}"
            ))
        })?,
    };
    if replicas < 0 {
        return Err(invalid(FieldError::new(
            strata_object::field::FieldErrorKind::Invalid,
            "spec.replicas",
            Some(replicas.to_string()),
            "must be greater than or equal to 0",
        )));
    }
    if i32::try_from(replicas).is_err() {
        return Err(Status::bad_request(format!(
            "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: {replicas} overflows int32"
        )));
    }
    let resource_version = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok((replicas, resource_version))
}

impl Registry {
    fn scale_paths(rt: &RegisteredType) -> Result<&ScalePaths, Status> {
        rt.info.scale.as_ref().ok_or_else(Status::path_not_found)
    }

    /// The `scale` sub-resource of an object.
    pub async fn get_scale(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
    ) -> Result<Value, Status> {
        let paths = Self::scale_paths(rt)?;
        let obj = self.get(rt, namespace, name, "").await?;
        Ok(scale_of(&obj, paths))
    }

    /// Writes the `scale` sub-resource: a Scale (PUT), or a patch of the current Scale. Only
    /// the desired replicas reach the object. Answers the new Scale and the warnings: the
    /// Scale's unknown and duplicate fields under `fieldValidation=Warn`, then the object's
    /// validation (rules the unchanged rest of the object still fails).
    pub async fn write_scale(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        change: ScaleChange,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>), Status> {
        let paths = Self::scale_paths(rt)?.clone();
        let mut opts = opts.clone();
        opts.subresource = "scale".into();
        if let ScaleChange::Patch(kind, _) = &change {
            opts.check_patch(*kind)?;
        }
        // A Scale is checked against its own schema: unknown and duplicate fields are warned
        // of or refused as in any body or patch, and never reach the object.
        let level = opts.field_validation;
        let mut fields = Vec::new();
        let change = match change {
            ScaleChange::Replace(body) => {
                ScaleChange::Replace(checked_scale(body, &opts, write::Stage::Body, &mut fields)?)
            }
            ScaleChange::Patch(PatchKind::Apply, body) => ScaleChange::Patch(
                PatchKind::Apply,
                checked_scale(body, &opts, write::Stage::Apply, &mut fields)?,
            ),
            patch => patch,
        };
        let ownership = match &change {
            ScaleChange::Patch(PatchKind::Apply, _) => Ownership::Given,
            _ => Ownership::Changes,
        };
        let mut warnings = Vec::new();
        let (written, _) = self
            .guaranteed_update(
                rt,
                namespace,
                name,
                &opts,
                ownership,
                "",
                &mut warnings,
                |current| {
                    // An apply decides who owns the replicas; any other write makes its
                    // manager their owner, as every update does.
                    let mut managed = None;
                    let scale = match &change {
                        ScaleChange::Replace(body) => body.value.clone(),
                        ScaleChange::Patch(PatchKind::Apply, config) => {
                            let (scale, owners) =
                                apply_scale(&rt.info, current, &paths, &config.value, &opts)?;
                            managed = Some(owners);
                            scale
                        }
                        ScaleChange::Patch(kind, patch) => {
                            let now = scale_of(current, &paths);
                            // A Scale has no lists: a strategic merge is a merge.
                            let kind = match kind {
                                PatchKind::Strategic => PatchKind::Merge,
                                k => *k,
                            };
                            if kind == PatchKind::Merge && !patch.value.is_object() {
                                return Err(Status::bad_request(
                                    "error decoding patch: the patch must be a JSON object",
                                ));
                            }
                            let mut scale = write::apply_patch(&rt.info, kind, &now, &patch.value)?;
                            fields = write::check_fields(
                                scale_type(),
                                &mut scale,
                                &patch.duplicates,
                                level,
                                write::Stage::Patch,
                            )?;
                            scale
                        }
                    };
                    let (replicas, resource_version) = desired_replicas(&scale, name)?;
                    let mut next = current.clone();
                    set_at(&mut next, &paths.spec_replicas, json!(replicas));
                    if let Some(managed) = managed {
                        let mut value = next.into_value();
                        managed.write_to(&mut value);
                        next = Object::from_value(value)
                            .map_err(|e| Status::bad_request(e.to_string()))?;
                    }
                    // A resourceVersion the Scale names is a precondition on the object.
                    next.set_resource_version(if resource_version.is_empty() {
                        ""
                    } else {
                        &resource_version
                    });
                    Ok(next)
                },
            )
            .await?;
        fields.extend(warnings);
        Ok((scale_of(&written, &paths), fields))
    }
}

/// The version of every Scale.
const SCALE_VERSION: &str = "autoscaling/v1";

/// The elements of a dotted path such as `.spec.replicas`.
fn path_elements(path: &str) -> Vec<PathElement> {
    path.trim_start_matches('.')
        .split('.')
        .map(|f| PathElement::Field(f.to_string()))
        .collect()
}

/// Server-side apply of a Scale to `current`, as Kubernetes does it: the object's managers are
/// shown as the Scale's (the owners of the replicas path own `spec.replicas`), the
/// configuration is applied to the Scale with them, so that changing replicas another manager
/// owns is a conflict unless forced, and the result is mapped back. Answers the Scale applied
/// and the object's managed fields after it.
fn apply_scale(
    info: &ResourceType,
    current: &Object,
    paths: &ScalePaths,
    config: &Value,
    opts: &WriteOptions,
) -> Result<(Value, ManagedFields), Status> {
    let replicas = path_elements(&paths.spec_replicas);
    // Stored managedFields are always written by Strata; unreadable ones count as none.
    let managed = ManagedFields::of_object(current.as_value()).unwrap_or_default();
    let mut live = scale_of(current, paths);
    managed
        .to_scale(&replicas, SCALE_VERSION)
        .write_to(&mut live);
    let schema = scale_type()
        .schema()
        .ok_or_else(|| Status::internal("the Scale type has no schema"))?;
    let applied = strata_patch::apply_through(
        Some(&live),
        config,
        schema,
        &opts.field_manager,
        opts.force,
        SCALE_VERSION,
        Some("scale"),
        &strata_object::now_rfc3339(),
    )
    .map_err(write::apply_error)?;
    let owners = ManagedFields::of_object(&applied).unwrap_or_default();
    let managed = managed.from_scale(&owners, &replicas, &info.api_version());
    Ok((applied, managed))
}

/// The autoscaling/v1 Scale type, whose schema checks the fields of Scale bodies.
fn scale_type() -> &'static ResourceType {
    static SCALE: OnceLock<ResourceType> = OnceLock::new();
    SCALE.get_or_init(strata_object::builtin::scale)
}

/// A Scale body (PUT or apply) after field validation, its warnings added to `warnings`.
fn checked_scale(
    body: Body,
    opts: &WriteOptions,
    stage: write::Stage,
    warnings: &mut Vec<String>,
) -> Result<Body, Status> {
    let (value, found) = body.checked(scale_type(), opts.field_validation, stage)?;
    warnings.extend(found);
    Ok(Body::from(value))
}

/// A write of the `scale` sub-resource.
#[derive(Debug)]
pub enum ScaleChange {
    /// PUT: the Scale as sent.
    Replace(Body),
    /// PATCH of the current Scale.
    Patch(PatchKind, Body),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn paths() -> ScalePaths {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.selector".into()),
        }
    }

    #[test]
    fn a_scale_shows_the_object_through_its_paths() {
        let o = obj(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicas": 3},
            "status": {"replicas": 2, "selector": "app=a"}
        }));
        assert_eq!(
            scale_of(&o, &paths()),
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "7"},
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "app=a"}
            })
        );
        let bare = obj(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}}),
        );
        assert_eq!(scale_of(&bare, &paths())["spec"], json!({}));
        assert_eq!(scale_of(&bare, &paths())["status"], json!({"replicas": 0}));
    }

    #[test]
    fn replicas_are_set_at_their_path_creating_parents() {
        let mut o = obj(json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "a"}}));
        set_at(&mut o, ".spec.scaling.replicas", json!(4));
        assert_eq!(o.as_map()["spec"], json!({"scaling": {"replicas": 4}}));
    }

    #[test]
    fn negative_replicas_are_invalid() {
        let e = desired_replicas(&json!({"spec": {"replicas": -1}}), "a").unwrap_err();
        assert_eq!(e.code, 422);
        assert!(desired_replicas(&json!({"kind": "Pod"}), "a").is_err());
        assert_eq!(
            desired_replicas(
                &json!({"spec": {"replicas": 2}, "metadata": {"resourceVersion": "5"}}),
                "a"
            )
            .unwrap(),
            (2, "5".to_string())
        );
    }
}
