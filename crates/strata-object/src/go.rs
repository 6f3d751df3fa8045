//! Values printed as Go prints them, for the error messages clients compare with Kubernetes':
//! `%q` strings, `%#v` string slices, error aggregates, numbers and `encoding/json`.

use serde_json::Value;

/// Go's `%q` of a string: double-quoted with Go escapes for quotes, backslashes and
/// non-printable characters.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: the ASCII space, and no control, other space,
/// or common invisible formatting character.
pub fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32, 0xAD | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2064 | 0xFEFF)
}

/// A string slice as Go's `%#v` prints it: `[]string{"a", "b"}`.
pub fn string_slice(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Several errors as Go's error aggregates print them: one alone, or `[a, b]`.
pub fn aggregate(items: &[String]) -> String {
    match items {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// `v` as Go's `encoding/json` writes a decoded value: compact, object keys sorted, `<`, `>`
/// and `&` escaped as HTML-safe `\u00XX`, numbers as Go writes them.
pub fn json(v: &Value) -> String {
    let mut out = String::new();
    write_json(v, &mut out);
    out
}

/// A JSON number as Go prints the value decoded from it: integers as they are; other numbers
/// as `fmt` prints a float64 (`%v`: exponent form below 1e-4 or from 1e21), or, `in_json`, as
/// `encoding/json` writes one (exponent form below 1e-6 or from 1e21).
pub fn number(n: &serde_json::Number, in_json: bool) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    let small = if in_json { 1e-6 } else { 1e-4 };
    if abs == 0.0 || (small..1e21).contains(&abs) {
        // Rust's shortest decimal form, which is Go's for these magnitudes.
        return format!("{f}");
    }
    // Shortest digits with an exponent, written as Go writes it: `1e+21`, `1.5e-07` (`fmt`),
    // `1e+21`, `1.5e-7` (`encoding/json`).
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if exp < 0 { '-' } else { '+' };
    if in_json {
        format!("{mantissa}e{sign}{}", exp.abs())
    } else {
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// Writes `v` as Go's `encoding/json` writes it compactly: object keys sorted, `<`, `>` and `&`
/// escaped as HTML-safe `\u00XX`, numbers as Go writes them.
fn write_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n, true)),
        Value::String(s) => json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(k, out);
                out.push(':');
                write_json(&m[k], out);
            }
            out.push('}');
        }
    }
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quote("tab\there\u{1}"), "\"tab\\there\\x01\"");
        assert_eq!(quote("ünïcode ✓"), "\"ünïcode ✓\"");
        assert_eq!(quote("\u{200b}"), "\"\\u200b\"");
        assert_eq!(string_slice(&["a", "b"]), "[]string{\"a\", \"b\"}");
        assert_eq!(aggregate(&["x".into()]), "x");
        assert_eq!(aggregate(&["x".into(), "y".into()]), "[x, y]");
    }
}
