//! Protobuf written straight from value trees: the bytes prost would produce for the message that
//! `JsonForm::from_json` builds, without building it. It is the encoding hot path (lists of
//! thousands of objects); it is not a decoder.
//!
//! Each message's fields come from the same `json_form!` declarations as the prost mapping, with
//! their field numbers. A value the mapping would reject makes the writer give up (`Reject`), and
//! the caller then runs the prost path, which reports the error in its own words. So the writer
//! must reject everything `from_json` rejects, and otherwise produce prost's bytes exactly: fields
//! in field-number order, optional fields written when set (even when empty or zero), map
//! entries in key order with an empty key or value left out of the entry, and minimal varints.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;

/// The value does not fit the message; the prost path will say why.
#[derive(Debug)]
pub struct Reject;

pub type Written = Result<(), Reject>;

/// A message written from its JSON form.
pub trait WriteProto {
    /// Appends the message's fields (without a key or length) for the JSON object `v`.
    fn write_proto(v: &Value, out: &mut Vec<u8>) -> Written;
}

/// Writes one field, given its number and its JSON value (`None` when absent or null).
pub type WriteFn = fn(&mut Vec<u8>, u32, Option<&Value>) -> Written;

/// How one field kind is written; `T` is the field's type in the generated message, which picks
/// the nested message type for `Obj`, `Objs` and the like.
pub trait WriteField<T> {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written;
}

/// The `WriteFn` of field kind `K` for the field that `_field` selects; the selector only names
/// the field's type.
pub fn writer<M, T, K: WriteField<T>>(_field: fn(&M) -> &T) -> WriteFn {
    K::write
}

/// The positions of `tags` in ascending order: the order prost writes fields in.
pub const fn tag_order<const N: usize>(tags: [u32; N]) -> [usize; N] {
    let mut order = [0usize; N];
    let mut i = 0;
    while i < N {
        order[i] = i;
        i += 1;
    }
    let mut i = 1;
    while i < N {
        let mut j = i;
        while j > 0 && tags[order[j - 1]] > tags[order[j]] {
            let t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
            j -= 1;
        }
        i += 1;
    }
    order
}

const VARINT: u32 = 0;
const LEN: u32 = 2;

#[inline]
pub fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[inline]
fn key(out: &mut Vec<u8>, tag: u32, wire_type: u32) {
    varint(out, u64::from(tag << 3 | wire_type));
}

#[inline]
pub fn bytes_field(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    key(out, tag, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Room left by default for a length that is not known yet: two bytes hold lengths below
/// 16 KiB, which nearly every nested message has.
const RESERVED: usize = 2;

/// A length-delimited field whose length is not written yet.
#[must_use]
pub struct Pending {
    at: usize,
    reserved: usize,
}

/// Starts a length-delimited field whose length [`end_len`] writes.
#[inline]
pub fn begin_len(out: &mut Vec<u8>, tag: u32) -> Pending {
    begin_len_reserving(out, tag, RESERVED)
}

/// [`begin_len`] leaving room for a length of `reserved` bytes: when the guess is right, the
/// body is never moved.
#[inline]
pub fn begin_len_reserving(out: &mut Vec<u8>, tag: u32, reserved: usize) -> Pending {
    key(out, tag, LEN);
    let at = out.len();
    out.resize(at + reserved, 0);
    Pending { at, reserved }
}

/// Writes the length of a field started by [`begin_len`] as a minimal varint, moving the body
/// when that varint is shorter or longer than the room left for it.
#[inline]
pub fn end_len(out: &mut Vec<u8>, pending: Pending) {
    let Pending { at, reserved } = pending;
    let body = at + reserved;
    let len = out.len() - body;
    if reserved == 2 && len < 0x80 {
        out[at] = len as u8;
        out.copy_within(body.., at + 1);
        out.truncate(out.len() - 1);
    } else if reserved == 2 && len < 0x4000 {
        out[at] = (len as u8) | 0x80;
        out[at + 1] = (len >> 7) as u8;
    } else {
        let need = varint_len(len as u64);
        let end = out.len();
        if need > reserved {
            out.resize(end + need - reserved, 0);
        }
        if need != reserved {
            out.copy_within(body..end, at + need);
        }
        out.truncate(at + need + len);
        let mut head = [0u8; 10];
        let mut n = len as u64;
        for byte in &mut head[..need] {
            *byte = (n as u8 & 0x7f) | 0x80;
            n >>= 7;
        }
        head[need - 1] &= 0x7f;
        out[at..at + need].copy_from_slice(&head[..need]);
    }
}

/// The bytes of a varint holding `n`.
#[inline]
pub fn varint_len(n: u64) -> usize {
    // 1 byte per started group of 7 bits, at least one.
    (64 - (n | 1).leading_zeros()).div_ceil(7) as usize
}

fn int_of(v: &Value) -> Result<i64, Reject> {
    v.as_i64().ok_or(Reject)
}

/// A string field (pointer or not: from JSON, both are set when present).
pub struct Str;
impl WriteField<Option<String>> for Str {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(Value::String(s)) => {
                bytes_field(out, tag, s.as_bytes());
                Ok(())
            }
            Some(_) => Err(Reject),
        }
    }
}

pub type PtrStr = Str;

/// An `int64` field.
pub struct Int;
impl WriteField<Option<i64>> for Int {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        if let Some(v) = v {
            let n = int_of(v)?;
            key(out, tag, VARINT);
            varint(out, n as u64);
        }
        Ok(())
    }
}

pub type PtrInt = Int;

/// An `int32` field: out of range is rejected; negative values take ten bytes, as in prost.
pub struct Int32;
impl WriteField<Option<i32>> for Int32 {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        if let Some(v) = v {
            let n = i32::try_from(int_of(v)?).map_err(|_| Reject)?;
            key(out, tag, VARINT);
            varint(out, i64::from(n) as u64);
        }
        Ok(())
    }
}

pub type PtrInt32 = Int32;

/// A `bool` field.
pub struct PtrBool;
impl WriteField<Option<bool>> for PtrBool {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(Value::Bool(b)) => {
                key(out, tag, VARINT);
                out.push(u8::from(*b));
                Ok(())
            }
            Some(_) => Err(Reject),
        }
    }
}

/// A repeated `string` field.
pub struct Strs;
impl WriteField<Vec<String>> for Strs {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(Value::Array(items)) => {
                for item in items {
                    let s = item.as_str().ok_or(Reject)?;
                    bytes_field(out, tag, s.as_bytes());
                }
                Ok(())
            }
            Some(_) => Err(Reject),
        }
    }
}

/// A `map<string, string>`: entries in key order, as prost writes a `BTreeMap`.
pub struct StrMap;
impl WriteField<std::collections::BTreeMap<String, String>> for StrMap {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        let m = match v {
            None => return Ok(()),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(Reject),
        };
        // Objects usually arrive sorted (Go writes maps sorted): then no copy is needed.
        if m.keys().is_sorted() {
            for (k, v) in m {
                map_entry(out, tag, k, v.as_str().ok_or(Reject)?.as_bytes());
            }
        } else {
            let mut entries = Vec::with_capacity(m.len());
            for (k, v) in m {
                entries.push((k.as_str(), v.as_str().ok_or(Reject)?));
            }
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (k, v) in entries {
                map_entry(out, tag, k, v.as_bytes());
            }
        }
        Ok(())
    }
}

/// A `map<string, bytes>` (`ConfigMap.binaryData`): base64 strings on the JSON side, decoded
/// and written in key order, as prost writes a `BTreeMap`.
pub struct BytesMap;
impl WriteField<std::collections::BTreeMap<String, Vec<u8>>> for BytesMap {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        let m = match v {
            None => return Ok(()),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(Reject),
        };
        let mut entries = Vec::with_capacity(m.len());
        for (k, v) in m {
            let text = v.as_str().ok_or(Reject)?;
            entries.push((k.as_str(), STANDARD.decode(text).map_err(|_| Reject)?));
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in entries {
            map_entry(out, tag, k, &v);
        }
        Ok(())
    }
}

/// `UserInfo.extra` (`map<string, ExtraValue>`): rare enough that a present value is left to
/// the prost path.
pub struct ExtraMap;
impl<T> WriteField<T> for ExtraMap {
    fn write(_out: &mut Vec<u8>, _tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(_) => Err(Reject),
        }
    }
}

/// One entry of a `map<string, string>`: a message with the key in field 1 and the value in
/// field 2, each left out when empty.
#[inline]
fn map_entry(out: &mut Vec<u8>, tag: u32, k: &str, v: &[u8]) {
    let part = |s: &[u8]| {
        if s.is_empty() {
            0
        } else {
            1 + varint_len(s.len() as u64) + s.len()
        }
    };
    key(out, tag, LEN);
    varint(out, (part(k.as_bytes()) + part(v)) as u64);
    if !k.is_empty() {
        bytes_field(out, 1, k.as_bytes());
    }
    if !v.is_empty() {
        bytes_field(out, 2, v);
    }
}

/// Seconds since the epoch of the canonical form `YYYY-MM-DDTHH:MM:SSZ`, the one the server
/// writes; `None` for anything else, which the general RFC 3339 parser then handles.
fn canonical_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        b[range].iter().try_fold(0i64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if year < 1000 || day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days from 1970-01-01 to the date (the proleptic Gregorian calendar, by eras of 400 years).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// A `metav1.Time`: an RFC 3339 string, written as whole seconds.
pub struct Time;
impl<T> WriteField<Option<T>> for Time {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        let s = match v {
            None => return Ok(()),
            Some(Value::String(s)) => s,
            Some(_) => return Err(Reject),
        };
        let seconds = match canonical_time(s) {
            Some(seconds) => seconds,
            None => strata_object::parse_time(s).ok_or(Reject)?.unix_timestamp(),
        };
        key(out, tag, LEN);
        varint(out, 1 + varint_len(seconds as u64) as u64);
        key(out, 1, VARINT);
        varint(out, seconds as u64);
        Ok(())
    }
}

/// A `metav1.MicroTime`: an RFC 3339 string, written as seconds and, when not zero, the
/// nanoseconds of its whole microseconds.
pub struct MicroTime;
impl<T> WriteField<Option<T>> for MicroTime {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        let s = match v {
            None => return Ok(()),
            Some(Value::String(s)) => s,
            Some(_) => return Err(Reject),
        };
        let t = strata_object::parse_time(s).ok_or(Reject)?;
        let seconds = t.unix_timestamp() as u64;
        let nanos = super::map::micro_nanos(t) as u64;
        let mut len = 1 + varint_len(seconds);
        if nanos != 0 {
            len += 1 + varint_len(nanos);
        }
        key(out, tag, LEN);
        varint(out, len as u64);
        key(out, 1, VARINT);
        varint(out, seconds);
        if nanos != 0 {
            key(out, 2, VARINT);
            varint(out, nanos);
        }
        Ok(())
    }
}

/// A `FieldsV1`: the JSON object's compact bytes in field 1.
pub struct Fields;
impl<T> WriteField<Option<T>> for Fields {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(v @ Value::Object(_)) => {
                let message = begin_len(out, tag);
                let raw = begin_len(out, 1);
                // Writing a value into a `Vec` cannot fail.
                serde_json::to_writer(&mut *out, v).map_err(|_| Reject)?;
                end_len(out, raw);
                end_len(out, message);
                Ok(())
            }
            Some(_) => Err(Reject),
        }
    }
}

fn message<T: WriteProto>(out: &mut Vec<u8>, tag: u32, v: &Value) -> Written {
    let at = begin_len(out, tag);
    T::write_proto(v, out)?;
    end_len(out, at);
    Ok(())
}

/// A nested message (pointer or not: from JSON, both are set when present).
pub struct Obj;
impl<T: WriteProto> WriteField<Option<T>> for Obj {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(v) => message::<T>(out, tag, v),
        }
    }
}

pub type PtrObj = Obj;

/// A repeated message.
pub struct Objs;
impl<T: WriteProto> WriteField<Vec<T>> for Objs {
    fn write(out: &mut Vec<u8>, tag: u32, v: Option<&Value>) -> Written {
        match v {
            None => Ok(()),
            Some(Value::Array(items)) => items.iter().try_for_each(|v| message::<T>(out, tag, v)),
            Some(_) => Err(Reject),
        }
    }
}

pub type Items = Objs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_minimal_varints_at_every_size() {
        for len in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000, 2_097_152] {
            let mut out = vec![0xaa];
            let at = begin_len(&mut out, 1);
            out.extend(std::iter::repeat_n(7u8, len));
            end_len(&mut out, at);
            let mut guessed = vec![0xaa];
            for reserved in 1..=5 {
                guessed.truncate(1);
                let at = begin_len_reserving(&mut guessed, 1, reserved);
                guessed.extend(std::iter::repeat_n(7u8, len));
                end_len(&mut guessed, at);
                assert_eq!(guessed, out, "length {len}, {reserved} byte(s) reserved");
            }
            let mut expected = vec![0xaa, 0x0a];
            varint(&mut expected, len as u64);
            expected.extend(std::iter::repeat_n(7u8, len));
            assert_eq!(out, expected, "length {len}");
            assert_eq!(varint_len(len as u64), expected.len() - len - 2);
        }
        assert_eq!(varint_len(u64::MAX), 10);
    }

    #[test]
    fn canonical_times_match_the_rfc3339_parser() {
        for s in [
            "1970-01-01T00:00:00Z",
            "2024-02-29T23:59:59Z",
            "2026-11-21T17:03:09Z",
            "2000-03-01T00:00:00Z",
            "1900-02-28T12:00:00Z",
            "1969-12-31T23:59:59Z",
            "9999-12-31T23:59:59Z",
        ] {
            let expected = strata_object::parse_time(s).unwrap().unix_timestamp();
            assert_eq!(canonical_time(s), Some(expected), "{s}");
        }
        for s in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-00-01T00:00:00Z",
            "2024-01-00T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:60:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01t00:00:00Z",
            "2024-01-01T00:00:00+00:00",
            "2024-01-01T00:00:00.5Z",
            "+024-01-01T00:00:00Z",
            "0999-01-01T00:00:00Z",
        ] {
            assert_eq!(canonical_time(s), None, "{s}");
        }
    }

    #[test]
    fn fields_are_ordered_by_number() {
        assert_eq!(tag_order([1, 2, 3, 6, 4, 5]), [0, 1, 2, 4, 5, 3]);
        assert_eq!(tag_order([1, 4, 3]), [0, 2, 1]);
        assert_eq!(tag_order::<0>([]), [0usize; 0]);
    }
}
