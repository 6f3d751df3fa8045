//! The review endpoints that store nothing: SelfSubjectReview and the access reviews.

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};
use strata_auth::UserInfo;
use strata_object::Status;

use super::body::virtual_body;
use crate::negotiate::Offer;
use crate::respond::{self, Body, Render};
use crate::Frontend;

/// The path of `authentication.k8s.io/v1` SelfSubjectReviews.
pub(crate) const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// POST of a SelfSubjectReview (`kubectl auth whoami`): the request's own identity; nothing is
/// stored.
pub(crate) async fn self_subject_review(
    fe: &Frontend,
    req: Request<Incoming>,
    user: &UserInfo,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    // The body says nothing the answer needs; it is checked all the same.
    virtual_body(fe, req, "authentication.k8s.io", "SelfSubjectReview").await?;
    let review = json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": user.to_value()},
    });
    Ok(respond::value(201, &review, &output, render))
}

pub(crate) const SELF_SUBJECT_ACCESS_REVIEWS: &str =
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
pub(crate) const SUBJECT_ACCESS_REVIEWS: &str =
    "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// POST of a SubjectAccessReview (about anyone), a LocalSubjectAccessReview (about anyone, in
/// `namespace`) or a SelfSubjectAccessReview (about the caller, as `kubectl auth can-i` asks):
/// the authorizer's answer in `status`; nothing is stored.
pub(crate) async fn access_review(
    fe: &Frontend,
    req: Request<Incoming>,
    user: &UserInfo,
    kind: &str,
    namespace: &str,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    let mut review = virtual_body(fe, req, "authorization.k8s.io", kind).await?;
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let invalid = |errors: Vec<strata_object::field::FieldError>| {
        Status::invalid("authorization.k8s.io", kind, "", &errors)
    };
    // An empty attribute set is an absent one (protobuf bodies may carry an empty message).
    let given = |k: &str| {
        spec.get(k)
            .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
    };
    let resource = given("resourceAttributes");
    let non_resource = given("nonResourceAttributes");
    if resource.is_some() == non_resource.is_some() {
        return Err(invalid(vec![strata_object::field::FieldError::new(
            strata_object::field::FieldErrorKind::Invalid,
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
            return Err(invalid(vec![
                strata_object::field::FieldError::invalid_string(
                    "spec.user",
                    "",
                    "at least one of user or group must be specified",
                ),
            ]));
        }
        subject
    };
    let attrs = match (resource, non_resource) {
        (Some(r), _) => {
            let ns = text(r, "namespace");
            if kind == "LocalSubjectAccessReview" && ns != namespace {
                return Err(invalid(vec![
                    strata_object::field::FieldError::invalid_string(
                        "spec.resourceAttributes.namespace",
                        &ns,
                        "must match metadata.namespace",
                    ),
                ]));
            }
            strata_auth::authz::Attributes {
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
        (None, Some(n)) => strata_auth::authz::Attributes {
            user: subject,
            verb: text(n, "verb"),
            path: text(n, "path"),
            resource_request: false,
            ..Default::default()
        },
        // Refused above: exactly one of the two is present.
        (None, None) => return Err(Status::bad_request("no attributes to review")),
    };
    let status = match fe.authorizer.authorize(&attrs) {
        strata_auth::authz::Decision::Allow => json!({"allowed": true}),
        strata_auth::authz::Decision::Deny(reason) if reason.is_empty() => {
            json!({"allowed": false})
        }
        strata_auth::authz::Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    };
    review["kind"] = json!(kind);
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    if review.get("metadata").is_none_or(|m| !m.is_object()) {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = status;
    Ok(respond::value(201, &review, &output, render))
}
