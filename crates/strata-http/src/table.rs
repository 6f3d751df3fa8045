//! The Table representation (spec §2.6): the type's printer columns (`ResourceType::
//! printer_columns`, every priority: clients hide priority-1 columns unless asked for a wide
//! view), or the default `Name` / `Created At` columns for a type that defines none; rows with
//! the object as `includeObject` asks.

use serde_json::{json, Map, Value};
use strata_object::printer::{human_duration, OffsetDateTime, PrinterColumn, TimedCell};
use strata_object::{Object, Status};

/// Which `object` each row carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: &str) -> Result<Self, Status> {
        match s {
            "" | "Metadata" => Ok(Self::Metadata),
            "None" => Ok(Self::None),
            "Object" => Ok(Self::Object),
            other => Err(Status::bad_request(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {other:?}: must be 'Metadata', 'Object', 'None', or empty"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Metadata => "Metadata",
            Self::Object => "Object",
        }
    }
}

/// The Table group and version a client asked for, echoed in the answer, and the columns of
/// the type asked about (empty: the default columns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableTarget {
    pub group: String,
    pub version: String,
    pub columns: Vec<PrinterColumn>,
}

impl TableTarget {
    fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }

    /// Whether a row's cells change as time passes (an age column), so a rendered row must not
    /// be kept for later readers.
    pub fn depends_on_time(&self) -> bool {
        self.columns.iter().any(PrinterColumn::depends_on_time)
    }
}

fn columns(target: &TableTarget) -> Value {
    if !target.columns.is_empty() {
        return target
            .columns
            .iter()
            .map(PrinterColumn::definition)
            .collect();
    }
    json!([
        {"name": "Name", "type": "string", "format": "name", "description": "The object's name, unique within its namespace and kind.", "priority": 0},
        {"name": "Created At", "type": "date", "format": "", "description": "When the server created the object.", "priority": 0},
    ])
}

/// A row's cells, with the time left open (see [`TimedCell`]).
fn timed_cells(obj: &Object, target: &TableTarget) -> Vec<TimedCell> {
    if !target.columns.is_empty() {
        return target
            .columns
            .iter()
            .map(|c| c.timed_cell(obj.as_map()))
            .collect();
    }
    let created = match obj.creation_timestamp() {
        "" => Value::Null,
        t => json!(t),
    };
    vec![
        TimedCell::Fixed(json!(obj.name())),
        TimedCell::Fixed(created),
    ]
}

/// The `object` a row carries, as `include` asks.
fn row_object(obj: &Object, include: IncludeObject, target: &TableTarget) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": target.api_version(),
            "metadata": obj.metadata().cloned().unwrap_or_default(),
        })),
        IncludeObject::Object => Some(obj.as_value().clone()),
    }
}

fn row(obj: &Object, include: IncludeObject, target: &TableTarget, now: OffsetDateTime) -> Value {
    let cells: Vec<Value> = timed_cells(obj, target)
        .into_iter()
        .map(|c| c.at(now))
        .collect();
    let mut r = json!({"cells": cells});
    if let Some(object) = row_object(obj, include, target) {
        r["object"] = object;
    }
    r
}

/// A Table row with its ages left open, to be kept on the object version and finished for
/// each answer by [`write_row`]; the same for every reader whatever the time.
///
/// Layout: the number of open cells (u32), then for each its offset in the row's text (u32)
/// and its instant (i128 Unix nanoseconds), all big-endian; then the row's compact JSON with
/// nothing at those offsets.
pub fn row_template(obj: &Object, include: IncludeObject, target: &TableTarget) -> Vec<u8> {
    let cells = timed_cells(obj, target);
    let mut open: Vec<(u32, i128)> = Vec::new();
    let mut text = Vec::with_capacity(512);
    text.extend_from_slice(b"{\"cells\":[");
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        match cell {
            TimedCell::Fixed(v) => write_json(&mut text, v),
            TimedCell::Since(t) => open.push((text.len() as u32, t.unix_timestamp_nanos())),
        }
    }
    text.push(b']');
    if let Some(object) = row_object(obj, include, target) {
        text.extend_from_slice(b",\"object\":");
        write_json(&mut text, &object);
    }
    text.push(b'}');
    let mut out = Vec::with_capacity(4 + open.len() * 20 + text.len());
    out.extend_from_slice(&(open.len() as u32).to_be_bytes());
    for (at, nanos) in open {
        out.extend_from_slice(&at.to_be_bytes());
        out.extend_from_slice(&nanos.to_be_bytes());
    }
    out.extend_from_slice(&text);
    out
}

/// Ages as JSON strings at one time, remembered by whole seconds (all [`human_duration`]
/// reads), so rows of objects created within the same second share one. Only [`Rows`] uses
/// them.
struct Ages {
    now: OffsetDateTime,
    last: Option<(i64, Vec<u8>)>,
}

impl Ages {
    fn at(now: OffsetDateTime) -> Self {
        Ages { now, last: None }
    }

    fn write(&mut self, t: OffsetDateTime, out: &mut Vec<u8>) {
        let d = self.now - t;
        let seconds = d.whole_seconds();
        match &self.last {
            Some((s, json)) if *s == seconds => out.extend_from_slice(json),
            _ => {
                let mut json = Vec::with_capacity(8);
                write_json(&mut json, &Value::String(human_duration(d)));
                out.extend_from_slice(&json);
                self.last = Some((seconds, json));
            }
        }
    }
}

/// A Table's rows finished at one moment, a comma between two: what goes between the head
/// and the tail of [`table_parts`].
pub struct Rows {
    ages: Ages,
    first: bool,
}

impl Rows {
    pub fn at(now: OffsetDateTime) -> Self {
        Rows {
            ages: Ages::at(now),
            first: true,
        }
    }

    /// Appends the row of `template` (made by [`row_template`]) to `out`.
    pub fn write(&mut self, template: &[u8], out: &mut Vec<u8>) {
        if !self.first {
            out.push(b',');
        }
        self.first = false;
        write_row(template, &mut self.ages, out);
    }
}

/// Appends the row of `template` (made by [`row_template`]) with the ages of `ages` to `out`.
fn write_row(template: &[u8], ages: &mut Ages, out: &mut Vec<u8>) {
    let word = |at: usize| u32::from_be_bytes(template[at..at + 4].try_into().unwrap_or_default());
    let open = word(0) as usize;
    let text = &template[4 + open * 20..];
    let mut copied = 0;
    for i in 0..open {
        let entry = 4 + i * 20;
        let at = word(entry) as usize;
        let nanos = i128::from_be_bytes(
            template[entry + 4..entry + 20]
                .try_into()
                .unwrap_or_default(),
        );
        out.extend_from_slice(&text[copied..at]);
        match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(t) => ages.write(t, out),
            // Never written: the instant came from an `OffsetDateTime`.
            Err(_) => out.extend_from_slice(b"\"\""),
        }
        copied = at;
    }
    out.extend_from_slice(&text[copied..]);
}

/// `v` as compact JSON (writing into memory cannot fail).
fn write_json(out: &mut Vec<u8>, v: &Value) {
    let _ = serde_json::to_writer(out, v);
}

/// What a Table of rows kept as [`row_template`]s has before the rows and after them, with
/// list metadata `meta` and the column definitions. Between the two, the rows finished by
/// [`write_row`] with the ages of one moment, a comma between two, make the bytes
/// `strata_codec::json::encode` writes for [`table`] of the same objects at that moment
/// (compact, with its trailing newline).
pub fn table_parts(
    meta: Map<String, Value>,
    include: IncludeObject,
    target: &TableTarget,
) -> (Vec<u8>, Vec<u8>) {
    // The Table without rows ends with its last member, `"rows":[]}`: the rows go before
    // the closing `]}`. The time only matters to rows.
    let empty = table_at(&[], meta, include, target, true, OffsetDateTime::UNIX_EPOCH);
    let mut head = strata_codec::json::compact(&empty);
    debug_assert!(head.ends_with(b"[]}"));
    head.truncate(head.len().saturating_sub(2));
    (head, b"]}\n".to_vec())
}

/// A name for the row templates of `target` and `include` among an object version's kept
/// encodings: a hash of the Table's group and version, `include` and the columns (a custom
/// resource's columns change with its CRD), short because every row of a list looks it up.
pub fn template_name(include: IncludeObject, target: &TableTarget) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&target.group, &target.version, include.as_str()).hash(&mut h);
    format!("{:?}", target.columns).hash(&mut h);
    format!("row;{:016x}", h.finish())
}

/// A Table of `objects` with list metadata `meta`.
pub fn table(
    objects: &[Object],
    meta: Map<String, Value>,
    include: IncludeObject,
    target: &TableTarget,
    with_columns: bool,
) -> Value {
    table_at(
        objects,
        meta,
        include,
        target,
        with_columns,
        OffsetDateTime::now_utc(),
    )
}

fn table_at(
    objects: &[Object],
    meta: Map<String, Value>,
    include: IncludeObject,
    target: &TableTarget,
    with_columns: bool,
    now: OffsetDateTime,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": target.api_version(),
        "metadata": meta,
        "columnDefinitions": if with_columns { columns(target) } else { Value::Null },
        "rows": objects.iter().map(|o| row(o, include, target, now)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_object::builtin;

    fn objects() -> Vec<Object> {
        let v = [
            json!({"kind": "ServiceAccount", "apiVersion": "v1",
                "metadata": {"name": "a", "namespace": "default", "resourceVersion": "7",
                    "creationTimestamp": "2024-05-01T10:00:00Z", "labels": {"x": "y"}},
                "secrets": [{"name": "s1"}, {"name": "s2"}]}),
            json!({"kind": "ServiceAccount", "apiVersion": "v1",
                "metadata": {"name": "no-time \"quoted\" \u{e9}", "namespace": "default"}}),
            json!({"kind": "ServiceAccount", "apiVersion": "v1",
                "metadata": {"name": "zero", "creationTimestamp": "0001-01-01T00:00:00Z"},
                "spec": {"when": "2024-05-03T12:55:00Z", "bad": "later"}}),
            // The first one's time again (an age remembered), then a second later.
            json!({"kind": "ServiceAccount", "apiVersion": "v1",
                "metadata": {"name": "same", "creationTimestamp": "2024-05-01T10:00:00Z"}}),
            json!({"kind": "ServiceAccount", "apiVersion": "v1",
                "metadata": {"name": "next", "creationTimestamp": "2024-05-01T10:00:01Z"}}),
        ];
        v.into_iter()
            .map(|v| Object::from_value(v).unwrap())
            .collect()
    }

    fn targets() -> Vec<TableTarget> {
        let target = |columns| TableTarget {
            group: "meta.k8s.io".into(),
            version: "v1".into(),
            columns,
        };
        let mut dates = builtin::service_account().printer_columns;
        for path in [".spec.when", ".spec.bad", ".spec.none"] {
            dates.push(PrinterColumn::new(
                path,
                strata_object::printer::ColumnType::Date,
                "",
                strata_object::printer::Cell::Path(
                    strata_object::printer::JsonPath::parse(path).unwrap(),
                ),
            ));
        }
        vec![
            target(builtin::service_account().printer_columns),
            target(Vec::new()),
            target(dates),
            target(builtin::event().printer_columns),
        ]
    }

    /// A Table assembled from kept row templates is, at any time, byte for byte the Table
    /// rendered directly at that time.
    /// A Table from kept row templates, as a list answer writes it.
    fn table_of_templates_at(
        templates: &[Vec<u8>],
        meta: Map<String, Value>,
        include: IncludeObject,
        target: &TableTarget,
        now: OffsetDateTime,
    ) -> Vec<u8> {
        let (mut out, tail) = table_parts(meta, include, target);
        let mut rows = Rows::at(now);
        for template in templates {
            rows.write(template, &mut out);
        }
        out.extend_from_slice(&tail);
        out
    }

    #[test]
    fn tables_of_templates_equal_direct_tables() {
        let objects = objects();
        for target in targets() {
            for include in [
                IncludeObject::None,
                IncludeObject::Metadata,
                IncludeObject::Object,
            ] {
                let templates: Vec<Vec<u8>> = objects
                    .iter()
                    .map(|o| row_template(o, include, &target))
                    .collect();
                for now in [
                    "2024-05-01T10:00:00Z",
                    "2024-05-03T13:00:00Z",
                    "2031-01-01T00:00:00Z",
                ] {
                    let now = strata_object::parse_time(now).unwrap();
                    for n in 0..=objects.len() {
                        let mut meta = Map::new();
                        meta.insert("resourceVersion".into(), json!("9"));
                        let direct = strata_codec::json::encode(
                            &table_at(&objects[..n], meta.clone(), include, &target, true, now),
                            false,
                        );
                        let assembled =
                            table_of_templates_at(&templates[..n], meta, include, &target, now);
                        assert_eq!(
                            String::from_utf8(assembled).unwrap(),
                            String::from_utf8(direct).unwrap()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn template_names_tell_targets_apart() {
        let targets = targets();
        let names: Vec<String> = targets
            .iter()
            .map(|t| template_name(IncludeObject::Metadata, t))
            .collect();
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_ne!(
            template_name(IncludeObject::None, &targets[0]),
            template_name(IncludeObject::Metadata, &targets[0])
        );
        let mut beta = targets[0].clone();
        beta.version = "v1beta1".into();
        assert_ne!(
            template_name(IncludeObject::Metadata, &beta),
            template_name(IncludeObject::Metadata, &targets[0])
        );
        assert_eq!(
            template_name(IncludeObject::Metadata, &targets[0].clone()),
            template_name(IncludeObject::Metadata, &targets[0])
        );
    }
}
