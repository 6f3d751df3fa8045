//! The one place where storage errors become `Status` responses.

use strata_object::Status;
use strata_store::StoreError;

use crate::RegisteredType;

/// Interprets a storage error of an operation on object `name` of type `rt`.
pub fn store_error(rt: &RegisteredType, name: &str, err: StoreError) -> Status {
    let group = &rt.info.group;
    let resource = &rt.info.resource;
    match err {
        StoreError::NotFound(_) => Status::not_found(group, resource, name),
        StoreError::Exists(_) => Status::already_exists(group, resource, name),
        StoreError::Conflict { .. } => Status::stale_conflict(group, resource, name),
        StoreError::Compacted { requested, .. } => Status::expired(format!(
            "The resourceVersion for the provided list is too old. (requested {requested})"
        )),
        StoreError::FutureRevision { requested, current } => {
            Status::too_large_resource_version(requested.get(), current.get(), 1)
                .with_retry_after(1)
        }
        StoreError::Invalid(msg) => Status::bad_request(msg),
        StoreError::Corrupt(msg) => Status::internal(format!(
            "{resource} {name:?}: stored object cannot be decoded: {msg}"
        )),
        StoreError::Unavailable(msg) => {
            Status::service_unavailable(format!("storage is unavailable: {msg}"))
        }
    }
}
