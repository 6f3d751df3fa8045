//! Controllers that run inside the server, next to the API they act through. They use the
//! registry's public operations only, exactly as an outside client would use the API, so each
//! replica of a multi-replica deployment may run them: every step is idempotent and guarded
//! by optimistic concurrency.

pub mod crd;
pub mod namespace;
mod per_namespace;
mod queue;
pub mod root_ca;
pub mod service_account;

pub use crd::CrdController;
pub use namespace::NamespaceController;
pub use root_ca::RootCaPublisher;
pub use service_account::ServiceAccountController;
