//! `Status`: the body of every error response and of some success responses.
//!
//! Constructors follow the reasons, codes and message formats of the Kubernetes API server, so
//! clients that branch on `reason` and `code` behave the same against Strata. Turning a storage or
//! decoding failure into a `Status` is not done here but in `strata-registry`, once.

use serde::{Deserialize, Serialize};

use crate::field::FieldError;

/// Why a request failed, as carried in `Status.reason`. Serialized as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StatusReason {
    /// The object or resource does not exist (404).
    NotFound,
    /// An object of that name already exists (409).
    AlreadyExists,
    /// A write lost a race or failed a precondition, such as a stale `resourceVersion` (409).
    Conflict,
    /// The object fails validation; the causes name the fields (422).
    Invalid,
    /// The request is malformed (400).
    BadRequest,
    /// The request carries no acceptable credentials (401).
    Unauthorized,
    /// The user may not do this (403).
    Forbidden,
    /// The resource does not support this verb (405).
    MethodNotAllowed,
    /// No media type in `Accept` can be served (406).
    NotAcceptable,
    /// The body's `Content-Type` cannot be decoded (415).
    UnsupportedMediaType,
    /// The body or the object is too large (413).
    RequestEntityTooLarge,
    /// The resource is gone (410).
    Gone,
    /// A `resourceVersion` or continue token is older than the history kept (410).
    Expired,
    /// The server gave up waiting; the outcome may be unknown (504).
    Timeout,
    /// The server could not finish in time and the client may retry (500).
    ServerTimeout,
    /// The server is overloaded; retry after `retryAfterSeconds` (429).
    TooManyRequests,
    /// Something went wrong inside the server (500).
    InternalError,
    /// The server cannot serve the request now (503).
    ServiceUnavailable,
}

impl StatusReason {
    /// The reason as Kubernetes spells it (`"NotFound"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::AlreadyExists => "AlreadyExists",
            Self::Conflict => "Conflict",
            Self::Invalid => "Invalid",
            Self::BadRequest => "BadRequest",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden => "Forbidden",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::NotAcceptable => "NotAcceptable",
            Self::UnsupportedMediaType => "UnsupportedMediaType",
            Self::RequestEntityTooLarge => "RequestEntityTooLarge",
            Self::Gone => "Gone",
            Self::Expired => "Expired",
            Self::Timeout => "Timeout",
            Self::ServerTimeout => "ServerTimeout",
            Self::TooManyRequests => "TooManyRequests",
            Self::InternalError => "InternalError",
            Self::ServiceUnavailable => "ServiceUnavailable",
        }
    }

    /// The HTTP status code that goes with this reason.
    pub fn code(self) -> u16 {
        match self {
            Self::NotFound => 404,
            Self::AlreadyExists | Self::Conflict => 409,
            Self::Invalid => 422,
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::MethodNotAllowed => 405,
            Self::NotAcceptable => 406,
            Self::UnsupportedMediaType => 415,
            Self::RequestEntityTooLarge => 413,
            Self::Gone | Self::Expired => 410,
            Self::Timeout => 504,
            Self::ServerTimeout | Self::InternalError => 500,
            Self::TooManyRequests => 429,
            Self::ServiceUnavailable => 503,
        }
    }
}

/// A `Status` object (`kind: Status`, `apiVersion: v1`).
///
/// Build one with the constructor for the failure ([`Status::not_found`], [`Status::invalid`],
/// [`Status::stale_conflict`], ...), which fills in the reason, the HTTP code, Kubernetes'
/// message and the details; serialize it with serde or [`Status::to_value`]. It is also an
/// [`std::error::Error`], so it can travel as the error of a `Result`.
///
/// ```
/// use strata_object::{Status, StatusReason};
///
/// let status = Status::not_found("rbac.authorization.k8s.io", "roles", "reader");
/// assert_eq!(status.code, 404);
/// assert!(status.is_not_found());
/// assert_eq!(status.message, r#"roles.rbac.authorization.k8s.io "reader" not found"#);
///
/// let json = status.to_value();
/// assert_eq!(json["kind"], "Status");
/// assert_eq!(json["status"], "Failure");
/// assert_eq!(json["reason"], "NotFound");
/// assert_eq!(json["details"]["group"], "rbac.authorization.k8s.io");
///
/// // What a client receives reads back into the same Status.
/// let back: Status = serde_json::from_value(json)?;
/// assert_eq!(back, status);
/// assert_eq!(back.to_string(), r#"404 (NotFound): roles.rbac.authorization.k8s.io "reader" not found"#);
///
/// let busy = Status::too_many_requests();
/// assert!(busy.is(StatusReason::TooManyRequests));
/// assert_eq!(busy.retry_after(), Some(1));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Always `Status`.
    pub kind: String,
    /// Always `v1`.
    pub api_version: String,
    /// The list metadata, normally empty.
    pub metadata: StatusListMeta,
    /// `Success` or `Failure`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// The human-readable description, in Kubernetes' wording.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// `None` for a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<StatusReason>,
    /// The object concerned and the causes, when there is more to say than the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// The HTTP status code (0, left out, when unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: u16,
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

/// The `metadata` of a Status: a ListMeta that in practice carries at most `continue`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusListMeta {
    /// `continue`: the token of a next page (empty: none).
    #[serde(default, rename = "continue", skip_serializing_if = "String::is_empty")]
    pub continue_token: String,
}

/// `Status.details`: which object a failure concerns, its causes and when to retry. Empty
/// fields are left out when serialized.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    /// The object's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The API group (empty for the core group).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The resource (`serviceaccounts`) or, for `Invalid`, the Kind (`ServiceAccount`), as
    /// Kubernetes fills it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The object's uid, when known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The individual causes, such as one per invalid field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    /// Seconds the client should wait before retrying (0: no advice).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub retry_after_seconds: i32,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// One cause of a failure, in `Status.details.causes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusCause {
    /// A machine-readable cause, such as `FieldValueRequired` or `FieldManagerConflict`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The human-readable description of this cause.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The field concerned, as a path (`metadata.name`, `spec.ports[0]`), when there is one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Status {
    fn failure(reason: StatusReason, message: String, details: Option<StatusDetails>) -> Self {
        Self {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: StatusListMeta::default(),
            status: "Failure".into(),
            message,
            reason: Some(reason),
            details,
            code: reason.code(),
        }
    }

    /// A success Status (as returned by deletecollection).
    pub fn success(details: Option<StatusDetails>) -> Self {
        Self {
            kind: "Status".into(),
            api_version: "v1".into(),
            metadata: StatusListMeta::default(),
            status: "Success".into(),
            message: String::new(),
            reason: None,
            details,
            code: 200,
        }
    }

    fn resource_details(group: &str, resource: &str, name: &str) -> Option<StatusDetails> {
        Some(StatusDetails {
            name: name.into(),
            group: group.into(),
            kind: resource.into(),
            ..Default::default()
        })
    }

    /// The `group.resource` text Kubernetes prints in messages (`serviceaccounts`, `roles.rbac...`).
    fn qualified(group: &str, resource: &str) -> String {
        if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        }
    }

    /// 404 NotFound: `<resource>[.<group>] "<name>" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::failure(
            StatusReason::NotFound,
            format!("{} {name:?} not found", Self::qualified(group, resource)),
            Self::resource_details(group, resource, name),
        )
    }

    /// 409 AlreadyExists: `<resource>[.<group>] "<name>" already exists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::failure(
            StatusReason::AlreadyExists,
            format!(
                "{} {name:?} already exists",
                Self::qualified(group, resource)
            ),
            Self::resource_details(group, resource, name),
        )
    }

    /// 409 Conflict: `Operation cannot be fulfilled on <resource> "<name>": <why>`.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::failure(
            StatusReason::Conflict,
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                Self::qualified(group, resource)
            ),
            Self::resource_details(group, resource, name),
        )
    }

    /// The optimistic-lock conflict of a stale `resourceVersion`.
    pub fn stale_conflict(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict of a server-side apply: `message` names the fields, one cause per field
    /// (`FieldManagerConflict`, the owner in `message`, the path in `field`).
    pub fn apply_conflict(message: String, causes: Vec<StatusCause>) -> Self {
        Self::failure(
            StatusReason::Conflict,
            message,
            Some(StatusDetails {
                causes,
                ..Default::default()
            }),
        )
    }

    /// 422 Invalid without naming an object: a patch that is well formed but cannot be applied.
    /// The message is the fixed text Kubernetes gives; `detail` travels as the one cause.
    pub fn rejected_patch(detail: impl Into<String>) -> Self {
        Self::failure(
            StatusReason::Invalid,
            "the server rejected our request due to an error in our request".into(),
            Some(StatusDetails {
                causes: vec![StatusCause {
                    reason: "UnexpectedServerResponse".into(),
                    message: detail.into(),
                    field: String::new(),
                }],
                ..Default::default()
            }),
        )
    }

    /// 422 Invalid with one cause per field error; `kind` is the Kind, not the resource.
    pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut texts: Vec<String> = Vec::new();
        for e in errors {
            let t = e.to_string();
            if !texts.contains(&t) {
                texts.push(t);
            }
        }
        let message = match texts.len() {
            0 => format!("{qualified} {name:?} is invalid"),
            1 => format!("{qualified} {name:?} is invalid: {}", texts[0]),
            _ => format!("{qualified} {name:?} is invalid: [{}]", texts.join(", ")),
        };
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: e.kind.cause_type().into(),
                message: e.body(),
                field: e.field.clone(),
            })
            .collect();
        Self::failure(
            StatusReason::Invalid,
            message,
            Some(StatusDetails {
                name: name.into(),
                group: group.into(),
                kind: kind.into(),
                causes,
                ..Default::default()
            }),
        )
    }

    /// 401 for a request without acceptable credentials.
    pub fn unauthorized() -> Self {
        Self::failure(StatusReason::Unauthorized, "Unauthorized".into(), None)
    }

    /// 400 BadRequest with the given message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::failure(StatusReason::BadRequest, message.into(), None)
    }

    /// 403 Forbidden: `<resource>[.<group>] ["<name>"] is forbidden: <why>` (no name when
    /// `name` is empty).
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let subject = Self::qualified(group, resource);
        let message = if name.is_empty() {
            format!("{subject} is forbidden: {why}")
        } else {
            format!("{subject} {name:?} is forbidden: {why}")
        };
        Self::failure(
            StatusReason::Forbidden,
            message,
            Self::resource_details(group, resource, name),
        )
    }

    /// 403 for a request that names no resource: `forbidden: <why>`.
    pub fn forbidden_plain(why: &str) -> Self {
        Self::failure(StatusReason::Forbidden, format!("forbidden: {why}"), None)
    }

    /// 405 from the router: the path exists but not with this method.
    pub fn method_not_allowed() -> Self {
        Self::failure(
            StatusReason::MethodNotAllowed,
            "the server does not allow this method on the requested resource".into(),
            None,
        )
    }

    /// 405 from a handler: the resource does not support the action.
    pub fn method_not_allowed_for(resource: &str, action: &str) -> Self {
        Self::failure(
            StatusReason::MethodNotAllowed,
            format!("{action} is not supported on resources of kind {resource:?}"),
            Some(StatusDetails {
                kind: resource.into(),
                ..Default::default()
            }),
        )
    }

    /// 404 for a path under an API prefix that names nothing served.
    pub fn path_not_found() -> Self {
        Self::failure(
            StatusReason::NotFound,
            "the server could not find the requested resource".into(),
            Some(StatusDetails::default()),
        )
    }

    /// 406 NotAcceptable, listing the media types the server can produce.
    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Self::failure(
            StatusReason::NotAcceptable,
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
            None,
        )
    }

    /// 415 UnsupportedMediaType, listing the media types the server can decode.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::failure(
            StatusReason::UnsupportedMediaType,
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
            None,
        )
    }

    /// 413 for a request body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Self::failure(
            StatusReason::RequestEntityTooLarge,
            format!("Request entity too large: limit is {limit}"),
            None,
        )
    }

    /// 413 for an entity refused for another reason than the body limit (`Request entity too
    /// large: <why>`, Kubernetes' prefix).
    pub fn too_large_entity(why: &str) -> Self {
        Self::failure(
            StatusReason::RequestEntityTooLarge,
            format!("Request entity too large: {why}"),
            None,
        )
    }

    /// 504 `Timeout: <why>`: the server gave up waiting, and the outcome may be unknown.
    pub fn timeout(why: &str) -> Self {
        Self::failure(StatusReason::Timeout, format!("Timeout: {why}"), None)
    }

    /// 410 with reason `Expired`, which is what clients test for.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::failure(StatusReason::Expired, message.into(), None)
    }

    /// 504 for a resource version the server has not reached.
    pub fn too_large_resource_version(requested: u64, current: u64, retry_after: i32) -> Self {
        Self::failure(
            StatusReason::Timeout,
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
            Some(StatusDetails {
                causes: vec![StatusCause {
                    reason: "ResourceVersionTooLarge".into(),
                    message: "Too large resource version".into(),
                    field: String::new(),
                }],
                retry_after_seconds: retry_after,
                ..Default::default()
            }),
        )
    }

    /// 500 InternalError: `Internal error occurred: <message>`, the message also as the one cause.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        let message = message.to_string();
        Self::failure(
            StatusReason::InternalError,
            format!("Internal error occurred: {message}"),
            Some(StatusDetails {
                causes: vec![StatusCause {
                    message,
                    ..Default::default()
                }],
                ..Default::default()
            }),
        )
    }

    /// 429 of an overloaded server, with Kubernetes' words and a one-second `Retry-After`.
    pub fn too_many_requests() -> Self {
        Self::failure(
            StatusReason::TooManyRequests,
            "Too many requests, please try again later.".into(),
            None,
        )
        .with_retry_after(1)
    }

    /// 503 ServiceUnavailable with the given message.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::failure(StatusReason::ServiceUnavailable, message.into(), None)
    }

    /// Sets `details.retryAfterSeconds`, which the HTTP layer mirrors into `Retry-After`.
    pub fn with_retry_after(mut self, seconds: i32) -> Self {
        self.details
            .get_or_insert_with(Default::default)
            .retry_after_seconds = seconds;
        self
    }

    /// The seconds a client should wait, when the Status says so.
    pub fn retry_after(&self) -> Option<i32> {
        self.details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
    }

    /// Serializes to a JSON value tree.
    pub fn to_value(&self) -> serde_json::Value {
        // A Status holds only strings, numbers and vectors of them: serialization cannot fail.
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl Status {
    /// Whether this failed for `reason`.
    pub fn is(&self, reason: StatusReason) -> bool {
        self.reason == Some(reason)
    }

    /// Whether this failed with `NotFound`.
    pub fn is_not_found(&self) -> bool {
        self.is(StatusReason::NotFound)
    }

    /// Whether this failed with `AlreadyExists`.
    pub fn is_already_exists(&self) -> bool {
        self.is(StatusReason::AlreadyExists)
    }

    /// A write that lost a race or a precondition (`Conflict`), not a name taken
    /// (`AlreadyExists`).
    pub fn is_conflict(&self) -> bool {
        self.is(StatusReason::Conflict)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = self.reason.map_or("", StatusReason::as_str);
        write!(f, "{} ({reason}): {}", self.code, self.message)
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{FieldError, FieldErrorKind};

    #[test]
    fn not_found_matches_kubernetes_shape() {
        let s = Status::not_found("", "serviceaccounts", "foo");
        let v = s.to_value();
        assert_eq!(v["message"], "serviceaccounts \"foo\" not found");
        assert_eq!(v["code"], 404);
        assert_eq!(v["metadata"], serde_json::json!({}));
        assert_eq!(v["details"]["kind"], "serviceaccounts");
        assert!(v["details"].get("group").is_none());
        assert_eq!(v["reason"], "NotFound");
        assert!(s.is_not_found() && !s.is_conflict());
        let back: Status = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        assert!(Status::success(None).to_value().get("reason").is_none());
    }

    #[test]
    fn invalid_aggregates_causes() {
        let errs = vec![
            FieldError::new(FieldErrorKind::Required, "metadata.name", None, ""),
            FieldError::invalid_string("metadata.namespace", "X", "bad"),
        ];
        let s = Status::invalid("", "ServiceAccount", "", &errs);
        assert_eq!(s.code, 422);
        assert_eq!(
            s.message,
            "ServiceAccount \"\" is invalid: [metadata.name: Required value, metadata.namespace: Invalid value: \"X\": bad]"
        );
        assert_eq!(s.details.unwrap().causes[0].reason, "FieldValueRequired");
    }
}
