//! URLs for the CEL `url` library: Go's `url.ParseRequestURI` (an absolute URI or an absolute
//! path, no fragment) and the accessors Kubernetes exposes.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Url {
    raw: String,
    scheme: String,
    host: String,
    path: String,
    query: String,
}

impl Url {
    /// Parses `s` as Go's `url.ParseRequestURI` does; the error is Go's text.
    pub fn parse(s: &str) -> Result<Url, String> {
        let fail = |msg: &str| Err(format!("parse {}: {msg}", go_quote(s)));
        if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return fail("net/url: invalid control character in URL");
        }
        if s.is_empty() {
            return fail("empty url");
        }
        // Kubernetes re-parses with `url.Parse`, which sets a fragment apart.
        let without_fragment = s.split_once('#').map_or(s, |(before, _)| before);
        let (rest, query) = match without_fragment.split_once('?') {
            Some((r, q)) => (r, q.to_string()),
            None => (s, String::new()),
        };
        let mut url = Url {
            raw: s.to_string(),
            scheme: String::new(),
            host: String::new(),
            path: String::new(),
            query,
        };
        if rest.starts_with('/') && !rest.starts_with("//") {
            url.path = rest.to_string();
            return url.checked_path(s);
        }
        let Some(colon) = rest.find(':') else {
            return fail("invalid URI for request");
        };
        let scheme = &rest[..colon];
        let valid_scheme = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !valid_scheme {
            return if scheme.is_empty() {
                fail("missing protocol scheme")
            } else {
                fail("first path segment in URL cannot contain colon")
            };
        }
        url.scheme = scheme.to_ascii_lowercase();
        let after = &rest[colon + 1..];
        let Some(authority_and_path) = after.strip_prefix("//") else {
            if after.starts_with('/') {
                url.path = after.to_string();
                return url.checked_path(s);
            }
            return fail("invalid URI for request");
        };
        let (authority, path) = match authority_and_path.find('/') {
            Some(i) => (&authority_and_path[..i], &authority_and_path[i..]),
            None => (authority_and_path, ""),
        };
        let host = match authority.rfind('@') {
            Some(i) => &authority[i + 1..],
            None => authority,
        };
        if let Err(msg) = check_host(host) {
            return fail(&msg);
        }
        url.host = host.to_string();
        url.path = path.to_string();
        url.checked_path(s)
    }

    fn checked_path(self, raw: &str) -> Result<Url, String> {
        if !valid_escapes(&self.path) {
            let bad = bad_escape(&self.path);
            return Err(format!(
                "parse {}: invalid URL escape {}",
                go_quote(raw),
                go_quote(&bad)
            ));
        }
        Ok(self)
    }

    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The host, with the port when one is given (IPv6 literals keep their brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host without port or IPv6 brackets.
    pub fn hostname(&self) -> &str {
        let (host, _) = split_host_port(&self.host);
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    pub fn port(&self) -> &str {
        split_host_port(&self.host).1
    }

    pub fn escaped_path(&self) -> &str {
        &self.path
    }

    /// The query parameters, each name with its values in order.
    pub fn query(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for part in self.query.split('&') {
            if part.is_empty() || part.contains(';') {
                continue;
            }
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let (Some(k), Some(v)) = (unescape_query(k), unescape_query(v)) else {
                continue;
            };
            out.entry(k).or_default().push(v);
        }
        out
    }
}

fn go_quote(s: &str) -> String {
    strata_object::go::quote(s)
}

fn split_host_port(host: &str) -> (&str, &str) {
    let colon = if host.starts_with('[') {
        host.find("]:").map(|i| i + 1)
    } else {
        host.rfind(':')
    };
    match colon {
        Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => {
            (&host[..i], &host[i + 1..])
        }
        _ => (host, ""),
    }
}

fn check_host(host: &str) -> Result<(), String> {
    if let Some(rest) = host.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return Err("missing ']' in host".into());
        };
        let after = &rest[end + 1..];
        if !after.is_empty() && !valid_port(after) {
            return Err(format!("invalid port {} after host", go_quote(after)));
        }
        return Ok(());
    }
    if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
    }
    if host.chars().any(|c| {
        c.is_whitespace() || matches!(c, '<' | '>' | '"' | '{' | '}' | '|' | '\\' | '^' | '`')
    }) {
        return Err(format!("invalid character {} in host name", go_quote(host)));
    }
    Ok(())
}

fn valid_port(p: &str) -> bool {
    p.strip_prefix(':')
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

fn valid_escapes(s: &str) -> bool {
    bad_escape(s).is_empty()
}

fn bad_escape(s: &str) -> String {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let ok = b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
            if !ok {
                let end = (i + 3).min(b.len());
                return String::from_utf8_lossy(&b[i..end]).into_owned();
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    String::new()
}

fn unescape_query(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_uris() {
        let u = Url::parse("https://user@example.com:8443/a%20b/c?x=1&x=2&y=a+b").unwrap();
        assert_eq!(u.scheme(), "https");
        assert_eq!(u.host(), "example.com:8443");
        assert_eq!(u.hostname(), "example.com");
        assert_eq!(u.port(), "8443");
        assert_eq!(u.escaped_path(), "/a%20b/c");
        let q = u.query();
        assert_eq!(q["x"], vec!["1", "2"]);
        assert_eq!(q["y"], vec!["a b"]);
        let v6 = Url::parse("http://[::1]:80/").unwrap();
        assert_eq!(v6.host(), "[::1]:80");
        assert_eq!(v6.hostname(), "::1");
        assert_eq!(v6.port(), "80");
        let path = Url::parse("/just/a/path").unwrap();
        assert_eq!(path.scheme(), "");
        assert_eq!(path.escaped_path(), "/just/a/path");
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert!(Url::parse("").is_err());
        assert!(Url::parse("example.com").is_err());
        assert!(Url::parse("relative/path").is_err());
        assert!(Url::parse("https://example.com:port/").is_err());
        assert!(Url::parse("https://example.com/%zz").is_err());
        assert!(Url::parse("mailto:someone@example.com").is_err());
    }
}
