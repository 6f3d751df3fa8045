//! Data-driven patch scenarios: every `strategic-*.yaml`, `json-*.yaml` and `merge-*.yaml` in
//! `testdata/patch`. Each file holds one scenario:
//!
//! - `description`: what it shows;
//! - `kind`: `ServiceAccount` or `Namespace`, whose schema a strategic patch follows;
//! - `live`: the object before the patch;
//! - exactly one of `strategic`, `json`, `merge`: the patch, of the type the file name starts with;
//! - exactly one of `expect` (the patched object) or `expectError: {code, contains}`.
//!
//! The test runs them all and fails naming every file that did not hold.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_object::builtin;
use strata_patch::{apply_json_patch, merge_patch, strategic_merge, PatchError};

const PATCH_TYPES: [&str; 3] = ["strategic", "json", "merge"];

fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/patch")
}

fn scenario_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(scenario_dir())
        .expect("testdata/patch is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(".yaml")
                && PATCH_TYPES
                    .iter()
                    .any(|t| name.starts_with(&format!("{t}-")))
        })
        .collect();
    files.sort();
    files
}

/// Runs one scenario file; `Err` says what went wrong.
fn run(path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let doc: Value = serde_norway::from_str(&text).map_err(|e| format!("bad YAML: {e}"))?;
    let doc = doc.as_object().ok_or("the scenario is not a mapping")?;
    for key in doc.keys() {
        let known = ["description", "kind", "live", "expect", "expectError"];
        if !known.contains(&key.as_str()) && !PATCH_TYPES.contains(&key.as_str()) {
            return Err(format!("unknown scenario field {key:?}"));
        }
    }
    if !doc.get("description").is_some_and(Value::is_string) {
        return Err("missing description".into());
    }
    let live = doc.get("live").ok_or("missing live")?;

    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let patch_type = PATCH_TYPES
        .iter()
        .find(|t| name.starts_with(&format!("{t}-")))
        .ok_or("file name has no patch-type prefix")?;
    let present: Vec<&&str> = PATCH_TYPES
        .iter()
        .filter(|t| doc.contains_key(**t))
        .collect();
    if present != [patch_type] {
        return Err(format!(
            "a {patch_type}-* scenario needs exactly one patch, under {patch_type:?}"
        ));
    }
    let patch = &doc[*patch_type];

    let result: Result<Value, PatchError> = match *patch_type {
        "strategic" => {
            let rt = match doc.get("kind").and_then(Value::as_str) {
                Some("ServiceAccount") => builtin::service_account(),
                Some("Namespace") => builtin::namespace(),
                other => {
                    return Err(format!(
                        "kind must be ServiceAccount or Namespace: {other:?}"
                    ))
                }
            };
            let schema = rt.schema().ok_or("the kind has no schema")?;
            strategic_merge(live, patch, schema)
        }
        "json" => apply_json_patch(live, patch),
        _ => {
            let mut target = live.clone();
            merge_patch(&mut target, patch);
            Ok(target)
        }
    };

    match (doc.get("expect"), doc.get("expectError"), result) {
        (Some(expect), None, Ok(got)) => {
            if got != *expect {
                return Err(format!(
                    "result differs\n  expected: {expect}\n       got: {got}"
                ));
            }
            if *patch_type == "strategic" {
                if let Some(key) = directive_key(&got) {
                    return Err(format!("directive {key:?} reached the result: {got}"));
                }
            }
            Ok(())
        }
        (Some(_), None, Err(e)) => Err(format!("expected success, got {} {e}", e.code())),
        (None, Some(want), Ok(got)) => Err(format!("expected error {want}, got success: {got}")),
        (None, Some(want), Err(e)) => {
            let code = want.get("code").and_then(Value::as_u64);
            let contains = want.get("contains").and_then(Value::as_str);
            let (Some(code), Some(contains)) = (code, contains) else {
                return Err("expectError needs code and contains".into());
            };
            if u64::from(e.code()) != code || !e.to_string().contains(contains) {
                return Err(format!(
                    "expected error {code} containing {contains:?}, got {} {e}",
                    e.code()
                ));
            }
            Ok(())
        }
        _ => Err("a scenario needs exactly one of expect and expectError".into()),
    }
}

/// The first strategic-merge directive key anywhere in `v`, if one survived.
fn directive_key(v: &Value) -> Option<String> {
    match v {
        Value::Object(m) => m.iter().find_map(|(k, v)| {
            let directive = k == "$patch"
                || k == "$retainKeys"
                || k.starts_with("$setElementOrder/")
                || k.starts_with("$deleteFromPrimitiveList/");
            if directive {
                Some(k.clone())
            } else {
                directive_key(v)
            }
        }),
        Value::Array(a) => a.iter().find_map(directive_key),
        _ => None,
    }
}

#[test]
fn patch_scenarios() {
    let files = scenario_files();
    for t in PATCH_TYPES {
        let n = files
            .iter()
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                name.starts_with(&format!("{t}-"))
            })
            .count();
        assert!(
            n > 0,
            "no {t}-*.yaml scenarios in {}",
            scenario_dir().display()
        );
    }
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| {
            run(f).err().map(|e| {
                let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                format!("{name}: {e}")
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} patch scenarios failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}
