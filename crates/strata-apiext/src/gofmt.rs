//! JSON values printed the way Kubernetes' Go code prints the `interface{}` values of a decoded
//! object in its messages: `%v` numbers, `%q` strings, `%#v` maps and slices, and Go's
//! `encoding/json` for the enum values it lists.

use serde_json::{Map, Number, Value};
use strata_object::go::quote;

/// A number as Go holds it after decoding JSON into `interface{}` the Kubernetes way: `int64`
/// when the literal is an integer that fits, else `float64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum GoNumber {
    Int(i64),
    Float(f64),
}

impl GoNumber {
    pub(crate) fn of(n: &Number) -> GoNumber {
        match n.as_i64() {
            Some(i) => GoNumber::Int(i),
            None => GoNumber::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            GoNumber::Int(i) => i as f64,
            GoNumber::Float(f) => f,
        }
    }

    /// Go's `%v`.
    pub(crate) fn to_go(self) -> String {
        match self {
            GoNumber::Int(i) => i.to_string(),
            GoNumber::Float(f) => float_v(f),
        }
    }
}

/// Go's `%v` (and `%#v`) of a `float64`: the shortest digits that read back the same value,
/// in exponent form (`1e+06`) when the decimal exponent is below -4 or at least 6.
pub(crate) fn float_v(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Shortest round-trip digits and the decimal exponent, from Rust's `{:e}`.
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{esign}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    let body = if point <= 0 {
        format!("0.{}{}", "0".repeat((-point) as usize), digits)
    } else if point as usize >= digits.len() {
        format!("{}{}", digits, "0".repeat(point as usize - digits.len()))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    format!("{sign}{body}")
}

/// The value of a field error as apimachinery's `ErrorBody` prints it: numbers and booleans
/// with `%v`, strings quoted, `null` as the quoted string `"null"`, maps and slices with `%#v`.
pub(crate) fn error_value(v: &Value) -> String {
    match v {
        Value::Null => quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => GoNumber::of(n).to_go(),
        Value::String(s) => quote(s),
        Value::Array(_) | Value::Object(_) => sharp_v(v),
    }
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{...}` with sorted keys).
pub(crate) fn sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => GoNumber::of(n).to_go(),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(sharp_v).collect();
            format!("[]interface {{}}{{{}}}", parts.join(", "))
        }
        Value::Object(map) => sharp_v_map(map),
    }
}

fn sharp_v_map(map: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let parts: Vec<String> = keys
        .into_iter()
        .map(|k| format!("{}:{}", quote(k), sharp_v(&map[k])))
        .collect();
    format!("map[string]interface {{}}{{{}}}", parts.join(", "))
}

/// Go's `encoding/json` of a decoded value: sorted keys, HTML-safe escapes, Go's float format.
pub(crate) fn go_json(v: &Value) -> String {
    strata_object::go::json(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_like_go() {
        assert_eq!(float_v(1.5), "1.5");
        assert_eq!(float_v(10.0), "10");
        assert_eq!(float_v(100000.0), "100000");
        assert_eq!(float_v(1e21), "1e+21");
        assert_eq!(float_v(123456789.0), "1.23456789e+08");
        assert_eq!(float_v(0.0001), "0.0001");
        assert_eq!(float_v(0.00001), "1e-05");
        assert_eq!(float_v(-2.5), "-2.5");
    }

    #[test]
    fn values_print_like_apimachinery() {
        assert_eq!(error_value(&json!("a")), "\"a\"");
        assert_eq!(error_value(&json!(null)), "\"null\"");
        assert_eq!(error_value(&json!(3)), "3");
        assert_eq!(
            error_value(&json!({"b": 1, "a": "x"})),
            "map[string]interface {}{\"a\":\"x\", \"b\":1}"
        );
        assert_eq!(
            error_value(&json!(["a", 1, null])),
            "[]interface {}{\"a\", 1, interface {}(nil)}"
        );
        assert_eq!(
            go_json(&json!({"b": [1, 2.5], "a": "<"})),
            r#"{"a":"\u003c","b":[1,2.5]}"#
        );
    }
}
