//! Decoding that notices duplicate fields.
//!
//! A plain decode into a value tree keeps the last of two members with the same name and says
//! nothing. Field validation (spec §4.9) must report every duplicate by its path, so these
//! decoders build the tree themselves and record each repeated member as they go; the value
//! they return is the same one a plain decode gives (the last member wins).
//!
//! ```
//! use strata_codec::strict;
//!
//! let body = br#"{"metadata": {"name": "a", "name": "b"}, "data": {"k": "1"}}"#;
//! let decoded = strict::json(body)?;
//! assert_eq!(decoded.value["metadata"]["name"], "b");
//! assert_eq!(decoded.duplicates, ["metadata.name"]);
//!
//! let decoded = strict::yaml(b"data:\n  k: 1\n  k: 2\n")?;
//! assert_eq!(decoded.duplicates, ["data.k"]);
//! # Ok::<(), strata_codec::json::DecodeError>(())
//! ```

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::json::DecodeError;

/// A decoded document and the paths of the members that appeared more than once in it
/// (`metadata.name`, `spec.items[0].x`), in document order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decoded {
    /// The document's value, the last of repeated members kept.
    pub value: Value,
    /// The paths of the repeated members, in document order (empty for most documents).
    pub duplicates: Vec<String>,
}

/// Decodes JSON, recording duplicate members.
pub fn json(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    // The fast parser answers for a well-formed document without duplicates, the usual body;
    // for anything else the tree below decodes it, and reports what it finds.
    match crate::parse::parse(bytes, true) {
        Some(value) => Ok(Decoded {
            value,
            duplicates: Vec::new(),
        }),
        None => json_tree(bytes),
    }
}

/// [`json`] through the tree of this module alone.
pub(crate) fn json_tree(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let dups = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Tree {
        path: String::new(),
        dups: &dups,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| crate::json::decode_error(&e))?;
    Ok(Decoded {
        value,
        duplicates: dups.into_inner(),
    })
}

/// Decodes one YAML document, recording duplicate keys.
pub fn yaml(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let text = crate::yaml::document_text(bytes)?;
    let dups = RefCell::new(Vec::new());
    let de = serde_norway::Deserializer::from_str(text);
    let value = Tree {
        path: String::new(),
        dups: &dups,
    }
    .deserialize(de)
    .map_err(|e| DecodeError(format!("invalid YAML: {e}")))?;
    Ok(Decoded {
        value,
        duplicates: dups.into_inner(),
    })
}

/// Builds a value tree at `path`, pushing duplicate member paths into `dups`.
struct Tree<'a> {
    path: String,
    dups: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Tree<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tree<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("NaN and infinite numbers are not allowed"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        self.deserialize(de)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let seed = Tree {
                path: format!("{}[{}]", self.path, items.len()),
                dups: self.dups,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let value = map.next_value_seed(Tree {
                path: path.clone(),
                dups: self.dups,
            })?;
            if members.insert(key, value).is_some() {
                self.dups.borrow_mut().push(path);
            }
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_duplicates_are_reported_by_path_and_the_last_wins() {
        let d =
            json(br#"{"metadata":{"name":"a","name":"b"},"items":[{"x":1,"x":2}],"k":1}"#).unwrap();
        assert_eq!(
            d.value,
            json!({"metadata": {"name": "b"}, "items": [{"x": 2}], "k": 1})
        );
        assert_eq!(d.duplicates, vec!["metadata.name", "items[0].x"]);
        assert!(json(b"{").is_err());
        assert!(json(b"{} x").is_err());
    }

    #[test]
    fn yaml_duplicates_are_reported() {
        let d = yaml(b"metadata:\n  name: a\n  name: b\nkind: X\n").unwrap();
        assert_eq!(d.value, json!({"metadata": {"name": "b"}, "kind": "X"}));
        assert_eq!(d.duplicates, vec!["metadata.name"]);
        assert!(yaml(b"").is_err());
        assert!(yaml(b"a: [").is_err());
    }

    #[test]
    fn plain_decodes_agree() {
        let doc = br#"{"a":[1,2.5,"x",null,true],"b":{"c":{}}}"#;
        assert_eq!(json(doc).unwrap().value, crate::json::decode(doc).unwrap());
        assert_eq!(yaml(doc).unwrap().value, crate::yaml::decode(doc).unwrap());
    }
}
