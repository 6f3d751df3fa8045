//! The access reviews (SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview):
//! Kubernetes' validation of the question, and the authorizer's answer in `status`. Nothing is
//! stored; the frontend decodes the body and renders the answer.

use serde_json::{json, Value};
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::Status;

use crate::authz::Authorizer;
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
            groups: spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
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
