//! The reviews: the access reviews (SubjectAccessReview, LocalSubjectAccessReview,
//! SelfSubjectAccessReview) with Kubernetes' validation of the question and the authorizer's
//! answer in `status`; SelfSubjectRulesReview (what the caller may do in a namespace); and
//! TokenReview (whom a bearer token authenticates). Nothing is stored; the frontend decodes the
//! body and renders the answer.

use serde_json::{json, Value};
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::Status;

use crate::authn::Authenticator;
use crate::authz::Authorizer;
use crate::rbac::{RbacAuthorizer, Rule};
use crate::UserInfo;

/// Answers a review of `kind` asked by `user` (the subject of a SelfSubjectAccessReview), in
/// `namespace` for a LocalSubjectAccessReview: the review with `status` filled in, or 422 for a
/// question Kubernetes refuses.
pub fn access_review(
    authorizer: &dyn Authorizer,
    user: &UserInfo,
    kind: &str,
    namespace: &str,
    mut review: Value,
) -> Result<Value, Status> {
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let invalid =
        |errors: Vec<FieldError>| Status::invalid("authorization.k8s.io", kind, "", &errors);
    // An empty attribute set is an absent one (protobuf bodies may carry an empty message).
    let given = |k: &str| {
        spec.get(k)
            .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
    };
    let resource = given("resourceAttributes");
    let non_resource = given("nonResourceAttributes");
    if resource.is_some() == non_resource.is_some() {
        return Err(invalid(vec![FieldError::new(
            FieldErrorKind::Invalid,
            "spec.resourceAttributes",
            Some("null".into()),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )]));
    }
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let subject = if kind == "SelfSubjectAccessReview" {
        user.clone()
    } else {
        let subject = UserInfo {
            name: text(&spec, "user"),
            uid: text(&spec, "uid"),
            groups: strata_object::strings(spec.get("groups")),
            ..Default::default()
        };
        if subject.name.is_empty() && subject.groups.is_empty() {
            return Err(invalid(vec![FieldError::invalid_string(
                "spec.user",
                "",
                "at least one of user or group must be specified",
            )]));
        }
        subject
    };
    let attrs = match (resource, non_resource) {
        (Some(r), _) => {
            let ns = text(r, "namespace");
            if kind == "LocalSubjectAccessReview" && ns != namespace {
                return Err(invalid(vec![FieldError::invalid_string(
                    "spec.resourceAttributes.namespace",
                    &ns,
                    "must match metadata.namespace",
                )]));
            }
            crate::authz::Attributes {
                user: subject,
                verb: text(r, "verb"),
                namespace: ns,
                api_group: text(r, "group"),
                api_version: text(r, "version"),
                resource: text(r, "resource"),
                subresource: text(r, "subresource"),
                name: text(r, "name"),
                resource_request: true,
                path: String::new(),
            }
        }
        (None, Some(n)) => crate::authz::Attributes {
            user: subject,
            verb: text(n, "verb"),
            path: text(n, "path"),
            resource_request: false,
            ..Default::default()
        },
        // Refused above: exactly one of the two is present.
        (None, None) => return Err(Status::bad_request("no attributes to review")),
    };
    let status = match authorizer.authorize(&attrs) {
        crate::authz::Decision::Allow => json!({"allowed": true}),
        crate::authz::Decision::Deny(reason) if reason.is_empty() => {
            json!({"allowed": false})
        }
        crate::authz::Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    };
    review["kind"] = json!(kind);
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    if review.get("metadata").is_none_or(|m| !m.is_object()) {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = status;
    Ok(review)
}

/// Where a SelfSubjectRulesReview's rules come from: the authorizer in charge.
#[derive(Clone, Copy, Debug)]
pub enum RuleSource<'a> {
    /// RBAC: the rules of the roles bound to the caller.
    Rbac(&'a RbacAuthorizer),
    /// `--authorization-mode AlwaysAllow`: one rule allowing everything, as Kubernetes'
    /// AlwaysAllow authorizer lists it.
    AlwaysAllow,
}

/// Answers a SelfSubjectRulesReview asked by `user`: the resource and non-resource rules that
/// apply to them in `spec.namespace` (400 without one), as Kubernetes' RBAC rule resolver lists
/// them. A binding whose role cannot be read leaves its rules out and says why in
/// `status.evaluationError`; like Kubernetes' RBAC, it does not set `incomplete` (only
/// authorizers that cannot list rules at all do).
pub fn rules_review(
    source: RuleSource<'_>,
    user: &UserInfo,
    review: &Value,
) -> Result<Value, Status> {
    let namespace = review
        .get("spec")
        .and_then(|s| s.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if namespace.is_empty() {
        return Err(Status::bad_request("no namespace on request"));
    }
    let (rules, errors) = match source {
        RuleSource::Rbac(rbac) => rbac.rules_for(user, namespace),
        RuleSource::AlwaysAllow => {
            let all = vec!["*".to_string()];
            let everything = Rule {
                verbs: all.clone(),
                api_groups: all.clone(),
                resources: all.clone(),
                ..Default::default()
            };
            let every_path = Rule {
                verbs: all.clone(),
                non_resource_urls: all,
                ..Default::default()
            };
            (vec![everything, every_path], Vec::new())
        }
    };
    // A rule lands in one list or both, by what it names (a rule naming both is listed twice,
    // each time with its part).
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in &rules {
        if !rule.resources.is_empty() {
            let mut r = json!({"verbs": rule.verbs});
            if !rule.api_groups.is_empty() {
                r["apiGroups"] = json!(rule.api_groups);
            }
            r["resources"] = json!(rule.resources);
            if !rule.resource_names.is_empty() {
                r["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(r);
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules.push(json!({
                "verbs": rule.verbs,
                "nonResourceURLs": rule.non_resource_urls,
            }));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(crate::authn::aggregate(&errors));
    }
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": status,
    }))
}

/// Answers a TokenReview: authenticates `spec.token` with the server's token authenticators
/// for `spec.audiences` (the server's own when none are given) and fills in `status`: the
/// user and the audiences the token is good for, or `authenticated` left out and `error`
/// saying why. 400 without a token.
pub async fn token_review(
    authenticator: &Authenticator,
    mut review: Value,
) -> Result<Value, Status> {
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
    if token.is_empty() {
        return Err(Status::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences: Vec<String> = match spec.get("audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(|| Status::bad_request("spec.audiences must be strings"))?,
        Some(_) => return Err(Status::bad_request("spec.audiences must be a list")),
    };
    let outcome = authenticator.review_token(token, &audiences).await;
    let mut status = serde_json::Map::new();
    match &outcome.user {
        Some(user) => {
            status.insert("authenticated".into(), json!(true));
            status.insert("user".into(), user.to_value());
            if !outcome.audiences.is_empty() {
                status.insert("audiences".into(), json!(outcome.audiences));
            }
        }
        None => {
            status.insert("user".into(), json!({}));
        }
    }
    if let Some(error) = &outcome.error {
        status.insert("error".into(), json!(error));
    }
    review["kind"] = json!("TokenReview");
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    if review.get("metadata").is_none_or(|m| !m.is_object()) {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = Value::Object(status);
    Ok(review)
}
