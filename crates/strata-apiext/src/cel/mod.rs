//! `x-kubernetes-validations`: CEL rules compiled once per schema and evaluated with a cost
//! limit, as kube-apiserver 1.31 does.
//!
//! [`Rules::compile`] finds every rule of a CRD version's `openAPIV3Schema` (on properties,
//! items and additionalProperties, at any depth), parses and checks it, and reports what
//! Kubernetes reports when the CRD is written: compile errors, bad `reason`/`fieldPath`/
//! `message`/`messageExpression`, transition rules where old values cannot be correlated, and
//! rules whose *estimated* cost (from the schema's `maxItems`/`maxLength`/`maxProperties`)
//! exceeds the per-expression or the per-CRD limit.
//!
//! [`Rules::validate`] evaluates them on a custom resource: `self` is the value at the rule's
//! node (each element for `items`, each value for `additionalProperties`), `oldSelf` the old
//! value at the same position on updates (correlated by property name, map key or map-list
//! keys; transition rules are skipped when there is no old value). Before each evaluation the
//! rule's cost is bounded from the sizes of the actual values; a rule that could exceed the
//! per-call limit, or the object's total budget, is refused without being run.
//!
//! The pieces: [`library`] (the environment and Kubernetes' CEL libraries), [`schema`] (the
//! schema as CEL sees it, value conversion), [`check`] (types and costs), [`ty`], [`quantity`],
//! [`url`], [`net`].

mod check;
mod fast;
mod library;
mod net;
mod quantity;
mod schema;
mod ty;
mod url;

use std::sync::Arc;

use cel::common::ast::{CallExpr, EntryExpr, Expr, LiteralValue};
use cel::common::types::CelOptional;
use cel::{Context, ExecutionError, IdedExpr, Value};
use serde_json::Value as J;
use strata_object::field::{FieldError, FieldErrorKind};
use strata_object::go;

use schema::Schema;
use ty::{EqShape, Ty};

/// The cost one evaluation of a rule (or a messageExpression) may reach (Kubernetes'
/// `PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// The cost all the rules of one object may reach together (Kubernetes'
/// `RuntimeCELCostBudget`).
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;
/// The largest estimated cost of one rule, times how often it may run, a CRD may declare
/// (`StaticEstimatedCostLimit`).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// The largest estimated cost of all the rules of a CRD version together
/// (`StaticEstimatedCRDCostLimit`).
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// The longest message a messageExpression may produce.
const MAX_MESSAGE_EXPRESSION_LEN: usize = 5 * 1024;

const SUPPORTED_REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// The compiled rules of one schema.
#[derive(Debug, Default)]
pub struct Rules {
    root: Option<Node>,
}

/// A schema node with rules at or below it.
#[derive(Debug)]
struct Node {
    /// How the node's values convert for CEL.
    shape: Arc<schema::Shape>,
    /// Whether the node is a `x-kubernetes-list-type: set` list (its items pair with old
    /// items by value, for ratcheting).
    set_list: bool,
    /// The schema `type`, which failed rules report as the value.
    type_name: String,
    rules: Vec<Rule>,
    /// The fields of `self` and of `oldSelf` the rules select, when that is all they do with
    /// them: only those are converted for an evaluation. None: the rules need the whole value.
    self_fields: Option<Vec<String>>,
    old_self_fields: Option<Vec<String>>,
    properties: Vec<(String, Node)>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
    /// For a `x-kubernetes-list-type: map` list: the keys its items correlate by.
    list_map_keys: Vec<String>,
}

#[derive(Debug)]
struct Rule {
    /// The rule as written, trimmed.
    source: String,
    message: Option<String>,
    message_expression: Option<(String, Compiled)>,
    reason: Option<FieldErrorKind>,
    /// The normalized `fieldPath`, relative to the node.
    field_path: Option<String>,
    /// The compiled rule, or why it does not compile (a stored schema, see
    /// [`Rules::compile_stored`]).
    program: Result<Compiled, String>,
    uses_old_self: bool,
    optional_old_self: bool,
}

impl Rule {
    /// How Kubernetes names the rule in errors: its message, else the rule itself.
    fn error_string(&self) -> &str {
        self.message.as_deref().unwrap_or(&self.source)
    }
}

/// What evaluating the rules on an object found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub errors: Vec<FieldError>,
    /// Failures on values an update left unchanged, which Kubernetes reports as warnings
    /// rather than refusing the update.
    pub warnings: Vec<String>,
}

/// A field path in Kubernetes' notation; the root is empty (printed `<nil>`).
#[derive(Clone, Debug, Default)]
struct Path(String);

impl Path {
    fn child(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    fn key(&self, k: &str) -> Path {
        Path(format!("{}[{k}]", self.0))
    }

    fn render(&self) -> String {
        if self.0.is_empty() {
            "<nil>".to_string()
        } else {
            self.0.clone()
        }
    }
}

impl Rules {
    /// Compiles every rule of `schema`; compile errors are reported at `path` (the schema's
    /// position in the CRD) plus the rule's position.
    pub fn compile(schema: &J, path: &str) -> Result<Rules, Vec<FieldError>> {
        let mut cx = CompileCx::default();
        let root = compile_node(
            Schema(schema),
            Arc::new(schema::Shape::of(Schema(schema), true)),
            &Path(path.to_string()),
            NodeCx {
                resource_root: true,
                cardinality: Some(1),
                uncorrelatable: None,
            },
            &mut cx,
        )
        .node;
        if cx.total > STATIC_ESTIMATED_CRD_COST_LIMIT {
            for (p, _) in &cx.most_expensive {
                cx.errors.push(FieldError::forbidden(
                    p,
                    "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                ));
            }
            cx.errors.push(FieldError::forbidden(
                path,
                cost_error_message(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    cx.total,
                    STATIC_ESTIMATED_CRD_COST_LIMIT,
                ),
            ));
        }
        if cx.errors.is_empty() {
            Ok(Rules { root })
        } else {
            Err(cx.errors)
        }
    }

    /// Compiles the rules of a schema that was accepted when its CRD was written, as a server
    /// loading stored CRDs does: never refuses. Declaration and cost problems are not
    /// reported again, and a rule that does not compile (now) is kept as an error that
    /// validation reports (`rule compile error: ...`) instead of being dropped.
    pub fn compile_stored(schema: &J) -> Rules {
        let mut cx = CompileCx {
            stored: true,
            ..CompileCx::default()
        };
        let root = compile_node(
            Schema(schema),
            Arc::new(schema::Shape::of(Schema(schema), true)),
            &Path::default(),
            NodeCx {
                resource_root: true,
                cardinality: Some(1),
                uncorrelatable: None,
            },
            &mut cx,
        )
        .node;
        Rules { root }
    }

    /// Evaluates the rules against `object` (and `old`, on updates, for transition rules).
    /// On updates, failures of rules that do not use `oldSelf` on values the update leaves
    /// unchanged are not errors (Kubernetes' validation ratcheting): see [`Rules::evaluate`]
    /// for them as warnings.
    pub fn validate(&self, object: &J, old: Option<&J>) -> Vec<FieldError> {
        self.evaluate(object, old).errors
    }

    /// Evaluates the rules against `object` (and `old`, on updates): the errors, and as
    /// warnings the ratcheted failures (on values the update leaves unchanged), in
    /// Kubernetes' text.
    pub fn evaluate(&self, object: &J, old: Option<&J>) -> Outcome {
        let Some(root) = &self.root else {
            return Outcome::default();
        };
        let ratchet = old.map(|o| (object, o));
        let mut st = EvalState {
            budget: RUNTIME_COST_BUDGET,
            exact: false,
            retry_exact: false,
            errors: Vec::new(),
            warnings: Vec::new(),
            env: library::env(),
        };
        walk(root, &Path::default(), object, old, ratchet, &mut st);
        if st.retry_exact {
            st = EvalState {
                budget: RUNTIME_COST_BUDGET,
                exact: true,
                retry_exact: false,
                errors: Vec::new(),
                warnings: Vec::new(),
                env: st.env,
            };
            walk(root, &Path::default(), object, old, ratchet, &mut st);
        }
        Outcome {
            errors: st.errors,
            warnings: st.warnings,
        }
    }

    /// Whether the schema has no rules.
    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }
}

// ---------------------------------------------------------------------------------------
// Compilation

#[derive(Default)]
struct CompileCx {
    /// Compiling a stored schema: nothing is refused, see [`Rules::compile_stored`].
    stored: bool,
    errors: Vec<FieldError>,
    total: u64,
    /// The (at most four) costliest expressions of at least 1% of the CRD limit.
    most_expensive: Vec<(String, u64)>,
}

impl CompileCx {
    fn observe(&mut self, path: &str, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path.to_string(), cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

#[derive(Clone)]
struct NodeCx {
    resource_root: bool,
    /// How often the node can occur in one object (`None`: under an unbounded list or map).
    cardinality: Option<u64>,
    /// The list (or map) above that keeps old values from being correlated, if any.
    uncorrelatable: Option<String>,
}

struct NodeCompiled {
    node: Option<Node>,
    /// Whether this node or one below it has errors in its rule declarations (which keep
    /// Kubernetes from compiling the rules above).
    schema_errors: bool,
}

fn compile_node(
    s: Schema,
    shape: Arc<schema::Shape>,
    path: &Path,
    ncx: NodeCx,
    cx: &mut CompileCx,
) -> NodeCompiled {
    let mut schema_errors = false;
    let child_cardinality = |bound: Option<u64>| -> Option<u64> {
        match (ncx.cardinality, bound) {
            (Some(c), Some(b)) => Some(c.saturating_mul(b)),
            _ => None,
        }
    };
    let mut additional = None;
    if let Some(ap) = s.additional() {
        let child = compile_node(
            ap,
            shape
                .element()
                .unwrap_or_else(|| Arc::new(schema::Shape::of(ap, ap.embedded()))),
            &path.child("additionalProperties"),
            NodeCx {
                resource_root: ap.embedded(),
                cardinality: if s.ty() == "object" {
                    child_cardinality(s.max_properties())
                } else {
                    child_cardinality(Some(1))
                },
                uncorrelatable: ncx.uncorrelatable.clone(),
            },
            cx,
        );
        schema_errors |= child.schema_errors;
        additional = child.node.map(Box::new);
    }
    let mut properties = Vec::new();
    if let Some(props) = s.properties() {
        let correlatable = matches!(s.map_type(), None | Some("granular") | Some("atomic"));
        for (name, prop) in props {
            let prop = Schema(prop);
            let uncorrelatable = match (&ncx.uncorrelatable, correlatable) {
                (Some(u), _) => Some(u.clone()),
                (None, false) => Some(path.0.clone()),
                (None, true) => None,
            };
            let child = compile_node(
                prop,
                shape
                    .property(name)
                    .unwrap_or_else(|| Arc::new(schema::Shape::of(prop, prop.embedded()))),
                &path.child("properties").key(name),
                NodeCx {
                    resource_root: prop.embedded(),
                    cardinality: child_cardinality(Some(1)),
                    uncorrelatable,
                },
                cx,
            );
            schema_errors |= child.schema_errors;
            if let Some(n) = child.node {
                properties.push((name.clone(), n));
            }
        }
    }
    let mut items = None;
    if let Some(it) = s.items() {
        let uncorrelatable = match &ncx.uncorrelatable {
            Some(u) => Some(u.clone()),
            None if s.list_type() != "map" => Some(path.0.clone()),
            None => None,
        };
        let bound = if s.ty() == "array" {
            s.max_items()
        } else {
            Some(1)
        };
        let child = compile_node(
            it,
            shape
                .element()
                .unwrap_or_else(|| Arc::new(schema::Shape::of(it, it.embedded()))),
            &path.child("items"),
            NodeCx {
                resource_root: it.embedded(),
                cardinality: child_cardinality(bound),
                uncorrelatable,
            },
            cx,
        );
        schema_errors |= child.schema_errors;
        items = child.node.map(Box::new);
    }

    let declared = s.validations();
    let mut rules = Vec::new();
    if !declared.is_empty() {
        let rules_path = path.child("x-kubernetes-validations");
        let before = cx.errors.len();
        if !cx.stored {
            for (i, r) in declared.iter().enumerate() {
                check_declaration(r, s, &rules_path.index(i), cx);
            }
        }
        schema_errors |= cx.errors.len() > before;
        if !schema_errors {
            rules = compile_rules(s, declared, &rules_path, &ncx, cx);
        }
    }

    let list_map_keys = if s.list_type() == "map" {
        s.list_map_keys().into_iter().map(String::from).collect()
    } else {
        Vec::new()
    };
    let node =
        if rules.is_empty() && properties.is_empty() && items.is_none() && additional.is_none() {
            None
        } else {
            Some(Node {
                shape,
                set_list: s.list_type() == "set",
                type_name: s.type_name(),
                self_fields: selected_fields(&rules, "self"),
                old_self_fields: selected_fields(&rules, "oldSelf"),
                rules,
                properties,
                items,
                additional,
                list_map_keys,
            })
        };
    NodeCompiled {
        node,
        schema_errors,
    }
}

fn str_field<'a>(r: &'a J, key: &str) -> Option<&'a str> {
    r.get(key).and_then(J::as_str)
}

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// The declaration checks Kubernetes makes before compiling: rule present, message and
/// messageExpression well-formed, a supported reason, a valid fieldPath.
fn check_declaration(r: &J, s: Schema, at: &Path, cx: &mut CompileCx) {
    let rule = str_field(r, "rule").unwrap_or("");
    let message = str_field(r, "message").unwrap_or("");
    let message_expression = str_field(r, "messageExpression").unwrap_or("");
    let field_path = str_field(r, "fieldPath").unwrap_or("");
    let (trimmed_rule, trimmed_msg) = (rule.trim(), message.trim());
    if trimmed_rule.is_empty() {
        cx.errors.push(FieldError::required(
            &at.child("rule").0,
            "rule is not specified",
        ));
    } else if !message.is_empty() && trimmed_msg.is_empty() {
        cx.errors.push(FieldError::invalid_string(
            &at.child("message").0,
            message,
            "message must be non-empty if specified",
        ));
    } else if has_newlines(trimmed_msg) {
        cx.errors.push(FieldError::invalid_string(
            &at.child("message").0,
            message,
            "message must not contain line breaks",
        ));
    } else if has_newlines(trimmed_rule) && trimmed_msg.is_empty() {
        cx.errors.push(FieldError::required(
            &at.child("message").0,
            "message must be specified if rule contains line breaks",
        ));
    }
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        cx.errors.push(FieldError::required(
            &at.child("messageExpression").0,
            "messageExpression must be non-empty if specified",
        ));
    }
    if let Some(reason) = r.get("reason") {
        let reason = reason.as_str().unwrap_or("");
        if !SUPPORTED_REASONS.contains(&reason) {
            cx.errors.push(FieldError::not_supported(
                &at.child("reason").0,
                reason,
                SUPPORTED_REASONS,
            ));
        }
    }
    if !field_path.is_empty() && field_path.trim().is_empty() {
        cx.errors.push(FieldError::invalid_string(
            &at.child("fieldPath").0,
            field_path,
            "fieldPath must be non-empty if specified",
        ));
    }
    if has_newlines(field_path) {
        cx.errors.push(FieldError::invalid_string(
            &at.child("fieldPath").0,
            field_path,
            "fieldPath must not contain line breaks",
        ));
    }
    if !field_path.is_empty() && valid_field_path(field_path, s).is_err() {
        cx.errors.push(FieldError::invalid_string(
            &at.child("fieldPath").0,
            field_path,
            "fieldPath must be a valid path",
        ));
    }
}

/// A rule as Go's `%#v` prints Kubernetes' `ValidationRule` (the value of compile errors).
fn rule_value(r: &J) -> String {
    let s = |k: &str| go::quote(str_field(r, k).unwrap_or(""));
    let reason = if r.get("reason").is_some() {
        "(*apiextensions.FieldValueErrorReason)(0xc000010000)"
    } else {
        "(*apiextensions.FieldValueErrorReason)(nil)"
    };
    let optional_old_self = if r.get("optionalOldSelf").is_some() {
        "(*bool)(0xc000010008)"
    } else {
        "(*bool)(nil)"
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional_old_self}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

fn cost_error_message(name: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// A compile problem in cel-go's form: `ERROR: <input>:line:col: msg`, the source line and a
/// caret under the column.
fn render_issue(source: &str, line: usize, col: usize, msg: &str) -> String {
    let mut out = format!("ERROR: <input>:{line}:{col}: {msg}");
    if let Some(text) = source.lines().nth(line.saturating_sub(1)) {
        out.push_str(&format!(
            "\n | {text}\n | {}^",
            ".".repeat(col.saturating_sub(1))
        ));
    }
    out
}

/// The line and column (1-based, in characters) of a character offset.
fn position(source: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut col = 1;
    for (i, c) in source.chars().enumerate() {
        if i == offset {
            break;
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else {
            col += 1;
        }
    }
    (line, col)
}

/// A regex's problem in Go's words where they map (`error parsing regexp: ...`).
pub(crate) fn regex_error(pattern: &str, e: &regex::Error) -> String {
    let detail = match e {
        regex::Error::Syntax(s) => s
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(s.as_str())
            .to_string(),
        regex::Error::CompiledTooBig(_) => "expression too large".to_string(),
        other => other.to_string(),
    };
    format!("error parsing regexp: {detail}: `{pattern}`")
}

/// What compiling one expression gave.
struct Expression {
    compiled: Compiled,
    ty: Ty,
    uses_old_self: bool,
}

/// Below this estimated cost an evaluation is charged its estimate as is, without bounding
/// it again from the actual values (which cannot exceed the estimate).
const CHEAP: u64 = 100;

/// An expression ready to evaluate: cel-rust's AST, with `matches` calls redirected to the
/// library's overload that caches compiled patterns.
#[derive(Debug)]
struct Compiled {
    expr: IdedExpr,
    /// The estimated cost of one evaluation, from the schema's sizes.
    estimate: u64,
    /// The expression for the direct evaluator, when it is within its subset.
    fast: Option<fast::Fast>,
}

impl Compiled {
    fn new(mut expr: IdedExpr, estimate: u64, shaped: &[(u64, EqShape)]) -> Compiled {
        redirect_matches(&mut expr);
        for (id, shape) in shaped {
            redirect_equality(&mut expr, *id, library::register_shape(shape.clone()));
        }
        let fast = fast::Fast::compile(&expr);
        Compiled {
            expr,
            estimate,
            fast,
        }
    }

    fn execute(&self, ctx: &Context) -> Result<Value, ExecutionError> {
        Value::resolve(&self.expr, ctx)
    }

    /// A bound on what evaluating with values of these (actual) types costs.
    fn bound(&self, self_ty: &Ty, old_ty: Option<&Ty>) -> u64 {
        check::check(&self.expr, self_ty, old_ty, false).cost.max
    }
}

/// Turns the `==` (or `!=`) call `id` into a comparison along a registered [`EqShape`]:
/// `@equals(a, b, shape)` (negated for `!=`).
fn redirect_equality(e: &mut IdedExpr, id: u64, shape: i64) -> bool {
    if e.id == id {
        if let Expr::Call(call) = &mut e.expr {
            let negate = call.func_name == cel::common::ast::operators::NOT_EQUALS;
            let mut args = std::mem::take(&mut call.args);
            args.push(IdedExpr {
                id: 0,
                expr: Expr::Literal(LiteralValue::Int(shape.into())),
            });
            let equals = Expr::Call(CallExpr {
                func_name: library::SHAPED_EQUALS.to_string(),
                target: None,
                args,
            });
            e.expr = if negate {
                Expr::Call(CallExpr {
                    func_name: cel::common::ast::operators::LOGICAL_NOT.to_string(),
                    target: None,
                    args: vec![IdedExpr {
                        id: 0,
                        expr: equals,
                    }],
                })
            } else {
                equals
            };
        }
        return true;
    }
    let mut found = false;
    let mut visit = |x: &mut IdedExpr| {
        if !found {
            found = redirect_equality(x, id, shape);
        }
    };
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(t) = &mut call.target {
                visit(t);
            }
            call.args.iter_mut().for_each(&mut visit);
        }
        Expr::Select(sel) => visit(&mut sel.operand),
        Expr::List(list) => list.elements.iter_mut().for_each(&mut visit),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    visit(&mut me.key);
                    visit(&mut me.value);
                }
            }
        }
        Expr::Struct(st) => {
            for entry in &mut st.entries {
                if let EntryExpr::StructField(f) = &mut entry.expr {
                    visit(&mut f.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            visit(&mut c.iter_range);
            visit(&mut c.accu_init);
            visit(&mut c.loop_cond);
            visit(&mut c.loop_step);
            visit(&mut c.result);
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    found
}

/// The fields of variable `var` that `rules` (their expressions and message expressions)
/// select, as `var.field` or `has(var.field)`; None when one uses `var` any other way (passes
/// it whole, iterates it, indexes it), and so needs all of it.
fn selected_fields(rules: &[Rule], var: &str) -> Option<Vec<String>> {
    let mut fields = Vec::new();
    for rule in rules {
        let message = rule.message_expression.as_ref().map(|(_, c)| c);
        for compiled in rule.program.as_ref().ok().into_iter().chain(message) {
            if !select_only(&compiled.expr, var, &mut fields) {
                return None;
            }
        }
    }
    Some(fields)
}

/// Adds to `fields` the fields of `var` that `e` selects; false when `e` uses `var` otherwise.
fn select_only(e: &IdedExpr, var: &str, fields: &mut Vec<String>) -> bool {
    let children: Vec<&IdedExpr> = match &e.expr {
        Expr::Ident(name) => return name != var,
        Expr::Select(sel) => match &sel.operand.expr {
            Expr::Ident(name) if name == var => {
                if !fields.contains(&sel.field) {
                    fields.push(sel.field.clone());
                }
                return true;
            }
            _ => vec![&sel.operand],
        },
        Expr::Call(call) => call.target.iter().map(|t| &**t).chain(&call.args).collect(),
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entry_values(&map.entries),
        Expr::Struct(st) => entry_values(&st.entries),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::Literal(_) | Expr::Unspecified => return true,
    };
    children.into_iter().all(|x| select_only(x, var, fields))
}

/// The expressions of map or struct entries: keys and values.
fn entry_values(entries: &[cel::common::ast::IdedEntryExpr]) -> Vec<&IdedExpr> {
    entries
        .iter()
        .flat_map(|entry| match &entry.expr {
            EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
            EntryExpr::StructField(f) => vec![&f.value],
        })
        .collect()
}

fn redirect_matches(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(call) => {
            if call.func_name == "matches" {
                call.func_name = library::CACHED_MATCHES.to_string();
            }
            if let Some(t) = &mut call.target {
                redirect_matches(t);
            }
            call.args.iter_mut().for_each(redirect_matches);
        }
        Expr::Select(sel) => redirect_matches(&mut sel.operand),
        Expr::List(list) => list.elements.iter_mut().for_each(redirect_matches),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                if let EntryExpr::MapEntry(me) = &mut entry.expr {
                    redirect_matches(&mut me.key);
                    redirect_matches(&mut me.value);
                }
            }
        }
        Expr::Struct(st) => {
            for entry in &mut st.entries {
                if let EntryExpr::StructField(f) = &mut entry.expr {
                    redirect_matches(&mut f.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            for sub in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                redirect_matches(sub);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn compile_expression(
    source: &str,
    self_ty: &Ty,
    old_ty: Option<&Ty>,
) -> Result<Expression, String> {
    let env = library::env();
    let program = env.compile(source).map_err(|errs| {
        errs.errors
            .iter()
            .map(|e| {
                render_issue(
                    source,
                    e.pos.0.max(1) as usize,
                    e.pos.1.max(1) as usize,
                    &e.msg,
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    let checked = check::check(program.expression(), self_ty, old_ty, true);
    if !checked.errors.is_empty() {
        let info = program.source_info();
        let issues: Vec<String> = checked
            .errors
            .iter()
            .map(|(id, msg)| {
                let offset = info.offset_for(*id).map_or(0, |(start, _)| start as usize);
                let (line, col) = position(source, offset);
                render_issue(source, line, col, msg)
            })
            .collect();
        return Err(issues.join("\n"));
    }
    Ok(Expression {
        uses_old_self: program.references().has_variable("oldSelf"),
        compiled: Compiled::new(
            program.expression().clone(),
            checked.cost.max,
            &checked.shaped_equalities,
        ),
        ty: checked.ty,
    })
}

fn compile_rules(
    s: Schema,
    declared: &[J],
    rules_path: &Path,
    ncx: &NodeCx,
    cx: &mut CompileCx,
) -> Vec<Rule> {
    let Some(self_ty) = schema::decl_ty(s, ncx.resource_root) else {
        const NO_TYPE: &str = "internal error: failed to construct type information for x-kubernetes-validations rules: unable to convert structural schema to CEL declarations";
        if cx.stored {
            return declared
                .iter()
                .map(|r| failed_rule(r, NO_TYPE.to_string()))
                .collect();
        }
        cx.errors.push(FieldError::new(
            FieldErrorKind::Internal,
            &rules_path.0,
            None,
            NO_TYPE,
        ));
        return Vec::new();
    };
    let cardinality = ncx
        .cardinality
        .unwrap_or_else(|| schema::max_cardinality(schema::min_size(s)));
    let mut rules = Vec::new();
    for (i, r) in declared.iter().enumerate() {
        let at = rules_path.index(i);
        let rule_path = at.child("rule");
        let source = str_field(r, "rule").unwrap_or("").trim().to_string();
        if source.is_empty() {
            // Nothing to run (a stored schema; refused when written).
            continue;
        }
        let optional_old_self = r.get("optionalOldSelf").and_then(J::as_bool);
        let old_ty = if optional_old_self == Some(true) {
            Ty::Optional(Box::new(self_ty.clone()))
        } else {
            self_ty.clone()
        };
        let compiled = compile_expression(&source, &self_ty, Some(&old_ty)).and_then(|e| {
            if !e.ty.is_dyn() && !matches!(e.ty, Ty::Bool) {
                Err(String::new())
            } else {
                Ok(e)
            }
        });
        let cost = compiled.as_ref().map_or(0, |e| {
            if e.compiled.estimate == 0 {
                0
            } else {
                e.compiled.estimate.saturating_mul(cardinality)
            }
        });
        if cost > STATIC_ESTIMATED_COST_LIMIT && !cx.stored {
            cx.errors.push(FieldError::forbidden(
                &rule_path.0,
                cost_error_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT),
            ));
        }
        cx.observe(&rule_path.0, cost);
        let expression = match compiled {
            Ok(e) => e,
            Err(msg) => {
                let detail = if msg.is_empty() {
                    "cel expression must evaluate to a bool".to_string()
                } else {
                    format!("compilation failed: {msg}")
                };
                if cx.stored {
                    rules.push(failed_rule(r, detail));
                    continue;
                }
                cx.errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    &rule_path.0,
                    Some(rule_value(r)),
                    detail,
                ));
                continue;
            }
        };
        let mut message_expression = None;
        if let Some(me) = str_field(r, "messageExpression").filter(|m| !m.trim().is_empty()) {
            let me_path = at.child("messageExpression");
            let before = cx.errors.len();
            match compile_expression(me, &self_ty, Some(&old_ty)) {
                Err(msg) => cx.errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    &me_path.0,
                    Some(rule_value(r)),
                    format!("messageExpression compilation failed: {msg}"),
                )),
                Ok(e) if !e.ty.is_dyn() && !matches!(e.ty, Ty::String(_)) => {
                    cx.errors.push(FieldError::new(
                        FieldErrorKind::Invalid,
                        &me_path.0,
                        Some(rule_value(r)),
                        "messageExpression must evaluate to a string",
                    ))
                }
                Ok(e) => {
                    if e.compiled.estimate > STATIC_ESTIMATED_COST_LIMIT {
                        cx.errors.push(FieldError::forbidden(
                            &me_path.0,
                            cost_error_message(
                                "estimated messageExpression cost",
                                e.compiled.estimate,
                                STATIC_ESTIMATED_COST_LIMIT,
                            ),
                        ));
                    }
                    cx.observe(&me_path.0, e.compiled.estimate);
                    message_expression = Some((me.to_string(), e.compiled));
                }
            }
            if cx.stored {
                // A stored messageExpression that does not compile: the message is used.
                cx.errors.truncate(before);
            }
        }
        let uses_old_self = expression.uses_old_self;
        if cx.stored {
            // Accepted when written; nothing more to report.
        } else if uses_old_self {
            if let Some(within) = &ncx.uncorrelatable {
                cx.errors.push(FieldError::invalid_string(
                    &rule_path.0,
                    str_field(r, "rule").unwrap_or(""),
                    format!(
                        "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                    ),
                ));
            }
        } else if let Some(v) = optional_old_self {
            cx.errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                &at.child("optionalOldSelf").0,
                Some(v.to_string()),
                "may not be set if oldSelf is not used in rule",
            ));
        }
        let field_path = str_field(r, "fieldPath")
            .filter(|p| !p.is_empty())
            .and_then(|p| valid_field_path(p, s).ok());
        rules.push(Rule {
            field_path,
            message_expression,
            program: Ok(expression.compiled),
            uses_old_self,
            optional_old_self: optional_old_self == Some(true),
            ..failed_rule(r, String::new())
        });
    }
    rules
}

/// A rule as declared, with `error` in place of its program.
fn failed_rule(r: &J, error: String) -> Rule {
    Rule {
        source: str_field(r, "rule").unwrap_or("").trim().to_string(),
        message: str_field(r, "message")
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(String::from),
        message_expression: None,
        reason: str_field(r, "reason").map(|reason| match reason {
            "FieldValueForbidden" => FieldErrorKind::Forbidden,
            "FieldValueRequired" => FieldErrorKind::Required,
            "FieldValueDuplicate" => FieldErrorKind::Duplicate,
            _ => FieldErrorKind::Invalid,
        }),
        field_path: None,
        program: Err(error),
        uses_old_self: false,
        optional_old_self: false,
    }
}

/// Resolves a rule's `fieldPath` (`.a.b`, `['a.b']`, `.m['key']`) against the node's schema
/// and returns it in field-path notation (`a.b`, `m[key]`), or why it does not resolve.
fn valid_field_path(path: &str, s: Schema) -> Result<String, String> {
    let tokens = field_path_tokens(path);
    let mut out = Path::default();
    let mut cur = s;
    let mut it = tokens.into_iter();
    let step = |name: &str, cur: &mut Schema, out: &mut Path| -> Result<(), String> {
        if cur.properties().is_some() {
            *out = out.child(name);
            *cur = cur
                .property(name)
                .ok_or_else(|| "does not refer to a valid field".to_string())?;
        } else if let Some(ap) = cur.additional() {
            *out = out.key(name);
            *cur = ap;
        } else {
            return Err("does not refer to a valid field".to_string());
        }
        Ok(())
    };
    while let Some(tok) = it.next() {
        match tok.as_str() {
            "[" => {
                let quoted = it
                    .next()
                    .ok_or_else(|| "unexpected end of JSON path".to_string())?;
                if quoted.len() < 2 || !quoted.starts_with('\'') || !quoted.ends_with('\'') {
                    return Err(format!("expected single quoted string but got {quoted}"));
                }
                let name = unescape_single_quoted(&quoted[1..quoted.len() - 1])?;
                step(&name, &mut cur, &mut out)?;
                match it.next() {
                    Some(t) if t == "]" => {}
                    Some(t) => return Err(format!("expected ] but got {t}")),
                    None => return Err("unexpected end of JSON path".to_string()),
                }
            }
            "." => {
                let name = it
                    .next()
                    .ok_or_else(|| "unexpected end of JSON path".to_string())?;
                step(&name, &mut cur, &mut out)?;
            }
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok(out.0)
}

fn field_path_tokens(path: &str) -> Vec<String> {
    let chars: Vec<char> = path.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '.' | '[' | ']') {
            tokens.push(c.to_string());
            i += 1;
            continue;
        }
        let start = i;
        if c == '\'' {
            i += 1;
            while i < chars.len() && !(chars[i] == '\'' && chars[i - 1] != '\\') {
                i += 1;
            }
            i = (i + 1).min(chars.len());
        } else {
            while i < chars.len() && !matches!(chars[i], '.' | '[' | ']') {
                i += 1;
            }
        }
        tokens.push(chars[start..i].iter().collect());
    }
    tokens
}

fn unescape_single_quoted(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next().unwrap_or('\\');
        out.push(match e {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\'' => '\'',
            '\\' => '\\',
            other => {
                return Err(format!(
                    "invalid string literal: invalid escape char \\{other}"
                ))
            }
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Evaluation

struct EvalState {
    budget: u64,
    /// Whether each evaluation is charged the bound made from its actual values. Otherwise
    /// (the first pass) it is charged its static estimate, which is never less, without
    /// bounding it again; if that pass runs out of budget, [`Rules::evaluate`] starts over
    /// exactly, so a refusal always rests on the exact bounds.
    exact: bool,
    /// Set by a first pass that ran out of budget.
    retry_exact: bool,
    errors: Vec<FieldError>,
    warnings: Vec<String>,
    env: Arc<cel::Env>,
}

const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// The nearest value (this node's or an ancestor's) that could be paired with its old value,
/// and that old value: when they are equal, the update left this node unchanged.
type Ratchet<'a> = Option<(&'a J, &'a J)>;

/// Validates `v` (and what is below it) against `node`'s rules. Returns `false` once the
/// evaluation must stop (budget exhausted).
fn walk<'a>(
    node: &Node,
    path: &Path,
    v: &'a J,
    old: Option<&'a J>,
    ratchet: Ratchet<'a>,
    st: &mut EvalState,
) -> bool {
    if v.is_null() {
        return true;
    }
    let old = old.filter(|o| !o.is_null());
    if !node.rules.is_empty() && !evaluate_rules(node, path, v, old, ratchet, st) {
        return false;
    }
    let paired = |new: &'a J, old: Option<&'a J>| -> Ratchet<'a> {
        match old {
            Some(o) => Some((new, o)),
            None => ratchet,
        }
    };
    match v {
        J::Array(items) => {
            if let Some(item_node) = &node.items {
                let set_list = node.set_list;
                for (i, item) in items.iter().enumerate() {
                    let old_item = correlate(node, old, item);
                    // Ratcheting pairs set items by value too.
                    let ratchet_old = match old_item {
                        Some(o) => Some(o),
                        None if set_list => old
                            .and_then(J::as_array)
                            .and_then(|o| o.iter().find(|o| *o == item)),
                        None => None,
                    };
                    let r = paired(item, ratchet_old);
                    if !walk(item_node, &path.index(i), item, old_item, r, st) {
                        return false;
                    }
                }
            }
        }
        J::Object(map) => {
            if let Some(value_node) = &node.additional {
                for (k, val) in map {
                    let old_val = old.and_then(|o| o.get(k));
                    let r = paired(val, old_val);
                    if !walk(value_node, &path.key(k), val, old_val, r, st) {
                        return false;
                    }
                }
            }
            for (name, child) in &node.properties {
                if let Some(val) = map.get(name) {
                    let old_val = old.and_then(|o| o.get(name));
                    let r = paired(val, old_val);
                    if !walk(child, &path.child(name), val, old_val, r, st) {
                        return false;
                    }
                }
            }
        }
        _ => {}
    }
    true
}

/// The old element an item of a `map` list corresponds to: the one with the same keys.
fn correlate<'a>(node: &Node, old: Option<&'a J>, item: &J) -> Option<&'a J> {
    if node.list_map_keys.is_empty() {
        return None;
    }
    let key_of = |v: &J| -> Vec<J> {
        node.list_map_keys
            .iter()
            .map(|k| v.get(k).cloned().unwrap_or(J::Null))
            .collect()
    };
    let wanted = key_of(item);
    old?.as_array()?.iter().find(|o| key_of(o) == wanted)
}

fn evaluate_rules(
    node: &Node,
    path: &Path,
    v: &J,
    old: Option<&J>,
    ratchet: Ratchet,
    st: &mut EvalState,
) -> bool {
    // Whether this node is unchanged by the update, computed once if a failure needs it.
    let mut unchanged: Option<bool> = None;
    // Only errors name the value's type.
    let value_type = || go::quote(&node.type_name);
    if st.budget == 0 {
        if !st.exact {
            st.retry_exact = true;
            return false;
        }
        st.errors.push(FieldError::new(
            FieldErrorKind::Invalid,
            path.render(),
            Some(value_type()),
            OUT_OF_BUDGET,
        ));
        return false;
    }
    let shape = &*node.shape;
    // The interpreter's activations, made when a rule needs one.
    let mut activations = Activations::default();
    // The types of self, oldSelf and optional oldSelf, made when a bound needs them.
    let mut types: Option<(Ty, Option<Ty>, Ty)> = None;
    let exact = st.exact;
    let mut bound_of = |c: &Compiled, optional: bool| -> u64 {
        if c.estimate <= CHEAP || (!exact && c.estimate <= PER_CALL_LIMIT) {
            return c.estimate;
        }
        let (self_ty, old_ty, optional_ty) = types.get_or_insert_with(|| {
            let old_ty = old.map(|o| schema::to_ty(o, shape));
            let optional_ty = Ty::Optional(Box::new(old_ty.clone().unwrap_or(Ty::Never)));
            (schema::to_ty(v, shape), old_ty, optional_ty)
        });
        let old_ty = if optional {
            Some(&*optional_ty)
        } else {
            old_ty.as_ref()
        };
        c.bound(self_ty, old_ty)
    };
    for rule in &node.rules {
        let program = match &rule.program {
            Ok(p) => p,
            Err(e) => {
                st.errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    path.render(),
                    Some(value_type()),
                    format!("rule compile error: {e}"),
                ));
                continue;
            }
        };
        if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
            continue;
        }
        let bound = bound_of(program, rule.optional_old_self);
        if bound > PER_CALL_LIMIT {
            st.errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                path.render(),
                Some(value_type()),
                format!(
                    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    rule.error_string()
                ),
            ));
            return false;
        }
        if bound > st.budget {
            if !st.exact {
                st.retry_exact = true;
                return false;
            }
            st.errors.push(FieldError::new(
                FieldErrorKind::Invalid,
                path.render(),
                Some(value_type()),
                OUT_OF_BUDGET,
            ));
            return false;
        }
        st.budget -= bound;
        let outcome = match program.fast.as_ref().and_then(|f| f.eval(v, shape)) {
            Some(holds) => Ok(Value::Bool(holds)),
            None => program.execute(activations.get(rule, node, v, old, &st.env)),
        };
        match outcome {
            Ok(Value::Bool(true)) => continue,
            Ok(_) => {}
            Err(e) => {
                let detail = match &e {
                    ExecutionError::NoSuchOverload(_)
                    | ExecutionError::ValuesNotComparable(..)
                    | ExecutionError::UnsupportedBinaryOperator(..) => format!(
                        "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                        rule.error_string()
                    ),
                    other => format!(
                        "{} evaluating rule: {}",
                        execution_error(other),
                        rule.error_string()
                    ),
                };
                st.errors.push(FieldError::new(
                    FieldErrorKind::Invalid,
                    path.render(),
                    Some(value_type()),
                    detail,
                ));
                continue;
            }
        }
        // The rule failed: report it at its fieldPath, with its message.
        let at = match &rule.field_path {
            Some(fp) => path.child(fp),
            None => path.clone(),
        };
        // Failures of rules without oldSelf on unchanged values are ratcheted: warnings.
        let ratcheted = !rule.uses_old_self
            && *unchanged.get_or_insert_with(|| ratchet.is_some_and(|(n, o)| n == o));
        let report = |st: &mut EvalState, e: FieldError| {
            if ratcheted {
                st.warnings.push(e.to_string());
            } else {
                st.errors.push(e);
            }
        };
        let mut detail = None;
        if let Some((source, program)) = &rule.message_expression {
            let bound = bound_of(program, rule.optional_old_self);
            if bound > PER_CALL_LIMIT {
                report(
                    st,
                    FieldError::new(
                        FieldErrorKind::Invalid,
                        at.render(),
                        Some(value_type()),
                        format!(
                            "no further validation rules will be run due to call cost exceeds limit for messageExpression: {}",
                            go::quote(source)
                        ),
                    ),
                );
                return false;
            }
            if bound > st.budget {
                if !st.exact {
                    st.retry_exact = true;
                    return false;
                }
                report(
                    st,
                    FieldError::new(
                        FieldErrorKind::Invalid,
                        at.render(),
                        Some(value_type()),
                        "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run",
                    ),
                );
                return false;
            }
            st.budget -= bound;
            let activation = activations.get(rule, node, v, old, &st.env);
            if let Ok(Value::String(s)) = program.execute(activation) {
                let trimmed = s.trim();
                if !trimmed.is_empty()
                    && trimmed.len() <= MAX_MESSAGE_EXPRESSION_LEN
                    && !trimmed.contains('\n')
                {
                    detail = Some(trimmed.to_string());
                }
            }
        }
        let detail = detail.unwrap_or_else(|| match &rule.message {
            Some(m) => m.clone(),
            None => format!("failed rule: {}", rule.source),
        });
        let error = match rule.reason {
            Some(FieldErrorKind::Forbidden) => FieldError::forbidden(&at.render(), detail),
            Some(FieldErrorKind::Required) => FieldError::required(&at.render(), detail),
            Some(FieldErrorKind::Duplicate) => FieldError::new(
                FieldErrorKind::Duplicate,
                at.render(),
                Some(value_type()),
                "",
            ),
            _ => FieldError::new(
                FieldErrorKind::Invalid,
                at.render(),
                Some(value_type()),
                detail,
            ),
        };
        report(st, error);
    }
    true
}

/// The interpreter's activations for the rules of one node and value: one for rules with
/// `optionalOldSelf: true` (where `oldSelf` is an optional), one for the others.
#[derive(Default)]
struct Activations<'v> {
    plain: Option<Context<'v, 'v>>,
    optional: Option<Context<'v, 'v>>,
}

impl<'v> Activations<'v> {
    fn get(
        &mut self,
        rule: &Rule,
        node: &'v Node,
        v: &'v J,
        old: Option<&'v J>,
        env: &Arc<cel::Env>,
    ) -> &Context<'v, 'v> {
        let shape = &*node.shape;
        if rule.optional_old_self {
            return self.optional.get_or_insert_with(|| {
                let mut c = Context::with_env(env.clone());
                c.add_variable_as_val("self", schema::to_val(v, shape));
                let opt = match old {
                    Some(o) => CelOptional::of(schema::to_val(o, shape)),
                    None => CelOptional::none(),
                };
                c.add_variable_as_val("oldSelf", Box::new(opt));
                c
            });
        }
        self.plain.get_or_insert_with(|| {
            let convert = |v, fields: &Option<Vec<String>>| match fields {
                Some(fields) => schema::to_val_selected(v, shape, fields),
                None => schema::to_val(v, shape),
            };
            let mut c = Context::with_env(env.clone());
            c.add_variable_as_val("self", convert(v, &node.self_fields));
            if let Some(o) = old {
                if node
                    .rules
                    .iter()
                    .any(|r| r.uses_old_self && !r.optional_old_self)
                {
                    c.add_variable_as_val("oldSelf", convert(o, &node.old_self_fields));
                }
            }
            c
        })
    }
}

/// A runtime error in cel-go's words.
fn execution_error(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::IndexOutOfBounds(i) => match i {
            Value::Int(i) => format!("index out of range: {i}"),
            Value::UInt(i) => format!("index out of range: {i}"),
            other => format!("index out of range: {other:?}"),
        },
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::UndeclaredReference(name) => format!("no such attribute: {name}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_paths_resolve_against_the_schema() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
        }});
        assert_eq!(valid_field_path(".a", Schema(&s)).unwrap(), "a");
        assert_eq!(valid_field_path(".a['b.c']", Schema(&s)).unwrap(), "a.b.c");
        assert_eq!(valid_field_path(".m['k']", Schema(&s)).unwrap(), "m[k]");
        assert_eq!(valid_field_path(".m.k", Schema(&s)).unwrap(), "m[k]");
        assert!(valid_field_path(".nope", Schema(&s)).is_err());
        assert!(valid_field_path("a", Schema(&s)).is_err());
        assert!(valid_field_path(".a[b]", Schema(&s)).is_err());
    }

    #[test]
    fn cost_factors_print_as_kubernetes_prints_them() {
        assert!(cost_error_message("x", 2_000_000_000, 10_000_000).contains("more than 100x"));
        assert!(cost_error_message("x", 25_000_000, 10_000_000).contains("factor of 2.5x"));
        assert!(cost_error_message("x", 12_000_000, 10_000_000).contains("factor of 1.200000x"));
    }

    /// Rules that only select fields of `self` see those fields alone, and judge exactly as
    /// with the whole value; a rule that needs all of `self` gets all of it.
    #[test]
    fn only_the_fields_rules_select_are_converted() {
        let rule = |r: &str| json!({"rule": r});
        let schema = |rules: Vec<J>| {
            json!({"type": "object", "properties": {"spec": {
                "type": "object",
                "x-kubernetes-validations": rules,
                "properties": {
                    "min": {"type": "integer"}, "max": {"type": "integer"},
                    "tier": {"type": "string", "maxLength": 8},
                    "env": {"type": "array", "maxItems": 4,
                            "items": {"type": "string", "maxLength": 8}}
                }
            }}})
        };
        let spec_node = |rules: &Rules| -> Option<Vec<String>> {
            let root = rules.root.as_ref().unwrap();
            let (_, spec) = root.properties.iter().find(|(n, _)| n == "spec").unwrap();
            spec.self_fields.clone()
        };
        let selecting = schema(vec![
            rule("self.min <= self.max"),
            rule("!has(self.tier) || self.tier != 'x'"),
            json!({"rule": "self.min >= 0", "messageExpression": "self.min < 0 ? 'min is negative' : 'min'"}),
        ]);
        let rules = Rules::compile(&selecting, "spec.validation.openAPIV3Schema").unwrap();
        assert_eq!(
            spec_node(&rules),
            Some(vec![
                "min".to_string(),
                "max".to_string(),
                "tier".to_string()
            ])
        );
        let ok = json!({"spec": {"min": 1, "max": 2, "env": ["a"]}});
        assert!(rules.evaluate(&ok, None).errors.is_empty());
        let bad = json!({"spec": {"min": -3, "max": -4, "tier": "x", "env": ["a"]}});
        let errors: Vec<String> = rules
            .evaluate(&bad, None)
            .errors
            .iter()
            .map(|e| e.detail.clone())
            .collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors.iter().any(|e| e == "min is negative"), "{errors:?}");

        for whole in ["size(self) > 3", "[self][0].min >= 0", "self == self"] {
            let rules = Rules::compile(&schema(vec![rule(whole)]), "s").expect(whole);
            assert_eq!(spec_node(&rules), None, "{whole}");
        }
        // `ok`'s spec has three fields, all of which this rule counts.
        let rules = Rules::compile(&schema(vec![rule("size(self) == 3")]), "s").unwrap();
        assert!(rules.evaluate(&ok, None).errors.is_empty());
    }
}
