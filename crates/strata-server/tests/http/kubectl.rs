//! Real kubectl (1.31 and 1.37, run as subprocesses) against the real binary: create -f, get,
//! replace, patch, label, delete (waiting for the deletion), chunked lists, get -w, wait
//! --for=delete, api-resources, explain, version and namespaces.
//!
//! A missing kubectl binary skips its tests with a loud notice (see
//! /work/shared/tools/install-clients.sh); a present one is asserted on for real.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{run_with_timeout, Finished, TestServer, STARTING_NAMESPACES};
use serde_json::{json, Value};

/// How long one kubectl invocation may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(60);

/// kubectl 1.31 talks JSON everywhere; newer ones send protobuf from their typed clients
/// (`create namespace|serviceaccount`) and use WatchList (a streaming list) for `delete` and
/// `wait`.
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
    /// kubectl of this version with the kubeconfig at `path` (for example a TLS server's
    /// admin.kubeconfig), or `None` when the binary is not installed.
    fn with_kubeconfig(version: Version, path: &std::path::Path) -> Option<Kubectl> {
        let mut k = Self::new_for(version, "http://unused")?;
        k.kubeconfig = path.to_path_buf();
        Some(k)
    }

    /// Sets up the kubectl of this version for the server, or prints a skip notice and returns
    /// `None` when the binary is not installed.
    fn new(version: Version, server: &TestServer) -> Option<Kubectl> {
        Self::new_for(version, &format!("http://{}", server.client_addr()))
    }

    fn new_for(version: Version, server: &str) -> Option<Kubectl> {
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
    server: {server}
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
"
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

    /// The kubectl command with this run's kubeconfig, cache dir and environment.
    fn command(&self, args: &[&str]) -> Command {
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
        cmd
    }

    /// Runs kubectl with these arguments, killing it (and failing the test) after [`TIMEOUT`].
    fn run(&self, args: &[&str]) -> Finished {
        run_with_timeout(&mut self.command(args), self.dir.path(), TIMEOUT)
    }

    /// Starts a long-running kubectl (such as `get -w`) in the background, its output going to
    /// files; it is killed when the returned handle is dropped.
    fn spawn(&self, name: &str, args: &[&str]) -> Background {
        let out = self.path(&format!("{name}.stdout"));
        let err = self.path(&format!("{name}.stderr"));
        let child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.version.binary_name()));
        Background {
            child,
            out,
            err,
            what: format!("{} {args:?}", self.version.binary_name()),
        }
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

/// A kubectl running in the background; killed on drop.
struct Background {
    child: Child,
    out: PathBuf,
    err: PathBuf,
    what: String,
}

impl Background {
    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until its output satisfies `done`, failing the test (with the output) after
    /// [`TIMEOUT`] or if kubectl exits first.
    fn wait_for(&mut self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let out = self.stdout();
            if done(&out) {
                return out;
            }
            let exited = self.child.try_wait().expect("poll kubectl");
            if exited.is_some() || started.elapsed() > TIMEOUT {
                // One last look: the output may have been completed just before the exit.
                let out = self.stdout();
                if done(&out) {
                    return out;
                }
                panic!(
                    "{}: {} ({what})\nstdout:\n{out}\nstderr:\n{}",
                    self.what,
                    match exited {
                        Some(status) => format!("exited ({status}) before showing"),
                        None => format!("did not show within {TIMEOUT:?}"),
                    },
                    std::fs::read_to_string(&self.err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a future to completion on a fresh runtime (the kubectl tests are synchronous).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

/// Whether some line of `text` starts with these columns.
fn has_row(text: &str, cols: &[&str]) -> bool {
    text.lines().any(|l| {
        let got: Vec<&str> = l.split_whitespace().collect();
        got.len() >= cols.len() && got[..cols.len()] == *cols
    })
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
    assert!(has_row(&out, &["default", "robot"]), "{out}");
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
    // With the namespace's default ServiceAccount, there from the server's start.
    let out = k.ok(&["get", "sa", "--chunk-size=2", "-o", "name"]);
    let listed: Vec<&str> = out.lines().collect();
    assert_eq!(
        listed,
        [
            "serviceaccount/default",
            "serviceaccount/extra-0",
            "serviceaccount/extra-1",
            "serviceaccount/extra-2",
            "serviceaccount/extra-3",
            "serviceaccount/robot",
        ]
    );
    let out = k.ok(&["get", "sa", "--chunk-size=2"]);
    assert_eq!(out.lines().count(), 7, "header and 6 rows:\n{out}");

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

    // delete, waiting for the deletion as it does by default (1.37 through a streaming list).
    let out = k.ok(&["delete", "sa", "robot"]);
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

    // kubectl >= 1.32 sends these bodies in protobuf; 1.31 in JSON.
    let out = k.ok(&["create", "namespace", "foo"]);
    assert_eq!(out.trim(), "namespace/foo created");
    let out = k.ok(&["create", "serviceaccount", "bar", "-n", "foo"]);
    assert_eq!(out.trim(), "serviceaccount/bar created");
    let out = k.ok(&["get", "ns", "foo", "-o", "jsonpath={.status.phase}"]);
    assert_eq!(out, "Active");
    let out = k.ok(&["get", "ns", "foo"]);
    assert_eq!(row(&out, "foo")[0], "foo");
    let out = k.ok(&["get", "sa", "-n", "foo"]);
    assert_eq!(row(&out, "bar")[0], "bar");
    let out = k.ok(&["get", "sa", "-A"]);
    assert!(has_row(&out, &["foo", "bar"]), "{out}");

    let r = k.fails(&["get", "ns", "missing"]);
    assert!(r.stderr.contains("NotFound"), "{}", r.stderr);

    // Plain delete waits until the namespace is finalized and gone.
    let out = k.ok(&["delete", "ns", "foo"]);
    assert!(out.starts_with("namespace \"foo\" deleted"), "{out}");
    k.assert_gone("ns", "foo", "/api/v1/namespaces/foo");
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

/// `get sa -w` lists, then follows the watch: creations and deletions show up as they happen.
fn get_watch(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let h = || s.http();
    block_on(h().create_sa("default", "before", Value::Null));
    let mut w = k.spawn("get-w", &["get", "sa", "-w", "--output-watch-events"]);
    w.wait_for("the listed object", |out| {
        has_row(out, &["ADDED", "before"])
    });

    block_on(async {
        let h = h();
        h.create_sa("default", "during-1", Value::Null).await;
        h.create_sa("default", "during-2", Value::Null).await;
        let r = h
            .delete("/api/v1/namespaces/default/serviceaccounts/before")
            .await;
        assert_eq!(r.code(), 200);
        // Another namespace is not watched.
        h.create_namespace("elsewhere").await;
        h.create_sa("elsewhere", "hidden", Value::Null).await;
        h.create_sa("default", "during-3", Value::Null).await;
    });
    let out = w.wait_for("the changes", |out| has_row(out, &["ADDED", "during-3"]));
    for cols in [
        ["ADDED", "during-1"],
        ["ADDED", "during-2"],
        ["DELETED", "before"],
    ] {
        assert!(has_row(&out, &cols), "{cols:?} missing from:\n{out}");
    }
    assert!(!out.contains("hidden"), "{out}");
    drop(w);

    // Plain `get -w` prints the names too.
    let mut w = k.spawn("get-w-plain", &["get", "sa", "-w"]);
    w.wait_for("the listed objects", |out| {
        ["during-1", "during-2", "during-3"]
            .iter()
            .all(|n| row_exists(out, n))
    });
    block_on(h().create_sa("default", "during-4", Value::Null));
    w.wait_for("a new object", |out| row_exists(out, "during-4"));
}

/// Whether some line of `text` starts with `first`.
fn row_exists(text: &str, first: &str) -> bool {
    text.lines()
        .any(|l| l.split_whitespace().next() == Some(first))
}

/// `get sa --chunk-size=2` follows `continue` to the end, in one namespace and across all.
fn chunked_get(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    block_on(async {
        let h = s.http();
        h.create_namespace("chunky").await;
        for i in 0..5 {
            h.create_sa("chunky", &format!("sa-{i}"), Value::Null).await;
        }
        h.create_sa("default", "sa-d", Value::Null).await;
        // Each namespace also has its default ServiceAccount.
        for ns in STARTING_NAMESPACES.into_iter().chain(["chunky"]) {
            h.wait_default_sa(ns).await;
        }
    });
    let out = k.ok(&["get", "sa", "-n", "chunky", "--chunk-size=2", "-o", "name"]);
    let listed: Vec<&str> = out.lines().collect();
    let want: Vec<String> = std::iter::once("serviceaccount/default".to_string())
        .chain((0..5).map(|i| format!("serviceaccount/sa-{i}")))
        .collect();
    assert_eq!(listed, want);
    let out = k.ok(&["get", "sa", "-n", "chunky", "--chunk-size=2"]);
    assert_eq!(out.lines().count(), 7, "header and 6 rows:\n{out}");
    for i in 0..5 {
        assert!(row_exists(&out, &format!("sa-{i}")), "{out}");
    }
    let out = k.ok(&["get", "sa", "-A", "--chunk-size=2"]);
    assert_eq!(
        out.lines().count(),
        12,
        "header, 6 rows and the default ServiceAccounts of the other four namespaces:\n{out}"
    );
    assert!(has_row(&out, &["default", "sa-d"]), "{out}");
    assert!(has_row(&out, &["chunky", "sa-4"]), "{out}");
}

/// `delete` waits for the object to disappear: at once for a plain object, and until its last
/// finalizer is removed for one that has finalizers.
fn delete_waits(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let path = "/api/v1/namespaces/default/serviceaccounts";
    block_on(s.http().create_sa("default", "plain", Value::Null));
    let out = k.ok(&["delete", "sa", "plain"]);
    assert!(out.starts_with("serviceaccount \"plain\" deleted"), "{out}");
    k.assert_gone("sa", "plain", &format!("{path}/plain"));

    block_on(async {
        let r = s
            .http()
            .post_json(
                path,
                &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
            )
            .await;
        assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    });
    let released = std::thread::scope(|scope| {
        let releaser = scope.spawn(|| {
            block_on(async {
                let h = s.http();
                // Once kubectl's DELETE has marked it, give kubectl a moment to start waiting.
                let started = Instant::now();
                loop {
                    let got = h.get_ok(&format!("{path}/held")).await;
                    if got["metadata"]["deletionTimestamp"].is_string() {
                        break;
                    }
                    assert!(
                        started.elapsed() < TIMEOUT,
                        "kubectl never deleted it: {got}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                // Taken before the release: kubectl may see its effect before this thread
                // sees the response.
                let sent = Instant::now();
                let r = h
                    .patch_merge(
                        &format!("{path}/held"),
                        &json!({"metadata": {"finalizers": null}}),
                    )
                    .await;
                assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
                sent
            })
        });
        let out = k.ok(&["delete", "sa", "held"]);
        let finished = Instant::now();
        assert!(out.starts_with("serviceaccount \"held\" deleted"), "{out}");
        let released = releaser.join().expect("releaser thread");
        (released, finished)
    });
    assert!(
        released.1 >= released.0,
        "delete returned before the finalizer was removed"
    );
    k.assert_gone("sa", "held", &format!("{path}/held"));
}

/// `wait --for=delete` returns once another client deletes the object.
fn wait_for_delete(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let path = "/api/v1/namespaces/default/serviceaccounts/doomed";
    block_on(s.http().create_sa("default", "doomed", Value::Null));
    let (deleted_at, finished, out) = std::thread::scope(|scope| {
        let deleter = scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(1));
            // Taken before the DELETE: the watch event may reach kubectl before this thread
            // sees the response.
            let sent = Instant::now();
            let r = block_on(s.http().delete(path));
            assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
            sent
        });
        let out = k.ok(&["wait", "--for=delete", "sa/doomed", "--timeout=30s"]);
        let finished = Instant::now();
        (deleter.join().expect("deleter thread"), finished, out)
    });
    assert!(out.contains("condition met"), "{out}");
    assert!(
        finished >= deleted_at,
        "wait returned before the object was being deleted"
    );
    k.assert_gone("sa", "doomed", path);
}

/// `delete sa --all` and `delete sa -l` (one DELETE per listed object), and `delete ns` of a
/// namespace whose content a finalizer holds: kubectl waits until the namespace is gone.
fn delete_all_and_namespaces_with_content(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    k.ok(&["create", "namespace", "team"]);
    for (name, app) in [("a", "demo"), ("b", "demo"), ("c", "other")] {
        block_on(s.http().create_sa("team", name, json!({"app": app})));
    }
    let out = k.ok(&["delete", "sa", "-l", "app=demo", "-n", "team"]);
    for name in ["a", "b"] {
        assert!(
            out.contains(&format!("serviceaccount \"{name}\" deleted")),
            "{out}"
        );
    }
    // (Leaving out the namespace's default ServiceAccount.)
    let own = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| *l != "serviceaccount/default")
            .map(String::from)
            .collect()
    };
    let out = k.ok(&["get", "sa", "-n", "team", "-o", "name"]);
    assert_eq!(own(&out), ["serviceaccount/c"]);
    block_on(s.http().create_sa("team", "d", Value::Null));
    let out = k.ok(&["delete", "sa", "--all", "-n", "team"]);
    for name in ["c", "d"] {
        assert!(
            out.contains(&format!("serviceaccount \"{name}\" deleted")),
            "{out}"
        );
    }
    let r = k.run(&["get", "sa", "-n", "team", "-o", "name"]);
    assert!(r.success(), "{}", r.stderr);
    assert_eq!(own(&r.stdout), Vec::<String>::new());

    // Content held by a finalizer keeps the namespace Terminating; kubectl waits.
    let path = "/api/v1/namespaces/team/serviceaccounts";
    block_on(async {
        let r = s
            .http()
            .post_json(
                path,
                &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
            )
            .await;
        assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    });
    let (released, finished) = std::thread::scope(|scope| {
        let releaser = scope.spawn(|| {
            block_on(async {
                let h = s.http();
                let started = Instant::now();
                loop {
                    let ns = h.get_ok("/api/v1/namespaces/team").await;
                    let held = h.get_ok(&format!("{path}/held")).await;
                    if ns["status"]["phase"] == "Terminating"
                        && held["metadata"]["deletionTimestamp"].is_string()
                    {
                        break;
                    }
                    assert!(started.elapsed() < TIMEOUT, "never terminating: {ns}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                // Taken before the release: kubectl may see its effect before this thread
                // sees the response.
                let sent = Instant::now();
                let r = h
                    .patch_merge(
                        &format!("{path}/held"),
                        &json!({"metadata": {"finalizers": null}}),
                    )
                    .await;
                assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
                sent
            })
        });
        let out = k.ok(&["delete", "ns", "team"]);
        let finished = Instant::now();
        assert!(out.starts_with("namespace \"team\" deleted"), "{out}");
        (releaser.join().expect("releaser thread"), finished)
    });
    assert!(
        finished >= released,
        "delete ns returned before the namespace's content was gone"
    );
    k.assert_gone("ns", "team", "/api/v1/namespaces/team");
}

#[test]
fn kubectl_1_31_delete_all_and_namespaces_with_content() {
    delete_all_and_namespaces_with_content(Version::V1_31);
}

#[test]
fn kubectl_1_37_delete_all_and_namespaces_with_content() {
    delete_all_and_namespaces_with_content(Version::V1_37);
}

#[test]
fn kubectl_1_31_get_watch() {
    get_watch(Version::V1_31);
}

#[test]
fn kubectl_1_37_get_watch() {
    get_watch(Version::V1_37);
}

#[test]
fn kubectl_1_31_chunked_get() {
    chunked_get(Version::V1_31);
}

#[test]
fn kubectl_1_37_chunked_get() {
    chunked_get(Version::V1_37);
}

#[test]
fn kubectl_1_31_delete_waits() {
    delete_waits(Version::V1_31);
}

#[test]
fn kubectl_1_37_delete_waits() {
    delete_waits(Version::V1_37);
}

#[test]
fn kubectl_1_31_wait_for_delete() {
    wait_for_delete(Version::V1_31);
}

#[test]
fn kubectl_1_37_wait_for_delete() {
    wait_for_delete(Version::V1_37);
}

// Not yet covered here, on purpose: strict field validation (`create -f` with unknown fields
// must fail with "strict decoding error") belongs to the field-validation issue, and kubectl's
// `get` columns (Kubernetes' printer columns) are checked in tables.rs.

const APP_V1: &str = "apiVersion: v1
kind: ServiceAccount
metadata:
  name: app
  labels:
    tier: web
    owner: team-a
secrets:
- name: token-a
imagePullSecrets:
- name: registry-a
";

const APP_V2: &str = "apiVersion: v1
kind: ServiceAccount
metadata:
  name: app
  labels:
    tier: api
secrets:
- name: token-a
- name: token-b
imagePullSecrets:
- name: registry-b
";

/// Client-side apply (three-way strategic merge patches), diff, edit and every `patch --type`.
fn apply_diff_edit_patch(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let v1 = k.manifest("app-v1.yaml", APP_V1);
    let v2 = k.manifest("app-v2.yaml", APP_V2);
    let out = k.ok(&["apply", "-f", &v1]);
    assert_eq!(out.trim(), "serviceaccount/app created");
    let live = k.get_json(&["sa", "app"]);
    assert!(
        live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    // diff shows what v2 would change (exit 1 means "differences found") and changes nothing.
    let r = k.run(&["diff", "-f", &v2]);
    assert_eq!(r.status.code(), Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("tier: api"), "{}", r.stdout);
    assert!(r.stdout.contains("token-b"), "{}", r.stdout);
    assert_eq!(
        k.get_json(&["sa", "app"])["metadata"]["resourceVersion"],
        live["metadata"]["resourceVersion"]
    );

    // A second apply: the label it dropped goes, the one it changed changes, secrets merge by
    // name and imagePullSecrets (atomic) is replaced.
    let out = k.ok(&["apply", "-f", &v2]);
    assert_eq!(out.trim(), "serviceaccount/app configured");
    let now = k.get_json(&["sa", "app"]);
    assert_eq!(now["metadata"]["labels"], json!({"tier": "api"}));
    assert_eq!(
        now["secrets"],
        json!([{"name": "token-a"}, {"name": "token-b"}])
    );
    assert_eq!(now["imagePullSecrets"], json!([{"name": "registry-b"}]));
    let r = k.run(&["diff", "-f", &v2]);
    assert_eq!(r.status.code(), Some(0), "{}\n{}", r.stdout, r.stderr);
    // Applying the same file again changes nothing.
    let out = k.ok(&["apply", "-f", &v2]);
    assert_eq!(out.trim(), "serviceaccount/app unchanged");

    // edit through an editor that rewrites the label.
    let mut cmd = k.command(&["edit", "sa", "app"]);
    cmd.env("KUBE_EDITOR", "sed -i s/tier:\\ api/tier:\\ edited/");
    let r = run_with_timeout(&mut cmd, k.dir.path(), TIMEOUT);
    assert!(r.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("serviceaccount/app edited"),
        "{}",
        r.stdout
    );
    assert_eq!(
        k.get_json(&["sa", "app"])["metadata"]["labels"]["tier"],
        "edited"
    );

    // patch in each type.
    k.ok(&[
        "patch",
        "sa",
        "app",
        "-p",
        r#"{"secrets":[{"name":"token-c"}]}"#,
    ]);
    let now = k.get_json(&["sa", "app"]);
    assert_eq!(
        now["secrets"],
        json!([{"name": "token-c"}, {"name": "token-a"}, {"name": "token-b"}]),
        "strategic is the default and merges on name, patch elements first"
    );
    k.ok(&[
        "patch",
        "sa",
        "app",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/secrets/1"},{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
    ]);
    k.ok(&[
        "patch",
        "sa",
        "app",
        "--type=merge",
        "-p",
        r#"{"automountServiceAccountToken":false}"#,
    ]);
    let now = k.get_json(&["sa", "app"]);
    assert_eq!(
        now["secrets"],
        json!([{"name": "token-c"}, {"name": "token-b"}])
    );
    assert_eq!(now["metadata"]["labels"]["j"], "1");
    assert_eq!(now["automountServiceAccountToken"], false);
    let r = k.fails(&[
        "patch",
        "sa",
        "app",
        "--type=json",
        "-p",
        r#"[{"op":"test","path":"/metadata/labels/j","value":"2"}]"#,
    ]);
    assert!(r.stderr.contains("The request is invalid"), "{}", r.stderr);
}

/// Server-side apply with field managers and conflicts, and field validation levels.
fn server_side_apply_and_validation(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    let v1 = k.manifest("ssa-v1.yaml", &APP_V1.replace("name: app", "name: ssa"));
    let out = k.ok(&["apply", "--server-side", "-f", &v1]);
    assert_eq!(out.trim(), "serviceaccount/ssa serverside-applied");
    let live = k.get_json(&["sa", "ssa", "--show-managed-fields"]);
    let entry = &live["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "kubectl");
    assert_eq!(entry["operation"], "Apply");

    // Another manager changing an owned field conflicts, then forces.
    let other = k.manifest(
        "ssa-other.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ssa\n  labels:\n    tier: batch\n",
    );
    let r = k.fails(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        &other,
    ]);
    assert!(r.stderr.contains("conflict"), "{}", r.stderr);
    assert!(r.stderr.contains(".metadata.labels.tier"), "{}", r.stderr);
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &other,
    ]);
    assert_eq!(
        k.get_json(&["sa", "ssa"])["metadata"]["labels"]["tier"],
        "batch"
    );

    // Server-side dry run of an apply stores nothing.
    let dry = k.manifest(
        "ssa-dry.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ssa-dry\n",
    );
    let out = k.ok(&["apply", "--server-side", "--dry-run=server", "-f", &dry]);
    assert!(out.contains("ssa-dry"), "{out}");
    k.fails(&["get", "sa", "ssa-dry"]);

    // Unknown fields: strict (the default) refuses, warn stores without them.
    let bad = k.manifest(
        "bad.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: bad\nspec:\n  replicas: 1\n",
    );
    let r = k.fails(&["create", "-f", &bad]);
    assert!(r.stderr.contains("unknown field \"spec\""), "{}", r.stderr);
    let r = k.fails(&["create", "--validate=strict", "-f", &bad]);
    assert!(r.stderr.contains("unknown field \"spec\""), "{}", r.stderr);
    let r = k.run(&["create", "--validate=warn", "-f", &bad]);
    assert!(r.success(), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("unknown field \"spec\""), "{}", r.stderr);
    assert!(k.get_json(&["sa", "bad"]).get("spec").is_none());
}

#[test]
fn kubectl_1_31_apply_diff_edit_patch() {
    apply_diff_edit_patch(Version::V1_31);
}

#[test]
fn kubectl_1_37_apply_diff_edit_patch() {
    apply_diff_edit_patch(Version::V1_37);
}

#[test]
fn kubectl_1_31_server_side_apply_and_validation() {
    server_side_apply_and_validation(Version::V1_31);
}

#[test]
fn kubectl_1_37_server_side_apply_and_validation() {
    server_side_apply_and_validation(Version::V1_37);
}

/// `create token` (kubectl 1.37 posts a protobuf TokenRequest, 1.31 JSON) prints a token.
fn create_token(version: Version) {
    let s = TestServer::start();
    let Some(k) = Kubectl::new(version, &s) else {
        return;
    };
    k.ok(&["create", "sa", "tok"]);
    let out = k.ok(&["create", "token", "tok", "--duration=20m", "--audience=a1"]);
    let token = out.trim();
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{out}");
    let r = k.fails(&["create", "token", "missing"]);
    assert!(
        r.stderr.contains("NotFound") || r.stderr.contains("not found"),
        "{}",
        r.stderr
    );
}

#[test]
fn kubectl_1_31_create_token() {
    create_token(Version::V1_31);
}

#[test]
fn kubectl_1_37_create_token() {
    create_token(Version::V1_37);
}

/// The default server: TLS from its own CA and `<data-dir>/admin.kubeconfig`, which kubectl
/// uses as is (verifying the CA). A token made with `create token` is then a credential:
/// kubectl uses it (`--token`), `auth whoami` names the ServiceAccount, and it stops working
/// once the ServiceAccount is deleted.
fn tls_admin_kubeconfig_and_service_account_tokens(version: Version) {
    let dir = tempfile::tempdir().expect("temp dir");
    let s = TestServer::start_tls_in(dir.path(), &[]);
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let Some(k) = Kubectl::with_kubeconfig(version, &kubeconfig) else {
        return;
    };
    let text = std::fs::read_to_string(&kubeconfig).expect("admin.kubeconfig");
    assert!(
        text.contains(&format!("server: https://{}", s.addr)),
        "{text}"
    );
    assert!(text.contains("certificate-authority-data:"), "{text}");
    let out = k.ok(&["get", "sa", "-n", "kube-system", "-o", "name"]);
    assert_eq!(out.trim(), "serviceaccount/default", "{out}");
    let out = k.ok(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(out, "strata-admin");
    k.ok(&["create", "sa", "robot"]);
    // RBAC is on: the ServiceAccount may read what `view` allows in its namespace.
    k.ok(&[
        "create",
        "rolebinding",
        "robot-view",
        "--clusterrole=view",
        "--serviceaccount=default:robot",
    ]);
    let token = k.ok(&["create", "token", "robot"]).trim().to_string();

    let as_robot = |args: &[&str]| {
        let mut all = vec!["--token", token.as_str()];
        all.extend_from_slice(args);
        k.run(&all)
    };
    let r = as_robot(&["get", "sa", "robot", "-o", "name"]);
    assert!(r.success(), "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "serviceaccount/robot");
    let r = as_robot(&["auth", "whoami"]);
    assert!(r.success(), "{}", r.stderr);
    assert!(
        r.stdout.contains("system:serviceaccount:default:robot"),
        "{}",
        r.stdout
    );
    let r = as_robot(&["auth", "can-i", "list", "serviceaccounts"]);
    assert_eq!(r.stdout.trim(), "yes", "{}", r.stderr);
    let r = as_robot(&["auth", "can-i", "delete", "serviceaccounts"]);
    assert_eq!(r.stdout.trim(), "no", "{}", r.stderr);
    assert!(!r.success());
    // The admin asks on others' behalf (impersonation).
    let r = k.run(&[
        "auth",
        "can-i",
        "list",
        "serviceaccounts",
        "--as",
        "system:serviceaccount:default:robot",
    ]);
    assert_eq!(r.stdout.trim(), "yes", "{}", r.stderr);
    let r = k.run(&["auth", "can-i", "list", "serviceaccounts", "--as", "nobody"]);
    assert_eq!(r.stdout.trim(), "no", "{}", r.stderr);
    let r = as_robot(&["delete", "sa", "robot"]);
    assert!(!r.success());
    assert!(
        r.stderr.contains("Forbidden") || r.stderr.contains("forbidden"),
        "{}",
        r.stderr
    );
    // Without credentials: refused.
    let r = k.run(&["--token", "not-a-token", "get", "sa"]);
    assert!(!r.success());
    assert!(
        r.stderr.contains("Unauthorized") || r.stderr.contains("must be logged in"),
        "{}",
        r.stderr
    );
    k.ok(&["delete", "sa", "robot"]);
    let r = as_robot(&["get", "sa"]);
    assert!(!r.success(), "{}", r.stdout);
    assert!(
        r.stderr.contains("Unauthorized") || r.stderr.contains("must be logged in"),
        "{}",
        r.stderr
    );
}

#[test]
fn kubectl_1_31_tls_admin_kubeconfig_and_service_account_tokens() {
    tls_admin_kubeconfig_and_service_account_tokens(Version::V1_31);
}

#[test]
fn kubectl_1_37_tls_admin_kubeconfig_and_service_account_tokens() {
    tls_admin_kubeconfig_and_service_account_tokens(Version::V1_37);
}
