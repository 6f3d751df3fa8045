//! Schema semantics of custom resources, as Kubernetes' apiextensions-apiserver defines them:
//! the structural OpenAPI v3 schema of a CustomResourceDefinition version and what it means for
//! the objects written against it.
//!
//! - [`structural`]: whether a CRD's schema is structural and uses the `x-kubernetes-*`
//!   extensions legally (the causes of a CRD's 422).
//! - [`validate`]: OpenAPI v3 validation of an object (type, format, enum, pattern, bounds,
//!   lengths, required, nullable, list-type uniqueness) with Kubernetes' field paths.
//! - [`defaults`]: `default` values filled in, on writes and on reads of stored objects.
//! - [`cel`]: `x-kubernetes-validations` rules compiled once per schema and evaluated with a
//!   cost limit.
//!
//! - [`crd`]: a CustomResourceDefinition as the resource types of its served versions.
//!
//! Nothing here does I/O; the registry and the CRD controller call it.

pub mod cel;
pub mod crd;
pub mod defaults;
mod gofmt;
pub mod prune;
pub mod schema;
pub mod structural;
pub mod validate;
