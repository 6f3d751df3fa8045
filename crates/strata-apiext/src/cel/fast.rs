//! A direct evaluator for the common shape of validation rules: comparisons, boolean logic,
//! integer arithmetic, `size`, the string tests `startsWith`/`endsWith`/`contains`, `has()` and
//! the `all`/`exists` macros over fields of `self`, evaluated on the custom resource's JSON
//! without converting it to CEL values first.
//!
//! It answers only when the answer is certain: every value it meets has the type the schema
//! gives it, no operation fails, and nothing outside the subset is needed. Anything else (a
//! missing field, a null, an overflow, `oldSelf`, a function it does not know) makes it give
//! up, and the rule is evaluated by the CEL interpreter, which then produces the result or the
//! error exactly as before. So a rule's result never depends on which of the two evaluated it.

use cel::common::ast::{operators, CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value as J;

use super::schema::Shape;

/// A rule compiled for the direct evaluator.
#[derive(Debug)]
pub(crate) enum Fast {
    /// `self`.
    This,
    /// A comprehension's variable, counted from the outermost one.
    Var(usize),
    Bool(bool),
    Int(i64),
    Str(String),
    /// `operand.field`.
    Select(Box<Fast>, String),
    /// `has(operand.field)`.
    Has(Box<Fast>, String),
    Not(Box<Fast>),
    Negate(Box<Fast>),
    And(Box<Fast>, Box<Fast>),
    Or(Box<Fast>, Box<Fast>),
    Conditional(Box<[Fast; 3]>),
    Compare(Accepts, Box<Fast>, Box<Fast>),
    Arith(Arith, Box<Fast>, Box<Fast>),
    Size(Box<Fast>),
    Text(TextTest, Box<Fast>, Box<Fast>),
    /// `range.all(v, predicate)` (`every`) or `range.exists(v, predicate)`.
    Quantified {
        every: bool,
        range: Box<Fast>,
        predicate: Box<Fast>,
    },
}

/// A comparison, as the orderings it holds for: less, equal, greater (`<=` is
/// `[true, true, false]`).
pub(crate) type Accepts = [bool; 3];

#[derive(Clone, Copy, Debug)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum TextTest {
    StartsWith,
    EndsWith,
    Contains,
}

/// The name comprehensions of the standard macros accumulate into.
const RESULT: &str = "@result";

impl Fast {
    /// `e` compiled, or None when it uses anything outside the subset.
    pub(crate) fn compile(e: &IdedExpr) -> Option<Fast> {
        Compiler { scopes: Vec::new() }.expr(e)
    }

    /// The rule's result on `value` (of `shape`), or None when the interpreter must decide.
    pub(crate) fn eval(&self, value: &J, shape: &Shape) -> Option<bool> {
        let mut vars = Vec::new();
        match eval(self, &Val::Json(value, shape), &mut vars)? {
            Val::Bool(b) => Some(b),
            _ => None,
        }
    }
}

struct Compiler {
    /// The comprehension variables in scope, outermost first.
    scopes: Vec<String>,
}

impl Compiler {
    fn boxed(&mut self, e: &IdedExpr) -> Option<Box<Fast>> {
        self.expr(e).map(Box::new)
    }

    fn expr(&mut self, e: &IdedExpr) -> Option<Fast> {
        match &e.expr {
            Expr::Ident(name) => match self.scopes.iter().rposition(|s| s == name) {
                Some(i) => Some(Fast::Var(i)),
                None if name == "self" => Some(Fast::This),
                None => None,
            },
            Expr::Literal(LiteralValue::Boolean(b)) => Some(Fast::Bool(*b.inner())),
            Expr::Literal(LiteralValue::Int(i)) => Some(Fast::Int(*i.inner())),
            Expr::Literal(LiteralValue::String(s)) => Some(Fast::Str(s.inner().to_string())),
            Expr::Select(s) => {
                let operand = self.boxed(&s.operand)?;
                Some(if s.test {
                    Fast::Has(operand, s.field.clone())
                } else {
                    Fast::Select(operand, s.field.clone())
                })
            }
            Expr::Call(call) => self.call(call),
            Expr::Comprehension(c) => self.comprehension(c),
            _ => None,
        }
    }

    fn call(&mut self, call: &CallExpr) -> Option<Fast> {
        let name = call.func_name.as_str();
        if let Some(target) = &call.target {
            let target = self.boxed(target)?;
            return match (name, call.args.as_slice()) {
                ("size", []) => Some(Fast::Size(target)),
                ("startsWith" | "endsWith" | "contains", [arg]) => {
                    let test = match name {
                        "startsWith" => TextTest::StartsWith,
                        "endsWith" => TextTest::EndsWith,
                        _ => TextTest::Contains,
                    };
                    Some(Fast::Text(test, target, self.boxed(arg)?))
                }
                _ => None,
            };
        }
        match call.args.as_slice() {
            [a] => {
                let a = self.boxed(a)?;
                match name {
                    operators::LOGICAL_NOT => Some(Fast::Not(a)),
                    operators::NEGATE => Some(Fast::Negate(a)),
                    "size" => Some(Fast::Size(a)),
                    _ => None,
                }
            }
            [a, b] => {
                let cmp: Option<Accepts> = match name {
                    operators::EQUALS => Some([false, true, false]),
                    operators::NOT_EQUALS => Some([true, false, true]),
                    operators::LESS => Some([true, false, false]),
                    operators::LESS_EQUALS => Some([true, true, false]),
                    operators::GREATER => Some([false, false, true]),
                    operators::GREATER_EQUALS => Some([false, true, true]),
                    _ => None,
                };
                let arith = match name {
                    operators::ADD => Some(Arith::Add),
                    operators::SUBSTRACT => Some(Arith::Sub),
                    operators::MULTIPLY => Some(Arith::Mul),
                    operators::DIVIDE => Some(Arith::Div),
                    operators::MODULO => Some(Arith::Rem),
                    _ => None,
                };
                let (a, b) = (self.boxed(a)?, self.boxed(b)?);
                match (name, cmp, arith) {
                    (operators::LOGICAL_AND, _, _) => Some(Fast::And(a, b)),
                    (operators::LOGICAL_OR, _, _) => Some(Fast::Or(a, b)),
                    (_, Some(c), _) => Some(Fast::Compare(c, a, b)),
                    (_, _, Some(op)) => Some(Fast::Arith(op, a, b)),
                    _ => None,
                }
            }
            [c, t, f] if name == operators::CONDITIONAL => Some(Fast::Conditional(Box::new([
                self.expr(c)?,
                self.expr(t)?,
                self.expr(f)?,
            ]))),
            _ => None,
        }
    }

    /// The `all` and `exists` macros, recognized by the comprehension they expand to.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Option<Fast> {
        let is_result = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == RESULT);
        if c.iter_var2.is_some() || c.accu_var != RESULT || !is_result(&c.result) {
            return None;
        }
        let Expr::Literal(LiteralValue::Boolean(init)) = &c.accu_init.expr else {
            return None;
        };
        let every = *init.inner();
        let Expr::Call(step) = &c.loop_step.expr else {
            return None;
        };
        let joins = if every {
            operators::LOGICAL_AND
        } else {
            operators::LOGICAL_OR
        };
        let [accu, predicate] = step.args.as_slice() else {
            return None;
        };
        if step.func_name != joins || step.target.is_some() || !is_result(accu) {
            return None;
        }
        // The loop stops once the result is decided: `all` at the first false, `exists` at
        // the first true. Evaluation here stops at the same place.
        let Expr::Call(cond) = &c.loop_cond.expr else {
            return None;
        };
        let stops_when_decided = match (cond.func_name.as_str(), cond.args.as_slice()) {
            (operators::NOT_STRICTLY_FALSE, [arg]) if every => is_result(arg),
            (operators::NOT_STRICTLY_FALSE, [arg]) => matches!(&arg.expr,
                Expr::Call(not) if not.func_name == operators::LOGICAL_NOT
                    && not.args.len() == 1 && is_result(&not.args[0])),
            _ => false,
        };
        if !stops_when_decided {
            return None;
        }
        let range = self.boxed(&c.iter_range)?;
        self.scopes.push(c.iter_var.clone());
        let predicate = self.boxed(predicate);
        self.scopes.pop();
        Some(Fast::Quantified {
            every,
            range,
            predicate: predicate?,
        })
    }
}

/// A value during evaluation: a scalar, or JSON not yet looked into (with its shape).
#[derive(Clone, Copy)]
enum Val<'a> {
    Bool(bool),
    Int(i64),
    Str(&'a str),
    Json(&'a J, &'a Shape),
}

/// `v` as CEL sees a value of `shape`, when it is one the evaluator handles.
fn typed<'a>(v: &'a J, shape: &'a Shape) -> Option<Val<'a>> {
    match (shape, v) {
        (Shape::Integer, J::Number(n)) => n.as_i64().map(Val::Int),
        (Shape::Boolean, J::Bool(b)) => Some(Val::Bool(*b)),
        (Shape::Str(super::schema::Format::Plain), J::String(s)) => Some(Val::Str(s)),
        (Shape::Array(_), J::Array(_)) | (Shape::Object(_) | Shape::Map(_), J::Object(_)) => {
            Some(Val::Json(v, shape))
        }
        _ => None,
    }
}

/// The member `field` of `v`, as a present, non-null value of its declared shape; for `has`,
/// whether it is present.
fn member<'a>(v: Val<'a>, field: &str) -> Option<Option<(&'a J, &'a Shape)>> {
    let Val::Json(J::Object(m), shape) = v else {
        return None;
    };
    let declared = match shape {
        Shape::Map(values) => &**values,
        // The resource root's `metadata`, `apiVersion` and `kind` are converted specially.
        Shape::Object(o) => o.declared(field)?,
        _ => return None,
    };
    match m.get(field) {
        // A map's null values are members; an object's are not.
        Some(J::Null) if matches!(shape, Shape::Object(_)) => Some(None),
        Some(value) => Some(Some((value, declared))),
        None => Some(None),
    }
}

fn eval<'a>(e: &'a Fast, this: &Val<'a>, vars: &mut Vec<Val<'a>>) -> Option<Val<'a>> {
    let bool_of = |v: Val| match v {
        Val::Bool(b) => Some(b),
        _ => None,
    };
    Some(match e {
        Fast::This => match *this {
            Val::Json(v, shape) => typed(v, shape)?,
            other => other,
        },
        Fast::Var(i) => *vars.get(*i)?,
        Fast::Bool(b) => Val::Bool(*b),
        Fast::Int(i) => Val::Int(*i),
        Fast::Str(s) => Val::Str(s),
        Fast::Select(operand, field) => {
            let (v, shape) = member(eval(operand, this, vars)?, field)??;
            typed(v, shape)?
        }
        Fast::Has(operand, field) => {
            Val::Bool(member(eval(operand, this, vars)?, field)?.is_some())
        }
        Fast::Not(a) => Val::Bool(!bool_of(eval(a, this, vars)?)?),
        Fast::Negate(a) => match eval(a, this, vars)? {
            Val::Int(i) => Val::Int(i.checked_neg()?),
            _ => return None,
        },
        Fast::And(a, b) => {
            let a = bool_of(eval(a, this, vars)?)?;
            Val::Bool(a && bool_of(eval(b, this, vars)?)?)
        }
        Fast::Or(a, b) => {
            let a = bool_of(eval(a, this, vars)?)?;
            Val::Bool(a || bool_of(eval(b, this, vars)?)?)
        }
        Fast::Conditional(parts) => {
            let [c, t, f] = &**parts;
            if bool_of(eval(c, this, vars)?)? {
                eval(t, this, vars)?
            } else {
                eval(f, this, vars)?
            }
        }
        Fast::Compare(accepts, a, b) => {
            // Booleans are compared for equality only (the same answer either way round).
            let symmetric = accepts[0] == accepts[2];
            let ordering = match (eval(a, this, vars)?, eval(b, this, vars)?) {
                (Val::Int(x), Val::Int(y)) => x.cmp(&y),
                (Val::Str(x), Val::Str(y)) => x.cmp(y),
                (Val::Bool(x), Val::Bool(y)) if symmetric => x.cmp(&y),
                _ => return None,
            };
            Val::Bool(accepts[(ordering as i8 + 1) as usize])
        }
        Fast::Arith(op, a, b) => {
            let (Val::Int(x), Val::Int(y)) = (eval(a, this, vars)?, eval(b, this, vars)?) else {
                return None;
            };
            Val::Int(match op {
                Arith::Add => x.checked_add(y)?,
                Arith::Sub => x.checked_sub(y)?,
                Arith::Mul => x.checked_mul(y)?,
                Arith::Div => x.checked_div(y)?,
                Arith::Rem => x.checked_rem(y)?,
            })
        }
        Fast::Size(a) => Val::Int(match eval(a, this, vars)? {
            // CEL counts a string's code points.
            Val::Str(s) => s.chars().count() as i64,
            Val::Json(J::Array(items), _) => items.len() as i64,
            Val::Json(J::Object(m), Shape::Map(_)) => m.len() as i64,
            _ => return None,
        }),
        Fast::Text(test, a, b) => {
            let (Val::Str(s), Val::Str(p)) = (eval(a, this, vars)?, eval(b, this, vars)?) else {
                return None;
            };
            Val::Bool(match test {
                TextTest::StartsWith => s.starts_with(p),
                TextTest::EndsWith => s.ends_with(p),
                TextTest::Contains => s.contains(p),
            })
        }
        Fast::Quantified {
            every,
            range,
            predicate,
        } => {
            let Val::Json(J::Array(items), Shape::Array(item_shape)) = eval(range, this, vars)?
            else {
                return None;
            };
            let mut decided = false;
            for item in items {
                vars.push(typed(item, item_shape)?);
                let holds = eval(predicate, this, vars).and_then(bool_of);
                vars.pop();
                if holds? != *every {
                    decided = true;
                    break;
                }
            }
            // `all` is true unless an item fails; `exists` false unless one holds.
            Val::Bool(if decided { !*every } else { *every })
        }
    })
}

#[cfg(test)]
mod tests {
    use cel::{Context, Value};
    use serde_json::json;

    use super::super::{library, schema};
    use super::*;

    fn schema_json() -> J {
        json!({"type": "object", "properties": {
            "min": {"type": "integer"},
            "max": {"type": "integer"},
            "big": {"type": "integer"},
            "name": {"type": "string"},
            "flag": {"type": "boolean"},
            "when": {"type": "string", "format": "date-time"},
            "quantity": {"x-kubernetes-int-or-string": true},
            "ratio": {"type": "number"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"},
                "port": {"type": "integer"}
            }}},
            "tags": {"type": "array", "items": {"type": "string"}}
        }})
    }

    const RULES: &[&str] = &[
        "self.min <= self.max",
        "self.min < self.max",
        "self.min == self.max",
        "self.min != 3",
        "self.min >= 2 && self.max > 2",
        "self.min + self.max > 10",
        "self.min - self.max < 0",
        "self.min * 2 == self.max",
        "self.max / self.min >= 1",
        "self.max % self.min == 0",
        "-self.min < 0",
        "self.big + 1 > 0",
        "self.big * self.big > 0",
        "self.name.startsWith('sh')",
        "self.name.endsWith(':latest')",
        "!self.name.endsWith(':latest')",
        "self.name.contains('é')",
        "size(self.name) <= 5",
        "self.name.size() == 5",
        "self.name < 'm'",
        "has(self.name)",
        "!has(self.name) || self.name != ''",
        "has(self.labels.app)",
        "self.labels.app == 'shop'",
        "size(self.labels) > 1",
        "self.ports.all(p, p.port > 0 && p.port < 65536)",
        "self.ports.exists(p, p.name == 'http')",
        "self.ports.all(p, has(p.name))",
        "size(self.ports) <= 3",
        "self.ports.all(p, self.ports.exists(q, q.port == p.port))",
        "self.tags.all(t, t.size() < 4)",
        "self.tags.exists(t, t == 'b')",
        "self.flag ? self.min > 0 : self.max > 0",
        "self.flag == true",
        "self.flag != self.min > 0",
        "self.when != ''",
        "self.quantity == 1",
        "self.ratio > 0.5",
        "self.min in [1, 2]",
        "self.name.matches('^s')",
    ];

    fn values() -> Vec<J> {
        vec![
            json!({"min": 2, "max": 12, "big": 5, "name": "shop", "flag": true,
                   "labels": {"app": "shop", "team": "x"},
                   "ports": [{"name": "http", "port": 8080}, {"name": "dns", "port": 53}],
                   "tags": ["a", "b"], "when": "2024-01-01T00:00:00Z", "quantity": 1,
                   "ratio": 0.7}),
            json!({"min": 0, "max": 0, "big": i64::MAX, "name": "héllo:latest", "flag": false,
                   "labels": {"app": null}, "ports": [{"port": 70000}, {"name": "x"}],
                   "tags": ["long-tag"], "quantity": "2"}),
            json!({"min": -4, "max": 3, "name": "", "ports": [], "tags": [], "labels": {}}),
            json!({"min": null, "name": null, "ports": [null], "tags": [null]}),
            json!({"min": 3, "max": 6, "big": i64::MIN, "name": "zzzzzz",
                   "ports": [{"name": "http", "port": 1}, {"name": "http", "port": 2}]}),
            json!({}),
        ]
    }

    /// What the interpreter answers for `source` on `value`.
    fn interpreted(source: &str, value: &J, shape: &Shape) -> Result<Value, String> {
        let env = library::env();
        let program = env.compile(source).map_err(|e| format!("{e:?}"))?;
        let mut ctx = Context::with_env(env);
        ctx.add_variable_as_val("self", schema::to_val(value, shape));
        Value::resolve(program.expression(), &ctx).map_err(|e| e.to_string())
    }

    /// Whenever the direct evaluator answers, the interpreter answers the same.
    #[test]
    fn answers_agree_with_the_interpreter() {
        let schema = schema_json();
        let shape = Shape::of(schema::Schema(&schema), false);
        let env = library::env();
        let mut answered = 0;
        for source in RULES {
            let program = env.compile(source).expect(source);
            let fast = Fast::compile(program.expression());
            for value in values() {
                let Some(holds) = fast.as_ref().and_then(|f| f.eval(&value, &shape)) else {
                    continue;
                };
                answered += 1;
                match interpreted(source, &value, &shape) {
                    Ok(Value::Bool(b)) => assert_eq!(b, holds, "{source} on {value}"),
                    other => panic!("{source} on {value}: fast {holds}, interpreter {other:?}"),
                }
            }
        }
        assert!(answered > 80, "only {answered} answers");
    }

    /// The subset covers what validation rules commonly say, and leaves the rest (and every
    /// doubtful value) to the interpreter.
    #[test]
    fn gives_up_outside_its_subset_and_on_doubtful_values() {
        let schema = schema_json();
        let shape = Shape::of(schema::Schema(&schema), false);
        let env = library::env();
        let compiles = |s: &str| Fast::compile(env.compile(s).unwrap().expression()).is_some();
        for source in &RULES[..35] {
            assert!(compiles(source), "{source}");
        }
        for source in [
            "self.min in [1, 2]",
            "self.name.matches('^s')",
            "self.ratio > 0.5",
            "oldSelf.min <= self.min",
            "self.ports.exists_one(p, p.port == 1)",
            "self.ports.map(p, p.port).all(x, x > 0)",
            "self.tags == ['a']",
            "self.min == 1u",
        ] {
            assert!(!compiles(source), "{source}");
        }
        let eval =
            |s: &str, v: J| Fast::compile(env.compile(s).unwrap().expression())?.eval(&v, &shape);
        // Present, typed values answer; missing, null, mistyped or specially converted ones
        // and failing operations do not.
        assert_eq!(
            eval("self.min <= self.max", json!({"min": 1, "max": 2})),
            Some(true)
        );
        assert_eq!(eval("self.min <= self.max", json!({"min": 1})), None);
        assert_eq!(
            eval("self.min <= self.max", json!({"min": 1, "max": null})),
            None
        );
        assert_eq!(
            eval("self.min <= self.max", json!({"min": 1, "max": 2.5})),
            None
        );
        assert_eq!(
            eval("self.max / self.min > 0", json!({"min": 0, "max": 2})),
            None
        );
        assert_eq!(eval("self.big + 1 > 0", json!({"big": i64::MAX})), None);
        assert_eq!(
            eval("self.when != ''", json!({"when": "2024-01-01T00:00:00Z"})),
            None
        );
        assert_eq!(eval("self.quantity == 1", json!({"quantity": 1})), None);
        assert_eq!(eval("has(self.name)", json!({"name": null})), Some(false));
        assert_eq!(
            eval("has(self.labels.app)", json!({"labels": {"app": null}})),
            Some(true)
        );
        assert_eq!(eval("has(self.undeclared)", json!({"undeclared": 1})), None);
        // A decided quantifier does not look at the items after the deciding one.
        assert_eq!(
            eval(
                "self.ports.exists(p, p.port == 1)",
                json!({"ports": [{"port": 1}, {}]})
            ),
            Some(true)
        );
        assert_eq!(
            eval(
                "self.ports.all(p, p.port == 1)",
                json!({"ports": [{"port": 1}, {}]})
            ),
            None
        );
    }
}
