//! Walking a resource type's structural OpenAPI schema: the one source of patch strategies,
//! merge keys, list and map types, and of which fields exist at all.
//!
//! The raw schema is JSON: a property schema names a field (Kubernetes puts
//! `x-kubernetes-patch-strategy` and friends there) and may refer through `allOf`/`$ref` to a
//! component, where the type's own shape lives. A [`CompiledSchema`] reads that JSON once into a
//! table of nodes, answering each keyword from the declaring schema first and the component
//! second, so that a walk over an object costs a property lookup per member and nothing else.
//! A [`Node`] is one position in that table.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::ResourceType;

/// How a list is merged by server-side apply (`x-kubernetes-list-type`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The list is one value: replaced whole, owned whole. The default.
    Atomic,
    /// A list of unique scalars, each owned on its own.
    Set,
    /// A list of objects identified by the values of these keys.
    Map(Vec<String>),
}

/// The shape of the value at a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// An object with declared properties.
    Struct,
    /// An object whose keys are free and whose values share one schema (`additionalProperties`).
    Map,
    /// An array whose items share one schema (`items`).
    Array,
    /// A string, integer, number or boolean.
    Scalar,
    /// Anything: a free-form object (`FieldsV1`), or a field that keeps unknown fields.
    Any,
}

/// What one position of a schema says, read out of the JSON once.
#[derive(Debug)]
struct NodeData {
    shape: Shape,
    type_name: Option<Box<str>>,
    format: Option<Box<str>>,
    /// Declared properties in schema order.
    properties: Vec<(Box<str>, u32)>,
    /// Indexes into `properties` in [`lookup_order`] of their names, for lookups.
    by_name: Vec<u32>,
    values: Option<u32>,
    items: Option<u32>,
    list_type: ListType,
    atomic_map: bool,
    patch_strategies: Vec<Box<str>>,
    patch_merge_key: Option<Box<str>>,
    preserves_unknown_fields: bool,
}

/// The order property names are searched in: by length, then bytewise. Most comparisons of
/// a search end at the lengths, without comparing any bytes.
pub fn lookup_order(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// A schema read into a table of nodes, from one root component and what it refers to.
///
/// Reading follows `$ref`s (to `#/components/schemas/<name>` or `#/definitions/<name>`, by the
/// last path segment) and single-member `allOf`s; a recursive schema (such as a
/// CustomResourceDefinition's own `JSONSchemaProps`) becomes a cycle in the table.
#[derive(Debug)]
pub struct CompiledSchema {
    nodes: Vec<NodeData>,
}

/// One position in a schema. Cheap to copy.
///
/// Start from a type's root ([`ResourceType::schema`], or [`CompiledSchema::root`] for a schema
/// of your own) and walk down with [`Node::child`] (a property or a map value) and
/// [`Node::items`]:
///
/// ```
/// use serde_json::json;
/// use strata_object::builtin;
/// use strata_object::schema::{ListType, Shape};
///
/// let sa = builtin::service_account();
/// let root = sa.schema().expect("built-in types have a schema");
/// assert_eq!(root.shape(), Shape::Struct);
///
/// // `secrets` is merged by name, in strategic merge patch and in server-side apply.
/// let secrets = root.child("secrets").unwrap();
/// assert_eq!(secrets.shape(), Shape::Array);
/// assert_eq!(secrets.patch_merge_key(), Some("name"));
/// assert!(secrets.has_patch_strategy("merge"));
/// assert_eq!(secrets.list_type(), &ListType::Map(vec!["name".into()]));
///
/// // Fields are followed through `$ref`s: metadata is ObjectMeta, its labels a map of strings.
/// let labels = root.child("metadata").and_then(|m| m.child("labels")).unwrap();
/// assert_eq!(labels.shape(), Shape::Map);
/// assert_eq!(labels.child("app").unwrap().type_name(), Some("string"));
///
/// // Unknown fields are pruned and reported; types are checked.
/// let mut body = json!({"metadata": {"name": "a", "colour": "red"}, "secret": []});
/// assert_eq!(root.prune_unknown(&mut body), ["secret", "metadata.colour"]);
/// assert!(root.check_types(&json!({"automountServiceAccountToken": "yes"})).is_err());
/// ```
#[derive(Clone, Copy)]
pub struct Node<'a> {
    schema: &'a CompiledSchema,
    index: u32,
}

impl std::fmt::Debug for Node<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("index", &self.index)
            .field("shape", &self.shape())
            .field("type", &self.type_name())
            .finish()
    }
}

impl CompiledSchema {
    /// Reads component `name` of `definitions`, and everything it refers to.
    ///
    /// ```
    /// use serde_json::json;
    /// use strata_object::schema::{CompiledSchema, Shape};
    ///
    /// let definitions = json!({
    ///     "Thing": {"type": "object", "properties": {"spec": {"$ref": "#/components/schemas/Spec"}}},
    ///     "Spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
    /// });
    /// let schema = CompiledSchema::new(definitions.as_object().unwrap(), "Thing").unwrap();
    /// let size = schema.root().child("spec").and_then(|s| s.child("size")).unwrap();
    /// assert_eq!((size.shape(), size.type_name()), (Shape::Scalar, Some("integer")));
    /// ```
    pub fn new(definitions: &Map<String, Value>, name: &str) -> Option<CompiledSchema> {
        let root = definitions.get(name)?;
        let mut reader = Reader {
            definitions,
            nodes: Vec::new(),
            seen: HashMap::new(),
        };
        reader.node(root);
        Some(CompiledSchema {
            nodes: reader.nodes,
        })
    }

    /// The position of the root component.
    pub fn root(&self) -> Node<'_> {
        Node {
            schema: self,
            index: 0,
        }
    }
}

/// The state of reading a schema: the nodes so far, and which JSON schema each came from, so
/// that a schema reached twice (or through a cycle of `$ref`s) is one node.
struct Reader<'d> {
    definitions: &'d Map<String, Value>,
    nodes: Vec<NodeData>,
    seen: HashMap<*const Value, u32>,
}

impl<'d> Reader<'d> {
    fn node(&mut self, outer: &'d Value) -> u32 {
        if let Some(&index) = self.seen.get(&(outer as *const Value)) {
            return index;
        }
        let inner = self.follow(outer);
        let keyword = |key: &str| outer.get(key).or_else(|| inner.get(key));
        let text = |key: &str| keyword(key).and_then(Value::as_str).map(Box::from);
        let preserves_unknown_fields = keyword("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let type_name = text("type");
        let additional = inner.get("additionalProperties").filter(|v| v.is_object());
        let shape = if preserves_unknown_fields {
            Shape::Any
        } else if inner.get("properties").is_some() {
            Shape::Struct
        } else if additional.is_some() {
            Shape::Map
        } else {
            match type_name.as_deref() {
                Some("array") => Shape::Array,
                Some("object") | None => Shape::Any,
                Some(_) => Shape::Scalar,
            }
        };
        let list_type = match keyword("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(crate::strings(keyword("x-kubernetes-list-map-keys"))),
            _ => ListType::Atomic,
        };
        let patch_strategies = keyword("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(Box::from)
                    .collect()
            })
            .unwrap_or_default();
        let index = self.nodes.len() as u32;
        self.seen.insert(outer as *const Value, index);
        self.nodes.push(NodeData {
            shape,
            type_name,
            format: text("format"),
            properties: Vec::new(),
            by_name: Vec::new(),
            values: None,
            items: None,
            list_type,
            atomic_map: keyword("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
            patch_strategies,
            patch_merge_key: text("x-kubernetes-patch-merge-key"),
            preserves_unknown_fields,
        });
        // Children are read after this node is in the table, so a cycle ends here.
        let properties: Vec<(Box<str>, u32)> = inner
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (Box::from(k.as_str()), self.node(v)))
            .collect();
        let mut by_name: Vec<u32> = (0..properties.len() as u32).collect();
        by_name
            .sort_by(|&a, &b| lookup_order(&properties[a as usize].0, &properties[b as usize].0));
        let values = additional.map(|v| self.node(v));
        let items = inner.get("items").map(|v| self.node(v));
        let data = &mut self.nodes[index as usize];
        data.properties = properties;
        data.by_name = by_name;
        data.values = values;
        data.items = items;
        index
    }

    /// The schema `outer` stands for: through at most a few `$ref`s and single-member `allOf`s.
    fn follow(&self, outer: &'d Value) -> &'d Value {
        let mut inner = outer;
        for _ in 0..8 {
            if let Some(r) = inner.get("$ref").and_then(Value::as_str) {
                match r.rsplit('/').next().and_then(|n| self.definitions.get(n)) {
                    Some(next) => inner = next,
                    None => break,
                }
            } else if let Some([only]) =
                inner.get("allOf").and_then(Value::as_array).map(|a| &a[..])
            {
                inner = only;
            } else {
                break;
            }
        }
        inner
    }
}

impl<'a> Node<'a> {
    fn data(&self) -> &'a NodeData {
        &self.schema.nodes[self.index as usize]
    }

    fn at(&self, index: u32) -> Node<'a> {
        Node {
            schema: self.schema,
            index,
        }
    }

    /// The shape of the value here.
    pub fn shape(&self) -> Shape {
        self.data().shape
    }

    /// The OpenAPI `type` (`string`, `integer`, `number`, `boolean`, `object`, `array`).
    pub fn type_name(&self) -> Option<&'a str> {
        self.data().type_name.as_deref()
    }

    /// The OpenAPI `format` (e.g. `date-time`, `int64`).
    pub fn format(&self) -> Option<&'a str> {
        self.data().format.as_deref()
    }

    /// The declared property `name` of a struct.
    pub fn property(&self, name: &str) -> Option<Node<'a>> {
        let data = self.data();
        let found = data
            .by_name
            .binary_search_by(|&i| lookup_order(&data.properties[i as usize].0, name))
            .ok()?;
        Some(self.at(data.properties[data.by_name[found] as usize].1))
    }

    /// The declared property names of a struct, in schema order.
    pub fn property_names(&self) -> impl Iterator<Item = &'a str> {
        self.data().properties.iter().map(|(k, _)| &**k)
    }

    /// The schema of a map's values.
    pub fn values(&self) -> Option<Node<'a>> {
        self.data().values.map(|i| self.at(i))
    }

    /// The schema of an array's items.
    pub fn items(&self) -> Option<Node<'a>> {
        self.data().items.map(|i| self.at(i))
    }

    /// The schema of the child reached by `key`: a property of a struct or a value of a map.
    pub fn child(&self, key: &str) -> Option<Node<'a>> {
        match self.shape() {
            Shape::Struct => self.property(key),
            Shape::Map => self.values(),
            _ => None,
        }
    }

    /// `x-kubernetes-list-type`, defaulting to atomic.
    pub fn list_type(&self) -> &'a ListType {
        &self.data().list_type
    }

    /// Whether an object is owned and replaced as a whole (`x-kubernetes-map-type: atomic`).
    pub fn atomic_map(&self) -> bool {
        self.data().atomic_map
    }

    /// The strategic-merge strategies of this field (`x-kubernetes-patch-strategy`, a
    /// comma-separated list such as `merge,retainKeys`).
    pub fn patch_strategies(&self) -> Vec<&'a str> {
        self.data().patch_strategies.iter().map(|s| &**s).collect()
    }

    /// Whether the strategic-merge strategies include `strategy`.
    pub fn has_patch_strategy(&self, strategy: &str) -> bool {
        self.data()
            .patch_strategies
            .iter()
            .any(|s| &**s == strategy)
    }

    /// The strategic-merge key of a list of objects (`x-kubernetes-patch-merge-key`).
    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.data().patch_merge_key.as_deref()
    }

    /// Whether unknown fields are kept here (`x-kubernetes-preserve-unknown-fields: true`).
    pub fn preserves_unknown_fields(&self) -> bool {
        self.data().preserves_unknown_fields
    }
}

/// A resource type's [`CompiledSchema`], read on first use ([`ResourceType::schema`]) from its
/// `definitions` and `schema_name`, which must not change after that. A clone starts empty.
#[derive(Default)]
pub struct SchemaCache(OnceLock<Option<CompiledSchema>>);

impl Clone for SchemaCache {
    fn clone(&self) -> Self {
        SchemaCache::default()
    }
}

impl std::fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0.get() {
            None => "not read",
            Some(None) => "no schema",
            Some(Some(_)) => "read",
        };
        f.write_str(state)
    }
}

impl Node<'_> {
    /// Removes from `value` every member the schema does not declare, at any depth, and returns
    /// their paths as field validation reports them (`spec.foo`, `items[0].bar`), in document
    /// order. Free-form nodes and fields that keep unknown fields are left alone.
    pub fn prune_unknown(&self, value: &mut Value) -> Vec<String> {
        let mut found = Vec::new();
        self.prune_at(value, &mut String::new(), &mut found);
        found
    }

    fn prune_at(&self, value: &mut Value, path: &mut String, found: &mut Vec<String>) {
        let len = path.len();
        match (self.shape(), value) {
            (Shape::Struct, Value::Object(members)) => {
                // One schema lookup per member; this level's unknown members are reported
                // before those found below it.
                let mut unknown = Vec::new();
                let mut below = Vec::new();
                for (k, v) in members.iter_mut() {
                    match self.property(k) {
                        Some(child) => {
                            push_key(path, k);
                            child.prune_at(v, path, &mut below);
                            path.truncate(len);
                        }
                        None => unknown.push(k.clone()),
                    }
                }
                if !unknown.is_empty() {
                    members.retain(|k, _| !unknown.contains(k));
                    found.extend(unknown.iter().map(|k| join(path, k)));
                }
                found.append(&mut below);
            }
            (Shape::Map, Value::Object(members)) => {
                if let Some(child) = self.values() {
                    for (k, v) in members.iter_mut() {
                        push_key(path, k);
                        child.prune_at(v, path, found);
                        path.truncate(len);
                    }
                }
            }
            (Shape::Array, Value::Array(items)) => {
                if let Some(child) = self.items() {
                    for (i, v) in items.iter_mut().enumerate() {
                        push_index(path, i);
                        child.prune_at(v, path, found);
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }
}

impl Node<'_> {
    /// The first value in `value` whose JSON type is not the one the schema declares, as
    /// `"<path>: expected <type>, got <type>"`. `null` is accepted anywhere (it means absent);
    /// undeclared members are not looked at (pruning deals with them).
    pub fn check_types(&self, value: &Value) -> Result<(), String> {
        self.types_at(value, &mut String::new())
    }

    fn types_at(&self, value: &Value, path: &mut String) -> Result<(), String> {
        if value.is_null() || self.preserves_unknown_fields() {
            return Ok(());
        }
        let len = path.len();
        let expected = match self.shape() {
            Shape::Any => return Ok(()),
            Shape::Struct | Shape::Map => "object",
            Shape::Array => "array",
            Shape::Scalar => self.type_name().unwrap_or("string"),
        };
        let fits = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            _ => true,
        };
        if !fits {
            let at = if path.is_empty() {
                "<root>"
            } else {
                path.as_str()
            };
            return Err(format!(
                "{at}: expected {expected}, got {}",
                json_type(value)
            ));
        }
        match value {
            Value::Object(members) => {
                for (k, v) in members {
                    if let Some(child) = self.child(k) {
                        push_key(path, k);
                        child.types_at(v, path)?;
                        path.truncate(len);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(child) = self.items() {
                    for (i, v) in items.iter().enumerate() {
                        push_index(path, i);
                        child.types_at(v, path)?;
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Appends `[i]`, a list item's place in a path, without a string of its own.
fn push_index(path: &mut String, i: usize) {
    use std::fmt::Write;
    // Writing to a `String` cannot fail.
    let _ = write!(path, "[{i}]");
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

fn join(path: &str, key: &str) -> String {
    let mut p = path.to_string();
    push_key(&mut p, key);
    p
}

impl ResourceType {
    /// The root of the kind's schema.
    pub fn schema(&self) -> Option<Node<'_>> {
        self.schema_cache
            .0
            .get_or_init(|| CompiledSchema::new(&self.definitions, &self.schema_name))
            .as_ref()
            .map(CompiledSchema::root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin;

    /// Properties are found by name whatever the lengths of the names around them.
    #[test]
    fn properties_of_every_length_are_found() {
        let names = [
            "b", "a", "ab", "ba", "aa", "abc", "", "zz", "é", "spec", "kind",
        ];
        let props: Map<String, Value> = names
            .iter()
            .map(|n| (n.to_string(), serde_json::json!({"type": "integer"})))
            .collect();
        let definitions = serde_json::json!({"T": {"type": "object", "properties": props}});
        let schema = CompiledSchema::new(definitions.as_object().unwrap(), "T").unwrap();
        let root = schema.root();
        for name in names {
            assert_eq!(
                root.property(name).and_then(|p| p.type_name()),
                Some("integer"),
                "{name:?}"
            );
        }
        for missing in ["c", "abcd", "bb", "Spec", "kinds"] {
            assert!(root.property(missing).is_none(), "{missing:?}");
        }
        assert_eq!(root.property_names().collect::<Vec<_>>(), names);
    }

    #[test]
    fn service_account_strategies() {
        let sa = builtin::service_account();
        let root = sa.schema().unwrap();
        assert_eq!(root.shape(), Shape::Struct);
        let secrets = root.property("secrets").unwrap();
        assert_eq!(secrets.shape(), Shape::Array);
        assert_eq!(secrets.list_type(), &ListType::Map(vec!["name".into()]));
        assert_eq!(secrets.patch_merge_key(), Some("name"));
        assert!(secrets.has_patch_strategy("merge"));
        assert_eq!(secrets.items().unwrap().shape(), Shape::Struct);
        let pull = root.property("imagePullSecrets").unwrap();
        assert_eq!(pull.list_type(), &ListType::Atomic);
        assert!(pull.patch_strategies().is_empty());

        let meta = root.property("metadata").unwrap();
        assert_eq!(meta.shape(), Shape::Struct);
        let labels = meta.child("labels").unwrap();
        assert_eq!(labels.shape(), Shape::Map);
        assert_eq!(labels.child("app").unwrap().shape(), Shape::Scalar);
        assert_eq!(
            meta.child("finalizers").unwrap().list_type(),
            &ListType::Set
        );
        let created = meta.property("creationTimestamp").unwrap();
        assert_eq!(created.shape(), Shape::Scalar);
        assert_eq!(created.format(), Some("date-time"));
        let fields = meta
            .property("managedFields")
            .and_then(|m| m.items())
            .and_then(|e| e.property("fieldsV1"))
            .unwrap();
        assert_eq!(fields.shape(), Shape::Any);
        assert!(root.property("spec").is_none());
    }

    #[test]
    fn recursive_schemas_become_cycles_and_declaring_schemas_win() {
        let definitions = serde_json::json!({
            "Tree": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "x-kubernetes-list-type": "map",
                             "x-kubernetes-list-map-keys": ["name"],
                             "items": {"$ref": "#/components/schemas/Tree"}},
                "shadow": {"allOf": [{"$ref": "#/components/schemas/Leaf"}],
                           "x-kubernetes-map-type": "atomic", "format": "mine"}
            }},
            "Leaf": {"type": "object", "format": "theirs", "properties": {"v": {"type": "integer"}}}
        });
        let compiled = CompiledSchema::new(definitions.as_object().unwrap(), "Tree").unwrap();
        let root = compiled.root();
        let mut node = root;
        for _ in 0..5 {
            let children = node.child("children").unwrap();
            assert_eq!(children.list_type(), &ListType::Map(vec!["name".into()]));
            node = children.items().unwrap();
            assert_eq!(
                node.property_names().collect::<Vec<_>>(),
                ["name", "children", "shadow"]
            );
        }
        // The component is read once, however deep the walk goes.
        assert!(compiled.nodes.len() < 10, "{} nodes", compiled.nodes.len());
        let shadow = node.child("shadow").unwrap();
        assert_eq!(shadow.shape(), Shape::Struct);
        assert!(shadow.atomic_map());
        assert_eq!(shadow.format(), Some("mine"));
        assert_eq!(shadow.child("v").unwrap().type_name(), Some("integer"));
        assert!(CompiledSchema::new(definitions.as_object().unwrap(), "Nothing").is_none());
    }

    #[test]
    fn type_checks_name_the_first_mismatch() {
        let sa = builtin::service_account();
        let root = sa.schema().unwrap();
        let ok = serde_json::json!({"metadata": {"name": "a", "generation": 3, "labels": {"k": "v"}},
                                     "automountServiceAccountToken": null, "bogus": 1});
        assert_eq!(root.check_types(&ok), Ok(()));
        let bad = serde_json::json!({"metadata": {"labels": {"k": 1}}});
        assert_eq!(
            root.check_types(&bad),
            Err("metadata.labels.k: expected string, got integer".into())
        );
        let bad = serde_json::json!({"secrets": [{"name": "a"}, "b"]});
        assert_eq!(
            root.check_types(&bad),
            Err("secrets[1]: expected object, got string".into())
        );
        let bad = serde_json::json!({"automountServiceAccountToken": "yes"});
        assert!(root.check_types(&bad).is_err());
        assert!(root.check_types(&serde_json::json!([])).is_err());
    }

    #[test]
    fn pruning_reports_unknown_fields_by_path() {
        let sa = builtin::service_account();
        let mut v = serde_json::json!({
            "kind": "ServiceAccount",
            "spec": {"x": 1},
            "metadata": {"name": "a", "labels": {"k": "v"}, "bogus": true,
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:x": {}}, "extra": 1}]},
            "secrets": [{"name": "s"}, {"name": "t", "foo": "bar"}]
        });
        let found = sa.schema().unwrap().prune_unknown(&mut v);
        assert_eq!(
            found,
            vec![
                "spec",
                "metadata.bogus",
                "metadata.managedFields[0].extra",
                "secrets[1].foo"
            ]
        );
        assert_eq!(
            v,
            serde_json::json!({
                "kind": "ServiceAccount",
                "metadata": {"name": "a", "labels": {"k": "v"},
                             "managedFields": [{"manager": "m", "fieldsV1": {"f:x": {}}}]},
                "secrets": [{"name": "s"}, {"name": "t"}]
            })
        );
    }
}
