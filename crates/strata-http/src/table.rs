//! The Table representation (spec §2.6): the type's printer columns (`ResourceType::
//! printer_columns`, every priority: clients hide priority-1 columns unless asked for a wide
//! view), or the default `Name` / `Created At` columns for a type that defines none; rows with
//! the object as `includeObject` asks.

use serde_json::{json, Map, Value};
use strata_object::printer::{OffsetDateTime, PrinterColumn};
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

fn cells(obj: &Object, target: &TableTarget, now: OffsetDateTime) -> Value {
    if !target.columns.is_empty() {
        return target
            .columns
            .iter()
            .map(|c| c.cell(obj.as_map(), now))
            .collect();
    }
    let created = match obj.creation_timestamp() {
        "" => Value::Null,
        t => json!(t),
    };
    json!([obj.name(), created])
}

fn row(obj: &Object, include: IncludeObject, target: &TableTarget, now: OffsetDateTime) -> Value {
    let mut r = json!({"cells": cells(obj, target, now)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            r["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": target.api_version(),
                "metadata": obj.metadata().cloned().unwrap_or_default(),
            });
        }
        IncludeObject::Object => r["object"] = obj.clone().into_value(),
    }
    r
}

/// A Table of `objects` with list metadata `meta`.
pub fn table(
    objects: &[Object],
    meta: Map<String, Value>,
    include: IncludeObject,
    target: &TableTarget,
    with_columns: bool,
) -> Value {
    let now = OffsetDateTime::now_utc();
    json!({
        "kind": "Table",
        "apiVersion": target.api_version(),
        "metadata": meta,
        "columnDefinitions": if with_columns { columns(target) } else { Value::Null },
        "rows": objects.iter().map(|o| row(o, include, target, now)).collect::<Vec<_>>(),
    })
}
