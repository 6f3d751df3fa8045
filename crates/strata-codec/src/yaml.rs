//! The YAML codec (`application/yaml`): documents decode to the same value trees as JSON, and
//! values encode as block YAML.
//!
//! ```
//! use strata_codec::{json, yaml};
//!
//! let v = yaml::decode(b"kind: ConfigMap\napiVersion: v1\ndata:\n  a: '1'\n")?;
//! assert_eq!(v, json::decode(br#"{"kind":"ConfigMap","apiVersion":"v1","data":{"a":"1"}}"#)?);
//! assert_eq!(yaml::encode(&v), b"kind: ConfigMap\napiVersion: v1\ndata:\n  a: '1'\n");
//! assert!(yaml::decode(b"a: .nan\n").is_err()); // JSON has no NaN
//! # Ok::<(), strata_codec::json::DecodeError>(())
//! ```

use serde_json::{Map, Value};

use crate::json::DecodeError;

/// Parses one YAML document (JSON is valid YAML). A key repeated in a mapping keeps its last
/// value, as in JSON; reporting repeats belongs to field validation, for both formats alike.
pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    // The strict decoder builds the same tree. It also rejects `.nan` and `.inf`, which JSON
    // cannot hold and a plain `Value` would silently turn into null (found by fuzzing).
    crate::strict::yaml(bytes).map(|decoded| decoded.value)
}

/// The text of a YAML body: UTF-8 and not blank.
pub(crate) fn document_text(bytes: &[u8]) -> Result<&str, DecodeError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| DecodeError(format!("invalid YAML: not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Err(DecodeError("invalid YAML: empty document".into()));
    }
    Ok(text)
}

/// Encodes `v` as a YAML document.
pub fn encode(v: &Value) -> Vec<u8> {
    // Serializing a `Value` cannot fail: keys are strings, numbers finite, and no I/O.
    serde_norway::to_string(v)
        .expect("a JSON value always serializes as YAML")
        .into_bytes()
}

/// Encodes `v` as it appears as one element of a top-level mapping's block sequence, as in
/// a list's `items:`: its document with `- ` before the first line and two spaces before every
/// further line that is not empty. The emitter indents nested content by two spaces per level
/// relative to its parent, never folds lines, and writes empty lines of block scalars without
/// indentation, so this is exactly what the emitter writes for `v` in that place.
pub fn encode_sequence_element(v: &Value) -> Vec<u8> {
    let doc = encode(v);
    let lines = doc.iter().filter(|&&b| b == b'\n').count();
    let mut out = Vec::with_capacity(doc.len() + 2 * lines + 2);
    out.extend_from_slice(b"- ");
    let mut first = true;
    for line in doc.split_inclusive(|&b| b == b'\n') {
        if !first && line != b"\n" {
            out.extend_from_slice(b"  ");
        }
        first = false;
        out.extend_from_slice(line);
    }
    out
}

/// Encodes a list: the members of `fields` in their order, with an `items` sequence (at the
/// place of a member named `items` in `fields`, whose value is ignored, else last) made of
/// elements already encoded by [`encode_sequence_element`]. The bytes equal [`encode`] of the
/// whole object, so a list can be assembled from encodings kept per object.
pub fn encode_list<I>(fields: &Map<String, Value>, items: I) -> Vec<u8>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let items: Vec<I::Item> = items.into_iter().collect();
    let (head, tail) = list_parts(fields, items.len());
    crate::joined(&head, &items, &tail)
}

/// What [`encode_list`] writes before a list's `count` items and after them, for a writer that
/// sends the items' bytes between the two a piece at a time.
pub fn list_parts(fields: &Map<String, Value>, count: usize) -> (Vec<u8>, Vec<u8>) {
    const ITEMS: &str = "items";
    let mut head = Vec::with_capacity(256);
    let mut members = Map::new();
    let mut before = true;
    for (k, v) in fields {
        if k == ITEMS && before {
            if !members.is_empty() {
                head.extend_from_slice(&encode(&Value::Object(std::mem::take(&mut members))));
            }
            before = false;
        } else if k != ITEMS {
            members.insert(k.clone(), v.clone());
        }
    }
    if before && !members.is_empty() {
        head.extend_from_slice(&encode(&Value::Object(std::mem::take(&mut members))));
    }
    head.extend_from_slice(if count == 0 {
        b"items: []\n"
    } else {
        b"items:\n"
    });
    let tail = if members.is_empty() {
        Vec::new()
    } else {
        encode(&Value::Object(members))
    };
    (head, tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip() {
        let v = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "a", "labels": {"x": "1"}}, "n": 3, "on": true, "l": [1, "b"]});
        let text = encode(&v);
        assert_eq!(decode(&text).unwrap(), v);
        assert!(String::from_utf8_lossy(&text).contains("kind: ServiceAccount"));
    }

    /// Values whose YAML exercises the emitter's styles: block scalars with empty and
    /// indented lines, quoted and long strings, nested sequences and mappings, empty
    /// containers, long keys and non-ASCII text.
    fn awkward_values() -> Vec<Value> {
        vec![
            json!({}),
            json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "true"}},
                "secrets": [{"name": "t"}], "imagePullSecrets": []}),
            json!({"data": {"script": "line one\n\n  indented\nlast\n",
                "trailing": "a\n\n\n", "leading": "\n\nx", "spaces": "a \n b",
                "tabs": "a\tb\n\tc", "crlf": "a\r\nb", "quote": "'x' \"y\"",
                "colon": "a: b", "dash": "- x", "hash": "# c", "empty": "", "blank": "  ",
                "yes": "yes", "null": "null", "num": "0123", "float": "1e3",
                "long": "word ".repeat(60), "unicode": "grüße 日本 \u{1F600}",
                "control": "bell\u{7}"}}),
            json!({"k".repeat(200): "long key", "multi\nline key": 1,
                "n": [1, -2, 3.5, 1e300, 0], "b": [true, false, null],
                "nested": [[1, [2, []]], {"a": [{"b": {"c": ["d\ne"]}}]}, {}]}),
            json!({"spec": {"list": [{"a": 1, "b": {"c": [{"d": "x\n  y\n"}]}}],
                "map": {"": "empty key", " ": "space key", "-": "dash"}}}),
        ]
    }

    /// A list assembled from per-item encodings is byte for byte the direct encoding.
    #[test]
    fn assembled_lists_equal_direct_encoding() {
        let items = awkward_values();
        for n in 0..=items.len() {
            let items = &items[..n];
            let whole = json!({"kind": "ConfigMapList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "42", "continue": "e30="}, "items": items});
            let parts: Vec<Vec<u8>> = items.iter().map(encode_sequence_element).collect();
            let mut fields = whole.as_object().unwrap().clone();
            let direct = encode(&whole);
            assert_eq!(
                String::from_utf8(encode_list(&fields, &parts)).unwrap(),
                String::from_utf8(direct.clone()).unwrap()
            );
            // `items` first, in the middle, or absent (last).
            for at in [0, 2] {
                let mut reordered = Map::new();
                for (i, (k, v)) in fields.iter().filter(|(k, _)| *k != "items").enumerate() {
                    if i == at {
                        reordered.insert("items".into(), json!(items));
                    }
                    reordered.insert(k.clone(), v.clone());
                }
                assert_eq!(
                    encode_list(&reordered, &parts),
                    encode(&Value::Object(reordered.clone()))
                );
            }
            fields.remove("items");
            assert_eq!(encode_list(&fields, &parts), direct);
            assert_eq!(decode(&encode_list(&fields, &parts)).unwrap(), whole);
        }
        assert_eq!(
            encode_list(&Map::new(), Vec::<Vec<u8>>::new()),
            encode(&json!({"items": []}))
        );
    }

    #[test]
    fn rejects_malformed() {
        assert!(decode(b"a: [1, 2").is_err());
        assert!(decode(b"").is_err());
        assert!(decode(b"\xff\xfe").is_err());
        assert!(decode(b"-.INF").is_err());
        assert!(decode(b"a: [.nan]").is_err());
        assert_eq!(decode(b"{\"a\": 1}").unwrap(), json!({"a": 1}));
    }
}
