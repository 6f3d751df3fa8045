//! `metadata.managedFields`: the parsed list of managers and the fields each owns, its JSON form,
//! and the bookkeeping of writes that are not server-side apply (create, update, JSON/merge/
//! strategic patch), which take ownership of whatever they change and never conflict.
//! Server-side apply itself lives in `apply`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use strata_object::parse_time;
use strata_object::schema::Node;

use crate::fieldpath::{self, FieldSet, PathElement};
use crate::PatchError;
use strata_object::go::is_printable;

/// How many Update entries an object keeps; past this the oldest are merged into
/// [`ANCIENT_CHANGES`].
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager that absorbs the oldest Update entries once there are too many.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// The longest manager name Kubernetes accepts (in bytes).
pub const MAX_MANAGER_LENGTH: usize = 128;

/// The kind of write that gave a manager its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply: the manager's set is exactly its last applied configuration.
    Apply,
    /// Create, update or a non-apply patch: the manager owns what it changed.
    Update,
}

impl Operation {
    /// The name `metadata.managedFields` uses: `Apply` or `Update`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedFieldsEntry {
    /// The manager's name (`kubectl`, a controller's name, `before-first-apply`).
    pub manager: String,
    /// How the manager wrote.
    pub operation: Operation,
    /// The API version the fields are expressed in (`v1`).
    pub api_version: String,
    /// When the manager last changed something (RFC 3339, whole seconds).
    pub time: Option<String>,
    /// Always `FieldsV1`.
    pub fields_type: String,
    /// The fields the manager owns.
    pub fields: FieldSet,
    /// The subresource the writes went through (`status`), if any.
    pub subresource: Option<String>,
}

impl ManagedFieldsEntry {
    /// An entry with no fields and no time.
    pub fn new(
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: Option<&str>,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: manager.to_string(),
            operation,
            api_version: api_version.to_string(),
            time: None,
            fields_type: "FieldsV1".into(),
            fields: FieldSet::new(),
            subresource: subresource.filter(|s| !s.is_empty()).map(String::from),
        }
    }

    /// The entry of the same manager, operation, time and sub-resource owning `fields`,
    /// recorded at `api_version`, without copying this entry's own fields.
    fn owning(&self, api_version: &str, fields: FieldSet) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: api_version.to_string(),
            time: self.time.clone(),
            fields_type: self.fields_type.clone(),
            fields,
            subresource: self.subresource.clone(),
        }
    }

    /// Whether both entries belong to the same manager as Kubernetes identifies managers: by
    /// name, operation and subresource, and for Update entries also by API version (an applier
    /// keeps one entry whatever version it applies with).
    pub fn same_manager(&self, other: &ManagedFieldsEntry) -> bool {
        // Field by field, what comparing the two identifiers would decide.
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation != Operation::Update || self.api_version == other.api_version)
    }

    /// Kubernetes' manager identifier: the entry's JSON with only `manager`, `operation`,
    /// `apiVersion` (Update only) and `subresource`. Conflict messages sort managers by it.
    pub(crate) fn identifier(&self) -> String {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), self.manager.clone().into());
        }
        m.insert("operation".into(), self.operation.as_str().into());
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            m.insert("apiVersion".into(), self.api_version.clone().into());
        }
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), s.clone().into());
        }
        Value::Object(m).to_string()
    }

    /// The manager as conflict messages name it: `"kubectl"`, `"ctl" with subresource
    /// "status"`, `"kube-controller-manager" using v1` (Update entries add the version).
    pub fn describe(&self) -> String {
        let mut s = strata_object::go::quote(&self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(" with subresource ");
            s.push_str(&strata_object::go::quote(sub));
        }
        if self.operation == Operation::Update {
            s.push_str(" using ");
            s.push_str(&self.api_version);
        }
        s
    }

    /// The entry's time in whole seconds since the epoch; 0 without a (valid) time.
    fn seconds(&self) -> i64 {
        self.time
            .as_deref()
            .and_then(parse_time)
            .map_or(0, |t| t.unix_timestamp())
    }

    /// The JSON form, fields in Kubernetes' order: `manager`, `operation`, `apiVersion`,
    /// `time`, `fieldsType`, `fieldsV1`, `subresource` (empty ones left out).
    pub fn to_value(&self) -> Value {
        self.to_value_with(self.fields.to_fields_v1())
    }

    /// [`ManagedFieldsEntry::to_value`] with `fields_v1` written in place of the entry's own
    /// fields.
    fn to_value_with(&self, fields_v1: Value) -> Value {
        let mut m = Map::with_capacity(7);
        if !self.manager.is_empty() {
            m.insert("manager".into(), self.manager.clone().into());
        }
        m.insert("operation".into(), self.operation.as_str().into());
        if !self.api_version.is_empty() {
            m.insert("apiVersion".into(), self.api_version.clone().into());
        }
        if let Some(t) = &self.time {
            m.insert("time".into(), t.clone().into());
        }
        m.insert("fieldsType".into(), self.fields_type.clone().into());
        m.insert("fieldsV1".into(), fields_v1);
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), s.clone().into());
        }
        Value::Object(m)
    }

    fn parse(value: &Value) -> Result<ManagedFieldsEntry, String> {
        let (mut entry, fields_v1) = ManagedFieldsEntry::parse_header(value)?;
        entry.fields = read_fields(fields_v1)?;
        Ok(entry)
    }

    /// Everything of an entry but its fields (left empty), and its `fieldsV1` member.
    fn parse_header(value: &Value) -> Result<(ManagedFieldsEntry, Option<&Value>), String> {
        let Value::Object(obj) = value else {
            return Err("must be an object".into());
        };
        // One walk over the members: an object with many managers has many entries, and a
        // hashed lookup per field of each showed in profiles.
        let (mut manager, mut operation, mut api_version, mut time) = (None, None, None, None);
        let (mut fields_type, mut fields_v1, mut subresource) = (None, None, None);
        for (name, v) in obj {
            let slot = match name.as_str() {
                "manager" => &mut manager,
                "operation" => &mut operation,
                "apiVersion" => &mut api_version,
                "time" => &mut time,
                "fieldsType" => &mut fields_type,
                "fieldsV1" => &mut fields_v1,
                "subresource" => &mut subresource,
                _ => continue,
            };
            *slot = Some(v);
        }
        let text = |name: &str, v: Option<&'_ Value>| -> Result<Option<String>, String> {
            match v {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("{name} must be a string")),
            }
        };
        let operation = match text("operation", operation)?.as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return Err("operation must be `Apply` or `Update`".into()),
        };
        let api_version = text("apiVersion", api_version)?
            .filter(|v| !v.is_empty())
            .ok_or("apiVersion must not be empty")?;
        match text("fieldsType", fields_type)?.as_deref() {
            Some("FieldsV1") => {}
            None | Some("") => return Err("fieldsType is missing".into()),
            Some(other) => return Err(format!("invalid fieldsType {other:?}")),
        }
        let time = text("time", time)?;
        if let Some(t) = &time {
            if parse_time(t).is_none() {
                return Err(format!("time {t:?} is not an RFC 3339 timestamp"));
            }
        }
        let entry = ManagedFieldsEntry {
            manager: text("manager", manager)?.unwrap_or_default(),
            operation,
            api_version,
            time,
            fields_type: "FieldsV1".into(),
            fields: FieldSet::new(),
            subresource: text("subresource", subresource)?.filter(|s| !s.is_empty()),
        };
        Ok((entry, fields_v1))
    }

    /// The key Kubernetes orders entries by (see [`ManagedFields::sorted_entries`]).
    fn order(&self) -> (Operation, i64, &str, &str, Option<&str>) {
        (
            self.operation,
            self.seconds(),
            self.manager.as_str(),
            self.api_version.as_str(),
            self.subresource.as_deref(),
        )
    }
}

/// The fields of an entry's `fieldsV1` member (absent is none).
fn read_fields(fields_v1: Option<&Value>) -> Result<FieldSet, String> {
    match fields_v1 {
        Some(v) => FieldSet::from_fields_v1(v).map_err(|e| format!("fieldsV1: {e}")),
        None => Ok(FieldSet::new()),
    }
}

/// The parsed `metadata.managedFields` of an object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManagedFields {
    /// The entries, one per manager, in the order they were read or added.
    pub entries: Vec<ManagedFieldsEntry>,
}

impl ManagedFields {
    /// Parses a `managedFields` list (`null` is an empty list). A later entry of the same
    /// manager replaces an earlier one, as in Kubernetes. Malformed input is a
    /// [`PatchError::Malformed`] (400) naming the entry.
    pub fn parse(list: &Value) -> Result<ManagedFields, PatchError> {
        let items = match list {
            Value::Null => return Ok(ManagedFields::default()),
            Value::Array(items) => items,
            _ => {
                return Err(PatchError::Malformed(
                    "metadata.managedFields must be a list".into(),
                ))
            }
        };
        let mut out = ManagedFields::default();
        for (i, item) in items.iter().enumerate() {
            let entry = ManagedFieldsEntry::parse(item)
                .map_err(|e| PatchError::Malformed(format!("metadata.managedFields[{i}]: {e}")))?;
            out.upsert(entry);
        }
        Ok(out)
    }

    /// Parses `metadata.managedFields` of `obj` (absent is empty).
    pub fn of_object(obj: &Value) -> Result<ManagedFields, PatchError> {
        match obj.pointer("/metadata/managedFields") {
            Some(list) => ManagedFields::parse(list),
            None => Ok(ManagedFields::default()),
        }
    }

    /// Whether no entry owns anything.
    pub fn is_empty(&self) -> bool {
        self.entries.iter().all(|e| e.fields.is_empty())
    }

    /// The entry of the manager `probe` identifies (see [`ManagedFieldsEntry::same_manager`]).
    pub fn find(&self, probe: &ManagedFieldsEntry) -> Option<&ManagedFieldsEntry> {
        self.entries.iter().find(|e| e.same_manager(probe))
    }

    fn find_mut(&mut self, probe: &ManagedFieldsEntry) -> Option<&mut ManagedFieldsEntry> {
        self.entries.iter_mut().find(|e| e.same_manager(probe))
    }

    /// Adds `entry`, replacing the entry of the same manager.
    pub fn upsert(&mut self, entry: ManagedFieldsEntry) {
        match self.find_mut(&entry) {
            Some(existing) => *existing = entry,
            None => self.entries.push(entry),
        }
    }

    /// The entries Kubernetes would write, in its order: entries with fields only, Apply before
    /// Update, then by time (whole seconds), manager, API version and subresource.
    pub fn sorted_entries(&self) -> Vec<&ManagedFieldsEntry> {
        let mut entries: Vec<_> = self
            .entries
            .iter()
            .filter(|e| !e.fields.is_empty())
            .collect();
        // Each time is parsed once, not at every comparison.
        entries.sort_by_cached_key(|e| e.order());
        entries
    }

    /// The JSON list (see [`ManagedFields::sorted_entries`]).
    pub fn to_value(&self) -> Value {
        Value::Array(
            self.sorted_entries()
                .into_iter()
                .map(ManagedFieldsEntry::to_value)
                .collect(),
        )
    }

    /// Stores the list in `obj`'s `metadata.managedFields`, or removes the member when no entry
    /// owns anything (Kubernetes then omits it).
    pub fn write_to(&self, obj: &mut Value) {
        let entries = if self.is_empty() {
            Vec::new()
        } else {
            self.sorted_entries()
                .into_iter()
                .map(ManagedFieldsEntry::to_value)
                .collect()
        };
        write_entries(obj, entries);
    }

    /// The managed fields of an object as its `scale` sub-resource shows them, where the
    /// object's `replicas` path is the Scale's `spec.replicas`: each entry that owns `replicas`
    /// owns `spec.replicas` there, recorded at `scale_version` (`autoscaling/v1`). Entries that
    /// do not own it own nothing in a Scale and are left out.
    pub fn to_scale(&self, replicas: &[PathElement], scale_version: &str) -> ManagedFields {
        let entries = self
            .entries
            .iter()
            .filter(|e| e.fields.contains(replicas))
            .map(|e| e.owning(scale_version, scale_replicas()))
            .collect();
        ManagedFields { entries }
    }

    /// The object's managed fields after a write of its Scale, `scale` being the Scale's
    /// managed fields after it (see [`ManagedFields::to_scale`]): the managers that own the
    /// Scale's `spec.replicas` own `replicas` (a manager new to the object with an entry at
    /// `version`), the others lose it, and the rest of every entry is as it was. A manager is
    /// matched by name, operation and sub-resource: its entries in the two lists differ in
    /// version only.
    pub fn from_scale(
        &self,
        scale: &ManagedFields,
        replicas: &[PathElement],
        version: &str,
    ) -> ManagedFields {
        let spec_replicas = spec_replicas();
        let mut owners: Vec<&ManagedFieldsEntry> = scale
            .entries
            .iter()
            .filter(|e| e.fields.contains(&spec_replicas))
            .collect();
        let mut replicas_set = FieldSet::new();
        replicas_set.insert(replicas);
        let same_writer = |a: &ManagedFieldsEntry, b: &ManagedFieldsEntry| {
            a.manager == b.manager && a.operation == b.operation && a.subresource == b.subresource
        };
        let mut out = ManagedFields::default();
        for entry in &self.entries {
            let mut entry = entry.clone();
            if entry.fields.contains(replicas) {
                match owners.iter().position(|s| same_writer(s, &entry)) {
                    // Still an owner: its time is the Scale entry's, which an apply renews.
                    Some(i) => entry.time = owners.remove(i).time.clone(),
                    None => entry.fields.subtract(&replicas_set),
                }
            }
            if !entry.fields.is_empty() {
                out.entries.push(entry);
            }
        }
        for owner in owners {
            let entry = owner.owning(version, replicas_set.clone());
            // The same writer may hold an entry without the path: one written when the CRD
            // named another replicas path.
            match out.entries.iter_mut().find(|e| same_writer(e, &entry)) {
                Some(existing) => {
                    existing.fields.extend(&replicas_set);
                    existing.time = entry.time;
                }
                None => out.entries.push(entry),
            }
        }
        out
    }

    /// Merges the oldest Update entries into [`ANCIENT_CHANGES`] entries (one per API version)
    /// until at most [`MAX_UPDATE_MANAGERS`] Update entries are left, as Kubernetes does:
    /// oldest first (then by identifier); the first entry of a version is kept until a second
    /// one of that version comes, which then folds both into the bucket (taking the time of the
    /// entry merged last). Apply entries are never merged.
    fn cap_update_managers(&mut self) {
        let mut updaters: Vec<(i64, String)> = self
            .entries
            .iter()
            .filter(|e| e.operation == Operation::Update)
            .map(|e| (e.seconds(), e.identifier()))
            .collect();
        let mut count = updaters.len();
        if count <= MAX_UPDATE_MANAGERS {
            return;
        }
        updaters.sort();
        let mut first_of_version: BTreeMap<String, String> = BTreeMap::new();
        for (_, id) in updaters {
            if count <= MAX_UPDATE_MANAGERS {
                break;
            }
            let Some(pos) = self.entries.iter().position(|e| e.identifier() == id) else {
                continue;
            };
            let version = self.entries[pos].api_version.clone();
            let bucket =
                ManagedFieldsEntry::new(ANCIENT_CHANGES, Operation::Update, &version, None);
            let Some(first) = first_of_version.get(&version) else {
                first_of_version.insert(version, id);
                continue;
            };
            if id == bucket.identifier() {
                // The bucket itself: merging it into itself would drop it.
                continue;
            }
            if self.find(&bucket).is_none() {
                if let Some(first) = self.entries.iter_mut().find(|e| e.identifier() == *first) {
                    first.manager = ANCIENT_CHANGES.into();
                    first.subresource = None;
                }
            }
            let merged = self.entries.remove(
                self.entries
                    .iter()
                    .position(|e| e.identifier() == id)
                    .unwrap_or(pos),
            );
            if let Some(b) = self.find_mut(&bucket) {
                b.fields = b.fields.union(&merged.fields);
                b.time = merged.time;
            }
            count -= 1;
        }
    }
}

/// An object's stored `managedFields` as an apply reads them: every entry's manager, operation,
/// version, time and sub-resource at once, its fields only when asked. On an object many
/// managers write, an apply checks most entries only against the few fields it changes and
/// writes them back as they were stored.
pub(crate) struct StoredManagers<'v> {
    pub(crate) entries: Vec<StoredEntry<'v>>,
}

/// One entry of [`StoredManagers`].
pub(crate) struct StoredEntry<'v> {
    /// The entry; its `fields` hold something only once read (see [`StoredEntry::fields`]).
    pub(crate) entry: ManagedFieldsEntry,
    /// The entry as stored, while it is unchanged; `None` for a new or changed entry.
    stored: Option<&'v Value>,
    fields_v1: Option<&'v Value>,
    read: bool,
}

impl<'v> StoredManagers<'v> {
    /// Reads the entries of `obj`'s `metadata.managedFields` (absent is none); a later entry of
    /// the same manager replaces an earlier one, as [`ManagedFields::parse`] does.
    pub(crate) fn of_object(obj: &'v Value) -> Result<StoredManagers<'v>, String> {
        let items = match obj.pointer("/metadata/managedFields") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(items)) => items.as_slice(),
            Some(_) => return Err("metadata.managedFields must be a list".into()),
        };
        let mut out = StoredManagers {
            entries: Vec::with_capacity(items.len()),
        };
        for item in items {
            let (entry, fields_v1) = ManagedFieldsEntry::parse_header(item)?;
            out.put(StoredEntry {
                entry,
                stored: Some(item),
                fields_v1,
                read: false,
            });
        }
        Ok(out)
    }

    /// The entry of the manager `probe` identifies.
    pub(crate) fn find_mut(&mut self, probe: &ManagedFieldsEntry) -> Option<&mut StoredEntry<'v>> {
        self.entries
            .iter_mut()
            .find(|e| e.entry.same_manager(probe))
    }

    /// Adds `entry` (whose fields are complete) in place of the same manager's.
    pub(crate) fn upsert(&mut self, entry: ManagedFieldsEntry) {
        self.put(StoredEntry {
            entry,
            stored: None,
            fields_v1: None,
            read: true,
        });
    }

    fn put(&mut self, new: StoredEntry<'v>) {
        match self.find_mut(&new.entry) {
            Some(existing) => *existing = new,
            None => self.entries.push(new),
        }
    }

    /// Stores the entries that own something in `obj`'s `metadata.managedFields`, in
    /// Kubernetes' order (see [`ManagedFields::sorted_entries`]), or removes the member when
    /// none does. Unchanged entries are written as they were stored.
    pub(crate) fn write_to(&self, obj: &mut Value) {
        let mut entries: Vec<&StoredEntry> =
            self.entries.iter().filter(|e| !e.is_empty()).collect();
        entries.sort_by_cached_key(|e| e.entry.order());
        let values = entries
            .into_iter()
            .map(|e| match e.stored {
                Some(stored) => stored.clone(),
                None => e.entry.to_value(),
            })
            .collect();
        write_entries(obj, values);
    }
}

impl StoredEntry<'_> {
    /// The entry's fields, read from the stored entry the first time. Unreadable fields count
    /// as none: stored managedFields are always written by this crate.
    pub(crate) fn fields(&mut self) -> &FieldSet {
        if !self.read {
            self.entry.fields = read_fields(self.fields_v1).unwrap_or_default();
            self.read = true;
        }
        &self.entry.fields
    }

    /// [`StoredEntry::fields`] to change: the entry is then written anew.
    pub(crate) fn fields_mut(&mut self) -> &mut FieldSet {
        self.fields();
        self.stored = None;
        &mut self.entry.fields
    }

    /// The fields of `set` the entry owns, without reading all of its fields when the stored
    /// entry answers along `set`'s paths.
    pub(crate) fn intersection(&mut self, set: &FieldSet) -> FieldSet {
        if !self.read {
            match self.fields_v1 {
                None | Some(Value::Null) => return FieldSet::new(),
                Some(Value::Object(map)) => {
                    if let Some(both) = fieldpath::fields_v1_intersection(map, set) {
                        return both;
                    }
                }
                Some(_) => {}
            }
        }
        self.fields().intersection(set)
    }

    fn is_empty(&self) -> bool {
        if self.read {
            self.entry.fields.is_empty()
        } else {
            fieldpath::fields_v1_is_empty(self.fields_v1)
        }
    }
}

/// Whether a client sent `managedFields` to clear them: an empty list, or a list of one empty
/// entry.
fn is_reset(sent: Option<&Value>) -> bool {
    match sent {
        Some(Value::Array(items)) => match items.as_slice() {
            [] => true,
            [Value::Object(only)] => only.values().all(|v| v.is_null() || v.as_str() == Some("")),
            _ => false,
        },
        _ => false,
    }
}

/// Stores `entries` (already in order) as `obj`'s `metadata.managedFields`, or removes the
/// member when there are none (Kubernetes then omits it).
fn write_entries(obj: &mut Value, entries: Vec<Value>) {
    let Value::Object(root) = obj else {
        return;
    };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = root.get_mut("metadata") {
            meta.shift_remove("managedFields");
        }
        return;
    }
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

/// Records a create, update or non-apply patch in `new`'s `metadata.managedFields`.
///
/// `old` is the stored object (`None` on create), `new` the object about to be stored.
/// The managers start from `new`'s managedFields when the client sent a valid non-empty list
/// (so clients may edit them), from an empty list when it sent `[]` or `[{}]` (clearing them),
/// and otherwise from `old`'s; through a `subresource` they always start from `old`'s. Then
/// `manager` (operation Update, `api_version`, `subresource`) takes every field that was added
/// or changed from whoever owned it, fields that no longer exist leave every manager, and
/// entries left empty disappear. The manager's time becomes `now` only when it took some field;
/// otherwise its entry and time stay as they were. Fields the write cannot change (`status` on
/// the main resource, `spec` through `status`) and the system fields are never recorded. At
/// most [`MAX_UPDATE_MANAGERS`] Update entries are kept (see [`ANCIENT_CHANGES`]).
///
/// Never fails: managedFields that do not parse count as absent.
///
/// A controller's update of a label, after kubectl created the object:
///
/// ```
/// use strata_patch::serde_json::json;
/// use strata_patch::strata_object::builtin;
/// use strata_patch::{record_update, ManagedFields, Operation};
///
/// let sa = builtin::service_account();
/// let schema = sa.schema().unwrap();
/// let mut created = json!({
///     "apiVersion": "v1", "kind": "ServiceAccount",
///     "metadata": {"name": "builder", "labels": {"app": "ci"}},
/// });
/// record_update(None, &mut created, schema, "kubectl", "v1", None, "2026-01-01T00:00:00Z");
///
/// let mut updated = created.clone();
/// updated["metadata"]["labels"]["app"] = json!("cd");
/// record_update(Some(&created), &mut updated, schema, "ctrl", "v1", None, "2026-01-01T00:05:00Z");
///
/// // The controller took the label it changed; kubectl keeps the labels map it created.
/// let managed = ManagedFields::of_object(&updated).unwrap();
/// let owners: Vec<_> = managed
///     .entries
///     .iter()
///     .map(|e| (e.manager.as_str(), e.operation, e.fields.to_fields_v1()))
///     .collect();
/// assert_eq!(
///     owners,
///     [
///         ("kubectl", Operation::Update, json!({"f:metadata": {"f:labels": {}}})),
///         ("ctrl", Operation::Update, json!({"f:metadata": {"f:labels": {"f:app": {}}}})),
///     ]
/// );
/// ```
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    schema: Node,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let stored = || {
        old.map_or_else(ManagedFields::default, |o| {
            ManagedFields::of_object(o).unwrap_or_default()
        })
    };
    let sent = new.pointer("/metadata/managedFields");
    let mut managed = if subresource.is_some() {
        stored()
    } else if is_reset(sent) {
        ManagedFields::default()
    } else {
        match sent.map(ManagedFields::parse) {
            Some(Ok(m)) if !m.entries.is_empty() => m,
            _ => stored(),
        }
    };

    // A create with no other manager recorded: the manager takes everything the object sets,
    // written straight as FieldsV1.
    if old.is_none() && subresource.is_none() && managed.entries.is_empty() {
        if let Some(fields) = fieldpath::created_fields_v1(new, schema) {
            let entry = (!fields.is_empty()).then(|| {
                let mut entry =
                    ManagedFieldsEntry::new(manager, Operation::Update, api_version, None);
                entry.time = Some(now.to_string());
                entry.to_value_with(Value::Object(fields))
            });
            write_entries(new, entry.into_iter().collect());
            return;
        }
    }
    // A create changes nothing that was there: what it sets is all added, found in one walk.
    let created = match (old, subresource) {
        (None, None) => fieldpath::added_by_create(new, schema),
        _ => None,
    };
    let (changed, removed) = match created {
        Some(added) => (added, FieldSet::new()),
        None => {
            let empty = Value::Object(Map::new());
            let ignored = fieldpath::reset_fields(schema, subresource);
            let cmp = fieldpath::compare(old.unwrap_or(&empty), new, schema).excluding(&ignored);
            (cmp.modified.union(&cmp.added), cmp.removed)
        }
    };
    for e in &mut managed.entries {
        e.fields.subtract(&changed);
        e.fields.subtract(&removed);
    }
    let mut taken = changed;
    taken.subtract(&removed);
    taken.subtract(fieldpath::system_fields());
    if !taken.is_empty() {
        let mut entry =
            ManagedFieldsEntry::new(manager, Operation::Update, api_version, subresource);
        match managed.find_mut(&entry) {
            Some(existing) => {
                existing.fields = existing.fields.union(&taken);
                existing.time = Some(now.to_string());
            }
            None => {
                entry.fields = taken;
                entry.time = Some(now.to_string());
                managed.entries.push(entry);
            }
        }
    }
    managed.entries.retain(|e| !e.fields.is_empty());
    managed.cap_update_managers();
    managed.write_to(new);
}

/// The manager of a non-apply request that names none: the User-Agent up to its first `/`,
/// without non-printable characters, cut to [`MAX_MANAGER_LENGTH`] bytes on a character
/// boundary (`kubectl/v1.31.0 (linux/amd64)` gives `kubectl`).
pub fn default_manager(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| is_printable(*c)) {
        if out.len() + c.len_utf8() > MAX_MANAGER_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// The path of a Scale's `spec.replicas`.
fn spec_replicas() -> [PathElement; 2] {
    [
        PathElement::Field("spec".into()),
        PathElement::Field("replicas".into()),
    ]
}

/// The set of a Scale's `spec.replicas` alone.
fn scale_replicas() -> FieldSet {
    let mut set = FieldSet::new();
    set.insert(&spec_replicas());
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_object::builtin;

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T00:01:00Z";

    /// An entry of `manager` owning the fields of `fields_v1`.
    fn owner(
        manager: &str,
        op: Operation,
        version: &str,
        sub: Option<&str>,
        fields_v1: Value,
    ) -> ManagedFieldsEntry {
        let mut e = ManagedFieldsEntry::new(manager, op, version, sub);
        e.time = Some(T0.into());
        e.fields = FieldSet::from_fields_v1(&fields_v1).unwrap();
        e
    }

    fn replicas_path() -> Vec<PathElement> {
        ["spec", "count"]
            .iter()
            .map(|f| PathElement::Field(f.to_string()))
            .collect()
    }

    /// An applier owning the replicas path and more, an updater owning something else, and
    /// an updater through `/scale`.
    fn three_managers() -> ManagedFields {
        let owns = |manager, op, sub, fields_v1| owner(manager, op, "g/v1", sub, fields_v1);
        ManagedFields {
            entries: vec![
                owns(
                    "ctl",
                    Operation::Apply,
                    None,
                    json!({"f:spec": {"f:count": {}, "f:image": {}}}),
                ),
                owns(
                    "other",
                    Operation::Update,
                    None,
                    json!({"f:spec": {"f:image": {}}}),
                ),
                owns(
                    "hpa",
                    Operation::Update,
                    Some("scale"),
                    json!({"f:spec": {"f:count": {}}}),
                ),
            ],
        }
    }

    #[test]
    fn a_scale_shows_the_owners_of_the_replicas_path_only() {
        let scale = three_managers().to_scale(&replicas_path(), "autoscaling/v1");
        let described: Vec<_> = scale
            .entries
            .iter()
            .map(|e| (e.describe(), e.fields.to_fields_v1()))
            .collect();
        assert_eq!(
            described,
            vec![
                ("\"ctl\"".to_string(), json!({"f:spec": {"f:replicas": {}}})),
                (
                    "\"hpa\" with subresource \"scale\" using autoscaling/v1".to_string(),
                    json!({"f:spec": {"f:replicas": {}}})
                ),
            ]
        );
    }

    #[test]
    fn after_a_scale_write_its_owners_own_the_replicas_path() {
        let parent = three_managers();
        // A forced apply to the Scale took `spec.replicas` from both owners.
        let mut applier = owner(
            "scaler",
            Operation::Apply,
            "autoscaling/v1",
            Some("scale"),
            json!({"f:spec": {"f:replicas": {}}}),
        );
        applier.time = Some(T1.into());
        let scale = ManagedFields {
            entries: vec![applier],
        };
        let after = parent.from_scale(&scale, &replicas_path(), "g/v1");
        let listed: Vec<_> = after
            .entries
            .iter()
            .map(|e| {
                (
                    e.manager.as_str(),
                    e.api_version.as_str(),
                    e.time.as_deref(),
                    e.fields.to_fields_v1(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            vec![
                // The applier keeps the rest of its fields, the other updater all of its own;
                // the updater through /scale had nothing else.
                ("ctl", "g/v1", Some(T0), json!({"f:spec": {"f:image": {}}})),
                (
                    "other",
                    "g/v1",
                    Some(T0),
                    json!({"f:spec": {"f:image": {}}})
                ),
                (
                    "scaler",
                    "g/v1",
                    Some(T1),
                    json!({"f:spec": {"f:count": {}}})
                ),
            ]
        );

        // An owner that still owns the Scale's replicas keeps the path, with the Scale's time.
        let mut scale = parent.to_scale(&replicas_path(), "autoscaling/v1");
        scale.entries[1].time = Some(T1.into());
        let after = parent.from_scale(&scale, &replicas_path(), "g/v1");
        assert_eq!(after.entries[..2], parent.entries[..2]);
        assert_eq!(after.entries[2].time.as_deref(), Some(T1));
        assert_eq!(after.entries[2].fields, parent.entries[2].fields);
        assert_eq!(after.entries.len(), 3);
    }

    #[test]
    fn parse_and_write_keep_kubernetes_order() {
        let list = json!([
            {"manager": "b", "operation": "Update", "apiVersion": "v1", "time": T1,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:secrets": {}}},
            {"subresource": "status", "fieldsV1": {"f:status": {"f:phase": {}}},
             "fieldsType": "FieldsV1", "time": T0, "apiVersion": "v1", "operation": "Update",
             "manager": "c"},
            {"manager": "a", "operation": "Apply", "apiVersion": "v1", "time": T1,
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}},
            {"manager": "empty", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {}}
        ]);
        let m = ManagedFields::parse(&list).unwrap();
        assert_eq!(m.entries.len(), 4);
        let text = serde_json::to_string(&m.to_value()).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"[{"manager":"a","operation":"Apply","apiVersion":"v1","time":"2026-01-01T00:01:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:x":{}}}}},"#,
                r#"{"manager":"c","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:phase":{}}},"subresource":"status"},"#,
                r#"{"manager":"b","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:01:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:secrets":{}}}]"#
            )
        );
    }

    #[test]
    fn malformed_entries_are_bad_requests() {
        for (list, needle) in [
            (json!({}), "must be a list"),
            (json!([1]), "[0]: must be an object"),
            (
                json!([{"manager": "a", "operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"}]),
                "operation must be",
            ),
            (
                json!([{"manager": "a", "operation": "Apply", "fieldsType": "FieldsV1"}]),
                "apiVersion must not be empty",
            ),
            (
                json!([{"manager": "a", "operation": "Apply", "apiVersion": "v1"}]),
                "fieldsType is missing",
            ),
            (
                json!([{"manager": "a", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV2"}]),
                "invalid fieldsType",
            ),
            (
                json!([{"manager": "a", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "time": "yesterday"}]),
                "RFC 3339",
            ),
            (
                json!([{"manager": "a", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"nope": {}}}]),
                "fieldsV1",
            ),
        ] {
            let err = ManagedFields::parse(&list).unwrap_err();
            assert_eq!(err.code(), 400);
            assert!(err.to_string().contains(needle), "{err} lacks {needle}");
        }
    }

    #[test]
    fn default_manager_from_user_agent() {
        assert_eq!(
            default_manager("kubectl/v1.31.0 (linux/amd64) kubernetes/abc"),
            "kubectl"
        );
        assert_eq!(default_manager("Go-http-client/1.1"), "Go-http-client");
        assert_eq!(
            default_manager("OpenAPI-Generator/31.0.0/python"),
            "OpenAPI-Generator"
        );
        assert_eq!(default_manager("a\u{1}b\tc d/x"), "abc d");
        assert_eq!(default_manager(""), "");
        let long = "é".repeat(100);
        let m = default_manager(&long);
        assert_eq!(m.len(), 128);
        assert_eq!(m.chars().count(), 64);
    }

    #[test]
    fn eleven_update_managers_fold_the_oldest_two() {
        let sa = builtin::service_account();
        let schema = sa.schema().unwrap();
        let mut obj = json!({"metadata": {"name": "x", "labels": {}}});
        for i in 0..11 {
            let old = obj.clone();
            obj["metadata"]["labels"][format!("l{i}")] = json!("v");
            let now = format!("2026-01-01T00:00:{i:02}Z");
            record_update(
                Some(&old),
                &mut obj,
                schema,
                &format!("m{i}"),
                "v1",
                None,
                &now,
            );
        }
        let m = ManagedFields::of_object(&obj).unwrap();
        assert_eq!(m.entries.len(), 10);
        let bucket = m
            .find(&ManagedFieldsEntry::new(
                ANCIENT_CHANGES,
                Operation::Update,
                "v1",
                None,
            ))
            .unwrap();
        assert_eq!(bucket.fields.len(), 2 + 1); // l0, l1 and the labels map itself
        assert_eq!(bucket.time.as_deref(), Some("2026-01-01T00:00:01Z"));
        assert!(m
            .entries
            .iter()
            .all(|e| e.manager != "m0" && e.manager != "m1"));
    }

    #[test]
    fn reset_and_invalid_sent_lists() {
        assert!(is_reset(Some(&json!([]))));
        assert!(is_reset(Some(&json!([{}]))));
        assert!(!is_reset(Some(&json!([{"manager": "a"}]))));
        assert!(!is_reset(None));
        assert!(!is_reset(Some(&Value::Null)));
    }
}
