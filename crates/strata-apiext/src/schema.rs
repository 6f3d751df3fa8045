//! A CRD version's `openAPIV3Schema` read once into a tree (the keywords validation, defaulting
//! and pruning use), with its patterns compiled. Build it once per schema and reuse it: the
//! free functions of [`crate::validate`] and [`crate::defaults`] that take raw JSON build one
//! per call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};
use strata_object::schema::lookup_order;

/// One node of a schema.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    /// `type`, empty when unset.
    pub type_: String,
    pub nullable: bool,
    /// `format` as written.
    pub format: String,
    /// Whether validation checks `format` (see [`Schema::checked_format`]), decided by
    /// [`Schema::parse`]; `None`: decided on each use.
    pub format_checked: Option<bool>,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub pattern: Option<Pattern>,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub unique_items: bool,
    pub multiple_of: Option<f64>,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    pub required: Vec<String>,
    /// `enum`, `None` when unset (an empty list validates nothing either).
    pub enum_values: Option<Vec<Value>>,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// `properties` in the order written.
    pub properties: Vec<(String, Schema)>,
    /// The positions in `properties`, their names in [`lookup_order`], for
    /// [`Schema::property`] to search. Filled by [`Schema::parse`]; when it does not cover
    /// `properties` (a `Schema` built by hand), lookups scan `properties` instead.
    pub properties_by_name: Vec<u32>,
    pub additional_properties: Option<AdditionalProperties>,
    /// `items` when it is one schema (an array of schemas is not structural and is ignored).
    pub items: Option<Box<Schema>>,
    pub default: Option<Value>,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    /// Whether this node or one below it (through properties, additionalProperties and items)
    /// is an `x-kubernetes-embedded-resource`: the walks that check them skip other subtrees.
    pub has_embedded_resource: bool,
    /// Whether this node or one below it is a `set` or `map` list, whose items are checked
    /// for uniqueness.
    pub has_unique_list: bool,
    /// Whether this node or one below it has a `default`: defaulting skips other subtrees.
    pub has_default: bool,
}

/// The (at most two) type names of [`Schema::types`], used as a slice.
#[derive(Clone, Copy, Debug)]
pub struct Types<'a> {
    names: [&'a str; 2],
    len: usize,
}

impl<'a> std::ops::Deref for Types<'a> {
    type Target = [&'a str];

    fn deref(&self) -> &[&'a str] {
        &self.names[..self.len]
    }
}

/// `additionalProperties`: a boolean or a schema for the values.
#[derive(Clone, Debug)]
pub enum AdditionalProperties {
    Allows(bool),
    Schema(Box<Schema>),
}

/// An OpenAPI `pattern`: the source as written and its compiled form (Go RE2 semantics, ASCII
/// `\d`, `\w`, `\s`, `\b`), or why it does not compile.
#[derive(Clone, Debug)]
pub struct Pattern {
    pub source: String,
    pub regex: Result<Arc<Regex>, String>,
}

impl Schema {
    /// Reads `schema` (JSONSchemaProps as written in the CRD). Keywords of the wrong JSON type
    /// are ignored.
    pub fn parse(schema: &Value) -> Schema {
        match schema {
            Value::Object(m) => parse_map(m),
            _ => Schema::default(),
        }
    }

    /// The property `name`, if declared.
    pub fn property(&self, name: &str) -> Option<&Schema> {
        self.property_index(name).map(|i| &self.properties[i].1)
    }

    /// The position of the property `name` in `properties`, if declared.
    pub fn property_index(&self, name: &str) -> Option<usize> {
        if self.properties_by_name.len() != self.properties.len() {
            return self.properties.iter().position(|(k, _)| k == name);
        }
        let by_name = &self.properties_by_name;
        let found = by_name
            .binary_search_by(|&i| lookup_order(&self.properties[i as usize].0, name))
            .ok()?;
        Some(by_name[found] as usize)
    }

    /// [`Schema::property_index`], trying position `guess` first: an object walked in the
    /// schema's order (as clients and this server write objects) finds each property at the
    /// position after the last one's, with one comparison.
    pub fn property_index_near(&self, name: &str, guess: usize) -> Option<usize> {
        match self.properties.get(guess) {
            Some((k, _)) if k == name => Some(guess),
            _ => self.property_index(name),
        }
    }

    /// The schema of the values of an object's other keys (`additionalProperties: {...}`).
    pub fn additional_schema(&self) -> Option<&Schema> {
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(s),
            _ => None,
        }
    }

    /// The schema that applies to `key` of an object: its property, else the
    /// `additionalProperties` schema.
    pub fn field(&self, key: &str) -> Option<&Schema> {
        self.property(key).or_else(|| self.additional_schema())
    }

    /// The types validation checks against: `x-kubernetes-int-or-string` stands for
    /// `integer,string`, as Kubernetes converts it. A slice, without allocating.
    pub fn types(&self) -> Types<'_> {
        if self.int_or_string {
            Types {
                names: ["integer", "string"],
                len: 2,
            }
        } else {
            Types {
                names: [self.type_.as_str(), ""],
                len: usize::from(!self.type_.is_empty()),
            }
        }
    }

    /// The format validation uses: Kubernetes (1.31) drops the formats it does not support
    /// for custom resources (among them `int32`, `int64`, `float`, `double`, which it never
    /// checks), so they constrain nothing.
    pub fn checked_format(&self) -> &str {
        let checked = self
            .format_checked
            .unwrap_or_else(|| crate::validate::supported_format(&self.format));
        if checked {
            &self.format
        } else {
            ""
        }
    }
}

fn parse_map(m: &Map<String, Value>) -> Schema {
    let str_of = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let bool_of = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    let f64_of = |k: &str| m.get(k).and_then(Value::as_f64);
    let i64_of = |k: &str| {
        m.get(k).and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        })
    };
    let list_of = |k: &str| -> Vec<Schema> {
        m.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Schema::parse).collect())
            .unwrap_or_default()
    };
    let strings_of = |k: &str| -> Vec<String> { strata_object::strings(m.get(k)) };
    let mut schema = Schema {
        type_: str_of("type"),
        nullable: bool_of("nullable"),
        format: str_of("format"),
        format_checked: None,
        maximum: f64_of("maximum"),
        exclusive_maximum: bool_of("exclusiveMaximum"),
        minimum: f64_of("minimum"),
        exclusive_minimum: bool_of("exclusiveMinimum"),
        max_length: i64_of("maxLength"),
        min_length: i64_of("minLength"),
        pattern: m
            .get("pattern")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(|p| Pattern {
                source: p.to_string(),
                regex: compile_pattern(p),
            }),
        max_items: i64_of("maxItems"),
        min_items: i64_of("minItems"),
        unique_items: bool_of("uniqueItems"),
        multiple_of: f64_of("multipleOf"),
        max_properties: i64_of("maxProperties"),
        min_properties: i64_of("minProperties"),
        required: strings_of("required"),
        enum_values: m.get("enum").and_then(Value::as_array).cloned(),
        all_of: list_of("allOf"),
        any_of: list_of("anyOf"),
        one_of: list_of("oneOf"),
        not: m.get("not").map(|n| Box::new(Schema::parse(n))),
        properties: m
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.clone(), Schema::parse(v)))
                    .collect()
            })
            .unwrap_or_default(),
        additional_properties: match m.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(AdditionalProperties::Allows(*b)),
            Some(v @ Value::Object(_)) => {
                Some(AdditionalProperties::Schema(Box::new(Schema::parse(v))))
            }
            _ => None,
        },
        items: match m.get("items") {
            Some(v @ Value::Object(_)) => Some(Box::new(Schema::parse(v))),
            _ => None,
        },
        default: m.get("default").filter(|d| !d.is_null()).cloned(),
        preserve_unknown_fields: bool_of("x-kubernetes-preserve-unknown-fields"),
        embedded_resource: bool_of("x-kubernetes-embedded-resource"),
        int_or_string: bool_of("x-kubernetes-int-or-string"),
        list_type: m
            .get("x-kubernetes-list-type")
            .and_then(Value::as_str)
            .map(str::to_string),
        list_map_keys: strings_of("x-kubernetes-list-map-keys"),
        map_type: m
            .get("x-kubernetes-map-type")
            .and_then(Value::as_str)
            .map(str::to_string),
        has_embedded_resource: false,
        has_unique_list: false,
        has_default: false,
        properties_by_name: Vec::new(),
    };
    let below: Vec<&Schema> = schema
        .properties
        .iter()
        .map(|(_, p)| p)
        .chain(schema.additional_schema())
        .chain(schema.items.as_deref())
        .collect();
    let has_embedded_resource =
        schema.embedded_resource || below.iter().any(|c| c.has_embedded_resource);
    let has_unique_list = matches!(schema.list_type.as_deref(), Some("set" | "map"))
        || below.iter().any(|c| c.has_unique_list);
    let has_default = schema.default.is_some() || below.iter().any(|c| c.has_default);
    schema.has_embedded_resource = has_embedded_resource;
    schema.has_unique_list = has_unique_list;
    schema.has_default = has_default;
    schema.format_checked = Some(crate::validate::supported_format(&schema.format));
    let mut by_name: Vec<u32> = (0..schema.properties.len() as u32).collect();
    by_name.sort_by(|&a, &b| {
        let name = |i: u32| schema.properties[i as usize].0.as_str();
        lookup_order(name(a), name(b))
    });
    schema.properties_by_name = by_name;
    schema
}

/// Compiles an OpenAPI pattern with Go's semantics, caching compiled patterns process-wide
/// (schemas are parsed again for every request through the raw-JSON entry points).
pub fn compile_pattern(pattern: &str) -> Result<Arc<Regex>, String> {
    type Compiled = Result<Arc<Regex>, String>;
    static CACHE: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap().get(pattern) {
        return hit.clone();
    }
    let compiled = Regex::new(&go_to_rust_regex(pattern))
        .map(Arc::new)
        .map_err(|e| regex_error(pattern, &e));
    let mut cache = cache.lock().unwrap();
    if cache.len() >= 4096 {
        cache.clear();
    }
    cache.insert(pattern.to_string(), compiled.clone());
    compiled
}

fn regex_error(pattern: &str, e: &regex::Error) -> String {
    // Go words it `error parsing regexp: <what>: `<part>``: the regex crate's description is
    // translated for the common mistakes, and the part is the whole pattern.
    let detail = e.to_string();
    let what = detail
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("error:"))
        .map(|l| {
            l.trim_start()
                .trim_start_matches("error:")
                .trim()
                .to_string()
        })
        .unwrap_or(detail);
    let go = [
        ("unclosed group", "missing closing )"),
        ("unopened group", "unexpected )"),
        ("unclosed character class", "missing closing ]"),
        ("unrecognized escape sequence", "invalid escape sequence"),
        (
            "repetition operator missing expression",
            "missing argument to repetition operator",
        ),
        (
            "invalid character class range",
            "invalid character class range",
        ),
        ("look-around", "invalid or unsupported Perl syntax"),
        ("backreferences", "invalid or unsupported Perl syntax"),
    ]
    .iter()
    .find(|(rust, _)| what.starts_with(rust))
    .map_or(what.as_str(), |(_, go)| go);
    format!("error parsing regexp: {go}: `{pattern}`")
}

/// Rewrites the Perl classes whose meaning differs: in Go they are ASCII-only, in the regex
/// crate Unicode-aware.
fn go_to_rust_regex(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 16);
    let mut chars = p.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let rep = match (n, in_class) {
                    ('d', false) => Some("[0-9]"),
                    ('D', false) => Some("[^0-9]"),
                    ('w', false) => Some("[0-9A-Za-z_]"),
                    ('W', false) => Some("[^0-9A-Za-z_]"),
                    ('s', false) => Some("[\\t\\n\\f\\r ]"),
                    ('S', false) => Some("[^\\t\\n\\f\\r ]"),
                    ('b', false) => Some("(?-u:\\b)"),
                    ('B', false) => Some("(?-u:\\B)"),
                    ('d', true) => Some("0-9"),
                    ('w', true) => Some("0-9A-Za-z_"),
                    ('s', true) => Some("\\t\\n\\f\\r "),
                    _ => None,
                };
                match rep {
                    Some(r) => out.push_str(r),
                    None => {
                        out.push('\\');
                        out.push(n);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A `]` (after an optional `^`) right at the start is a literal.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            '[' if in_class => {
                // A POSIX class such as `[:alpha:]` inside a class.
                if chars.peek() == Some(&':') {
                    out.push('[');
                    for c in chars.by_ref() {
                        out.push(c);
                        if c == ']' {
                            break;
                        }
                    }
                } else {
                    out.push_str("\\[");
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every declared property is found, whatever its name's length and whatever position is
    /// guessed; undeclared names are not.
    #[test]
    fn property_lookups_find_every_declared_name() {
        let names = ["b", "a", "ab", "ba", "aa", "abc", "", "zz", "é", "a\u{0}"];
        let props: Map<String, Value> = names
            .iter()
            .map(|n| (n.to_string(), json!({"type": "string"})))
            .collect();
        let s = Schema::parse(&json!({"type": "object", "properties": props}));
        for (i, name) in names.iter().enumerate() {
            assert_eq!(s.property_index(name), Some(i), "{name:?}");
            for guess in [0, i, i + 1, names.len(), usize::MAX] {
                assert_eq!(
                    s.property_index_near(name, guess),
                    Some(i),
                    "{name:?} {guess}"
                );
            }
        }
        for missing in ["c", "abcd", "bb", "A", "a\u{1}"] {
            assert_eq!(s.property_index(missing), None);
            assert_eq!(s.property_index_near(missing, 0), None);
        }
    }

    #[test]
    fn parses_keywords() {
        let s = Schema::parse(&json!({
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {"type": "string", "pattern": "^x$", "maxLength": 3},
                "b": {"x-kubernetes-int-or-string": true},
            },
            "additionalProperties": false,
        }));
        assert_eq!(s.type_, "object");
        assert_eq!(s.required, ["a"]);
        assert_eq!(s.property("a").unwrap().max_length, Some(3));
        assert!(s.property("b").unwrap().int_or_string);
        assert_eq!(*s.property("b").unwrap().types(), ["integer", "string"]);
        assert!(matches!(
            s.additional_properties,
            Some(AdditionalProperties::Allows(false))
        ));
    }

    #[test]
    fn patterns_have_go_semantics() {
        let digits = compile_pattern(r"^\d+$").unwrap();
        assert!(digits.is_match("123"));
        assert!(!digits.is_match("١٢٣")); // Arabic-Indic digits are not \d in Go
        let word = compile_pattern(r"^[\w.-]+$").unwrap();
        assert!(word.is_match("a_b.c-d"));
        assert!(!word.is_match("é"));
        assert!(compile_pattern("a(").is_err());
        assert!(compile_pattern("[]a]").unwrap().is_match("]"));
    }
}
