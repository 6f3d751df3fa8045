//! The review endpoints that store nothing: SelfSubjectReview and the access reviews.

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
