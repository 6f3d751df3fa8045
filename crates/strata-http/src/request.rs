//! Request info: what an API path names (group, version, namespace, resource, name,
//! sub-resource), following the URI layout of spec §4.1.

/// The parts of a resource path. Discovery and other non-resource paths are not parsed here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub name: String,
    pub subresource: String,
    /// The deprecated `/watch/` form of a watch (`/api/v1/watch/namespaces/ns/serviceaccounts`).
    pub watch: bool,
}

/// Sub-resources of namespaces, which are not resource types inside a namespace.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestInfo {
    /// Parses `/api/<v>/…` and `/apis/<g>/<v>/…` paths that name a resource (at least one
    /// segment after the version). `None` for anything else.
    ///
    /// The path is percent-decoded first, as Go's HTTP server hands Kubernetes a decoded path:
    /// clients encode `:` in names (`system%3Aauth-delegator`). A malformed escape or one
    /// that decodes to something other than UTF-8 names nothing.
    pub fn parse(path: &str) -> Option<RequestInfo> {
        let path = percent_decode(path)?;
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if segments.iter().any(|s| s.is_empty()) {
            return None;
        }
        let (group, version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        if rest.is_empty() {
            return None;
        }
        let mut info = RequestInfo {
            group: group.into(),
            version: version.into(),
            ..Default::default()
        };
        let mut parts = rest;
        if parts[0] == "watch" && parts.len() > 1 {
            info.watch = true;
            parts = &parts[1..];
        }
        if parts[0] == "namespaces" && parts.len() > 1 {
            info.namespace = parts[1].into();
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
                parts = &parts[2..];
            } else {
                // `namespaces/<name>[/<sub>]`: the namespace object itself.
                info.resource = "namespaces".into();
                info.name = parts[1].into();
                info.namespace.clear();
                if parts.len() > 2 {
                    info.subresource = parts[2].into();
                }
                return (parts.len() <= 3).then_some(info);
            }
        }
        match parts {
            [resource] => info.resource = (*resource).into(),
            [resource, name] => {
                info.resource = (*resource).into();
                info.name = (*name).into();
            }
            [resource, name, sub] => {
                info.resource = (*resource).into();
                info.name = (*name).into();
                info.subresource = (*sub).into();
            }
            _ => return None,
        }
        Some(info)
    }
}

/// `path` with its `%XX` escapes decoded; `None` for a malformed escape or non-UTF-8 result.
fn percent_decode(path: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !path.contains('%') {
        return Some(std::borrow::Cow::Borrowed(path));
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_paths_are_decoded() {
        let info = RequestInfo::parse(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aauth-delegator",
        )
        .unwrap();
        assert_eq!(info.name, "system:auth-delegator");
        let info = RequestInfo::parse("/api/v1/namespaces/d%65fault/serviceaccounts").unwrap();
        assert_eq!(info.namespace, "default");
        assert_eq!(
            RequestInfo::parse("/api/v1/namespaces/a%zz/serviceaccounts"),
            None
        );
        assert_eq!(RequestInfo::parse("/api/v1/serviceaccounts/a%"), None);
        assert_eq!(RequestInfo::parse("/api/v1/serviceaccounts/%ff"), None);
    }

    fn p(path: &str) -> Option<(String, String, String, String)> {
        RequestInfo::parse(path).map(|i| (i.namespace, i.resource, i.name, i.subresource))
    }

    #[test]
    fn layouts() {
        let s = |a: &str, b: &str, c: &str, d: &str| {
            Some((a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        };
        assert_eq!(
            p("/api/v1/serviceaccounts"),
            s("", "serviceaccounts", "", "")
        );
        assert_eq!(p("/api/v1/namespaces"), s("", "namespaces", "", ""));
        assert_eq!(p("/api/v1/namespaces/x"), s("", "namespaces", "x", ""));
        assert_eq!(
            p("/api/v1/namespaces/x/status"),
            s("", "namespaces", "x", "status")
        );
        assert_eq!(
            p("/api/v1/namespaces/d/serviceaccounts"),
            s("d", "serviceaccounts", "", "")
        );
        assert_eq!(
            p("/api/v1/namespaces/d/serviceaccounts/a/token"),
            s("d", "serviceaccounts", "a", "token")
        );
        assert_eq!(p("/api/v1"), None);
        assert_eq!(p("/api/v1/namespaces/d/serviceaccounts/a/token/x"), None);
        assert_eq!(p("/api/v1//x"), None);
        let w = RequestInfo::parse("/api/v1/watch/namespaces/d/serviceaccounts/a").unwrap();
        assert!(w.watch);
        assert_eq!((w.namespace.as_str(), w.name.as_str()), ("d", "a"));
        assert!(!RequestInfo::parse("/api/v1/serviceaccounts").unwrap().watch);
        let g = RequestInfo::parse("/apis/rbac.authorization.k8s.io/v1/roles").unwrap();
        assert_eq!(
            (g.group.as_str(), g.resource.as_str()),
            ("rbac.authorization.k8s.io", "roles")
        );
    }
}
