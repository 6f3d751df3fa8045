//! The schema side of CEL rules: how a JSONSchemaProps node looks to CEL (its declared type,
//! with the sizes Kubernetes assumes for cost estimates), property-name escaping, and the
//! conversion of a custom resource's JSON into CEL values (with the runtime [`Ty`] of the
//! converted value, for the cost bound).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap, CelMapKey, CelNull,
    CelString, CelTimestamp, CelUInt,
};
use cel::common::value::Val;
use serde_json::Value as J;

use super::ty::{Assoc, Fields, Range, Ty, MAX_REQUEST_SIZE};

/// A read-only view of one JSONSchemaProps node (as written in the CRD).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Schema<'a>(pub &'a J);

impl<'a> Schema<'a> {
    fn get(&self, key: &str) -> Option<&'a J> {
        self.0.get(key)
    }

    fn flag(&self, key: &str) -> bool {
        self.get(key).and_then(J::as_bool).unwrap_or(false)
    }

    pub fn ty(&self) -> &'a str {
        self.get("type").and_then(J::as_str).unwrap_or("")
    }

    pub fn format(&self) -> &'a str {
        self.get("format").and_then(J::as_str).unwrap_or("")
    }

    pub fn int_or_string(&self) -> bool {
        self.flag("x-kubernetes-int-or-string")
    }

    pub fn preserve_unknown(&self) -> bool {
        self.flag("x-kubernetes-preserve-unknown-fields")
    }

    pub fn embedded(&self) -> bool {
        self.flag("x-kubernetes-embedded-resource")
    }

    pub fn properties(&self) -> Option<&'a serde_json::Map<String, J>> {
        self.get("properties").and_then(J::as_object)
    }

    pub fn property(&self, name: &str) -> Option<Schema<'a>> {
        self.properties().and_then(|p| p.get(name)).map(Schema)
    }

    pub fn items(&self) -> Option<Schema<'a>> {
        self.get("items").filter(|i| i.is_object()).map(Schema)
    }

    /// `additionalProperties` when it is a schema (not a boolean).
    pub fn additional(&self) -> Option<Schema<'a>> {
        self.get("additionalProperties")
            .filter(|i| i.is_object())
            .map(Schema)
    }

    pub fn list_type(&self) -> &'a str {
        self.get("x-kubernetes-list-type")
            .and_then(J::as_str)
            .unwrap_or("atomic")
    }

    pub fn list_map_keys(&self) -> Vec<&'a str> {
        self.get("x-kubernetes-list-map-keys")
            .and_then(J::as_array)
            .map(|a| a.iter().filter_map(J::as_str).collect())
            .unwrap_or_default()
    }

    pub fn map_type(&self) -> Option<&'a str> {
        self.get("x-kubernetes-map-type").and_then(J::as_str)
    }

    fn bound(&self, key: &str) -> Option<u64> {
        self.get(key)
            .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
            .map(|v| v.max(0) as u64)
    }

    pub fn max_items(&self) -> Option<u64> {
        self.bound("maxItems")
    }

    pub fn max_length(&self) -> Option<u64> {
        self.bound("maxLength")
    }

    pub fn max_properties(&self) -> Option<u64> {
        self.bound("maxProperties")
    }

    pub fn required(&self) -> Vec<&'a str> {
        self.get("required")
            .and_then(J::as_array)
            .map(|a| a.iter().filter_map(J::as_str).collect())
            .unwrap_or_default()
    }

    pub fn has_default(&self) -> bool {
        self.get("default").is_some()
    }

    pub fn validations(&self) -> &'a [J] {
        self.get("x-kubernetes-validations")
            .and_then(J::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn enum_max_len(&self) -> Option<u64> {
        let values = self.get("enum")?.as_array()?;
        if values.is_empty() {
            return None;
        }
        Some(
            values
                .iter()
                .filter_map(J::as_str)
                .map(|s| s.len() as u64)
                .max()
                .unwrap_or(0),
        )
    }

    /// The type Kubernetes reports as the value of a failed rule's error: the schema `type`
    /// (empty for int-or-string and untyped nodes).
    pub fn type_name(&self) -> String {
        self.ty().to_string()
    }
}

/// CEL keywords a property may not be named without escaping.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL identifier of a property name, or `None` when the name cannot be expressed in CEL
/// (Kubernetes' escaping: `__` → `__underscores__`, `.` → `__dot__`, `-` → `__dash__`, `/` →
/// `__slash__`, a keyword `k` → `__k__`; other characters, or a leading digit, make the
/// property inaccessible).
pub(crate) fn escape(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

const MIN_STRING_SIZE: u64 = 2;
const MIN_BOOL_SIZE: u64 = 4;
const MIN_NUMBER_SIZE: u64 = 1;
const MIN_DURATION_SIZE: u64 = 3;
const DATE_SIZE: u64 = 12;
const MIN_DATETIME_SIZE: u64 = 21;
const MAX_DURATION_SIZE: u64 = 32;
const MAX_DATETIME_SIZE: u64 = 32;

/// The smallest JSON serialization of a value of the schema (Kubernetes' `MinSerializedSize`),
/// from which the number of values an unbounded list can hold is estimated.
pub(crate) fn min_size(s: Schema) -> u64 {
    if s.int_or_string() {
        return 1;
    }
    match s.ty() {
        "array" => 2,
        "object" => {
            if s.additional().is_some() {
                return 2;
            }
            let mut size = 2;
            let required = s.required();
            if let Some(props) = s.properties() {
                for (name, prop) in props {
                    let prop = Schema(prop);
                    if required.contains(&name.as_str()) && !prop.has_default() && visible(prop) {
                        size += name.len() as u64 + min_size(prop) + 4;
                    }
                }
            }
            size
        }
        "string" => match s.format() {
            "duration" => MIN_DURATION_SIZE,
            "date" => DATE_SIZE,
            "date-time" => MIN_DATETIME_SIZE,
            _ => MIN_STRING_SIZE,
        },
        "boolean" => MIN_BOOL_SIZE,
        "number" | "integer" => MIN_NUMBER_SIZE,
        _ => 1,
    }
}

/// How many values of a schema with this minimum size fit in one request: the cardinality
/// assumed for a rule under unbounded lists or maps.
pub(crate) fn max_cardinality(min: u64) -> u64 {
    MAX_REQUEST_SIZE / (min + 1)
}

fn max_string_len(s: Schema) -> u64 {
    if s.int_or_string() {
        return MAX_REQUEST_SIZE - 2;
    }
    match s.format() {
        "duration" => MAX_DURATION_SIZE,
        "date" => DATE_SIZE,
        "date-time" => MAX_DATETIME_SIZE,
        _ => MAX_REQUEST_SIZE - 2,
    }
}

fn string_ty(s: Schema) -> Ty {
    let max = if let Some(l) = s.max_length() {
        l.saturating_mul(4)
    } else if let Some(l) = s.enum_max_len() {
        l
    } else {
        max_string_len(s)
    };
    Ty::String(Range::upto(max))
}

fn metadata_ty() -> Ty {
    let mut fields = BTreeMap::new();
    fields.insert("name".into(), Ty::String(Range::upto(MAX_REQUEST_SIZE - 2)));
    fields.insert(
        "generateName".into(),
        Ty::String(Range::upto(MAX_REQUEST_SIZE - 2)),
    );
    Ty::Object(Arc::new(Fields { fields }))
}

/// The type CEL sees for values of the schema, with the sizes Kubernetes assumes for its
/// cost estimates; `None` for nodes CEL cannot see (untyped nodes without
/// `x-kubernetes-preserve-unknown-fields`, lists whose items it cannot see).
pub(crate) fn decl_ty(s: Schema, resource_root: bool) -> Option<Ty> {
    if s.int_or_string() {
        let max = s
            .max_length()
            .map(|l| l.saturating_mul(4))
            .unwrap_or(MAX_REQUEST_SIZE - 2);
        return Some(Ty::Dyn(Some(Range::upto(max))));
    }
    match s.ty() {
        "array" => {
            let items = s.items()?;
            let elem = decl_ty(items, items.embedded())?;
            let max = s
                .max_items()
                .unwrap_or_else(|| (MAX_REQUEST_SIZE - 2) / (min_size(items) + 1));
            let assoc = match s.list_type() {
                "set" => Assoc::Set,
                "map" => Assoc::Map(s.list_map_keys().into_iter().map(String::from).collect()),
                _ => Assoc::None,
            };
            Some(Ty::List(Box::new(elem), Range::upto(max), assoc))
        }
        "object" => {
            if let Some(ap) = s.additional() {
                let key = Ty::String(Range::upto(MAX_REQUEST_SIZE - 2));
                return Some(match decl_ty(ap, ap.embedded()) {
                    Some(v) => {
                        let max = s
                            .max_properties()
                            .unwrap_or_else(|| (MAX_REQUEST_SIZE - 2) / (min_size(ap) + 6));
                        Ty::Map(Box::new(key), Box::new(v), Range::upto(max))
                    }
                    None => Ty::Map(
                        Box::new(key),
                        Box::new(Ty::dyn_unknown()),
                        Range::upto(MAX_REQUEST_SIZE),
                    ),
                });
            }
            let props = s.properties();
            if props.is_none_or(|p| p.is_empty()) && s.preserve_unknown() && !resource_root {
                // Unknown fields kept as they are: a map of anything the request can hold.
                let max = s
                    .max_properties()
                    .unwrap_or((MAX_REQUEST_SIZE - 2) / (1 + 6));
                return Some(Ty::Map(
                    Box::new(Ty::String(Range::upto(MAX_REQUEST_SIZE - 2))),
                    Box::new(Ty::Dyn(Some(Range::upto(MAX_REQUEST_SIZE - 2)))),
                    Range::upto(max),
                ));
            }
            let mut fields = BTreeMap::new();
            for (name, prop) in props.into_iter().flatten() {
                let prop = Schema(prop);
                if let (Some(t), Some(escaped)) = (decl_ty(prop, prop.embedded()), escape(name)) {
                    fields.insert(escaped, t);
                }
            }
            if resource_root {
                let any = Ty::String(Range::upto(MAX_REQUEST_SIZE - 2));
                fields.entry("apiVersion".into()).or_insert(any.clone());
                fields.entry("kind".into()).or_insert(any);
                fields.insert("metadata".into(), metadata_ty());
            }
            Some(Ty::Object(Arc::new(Fields { fields })))
        }
        "string" => Some(match s.format() {
            "byte" => Ty::Bytes(Range::upto(s.max_length().unwrap_or(MAX_REQUEST_SIZE - 2))),
            "duration" => Ty::Duration,
            "date" | "date-time" => Ty::Timestamp,
            _ => string_ty(s),
        }),
        "boolean" => Some(Ty::Bool),
        "number" => Some(Ty::Double),
        "integer" => Some(Ty::Int),
        "" if s.preserve_unknown() => Some(Ty::Dyn(Some(Range::upto(MAX_REQUEST_SIZE - 2)))),
        _ => None,
    }
}

/// Whether CEL sees values of the schema at all (what [`decl_ty`] returns `Some` for),
/// without building the type.
pub(crate) fn visible(s: Schema) -> bool {
    if s.int_or_string() {
        return true;
    }
    match s.ty() {
        "array" => s.items().is_some_and(visible),
        "object" | "string" | "boolean" | "number" | "integer" => true,
        "" => s.preserve_unknown(),
        _ => false,
    }
}

/// How values of a schema convert for CEL, worked out once per schema: the schema walked
/// with direct access instead of member lookups for every value.
#[derive(Debug)]
pub(crate) enum Shape {
    /// Not visible to CEL.
    Hidden,
    /// Any JSON, converted by its own type (int-or-string, preserved unknown fields).
    Any,
    Integer,
    Number,
    Boolean,
    Str(Format),
    Array(Arc<Shape>),
    /// An object with `additionalProperties`: a map of values of one shape.
    Map(Arc<Shape>),
    Object(Arc<ObjectShape>),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Format {
    Plain,
    Byte,
    Duration,
    Date,
    DateTime,
}

/// An object with properties: each visible property's CEL name and shape.
#[derive(Debug, Default)]
pub(crate) struct ObjectShape {
    properties: HashMap<String, (String, Arc<Shape>)>,
    /// A resource root: `apiVersion`, `kind` and `metadata.name`/`generateName` are visible.
    resource_root: bool,
}

impl ObjectShape {
    /// The shape of the declared property whose CEL name is `name` and whose JSON name is the
    /// same; None for other names, and at a resource root for the members converted specially
    /// (`metadata`, `apiVersion`, `kind`).
    pub fn declared(&self, name: &str) -> Option<&Shape> {
        if self.resource_root && matches!(name, "metadata" | "apiVersion" | "kind") {
            return None;
        }
        let (escaped, shape) = self.properties.get(name)?;
        (escaped == name).then_some(&**shape)
    }
}

impl Shape {
    /// The shape of `s` (a resource root when `resource_root`).
    pub fn of(s: Schema, resource_root: bool) -> Shape {
        if s.int_or_string() {
            return Shape::Any;
        }
        match s.ty() {
            "integer" => Shape::Integer,
            "number" => Shape::Number,
            "boolean" => Shape::Boolean,
            "string" => Shape::Str(match s.format() {
                "byte" => Format::Byte,
                "duration" => Format::Duration,
                "date" => Format::Date,
                "date-time" => Format::DateTime,
                _ => Format::Plain,
            }),
            "array" => match s.items().map(|i| Shape::of(i, i.embedded())) {
                Some(Shape::Hidden) | None => Shape::Hidden,
                Some(items) => Shape::Array(Arc::new(items)),
            },
            "object" => {
                if let Some(ap) = s.additional() {
                    return Shape::Map(Arc::new(Shape::of(ap, ap.embedded())));
                }
                let props = s.properties();
                if props.is_none_or(|p| p.is_empty()) && !resource_root {
                    return if s.preserve_unknown() {
                        Shape::Any
                    } else {
                        Shape::Object(Arc::default())
                    };
                }
                let mut properties = HashMap::new();
                for (name, prop) in props.into_iter().flatten() {
                    let prop = Schema(prop);
                    let shape = Shape::of(prop, prop.embedded());
                    if matches!(shape, Shape::Hidden) {
                        continue;
                    }
                    if let Some(escaped) = escape(name) {
                        properties.insert(name.clone(), (escaped, Arc::new(shape)));
                    }
                }
                Shape::Object(Arc::new(ObjectShape {
                    properties,
                    resource_root,
                }))
            }
            "" if s.preserve_unknown() => Shape::Any,
            _ => Shape::Hidden,
        }
    }
}

impl Shape {
    /// The shape of a property of an object shape.
    pub fn property(&self, name: &str) -> Option<Arc<Shape>> {
        match self {
            Shape::Object(o) => o.properties.get(name).map(|(_, s)| s.clone()),
            _ => None,
        }
    }

    /// The shape of a list's items or a map's values.
    pub fn element(&self) -> Option<Arc<Shape>> {
        match self {
            Shape::Array(s) | Shape::Map(s) => Some(s.clone()),
            _ => None,
        }
    }
}

type BoxVal<'v> = Box<dyn Val + 'v>;

fn str_ty(s: &str) -> Ty {
    Ty::String(Range::exact(s.chars().count() as u64))
}

/// A JSON value as CEL sees it without a schema: integers as `int` (or `uint` beyond it),
/// other numbers as `double`, objects as maps. Strings are borrowed, not copied.
pub(crate) fn any_val(v: &J) -> BoxVal<'_> {
    match v {
        J::Null => Box::new(CelNull),
        J::Bool(b) => Box::new(CelBool::from(*b)),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0)))
            }
        }
        J::String(s) => Box::new(CelString::from(s.as_str())),
        J::Array(items) => Box::new(CelList::from(items.iter().map(any_val).collect::<Vec<_>>())),
        J::Object(m) => Box::new(CelMap::from(
            m.iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), any_val(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// The runtime type of a schemaless value: its own sizes.
pub(crate) fn any_ty(v: &J) -> Ty {
    match v {
        J::Null => Ty::Null,
        J::Bool(_) => Ty::Bool,
        J::Number(n) => {
            if n.is_i64() {
                Ty::Int
            } else if n.is_u64() {
                Ty::Uint
            } else {
                Ty::Double
            }
        }
        J::String(s) => str_ty(s),
        J::Array(items) => {
            let elem = items.iter().fold(Ty::Never, |t, i| t.union(&any_ty(i)));
            Ty::list(elem, Range::exact(items.len() as u64))
        }
        J::Object(m) => {
            let (mut key, mut val) = (Ty::Never, Ty::Never);
            for (k, v) in m {
                key = key.union(&str_ty(k));
                val = val.union(&any_ty(v));
            }
            Ty::Map(Box::new(key), Box::new(val), Range::exact(m.len() as u64))
        }
    }
}

fn format_val<'v>(text: &'v str, format: Format) -> Option<BoxVal<'v>> {
    Some(match format {
        Format::Plain => return None,
        Format::Byte => Box::new(CelBytes::from(decode_base64(text)?)),
        Format::Duration => Box::new(CelDuration::from(parse_go_duration(text)?)),
        Format::DateTime => Box::new(CelTimestamp::from(
            chrono::DateTime::parse_from_rfc3339(text).ok()?,
        )),
        Format::Date => Box::new(CelTimestamp::from(
            chrono::DateTime::parse_from_rfc3339(&format!("{text}T00:00:00Z")).ok()?,
        )),
    })
}

/// The fields of an object CEL sees, with their shapes: the declared ones (not null), and at
/// a resource root `apiVersion` and `kind` whether declared or not.
fn visible_fields<'a>(
    m: &'a serde_json::Map<String, J>,
    o: &'a ObjectShape,
) -> impl Iterator<Item = (&'a str, &'a J, Option<&'a Shape>)> + 'a {
    m.iter().filter_map(move |(name, v)| {
        if v.is_null() {
            return None;
        }
        if o.resource_root && name == "metadata" {
            return Some(("metadata", v, None));
        }
        match o.properties.get(name) {
            Some((escaped, shape)) => Some((escaped.as_str(), v, Some(&**shape))),
            None if o.resource_root && (name == "apiVersion" || name == "kind") => {
                Some((name.as_str(), v, Some(&Shape::Any)))
            }
            None => None,
        }
    })
}

const METADATA_FIELDS: [&str; 2] = ["name", "generateName"];

/// `v` converted as Kubernetes does for CEL, following its shape: integers and numbers by the
/// schema's type, `byte`/`duration`/`date`/`date-time` strings as bytes, durations and
/// timestamps, objects with properties as maps keyed by the escaped names of the declared
/// properties (at a resource root also `apiVersion`, `kind` and `metadata.name` /
/// `metadata.generateName`), maps and lists element by element. Strings are borrowed.
pub(crate) fn to_val<'v>(v: &'v J, shape: &'v Shape) -> BoxVal<'v> {
    match (shape, v) {
        (_, J::Null) => Box::new(CelNull),
        (Shape::Integer, J::Number(n)) => match n.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => match n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18) {
                Some(f) => Box::new(CelInt::from(f as i64)),
                None => any_val(v),
            },
        },
        (Shape::Number, J::Number(n)) => Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0))),
        (Shape::Str(format), J::String(text)) => {
            format_val(text, *format).unwrap_or_else(|| Box::new(CelString::from(text.as_str())))
        }
        (Shape::Array(items), J::Array(list)) => Box::new(CelList::from(
            list.iter().map(|i| to_val(i, items)).collect::<Vec<_>>(),
        )),
        (Shape::Map(_) | Shape::Object(_), J::Object(_)) => {
            members_val(v, shape, |_| true).unwrap_or_else(|| any_val(v))
        }
        _ => any_val(v),
    }
}

/// [`to_val`] of an object with only the members named in `fields` (CEL names, escaped):
/// all that rules which only select those fields of it can see.
pub(crate) fn to_val_selected<'v>(v: &'v J, shape: &'v Shape, fields: &[String]) -> BoxVal<'v> {
    members_val(v, shape, |name| fields.iter().any(|f| f == name))
        .unwrap_or_else(|| to_val(v, shape))
}

/// An object converted as a map of the members `keep` names (by their CEL names); None when
/// `v` is not an object or `shape` not a map or an object.
fn members_val<'v>(v: &'v J, shape: &'v Shape, keep: impl Fn(&str) -> bool) -> Option<BoxVal<'v>> {
    let map: HashMap<_, _> = match (shape, v) {
        (Shape::Map(values), J::Object(m)) => m
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v, values)))
            .collect(),
        (Shape::Object(o), J::Object(m)) => visible_fields(m, o)
            .filter(|(name, _, _)| keep(name))
            .map(|(name, v, shape)| {
                let val = match shape {
                    Some(shape) => to_val(v, shape),
                    None => metadata_val(v),
                };
                (CelMapKey::from(name), val)
            })
            .collect(),
        _ => return None,
    };
    Some(Box::new(CelMap::from(map)))
}

fn metadata_val(v: &J) -> BoxVal<'_> {
    let mut out = HashMap::new();
    for key in METADATA_FIELDS {
        if let Some(J::String(s)) = v.get(key) {
            out.insert(
                CelMapKey::from(key),
                Box::new(CelString::from(s.as_str())) as BoxVal,
            );
        }
    }
    Box::new(CelMap::from(out))
}

/// The runtime type of `v` converted along `shape`, with its actual sizes (for the cost
/// bound of an evaluation).
pub(crate) fn to_ty(v: &J, shape: &Shape) -> Ty {
    match (shape, v) {
        (_, J::Null) => Ty::Null,
        (Shape::Integer, J::Number(n))
            if n.is_i64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) =>
        {
            Ty::Int
        }
        (Shape::Number, J::Number(_)) => Ty::Double,
        (Shape::Str(format), J::String(text)) => match format {
            Format::Plain => str_ty(text),
            Format::Byte => Ty::Bytes(Range::exact((text.len() * 3 / 4) as u64)),
            Format::Duration => Ty::Duration,
            Format::Date | Format::DateTime => Ty::Timestamp,
        },
        (Shape::Array(items), J::Array(list)) => {
            let elem = list
                .iter()
                .fold(Ty::Never, |t, i| t.union(&to_ty(i, items)));
            Ty::list(elem, Range::exact(list.len() as u64))
        }
        (Shape::Map(values), J::Object(m)) => {
            let (mut key, mut val) = (Ty::Never, Ty::Never);
            for (k, v) in m {
                key = key.union(&str_ty(k));
                val = val.union(&to_ty(v, values));
            }
            Ty::Map(Box::new(key), Box::new(val), Range::exact(m.len() as u64))
        }
        (Shape::Object(o), J::Object(m)) => {
            let mut fields = BTreeMap::new();
            for (name, v, shape) in visible_fields(m, o) {
                let t = match shape {
                    Some(shape) => to_ty(v, shape),
                    None => {
                        let mut meta = BTreeMap::new();
                        for key in METADATA_FIELDS {
                            if let Some(J::String(s)) = v.get(key) {
                                meta.insert(key.to_string(), str_ty(s));
                            }
                        }
                        Ty::Object(Arc::new(Fields { fields: meta }))
                    }
                };
                fields.insert(name.to_string(), t);
            }
            Ty::Object(Arc::new(Fields { fields }))
        }
        _ => any_ty(v),
    }
}

/// Standard base64 (with or without padding), as Go's `[]byte` JSON form.
pub(crate) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    }
    let bytes = s.trim_end_matches('=').as_bytes();
    if !s.len().is_multiple_of(4) && s.ends_with('=') {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= val(*c)? << (18 - 6 * i);
        }
        match chunk.len() {
            4 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]),
            3 => out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8]),
            2 => out.push((acc >> 16) as u8),
            _ => return None,
        }
    }
    Some(out)
}

/// A Go duration string (`300ms`, `-1.5h`, `2h45m`): a sequence of decimal numbers with units
/// `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`; `0` alone is allowed.
pub(crate) fn parse_go_duration(s: &str) -> Option<chrono::Duration> {
    let (neg, mut rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return None;
        }
        let number: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * nanos_per;
    }
    if total > i64::MAX as f64 {
        return None;
    }
    let nanos = total.round() as i64;
    Some(chrono::Duration::nanoseconds(if neg {
        -nanos
    } else {
        nanos
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn property_names_escape_as_kubernetes_does() {
        assert_eq!(escape("foo").as_deref(), Some("foo"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(
            escape("a-b.c/d").as_deref(),
            Some("a__dash__b__dot__c__slash__d")
        );
        assert_eq!(escape("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape("1a"), None);
        assert_eq!(escape("a b"), None);
        assert_eq!(escape(""), None);
    }

    #[test]
    fn declared_types_carry_kubernetes_size_assumptions() {
        let s = json!({"type": "array", "items": {"type": "string"}});
        let Some(Ty::List(elem, n, _)) = decl_ty(Schema(&s), false) else {
            panic!()
        };
        // "" plus a comma per element.
        assert_eq!(n.max, (MAX_REQUEST_SIZE - 2) / 3);
        assert_eq!(elem.size().unwrap().max, MAX_REQUEST_SIZE - 2);
        let s = json!({"type": "string", "maxLength": 10});
        assert_eq!(decl_ty(Schema(&s), false).unwrap().size().unwrap().max, 40);
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let Some(Ty::Object(f)) = decl_ty(Schema(&s), true) else {
            panic!()
        };
        assert!(f.fields.contains_key("a") && f.fields.contains_key("metadata"));
    }

    #[test]
    fn values_convert_by_schema() {
        let s = json!({"type": "object", "properties": {
            "n": {"type": "number"},
            "i": {"type": "integer"},
            "d": {"type": "string", "format": "duration"},
            "t": {"type": "string", "format": "date-time"},
            "b": {"type": "string", "format": "byte"},
            "x-y": {"type": "string"},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
        }});
        let v = json!({"n": 1, "i": 2, "d": "1h30m", "t": "2024-01-02T03:04:05Z",
            "b": "aGk=", "x-y": "z", "m": {"a-b": "c"}, "undeclared": 1});
        let shape = Shape::of(Schema(&s), false);
        let converted = cel::Value::try_from(to_val(&v, &shape).as_ref()).unwrap();
        let cel::Value::Map(m) = converted else {
            panic!()
        };
        let get = |k: &str| {
            m.map
                .get(&cel::objects::Key::String(Arc::new(k.into())))
                .cloned()
        };
        assert_eq!(get("n"), Some(cel::Value::Float(1.0)));
        assert_eq!(get("i"), Some(cel::Value::Int(2)));
        assert!(matches!(get("d"), Some(cel::Value::Duration(d)) if d.num_minutes() == 90));
        assert!(matches!(get("t"), Some(cel::Value::Timestamp(_))));
        assert_eq!(get("b"), Some(cel::Value::Bytes(Arc::new(b"hi".to_vec()))));
        assert_eq!(
            get("x__dash__y"),
            Some(cel::Value::String(Arc::new("z".into())))
        );
        assert!(get("undeclared").is_none());
        let Some(cel::Value::Map(inner)) = get("m") else {
            panic!()
        };
        assert!(inner
            .map
            .contains_key(&cel::objects::Key::String(Arc::new("a-b".into()))));
        let Ty::Object(fields) = to_ty(&v, &shape) else {
            panic!()
        };
        assert!(matches!(fields.fields["x__dash__y"], Ty::String(r) if r.max == 1));
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("1h30m").unwrap().num_seconds(), 5400);
        assert_eq!(
            parse_go_duration("-1.5s").unwrap().num_milliseconds(),
            -1500
        );
        assert_eq!(parse_go_duration("0").unwrap().num_seconds(), 0);
        assert!(parse_go_duration("1x").is_none());
        assert!(parse_go_duration("").is_none());
    }

    #[test]
    fn base64_decodes() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert!(decode_base64("a$==").is_none());
    }
}
