//! How objects leave: DeleteOptions and their validation, two-phase deletion held by
//! finalizers, deletecollection, and the forced removal of objects that cannot be read.

use serde_json::{json, Value};
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::{now_rfc3339, Object, ResourceType, Status, StatusDetails};
use strata_store::StoreError;

use crate::errors::{store_error, Op};
use crate::version::to_resource_version;
use crate::{cache, decode_stored, encode_stored, ListOptions, RegisteredType, Registry};

/// The propagation policies a DeleteOptions may name.
const POLICIES: [&str; 3] = ["Foreground", "Background", "Orphan"];
/// The option that asks for the removal of an unreadable object.
const UNSAFE_OPTION: &str = "ignoreStoreReadErrorWithClusterBreakingPotential";

/// `preconditions` of a DeleteOptions: the object must still be this one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Options of delete and deletecollection (`DeleteOptions` of meta/v1).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `dryRun=All`: decide everything, change nothing.
    pub dry_run: bool,
    /// Accepted and validated; neither built-in kind deletes gracefully, so it changes nothing.
    pub grace_period_seconds: Option<i64>,
    pub preconditions: Option<Preconditions>,
    /// Deprecated form of `propagationPolicy`.
    pub orphan_dependents: Option<bool>,
    pub propagation_policy: Option<String>,
    /// Remove an object whose stored value cannot be decoded, ignoring its finalizers and
    /// preconditions. Honoured only with the `AllowUnsafeMalformedObjectDeletion` gate.
    pub ignore_store_read_error: bool,
}

impl DeleteOptions {
    /// Kubernetes' checks of a DeleteOptions: 422 `DeleteOptions.meta.k8s.io "" is invalid`.
    /// `dryRun` values are checked where they are parsed. The unsafe option set together with
    /// an option it excludes is 400 instead (spec §7; Kubernetes answers 422 there too), and
    /// is checked first, whether or not the unsafe option is enabled.
    pub fn validate(&self) -> Result<(), Status> {
        if self.ignore_store_read_error {
            let set = [
                ("dryRun", self.dry_run),
                ("propagationPolicy", self.propagation_policy.is_some()),
                ("orphanDependents", self.orphan_dependents.is_some()),
                ("gracePeriodSeconds", self.grace_period_seconds.is_some()),
                ("preconditions", self.preconditions.is_some()),
            ];
            let conflicts: Vec<String> = set
                .iter()
                .filter(|(_, is_set)| *is_set)
                .map(|(field, _)| {
                    unsafe_option_error(&format!("cannot be set together with .{field}"))
                        .to_string()
                })
                .collect();
            if !conflicts.is_empty() {
                return Err(Status::bad_request(strata_object::go::aggregate(
                    &conflicts,
                )));
            }
        }
        let mut errors = Vec::new();
        if let (Some(_), Some(policy)) = (self.orphan_dependents, &self.propagation_policy) {
            errors.push(FieldError::invalid_string(
                "propagationPolicy",
                policy,
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        if let Some(policy) = &self.propagation_policy {
            if !POLICIES.contains(&policy.as_str()) {
                let mut supported = POLICIES.to_vec();
                supported.push("nil");
                errors.push(FieldError::not_supported(
                    "propagationPolicy",
                    policy,
                    &supported,
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(invalid_options(&errors))
        }
    }

    /// Whether the answer to a delete that did not remove the object is 202 rather than 200:
    /// Kubernetes keeps 202 for an explicit `orphanDependents: false`.
    pub fn accepted_status(&self) -> bool {
        self.orphan_dependents == Some(false)
    }
}

fn unsafe_option_error(detail: &str) -> FieldError {
    FieldError::new(
        FieldErrorKind::Invalid,
        UNSAFE_OPTION,
        Some("true".into()),
        detail,
    )
}

fn invalid_options(errors: &[FieldError]) -> Status {
    Status::invalid("meta.k8s.io", "DeleteOptions", "", errors)
}

/// The result of a delete.
#[derive(Clone, Debug)]
pub struct Deleted {
    /// The object as removed, or as marked for deletion when finalizers hold it; `None` when
    /// an unreadable object was forced out.
    pub object: Option<Object>,
    /// False when finalizers keep the object in storage.
    pub removed: bool,
}

impl Deleted {
    /// Whether the answer is a success `Status` naming the object rather than the object:
    /// Kubernetes answers so for a custom resource removed at once (its storage does not
    /// return deleted objects); an object finalizers hold is always returned.
    pub fn answers_status(&self, info: &strata_object::ResourceType) -> bool {
        self.removed && info.custom
    }
}

impl Registry {
    /// Deletes an object, or marks it for deletion when finalizers hold it (`deletionTimestamp`
    /// set once; a later delete changes nothing). The update that removes the last finalizer
    /// removes the object.
    ///
    /// Strata has no garbage collector, so no propagation policy adds a finalizer: with
    /// nothing to orphan or wait for, `Orphan` and `Foreground` remove the object as
    /// `Background` does.
    pub async fn delete(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, Status> {
        opts.validate()?;
        let mut opts = opts.clone();
        if !self.config.unsafe_malformed_object_deletion {
            opts.ignore_store_read_error = false;
        }
        if opts.ignore_store_read_error {
            return self.delete_unreadable(rt, namespace, name).await;
        }
        let info = &rt.info;
        let key = info.key(namespace, name);
        loop {
            let (kv, current) = self.read_current(rt, &key, name).await?;
            check_delete_preconditions(info, &current, opts.preconditions.as_ref())?;
            if let Some(why) = rt.strategy.forbid_delete(&current) {
                return Err(Status::forbidden(&info.group, &info.resource, name, &why));
            }
            if !current.finalizers().is_empty() || rt.strategy.holds_deletion(&current) {
                if !current.deletion_timestamp().is_empty() {
                    return Ok(Deleted {
                        object: Some(current),
                        removed: false,
                    });
                }
                let mut marked = current.clone();
                marked.set_meta_value("deletionTimestamp", Some(Value::String(now_rfc3339())));
                marked.set_meta_value("deletionGracePeriodSeconds", Some(json!(0)));
                rt.strategy.prepare_for_delete(&mut marked);
                if opts.dry_run {
                    return Ok(Deleted {
                        object: Some(marked),
                        removed: false,
                    });
                }
                marked.set_resource_version("");
                match self
                    .store
                    .update(&key, encode_stored(rt, &marked).bytes, kv.mod_revision)
                    .await
                {
                    Ok(new_kv) => {
                        rt.wrote(new_kv.mod_revision);
                        marked.set_resource_version(
                            &to_resource_version(new_kv.mod_revision).to_string(),
                        );
                        return Ok(Deleted {
                            object: Some(marked),
                            removed: false,
                        });
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(store_error(Op::Delete, rt, name, e)),
                }
            }
            if opts.dry_run {
                return Ok(Deleted {
                    object: Some(current),
                    removed: true,
                });
            }
            match self.store.delete(&key, Some(kv.mod_revision)).await {
                Ok((_, revision)) => {
                    rt.wrote(revision);
                    // The last state, at the deletion's revision (as the DELETED event has it).
                    let mut current = current;
                    current.set_resource_version(&to_resource_version(revision).to_string());
                    return Ok(Deleted {
                        object: Some(current),
                        removed: true,
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(Op::Delete, rt, name, e)),
            }
        }
    }

    /// The forced path of `ignoreStoreReadErrorWithClusterBreakingPotential`: removes an object
    /// whose stored value does not decode, whatever its finalizers; a readable object is
    /// refused.
    async fn delete_unreadable(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
    ) -> Result<Deleted, Status> {
        let info = &rt.info;
        let key = info.key(namespace, name);
        loop {
            let (kv, _) = self
                .store
                .get(&key, None)
                .await
                .map_err(|e| store_error(Op::Delete, rt, name, e))?;
            let Some(kv) = kv else {
                return Err(Status::not_found(&info.group, &info.resource, name));
            };
            if decode_stored(rt, &kv).is_ok() {
                return Err(Status::invalid(
                    &info.group,
                    &info.resource,
                    name,
                    &[unsafe_option_error(
                        "is exclusively used to delete corrupt object(s), try again by removing this option",
                    )],
                ));
            }
            match self.store.delete(&key, Some(kv.mod_revision)).await {
                Ok((_, revision)) => {
                    rt.wrote(revision);
                    tracing::warn!(key, "removed an unreadable object on request");
                    return Ok(Deleted {
                        object: None,
                        removed: true,
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(Op::Delete, rt, name, e)),
            }
        }
    }

    /// Deletes every object of a collection that the list options select (marking those that
    /// finalizers hold); returns a success Status. With a `limit`, only that page goes.
    pub async fn delete_collection(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        list_opts: &ListOptions,
        opts: &DeleteOptions,
    ) -> Result<Status, Status> {
        opts.validate()?;
        let mut opts = opts.clone();
        if !self.config.unsafe_malformed_object_deletion {
            opts.ignore_store_read_error = false;
        }
        if opts.ignore_store_read_error {
            return Err(invalid_options(&[unsafe_option_error(
                "is not allowed with DELETECOLLECTION, try again after removing the option",
            )]));
        }
        let list = self.list(rt, namespace, list_opts).await?;
        for obj in &list.items {
            let (ns, name) = cache::name_of(obj);
            match self.delete(rt, ns, name, &opts).await {
                Ok(_) => {}
                // Removed meanwhile by someone else: the goal is reached.
                Err(s) if s.is_not_found() => {}
                Err(s) => return Err(s),
            }
        }
        Ok(Status::success(Some(StatusDetails {
            group: rt.info.group.clone(),
            kind: rt.info.kind.clone(),
            ..Default::default()
        })))
    }
}

fn check_delete_preconditions(
    info: &ResourceType,
    current: &Object,
    preconditions: Option<&Preconditions>,
) -> Result<(), Status> {
    let Some(pre) = preconditions else {
        return Ok(());
    };
    let conflict = |why: String| {
        let mut s = Status::conflict(&info.group, &info.kind, current.name(), &why);
        if let Some(d) = s.details.as_mut() {
            d.kind = info.kind.clone();
        }
        s
    };
    if let Some(uid) = pre.uid.as_deref() {
        if uid != current.uid() {
            return Err(conflict(format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                current.uid()
            )));
        }
    }
    if let Some(rv) = pre.resource_version.as_deref() {
        if rv != current.resource_version() {
            return Err(conflict(format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                current.resource_version()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(opts: DeleteOptions) -> String {
        opts.validate().err().map(|s| s.message).unwrap_or_default()
    }

    #[test]
    fn orphan_dependents_and_policy_together_are_invalid() {
        let m = message(DeleteOptions {
            orphan_dependents: Some(true),
            propagation_policy: Some("Background".into()),
            ..Default::default()
        });
        assert_eq!(
            m,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Background\": orphanDependents and deletionPropagation cannot be both set"
        );
    }

    #[test]
    fn unknown_policy_lists_the_supported_ones() {
        let m = message(DeleteOptions {
            propagation_policy: Some("Sideways".into()),
            ..Default::default()
        });
        assert!(
            m.ends_with("propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""),
            "{m}"
        );
    }

    #[test]
    fn the_unsafe_option_excludes_every_other_option() {
        let with = |o: DeleteOptions| {
            DeleteOptions {
                ignore_store_read_error: true,
                ..o
            }
            .validate()
            .unwrap_err()
        };
        let all = with(DeleteOptions {
            dry_run: true,
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions::default()),
            propagation_policy: Some("Orphan".into()),
            orphan_dependents: Some(true),
            ..Default::default()
        });
        assert_eq!(all.code, 400);
        assert!(all.is(strata_object::StatusReason::BadRequest));
        for field in [
            "dryRun",
            "propagationPolicy",
            "orphanDependents",
            "gracePeriodSeconds",
            "preconditions",
        ] {
            assert!(
                all.message.contains(&format!(
                    "ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: cannot be set together with .{field}"
                )),
                "{}",
                all.message
            );
        }
        let one = with(DeleteOptions {
            grace_period_seconds: Some(5),
            ..Default::default()
        });
        assert_eq!(
            one.message,
            "ignoreStoreReadErrorWithClusterBreakingPotential: Invalid value: true: cannot be set together with .gracePeriodSeconds"
        );
        assert!(DeleteOptions {
            ignore_store_read_error: true,
            ..Default::default()
        }
        .validate()
        .is_ok());
    }
}
