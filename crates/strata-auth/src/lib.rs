//! Who is asking, and what they may do.
//!
//! [`authn::Authenticator`] turns a request's credentials into a [`UserInfo`]: a bearer token
//! from the static token file, a ServiceAccount token this cluster signed (checked against the
//! ServiceAccount it names, uid included), or the anonymous user when that is allowed.
//! [`authz::Authorizer`] decides what a user may do; the frontend asks it per request and
//! verb.

pub mod authn;
pub mod authz;
pub mod escalation;
pub mod policy;
pub mod rbac;
pub mod review;

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of requests without credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group that may do everything.
pub const MASTERS: &str = "system:masters";
/// The group of every ServiceAccount.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// An authenticated identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The anonymous user.
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Default::default()
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The `userInfo` of a SelfSubjectReview (`authentication.k8s.io/v1` UserInfo): empty
    /// fields left out.
    pub fn to_value(&self) -> Value {
        let mut v = json!({"username": self.name});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            v["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}
