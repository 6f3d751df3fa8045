//! `cargo xtask test` and `cargo xtask run`: the two commands a newcomer types. CI runs the
//! same `test`; nothing here is CI-only.

use std::path::Path;
use std::process::Command;

use crate::{cargo, prereq, run_step, step, tidy, workspace_root, Result};

/// The kubectl the client-compatibility tests look for first.
const KUBECTL_PINNED: &str = "/usr/local/bin/kubectl-1.31";
const KUBECTL_PINNED_VERSION: (&str, &str) = ("1", "31");

/// The HTTP tests that choose their backend themselves (an etcd or cluster of their own,
/// RocksDB and etcd for moving data, memory): a nextest filter. They start etcd in the main run
/// and would only repeat themselves in the etcd pass.
const OWN_BACKEND: &str =
    "binary(http) & (test(/^etcd/) | test(/^snapshot::/) | test(/^shared_pki::/))";

/// The tests that start `/usr/bin/etcd` in the main run: the etcd engine's own and
/// [`OWN_BACKEND`].
fn needs_etcd() -> String {
    format!("package(strata-store-etcd) | ({OWN_BACKEND})")
}

/// The second pass: every other HTTP integration test, against two replicas over a throwaway
/// etcd (`STRATA_TEST_STORAGE=etcd`; see `crates/strata-server/tests/http/common`).
fn etcd_pass() -> String {
    format!("binary(http) & not ({OWN_BACKEND})")
}

/// Whether this is CI (`CI=true`, as `.ci/run` is run), where nothing may be skipped.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Prerequisites, tidy, rustfmt, clippy, then every test in the workspace, then the HTTP
/// integration tests again on etcd. Without etcd (and outside CI) the tests that need it are
/// left out, and listed at the end with how to install etcd.
pub fn test() -> Result<()> {
    prereq::ensure()?;
    let etcd = match prereq::ensure_test_tools() {
        Ok(()) => true,
        Err(e) if in_ci() => return Err(e),
        Err(e) => {
            eprintln!("warning: {e}\nThe tests that need etcd will not run (see the end).");
            false
        }
    };
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
    // The crates other projects use package and build on their own (needs the crates.io index).
    tidy::publish_dry_run()?;
    install_clients();
    if has_nextest() {
        let mut main = cargo(["nextest", "run", "--workspace", "--no-tests=warn"]);
        if !etcd {
            main.args(["-E", &format!("not ({})", needs_etcd())]);
        }
        run_step(main)?;
        if etcd {
            eprintln!("\n(the HTTP integration tests again, on two replicas over etcd)");
            let mut on_etcd = cargo(["nextest", "run", "--workspace", "-E", &etcd_pass()]);
            on_etcd.env("STRATA_TEST_STORAGE", "etcd");
            run_step(on_etcd)?;
        }
        // nextest does not run doctests.
        run_step(cargo(["test", "--workspace", "--doc"]))?;
    } else {
        eprintln!("(cargo-nextest not installed; using cargo test)");
        run_step(cargo(["test", "--workspace"]))?;
        if etcd {
            eprintln!("\n(the HTTP integration tests again, on two replicas over etcd)");
            let mut on_etcd = cargo(["test", "--workspace", "--test", "http"]);
            on_etcd.env("STRATA_TEST_STORAGE", "etcd");
            run_step(on_etcd)?;
        }
    }
    if !etcd {
        eprintln!(
            "\nwarning: {} is missing, so these tests did NOT run:\n  \
             - the tests that start etcd (nextest filter: {})\n  \
             - the HTTP integration tests on etcd (STRATA_TEST_STORAGE=etcd cargo nextest run \
             --workspace -E '{}')\n\
             Install etcd with `apt-get install -y etcd-server` (Debian/Ubuntu), then run \
             `cargo xtask test` again. In CI (CI=true) a missing etcd is an error.",
            prereq::ETCD,
            needs_etcd(),
            etcd_pass()
        );
        eprintln!("\nall other checks passed");
        return Ok(());
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
