//! What a request asks to do, in the terms authorizers use (Kubernetes' request attributes),
//! and who it asks as (impersonation).

use http::Method;
use strata_auth::authz::{Attributes, Authorizer};
use strata_auth::UserInfo;
use strata_object::Status;

use crate::query::Query;
use crate::request::RequestInfo;

/// The attributes of a request for `path`.
pub fn attributes(method: &Method, path: &str, query: &Query, user: &UserInfo) -> Attributes {
    let Some(info) = RequestInfo::parse(path) else {
        return Attributes {
            user: user.clone(),
            verb: method.as_str().to_ascii_lowercase(),
            path: path.to_string(),
            resource_request: false,
            ..Default::default()
        };
    };
    let collection = info.name.is_empty();
    let watching = info.watch || query.bool("watch");
    let verb = match *method {
        Method::GET | Method::HEAD if watching => "watch",
        Method::GET | Method::HEAD if collection => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        _ => "",
    };
    let verb = if verb.is_empty() {
        method.as_str().to_ascii_lowercase()
    } else {
        verb.to_string()
    };
    let mut name = info.name.clone();
    if name.is_empty() && (verb == "list" || verb == "watch") {
        // A list or watch of one name (as kubectl's delete and wait make) is about that name.
        if let Some(n) = single_name(&query.string("fieldSelector")) {
            name = n;
        }
    }
    // A namespace's own requests are checked in that namespace.
    let namespace = if info.group.is_empty() && info.resource == "namespaces" {
        name.clone()
    } else {
        info.namespace.clone()
    };
    Attributes {
        user: user.clone(),
        verb,
        namespace,
        api_group: info.group,
        api_version: info.version,
        resource: info.resource,
        subresource: info.subresource,
        name,
        resource_request: true,
        path: path.to_string(),
    }
}

/// Applies `Impersonate-User`, `Impersonate-Group` and `Impersonate-Uid`: the requester
/// needs the verb `impersonate` on each (`users`, `groups`, `uids`, or `serviceaccounts` in
/// the account's namespace for a ServiceAccount's name), and the request then runs as the
/// impersonated user (with `system:authenticated`). Without the headers, `user` is returned.
pub fn impersonate(
    authorizer: &dyn Authorizer,
    headers: &http::HeaderMap,
    user: UserInfo,
) -> Result<UserInfo, Status> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(String::from)
            .collect()
    };
    let names = values("impersonate-user");
    let groups = values("impersonate-group");
    let uids = values("impersonate-uid");
    if names.is_empty() {
        if groups.is_empty() && uids.is_empty() {
            return Ok(user);
        }
        return Err(Status::bad_request(
            "requested impersonation of groups or a uid without impersonating a user",
        ));
    }
    let name = names[0].clone();
    let check = |resource: &str, namespace: &str, target: &str| {
        let attrs = Attributes {
            user: user.clone(),
            verb: "impersonate".into(),
            namespace: namespace.into(),
            api_group: if resource == "uids" {
                "authentication.k8s.io".into()
            } else {
                String::new()
            },
            resource: resource.into(),
            name: target.into(),
            resource_request: true,
            ..Default::default()
        };
        strata_auth::authz::check(authorizer, &attrs)
    };
    match name
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, sa)) => check("serviceaccounts", ns, sa)?,
        None => check("users", "", &name)?,
    }
    for g in &groups {
        check("groups", "", g)?;
    }
    for u in &uids {
        check("uids", "", u)?;
    }
    let mut impersonated = UserInfo {
        name,
        uid: uids.first().cloned().unwrap_or_default(),
        groups,
        ..Default::default()
    };
    if let Some((ns, _)) = impersonated
        .name
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        let ns = ns.to_string();
        for g in [
            strata_auth::SERVICE_ACCOUNTS.to_string(),
            format!("system:serviceaccounts:{ns}"),
        ] {
            if !impersonated.groups.contains(&g) {
                impersonated.groups.push(g);
            }
        }
    }
    if impersonated.name != strata_auth::ANONYMOUS
        && !impersonated.in_group(strata_auth::AUTHENTICATED)
    {
        impersonated.groups.push(strata_auth::AUTHENTICATED.into());
    }
    Ok(impersonated)
}

/// `x` when the field selector is exactly `metadata.name=x` (or `==x`).
fn single_name(selector: &str) -> Option<String> {
    let rest = selector.strip_prefix("metadata.name")?;
    let value = rest.strip_prefix("==").or_else(|| rest.strip_prefix('='))?;
    (!value.is_empty() && !value.contains(',')).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            ..Default::default()
        }
    }

    #[test]
    fn verbs_and_names_follow_kubernetes_request_info() {
        let q = |s: &str| Query::parse(Some(s));
        let a = attributes(
            &Method::GET,
            "/api/v1/namespaces/ns/serviceaccounts",
            &q(""),
            &user(),
        );
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "ns", "serviceaccounts")
        );
        let a = attributes(
            &Method::GET,
            "/api/v1/namespaces/ns/serviceaccounts",
            &q("watch=true&fieldSelector=metadata.name%3Dx"),
            &user(),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "x"));
        let a = attributes(
            &Method::POST,
            "/api/v1/namespaces/ns/serviceaccounts/x/token",
            &q(""),
            &user(),
        );
        assert_eq!(
            (a.verb.as_str(), a.subresource.as_str()),
            ("create", "token")
        );
        let a = attributes(
            &Method::DELETE,
            "/api/v1/namespaces/ns/serviceaccounts",
            &q(""),
            &user(),
        );
        assert_eq!(a.verb, "deletecollection");
        let a = attributes(
            &Method::PUT,
            "/api/v1/namespaces/team/finalize",
            &q(""),
            &user(),
        );
        assert_eq!(
            (
                a.verb.as_str(),
                a.namespace.as_str(),
                a.resource.as_str(),
                a.subresource.as_str()
            ),
            ("update", "team", "namespaces", "finalize")
        );
        let a = attributes(&Method::GET, "/apis", &q(""), &user());
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis"));
    }
}
