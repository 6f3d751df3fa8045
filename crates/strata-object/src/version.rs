//! `ResourceVersion`: the API-level, opaque version string of an object or collection.
//!
//! Inside the server a resource version is a store revision; the conversion lives in
//! `strata-registry` (one function each way). Here it is only a validated string.

use std::fmt;

/// The `resourceVersion` string as clients see it. Clients may only compare it for equality.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ResourceVersion(String);

impl ResourceVersion {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the empty string (unset).
    pub fn is_unset(&self) -> bool {
        self.0.is_empty()
    }

    /// The numeric form, if the version is one this server issued.
    pub fn to_u64(&self) -> Option<u64> {
        if self.0.is_empty() || !self.0.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        self.0.parse().ok()
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<u64> for ResourceVersion {
    fn from(v: u64) -> Self {
        Self(v.to_string())
    }
}
