//! Media types: parsing `Content-Type` and `Accept` (RFC 9110 lists with q-values) and choosing
//! what to serve.

use std::fmt;

/// A parsed media type: `type/subtype` with lower-cased names and its parameters in order.
///
/// ```
/// use strata_codec::MediaType;
///
/// let m = MediaType::parse("Application/JSON; as=Table; v=v1; g=meta.k8s.io").unwrap();
/// assert_eq!(m.essence, "application/json");
/// assert_eq!(m.param("as"), Some("Table"));
/// assert_eq!(m.param("charset"), None);
/// assert_eq!(m.to_string(), "application/json;as=Table;v=v1;g=meta.k8s.io");
/// assert!(MediaType::parse("json").is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaType {
    /// `type/subtype`, lower-cased (`application/json`).
    pub essence: String,
    /// The parameters in header order, names lower-cased and values unquoted.
    pub params: Vec<(String, String)>,
}

impl MediaType {
    /// Parses one media type; `None` when it is not of the form `type/subtype[;k=v]*`.
    pub fn parse(s: &str) -> Option<MediaType> {
        let mut parts = split_unquoted(s, ';').into_iter();
        let essence = parts.next()?.trim().to_ascii_lowercase();
        let (ty, sub) = essence.split_once('/')?;
        if ty.is_empty() || sub.is_empty() || !is_token(ty) || !is_token(sub) {
            return None;
        }
        let mut params = Vec::new();
        for p in parts {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            let (k, v) = p.split_once('=')?;
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim().trim_matches('"').to_string();
            if !is_token(&k) {
                return None;
            }
            params.push((k, v));
        }
        Some(MediaType { essence, params })
    }

    /// The value of parameter `name` (lower-case), if present.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for MediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.essence)?;
        for (k, v) in &self.params {
            write!(f, ";{k}={v}")?;
        }
        Ok(())
    }
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn split_unquoted(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut quoted = false;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// One clause of an `Accept` header.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaRange {
    /// The media type or range (`*/*`, `application/*`) with its parameters, `q` left out.
    pub media: MediaType,
    /// Quality in thousandths (1000 = q=1).
    pub quality: u16,
}

impl MediaRange {
    /// Whether this range covers the concrete type `essence` (`*/*`, `type/*` or exact).
    pub fn matches(&self, essence: &str) -> bool {
        let e = self.media.essence.as_str();
        if e == "*/*" || e == essence {
            return true;
        }
        match (e.strip_suffix("/*"), essence.split_once('/')) {
            (Some(ty), Some((ety, _))) => ty == ety,
            _ => false,
        }
    }
}

/// Parses an `Accept` header into clauses ordered by preference (highest quality first, ties in
/// header order). Clauses that do not parse and clauses with `q=0` are dropped. An empty or
/// missing header means `*/*`.
///
/// ```
/// use strata_codec::media::parse_accept;
///
/// let ranges = parse_accept(
///     "application/json;q=0.5, application/vnd.kubernetes.protobuf, text/html;q=0, */*;q=0.1",
/// );
/// let order: Vec<_> = ranges.iter().map(|r| (r.media.essence.as_str(), r.quality)).collect();
/// assert_eq!(order, [
///     ("application/vnd.kubernetes.protobuf", 1000),
///     ("application/json", 500),
///     ("*/*", 100),
/// ]);
/// // What to serve: the first clause that covers a type the server has.
/// let served = ["application/json", "application/yaml"];
/// let choice = ranges.iter().find_map(|r| served.iter().find(|t| r.matches(t)));
/// assert_eq!(choice, Some(&"application/json"));
///
/// assert_eq!(parse_accept("")[0].media.essence, "*/*");
/// ```
pub fn parse_accept(header: &str) -> Vec<MediaRange> {
    if header.trim().is_empty() {
        return vec![MediaRange {
            media: MediaType {
                essence: "*/*".into(),
                params: Vec::new(),
            },
            quality: 1000,
        }];
    }
    let mut ranges: Vec<MediaRange> = split_unquoted(header, ',')
        .into_iter()
        .filter_map(|clause| {
            let mut media = MediaType::parse(clause)?;
            let mut quality = 1000;
            if let Some(pos) = media.params.iter().position(|(k, _)| k == "q") {
                let (_, q) = media.params.remove(pos);
                quality = parse_quality(&q)?;
            }
            Some(MediaRange { media, quality })
        })
        .filter(|r| r.quality > 0)
        .collect();
    // A stable sort keeps header order among equal qualities.
    ranges.sort_by_key(|r| std::cmp::Reverse(r.quality));
    ranges
}

fn parse_quality(q: &str) -> Option<u16> {
    let f: f64 = q.trim().parse().ok()?;
    if !(0.0..=1.0).contains(&f) {
        return None;
    }
    Some((f * 1000.0).round() as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubectl_table_accept() {
        let r = parse_accept(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
        );
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].media.param("as"), Some("Table"));
        assert_eq!(r[1].media.param("v"), Some("v1beta1"));
        assert!(r[2].media.params.is_empty());
    }

    #[test]
    fn quality_orders_and_wildcards_match() {
        let r = parse_accept("text/plain;q=0.5, application/*;q=0.9, */*;q=0");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].media.essence, "application/*");
        assert!(r[0].matches("application/json"));
        assert!(!r[0].matches("text/plain"));
        assert!(parse_accept("")
            .iter()
            .any(|r| r.matches("application/yaml")));
    }

    #[test]
    fn content_type_parameters() {
        let m = MediaType::parse("Application/JSON; charset=utf-8").unwrap();
        assert_eq!(m.essence, "application/json");
        assert_eq!(m.param("charset"), Some("utf-8"));
        assert!(MediaType::parse("garbage").is_none());
        assert!(MediaType::parse("a/b;c").is_none());
    }
}
