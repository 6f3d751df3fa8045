//! Field sets: which fields of an object a manager owns, as a trie of path elements in the model
//! of Kubernetes' structured-merge-diff, with the `FieldsV1` JSON form that
//! `metadata.managedFields` carries and the path strings conflicts are reported with.
//!
//! It also holds the schema-driven walks that produce field sets ([`fields_of`], and the
//! comparison of two versions of an object). It is not the ownership rules: those live in
//! `managed` (updates) and `apply` (server-side apply).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};
use strata_object::schema::{ListType, Node, Shape};

use crate::PatchError;

/// A JSON value ordered the way structured-merge-diff orders values: numbers first (integers
/// and floats compared numerically), then strings, booleans, lists, objects and `null`.
#[derive(Clone, Debug)]
pub struct PathValue(pub Value);

impl PartialEq for PathValue {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathValue {}

impl PartialOrd for PathValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PathValue {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_values(&self.0, &other.0)
    }
}

fn value_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (x, y) in x.iter().zip(y) {
                let c = compare_values(x, y);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|a, b| a.0.cmp(b.0));
            ys.sort_by(|a, b| a.0.cmp(b.0));
            for ((xk, xv), (yk, yv)) in xs.iter().zip(&ys) {
                let c = xk.cmp(yk).then_with(|| compare_values(xv, yv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => value_rank(a).cmp(&value_rank(b)),
    }
}

/// One step of a path into an object. The variant order is the order of `FieldsV1` keys.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElement {
    /// A struct field or a map key: `f:<name>`, shown as `.name`.
    Field(String),
    /// An element of a map-typed list, by the values of its key fields sorted by field name:
    /// `k:{"name":"s1"}`, shown as `[name="s1"]`.
    Key(Vec<(String, PathValue)>),
    /// An element of a set-typed list, by its value: `v:"x"`, shown as `[="x"]`.
    Value(PathValue),
    /// An element of a list by position: `i:3`, shown as `[3]`.
    Index(usize),
}

impl PathElement {
    /// The element as a `FieldsV1` key (`f:name`, `k:{...}`, `v:...`, `i:n`).
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => field_key(name),
            PathElement::Key(fields) => {
                let room = fields
                    .iter()
                    .map(|(name, value)| name.len() + 4 + json_len_hint(&value.0))
                    .sum::<usize>();
                let mut out = String::with_capacity(4 + room);
                out.push_str("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_go_json_string(&mut out, name);
                    out.push(':');
                    write_go_json(&mut out, &value.0);
                }
                out.push('}');
                out
            }
            PathElement::Value(value) => {
                let mut out = String::from("v:");
                write_go_json(&mut out, &value.0);
                out
            }
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `FieldsV1` key. `Ok(None)` is a key of an element kind this version does not
    /// know, which structured-merge-diff skips rather than rejects.
    pub fn from_fields_v1_key(key: &str) -> Result<Option<PathElement>, String> {
        let (kind, rest) = match key.as_bytes() {
            [kind, b':', ..] => (*kind, &key[2..]),
            [_, _, ..] => return Err(format!("key {key:?} has no colon after its type")),
            _ => return Err(format!("key {key:?} must be at least 2 characters long")),
        };
        match kind {
            b'f' => Ok(Some(PathElement::Field(rest.to_string()))),
            b'v' => serde_json::from_str(rest)
                .map(|v| Some(PathElement::Value(PathValue(v))))
                .map_err(|e| format!("key {key:?} holds invalid JSON: {e}")),
            b'i' => rest
                .parse()
                .map(|i| Some(PathElement::Index(i)))
                .map_err(|_| format!("key {key:?} holds an invalid index")),
            b'k' => match serde_json::from_str(rest) {
                Ok(Value::Object(m)) if !m.is_empty() => {
                    let mut fields: Vec<_> =
                        m.into_iter().map(|(k, v)| (k, PathValue(v))).collect();
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(Some(PathElement::Key(fields)))
                }
                Ok(_) => Err(format!("key {key:?} must hold a non-empty JSON object")),
                Err(e) => Err(format!("key {key:?} holds invalid JSON: {e}")),
            },
            _ => Ok(None),
        }
    }
}

/// About how long `v` is as JSON, to size a key written with it: exact for the scalars
/// without escapes that keys mostly hold.
fn json_len_hint(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        Value::Number(_) => 20,
        Value::Bool(_) | Value::Null => 5,
        Value::Array(_) | Value::Object(_) => 32,
    }
}

/// The `FieldsV1` key of a field: `f:<name>`.
fn field_key(name: &str) -> String {
    let mut out = String::with_capacity(2 + name.len());
    out.push_str("f:");
    out.push_str(name);
    out
}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={}", display_value(&value.0))?;
                }
                f.write_str("]")
            }
            PathElement::Value(value) => write!(f, "[={}]", display_value(&value.0)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the root of an object, displayed the way structured-merge-diff prints paths in
/// conflict messages: `.metadata.labels.app`, `.secrets[name="s1"]`,
/// `.metadata.finalizers[="x"]`, `.items[3]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// A path of field names only, e.g. `Path::fields(&["metadata", "labels", "app"])`.
    pub fn fields(names: &[&str]) -> Path {
        Path(
            names
                .iter()
                .map(|n| PathElement::Field((*n).to_string()))
                .collect(),
        )
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|pe| write!(f, "{pe}"))
    }
}

/// A set of paths, stored as a trie: at each node the elements that are members (owned
/// themselves) and the elements that have owned paths below them. A node may be both, which
/// `FieldsV1` writes as `".":{}` inside the child. Children are never empty.
///
/// ```
/// use strata_patch::serde_json::json;
/// use strata_patch::{FieldSet, Path};
///
/// let mut set = FieldSet::new();
/// set.insert(&Path::fields(&["metadata", "labels", "app"]).0);
/// set.insert(&Path::fields(&["data", "mode"]).0);
/// assert!(set.contains(&Path::fields(&["data", "mode"]).0));
/// assert_eq!(set.len(), 2);
///
/// let v1 = set.to_fields_v1();
/// assert_eq!(v1, json!({"f:data": {"f:mode": {}}, "f:metadata": {"f:labels": {"f:app": {}}}}));
/// assert_eq!(FieldSet::from_fields_v1(&v1).unwrap(), set);
/// let paths: Vec<String> = set.paths().iter().map(ToString::to_string).collect();
/// assert_eq!(paths, [".data.mode", ".metadata.labels.app"]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Whether the set holds no path at all.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path` as a member. The empty path (the object itself) is never a member.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.contains(rest)),
        }
    }

    /// The paths below `pe`, relative to it.
    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    /// The elements that are members at this level.
    pub fn members(&self) -> impl Iterator<Item = &PathElement> {
        self.members.iter()
    }

    /// The elements with members below them, with their subsets.
    pub fn children(&self) -> impl Iterator<Item = (&PathElement, &FieldSet)> {
        self.children.iter()
    }

    /// Every path in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.extend(other);
        out
    }

    /// Adds the paths of `other` to `self` in place: [`FieldSet::union`] without copying
    /// `self`.
    pub fn extend(&mut self, other: &FieldSet) {
        self.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.extend(child),
                None => {
                    self.children.insert(pe.clone(), child.clone());
                }
            }
        }
    }

    /// The paths of `self` that are not in `other`. A member of `other` removes only that
    /// path, not the paths below it (see [`FieldSet::recursive_difference`]).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        FieldSet { members, children }
    }

    /// Takes the paths of `other` out of `self`, as [`FieldSet::difference`] does, in place.
    pub fn subtract(&mut self, other: &FieldSet) {
        self.members.retain(|pe| !other.members.contains(pe));
        for (pe, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                mine.subtract(theirs);
                if mine.is_empty() {
                    self.children.remove(pe);
                }
            }
        }
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        FieldSet { members, children }
    }

    /// The paths of `self` that are neither in `other` nor below a member of `other`.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let rest = match other.children.get(pe) {
                Some(theirs) => child.recursive_difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        FieldSet { members, children }
    }

    /// The member paths: at each level the members first, then the paths below each child, in
    /// element order (the order structured-merge-diff iterates and reports conflicts in).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for pe in &self.members {
            let mut p = prefix.clone();
            p.push(pe.clone());
            out.push(Path(p));
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The set with every declared struct field that has members below it made a member too
    /// (structured-merge-diff's `EnsureNamedFieldsAreMembers`): owning `metadata.labels.a`
    /// then also means owning `metadata` and `metadata.labels`, but not the map entries of a
    /// map. Pruning uses it so that a struct goes when nothing in it is owned any more.
    pub(crate) fn with_named_fields_as_members(&self, node: Option<Node>) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.clone(),
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            if let (PathElement::Field(name), Some(n)) = (pe, node) {
                if n.shape() == Shape::Struct && n.property(name).is_some() {
                    out.members.insert(pe.clone());
                }
            }
            let sub = child.with_named_fields_as_members(descend(node, pe));
            out.children.insert(pe.clone(), sub);
        }
        out
    }

    /// How many member paths the set holds.
    pub fn len(&self) -> usize {
        self.members.len() + self.children.values().map(FieldSet::len).sum::<usize>()
    }

    /// The `FieldsV1` form: one key per element in element order; a member without children is
    /// `{}`, a member with children also carries `".":{}` (written first).
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit(false))
    }

    fn emit(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::with_capacity(
            usize::from(include_self) + self.members.len() + self.children.len(),
        );
        if include_self && !self.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        // Members and children in one sorted pass (both are sorted; a path may be both).
        let mut members = self.members.iter().peekable();
        let mut children = self.children.iter().peekable();
        loop {
            let (pe, value) = match (members.peek(), children.peek()) {
                (None, None) => break,
                (Some(m), Some((c, child))) if m == c => {
                    let value = Value::Object(child.emit(true));
                    members.next();
                    children.next().map(|(c, _)| (c, value)).expect("peeked")
                }
                (Some(m), Some((c, _))) if m > c => {
                    let (c, child) = children.next().expect("peeked");
                    (c, Value::Object(child.emit(false)))
                }
                (Some(_), _) => (members.next().expect("peeked"), Value::Object(Map::new())),
                (None, Some(_)) => {
                    let (c, child) = children.next().expect("peeked");
                    (c, Value::Object(child.emit(false)))
                }
            };
            out.insert(pe.to_fields_v1_key(), value);
        }
        out
    }

    /// Reads the `FieldsV1` form. Keys of unknown element kinds are skipped, as Kubernetes
    /// does; malformed keys and non-object values are errors.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, PatchError> {
        match value {
            Value::Object(map) => read_fields_v1(map)
                .map(|(set, _)| set)
                .map_err(PatchError::Malformed),
            Value::Null => Ok(FieldSet::new()),
            _ => Err(PatchError::Malformed(
                "fieldsV1 must be a JSON object".into(),
            )),
        }
    }
}

/// [`FieldSet::intersection`] of `set` with the set the `FieldsV1` object `map` stands for,
/// read along `set`'s paths instead of parsing all of `map`: an entry of one of many managers is
/// mostly checked against the few fields a write changes. `None` when that cannot be read so:
/// `set` holds an element other than a field (whose key could be spelled more than one way), or
/// `map` is malformed on the way. Then parse it.
pub(crate) fn fields_v1_intersection(map: &Map<String, Value>, set: &FieldSet) -> Option<FieldSet> {
    let mut out = FieldSet::new();
    let mut key = String::new();
    let mut inner_of = |pe: &PathElement| -> Option<Option<&Map<String, Value>>> {
        let PathElement::Field(name) = pe else {
            return None;
        };
        key.clear();
        key.push_str("f:");
        key.push_str(name);
        match map.get(&key) {
            None => Some(None),
            Some(Value::Object(inner)) => Some(Some(inner)),
            Some(_) => None,
        }
    };
    for pe in &set.members {
        if let Some(inner) = inner_of(pe)? {
            if fields_v1_is_member(inner)? {
                out.members.insert(pe.clone());
            }
        }
    }
    for (pe, below) in &set.children {
        if let Some(inner) = inner_of(pe)? {
            let both = fields_v1_intersection(inner, below)?;
            if !both.is_empty() {
                out.children.insert(pe.clone(), both);
            }
        }
    }
    Some(out)
}

/// Whether the node whose `FieldsV1` object is `map` is itself a member, as
/// [`read_fields_v1`] decides: it says so (`"."`), or nothing of a known kind is below it.
/// `None` for a malformed key.
fn fields_v1_is_member(map: &Map<String, Value>) -> Option<bool> {
    if map.contains_key(".") {
        return Some(true);
    }
    Some(!fields_v1_has_elements(map)?)
}

/// Whether a `FieldsV1` object has keys of element kinds this version reads (`f:`, `v:`, `i:`,
/// `k:`); `None` for a malformed key.
fn fields_v1_has_elements(map: &Map<String, Value>) -> Option<bool> {
    let mut found = false;
    for key in map.keys().filter(|k| *k != ".") {
        match key.as_bytes() {
            [b'f' | b'v' | b'i' | b'k', b':', ..] => found = true,
            [_, b':', ..] => {}
            _ => return None,
        }
    }
    Some(found)
}

/// Whether a `fieldsV1` member (absent is none) stands for the empty set, told without parsing
/// it; a malformed one counts as not empty.
pub(crate) fn fields_v1_is_empty(fields_v1: Option<&Value>) -> bool {
    match fields_v1 {
        None | Some(Value::Null) => true,
        Some(Value::Object(map)) => fields_v1_has_elements(map) == Some(false),
        Some(_) => false,
    }
}

/// Reads one `FieldsV1` object: the set below it and whether the node itself is a member.
fn read_fields_v1(map: &Map<String, Value>) -> Result<(FieldSet, bool), String> {
    let mut set = FieldSet::new();
    let mut member = false;
    for (key, value) in map {
        if key == "." {
            member = true;
            continue;
        }
        let Some(pe) = PathElement::from_fields_v1_key(key)? else {
            continue;
        };
        let Value::Object(inner) = value else {
            return Err(format!("the value of key {key:?} must be a JSON object"));
        };
        let (child, child_member) = read_fields_v1(inner)?;
        if child_member {
            set.members.insert(pe.clone());
        }
        if !child.is_empty() {
            set.children.insert(pe, child);
        }
    }
    // A node with nothing below it is a member (`{}`).
    if set.is_empty() {
        member = true;
    }
    Ok((set, member))
}

/// A value as structured-merge-diff prints it inside a path: strings quoted Go-style, other
/// scalars bare.
fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => strata_object::go::quote(s),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => {
            let mut out = String::new();
            write_go_json(&mut out, other);
            out
        }
    }
}

/// Compact JSON as Go's encoder writes it (it escapes `<`, `>`, `&`, U+2028 and U+2029).
fn write_go_json(out: &mut String, v: &Value) {
    match v {
        Value::String(s) => write_go_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<_> = map.iter().collect();
            keys.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, k);
                out.push(':');
                write_go_json(out, v);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// How the value at a schema position is tracked.
pub(crate) enum Track<'a> {
    /// Owned and replaced whole: scalars, atomic lists and maps, free-form values, and fields
    /// the schema does not declare.
    Leaf,
    /// A struct, or a map that is not atomic: each key is tracked on its own.
    Fields(Node<'a>),
    /// A `set` list: each element is tracked by its value (`v:`).
    Set,
    /// A `map` list: each element is tracked by its key fields (`k:`) and recursed into.
    Keyed(&'a [String], Option<Node<'a>>),
}

impl<'a> Track<'a> {
    pub(crate) fn of(node: Option<Node<'a>>) -> Track<'a> {
        let Some(node) = node else {
            return Track::Leaf;
        };
        match node.shape() {
            Shape::Struct | Shape::Map if !node.atomic_map() => Track::Fields(node),
            Shape::Array => match node.list_type() {
                ListType::Atomic => Track::Leaf,
                ListType::Set => Track::Set,
                ListType::Map(keys) if keys.is_empty() => Track::Leaf,
                ListType::Map(keys) => Track::Keyed(keys, node.items()),
            },
            _ => Track::Leaf,
        }
    }

    /// Whether `value` has the JSON type this track recurses into.
    pub(crate) fn fits(&self, value: &Value) -> bool {
        match self {
            Track::Leaf => false,
            Track::Fields(_) => value.is_object(),
            Track::Set | Track::Keyed(..) => value.is_array(),
        }
    }

    /// The element naming a list item, if the item can be named.
    pub(crate) fn element_of(&self, item: &Value) -> Option<PathElement> {
        match self {
            Track::Set => Some(PathElement::Value(PathValue(item.clone()))),
            Track::Keyed(keys, _) => {
                let obj = item.as_object()?;
                let mut fields = Vec::with_capacity(keys.len());
                for k in keys.iter() {
                    let v = obj.get(k).filter(|v| !v.is_null())?;
                    fields.push((k.clone(), PathValue(v.clone())));
                }
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Some(PathElement::Key(fields))
            }
            _ => None,
        }
    }

    /// The schema of a list's items.
    pub(crate) fn item_node(&self) -> Option<Node<'a>> {
        match self {
            Track::Keyed(_, items) => *items,
            _ => None,
        }
    }
}

/// The schema below `node` along `pe`.
pub(crate) fn descend<'a>(node: Option<Node<'a>>, pe: &PathElement) -> Option<Node<'a>> {
    let node = node?;
    match pe {
        PathElement::Field(name) => node.child(name),
        _ => node.items(),
    }
}

/// The items of a granular list, each named by its element; items that cannot be named and
/// repeated names are left out (the first occurrence wins).
pub(crate) fn index_items<'v>(
    track: &Track<'_>,
    items: &'v [Value],
) -> Vec<(PathElement, &'v Value)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if let Some(pe) = track.element_of(item) {
            if seen.insert(pe.clone()) {
                out.push((pe, item));
            }
        }
    }
    out
}

/// Every field `value` sets according to `schema`, with nothing excluded (structured-merge-
/// diff's `ToFieldSet`): scalars and atomic values are members; struct fields and map entries
/// recurse, and a map entry (not a declared struct field), a `null` or an empty object is also
/// a member itself; each element of a `set` list is a `v:` member; each element of a `map`
/// list is a `k:` member that also recurses into the element.
pub(crate) fn raw_fields(value: &Value, schema: Node) -> FieldSet {
    let mut out = FieldSet::new();
    collect_fields(value, Some(schema), &mut Vec::new(), &mut out);
    out
}

fn collect_fields(
    value: &Value,
    node: Option<Node>,
    path: &mut Vec<PathElement>,
    out: &mut FieldSet,
) {
    let track = Track::of(node);
    if !track.fits(value) {
        out.insert(path);
        return;
    }
    match (&track, value) {
        (Track::Fields(n), Value::Object(map)) => {
            for (key, v) in map {
                let declared = n.shape() == Shape::Struct && n.property(key).is_some();
                path.push(PathElement::Field(key.clone()));
                collect_fields(v, n.child(key), path, out);
                let empty_object = v.as_object().is_some_and(Map::is_empty);
                if v.is_null() || empty_object || !declared {
                    out.insert(path);
                }
                path.pop();
            }
        }
        (Track::Set | Track::Keyed(..), Value::Array(items)) => {
            for item in items {
                let Some(pe) = track.element_of(item) else {
                    continue;
                };
                path.push(pe);
                if let Track::Keyed(..) = track {
                    collect_fields(item, track.item_node(), path, out);
                }
                out.insert(path);
                path.pop();
            }
        }
        _ => out.insert(path),
    }
}

/// The fields Kubernetes never records in managedFields (its "strip set"): the type, the
/// object's identity and the system-maintained metadata. Removed with
/// [`FieldSet::difference`], so only these exact paths go (not, say, `metadata.labels`).
pub(crate) fn system_fields() -> &'static FieldSet {
    static SET: std::sync::OnceLock<FieldSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let mut set = FieldSet::new();
        for p in [
            &["apiVersion"][..],
            &["kind"],
            &["metadata"],
            &["metadata", "name"],
            &["metadata", "namespace"],
            &["metadata", "creationTimestamp"],
            &["metadata", "selfLink"],
            &["metadata", "uid"],
            &["metadata", "clusterName"],
            &["metadata", "generation"],
            &["metadata", "managedFields"],
            &["metadata", "resourceVersion"],
        ] {
            set.insert(&Path::fields(p).0);
        }
        set
    })
}

/// The fields a write through `subresource` cannot change (the strategy resets them), which
/// no manager owns through it: `status` for the main resource of a type that declares one,
/// `spec` for its `status` subresource. Removed with [`FieldSet::recursive_difference`].
pub(crate) fn reset_fields(schema: Node, subresource: Option<&str>) -> FieldSet {
    let field = match subresource {
        Some("status") => "spec",
        _ => "status",
    };
    let mut set = FieldSet::new();
    if schema.property(field).is_some() {
        set.insert(&[PathElement::Field(field.into())]);
    }
    set
}

/// The set of fields `obj` sets, as the managedFields entry of an apply records it.
///
/// Per `schema`: scalars, atomic lists and atomic maps, free-form values and undeclared fields
/// are members (leaves); struct fields and map entries recurse, and a map entry, a `null` or an
/// empty object is also a member itself; each element of a `set` list is a `v:` member; each
/// element of a `map` list is a `k:` member that also recurses into the element. Left out:
/// the fields Kubernetes never records (`apiVersion`, `kind`, `metadata` itself,
/// `metadata.name`, `metadata.namespace`, `metadata.uid`, `metadata.resourceVersion`,
/// `metadata.generation`, `metadata.creationTimestamp`, `metadata.selfLink`,
/// `metadata.managedFields`) and `status` when the type declares one (the main resource's
/// strategy resets it).
///
/// Structs and maps with fields below them are not members themselves, as in Kubernetes' apply
/// entries (`{"f:metadata":{"f:labels":{"f:app":{}}}}`), while elements of `map` lists are
/// (`"k:{\"name\":\"a\"}":{".":{},"f:name":{}}` when the element is not atomic). The
/// `".":{}` marks on structs and maps in Update entries come from comparing two versions
/// instead (see `managed::record_update`).
pub fn fields_of(obj: &Value, schema: Node) -> FieldSet {
    raw_fields(obj, schema)
        .difference(system_fields())
        .recursive_difference(&reset_fields(schema, None))
}

/// What changed between two versions of an object, as field sets.
#[derive(Clone, Debug, Default)]
pub(crate) struct Comparison {
    /// Fields present only in the new version; a struct, map or list that appears as a whole
    /// is a member too.
    pub added: FieldSet,
    /// Leaves present in both versions with different values.
    pub modified: FieldSet,
    /// Fields present only in the old version; a struct, map or list that disappears as a
    /// whole is a member too.
    pub removed: FieldSet,
}

impl Comparison {
    /// Leaves out `fields` and everything below them.
    pub(crate) fn excluding(self, fields: &FieldSet) -> Comparison {
        Comparison {
            added: self.added.recursive_difference(fields),
            modified: self.modified.recursive_difference(fields),
            removed: self.removed.recursive_difference(fields),
        }
    }
}

/// Compares two versions of an object per `schema`, on their typed forms (see [`typed_view`]).
pub(crate) fn compare(old: &Value, new: &Value, schema: Node) -> Comparison {
    compare_views(&typed_view(old, schema), &typed_view(new, schema), schema)
}

/// [`compare`] of two versions already in their typed forms.
pub(crate) fn compare_views(old: &Value, new: &Value, schema: Node) -> Comparison {
    let mut c = Comparison::default();
    compare_at(Some(old), Some(new), Some(schema), &mut Vec::new(), &mut c);
    c
}

/// What a create adds: the `added` set of [`compare`] between nothing and `new`, without the
/// fields the main resource resets (`status`), computed in one walk of `new` that applies
/// [`tidy`]'s rules as it goes instead of building typed views of both versions. `None` when
/// the root of the schema does not track its fields one by one (a free-form root), for which
/// only the general comparison applies.
pub(crate) fn added_by_create(new: &Value, schema: Node) -> Option<FieldSet> {
    let mut out = FieldSet::new();
    let tracked = each_root_field(new, schema, |key, node, field| {
        let pe = PathElement::Field(key.to_string());
        match field {
            RootField::Skeleton(m) => out.add_below(pe, added_fields(m, node, skip_of(key))),
            RootField::Metadata(m) => {
                out.add_below(pe.clone(), added_fields(m, node, skip_of(key)));
                out.members.insert(pe);
            }
            RootField::Value(v) => out.add_value(pe, v, node),
        }
    });
    tracked.then_some(out)
}

/// How a create counts one top-level field of the object.
enum RootField<'v> {
    /// A `metadata`, `spec` or `status` struct of the schema: always present in the typed view
    /// (see [`typed_view`]), so never added itself, only what it holds.
    Skeleton(&'v Map<String, Value>),
    /// A `metadata` object tracked field by field though not a struct of the schema: added
    /// itself, with what it holds but its `managedFields`.
    Metadata(&'v Map<String, Value>),
    /// Any other value [`tidy`] keeps: added itself, with what it holds.
    Value(&'v Value),
}

/// Calls `f` with each top-level field of `new` a create adds, as [`tidy`] sees them, leaving
/// out `status` when the type declares one (the main resource resets it). `false` when the
/// root of the schema does not track its fields one by one (a free-form root).
fn each_root_field<'v, 'a>(
    new: &'v Value,
    schema: Node<'a>,
    mut f: impl FnMut(&'v str, Option<Node<'a>>, RootField<'v>),
) -> bool {
    let Track::Fields(root) = Track::of(Some(schema)) else {
        return false;
    };
    let Some(map) = new.as_object() else {
        return true;
    };
    let reset = schema.property("status").is_some().then_some("status");
    for (key, child) in map {
        if Some(key.as_str()) == reset {
            continue;
        }
        let node = root.child(key);
        let skeleton = matches!(key.as_str(), "metadata" | "spec" | "status")
            && schema
                .property(key)
                .is_some_and(|p| p.shape() == Shape::Struct);
        let field = match child {
            Value::Object(m) if skeleton => RootField::Skeleton(m),
            _ if tidies_away(child, node) => continue,
            Value::Object(m)
                if key == "metadata" && matches!(Track::of(node), Track::Fields(_)) =>
            {
                RootField::Metadata(m)
            }
            _ => RootField::Value(child),
        };
        f(key, node, field);
    }
    true
}

/// The field of a top-level object a create never records: `metadata.managedFields`.
fn skip_of(key: &str) -> Option<&'static str> {
    (key == "metadata").then_some("managedFields")
}

impl FieldSet {
    /// Puts `below` under `pe`, when it holds anything.
    fn add_below(&mut self, pe: PathElement, below: FieldSet) {
        if !below.is_empty() {
            self.children.insert(pe, below);
        }
    }

    /// Adds `value` (one [`tidy`] keeps) as member `pe`, with what it holds when it is tracked
    /// field by field or item by item.
    fn add_value(&mut self, pe: PathElement, value: &Value, node: Option<Node>) {
        let track = Track::of(node);
        if track.fits(value) {
            let below = match (&track, value) {
                (Track::Fields(n), Value::Object(m)) => added_fields(m, Some(*n), None),
                (Track::Set, Value::Array(items)) => {
                    let tidied: Vec<Value> = items
                        .iter()
                        .map(|i| tidy(i, node.and_then(|n| n.items())).unwrap_or(Value::Null))
                        .collect();
                    let mut below = FieldSet::new();
                    below
                        .members
                        .extend(index_items(&track, &tidied).into_iter().map(|(pe, _)| pe));
                    below
                }
                (Track::Keyed(keys, item_node), Value::Array(items)) => {
                    let mut below = FieldSet::new();
                    for item in items {
                        let Some(key) = tidied_key(item, keys, *item_node) else {
                            continue;
                        };
                        if !below.members.contains(&key) {
                            below.add_value(key, item, *item_node);
                        }
                    }
                    below
                }
                _ => FieldSet::new(),
            };
            self.add_below(pe.clone(), below);
        }
        self.members.insert(pe);
    }
}

/// What a create's manager takes when nobody else owns anything: [`added_by_create`] without
/// the [`system_fields`], written straight in the `FieldsV1` form
/// (`added_by_create(..).difference(system_fields()).to_fields_v1()`) in one walk of `new`,
/// without building the set in between. `None` where [`added_by_create`] gives `None`.
pub(crate) fn created_fields_v1(new: &Value, schema: Node) -> Option<Map<String, Value>> {
    let mut out = Fields::new(new.as_object().map_or(0, Map::len), false);
    let tracked = each_root_field(new, schema, |key, node, field| {
        let is_meta = key == "metadata";
        // `apiVersion`, `kind` and `metadata` are system fields: never members themselves.
        let member = !(matches!(key, "apiVersion" | "kind") || is_meta);
        let (member, below) = match field {
            RootField::Skeleton(m) => (
                false,
                fields_v1_of_map(m, node, skip_of(key), is_meta, false),
            ),
            RootField::Metadata(m) => (
                member,
                fields_v1_of_map(m, node, skip_of(key), is_meta, member),
            ),
            RootField::Value(v) => (member, fields_v1_below(v, node, member)),
        };
        out.push(key, member, below);
    });
    tracked.then(|| out.finish())
}

/// The names of `metadata` that are system fields (see [`system_fields`]).
fn is_system_metadata(name: &str) -> bool {
    matches!(
        name,
        "name"
            | "namespace"
            | "creationTimestamp"
            | "selfLink"
            | "uid"
            | "clusterName"
            | "generation"
            | "managedFields"
            | "resourceVersion"
    )
}

/// One level of `FieldsV1` keyed by field names (`f:<name>`), written straight into its map.
/// The names of a JSON object are distinct, and they come in the object's order, which is
/// often sorted already (Go clients write maps sorted): the map is sorted at the end only when
/// it is not.
struct Fields {
    out: Map<String, Value>,
    with_self: bool,
}

impl Fields {
    /// A level for up to `n` names; `with_self` when it belongs to a member, so that it starts
    /// with `"."` if it holds anything.
    fn new(n: usize, with_self: bool) -> Self {
        let mut out = Map::with_capacity(n + usize::from(with_self));
        if with_self {
            // In place first, where it sorts too; taken out again if no name follows.
            out.insert(".".into(), Value::Object(Map::new()));
        }
        Fields { out, with_self }
    }

    /// Adds the field `name`: `member` when the path itself is owned, `below` its `FieldsV1`
    /// value. A field that is neither is left out.
    fn push(&mut self, name: &str, member: bool, below: Map<String, Value>) {
        if member || !below.is_empty() {
            self.out.insert(field_key(name), Value::Object(below));
        }
    }

    fn finish(mut self) -> Map<String, Value> {
        if self.with_self && self.out.len() == 1 {
            return Map::new();
        }
        // `"."` sorts before every `f:` key.
        if !self.out.keys().is_sorted() {
            self.out.sort_keys();
        }
        self.out
    }
}

/// One level of `FieldsV1` keyed by list elements (`k:`, `v:`): its entries in the order
/// found, sorted at the end; of repeated items only the first counts, as in
/// [`added_by_create`].
struct Level {
    entries: Vec<(PathElement, Map<String, Value>)>,
}

impl Level {
    fn with_capacity(n: usize) -> Self {
        Level {
            entries: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, key: PathElement, below: Map<String, Value>) {
        self.entries.push((key, below));
    }

    /// The level's `FieldsV1` object, starting with `"."` when `with_self` (the level belongs to
    /// a member) and it holds anything.
    fn finish(mut self, with_self: bool) -> Map<String, Value> {
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
        // The sort is stable: of equal keys (repeated list items), the first found stays.
        self.entries.dedup_by(|later, first| later.0 == first.0);
        let with_self = with_self && !self.entries.is_empty();
        let mut out = Map::with_capacity(self.entries.len() + usize::from(with_self));
        if with_self {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for (key, below) in self.entries {
            out.insert(key.to_fields_v1_key(), Value::Object(below));
        }
        out
    }
}

/// [`added_fields`] written as `FieldsV1` (with `"."` first when `with_self`, see
/// [`Fields::new`]); under `metadata` (`system`) the system fields are not members.
fn fields_v1_of_map(
    map: &Map<String, Value>,
    node: Option<Node>,
    skip: Option<&str>,
    system: bool,
    with_self: bool,
) -> Map<String, Value> {
    if map.is_empty() {
        return Map::new();
    }
    let mut level = Fields::new(map.len(), with_self);
    for (key, child) in map {
        let child_node = node.and_then(|n| n.child(key));
        if Some(key.as_str()) == skip || tidies_away(child, child_node) {
            continue;
        }
        let member = !(system && is_system_metadata(key));
        level.push(key, member, fields_v1_below(child, child_node, member));
    }
    level.finish()
}

/// What [`FieldSet::add_value`] puts below its member, written as `FieldsV1` (with `"."`
/// first when `with_self` and there is anything below).
fn fields_v1_below(value: &Value, node: Option<Node>, with_self: bool) -> Map<String, Value> {
    let track = Track::of(node);
    if !track.fits(value) {
        return Map::new();
    }
    match (&track, value) {
        (Track::Fields(n), Value::Object(m)) => {
            fields_v1_of_map(m, Some(*n), None, false, with_self)
        }
        (Track::Set, Value::Array(items)) => {
            let item_node = node.and_then(|n| n.items());
            let mut level = Level::with_capacity(items.len());
            for item in items {
                let tidied = tidy(item, item_node).unwrap_or(Value::Null);
                level.push(PathElement::Value(PathValue(tidied)), Map::new());
            }
            level.finish(with_self)
        }
        (Track::Keyed(keys, item_node), Value::Array(items)) => {
            let mut level = Level::with_capacity(items.len());
            for item in items {
                let Some(key) = tidied_key(item, keys, *item_node) else {
                    continue;
                };
                let below = fields_v1_below(item, *item_node, true);
                level.push(key, below);
            }
            level.finish(with_self)
        }
        _ => Map::new(),
    }
}

/// The fields of an object tracked field by field, leaving out those [`tidy`] drops and the
/// one named `skip`.
fn added_fields(map: &Map<String, Value>, node: Option<Node>, skip: Option<&str>) -> FieldSet {
    let mut out = FieldSet::new();
    for (key, child) in map {
        let child_node = node.and_then(|n| n.child(key));
        if Some(key.as_str()) == skip || tidies_away(child, child_node) {
            continue;
        }
        out.add_value(PathElement::Field(key.clone()), child, child_node);
    }
    out
}

/// Whether [`tidy`] leaves nothing of `value`.
fn tidies_away(value: &Value, node: Option<Node>) -> bool {
    let shape = node.map(|n| n.shape());
    match value {
        Value::Null => true,
        _ if shape == Some(Shape::Any) => false,
        Value::Object(map) => {
            shape == Some(Shape::Map)
                && map
                    .iter()
                    .all(|(k, v)| tidies_away(v, node.and_then(|n| n.child(k))))
        }
        Value::Array(items) => items.is_empty() && shape == Some(Shape::Array),
        _ => false,
    }
}

/// The `k:` element naming a `map` list item, read from the item as [`tidy`] would leave it.
fn tidied_key(item: &Value, keys: &[String], item_node: Option<Node>) -> Option<PathElement> {
    let obj = item.as_object()?;
    let mut fields = Vec::with_capacity(keys.len());
    for k in keys {
        let v = tidy(obj.get(k)?, item_node.and_then(|n| n.child(k)))?;
        fields.push((k.clone(), PathValue(v)));
    }
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    Some(PathElement::Key(fields))
}

fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

fn compare_at(
    old: Option<&Value>,
    new: Option<&Value>,
    node: Option<Node>,
    path: &mut Vec<PathElement>,
    c: &mut Comparison,
) {
    let track = Track::of(node);
    let fits = |v: Option<&Value>| v.is_none_or(|v| track.fits(v));
    let both_empty = is_empty_container(old) && is_empty_container(new);
    if matches!(track, Track::Leaf) || !fits(old) || !fits(new) || both_empty {
        match (old, new) {
            (None, Some(_)) => c.added.insert(path),
            (Some(_), None) => c.removed.insert(path),
            (Some(a), Some(b)) if a != b => c.modified.insert(path),
            _ => {}
        }
        return;
    }
    match &track {
        Track::Fields(n) => {
            let empty = Map::new();
            let om = old.and_then(Value::as_object).unwrap_or(&empty);
            let nm = new.and_then(Value::as_object).unwrap_or(&empty);
            let keys = om.keys().chain(nm.keys().filter(|k| !om.contains_key(*k)));
            for key in keys {
                path.push(PathElement::Field(key.clone()));
                compare_at(om.get(key), nm.get(key), n.child(key), path, c);
                path.pop();
            }
        }
        Track::Set | Track::Keyed(..) => {
            let none: &[Value] = &[];
            let oi = index_items(&track, old.and_then(Value::as_array).map_or(none, |v| v));
            let ni = index_items(&track, new.and_then(Value::as_array).map_or(none, |v| v));
            let mut seen = BTreeSet::new();
            for (pe, _) in oi.iter().chain(ni.iter()) {
                if !seen.insert(pe.clone()) {
                    continue;
                }
                path.push(pe.clone());
                compare_at(
                    find_item(&oi, pe),
                    find_item(&ni, pe),
                    track.item_node(),
                    path,
                    c,
                );
                path.pop();
            }
        }
        Track::Leaf => {}
    }
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        _ => {}
    }
}

fn find_item<'v>(items: &[(PathElement, &'v Value)], pe: &PathElement) -> Option<&'v Value> {
    items.iter().find(|(p, _)| p == pe).map(|(_, v)| *v)
}

/// `value` the way Kubernetes sees it after decoding into its Go types: `null` members, empty
/// lists and empty maps are absent (`omitempty`; every list and map of the built-in types is).
/// Empty structs stay. Free-form values are kept as they are. `None` when nothing is left.
pub(crate) fn tidy(value: &Value, node: Option<Node>) -> Option<Value> {
    let shape = node.map(|n| n.shape());
    match value {
        Value::Null => None,
        _ if shape == Some(Shape::Any) => Some(value.clone()),
        Value::Object(map) => {
            let out = tidy_members(map, node, None);
            if out.is_empty() && shape == Some(Shape::Map) {
                return None;
            }
            Some(Value::Object(out))
        }
        Value::Array(items) => {
            if items.is_empty() && shape == Some(Shape::Array) {
                return None;
            }
            let item_node = node.and_then(|n| n.items());
            Some(Value::Array(
                items
                    .iter()
                    .map(|i| tidy(i, item_node).unwrap_or(Value::Null))
                    .collect(),
            ))
        }
        _ => Some(value.clone()),
    }
}

/// [`tidy`] of each member of an object that `node` describes, leaving out those it drops and
/// the one named `skip`.
fn tidy_members(
    map: &Map<String, Value>,
    node: Option<Node>,
    skip: Option<&str>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in map {
        if Some(k.as_str()) == skip {
            continue;
        }
        if let Some(v) = tidy(v, node.and_then(|n| n.child(k))) {
            out.insert(k.clone(), v);
        }
    }
    out
}

/// [`tidy`] of the top-level `metadata`, then without `managedFields`, which it never copies.
fn tidy_metadata(value: &Value, node: Option<Node>) -> Option<Value> {
    let Value::Object(map) = value else {
        return tidy(value, node);
    };
    let shape = node.map(|n| n.shape());
    let out = if shape == Some(Shape::Any) {
        map.iter()
            .filter(|(k, _)| *k != "managedFields")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    } else {
        tidy_members(map, node, Some("managedFields"))
    };
    // `tidy` drops an empty map, but it would have kept `managedFields` in it until its removal.
    let kept_managed_fields = || {
        map.get("managedFields")
            .is_some_and(|m| !tidies_away(m, node.and_then(|n| n.child("managedFields"))))
    };
    if out.is_empty() && shape == Some(Shape::Map) && !kept_managed_fields() {
        return None;
    }
    Some(Value::Object(out))
}

/// The typed form two versions are compared in: [`tidy`], without `managedFields`, and with the
/// top-level `metadata`, `spec` and `status` structs present even when empty, as Go's
/// non-pointer struct fields always are (so an empty `spec` never appears as a new member).
pub(crate) fn typed_view(obj: &Value, schema: Node) -> Value {
    let mut v = match obj {
        // `tidy` of the root, with `metadata` tidied without ever copying its `managedFields`
        // (on an object many managers write, as large as the rest of it).
        Value::Object(map) if schema.shape() != Shape::Any => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                let node = schema.child(k);
                let tidied = if k == "metadata" {
                    tidy_metadata(v, node)
                } else {
                    tidy(v, node)
                };
                if let Some(v) = tidied {
                    out.insert(k.clone(), v);
                }
            }
            Value::Object(out)
        }
        _ => tidied_without_managed_fields(obj, schema),
    };
    add_top_structs(&mut v, schema);
    v
}

/// [`tidy`] of the whole object, then `managedFields` taken out of its `metadata`: what
/// [`typed_view`] makes without copying them, for a free-form root.
fn tidied_without_managed_fields(obj: &Value, schema: Node) -> Value {
    let mut v = tidy(obj, Some(schema)).unwrap_or_else(|| Value::Object(Map::new()));
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    v
}

/// Puts in the top-level `metadata`, `spec` and `status` that `schema` declares as structs and
/// `view` lacks, as empty objects.
fn add_top_structs(view: &mut Value, schema: Node) {
    if let Value::Object(map) = view {
        for name in ["metadata", "spec", "status"] {
            let is_struct = schema
                .property(name)
                .is_some_and(|p| p.shape() == Shape::Struct);
            if is_struct && !map.contains_key(name) {
                map.insert(name.into(), Value::Object(Map::new()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_object::builtin;

    fn set_of(paths: &[&[PathElement]]) -> FieldSet {
        let mut s = FieldSet::new();
        for p in paths {
            s.insert(p);
        }
        s
    }

    fn f(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    fn key(name: &str, value: &str) -> PathElement {
        PathElement::Key(vec![(name.into(), PathValue(json!(value)))])
    }

    #[test]
    fn fields_v1_round_trip_with_self_marker() {
        let text = r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:secrets":{".":{},"k:{\"name\":\"s1\"}":{".":{},"f:name":{}}},"f:automountServiceAccountToken":{}}"#;
        let v: Value = serde_json::from_str(text).unwrap();
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert!(set.contains(&[f("metadata"), f("labels")]));
        assert!(set.contains(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.contains(&[f("metadata")]));
        assert!(set.contains(&[f("secrets"), key("name", "s1"), f("name")]));
        assert_eq!(set.len(), 6);
        // Written back in element order with "." first.
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            r#"{"f:automountServiceAccountToken":{},"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:secrets":{".":{},"k:{\"name\":\"s1\"}":{".":{},"f:name":{}}}}"#
        );
    }

    #[test]
    fn fields_v1_intersection_matches_parsing_first() {
        let owned = [
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}}}}),
            json!({"f:metadata": {"f:labels": {"f:app": {}}, "f:annotations": {}}}),
            json!({"f:metadata": {"f:labels": {"x:unknown": {}}}}),
            json!({"f:metadata": {"f:labels": {}}}),
            json!({"f:secrets": {"k:{\"name\":\"s1\"}": {".": {}, "f:name": {}}}}),
            json!({}),
        ];
        let sets = [
            set_of(&[&[f("metadata"), f("labels"), f("app")]]),
            set_of(&[&[f("metadata"), f("labels")]]),
            set_of(&[
                &[f("metadata"), f("labels")],
                &[f("metadata"), f("annotations")],
            ]),
            set_of(&[&[f("metadata"), f("labels"), f("tier")], &[f("secrets")]]),
            set_of(&[&[f("metadata")]]),
            FieldSet::new(),
        ];
        for v in &owned {
            let parsed = FieldSet::from_fields_v1(v).unwrap();
            let map = v.as_object().unwrap();
            assert_eq!(fields_v1_is_empty(Some(v)), parsed.is_empty(), "{v}");
            for set in &sets {
                assert_eq!(
                    fields_v1_intersection(map, set),
                    Some(parsed.intersection(set)),
                    "{v} and {set:?}"
                );
            }
        }
        // A key element could be spelled another way in the stored entry: not read along it.
        let keyed = set_of(&[&[f("secrets"), key("name", "s1"), f("name")]]);
        assert_eq!(
            fields_v1_intersection(owned[4].as_object().unwrap(), &keyed),
            None
        );
        // A malformed key on the way is left to parsing, which reports it.
        let bad = json!({"f:metadata": {"f:labels": {"app": {}}}});
        assert_eq!(
            fields_v1_intersection(bad.as_object().unwrap(), &sets[1]),
            None
        );
    }

    #[test]
    fn element_kinds_order_and_serialize() {
        let set = set_of(&[
            &[f("l"), PathElement::Index(2)],
            &[f("l"), PathElement::Value(PathValue(json!("x")))],
            &[f("l"), PathElement::Value(PathValue(json!(3)))],
            &[
                f("l"),
                PathElement::Key(vec![
                    ("name".into(), PathValue(json!("a"))),
                    ("port".into(), PathValue(json!(80))),
                ]),
            ],
            &[f("l"), f("z")],
        ]);
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            r#"{"f:l":{"f:z":{},"k:{\"name\":\"a\",\"port\":80}":{},"v:3":{},"v:\"x\"":{},"i:2":{}}}"#
        );
        let back = FieldSet::from_fields_v1(&set.to_fields_v1()).unwrap();
        assert_eq!(back, set);
    }

    #[test]
    fn malformed_fields_v1_is_rejected_and_unknown_kinds_skipped() {
        assert!(FieldSet::from_fields_v1(&json!({"x": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"fx": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:[1]": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"i:-1": {}})).is_err());
        let s = FieldSet::from_fields_v1(&json!({"z:new": {}, "f:a": {}})).unwrap();
        assert_eq!(s, set_of(&[&[f("a")]]));
    }

    #[test]
    fn paths_display_like_structured_merge_diff() {
        let p = Path(vec![f("metadata"), f("labels"), f("app")]);
        assert_eq!(p.to_string(), ".metadata.labels.app");
        let p = Path(vec![f("secrets"), key("name", "s1")]);
        assert_eq!(p.to_string(), r#".secrets[name="s1"]"#);
        let p = Path(vec![
            f("metadata"),
            f("finalizers"),
            PathElement::Value(PathValue(json!("x"))),
        ]);
        assert_eq!(p.to_string(), r#".metadata.finalizers[="x"]"#);
        assert_eq!(Path(vec![PathElement::Index(3)]).to_string(), "[3]");
        let two = PathElement::Key(vec![
            ("port".into(), PathValue(json!(80))),
            ("protocol".into(), PathValue(json!("TCP"))),
        ]);
        assert_eq!(two.to_string(), r#"[port=80,protocol="TCP"]"#);
        assert_eq!(strata_object::go::quote("a\"b\\\u{1}"), r#""a\"b\\\x01""#);
    }

    #[test]
    fn set_algebra() {
        let a = set_of(&[&[f("a")], &[f("b"), f("c")], &[f("b"), f("d")]]);
        let b = set_of(&[&[f("b")], &[f("b"), f("c")]]);
        assert_eq!(a.union(&b).len(), 4);
        assert_eq!(a.intersection(&b), set_of(&[&[f("b"), f("c")]]));
        assert_eq!(a.difference(&b), set_of(&[&[f("a")], &[f("b"), f("d")]]));
        assert_eq!(a.recursive_difference(&b), set_of(&[&[f("a")]]));
        assert!(a.difference(&a).is_empty());
        for (x, y) in [(&a, &b), (&b, &a), (&a, &a)] {
            let mut left = x.clone();
            left.subtract(y);
            assert_eq!(left, x.difference(y));
        }
        assert_eq!(
            a.paths()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![".a", ".b.c", ".b.d"]
        );
    }

    #[test]
    fn fields_of_service_account_follows_the_schema() {
        let sa = builtin::service_account();
        let obj = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "x", "namespace": "ns", "labels": {"app": "web"},
                         "finalizers": ["a", "b"], "uid": "u"},
            "secrets": [{"name": "s1"}],
            "imagePullSecrets": [{"name": "p"}],
            "automountServiceAccountToken": false
        });
        let set = fields_of(&obj, sa.schema().unwrap());
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            r#"{"f:automountServiceAccountToken":{},"f:imagePullSecrets":{},"f:metadata":{"f:finalizers":{"v:\"a\"":{},"v:\"b\"":{}},"f:labels":{"f:app":{}}},"f:secrets":{"k:{\"name\":\"s1\"}":{}}}"#
        );
    }

    #[test]
    fn fields_of_namespace_skips_status_and_keeps_empty_maps() {
        let ns = builtin::namespace();
        let obj = json!({
            "metadata": {"name": "n", "annotations": {}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}
        });
        let set = fields_of(&obj, ns.schema().unwrap());
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            r#"{"f:metadata":{"f:annotations":{}},"f:spec":{"f:finalizers":{}}}"#
        );
    }

    #[test]
    fn comparison_marks_new_structs_and_lists() {
        let sa = builtin::service_account();
        let old = json!({"metadata": {"name": "x", "labels": {"a": "1"}}});
        let new = json!({"metadata": {"name": "x", "labels": {"a": "2", "b": "1"},
                                      "annotations": {"n": "v"}},
                         "secrets": [{"name": "s"}]});
        let c = compare(&old, &new, sa.schema().unwrap());
        assert_eq!(
            serde_json::to_string(&c.added.to_fields_v1()).unwrap(),
            r#"{"f:metadata":{"f:annotations":{".":{},"f:n":{}},"f:labels":{"f:b":{}}},"f:secrets":{".":{},"k:{\"name\":\"s\"}":{}}}"#
        );
        assert_eq!(
            c.modified.paths()[0].to_string(),
            ".metadata.labels.a".to_string()
        );
        assert!(c.removed.is_empty());
        let back = compare(&new, &old, sa.schema().unwrap());
        assert_eq!(back.removed.len(), 5);
    }

    /// `typed_view` never copies `managedFields`, yet gives what tidying the whole object and
    /// then removing them gives, whatever `metadata` is: a struct, a map, free-form, or wrong.
    #[test]
    fn typed_view_is_the_tidied_object_without_managed_fields() {
        fn reference(obj: &Value, schema: Node) -> Value {
            let mut v = tidied_without_managed_fields(obj, schema);
            add_top_structs(&mut v, schema);
            v
        }
        let metadata_schemas = [
            json!({"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "managedFields": {"type": "array", "items": {"type": "object"}}}}),
            json!({"type": "object", "additionalProperties": {"type": "array"}}),
            json!({"type": "object", "additionalProperties": {"type": "object"}}),
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        ];
        let objects = [
            json!({"metadata": {"name": "a", "managedFields": [{"manager": "m"}]}}),
            json!({"metadata": {"managedFields": [{"manager": "m"}]}, "spec": {}}),
            json!({"metadata": {"managedFields": []}}),
            json!({"metadata": {"managedFields": {}}}),
            json!({"metadata": {"managedFields": null, "labels": {}}}),
            json!({"metadata": {"labels": {"a": null}}}),
            json!({"metadata": {}}),
            json!({"metadata": null, "spec": {"x": null}}),
            json!({"metadata": "wrong"}),
            json!({"metadata": [{"managedFields": 1}]}),
            json!({"spec": {"a": []}}),
            json!({}),
        ];
        for meta in &metadata_schemas {
            let definitions = json!({"Thing": {"type": "object", "properties": {
                "metadata": meta,
                "spec": {"type": "object", "additionalProperties": {"type": "array"}},
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}});
            let definitions = definitions.as_object().unwrap().clone();
            let compiled =
                strata_object::schema::CompiledSchema::new(&definitions, "Thing").unwrap();
            for obj in &objects {
                assert_eq!(
                    typed_view(obj, compiled.root()),
                    reference(obj, compiled.root()),
                    "{obj} with metadata {meta}"
                );
            }
        }
    }

    /// A create's fields found in one walk are exactly those the general comparison with
    /// nothing finds, whatever shape each value has against the schema.
    #[test]
    fn a_create_adds_what_the_comparison_with_nothing_adds() {
        let definitions = json!({
            "Thing": {"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}]},
                "spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port", "protocol"],
                              "items": {"type": "object", "properties": {
                                  "port": {"type": "integer"}, "protocol": {"type": "string"},
                                  "name": {"type": "string"},
                                  "extra": {"type": "object",
                                            "additionalProperties": {"type": "string"}}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                             "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                                 "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "nested": {"type": "object", "properties": {
                        "inner": {"type": "object", "properties": {"x": {"type": "string"}}}}}
                }},
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }},
            "Meta": {"type": "object", "properties": {
                "name": {"type": "string"}, "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "managedFields": {"type": "array", "items": {"type": "object"}},
                "finalizers": {"type": "array", "x-kubernetes-list-type": "set",
                               "items": {"type": "string"}}
            }}
        });
        let definitions = definitions.as_object().unwrap().clone();
        let compiled = strata_object::schema::CompiledSchema::new(&definitions, "Thing").unwrap();
        let schema = compiled.root();
        let objects = [
            json!({"apiVersion": "x/v1", "kind": "Thing", "metadata": {"name": "a"}}),
            json!({"metadata": {"name": "a", "labels": {"k": "v", "n": null}, "finalizers": [],
                                "managedFields": [{"manager": "m"}]},
                   "spec": {"replicas": 2,
                            "ports": [{"port": 1, "protocol": "TCP", "name": null,
                                       "extra": {}},
                                      {"port": 1, "protocol": "TCP"},
                                      {"port": 2, "protocol": null},
                                      {"port": 3, "protocol": "UDP", "extra": {"a": "b"}},
                                      null, 7],
                            "tags": ["a", "b", "a", null], "args": [], "env": {"z": null},
                            "selector": {}, "free": {"a": null, "b": [], "c": {}},
                            "nested": {"inner": {}}},
                   "status": {"ready": true}}),
            json!({"metadata": null, "spec": {"nested": {"inner": {"x": null}}, "env": {},
                   "unknown": {"a": 1}, "tags": []}}),
            json!({"metadata": {"labels": {}}, "spec": "wrong", "status": null}),
            json!({"spec": {"ports": "wrong", "tags": {"a": 1}, "env": [1], "nested": 3},
                   "extra": {"a": {"b": null}}, "other": null, "list": []}),
            json!({"spec": null, "metadata": {"name": "n"}, "top": {}}),
            // Repeated list items (the first counts), odd shapes of system fields, numbers
            // equal in value.
            json!({"apiVersion": {"a": 1}, "kind": ["x"],
                   "metadata": {"name": {"a": "b"}, "uid": "u", "generation": 3,
                                "namespace": null, "finalizers": ["b", "a", "b"],
                                "resourceVersion": "9", "selfLink": "", "other": 1},
                   "spec": {"ports": [{"port": 2, "protocol": "TCP", "name": "first"},
                                      {"port": 2.0, "protocol": "TCP", "extra": {"k": "v"}},
                                      {"port": 1, "protocol": "UDP"}],
                            "tags": ["b", "a", "b"], "free": {"z": [], "a": {"b": 1}}}}),
            json!({"metadata": "wrong", "spec": {"ports": [{"port": 10}, {"name": "x"}]}}),
            json!({"metadata": {"managedFields": null, "labels": {"a": null}},
                   "status": {"ready": false}, "spec": {}}),
        ];
        let empty = json!({});
        for obj in &objects {
            let reset = reset_fields(schema, None);
            let c = compare(&empty, obj, schema).excluding(&reset);
            let expected = c.modified.union(&c.added);
            let found = added_by_create(obj, schema).unwrap();
            assert_eq!(
                serde_json::to_string(&found.to_fields_v1()).unwrap(),
                serde_json::to_string(&expected.to_fields_v1()).unwrap(),
                "{obj}"
            );
            assert_eq!(
                serde_json::to_string(&created_fields_v1(obj, schema).unwrap()).unwrap(),
                serde_json::to_string(&found.difference(system_fields()).to_fields_v1()).unwrap(),
                "written straight: {obj}"
            );
            assert!(c.removed.is_empty(), "{obj}");
        }
        // Built-in kinds and their fixtures too.
        for (rt, obj) in [
            (
                builtin::service_account(),
                json!({"metadata": {"name": "s", "labels": {"a": "b"}},
                "secrets": [{"name": "x"}, {"name": "y"}], "imagePullSecrets": [{"name": "p"}],
                "automountServiceAccountToken": false}),
            ),
            (
                builtin::namespace(),
                json!({"metadata": {"name": "n"},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
            ),
        ] {
            let schema = rt.schema().unwrap();
            let reset = reset_fields(schema, None);
            let c = compare(&empty, &obj, schema).excluding(&reset);
            let found = added_by_create(&obj, schema).unwrap();
            assert_eq!(found, c.modified.union(&c.added), "{obj}");
            assert_eq!(
                serde_json::to_string(&created_fields_v1(&obj, schema).unwrap()).unwrap(),
                serde_json::to_string(&found.difference(system_fields()).to_fields_v1()).unwrap(),
                "written straight: {obj}"
            );
        }
    }
}
