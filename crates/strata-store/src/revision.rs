//! `Revision`: a position in the store's global history.

use std::fmt;

/// A revision of the whole store. Revision 0 means "before the first write". Engines that need
/// an ordered byte layout use [`Revision::to_be_bytes`]: big-endian, so byte order is numeric
/// order.
///
/// ```
/// use strata_store::Revision;
///
/// let r = Revision(41).next();
/// assert_eq!(r.get(), 42);
/// assert!(Revision::ZERO < r);
/// assert_eq!(Revision::from_be_bytes(r.to_be_bytes()), r);
/// // Byte order is numeric order.
/// assert!(Revision(255).to_be_bytes() < Revision(256).to_be_bytes());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(pub u64);

impl Revision {
    /// Before the first write.
    pub const ZERO: Revision = Revision(0);

    /// The revision as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one (for engines that number their writes one by one).
    pub fn next(self) -> Revision {
        Revision(self.0 + 1)
    }

    /// The 8-byte big-endian layout used in engine keys.
    pub fn to_be_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    /// The revision read back from [`Revision::to_be_bytes`]'s layout.
    pub fn from_be_bytes(b: [u8; 8]) -> Revision {
        Revision(u64::from_be_bytes(b))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
