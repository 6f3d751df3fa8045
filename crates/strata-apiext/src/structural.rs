//! Whether a CustomResourceDefinition version's `openAPIV3Schema` is a structural schema that
//! uses the `x-kubernetes-*` extensions legally.

use serde_json::Value;
use strata_object::field::FieldError;

/// The problems of `schema`, each at `path` (e.g.
/// `spec.versions[0].schema.openAPIV3Schema`) plus the position inside the schema.
pub fn check_schema(_schema: &Value, _path: &str) -> Vec<FieldError> {
    Vec::new()
}
