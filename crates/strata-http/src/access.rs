//! What a request asks to do, in the terms authorizers use (Kubernetes' request attributes),
//! and the escalation check of writes to roles and bindings.

use std::sync::Arc;

use http::Method;
use serde_json::Value;
use strata_auth::authz::{Attributes, Authorizer, Decision};
use strata_auth::rbac::{RbacAuthorizer, Rule, GROUP};
use strata_auth::UserInfo;
use strata_object::{Object, Status};
use strata_registry::{Admit, RegisteredType};

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

fn rules_text(rules: &[Rule]) -> String {
    let list = |name: &str, v: &[String]| {
        if v.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
            format!("{name}:[{}]", quoted.join(" "))
        }
    };
    rules
        .iter()
        .map(|r| {
            let parts: Vec<String> = [
                list("APIGroups", &r.api_groups),
                list("Resources", &r.resources),
                list("ResourceNames", &r.resource_names),
                list("NonResourceURLs", &r.non_resource_urls),
                list("Verbs", &r.verbs),
            ]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
            format!("{{{}}}", parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn escalation(
    info: &strata_object::ResourceType,
    obj: &Object,
    user: &UserInfo,
    missing: &[Rule],
) -> Status {
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    Status::forbidden(
        &info.group,
        &info.resource,
        obj.name(),
        &format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            groups.join(" "),
            rules_text(missing)
        ),
    )
}

/// The check a write to a Role, ClusterRole, RoleBinding or ClusterRoleBinding must pass: a
/// user may grant only permissions they hold, unless allowed to `escalate` (roles) or to
/// `bind` the role named (bindings). `None` for other types or without RBAC.
pub fn escalation_check(
    rbac: Option<&Arc<RbacAuthorizer>>,
    rt: &RegisteredType,
    user: &UserInfo,
) -> Option<Admit> {
    let rbac = rbac?.clone();
    if rt.info.group != GROUP {
        return None;
    }
    let resource = rt.info.resource.clone();
    let info = rt.info.clone();
    let asker = user.clone();
    let allowed = move |rbac: &RbacAuthorizer, verb: &str, resource: &str, ns: &str, name: &str| {
        let attrs = Attributes {
            user: asker.clone(),
            verb: verb.into(),
            namespace: ns.into(),
            api_group: GROUP.into(),
            resource: resource.into(),
            name: name.into(),
            resource_request: true,
            ..Default::default()
        };
        rbac.authorize(&attrs) == Decision::Allow
    };
    let user = user.clone();
    let check: Admit = match resource.as_str() {
        "roles" | "clusterroles" => Arc::new(move |obj: &Object, _old: Option<&Object>| {
            let ns = obj.namespace();
            if allowed(&rbac, "escalate", &resource, ns, obj.name()) {
                return Ok(());
            }
            let rules = Rule::all_of(&Value::Object(obj.as_map().clone()));
            let missing = rbac.uncovered(&user, ns, &rules);
            if missing.is_empty() {
                Ok(())
            } else {
                Err(escalation(&info, obj, &user, &missing))
            }
        }),
        "rolebindings" | "clusterrolebindings" => {
            Arc::new(move |obj: &Object, old: Option<&Object>| {
                let role_ref = obj.as_map().get("roleRef").cloned().unwrap_or(Value::Null);
                if old.is_some_and(|o| o.as_map().get("roleRef") == Some(&role_ref)) {
                    // The role stays the same: nothing new is granted through it.
                    return Ok(());
                }
                let kind = role_ref["kind"].as_str().unwrap_or("");
                let name = role_ref["name"].as_str().unwrap_or("");
                let ns = obj.namespace();
                let role_resource = if kind == "Role" {
                    "roles"
                } else {
                    "clusterroles"
                };
                if allowed(&rbac, "bind", role_resource, ns, name) {
                    return Ok(());
                }
                let rules = rbac.role_rules(kind, ns, name);
                let missing = rbac.uncovered(&user, ns, &rules);
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(escalation(&info, obj, &user, &missing))
                }
            })
        }
        _ => return None,
    };
    Some(check)
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
