//! `Object`: a resource instance as a JSON value tree, with typed access to its metadata.
//!
//! The generic request path never needs a Rust struct per kind: it reads and writes metadata
//! through these accessors and leaves every other field to the schema-driven code.

use serde_json::{Map, Value};

/// Why a value tree is not an object.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ObjectError {
    /// The value is not a JSON object; holds the JSON type it is (`"array"`, `"string"`, ...).
    #[error("the object must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// A type or metadata field holds a value of the wrong JSON type.
    #[error("{field} must be {expected}")]
    WrongType {
        /// The field's path, such as `metadata.labels`.
        field: String,
        /// What the field must hold, such as `"a map of strings"`.
        expected: &'static str,
    },
}

/// A Kubernetes-style object: `kind`, `apiVersion`, `metadata` and kind-specific fields.
///
/// It holds its tree as a [`Value`] that is always an object, so that code taking any JSON
/// value (validation, CEL) reads it without a copy ([`Object::as_value`]).
///
/// The metadata accessors read strings as `""` when they are absent, and the setters remove a
/// field when given `""`, the way Go's `omitempty` leaves it out.
///
/// ```
/// use strata_object::Object;
/// use serde_json::json;
///
/// let mut sa = Object::from_value(json!({
///     "metadata": {"name": "builder", "labels": {"team": "ci"}},
///     "automountServiceAccountToken": false,
/// }))?;
/// sa.set_type_meta("v1", "ServiceAccount");
/// sa.set_namespace("default");
/// sa.set_resource_version("42");
///
/// assert_eq!((sa.api_version(), sa.kind()), ("v1", "ServiceAccount"));
/// assert_eq!((sa.namespace(), sa.name()), ("default", "builder"));
/// assert_eq!(sa.uid(), ""); // absent
/// assert_eq!(sa.labels().collect::<Vec<_>>(), [("team", "ci")]);
///
/// // `kind` and `apiVersion` are written first.
/// let keys: Vec<&str> = sa.as_map().keys().map(String::as_str).collect();
/// assert_eq!(keys, ["kind", "apiVersion", "metadata", "automountServiceAccountToken"]);
///
/// // Metadata must be an object holding strings where Kubernetes has strings.
/// assert!(Object::from_value(json!({"metadata": {"name": 7}})).is_err());
/// # Ok::<(), strata_object::ObjectError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Object(Value);

impl Default for Object {
    fn default() -> Self {
        Object(Value::Object(Map::new()))
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

impl Object {
    /// Wraps a value tree, checking that it is an object and that `metadata` (if present) is one
    /// and holds strings where strings belong.
    pub fn from_value(v: Value) -> Result<Self, ObjectError> {
        Self::try_from_value(v).map_err(|(e, _)| e)
    }

    /// [`Object::from_value`] that hands the value back with the error, for a caller that
    /// reports it (without keeping a copy in case it fails).
    ///
    /// ```
    /// use serde_json::json;
    /// use strata_object::Object;
    ///
    /// let (err, back) = Object::try_from_value(json!({"metadata": {"name": 7}})).unwrap_err();
    /// assert_eq!(back, json!({"metadata": {"name": 7}}));
    /// assert!(err.to_string().contains("metadata.name"));
    /// ```
    pub fn try_from_value(v: Value) -> Result<Self, (ObjectError, Value)> {
        if !v.is_object() {
            return Err((ObjectError::NotAnObject(type_name(&v)), v));
        }
        let obj = Self(v);
        match obj.check_shape() {
            Ok(()) => Ok(obj),
            Err(e) => Err((e, obj.0)),
        }
    }

    fn check_shape(&self) -> Result<(), ObjectError> {
        for key in ["kind", "apiVersion"] {
            match self.as_map().get(key) {
                None | Some(Value::String(_)) | Some(Value::Null) => {}
                Some(_) => {
                    return Err(ObjectError::WrongType {
                        field: key.into(),
                        expected: "a string",
                    })
                }
            }
        }
        let meta = match self.as_map().get("metadata") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(ObjectError::WrongType {
                    field: "metadata".into(),
                    expected: "an object",
                })
            }
        };
        for key in [
            "name",
            "generateName",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
        ] {
            match meta.get(key) {
                None | Some(Value::String(_)) | Some(Value::Null) => {}
                Some(_) => {
                    return Err(ObjectError::WrongType {
                        field: format!("metadata.{key}"),
                        expected: "a string",
                    })
                }
            }
        }
        for key in ["labels", "annotations"] {
            match meta.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(m)) if m.values().all(|v| v.is_string()) => {}
                Some(_) => {
                    return Err(ObjectError::WrongType {
                        field: format!("metadata.{key}"),
                        expected: "a map of strings",
                    })
                }
            }
        }
        match meta.get("finalizers") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) if a.iter().all(|v| v.is_string()) => {}
            Some(_) => {
                return Err(ObjectError::WrongType {
                    field: "metadata.finalizers".into(),
                    expected: "an array of strings",
                })
            }
        }
        Ok(())
    }

    /// The object's value tree, giving up the wrapper.
    pub fn into_value(self) -> Value {
        self.0
    }

    /// The object as the JSON value it is.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The object's top-level fields.
    pub fn as_map(&self) -> &Map<String, Value> {
        match &self.0 {
            Value::Object(m) => m,
            // Every constructor stores an object, and only maps are handed out for changes.
            _ => unreachable!("an Object always holds a JSON object"),
        }
    }

    /// The object's top-level fields, for changes. The object stays a JSON object whatever is
    /// done to the map, but the shape [`Object::from_value`] checks is not checked again.
    pub fn as_map_mut(&mut self) -> &mut Map<String, Value> {
        match &mut self.0 {
            Value::Object(m) => m,
            // Every constructor stores an object, and only maps are handed out for changes.
            _ => unreachable!("an Object always holds a JSON object"),
        }
    }

    fn str_field(&self, key: &str) -> &str {
        self.as_map().get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// `kind`, or `""` when absent.
    pub fn kind(&self) -> &str {
        self.str_field("kind")
    }

    /// `apiVersion` (`v1`, `rbac.authorization.k8s.io/v1`), or `""` when absent.
    pub fn api_version(&self) -> &str {
        self.str_field("apiVersion")
    }

    /// Sets `kind` and `apiVersion`, keeping them first in the serialized output.
    pub fn set_type_meta(&mut self, api_version: &str, kind: &str) {
        // Moved (or put) in place: the other members keep their order, and nothing is rehashed.
        let map = self.as_map_mut();
        map.shift_insert(0, "kind".into(), Value::String(kind.into()));
        map.shift_insert(1, "apiVersion".into(), Value::String(api_version.into()));
    }

    /// The `metadata` map, if the object has one.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.as_map().get("metadata").and_then(Value::as_object)
    }

    /// The metadata map, created (and placed after the type fields) when absent or null.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let map = self.as_map_mut();
        if !matches!(map.get("metadata"), Some(Value::Object(_))) {
            map.insert("metadata".into(), Value::Object(Map::new()));
        }
        match map.get_mut("metadata") {
            Some(Value::Object(m)) => m,
            // The branch above guarantees an object is present.
            _ => unreachable!("metadata was just inserted as an object"),
        }
    }

    fn meta_str(&self, key: &str) -> &str {
        self.metadata()
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Sets a metadata string; an empty value removes the key.
    fn set_meta_str(&mut self, key: &str, value: &str) {
        let m = self.metadata_mut();
        if value.is_empty() {
            m.remove(key);
        } else {
            m.insert(key.into(), Value::String(value.into()));
        }
    }

    /// `metadata.name`, or `""` when absent.
    pub fn name(&self) -> &str {
        self.meta_str("name")
    }
    /// Sets `metadata.name`; `""` removes it.
    pub fn set_name(&mut self, v: &str) {
        self.set_meta_str("name", v)
    }
    /// `metadata.generateName` (the prefix of a name the server generates), or `""`.
    pub fn generate_name(&self) -> &str {
        self.meta_str("generateName")
    }
    /// `metadata.namespace`, or `""` when absent (cluster-scoped objects have none).
    pub fn namespace(&self) -> &str {
        self.meta_str("namespace")
    }
    /// Sets `metadata.namespace`; `""` removes it.
    pub fn set_namespace(&mut self, v: &str) {
        self.set_meta_str("namespace", v)
    }
    /// `metadata.uid`, or `""` when absent.
    pub fn uid(&self) -> &str {
        self.meta_str("uid")
    }
    /// Sets `metadata.uid`; `""` removes it.
    pub fn set_uid(&mut self, v: &str) {
        self.set_meta_str("uid", v)
    }
    /// `metadata.resourceVersion`, or `""` when absent.
    pub fn resource_version(&self) -> &str {
        self.meta_str("resourceVersion")
    }
    /// Sets `metadata.resourceVersion`; `""` removes it.
    pub fn set_resource_version(&mut self, v: &str) {
        self.set_meta_str("resourceVersion", v)
    }
    /// `metadata.creationTimestamp` as written (RFC 3339), or `""` when absent.
    pub fn creation_timestamp(&self) -> &str {
        self.meta_str("creationTimestamp")
    }
    /// Sets `metadata.creationTimestamp`; `""` removes it.
    pub fn set_creation_timestamp(&mut self, v: &str) {
        self.set_meta_str("creationTimestamp", v)
    }
    /// `metadata.deletionTimestamp` as written (RFC 3339), or `""` while the object is not
    /// being deleted.
    pub fn deletion_timestamp(&self) -> &str {
        self.meta_str("deletionTimestamp")
    }

    /// A metadata field as stored (any JSON value).
    pub fn meta_value(&self, key: &str) -> Option<&Value> {
        self.metadata().and_then(|m| m.get(key))
    }

    /// Sets or (with `None`) removes a metadata field.
    pub fn set_meta_value(&mut self, key: &str, value: Option<Value>) {
        let m = self.metadata_mut();
        match value {
            Some(v) => {
                m.insert(key.into(), v);
            }
            None => {
                m.remove(key);
            }
        }
    }

    /// `metadata.labels` as key/value pairs, in the map's order (none when absent).
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.meta_value("labels")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            })
    }

    /// `metadata.finalizers`, in order (empty when absent).
    pub fn finalizers(&self) -> Vec<&str> {
        self.meta_value("finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// Removes metadata fields that are null or empty collections, as Go's `omitempty` would.
    pub fn drop_empty_metadata(&mut self) {
        let m = self.metadata_mut();
        m.retain(|_, v| match v {
            Value::Null => false,
            Value::Object(o) => !o.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::String(s) => !s.is_empty(),
            _ => true,
        });
    }
}

impl From<Object> for Value {
    fn from(o: Object) -> Value {
        o.into_value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accessors_and_type_meta_order() {
        let mut o = Object::from_value(json!({"metadata": {"name": "a"}, "secrets": []})).unwrap();
        o.set_type_meta("v1", "ServiceAccount");
        let keys: Vec<_> = o.as_map().keys().cloned().collect();
        assert_eq!(keys, ["kind", "apiVersion", "metadata", "secrets"]);
        // Type fields found elsewhere are moved to the front with their new values.
        let mut moved = Object::from_value(json!({"metadata": {}, "apiVersion": "x/v0",
            "spec": {}, "kind": "Old", "status": {}}))
        .unwrap();
        moved.set_type_meta("v1", "ServiceAccount");
        assert_eq!(
            serde_json::to_string(moved.as_map()).unwrap(),
            r#"{"kind":"ServiceAccount","apiVersion":"v1","metadata":{},"spec":{},"status":{}}"#
        );
        let mut empty = Object::default();
        empty.set_type_meta("v1", "ServiceAccount");
        let keys: Vec<_> = empty.as_map().keys().cloned().collect();
        assert_eq!(keys, ["kind", "apiVersion"]);
        assert_eq!(o.name(), "a");
        o.set_namespace("ns");
        assert_eq!(o.namespace(), "ns");
    }

    #[test]
    fn rejects_non_objects_and_bad_metadata() {
        assert!(Object::from_value(json!([1])).is_err());
        assert!(Object::from_value(json!({"metadata": {"name": 3}})).is_err());
        assert!(Object::from_value(json!({"metadata": {"labels": {"a": 1}}})).is_err());
    }
}
