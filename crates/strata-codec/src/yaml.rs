//! The YAML codec (`application/yaml`): documents decode to the same value trees as JSON, and
//! values encode as block YAML.

use serde_json::Value;

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
