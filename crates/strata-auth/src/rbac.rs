//! Role-based access control over the `rbac.authorization.k8s.io/v1` objects the registry
//! serves: a user may do what a rule of a role bound to them allows, and nothing else (rules
//! only add). ClusterRoleBindings grant everywhere; RoleBindings grant inside their namespace,
//! whether they name a Role there or a ClusterRole. Members of `system:masters` may do
//! everything.
//!
//! The authorizer answers from an index of the four kinds built from the watch caches, and
//! rebuilt only when one of them changed, so a check costs a scan of the bindings that apply,
//! not a decode.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use strata_object::{LabelSelector, Object};
use strata_registry::{cache, CachedObject, RegisteredType, Registry};

use crate::authz::{Attributes, Authorizer, Decision};
use crate::{UserInfo, MASTERS};

/// The API group of the RBAC kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";

fn strings(v: &Value, key: &str) -> Vec<String> {
    strata_object::strings(v.get(key))
}

/// One PolicyRule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Rule {
    pub fn from_value(v: &Value) -> Rule {
        Rule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// The `rules` of a Role or ClusterRole.
    pub fn all_of(obj: &Value) -> Vec<Rule> {
        obj.get("rules")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Rule::from_value).collect())
            .unwrap_or_default()
    }

    /// Whether this rule allows the request.
    pub fn allows(&self, attrs: &Attributes) -> bool {
        if !has(&self.verbs, &attrs.verb) {
            return false;
        }
        if !attrs.resource_request {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == attrs.path
                    || u.strip_suffix('*')
                        .is_some_and(|p| attrs.path.starts_with(p))
            });
        }
        if !has(&self.api_groups, &attrs.api_group) {
            return false;
        }
        let combined = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!attrs.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
        });
        resource
            && (self.resource_names.is_empty()
                || (!attrs.name.is_empty() && self.resource_names.contains(&attrs.name)))
    }
}

/// One subject of a binding.
#[derive(Clone, Debug)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    fn applies_to(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.in_group(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_namespace
                } else {
                    &self.namespace
                };
                user.name == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }
}

/// A RoleBinding (with its namespace) or a ClusterRoleBinding (namespace empty).
#[derive(Clone, Debug)]
struct Binding {
    namespace: String,
    subjects: Vec<Subject>,
    role_kind: String,
    role_name: String,
}

impl Binding {
    fn from_object(obj: &Object) -> Binding {
        let v = obj.as_map();
        let subjects = v
            .get("subjects")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|s| Subject {
                        kind: s["kind"].as_str().unwrap_or("").to_string(),
                        name: s["name"].as_str().unwrap_or("").to_string(),
                        namespace: s["namespace"].as_str().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let role_ref = v.get("roleRef").cloned().unwrap_or(Value::Null);
        Binding {
            namespace: obj.namespace().to_string(),
            subjects,
            role_kind: role_ref["kind"].as_str().unwrap_or("").to_string(),
            role_name: role_ref["name"].as_str().unwrap_or("").to_string(),
        }
    }

    fn applies_to(&self, user: &UserInfo) -> bool {
        self.subjects
            .iter()
            .any(|s| s.applies_to(user, &self.namespace))
    }
}

/// The RBAC objects, ready to answer from.
#[derive(Debug, Default)]
struct Index {
    cluster_roles: HashMap<String, Vec<Rule>>,
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_bindings: Vec<Binding>,
    bindings: HashMap<String, Vec<Binding>>,
}

/// The selector text of one LabelSelector object (`matchLabels` and `matchExpressions`).
fn selector_text(sel: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or("");
            let values = strings(e, "values").join(",");
            parts.push(match e["operator"].as_str().unwrap_or("") {
                "In" => format!("{key} in ({values})"),
                "NotIn" => format!("{key} notin ({values})"),
                "Exists" => key.to_string(),
                "DoesNotExist" => format!("!{key}"),
                // An operator nobody knows selects nothing.
                _ => return "!!".into(),
            });
        }
    }
    parts.join(",")
}

impl Index {
    fn build(
        cluster_roles: &[Object],
        roles: &[Object],
        cluster_bindings: &[Object],
        bindings: &[Object],
    ) -> Index {
        let mut index = Index::default();
        let direct: HashMap<String, Vec<Rule>> = cluster_roles
            .iter()
            .map(|r| {
                let rules = Rule::all_of(&Value::Object(r.as_map().clone()));
                (r.name().to_string(), rules)
            })
            .collect();
        // An aggregated ClusterRole holds the rules of every ClusterRole its selectors pick,
        // aggregated ones included (admin takes edit, which takes view): a few rounds reach
        // the fixed point of any sensible nesting.
        let mut picks: HashMap<String, Vec<String>> = HashMap::new();
        for role in cluster_roles {
            let selectors = role
                .as_map()
                .get("aggregationRule")
                .and_then(|a| a.get("clusterRoleSelectors"))
                .and_then(Value::as_array);
            let Some(selectors) = selectors else {
                continue;
            };
            let mut picked = Vec::new();
            for sel in selectors {
                let text = selector_text(sel);
                let Ok(selector) = LabelSelector::parse(&text) else {
                    continue;
                };
                if text.is_empty() {
                    continue;
                }
                for other in cluster_roles {
                    if other.name() != role.name() && selector.matches(other) {
                        picked.push(other.name().to_string());
                    }
                }
            }
            picks.insert(role.name().to_string(), picked);
        }
        index.cluster_roles = direct.clone();
        for _ in 0..4 {
            let mut next = direct.clone();
            for (name, picked) in &picks {
                let rules = next.entry(name.clone()).or_default();
                for other in picked {
                    for rule in index.cluster_roles.get(other).into_iter().flatten() {
                        if !rules.contains(rule) {
                            rules.push(rule.clone());
                        }
                    }
                }
            }
            index.cluster_roles = next;
        }
        for role in roles {
            index.roles.insert(
                (role.namespace().to_string(), role.name().to_string()),
                Rule::all_of(&Value::Object(role.as_map().clone())),
            );
        }
        index.cluster_bindings = cluster_bindings.iter().map(Binding::from_object).collect();
        for b in bindings.iter().map(Binding::from_object) {
            index
                .bindings
                .entry(b.namespace.clone())
                .or_default()
                .push(b);
        }
        index
    }

    fn rules_of(&self, binding: &Binding) -> &[Rule] {
        self.referenced_rules(binding).unwrap_or(&[])
    }

    /// The rules of the role `binding` names, or why they cannot be read, in Kubernetes'
    /// words (the NotFound of the role, or an unsupported kind).
    fn referenced_rules(&self, binding: &Binding) -> Result<&[Rule], String> {
        let rules = match binding.role_kind.as_str() {
            "ClusterRole" => self.cluster_roles.get(&binding.role_name),
            "Role" => self
                .roles
                .get(&(binding.namespace.clone(), binding.role_name.clone())),
            other => return Err(format!("unsupported role reference kind: {other:?}")),
        };
        rules.map(Vec::as_slice).ok_or_else(|| {
            format!(
                "{}.{GROUP} {:?} not found",
                binding.role_kind.to_ascii_lowercase(),
                binding.role_name
            )
        })
    }

    /// Every rule granted to `user` by the ClusterRoleBindings, then (for a namespace) by the
    /// RoleBindings of `namespace`, in that order, bindings by name; with an error for each
    /// binding whose role cannot be read (its rules are missing from the list).
    fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        let local = match namespace {
            "" => None,
            ns => self.bindings.get(ns),
        };
        for binding in self
            .cluster_bindings
            .iter()
            .chain(local.into_iter().flatten())
        {
            if !binding.applies_to(user) {
                continue;
            }
            match self.referenced_rules(binding) {
                Ok(granted) => rules.extend(granted.iter().cloned()),
                Err(why) => errors.push(why),
            }
        }
        (rules, errors)
    }

    fn allows(&self, attrs: &Attributes) -> bool {
        let user = &attrs.user;
        let granted =
            |b: &Binding| b.applies_to(user) && self.rules_of(b).iter().any(|r| r.allows(attrs));
        if self.cluster_bindings.iter().any(granted) {
            return true;
        }
        !attrs.namespace.is_empty()
            && self
                .bindings
                .get(&attrs.namespace)
                .is_some_and(|bs| bs.iter().any(granted))
    }
}

/// The RBAC authorizer.
pub struct RbacAuthorizer {
    registry: Arc<Registry>,
    /// ClusterRoles, Roles, ClusterRoleBindings, RoleBindings.
    types: Option<[Arc<RegisteredType>; 4]>,
    /// The index, with the revisions of the four caches' last changes it was built at.
    snapshot: Mutex<Option<([u64; 4], Arc<Index>)>>,
}

impl std::fmt::Debug for RbacAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbacAuthorizer")
            .field("serving", &self.types.is_some())
            .finish()
    }
}

impl RbacAuthorizer {
    /// An authorizer over the RBAC kinds `registry` serves (if it serves none, only
    /// `system:masters` may do anything).
    pub fn new(registry: Arc<Registry>) -> Self {
        let find = |r: &str| registry.lookup(GROUP, "v1", r);
        let types = match (
            find("clusterroles"),
            find("roles"),
            find("clusterrolebindings"),
            find("rolebindings"),
        ) {
            (Some(a), Some(b), Some(c), Some(d)) => Some([a, b, c, d]),
            _ => None,
        };
        Self {
            registry,
            types,
            snapshot: Mutex::new(None),
        }
    }

    /// Waits (briefly) until the RBAC caches hold this replica's own writes of roles and
    /// bindings, so that a role or binding just written through it already counts. Call before [`Authorizer::authorize`].
    pub async fn catch_up(&self) {
        let Some(types) = &self.types else {
            return;
        };
        for t in types {
            // If a cache cannot get there in time the check runs on what the caches have: at
            // worst a moment stale.
            if !self.registry.cache_reaches(&t.cache, t.written()).await {
                break;
            }
        }
    }

    fn index(&self) -> Arc<Index> {
        let Some(types) = &self.types else {
            return Arc::new(Index::default());
        };
        let stamp = [0, 1, 2, 3].map(|i| types[i].cache.changed().get());
        let mut guard = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, index)) = guard.as_ref() {
            if *seen == stamp {
                return index.clone();
            }
        }
        let all = |rt: &RegisteredType| -> Vec<Object> {
            let everything: Arc<dyn Fn(&CachedObject) -> bool + Send + Sync> = Arc::new(|_| true);
            rt.cache
                .list(&rt.info.key_prefix(), "", 0, &everything, None)
                .items
                .iter()
                .filter_map(|c| cache::to_object(c).ok())
                .collect()
        };
        let index = Arc::new(Index::build(
            &all(&types[0]),
            &all(&types[1]),
            &all(&types[2]),
            &all(&types[3]),
        ));
        *guard = Some((stamp, index.clone()));
        index
    }

    /// The rules of the role a binding in `namespace` names (`Role` or `ClusterRole`).
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Vec<Rule> {
        let binding = Binding {
            namespace: namespace.to_string(),
            subjects: Vec::new(),
            role_kind: kind.to_string(),
            role_name: name.to_string(),
        };
        self.index().rules_of(&binding).to_vec()
    }

    /// The rules RBAC grants `user` in `namespace`, as Kubernetes' rule resolver lists them
    /// for a SelfSubjectRulesReview (ClusterRoleBindings first, then the namespace's
    /// RoleBindings; group subjects and `system:authenticated` count like any other), and the
    /// errors of the roles that could not be read.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        self.index().rules_for(user, namespace)
    }

    /// Whether `user` holds every permission of `rules` in `namespace` (empty: cluster-wide):
    /// the escalation check of role and binding writes. Returns the rules not held.
    pub fn uncovered(&self, user: &UserInfo, namespace: &str, rules: &[Rule]) -> Vec<Rule> {
        let mut missing = Vec::new();
        for rule in rules {
            let mut covered = true;
            'rule: for verb in &rule.verbs {
                if rule.non_resource_urls.is_empty() {
                    let names: Vec<&str> = if rule.resource_names.is_empty() {
                        vec![""]
                    } else {
                        rule.resource_names.iter().map(String::as_str).collect()
                    };
                    for group in &rule.api_groups {
                        for resource in &rule.resources {
                            let (resource, sub) =
                                resource.split_once('/').unwrap_or((resource, ""));
                            for name in &names {
                                let attrs = Attributes {
                                    user: user.clone(),
                                    verb: verb.clone(),
                                    namespace: namespace.to_string(),
                                    api_group: group.clone(),
                                    resource: resource.to_string(),
                                    subresource: sub.to_string(),
                                    name: name.to_string(),
                                    resource_request: true,
                                    ..Default::default()
                                };
                                if self.authorize(&attrs) != Decision::Allow {
                                    covered = false;
                                    break 'rule;
                                }
                            }
                        }
                    }
                } else {
                    for url in &rule.non_resource_urls {
                        let attrs = Attributes {
                            user: user.clone(),
                            verb: verb.clone(),
                            path: url.clone(),
                            resource_request: false,
                            ..Default::default()
                        };
                        if self.authorize(&attrs) != Decision::Allow {
                            covered = false;
                            break 'rule;
                        }
                    }
                }
            }
            if !covered {
                missing.push(rule.clone());
            }
        }
        missing
    }
}

impl Authorizer for RbacAuthorizer {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        if attrs.user.in_group(MASTERS) || self.index().allows(attrs) {
            Decision::Allow
        } else {
            Decision::Deny(String::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    fn req(
        user: &UserInfo,
        verb: &str,
        ns: &str,
        resource: &str,
        sub: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user: user.clone(),
            verb: verb.into(),
            namespace: ns.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    #[test]
    fn rules_match_like_kubernetes() {
        let rule = Rule::from_value(
            &json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["serviceaccounts"]}),
        );
        let u = user("u", &[]);
        assert!(rule.allows(&req(&u, "get", "ns", "serviceaccounts", "", "x")));
        assert!(!rule.allows(&req(&u, "delete", "ns", "serviceaccounts", "", "x")));
        // A plain resource does not cover its sub-resources.
        assert!(!rule.allows(&req(&u, "get", "ns", "serviceaccounts", "token", "x")));
        let sub = Rule::from_value(
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["*/token"]}),
        );
        assert!(sub.allows(&req(&u, "create", "ns", "serviceaccounts", "token", "x")));
        let named = Rule::from_value(
            &json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "resourceNames": ["only"]}),
        );
        assert!(named.allows(&req(&u, "delete", "ns", "serviceaccounts", "", "only")));
        assert!(!named.allows(&req(&u, "delete", "ns", "serviceaccounts", "", "other")));
        // Named rules never cover create or an unnamed list.
        assert!(!named.allows(&req(&u, "list", "ns", "serviceaccounts", "", "")));
        let urls =
            Rule::from_value(&json!({"verbs": ["get"], "nonResourceURLs": ["/api", "/apis/*"]}));
        let path = |p: &str| Attributes {
            user: u.clone(),
            verb: "get".into(),
            path: p.into(),
            ..Default::default()
        };
        assert!(urls.allows(&path("/api")));
        assert!(urls.allows(&path("/apis/rbac.authorization.k8s.io")));
        assert!(!urls.allows(&path("/api/v1")));
        assert!(!urls.allows(&req(&u, "get", "", "api", "", "")));
    }

    #[test]
    fn bindings_grant_in_their_scope_to_their_subjects() {
        let reader = obj(
            json!({"metadata": {"name": "reader"}, "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["serviceaccounts"]}]}),
        );
        let parts = obj(
            json!({"metadata": {"name": "part", "labels": {"agg": "yes"}}, "rules": [{"verbs": ["delete"], "apiGroups": [""], "resources": ["serviceaccounts"]}]}),
        );
        let aggregated = obj(
            json!({"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}}),
        );
        let local = obj(
            json!({"metadata": {"name": "creator", "namespace": "team"}, "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["serviceaccounts"]}]}),
        );
        let crb = obj(
            json!({"metadata": {"name": "readers"}, "subjects": [{"kind": "Group", "name": "readers"}], "roleRef": {"kind": "ClusterRole", "name": "reader"}}),
        );
        let rb = obj(
            json!({"metadata": {"name": "b", "namespace": "team"}, "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "bot"}], "roleRef": {"kind": "Role", "name": "creator"}}),
        );
        let rb2 = obj(
            json!({"metadata": {"name": "c", "namespace": "team"}, "subjects": [{"kind": "User", "name": "alice"}], "roleRef": {"kind": "ClusterRole", "name": "agg"}}),
        );
        let index = Index::build(&[reader, parts, aggregated], &[local], &[crb], &[rb, rb2]);
        let alice = user("alice", &["readers"]);
        let bob = user("bob", &[]);
        let bot = user("system:serviceaccount:team:bot", &[]);
        assert!(index.allows(&req(&alice, "list", "other", "serviceaccounts", "", "")));
        assert!(index.allows(&req(&alice, "create", "team", "serviceaccounts", "", "")));
        assert!(!index.allows(&req(&alice, "create", "other", "serviceaccounts", "", "")));
        assert!(index.allows(&req(&alice, "delete", "team", "serviceaccounts", "", "x")));
        assert!(!index.allows(&req(&alice, "delete", "other", "serviceaccounts", "", "x")));
        assert!(index.allows(&req(&bot, "create", "team", "serviceaccounts", "", "")));
        assert!(!index.allows(&req(&bob, "get", "team", "serviceaccounts", "", "x")));
    }

    #[test]
    fn rules_are_listed_per_namespace_with_the_roles_that_cannot_be_read() {
        let reader = obj(
            json!({"metadata": {"name": "reader"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        );
        let local = obj(
            json!({"metadata": {"name": "creator", "namespace": "team"}, "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["serviceaccounts"]}]}),
        );
        let crbs = [
            obj(
                json!({"metadata": {"name": "a-everyone"}, "subjects": [{"kind": "Group", "name": "system:authenticated"}], "roleRef": {"kind": "ClusterRole", "name": "reader"}}),
            ),
            obj(
                json!({"metadata": {"name": "b-gone"}, "subjects": [{"kind": "User", "name": "alice"}], "roleRef": {"kind": "ClusterRole", "name": "gone"}}),
            ),
            obj(
                json!({"metadata": {"name": "c-other"}, "subjects": [{"kind": "User", "name": "bob"}], "roleRef": {"kind": "ClusterRole", "name": "reader"}}),
            ),
        ];
        let rbs = [
            obj(
                json!({"metadata": {"name": "b", "namespace": "team"}, "subjects": [{"kind": "User", "name": "alice"}], "roleRef": {"kind": "Role", "name": "creator"}}),
            ),
            obj(
                json!({"metadata": {"name": "c", "namespace": "team"}, "subjects": [{"kind": "User", "name": "alice"}], "roleRef": {"kind": "Role", "name": "missing"}}),
            ),
        ];
        let index = Index::build(&[reader], &[local], &crbs, &rbs);
        let alice = user("alice", &["system:authenticated"]);
        let (rules, errors) = index.rules_for(&alice, "team");
        let verbs: Vec<&str> = rules.iter().map(|r| r.verbs[0].as_str()).collect();
        assert_eq!(verbs, ["get", "create"]);
        assert_eq!(
            errors,
            [
                "clusterrole.rbac.authorization.k8s.io \"gone\" not found",
                "role.rbac.authorization.k8s.io \"missing\" not found",
            ]
        );
        // Elsewhere only the cluster-wide bindings count.
        let (rules, errors) = index.rules_for(&alice, "other");
        assert_eq!(rules.len(), 1);
        assert_eq!(errors.len(), 1);
        let (rules, errors) = index.rules_for(&user("carol", &[]), "team");
        assert!(rules.is_empty() && errors.is_empty());
    }
}
