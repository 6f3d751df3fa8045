//! A light type checker and cost estimator over cel-rust's AST, after cel-go's checker and
//! Kubernetes' cost model.
//!
//! cel-rust has neither a type checker nor cost tracking. This walks an expression once with
//! the types of `self` and `oldSelf`, computing each node's [`Ty`] and a `[min, max]` cost in
//! CEL's units (1 per identifier, field selection and O(1) call; 0.1 per character a string
//! function traverses; list and map literals 10 and 30; a comprehension multiplies its loop
//! body by the size of its range), with Kubernetes' estimates for its library functions.
//!
//! In *strict* mode (when a CRD is written) it also reports what cel-go's checker would:
//! undeclared references, undefined fields, calls no overload accepts when the argument types
//! are known. In lenient mode (before an evaluation, with the types of the actual values) it
//! reports nothing and only bounds the cost.

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

use super::ty::{EqShape, Range, Ty};

/// CEL's cost per character traversed.
const STRING_TRAVERSAL: f64 = 0.1;
/// CEL's cost per regex character, per character matched against.
const REGEX_LENGTH: f64 = 0.25;
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;

/// What the checker found out about one expression.
pub(crate) struct Checked {
    pub ty: Ty,
    pub cost: Range,
    /// The `==` and `!=` calls whose operands hold set or map lists, with how to compare
    /// them (cel-rust's equality is positional).
    pub shaped_equalities: Vec<(u64, EqShape)>,
    /// `(expression id, message)` of each problem, strict mode only.
    pub errors: Vec<(u64, String)>,
}

/// Checks `e` with `self` of type `self_ty` and, when declared, `oldSelf` of `old_ty`.
pub(crate) fn check(e: &IdedExpr, self_ty: &Ty, old_ty: Option<&Ty>, strict: bool) -> Checked {
    let mut c = Checker {
        scopes: Vec::new(),
        format_literals: Vec::new(),
        self_ty,
        old_ty,
        strict,
        errors: Vec::new(),
        shaped_equalities: Vec::new(),
    };
    let (ty, cost) = c.expr(e);
    Checked {
        ty,
        cost,
        errors: c.errors,
        shaped_equalities: c.shaped_equalities,
    }
}

struct Checker<'a> {
    scopes: Vec<(String, Ty)>,
    /// List and map literals within `format()` arguments, which may mix types.
    format_literals: Vec<u64>,
    self_ty: &'a Ty,
    old_ty: Option<&'a Ty>,
    strict: bool,
    errors: Vec<(u64, String)>,
    shaped_equalities: Vec<(u64, EqShape)>,
}

const TYPE_NAMES: &[&str] = &[
    "bool",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

/// Global functions (and namespaced ones, written `ns.f(...)`).
const GLOBAL_FUNCTIONS: &[&str] = &[
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "duration",
    "timestamp",
    "dyn",
    "type",
    "matches",
    "url",
    "isURL",
    "quantity",
    "isQuantity",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "strings.quote",
    "ip",
    "isIP",
    "ip.isCanonical",
    "cidr",
    "isCIDR",
];

const MEMBER_FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "format",
    "isSorted",
    "sum",
    "min",
    "max",
    "find",
    "findAll",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "sign",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "isGreaterThan",
    "isLessThan",
    "compareTo",
    "add",
    "sub",
    "hasValue",
    "value",
    "orValue",
    "or",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "containsIP",
    "containsCIDR",
    "ip",
    "masked",
    "prefixLength",
];

fn one() -> Range {
    Range::exact(1)
}

/// The size CEL's estimator assumes for equality and ordering costs: actual sizes for
/// strings, bytes, lists and maps, nothing for scalars and objects, unknown otherwise.
fn cmp_size(t: &Ty) -> Range {
    match t {
        Ty::String(r) | Ty::Bytes(r) | Ty::List(_, r, _) | Ty::Map(_, _, r) => *r,
        Ty::Dyn(Some(r)) => *r,
        Ty::Dyn(None) | Ty::Opaque(_) | Ty::Optional(_) => Range::UNKNOWN,
        _ => Range::ZERO,
    }
}

fn is_stringish(t: &Ty) -> bool {
    matches!(t, Ty::String(_) | Ty::Bytes(_) | Ty::Dyn(_))
}

fn is_numeric(t: &Ty) -> bool {
    matches!(t, Ty::Int | Ty::Uint | Ty::Double)
}

/// Whether two known types can never be compared for equality (cel-go's `_==_` takes two
/// values of one type; numbers compare across types at runtime, so they are let through).
fn incomparable(a: &Ty, b: &Ty) -> bool {
    fn kind(t: &Ty) -> Option<u8> {
        Some(match t {
            Ty::Bool => 1,
            Ty::Int | Ty::Uint | Ty::Double => 2,
            Ty::String(_) => 3,
            Ty::Bytes(_) => 4,
            Ty::Duration => 5,
            Ty::Timestamp => 6,
            Ty::List(..) => 7,
            Ty::Map(..) | Ty::Object(_) => 8,
            _ => return None,
        })
    }
    matches!((kind(a), kind(b)), (Some(x), Some(y)) if x != y)
}

impl Checker<'_> {
    fn error(&mut self, id: u64, msg: impl Into<String>) {
        if self.strict {
            self.errors.push((id, msg.into()));
        }
    }

    fn no_overload(&mut self, id: u64, function: &str, target: Option<&Ty>, args: &[&Ty]) {
        let list: Vec<String> = args.iter().map(|t| t.name()).collect();
        let applied = match target {
            Some(t) => format!("{}.({})", t.name(), list.join(", ")),
            None => format!("({})", list.join(", ")),
        };
        self.error(
            id,
            format!("found no matching overload for '{function}' applied to '{applied}'"),
        );
    }

    fn lookup(&self, name: &str) -> Option<Ty> {
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return Some(t.clone());
        }
        match name {
            "self" => Some(self.self_ty.clone()),
            "oldSelf" => self.old_ty.cloned(),
            _ => None,
        }
    }

    fn expr(&mut self, e: &IdedExpr) -> (Ty, Range) {
        match &e.expr {
            Expr::Literal(l) => (literal_ty(l), Range::ZERO),
            Expr::Ident(name) => {
                if let Some(t) = self.lookup(name) {
                    return (t, one());
                }
                if TYPE_NAMES.contains(&name.as_str()) {
                    return (Ty::Type, one());
                }
                self.error(
                    e.id,
                    format!("undeclared reference to '{name}' (in container '')"),
                );
                (Ty::dyn_unknown(), one())
            }
            Expr::Select(sel) => {
                if let Expr::Ident(ns) = &sel.operand.expr {
                    if self.lookup(ns).is_none() && !sel.test {
                        // A qualified name that is not a variable's field (e.g. a type).
                        self.error(
                            e.id,
                            format!(
                                "undeclared reference to '{ns}.{}' (in container '')",
                                sel.field
                            ),
                        );
                        return (Ty::dyn_unknown(), one());
                    }
                }
                let (operand, cost) = self.expr(&sel.operand);
                let field_ty = self.select(e.id, &operand, &sel.field);
                if sel.test {
                    // `has()` costs nothing beyond its operand in Kubernetes.
                    return (Ty::Bool, cost);
                }
                let step = match operand {
                    Ty::Map(..) | Ty::Object(_) => one(),
                    _ => Range::ZERO,
                };
                (field_ty, cost.add(step))
            }
            Expr::List(list) => {
                let mut cost = Range::exact(LIST_CREATE);
                let mut elem = Ty::Never;
                let mut first: Option<Ty> = None;
                let mut mixed = self.format_literals.contains(&e.id);
                for item in &list.elements {
                    let (t, c) = self.expr(item);
                    // One report per list, as cel-go.
                    if !mixed && self.homogeneous(item.id, &mut first, &t) {
                        mixed = true;
                    }
                    cost = cost.add(c);
                    elem = elem.union(&t);
                }
                let n = Range::exact(list.elements.len() as u64);
                (Ty::list(elem, n), cost)
            }
            Expr::Map(map) => {
                let mut cost = Range::exact(MAP_CREATE);
                let mut key = Ty::Never;
                let mut val = Ty::Never;
                let (mut first_key, mut first_val) = (None, None);
                let exempt = self.format_literals.contains(&e.id);
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        let (kt, kc) = self.expr(&me.key);
                        let (vt, vc) = self.expr(&me.value);
                        if !exempt {
                            self.homogeneous(me.key.id, &mut first_key, &kt);
                            self.homogeneous(me.value.id, &mut first_val, &vt);
                        }
                        cost = cost.add(kc).add(vc);
                        key = key.union(&kt);
                        val = val.union(&vt);
                    }
                }
                let n = Range::exact(map.entries.len() as u64);
                (Ty::Map(Box::new(key), Box::new(val), n), cost)
            }
            Expr::Struct(st) => {
                self.error(
                    e.id,
                    format!(
                        "undeclared reference to '{}' (in container '')",
                        st.type_name
                    ),
                );
                let mut cost = Range::exact(STRUCT_CREATE);
                for entry in &st.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        cost = cost.add(self.expr(&f.value).1);
                    }
                }
                (Ty::dyn_unknown(), cost)
            }
            Expr::Comprehension(comp) => self.comprehension(comp),
            Expr::Call(call) => self.call(e.id, call),
            Expr::Unspecified => (Ty::dyn_unknown(), Range::ZERO),
        }
    }

    /// Literal lists and maps hold one type (Kubernetes checks aggregate literals are
    /// homogeneous): the first element's scalar type is expected of the others.
    fn homogeneous(&mut self, id: u64, first: &mut Option<Ty>, t: &Ty) -> bool {
        let scalar = matches!(
            t,
            Ty::Bool
                | Ty::Int
                | Ty::Uint
                | Ty::Double
                | Ty::String(_)
                | Ty::Bytes(_)
                | Ty::Duration
                | Ty::Timestamp
        );
        if !scalar {
            return false;
        }
        match first {
            None => {
                *first = Some(t.clone());
                false
            }
            Some(f) if f.name() != t.name() => {
                let (expected, found) = (f.name(), t.name());
                self.error(
                    id,
                    format!("expected type '{expected}' but found '{found}'"),
                );
                true
            }
            Some(_) => false,
        }
    }

    fn select(&mut self, id: u64, operand: &Ty, field: &str) -> Ty {
        match operand {
            Ty::Object(fields) => match fields.fields.get(field) {
                Some(t) => t.clone(),
                None if self.strict => {
                    self.error(id, format!("undefined field '{field}'"));
                    Ty::dyn_unknown()
                }
                None => Ty::Never,
            },
            Ty::Map(_, v, _) => (**v).clone(),
            // A part of a value keeps within the value's size.
            Ty::Dyn(size) => Ty::Dyn(*size),
            // Optional chaining: `a.?b.c` is an optional too.
            Ty::Optional(inner) => {
                let inner = (**inner).clone();
                Ty::Optional(Box::new(self.select(id, &inner, field)))
            }
            Ty::Never => Ty::Never,
            other => {
                let name = other.name();
                self.error(
                    id,
                    format!("type '{name}' does not support field selection"),
                );
                Ty::dyn_unknown()
            }
        }
    }

    fn comprehension(&mut self, comp: &ComprehensionExpr) -> (Ty, Range) {
        let (range_ty, range_cost) = self.expr(&comp.iter_range);
        let (init_ty, init_cost) = self.expr(&comp.accu_init);
        let is_bind = matches!(&comp.iter_range.expr, Expr::List(l) if l.elements.is_empty())
            && matches!(
                &comp.loop_cond.expr,
                Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner()
            )
            && comp.accu_var != "@result";
        if is_bind {
            self.scopes.push((comp.accu_var.clone(), init_ty));
            let (t, c) = self.expr(&comp.result);
            self.scopes.pop();
            return (t, range_cost.add(init_cost).add(c));
        }
        let accu_is_list = matches!(&comp.accu_init.expr, Expr::List(_));
        self.scopes.push((comp.accu_var.clone(), init_ty));
        let (first, second) = match &comp.iter_var2 {
            Some(_) => match &range_ty {
                Ty::List(e, _, _) => (Ty::Int, (**e).clone()),
                Ty::Map(k, v, _) => ((**k).clone(), (**v).clone()),
                other => (other.iter_elem(), Ty::dyn_unknown()),
            },
            None => (range_ty.iter_elem(), Ty::Never),
        };
        self.scopes.push((comp.iter_var.clone(), first));
        if let Some(v2) = &comp.iter_var2 {
            self.scopes.push((v2.clone(), second));
        }
        let (_, cond_cost) = self.expr(&comp.loop_cond);
        let (step_ty, step_cost) = self.expr(&comp.loop_step);
        self.scopes.pop();
        if comp.iter_var2.is_some() {
            self.scopes.pop();
        }
        let count = range_ty.size_or_unknown();
        if accu_is_list {
            // map() and filter(): a list of at most as many elements as the range.
            let elem = match &step_ty {
                Ty::List(e, _, _) => (**e).clone(),
                _ => Ty::dyn_unknown(),
            };
            if let Some(slot) = self.scopes.last_mut() {
                slot.1 = Ty::list(elem, Range::upto(count.max));
            }
        }
        let (result_ty, result_cost) = self.expr(&comp.result);
        self.scopes.pop();
        let loop_cost = count.mul(step_cost.add(cond_cost));
        (
            result_ty,
            range_cost.add(init_cost).add(result_cost).add(loop_cost),
        )
    }

    fn call(&mut self, id: u64, call: &CallExpr) -> (Ty, Range) {
        let name = call.func_name.as_str();
        // `ns.f(...)` where `ns` is no variable: the namespaced global function `ns.f`.
        if let Some(target) = &call.target {
            if let Expr::Ident(ns) = &target.expr {
                if self.lookup(ns).is_none() {
                    let qualified = format!("{ns}.{name}");
                    if GLOBAL_FUNCTIONS.contains(&qualified.as_str()) {
                        return self.global_call(id, &qualified, &call.args);
                    }
                }
            }
        }
        match &call.target {
            None => self.global_call(id, name, &call.args),
            Some(target) => self.member_call(id, name, target, &call.args),
        }
    }

    fn args(&mut self, args: &[IdedExpr]) -> (Vec<Ty>, Range) {
        let mut tys = Vec::with_capacity(args.len());
        let mut cost = Range::ZERO;
        for a in args {
            let (t, c) = self.expr(a);
            tys.push(t);
            cost = cost.add(c);
        }
        (tys, cost)
    }

    fn global_call(&mut self, id: u64, name: &str, args: &[IdedExpr]) -> (Ty, Range) {
        use cel::common::ast::operators as op;
        // Short-circuiting operators first: their cost is not the plain sum.
        match name {
            op::LOGICAL_AND | op::LOGICAL_OR if args.len() == 2 => {
                let (lt, lc) = self.expr(&args[0]);
                let (rt, rc) = self.expr(&args[1]);
                if [&lt, &rt]
                    .iter()
                    .any(|t| !t.is_dyn() && !matches!(t, Ty::Bool))
                {
                    self.no_overload(id, name, None, &[&lt, &rt]);
                }
                return (
                    Ty::Bool,
                    Range {
                        min: lc.min,
                        max: lc.max.saturating_add(rc.max),
                    },
                );
            }
            op::CONDITIONAL if args.len() == 3 => {
                let (ct, cc) = self.expr(&args[0]);
                let (tt, tc) = self.expr(&args[1]);
                let (ft, fc) = self.expr(&args[2]);
                if !ct.is_dyn() && !matches!(ct, Ty::Bool) {
                    self.no_overload(id, name, None, &[&ct, &tt, &ft]);
                }
                return (tt.union(&ft), cc.add(tc.union(fc)));
            }
            _ => {}
        }
        let (tys, arg_cost) = self.args(args);
        let refs: Vec<&Ty> = tys.iter().collect();
        let (ty, fn_cost) = match (name, tys.as_slice()) {
            (op::LOGICAL_NOT, [t]) | (op::NOT_STRICTLY_FALSE, [t]) => {
                if !t.is_dyn() && !matches!(t, Ty::Bool) {
                    self.no_overload(id, name, None, &refs);
                }
                (Ty::Bool, one())
            }
            (op::EQUALS | op::NOT_EQUALS, [a, b]) => {
                if incomparable(a, b) {
                    self.no_overload(id, name, None, &refs);
                }
                if let Some(shape) = a.eq_shape().or_else(|| b.eq_shape()) {
                    self.shaped_equalities.push((id, shape));
                }
                (Ty::Bool, eq_cost(a, b))
            }
            (super::library::SHAPED_EQUALS, [a, b, _]) => (Ty::Bool, eq_cost(a, b)),
            (op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS, [a, b]) => {
                let ordered = |t: &Ty| {
                    matches!(
                        t,
                        Ty::Int
                            | Ty::Uint
                            | Ty::Double
                            | Ty::String(_)
                            | Ty::Bytes(_)
                            | Ty::Bool
                            | Ty::Duration
                            | Ty::Timestamp
                    )
                };
                let known = !a.is_dyn() && !b.is_dyn();
                let mismatch = known
                    && (!ordered(a)
                        || !ordered(b)
                        || (incomparable(a, b) && !(is_numeric(a) && is_numeric(b))));
                if mismatch {
                    self.no_overload(id, name, None, &refs);
                }
                let cost = if is_stringish(a) || is_stringish(b) {
                    eq_cost(a, b)
                } else {
                    one()
                };
                (Ty::Bool, cost)
            }
            (op::ADD, [a, b]) => self.add(id, a, b),
            (op::SUBSTRACT, [a, b]) => {
                let ty = match (a, b) {
                    (Ty::Timestamp, Ty::Timestamp) => Ty::Duration,
                    (Ty::Timestamp, Ty::Duration) => Ty::Timestamp,
                    (Ty::Duration, Ty::Duration) => Ty::Duration,
                    (a, b) if is_numeric(a) && a.name() == b.name() => a.clone(),
                    (a, b) if a.is_dyn() || b.is_dyn() => Ty::dyn_unknown(),
                    _ => {
                        self.no_overload(id, name, None, &refs);
                        Ty::dyn_unknown()
                    }
                };
                (ty, one())
            }
            (op::MULTIPLY | op::DIVIDE | op::MODULO, [a, b]) => {
                let ty = match (a, b) {
                    (a, b) if is_numeric(a) && a.name() == b.name() => a.clone(),
                    (a, b) if a.is_dyn() || b.is_dyn() => Ty::dyn_unknown(),
                    _ => {
                        self.no_overload(id, name, None, &refs);
                        Ty::dyn_unknown()
                    }
                };
                (ty, one())
            }
            (op::NEGATE, [a]) => {
                if !a.is_dyn() && !matches!(a, Ty::Int | Ty::Double | Ty::Duration) {
                    self.no_overload(id, name, None, &refs);
                }
                (a.clone(), one())
            }
            (op::INDEX, [container, _]) => {
                let ty = match container {
                    Ty::List(e, _, _) => (**e).clone(),
                    Ty::Map(_, v, _) => (**v).clone(),
                    Ty::Dyn(size) => Ty::Dyn(*size),
                    Ty::Object(_) | Ty::Never => Ty::dyn_unknown(),
                    _ => {
                        self.no_overload(id, name, None, &refs);
                        Ty::dyn_unknown()
                    }
                };
                (ty, one())
            }
            (op::OPT_INDEX, [container, _]) => {
                let inner = match container {
                    Ty::List(e, _, _) => (**e).clone(),
                    Ty::Map(_, v, _) => (**v).clone(),
                    Ty::Optional(inner) => inner.iter_elem(),
                    _ => Ty::dyn_unknown(),
                };
                (Ty::Optional(Box::new(inner)), one())
            }
            (op::OPT_SELECT, [operand, _]) => {
                let field = match args.get(1).map(|a| &a.expr) {
                    Some(Expr::Literal(LiteralValue::String(s))) => s.inner().to_string(),
                    _ => String::new(),
                };
                let inner = match operand {
                    Ty::Optional(inner) => self.select(id, inner, &field),
                    other => self.select(id, other, &field),
                };
                (Ty::Optional(Box::new(inner)), one())
            }
            (op::IN, [_, container]) => {
                let cost = match container {
                    Ty::Map(..) | Ty::Object(_) => one(),
                    Ty::List(_, n, _) => *n,
                    other => other.size_or_unknown(),
                };
                if !container.is_dyn() && !matches!(container, Ty::List(..) | Ty::Map(..)) {
                    self.no_overload(id, name, None, &refs);
                }
                (Ty::Bool, cost)
            }
            ("size", [t]) => {
                self.check_sized(id, name, None, t);
                (Ty::Int, one())
            }
            ("int", [_]) => (Ty::Int, one()),
            ("uint", [_]) => (Ty::Uint, one()),
            ("double", [_]) => (Ty::Double, one()),
            ("bool", [_]) => (Ty::Bool, one()),
            ("duration" | "timestamp", [_]) => {
                self.check_time_literal(name, args.first());
                let ty = if name == "duration" {
                    Ty::Duration
                } else {
                    Ty::Timestamp
                };
                (ty, one())
            }
            ("type", [_]) => (Ty::Type, one()),
            ("dyn", [t]) => (dyn_of(t), one()),
            ("string", [Ty::Opaque("net.IP" | "net.CIDR")]) => (Ty::String(Range::upto(43)), one()),
            ("ip" | "cidr", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                let ty = if name == "ip" { "net.IP" } else { "net.CIDR" };
                (Ty::Opaque(ty), s.size_or_unknown().factor(STRING_TRAVERSAL))
            }
            ("isIP" | "isCIDR", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                (Ty::Bool, s.size_or_unknown().factor(STRING_TRAVERSAL))
            }
            ("ip.isCanonical", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                (Ty::Bool, s.size_or_unknown().factor(2.0 * STRING_TRAVERSAL))
            }
            ("string", [t]) => match t {
                Ty::Bytes(r) => (
                    Ty::String(Range {
                        min: r.min / 4,
                        max: r.max,
                    }),
                    r.factor(STRING_TRAVERSAL),
                ),
                Ty::String(r) => (Ty::String(*r), one()),
                _ => (Ty::String(Range::UNKNOWN), one()),
            },
            ("bytes", [t]) => match t {
                Ty::String(r) => (
                    Ty::Bytes(Range {
                        min: r.min,
                        max: r.max.saturating_mul(4),
                    }),
                    r.factor(STRING_TRAVERSAL),
                ),
                Ty::Bytes(r) => (Ty::Bytes(*r), one()),
                _ => (Ty::Bytes(Range::UNKNOWN), one()),
            },
            ("matches", [s, re]) => {
                self.check_regex_literal(args.get(1));
                (Ty::Bool, regex_cost(s, re))
            }
            ("url", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                (
                    Ty::Opaque("kubernetes.URL"),
                    s.size_or_unknown().factor(STRING_TRAVERSAL),
                )
            }
            ("isURL", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                (Ty::Bool, s.size_or_unknown().factor(STRING_TRAVERSAL))
            }
            ("quantity", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                (
                    Ty::Opaque("kubernetes.Quantity"),
                    s.size_or_unknown().factor(STRING_TRAVERSAL),
                )
            }
            ("isQuantity", [s]) => {
                self.check_string_arg(id, name, &refs, s);
                (Ty::Bool, s.size_or_unknown().factor(STRING_TRAVERSAL))
            }
            ("optional.of" | "optional.ofNonZeroValue", [t]) => {
                (Ty::Optional(Box::new(t.clone())), one())
            }
            ("optional.none", []) => (Ty::Optional(Box::new(Ty::Never)), one()),
            ("sets.contains" | "sets.equivalent" | "sets.intersects", [a, b]) => {
                for t in [a, b] {
                    if !t.is_dyn() && !matches!(t, Ty::List(..)) {
                        self.no_overload(id, name, None, &refs);
                    }
                }
                (
                    Ty::Bool,
                    a.size_or_unknown().mul(b.size_or_unknown()).add(one()),
                )
            }
            ("strings.quote", [s]) => {
                let r = s.size_or_unknown();
                (
                    Ty::String(Range {
                        min: r.min.saturating_add(2),
                        max: r.max.saturating_mul(2).saturating_add(2),
                    }),
                    r.factor(STRING_TRAVERSAL),
                )
            }
            _ => {
                if GLOBAL_FUNCTIONS.contains(&name) || is_operator(name) {
                    self.no_overload(id, name, None, &refs);
                } else {
                    self.error(
                        id,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                }
                (Ty::dyn_unknown(), one())
            }
        };
        (ty, fn_cost.add(arg_cost))
    }

    fn add(&mut self, id: u64, a: &Ty, b: &Ty) -> (Ty, Range) {
        use cel::common::ast::operators as op;
        match (a, b) {
            (Ty::String(x), Ty::String(y)) => {
                let size = x.add(*y);
                (Ty::String(size), size.factor(STRING_TRAVERSAL))
            }
            (Ty::Bytes(x), Ty::Bytes(y)) => {
                let size = x.add(*y);
                (Ty::Bytes(size), size.factor(STRING_TRAVERSAL))
            }
            (Ty::List(ea, x, _), Ty::List(eb, y, _)) => (Ty::list(ea.union(eb), x.add(*y)), one()),
            (Ty::Timestamp, Ty::Duration) | (Ty::Duration, Ty::Timestamp) => (Ty::Timestamp, one()),
            (Ty::Duration, Ty::Duration) => (Ty::Duration, one()),
            (a, b) if is_numeric(a) && a.name() == b.name() => (a.clone(), one()),
            (a, b) if a.is_dyn() || b.is_dyn() => {
                // Could be any overload: the worst of them, a concatenation.
                let size = cmp_size(a).add(cmp_size(b));
                let ty = match (a, b) {
                    (Ty::List(..), _) | (_, Ty::List(..)) => Ty::list(Ty::dyn_unknown(), size),
                    (Ty::String(_), _) | (_, Ty::String(_)) => Ty::String(size),
                    _ => Ty::Dyn(Some(size)),
                };
                (ty, size.factor(STRING_TRAVERSAL).union(one()))
            }
            _ => {
                self.no_overload(id, op::ADD, None, &[a, b]);
                (Ty::dyn_unknown(), one())
            }
        }
    }

    fn check_sized(&mut self, id: u64, name: &str, target: Option<&Ty>, t: &Ty) {
        let sized = matches!(
            t,
            Ty::String(_) | Ty::Bytes(_) | Ty::List(..) | Ty::Map(..) | Ty::Object(_)
        ) || t.is_dyn();
        if !sized {
            match target {
                Some(_) => self.no_overload(id, name, Some(t), &[]),
                None => self.no_overload(id, name, None, &[t]),
            }
        }
    }

    fn check_string_arg(&mut self, id: u64, name: &str, refs: &[&Ty], t: &Ty) {
        if !t.is_dyn() && !matches!(t, Ty::String(_)) {
            self.no_overload(id, name, None, refs);
        }
    }

    /// A regex given as a literal must compile (Kubernetes validates regex literals when a
    /// CRD is written).
    fn check_regex_literal(&mut self, arg: Option<&IdedExpr>) {
        if let Some(IdedExpr {
            id,
            expr: Expr::Literal(LiteralValue::String(s)),
        }) = arg
        {
            if regex::Regex::new(s.inner()).is_err() {
                self.error(*id, "invalid matches argument");
            }
        }
    }

    /// `duration('...')` and `timestamp('...')` literals must parse.
    fn check_time_literal(&mut self, name: &str, arg: Option<&IdedExpr>) {
        if let Some(IdedExpr {
            id,
            expr: Expr::Literal(LiteralValue::String(s)),
        }) = arg
        {
            let ok = match name {
                "duration" => super::schema::parse_go_duration(s.inner()).is_some(),
                _ => chrono::DateTime::parse_from_rfc3339(s.inner()).is_ok(),
            };
            if !ok {
                self.error(*id, format!("invalid {name} argument"));
            }
        }
    }

    fn member_call(
        &mut self,
        id: u64,
        name: &str,
        target: &IdedExpr,
        args: &[IdedExpr],
    ) -> (Ty, Range) {
        if name == "format" {
            fn literals(e: &IdedExpr, out: &mut Vec<u64>) {
                match &e.expr {
                    Expr::List(l) => {
                        out.push(e.id);
                        l.elements.iter().for_each(|x| literals(x, out));
                    }
                    Expr::Map(m) => {
                        out.push(e.id);
                        for entry in &m.entries {
                            if let EntryExpr::MapEntry(me) = &entry.expr {
                                literals(&me.key, out);
                                literals(&me.value, out);
                            }
                        }
                    }
                    _ => {}
                }
            }
            args.iter()
                .for_each(|a| literals(a, &mut self.format_literals));
        }
        let (tt, target_cost) = self.expr(target);
        let (tys, arg_cost) = self.args(args);
        let refs: Vec<&Ty> = tys.iter().collect();
        let string_target = |c: &mut Self| {
            if !tt.is_dyn() && !matches!(tt, Ty::String(_)) {
                c.no_overload(id, name, Some(&tt), &refs);
            }
        };
        let target_size = tt.size_or_unknown();
        let (ty, fn_cost) = match (name, tys.as_slice()) {
            ("size", []) => {
                self.check_sized(id, name, Some(&tt), &tt);
                (Ty::Int, one())
            }
            ("contains", [sub]) => {
                string_target(self);
                let cost = target_size
                    .factor(STRING_TRAVERSAL)
                    .mul(sub.size_or_unknown().factor(STRING_TRAVERSAL));
                (Ty::Bool, cost)
            }
            ("startsWith" | "endsWith", [p]) => {
                string_target(self);
                (Ty::Bool, p.size_or_unknown().factor(STRING_TRAVERSAL))
            }
            ("matches", [re]) => {
                string_target(self);
                self.check_regex_literal(args.first());
                (Ty::Bool, regex_cost(&tt, re))
            }
            ("find", [re]) => {
                string_target(self);
                (
                    Ty::String(Range::upto(target_size.max)),
                    regex_cost(&tt, re),
                )
            }
            ("findAll", [re, ..]) => {
                string_target(self);
                let elem = Ty::String(Range::upto(target_size.max));
                (
                    Ty::list(elem, Range::upto(target_size.max)),
                    regex_cost(&tt, re),
                )
            }
            ("charAt", [_]) => {
                string_target(self);
                (Ty::String(Range::upto(1)), one())
            }
            ("lowerAscii" | "upperAscii" | "trim", []) | ("substring", [_] | [_, _]) => {
                string_target(self);
                (
                    Ty::String(target_size),
                    target_size.factor(STRING_TRAVERSAL),
                )
            }
            ("replace", [from, to] | [from, to, _]) => {
                string_target(self);
                let size = replace_size(target_size, from.size_or_unknown(), to.size_or_unknown());
                (Ty::String(size), target_size.factor(2.0 * STRING_TRAVERSAL))
            }
            ("split", [_] | [_, _]) => {
                string_target(self);
                let mut max = target_size.max;
                if let Some(IdedExpr {
                    expr: Expr::Literal(LiteralValue::Int(n)),
                    ..
                }) = args.get(1)
                {
                    max = (*n.inner()).max(0) as u64;
                }
                (
                    Ty::list(Ty::String(target_size), Range::upto(max)),
                    target_size.factor(2.0 * STRING_TRAVERSAL),
                )
            }
            ("join", [] | [_]) => {
                if !tt.is_dyn() && !matches!(tt, Ty::List(..)) {
                    self.no_overload(id, name, Some(&tt), &refs);
                }
                let elem = cmp_size(&tt.iter_elem());
                let mut size = target_size.mul(elem);
                if let Some(sep) = tys.first() {
                    let seps = Range {
                        min: target_size.min.saturating_sub(1),
                        max: target_size.max.saturating_sub(1),
                    };
                    size = size.add(sep.size_or_unknown().mul(seps));
                }
                (Ty::String(size), size.factor(STRING_TRAVERSAL))
            }
            ("format", [list]) => {
                string_target(self);
                let size = target_size.add(list.size_or_unknown());
                (Ty::String(size), target_size.factor(STRING_TRAVERSAL))
            }
            ("indexOf" | "lastIndexOf", [_] | [_, _]) => {
                let cost = match &tt {
                    Ty::List(e, n, _) => n.mul(list_elem_cost(e)),
                    Ty::String(r) => r.factor(STRING_TRAVERSAL),
                    other => other.size_or_unknown().factor(STRING_TRAVERSAL),
                };
                if !tt.is_dyn() && !matches!(tt, Ty::List(..) | Ty::String(_)) {
                    self.no_overload(id, name, Some(&tt), &refs);
                }
                (Ty::Int, cost)
            }
            ("isSorted" | "sum" | "min" | "max", []) => {
                let (elem, cost) = match &tt {
                    Ty::List(e, n, _) => ((**e).clone(), n.mul(list_elem_cost(e))),
                    other => {
                        if !other.is_dyn() {
                            self.no_overload(id, name, Some(&tt), &refs);
                        }
                        (Ty::dyn_unknown(), other.size_or_unknown())
                    }
                };
                let ty = if name == "isSorted" { Ty::Bool } else { elem };
                (ty, cost)
            }
            ("getScheme" | "getHost" | "getHostname" | "getPort" | "getEscapedPath", []) => {
                (Ty::String(Range::upto(super::ty::MAX_REQUEST_SIZE)), one())
            }
            ("getQuery", []) => {
                let s = Ty::String(Range::upto(super::ty::MAX_REQUEST_SIZE));
                let list = Ty::list(s.clone(), Range::upto(super::ty::MAX_REQUEST_SIZE));
                (
                    Ty::Map(
                        Box::new(s),
                        Box::new(list),
                        Range::upto(super::ty::MAX_REQUEST_SIZE),
                    ),
                    one(),
                )
            }
            ("family" | "prefixLength", []) => (Ty::Int, one()),
            (
                "isUnspecified"
                | "isLoopback"
                | "isLinkLocalMulticast"
                | "isLinkLocalUnicast"
                | "isGlobalUnicast",
                [],
            ) => (Ty::Bool, one()),
            ("ip", []) => (Ty::Opaque("net.IP"), one()),
            ("masked", []) => (Ty::Opaque("net.CIDR"), one()),
            ("containsIP" | "containsCIDR", [arg]) => {
                // Comparing two 4- or 16-byte addresses, plus parsing a string argument.
                let mut cost = Range { min: 8, max: 32 }.factor(STRING_TRAVERSAL);
                if name == "containsCIDR" {
                    cost = cost
                        .add(Range { min: 4, max: 16 }.factor(STRING_TRAVERSAL))
                        .add(one());
                }
                if let Ty::String(r) = arg {
                    cost = cost.add(r.factor(STRING_TRAVERSAL));
                }
                (Ty::Bool, cost)
            }
            ("sign" | "asInteger" | "compareTo", [..]) => (Ty::Int, one()),
            ("isInteger" | "isGreaterThan" | "isLessThan", [..]) => (Ty::Bool, one()),
            ("asApproximateFloat", []) => (Ty::Double, one()),
            ("add" | "sub", [_]) => (Ty::Opaque("kubernetes.Quantity"), one()),
            ("hasValue", []) => (Ty::Bool, one()),
            ("value", []) => (unwrap_optional(&tt), one()),
            ("orValue", [alt]) => (unwrap_optional(&tt).union(alt), one()),
            ("or", [alt]) => (tt.union(alt), one()),
            (
                "getFullYear" | "getMonth" | "getDayOfYear" | "getDayOfMonth" | "getDate"
                | "getDayOfWeek" | "getHours" | "getMinutes" | "getSeconds" | "getMilliseconds",
                [] | [_],
            ) => {
                if !tt.is_dyn() && !matches!(tt, Ty::Timestamp | Ty::Duration) {
                    self.no_overload(id, name, Some(&tt), &refs);
                }
                (Ty::Int, one())
            }
            _ => {
                if MEMBER_FUNCTIONS.contains(&name) {
                    self.no_overload(id, name, Some(&tt), &refs);
                } else {
                    self.error(
                        id,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                }
                (Ty::dyn_unknown(), one())
            }
        };
        (ty, target_cost.add(fn_cost).add(arg_cost))
    }
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name.starts_with('!') || name.starts_with('-')
}

fn literal_ty(l: &LiteralValue) -> Ty {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(b) => Ty::Bytes(Range::exact(b.inner().len() as u64)),
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(s) => Ty::String(Range::exact(s.inner().chars().count() as u64)),
        LiteralValue::UInt(_) => Ty::Uint,
    }
}

/// `dyn(x)`: the same value, its type forgotten but its size kept.
fn dyn_of(t: &Ty) -> Ty {
    match t {
        Ty::String(r) | Ty::Bytes(r) | Ty::List(_, r, _) | Ty::Map(_, _, r) => Ty::Dyn(Some(*r)),
        Ty::Dyn(r) => Ty::Dyn(*r),
        Ty::Object(_) | Ty::Opaque(_) | Ty::Optional(_) => Ty::Dyn(None),
        _ => Ty::Dyn(Some(Range::ZERO)),
    }
}

fn unwrap_optional(t: &Ty) -> Ty {
    match t {
        Ty::Optional(inner) => (**inner).clone(),
        _ => Ty::dyn_unknown(),
    }
}

/// Equality and string ordering: proportional to the smaller of the two sizes.
fn eq_cost(a: &Ty, b: &Ty) -> Range {
    let (x, y) = (cmp_size(a), cmp_size(b));
    let smallest_max = x.max.min(y.max);
    let min = u64::from(smallest_max > 0);
    Range {
        min,
        max: smallest_max,
    }
    .factor(STRING_TRAVERSAL)
}

fn regex_cost(s: &Ty, re: &Ty) -> Range {
    let str_cost = s
        .size_or_unknown()
        .add(Range::exact(1))
        .factor(STRING_TRAVERSAL);
    let re_cost = re.size_or_unknown().factor(REGEX_LENGTH);
    str_cost.mul(re_cost)
}

/// What comparing one list element costs: 1, plus a traversal for strings and bytes.
fn list_elem_cost(e: &Ty) -> Range {
    match e {
        Ty::String(r) | Ty::Bytes(r) => one().add(r.factor(STRING_TRAVERSAL)),
        _ => one(),
    }
}

/// Kubernetes' estimate of the size of `s.replace(from, to)`.
fn replace_size(s: Range, from: Range, to: Range) -> Range {
    let mut count = Range::ZERO;
    let mut retained = Range::ZERO;
    if from.min == 0 {
        count.max = s.max.saturating_add(1);
        retained.max = s.max;
    } else if to.max <= from.min {
        retained.max = s.max;
    } else {
        count.max = s.max.div_ceil(from.min);
    }
    if from.max == 0 {
        count.min = s.min.saturating_add(1);
        retained.min = s.min;
    } else if from.max <= to.min {
        retained.min = s.min;
    } else {
        count.min = s.min.div_ceil(from.max);
    }
    count.mul(to).add(retained)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::schema::{decl_ty, Schema};
    use serde_json::json;

    fn run(rule: &str, schema: serde_json::Value) -> Checked {
        let env = crate::cel::library::env();
        let program = env.compile(rule).unwrap();
        let ty = decl_ty(Schema(&schema), false).unwrap();
        check(program.expression(), &ty, Some(&ty), true)
    }

    #[test]
    fn costs_follow_cel_go() {
        let ints = json!({"type": "array", "maxItems": 10, "items": {"type": "integer"}});
        // all(): range 1 + init 0 + result 1 + 10 × (condition 2 + step 3).
        assert_eq!(run("self.all(x, x > 0)", ints.clone()).cost.max, 52);
        assert_eq!(run("self.size() == 3", ints).cost.max, 2);
        let strings = json!({"type": "string", "maxLength": 25});
        // 100 bytes × 0.1 × (4 × 0.1 → 1).
        assert_eq!(run("self.contains('abcd')", strings).cost.max, 11);
    }

    #[test]
    fn unbounded_nested_loops_are_huge() {
        let list = json!({"type": "array", "items": {"type": "string"}});
        let c = run("self.all(x, self.all(y, x == y))", list);
        assert!(c.cost.max > 1_000_000_000_000, "{}", c.cost.max);
    }

    #[test]
    fn strict_mode_reports_what_cel_go_reports() {
        let obj = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let c = run("self.b == 1", obj.clone());
        assert_eq!(c.errors[0].1, "undefined field 'b'");
        let c = run("self.a == 'x'", obj.clone());
        assert_eq!(
            c.errors[0].1,
            "found no matching overload for '_==_' applied to '(int, string)'"
        );
        let c = run("nope(self.a)", obj.clone());
        assert_eq!(
            c.errors[0].1,
            "undeclared reference to 'nope' (in container '')"
        );
        let c = run("self.a.startsWith('x')", obj.clone());
        assert_eq!(
            c.errors[0].1,
            "found no matching overload for 'startsWith' applied to 'int.(string)'"
        );
        assert!(run("self.a == 1.0 && has(self.a)", obj.clone())
            .errors
            .is_empty());
        let c = run("[1, 'a'].size() == 2", obj);
        assert_eq!(c.errors[0].1, "expected type 'int' but found 'string'");
    }
}
