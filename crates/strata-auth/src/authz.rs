//! Authorization: the question a handler asks before it acts ("may this user do this verb on
//! this resource?") and the answer's rendering as Kubernetes' 403.
//!
//! Today every request is allowed ([`AllowAll`]); the RBAC authorizer plugs in behind the same
//! trait. The checks that need more than the request's own verb (forced deletion's
//! `unsafe-delete-ignore-read-errors`) already ask here.

use strata_object::Status;

use crate::UserInfo;

/// What a request asks to do, as an authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// The authenticated user (`system:anonymous` when nobody is).
    pub user: UserInfo,
    pub verb: String,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// A request for a resource (the fields above) rather than for a path (`path`).
    pub resource_request: bool,
    /// The path of a non-resource request (`/api`, `/healthz`, ...).
    pub path: String,
}

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied, with the reason given to the client (may be empty).
    Deny(String),
}

/// Decides requests. Implementations must be cheap: one call per request and verb.
pub trait Authorizer: Send + Sync + 'static {
    fn authorize(&self, attrs: &Attributes) -> Decision;
}

/// Allows everything: the authorizer until authentication and RBAC exist.
#[derive(Debug, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(&self, _attrs: &Attributes) -> Decision {
        Decision::Allow
    }
}

/// Asks `authorizer`; a denial is Kubernetes' 403:
/// `<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource "<resource>" in API
/// group "<group>" in the namespace "<ns>"`.
pub fn check(authorizer: &dyn Authorizer, attrs: &Attributes) -> Result<(), Status> {
    match authorizer.authorize(attrs) {
        Decision::Allow => Ok(()),
        Decision::Deny(reason) => Err(forbidden(attrs, &reason)),
    }
}

fn forbidden(attrs: &Attributes, reason: &str) -> Status {
    if !attrs.resource_request {
        let mut why = format!(
            "User {:?} cannot {} path {:?}",
            attrs.user.name, attrs.verb, attrs.path
        );
        if !reason.is_empty() {
            why.push_str(&format!(": {reason}"));
        }
        return Status::forbidden_plain(&why);
    }
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let mut why = format!(
        "User {:?} cannot {} resource {resource:?} in API group {:?}",
        attrs.user.name, attrs.verb, attrs.api_group
    );
    if attrs.namespace.is_empty() {
        why.push_str(" at the cluster scope");
    } else {
        why.push_str(&format!(" in the namespace {:?}", attrs.namespace));
    }
    if !reason.is_empty() {
        why.push_str(&format!(": {reason}"));
    }
    Status::forbidden(&attrs.api_group, &attrs.resource, &attrs.name, &why)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct DenyVerb(&'static str);

    impl Authorizer for DenyVerb {
        fn authorize(&self, attrs: &Attributes) -> Decision {
            if attrs.verb == self.0 {
                Decision::Deny(String::new())
            } else {
                Decision::Allow
            }
        }
    }

    #[test]
    fn a_denial_reads_like_kubernetes() {
        let attrs = Attributes {
            user: UserInfo {
                name: "alice".into(),
                ..Default::default()
            },
            verb: "unsafe-delete-ignore-read-errors".into(),
            namespace: "team".into(),
            api_version: "v1".into(),
            resource: "serviceaccounts".into(),
            name: "robot".into(),
            resource_request: true,
            ..Default::default()
        };
        let denier = DenyVerb("unsafe-delete-ignore-read-errors");
        let s = check(&denier, &attrs).unwrap_err();
        assert_eq!(s.code, 403);
        assert_eq!(
            s.message,
            "serviceaccounts \"robot\" is forbidden: User \"alice\" cannot \
             unsafe-delete-ignore-read-errors resource \"serviceaccounts\" in API group \"\" in \
             the namespace \"team\""
        );
        let delete = Attributes {
            verb: "delete".into(),
            ..attrs
        };
        assert!(check(&denier, &delete).is_ok());
        assert!(check(&AllowAll, &delete).is_ok());
    }
}
