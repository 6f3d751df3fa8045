//! Label and field selectors: the query-string grammars of `labelSelector` and `fieldSelector`,
//! and matching them against an object's labels and selectable fields.
//!
//! Matching works on lookups (`key → value`) rather than on [`Object`]s, so that a cache holding
//! only an object's labels and selectable fields can filter without decoding it.

use std::collections::BTreeSet;

use crate::Object;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed `labelSelector`: every requirement must hold. The empty selector matches everything.
///
/// ```
/// use serde_json::json;
/// use strata_object::{LabelSelector, Object};
///
/// let obj = Object::from_value(json!({"metadata": {"labels": {"app": "web", "tier": "2"}}}))?;
/// let matches = |s: &str| LabelSelector::parse(s).unwrap().matches(&obj);
/// assert!(matches("app=web,tier"));
/// assert!(matches("app in (web, api), !canary"));
/// assert!(matches("tier>1"));
/// assert!(!matches("app!=web"));
/// assert!(LabelSelector::parse("app in web").is_err());
/// # Ok::<(), strata_object::ObjectError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// A qualified name part: 1–63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn key_error(k: &str) -> Option<String> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => {
            crate::names::dns1123_subdomain_errors(prefix).is_empty() && qualified_part(name)
        }
        None => qualified_part(k),
    };
    (!ok).then(|| {
        format!(
            "unable to parse requirement: key: Invalid value: {k:?}: name part must consist of \
             alphanumeric characters, '-', '_' or '.', and must start and end with an \
             alphanumeric character"
        )
    })
}

fn value_error(v: &str) -> Option<String> {
    (!v.is_empty() && !qualified_part(v)).then(|| {
        format!(
            "unable to parse requirement: values[0]: Invalid value: {v:?}: a valid label must be \
             an empty string or consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character"
        )
    })
}

fn check_key(k: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty() {
        return Err("found '', expected: identifier".into());
    }
    match key_error(k) {
        Some(e) => Err(e),
        None => Ok(k.to_string()),
    }
}

fn check_value(v: &str) -> Result<String, String> {
    let v = v.trim();
    match value_error(v) {
        Some(e) => Err(e),
        None => Ok(v.to_string()),
    }
}

fn value_set(rest: &str) -> Result<BTreeSet<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '('"))?;
    inner.split(',').map(check_value).collect()
}

fn integer(v: &str) -> Result<i64, String> {
    v.trim().parse().map_err(|_| {
        format!(
            "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an \
             integer: {:?}",
            v.trim()
        )
    })
}

/// Finds ` in ` / ` notin ` as a whole word operator.
fn split_word<'a>(part: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let idx = part.find(word)?;
    let (k, rest) = part.split_at(idx);
    let rest = &rest[word.len()..];
    (k.ends_with(char::is_whitespace) && rest.trim_start().starts_with('(')).then_some((k, rest))
}

impl LabelSelector {
    /// Parses the grammar `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`,
    /// `k>n`, `k<n`, comma-separated. The error describes the first problem.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                return Err("found '', expected: identifier".into());
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(check_key(k)?)
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = part.split_once('=') {
                if v.contains('=') {
                    return Err(format!("found '=', expected: identifier in {part:?}"));
                }
                Requirement::Equals(check_key(k)?, check_value(v)?)
            } else if let Some((k, v)) = part.split_once('>') {
                Requirement::GreaterThan(check_key(k)?, integer(v)?)
            } else if let Some((k, v)) = part.split_once('<') {
                Requirement::LessThan(check_key(k)?, integer(v)?)
            } else if let Some((k, rest)) = split_word(part, "notin") {
                Requirement::NotIn(check_key(k)?, value_set(rest)?)
            } else if let Some((k, rest)) = split_word(part, "in") {
                Requirement::In(check_key(k)?, value_set(rest)?)
            } else if part.contains(char::is_whitespace) || part.contains(['(', ')']) {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    part.split_whitespace().nth(1).unwrap_or(part)
                ));
            } else {
                Requirement::Exists(check_key(part)?)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether the selector has no requirement (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether labels looked up by `label` satisfy every requirement.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, set) => label(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => label(k).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
            Requirement::GreaterThan(k, n) => label(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => label(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }

    /// Whether the object's labels satisfy every requirement.
    pub fn matches(&self, obj: &Object) -> bool {
        self.matches_with(|k| obj.labels().find(|(lk, _)| *lk == k).map(|(_, v)| v))
    }
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    field: String,
    equal: bool,
    value: String,
}

/// A parsed `fieldSelector`: every term must hold. The empty selector matches everything.
///
/// ```
/// use serde_json::json;
/// use strata_object::selector::UnknownFieldStyle;
/// use strata_object::{FieldSelector, Object};
///
/// let fields = ["metadata.name".to_string(), "metadata.namespace".to_string()];
/// let sel = FieldSelector::parse("metadata.name=web,metadata.namespace!=kube-system", &fields,
///     UnknownFieldStyle::NotKnown).unwrap();
/// assert_eq!(sel.required("metadata.name"), Some("web"));
///
/// let obj = Object::from_value(json!({"metadata": {"name": "web", "namespace": "default"}}))?;
/// assert!(sel.matches(&obj));
///
/// let err = FieldSelector::parse("spec.x=1", &fields, UnknownFieldStyle::NotKnown).unwrap_err();
/// assert!(err.contains("is not a known field selector"));
/// # Ok::<(), strata_object::ObjectError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<Term>);

/// Splits on an unescaped `sep`.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            cur.push(c);
            if let Some(n) = chars.next() {
                cur.push(n);
            }
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | ',' | '=')) => out.push(n),
                Some(n) => return Err(format!("invalid escape sequence: \\{n}")),
                None => return Err("unterminated escape sequence".into()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Finds the first unescaped occurrence of an operator.
fn find_operator(part: &str) -> Option<(usize, &'static str, bool)> {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => return Some((i, "!=", false)),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return Some((i, "==", true)),
            b'=' => return Some((i, "=", true)),
            _ => i += 1,
        }
    }
    None
}

/// How a type answers a field it cannot select on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownFieldStyle {
    /// `"x" is not a known field selector: only "a", "b"` (the generic conversion).
    NotKnown,
    /// `field label not supported: x` (types with their own conversion, like Namespace).
    NotSupported,
}

impl FieldSelector {
    /// Parses `k=v`, `k==v`, `k!=v` terms (values may escape `\,`, `\=`, `\\`); `fields` lists the
    /// selectable fields of the kind.
    pub fn parse(s: &str, fields: &[String], style: UnknownFieldStyle) -> Result<Self, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(terms));
        }
        for part in split_unescaped(s, ',') {
            let cant = || format!("invalid selector: '{s}'; can't understand '{part}'");
            let (idx, op, equal) = find_operator(&part).ok_or_else(cant)?;
            let field = part[..idx].trim().to_string();
            let value = unescape(&part[idx + op.len()..]).map_err(|_| cant())?;
            if field.is_empty() {
                return Err(cant());
            }
            if !fields.contains(&field) {
                return Err(match style {
                    UnknownFieldStyle::NotKnown => {
                        let known: Vec<String> = fields.iter().map(|f| format!("{f:?}")).collect();
                        format!(
                            "{field:?} is not a known field selector: only {}",
                            known.join(", ")
                        )
                    }
                    UnknownFieldStyle::NotSupported => {
                        format!("field label not supported: {field}")
                    }
                });
            }
            terms.push(Term {
                field,
                equal,
                value,
            });
        }
        Ok(Self(terms))
    }

    /// Whether the selector has no term (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value an equality term requires of `field`, if any (e.g. the name of a
    /// single-object watch).
    pub fn required(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|t| t.equal && t.field == field)
            .map(|t| t.value.as_str())
    }

    /// Whether fields looked up by `field` satisfy every term; a missing field reads as "".
    pub fn matches_with<'a>(&self, field: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0
            .iter()
            .all(|t| (field(&t.field).unwrap_or("") == t.value) == t.equal)
    }

    /// Whether the object's fields satisfy every term.
    pub fn matches(&self, obj: &Object) -> bool {
        self.matches_with(|f| field_value(obj, f))
    }
}

/// The string at a dotted field path of an object (`metadata.name`, `status.phase`).
pub fn field_value<'a>(obj: &'a Object, path: &str) -> Option<&'a str> {
    let mut parts = path.split('.');
    let mut cur = obj.as_map().get(parts.next()?)?;
    for p in parts {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: serde_json::Value) -> Object {
        Object::from_value(json!({
            "metadata": {"name": "a", "namespace": "ns", "labels": labels},
            "status": {"phase": "Active"}
        }))
        .unwrap()
    }

    #[test]
    fn label_selectors_match() {
        let o = obj(json!({"app": "web", "tier": "front", "n": "7"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("app!=db", true),
            ("app in (web, db)", true),
            ("app in (db)", false),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("n>5", true),
            ("n<5", false),
            ("example.com/x=", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn label_selectors_reject() {
        for sel in [
            "a=b=c",
            "app in web",
            ",",
            "app=",
            "-bad=x",
            "app=web!",
            "app foo (x)",
            "n>x",
        ] {
            if sel == "app=" {
                assert!(LabelSelector::parse(sel).is_ok(), "{sel}");
                continue;
            }
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let fields = vec![
            "metadata.name".to_string(),
            "metadata.namespace".to_string(),
        ];
        let style = UnknownFieldStyle::NotKnown;
        let p = |s: &str| FieldSelector::parse(s, &fields, style);
        assert!(p("metadata.name=a").unwrap().matches(&o));
        assert!(p("metadata.name==a,metadata.namespace=ns")
            .unwrap()
            .matches(&o));
        assert!(!p("metadata.namespace!=ns").unwrap().matches(&o));
        assert_eq!(
            p("metadata.name==a").unwrap().required("metadata.name"),
            Some("a")
        );
        assert_eq!(
            p("metadata.name=a\\,b").unwrap().required("metadata.name"),
            Some("a,b")
        );
        let e = p("spec.x=1").unwrap_err();
        assert_eq!(
            e,
            "\"spec.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert!(p("garbage").unwrap_err().starts_with("invalid selector"));
        let ns = FieldSelector::parse("x=1", &fields, UnknownFieldStyle::NotSupported);
        assert_eq!(ns.unwrap_err(), "field label not supported: x");
        assert_eq!(field_value(&o, "status.phase"), Some("Active"));
    }
}
