//! The conversion between API resource versions and store revisions (one function each way).

use strata_object::{ResourceVersion, Status};
use strata_store::Revision;

/// The resource version clients see for a store revision.
pub fn to_resource_version(rev: Revision) -> ResourceVersion {
    ResourceVersion::from(rev.get())
}

/// The store revision a client's resource version names. `Ok(None)` for the empty string.
pub fn to_revision(rv: &str) -> Result<Option<Revision>, Status> {
    if rv.is_empty() {
        return Ok(None);
    }
    match ResourceVersion::new(rv).to_u64() {
        Some(n) => Ok(Some(Revision(n))),
        None => Err(Status::bad_request(format!(
            "invalid resource version: resourceVersion: Invalid value: {rv:?}: must be a version this server issued"
        ))),
    }
}
