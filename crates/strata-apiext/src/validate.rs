//! OpenAPI v3 validation of a custom resource against its version's schema, as kube-apiserver
//! 1.31 does it: kube-openapi's schema validator (its checks, their order, its messages
//! `spec.replicas in body must be of type integer: "string"`) with apiextensions' conversion of
//! its errors to field errors, then the checks of embedded resources
//! (`x-kubernetes-embedded-resource`) and of list uniqueness (`x-kubernetes-list-type` `set` and
//! `map`).
//!
//! Kubernetes' quirks are kept on purpose, because clients compare messages: a `maxLength`
//! failure reads `Too long: value is too long`, `maxItems`/`maxProperties` read `Too many: <n>:
//! has too many items` (apiextensions never learns the limit from kube-openapi), failures of
//! `anyOf`/`oneOf`/`allOf`/`not` are reported at the field `<nil>`, a `null` value prints as
//! `"null"`, and the formats Kubernetes does not support for custom resources (`int32`,
//! `int64`, `float`, `double` among them) constrain nothing.

use std::cell::Cell;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::go::quote;
use strata_object::names::dns1123_label_errors;

use crate::gofmt::{error_value, float_v, go_json, GoNumber};
use crate::schema::{AdditionalProperties, Schema};

/// The problems of `object` (a whole custom resource) against `schema`, the version's
/// `openAPIV3Schema`, with Kubernetes' field paths (`spec.replicas`) and messages. The root
/// `metadata` is left to the object-metadata checks, except the restrictions a schema may put
/// on `metadata.name` and `metadata.generateName` (the only ones Kubernetes allows there).
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    validate_with(&Schema::parse(schema), object)
}

/// [`validate`] with a schema parsed once ([`Schema::parse`]).
pub fn validate_with(schema: &Schema, object: &Value) -> Vec<FieldError> {
    let mut errs = Openapi {
        base: None,
        skip_root_metadata: true,
        quiet: Cell::new(false),
    }
    .run(schema, object, None);
    errs.extend(embedded_resource_errors(schema, object));
    errs.extend(list_type_errors(schema, object));
    errs
}

/// [`validate_with`] for an update of `old` to `object`, with Kubernetes' validation
/// ratcheting (`CRDValidationRatcheting`, on by default since 1.30): a value the update leaves
/// as it was may fail the schema, which may have been tightened since the value was written.
/// Its errors are dropped, wherever the value can be matched with the old one: by property
/// name, map key, or the keys of a `map` list's items. Duplicates in `set` and `map` lists
/// are errors only when `old` had none. Embedded resources are checked as on a create.
pub fn validate_update_with(schema: &Schema, object: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Openapi {
        base: None,
        skip_root_metadata: true,
        quiet: Cell::new(false),
    }
    .run(schema, object, Some(old));
    errs.extend(embedded_resource_errors(schema, object));
    if list_type_errors(schema, old).is_empty() {
        errs.extend(list_type_errors(schema, object));
    }
    errs
}

/// The error that takes the place of the CEL rules' when `errors` (the schema's) hold one that
/// makes evaluating the rules pointless: a value of the wrong type, missing, unsupported, or
/// too large (kube-apiserver's list, and its words).
pub fn rules_blocked_by(errors: &[FieldError]) -> Option<FieldError> {
    errors
        .iter()
        .any(|e| {
            matches!(
                e.kind,
                FieldErrorKind::NotSupported
                    | FieldErrorKind::Required
                    | FieldErrorKind::TooLong
                    | FieldErrorKind::TooMany
                    | FieldErrorKind::TypeInvalid
            )
        })
        .then(|| {
            FieldError::new(
                FieldErrorKind::Invalid,
                "<nil>",
                Some(quote("null")),
                "some validation rules were not checked because the object was invalid; \
                 correct the existing errors to complete validation",
            )
        })
}

/// kube-openapi's validation of `value` alone against `schema`, with error paths under
/// `field` (how Kubernetes checks a `default` at `...properties[x].default`).
pub fn validate_value(schema: &Schema, value: &Value, field: &str) -> Vec<FieldError> {
    Openapi {
        base: Some(field.to_string()),
        skip_root_metadata: false,
        quiet: Cell::new(false),
    }
    .run(schema, value, None)
}

// ---------------------------------------------------------------------------------------------
// kube-openapi's SchemaValidator

/// One error of kube-openapi: its message (which it de-duplicates on) and the field error
/// apiextensions turns it into.
struct OaError {
    message: String,
    error: FieldError,
}

/// A kube-openapi `Result`: errors, and how many checks passed (which picks the failures an
/// `anyOf`/`oneOf` reports).
#[derive(Default)]
struct Res {
    errors: Vec<OaError>,
    matches: usize,
}

impl Res {
    fn add(&mut self, e: OaError) {
        if !self.errors.iter().any(|x| x.message == e.message) {
            self.errors.push(e);
        }
    }

    fn merge(&mut self, other: Res) {
        for e in other.errors {
            self.add(e);
        }
        self.matches += other.matches;
    }

    fn is_valid(&self) -> bool {
        self.errors.is_empty()
    }
}

struct Openapi {
    /// The field path errors are reported under (`None`: the object's root, printed `<nil>`
    /// for errors about the root itself).
    base: Option<String>,
    skip_root_metadata: bool,
    /// Only whether the value is valid matters (an `anyOf` branch being tried): type errors,
    /// the ones such a try commonly meets, are recorded without their text.
    quiet: Cell<bool>,
}

impl Openapi {
    fn run(&self, schema: &Schema, value: &Value, old: Option<&Value>) -> Vec<FieldError> {
        self.ratcheted(schema, value, old, &mut String::new())
            .errors
            .into_iter()
            .map(|e| e.error)
            .collect()
    }

    /// The field path of an error kube-openapi names `name` (`spec.replicas`, `.spec` for a
    /// required root property).
    fn field(&self, name: &str) -> String {
        let trimmed = name.strip_prefix('.').unwrap_or(name);
        let at_base = name.is_empty() || name == ".";
        match (&self.base, at_base) {
            (None, true) => "<nil>".into(),
            (None, false) => trimmed.into(),
            (Some(b), true) => b.clone(),
            (Some(b), false) => format!("{b}.{trimmed}"),
        }
    }

    fn err(&self, kind: FieldErrorKind, name: &str, value: Option<String>, msg: String) -> OaError {
        let detail = match kind {
            FieldErrorKind::Required => String::new(),
            FieldErrorKind::TooLong => "value is too long".into(),
            FieldErrorKind::TooMany => "has too many items".into(),
            _ => msg.clone(),
        };
        OaError {
            error: FieldError::new(kind, self.field(name), value, detail),
            message: msg,
        }
    }

    fn invalid(&self, name: &str, value: String, msg: String) -> OaError {
        self.err(FieldErrorKind::Invalid, name, Some(value), msg)
    }

    /// Runs `check` in quiet mode (see `quiet`), restoring the mode it was in.
    fn quietly<T>(&self, check: impl FnOnce() -> T) -> T {
        let was = self.quiet.replace(true);
        let out = check();
        self.quiet.set(was);
        out
    }

    /// kube-openapi's `InvalidType` with a string value (all of its uses here).
    fn type_error(&self, name: &str, type_name: &str, got: &str) -> OaError {
        if self.quiet.get() {
            return Self::quiet_type_error();
        }
        let msg = format!("{name} in body must be of type {type_name}: {}", quote(got));
        self.err(FieldErrorKind::TypeInvalid, name, Some(quote(got)), msg)
    }

    /// An error that is not a kube-openapi `Validation` (the composite ones of `anyOf`,
    /// `oneOf`, `allOf`, `not`): apiextensions reports it at its base path with the value `""`.
    fn composite(&self, msg: String) -> OaError {
        let field = self.base.clone().unwrap_or_else(|| "<nil>".into());
        OaError {
            error: FieldError::new(FieldErrorKind::Invalid, field, Some(quote("")), msg.clone()),
            message: msg,
        }
    }

    /// [`Openapi::node`] for a value an update may have left unchanged: `old` is the value it
    /// replaces, when the two can be matched. When `data` fails and is unchanged, its errors
    /// are dropped (Kubernetes makes them warnings nobody sees).
    fn ratcheted(&self, s: &Schema, data: &Value, old: Option<&Value>, path: &mut String) -> Res {
        let r = self.node(s, data, old, path);
        if !r.is_valid() && old.is_some_and(|o| unchanged(s, data, o)) {
            return Res::default();
        }
        r
    }

    /// Checks `data` against `s`. `path` names `data` (kube-openapi's dotted form); children
    /// append their names to it while they are checked, and it is given back as it came. `old`
    /// is what `data` replaces in an update, matched with it (see [`Openapi::ratcheted`]).
    fn node(&self, s: &Schema, data: &Value, old: Option<&Value>, path: &mut String) -> Res {
        let mut r = Res::default();
        if data.is_null() {
            self.check_type(s, data, path, &mut r);
            self.check_enum(s, data, path, &mut r);
            return r;
        }
        if !s.types().is_empty() || !s.checked_format().is_empty() {
            self.check_type(s, data, path, &mut r);
            r.matches += 1;
        }
        self.check_junctors(s, data, old, path, &mut r);
        r.matches += 1;
        match data {
            Value::String(text) => {
                self.check_string(s, text, path, &mut r);
                r.matches += 1;
                let format = s.checked_format();
                if !format.is_empty() {
                    if !format_matches(format, text) {
                        r.add(self.type_error(path, format, text));
                    }
                    r.matches += 1;
                }
            }
            Value::Number(n) => {
                self.check_number(s, GoNumber::of(n), path, &mut r);
                r.matches += 1;
            }
            Value::Array(items) => {
                self.check_array(s, items, old, path, &mut r);
                r.matches += 1;
            }
            _ => {}
        }
        self.check_enum(s, data, path, &mut r);
        r.matches += 1;
        if let Value::Object(map) = data {
            self.check_object(s, map, old, path, &mut r);
            r.matches += 1;
        }
        r.matches += 1;
        r
    }

    fn check_type(&self, s: &Schema, data: &Value, path: &str, r: &mut Res) {
        let types = TypeSet::of(s);
        if data.is_null() {
            if !types.is_empty() && !types.has(TypeSet::NULL) && !s.nullable {
                r.add(self.wrong_type(path, s, "null"));
            }
            return;
        }
        let (sch_type, bit, format) = match data {
            Value::Bool(_) => ("boolean", TypeSet::BOOLEAN, ""),
            Value::String(_) => ("string", TypeSet::STRING, ""),
            Value::Array(_) => ("array", TypeSet::ARRAY, ""),
            Value::Object(_) => ("object", TypeSet::OBJECT, ""),
            Value::Number(n) => match GoNumber::of(n) {
                GoNumber::Int(_) => ("integer", TypeSet::INTEGER, "int64"),
                GoNumber::Float(_) => ("number", TypeSet::NUMBER, "float64"),
            },
            Value::Null => unreachable!("handled above"),
        };
        let is_float_int = bit == TypeSet::NUMBER
            && types.has(TypeSet::INTEGER)
            && data.as_f64().is_some_and(is_json_integer);
        let is_int_float = bit == TypeSet::INTEGER && types.has(TypeSet::NUMBER);
        let string_or_array = matches!(data, Value::String(_) | Value::Array(_));
        let want_format = s.checked_format();
        let format_fits = types.has(bit) || format == want_format || is_float_int || is_int_float;
        if !(string_or_array || want_format.is_empty() || format_fits) {
            r.add(self.type_error(path, want_format, format));
            return;
        }
        let numeric = types.has(TypeSet::NUMBER) || types.has(TypeSet::INTEGER);
        if !(numeric || want_format.is_empty()) && string_or_array {
            return;
        }
        if !(types.has(bit) || is_float_int || is_int_float) {
            r.add(self.wrong_type(path, s, sch_type));
        }
    }

    /// What [`Openapi::type_error`] records in quiet mode.
    fn quiet_type_error() -> OaError {
        OaError {
            message: String::new(),
            error: FieldError::new(FieldErrorKind::TypeInvalid, String::new(), None, ""),
        }
    }

    /// [`Openapi::type_error`] naming the schema's types, which are joined only when the error
    /// is spelt out: an `anyOf` branch of the wrong type (a quantity's) meets it quietly.
    fn wrong_type(&self, name: &str, s: &Schema, got: &str) -> OaError {
        if self.quiet.get() {
            return Self::quiet_type_error();
        }
        self.type_error(name, &s.types().join(","), got)
    }

    /// `anyOf`, `oneOf`, `allOf`, `not`: each branch checks `data` itself, so the children it
    /// reaches are matched with `old`'s as the node's own are.
    fn check_junctors(
        &self,
        s: &Schema,
        data: &Value,
        old: Option<&Value>,
        path: &mut String,
        r: &mut Res,
    ) {
        if !s.any_of.is_empty() {
            // The branches are tried quietly: a valid one is the same either way, and only
            // when none is valid are the errors of the closest one needed.
            let loud = !self.quiet.get();
            let mut best: Option<(usize, Res)> = None;
            let mut success: Option<Res> = None;
            for (i, sub) in s.any_of.iter().enumerate() {
                let res = self.quietly(|| self.node(sub, data, old, path));
                if res.is_valid() {
                    success = Some(res);
                    break;
                }
                if best.as_ref().is_none_or(|(_, b)| res.matches > b.matches) {
                    best = Some((i, res));
                }
            }
            match (success, best) {
                (Some(ok), _) => r.merge(ok),
                (None, best) => {
                    r.add(self.composite(format!(
                        "{} must validate at least one schema (anyOf)",
                        quote(path)
                    )));
                    match best {
                        Some((i, _)) if loud => r.merge(self.node(&s.any_of[i], data, old, path)),
                        Some((_, quiet)) => r.merge(quiet),
                        None => {}
                    }
                }
            }
        }
        if !s.one_of.is_empty() {
            let mut best: Option<Res> = None;
            let mut success: Option<Res> = None;
            let mut validated = 0;
            for sub in &s.one_of {
                let res = self.node(sub, data, old, path);
                if res.is_valid() {
                    validated += 1;
                    best = None;
                    if success.is_none() {
                        success = Some(res);
                    }
                    continue;
                }
                if validated == 0 && best.as_ref().is_none_or(|b| res.matches > b.matches) {
                    best = Some(res);
                }
            }
            if validated != 1 {
                let more = if validated == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {validated} valid alternatives")
                };
                r.add(self.composite(format!(
                    "{} must validate one and only one schema (oneOf). {more}",
                    quote(path)
                )));
                if let Some(b) = best {
                    r.merge(b);
                }
            } else if let Some(ok) = success {
                r.merge(ok);
            }
        }
        if !s.all_of.is_empty() {
            let mut validated = 0;
            for sub in &s.all_of {
                let res = self.node(sub, data, old, path);
                if res.is_valid() {
                    validated += 1;
                }
                r.merge(res);
            }
            if validated != s.all_of.len() {
                let more = if validated == 0 {
                    ". None validated"
                } else {
                    ""
                };
                r.add(self.composite(format!(
                    "{} must validate all the schemas (allOf){more}",
                    quote(path)
                )));
            }
        }
        if let Some(not) = &s.not {
            if self.quietly(|| self.node(not, data, old, path).is_valid()) {
                r.add(self.composite(format!(
                    "{} must not validate the schema (not)",
                    quote(path)
                )));
            }
        }
    }

    /// `maxLength`, `minLength`, `pattern`: the first failure only, as kube-openapi.
    fn check_string(&self, s: &Schema, text: &str, path: &str, r: &mut Res) {
        // Counted only when a bound needs it: most strings have none.
        let len = if s.max_length.is_some() || s.min_length.is_some() {
            text.chars().count() as i64
        } else {
            0
        };
        if let Some(max) = s.max_length {
            if len > max {
                let msg = format!("{path} in body should be at most {max} chars long");
                r.add(self.err(FieldErrorKind::TooLong, path, None, msg));
                return;
            }
        }
        if let Some(min) = s.min_length {
            if len < min {
                let msg = format!("{path} in body should be at least {min} chars long");
                r.add(self.invalid(path, quote(text), msg));
                return;
            }
        }
        if let Some(p) = &s.pattern {
            match &p.regex {
                Err(e) => {
                    let msg = format!(
                        "{path} in body should match '{}, but pattern is invalid: {e}'",
                        p.source
                    );
                    r.add(self.invalid(path, quote(text), msg));
                }
                Ok(re) if !re.is_match(text) => {
                    let msg = format!("{path} in body should match '{}'", p.source);
                    r.add(self.invalid(path, quote(text), msg));
                }
                Ok(_) => {}
            }
        }
    }

    /// `multipleOf`, `minimum`, `maximum`, in that order; integers are compared with the
    /// bounds truncated to integers, as kube-openapi does.
    fn check_number(&self, s: &Schema, n: GoNumber, path: &str, r: &mut Res) {
        // The value as errors print it, made only for an error.
        let value = || n.to_go();
        if let Some(factor) = s.multiple_of {
            let int_factor = factor as i64;
            match n {
                GoNumber::Int(i) if int_factor != 0 => {
                    if int_factor < 0 {
                        r.add(self.invalid(
                            path,
                            int_factor.to_string(),
                            format!(
                                "factor MultipleOf declared for {path} must be positive: {int_factor}"
                            ),
                        ));
                    } else if i % int_factor != 0 {
                        let msg = format!("{path} in body should be a multiple of {int_factor}");
                        r.add(self.invalid(path, value(), msg));
                    }
                }
                _ => {
                    let data = n.as_f64();
                    if factor < 0.0 {
                        r.add(self.invalid(
                            path,
                            float_v(factor),
                            format!(
                                "factor MultipleOf declared for {path} must be positive: {}",
                                float_v(factor)
                            ),
                        ));
                    } else {
                        let mult = if factor < 1.0 {
                            1.0 / factor * data
                        } else {
                            data / factor
                        };
                        if !is_json_integer(mult) {
                            let msg = format!(
                                "{path} in body should be a multiple of {}",
                                float_v(factor)
                            );
                            r.add(self.invalid(path, value(), msg));
                        }
                    }
                }
            }
        }
        if let Some(min) = s.minimum {
            let excl = s.exclusive_minimum;
            let (fails, bound) = match n {
                GoNumber::Int(i) => {
                    let m = min as i64;
                    ((!excl && i < m) || (excl && i <= m), m.to_string())
                }
                GoNumber::Float(f) => ((!excl && f < min) || (excl && f <= min), float_v(min)),
            };
            if fails {
                let op = if excl {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                let msg = format!("{path} in body should be {op} {bound}");
                r.add(self.invalid(path, value(), msg));
            }
        }
        if let Some(max) = s.maximum {
            let excl = s.exclusive_maximum;
            let (fails, bound) = match n {
                GoNumber::Int(i) => {
                    let m = max as i64;
                    ((!excl && i > m) || (excl && i >= m), m.to_string())
                }
                GoNumber::Float(f) => ((!excl && f > max) || (excl && f >= max), float_v(max)),
            };
            if fails {
                let op = if excl {
                    "less than"
                } else {
                    "less than or equal to"
                };
                let msg = format!("{path} in body should be {op} {bound}");
                r.add(self.invalid(path, value(), msg));
            }
        }
    }

    fn check_array(
        &self,
        s: &Schema,
        items: &[Value],
        old: Option<&Value>,
        path: &mut String,
        r: &mut Res,
    ) {
        if let Some(item_schema) = &s.items {
            let len = path.len();
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                // Writing to a String cannot fail.
                let _ = write!(path, "[{i}]");
                let old_item = old_items.and_then(|o| old_list_item(s, o, item));
                r.merge(self.ratcheted(item_schema, item, old_item, path));
                path.truncate(len);
            }
        }
        let path = path.as_str();
        let size = items.len() as i64;
        if let Some(min) = s.min_items {
            if size < min {
                let msg = format!("{path} in body should have at least {min} items");
                r.add(self.invalid(path, size.to_string(), msg));
            }
        }
        if let Some(max) = s.max_items {
            if size > max {
                let msg = format!("{path} in body should have at most {max} items");
                r.add(self.err(FieldErrorKind::TooMany, path, Some(size.to_string()), msg));
            }
        }
        if s.unique_items {
            let dup = items
                .iter()
                .enumerate()
                .any(|(i, a)| items[..i].iter().any(|b| go_deep_equal(a, b)));
            if dup {
                let msg = format!("{path} in body shouldn't contain duplicates");
                r.add(self.invalid(path, quote(""), msg));
            }
        }
    }

    fn check_enum(&self, s: &Schema, data: &Value, path: &str, r: &mut Res) {
        let Some(values) = s.enum_values.as_ref().filter(|v| !v.is_empty()) else {
            return;
        };
        if values.iter().any(|e| enum_matches(data, e)) {
            return;
        }
        let listed: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => go_json(other),
            })
            .collect();
        let quoted: Vec<String> = listed.iter().map(|v| quote(v)).collect();
        let msg = format!("{path} in body should be one of [{}]", listed.join(" "));
        let detail = format!("supported values: {}", quoted.join(", "));
        r.add(OaError {
            error: FieldError::new(
                FieldErrorKind::NotSupported,
                self.field(path),
                Some(error_value(data)),
                detail,
            ),
            message: msg,
        });
    }

    fn check_object(
        &self,
        s: &Schema,
        map: &Map<String, Value>,
        old: Option<&Value>,
        path: &mut String,
        r: &mut Res,
    ) {
        let old_of = |key: &str| old.and_then(|o| o.get(key));
        let count = map.len() as i64;
        if let Some(min) = s.min_properties {
            if count < min {
                let msg = format!("{path} in body should have at least {min} properties");
                r.add(self.invalid(path, count.to_string(), msg));
            }
        }
        if let Some(max) = s.max_properties {
            if count > max {
                let msg = format!("{path} in body should have at most {max} properties");
                r.add(self.err(FieldErrorKind::TooMany, path, Some(count.to_string()), msg));
            }
        }
        match &s.additional_properties {
            Some(AdditionalProperties::Allows(false)) => {
                for k in map.keys() {
                    if s.property_index(k).is_none() {
                        let msg = format!("{path}.{k} in body is a forbidden property");
                        r.add(self.invalid(path, quote(k), msg));
                    }
                }
            }
            Some(AdditionalProperties::Schema(values)) => {
                let len = path.len();
                for (k, v) in map {
                    if s.property_index(k).is_none() {
                        path.push('.');
                        path.push_str(k);
                        r.merge(self.ratcheted(values, v, old_of(k), path));
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
        // The declared properties present, in schema order (the order errors come in), found
        // by walking the object rather than looking each property up in it.
        let mut next = 0;
        let mut present: Vec<(usize, &Value)> = map
            .iter()
            .filter_map(|(k, v)| {
                let i = s.property_index_near(k, next)?;
                next = i + 1;
                Some((i, v))
            })
            .collect();
        present.sort_unstable_by_key(|(i, _)| *i);
        for &(i, v) in &present {
            let (name, prop) = &s.properties[i];
            if path.is_empty() && name == "metadata" && self.skip_root_metadata {
                // Only the name restrictions a CRD may declare for its objects' metadata.
                for key in ["name", "generateName"] {
                    if let (Some(ks), Some(kv)) = (prop.property(key), v.get(key)) {
                        let old = old_of("metadata").and_then(|m| m.get(key));
                        let path = &mut format!("metadata.{key}");
                        r.merge(self.ratcheted(ks, kv, old, path));
                    }
                }
                continue;
            }
            let len = path.len();
            if len > 0 {
                path.push('.');
            }
            path.push_str(name);
            r.merge(self.ratcheted(prop, v, old_of(name), path));
            path.truncate(len);
        }
        for k in &s.required {
            let found = match s.property_index(k) {
                Some(i) => present.binary_search_by_key(&i, |(j, _)| *j).is_ok(),
                None => map.contains_key(k),
            };
            if !found {
                let name = format!("{path}.{k}");
                let msg = format!("{name} in body is required");
                r.add(self.err(FieldErrorKind::Required, &name, None, msg));
            }
        }
    }
}

/// The type names of [`Schema::types`] as bits, so that checking a value's type against them
/// compares no strings. A name validation does not know sets no bit: no value has that type.
#[derive(Clone, Copy)]
struct TypeSet {
    bits: u8,
    named: bool,
}

impl TypeSet {
    const BOOLEAN: u8 = 1;
    const STRING: u8 = 1 << 1;
    const ARRAY: u8 = 1 << 2;
    const OBJECT: u8 = 1 << 3;
    const INTEGER: u8 = 1 << 4;
    const NUMBER: u8 = 1 << 5;
    const NULL: u8 = 1 << 6;

    fn of(s: &Schema) -> TypeSet {
        let bits = s.types().iter().fold(0, |bits, name| {
            bits | match *name {
                "boolean" => Self::BOOLEAN,
                "string" => Self::STRING,
                "array" => Self::ARRAY,
                "object" => Self::OBJECT,
                "integer" => Self::INTEGER,
                "number" => Self::NUMBER,
                "null" => Self::NULL,
                _ => 0,
            }
        });
        TypeSet {
            bits,
            named: !s.types().is_empty(),
        }
    }

    fn is_empty(self) -> bool {
        !self.named
    }

    fn has(self, bit: u8) -> bool {
        self.bits & bit != 0
    }
}

/// swag's `IsFloat64AJSONInteger`: a finite integral value within ±2^53 (up to a relative
/// error of 1e-9).
fn is_json_integer(f: f64) -> bool {
    const LIMIT: f64 = 9_007_199_254_740_992.0;
    if !f.is_finite() || !(-LIMIT..=LIMIT).contains(&f) {
        return false;
    }
    let g = f.trunc();
    if f == g {
        return true;
    }
    let diff = (f - g).abs();
    diff / (f.abs() + g.abs()) < 1e-9
}

/// Whether `new` is what an update left of `old`, as Kubernetes' ratcheting decides it: items of
/// `map` lists are matched by their keys (in any order), other lists compared whole, and an
/// object's members one by one, where a member the schema does not describe (neither a
/// property nor under `additionalProperties`) counts as changed.
fn unchanged(s: &Schema, new: &Value, old: &Value) -> bool {
    match (new, old) {
        (Value::Array(n), Value::Array(o)) => match &s.items {
            Some(items) if n.len() == o.len() && s.list_type.as_deref() == Some("map") => {
                n.iter().all(|item| {
                    old_list_item(s, o, item).is_some_and(|was| unchanged(items, item, was))
                })
            }
            _ => go_deep_equal(new, old),
        },
        (Value::Object(n), Value::Object(o)) => {
            n.len() == o.len()
                && n.iter().all(|(k, v)| {
                    let schema = match (s.property(k), &s.additional_properties) {
                        (Some(p), _) => p,
                        (None, Some(AdditionalProperties::Schema(values))) => values,
                        (None, _) => return false,
                    };
                    o.get(k).is_some_and(|was| unchanged(schema, v, was))
                })
        }
        _ => go_deep_equal(new, old),
    }
}

/// The item of `old` (a list of schema `s`) that `item` replaces: the one with the same keys,
/// in a `map` list. Items of other lists are not matched.
fn old_list_item<'a>(s: &Schema, old: &'a [Value], item: &Value) -> Option<&'a Value> {
    if s.list_type.as_deref() != Some("map") || s.list_map_keys.is_empty() {
        return None;
    }
    let same_keys = |o: &Value| {
        s.list_map_keys
            .iter()
            .all(|k| o.get(k).unwrap_or(&Value::Null) == item.get(k).unwrap_or(&Value::Null))
    };
    old.iter().find(|o| same_keys(o))
}

/// Go's `reflect.DeepEqual` of two decoded JSON values (`int64` and `float64` differ).
fn go_deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => GoNumber::of(x) == GoNumber::of(y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| go_deep_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| go_deep_equal(v, w)))
        }
        _ => a == b,
    }
}

/// kube-openapi's enum membership: deep equality, or equality after Go's conversion of the
/// value to the enum value's type (numbers convert into each other, truncating to integers).
fn enum_matches(data: &Value, e: &Value) -> bool {
    if data.is_null() {
        return false;
    }
    if go_deep_equal(data, e) {
        return true;
    }
    match (data, e) {
        (Value::Number(d), Value::Number(e)) => match (GoNumber::of(d), GoNumber::of(e)) {
            (GoNumber::Float(d), GoNumber::Int(e)) => d as i64 == e,
            (GoNumber::Int(d), GoNumber::Float(e)) => d as f64 == e,
            _ => false,
        },
        // Go converts an integer to the string of that code point.
        (Value::Number(d), Value::String(e)) => match GoNumber::of(d) {
            GoNumber::Int(d) => {
                let c = u32::try_from(d)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{fffd}');
                e.chars().eq(std::iter::once(c))
            }
            GoNumber::Float(_) => false,
        },
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Formats

/// The formats Kubernetes 1.31 validates in custom resources (named without dashes, as
/// kube-openapi normalizes them).
const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// Whether Kubernetes checks `format` in custom resources.
pub fn supported_format(format: &str) -> bool {
    // Compared with the dashes left out, without building the normalized name.
    let normalized = || format.bytes().filter(|b| *b != b'-');
    !format.is_empty()
        && SUPPORTED_FORMATS
            .iter()
            .any(|known| normalized().eq(known.bytes()))
}

fn static_re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("static pattern"))
}

/// Whether `s` is a valid value of the (supported) `format`.
pub fn format_matches(format: &str, s: &str) -> bool {
    static UUID: OnceLock<Regex> = OnceLock::new();
    static UUID3: OnceLock<Regex> = OnceLock::new();
    static UUID4: OnceLock<Regex> = OnceLock::new();
    static UUID5: OnceLock<Regex> = OnceLock::new();
    static HOSTNAME: OnceLock<Regex> = OnceLock::new();
    static BASE64: OnceLock<Regex> = OnceLock::new();
    static SSN: OnceLock<Regex> = OnceLock::new();
    static HEXCOLOR: OnceLock<Regex> = OnceLock::new();
    static RGBCOLOR: OnceLock<Regex> = OnceLock::new();
    match format.replace('-', "").as_str() {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => {
            static_re(
                &HOSTNAME,
                r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z0-9\p{S}\p{L}])(-?[a-zA-Z0-9\p{S}\p{L}]){1,62})$",
            )
            .is_match(s)
                && s.len() <= 255
                && s.split('.').all(|p| p.len() <= 63)
        }
        "ipv4" => s.parse::<IpAddr>().is_ok() && s.contains('.'),
        "ipv6" => s.parse::<IpAddr>().is_ok() && s.contains(':'),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" => static_re(
            &UUID,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        )
        .is_match(s),
        "uuid3" => static_re(
            &UUID3,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        )
        .is_match(s),
        "uuid4" => static_re(
            &UUID4,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        )
        .is_match(s),
        "uuid5" => static_re(
            &UUID5,
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        )
        .is_match(s),
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => is_credit_card(s),
        "ssn" => {
            s.len() == 11
                && static_re(&SSN, r"^[0-9]{3}[- ]?[0-9]{2}[- ]?[0-9]{4}$").is_match(s)
        }
        "hexcolor" => {
            static_re(&HEXCOLOR, r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$").is_match(s)
        }
        "rgbcolor" => static_re(
            &RGBCOLOR,
            r"^rgb\(\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*,\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*,\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*\)$",
        )
        .is_match(s),
        "byte" => static_re(
            &BASE64,
            r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
        )
        .is_match(s),
        "date" => is_date(s),
        "datetime" => is_date_time(s),
        "duration" => is_duration(s),
        _ => true,
    }
}

/// Go's `time.Parse("2006-01-02", s)`.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = &s[r];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// kube-openapi's `IsDateTime`: an RFC 3339 full date, `T`, and a time with a zone.
fn is_date_time(s: &str) -> bool {
    static TIME: OnceLock<Regex> = OnceLock::new();
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let re = static_re(
        &TIME,
        r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$",
    );
    let Some(c) = re.captures(parts[1]) else {
        return false;
    };
    &c[1] <= "23" && &c[2] <= "59" && &c[3] <= "59"
}

/// Go's `time.ParseDuration`, or the Scala-like `3 days` kube-openapi also accepts.
fn is_duration(s: &str) -> bool {
    go_duration(s) || scala_duration(s)
}

fn go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if number.matches('.').count() > 1 || (int.is_empty() && frac.is_empty()) {
            return false;
        }
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if !["ns", "us", "µs", "μs", "ms", "s", "m", "h"].contains(&unit) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

fn scala_duration(s: &str) -> bool {
    static SHAPE: OnceLock<Regex> = OnceLock::new();
    static PART: OnceLock<Regex> = OnceLock::new();
    if !static_re(&SHAPE, r"^\s*(?:[0-9]+\s*[A-Za-zµ]+\s*)+$").is_match(s) {
        return false;
    }
    const UNITS: &[&[&str]] = &[
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    static_re(&PART, r"(([0-9]+)\s*([A-Za-zµ]+))")
        .captures_iter(s)
        .any(|c| {
            let unit = c[3].trim().to_lowercase();
            UNITS.iter().any(|variants| {
                variants
                    .iter()
                    .enumerate()
                    .any(|(i, v)| (i == variants.len() - 1 && unit.starts_with(v)) || unit == *v)
            })
        })
}

/// Go's `net/url.ParseRequestURI`: an absolute URI or an absolute path.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) || !valid_escapes(s) {
        return false;
    }
    if s.starts_with('/') {
        return true;
    }
    // scheme ":" rest, the scheme a letter then letters, digits, `+`, `-`, `.`
    let Some(colon) = s.find(':') else {
        return false;
    };
    let scheme = &s[..colon];
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return false;
    }
    let rest = &s[colon + 1..];
    let rest = rest.split_once('?').map_or(rest, |(p, _)| p);
    if !rest.starts_with('/') {
        return false;
    }
    if let Some(authority) = rest.strip_prefix("//") {
        let host_port = authority.split('/').next().unwrap_or("");
        let host_port = host_port.rsplit_once('@').map_or(host_port, |(_, h)| h);
        return valid_host_port(host_port);
    }
    true
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

fn valid_host_port(hp: &str) -> bool {
    let (host, port) = if let Some(rest) = hp.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return false;
        };
        if ip
            .split('%')
            .next()
            .unwrap_or("")
            .parse::<IpAddr>()
            .is_err()
        {
            return false;
        }
        match after.strip_prefix(':') {
            Some(p) => ("", p),
            None if after.is_empty() => ("", ""),
            None => return false,
        }
    } else {
        match hp.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (hp, ""),
        }
    };
    port.bytes().all(|b| b.is_ascii_digit())
        && host.chars().all(|c| {
            c.is_alphanumeric()
                || matches!(
                    c,
                    '-' | '.'
                        | '_'
                        | '~'
                        | '!'
                        | '$'
                        | '&'
                        | '\''
                        | '('
                        | ')'
                        | '*'
                        | '+'
                        | ','
                        | ';'
                        | '='
                        | '%'
                        | ':'
                )
        })
}

/// Go's `net/mail.ParseAddress`, approximately: `local@domain`, optionally as
/// `Name <local@domain>`.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.ends_with('>')) {
        (Some(open), true) => &s[open + 1..s.len() - 1],
        (None, false) => s,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let dot_atom =
        |p: &str| !p.is_empty() && p.split('.').all(|a| !a.is_empty() && a.chars().all(atext));
    let local_ok = if local.len() >= 2 && local.starts_with('"') && local.ends_with('"') {
        true
    } else {
        dot_atom(local)
    };
    let domain_ok = if domain.starts_with('[') && domain.ends_with(']') {
        domain.len() > 2
    } else {
        dot_atom(domain)
    };
    local_ok && domain_ok
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(addr) = ip.parse::<IpAddr>() else {
        return false;
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|b| b.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|b| b <= max)
}

/// Go's `net.ParseMAC`: 6, 8 or 20 bytes as `xx:xx...`, `xx-xx...` or `xxxx.xxxx...`.
fn is_mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let sizes = [6usize, 8, 20];
    for sep in [':', '-'] {
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() > 1 && sizes.contains(&parts.len()) && parts.iter().all(|p| hex(p, 2)) {
            return true;
        }
    }
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() > 1 && sizes.contains(&(parts.len() * 2)) && parts.iter().all(|p| hex(p, 4))
}

fn isbn_digits(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect()
}

fn is_isbn10(s: &str) -> bool {
    let d = isbn_digits(s);
    let b = d.as_bytes();
    if b.len() != 10
        || !b[..9].iter().all(u8::is_ascii_digit)
        || !(b[9].is_ascii_digit() || b[9] == b'X')
    {
        return false;
    }
    let mut sum: u32 = (0..9)
        .map(|i| (i as u32 + 1) * u32::from(b[i] - b'0'))
        .sum();
    sum += if b[9] == b'X' {
        100
    } else {
        10 * u32::from(b[9] - b'0')
    };
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let d = isbn_digits(s);
    let b = d.as_bytes();
    if b.len() != 13 || !b.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = (0..12)
        .map(|i| u32::from(b[i] - b'0') * if i % 2 == 0 { 1 } else { 3 })
        .sum();
    (10 - sum % 10) % 10 == u32::from(b[12] - b'0')
}

fn is_credit_card(s: &str) -> bool {
    static CARD: OnceLock<Regex> = OnceLock::new();
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    if !static_re(
        &CARD,
        r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35[0-9]{3})[0-9]{11})$",
    )
    .is_match(&digits)
    {
        return false;
    }
    let mut sum = 0;
    for (i, c) in digits.bytes().rev().enumerate() {
        let mut d = u32::from(c - b'0');
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum % 10 == 0
}

// ---------------------------------------------------------------------------------------------
// Embedded resources and list uniqueness (apiextensions' own passes, with `field.Path` paths)

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The apiVersion, kind and metadata of every `x-kubernetes-embedded-resource` object below
/// the root, checked as Kubernetes checks them.
pub fn embedded_resource_errors(schema: &Schema, object: &Value) -> Vec<FieldError> {
    embedded_resource_errors_at(schema, object, "")
}

/// [`embedded_resource_errors`] for a value at `path` (a `default`, say); the value itself is
/// checked as a resource when `schema` is an embedded resource's.
pub(crate) fn embedded_resource_errors_at(
    schema: &Schema,
    value: &Value,
    path: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk_embedded(path, value, schema, &mut errs);
    errs
}

fn walk_embedded(path: &str, x: &Value, s: &Schema, errs: &mut Vec<FieldError>) {
    if !s.has_embedded_resource {
        return;
    }
    match x {
        Value::Object(map) => {
            if s.embedded_resource {
                embedded_resource(path, map, errs);
            }
            for (k, v) in map {
                if let Some(prop) = s.property(k) {
                    walk_embedded(&child(path, k), v, prop, errs);
                } else if let Some(values) = s.additional_schema() {
                    walk_embedded(&format!("{path}[{k}]"), v, values, errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = &s.items {
                for (i, v) in items.iter().enumerate() {
                    walk_embedded(&format!("{path}[{i}]"), v, item, errs);
                }
            }
        }
        _ => {}
    }
}

fn embedded_resource(path: &str, x: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    if !x.contains_key("apiVersion") {
        errs.push(FieldError::required(&child(path, "apiVersion"), ""));
    }
    if !x.contains_key("kind") {
        errs.push(FieldError::required(&child(path, "kind"), ""));
    }
    for (k, v) in x {
        let field = child(path, k);
        match k.as_str() {
            "apiVersion" => match v {
                Value::String(av) if av.is_empty() => errs.push(FieldError::required(&field, "")),
                Value::String(av) => {
                    if av != "/" && av.matches('/').count() > 1 {
                        errs.push(FieldError::invalid_string(
                            &field,
                            av,
                            format!("unexpected GroupVersion string: {av}"),
                        ));
                    }
                }
                other => errs.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    field,
                    Some(error_value(other)),
                    "must be a string",
                )),
            },
            "kind" => match v {
                Value::String(kind) if kind.is_empty() => {
                    errs.push(FieldError::required(&field, ""))
                }
                Value::String(kind) => {
                    let problems = strata_object::names::dns1035_label_errors(&kind.to_lowercase());
                    if !problems.is_empty() {
                        errs.push(FieldError::invalid_string(
                            &field,
                            kind,
                            format!(
                                "may have mixed case, but should otherwise match: {}",
                                problems.join(",")
                            ),
                        ));
                    }
                }
                other => errs.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    field,
                    Some(error_value(other)),
                    "must be a string",
                )),
            },
            "metadata" => embedded_metadata(&field, v, errs),
            _ => {}
        }
    }
}

/// The JSON type name Go's decoder uses in its errors.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn embedded_metadata(field: &str, v: &Value, errs: &mut Vec<FieldError>) {
    let decode_error =
        |msg: String| FieldError::new(FieldErrorKind::Invalid, field, Some(error_value(v)), msg);
    let meta = match v {
        Value::Null => return,
        Value::Object(m) => m,
        other => {
            errs.push(decode_error(format!(
                "json: cannot unmarshal {} into Go value of type v1.ObjectMeta",
                json_kind(other)
            )));
            return;
        }
    };
    for key in ["name", "generateName", "namespace"] {
        if let Some(val) = meta.get(key).filter(|x| !x.is_null() && !x.is_string()) {
            errs.push(decode_error(format!(
                "json: cannot unmarshal {} into Go struct field ObjectMeta.{key} of type string",
                json_kind(val)
            )));
            return;
        }
    }
    for key in ["labels", "annotations"] {
        match meta.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                if let Some(bad) = m.values().find(|x| !x.is_null() && !x.is_string()) {
                    errs.push(decode_error(format!(
                        "json: cannot unmarshal {} into Go struct field ObjectMeta.{key} of type string",
                        json_kind(bad)
                    )));
                    return;
                }
            }
            Some(other) => {
                errs.push(decode_error(format!(
                    "json: cannot unmarshal {} into Go struct field ObjectMeta.{key} of type map[string]string",
                    json_kind(other)
                )));
                return;
            }
        }
    }
    let str_of = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or("");
    let generate_name = str_of("generateName");
    if !generate_name.is_empty() {
        for msg in path_segment_errors(generate_name, true) {
            errs.push(FieldError::invalid_string(
                &format!("{field}.generateName"),
                generate_name,
                msg,
            ));
        }
    }
    let name = str_of("name");
    if !name.is_empty() {
        for msg in path_segment_errors(name, false) {
            errs.push(FieldError::invalid_string(
                &format!("{field}.name"),
                name,
                msg,
            ));
        }
    }
    let namespace = str_of("namespace");
    if !namespace.is_empty() {
        for msg in dns1123_label_errors(namespace) {
            errs.push(FieldError::invalid_string(
                &format!("{field}.namespace"),
                namespace,
                msg,
            ));
        }
    }
}

/// apimachinery's `ValidatePathSegmentName`.
fn path_segment_errors(name: &str, prefix: bool) -> Vec<String> {
    if !prefix && (name == "." || name == "..") {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(*bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// The uniqueness of `x-kubernetes-list-type: set` items and of `map` keys: one `Duplicate
/// value` per value seen again (at the index of its second appearance).
pub fn list_type_errors(schema: &Schema, object: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Value::Object(map) = object {
        if schema.has_unique_list {
            list_types_object("", schema, map, &mut errs);
        }
    }
    errs
}

fn list_types_object(path: &str, s: &Schema, obj: &Map<String, Value>, errs: &mut Vec<FieldError>) {
    // Paths are made only below schemas that hold a list to check.
    if let Some(values) = s.additional_schema().filter(|v| v.has_unique_list) {
        for (k, v) in obj {
            list_types_value(&format!("{path}[{k}]"), values, v, errs);
        }
    }
    if !s.properties.is_empty() {
        for (k, v) in obj {
            if path.is_empty() && k == "metadata" {
                continue;
            }
            if let Some(prop) = s.property(k).filter(|p| p.has_unique_list) {
                list_types_value(&child(path, k), prop, v, errs);
            }
        }
    }
}

fn list_types_value(path: &str, s: &Schema, v: &Value, errs: &mut Vec<FieldError>) {
    if !s.has_unique_list {
        return;
    }
    match v {
        Value::Array(items) => list_types_array(path, s, items, errs),
        Value::Object(map) => list_types_object(path, s, map, errs),
        _ => {}
    }
}

fn list_types_array(path: &str, s: &Schema, items: &[Value], errs: &mut Vec<FieldError>) {
    match s.list_type.as_deref() {
        Some("set") => {
            let duplicates = if items.len() <= PAIRWISE_UP_TO {
                let same = |x: &Value, y: &Value| {
                    same_value(x, y, true).unwrap_or_else(|| identity(x) == identity(y))
                };
                (1..items.len())
                    .filter(|&i| (0..i).filter(|&j| same(&items[i], &items[j])).count() == 1)
                    .collect()
            } else {
                let ids: Vec<String> = items.iter().map(identity).collect();
                non_unique(&ids)
            };
            for i in duplicates {
                errs.push(FieldError::new(
                    FieldErrorKind::Duplicate,
                    format!("{path}[{i}]"),
                    Some(error_value(&items[i])),
                    "",
                ));
            }
        }
        Some("map") => list_map_errors(path, s, items, errs),
        _ => {}
    }
    if let Some(item) = s.items.as_ref().filter(|item| item.has_unique_list) {
        for (i, v) in items.iter().enumerate() {
            list_types_value(&format!("{path}[{i}]"), item, v, errs);
        }
    }
}

/// A key identifying a decoded value the way Go compares them: scalars by type and value
/// (`1` and `1.0` differ), compound values by their JSON encoding.
fn identity(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => format!("c{}", go_json(v)),
        Value::Number(n) => match GoNumber::of(n) {
            GoNumber::Int(i) => format!("i{i}"),
            GoNumber::Float(f) => format!("f{}", f.to_bits()),
        },
        Value::String(s) => format!("s{s}"),
        Value::Bool(b) => format!("b{b}"),
        Value::Null => "n".into(),
    }
}

/// Indices of the second appearance of each identity that appears more than once.
fn non_unique(ids: &[String]) -> Vec<usize> {
    let mut seen = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let count = seen.entry(id.as_str()).or_insert(0);
        *count += 1;
        if *count == 2 {
            out.push(i);
        }
    }
    out
}

fn list_map_errors(path: &str, s: &Schema, items: &[Value], errs: &mut Vec<FieldError>) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(FieldError::new(
                FieldErrorKind::Invalid,
                format!("{path}[{i}]"),
                Some(error_value(x)),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if items.len() <= 1 {
        return;
    }
    let keys = &s.list_map_keys;
    let duplicates = if items.len() <= PAIRWISE_UP_TO {
        // A few items (the usual case): compared pairwise, without building their identities.
        (1..items.len())
            .filter(|&i| {
                (0..i)
                    .filter(|&j| same_map_key(keys, &items[i], &items[j]))
                    .count()
                    == 1
            })
            .collect()
    } else {
        let ids: Vec<String> = items.iter().map(|x| map_key_identity(keys, x)).collect();
        non_unique(&ids)
    };
    for i in duplicates {
        errs.push(FieldError::new(
            FieldErrorKind::Duplicate,
            format!("{path}[{i}]"),
            Some(error_value(&map_key(keys, &items[i]))),
            "",
        ));
    }
}

/// Lists of list-type set or map up to this length are checked for duplicates pairwise.
const PAIRWISE_UP_TO: usize = 16;

/// The key of a list-map item: the object of its key fields that are set (an unset key field
/// is left out, so two items without the key collide).
fn map_key(keys: &[String], item: &Value) -> Value {
    let mut key = Map::new();
    if let Value::Object(m) = item {
        for k in keys {
            if let Some(v) = m.get(k) {
                key.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(key)
}

/// The identity of a list-map item's key: with one key field, its value compared as a scalar
/// (items without it share one identity); with several, the key object's.
fn map_key_identity(keys: &[String], item: &Value) -> String {
    if let [only] = keys {
        match item.get(only) {
            Some(v) => identity(v),
            None => "u".into(),
        }
    } else {
        identity(&map_key(keys, item))
    }
}

/// Whether two list-map items have the same key, as their [`map_key_identity`]s would tell;
/// decided without building them where the values' kinds settle it.
fn same_map_key(keys: &[String], a: &Value, b: &Value) -> bool {
    let scalar = keys.len() == 1;
    for k in keys {
        let same = match (a.get(k), b.get(k)) {
            (None, None) => Some(true),
            (Some(x), Some(y)) => same_value(x, y, scalar),
            _ => Some(false),
        };
        match same {
            Some(true) => {}
            Some(false) => return false,
            None => return map_key_identity(keys, a) == map_key_identity(keys, b),
        }
    }
    true
}

/// Whether two key values are the same by [`identity`] (`scalar`) or by their JSON encoding
/// (inside a key object); None when only building those tells: compound values, and an
/// integer against a float inside a key object (`1` and `1.0` encode alike).
fn same_value(x: &Value, y: &Value, scalar: bool) -> Option<bool> {
    match (x, y) {
        (Value::String(x), Value::String(y)) => Some(x == y),
        (Value::Bool(x), Value::Bool(y)) => Some(x == y),
        (Value::Null, Value::Null) => Some(true),
        (Value::Number(x), Value::Number(y)) => match (GoNumber::of(x), GoNumber::of(y)) {
            (GoNumber::Int(i), GoNumber::Int(j)) => Some(i == j),
            (GoNumber::Float(f), GoNumber::Float(g)) => Some(f.to_bits() == g.to_bits()),
            _ if scalar => Some(false),
            _ => None,
        },
        (Value::Object(_) | Value::Array(_), Value::Object(_) | Value::Array(_)) => None,
        // Different kinds of scalar: different identities and different encodings.
        _ => Some(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Comparing two items' keys pairwise finds them the same exactly when their identities
    /// are, with one key field and with several, across kinds of value.
    #[test]
    fn pairwise_map_keys_agree_with_identities() {
        let items = [
            json!({"a": 1}),
            json!({"a": 1.0}),
            json!({"a": 1.5}),
            json!({"a": "1"}),
            json!({}),
            json!(null),
            json!({"a": [1]}),
            json!({"a": [1.0]}),
            json!({"a": {"x": 1}}),
            json!({"a": true}),
            json!({"a": null}),
            json!({"b": 1}),
            json!({"a": 1, "b": 2}),
            json!({"b": 2, "a": 1.0}),
            json!({"a": 1, "b": 2.5}),
            json!({"a": 1, "b": "2.5"}),
        ];
        let mut same = 0;
        for keys in [
            vec!["a".to_string()],
            vec!["a".to_string(), "b".to_string()],
        ] {
            for x in &items {
                for y in &items {
                    let want = map_key_identity(&keys, x) == map_key_identity(&keys, y);
                    assert_eq!(same_map_key(&keys, x, y), want, "{keys:?}: {x} and {y}");
                    same += usize::from(want);
                }
            }
        }
        // Not only each item with itself: some different items share a key.
        assert!(same > 2 * items.len(), "{same}");
    }
}
