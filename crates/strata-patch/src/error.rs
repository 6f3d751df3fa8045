//! The one error type of the patch engines. It says which HTTP class a failure belongs to; turning
//! it into a `Status` is the registry's job, not this crate's.

/// Why a patch could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is bad: not the expected JSON shape, an unknown directive, a
    /// directive of the wrong type. Answered with 400 Bad Request.
    #[error("{0}")]
    Malformed(String),
    /// The patch is well formed but cannot be applied to this object: a failed JSON-patch `test`,
    /// a path that does not exist, a strategic patch whose content contradicts its own
    /// `$retainKeys`. Answered with 422 Unprocessable Entity.
    #[error("{0}")]
    Invalid(String),
}

impl PatchError {
    /// The HTTP status code of this error class.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::Malformed(_) => 400,
            PatchError::Invalid(_) => 422,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_map_to_codes() {
        let bad = PatchError::Malformed("invalid JSON document".into());
        assert_eq!(bad.code(), 400);
        assert_eq!(bad.to_string(), "invalid JSON document");
        assert_eq!(PatchError::Invalid("x".into()).code(), 422);
    }
}
