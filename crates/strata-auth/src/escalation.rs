//! The escalation check of writes to roles and bindings: a user may grant only permissions
//! they hold, unless allowed to `escalate` (roles) or to `bind` the role named (bindings).
//! Kubernetes' wording of the refusal, rules printed as Go prints them.

use std::sync::Arc;

use serde_json::Value;
use strata_object::{Object, Status};
use strata_registry::{Admit, RegisteredType};

use crate::authz::{Attributes, Authorizer, Decision};
use crate::rbac::{RbacAuthorizer, Rule, GROUP};
use crate::UserInfo;

fn rules_text(rules: &[Rule]) -> String {
    let list = |name: &str, v: &[String]| {
        if v.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = v.iter().map(|s| strata_object::go::quote(s)).collect();
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
    let groups: Vec<String> = user
        .groups
        .iter()
        .map(|g| strata_object::go::quote(g))
        .collect();
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
pub fn check(
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
