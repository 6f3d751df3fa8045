//! Walking a resource type's structural OpenAPI schema: the one source of patch strategies,
//! merge keys, list and map types, and of which fields exist at all.
//!
//! A [`Node`] is one position in the schema. It keeps the property schema that names the field
//! (where Kubernetes puts `x-kubernetes-patch-strategy` and friends) apart from the component it
//! refers to through `allOf`/`$ref` (where the type's own shape lives), and answers questions by
//! looking at the first, then the second.

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

/// One position in a schema. Cheap to copy.
///
/// Start from a type's root ([`ResourceType::schema`] or [`Node::root`]) and walk down with
/// [`Node::child`] (a property or a map value) and [`Node::items`]:
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
/// assert_eq!(secrets.list_type(), ListType::Map(vec!["name".into()]));
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
#[derive(Clone, Copy, Debug)]
pub struct Node<'a> {
    definitions: &'a Map<String, Value>,
    /// The schema written where the field is declared (extensions live here).
    outer: &'a Value,
    /// The schema after following `allOf: [{$ref}]` / `$ref` (the type's shape lives here).
    inner: &'a Value,
    /// [`Node::shape`], worked out once when the node is reached: every walk asks it of every
    /// node, and each answer takes several keyword lookups in the raw schema.
    shape: Shape,
}

impl<'a> Node<'a> {
    /// The schema of component `name` in `definitions`.
    pub fn root(definitions: &'a Map<String, Value>, name: &str) -> Option<Node<'a>> {
        let v = definitions.get(name)?;
        Some(Self::at(definitions, v))
    }

    fn at(definitions: &'a Map<String, Value>, outer: &'a Value) -> Node<'a> {
        let mut inner = outer;
        // Follow at most a few indirections: `allOf` with one member, or a `$ref`.
        for _ in 0..8 {
            if let Some(r) = inner.get("$ref").and_then(Value::as_str) {
                match r.rsplit('/').next().and_then(|n| definitions.get(n)) {
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
        let mut node = Node {
            definitions,
            outer,
            inner,
            shape: Shape::Any,
        };
        node.shape = node.find_shape();
        node
    }

    /// An extension or keyword, looked up on the declaring schema first.
    fn keyword(&self, key: &str) -> Option<&'a Value> {
        self.outer.get(key).or_else(|| self.inner.get(key))
    }

    /// The shape of the value here.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    fn find_shape(&self) -> Shape {
        if self.preserves_unknown_fields() {
            return Shape::Any;
        }
        if self.inner.get("properties").is_some() {
            return Shape::Struct;
        }
        if self
            .inner
            .get("additionalProperties")
            .is_some_and(Value::is_object)
        {
            return Shape::Map;
        }
        match self.keyword("type").and_then(Value::as_str) {
            Some("array") => Shape::Array,
            Some("object") | None => Shape::Any,
            Some(_) => Shape::Scalar,
        }
    }

    /// The OpenAPI `type` (`string`, `integer`, `number`, `boolean`, `object`, `array`).
    pub fn type_name(&self) -> Option<&'a str> {
        self.keyword("type").and_then(Value::as_str)
    }

    /// The OpenAPI `format` (e.g. `date-time`, `int64`).
    pub fn format(&self) -> Option<&'a str> {
        self.keyword("format").and_then(Value::as_str)
    }

    /// The declared property `name` of a struct.
    pub fn property(&self, name: &str) -> Option<Node<'a>> {
        let p = self.inner.get("properties")?.get(name)?;
        Some(Self::at(self.definitions, p))
    }

    /// The declared property names of a struct, in schema order.
    pub fn property_names(&self) -> impl Iterator<Item = &'a str> {
        self.inner
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys().map(String::as_str))
    }

    /// The schema of a map's values.
    pub fn values(&self) -> Option<Node<'a>> {
        let v = self.inner.get("additionalProperties")?;
        v.is_object().then(|| Self::at(self.definitions, v))
    }

    /// The schema of an array's items.
    pub fn items(&self) -> Option<Node<'a>> {
        let v = self.inner.get("items")?;
        Some(Self::at(self.definitions, v))
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
    pub fn list_type(&self) -> ListType {
        match self
            .keyword("x-kubernetes-list-type")
            .and_then(Value::as_str)
        {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                self.keyword("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            _ => ListType::Atomic,
        }
    }

    /// Whether an object is owned and replaced as a whole (`x-kubernetes-map-type: atomic`).
    pub fn atomic_map(&self) -> bool {
        self.keyword("x-kubernetes-map-type")
            .and_then(Value::as_str)
            == Some("atomic")
    }

    /// The strategic-merge strategies of this field (`x-kubernetes-patch-strategy`, a
    /// comma-separated list such as `merge,retainKeys`).
    pub fn patch_strategies(&self) -> Vec<&'a str> {
        self.keyword("x-kubernetes-patch-strategy")
            .and_then(Value::as_str)
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the strategic-merge strategies include `strategy`.
    pub fn has_patch_strategy(&self, strategy: &str) -> bool {
        self.patch_strategies().contains(&strategy)
    }

    /// The strategic-merge key of a list of objects (`x-kubernetes-patch-merge-key`).
    pub fn patch_merge_key(&self) -> Option<&'a str> {
        self.keyword("x-kubernetes-patch-merge-key")
            .and_then(Value::as_str)
    }

    /// Whether unknown fields are kept here (`x-kubernetes-preserve-unknown-fields: true`).
    pub fn preserves_unknown_fields(&self) -> bool {
        self.keyword("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false)
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
                        path.push_str(&format!("[{i}]"));
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
                        path.push_str(&format!("[{i}]"));
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
        Node::root(&self.definitions, &self.schema_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin;

    #[test]
    fn service_account_strategies() {
        let sa = builtin::service_account();
        let root = sa.schema().unwrap();
        assert_eq!(root.shape(), Shape::Struct);
        let secrets = root.property("secrets").unwrap();
        assert_eq!(secrets.shape(), Shape::Array);
        assert_eq!(secrets.list_type(), ListType::Map(vec!["name".into()]));
        assert_eq!(secrets.patch_merge_key(), Some("name"));
        assert!(secrets.has_patch_strategy("merge"));
        assert_eq!(secrets.items().unwrap().shape(), Shape::Struct);
        let pull = root.property("imagePullSecrets").unwrap();
        assert_eq!(pull.list_type(), ListType::Atomic);
        assert!(pull.patch_strategies().is_empty());

        let meta = root.property("metadata").unwrap();
        assert_eq!(meta.shape(), Shape::Struct);
        let labels = meta.child("labels").unwrap();
        assert_eq!(labels.shape(), Shape::Map);
        assert_eq!(labels.child("app").unwrap().shape(), Shape::Scalar);
        assert_eq!(meta.child("finalizers").unwrap().list_type(), ListType::Set);
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
