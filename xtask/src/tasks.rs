//! `cargo xtask test` and `cargo xtask run`: the two commands a newcomer types. CI runs the
//! same `test`; nothing here is CI-only.

use std::path::Path;
use std::process::Command;

use crate::{cargo, prereq, run_step, step, tidy, workspace_root, Result};

/// The kubectl the client-compatibility tests look for first.
const KUBECTL_PINNED: &str = "/usr/local/bin/kubectl-1.31";
const KUBECTL_PINNED_VERSION: (&str, &str) = ("1", "31");

/// Prerequisites, tidy, rustfmt, clippy, then every test in the workspace.
pub fn test() -> Result<()> {
    prereq::ensure()?;
    prereq::ensure_test_tools()?;
    tidy::tidy()?;
    run_step(cargo(["fmt", "--all", "--", "--check"]))?;
    run_step(cargo([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    install_clients();
    if has_nextest() {
        run_step(cargo(["nextest", "run", "--workspace", "--no-tests=warn"]))?;
        // nextest does not run doctests.
        run_step(cargo(["test", "--workspace", "--doc"]))?;
    } else {
        eprintln!("(cargo-nextest not installed; using cargo test)");
        run_step(cargo(["test", "--workspace"]))?;
    }
    eprintln!("\nall checks passed");
    Ok(())
}

/// Builds and starts the server in the foreground; `extra` goes to `strata serve`.
pub fn run(extra: &[String]) -> Result<()> {
    prereq::ensure()?;
    let mut command = cargo([
        "run",
        "--release",
        "-p",
        "strata-server",
        "--bin",
        "strata",
        "--",
        "serve",
        "--listen",
        "127.0.0.1:6443",
        "--data-dir",
        "./strata-data",
    ]);
    command.args(extra);
    run_step(command)
}

fn has_nextest() -> bool {
    cargo(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs the pinned kubectl (and friends) with the shared script when it is missing. Only
/// warns on failure: the kubectl tests skip themselves, loudly, when kubectl is absent.
fn install_clients() {
    let script = workspace_root().join("../shared/tools/install-clients.sh");
    if kubectl_version(Path::new(KUBECTL_PINNED))
        .as_ref()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        == Some(KUBECTL_PINNED_VERSION)
    {
        return;
    }
    if !script.is_file() {
        eprintln!(
            "warning: {KUBECTL_PINNED} is missing and {} does not exist; kubectl tests may be \
             skipped",
            script.display()
        );
        return;
    }
    let mut command = Command::new("bash");
    command.arg(&script).current_dir(workspace_root());
    step(&format!(
        "bash {} (kubectl 1.31 for the client tests)",
        script.display()
    ));
    match command.status() {
        Ok(status) if status.success() => {}
        Ok(status) => {
            eprintln!("warning: install-clients.sh failed ({status}); kubectl tests may be skipped")
        }
        Err(e) => eprintln!(
            "warning: could not run install-clients.sh ({e}); kubectl tests may be skipped"
        ),
    }
}

/// The (major, minor) client version of a kubectl binary, if it runs.
fn kubectl_version(path: &Path) -> Option<(String, String)> {
    let output = Command::new(path)
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let version = &json["clientVersion"];
    Some((
        version["major"].as_str()?.to_string(),
        version["minor"].as_str()?.trim_end_matches('+').to_string(),
    ))
}
