//! The review endpoints that store nothing: SelfSubjectReview, TokenReview, the access reviews
//! and SelfSubjectRulesReview.

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::json;
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
    let review = virtual_body(fe, req, "authorization.k8s.io", kind).await?;
    let review =
        strata_auth::review::access_review(fe.authorizer.as_ref(), user, kind, namespace, review)?;
    Ok(respond::value(201, &review, &output, render))
}

/// The path of `authentication.k8s.io/v1` TokenReviews.
pub(crate) const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// POST of a TokenReview (another component asking whom a bearer token authenticates, as
/// `system:auth-delegator` may): the server's authenticators' answer in `status`; nothing is
/// stored.
pub(crate) async fn token_review(
    fe: &Frontend,
    req: Request<Incoming>,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    let review = virtual_body(fe, req, "authentication.k8s.io", "TokenReview").await?;
    let review = strata_auth::review::token_review(&fe.authenticator, review).await?;
    Ok(respond::value(201, &review, &output, render))
}

/// The path of `authorization.k8s.io/v1` SelfSubjectRulesReviews.
pub(crate) const SELF_SUBJECT_RULES_REVIEWS: &str =
    "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";

/// POST of a SelfSubjectRulesReview (`kubectl auth can-i --list`): the rules that apply to the
/// caller in `spec.namespace`, from RBAC, or everything under AlwaysAllow; nothing is stored.
pub(crate) async fn rules_review(
    fe: &Frontend,
    req: Request<Incoming>,
    user: &UserInfo,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    let review = virtual_body(fe, req, "authorization.k8s.io", "SelfSubjectRulesReview").await?;
    let source = match &fe.rbac {
        Some(rbac) => strata_auth::review::RuleSource::Rbac(rbac),
        None => strata_auth::review::RuleSource::AlwaysAllow,
    };
    let review = strata_auth::review::rules_review(source, user, &review)?;
    Ok(respond::value(201, &review, &output, render))
}
