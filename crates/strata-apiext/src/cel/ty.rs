//! The static view of CEL values that the checker and the cost estimator work on: a type with,
//! for strings, bytes, lists and maps, a range of sizes.
//!
//! The same model serves twice. When a CRD is written, the types come from the schema and the
//! sizes from its `maxLength`/`maxItems`/`maxProperties` (or from the largest request when a
//! bound is missing), which is how Kubernetes estimates a rule's worst case. Before a rule is
//! evaluated, the types come from the actual value (see [`Ty::of_value`]), so the same
//! estimate becomes a bound on what this evaluation can cost.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Kubernetes' largest request (3 MiB): what an unbounded string or list may reach.
pub(crate) const MAX_REQUEST_SIZE: u64 = 3 * 1024 * 1024;

/// A `[min, max]` range, used both for sizes and for costs. Arithmetic saturates at
/// `u64::MAX`, which stands for "unknown / unbounded".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub min: u64,
    pub max: u64,
}

impl Range {
    pub const ZERO: Range = Range { min: 0, max: 0 };
    pub const UNKNOWN: Range = Range {
        min: 0,
        max: u64::MAX,
    };

    pub fn exact(n: u64) -> Range {
        Range { min: n, max: n }
    }

    pub fn upto(n: u64) -> Range {
        Range { min: 0, max: n }
    }

    pub fn add(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    pub fn mul(self, o: Range) -> Range {
        Range {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    pub fn union(self, o: Range) -> Range {
        Range {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }

    /// Each bound times `f`, rounded up (CEL's cost factors: 0.1 per character traversed,
    /// 0.25 per regex character).
    pub fn factor(self, f: f64) -> Range {
        fn one(x: u64, f: f64) -> u64 {
            if x == u64::MAX {
                return u64::MAX;
            }
            let v = (x as f64 * f).ceil();
            if v >= u64::MAX as f64 {
                u64::MAX
            } else {
                v as u64
            }
        }
        Range {
            min: one(self.min, f),
            max: one(self.max, f),
        }
    }
}

/// What `x-kubernetes-list-type` makes of a list: Kubernetes compares `set` lists as sets
/// and `map` lists as maps keyed by their `x-kubernetes-list-map-keys`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Assoc {
    #[default]
    None,
    Set,
    Map(Arc<[String]>),
}

/// The fields of an object schema (property names as CEL sees them, escaped).
#[derive(Debug, Default)]
pub(crate) struct Fields {
    pub fields: BTreeMap<String, Ty>,
}

/// How two values compare when set or map lists are inside them: those lists as sets or by
/// key, everything else as CEL compares it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum EqShape {
    Plain,
    List(Assoc, Box<EqShape>),
    /// A map: every value compares along the same shape.
    Values(Box<EqShape>),
    /// An object: the named fields compare along their shapes, the others plainly.
    Fields(BTreeMap<String, EqShape>),
}

/// A CEL type as far as the checker knows it.
#[derive(Clone, Debug)]
pub(crate) enum Ty {
    /// No value at all: the elements of an empty list literal, or a field absent from the
    /// value a runtime estimate is made for.
    Never,
    /// Any type, with the size of the value when it is known.
    Dyn(Option<Range>),
    Null,
    Bool,
    Int,
    Uint,
    Double,
    Duration,
    Timestamp,
    /// A type value (`int`, `type(x)`).
    Type,
    String(Range),
    Bytes(Range),
    /// Elements, size, and how the schema says elements associate.
    List(Box<Ty>, Range, Assoc),
    Map(Box<Ty>, Box<Ty>, Range),
    /// An object of a schema with `properties`.
    Object(Arc<Fields>),
    /// `kubernetes.URL`, `kubernetes.Quantity`, ...
    Opaque(&'static str),
    Optional(Box<Ty>),
}

impl Ty {
    pub fn dyn_unknown() -> Ty {
        Ty::Dyn(None)
    }

    /// A list whose elements do not associate (atomic).
    pub fn list(elem: Ty, size: Range) -> Ty {
        Ty::List(Box::new(elem), size, Assoc::None)
    }

    /// How values of this type compare for equality when a set or map list is inside, for
    /// [`EqShape`]; `None` when plain CEL equality is right.
    pub fn eq_shape(&self) -> Option<EqShape> {
        match self {
            Ty::List(e, _, assoc) => {
                let elem = e.eq_shape();
                if *assoc == Assoc::None && elem.is_none() {
                    return None;
                }
                Some(EqShape::List(
                    assoc.clone(),
                    Box::new(elem.unwrap_or(EqShape::Plain)),
                ))
            }
            Ty::Map(_, v, _) => v.eq_shape().map(|v| EqShape::Values(Box::new(v))),
            Ty::Object(f) => {
                let fields: BTreeMap<String, EqShape> = f
                    .fields
                    .iter()
                    .filter_map(|(k, t)| t.eq_shape().map(|s| (k.clone(), s)))
                    .collect();
                (!fields.is_empty()).then_some(EqShape::Fields(fields))
            }
            _ => None,
        }
    }

    /// The size `size()` would return, when the type has one.
    pub fn size(&self) -> Option<Range> {
        match self {
            Ty::String(r) | Ty::Bytes(r) | Ty::List(_, r, _) | Ty::Map(_, _, r) => Some(*r),
            Ty::Dyn(r) => *r,
            Ty::Never => Some(Range::ZERO),
            _ => None,
        }
    }

    /// The size, or "anything" when unknown (CEL's `sizeOrUnknown`).
    pub fn size_or_unknown(&self) -> Range {
        self.size().unwrap_or(Range::UNKNOWN)
    }

    /// A size for the purpose of `dyn` unions: scalars count as empty.
    fn dyn_size(&self) -> Option<Range> {
        match self {
            Ty::Dyn(r) => *r,
            Ty::String(_) | Ty::Bytes(_) | Ty::List(..) | Ty::Map(..) | Ty::Never => self.size(),
            Ty::Object(_) | Ty::Optional(_) => None,
            _ => Some(Range::ZERO),
        }
    }

    /// Whether the type says nothing useful (`dyn`, or no value).
    pub fn is_dyn(&self) -> bool {
        matches!(self, Ty::Dyn(_) | Ty::Never)
    }

    /// The element type when iterating: list elements, map keys.
    pub fn iter_elem(&self) -> Ty {
        match self {
            Ty::List(e, _, _) => (**e).clone(),
            Ty::Map(k, _, _) => (**k).clone(),
            Ty::Object(_) => Ty::String(Range::UNKNOWN),
            Ty::Never => Ty::Never,
            Ty::Dyn(size) => Ty::Dyn(*size),
            _ => Ty::dyn_unknown(),
        }
    }

    /// The CEL type name, for error messages.
    pub fn name(&self) -> String {
        match self {
            Ty::Never | Ty::Dyn(_) => "dyn".into(),
            Ty::Null => "null_type".into(),
            Ty::Bool => "bool".into(),
            Ty::Int => "int".into(),
            Ty::Uint => "uint".into(),
            Ty::Double => "double".into(),
            Ty::Duration => "google.protobuf.Duration".into(),
            Ty::Timestamp => "google.protobuf.Timestamp".into(),
            Ty::Type => "type".into(),
            Ty::String(_) => "string".into(),
            Ty::Bytes(_) => "bytes".into(),
            Ty::List(e, _, _) => format!("list({})", e.name()),
            Ty::Map(k, v, _) => format!("map({}, {})", k.name(), v.name()),
            Ty::Object(_) => "object".into(),
            Ty::Opaque(n) => (*n).into(),
            Ty::Optional(t) => format!("optional_type({})", t.name()),
        }
    }

    /// The smallest type covering both.
    pub fn union(&self, o: &Ty) -> Ty {
        match (self, o) {
            (Ty::Never, t) | (t, Ty::Never) => t.clone(),
            (Ty::String(a), Ty::String(b)) => Ty::String(a.union(*b)),
            (Ty::Bytes(a), Ty::Bytes(b)) => Ty::Bytes(a.union(*b)),
            (Ty::List(ea, a, x), Ty::List(eb, b, y)) => Ty::List(
                Box::new(ea.union(eb)),
                a.union(*b),
                if x == y { x.clone() } else { Assoc::None },
            ),
            (Ty::Map(ka, va, a), Ty::Map(kb, vb, b)) => {
                Ty::Map(Box::new(ka.union(kb)), Box::new(va.union(vb)), a.union(*b))
            }
            (Ty::Object(a), Ty::Object(b)) => {
                if Arc::ptr_eq(a, b) {
                    return self.clone();
                }
                let mut fields = a.fields.clone();
                for (k, t) in &b.fields {
                    let merged = match fields.get(k) {
                        Some(existing) => existing.union(t),
                        None => t.clone(),
                    };
                    fields.insert(k.clone(), merged);
                }
                Ty::Object(Arc::new(Fields { fields }))
            }
            (Ty::Optional(a), Ty::Optional(b)) => Ty::Optional(Box::new(a.union(b))),
            (Ty::Opaque(a), Ty::Opaque(b)) if a == b => self.clone(),
            (Ty::Null, Ty::Null)
            | (Ty::Bool, Ty::Bool)
            | (Ty::Int, Ty::Int)
            | (Ty::Uint, Ty::Uint)
            | (Ty::Double, Ty::Double)
            | (Ty::Duration, Ty::Duration)
            | (Ty::Timestamp, Ty::Timestamp)
            | (Ty::Type, Ty::Type) => self.clone(),
            _ => {
                let size = match (self.dyn_size(), o.dyn_size()) {
                    (Some(a), Some(b)) => Some(a.union(b)),
                    _ => None,
                };
                Ty::Dyn(size)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_saturate() {
        let big = Range::exact(u64::MAX - 1);
        assert_eq!(big.add(Range::exact(5)).max, u64::MAX);
        assert_eq!(big.mul(Range::exact(2)).max, u64::MAX);
        assert_eq!(Range::exact(15).factor(0.1), Range::exact(2));
        assert_eq!(Range::UNKNOWN.factor(0.1).max, u64::MAX);
    }

    #[test]
    fn unions_keep_the_largest_sizes() {
        let a = Ty::String(Range::exact(3));
        let b = Ty::String(Range::exact(10));
        assert_eq!(a.union(&b).size(), Some(Range { min: 3, max: 10 }));
        let mixed = Ty::Int.union(&Ty::String(Range::exact(4)));
        assert!(matches!(mixed, Ty::Dyn(Some(Range { min: 0, max: 4 }))));
        assert!(matches!(Ty::Never.union(&Ty::Int), Ty::Int));
    }
}
