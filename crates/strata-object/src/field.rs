//! Field errors: the `causes` of an Invalid Status, rendered as Kubernetes renders them.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
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
    pub kind: FieldErrorKind,
    /// Dotted path, e.g. `metadata.name`.
    pub field: String,
    /// The offending value, already rendered the way Kubernetes prints it (strings quoted).
    pub value: Option<String>,
    pub detail: String,
}

impl FieldError {
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

    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(FieldErrorKind::Required, field, None, detail)
    }

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
