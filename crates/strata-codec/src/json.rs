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

/// Turns compact JSON text, given in pieces of any size, into the indented form
/// [`encode`]`(v, true)` writes for the same value: two spaces a level, `": "` after a key,
/// `{}` and `[]` for empty containers, nothing after the value. Whitespace between tokens is
/// dropped (so a compact answer's trailing newline goes), strings are copied as they are.
///
/// It keeps a few bytes of state, not the document: a list answered a chunk at a time stays
/// a chunk at a time when it is pretty-printed.
///
/// ```
/// use strata_codec::json::Indenter;
///
/// let mut out = Vec::new();
/// let mut indent = Indenter::default();
/// for piece in [&b"{\"a\":[1,{"[..], &b"}],\"b\":\"x,y\"}\n"[..]] {
///     indent.push(piece, &mut out);
/// }
/// indent.finish(&mut out);
/// assert_eq!(out, b"{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": \"x,y\"\n}");
/// ```
#[derive(Debug, Default)]
pub struct Indenter {
    depth: usize,
    in_string: bool,
    /// The last byte in a string was a backslash.
    escaped: bool,
    /// An opening bracket not yet written: whether its container is empty shows at the next
    /// token.
    open: Option<u8>,
}

impl Indenter {
    /// Appends the indented form of `input`, the next piece of the text, to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut i = 0;
        while i < input.len() {
            if self.in_string {
                // Copy the run up to the next quote or backslash at once.
                let run = input[i..]
                    .iter()
                    .position(|&b| self.escaped || b == b'"' || b == b'\\')
                    .unwrap_or(input.len() - i);
                out.extend_from_slice(&input[i..i + run]);
                i += run;
                if let Some(&b) = input.get(i) {
                    out.push(b);
                    if self.escaped {
                        self.escaped = false;
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else {
                        self.in_string = false;
                    }
                    i += 1;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            if b.is_ascii_whitespace() {
                continue;
            }
            if let Some(open) = self.open.take() {
                out.push(open);
                if b == closing(open) {
                    out.push(b);
                    continue;
                }
                self.depth += 1;
                self.line(out);
            }
            match b {
                b'{' | b'[' => self.open = Some(b),
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.line(out);
                    out.push(b);
                }
                b',' => {
                    out.push(b',');
                    self.line(out);
                }
                b':' => out.extend_from_slice(b": "),
                b'"' => {
                    out.push(b'"');
                    self.in_string = true;
                }
                _ => out.push(b),
            }
        }
    }

    /// Ends the text: writes an opening bracket still held back (only text cut short has one).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(open) = self.open.take() {
            out.push(open);
        }
    }

    fn line(&self, out: &mut Vec<u8>) {
        out.push(b'\n');
        out.resize(out.len() + 2 * self.depth, b' ');
    }
}

/// The bracket that closes `open`.
fn closing(open: u8) -> u8 {
    if open == b'{' {
        b'}'
    } else {
        b']'
    }
}

/// `compact` JSON text indented as [`Indenter`] does it, in one piece.
pub fn indent(compact: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(compact.len() + compact.len() / 2);
    let mut indenter = Indenter::default();
    indenter.push(compact, &mut out);
    indenter.finish(&mut out);
    out
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

    /// Indenting compact text gives what the pretty encoder gives for its value, however the
    /// text is cut into pieces.
    #[test]
    fn indenting_matches_the_pretty_encoder() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(18);
        fn value(rng: &mut rand::rngs::StdRng, depth: u32) -> Value {
            let pick = if depth > 4 {
                rng.random_range(0..5)
            } else {
                rng.random_range(0..7)
            };
            match pick {
                0 => Value::Null,
                1 => Value::Bool(rng.random()),
                2 => serde_json::json!(rng.random_range(-1000i64..1000)),
                3 => serde_json::json!(rng.random::<f64>() * 1e6),
                4 => {
                    let texts = [
                        "",
                        "a",
                        "x,y:z",
                        "{[\"]}",
                        "\\",
                        "line\nnext",
                        "é ☃",
                        " \t ",
                    ];
                    Value::String(texts[rng.random_range(0..texts.len())].to_string())
                }
                5 => Value::Array(
                    (0..rng.random_range(0..4))
                        .map(|_| value(rng, depth + 1))
                        .collect(),
                ),
                _ => Value::Object(
                    (0..rng.random_range(0..4))
                        .map(|i| (format!("k{i}\"{{"), value(rng, depth + 1)))
                        .collect(),
                ),
            }
        }
        for _ in 0..500 {
            let v = value(&mut rng, 0);
            let compact = encode(&v, false);
            let want = encode(&v, true);
            assert_eq!(
                String::from_utf8_lossy(&indent(&compact)),
                String::from_utf8_lossy(&want)
            );
            // The same text in pieces of random sizes, down to single bytes.
            let mut out = Vec::new();
            let mut indenter = Indenter::default();
            let mut rest = &compact[..];
            while !rest.is_empty() {
                let n = rng.random_range(1..=rest.len().min(7));
                indenter.push(&rest[..n], &mut out);
                rest = &rest[n..];
            }
            indenter.finish(&mut out);
            assert_eq!(out, want);
        }
    }

    /// Text that is not complete JSON is copied through without a panic.
    #[test]
    fn indenting_broken_text_does_not_panic() {
        for text in [&b"]]]}}"[..], b"{", b"[\"abc", b"\"\\", b"{\"a\":"] {
            let _ = indent(text);
        }
        assert_eq!(indent(b"{"), b"{");
    }
}
