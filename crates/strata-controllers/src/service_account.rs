//! The ServiceAccount controller, as kube-controller-manager runs it: every active namespace
//! has a ServiceAccount named `default`, created when the namespace appears (or at start, for
//! the namespaces already there) and again whenever it is deleted. Nothing is created in a
//! namespace being terminated; an existing `default` is never changed.

use std::sync::Arc;

use serde_json::{json, Value};
use strata_object::Object;
use strata_registry::Registry;

use crate::per_namespace::{Kept, PerNamespace};

/// The name of the ServiceAccount every namespace has.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// The `default` ServiceAccount: created bare (name only), never repaired.
struct DefaultServiceAccount;

impl Kept for DefaultServiceAccount {
    const CONTROLLER: &'static str = "serviceaccount-controller";
    const RESOURCE: (&'static str, &'static str, &'static str) = ("", "v1", "serviceaccounts");
    const NAME: &'static str = DEFAULT_SERVICE_ACCOUNT;

    fn wanted(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT_SERVICE_ACCOUNT},
        })
    }

    fn repaired(&self, _current: &Object) -> Option<Value> {
        None
    }
}

/// Keeps a `default` ServiceAccount in every active namespace; [`ServiceAccountController::run`]
/// drives it. Several replicas may run it at once.
pub struct ServiceAccountController(PerNamespace<DefaultServiceAccount>);

impl std::fmt::Debug for ServiceAccountController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountController").finish()
    }
}

impl ServiceAccountController {
    /// `None` when the registry serves no namespaces or no ServiceAccounts.
    pub fn new(registry: Arc<Registry>) -> Option<Self> {
        PerNamespace::new(registry, DefaultServiceAccount).map(Self)
    }

    /// Whether every namespace that existed at start has had its first pass.
    pub fn has_synced(&self) -> bool {
        self.0.has_synced()
    }

    /// Runs until the task is dropped or aborted.
    pub async fn run(self: Arc<Self>) {
        self.0.run().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_account_is_bare_and_never_rewritten() {
        let wanted = DefaultServiceAccount.wanted();
        assert_eq!(wanted["metadata"], json!({"name": "default"}));
        let changed = Object::from_value(json!({
            "metadata": {"name": "default", "labels": {"a": "b"}},
            "automountServiceAccountToken": false,
        }))
        .unwrap();
        assert_eq!(DefaultServiceAccount.repaired(&changed), None);
    }
}
