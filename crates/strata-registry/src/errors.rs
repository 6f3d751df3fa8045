//! The one place where storage errors become `Status` responses.

use strata_object::Status;
use strata_store::StoreError;

use crate::RegisteredType;

/// The operation a storage error happened in. The same storage error means different things
/// per operation, as in Kubernetes' `Interpret{Get,List,Create,Update,Delete}Error`: a key
/// that exists is a name taken for a create, and a lost race for an update or a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    List,
    Create,
    Update,
    Delete,
}

/// Interprets a storage error of `op` on object `name` of type `rt`.
pub fn store_error(op: Op, rt: &RegisteredType, name: &str, err: StoreError) -> Status {
    let group = &rt.info.group;
    let resource = &rt.info.resource;
    match err {
        StoreError::NotFound(_) => Status::not_found(group, resource, name),
        StoreError::Exists(_) | StoreError::Conflict { .. } if op == Op::Create => {
            Status::already_exists(group, resource, name)
        }
        StoreError::Exists(_) | StoreError::Conflict { .. } => {
            Status::stale_conflict(group, resource, name)
        }
        // Kubernetes' words for a list at a revision compaction removed.
        StoreError::Compacted { .. } => {
            Status::expired("The resourceVersion for the provided list is too old.")
        }
        StoreError::FutureRevision { requested, current } => {
            Status::too_large_resource_version(requested.get(), current.get(), 1)
                .with_retry_after(1)
        }
        StoreError::Invalid(msg) => Status::bad_request(msg),
        // Kubernetes' wording (storage error code 7), which names the key.
        StoreError::Corrupt(msg) => {
            Status::internal(format!("StorageError: corrupt object, Code: 7, {msg}"))
        }
        // An object the engine refuses for its size (etcd's request limit).
        StoreError::TooLarge(msg) => Status::too_large_entity(&msg),
        // The outcome is unknown: Kubernetes' 504 for a storage request that timed out.
        StoreError::Timeout(msg) => Status::timeout(&msg),
        StoreError::Unavailable(msg) => {
            Status::service_unavailable(format!("storage is unavailable: {msg}"))
        }
    }
}

/// The storage error of a value under `key` that does not decode as an object.
pub(crate) fn undecodable(key: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!(
        "Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: object not decodable: {err}"
    ))
}

/// Several undecodable values under one prefix, as a list reports them.
pub(crate) fn undecodable_list(rt: &RegisteredType, found: &[(String, String)]) -> Status {
    match found {
        [(key, err)] => store_error(Op::List, rt, "", undecodable(key, err)),
        _ => {
            let mut message = format!(
                "unable to transform or decode {} objects: {{\n",
                found.len()
            );
            for (key, err) in found {
                message.push_str(&format!(
                    "\tStorageError: corrupt object, Code: 7, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: object not decodable: {err}\n"
                ));
            }
            message.push('}');
            Status::internal(message)
        }
    }
}

/// Interprets a watch-cache error of a read or watch of type `rt`.
pub fn cache_error(rt: &RegisteredType, err: strata_watch::CacheError) -> Status {
    cache_error_in(Op::List, rt, err)
}

/// [`cache_error`] for a read of `op`.
pub fn cache_error_in(op: Op, rt: &RegisteredType, err: strata_watch::CacheError) -> Status {
    use strata_watch::CacheError;
    match err {
        CacheError::Expired { requested, oldest } => Status::expired(format!(
            "too old resource version: {} ({})",
            requested.get(),
            oldest.get()
        )),
        CacheError::TooLarge { requested, current } => {
            Status::too_large_resource_version(requested.get(), current.get(), 1)
                .with_retry_after(1)
        }
        CacheError::Overflow { buffered } => Status::expired(format!(
            "watch closed: the client fell {buffered} events behind; list again and watch from \
             the list's resourceVersion"
        )),
        CacheError::Storage(e) => store_error(op, rt, "", e),
    }
}
