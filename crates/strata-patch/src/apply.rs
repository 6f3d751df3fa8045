//! Server-side apply, with structured-merge-diff's semantics: the applied configuration is
//! merged into the live object per schema, fields the applier stopped applying are pruned, other
//! managers' fields it would change are conflicts (unless forced), and the applier's
//! managedFields entry becomes exactly the set of fields it applied.
//!
//! Not here: the apply body's decoding, `kind` and name checks and the strategy's resets (the
//! registry's), and writes that are not apply (`managed::record_update`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map, Value};
use strata_object::schema::{Node, Shape};

use crate::fieldpath::{self, compare_views, raw_fields, tidy, Path, PathElement, Track};
use crate::managed::{ManagedFieldsEntry, Operation, StoredManagers};

/// One field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    /// The manager that owns the field.
    pub manager: String,
    /// How it came to own it.
    pub operation: Operation,
    /// The API version of the owner's entry.
    pub api_version: String,
    /// When the owner last changed something (its entry's time).
    pub time: Option<String>,
    /// The sub-resource the owner wrote through, if any.
    pub subresource: Option<String>,
    /// The field, e.g. `.metadata.labels.app`.
    pub path: Path,
}

impl Conflict {
    fn owner_entry(&self) -> ManagedFieldsEntry {
        ManagedFieldsEntry::new(
            &self.manager,
            self.operation,
            &self.api_version,
            self.subresource.as_deref(),
        )
    }

    /// The owner as Kubernetes names it: `"mgr"`, `"mgr" with subresource "status"`, and
    /// ` using v1` after Update managers.
    pub fn owner(&self) -> String {
        self.owner_entry().describe()
    }

    /// The `field` of the Status cause: the path in structured-merge-diff's form.
    pub fn field(&self) -> String {
        self.path.to_string()
    }

    /// The `message` of the Status cause (reason `FieldManagerConflict`):
    /// `conflict with "mgr" using v1`.
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.owner())
    }
}

/// Why an apply was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// Fields other managers own would change: 409 Conflict, reason `Conflict`, one cause per
    /// conflict (see [`Conflict::cause_message`] and [`Conflict::field`]). The message is
    /// Kubernetes' (see [`conflicts_message`]).
    #[error("{}", conflicts_message(.0))]
    Conflicts(Vec<Conflict>),
    /// The applied object is not acceptable: `metadata.managedFields` is set, its `apiVersion`
    /// is not the endpoint's, or it does not fit the schema (`.foo: field not declared in
    /// schema`). Kubernetes answers 400 Bad Request for the first two; for the schema errors
    /// (which it wraps as `failed to create typed patch object (...): <this>`) 400 is the
    /// sensible answer too.
    #[error("{0}")]
    Invalid(String),
}

/// Kubernetes' message for apply conflicts: `Apply failed with 1 conflict: conflict with "mgr":
/// .metadata.labels.app`, or for several, grouped by manager (managers sorted):
/// `Apply failed with 2 conflicts: conflicts with "a":\n- .x\nconflicts with "b" using v1:\n- .y`.
pub fn conflicts_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.owner(),
            only.path
        );
    }
    let mut by_owner: BTreeMap<String, (String, Vec<&Path>)> = BTreeMap::new();
    for c in conflicts {
        by_owner
            .entry(c.owner_entry().identifier())
            .or_insert_with(|| (c.owner(), Vec::new()))
            .1
            .push(&c.path);
    }
    let mut lines = Vec::new();
    for (owner, paths) in by_owner.values() {
        lines.push(format!("conflicts with {owner}:"));
        lines.extend(paths.iter().map(|p| format!("- {p}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Server-side apply of `applied` by `manager` to `live` (`None`: the object does not exist and
/// the apply creates it), both of the type `schema` describes, through the main resource at
/// `api_version`. Returns the object to store, with `metadata.managedFields` updated, or why
/// not.
///
/// - `applied` must be an object whose `apiVersion` is `api_version`, without
///   `metadata.managedFields`, and fit `schema` (no undeclared fields, values of the declared
///   kinds, `set` and `map` lists without duplicates, `map` list elements with their keys).
/// - It is merged into `live` per schema: structs and maps merge key by key, scalars and atomic
///   lists and maps are replaced, `set` and `map` lists merge element by element (elements of
///   `map` lists recursively), keeping live elements in place and taking the applied order for
///   the applied ones; `null` removes a field.
/// - Fields the manager applied last time and omits now are removed, unless another manager
///   (or this one's new configuration) owns them; a struct with nothing owned left goes as a
///   whole.
/// - A field another manager owns (Apply or Update entry) whose value this apply changes is a
///   conflict; without `force` the apply fails with all of them, with `force` the other
///   managers lose those fields. Applying an equal value shares ownership. Fields that
///   disappear leave every manager.
/// - The manager's Apply entry becomes exactly the applied fields (see
///   [`crate::fieldpath::fields_of`]) with time `now`, unless nothing at all changed (object
///   and ownership), in which case `live` is returned unchanged, old times included.
/// - The result leaves out `null`s and empty lists and maps, as Kubernetes' typed objects do.
///   Its `status` is merged like any field; resetting it is the strategy's job.
///
/// `now` is the time recorded in the manager's entry (RFC 3339, whole seconds, as
/// `metadata.managedFields` holds them).
///
/// ```
/// use strata_patch::serde_json::json;
/// use strata_patch::strata_object::builtin;
/// use strata_patch::{apply, ApplyError};
///
/// let cm = builtin::config_map();
/// let schema = cm.schema().unwrap();
/// let config = json!({
///     "apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "settings"},
///     "data": {"mode": "fast", "level": "3"},
/// });
/// let live = apply(None, &config, schema, "tool", false, "v1", "2026-01-01T00:00:00Z").unwrap();
/// assert_eq!(
///     live["metadata"]["managedFields"][0]["fieldsV1"],
///     json!({"f:data": {"f:level": {}, "f:mode": {}}})
/// );
///
/// // The next apply leaves `level` out: the field goes, since nobody else owns it.
/// let config = json!({
///     "apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "settings"},
///     "data": {"mode": "fast"},
/// });
/// let live = apply(Some(&live), &config, schema, "tool", false, "v1", "2026-01-01T00:01:00Z")
///     .unwrap();
/// assert_eq!(live["data"], json!({"mode": "fast"}));
///
/// // An apply must say the endpoint's apiVersion.
/// let wrong = json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "settings"}});
/// let err = apply(Some(&live), &wrong, schema, "tool", false, "v1", "2026-01-01T00:02:00Z");
/// assert!(matches!(err, Err(ApplyError::Invalid(_))));
/// ```
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    schema: Node,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> Result<Value, ApplyError> {
    apply_through(
        live,
        applied,
        schema,
        manager,
        force,
        api_version,
        None,
        now,
    )
}

/// [`apply`] through a sub-resource of the object (`Some("status")`): the fields that
/// sub-resource cannot change (`spec` for `status`) are the ones no manager owns through it,
/// instead of the main resource's `status`, and the manager's Apply entry names the
/// sub-resource, as Kubernetes records an apply to `/status`.
#[allow(clippy::too_many_arguments)]
pub fn apply_through(
    live: Option<&Value>,
    applied: &Value,
    schema: Node,
    manager: &str,
    force: bool,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
) -> Result<Value, ApplyError> {
    let mut config = applied.clone();
    check_applied(&config, schema, api_version)?;
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        meta.shift_remove("managedFields");
    }

    let empty = Value::Object(Map::new());
    let live_obj = live.unwrap_or(&empty);
    // Stored managedFields are always written by this crate; unreadable ones count as none.
    let mut managed = StoredManagers::of_object(live_obj).unwrap_or_else(|_| StoredManagers {
        entries: Vec::new(),
    });
    let live_content = without_managed_fields(live_obj);

    let ignored = fieldpath::reset_fields(schema, subresource);
    let mut applier = ManagedFieldsEntry::new(manager, Operation::Apply, api_version, subresource);
    let (last, last_version) = match managed.find_mut(&applier) {
        Some(e) => (e.fields().clone(), Some(e.entry.api_version.clone())),
        None => (fieldpath::FieldSet::new(), None),
    };
    let applied_fields = raw_fields(&config, schema).recursive_difference(&ignored);

    let merged = merge(Some(&live_content), Some(&config), Some(schema)).unwrap_or_default();
    // Only fields the manager applied last time and leaves out now can be pruned. When it
    // applies all of them again, nothing is, and what the other managers own does not matter.
    let pruned = if last.difference(&applied_fields).is_empty() {
        merged
    } else {
        let mut owned = applied_fields
            .union(fieldpath::system_fields())
            .union(&ignored);
        for e in managed
            .entries
            .iter_mut()
            .filter(|e| !e.entry.same_manager(&applier))
        {
            owned.extend(e.fields());
        }
        prune(merged, &last, &owned, schema)
    };
    let result = tidy(&pruned, Some(schema)).unwrap_or_else(|| empty.clone());

    let live_view = fieldpath::typed_view(&live_content, schema);
    let result_view = fieldpath::typed_view(&result, schema);
    let cmp = compare_views(&live_view, &result_view, schema).excluding(&ignored);
    let changed = cmp.modified.union(&cmp.added);
    let mut others_changed = false;
    let mut conflicts = Vec::new();
    // Most managers own none of what changed: their entries are checked along the changed
    // paths only, and written back as they were.
    for e in managed
        .entries
        .iter_mut()
        .filter(|e| !e.entry.same_manager(&applier))
    {
        let clash = e.intersection(&changed);
        for path in clash.paths() {
            conflicts.push(Conflict {
                manager: e.entry.manager.clone(),
                operation: e.entry.operation,
                api_version: e.entry.api_version.clone(),
                time: e.entry.time.clone(),
                subresource: e.entry.subresource.clone(),
                path,
            });
        }
        let gone = e.intersection(&cmp.removed);
        if !clash.is_empty() || !gone.is_empty() {
            let fields = e.fields_mut();
            fields.subtract(&clash);
            fields.subtract(&gone);
            others_changed = true;
        }
    }
    if !conflicts.is_empty() && !force {
        // Stable: paths keep their order within a manager.
        conflicts.sort_by_cached_key(|c| c.owner_entry().identifier());
        return Err(ApplyError::Conflicts(conflicts));
    }

    applier.fields = applied_fields.difference(fieldpath::system_fields());
    // The applier's entry is as it was when it owns the same fields (an empty entry is none),
    // recorded at the same version.
    let applier_unchanged =
        applier.fields == last && (last.is_empty() || last_version.as_deref() == Some(api_version));
    // An entry left empty is not written, so its time does not matter.
    applier.time = Some(now.to_string());
    let unchanged = !others_changed && applier_unchanged && live_view == result_view;
    if live.is_some() && unchanged {
        return Ok(live_obj.clone());
    }
    managed.upsert(applier);
    let mut result = result;
    managed.write_to(&mut result);
    Ok(result)
}

/// A copy of `obj` without `metadata.managedFields`, which is not copied at all (on an object
/// many managers share it is most of the object).
fn without_managed_fields(obj: &Value) -> Value {
    let Value::Object(members) = obj else {
        return obj.clone();
    };
    let copied = members
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Value::Object(meta) if name == "metadata" => Value::Object(
                    meta.iter()
                        .filter(|(field, _)| *field != "managedFields")
                        .map(|(field, v)| (field.clone(), v.clone()))
                        .collect(),
                ),
                other => other.clone(),
            };
            (name.clone(), value)
        })
        .collect();
    Value::Object(copied)
}

/// The checks Kubernetes makes before merging: an object, no managedFields, the endpoint's
/// version, and a value that fits the schema.
fn check_applied(config: &Value, schema: Node, api_version: &str) -> Result<(), ApplyError> {
    if !config.is_object() {
        return Err(ApplyError::Invalid(format!("expected map, got {config}")));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    let version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if version != api_version {
        return Err(ApplyError::Invalid(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, \
             expected: {api_version}"
        )));
    }
    let mut errors = Vec::new();
    check(config, Some(schema), &mut Vec::new(), &mut errors);
    match errors.len() {
        0 => Ok(()),
        1 => Err(ApplyError::Invalid(errors.remove(0))),
        _ => Err(ApplyError::Invalid(format!(
            "errors:\n  {}",
            errors.join("\n  ")
        ))),
    }
}

/// Collects the ways `value` does not fit `node`, in structured-merge-diff's wording.
fn check(value: &Value, node: Option<Node>, path: &mut Vec<PathElement>, errors: &mut Vec<String>) {
    let Some(node) = node else {
        return;
    };
    if value.is_null() {
        return;
    }
    let here = |path: &[PathElement]| Path(path.to_vec()).to_string();
    match node.shape() {
        Shape::Any => {}
        Shape::Scalar => {
            let (fits, expected) = match node.type_name() {
                Some("string") => (value.is_string(), "string"),
                Some("integer") | Some("number") => (value.is_number(), "numeric (int or float)"),
                Some("boolean") => (value.is_boolean(), "boolean"),
                _ => (!value.is_object() && !value.is_array(), "any scalar"),
            };
            if !fits {
                errors.push(format!("{}: expected {expected}, got {value}", here(path)));
            }
        }
        Shape::Struct | Shape::Map => {
            let Value::Object(map) = value else {
                errors.push(format!("{}: expected map, got {value}", here(path)));
                return;
            };
            for (key, v) in map {
                path.push(PathElement::Field(key.clone()));
                match node.child(key) {
                    Some(child) => check(v, Some(child), path, errors),
                    None => errors.push(format!("{}: field not declared in schema", here(path))),
                }
                path.pop();
            }
        }
        Shape::Array => {
            let Value::Array(items) = value else {
                errors.push(format!("{}: expected list, got {value}", here(path)));
                return;
            };
            let track = Track::of(Some(node));
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let pe = match &track {
                    Track::Set | Track::Keyed(..) => match track.element_of(item) {
                        Some(pe) => pe,
                        None => {
                            errors.push(unnamed_item(&track, item, i, &here(path)));
                            continue;
                        }
                    },
                    _ => PathElement::Index(i),
                };
                if !seen.insert(pe.clone()) {
                    errors.push(format!("{}: duplicate entries for key {pe}", here(path)));
                }
                path.push(pe);
                check(item, node.items(), path, errors);
                path.pop();
            }
        }
    }
}

fn unnamed_item(track: &Track, item: &Value, i: usize, at: &str) -> String {
    let missing = match (track, item) {
        (Track::Keyed(keys, _), Value::Object(obj)) => keys
            .iter()
            .find(|k| obj.get(*k).is_none_or(Value::is_null))
            .cloned(),
        _ => None,
    };
    match missing {
        Some(key) => format!(
            "{at}: element {i}: associative list with keys has an element that omits key field \
             {key:?} (and doesn't have default value)"
        ),
        None => format!("{at}: element {i}: expected map, got {item}"),
    }
}

/// Merges `config` into `live` at a position of `node` (`None` when absent or removed).
fn merge(live: Option<&Value>, config: Option<&Value>, node: Option<Node>) -> Option<Value> {
    let config = match config {
        None => return live.cloned(),
        Some(Value::Null) => return None,
        Some(c) => c,
    };
    let track = Track::of(node);
    let Some(live) = live.filter(|l| track.fits(l) && track.fits(config)) else {
        return Some(config.clone());
    };
    match (&track, live, config) {
        (Track::Fields(n), Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (key, cv) in c {
                match merge(l.get(key), Some(cv), n.child(key)) {
                    Some(v) => {
                        out.insert(key.clone(), v);
                    }
                    None => {
                        out.shift_remove(key);
                    }
                }
            }
            Some(Value::Object(out))
        }
        (Track::Set | Track::Keyed(..), Value::Array(l), Value::Array(c)) => {
            Some(Value::Array(merge_lists(&track, l, c)))
        }
        _ => Some(config.clone()),
    }
}

/// Merges two granular lists element by element. Live elements the configuration does not
/// name stay where they are; configured elements come in the configuration's order, a live
/// element the configuration also names moving to its configured turn, and new ones are placed
/// before the next element both share.
fn merge_lists(track: &Track, live: &[Value], config: &[Value]) -> Vec<Value> {
    let named = fieldpath::index_items(track, config);
    let in_config: BTreeMap<&PathElement, &Value> = named.iter().map(|(pe, v)| (pe, *v)).collect();
    let mut in_live: BTreeMap<PathElement, &Value> = BTreeMap::new();
    // Live items are named; a repeated or unnameable one is carried along as it is.
    let live_items: Vec<(Option<PathElement>, &Value)> = live
        .iter()
        .map(|item| match track.element_of(item) {
            Some(pe) if !in_live.contains_key(&pe) => {
                in_live.insert(pe.clone(), item);
                (Some(pe), item)
            }
            _ => (None, item),
        })
        .collect();
    let mut shared: VecDeque<&PathElement> = named
        .iter()
        .map(|(pe, _)| pe)
        .filter(|pe| in_live.contains_key(*pe))
        .collect();
    let mut next_shared = shared.pop_front();
    let merge_item = |pe: &PathElement| -> Option<Value> {
        match track {
            Track::Keyed(..) => merge(
                in_live.get(pe).copied(),
                in_config.get(pe).copied(),
                track.item_node(),
            ),
            _ => in_config.get(pe).map(|v| (*v).clone()),
        }
    };

    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let mut done: BTreeSet<PathElement> = BTreeSet::new();
    let (mut li, mut ci) = (0, 0);
    while li < live_items.len() || ci < named.len() {
        if let Some((name, item)) = live_items.get(li) {
            let Some(pe) = name else {
                out.push((*item).clone());
                li += 1;
                continue;
            };
            if done.contains(pe) {
                li += 1;
                continue;
            }
            if named.get(ci).is_some_and(|(c, _)| c == pe) {
                out.extend(merge_item(pe));
                done.insert(pe.clone());
                next_shared = shared.pop_front();
                li += 1;
                ci += 1;
                continue;
            }
            if !in_config.contains_key(pe) {
                out.push((*item).clone());
                done.insert(pe.clone());
                li += 1;
                continue;
            }
            if ci < named.len() && next_shared.is_some_and(|n| n != pe) {
                // Shared, but not its turn yet: it comes with the configuration's order.
                li += 1;
                continue;
            }
        }
        let Some((pe, _)) = named.get(ci) else {
            li += 1;
            continue;
        };
        out.extend(merge_item(pe));
        done.insert(pe.clone());
        if next_shared == Some(pe) {
            next_shared = shared.pop_front();
        }
        ci += 1;
    }
    out
}

/// Removes from `value` every path that is a member of `set` (with everything below it).
/// Atomic values are not entered.
fn remove_items(value: &mut Value, set: &fieldpath::FieldSet, node: Option<Node>) {
    if set.is_empty() {
        return;
    }
    let track = Track::of(node);
    match (&track, value) {
        (Track::Fields(n), Value::Object(map)) => {
            map.retain(|key, v| {
                let pe = PathElement::Field(key.clone());
                if set.contains(std::slice::from_ref(&pe)) {
                    return false;
                }
                if let Some(sub) = set.child(&pe) {
                    remove_items(v, sub, n.child(key));
                }
                true
            });
        }
        (Track::Set | Track::Keyed(..), Value::Array(items)) => {
            items.retain_mut(|item| {
                let Some(pe) = track.element_of(item) else {
                    return true;
                };
                if set.contains(std::slice::from_ref(&pe)) {
                    return false;
                }
                if let Some(sub) = set.child(&pe) {
                    remove_items(item, sub, track.item_node());
                }
                true
            });
        }
        _ => {}
    }
}

/// Removes what the applier applied `last` time and no longer applies, unless a manager in
/// `owned` (everyone else, the new configuration, and the fields that are never pruned) still
/// owns it. Ownership is widened to the declared struct fields above owned fields first, so a
/// struct goes as a whole only when nothing in it is owned any more; the three passes keep
/// only removals of paths the applier did own.
fn prune(
    merged: Value,
    last: &fieldpath::FieldSet,
    owned: &fieldpath::FieldSet,
    schema: Node,
) -> Value {
    if last.is_empty() {
        return merged;
    }
    let widen = |s: &fieldpath::FieldSet| s.with_named_fields_as_members(Some(schema));
    let fields = |v: &Value| widen(&raw_fields(v, schema));
    let last = widen(last);
    let owned = widen(owned);
    let all = fields(&merged);

    // Everything the applier had.
    let mut without_last = merged.clone();
    remove_items(&mut without_last, &last, Some(schema));
    // ...back, except what nobody owns.
    let unowned = all.difference(&fields(&without_last).union(&owned));
    let mut without_unowned = merged.clone();
    remove_items(&mut without_unowned, &unowned, Some(schema));
    // ...and of that, only what the applier had.
    let gone = all
        .difference(&fields(&without_unowned))
        .intersection(&last);
    let mut result = merged;
    remove_items(&mut result, &gone, Some(schema));
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_object::builtin;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn set_list(items: &[&str]) -> Vec<Value> {
        items.iter().map(|s| json!(s)).collect()
    }

    #[test]
    fn set_lists_merge_in_structured_merge_diff_order() {
        let t = Track::Set;
        let m = |l: &[&str], c: &[&str]| merge_lists(&t, &set_list(l), &set_list(c));
        assert_eq!(
            m(&["a", "b", "c"], &["d", "b"]),
            set_list(&["a", "d", "b", "c"])
        );
        assert_eq!(m(&["a", "b"], &["b", "a"]), set_list(&["b", "a"]));
        assert_eq!(m(&["a", "b"], &["c"]), set_list(&["a", "b", "c"]));
        assert_eq!(m(&[], &["x", "y"]), set_list(&["x", "y"]));
        assert_eq!(m(&["x", "y"], &[]), set_list(&["x", "y"]));
        assert_eq!(
            m(&["a", "b", "c", "d"], &["d", "e", "a"]),
            set_list(&["b", "c", "d", "e", "a"])
        );
    }

    /// What `apply_through` skips: when a manager applies again every field it applied last
    /// time, pruning removes nothing, even when no other manager owns anything.
    #[test]
    fn reapplying_the_same_fields_prunes_nothing() {
        let definitions = json!({
            "Thing": {"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
                "spec": {"type": "object", "properties": {
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port"],
                              "items": {"type": "object", "properties": {
                                  "port": {"type": "integer"}, "name": {"type": "string"},
                                  "env": {"type": "object",
                                          "additionalProperties": {"type": "string"}}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                             "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "nested": {"type": "object", "properties": {
                        "inner": {"type": "object", "properties": {"x": {"type": "string"}}}}}
                }}
            }}
        });
        let definitions = definitions.as_object().unwrap().clone();
        let compiled = strata_object::schema::CompiledSchema::new(&definitions, "Thing").unwrap();
        let schema = compiled.root();
        let live = json!({
            "apiVersion": "x/v1", "kind": "Thing",
            "metadata": {"name": "a", "labels": {"mine": "1", "theirs": "2"}},
            "spec": {"ports": [{"port": 1, "name": "a", "env": {"k": "v", "o": "w"}},
                               {"port": 2, "name": "b"}],
                     "tags": ["x", "y"], "args": ["p"], "nested": {"inner": {"x": "old"}}}
        });
        let first = json!({
            "apiVersion": "x/v1", "kind": "Thing",
            "metadata": {"name": "a", "labels": {"mine": "1"}},
            "spec": {"ports": [{"port": 1, "env": {"k": "v"}}], "tags": ["x"], "args": ["p"],
                     "nested": {"inner": {"x": "old"}}}
        });
        // The same fields with other values.
        let again = json!({
            "apiVersion": "x/v1", "kind": "Thing",
            "metadata": {"name": "a", "labels": {"mine": "9"}},
            "spec": {"ports": [{"port": 1, "env": {"k": "changed"}}], "tags": ["x"],
                     "args": ["q", "r"], "nested": {"inner": {"x": "new"}}}
        });
        let ignored = fieldpath::reset_fields(schema, None);
        let last = raw_fields(&first, schema).recursive_difference(&ignored);
        let applied = raw_fields(&again, schema).recursive_difference(&ignored);
        assert!(last.difference(&applied).is_empty());
        let owned = applied.union(fieldpath::system_fields()).union(&ignored);
        let merged = merge(Some(&live), Some(&again), Some(schema)).unwrap();
        assert_eq!(merged["spec"]["args"], json!(["q", "r"]));
        assert_eq!(prune(merged.clone(), &last, &owned, schema), merged);

        // Leaving a field out is what prunes; what another manager owns stays.
        let fewer = json!({"apiVersion": "x/v1", "kind": "Thing", "metadata": {"name": "a"},
                           "spec": {"ports": [{"port": 1}]}});
        let applied = raw_fields(&fewer, schema).recursive_difference(&ignored);
        assert!(!last.difference(&applied).is_empty());
        let others = raw_fields(&live, schema).difference(&last);
        let owned = applied
            .union(fieldpath::system_fields())
            .union(&ignored)
            .union(&others);
        let merged = merge(Some(&live), Some(&fewer), Some(schema)).unwrap();
        let pruned = prune(merged, &last, &owned, schema);
        assert_eq!(pruned["metadata"]["labels"], json!({"theirs": "2"}));
        assert_eq!(
            pruned["spec"]["ports"][0],
            json!({"port": 1, "name": "a", "env": {"o": "w"}})
        );
    }

    #[test]
    fn create_by_apply_records_one_entry() {
        let sa = builtin::service_account();
        let obj = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "ns", "labels": {"app": "web"}},
            "secrets": [{"name": "s1"}]
        });
        let out = apply(
            None,
            &obj,
            sa.schema().unwrap(),
            "kubectl",
            false,
            "v1",
            NOW,
        )
        .unwrap();
        assert_eq!(out["secrets"], json!([{"name": "s1"}]));
        assert_eq!(
            serde_json::to_string(&out["metadata"]["managedFields"]).unwrap(),
            r#"[{"manager":"kubectl","operation":"Apply","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}},"f:secrets":{"k:{\"name\":\"s1\"}":{}}}}]"#
        );
    }

    #[test]
    fn apply_through_status_records_a_status_entry() {
        let ns = builtin::namespace();
        let schema = ns.schema().unwrap();
        let live = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ns", "managedFields": [{
                "manager": "creator", "operation": "Update", "apiVersion": "v1",
                "time": NOW, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:finalizers": {}}}
            }]},
            "spec": {"finalizers": ["kubernetes"]}
        });
        let config = json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ns"},
            "status": {"phase": "Active"}
        });
        let out = apply_through(
            Some(&live),
            &config,
            schema,
            "ctl",
            false,
            "v1",
            Some("status"),
            NOW,
        )
        .unwrap();
        assert_eq!(out["status"], json!({"phase": "Active"}));
        assert_eq!(out["spec"], live["spec"]);
        assert_eq!(
            serde_json::to_string(&out["metadata"]["managedFields"]).unwrap(),
            concat!(
                r#"[{"manager":"ctl","operation":"Apply","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:phase":{}}},"subresource":"status"},"#,
                r#"{"manager":"creator","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:finalizers":{}}}}]"#
            )
        );
        // Through the main resource the same status is not the applier's.
        let out = apply(Some(&live), &config, schema, "ctl", false, "v1", NOW).unwrap();
        assert_eq!(
            out["metadata"]["managedFields"].as_array().unwrap().len(),
            1
        );
    }

    #[test]
    fn invalid_applied_objects() {
        let sa = builtin::service_account();
        let schema = sa.schema().unwrap();
        let err = |v: Value| match apply(None, &v, schema, "m", false, "v1", NOW) {
            Err(ApplyError::Invalid(msg)) => msg,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            err(json!({"apiVersion": "v1", "foo": 1})),
            ".foo: field not declared in schema"
        );
        assert_eq!(
            err(json!({"apiVersion": "v1", "metadata": {"managedFields": []}})),
            "metadata.managedFields must be nil"
        );
        assert_eq!(
            err(json!({"apiVersion": "v2"})),
            "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1"
        );
        assert_eq!(
            err(json!({"apiVersion": "v1", "automountServiceAccountToken": "yes"})),
            r#".automountServiceAccountToken: expected boolean, got "yes""#
        );
        assert_eq!(
            err(json!({"apiVersion": "v1", "secrets": [{"name": "a"}, {"name": "a"}]})),
            r#".secrets: duplicate entries for key [name="a"]"#
        );
        assert_eq!(
            err(json!({"apiVersion": "v1", "secrets": [{"kind": "Secret"}]})),
            ".secrets: element 0: associative list with keys has an element that omits key \
             field \"name\" (and doesn't have default value)"
        );
        assert_eq!(
            err(json!({"apiVersion": "v1", "metadata": {"labels": "x", "bar": 1}})),
            "errors:\n  .metadata.labels: expected map, got \"x\"\n  .metadata.bar: field not declared in schema"
        );
    }

    #[test]
    fn conflict_messages() {
        let c = |manager: &str, operation, path: &[&str]| Conflict {
            manager: manager.into(),
            operation,
            api_version: "v1".into(),
            time: Some(NOW.into()),
            subresource: None,
            path: Path::fields(path),
        };
        let one = vec![c("mgr", Operation::Apply, &["metadata", "labels", "app"])];
        assert_eq!(
            ApplyError::Conflicts(one.clone()).to_string(),
            r#"Apply failed with 1 conflict: conflict with "mgr": .metadata.labels.app"#
        );
        assert_eq!(one[0].cause_message(), r#"conflict with "mgr""#);
        assert_eq!(one[0].field(), ".metadata.labels.app");
        let three = vec![
            c("b", Operation::Update, &["x"]),
            c("a", Operation::Apply, &["y"]),
            c("b", Operation::Update, &["z"]),
        ];
        assert_eq!(
            conflicts_message(&three),
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .y\nconflicts with \"b\" using v1:\n- .x\n- .z"
        );
        let mut status = c("ctl", Operation::Update, &["status"]);
        status.subresource = Some("status".into());
        assert_eq!(
            status.cause_message(),
            r#"conflict with "ctl" with subresource "status" using v1"#
        );
    }
}
