//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): the kind's defaults, status handling
//! and validation, worded and pathed as kube-apiserver 1.31 words them.
//!
//! Kubernetes validates a CRD in its internal form, into which a v1 object is converted first:
//! when every version carries the same schema (or the same sub-resources, or the same printer
//! columns) the conversion moves it to the top level of the spec, so its errors are reported
//! under `spec.validation.openAPIV3Schema`, `spec.subresources` and
//! `spec.additionalPrinterColumns` instead of `spec.versions[i]…`; the webhook conversion
//! settings are reported as `spec.conversion.webhookClientConfig` and
//! `spec.conversion.conversionReviewVersions`; and the first version's name is validated a
//! second time as `spec.version`. [`validate`] reproduces those paths.
//!
//! The schemas themselves are checked by `strata_apiext::structural::check_schema` (structural
//! rules and the `x-kubernetes-*` extensions) and `strata_apiext::cel::Rules::compile` (the
//! `x-kubernetes-validations` rules); this module adds the rules Kubernetes applies around them
//! (a schema per version, the root of a schema with a status sub-resource).

use serde_json::{json, Map, Value};
use strata_apiext::crd::CLEANUP_FINALIZER;
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::go::quote;
use strata_object::names::{dns1035_label_errors, dns1123_subdomain_errors};
use strata_object::Object;

use crate::strategy::Strategy;

/// The annotation a CRD in a protected group (`*.k8s.io`, `*.kubernetes.io`) must carry.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// The printer column types Kubernetes accepts, in its (sorted) order.
const COLUMN_TYPES: [&str; 5] = ["boolean", "date", "integer", "number", "string"];
/// The printer column formats Kubernetes accepts, in its (sorted) order.
const COLUMN_FORMATS: [&str; 8] = [
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];
/// How many selectable fields a version may declare.
const MAX_SELECTABLE_FIELDS: usize = 8;
/// The ConversionReview versions a conversion webhook must accept one of.
const CONVERSION_REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
/// The members the root of a schema may have when the status sub-resource is enabled (as
/// Kubernetes lists them: its Go field names), with the JSON names they stand for.
const ROOT_FIELDS_WITH_STATUS: [(&str, &str); 22] = [
    ("Description", "description"),
    ("Type", "type"),
    ("Format", "format"),
    ("Title", "title"),
    ("Maximum", "maximum"),
    ("ExclusiveMaximum", "exclusiveMaximum"),
    ("Minimum", "minimum"),
    ("ExclusiveMinimum", "exclusiveMinimum"),
    ("MaxLength", "maxLength"),
    ("MinLength", "minLength"),
    ("Pattern", "pattern"),
    ("MaxItems", "maxItems"),
    ("MinItems", "minItems"),
    ("UniqueItems", "uniqueItems"),
    ("MultipleOf", "multipleOf"),
    ("Required", "required"),
    ("Items", "items"),
    ("Properties", "properties"),
    ("ExternalDocs", "externalDocs"),
    ("Example", "example"),
    (
        "XPreserveUnknownFields",
        "x-kubernetes-preserve-unknown-fields",
    ),
    ("XValidations", "x-kubernetes-validations"),
];

/// The strategy of CustomResourceDefinitions: v1 defaults, a status the server owns
/// (`status.storedVersions` kept, `generation` moved by spec changes), and Kubernetes'
/// validation of the definition.
#[derive(Debug, Default)]
pub struct CrdStrategy;

impl Strategy for CrdStrategy {
    fn prepare_for_create(&self, obj: &mut Object) {
        set_defaults(obj);
        obj.as_map_mut().insert("status".into(), json!({}));
        obj.set_meta_value("generation", Some(json!(1)));
        record_storage_version(obj);
    }

    fn prepare_for_update(&self, new: &mut Object, old: &Object) {
        set_defaults(new);
        let status = old.as_map().get("status").cloned();
        let map = new.as_map_mut();
        match status {
            Some(s) => map.insert("status".into(), s),
            None => map.remove("status"),
        };
        if !same(new.as_map().get("spec"), old.as_map().get("spec")) {
            let generation = old
                .meta_value("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            new.set_meta_value("generation", Some(json!(generation + 1)));
        }
        record_storage_version(new);
    }

    fn prepare_for_subresource_update(&self, subresource: &str, new: &mut Object, old: &Object) {
        if subresource != "status" {
            return;
        }
        // A status write changes the status only (Kubernetes' status strategy keeps the spec;
        // the metadata rules are the generic ones).
        let spec = old.as_map().get("spec").cloned();
        let map = new.as_map_mut();
        match spec {
            Some(s) => map.insert("spec".into(), s),
            None => map.remove("spec"),
        };
    }

    fn validate(&self, obj: &Object) -> Vec<FieldError> {
        validate(obj, None)
    }

    fn validate_update(&self, new: &Object, old: &Object) -> Vec<FieldError> {
        validate_update(new, old)
    }

    fn validate_write(&self, obj: &Object, old: Option<&Object>) -> Vec<FieldError> {
        let mut errors = validate(obj, old);
        if let Some(old) = old {
            errors.extend(validate_update(obj, old));
        }
        errors
    }

    /// A CRD is never removed by its first DELETE: its objects go first.
    fn holds_deletion(&self, obj: &Object) -> bool {
        obj.deletion_timestamp().is_empty()
    }

    /// The first DELETE adds the cleanup finalizer, which the CRD controller removes once
    /// the objects are gone, and says so in the `Terminating` condition.
    fn prepare_for_delete(&self, obj: &mut Object) {
        let mut finalizers: Vec<Value> = obj.finalizers().iter().map(|f| json!(f)).collect();
        if !finalizers.contains(&json!(CLEANUP_FINALIZER)) {
            finalizers.push(json!(CLEANUP_FINALIZER));
        }
        obj.set_meta_value("finalizers", Some(Value::Array(finalizers)));
        let map = obj.as_map_mut();
        let status = map.entry("status").or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        let conditions = status
            .as_object_mut()
            .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
        if let Some(Value::Array(conditions)) = conditions {
            conditions.retain(|c| c["type"] != "Terminating");
            conditions.push(json!({
                "type": "Terminating",
                "status": "True",
                "lastTransitionTime": strata_object::now_rfc3339(),
                "reason": "InstanceDeletionInProgress",
                "message": "CustomResource deletion is in progress",
            }));
        }
    }
}

/// The defaults of `apiextensions.k8s.io/v1`: `names.singular` (the lowercased kind),
/// `names.listKind` (`<kind>List`), `conversion` (`strategy: None`) and a webhook service's
/// port (443).
pub fn set_defaults(obj: &mut Object) {
    let map = obj.as_map_mut();
    if let Some(Value::Object(spec)) = map.get_mut("spec") {
        if let Some(Value::Object(names)) = spec.get_mut("names") {
            let kind = str_of(names.get("kind")).to_string();
            if str_of(names.get("singular")).is_empty() {
                names.insert("singular".into(), json!(kind.to_lowercase()));
            }
            if str_of(names.get("listKind")).is_empty() && !kind.is_empty() {
                names.insert("listKind".into(), json!(format!("{kind}List")));
            }
        }
        if spec.get("conversion").is_none_or(Value::is_null) {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
        let service = spec
            .get_mut("conversion")
            .and_then(|c| c.pointer_mut("/webhook/clientConfig/service"));
        if let Some(Value::Object(service)) = service {
            if service.get("port").is_none_or(Value::is_null) {
                service.insert("port".into(), json!(443));
            }
        }
    }
}

/// Adds the (first) storage version to `status.storedVersions` unless it is there, as
/// Kubernetes does on every create and update.
fn record_storage_version(obj: &mut Object) {
    let storage = versions(obj.as_map().get("spec"))
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| str_of(v.get("name")).to_string());
    let Some(name) = storage else { return };
    let map = obj.as_map_mut();
    let status = map.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let stored = status.entry("storedVersions").or_insert_with(|| json!([]));
    if !stored.is_array() {
        *stored = json!([]);
    }
    if let Some(list) = stored.as_array_mut() {
        if !list.iter().any(|v| v.as_str() == Some(&name)) {
            list.push(json!(name));
        }
    }
}

/// Kubernetes' `ValidateCustomResourceDefinition`: the CRD as a whole (name, spec, status,
/// stored versions, API approval, `preserveUnknownFields`). On an update (`old`), an approval
/// annotation whose state did not change and a `preserveUnknownFields` that was already true
/// are let be, as Kubernetes lets them. Generic metadata rules are the registry's.
pub fn validate(obj: &Object, old: Option<&Object>) -> Vec<FieldError> {
    let map = obj.as_map();
    let spec = map.get("spec").and_then(Value::as_object);
    let empty = Map::new();
    let spec = spec.unwrap_or(&empty);
    let mut errs = Vec::new();

    let group = str_of(spec.get("group"));
    let plural = str_of(spec.get("names").and_then(|n| n.get("plural")));
    let name = obj.name();
    if !name.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid_string(
            "metadata.name",
            name,
            r#"must be spec.names.plural+"."+spec.group"#,
        ));
    }
    validate_spec(spec, &mut errs);
    validate_status(map.get("status"), &mut errs);
    validate_stored_versions(map.get("status"), spec, &mut errs);
    if let Some(e) = api_approval_error(obj, old) {
        errs.push(e);
    }
    let preserving = |o: &Object| {
        o.as_map()
            .get("spec")
            .and_then(|s| s.get("preserveUnknownFields"))
            .and_then(Value::as_bool)
            == Some(true)
    };
    if preserving(obj) && !old.is_some_and(preserving) {
        errs.push(FieldError::new(
            FieldErrorKind::Invalid,
            "spec.preserveUnknownFields",
            Some("true".into()),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    errs
}

/// The checks only an update makes (Kubernetes' `ValidateCustomResourceDefinitionUpdate` beyond
/// what [`validate`] repeats): `spec.group` and `spec.names.plural` never change, and once the
/// CRD is Established neither do `spec.scope` and `spec.names.kind`.
pub fn validate_update(new: &Object, old: &Object) -> Vec<FieldError> {
    let spec = |o: &Object| o.as_map().get("spec").cloned().unwrap_or(Value::Null);
    let (new_spec, old_spec) = (spec(new), spec(old));
    let at = |v: &Value, p: &str| str_of(v.pointer(p)).to_string();
    let mut errs = Vec::new();
    let mut immutable = |field: &str, pointer: &str| {
        let value = at(&new_spec, pointer);
        if value != at(&old_spec, pointer) {
            errs.push(FieldError::invalid_string(
                field,
                &value,
                "field is immutable",
            ));
        }
    };
    if is_established(old) {
        immutable("spec.scope", "/scope");
        immutable("spec.names.kind", "/names/kind");
    }
    immutable("spec.group", "/group");
    immutable("spec.names.plural", "/names/plural");
    errs
}

/// Whether the CRD's `Established` condition is `True`.
pub fn is_established(obj: &Object) -> bool {
    obj.as_map()
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter().any(|c| {
                str_of(c.get("type")) == "Established" && str_of(c.get("status")) == "True"
            })
        })
}

/// What the v1 → internal conversion moves to the top level of the spec: the per-version
/// fields every version has identical.
struct Hoisted<'a> {
    /// `spec.validation` (the shared `schema`), when every version's is the same.
    validation: Option<Option<&'a Value>>,
    subresources: Option<Option<&'a Value>>,
    columns: Option<Option<&'a Value>>,
    selectable: Option<Option<&'a Value>>,
}

impl<'a> Hoisted<'a> {
    fn of(versions: &'a [Value]) -> Self {
        let identical = |key: &str| -> Option<Option<&'a Value>> {
            let first = versions.first()?;
            let value =
                |v: &'a Value| present(v.get(key), key != "schema" && key != "subresources");
            let shared = value(first);
            versions
                .iter()
                .all(|v| same(value(v), shared))
                .then_some(shared)
        };
        let validation = identical("schema");
        let selectable = identical("selectableFields").filter(|_| validation.is_some());
        Hoisted {
            validation,
            subresources: identical("subresources"),
            columns: identical("additionalPrinterColumns"),
            selectable,
        }
    }
}

/// A member that is there: not null and (for lists, when `empty_is_absent`) not empty.
fn present(v: Option<&Value>, empty_is_absent: bool) -> Option<&Value> {
    v.filter(|v| !v.is_null())
        .filter(|v| !(empty_is_absent && v.as_array().is_some_and(Vec::is_empty)))
}

/// Equality as Kubernetes' semantic equality sees decoded values: nulls are absent members.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            v => v.clone(),
        }
    }
    match (a.filter(|v| !v.is_null()), b.filter(|v| !v.is_null())) {
        (None, None) => true,
        (Some(a), Some(b)) => strip(a) == strip(b),
        _ => false,
    }
}

fn str_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

fn versions(spec: Option<&Value>) -> &[Value] {
    spec.and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn invalid(field: impl Into<String>, value: String, detail: impl Into<String>) -> FieldError {
    FieldError::new(FieldErrorKind::Invalid, field, Some(value), detail)
}

fn validate_spec(spec: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    let group = str_of(spec.get("group"));
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        let problems = dns1123_subdomain_errors(group);
        if !problems.is_empty() {
            errs.push(FieldError::invalid_string(
                "spec.group",
                group,
                problems.join(","),
            ));
        } else if !group.contains('.') {
            errs.push(FieldError::invalid_string(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }

    let scope = str_of(spec.get("scope"));
    if scope.is_empty() {
        errs.push(FieldError::required("spec.scope", ""));
    } else if scope != "Cluster" && scope != "Namespaced" {
        errs.push(FieldError::not_supported(
            "spec.scope",
            scope,
            &["Cluster", "Namespaced"],
        ));
    }

    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let hoisted = Hoisted::of(versions);
    let preserve_unknown = spec.get("preserveUnknownFields").and_then(Value::as_bool) == Some(true);

    // A schema for every version (no top-level one exists in v1).
    let shared_schema = hoisted
        .validation
        .flatten()
        .and_then(|v| present(v.get("openAPIV3Schema"), false));
    if shared_schema.is_none() {
        for (i, v) in versions.iter().enumerate() {
            if present(v.pointer("/schema/openAPIV3Schema"), false).is_none() {
                errs.push(FieldError::required(
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "schemas are required",
                ));
            }
        }
    }
    if preserve_unknown
        && versions.iter().any(|v| {
            schema_has(v.pointer("/schema/openAPIV3Schema"), &|s| {
                s.get("default").is_some()
            })
        })
    {
        errs.push(invalid(
            "spec.preserveUnknownFields",
            "true".into(),
            "must be false in order to use defaults in the schema",
        ));
    }

    let mut storage = 0;
    let mut names = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        let name = str_of(v.get("name"));
        names.push(name);
        let problems = dns1035_label_errors(name);
        if !problems.is_empty() {
            errs.push(FieldError::invalid_string(
                &format!("{path}.name"),
                name,
                problems.join(","),
            ));
        }
        validate_version(v, &path, &hoisted, errs);
    }
    let unique = names
        .iter()
        .enumerate()
        .all(|(i, n)| !names[..i].contains(n));
    if !unique {
        errs.push(invalid(
            "spec.versions",
            go_versions(versions, &hoisted),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errs.push(invalid(
            "spec.versions",
            go_versions(versions, &hoisted),
            "must have exactly one version marked as storage version",
        ));
    }
    // The internal form's `spec.version` is the first version's name, validated again.
    if let Some(first) = versions.first().map(|v| str_of(v.get("name"))) {
        if !first.is_empty() {
            let problems = dns1035_label_errors(first);
            if !problems.is_empty() {
                errs.push(FieldError::invalid_string(
                    "spec.version",
                    first,
                    problems.join(","),
                ));
            }
        }
    }

    let names_value = spec.get("names");
    for (field, required) in [
        ("plural", true),
        ("singular", true),
        ("kind", true),
        ("listKind", true),
    ] {
        if required && str_of(names_value.and_then(|n| n.get(field))).is_empty() {
            errs.push(FieldError::required(&format!("spec.names.{field}"), ""));
        }
    }
    validate_names(names_value, "spec.names", errs);

    // The fields every version shares, validated once at the top level.
    if let Some(Some(schema)) = hoisted.validation {
        let status = versions.iter().any(|v| has_status(v.get("subresources")));
        validate_schema(schema, "spec.validation", status, errs);
    }
    if let Some(Some(sub)) = hoisted.subresources {
        validate_subresources(sub, "spec.subresources", errs);
    }
    if let Some(Some(columns)) = hoisted.columns {
        validate_columns(columns, "spec.additionalPrinterColumns", errs);
    }
    if let Some(Some(fields)) = hoisted.selectable {
        match hoisted.validation.flatten() {
            None => errs.push(invalid(
                "spec.selectableFields",
                quote(""),
                "selectableFields may only be set when validations.schema is included",
            )),
            Some(validation) => validate_selectable_fields(
                fields,
                present(validation.get("openAPIV3Schema"), false),
                "spec.selectableFields",
                errs,
            ),
        }
    }

    let conversion = spec.get("conversion");
    let strategy = str_of(conversion.and_then(|c| c.get("strategy")));
    if !strategy.is_empty() && strategy != "None" && preserve_unknown {
        errs.push(FieldError::invalid_string(
            "spec.conversion.strategy",
            strategy,
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    if let Some(conversion) = conversion.filter(|c| !c.is_null()) {
        validate_conversion(conversion, errs);
    }
}

fn has_status(subresources: Option<&Value>) -> bool {
    subresources
        .and_then(|s| s.get("status"))
        .is_some_and(|s| !s.is_null())
}

/// The checks of one version: its deprecation warning, and its schema, sub-resources, columns
/// and selectable fields unless the conversion moved them to the top level.
fn validate_version(v: &Value, path: &str, hoisted: &Hoisted<'_>, errs: &mut Vec<FieldError>) {
    let deprecated = v.get("deprecated").and_then(Value::as_bool) == Some(true);
    if let Some(warning) = v.get("deprecationWarning").filter(|w| !w.is_null()) {
        let warning = warning.as_str().unwrap_or("");
        for problem in deprecation_warning_errors(deprecated, warning) {
            errs.push(FieldError::invalid_string(
                &format!("{path}.deprecationWarning"),
                warning,
                problem,
            ));
        }
    }
    let subresources = match hoisted.subresources {
        Some(shared) => shared,
        None => present(v.get("subresources"), false),
    };
    if hoisted.validation.is_none() {
        if let Some(schema) = present(v.get("schema"), false) {
            validate_schema(
                schema,
                &format!("{path}.schema"),
                has_status(subresources),
                errs,
            );
        }
    }
    if hoisted.subresources.is_none() {
        if let Some(sub) = subresources {
            validate_subresources(sub, &format!("{path}.subresources"), errs);
        }
    }
    if hoisted.columns.is_none() {
        if let Some(columns) = present(v.get("additionalPrinterColumns"), true) {
            validate_columns(columns, &format!("{path}.additionalPrinterColumns"), errs);
        }
    }
    if hoisted.selectable.is_none() {
        if let Some(fields) = present(v.get("selectableFields"), true) {
            // After the conversion a version whose schema moved to the top level has none.
            let schema = if hoisted.validation.is_some() {
                None
            } else {
                present(v.pointer("/schema/openAPIV3Schema"), false)
            };
            match schema {
                None => errs.push(invalid(
                    format!("{path}.selectableFields"),
                    quote(""),
                    "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
                )),
                Some(schema) => validate_selectable_fields(
                    fields,
                    Some(schema),
                    &format!("{path}.selectableFields"),
                    errs,
                ),
            }
        }
    }
}

/// Kubernetes' rules for `deprecationWarning`.
fn deprecation_warning_errors(deprecated: bool, warning: &str) -> Vec<String> {
    if !deprecated {
        return vec!["can only be set for deprecated versions".into()];
    }
    let mut errs = Vec::new();
    if warning.len() > 256 {
        errs.push("must be <= 256 characters long".into());
    }
    if warning.is_empty() {
        errs.push("must not be an empty string".into());
    }
    // Control characters are not printable either, so Kubernetes' separate message for them
    // is never the one given.
    for (i, c) in warning.char_indices() {
        if !strata_object::go::is_printable(c) {
            errs.push(format!(
                "must only contain printable UTF-8 characters; non-printable character found at index {i}"
            ));
            break;
        }
    }
    errs
}

/// A `CustomResourceValidation` at `path` (`…schema` or `spec.validation`): the root rules
/// Kubernetes applies itself, then the structural checks and the CEL rules.
fn validate_schema(validation: &Value, path: &str, status: bool, errs: &mut Vec<FieldError>) {
    let Some(schema) = present(validation.get("openAPIV3Schema"), false) else {
        return;
    };
    let root = format!("{path}.openAPIV3Schema");
    if status {
        if let Some(members) = schema.as_object() {
            // In the order of the Go struct's fields, which Kubernetes walks.
            let mut set: Vec<(&String, &Value)> =
                members.iter().filter(|(k, v)| !is_zero(k, v)).collect();
            set.sort_by_key(|(k, _)| SCHEMA_FIELD_ORDER.iter().position(|f| f == k));
            for (key, value) in set {
                if key == "type" {
                    if value.as_str() != Some("object") {
                        errs.push(invalid(
                            format!("{root}.type"),
                            quote(value.as_str().unwrap_or("")),
                            r#"only "object" is allowed as the type at the root of the schema if the status subresource is enabled"#,
                        ));
                        break;
                    }
                    continue;
                }
                if !ROOT_FIELDS_WITH_STATUS
                    .iter()
                    .any(|(_, json)| *json == key.as_str())
                {
                    let allowed: Vec<&str> =
                        ROOT_FIELDS_WITH_STATUS.iter().map(|(go, _)| *go).collect();
                    errs.push(invalid(
                        root.clone(),
                        schema.to_string(),
                        format!(
                            "only [{}] fields are allowed at the root of the schema if the status subresource is enabled",
                            allowed.join(" ")
                        ),
                    ));
                    break;
                }
            }
        }
    }
    let structural = strata_apiext::structural::check_schema(schema, &root);
    let structural_ok = structural.is_empty();
    errs.extend(structural);
    if structural_ok {
        if let Err(rule_errors) = strata_apiext::cel::Rules::compile(schema, &root) {
            errs.extend(rule_errors);
        }
    }
}

/// The JSON members of Kubernetes' `JSONSchemaProps`, in the order of its Go fields.
const SCHEMA_FIELD_ORDER: [&str; 44] = [
    "id",
    "$schema",
    "$ref",
    "description",
    "type",
    "format",
    "title",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "definitions",
    "externalDocs",
    "example",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Whether member `key` of a schema is its Go field's zero value once decoded: false, "",
/// empty or null, except for the pointer fields, which are set by any value.
fn is_zero(key: &str, v: &Value) -> bool {
    let pointer = matches!(
        key,
        "$ref"
            | "default"
            | "items"
            | "not"
            | "additionalProperties"
            | "additionalItems"
            | "externalDocs"
            | "example"
            | "x-kubernetes-preserve-unknown-fields"
            | "x-kubernetes-list-type"
            | "x-kubernetes-map-type"
    );
    match v {
        Value::Null => true,
        _ if pointer => false,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

/// Whether `pred` holds for `schema` or any schema nested in it.
fn schema_has(schema: Option<&Value>, pred: &dyn Fn(&Value) -> bool) -> bool {
    let Some(schema) = schema.filter(|s| s.is_object()) else {
        return false;
    };
    if pred(schema) {
        return true;
    }
    let nested = |key: &str| schema.get(key);
    for key in ["items", "not", "additionalProperties", "additionalItems"] {
        let found = match nested(key) {
            Some(Value::Array(a)) => a.iter().any(|s| schema_has(Some(s), pred)),
            s => schema_has(s, pred),
        };
        if found {
            return true;
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = nested(key) {
            if a.iter().any(|s| schema_has(Some(s), pred)) {
                return true;
            }
        }
    }
    for key in [
        "properties",
        "patternProperties",
        "definitions",
        "dependencies",
    ] {
        if let Some(Value::Object(m)) = nested(key) {
            if m.values().any(|s| schema_has(Some(s), pred)) {
                return true;
            }
        }
    }
    false
}

/// Kubernetes' `validateSimpleJSONPath`: a path that starts with a dot.
fn simple_json_path_errors(s: &str, path: &str) -> Option<FieldError> {
    if s.is_empty() {
        Some(invalid(path, quote(s), "must not be empty"))
    } else if !s.starts_with('.') {
        Some(invalid(
            path,
            quote(s),
            "must be a simple json path starting with .",
        ))
    } else {
        None
    }
}

fn validate_subresources(sub: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(scale) = present(sub.get("scale"), false) else {
        return;
    };
    for (key, prefix, why) in [
        (
            "specReplicasPath",
            ".spec.",
            "should be a json path under .spec",
        ),
        (
            "statusReplicasPath",
            ".status.",
            "should be a json path under .status",
        ),
    ] {
        let field = format!("{path}.scale.{key}");
        let value = str_of(scale.get(key));
        if value.is_empty() {
            errs.push(FieldError::required(&field, ""));
        } else if let Some(e) = simple_json_path_errors(value, &field) {
            errs.push(e);
        } else if !value.starts_with(prefix) {
            errs.push(FieldError::invalid_string(&field, value, why));
        }
    }
    let selector = str_of(scale.get("labelSelectorPath"));
    if !selector.is_empty() {
        let field = format!("{path}.scale.labelSelectorPath");
        if let Some(e) = simple_json_path_errors(selector, &field) {
            errs.push(e);
        } else if !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errs.push(FieldError::invalid_string(
                &field,
                selector,
                "should be a json path under either .spec or .status",
            ));
        }
    }
}

fn validate_columns(columns: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(columns) = columns.as_array() else {
        return;
    };
    for (i, col) in columns.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if str_of(col.get("name")).is_empty() {
            errs.push(FieldError::required(&format!("{at}.name"), ""));
        }
        let types = format!("must be one of {}", COLUMN_TYPES.join(","));
        let ty = str_of(col.get("type"));
        if ty.is_empty() {
            errs.push(FieldError::required(&format!("{at}.type"), types));
        } else if !COLUMN_TYPES.contains(&ty) {
            errs.push(FieldError::invalid_string(&format!("{at}.type"), ty, types));
        }
        let format = str_of(col.get("format"));
        if !format.is_empty() && !COLUMN_FORMATS.contains(&format) {
            errs.push(FieldError::invalid_string(
                &format!("{at}.format"),
                format,
                format!("must be one of {}", COLUMN_FORMATS.join(",")),
            ));
        }
        // The internal type's field is `JSONPath`, and so is the path Kubernetes reports.
        let json_path = str_of(col.get("jsonPath"));
        let field = format!("{at}.JSONPath");
        if json_path.is_empty() {
            errs.push(FieldError::required(&field, ""));
        } else if let Some(e) = simple_json_path_errors(json_path, &field) {
            errs.push(e);
        }
    }
}

/// Follows a selectable field's JSONPath (dots and `['quoted']` keys, no array notation)
/// through `schema`, as Kubernetes' `ValidFieldPath` does: the field path and the schema found.
fn follow_field_path<'a>(
    json_path: &str,
    mut schema: &'a Value,
) -> Result<(Vec<String>, &'a Value), String> {
    let mut tokens = Vec::new();
    let bytes = json_path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'.' | b'[' | b']' => {
                tokens.push(json_path[i..i + 1].to_string());
                i += 1;
            }
            b'\'' => {
                let mut j = i + 1;
                while j < bytes.len() && !(bytes[j] == b'\'' && bytes[j - 1] != b'\\') {
                    j += 1;
                }
                let end = (j + 1).min(bytes.len());
                tokens.push(json_path[i..end].to_string());
                i = end;
            }
            _ => {
                let start = i;
                while i < bytes.len() && !matches!(bytes[i], b'.' | b'[' | b']') {
                    i += 1;
                }
                tokens.push(json_path[start..i].to_string());
            }
        }
    }
    let mut path = Vec::new();
    let mut tokens = tokens.into_iter();
    while let Some(tok) = tokens.next() {
        match tok.as_str() {
            "[" => return Err("array notation is not allowed".into()),
            "." => {
                let Some(name) = tokens.next() else {
                    return Err("unexpected end of JSON path".into());
                };
                if let Some(p) = schema.get("properties").filter(|p| p.is_object()) {
                    let Some(next) = p.get(&name) else {
                        return Err("does not refer to a valid field".into());
                    };
                    schema = next;
                } else if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    schema = a;
                } else {
                    return Err("does not refer to a valid field".into());
                }
                path.push(name);
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok((path, schema))
}

fn validate_selectable_fields(
    fields: &Value,
    schema: Option<&Value>,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(fields) = fields.as_array() else {
        return;
    };
    let empty = json!({});
    let schema = schema.unwrap_or(&empty);
    let mut unique: Vec<String> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let at = format!("{path}[{i}].jsonPath");
        let json_path = str_of(f.get("jsonPath"));
        if json_path.is_empty() {
            errs.push(FieldError::required(&at, ""));
            continue;
        }
        let (found, target) = match follow_field_path(json_path, schema) {
            Ok(r) => r,
            Err(why) => {
                errs.push(FieldError::invalid_string(
                    &at,
                    json_path,
                    format!("is an invalid path: {why}"),
                ));
                continue;
            }
        };
        if found.first().map(String::as_str) == Some("metadata") {
            errs.push(FieldError::invalid_string(
                &at,
                json_path,
                "must not point to fields in metadata",
            ));
        }
        if !matches!(str_of(target.get("type")), "string" | "boolean" | "integer") {
            errs.push(FieldError::invalid_string(
                &at,
                json_path,
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        let key = found.join(".");
        if unique.contains(&key) {
            errs.push(FieldError::new(
                FieldErrorKind::Duplicate,
                &at,
                Some(quote(json_path)),
                "",
            ));
        } else {
            unique.push(key);
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errs.push(FieldError::new(
            FieldErrorKind::TooMany,
            path,
            Some(unique.len().to_string()),
            format!("must have at most {MAX_SELECTABLE_FIELDS} items"),
        ));
    }
}

/// `spec.conversion`, reported with the internal form's paths (`webhookClientConfig` and
/// `conversionReviewVersions` directly under `spec.conversion`).
fn validate_conversion(conversion: &Value, errs: &mut Vec<FieldError>) {
    let path = "spec.conversion";
    let strategy = str_of(conversion.get("strategy"));
    if strategy.is_empty() {
        errs.push(FieldError::required(&format!("{path}.strategy"), ""));
    } else if strategy != "None" && strategy != "Webhook" {
        errs.push(FieldError::not_supported(
            &format!("{path}.strategy"),
            strategy,
            &["None", "Webhook"],
        ));
    }
    let webhook = present(conversion.get("webhook"), false);
    let client = webhook.and_then(|w| present(w.get("clientConfig"), false));
    let review_versions: Vec<&Value> = webhook
        .and_then(|w| w.get("conversionReviewVersions"))
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let client_path = format!("{path}.webhookClientConfig");
    let versions_path = format!("{path}.conversionReviewVersions");
    if strategy == "Webhook" {
        match client {
            None => errs.push(FieldError::required(
                &client_path,
                "required when strategy is set to Webhook",
            )),
            Some(cc) => {
                let url = present(cc.get("url"), false);
                let service = present(cc.get("service"), false);
                match (url, service) {
                    (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
                        &client_path,
                        "exactly one of url or service is required",
                    )),
                    (Some(url), None) => {
                        validate_webhook_url(str_of(Some(url)), &format!("{client_path}.url"), errs)
                    }
                    (None, Some(service)) => {
                        validate_webhook_service(service, &format!("{client_path}.service"), errs)
                    }
                }
            }
        }
        if review_versions.is_empty() {
            errs.push(FieldError::required(&versions_path, ""));
        } else {
            let mut seen: Vec<&str> = Vec::new();
            let mut accepted = false;
            for (i, v) in review_versions.iter().enumerate() {
                let v = v.as_str().unwrap_or("");
                let at = format!("{versions_path}[{i}]");
                if seen.contains(&v) {
                    errs.push(FieldError::invalid_string(&at, v, "duplicate version"));
                    continue;
                }
                seen.push(v);
                for problem in dns1035_label_errors(v) {
                    errs.push(FieldError::invalid_string(&at, v, problem));
                }
                accepted |= CONVERSION_REVIEW_VERSIONS.contains(&v);
            }
            if !accepted {
                errs.push(invalid(
                    versions_path,
                    go_strings(Some(&seen)),
                    format!(
                        "must include at least one of {}",
                        CONVERSION_REVIEW_VERSIONS.join(", ")
                    ),
                ));
            }
        }
    } else {
        if client.is_some() {
            errs.push(FieldError::forbidden(
                &client_path,
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if !review_versions.is_empty() {
            errs.push(FieldError::forbidden(
                &versions_path,
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
}

/// Kubernetes' `ValidateWebhookURL` with https required, over Go's URL parsing.
fn validate_webhook_url(url: &str, path: &str, errs: &mut Vec<FieldError>) {
    const FORM: &str = "; desired format: https://host[/path]";
    let (rest, fragment) = match url.split_once('#') {
        Some((r, f)) => (r, f),
        None => (url, ""),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, q),
        None => (rest, ""),
    };
    let scheme_end = rest.find(':').filter(|&i| {
        let s = &rest[..i];
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    let (scheme, rest) = match scheme_end {
        Some(i) => (rest[..i].to_ascii_lowercase(), &rest[i + 1..]),
        None => (String::new(), rest),
    };
    let (user, host) = match rest.strip_prefix("//") {
        Some(authority) => {
            let authority = authority.split('/').next().unwrap_or("");
            match authority.rsplit_once('@') {
                Some((user, host)) => (Some(user), host),
                None => (None, authority),
            }
        }
        None => (None, ""),
    };
    if scheme != "https" {
        errs.push(invalid(
            path,
            quote(&scheme),
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if host.is_empty() {
        errs.push(invalid(
            path,
            quote(host),
            format!("host must be provided{FORM}"),
        ));
    }
    if let Some(user) = user {
        // Go prints the user information with the password masked.
        let shown = match user.split_once(':') {
            Some((name, _)) => format!("{name}:xxxxx"),
            None => user.to_string(),
        };
        errs.push(invalid(
            path,
            quote(&shown),
            "user information is not permitted in the URL",
        ));
    }
    if !fragment.is_empty() {
        errs.push(invalid(
            path,
            quote(fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if !query.is_empty() {
        errs.push(invalid(
            path,
            quote(query),
            "query parameters are not permitted in the URL",
        ));
    }
}

/// Kubernetes' `ValidateWebhookService`.
fn validate_webhook_service(service: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if str_of(service.get("name")).is_empty() {
        errs.push(FieldError::required(
            &format!("{path}.name"),
            "service name is required",
        ));
    }
    if str_of(service.get("namespace")).is_empty() {
        errs.push(FieldError::required(
            &format!("{path}.namespace"),
            "service namespace is required",
        ));
    }
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(443);
    if !(1..=65535).contains(&port) {
        errs.push(invalid(
            format!("{path}.port"),
            port.to_string(),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(url_path) = service.get("path").and_then(Value::as_str) else {
        return;
    };
    if url_path == "/" || url_path.is_empty() {
        return;
    }
    let at = format!("{path}.path");
    if url_path == "//" {
        errs.push(FieldError::invalid_string(
            &at,
            url_path,
            "segment[0] may not be empty",
        ));
        return;
    }
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid_string(
            &at,
            url_path,
            "must start with a '/'",
        ));
    }
    let mut check = url_path.get(1..).unwrap_or("");
    check = check.strip_suffix('/').unwrap_or(check);
    for (i, step) in check.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid_string(
                &at,
                url_path,
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for problem in dns1123_subdomain_errors(step) {
            errs.push(FieldError::invalid_string(
                &at,
                url_path,
                format!("segment[{i}]: {problem}"),
            ));
        }
    }
}

/// Kubernetes' `ValidateCustomResourceDefinitionNames` (spec names and accepted names).
fn validate_names(names: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let get = |k: &str| str_of(names.and_then(|n| n.get(k)));
    for field in ["plural", "singular"] {
        let v = get(field);
        let problems = dns1035_label_errors(v);
        if !v.is_empty() && !problems.is_empty() {
            errs.push(FieldError::invalid_string(
                &format!("{path}.{field}"),
                v,
                problems.join(","),
            ));
        }
    }
    for field in ["kind", "listKind"] {
        let v = get(field);
        let problems = dns1035_label_errors(&v.to_lowercase());
        if !v.is_empty() && !problems.is_empty() {
            errs.push(FieldError::invalid_string(
                &format!("{path}.{field}"),
                v,
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
    let list = |k: &str| -> Vec<&str> {
        names
            .and_then(|n| n.get(k))
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect())
            .unwrap_or_default()
    };
    for (i, short) in list("shortNames").into_iter().enumerate() {
        let problems = dns1035_label_errors(short);
        if !problems.is_empty() {
            errs.push(FieldError::invalid_string(
                &format!("{path}.shortNames[{i}]"),
                short,
                problems.join(","),
            ));
        }
    }
    let (kind, list_kind) = (get("kind"), get("listKind"));
    if !kind.is_empty() && kind == list_kind {
        errs.push(FieldError::invalid_string(
            &format!("{path}.listKind"),
            list_kind,
            "kind and listKind may not be the same",
        ));
    }
    for (i, category) in list("categories").into_iter().enumerate() {
        let problems = dns1035_label_errors(category);
        if !problems.is_empty() {
            errs.push(FieldError::invalid_string(
                &format!("{path}.categories[{i}]"),
                category,
                problems.join(","),
            ));
        }
    }
}

fn validate_status(status: Option<&Value>, errs: &mut Vec<FieldError>) {
    validate_names(
        status.and_then(|s| s.get("acceptedNames")),
        "status.acceptedNames",
        errs,
    );
}

/// Kubernetes' `ValidateCustomResourceDefinitionStoredVersions`.
fn validate_stored_versions(
    status: Option<&Value>,
    spec: &Map<String, Value>,
    errs: &mut Vec<FieldError>,
) {
    let path = "status.storedVersions";
    let stored_value = status.and_then(|s| s.get("storedVersions"));
    let stored: Vec<&str> = stored_value
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    let rendered = go_strings(stored_value.and_then(Value::as_array).map(|_| &stored[..]));
    if stored.is_empty() {
        errs.push(invalid(
            path,
            rendered,
            "must have at least one stored version",
        ));
        return;
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for v in versions {
        let name = str_of(v.get("name"));
        if v.get("storage").and_then(Value::as_bool) == Some(true) && !stored.contains(&name) {
            errs.push(invalid(
                path,
                rendered.clone(),
                format!("must have the storage version {name}"),
            ));
        }
    }
    // Kubernetes keeps the last index of a repeated version.
    for (i, v) in stored.iter().enumerate() {
        let last = stored.iter().rposition(|s| s == v) == Some(i);
        if last && !versions.iter().any(|x| str_of(x.get("name")) == *v) {
            errs.push(FieldError::invalid_string(
                &format!("{path}[{i}]"),
                v,
                format!(
                    "missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions"
                ),
            ));
        }
    }
}

/// Whether a group is reserved for the Kubernetes community (`k8s.io`, `kubernetes.io` and
/// their subdomains).
pub fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

/// The state of the API approval annotation: approved (a URL), bypassed (`unapproved…`),
/// missing, or invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Approval {
    Invalid,
    Approved,
    Bypassed,
    Missing,
}

fn approval_state(obj: &Object) -> (Approval, String, String) {
    let value = obj
        .meta_value("annotations")
        .and_then(|a| a.get(API_APPROVED_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let is_url = value.split_once("://").is_some_and(|(scheme, rest)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !rest.split(['/', '?', '#']).next().unwrap_or("").is_empty()
    });
    let key = quote(API_APPROVED_ANNOTATION);
    if value.is_empty() {
        (
            Approval::Missing,
            value,
            format!("protected groups must have approval annotation {key}, see https://github.com/kubernetes/enhancements/pull/1111"),
        )
    } else if value.starts_with("unapproved") {
        let reason = format!("not approved: {}", quote(&value));
        (Approval::Bypassed, value, reason)
    } else if is_url {
        let reason = format!("approved in {value}");
        (Approval::Approved, value, reason)
    } else {
        (
            Approval::Invalid,
            value,
            format!("protected groups must have approval annotation {key} with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"),
        )
    }
}

/// Kubernetes' `validateAPIApproval`: a CRD in a protected group needs the approval
/// annotation, unless (on update) its state did not change.
fn api_approval_error(new: &Object, old: Option<&Object>) -> Option<FieldError> {
    let group = new
        .as_map()
        .get("spec")
        .and_then(|s| s.get("group"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !is_protected_group(group) {
        return None;
    }
    let (state, value, reason) = approval_state(new);
    if old.is_some_and(|old| approval_state(old).0 == state) {
        return None;
    }
    let field = format!("metadata.annotations[{API_APPROVED_ANNOTATION}]");
    match state {
        Approval::Approved | Approval::Bypassed => None,
        Approval::Missing => Some(FieldError::required(&field, reason)),
        Approval::Invalid => Some(FieldError::invalid_string(&field, &value, reason)),
    }
}

/// Go's `%#v` of a `[]string` (`[]string(nil)` when absent).
fn go_strings(list: Option<&[&str]>) -> String {
    match list {
        None => "[]string(nil)".into(),
        Some(l) => {
            let items: Vec<String> = l.iter().map(|s| quote(s)).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
    }
}

/// Go's `%#v` of the internal `[]CustomResourceDefinitionVersion` Kubernetes prints in its
/// messages about the version list. Pointers print as addresses there; these are stand-ins.
fn go_versions(versions: &[Value], hoisted: &Hoisted<'_>) -> String {
    let mut next = 0xc000010000_u64;
    let mut pointer = |ty: &str, set: bool| {
        if set {
            next += 0x8;
            format!("(*{ty})(0x{next:x})")
        } else {
            format!("(*{ty})(nil)")
        }
    };
    let mut out = Vec::new();
    for v in versions {
        let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        let warning = pointer(
            "string",
            v.get("deprecationWarning").is_some_and(|w| !w.is_null()),
        );
        let schema = pointer(
            "apiextensions.CustomResourceValidation",
            hoisted.validation.is_none() && present(v.get("schema"), false).is_some(),
        );
        let subresources = pointer(
            "apiextensions.CustomResourceSubresources",
            hoisted.subresources.is_none() && present(v.get("subresources"), false).is_some(),
        );
        let columns = match present(v.get("additionalPrinterColumns"), true)
            .filter(|_| hoisted.columns.is_none())
            .and_then(Value::as_array)
        {
            None => "[]apiextensions.CustomResourceColumnDefinition(nil)".to_string(),
            Some(cols) => {
                let items: Vec<String> = cols
                    .iter()
                    .map(|c| {
                        format!(
                            "apiextensions.CustomResourceColumnDefinition{{Name:{}, Type:{}, Format:{}, Description:{}, Priority:{}, JSONPath:{}}}",
                            quote(str_of(c.get("name"))),
                            quote(str_of(c.get("type"))),
                            quote(str_of(c.get("format"))),
                            quote(str_of(c.get("description"))),
                            c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            quote(str_of(c.get("jsonPath"))),
                        )
                    })
                    .collect();
                format!(
                    "[]apiextensions.CustomResourceColumnDefinition{{{}}}",
                    items.join(", ")
                )
            }
        };
        let selectable = match present(v.get("selectableFields"), true)
            .filter(|_| hoisted.selectable.is_none())
            .and_then(Value::as_array)
        {
            None => "[]apiextensions.SelectableField(nil)".to_string(),
            Some(fields) => {
                let items: Vec<String> = fields
                    .iter()
                    .map(|f| {
                        format!(
                            "apiextensions.SelectableField{{JSONPath:{}}}",
                            quote(str_of(f.get("jsonPath")))
                        )
                    })
                    .collect();
                format!("[]apiextensions.SelectableField{{{}}}", items.join(", "))
            }
        };
        out.push(format!(
            "apiextensions.CustomResourceDefinitionVersion{{Name:{}, Served:{}, Storage:{}, Deprecated:{}, DeprecationWarning:{warning}, Schema:{schema}, Subresources:{subresources}, AdditionalPrinterColumns:{columns}, SelectableFields:{selectable}}}",
            quote(str_of(v.get("name"))),
            flag("served"),
            flag("storage"),
            flag("deprecated"),
        ));
    }
    if versions.is_empty() {
        return "[]apiextensions.CustomResourceDefinitionVersion(nil)".into();
    }
    format!(
        "[]apiextensions.CustomResourceDefinitionVersion{{{}}}",
        out.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> Object {
        Object::from_value(v).expect("the tests pass objects")
    }

    /// A valid v1 CRD, `widgets.example.com`, with one version.
    fn widget() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "replicas": {"type": "integer"},
                            "color": {"type": "string"},
                            "tags": {"type": "array", "items": {"type": "string"}}
                        }},
                        "status": {"type": "object", "properties": {
                            "replicas": {"type": "integer"}
                        }}
                    }}}
                }]
            }
        })
    }

    /// A second version with a schema of its own, so nothing is shared.
    fn with_v2(mut v: Value) -> Value {
        let mut v2 = v["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        v2["schema"]["openAPIV3Schema"]["description"] = json!("the second version");
        v["spec"]["versions"].as_array_mut().unwrap().push(v2);
        v
    }

    /// The problems of creating `v`, after the create preparation.
    fn create(v: Value) -> Vec<String> {
        let mut obj = object(v);
        CrdStrategy.prepare_for_create(&mut obj);
        CrdStrategy
            .validate(&obj)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn edit(f: impl FnOnce(&mut Value)) -> Vec<String> {
        let mut v = widget();
        f(&mut v);
        create(v)
    }

    #[test]
    fn a_valid_definition_is_defaulted_and_owns_its_status() {
        let mut v = widget();
        v["status"] = json!({"storedVersions": ["v0"], "conditions": [
            {"type": "Established", "status": "True"}]});
        v["metadata"]["generation"] = json!(7);
        let mut obj = object(v);
        CrdStrategy.prepare_for_create(&mut obj);
        assert_eq!(CrdStrategy.validate(&obj), []);
        let v = obj.into_value();
        assert_eq!(v["metadata"]["generation"], 1);
        assert_eq!(v["status"], json!({"storedVersions": ["v1"]}));
        assert_eq!(v["spec"]["names"]["singular"], "widget");
        assert_eq!(v["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(v["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(create(with_v2(widget())), Vec::<String>::new());
    }

    #[test]
    fn name_must_be_plural_dot_group() {
        assert_eq!(
            edit(|v| v["metadata"]["name"] = json!("gadgets.example.com")),
            [
                r#"metadata.name: Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group"#
            ]
        );
    }

    #[test]
    fn group_is_a_dns_subdomain_with_a_dot() {
        let got = edit(|v| {
            v["spec"]["group"] = json!("");
            v["metadata"]["name"] = json!("widgets.");
        });
        assert!(
            got.contains(&"spec.group: Required value".to_string()),
            "{got:?}"
        );
        let got = edit(|v| {
            v["spec"]["group"] = json!("example");
            v["metadata"]["name"] = json!("widgets.example");
        });
        assert_eq!(
            got,
            [r#"spec.group: Invalid value: "example": should be a domain with at least one dot"#]
        );
        let got = edit(|v| {
            v["spec"]["group"] = json!("Example.com");
            v["metadata"]["name"] = json!("widgets.Example.com");
        });
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with(
            r#"spec.group: Invalid value: "Example.com": a lowercase RFC 1123 subdomain must consist of"#
        ));
    }

    #[test]
    fn scope_is_namespaced_or_cluster() {
        assert_eq!(
            edit(|v| v["spec"]["scope"] = json!("Global")),
            [
                r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#
            ]
        );
        assert_eq!(
            edit(|v| {
                v["spec"].as_object_mut().unwrap().remove("scope");
            }),
            ["spec.scope: Required value"]
        );
    }

    #[test]
    fn exactly_one_storage_version_with_unique_dns_1035_names() {
        let got = edit(|v| v["spec"]["versions"][0]["storage"] = json!(false));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with(
            r#"spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion{apiextensions.CustomResourceDefinitionVersion{Name:"v1", Served:true, Storage:false, Deprecated:false, DeprecationWarning:(*string)(nil), Schema:(*apiextensions.CustomResourceValidation)(nil), Subresources:(*apiextensions.CustomResourceSubresources)(nil), AdditionalPrinterColumns:[]apiextensions.CustomResourceColumnDefinition(nil), SelectableFields:[]apiextensions.SelectableField(nil)}}: must have exactly one version marked as storage version"#
        ), "{got:?}");
        assert_eq!(
            got[1],
            "status.storedVersions: Invalid value: []string(nil): must have at least one stored version"
        );

        let mut two = with_v2(widget());
        two["spec"]["versions"][1]["storage"] = json!(true);
        let got = create(two);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].ends_with(": must have exactly one version marked as storage version"));
        assert!(got[0].contains("Schema:(*apiextensions.CustomResourceValidation)(0xc"));
        assert_eq!(
            got[1],
            r#"status.storedVersions: Invalid value: []string{"v1"}: must have the storage version v2"#
        );

        let mut same = with_v2(widget());
        same["spec"]["versions"][1]["name"] = json!("v1");
        let got = create(same);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].ends_with(": must contain unique version names"));

        let got = edit(|v| v["spec"]["versions"][0]["name"] = json!("V1"));
        let label = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
        assert_eq!(
            got,
            [
                format!(r#"spec.versions[0].name: Invalid value: "V1": {label}"#),
                format!(r#"spec.version: Invalid value: "V1": {label}"#),
            ]
        );
        assert!(edit(|v| v["spec"]["versions"] = json!([]))
            .contains(&"spec.versions: Invalid value: []apiextensions.CustomResourceDefinitionVersion(nil): must have exactly one version marked as storage version".to_string()));
    }

    #[test]
    fn every_version_needs_a_schema() {
        let got = edit(|v| {
            v["spec"]["versions"][0]
                .as_object_mut()
                .unwrap()
                .remove("schema");
        });
        assert_eq!(
            got,
            ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"]
        );
        let mut two = with_v2(widget());
        two["spec"]["versions"][1]["schema"] = json!({});
        assert_eq!(
            create(two),
            ["spec.versions[1].schema.openAPIV3Schema: Required value: schemas are required"]
        );
    }

    #[test]
    fn names_follow_kubernetes_formats() {
        let got = edit(|v| {
            let names = &mut v["spec"]["names"];
            names["singular"] = json!("Widget");
            names["kind"] = json!("9Widget");
            names["listKind"] = json!("9Widget");
            names["shortNames"] = json!(["w_d"]);
            names["categories"] = json!(["all", "Bad"]);
        });
        let label = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
        assert_eq!(
            got,
            [
                format!(r#"spec.names.singular: Invalid value: "Widget": {label}"#),
                format!(r#"spec.names.kind: Invalid value: "9Widget": may have mixed case, but should otherwise match: {label}"#),
                format!(r#"spec.names.listKind: Invalid value: "9Widget": may have mixed case, but should otherwise match: {label}"#),
                format!(r#"spec.names.shortNames[0]: Invalid value: "w_d": {label}"#),
                r#"spec.names.listKind: Invalid value: "9Widget": kind and listKind may not be the same"#.to_string(),
                format!(r#"spec.names.categories[1]: Invalid value: "Bad": {label}"#),
            ]
        );
        let got = edit(|v| {
            v["spec"]["names"] = json!({"plural": "widgets"});
        });
        assert_eq!(
            got,
            [
                "spec.names.singular: Required value",
                "spec.names.kind: Required value",
                "spec.names.listKind: Required value"
            ]
        );
    }

    #[test]
    fn scale_paths_and_the_shared_sub_resources_path() {
        let scale = json!({"status": {}, "scale": {
            "specReplicasPath": ".status.replicas",
            "statusReplicasPath": "status.replicas",
            "labelSelectorPath": ".metadata.labels"}});
        // One version: the conversion shares its sub-resources at the top level.
        let got = edit(|v| v["spec"]["versions"][0]["subresources"] = scale.clone());
        assert_eq!(
            got,
            [
                r#"spec.subresources.scale.specReplicasPath: Invalid value: ".status.replicas": should be a json path under .spec"#,
                r#"spec.subresources.scale.statusReplicasPath: Invalid value: "status.replicas": must be a simple json path starting with ."#,
                r#"spec.subresources.scale.labelSelectorPath: Invalid value: ".metadata.labels": should be a json path under either .spec or .status"#,
            ]
        );
        // Two versions, only one with sub-resources: reported per version.
        let mut two = with_v2(widget());
        two["spec"]["versions"][1]["subresources"] =
            json!({"scale": {"specReplicasPath": ".spec.replicas"}});
        assert_eq!(
            create(two),
            ["spec.versions[1].subresources.scale.statusReplicasPath: Required value"]
        );
        let good = json!({"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}});
        assert_eq!(
            edit(|v| v["spec"]["versions"][0]["subresources"] = good),
            Vec::<String>::new()
        );
    }

    #[test]
    fn printer_columns() {
        let got = edit(|v| {
            v["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "", "type": "int", "format": "uint8", "jsonPath": "spec.color"},
                {"name": "Age", "jsonPath": ""}
            ]);
        });
        assert_eq!(
            got,
            [
                "spec.additionalPrinterColumns[1].name: Required value",
                r#"spec.additionalPrinterColumns[1].type: Invalid value: "int": must be one of boolean,date,integer,number,string"#,
                r#"spec.additionalPrinterColumns[1].format: Invalid value: "uint8": must be one of byte,date,date-time,double,float,int32,int64,password"#,
                r#"spec.additionalPrinterColumns[1].JSONPath: Invalid value: "spec.color": must be a simple json path starting with ."#,
                "spec.additionalPrinterColumns[2].type: Required value: must be one of boolean,date,integer,number,string",
                "spec.additionalPrinterColumns[2].JSONPath: Required value",
            ]
        );
        let mut two = with_v2(widget());
        two["spec"]["versions"][0]["additionalPrinterColumns"] =
            json!([{"name": "Color", "type": "string", "jsonPath": "color"}]);
        assert_eq!(
            create(two),
            [
                r#"spec.versions[0].additionalPrinterColumns[0].JSONPath: Invalid value: "color": must be a simple json path starting with ."#
            ]
        );
    }

    #[test]
    fn schema_root_rules_and_their_paths() {
        // The first problem is this module's; the structural checks may add their own.
        let first = |got: Vec<String>| got.into_iter().next().unwrap_or_default();
        let only_object = r#"openAPIV3Schema.type: Invalid value: "array": only "object" is allowed as the type at the root of the schema if the status subresource is enabled"#;
        // Two versions with their own schemas: reported per version.
        let mut two = with_v2(widget());
        two["spec"]["versions"][1]["subresources"] = json!({"status": {}});
        two["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["type"] = json!("array");
        assert_eq!(
            first(create(two)),
            format!("spec.versions[1].schema.{only_object}")
        );
        // One version: its schema is the shared `spec.validation`.
        let got = edit(|v| {
            let version = &mut v["spec"]["versions"][0];
            version["subresources"] = json!({"status": {}});
            version["schema"]["openAPIV3Schema"]["type"] = json!("array");
        });
        assert_eq!(first(got), format!("spec.validation.{only_object}"));
        // With the status sub-resource the root has few keywords.
        let got = first(edit(|v| {
            let version = &mut v["spec"]["versions"][0];
            version["subresources"] = json!({"status": {}});
            version["schema"]["openAPIV3Schema"]["additionalProperties"] = json!(false);
            version["schema"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"] =
                json!(true);
        }));
        assert!(got.starts_with("spec.validation.openAPIV3Schema: Invalid value: {"));
        assert!(got.ends_with(": only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled"));
        // Without it, none of this applies.
        let got = edit(|v| {
            v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                ["x-kubernetes-preserve-unknown-fields"] = json!(true);
        });
        assert!(
            !got.iter().any(|e| e.contains("status subresource")),
            "{got:?}"
        );
    }

    #[test]
    fn conversion_strategies() {
        let got = edit(|v| v["spec"]["conversion"] = json!({"strategy": "Webhook"}));
        assert_eq!(
            got,
            [
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
                "spec.conversion.conversionReviewVersions: Required value",
            ]
        );
        let got = edit(|v| {
            v["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v2", "v2"],
                "clientConfig": {"url": "http://u:p@conv.example.com/c?x=1#f"}}});
        });
        assert_eq!(
            got,
            [
                r#"spec.conversion.webhookClientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#,
                r#"spec.conversion.webhookClientConfig.url: Invalid value: "u:xxxxx": user information is not permitted in the URL"#,
                r#"spec.conversion.webhookClientConfig.url: Invalid value: "f": fragments are not permitted in the URL"#,
                r#"spec.conversion.webhookClientConfig.url: Invalid value: "x=1": query parameters are not permitted in the URL"#,
                r#"spec.conversion.conversionReviewVersions[1]: Invalid value: "v2": duplicate version"#,
                r#"spec.conversion.conversionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1"#,
            ]
        );
        let mut ok = widget();
        ok["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ns", "name": "conv", "path": "/convert"}}}});
        let mut obj = object(ok);
        CrdStrategy.prepare_for_create(&mut obj);
        assert_eq!(CrdStrategy.validate(&obj), []);
        assert_eq!(
            obj.as_map()["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
            443
        );
        let got = edit(|v| {
            v["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"namespace": "", "name": "c", "port": 0,
                    "path": "convert//x"}}}});
        });
        assert_eq!(
            got,
            [
                "spec.conversion.webhookClientConfig.service.namespace: Required value: service namespace is required",
                "spec.conversion.webhookClientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                r#"spec.conversion.webhookClientConfig.service.path: Invalid value: "convert//x": must start with a '/'"#,
                r#"spec.conversion.webhookClientConfig.service.path: Invalid value: "convert//x": segment[1] may not be empty"#,
            ]
        );
        let got = edit(|v| {
            v["spec"]["conversion"] = json!({"strategy": "None", "webhook": {
                "conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://x"}}});
        });
        assert_eq!(
            got,
            [
                "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook",
                "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook",
            ]
        );
        assert_eq!(
            edit(|v| v["spec"]["conversion"] = json!({"strategy": "Magic"})),
            [
                r#"spec.conversion.strategy: Unsupported value: "Magic": supported values: "None", "Webhook""#
            ]
        );
    }

    #[test]
    fn protected_groups_need_the_approval_annotation() {
        let in_group = |annotation: Option<&str>| {
            edit(|v| {
                v["spec"]["group"] = json!("widgets.k8s.io");
                v["metadata"]["name"] = json!("widgets.widgets.k8s.io");
                if let Some(a) = annotation {
                    v["metadata"]["annotations"] = json!({API_APPROVED_ANNOTATION: a});
                }
            })
        };
        assert_eq!(
            in_group(None),
            [
                r#"metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation "api-approved.kubernetes.io", see https://github.com/kubernetes/enhancements/pull/1111"#
            ]
        );
        assert_eq!(
            in_group(Some("yes")),
            [
                r#"metadata.annotations[api-approved.kubernetes.io]: Invalid value: "yes": protected groups must have approval annotation "api-approved.kubernetes.io" with either a URL or a reason starting with "unapproved", see https://github.com/kubernetes/enhancements/pull/1111"#
            ]
        );
        assert_eq!(in_group(Some("unapproved, testing")), Vec::<String>::new());
        assert_eq!(
            in_group(Some("https://github.com/kubernetes/kubernetes/pull/1")),
            Vec::<String>::new()
        );
        // An update that leaves the annotation's state alone is not refused for it.
        let mut old = widget();
        old["spec"]["group"] = json!("widgets.k8s.io");
        old["metadata"]["name"] = json!("widgets.widgets.k8s.io");
        let mut old = object(old);
        CrdStrategy.prepare_for_create(&mut old);
        let mut new = old.clone();
        new.set_meta_value("labels", Some(json!({"a": "b"})));
        CrdStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(CrdStrategy.validate_write(&new, Some(&old)), []);
        assert_eq!(CrdStrategy.validate_write(&new, None).len(), 1);
        assert!(!is_protected_group("k8s.io.example.com"));
        assert!(is_protected_group("x.kubernetes.io"));
    }

    #[test]
    fn preserve_unknown_fields_and_deprecation_warnings() {
        assert_eq!(
            edit(|v| v["spec"]["preserveUnknownFields"] = json!(true)),
            ["spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"]
        );
        assert_eq!(
            edit(|v| v["spec"]["versions"][0]["deprecationWarning"] = json!("old")),
            [
                r#"spec.versions[0].deprecationWarning: Invalid value: "old": can only be set for deprecated versions"#
            ]
        );
        assert_eq!(
            edit(|v| {
                v["spec"]["versions"][0]["deprecated"] = json!(true);
                v["spec"]["versions"][0]["deprecationWarning"] = json!("bad\tword");
            }),
            [
                r#"spec.versions[0].deprecationWarning: Invalid value: "bad\tword": must only contain printable UTF-8 characters; non-printable character found at index 3"#
            ]
        );
    }

    #[test]
    fn selectable_fields() {
        let got = edit(|v| {
            v["spec"]["versions"][0]["selectableFields"] = json!([
                {"jsonPath": ".spec.color"},
                {"jsonPath": ".spec.tags"},
                {"jsonPath": ".spec.color"},
                {"jsonPath": ".spec.size"},
                {"jsonPath": ".spec.tags[0]"},
                {"jsonPath": ""}
            ]);
        });
        assert_eq!(
            got,
            [
                r#"spec.selectableFields[1].jsonPath: Invalid value: ".spec.tags": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."#,
                r#"spec.selectableFields[2].jsonPath: Duplicate value: ".spec.color""#,
                r#"spec.selectableFields[3].jsonPath: Invalid value: ".spec.size": is an invalid path: does not refer to a valid field"#,
                r#"spec.selectableFields[4].jsonPath: Invalid value: ".spec.tags[0]": is an invalid path: array notation is not allowed"#,
                "spec.selectableFields[5].jsonPath: Required value",
            ]
        );
        let nine: Vec<Value> = (0..9)
            .map(|i| json!({"jsonPath": format!(".spec.f{i}")}))
            .collect();
        let got = edit(|v| {
            let props = &mut v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
                ["spec"]["properties"];
            for i in 0..9 {
                props[format!("f{i}")] = json!({"type": "boolean"});
            }
            v["spec"]["versions"][0]["selectableFields"] = json!(nine);
        });
        assert_eq!(
            got,
            ["spec.selectableFields: Too many: 9: must have at most 8 items"]
        );
    }

    #[test]
    fn updates_keep_status_count_generations_and_stored_versions() {
        let mut old = object(widget());
        CrdStrategy.prepare_for_create(&mut old);
        old.as_map_mut()["status"]["conditions"] =
            json!([{"type": "Established", "status": "True"}]);

        // A write that changes only metadata keeps the generation; the status is the server's.
        let mut same = old.clone();
        same.as_map_mut()["status"] = json!({"storedVersions": []});
        same.set_meta_value("labels", Some(json!({"a": "b"})));
        CrdStrategy.prepare_for_update(&mut same, &old);
        assert_eq!(same.meta_value("generation"), Some(&json!(1)));
        assert_eq!(same.as_map()["status"], old.as_map()["status"]);

        // A spec change moves the generation; a new storage version is recorded.
        let mut next = object(with_v2(old.clone().into_value()));
        next.as_map_mut()["spec"]["versions"][0]["storage"] = json!(false);
        next.as_map_mut()["spec"]["versions"][1]["storage"] = json!(true);
        CrdStrategy.prepare_for_update(&mut next, &old);
        assert_eq!(next.meta_value("generation"), Some(&json!(2)));
        assert_eq!(
            next.as_map()["status"]["storedVersions"],
            json!(["v1", "v2"])
        );
        assert_eq!(CrdStrategy.validate(&next), []);
        assert_eq!(CrdStrategy.validate_update(&next, &old), []);

        // Removing a stored version from the spec is refused.
        let mut dropped = next.clone();
        dropped.as_map_mut()["spec"]["versions"] =
            json!([next.as_map()["spec"]["versions"][1].clone()]);
        CrdStrategy.prepare_for_update(&mut dropped, &next);
        let got: Vec<String> = CrdStrategy
            .validate(&dropped)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                r#"status.storedVersions[0]: Invalid value: "v1": missing from spec.versions; v1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1 and removes v1 from status.storedVersions"#
            ]
        );
    }

    #[test]
    fn immutable_fields() {
        let mut old = object(widget());
        CrdStrategy.prepare_for_create(&mut old);
        let changed = |f: &dyn Fn(&mut Value), established: bool| {
            let mut old = old.clone();
            if established {
                old.as_map_mut()["status"]["conditions"] =
                    json!([{"type": "Established", "status": "True"}]);
            }
            let mut v = old.clone().into_value();
            f(&mut v);
            let mut new = object(v);
            CrdStrategy.prepare_for_update(&mut new, &old);
            CrdStrategy
                .validate_update(&new, &old)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            changed(&|v| v["spec"]["group"] = json!("example.org"), false),
            [r#"spec.group: Invalid value: "example.org": field is immutable"#]
        );
        assert_eq!(
            changed(&|v| v["spec"]["names"]["plural"] = json!("gadgets"), false),
            [r#"spec.names.plural: Invalid value: "gadgets": field is immutable"#]
        );
        let scope_and_kind = |v: &mut Value| {
            v["spec"]["scope"] = json!("Cluster");
            v["spec"]["names"]["kind"] = json!("Gadget");
        };
        assert_eq!(changed(&scope_and_kind, false), Vec::<String>::new());
        assert_eq!(
            changed(&scope_and_kind, true),
            [
                r#"spec.scope: Invalid value: "Cluster": field is immutable"#,
                r#"spec.names.kind: Invalid value: "Gadget": field is immutable"#,
            ]
        );
    }

    #[test]
    fn status_writes_change_only_the_status() {
        let mut old = object(widget());
        CrdStrategy.prepare_for_create(&mut old);
        let mut new = old.clone();
        new.as_map_mut()["spec"]["scope"] = json!("Cluster");
        new.as_map_mut()["status"]["acceptedNames"] =
            json!({"plural": "widgets", "kind": "Widget"});
        CrdStrategy.prepare_for_subresource_update("status", &mut new, &old);
        assert_eq!(new.as_map()["spec"], old.as_map()["spec"]);
        assert_eq!(new.as_map()["status"]["acceptedNames"]["kind"], "Widget");
        new.as_map_mut()["status"]["acceptedNames"]["plural"] = json!("Widgets");
        let got: Vec<String> = CrdStrategy
            .validate(&new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with(
            r#"status.acceptedNames.plural: Invalid value: "Widgets": a DNS-1035 label"#
        ));
    }
}
