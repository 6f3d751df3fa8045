//! The JSON codec: compact output with one trailing newline (or two-space indentation when
//! pretty), and decoding errors worded for clients.
//!
//! ```
//! use strata_codec::json;
//!
//! let v = json::decode(br#"{"kind":"ConfigMap","apiVersion":"v1","data":{"a":"1"}}"#)?;
//! assert_eq!(v["data"]["a"], "1");
//! assert_eq!(json::encode(&v, false), b"{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"data\":{\"a\":\"1\"}}\n");
//! assert!(json::encode(&v, true).starts_with(b"{\n  \"kind\": \"ConfigMap\""));
//!
//! let err = json::decode(b"{\"data\": ").unwrap_err();
//! assert_eq!(err.to_string(), "unexpected end of JSON input");
//! # Ok::<(), json::DecodeError>(())
//! ```

use serde_json::Value;

/// Why a body could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct DecodeError(
    /// The message, as a client sees it in the `Status` of a rejected request.
    pub String,
);

/// Parses a JSON document.
pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    from_slice(bytes).map_err(|e| decode_error(&e))
}

/// Parses a JSON document into a value, giving what `serde_json::from_slice` gives (the same
/// value, the same error) in less time: for callers that word errors themselves, such as the
/// watch cache reading stored objects.
pub fn from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    match crate::parse::parse(bytes, false) {
        Some(value) => Ok(value),
        None => serde_json::from_slice(bytes),
    }
}

/// A JSON parse error worded for clients.
pub(crate) fn decode_error(e: &serde_json::Error) -> DecodeError {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Eof => "unexpected end of JSON input".to_string(),
        Category::Syntax => format!("invalid JSON: {e}"),
        Category::Data => format!("invalid value: {e}"),
        Category::Io => format!("read error: {e}"),
    };
    DecodeError(what)
}

/// Encodes `v` as Kubernetes' JSON serializer does: compact with a trailing newline, or
/// indented by two spaces without one when `pretty`.
pub fn encode(v: &Value, pretty: bool) -> Vec<u8> {
    if pretty {
        serde_json::to_vec_pretty(v).expect(INFALLIBLE)
    } else {
        let mut out = compact(v);
        out.push(b'\n');
        out
    }
}

/// Serializing a `Value` into memory cannot fail: its keys are strings, its numbers finite, and
/// there is no I/O. A failure would be a bug in serde_json, not a bad input.
const INFALLIBLE: &str = "a JSON value always serializes";

/// `v` as compact JSON, nothing after it: the stored form, hashes, watch event members.
pub fn compact(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect(INFALLIBLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let v = decode(br#"{"a":[1,2]}"#).unwrap();
        assert_eq!(encode(&v, false), b"{\"a\":[1,2]}\n");
        assert_eq!(encode(&v, true), b"{\n  \"a\": [\n    1,\n    2\n  ]\n}");
        assert!(decode(b"{").is_err());
        assert!(decode(b"").is_err());
    }

    /// Found by fuzzing: a long mantissa must parse to the nearest double, or the value changes
    /// when it is encoded and decoded again.
    #[test]
    fn floats_round_trip() {
        let text = "5555555555500000000000011500213046996772741";
        let v = decode(text.as_bytes()).unwrap();
        assert_eq!(decode(&encode(&v, false)).unwrap(), v);
        assert_eq!(v.as_f64(), text.parse::<f64>().ok());
    }
}
