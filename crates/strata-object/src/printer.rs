//! Printer columns: the columns of a type's Table answer, as data on its [`ResourceType`].
//!
//! A column has what a Table's `columnDefinitions` show (name, type, format, description,
//! priority) and where its cells come from: a JSONPath over the object, rendered by the
//! column's type as custom resources' `additionalPrinterColumns` are, or one of the few values
//! Kubernetes computes for its built-in kinds (an age, a count, a role reference, a binding's
//! subjects). Priority-1 columns are sent like the others; clients show them only when asked
//! for a wide listing (`kubectl get -o wide`).
//!
//! ```
//! use serde_json::json;
//! use strata_object::parse_time;
//! use strata_object::printer::{Cell, ColumnType, JsonPath, PrinterColumn};
//!
//! let path = |p: &str| JsonPath::parse(p).unwrap();
//! let ready = PrinterColumn::new(
//!     "Ready",
//!     ColumnType::String,
//!     "Whether the Ready condition holds",
//!     Cell::Path(path(r#".status.conditions[?(@.type=="Ready")].status"#)),
//! );
//! let age = PrinterColumn::new("Age", ColumnType::Date, "Time since creation", Cell::Age);
//!
//! let object = json!({
//!     "metadata": {"name": "web", "creationTimestamp": "2024-05-01T10:00:00Z"},
//!     "status": {"conditions": [{"type": "Synced", "status": "False"},
//!                               {"type": "Ready", "status": "True"}]},
//! });
//! let object = object.as_object().unwrap();
//! let now = parse_time("2024-05-01T13:12:00Z").unwrap();
//! assert_eq!(ready.cell(object, now), "True");
//! assert_eq!(age.cell(object, now), "3h12m");
//! assert_eq!(ready.definition()["type"], "string");
//! assert!(age.depends_on_time() && !ready.depends_on_time());
//! ```
//!
//! [`ResourceType`]: crate::ResourceType

use serde_json::{json, Map, Value};
/// The time cells are computed at (re-exported, so renderers need no `time` dependency).
pub use time::OffsetDateTime;

/// The `type` of a Table column (OpenAPI's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// Text.
    String,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A time, shown as an age.
    Date,
}

impl ColumnType {
    /// The name a Table's `columnDefinitions` give the type (`"string"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Date => "date",
        }
    }

    /// The type named `s` (`string`, `integer`, `number`, `boolean`, `date`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            "date" => Self::Date,
            _ => return None,
        })
    }
}

/// Which subjects of a binding a [`Cell::Subjects`] column lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    /// Subjects of kind `User`.
    User,
    /// Subjects of kind `Group`.
    Group,
    /// Listed as `<namespace>/<name>`.
    ServiceAccount,
}

/// The cells Kubernetes computes for an Event from several fields at once. They read the
/// core/v1 form and the events.k8s.io/v1 one (`regarding`, `note`, `deprecatedSource`,
/// `deprecatedFirstTimestamp`, … in place of `involvedObject`, `message`, `source`, …): both
/// groups print the same columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventCell {
    /// `fieldPath` of the involved object.
    Subobject,
    /// The age of the last occurrence: `series.lastObservedTime`, else `lastTimestamp`, else
    /// the first occurrence.
    LastSeen,
    /// The age of `firstTimestamp`, else of `eventTime`.
    FirstSeen,
    /// `<lowercased kind>/<name>` of `involvedObject` (the kind alone without a name).
    Object,
    /// `source.component` (else `reportingComponent`), then `, <host>` (else the reporting
    /// instance) when there is one.
    Source,
    /// `series.count`, else `count`, else 1 (an event seen once).
    Count,
    /// `message` without surrounding white space.
    Message,
}

/// Where a column's cells come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cell {
    /// The first value a JSONPath finds, rendered by the column's type (custom resources'
    /// rule): `string` prints the value as Go does (structures as compact JSON),
    /// `integer`/`number`/`boolean` keep a value of that JSON type, `date` turns an RFC 3339
    /// time into its age; anything else, or nothing found, is `null`.
    Path(JsonPath),
    /// The time since `metadata.creationTimestamp` as a [`human_duration`] (`<unknown>`
    /// without one).
    Age,
    /// How many entries the objects or arrays at these paths hold together (an integer).
    Count(Vec<JsonPath>),
    /// `<kind>/<name>` of `roleRef`.
    RoleRef,
    /// The names of a binding's subjects of one kind, joined with `, `.
    Subjects(SubjectKind),
    /// The string a JSONPath finds, or `""` when it finds none (Kubernetes' cell for an unset
    /// optional string, such as a Lease's holder).
    Text(JsonPath),
    /// An Event's computed cell.
    Event(EventCell),
}

/// One column of a type's Table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The column's header, such as `Name` or `Secrets`.
    pub name: String,
    /// The type of its cells.
    pub column_type: ColumnType,
    /// `name` for the column holding the object's name, otherwise usually empty.
    pub format: String,
    /// What the column shows, for clients that explain columns.
    pub description: String,
    /// 0 for the default view; higher priorities are shown in wide views only.
    pub priority: i32,
    /// Where its cells come from.
    pub cell: Cell,
}

impl PrinterColumn {
    /// A column of `column_type` with no format and priority 0.
    pub fn new(name: &str, column_type: ColumnType, description: &str, cell: Cell) -> Self {
        Self {
            name: name.into(),
            column_type,
            format: String::new(),
            description: description.into(),
            priority: 0,
            cell,
        }
    }

    /// The column with `format` set (`name` marks the column of the object's name).
    pub fn with_format(mut self, format: &str) -> Self {
        self.format = format.into();
        self
    }

    /// The column with `priority` set (1: shown only in wide views).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// The column's entry in a Table's `columnDefinitions`.
    pub fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.column_type.as_str(),
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }

    /// Whether the column's cells change as time passes (ages), so a rendered row must not be
    /// kept for later readers.
    pub fn depends_on_time(&self) -> bool {
        match &self.cell {
            Cell::Age | Cell::Event(EventCell::LastSeen | EventCell::FirstSeen) => true,
            Cell::Path(_) => self.column_type == ColumnType::Date,
            _ => false,
        }
    }

    /// The cell of this column for `obj` (an object's top-level map) at time `now`.
    pub fn cell(&self, obj: &Map<String, Value>, now: OffsetDateTime) -> Value {
        self.timed_cell(obj).at(now)
    }

    /// The cell of this column for `obj` with the time left open: what a Table row keeps so
    /// that it can be finished at any later time ([`TimedCell::at`] gives [`Self::cell`]).
    pub fn timed_cell(&self, obj: &Map<String, Value>) -> TimedCell {
        let fixed = TimedCell::Fixed;
        match &self.cell {
            Cell::Path(path) => match path.find_in(obj).first() {
                Some(v) => typed_cell(self.column_type, v),
                None => fixed(Value::Null),
            },
            Cell::Age => {
                let created = obj
                    .get("metadata")
                    .and_then(|m| m.get("creationTimestamp"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                age_cell(created)
            }
            Cell::Count(paths) => {
                let n: usize = paths
                    .iter()
                    .flat_map(|p| p.find_in(obj).into_iter().take(1))
                    .map(|v| match v {
                        Value::Object(m) => m.len(),
                        Value::Array(a) => a.len(),
                        _ => 0,
                    })
                    .sum();
                fixed(json!(n))
            }
            Cell::RoleRef => {
                let field = |k: &str| {
                    obj.get("roleRef")
                        .and_then(|r| r.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                fixed(json!(format!("{}/{}", field("kind"), field("name"))))
            }
            Cell::Subjects(kind) => fixed(json!(subjects(obj, *kind).join(", "))),
            Cell::Text(path) => match path.find_in(obj).first() {
                Some(Value::String(s)) => fixed(json!(s)),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => typed_cell(ColumnType::String, v),
                _ => fixed(json!("")),
            },
            Cell::Event(which) => event_cell(obj, *which),
        }
    }
}

/// A cell whose value may depend on the time it is shown at.
#[derive(Clone, Debug, PartialEq)]
pub enum TimedCell {
    /// The same at every time.
    Fixed(Value),
    /// The age of this instant: [`human_duration`] of the time since it.
    Since(OffsetDateTime),
}

impl TimedCell {
    /// The cell at time `now`.
    pub fn at(self, now: OffsetDateTime) -> Value {
        match self {
            TimedCell::Fixed(v) => v,
            TimedCell::Since(t) => json!(human_duration(now - t)),
        }
    }
}

/// The age cell of a time written as RFC 3339: `<unknown>` when unset or unreadable.
fn age_cell(created: &str) -> TimedCell {
    match crate::parse_time(created) {
        Some(t) => since(t),
        None => TimedCell::Fixed(json!("<unknown>")),
    }
}

/// The age cell of an instant; Kubernetes' zero time (0001-01-01T00:00:00Z) means unset.
fn since(t: OffsetDateTime) -> TimedCell {
    if t.year() == 1 && t.ordinal() == 1 && t.time() == time::Time::MIDNIGHT {
        return TimedCell::Fixed(json!("<unknown>"));
    }
    TimedCell::Since(t)
}

/// An Event's field by its core/v1 name, else by its events.k8s.io/v1 name.
fn event_field<'a>(obj: &'a Map<String, Value>, core: &str) -> Option<&'a Value> {
    let v1 = match core {
        "involvedObject" => "regarding",
        "message" => "note",
        "source" => "deprecatedSource",
        "firstTimestamp" => "deprecatedFirstTimestamp",
        "lastTimestamp" => "deprecatedLastTimestamp",
        "count" => "deprecatedCount",
        "reportingComponent" => "reportingController",
        other => other,
    };
    obj.get(core).or_else(|| obj.get(v1))
}

/// An Event's computed cell, as Kubernetes' event printer makes it.
fn event_cell(obj: &Map<String, Value>, which: EventCell) -> TimedCell {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let field = |k: &str| event_field(obj, k);
    let top = |k: &str| text(field(k));
    let within = |outer: &str, k: &str| text(field(outer).and_then(|o| o.get(k)));
    let age = |t: &str| age_cell(t);
    let series = obj.get("series").filter(|s| s.is_object());
    let first_seen = || match top("firstTimestamp") {
        t if !t.is_empty() => age(&t),
        _ => age(&top("eventTime")),
    };
    let value = match which {
        EventCell::FirstSeen => return first_seen(),
        EventCell::LastSeen => {
            if let Some(series) = series {
                return age(&text(series.get("lastObservedTime")));
            }
            return match top("lastTimestamp") {
                t if !t.is_empty() => age(&t),
                _ => first_seen(),
            };
        }
        EventCell::Object => {
            let kind = within("involvedObject", "kind").to_lowercase();
            match within("involvedObject", "name") {
                name if name.is_empty() => json!(kind),
                name => json!(format!("{kind}/{name}")),
            }
        }
        EventCell::Source => {
            let first = |a: String, b: String| if a.is_empty() { b } else { a };
            let component = first(within("source", "component"), top("reportingComponent"));
            let instance = first(within("source", "host"), top("reportingInstance"));
            if instance.is_empty() {
                json!(component)
            } else {
                json!(format!("{component}, {instance}"))
            }
        }
        EventCell::Count => {
            let count = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(0);
            match series {
                Some(s) => json!(count(s.get("count"))),
                None => match count(field("count")) {
                    0 => json!(1),
                    n => json!(n),
                },
            }
        }
        EventCell::Message => json!(top("message").trim()),
        EventCell::Subobject => json!(within("involvedObject", "fieldPath")),
    };
    TimedCell::Fixed(value)
}

/// The names of `obj`'s subjects of `kind`, in order.
fn subjects(obj: &Map<String, Value>, kind: SubjectKind) -> Vec<String> {
    let Some(list) = obj.get("subjects").and_then(Value::as_array) else {
        return Vec::new();
    };
    let wanted = match kind {
        SubjectKind::User => "User",
        SubjectKind::Group => "Group",
        SubjectKind::ServiceAccount => "ServiceAccount",
    };
    let text = |s: &Value, k: &str| s.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    list.iter()
        .filter(|s| s.get("kind").and_then(Value::as_str) == Some(wanted))
        .map(|s| match kind {
            SubjectKind::ServiceAccount => format!("{}/{}", text(s, "namespace"), text(s, "name")),
            _ => text(s, "name"),
        })
        .collect()
}

/// A cell from a found value under custom resources' rule for `ty`.
fn typed_cell(ty: ColumnType, v: &Value) -> TimedCell {
    let value = match (ty, v) {
        (_, Value::Null) => Value::Null,
        (ColumnType::String, Value::String(s)) => json!(s),
        // Printed as Kubernetes' JSONPath printer prints it: scalars as Go formats them,
        // structures as Go's compact JSON.
        (ColumnType::String, Value::Number(n)) => json!(crate::go::number(n, false)),
        (ColumnType::String, Value::Bool(b)) => json!(b.to_string()),
        (ColumnType::String, other) => json!(crate::go::json(other)),
        (ColumnType::Integer, Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => json!(i),
            (None, Some(f)) => json!(f as i64),
            _ => Value::Null,
        },
        (ColumnType::Number, Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        (ColumnType::Boolean, Value::Bool(b)) => json!(b),
        (ColumnType::Date, Value::String(s)) => match crate::parse_time(s) {
            Some(t) => return since(t),
            None => json!("<invalid>"),
        },
        _ => Value::Null,
    };
    TimedCell::Fixed(value)
}

/// The age of an object created at `created` (RFC 3339): `<unknown>` when unset.
pub fn age_of(created: &str, now: OffsetDateTime) -> String {
    match age_cell(created).at(now) {
        Value::String(age) => age,
        _ => "<unknown>".into(),
    }
}

/// A duration as Kubernetes writes ages: about two or three significant figures, in the units
/// `s`, `m`, `h`, `d` and `y` (`90s`, `5m30s`, `3h12m`, `47h`, `2d3h`, `40d`, `3y20d`, `9y`);
/// `0s` for up to two seconds in the future (clock skew) and `<invalid>` beyond.
pub fn human_duration(d: time::Duration) -> String {
    let seconds = d.whole_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            dy => format!("{years}y{dy}d"),
        };
    }
    format!("{years}y")
}

/// A JSONPath as printer columns use them (`.status.phase`, `.spec.items[0].name`,
/// `.metadata.labels['app.kubernetes.io/name']`, `.status.conditions[?(@.type=="Ready")].status`):
/// fields, quoted keys, indices (negative from the end), `[*]` and `.*`, and filters comparing a
/// relative path with a literal (`==`, `!=`, `<`, `<=`, `>`, `>=`) or testing that it exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter(Filter),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Filter {
    path: Vec<Step>,
    /// `None`: the path exists.
    test: Option<(Op, Literal)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Literal {
    Str(String),
    /// Kept as written; compared as a number.
    Num(String),
    Bool(bool),
    Null,
}

impl std::fmt::Display for JsonPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl JsonPath {
    /// Parses a path such as `.status.phase` (also accepted: a leading `$`, and the whole
    /// wrapped in `{…}` as kubectl writes templates).
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let inner = text.trim();
        let inner = inner
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or(inner);
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let mut p = Parser {
            s: inner.as_bytes(),
            i: 0,
        };
        let steps = p.steps(false)?;
        if steps.is_empty() {
            return Err("an empty path".into());
        }
        if p.i != p.s.len() {
            return Err(format!("unexpected {:?} at {}", &inner[p.i..], p.i));
        }
        Ok(JsonPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The values the path finds in an object (its top-level map), in document order.
    pub fn find_in<'a>(&self, obj: &'a Map<String, Value>) -> Vec<&'a Value> {
        let Some((first, rest)) = self.steps.split_first() else {
            return Vec::new();
        };
        let start: Vec<&Value> = match first {
            Step::Field(k) => obj.get(k).into_iter().collect(),
            Step::All => obj.values().collect(),
            _ => Vec::new(),
        };
        walk(rest, start)
    }

    /// The values the path finds in `v`.
    pub fn find<'a>(&self, v: &'a Value) -> Vec<&'a Value> {
        walk(&self.steps, vec![v])
    }
}

fn walk<'a>(steps: &[Step], mut current: Vec<&'a Value>) -> Vec<&'a Value> {
    for step in steps {
        let mut next = Vec::new();
        for v in current {
            apply(step, v, &mut next);
        }
        current = next;
    }
    current
}

fn apply<'a>(step: &Step, v: &'a Value, out: &mut Vec<&'a Value>) {
    match (step, v) {
        (Step::Field(k), Value::Object(m)) => out.extend(m.get(k)),
        (Step::Index(i), Value::Array(a)) => {
            let len = a.len() as i64;
            let at = if *i < 0 { len + i } else { *i };
            if (0..len).contains(&at) {
                out.push(&a[at as usize]);
            }
        }
        (Step::All, Value::Array(a)) => out.extend(a.iter()),
        (Step::All, Value::Object(m)) => out.extend(m.values()),
        (Step::Filter(f), Value::Array(a)) => out.extend(a.iter().filter(|e| f.matches(e))),
        _ => {}
    }
}

impl Filter {
    fn matches(&self, v: &Value) -> bool {
        let found = walk(&self.path, vec![v]);
        let Some((op, lit)) = &self.test else {
            return !found.is_empty();
        };
        found.iter().any(|x| compare(x, *op, lit))
    }
}

fn compare(v: &Value, op: Op, lit: &Literal) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (v, lit) {
        (Value::String(s), Literal::Str(l)) => Some(s.as_str().cmp(l.as_str())),
        (Value::Number(n), Literal::Num(l)) => match (n.as_f64(), l.parse::<f64>().ok()) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => None,
        },
        (Value::Bool(b), Literal::Bool(l)) => Some(b.cmp(l)),
        (Value::Null, Literal::Null) => Some(Ordering::Equal),
        _ => None,
    };
    match (op, ord) {
        (Op::Ne, None) => true,
        (_, None) => false,
        (Op::Eq, Some(o)) => o == Ordering::Equal,
        (Op::Ne, Some(o)) => o != Ordering::Equal,
        (Op::Lt, Some(o)) => o == Ordering::Less,
        (Op::Le, Some(o)) => o != Ordering::Greater,
        (Op::Gt, Some(o)) => o == Ordering::Greater,
        (Op::Ge, Some(o)) => o != Ordering::Less,
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn text(&self, from: usize) -> String {
        String::from_utf8_lossy(&self.s[from..self.i]).into_owned()
    }

    /// Steps until the end, or (inside a filter) until a comparison or `)`.
    fn steps(&mut self, in_filter: bool) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                b'.' => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'.') => return Err("recursive descent (..) is not supported".into()),
                        Some(b'*') => {
                            self.i += 1;
                            steps.push(Step::All);
                        }
                        Some(b'[') => {}
                        _ => {
                            let from = self.i;
                            while let Some(c) = self.peek() {
                                if c == b'.' || c == b'[' || (in_filter && !is_name_byte(c)) {
                                    break;
                                }
                                self.i += 1;
                            }
                            if from == self.i {
                                return Err(format!("empty field name at {from}"));
                            }
                            steps.push(Step::Field(self.text(from)));
                        }
                    }
                }
                b'[' => {
                    self.i += 1;
                    steps.push(self.bracket()?);
                }
                _ if in_filter => break,
                _ => return Err(format!("unexpected {:?} at {}", c as char, self.i)),
            }
        }
        Ok(steps)
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        self.skip_spaces();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", c as char, self.i))
        }
    }

    /// The inside of `[…]`, the `[` consumed.
    fn bracket(&mut self) -> Result<Step, String> {
        self.skip_spaces();
        let step = match self.peek() {
            Some(b'*') => {
                self.i += 1;
                Step::All
            }
            Some(q @ (b'\'' | b'"')) => Step::Field(self.quoted(q)?),
            Some(b'?') => {
                self.i += 1;
                self.expect(b'(')?;
                self.skip_spaces();
                if self.peek() != Some(b'@') {
                    return Err(format!("a filter starts with @ at {}", self.i));
                }
                self.i += 1;
                let path = self.steps(true)?;
                self.skip_spaces();
                let test = if self.peek() == Some(b')') {
                    None
                } else {
                    let op = self.op()?;
                    self.skip_spaces();
                    Some((op, self.literal()?))
                };
                self.expect(b')')?;
                Step::Filter(Filter { path, test })
            }
            _ => {
                let from = self.i;
                if self.peek() == Some(b'-') {
                    self.i += 1;
                }
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                let n = self.text(from);
                Step::Index(n.parse().map_err(|_| format!("bad index {n:?}"))?)
            }
        };
        self.expect(b']')?;
        Ok(step)
    }

    fn quoted(&mut self, q: u8) -> Result<String, String> {
        self.i += 1;
        let from = self.i;
        while let Some(c) = self.peek() {
            if c == q {
                let s = self.text(from);
                self.i += 1;
                return Ok(s);
            }
            self.i += 1;
        }
        Err("unterminated quote".into())
    }

    fn op(&mut self) -> Result<Op, String> {
        let two = self.s.get(self.i..self.i + 2).unwrap_or(b"");
        let (op, len) = match two {
            b"==" => (Op::Eq, 2),
            b"!=" => (Op::Ne, 2),
            b"<=" => (Op::Le, 2),
            b">=" => (Op::Ge, 2),
            [b'<', ..] => (Op::Lt, 1),
            [b'>', ..] => (Op::Gt, 1),
            _ => return Err(format!("expected a comparison at {}", self.i)),
        };
        self.i += len;
        Ok(op)
    }

    fn literal(&mut self) -> Result<Literal, String> {
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => Ok(Literal::Str(self.quoted(q)?)),
            _ => {
                let from = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c != b')' && c != b' ' && c != b']')
                {
                    self.i += 1;
                }
                let word = self.text(from);
                Ok(match word.as_str() {
                    "true" => Literal::Bool(true),
                    "false" => Literal::Bool(false),
                    "null" | "nil" => Literal::Null,
                    w if w.parse::<f64>().is_ok() => Literal::Num(word),
                    _ => return Err(format!("bad literal {word:?}")),
                })
            }
        }
    }
}

fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'/'
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::Duration;

    fn secs(s: i64) -> String {
        human_duration(Duration::seconds(s))
    }

    #[test]
    fn human_durations_follow_kubernetes_thresholds() {
        let (m, h, d) = (60, 3600, 86400);
        let cases: &[(i64, &str)] = &[
            (-3, "<invalid>"),
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (2 * m, "2m"),
            (2 * m + 5, "2m5s"),
            (9 * m + 59, "9m59s"),
            (10 * m + 30, "10m"),
            (179 * m + 59, "179m"),
            (3 * h, "3h"),
            (3 * h + 5 * m + 59, "3h5m"),
            (7 * h + 59 * m, "7h59m"),
            (8 * h + 30 * m, "8h"),
            (47 * h + 59 * m, "47h"),
            (2 * d, "2d"),
            (2 * d + 3 * h, "2d3h"),
            (7 * d + 23 * h, "7d23h"),
            (8 * d + 5 * h, "8d"),
            (729 * d, "729d"),
            (730 * d, "2y"),
            (730 * d + 20 * d, "2y20d"),
            (8 * 365 * d - d, "7y364d"),
            (8 * 365 * d, "8y"),
            (20 * 365 * d + 100 * d, "20y"),
        ];
        for (s, want) in cases {
            assert_eq!(secs(*s), *want, "{s} seconds");
        }
        // Sub-second parts are dropped, toward zero.
        assert_eq!(human_duration(Duration::milliseconds(-1900)), "0s");
        assert_eq!(human_duration(Duration::milliseconds(119_999)), "119s");
    }

    #[test]
    fn structures_and_numbers_print_as_go_prints_them() {
        let go = |v: Value| crate::go::json(&v);
        assert_eq!(
            go(
                json!({"b": [1, 2.5, 1.0], "a": "<x> & \"y\"\n", "c": null, "d": {"z": true, "y": 1e-7}})
            ),
            r#"{"a":"\u003cx\u003e \u0026 \"y\"\n","b":[1,2.5,1],"c":null,"d":{"y":1e-7,"z":true}}"#
        );
        assert_eq!(go(json!(1e21)), "1e+21");
        assert_eq!(go(json!(0.000001)), "0.000001");
        let text = |v: Value| match v {
            Value::Number(n) => crate::go::number(&n, false),
            _ => unreachable!(),
        };
        assert_eq!(text(json!(1.0)), "1");
        assert_eq!(text(json!(-7)), "-7");
        assert_eq!(text(json!(123.25)), "123.25");
        assert_eq!(text(json!(0.0001)), "0.0001");
        assert_eq!(text(json!(0.00001)), "1e-05");
        assert_eq!(text(json!(1.5e300)), "1.5e+300");
        assert_eq!(text(json!(1e20)), "100000000000000000000");
    }

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn paths_find_fields_indices_and_filters() {
        let o = obj(json!({
            "metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"items": [{"n": 1}, {"n": 2}, {"n": 3}]},
            "status": {"conditions": [
                {"type": "Synced", "status": "False"},
                {"type": "Ready", "status": "True", "age": 4},
            ]},
        }));
        let find = |p: &str| -> Vec<Value> {
            JsonPath::parse(p)
                .unwrap_or_else(|e| panic!("{p}: {e}"))
                .find_in(&o)
                .into_iter()
                .cloned()
                .collect()
        };
        assert_eq!(find(".metadata.name"), [json!("x")]);
        assert_eq!(find("{.metadata.name}"), [json!("x")]);
        assert_eq!(find("$.metadata.name"), [json!("x")]);
        assert_eq!(
            find(".metadata.labels['app.kubernetes.io/name']"),
            [json!("web")]
        );
        assert_eq!(find(".spec.items[1].n"), [json!(2)]);
        assert_eq!(find(".spec.items[-1].n"), [json!(3)]);
        assert_eq!(find(".spec.items[*].n"), [json!(1), json!(2), json!(3)]);
        assert_eq!(find(".spec.items[7].n"), Vec::<Value>::new());
        assert_eq!(
            find(r#".status.conditions[?(@.type=="Ready")].status"#),
            [json!("True")]
        );
        assert_eq!(
            find(".status.conditions[?(@.type != 'Ready')].status"),
            [json!("False")]
        );
        assert_eq!(
            find(".status.conditions[?(@.age >= 4)].type"),
            [json!("Ready")]
        );
        assert_eq!(find(".status.conditions[?(@.age)].type"), [json!("Ready")]);
        assert_eq!(find(".missing.deeper"), Vec::<Value>::new());
        for bad in ["", ".a..b", ".a[", ".a[x]", ".a[?(@.b ~ 1)]", "a b"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?} parses");
        }
    }

    #[test]
    fn cells_render_by_type_and_kind() {
        let now = crate::parse_time("2024-05-03T13:00:00Z").unwrap();
        let o = obj(json!({
            "metadata": {"name": "b", "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"replicas": 3, "ratio": 0.5, "on": true, "when": "2024-05-03T12:55:00Z"},
            "data": {"a": "1", "b": "2"},
            "binaryData": {"c": "AA=="},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"kind": "User", "name": "ann"},
                {"kind": "ServiceAccount", "name": "robot", "namespace": "ops"},
                {"kind": "User", "name": "bob"},
                {"kind": "Group", "name": "devs"},
            ],
        }));
        let path = |p: &str| Cell::Path(JsonPath::parse(p).unwrap());
        let col = |t: ColumnType, c: Cell| PrinterColumn::new("X", t, "", c).cell(&o, now);
        assert_eq!(col(ColumnType::Integer, path(".spec.replicas")), json!(3));
        assert_eq!(col(ColumnType::Integer, path(".spec.ratio")), json!(0));
        assert_eq!(col(ColumnType::Number, path(".spec.replicas")), json!(3.0));
        assert_eq!(col(ColumnType::Boolean, path(".spec.on")), json!(true));
        assert_eq!(
            col(ColumnType::Boolean, path(".spec.replicas")),
            Value::Null
        );
        assert_eq!(col(ColumnType::String, path(".spec.replicas")), json!("3"));
        assert_eq!(col(ColumnType::String, path(".spec.ratio")), json!("0.5"));
        assert_eq!(col(ColumnType::String, path(".spec.on")), json!("true"));
        assert_eq!(
            col(ColumnType::String, path(".roleRef")),
            json!(r#"{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"}"#)
        );
        assert_eq!(col(ColumnType::String, path(".spec.none")), Value::Null);
        assert_eq!(col(ColumnType::Date, path(".spec.when")), json!("5m"));
        assert_eq!(
            col(ColumnType::Date, path(".metadata.name")),
            json!("<invalid>")
        );
        assert_eq!(col(ColumnType::String, Cell::Age), json!("2d3h"));
        let count = Cell::Count(vec![
            JsonPath::parse(".data").unwrap(),
            JsonPath::parse(".binaryData").unwrap(),
        ]);
        assert_eq!(col(ColumnType::String, count), json!(3));
        assert_eq!(
            col(
                ColumnType::String,
                Cell::Count(vec![JsonPath::parse(".secrets").unwrap()])
            ),
            json!(0)
        );
        assert_eq!(
            col(ColumnType::String, Cell::RoleRef),
            json!("ClusterRole/view")
        );
        assert_eq!(
            col(ColumnType::String, Cell::Subjects(SubjectKind::User)),
            json!("ann, bob")
        );
        assert_eq!(
            col(
                ColumnType::String,
                Cell::Subjects(SubjectKind::ServiceAccount)
            ),
            json!("ops/robot")
        );
        let bare = obj(json!({"metadata": {"name": "n"}}));
        let age = PrinterColumn::new("Age", ColumnType::String, "", Cell::Age);
        assert_eq!(age.cell(&bare, now), json!("<unknown>"));
        let groups = PrinterColumn::new(
            "G",
            ColumnType::String,
            "",
            Cell::Subjects(SubjectKind::Group),
        );
        assert_eq!(groups.cell(&bare, now), json!(""));
        assert!(age.depends_on_time());
        assert!(!groups.depends_on_time());
    }

    /// A cell with the time left open is finished to the cell at any time: ages keep their
    /// instant, everything else (an unset or unreadable time too) is fixed.
    #[test]
    fn timed_cells_finish_to_the_cell_at_any_time() {
        let o = obj(json!({
            "metadata": {"name": "b", "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {"when": "2024-05-03T12:55:00Z", "zero": "0001-01-01T00:00:00Z", "n": 2},
        }));
        let path = |p: &str| Cell::Path(JsonPath::parse(p).unwrap());
        let columns = [
            PrinterColumn::new("Age", ColumnType::String, "", Cell::Age),
            PrinterColumn::new("W", ColumnType::Date, "", path(".spec.when")),
            PrinterColumn::new("Z", ColumnType::Date, "", path(".spec.zero")),
            PrinterColumn::new("B", ColumnType::Date, "", path(".metadata.name")),
            PrinterColumn::new("N", ColumnType::Integer, "", path(".spec.n")),
            PrinterColumn::new(
                "F",
                ColumnType::String,
                "",
                Cell::Event(EventCell::FirstSeen),
            ),
        ];
        let created = crate::parse_time("2024-05-01T10:00:00Z").unwrap();
        assert_eq!(columns[0].timed_cell(&o), TimedCell::Since(created));
        assert_eq!(
            columns[2].timed_cell(&o),
            TimedCell::Fixed(json!("<unknown>"))
        );
        assert_eq!(columns[4].timed_cell(&o), TimedCell::Fixed(json!(2)));
        for now in [
            "2024-05-01T10:00:01Z",
            "2024-05-03T13:00:00Z",
            "2025-01-01T00:00:00Z",
            "2020-01-01T00:00:00Z",
        ] {
            let now = crate::parse_time(now).unwrap();
            for c in &columns {
                assert_eq!(c.timed_cell(&o).at(now), c.cell(&o, now), "{}", c.name);
            }
        }
    }
}
