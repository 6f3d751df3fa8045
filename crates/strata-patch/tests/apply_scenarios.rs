//! Data-driven server-side apply and managedFields scenarios: every `apply-*.yaml` and
//! `update-*.yaml` in `testdata/patch`. Each file holds one scenario:
//!
//! - `description`: what it shows;
//! - `kind`: `ServiceAccount` or `Namespace`, whose schema the operations follow;
//! - `live` (optional): the stored object before the first step, managedFields included;
//! - `steps`: operations in order, each with exactly one of
//!   - `apply: {manager, force?, object}`: server-side apply of `object` (api version `v1`);
//!   - `update: {manager, subresource?, object}`: a create/update/non-apply patch storing
//!     `object` (managedFields recorded as `record_update` does);
//!
//!   optionally `now` (default `2026-01-01T00:00:00Z`), and exactly one expectation:
//!   - `expect`: the stored object afterwards, compared as JSON; its `metadata.managedFields`
//!     must also match byte for byte once serialized (entry order, member order of each entry,
//!     `fieldsV1` key order and the `".":{}` marks);
//!   - `expectConflicts: [{manager, field, cause?}]`: the apply fails with exactly these
//!     conflicts, in order (`cause` is the Status cause message); `expectMessage` optionally
//!     gives the whole error message. The stored object stays as it was;
//!   - `expectInvalid`: the apply is refused with exactly this message.
//!
//! The test runs them all and fails naming every file and step that did not hold.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_object::builtin;
use strata_patch::{apply, record_update, ApplyError};

const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

fn scenario_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/patch");
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("testdata/patch is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(".yaml") && (name.starts_with("apply-") || name.starts_with("update-"))
        })
        .collect();
    files.sort();
    files
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing string {key:?}"))
}

fn check_keys(v: &Value, known: &[&str], what: &str) -> Result<(), String> {
    let map = v
        .as_object()
        .ok_or_else(|| format!("{what} is not a mapping"))?;
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown {what} field {k:?}")),
        None => Ok(()),
    }
}

fn managed_fields_text(obj: &Value) -> String {
    obj.pointer("/metadata/managedFields")
        .map(|m| serde_json::to_string_pretty(m).unwrap_or_default())
        .unwrap_or_else(|| "<none>".into())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Runs one step against `state`; `Err` says what did not hold.
fn run_step(
    step: &Value,
    state: &mut Option<Value>,
    rt: &strata_object::ResourceType,
) -> Result<(), String> {
    check_keys(
        step,
        &[
            "apply",
            "update",
            "now",
            "expect",
            "expectConflicts",
            "expectMessage",
            "expectInvalid",
        ],
        "step",
    )?;
    let schema = rt.schema().ok_or("the kind has no schema")?;
    let now = step
        .get("now")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_NOW);
    let expectations = ["expect", "expectConflicts", "expectInvalid"]
        .iter()
        .filter(|k| step.get(**k).is_some())
        .count();
    if expectations != 1 {
        return Err("a step needs exactly one of expect, expectConflicts, expectInvalid".into());
    }

    let outcome: Result<Value, ApplyError> = match (step.get("apply"), step.get("update")) {
        (Some(op), None) => {
            check_keys(op, &["manager", "force", "object"], "apply")?;
            let force = op.get("force").and_then(Value::as_bool).unwrap_or(false);
            let object = op.get("object").ok_or("apply without object")?;
            apply(
                state.as_ref(),
                object,
                schema,
                text(op, "manager")?,
                force,
                "v1",
                now,
            )
        }
        (None, Some(op)) => {
            check_keys(op, &["manager", "subresource", "object"], "update")?;
            let mut object = op.get("object").ok_or("update without object")?.clone();
            let subresource = op.get("subresource").and_then(Value::as_str);
            record_update(
                state.as_ref(),
                &mut object,
                schema,
                text(op, "manager")?,
                "v1",
                subresource,
                now,
            );
            Ok(object)
        }
        _ => return Err("a step needs exactly one of apply, update".into()),
    };

    match outcome {
        Ok(actual) => {
            if let Some(want) = step.get("expect") {
                if actual != *want {
                    return Err(format!(
                        "object differs\n--- want\n{}\n--- got\n{}",
                        pretty(want),
                        pretty(&actual)
                    ));
                }
                let (want_mf, got_mf) = (managed_fields_text(want), managed_fields_text(&actual));
                if want_mf != got_mf {
                    return Err(format!(
                        "managedFields differ in order\n--- want\n{want_mf}\n--- got\n{got_mf}"
                    ));
                }
                *state = Some(actual);
                Ok(())
            } else {
                Err(format!("expected a failure, got\n{}", pretty(&actual)))
            }
        }
        Err(ApplyError::Conflicts(conflicts)) => {
            let Some(want) = step.get("expectConflicts").and_then(Value::as_array) else {
                return Err(format!(
                    "unexpected conflicts: {}",
                    ApplyError::Conflicts(conflicts)
                ));
            };
            let got: Vec<(String, String, String)> = conflicts
                .iter()
                .map(|c| (c.manager.clone(), c.field(), c.cause_message()))
                .collect();
            if want.len() != got.len() {
                return Err(format!("want {} conflicts, got {got:?}", want.len()));
            }
            for (w, g) in want.iter().zip(&got) {
                check_keys(w, &["manager", "field", "cause"], "conflict")?;
                let cause_ok = w.get("cause").is_none_or(|c| c.as_str() == Some(&g.2));
                if text(w, "manager")? != g.0 || text(w, "field")? != g.1 || !cause_ok {
                    return Err(format!("want conflict {w}, got {g:?}"));
                }
            }
            if let Some(message) = step.get("expectMessage").and_then(Value::as_str) {
                let got = ApplyError::Conflicts(conflicts).to_string();
                if got != message {
                    return Err(format!(
                        "message differs\n--- want\n{message}\n--- got\n{got}"
                    ));
                }
            }
            Ok(())
        }
        Err(ApplyError::Invalid(message)) => match step.get("expectInvalid") {
            Some(Value::String(want)) if *want == message => Ok(()),
            _ => Err(format!("unexpected invalid: {message}")),
        },
    }
}

/// Runs one scenario file; `Err` names the failing step.
fn run(path: &Path) -> Result<usize, String> {
    let text_ = fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let doc: Value = serde_norway::from_str(&text_).map_err(|e| format!("bad YAML: {e}"))?;
    check_keys(&doc, &["description", "kind", "live", "steps"], "scenario")?;
    text(&doc, "description")?;
    let rt = match text(&doc, "kind")? {
        "ServiceAccount" => builtin::service_account(),
        "Namespace" => builtin::namespace(),
        other => return Err(format!("unknown kind {other:?}")),
    };
    let steps = doc
        .get("steps")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
        .ok_or("missing steps")?;
    let mut state = doc.get("live").cloned();
    for (i, step) in steps.iter().enumerate() {
        run_step(step, &mut state, &rt).map_err(|e| format!("step {}: {e}", i + 1))?;
    }
    Ok(steps.len())
}

#[test]
fn apply_and_update_scenarios() {
    let files = scenario_files();
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| run(f).err().map(|e| format!("{}: {e}", f.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
    assert!(files.len() >= 20, "only {} scenarios", files.len());
}
