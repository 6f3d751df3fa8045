//! Field errors: the `causes` of an Invalid Status, rendered as Kubernetes renders them.
//!
//! ```
//! use strata_object::field::FieldError;
//! use strata_object::Status;
//!
//! let errors = [
//!     FieldError::required("metadata.name", "name or generateName is required"),
//!     FieldError::invalid_string("metadata.namespace", "Team A", "must be lowercase"),
//! ];
//! assert_eq!(
//!     errors[1].to_string(),
//!     r#"metadata.namespace: Invalid value: "Team A": must be lowercase"#,
//! );
//!
//! let status = Status::invalid("", "ConfigMap", "", &errors);
//! assert_eq!(status.code, 422);
//! let causes = status.details.unwrap().causes;
//! assert_eq!(causes[0].reason, "FieldValueRequired");
//! assert_eq!(causes[0].field, "metadata.name");
//! assert_eq!(causes[0].message, "Required value: name or generateName is required");
//! ```

use std::fmt;

/// The kind of a [`FieldError`], which decides its `StatusCause.reason` and message prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `FieldValueNotFound`: a value that was looked up is missing.
    NotFound,
    /// `FieldValueRequired`: a required field is empty or absent.
    Required,
    /// `FieldValueDuplicate`: a value that must be unique appears twice.
    Duplicate,
    /// `FieldValueInvalid`: the value breaks a rule.
    Invalid,
    /// `FieldValueNotSupported`: the value is not one of the supported ones.
    NotSupported,
    /// `FieldValueForbidden`: the field may not be set (here, or at all).
    Forbidden,
    /// `FieldValueTooLong`: a string or list is over its length limit.
    TooLong,
    /// `FieldValueTooMany`: a list or map has too many items.
    TooMany,
    /// `InternalError`: validation itself failed.
    Internal,
    /// `FieldValueTypeInvalid`: the value has the wrong type.
    TypeInvalid,
}

impl FieldErrorKind {
    /// The `StatusCause.reason` value.
    pub fn cause_type(self) -> &'static str {
        match self {
            Self::NotFound => "FieldValueNotFound",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Internal => "InternalError",
            Self::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Self::NotFound => "Not found",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Invalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Internal => "Internal error",
            Self::TypeInvalid => "Invalid value",
        }
    }

    /// Kinds whose message leaves the offending value out.
    fn omits_value(self) -> bool {
        matches!(
            self,
            Self::Required | Self::Forbidden | Self::TooLong | Self::Internal
        )
    }
}

/// One problem with one field of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong.
    pub kind: FieldErrorKind,
    /// Dotted path, e.g. `metadata.name`.
    pub field: String,
    /// The offending value, already rendered the way Kubernetes prints it (strings quoted).
    pub value: Option<String>,
    /// The explanation that ends the message (may be empty).
    pub detail: String,
}

impl FieldError {
    /// An error of any kind; `value` must already be rendered (see [`crate::go::quote`]).
    pub fn new(
        kind: FieldErrorKind,
        field: impl Into<String>,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    /// An Invalid error for a string value (rendered quoted).
    pub fn invalid_string(field: &str, value: &str, detail: impl Into<String>) -> Self {
        Self::new(
            FieldErrorKind::Invalid,
            field,
            Some(crate::go::quote(value)),
            detail,
        )
    }

    /// A Required-value error (the message leaves the value out).
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, None, detail)
    }

    /// A Forbidden error (the message leaves the value out).
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Forbidden, field, None, detail)
    }

    /// An Unsupported-value error listing the supported values.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| crate::go::quote(s)).collect();
        Self::new(
            FieldErrorKind::NotSupported,
            field,
            Some(crate::go::quote(value)),
            format!("supported values: {}", list.join(", ")),
        )
    }

    /// The message without the field: `<Type>: <value>: <detail>`.
    pub fn body(&self) -> String {
        let mut s = self.kind.text().to_string();
        if !self.kind.omits_value() {
            s.push_str(": ");
            s.push_str(self.value.as_deref().unwrap_or("null"));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.body())
        } else {
            write!(f, "{}: {}", self.field, self.body())
        }
    }
}
