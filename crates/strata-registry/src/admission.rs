//! Admission of new objects into namespaces: a namespace must exist and not be terminating.

use strata_object::Status;

use crate::errors::{store_error, Op};
use crate::{decode_stored, RegisteredType, Registry};

impl Registry {
    /// New objects may go only into a namespace that exists (404) and is not being terminated
    /// (403, as Kubernetes' namespace lifecycle admission answers).
    pub(crate) async fn check_namespace_open(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
    ) -> Result<(), Status> {
        let Some(ns) = self.namespaces() else {
            return Ok(());
        };
        let key = ns.info.key("", namespace);
        // The cache answers, once it has caught up with this replica's own namespace writes (a
        // namespace deleted a moment ago must already refuse content; other writes need no
        // wait). A miss, or a cache that cannot show it caught up, asks the store.
        let cached = if self.cache_reaches(&ns.cache, ns.written()).await {
            ns.cache.get(&key).0
        } else {
            None
        };
        let terminating = match cached {
            Some(c) => c.field("status.phase") == Some("Terminating"),
            None => match self.store.get(&key, None).await {
                Ok((Some(kv), _)) => decode_stored(&ns, &kv)?
                    .as_map()
                    .get("status")
                    .and_then(|s| s.get("phase"))
                    .is_some_and(|p| p == "Terminating"),
                Ok((None, _)) => return Err(Status::not_found("", "namespaces", namespace)),
                Err(e) => return Err(store_error(Op::Get, &ns, namespace, e)),
            },
        };
        if !terminating {
            return Ok(());
        }
        let mut s = Status::forbidden(
            &rt.info.group,
            &rt.info.resource,
            name,
            &format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        );
        if let Some(d) = s.details.as_mut() {
            d.causes.push(strata_object::StatusCause {
                reason: "NamespaceTerminating".into(),
                message: format!("namespace {namespace} is being terminated"),
                field: "metadata.namespace".into(),
            });
        }
        Err(s)
    }
}
