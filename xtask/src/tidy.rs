//! `cargo xtask tidy`: checks the dependency directions between workspace crates and the shape of
//! each crate manifest, reading `cargo metadata`; and two habits of every source file that git
//! tracks: it opens with a `//!` line saying what it is, and no test is marked to be ignored.
//!
//! The rules are the crate table of `docs/ARCHITECTURE.md`; a new crate must be added to
//! [`RULES`] before anything may depend on it.
//!
//! The crates other projects may use ([`PUBLISHED`]) are held to what crates.io needs: package
//! metadata, a README, `#![deny(missing_docs)]`, and versions on their dependencies on each
//! other; [`publish_dry_run`] then packages and builds them as `cargo publish` would. Every
//! other crate says `publish = false`.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

use serde_json::Value;

use crate::Result;

/// Which workspace crates a crate may depend on.
#[derive(Clone, Copy, Debug)]
enum Allowed {
    Only(&'static [&'static str]),
    /// Every workspace crate except `xtask`.
    AnyLibrary,
}

/// The dependency table. Normal, build and dev dependencies all count, except as
/// [`DEV_DEPS_UNRESTRICTED`] says.
const RULES: &[(&str, Allowed)] = &[
    ("strata-object", Allowed::Only(&[])),
    ("strata-codec", Allowed::Only(&["strata-object"])),
    ("strata-patch", Allowed::Only(&["strata-object"])),
    ("strata-apiext", Allowed::Only(&["strata-object"])),
    ("strata-store", Allowed::Only(&[])),
    ("strata-store-rocksdb", Allowed::Only(&["strata-store"])),
    ("strata-store-etcd", Allowed::Only(&["strata-store"])),
    (
        "strata-watch",
        Allowed::Only(&["strata-object", "strata-store"]),
    ),
    (
        "strata-registry",
        Allowed::Only(&[
            "strata-object",
            "strata-codec",
            "strata-patch",
            "strata-apiext",
            "strata-store",
            "strata-watch",
        ]),
    ),
    (
        "strata-auth",
        Allowed::Only(&["strata-object", "strata-registry"]),
    ),
    (
        "strata-controllers",
        Allowed::Only(&["strata-object", "strata-apiext", "strata-registry"]),
    ),
    // strata-store is reachable from strata-http tests only, through the dev-dependency rule.
    (
        "strata-http",
        Allowed::Only(&[
            "strata-object",
            "strata-codec",
            "strata-registry",
            "strata-auth",
        ]),
    ),
    ("strata-server", Allowed::AnyLibrary),
    // The black-box checker speaks HTTP only: no workspace crate.
    ("strata-conformance", Allowed::Only(&[])),
    ("xtask", Allowed::Only(&["strata-conformance"])),
];

/// The crates other projects may depend on, ready for crates.io (issue 19): each may depend
/// only on crates of this list among the workspace's.
pub const PUBLISHED: &[&str] = &[
    "strata-object",
    "strata-codec",
    "strata-patch",
    "strata-store",
    "strata-watch",
];

/// Crates whose tests may use any workspace crate: they stand up whole servers.
const DEV_DEPS_UNRESTRICTED: &[&str] = &["strata-http", "strata-server"];

/// External packages only some crates may depend on directly, with those crates.
const QUARANTINED: &[(&str, &[&str])] = &[
    ("rocksdb", &["strata-store-rocksdb"]),
    ("librocksdb-sys", &["strata-store-rocksdb"]),
    ("rust-rocksdb", &["strata-store-rocksdb"]),
    ("rust-librocksdb-sys", &["strata-store-rocksdb"]),
    ("etcd-client", &["strata-store-etcd"]),
    (
        "hyper",
        &[
            "strata-http",
            "strata-server",
            "strata-conformance",
            "xtask",
        ],
    ),
    (
        "hyper-util",
        &[
            "strata-http",
            "strata-server",
            "strata-conformance",
            "xtask",
        ],
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum DepKind {
    Normal,
    Build,
    Dev,
}

impl DepKind {
    fn as_str(self) -> &'static str {
        match self {
            DepKind::Normal => "normal",
            DepKind::Build => "build",
            DepKind::Dev => "dev",
        }
    }
}

#[derive(Debug)]
struct Dependency {
    /// The package name (not the rename, if any).
    name: String,
    kind: DepKind,
    /// A path dependency on a member of this workspace.
    workspace: bool,
    /// The version requirement; `*` for a path dependency without a version.
    req: String,
}

/// The manifest fields crates.io shows, of a package that is to be published.
#[derive(Debug, Default)]
struct Metadata {
    version: String,
    description: bool,
    license: bool,
    repository: bool,
    readme: bool,
    keywords: bool,
    categories: bool,
}

#[derive(Debug)]
struct Package {
    name: String,
    /// The name of the folder holding `Cargo.toml`.
    folder: String,
    publish_false: bool,
    metadata: Metadata,
    dependencies: Vec<Dependency>,
}

/// Runs the checks against the current workspace.
pub fn tidy() -> Result<()> {
    crate::step("cargo xtask tidy");
    let metadata = crate::cargo_metadata(&["--no-deps"])?;
    let packages = workspace_packages(&metadata)?;
    let mut offences = check(&packages);
    let sources = tracked_sources()?;
    for (path, text) in &sources {
        offences.extend(source_offences(path, text));
    }
    offences.extend(documentation_offences(&metadata));
    if offences.is_empty() {
        eprintln!(
            "tidy: {} workspace crates and {} source files, all rules hold",
            packages.len(),
            sources.len()
        );
        return Ok(());
    }
    eprintln!("tidy: {} problem(s):", offences.len());
    for offence in &offences {
        eprintln!("  - {offence}");
    }
    eprintln!("(the rules live in xtask/src/tidy.rs and docs/ARCHITECTURE.md)");
    Err(format!("{} tidy problem(s)", offences.len()).into())
}

/// `cargo publish --dry-run` for every crate of [`PUBLISHED`] at once (cargo packages them
/// together, each depending on the others' packages): it checks that each packages, that its
/// package builds alone (no file outside the crate, dependencies by version) and that the
/// registry would accept the manifest. It needs the crates.io index; `--allow-dirty` because
/// it checks what is in the work tree, committed or not.
pub fn publish_dry_run() -> Result<()> {
    let mut command = crate::cargo(["publish", "--dry-run", "--allow-dirty"]);
    for name in PUBLISHED {
        command.args(["-p", name]);
    }
    crate::run_step(command)
}

/// A published crate's `src/lib.rs` says `#![deny(missing_docs)]`, and its README exists.
fn documentation_offences(metadata: &Value) -> Vec<String> {
    let mut offences = Vec::new();
    let packages = metadata["packages"].as_array().map(Vec::as_slice);
    for p in packages.unwrap_or_default() {
        let name = p["name"].as_str().unwrap_or_default();
        if !PUBLISHED.contains(&name) {
            continue;
        }
        let Some(dir) = p["manifest_path"]
            .as_str()
            .and_then(|m| Path::new(m).parent())
        else {
            continue;
        };
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap_or_default();
        if !lib.lines().any(|l| l.trim() == "#![deny(missing_docs)]") {
            offences.push(format!(
                "{name}: a published crate's src/lib.rs must say #![deny(missing_docs)]"
            ));
        }
        if let Some(readme) = p["readme"].as_str() {
            if !dir.join(readme).is_file() {
                offences.push(format!("{name}: its readme {readme} is missing"));
            }
        }
    }
    offences
}

/// Every Rust file git tracks, with its text.
fn tracked_sources() -> Result<Vec<(String, String)>> {
    let root = crate::workspace_root();
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z", "--", "*.rs"])
        .current_dir(&root)
        .output()?;
    if !out.status.success() {
        return Err("git ls-files failed".into());
    }
    let mut files = Vec::new();
    for path in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let path = String::from_utf8_lossy(path).into_owned();
        // A file deleted in the work tree but not yet in the index has nothing to check.
        if let Ok(text) = std::fs::read_to_string(root.join(&path)) {
            files.push((path, text));
        }
    }
    Ok(files)
}

/// The source habits of one file; generated code (marked `@generated` on its first line) is
/// exempt from the opening line.
fn source_offences(path: &str, text: &str) -> Vec<String> {
    let mut offences = Vec::new();
    let first = text.lines().next().unwrap_or("");
    if !first.starts_with("//!") && !first.contains("@generated") {
        offences.push(format!(
            "{path}: the first line must be a `//!` comment saying what the file is"
        ));
    }
    // Spelled in two pieces so that this file does not match its own rule.
    let attribute = concat!("#[", "ignore");
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with(attribute) {
            offences.push(format!(
                "{path}:{}: an ignored test; make it run, or remove it",
                n + 1
            ));
        }
    }
    offences
}

/// Extracts the workspace members from `cargo metadata --format-version 1` output.
fn workspace_packages(metadata: &Value) -> Result<Vec<Package>> {
    let members: HashSet<&str> = metadata["workspace_members"]
        .as_array()
        .ok_or("cargo metadata: no workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let raw: Vec<&Value> = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .collect();
    let names: HashSet<&str> = raw.iter().filter_map(|p| p["name"].as_str()).collect();

    let mut packages = Vec::with_capacity(raw.len());
    for p in raw {
        let name = p["name"]
            .as_str()
            .ok_or("cargo metadata: package without name")?;
        let manifest = p["manifest_path"].as_str().unwrap_or_default();
        let folder = Path::new(manifest)
            .parent()
            .and_then(Path::file_name)
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        // `publish = false` shows up as an empty registry list; `null` means "anywhere".
        let publish_false = p["publish"].as_array().is_some_and(Vec::is_empty);
        let filled = |key: &str| match &p[key] {
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => false,
        };
        let metadata = Metadata {
            version: p["version"].as_str().unwrap_or_default().to_string(),
            description: filled("description"),
            license: filled("license") || filled("license_file"),
            repository: filled("repository"),
            readme: filled("readme"),
            keywords: filled("keywords"),
            categories: filled("categories"),
        };
        let dependencies = p["dependencies"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|d| {
                let dep_name = d["name"].as_str()?;
                let kind = match d["kind"].as_str() {
                    Some("dev") => DepKind::Dev,
                    Some("build") => DepKind::Build,
                    _ => DepKind::Normal,
                };
                Some(Dependency {
                    name: dep_name.to_string(),
                    kind,
                    workspace: d["source"].is_null() && names.contains(dep_name),
                    req: d["req"].as_str().unwrap_or("*").to_string(),
                })
            })
            .collect();
        packages.push(Package {
            name: name.to_string(),
            folder,
            publish_false,
            metadata,
            dependencies,
        });
    }
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(packages)
}

/// Returns one line per broken rule; empty when everything holds.
fn check(packages: &[Package]) -> Vec<String> {
    let mut offences = BTreeSet::new();
    for package in packages {
        let name = package.name.as_str();
        if package.folder != package.name {
            offences.insert(format!(
                "{name}: lives in folder `{}`; the folder must be named like the package",
                package.folder
            ));
        }
        let published = PUBLISHED.contains(&name);
        if published {
            offences.extend(publishing_offences(package));
        } else if !package.publish_false {
            offences.insert(format!("{name}: Cargo.toml must say `publish = false`"));
        }
        let rule = RULES.iter().find(|(crate_name, _)| *crate_name == name);
        if rule.is_none() {
            offences.insert(format!(
                "{name}: not in the dependency table; add it to RULES in xtask/src/tidy.rs"
            ));
        }

        for dep in &package.dependencies {
            let dep_name = dep.name.as_str();
            if let Some((_, owners)) = QUARANTINED.iter().find(|(q, _)| *q == dep_name) {
                if !owners.contains(&name) {
                    offences.insert(format!(
                        "{name} -> {dep_name} ({}): only {} may depend on {dep_name} directly",
                        dep.kind.as_str(),
                        owners.join(", ")
                    ));
                }
            }
            if !dep.workspace {
                continue;
            }
            if dep_name == "xtask" {
                offences.insert(format!("{name} -> xtask: nothing may depend on xtask"));
                continue;
            }
            // A published crate's package names its workspace dependencies by version (cargo
            // drops path-only dev-dependencies from the package, so those may stay paths).
            // (Which crates it may depend on at all is RULES': only published ones.)
            if published && dep.kind != DepKind::Dev && dep.req == "*" {
                offences.insert(format!(
                    "{name} -> {dep_name} ({}): give the path dependency a version \
                     (`version = \"0.1.0\"` beside `path`), which its package keeps",
                    dep.kind.as_str()
                ));
            }
            if dep.kind == DepKind::Dev && DEV_DEPS_UNRESTRICTED.contains(&name) {
                continue;
            }
            let Some((_, allowed)) = rule else {
                continue; // Already reported: the crate has no row.
            };
            let ok = match allowed {
                Allowed::AnyLibrary => true,
                Allowed::Only(list) => list.contains(&dep_name),
            };
            if !ok {
                let may = match allowed {
                    Allowed::Only([]) => "no workspace crate".to_string(),
                    Allowed::Only(list) => list.join(", "),
                    Allowed::AnyLibrary => "any workspace crate".to_string(),
                };
                offences.insert(format!(
                    "{name} -> {dep_name} ({}): not allowed; {name} may depend on {may}",
                    dep.kind.as_str()
                ));
            }
        }
    }
    offences.into_iter().collect()
}

/// What a crate of [`PUBLISHED`] misses for crates.io.
fn publishing_offences(package: &Package) -> Vec<String> {
    let name = &package.name;
    let m = &package.metadata;
    let mut offences = Vec::new();
    if package.publish_false {
        offences.push(format!(
            "{name}: a published crate; Cargo.toml must not say `publish = false`"
        ));
    }
    if m.version == "0.0.0" {
        offences.push(format!(
            "{name}: a published crate needs a version of its own (not the workspace's 0.0.0)"
        ));
    }
    let fields = [
        ("description", m.description),
        ("license", m.license),
        ("repository", m.repository),
        ("readme", m.readme),
        ("keywords", m.keywords),
        ("categories", m.categories),
    ];
    for (field, present) in fields {
        if !present {
            offences.push(format!(
                "{name}: a published crate's Cargo.toml needs `{field}`"
            ));
        }
    }
    offences
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A package with every field crates.io wants (which only published crates must have).
    fn package(name: &str, folder: &str, publish: Value, deps: Value) -> Value {
        let mut p = bare_package(name, folder, publish, deps);
        let fields = json!({
            "version": "0.1.0",
            "description": "What it is.",
            "license": "Apache-2.0",
            "repository": "https://example.com/strata",
            "readme": "README.md",
            "keywords": ["kubernetes"],
            "categories": ["encoding"],
        });
        for (k, v) in fields.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    }

    /// A package with none of the fields crates.io wants, at the workspace's version.
    fn bare_package(name: &str, folder: &str, publish: Value, deps: Value) -> Value {
        json!({
            "name": name,
            "version": "0.0.0",
            "id": format!("path+file:///ws/{folder}#0.0.0"),
            "manifest_path": format!("/ws/{folder}/Cargo.toml"),
            "publish": publish,
            "dependencies": deps,
        })
    }

    fn ws_dep(name: &str, kind: Value) -> Value {
        json!({
            "name": name, "source": null, "kind": kind, "req": "^0.1.0",
            "path": format!("/ws/crates/{name}"),
        })
    }

    /// A path dependency without a version.
    fn path_only_dep(name: &str, kind: Value) -> Value {
        json!({
            "name": name, "source": null, "kind": kind, "req": "*",
            "path": format!("/ws/crates/{name}"),
        })
    }

    fn registry_dep(name: &str) -> Value {
        json!({
            "name": name,
            "source": "registry+https://github.com/rust-lang/crates.io-index",
            "kind": null
        })
    }

    fn metadata(packages: Vec<Value>) -> Value {
        let members: Vec<Value> = packages.iter().map(|p| p["id"].clone()).collect();
        json!({ "packages": packages, "workspace_members": members })
    }

    fn offences(packages: Vec<Value>) -> Vec<String> {
        check(&workspace_packages(&metadata(packages)).unwrap())
    }

    #[test]
    fn allowed_edges_pass() {
        let found = offences(vec![
            package(
                "strata-object",
                "crates/strata-object",
                json!(null),
                json!([registry_dep("serde")]),
            ),
            package(
                "strata-store",
                "crates/strata-store",
                json!(null),
                json!([]),
            ),
            package(
                "strata-store-rocksdb",
                "crates/strata-store-rocksdb",
                json!([]),
                json!([ws_dep("strata-store", json!(null)), registry_dep("rocksdb")]),
            ),
            package(
                "strata-http",
                "crates/strata-http",
                json!([]),
                json!([
                    ws_dep("strata-registry", json!(null)),
                    ws_dep("strata-store", json!("dev")),
                    ws_dep("strata-server", json!("dev")),
                    registry_dep("hyper"),
                ]),
            ),
            package(
                "strata-registry",
                "crates/strata-registry",
                json!([]),
                json!([]),
            ),
            package(
                "strata-server",
                "crates/strata-server",
                json!([]),
                json!([
                    ws_dep("strata-store-rocksdb", json!(null)),
                    ws_dep("strata-http", json!(null))
                ]),
            ),
            package("xtask", "xtask", json!([]), json!([registry_dep("hyper")])),
        ]);
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn forbidden_edges_of_every_kind_are_reported() {
        let found = offences(vec![
            package(
                "strata-object",
                "crates/strata-object",
                json!(null),
                json!([]),
            ),
            package(
                "strata-store",
                "crates/strata-store",
                json!(null),
                json!([]),
            ),
            package(
                "strata-registry",
                "crates/strata-registry",
                json!([]),
                json!([]),
            ),
            package(
                "strata-watch",
                "crates/strata-watch",
                json!(null),
                json!([
                    ws_dep("strata-registry", json!(null)),
                    ws_dep("strata-object", json!("dev")),
                    ws_dep("strata-registry", json!("build")),
                ]),
            ),
            package(
                "strata-codec",
                "crates/strata-codec",
                json!(null),
                json!([ws_dep("strata-store", json!("dev"))]),
            ),
            package(
                "strata-http",
                "crates/strata-http",
                json!([]),
                json!([ws_dep("strata-store", json!(null))]),
            ),
        ]);
        assert_eq!(
            found,
            vec![
                "strata-codec -> strata-store (dev): not allowed; strata-codec may depend on \
                 strata-object",
                "strata-http -> strata-store (normal): not allowed; strata-http may depend on \
                 strata-object, strata-codec, strata-registry, strata-auth",
                "strata-watch -> strata-registry (build): not allowed; strata-watch may depend \
                 on strata-object, strata-store",
                "strata-watch -> strata-registry (normal): not allowed; strata-watch may depend \
                 on strata-object, strata-store",
            ]
        );
    }

    #[test]
    fn quarantined_packages_stay_in_their_crates() {
        let found = offences(vec![
            package(
                "strata-store",
                "crates/strata-store",
                json!(null),
                json!([registry_dep("librocksdb-sys")]),
            ),
            package(
                "strata-registry",
                "crates/strata-registry",
                json!([]),
                json!([registry_dep("hyper")]),
            ),
        ]);
        assert_eq!(
            found,
            vec![
                "strata-registry -> hyper (normal): only strata-http, strata-server, \
                 strata-conformance, xtask may depend on hyper directly",
                "strata-store -> librocksdb-sys (normal): only strata-store-rocksdb may depend \
                 on librocksdb-sys directly",
            ]
        );
    }

    #[test]
    fn xtask_depends_on_no_workspace_crate_and_nothing_depends_on_it() {
        let found = offences(vec![
            package(
                "strata-object",
                "crates/strata-object",
                json!(null),
                json!([]),
            ),
            package(
                "xtask",
                "xtask",
                json!([]),
                json!([ws_dep("strata-object", json!(null))]),
            ),
            package(
                "strata-server",
                "crates/strata-server",
                json!([]),
                json!([ws_dep("xtask", json!("dev"))]),
            ),
        ]);
        assert_eq!(
            found,
            vec![
                "strata-server -> xtask: nothing may depend on xtask",
                "xtask -> strata-object (normal): not allowed; xtask may depend on \
                 strata-conformance",
            ]
        );
    }

    #[test]
    fn manifests_must_match_folder_and_refuse_publishing() {
        let found = offences(vec![
            package("strata-object", "crates/object", json!(null), json!([])),
            package(
                "strata-registry",
                "crates/strata-registry",
                json!(null),
                json!([]),
            ),
            package("strata-extra", "crates/strata-extra", json!([]), json!([])),
        ]);
        assert_eq!(
            found,
            vec![
                "strata-extra: not in the dependency table; add it to RULES in xtask/src/tidy.rs",
                "strata-object: lives in folder `object`; the folder must be named like the \
                 package",
                "strata-registry: Cargo.toml must say `publish = false`",
            ]
        );
    }

    #[test]
    fn published_crates_carry_what_crates_io_needs() {
        let found = offences(vec![
            package(
                "strata-object",
                "crates/strata-object",
                json!(null),
                json!([]),
            ),
            bare_package(
                "strata-patch",
                "crates/strata-patch",
                json!([]),
                json!([
                    path_only_dep("strata-object", json!(null)),
                    path_only_dep("strata-object", json!("dev")),
                ]),
            ),
            package(
                "strata-codec",
                "crates/strata-codec",
                json!(null),
                json!([ws_dep("strata-object", json!(null))]),
            ),
        ]);
        assert_eq!(
            found,
            vec![
                "strata-patch -> strata-object (normal): give the path dependency a version \
                 (`version = \"0.1.0\"` beside `path`), which its package keeps",
                "strata-patch: a published crate needs a version of its own (not the \
                 workspace's 0.0.0)",
                "strata-patch: a published crate's Cargo.toml needs `categories`",
                "strata-patch: a published crate's Cargo.toml needs `description`",
                "strata-patch: a published crate's Cargo.toml needs `keywords`",
                "strata-patch: a published crate's Cargo.toml needs `license`",
                "strata-patch: a published crate's Cargo.toml needs `readme`",
                "strata-patch: a published crate's Cargo.toml needs `repository`",
                "strata-patch: a published crate; Cargo.toml must not say `publish = false`",
            ]
        );
    }

    #[test]
    fn registry_packages_named_like_workspace_crates_are_not_workspace_edges() {
        let found = offences(vec![
            package(
                "strata-object",
                "crates/strata-object",
                json!(null),
                json!([]),
            ),
            package(
                "strata-store",
                "crates/strata-store",
                json!(null),
                json!([registry_dep("strata-object")]),
            ),
        ]);
        assert_eq!(found, Vec::<String>::new());
    }

    #[test]
    fn source_files_open_with_a_doc_line_and_run_every_test() {
        assert!(source_offences("a.rs", "//! What this is.\nfn main() {}\n").is_empty());
        assert!(source_offences("g.rs", "// This file is @generated by prost-build.\n").is_empty());
        let missing = source_offences("b.rs", "use std::fmt;\n");
        assert_eq!(missing.len(), 1);
        assert!(
            missing[0].starts_with("b.rs: the first line"),
            "{missing:?}"
        );
        let text = format!(
            "//! Tests.\n#[test]\n{a}]\nfn slow() {{}}\n    {a} = \"flaky\"]\nfn f() {{}}\n",
            a = concat!("#[", "ignore")
        );
        let ignored = source_offences("c.rs", &text);
        assert_eq!(ignored.len(), 2, "{ignored:?}");
        assert!(ignored[0].starts_with("c.rs:3: an ignored test"));
        assert!(ignored[1].starts_with("c.rs:5: "));
        assert!(source_offences("d.rs", "").len() == 1);
    }
}
