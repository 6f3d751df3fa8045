//! The Strata object model: object metadata, `Status`, resource-type descriptors and name rules.
//!
//! Objects travel through the generic path as JSON value trees ([`Object`]); typed structs exist
//! only where code needs them (`Status`, discovery documents). This crate does no I/O and needs no
//! async runtime.

pub mod builtin;
pub mod field;
pub mod go;
pub mod names;
mod object;
pub mod printer;
pub mod resource;
pub mod schema;
pub mod selector;
mod status;
mod timestamp;
mod version;

pub use object::{Object, ObjectError};
pub use resource::{GroupVersionKind, ResourceType, Scope, SubResource, Verb};
pub use selector::{FieldSelector, LabelSelector};
pub use status::{Status, StatusCause, StatusDetails, StatusReason};
pub use timestamp::{format_micro_time, format_time, format_unix, now_rfc3339, parse_time};
pub use version::ResourceVersion;
