//! The CBOR codec (`application/cbor`, RFC 8949): one data item per body, with the encoding and
//! decoding rules of Kubernetes' CBOR serializer. It is not the `application/cbor-seq` watch
//! framing, which belongs to the HTTP layer.
//!
//! Encoding is deterministic: the self-described CBOR tag (55799) wraps the item, every string
//! (map keys too) is a byte string, map keys are sorted bytewise by their encoded form (RFC 8949
//! §4.2.1: shorter keys first), lengths are definite, and floats take the shortest of half,
//! single and double precision that keeps their value.
//!
//! Decoding is lenient in form and strict in meaning: with or without the 55799 tag, text or
//! byte strings, definite or indefinite lengths, other tags ignored; but map keys must be
//! strings and unique, strings UTF-8, integers within `i64`, floats finite, nesting at most
//! [`MAX_DEPTH`] deep, and nothing may follow the item. CBOR `undefined` decodes as null: the
//! decoder underneath cannot tell it apart (Kubernetes rejects it).
//!
//! ```
//! use serde_json::json;
//! use strata_codec::cbor;
//!
//! let v = json!({"kind": "ConfigMap", "apiVersion": "v1", "data": {"a": "1"}});
//! let bytes = cbor::encode(&v);
//! assert!(bytes.starts_with(&cbor::SELF_DESCRIBED));
//! assert_eq!(cbor::decode(&bytes)?, v);
//! // Deterministic: a map of 3 byte-string keys, shorter keys first, then bytewise:
//! // `data`, `kind`, `apiVersion`.
//! assert_eq!(&bytes[3..9], b"\xa3\x44data");
//!
//! assert!(cbor::decode(&[0xa1, 0x01, 0x02]).is_err()); // {1: 2}: keys must be strings
//! # Ok::<(), strata_codec::json::DecodeError>(())
//! ```

use std::cmp::Ordering;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use crate::json::DecodeError;

/// The self-described CBOR tag 55799 (RFC 8949 §3.4.6), the first bytes of every encoded body.
pub const SELF_DESCRIBED: [u8; 3] = [0xd9, 0xd9, 0xf7];

/// The deepest nesting decoded: arrays, maps and tags each count one level (the leading 55799
/// tag does not).
pub const MAX_DEPTH: usize = 64;

/// The tags of bignums (RFC 8949 §3.4.3): numbers, never strings, so they are not ignored.
const TAG_POSITIVE_BIGNUM: u64 = 2;
const TAG_NEGATIVE_BIGNUM: u64 = 3;

/// Encodes `v` as Kubernetes' CBOR serializer does (see the module docs). Every JSON value has
/// a CBOR form, so this cannot fail.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&SELF_DESCRIBED);
    // Writing into a `Vec` cannot fail, and `Item` never reports an error of its own.
    let _ = ciborium::ser::into_writer(&Item(v), &mut out);
    out
}

/// Encodes `v` as [`encode`] does but without the leading 55799 tag: the form of a value
/// nested in another, such as a list item kept for [`encode_list`].
pub fn encode_item(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let _ = ciborium::ser::into_writer(&Item(v), &mut out);
    out
}

/// Encodes a list: the members of `fields` plus an `items` array whose elements are already
/// encoded (each by [`encode_item`]). The bytes equal [`encode`] of the whole object, so a
/// list can be assembled from encodings kept per object. A member of `fields` named `items`
/// is replaced by the array.
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
    let mut keys: Vec<(&str, Option<&Value>)> = fields
        .iter()
        .filter(|(k, _)| k.as_str() != ITEMS)
        .map(|(k, v)| (k.as_str(), Some(v)))
        .collect();
    keys.push((ITEMS, None));
    keys.sort_unstable_by(|a, b| key_order(a.0, b.0));
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(&SELF_DESCRIBED);
    write_head(&mut head, MAJOR_MAP, keys.len() as u64);
    let mut tail = Vec::new();
    let mut out = &mut head;
    for (key, value) in keys {
        write_head(out, MAJOR_BYTES, key.len() as u64);
        out.extend_from_slice(key.as_bytes());
        match value {
            Some(v) => {
                let _ = ciborium::ser::into_writer(&Item(v), &mut *out);
            }
            None => {
                write_head(out, MAJOR_ARRAY, count as u64);
                out = &mut tail;
            }
        }
    }
    (head, tail)
}

const MAJOR_BYTES: u8 = 2;
const MAJOR_ARRAY: u8 = 4;
const MAJOR_MAP: u8 = 5;

/// Writes a data item's head (RFC 8949 §3): the major type and its argument in the shortest
/// form, as the serializer writes them.
fn write_head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend_from_slice(&[m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Decodes one CBOR data item into a value tree. Errors say `invalid CBOR: …`; no input panics.
pub fn decode(bytes: &[u8]) -> Result<Value, DecodeError> {
    let (skipped, body) = match bytes.strip_prefix(&SELF_DESCRIBED[..]) {
        Some(rest) => (SELF_DESCRIBED.len(), rest),
        None => (0, bytes),
    };
    if body.is_empty() {
        return Err(invalid("empty input"));
    }
    let mut rest = body;
    let decoded =
        ciborium::de::from_reader_with_recursion_limit::<Decoded, _>(&mut rest, MAX_DEPTH);
    let Decoded(value) = decoded.map_err(|e| describe(e, skipped))?;
    if !rest.is_empty() {
        let at = bytes.len() - rest.len();
        return Err(invalid(format!(
            "{} unexpected byte(s) after the data item, at byte {at}",
            rest.len()
        )));
    }
    Ok(value)
}

fn invalid(what: impl fmt::Display) -> DecodeError {
    DecodeError(format!("invalid CBOR: {what}"))
}

fn describe(e: ciborium::de::Error<std::io::Error>, skipped: usize) -> DecodeError {
    use ciborium::de::Error;
    match e {
        Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            invalid("unexpected end of input")
        }
        Error::Io(e) => invalid(e),
        Error::Syntax(at) => invalid(format!(
            "malformed data item or invalid UTF-8 text at byte {}",
            at + skipped
        )),
        Error::Semantic(Some(at), what) => invalid(format!("{what} (at byte {})", at + skipped)),
        Error::Semantic(None, what) => invalid(what),
        Error::RecursionLimitExceeded => invalid(format!("nesting deeper than {MAX_DEPTH} levels")),
    }
}

/// A value serialized the Kubernetes way: strings as byte strings, map keys sorted.
struct Item<'a>(&'a Value);

/// A string serialized as a CBOR byte string.
struct ByteString<'a>(&'a str);

impl Serialize for ByteString<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0.as_bytes())
    }
}

/// RFC 8949 §4.2.1 order for byte-string keys: the encoded head carries the length, so shorter
/// keys sort first, and keys of one length sort bytewise.
fn key_order(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

impl Serialize for Item<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => s.serialize_none(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    s.serialize_u64(u)
                } else if let Some(i) = n.as_i64() {
                    s.serialize_i64(i)
                } else {
                    // ciborium writes the shortest float width that keeps the value.
                    s.serialize_f64(n.as_f64().unwrap_or_default())
                }
            }
            Value::String(text) => s.serialize_bytes(text.as_bytes()),
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Item(item))?;
                }
                seq.end()
            }
            Value::Object(m) => {
                let mut entries: Vec<(&String, &Value)> = m.iter().collect();
                if !entries.is_sorted_by(|a, b| key_order(a.0, b.0).is_le()) {
                    entries.sort_unstable_by(|a, b| key_order(a.0, b.0));
                }
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(&ByteString(k), &Item(v))?;
                }
                map.end()
            }
        }
    }
}

/// The top-level decoded item.
struct Decoded(Value);

impl<'de> de::Deserialize<'de> for Decoded {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor).map(Decoded)
    }
}

/// Builds a JSON value from any CBOR item, enforcing the decoding rules of the module docs.
/// Nesting depth is counted by ciborium (`from_reader_with_recursion_limit`).
struct ItemVisitor;

impl<'de> DeserializeSeed<'de> for ItemVisitor {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

fn integer<E: de::Error>(n: i128) -> Result<Value, E> {
    i64::try_from(n)
        .map(Value::from)
        .map_err(|_| E::custom(format!("integer {n} is out of the int64 range")))
}

fn string_from_bytes<E: de::Error>(bytes: Vec<u8>) -> Result<String, E> {
    String::from_utf8(bytes).map_err(|e| E::custom(format!("byte string is not valid UTF-8: {e}")))
}

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a CBOR data item with a JSON form")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Value, E> {
        integer(i128::from(n))
    }

    fn visit_i128<E: de::Error>(self, n: i128) -> Result<Value, E> {
        integer(n)
    }

    fn visit_u128<E: de::Error>(self, n: u128) -> Result<Value, E> {
        match i128::try_from(n) {
            Ok(n) => integer(n),
            Err(_) => Err(E::custom(format!("integer {n} is out of the int64 range"))),
        }
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("floating-point value {f} is not finite")))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Value, E> {
        std::str::from_utf8(b)
            .map(|s| Value::String(s.to_owned()))
            .map_err(|e| E::custom(format!("byte string is not valid UTF-8: {e}")))
    }

    fn visit_byte_buf<E: de::Error>(self, b: Vec<u8>) -> Result<Value, E> {
        string_from_bytes(b).map(Value::String)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // The declared length is untrusted: reserve no more than a small bound up front.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(ItemVisitor)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(KeyVisitor)? {
            let value = map.next_value_seed(ItemVisitor)?;
            match out.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(slot) => {
                    return Err(de::Error::custom(format!(
                        "duplicate map key {:?}",
                        slot.key()
                    )));
                }
            }
        }
        Ok(Value::Object(out))
    }

    /// ciborium presents a tag as an enum variant holding (tag number, content).
    fn visit_enum<A: de::EnumAccess<'de>>(self, tagged: A) -> Result<Value, A::Error> {
        use de::VariantAccess;
        let (IgnoredAny, content) = tagged.variant()?;
        content.tuple_variant(2, TagVisitor)
    }
}

/// The number and content of a tag; the content is decoded as if untagged.
struct TagVisitor;

impl<'de> Visitor<'de> for TagVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tagged data item")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let tag: u64 = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("tag without a number"))?;
        if tag == TAG_POSITIVE_BIGNUM || tag == TAG_NEGATIVE_BIGNUM {
            // ciborium already turned bignums of up to 16 bytes into integers.
            return Err(de::Error::custom("bignum is out of the int64 range"));
        }
        seq.next_element_seed(ItemVisitor)?
            .ok_or_else(|| de::Error::custom("tag without content"))
    }
}

/// A map key: a text or byte string.
struct KeyVisitor;

impl<'de> DeserializeSeed<'de> for KeyVisitor {
    type Value = String;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a text or byte string as map key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
        Ok(s.to_owned())
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<String, E> {
        Ok(s)
    }

    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<String, E> {
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|e| E::custom(format!("byte string is not valid UTF-8: {e}")))
    }

    fn visit_byte_buf<E: de::Error>(self, b: Vec<u8>) -> Result<String, E> {
        string_from_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(bytes: &[u8]) -> String {
        match decode(bytes) {
            Ok(v) => panic!("{bytes:02x?} decoded to {v}, expected an error"),
            Err(DecodeError(message)) => {
                assert!(message.starts_with("invalid CBOR: "), "{message}");
                message
            }
        }
    }

    /// A list assembled from per-item encodings is byte for byte the direct encoding, for
    /// every head width of the array and of the strings around it.
    #[test]
    fn assembled_lists_equal_direct_encoding() {
        let item = |i: usize| {
            json!({"metadata": {"name": format!("sa-{i}"), "labels": {"a": "b"}, "n": i},
                "secrets": [{"name": "x".repeat(i % 300)}], "f": 1.5, "neg": -3, "on": true,
                "nothing": null})
        };
        for n in [0, 1, 23, 24, 255, 256, 1000] {
            let items: Vec<Value> = (0..n).map(item).collect();
            let whole = json!({"kind": "ServiceAccountList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "12", "continue": "abc", "remainingItemCount": 3},
                "items": items});
            let mut fields = whole.as_object().unwrap().clone();
            let encoded: Vec<Vec<u8>> = items.iter().map(encode_item).collect();
            assert_eq!(encode_list(&fields, &encoded), encode(&whole), "{n} items");
            fields.remove("items");
            assert_eq!(encode_list(&fields, &encoded), encode(&whole), "{n} items");
            assert_eq!(decode(&encode_list(&fields, &encoded)).unwrap(), whole);
        }
        let mut heads = Vec::new();
        for n in [0u64, 23, 24, 255, 256, 65535, 65536, 1 << 32] {
            heads.clear();
            write_head(&mut heads, MAJOR_ARRAY, n);
            let mut direct = Vec::new();
            ciborium::ser::into_writer(&ciborium::value::Value::Integer(n.into()), &mut direct)
                .unwrap();
            // The same argument under major type 0 (unsigned integer) takes the same width.
            assert_eq!(heads.len(), direct.len(), "{n}");
            assert_eq!(&heads[1..], &direct[1..], "{n}");
        }
    }

    #[test]
    fn encodes_byte_exact() {
        let v = json!({"list": [true, null, 1.5], "kind": "A", "x": -2, "n": 1});
        #[rustfmt::skip]
        let expected: &[u8] = &[
            0xd9, 0xd9, 0xf7,                   // tag 55799 (self-described CBOR)
            0xa4,                               // map of 4 pairs, keys sorted by encoding:
            0x41, b'n', 0x01,                   //   h'6e' ("n"): 1
            0x41, b'x', 0x21,                   //   h'78' ("x"): -2
            0x44, b'k', b'i', b'n', b'd',       //   h'6b696e64' ("kind"):
            0x41, b'A',                         //     h'41' ("A")
            0x44, b'l', b'i', b's', b't',       //   h'6c697374' ("list"):
            0x83, 0xf5, 0xf6, 0xf9, 0x3e, 0x00, //     [true, null, 1.5 as half float]
        ];
        assert_eq!(encode(&v), expected);
        assert_eq!(decode(expected).unwrap(), v);
    }

    #[test]
    fn floats_and_integers_take_the_shortest_form() {
        let cases: &[(Value, &[u8])] = &[
            (json!(0), &[0x00]),
            (json!(23), &[0x17]),
            (json!(24), &[0x18, 0x18]),
            (json!(1_000_000), &[0x1a, 0x00, 0x0f, 0x42, 0x40]),
            (json!(-1), &[0x20]),
            (
                json!(i64::MIN),
                &[0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
            (
                json!(i64::MAX),
                &[0x1b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
            (json!(0.0), &[0xf9, 0x00, 0x00]),
            (json!(-0.0), &[0xf9, 0x80, 0x00]),
            (json!(65504.0), &[0xf9, 0x7b, 0xff]),
            (json!(100000.0), &[0xfa, 0x47, 0xc3, 0x50, 0x00]),
            (
                json!(0.1),
                &[0xfb, 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a],
            ),
            (json!(false), &[0xf4]),
            (json!(""), &[0x40]),
            (json!([]), &[0x80]),
            (json!({}), &[0xa0]),
        ];
        for (v, body) in cases {
            let bytes = encode(v);
            assert_eq!(&bytes[..3], &SELF_DESCRIBED);
            assert_eq!(&bytes[3..], *body, "{v}");
            assert_eq!(&decode(&bytes).unwrap(), v);
            assert_eq!(&decode(body).unwrap(), v, "untagged {v}");
        }
    }

    #[test]
    fn keys_sort_shorter_first_then_bytewise() {
        let long = "k".repeat(24);
        let v = json!({ long.clone(): 1, "b": 2, "aa": 3, "a": 4, "B": 5 });
        let bytes = encode(&v);
        let mut expected = vec![0xd9, 0xd9, 0xf7, 0xa5];
        expected.extend([0x41, b'B', 0x05, 0x41, b'a', 0x04, 0x41, b'b', 0x02]);
        expected.extend([0x42, b'a', b'a', 0x03]);
        expected.extend([0x58, 24]);
        expected.extend(long.as_bytes());
        expected.push(0x01);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn round_trips() {
        let v = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": "kube-system", "uid": "6b1c",
                "labels": {"app.kubernetes.io/name": "x"}, "annotations": {"é": "ü ✓"},
                "creationTimestamp": "2024-05-01T10:00:00Z", "generation": 3},
            "secrets": [{"name": "a"}, {"name": "b"}],
            "automountServiceAccountToken": false,
            "nested": [[[]], {"a": {"b": null}}, 1e300, -7, 1.25, "🦀"]
        });
        let bytes = encode(&v);
        let back = decode(&bytes).unwrap();
        assert_eq!(back, v);
        assert_eq!(encode(&back), bytes);
    }

    #[test]
    fn accepts_text_strings_indefinite_lengths_and_tags() {
        // {"a": "b"} with text strings, untagged.
        assert_eq!(
            decode(&[0xa1, 0x61, b'a', 0x61, b'b']).unwrap(),
            json!({"a": "b"})
        );
        // Indefinite map, array, text and byte strings: {_ "k": [_ "x" "y", h'7a']}.
        let body = [
            0xbf, 0x61, b'k', 0x9f, 0x7f, 0x61, b'x', 0x61, b'y', 0xff, 0x5f, 0x41, b'z', 0xff,
            0xff, 0xff,
        ];
        assert_eq!(decode(&body).unwrap(), json!({"k": ["xy", "z"]}));
        // Tag 1 (epoch time) and tag 32 (URI) are ignored.
        assert_eq!(decode(&[0xc1, 0x1a, 0, 0, 0, 10]).unwrap(), json!(10));
        assert_eq!(decode(&[0xd8, 0x20, 0x61, b'u']).unwrap(), json!("u"));
        // A bignum that fits in int64 is that integer.
        assert_eq!(decode(&[0xc2, 0x41, 0x05]).unwrap(), json!(5));
        // Half-precision input.
        assert_eq!(decode(&[0xf9, 0x3c, 0x00]).unwrap(), json!(1.0));
    }

    #[test]
    fn rejects_malformed_and_unsupported_input() {
        assert!(err(b"").contains("empty"));
        assert!(err(&SELF_DESCRIBED).contains("empty"));
        // Truncated: a 2-byte string with one byte.
        assert!(err(&[0x42, b'a']).contains("end of input"));
        // Trailing bytes after the item.
        assert!(err(&[0x01, 0x02]).contains("after the data item"));
        assert!(err(&[0xd9, 0xd9, 0xf7, 0xa0, 0xa0]).contains("at byte 4"));
        // Reserved additional information 28.
        err(&[0x1c]);
        // A lone break.
        err(&[0xff]);
        // Invalid UTF-8 in a text string, a byte string and a byte-string key.
        err(&[0x62, 0xc3, 0x28]);
        assert!(err(&[0x42, 0xc3, 0x28]).contains("UTF-8"));
        assert!(err(&[0xa1, 0x41, 0xff, 0x01]).contains("UTF-8"));
        // Non-string map keys: an integer, an array.
        err(&[0xa1, 0x01, 0x02]);
        err(&[0xa1, 0x80, 0x02]);
        // Duplicate keys, also between text and byte forms of one string.
        assert!(err(&[0xa2, 0x61, b'a', 0x01, 0x61, b'a', 0x02]).contains("duplicate"));
        assert!(err(&[0xa2, 0x61, b'a', 0x01, 0x41, b'a', 0x02]).contains("duplicate"));
        // NaN and infinities, in every width.
        err(&[0xf9, 0x7e, 0x00]);
        err(&[0xf9, 0x7c, 0x00]);
        err(&[0xf9, 0xfc, 0x00]);
        err(&[0xfa, 0x7f, 0x80, 0x00, 0x00]);
        err(&[0xfb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0]);
        // Unsigned above i64::MAX, negative below i64::MIN, and large bignums.
        assert!(err(&[0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0]).contains("int64"));
        err(&[0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        err(&[0xc2, 0x49, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        err(&[
            0xc2, 0x51, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        // Simple values other than false, true, null (and undefined).
        err(&[0xf0]);
        err(&[0xf8, 0x20]);
    }

    #[test]
    fn nesting_is_limited() {
        let nested = |depth: usize| {
            let mut b = vec![0x81; depth - 1];
            b.push(0x80);
            b
        };
        assert!(decode(&nested(MAX_DEPTH)).is_ok());
        assert!(err(&nested(MAX_DEPTH + 1)).contains("nesting"));
        let mut tagged = SELF_DESCRIBED.to_vec();
        tagged.extend(nested(MAX_DEPTH));
        assert!(decode(&tagged).is_ok());
        // Tags count as levels; a long chain of them is no stack hazard.
        let mut chain = vec![0xc1; 10_000];
        chain.push(0x00);
        assert!(err(&chain).contains("nesting"));
        // Deep nesting with an indefinite array that is never closed.
        err(&vec![0x9f; 100_000]);
    }

    #[test]
    fn huge_declared_lengths_fail_without_allocating() {
        for head in [0x5b, 0x7b, 0x9b, 0xbb] {
            let mut b = vec![head];
            b.extend(u64::MAX.to_be_bytes());
            err(&b);
        }
    }
}
