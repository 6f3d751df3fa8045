//! Real kubectl (1.31 and 1.37, run as subprocesses) against the real binary: create -f, get,
//! replace, patch, label, delete, chunked lists, api-resources, explain, version and namespaces.
//!
//! A missing kubectl binary skips its tests with a loud notice (see
//! /work/shared/tools/install-clients.sh); a present one is asserted on for real.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{run_with_timeout, Finished, TestServer};
use serde_json::Value;

/// How long one kubectl invocation may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(60);

/// kubectl 1.31 talks JSON everywhere; newer ones send protobuf from their typed clients
/// (`create namespace|serviceaccount`) and use WatchList for `delete --wait`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Version {
    V1_31,
    V1_37,
}

impl Version {
    fn binary_name(self) -> &'static str {
        match self {
            Version::V1_31 => "kubectl-1.31",
            Version::V1_37 => "kubectl-1.37",
        }
    }

    /// Neither protobuf request bodies nor WatchList are served yet, so 1.37 uses `create -f`
    /// and `delete --wait=false`.
    fn modern(self) -> bool {
        self == Version::V1_37
    }
}

/// Finds the binary in /usr/local/bin or on PATH.
fn find_binary(name: &str) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// One kubectl binary set up against one server: its own HOME, cache dir and kubeconfig.
struct Kubectl {
    bin: PathBuf,
    version: Version,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// Sets up the kubectl of this version for the server, or prints a skip notice and returns
    /// `None` when the binary is not installed.
    fn new(version: Version, server: &TestServer) -> Option<Kubectl> {
        let Some(bin) = find_binary(version.binary_name()) else {
            eprintln!(
                "\n!!!!!!!! SKIPPED: {} is not installed (run /work/shared/tools/install-clients.sh); \
                 this kubectl test asserts nothing !!!!!!!!\n",
                version.binary_name()
            );
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let config = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: strata
  cluster:
    server: http://{addr}
contexts:
- name: strata
  context:
    cluster: strata
    namespace: default
    user: nobody
users:
- name: nobody
  user: {{}}
current-context: strata
preferences: {{}}
",
            addr = server.addr
        );
        std::fs::write(&kubeconfig, config).expect("write kubeconfig");
        Some(Kubectl {
            bin,
            version,
            dir,
            kubeconfig,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a manifest into the temp dir and returns its path as a string.
    fn manifest(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).expect("write manifest");
        p.to_str().expect("utf-8 path").to_string()
    }

    /// Runs kubectl with these arguments, killing it (and failing the test) after [`TIMEOUT`].
    fn run(&self, args: &[&str]) -> Finished {
        let home = self.path("home");
        std::fs::create_dir_all(&home).expect("home dir");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.path("cache"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("KUBECONFIG", &self.kubeconfig);
        run_with_timeout(&mut cmd, self.dir.path(), TIMEOUT)
    }

    /// Runs kubectl, asserts exit 0 and returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert!(
            r.success(),
            "{} {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
            self.version.binary_name(),
            r.status,
            r.stdout,
            r.stderr
        );
        r.stdout
    }

    /// Runs kubectl and asserts that it fails; returns the outcome.
    fn fails(&self, args: &[&str]) -> Finished {
        let r = self.run(args);
        assert!(
            !r.success(),
            "{} {args:?} should have failed\nstdout:\n{}\nstderr:\n{}",
            self.version.binary_name(),
            r.stdout,
            r.stderr
        );
        r
    }

    /// `get ... -o json`, decoded.
    fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// Asserts that the object is gone: `get` reports NotFound, and so does a raw GET.
    fn assert_gone(&self, resource: &str, name: &str, raw_path: &str) {
        let r = self.fails(&["get", resource, name]);
        assert!(
            r.stderr.contains("NotFound") && r.stderr.contains(&format!("\"{name}\" not found")),
            "{}",
            r.stderr
        );
        let r = self.fails(&["get", "--raw", raw_path]);
        assert!(r.stderr.contains("NotFound"), "{}", r.stderr);
    }
}

/// The columns of the first line of `text` that contains `first`.
fn row<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row starting with {first:?} in:\n{text}"))
}

const SA_ROBOT: &str = "apiVersion: v1
kind: ServiceAccount
metadata:
  name: robot
  labels:
    app: demo
";

fn service_account_lifecycle(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let robot_path = "/api/v1/namespaces/default/serviceaccounts/robot";

    // create -f with the default --validate=strict (needs OpenAPI v3 with fieldValidation).
    let file = k.manifest("sa.yaml", SA_ROBOT);
    let out = k.ok(&["create", "-f", &file]);
    assert_eq!(out.trim(), "serviceaccount/robot created");
    // A second create conflicts.
    let r = k.fails(&["create", "-f", &file]);
    assert!(r.stderr.contains("AlreadyExists"), "{}", r.stderr);
    // Server-side dry run stores nothing.
    let ghost = k.manifest("ghost.yaml", &SA_ROBOT.replace("robot", "ghost"));
    let out = k.ok(&["create", "-f", &ghost, "--dry-run=server"]);
    assert!(
        out.contains("serviceaccount/ghost created (server dry run)"),
        "{out}"
    );
    k.fails(&["get", "sa", "ghost"]);

    // get: Table output.
    let out = k.ok(&["get", "sa"]);
    assert!(
        out.lines().next().unwrap_or("").starts_with("NAME"),
        "{out}"
    );
    assert_eq!(row(&out, "robot")[0], "robot");
    let out = k.ok(&["get", "sa", "robot"]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(row(&out, "robot")[0], "robot");
    let out = k.ok(&["get", "serviceaccount", "robot", "-o", "name"]);
    assert_eq!(out.trim(), "serviceaccount/robot");

    // Across namespaces: the NAMESPACE column comes from the rows' objects.
    let out = k.ok(&["get", "sa", "-A"]);
    assert!(out.starts_with("NAMESPACE"), "{out}");
    assert_eq!(row(&out, "default")[..2], ["default", "robot"]);
    let out = k.ok(&["get", "sa", "-A", "-o", "yaml"]);
    for part in [
        "kind: List",
        "kind: ServiceAccount",
        "name: robot",
        "namespace: default",
        "app: demo",
    ] {
        assert!(out.contains(part), "{part:?} missing from:\n{out}");
    }

    // Chunked lists follow `continue`.
    let many: String = (0..4)
        .map(|i| {
            format!("---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: extra-{i}\n")
        })
        .collect();
    let many = k.manifest("many.yaml", &many);
    let out = k.ok(&["create", "-f", &many]);
    assert_eq!(out.lines().count(), 4, "{out}");
    let out = k.ok(&["get", "sa", "--chunk-size=2", "-o", "name"]);
    let listed: Vec<&str> = out.lines().collect();
    assert_eq!(
        listed,
        [
            "serviceaccount/extra-0",
            "serviceaccount/extra-1",
            "serviceaccount/extra-2",
            "serviceaccount/extra-3",
            "serviceaccount/robot",
        ]
    );
    let out = k.ok(&["get", "sa", "--chunk-size=2"]);
    assert_eq!(out.lines().count(), 6, "header and 5 rows:\n{out}");

    // replace -f with the live resourceVersion.
    let live = k.get_json(&["sa", "robot"]);
    assert_eq!(live["kind"], "ServiceAccount");
    let rv = live["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string();
    let replacement = format!(
        "apiVersion: v1
kind: ServiceAccount
metadata:
  name: robot
  namespace: default
  resourceVersion: \"{rv}\"
  labels:
    app: demo
    stage: replaced
automountServiceAccountToken: false
"
    );
    let replacement = k.manifest("sa-replace.yaml", &replacement);
    let out = k.ok(&["replace", "-f", &replacement]);
    assert_eq!(out.trim(), "serviceaccount/robot replaced");
    let now = k.get_json(&["sa", "robot"]);
    assert_eq!(now["automountServiceAccountToken"], false);
    assert_eq!(now["metadata"]["labels"]["stage"], "replaced");
    assert_eq!(now["metadata"]["uid"], live["metadata"]["uid"]);
    assert_ne!(now["metadata"]["resourceVersion"], rv.as_str());
    // The same file again carries a stale resourceVersion: Conflict.
    let r = k.fails(&["replace", "-f", &replacement]);
    assert!(r.stderr.contains("Conflict"), "{}", r.stderr);

    // patch --type=merge, and label (also a merge patch).
    let out = k.ok(&[
        "patch",
        "sa",
        "robot",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"a":"b"}}}"#,
    ]);
    assert_eq!(out.trim(), "serviceaccount/robot patched");
    let out = k.ok(&["get", "sa", "robot", "-o", "jsonpath={.metadata.labels.a}"]);
    assert_eq!(out, "b");
    let out = k.ok(&["label", "sa", "robot", "tier=gold"]);
    assert_eq!(out.trim(), "serviceaccount/robot labeled");
    let labels = &k.get_json(&["sa", "robot"])["metadata"]["labels"];
    assert_eq!(labels["tier"], "gold");
    assert_eq!(labels["a"], "b");
    assert_eq!(labels["stage"], "replaced");
    // Patching a missing object fails with NotFound.
    let r = k.fails(&["patch", "sa", "nobody", "--type=merge", "-p", "{}"]);
    assert!(r.stderr.contains("NotFound"), "{}", r.stderr);

    // delete.
    let out = if version.modern() {
        k.ok(&["delete", "sa", "robot", "--wait=false"])
    } else {
        k.ok(&["delete", "sa", "robot"])
    };
    assert!(out.starts_with("serviceaccount \"robot\" deleted"), "{out}");
    k.assert_gone("sa", "robot", robot_path);
    let r = k.fails(&["delete", "sa", "robot", "--wait=false"]);
    assert!(r.stderr.contains("NotFound"), "{}", r.stderr);
    // The name can be used again.
    let out = k.ok(&["create", "-f", &file]);
    assert_eq!(out.trim(), "serviceaccount/robot created");
}

fn discovery_and_explain(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let out = k.ok(&["api-resources"]);
    let header = out.lines().next().unwrap_or("");
    assert!(
        header.starts_with("NAME") && header.contains("SHORTNAMES"),
        "{out}"
    );
    assert_eq!(
        row(&out, "serviceaccounts"),
        ["serviceaccounts", "sa", "v1", "true", "ServiceAccount"]
    );
    assert_eq!(
        row(&out, "namespaces"),
        ["namespaces", "ns", "v1", "false", "Namespace"]
    );
    let out = k.ok(&["api-resources", "--namespaced=true", "-o", "name"]);
    assert!(out.lines().any(|l| l == "serviceaccounts"), "{out}");
    assert!(!out.lines().any(|l| l == "namespaces"), "{out}");
    let out = k.ok(&["api-versions"]);
    assert!(out.lines().any(|l| l == "v1"), "{out}");

    let out = k.ok(&["explain", "serviceaccount"]);
    assert!(out.contains("ServiceAccount"), "{out}");
    assert!(out.contains("secrets"), "{out}");
    assert!(out.contains("automountServiceAccountToken"), "{out}");
    let out = k.ok(&["explain", "sa.secrets"]);
    assert!(out.contains("secrets"), "{out}");
    let out = k.ok(&["explain", "namespace.spec"]);
    assert!(out.contains("finalizers"), "{out}");

    let out = k.ok(&["version"]);
    assert!(out.contains("Client Version:"), "{out}");
    assert!(out.contains("Server Version:"), "{out}");
}

fn namespaces(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let out = k.ok(&["get", "ns"]);
    assert!(out.starts_with("NAME"), "{out}");
    for ns in ["default", "kube-public", "kube-system"] {
        assert_eq!(row(&out, ns)[0], ns);
    }

    if version.modern() {
        // kubectl >= 1.32 sends protobuf for `create namespace`, which is not served yet.
        let file = k.manifest(
            "ns.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: foo\n",
        );
        let out = k.ok(&["create", "-f", &file]);
        assert_eq!(out.trim(), "namespace/foo created");
        let sa = k.manifest(
            "bar.yaml",
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: bar\n",
        );
        let out = k.ok(&["create", "-n", "foo", "-f", &sa]);
        assert_eq!(out.trim(), "serviceaccount/bar created");
    } else {
        let out = k.ok(&["create", "namespace", "foo"]);
        assert_eq!(out.trim(), "namespace/foo created");
        let out = k.ok(&["create", "serviceaccount", "bar", "-n", "foo"]);
        assert_eq!(out.trim(), "serviceaccount/bar created");
    }
    let out = k.ok(&["get", "ns", "foo", "-o", "jsonpath={.status.phase}"]);
    assert_eq!(out, "Active");
    let out = k.ok(&["get", "ns", "foo"]);
    assert_eq!(row(&out, "foo")[0], "foo");
    let out = k.ok(&["get", "sa", "-n", "foo"]);
    assert_eq!(row(&out, "bar")[0], "bar");
    let out = k.ok(&["get", "sa", "-A"]);
    assert_eq!(row(&out, "foo")[..2], ["foo", "bar"]);

    let r = k.fails(&["get", "ns", "missing"]);
    assert!(r.stderr.contains("NotFound"), "{}", r.stderr);

    if version.modern() {
        let out = k.ok(&["delete", "ns", "foo", "--wait=false"]);
        assert!(out.starts_with("namespace \"foo\" deleted"), "{out}");
        // Kubernetes may keep it Terminating for a while; it must be gone or on its way out.
        let r = k.run(&[
            "get",
            "ns",
            "foo",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ]);
        if r.success() {
            assert!(
                !r.stdout.is_empty(),
                "namespace foo is neither gone nor terminating"
            );
        } else {
            assert!(r.stderr.contains("NotFound"), "{}", r.stderr);
        }
    } else {
        // Plain delete waits until GET answers 404.
        let out = k.ok(&["delete", "ns", "foo"]);
        assert!(out.starts_with("namespace \"foo\" deleted"), "{out}");
        k.assert_gone("ns", "foo", "/api/v1/namespaces/foo");
    }
    let r = k.fails(&["delete", "ns", "default", "--wait=false"]);
    assert!(r.stderr.contains("Forbidden"), "{}", r.stderr);
}

#[test]
fn kubectl_1_31_service_account_lifecycle() {
    service_account_lifecycle(Version::V1_31);
}

#[test]
fn kubectl_1_37_service_account_lifecycle() {
    service_account_lifecycle(Version::V1_37);
}

#[test]
fn kubectl_1_31_discovery_and_explain() {
    discovery_and_explain(Version::V1_31);
}

#[test]
fn kubectl_1_37_discovery_and_explain() {
    discovery_and_explain(Version::V1_37);
}

#[test]
fn kubectl_1_31_namespaces() {
    namespaces(Version::V1_31);
}

#[test]
fn kubectl_1_37_namespaces() {
    namespaces(Version::V1_37);
}

// Not yet covered here, on purpose: strict field validation (`create -f` with unknown fields
// must fail with "strict decoding error") belongs to the field-validation issue, and kubectl's
// `get` columns follow spec §2.6 (Name, Created At), which the HTTP tests check.
