//! The inputs and outputs of writes, and the stages every write shares: field validation
//! (spec §4.9), patch application (§4.6) and managedFields bookkeeping.

use serde_json::Value;
use strata_object::field::FieldError;
use strata_object::{Object, ResourceType, Status};
use strata_patch::PatchError;

use crate::WriteOptions;

/// How unknown and duplicate fields are treated (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Dropped silently.
    Ignore,
    /// Dropped, with one warning each.
    #[default]
    Warn,
    /// The request fails, naming all of them.
    Strict,
}

impl FieldValidation {
    /// Parses the query value; `None` for an unsupported one. Empty means the default.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" | "Warn" => Some(Self::Warn),
            "Ignore" => Some(Self::Ignore),
            "Strict" => Some(Self::Strict),
            _ => None,
        }
    }
}

/// A decoded request body and the members it repeated (paths such as `metadata.name`).
#[derive(Clone, Debug, Default)]
pub struct Body {
    pub value: Value,
    pub duplicates: Vec<String>,
}

impl Body {
    /// The value after field validation against `info`'s schema (unknown fields pruned), with
    /// the warnings `level` asks for, or the error it asks for.
    pub(crate) fn checked(
        self,
        info: &ResourceType,
        level: FieldValidation,
        stage: Stage,
    ) -> Result<(Value, Vec<String>), Status> {
        let Body {
            mut value,
            duplicates,
        } = self;
        let warnings = check_fields(info, &mut value, &duplicates, level, stage)?;
        Ok((value, warnings))
    }
}

impl From<Value> for Body {
    fn from(value: Value) -> Self {
        Body {
            value,
            duplicates: Vec::new(),
        }
    }
}

/// What a write produced: the object as stored (or as it would be, in a dry run), the
/// field-validation warnings for the response headers, and whether it was created.
#[derive(Clone, Debug)]
pub struct Written {
    pub object: Object,
    pub warnings: Vec<String>,
    pub created: bool,
    /// `object` as compact JSON, `kind` and `apiVersion` first, exactly as a GET of its version
    /// answers it: made once for the watch cache when the write stored it, and answered as is.
    pub json: Option<bytes::Bytes>,
}

/// The four patch types of spec §4.6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 6902, `application/json-patch+json`.
    Json,
    /// RFC 7386, `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// Server-side apply, `application/apply-patch+yaml` (or `+cbor`).
    Apply,
}

/// Where a field-validation failure is reported, which decides its wording and code. Strict
/// failures are 400 at every stage (spec §4.9); only a patch result of the wrong type is 422.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// POST and PUT bodies: 400 naming the kind.
    Body,
    /// JSON, merge and strategic patches: 400 naming the kind for unknown and duplicate
    /// fields (Kubernetes answers 422 on the field `patch`, quoting the patched object); 422
    /// on `patch` for a type mismatch.
    Patch,
    /// Server-side apply: 400.
    Apply,
}

/// Drops unknown fields from `value` (they are never stored) and turns them and `duplicates`
/// into warnings or an error according to `level`.
pub(crate) fn check_fields(
    info: &ResourceType,
    value: &mut Value,
    duplicates: &[String],
    level: FieldValidation,
    stage: Stage,
) -> Result<Vec<String>, Status> {
    let Some(schema) = info.schema() else {
        return Ok(Vec::new());
    };
    // A value of the wrong type is fatal whatever the level, and named alone; a custom
    // resource's is a validation cause instead (422, with every other problem).
    let typed = if info.custom {
        Ok(())
    } else {
        schema.check_types(value)
    };
    if let Err(why) = typed {
        return Err(match stage {
            Stage::Body | Stage::Apply => undecodable(info, &why),
            Stage::Patch => invalid_patch(value, &why),
        });
    }
    let unknown = schema.prune_unknown(value);
    if level == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let mut items: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field {p:?}"))
        .collect();
    for d in duplicates {
        let item = format!("duplicate field {d:?}");
        if !items.contains(&item) {
            items.push(item);
        }
    }
    if items.is_empty() || level == FieldValidation::Warn {
        return Ok(items);
    }
    let listed = format!("strict decoding error: {}", items.join(", "));
    Err(match stage {
        Stage::Body | Stage::Patch => undecodable(info, &listed),
        Stage::Apply => Status::bad_request(format!("error strict decoding YAML: {listed}")),
    })
}

/// Why a value is not an object of the endpoint's type, in Kubernetes' words. A body and a
/// patch result report it differently (400, or 422 on `patch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NotThisType {
    /// Not an object with valid metadata.
    Malformed(String),
    /// `apiVersion` names another version.
    Version(String),
    /// `kind` names another kind.
    Kind(String),
}

impl NotThisType {
    pub(crate) fn why(&self) -> &str {
        match self {
            Self::Malformed(why) | Self::Version(why) | Self::Kind(why) => why,
        }
    }
}

/// Reads `value` as an object of `info`'s type, filling in an absent `apiVersion` and `kind`.
/// A value that is not one comes back with the reason, for the caller's error to show.
pub(crate) fn read_object(
    info: &ResourceType,
    value: Value,
) -> Result<Object, (NotThisType, Value)> {
    let mut obj = Object::try_from_value(value)
        .map_err(|(e, value)| (NotThisType::Malformed(e.to_string()), value))?;
    let expected_version = info.api_version();
    if !obj.api_version().is_empty() && obj.api_version() != expected_version {
        let why = format!(
            "the API version in the data ({}) does not match the expected API version ({expected_version})",
            obj.api_version()
        );
        return Err((NotThisType::Version(why), obj.into_value()));
    }
    if !obj.kind().is_empty() && obj.kind() != info.kind {
        let why = format!(
            "the kind in the data ({}) does not match the expected kind",
            obj.kind()
        );
        return Err((NotThisType::Kind(why), obj.into_value()));
    }
    obj.set_type_meta(&expected_version, &info.kind);
    Ok(obj)
}

/// 400 for a body that cannot be read as the endpoint's kind, as Kubernetes words it.
pub(crate) fn undecodable(info: &ResourceType, why: &str) -> Status {
    Status::bad_request(format!(
        "{kind} in version {v:?} cannot be handled as a {kind}: {why}",
        kind = info.kind,
        v = info.version
    ))
}

/// 422 on the field `patch`, with no kind or name (Kubernetes' ` "" is invalid: patch: ...`):
/// a patch, or the object it produced (`value`), that cannot be accepted.
pub(crate) fn invalid_patch(value: &Value, why: &str) -> Status {
    Status::invalid(
        "",
        "",
        "",
        &[FieldError::invalid_string(
            "patch",
            &String::from_utf8_lossy(&strata_codec::json::compact(value)),
            why,
        )],
    )
}

/// Applies a JSON, merge or strategic patch to `current`'s JSON form.
pub(crate) fn apply_patch(
    info: &ResourceType,
    kind: PatchKind,
    current: &Value,
    patch: &Value,
) -> Result<Value, Status> {
    let patched = match kind {
        PatchKind::Json => strata_patch::apply_json_patch(current, patch),
        PatchKind::Merge => {
            let mut doc = current.clone();
            strata_patch::merge_patch(&mut doc, patch);
            Ok(doc)
        }
        PatchKind::Strategic => match info.schema() {
            Some(schema) => strata_patch::strategic_merge(current, patch, schema),
            None => Err(PatchError::Invalid("the type has no schema".into())),
        },
        // Apply is not a merge into the current object: `Registry::apply` handles it.
        PatchKind::Apply => Err(PatchError::Invalid("apply is not a merge patch".into())),
    };
    patched.map_err(|e| match e {
        PatchError::Malformed(m) => Status::bad_request(m),
        PatchError::Invalid(m) if kind == PatchKind::Json => Status::rejected_patch(m),
        PatchError::Invalid(m) => invalid_patch(patch, &m),
    })
}

/// The field manager of a non-apply write that names none: the client's User-Agent up to its
/// first `/`, as Kubernetes derives it.
pub fn default_manager(user_agent: &str) -> String {
    strata_patch::managed::default_manager(user_agent)
}

/// The manager name checks of `fieldManager`: at most 128 printable characters.
pub fn validate_manager(manager: &str, options_kind: &str) -> Result<(), Status> {
    let bad = if manager.chars().count() > 128 {
        Some(FieldError::new(
            strata_object::field::FieldErrorKind::TooLong,
            "fieldManager",
            None,
            "may not be more than 128 bytes",
        ))
    } else if manager.chars().any(|c| c.is_control()) {
        Some(FieldError::invalid_string(
            "fieldManager",
            manager,
            "must only contain printable characters",
        ))
    } else {
        None
    };
    match bad {
        Some(e) => Err(Status::invalid("meta.k8s.io", options_kind, "", &[e])),
        None => Ok(()),
    }
}

/// Checks an applied configuration against the endpoint and fills in its name and namespace.
pub(crate) fn applied_config(
    info: &ResourceType,
    mut config: Value,
    namespace: &str,
    name: &str,
) -> Result<Value, Status> {
    let text = || String::from_utf8_lossy(&strata_codec::json::compact(&config)).into_owned();
    let Some(members) = config.as_object() else {
        return Err(Status::bad_request(
            "error decoding patch: the applied configuration must be an object",
        ));
    };
    let api_version = members
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if api_version != info.api_version() {
        return Err(Status::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {api_version}, expected: {}",
            info.api_version()
        )));
    }
    match members.get("kind").and_then(Value::as_str).unwrap_or("") {
        "" => {
            return Err(Status::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                text()
            )))
        }
        k if k != info.kind => {
            return Err(Status::bad_request(format!(
                "the kind in the apply patch ({k}) does not match the expected kind ({})",
                info.kind
            )))
        }
        _ => {}
    }
    if config.pointer("/metadata/managedFields").is_some() {
        return Err(Status::bad_request("metadata.managedFields must be nil"));
    }
    let meta = config.as_object_mut().map(|m| {
        m.entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()))
    });
    let Some(Value::Object(meta)) = meta else {
        return Err(Status::bad_request(
            "error decoding patch: metadata must be an object",
        ));
    };
    match meta.get("name").and_then(Value::as_str) {
        None | Some("") => {
            meta.insert("name".into(), Value::String(name.into()));
        }
        Some(n) if n != name => {
            return Err(Status::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        Some(_) => {}
    }
    if info.namespaced() {
        match meta.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("namespace".into(), Value::String(namespace.into()));
            }
            Some(ns) if ns != namespace => {
                return Err(Status::bad_request(format!(
                    "the namespace of the object ({ns}) does not match the namespace on the request ({namespace})"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(config)
}

/// Records a create, update or non-apply patch in `new`'s managedFields: the manager takes
/// ownership of what it changed.
pub(crate) fn track_update(
    info: &ResourceType,
    old: Option<&Object>,
    new: Object,
    opts: &WriteOptions,
) -> Result<Object, Status> {
    let Some(schema) = info.schema() else {
        return Ok(new);
    };
    let mut value = new.into_value();
    strata_patch::managed::record_update(
        old.map(Object::as_value),
        &mut value,
        schema,
        &opts.field_manager,
        &info.api_version(),
        (!opts.subresource.is_empty()).then_some(opts.subresource.as_str()),
        &strata_object::now_rfc3339(),
    );
    Object::from_value(value).map_err(|e| Status::bad_request(e.to_string()))
}

/// Merges an applied configuration into `live` (or makes a new object of it), with the
/// manager's Apply entry; conflicts with other managers are 409 unless forced.
pub(crate) fn apply_to(
    info: &ResourceType,
    live: Option<&Object>,
    config: &Value,
    opts: &WriteOptions,
) -> Result<Value, Status> {
    let Some(schema) = info.schema() else {
        return Err(Status::bad_request("the type does not support apply"));
    };
    strata_patch::apply::apply_through(
        live.map(Object::as_value),
        config,
        schema,
        &opts.field_manager,
        opts.force,
        &info.api_version(),
        (!opts.subresource.is_empty()).then_some(opts.subresource.as_str()),
        &strata_object::now_rfc3339(),
    )
    .map_err(apply_error)
}

/// An apply's failure as the client sees it: 409 naming each conflict, or 400.
pub(crate) fn apply_error(e: strata_patch::apply::ApplyError) -> Status {
    match &e {
        strata_patch::apply::ApplyError::Conflicts(conflicts) => {
            let causes = conflicts
                .iter()
                .map(|c| strata_object::StatusCause {
                    reason: "FieldManagerConflict".into(),
                    message: c.cause_message(),
                    field: c.field(),
                })
                .collect();
            Status::apply_conflict(e.to_string(), causes)
        }
        strata_patch::apply::ApplyError::Invalid(_) => Status::bad_request(e.to_string()),
    }
}
