//! `ResourceVersion`: the API-level, opaque version string of an object or collection.
//!
//! Inside the server a resource version is a store revision; the conversion lives in
//! `strata-registry` (one function each way). Here it is only a string.

use std::fmt;

/// The `resourceVersion` string as clients see it. Clients may only compare it for equality.
///
/// Strata issues decimal revisions of its store, so [`ResourceVersion::to_u64`] reads back the
/// ones it issued and rejects any other string.
///
/// ```
/// use strata_object::ResourceVersion;
///
/// let rv = ResourceVersion::from(1234);
/// assert_eq!(rv.as_str(), "1234");
/// assert_eq!(rv.to_u64(), Some(1234));
/// assert_eq!(rv.to_string(), "1234");
///
/// assert!(ResourceVersion::default().is_unset());
/// assert_eq!(ResourceVersion::new("abc").to_u64(), None);
/// assert_eq!(ResourceVersion::new("-1").to_u64(), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ResourceVersion(String);

impl ResourceVersion {
    /// Wraps a string as received; any string is accepted.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The string as clients see it.
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
