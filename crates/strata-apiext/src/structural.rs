//! Whether a CustomResourceDefinition version's `openAPIV3Schema` is a structural schema that
//! uses the `x-kubernetes-*` extensions legally: the schema part of apiextensions' validation
//! of a CRD (v1, new CRD: structural schemas, valid property types, atomic set items and
//! required-or-defaulted map keys all required), in its order and wording.
//!
//! Three passes, as Kubernetes runs them:
//! 1. the structural rules (every specified node has a type, value validations under
//!    `allOf`/`anyOf`/`oneOf`/`not` add no types or fields, the root is an object whose
//!    `metadata` restricts at most `name` and `generateName`, embedded resources and
//!    int-or-string are well formed), sorted by message;
//! 2. if those pass, the `default`s: each must validate against its schema, must not carry
//!    fields pruning would drop, and embedded resources' defaults must have apiVersion and kind;
//! 3. the OpenAPI keyword rules (unsupported keywords, types, `uniqueItems`, properties vs
//!    additionalProperties, defaults in top-level metadata, list and map types and keys).
//!
//! `x-kubernetes-validations` (CEL) are the business of [`crate::cel`].

use serde_json::{Map, Value};
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::go::{quote, string_slice};

use crate::gofmt::error_value;
use crate::prune::has_unknown_fields;
use crate::schema::{compile_pattern, Schema};
use crate::validate::{embedded_resource_errors_at, validate_value};

/// The problems of `schema`, each at `path` (e.g.
/// `spec.versions[0].schema.openAPIV3Schema`) plus the position inside the schema.
pub fn check_schema(schema: &Value, path: &str) -> Vec<FieldError> {
    let Some(root) = schema.as_object() else {
        return vec![FieldError::new(
            FieldErrorKind::Invalid,
            path,
            Some(error_value(schema)),
            "must be an object",
        )];
    };
    let mut errs = Vec::new();
    if flag(root, "nullable") {
        errs.push(FieldError::forbidden(
            &format!("{path}.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let unsupported = unsupported_field(schema);
    if unsupported.is_none() {
        let mut structural = Vec::new();
        invariants(root, Level::Root, path, &mut structural);
        completeness(root, root, path, path, &mut structural);
        if structural.is_empty() {
            defaults(schema, path, true, false, &mut errs);
        } else {
            structural.sort_by_key(ToString::to_string);
            errs.extend(structural);
        }
    }
    openapi(
        root,
        path,
        &Context {
            allow_defaults: true,
            no_defaults_reason: String::new(),
            inside_meta: false,
        },
        true,
        &mut errs,
    );
    if errs.is_empty() {
        if let Some(why) = unsupported {
            errs.push(FieldError::new(
                FieldErrorKind::Invalid,
                path,
                Some(quote("")),
                why,
            ));
        }
    }
    errs
}

// ---------------------------------------------------------------------------------------------
// Raw JSON access

fn flag(m: &Map<String, Value>, k: &str) -> bool {
    m.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn text<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

fn object<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Map<String, Value>> {
    m.get(k).and_then(Value::as_object)
}

fn list<'a>(m: &'a Map<String, Value>, k: &str) -> &'a [Value] {
    m.get(k)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn strings(m: &Map<String, Value>, k: &str) -> Vec<String> {
    list(m, k)
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Whether a keyword is set to something other than its zero value (as Go's structs see it).
fn set(m: &Map<String, Value>, k: &str) -> bool {
    match m.get(k) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty() || k == "not" || k == "additionalProperties",
        Some(Value::Number(_)) | Some(Value::Bool(true)) => true,
    }
}

fn properties(m: &Map<String, Value>) -> impl Iterator<Item = (&String, &Map<String, Value>)> {
    object(m, "properties")
        .into_iter()
        .flat_map(|p| p.iter())
        .filter_map(|(k, v)| v.as_object().map(|o| (k, o)))
}

fn prop_path(path: &str, k: &str) -> String {
    format!("{path}.properties[{k}]")
}

fn invalid(path: String, value: String, detail: impl Into<String>) -> FieldError {
    FieldError::new(FieldErrorKind::Invalid, path, Some(value), detail)
}

fn not_supported(path: String, value: &str, supported: &[&str]) -> FieldError {
    FieldError::not_supported(&path, value, supported)
}

// ---------------------------------------------------------------------------------------------
// Conversion to a structural schema (NewStructural): its errors are shown only when nothing
// else is wrong.

fn unsupported_field(v: &Value) -> Option<String> {
    let m = v.as_object()?;
    let checks = [
        ("id", "OpenAPIV3Schema 'id' is not supported"),
        ("$schema", "OpenAPIV3Schema 'schema' is not supported"),
        ("$ref", "OpenAPIV3Schema '$ref' is not supported"),
        (
            "patternProperties",
            "OpenAPIV3Schema 'patternProperties' is not supported",
        ),
        (
            "dependencies",
            "OpenAPIV3Schema 'dependencies' is not supported",
        ),
        (
            "additionalItems",
            "OpenAPIV3Schema 'additionalItems' is not supported",
        ),
        (
            "definitions",
            "OpenAPIV3Schema 'definitions' is not supported",
        ),
    ];
    for (k, why) in checks {
        let present = match k {
            "additionalItems" => m.get(k).is_some_and(|x| !x.is_null()),
            _ => set(m, k),
        };
        if present {
            return Some(why.to_string());
        }
    }
    if let Some(not) = m.get("not") {
        if let Some(e) = unsupported_field(not) {
            return Some(e);
        }
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for sub in list(m, k) {
            if let Some(e) = unsupported_field(sub) {
                return Some(e);
            }
        }
    }
    if let Some(ap) = m.get("additionalProperties").filter(|a| a.is_object()) {
        if let Some(e) = unsupported_field(ap) {
            return Some(e);
        }
    }
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        return Some(
            "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined"
                .into(),
        );
    }
    match m.get("items") {
        Some(Value::Array(a)) if !a.is_empty() => {
            return Some("OpenAPIV3Schema 'items' must be a schema, but is an array".into())
        }
        Some(items @ Value::Object(_)) => {
            if let Some(e) = unsupported_field(items) {
                return Some(e);
            }
        }
        _ => {}
    }
    for (_, p) in object(m, "properties").into_iter().flatten() {
        if let Some(e) = unsupported_field(p) {
            return Some(e);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Structural invariants (ValidateStructural)

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

fn invariants(s: &Map<String, Value>, lvl: Level, path: &str, errs: &mut Vec<FieldError>) {
    let type_ = text(s, "type");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let items = object(s, "items");
    if type_ == "array" && items.is_none() {
        errs.push(FieldError::required(
            &format!("{path}.items"),
            "must be specified",
        ));
    }
    if let Some(items) = items {
        invariants(items, Level::Item, &format!("{path}.items"), errs);
    }
    for (k, p) in properties(s) {
        invariants(p, Level::Field, &prop_path(path, k), errs);
    }
    let additional = s.get("additionalProperties").filter(|a| !a.is_null());
    if let Some(ap) = additional {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                &format!("{path}.additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(ap) = ap.as_object() {
            invariants(
                ap,
                Level::Field,
                &format!("{path}.additionalProperties"),
                errs,
            );
        }
    }
    if int_or_string && preserve {
        errs.push(invalid(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            "true".into(),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(invalid(
            format!("{path}.x-kubernetes-embedded-resource"),
            "true".into(),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    value_validation(
        s,
        is_int_or_string_any_of(s),
        is_int_or_string_all_of(s),
        path,
        errs,
    );
    if embedded && type_ != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        if type_.is_empty() {
            errs.push(FieldError::required(&format!("{path}.type"), detail));
        } else {
            errs.push(invalid(format!("{path}.type"), quote(type_), detail));
        }
    } else if type_.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(&format!("{path}.type"), detail));
    }
    if embedded && additional.is_some() {
        errs.push(FieldError::forbidden(
            &format!("{path}.additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !type_.is_empty() && type_ != "object" {
        errs.push(invalid(
            format!("{path}.type"),
            quote(type_),
            "must be object at the root",
        ));
    }
    let check_metadata = lvl == Level::Root || embedded;
    for field in ["kind", "apiVersion"] {
        if let Some(p) = object(s, "properties").and_then(|p| object(p, field)) {
            if check_metadata && text(p, "type") != "string" {
                errs.push(invalid(
                    format!("{}.type", prop_path(path, field)),
                    quote(text(p, "type")),
                    "must be string",
                ));
            }
        }
    }
    if let Some(meta) = object(s, "properties").and_then(|p| object(p, "metadata")) {
        let meta_path = prop_path(path, "metadata");
        if check_metadata && text(meta, "type") != "object" {
            errs.push(invalid(
                format!("{meta_path}.type"),
                quote(text(meta, "type")),
                "must be object",
            ));
        }
        if lvl == Level::Root && !metadata_restricts_only_names(meta) {
            errs.push(FieldError::forbidden(
                &meta_path,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && properties(s).next().is_none() {
        errs.push(FieldError::required(
            &format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// The root `metadata` schema may only be `type: object` with properties `name` and/or
/// `generateName` (descriptions and examples are not part of a structural schema).
fn metadata_restricts_only_names(meta: &Map<String, Value>) -> bool {
    meta.iter().all(|(k, v)| match k.as_str() {
        "type" | "default" | "example" | "externalDocs" => true,
        "properties" => match v.as_object() {
            Some(p) => p.keys().all(|k| k == "name" || k == "generateName"),
            None => v.is_null(),
        },
        _ => !set(meta, k),
    })
}

/// `anyOf: [{type: integer}, {type: string}]` exactly: the structural form of int-or-string.
fn int_or_string_pair(branches: &[Value]) -> bool {
    let only_type = |v: &Value, t: &str| {
        v.as_object()
            .is_some_and(|m| text(m, "type") == t && m.keys().all(|k| k == "type" || !set(m, k)))
    };
    branches.len() == 2 && only_type(&branches[0], "integer") && only_type(&branches[1], "string")
}

fn is_int_or_string_any_of(s: &Map<String, Value>) -> bool {
    int_or_string_pair(list(s, "anyOf"))
}

fn is_int_or_string_all_of(s: &Map<String, Value>) -> bool {
    list(s, "allOf")
        .first()
        .and_then(Value::as_object)
        .is_some_and(|first| int_or_string_pair(list(first, "anyOf")))
}

/// The junctors (`anyOf`, `allOf`, `oneOf`, `not`) and the pattern of a node.
fn value_validation(
    v: &Map<String, Value>,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, sub) in list(v, "anyOf").iter().enumerate() {
            nested(sub, false, &format!("{path}.anyOf[{i}]"), errs);
        }
    }
    for (i, sub) in list(v, "allOf").iter().enumerate() {
        let skip = skip_first_all_of_any_of && i == 0;
        nested(sub, skip, &format!("{path}.allOf[{i}]"), errs);
    }
    for (i, sub) in list(v, "oneOf").iter().enumerate() {
        nested(sub, false, &format!("{path}.oneOf[{i}]"), errs);
    }
    if let Some(not) = v.get("not") {
        nested(not, false, &format!("{path}.not"), errs);
    }
    let pattern = text(v, "pattern");
    if !pattern.is_empty() {
        if let Err(e) = compile_pattern(pattern) {
            errs.push(invalid(
                format!("{path}.pattern"),
                quote(pattern),
                format!("must be a valid regular expression, but isn't: {e}"),
            ));
        }
    }
}

/// A schema under a junctor: value validations only.
fn nested(v: &Value, skip_any_of: bool, path: &str, errs: &mut Vec<FieldError>) {
    let Some(v) = v.as_object() else {
        return;
    };
    value_validation(v, skip_any_of, false, path, errs);
    if let Some(items) = v.get("items").filter(|i| i.is_object()) {
        nested(items, false, &format!("{path}.items"), errs);
    }
    for (k, p) in object(v, "properties").into_iter().flatten() {
        nested(p, false, &prop_path(path, k), errs);
    }
    let forbid = |errs: &mut Vec<FieldError>, key: &str, detail: &str| {
        errs.push(FieldError::forbidden(&format!("{path}.{key}"), detail));
    };
    if set(v, "type") {
        forbid(errs, "type", "must be empty to be structural");
    }
    if v.get("additionalProperties").is_some_and(|a| !a.is_null()) {
        forbid(
            errs,
            "additionalProperties",
            "must be undefined to be structural",
        );
    }
    if v.get("default").is_some_and(|d| !d.is_null()) {
        forbid(errs, "default", "must be undefined to be structural");
    }
    for (key, detail) in [
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        ("nullable", "must be false to be structural"),
        (
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        ),
    ] {
        if set(v, key) {
            forbid(errs, key, detail);
        }
    }
    for key in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if v.get(key).is_some_and(|x| !x.is_null()) {
            forbid(errs, key, "must be undefined to be structural");
        }
    }
    if set(v, "x-kubernetes-validations") {
        forbid(
            errs,
            "x-kubernetes-validations",
            "must be empty to be structural",
        );
    }
    if object(v, "properties").is_some_and(|p| p.contains_key("metadata")) {
        errs.push(FieldError::forbidden(
            &prop_path(path, "metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// Every field or array a junctor at the root names must be specified outside the junctors
/// too (Kubernetes checks the root's junctors only).
fn completeness(
    v: &Map<String, Value>,
    s: &Map<String, Value>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(not) = object(v, "not") {
        nested_completeness(not, Some(s), s_path, &format!("{v_path}.not"), errs);
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in list(v, k).iter().enumerate() {
            if let Some(sub) = sub.as_object() {
                nested_completeness(sub, Some(s), s_path, &format!("{v_path}.{k}[{i}]"), errs);
            }
        }
    }
}

fn nested_completeness(
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(
            s_path,
            format!("because it is defined in {v_path}"),
        ));
        return;
    };
    completeness(v, s, s_path, v_path, errs);
    if let Some(items) = object(v, "items") {
        nested_completeness(
            items,
            object(s, "items"),
            &format!("{s_path}.items"),
            &format!("{v_path}.items"),
            errs,
        );
    }
    for (k, vp) in object(v, "properties").into_iter().flatten() {
        let Some(vp) = vp.as_object() else {
            continue;
        };
        let sp = prop_path(s_path, k);
        let vpp = prop_path(v_path, k);
        match object(s, "properties").and_then(|p| object(p, k)) {
            Some(sf) => nested_completeness(vp, Some(sf), &sp, &vpp, errs),
            None => errs.push(FieldError::required(
                &sp,
                format!("because it is defined in {vpp}"),
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults (ValidateDefaults)

/// Checks the `default`s of `node` and below. The resource root counts as an embedded
/// resource; defaults inside resource metadata are left alone (they are forbidden at the top
/// level by the keyword rules).
fn defaults(node: &Value, path: &str, root: bool, inside_meta: bool, errs: &mut Vec<FieldError>) {
    let Some(m) = node.as_object() else {
        return;
    };
    let embedded = root || flag(m, "x-kubernetes-embedded-resource");
    let inside_meta = inside_meta && !embedded;
    if let Some(d) = m.get("default").filter(|d| !d.is_null()) {
        if !inside_meta {
            let default_path = format!("{path}.default");
            let mut schema = Schema::parse(node);
            schema.embedded_resource = embedded;
            if has_unknown_fields(&schema, d, embedded) {
                errs.push(invalid(
                    default_path.clone(),
                    error_value(d),
                    "must not have unknown fields",
                ));
            }
            let meta = embedded_resource_errors_at(&schema, d, &default_path);
            if meta.is_empty() {
                errs.extend(validate_value(&schema, d, &default_path));
            } else {
                errs.extend(meta);
            }
        }
    }
    if let Some(items) = m.get("items").filter(|i| i.is_object()) {
        defaults(items, &format!("{path}.items"), false, inside_meta, errs);
    }
    for (k, p) in object(m, "properties").into_iter().flatten() {
        let sub_meta =
            inside_meta || (embedded && ["metadata", "apiVersion", "kind"].contains(&k.as_str()));
        defaults(p, &prop_path(path, k), false, sub_meta, errs);
    }
}

// ---------------------------------------------------------------------------------------------
// OpenAPI keyword rules (ValidateCustomResourceDefinitionOpenAPISchema)

#[derive(Clone)]
struct Context {
    allow_defaults: bool,
    no_defaults_reason: String,
    inside_meta: bool,
}

impl Context {
    fn without_defaults(&self, reason: String) -> Context {
        Context {
            allow_defaults: false,
            no_defaults_reason: reason,
            inside_meta: self.inside_meta,
        }
    }
}

const OPENAPI_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

fn openapi(
    s: &Map<String, Value>,
    path: &str,
    cx: &Context,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    let at = |k: &str| format!("{path}.{k}");
    let type_ = text(s, "type");
    if !type_.is_empty() && !OPENAPI_TYPES.contains(&type_) {
        errs.push(not_supported(at("type"), type_, &OPENAPI_TYPES));
    }
    if s.get("default").is_some_and(|d| !d.is_null()) && !cx.allow_defaults {
        let mut detail = "must not be set".to_string();
        if !cx.no_defaults_reason.is_empty() {
            detail.push(' ');
            detail.push_str(&cx.no_defaults_reason);
        }
        errs.push(FieldError::forbidden(&at("default"), detail));
    }
    if set(s, "id") {
        errs.push(FieldError::forbidden(&at("id"), "id is not supported"));
    }
    if s.get("additionalItems").is_some_and(|x| !x.is_null()) {
        errs.push(FieldError::forbidden(
            &at("additionalItems"),
            "additionalItems is not supported",
        ));
    }
    for (k, what) in [
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
    ] {
        if set(s, k) {
            errs.push(FieldError::forbidden(&at(k), what));
        }
    }
    if s.get("dependencies").is_some_and(|x| !x.is_null()) {
        errs.push(FieldError::forbidden(
            &at("dependencies"),
            "dependencies is not supported",
        ));
    }
    if s.get("$ref").is_some_and(|x| !x.is_null()) {
        errs.push(FieldError::forbidden(&at("$ref"), "$ref is not supported"));
    }
    if type_ == "null" {
        errs.push(FieldError::forbidden(
            &at("type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if matches!(s.get("items"), Some(Value::Array(a)) if !a.is_empty()) {
        errs.push(FieldError::forbidden(
            &at("items"),
            "items must be a schema object and not an array",
        ));
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if cx.inside_meta && embedded {
        errs.push(FieldError::forbidden(
            &at("x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
    if flag(s, "uniqueItems") {
        errs.push(FieldError::forbidden(
            &at("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }

    let has_properties = properties(s).next().is_some();
    match s.get("additionalProperties") {
        Some(Value::Bool(false)) if has_properties => {
            errs.push(FieldError::forbidden(
                &at("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        Some(Value::Object(ap)) => {
            if has_properties {
                errs.push(FieldError::forbidden(
                    &at("additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            let sub = if cx.inside_meta {
                cx.without_defaults(
                    "inside additionalProperties applying to object metadata".into(),
                )
            } else {
                cx.clone()
            };
            openapi(ap, &at("additionalProperties"), &sub, false, errs);
        }
        _ => {}
    }
    for (k, p) in properties(s) {
        let mut sub = cx.clone();
        if (root || embedded) && ["metadata", "kind", "apiVersion"].contains(&k.as_str()) {
            sub.inside_meta = true;
            if root {
                sub = sub.without_defaults(format!("in top-level {k}"));
            }
        }
        openapi(p, &prop_path(path, k), &sub, false, errs);
    }
    if let Some(not) = object(s, "not") {
        openapi(not, &at("not"), cx, false, errs);
    }
    for k in ["allOf", "oneOf", "anyOf"] {
        for (i, sub) in list(s, k).iter().enumerate() {
            if let Some(sub) = sub.as_object() {
                openapi(sub, &format!("{path}.{k}[{i}]"), cx, false, errs);
            }
        }
    }
    for (k, d) in object(s, "definitions").into_iter().flatten() {
        if let Some(d) = d.as_object() {
            openapi(d, &format!("{path}.definitions[{k}]"), cx, false, errs);
        }
    }
    match s.get("items") {
        Some(Value::Object(items)) => openapi(items, &at("items"), cx, false, errs),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(item) = item.as_object() {
                    openapi(item, &format!("{path}.items[{i}]"), cx, false, errs);
                }
            }
        }
        _ => {}
    }
    for (k, d) in object(s, "dependencies").into_iter().flatten() {
        if let Some(d) = d.as_object() {
            openapi(d, &format!("{path}.dependencies[{k}]"), cx, false, errs);
        }
    }

    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(invalid(
            at("x-kubernetes-preserve-unknown-fields"),
            "false".into(),
            "must be true or undefined",
        ));
    }
    let map_type = s.get("x-kubernetes-map-type").and_then(Value::as_str);
    if let Some(mt) = map_type {
        let detail = "must be object if x-kubernetes-map-type is specified";
        if type_.is_empty() {
            errs.push(FieldError::required(&at("type"), detail));
        } else if type_ != "object" {
            errs.push(invalid(at("type"), quote(type_), detail));
        }
        if mt != "atomic" && mt != "granular" {
            errs.push(not_supported(
                at("x-kubernetes-map-type"),
                mt,
                &["atomic", "granular"],
            ));
        }
    }
    let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = object(s, "items");
    if let Some(lt) = list_type {
        let detail = "must be array if x-kubernetes-list-type is specified";
        if type_.is_empty() {
            errs.push(FieldError::required(&at("type"), detail));
        } else if type_ != "array" {
            errs.push(invalid(at("type"), quote(type_), detail));
        } else if let (Some(items), "set") = (items, lt) {
            let detail = "must be atomic as item of a list with x-kubernetes-list-type=set";
            let item_list_type = items.get("x-kubernetes-list-type").and_then(Value::as_str);
            match text(items, "type") {
                "array" => {
                    if let Some(ilt) = item_list_type.filter(|t| *t != "atomic") {
                        errs.push(invalid(
                            format!("{path}.items.x-kubernetes-list-type"),
                            quote(ilt),
                            detail,
                        ));
                    }
                }
                "object"
                    if items.get("x-kubernetes-map-type").and_then(Value::as_str)
                        != Some("atomic") =>
                {
                    // Kubernetes prints the items' list type here, usually unset.
                    errs.push(invalid(
                        format!("{path}.items.x-kubernetes-map-type"),
                        quote(item_list_type.unwrap_or("null")),
                        detail,
                    ));
                }
                _ => {}
            }
        }
        if !["atomic", "set", "map"].contains(&lt) {
            errs.push(not_supported(
                at("x-kubernetes-list-type"),
                lt,
                &["atomic", "set", "map"],
            ));
        }
    }
    let keys = strings(s, "x-kubernetes-list-map-keys");
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    if !keys.is_empty() {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        match list_type {
            None => errs.push(FieldError::required(&at("x-kubernetes-list-type"), detail)),
            Some("map") => {}
            Some(lt) => errs.push(invalid(at("x-kubernetes-list-type"), quote(lt), detail)),
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            errs.push(FieldError::required(
                &at("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match s.get("items") {
            None | Some(Value::Null) => errs.push(FieldError::required(
                &at("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(Value::Object(items)) => {
                let item_type = text(items, "type");
                if item_type != "object" {
                    errs.push(invalid(
                        format!("{path}.items.type"),
                        quote(item_type),
                        "must be object if parent array's x-kubernetes-list-type is map",
                    ));
                } else {
                    let mut seen: Vec<&str> = Vec::new();
                    for k in &keys {
                        match object(items, "properties").and_then(|p| object(p, k)) {
                            Some(p) => {
                                if matches!(text(p, "type"), "array" | "object") {
                                    // Kubernetes prints the items' type here.
                                    errs.push(invalid(
                                        format!("{}.type", prop_path(&at("items"), k)),
                                        quote(item_type),
                                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                    ));
                                }
                            }
                            None => errs.push(invalid(
                                at("x-kubernetes-list-map-keys"),
                                string_slice(&key_refs),
                                "entries must all be names of item properties",
                            )),
                        }
                        if seen.contains(&k.as_str()) {
                            errs.push(invalid(
                                at("x-kubernetes-list-map-keys"),
                                string_slice(&key_refs),
                                "must not contain duplicate entries",
                            ));
                        }
                        seen.push(k);
                    }
                }
            }
            Some(other) => errs.push(invalid(
                at("items"),
                error_value(other),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
        }
    }
    // Set and map lists: items not nullable, map keys required or defaulted and not nullable.
    if let (Some(items), Some(lt @ ("set" | "map"))) = (items, list_type) {
        if flag(items, "nullable") {
            errs.push(FieldError::forbidden(
                &format!("{path}.items.nullable"),
                format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
            ));
        }
        if lt == "map" {
            let required = strings(items, "required");
            for k in &keys {
                let Some(p) = object(items, "properties").and_then(|p| object(p, k)) else {
                    continue;
                };
                let key_path = prop_path(&at("items"), k);
                if !required.contains(k) && p.get("default").is_none_or(Value::is_null) {
                    errs.push(FieldError::required(
                        &format!("{key_path}.default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    ));
                }
                if flag(p, "nullable") {
                    errs.push(FieldError::forbidden(
                        &format!("{key_path}.nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    ));
                }
            }
        }
    }
}
