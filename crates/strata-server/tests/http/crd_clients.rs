//! Real clients against CustomResourceDefinitions, end to end: kubectl 1.31 and 1.37 (apply a
//! CRD, wait for it, apply/server-side apply/patch/edit/scale its objects, read their columns,
//! YAML and `explain`, find them by short name and category, delete the CRD), a kube-rs
//! controller (a `#[derive(CustomResource)]` type installed from its generated CRD, reconciled
//! by `kube::runtime::Controller` with `/status` patches and Events while it holds a Lease), and
//! the Python client's DynamicClient on a custom resource. The clients are required: a missing
//! one fails the test. On etcd (STRATA_TEST_STORAGE=etcd) the clients' reads go to one replica
//! and their writes to the other.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as Recorded, EventType, Recorder, Reporter};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Client, Config, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::common::{run_with_timeout, Finished, TestServer};

/// How long one client invocation or one awaited state may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// kubectl

/// The kubectl binaries the tests run.
#[derive(Clone, Copy, Debug)]
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

/// One kubectl binary set up against one server: its own HOME, cache dir and kubeconfig.
struct Kubectl {
    bin: PathBuf,
    name: &'static str,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// kubectl of this version for the server (plain HTTP through [`TestServer::client_addr`]).
    /// Panics when the binary is not installed: these tests must run it.
    fn new(version: Version, server: &TestServer) -> Kubectl {
        let name = version.binary_name();
        let mut dirs = vec![PathBuf::from("/usr/local/bin")];
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        let bin = dirs
            .into_iter()
            .map(|d| d.join(name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!("{name} is not installed: run /work/shared/tools/install-clients.sh")
            });
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let config = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: strata
  cluster:
    server: http://{}
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
",
            server.client_addr()
        );
        std::fs::write(&kubeconfig, config).expect("write kubeconfig");
        Kubectl {
            bin,
            name,
            dir,
            kubeconfig,
        }
    }

    /// Writes a file into the temp dir and returns its path as a string.
    fn manifest(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write manifest");
        p.to_str().expect("utf-8 path").to_string()
    }

    /// The kubectl command with this run's kubeconfig, cache dir and a clean environment.
    fn command(&self, args: &[&str]) -> Command {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home dir");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home);
        cmd
    }

    fn run(&self, args: &[&str]) -> Finished {
        run_with_timeout(&mut self.command(args), self.dir.path(), TIMEOUT)
    }

    /// Runs kubectl, asserts exit 0 and returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args);
        assert!(
            r.success(),
            "{} {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
            self.name,
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
            self.name,
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
}

/// The whitespace-separated columns of each line.
fn columns(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// The columns of the line that starts with `first`.
fn row<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    columns(text)
        .into_iter()
        .find(|cols| cols.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row starting with {first:?} in:\n{text}"))
}

/// A CRD as users write one: descriptions for `explain`, defaults, an enum, a bound, a list map,
/// the status and scale sub-resources, printer columns (one only at `-o wide`), a short name and
/// the `all` category.
const WIDGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        description: A Widget is a small machine that serves on some ports.
        type: object
        properties:
          spec:
            description: What the widget should look like.
            type: object
            properties:
              replicas:
                description: How many copies of the widget run.
                type: integer
                minimum: 0
                default: 1
              mode:
                description: Whether the widget favours speed or care.
                type: string
                enum: [fast, safe]
                default: safe
              ports:
                description: The ports the widget listens on, one per name.
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name:
                      type: string
                    port:
                      type: integer
          status:
            description: What the widget looks like now.
            type: object
            properties:
              replicas:
                type: integer
              selector:
                type: string
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Mode
      type: string
      jsonPath: .spec.mode
      priority: 1
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
";

const WIDGET_X_V1: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: x
  labels:
    tier: web
spec:
  replicas: 2
  mode: fast
  ports:
  - name: http
    port: 80
";

/// The second version of x: a label changed, the mode dropped (so it goes back to its default),
/// the replicas and the port changed.
const WIDGET_X_V2: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: x
  labels:
    tier: api
spec:
  replicas: 4
  ports:
  - name: http
    port: 8080
";

const WIDGET_Z: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: z
spec:
  replicas: 1
  ports:
  - name: http
    port: 80
";

/// Another field manager's view of z: one more port, which the list map merges by name.
const WIDGET_Z_METRICS: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: z
spec:
  ports:
  - name: metrics
    port: 9100
";

/// The same manager taking the replicas too (keeping its port, which it would otherwise drop).
const WIDGET_Z_REPLICAS: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: z
spec:
  replicas: 7
  ports:
  - name: metrics
    port: 9100
";

fn kubectl_lifecycle(version: Version) {
    let s = TestServer::start();
    let k = Kubectl::new(version, &s);

    // The CRD, and kubectl waiting for the server to establish it.
    let crd = k.manifest("crd.yaml", WIDGET_CRD);
    let out = k.ok(&["apply", "-f", &crd]);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"
    );
    let out = k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com condition met"
    );

    // No wait: once Established, every replica serves the type (on etcd, kubectl's discovery
    // reads go to one replica and its writes to the other).
    let v1 = k.manifest("x-v1.yaml", WIDGET_X_V1);

    // Client-side apply: kubectl has no Go type for a Widget, so it sends JSON merge patches
    // computed from the last-applied annotation.
    let out = k.ok(&["apply", "-f", &v1]);
    assert_eq!(out.trim(), "widget.example.com/x created");
    let x = k.get_json(&["widget", "x"]);
    assert_eq!(x["spec"]["mode"], "fast", "{x}");
    assert_eq!(x["metadata"]["generation"], 1, "{x}");
    assert!(
        x["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string(),
        "{x}"
    );
    let v2 = k.manifest("x-v2.yaml", WIDGET_X_V2);
    let out = k.ok(&["apply", "-f", &v2]);
    assert_eq!(out.trim(), "widget.example.com/x configured");
    let x = k.get_json(&["widget", "x"]);
    assert_eq!(x["metadata"]["labels"], json!({"tier": "api"}), "{x}");
    assert_eq!(x["spec"]["replicas"], 4, "{x}");
    assert_eq!(
        x["spec"]["mode"], "safe",
        "the dropped mode is removed, then defaulted: {x}"
    );
    assert_eq!(x["spec"]["ports"], json!([{"name": "http", "port": 8080}]));
    assert_eq!(x["metadata"]["generation"], 2, "{x}");
    let out = k.ok(&["apply", "-f", &v2]);
    assert_eq!(out.trim(), "widget.example.com/x unchanged");

    // Server-side apply: field managers, the list map merged by key, conflicts.
    let z = k.manifest("z.yaml", WIDGET_Z);
    let out = k.ok(&["apply", "--server-side", "-f", &z]);
    assert_eq!(out.trim(), "widget.example.com/z serverside-applied");
    let live = k.get_json(&["widget", "z", "--show-managed-fields"]);
    let managers: Vec<(&str, &str)> = live["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("no managedFields: {live}"))
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or(""),
                m["operation"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(managers, [("kubectl", "Apply")], "{live}");
    assert_eq!(live["spec"]["mode"], "safe", "defaulted: {live}");
    let metrics = k.manifest("z-metrics.yaml", WIDGET_Z_METRICS);
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=metrics",
        "-f",
        &metrics,
    ]);
    let live = k.get_json(&["widget", "z"]);
    assert_eq!(
        live["spec"]["ports"],
        json!([{"name": "http", "port": 80}, {"name": "metrics", "port": 9100}]),
        "{live}"
    );
    let replicas = k.manifest("z-replicas.yaml", WIDGET_Z_REPLICAS);
    let r = k.fails(&[
        "apply",
        "--server-side",
        "--field-manager=metrics",
        "-f",
        &replicas,
    ]);
    assert!(
        r.stderr.contains("conflict") && r.stderr.contains(".spec.replicas"),
        "{}",
        r.stderr
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=metrics",
        "--force-conflicts",
        "-f",
        &replicas,
    ]);
    assert_eq!(k.get_json(&["widget", "z"])["spec"]["replicas"], 7);

    // patch --type=merge, and a value the schema refuses.
    let out = k.ok(&[
        "patch",
        "widget",
        "x",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"patched":"yes"}},"spec":{"replicas":5}}"#,
    ]);
    assert_eq!(out.trim(), "widget.example.com/x patched");
    let x = k.get_json(&["widget", "x"]);
    assert_eq!(x["metadata"]["labels"]["patched"], "yes", "{x}");
    assert_eq!(x["spec"]["replicas"], 5, "{x}");
    let r = k.fails(&[
        "patch",
        "widget",
        "x",
        "--type=merge",
        "-p",
        r#"{"spec":{"mode":"reckless"}}"#,
    ]);
    assert!(
        r.stderr.contains("spec.mode") && r.stderr.contains("Unsupported value"),
        "{}",
        r.stderr
    );

    // edit through an editor that rewrites the mode.
    let mut cmd = k.command(&["edit", "widget", "x"]);
    cmd.env("KUBE_EDITOR", "sed -i s/mode:\\ safe/mode:\\ fast/");
    let r = run_with_timeout(&mut cmd, k.dir.path(), TIMEOUT);
    assert!(r.success(), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stdout.trim(),
        "widget.example.com/x edited",
        "{}",
        r.stderr
    );
    assert_eq!(k.get_json(&["widget", "x"])["spec"]["mode"], "fast");

    // scale through the scale sub-resource, with and without a precondition.
    let out = k.ok(&["scale", "widget", "x", "--replicas=3"]);
    assert_eq!(out.trim(), "widget.example.com/x scaled");
    let out = k.ok(&["get", "widget", "x", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(out, "3");
    let r = k.fails(&[
        "scale",
        "widget",
        "x",
        "--current-replicas=2",
        "--replicas=1",
    ]);
    assert!(
        r.stderr.contains("Expected replicas to be 2, was 3"),
        "{}",
        r.stderr
    );

    // get: the CRD's columns, the priority-1 one only at -o wide.
    let out = k.ok(&["get", "widgets"]);
    assert_eq!(columns(&out)[0], ["NAME", "REPLICAS", "AGE"], "{out}");
    assert_eq!(row(&out, "x")[..2], ["x", "3"], "{out}");
    assert_eq!(row(&out, "z")[..2], ["z", "7"], "{out}");
    assert_eq!(row(&out, "x").len(), 3, "{out}");
    let out = k.ok(&["get", "widgets", "-o", "wide"]);
    assert_eq!(
        columns(&out)[0],
        ["NAME", "REPLICAS", "MODE", "AGE"],
        "{out}"
    );
    assert_eq!(row(&out, "x")[..3], ["x", "3", "fast"], "{out}");
    assert_eq!(row(&out, "z")[..3], ["z", "7", "safe"], "{out}");
    let out = k.ok(&["get", "widgets", "-o", "yaml"]);
    for part in [
        "kind: List",
        "apiVersion: example.com/v1",
        "kind: Widget",
        "name: x",
        "name: z",
        "mode: fast",
        "replicas: 3",
        "name: metrics",
    ] {
        assert!(out.contains(part), "{part:?} missing from:\n{out}");
    }

    // By short name, and in the `all` category.
    let out = k.ok(&["get", "wd"]);
    assert_eq!(columns(&out)[0], ["NAME", "REPLICAS", "AGE"], "{out}");
    assert_eq!(row(&out, "x")[..2], ["x", "3"], "{out}");
    // (kubectl names the kind only when several types answer, as with pods and services on a
    // cluster; here widgets are the category's only members, so ask for it.)
    let out = k.ok(&["get", "all", "--show-kind"]);
    assert_eq!(
        row(&out, "widget.example.com/x")[..2],
        ["widget.example.com/x", "3"],
        "{out}"
    );
    assert_eq!(row(&out, "widget.example.com/z")[1], "7", "{out}");

    // explain reads the schema from /openapi/v3: fields, types and descriptions.
    let out = k.ok(&["explain", "widget.spec"]);
    for part in [
        "KIND:",
        "Widget",
        "VERSION:",
        "v1",
        "What the widget should look like.",
        "How many copies of the widget run.",
        "Whether the widget favours speed or care.",
        "The ports the widget listens on, one per name.",
    ] {
        assert!(out.contains(part), "{part:?} missing from:\n{out}");
    }
    assert_eq!(
        row(&out, "replicas")[..2],
        ["replicas", "<integer>"],
        "{out}"
    );
    assert_eq!(row(&out, "mode")[..2], ["mode", "<string>"], "{out}");
    assert_eq!(row(&out, "ports")[..2], ["ports", "<[]Object>"], "{out}");
    let out = k.ok(&["explain", "widget"]);
    assert!(
        out.contains("A Widget is a small machine that serves on some ports."),
        "{out}"
    );
    assert_eq!(row(&out, "spec")[..2], ["spec", "<Object>"], "{out}");

    // Deleting the CRD deletes its objects, then the type.
    let out = k.ok(&["delete", "crd", "widgets.example.com"]);
    assert!(
        out.starts_with(
            "customresourcedefinition.apiextensions.k8s.io \"widgets.example.com\" deleted"
        ),
        "{out}"
    );
    let r = k.fails(&["get", "crd", "widgets.example.com"]);
    assert!(r.stderr.contains("NotFound"), "{}", r.stderr);
    // The endpoints go right after the CRD (on every replica). kubectl's discovery cache still
    // names widgets until something refreshes it (a GET would then answer 404, as on
    // Kubernetes); `api-resources` does, and shows the group gone.
    let started = Instant::now();
    loop {
        let out = k.ok(&["api-resources", "--api-group=example.com", "-o", "name"]);
        if out.trim().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still served 10 s after the CRD went:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = k.fails(&["get", "widgets"]);
    assert!(
        r.stderr
            .contains("the server doesn't have a resource type \"widgets\""),
        "{}",
        r.stderr
    );
}

#[test]
fn kubectl_1_31_crd_lifecycle() {
    kubectl_lifecycle(Version::V1_31);
}

#[test]
fn kubectl_1_37_crd_lifecycle() {
    kubectl_lifecycle(Version::V1_37);
}

// ---------------------------------------------------------------------------------------------
// kube-rs: a derived custom resource, a Controller, Events and leader election over a Lease

/// A gizmo: a square of some size and colour; its controller reports the area in the status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
// Clippy takes the two `printcolumn(type_ = ...)` arguments for a repeated attribute.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "toys.example.com",
    version = "v1",
    kind = "Gizmo",
    namespaced,
    status = "GizmoStatus",
    shortname = "gz",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(name = "Area", type_ = "integer", json_path = ".status.area")
)]
#[serde(rename_all = "camelCase")]
pub struct GizmoSpec {
    /// The length of a side.
    size: i64,
    /// The colour it is painted.
    colour: String,
}

/// What the controller observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GizmoStatus {
    /// The generation of the spec the status describes.
    observed_generation: Option<i64>,
    /// The square of the size.
    area: Option<i64>,
    /// The contender that held the lease when it reconciled.
    reconciled_by: Option<String>,
}

/// The controller's name in Events and its field manager.
const CONTROLLER: &str = "gizmo-controller";
const LEASE: &str = "gizmo-controller-leader";

/// A client for the server, as `kube::Config::new` builds one for a kubeconfig with
/// `server: http://ADDR` and namespace `default`.
fn kube_client(s: &TestServer) -> Client {
    let url = format!("http://{}", s.client_addr())
        .parse()
        .expect("cluster url");
    let mut config = Config::new(url);
    config.default_namespace = "default".to_string();
    config.read_timeout = Some(Duration::from_secs(30));
    Client::try_from(config).expect("build the kube client")
}

/// Polls `check` every 50 ms until it returns a value; panics after [`TIMEOUT`].
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "{what}: not within {TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One contender for a Lease, electing a leader the way client-go's leaderelection package
/// does (kube 5 has no helper): create the Lease if it is absent; take it over when its
/// holder has not renewed it for a lease duration, as measured on this contender's own clock
/// from the moment it last saw the record change; renew it while holding it. Every write is an
/// update with the read resourceVersion, so of two contenders racing only one wins.
struct Contender {
    leases: Api<Lease>,
    identity: String,
    duration: Duration,
    /// The record last seen, and when it was first seen.
    observed: Option<(LeaseSpec, Instant)>,
}

impl Contender {
    fn new(client: Client, identity: &str, duration: Duration) -> Contender {
        Contender {
            leases: Api::default_namespaced(client),
            identity: identity.to_string(),
            duration,
            observed: None,
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    /// One round of acquire-or-renew: whether this contender holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let seconds = self.duration.as_secs() as i32;
        let Some(current) = self.leases.get_opt(LEASE).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(Self::now()),
                    renew_time: Some(Self::now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.leases.create(&PostParams::default(), &lease).await {
                Ok(made) => {
                    self.observed = Some((made.spec.unwrap_or_default(), Instant::now()));
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let record = current.spec.clone().unwrap_or_default();
        if self.observed.as_ref().map(|(r, _)| r) != Some(&record) {
            self.observed = Some((record.clone(), Instant::now()));
        }
        let seen_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, t)| *t);
        let holder = record.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        let duration = record
            .lease_duration_seconds
            .map_or(self.duration, |s| Duration::from_secs(s.max(0) as u64));
        if !holder.is_empty() && !mine && seen_at.elapsed() < duration {
            return Ok(false);
        }
        let mut next = record.clone();
        if !mine {
            next.holder_identity = Some(self.identity.clone());
            next.acquire_time = Some(Self::now());
            next.lease_transitions = Some(record.lease_transitions.unwrap_or(0) + 1);
        }
        next.lease_duration_seconds = Some(seconds);
        next.renew_time = Some(Self::now());
        let mut updated = current;
        updated.spec = Some(next);
        match self
            .leases
            .replace(LEASE, &PostParams::default(), &updated)
            .await
        {
            Ok(written) => {
                self.observed = Some((written.spec.unwrap_or_default(), Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What the reconciler needs.
struct Context {
    client: Client,
    recorder: Recorder,
    identity: String,
}

#[derive(Debug)]
struct ReconcileError(kube::Error);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reconcile: {}", self.0)
    }
}

impl std::error::Error for ReconcileError {}

/// Brings a gizmo's status up to date with its spec (a server-side apply to `/status`) and
/// records an Event saying so; a gizmo already up to date is left alone.
async fn reconcile(gizmo: Arc<Gizmo>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let generation = gizmo.metadata.generation;
    let area = gizmo.spec.size * gizmo.spec.size;
    let status = gizmo.status.clone().unwrap_or_default();
    if status.observed_generation == generation && status.area == Some(area) {
        return Ok(Action::await_change());
    }
    let namespace = gizmo.namespace().unwrap_or_default();
    let gizmos: Api<Gizmo> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = json!({
        "apiVersion": Gizmo::api_version(&()),
        "kind": Gizmo::kind(&()),
        "status": {"observedGeneration": generation, "area": area, "reconciledBy": ctx.identity},
    });
    gizmos
        .patch_status(
            &gizmo.name_any(),
            &PatchParams::apply(CONTROLLER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(ReconcileError)?;
    ctx.recorder
        .publish(
            &Recorded {
                type_: EventType::Normal,
                reason: "Reconciled".to_string(),
                note: Some(format!("area {area} for generation {generation:?}")),
                action: "UpdateStatus".to_string(),
                secondary: None,
            },
            &gizmo.object_ref(&()),
        )
        .await
        .map_err(ReconcileError)?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Gizmo>, _: &ReconcileError, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_millis(500))
}

fn gizmo(name: &str, size: i64) -> Gizmo {
    Gizmo::new(
        name,
        GizmoSpec {
            size,
            colour: "red".to_string(),
        },
    )
}

/// Whether the controller's status describes the gizmo's current spec.
fn reconciled(g: &Gizmo) -> bool {
    let status = g.status.clone().unwrap_or_default();
    status.observed_generation == g.metadata.generation
        && status.area == Some(g.spec.size * g.spec.size)
        && status.reconciled_by.as_deref() == Some("contender-a")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_controller_reconciles_a_derived_custom_resource_under_a_lease() {
    let s = TestServer::start();
    let client = kube_client(&s);

    // Install the CRD generated from the Rust type and wait until it is Established and served.
    let crd = Gizmo::crd();
    let crd_name = crd.name_any();
    assert_eq!(crd_name, "gizmos.toys.example.com");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("the generated CRD is refused: {e:?}"));
    tokio::time::timeout(
        TIMEOUT,
        await_condition(crds.clone(), &crd_name, conditions::is_crd_established()),
    )
    .await
    .expect("Established in time")
    .expect("await the condition");
    let gizmos: Api<Gizmo> = Api::default_namespaced(client.clone());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // Served on every replica the moment it is Established: the first calls succeed.
    gizmos
        .list(&ListParams::default())
        .await
        .expect("gizmos listed at once");
    gizmos
        .create(&dry_run, &gizmo("probe", 1))
        .await
        .expect("a gizmo created at once");

    // One gizmo exists before the controller starts.
    gizmos
        .create(&PostParams::default(), &gizmo("before", 3))
        .await
        .expect("create before");

    // Contender a takes the lease and then renews it; the controller runs while it leads.
    let lease_duration = Duration::from_secs(6);
    let mut a = Contender::new(client.clone(), "contender-a", lease_duration);
    assert!(
        a.try_acquire_or_renew().await.expect("first acquire"),
        "nobody held the lease, so a takes it"
    );
    let renewing = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match a.try_acquire_or_renew().await {
                Ok(true) => {}
                Ok(false) => panic!("contender a lost the lease while renewing it"),
                Err(e) => eprintln!("contender a: renewing failed: {e}"),
            }
        }
    });
    // Contender b keeps trying; it must not get the lease while a renews it.
    let b_tries = Arc::new(AtomicUsize::new(0));
    let b_leads = Arc::new(AtomicBool::new(false));
    let contending = {
        let (tries, leads) = (b_tries.clone(), b_leads.clone());
        let mut b = Contender::new(client.clone(), "contender-b", lease_duration);
        tokio::spawn(async move {
            loop {
                let won = b.try_acquire_or_renew().await;
                tries.fetch_add(1, Ordering::SeqCst);
                if matches!(won, Ok(true)) {
                    leads.store(true, Ordering::SeqCst);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };

    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: CONTROLLER.to_string(),
                instance: Some("contender-a".to_string()),
            },
        ),
        identity: "contender-a".to_string(),
    });
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let controller = {
        let errors = errors.clone();
        Controller::new(gizmos.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx)
            .for_each(move |result| {
                if let Err(e) = result {
                    errors.lock().unwrap().push(format!("{e:?}"));
                }
                futures::future::ready(())
            })
    };
    let controller = tokio::spawn(controller);

    // The gizmo made before the start, one made after it, and a spec change all get a status.
    gizmos
        .create(&PostParams::default(), &gizmo("after", 4))
        .await
        .expect("create after");
    for name in ["before", "after"] {
        let got = eventually(&format!("{name} reconciled"), async || {
            gizmos.get(name).await.ok().filter(reconciled)
        })
        .await;
        assert_eq!(got.metadata.generation, Some(1), "{got:?}");
    }
    let patched = gizmos
        .patch(
            "before",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .expect("patch before");
    assert_eq!(patched.metadata.generation, Some(2));
    let got = eventually("before reconciled again", async || {
        gizmos.get("before").await.ok().filter(reconciled)
    })
    .await;
    let status = got.status.clone().unwrap_or_default();
    assert_eq!(
        (status.observed_generation, status.area),
        (Some(2), Some(25))
    );
    // The status writes went through /status under the controller's field manager.
    let managers: Vec<(String, Option<String>)> = got
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.clone().unwrap_or_default(), m.subresource.clone()))
        .collect();
    assert!(
        managers.contains(&(CONTROLLER.to_string(), Some("status".to_string()))),
        "{managers:?} {}",
        s.http()
            .get("/apis/toys.example.com/v1/namespaces/default/gizmos/before")
            .await
            .json()
    );

    // A status apply for an object that is gone (a reconcile racing a deletion) is 404: it
    // does not bring the object back.
    let status = json!({"apiVersion": "toys.example.com/v1", "kind": "Gizmo",
                        "status": {"area": 1}});
    match gizmos
        .patch_status(
            "gone",
            &PatchParams::apply(CONTROLLER).force(),
            &Patch::Apply(&status),
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404, "{s:?}"),
        other => panic!("a status apply to a missing object: {other:?}"),
    }
    assert!(gizmos.get_opt("gone").await.expect("get gone").is_none());

    // Events name the objects, through events.k8s.io and core/v1 alike.
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let recorded = eventually("the events", async || {
        let list = events.list(&ListParams::default()).await.ok()?;
        let about = |name: &str| {
            list.items.iter().any(|e| {
                let regarding = e.regarding.clone().unwrap_or_default();
                regarding.name.as_deref() == Some(name)
                    && regarding.kind.as_deref() == Some("Gizmo")
                    && regarding.api_version.as_deref() == Some("toys.example.com/v1")
                    && e.reason.as_deref() == Some("Reconciled")
                    && e.reporting_controller.as_deref() == Some(CONTROLLER)
                    && e.reporting_instance.as_deref() == Some("contender-a")
            })
        };
        (about("before") && about("after")).then_some(list.items)
    })
    .await;
    assert!(
        recorded
            .iter()
            .any(|e| e.note.as_deref() == Some("area 16 for generation Some(1)")),
        "{recorded:?}"
    );
    // The recorder reports the second reconcile of `before` as a series on the first event
    // (a merge patch of events.k8s.io/v1 Event).
    eventually("the series", async || {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("before")
                && e.series.as_ref().is_some_and(|s| s.count >= 2)
        })
    })
    .await;
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let core = core
        .list(&ListParams::default())
        .await
        .expect("core events");
    assert!(
        core.items.iter().any(|e| {
            e.involved_object.name.as_deref() == Some("before")
                && e.involved_object.kind.as_deref() == Some("Gizmo")
                && e.reason.as_deref() == Some("Reconciled")
        }),
        "{:?}",
        core.items
    );

    // The Lease names its holder, and b never had it while a renewed.
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let lease = leases.get(LEASE).await.expect("the lease");
    let spec = lease.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("contender-a"));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(spec.renew_time.is_some() && spec.acquire_time.is_some());
    eventually("b has tried a few times", async || {
        (b_tries.load(Ordering::SeqCst) >= 5).then_some(())
    })
    .await;
    assert!(
        !b_leads.load(Ordering::SeqCst),
        "b took the lease while a renewed it"
    );
    assert!(
        errors.lock().unwrap().is_empty(),
        "the controller saw errors: {:?}",
        errors.lock().unwrap()
    );

    // a stops (as a crashed leader would, without releasing); b takes over once the lease
    // expires.
    controller.abort();
    renewing.abort();
    tokio::time::timeout(TIMEOUT, contending)
        .await
        .expect("b takes over within the timeout")
        .expect("contender b");
    assert!(b_leads.load(Ordering::SeqCst));
    let lease = leases.get(LEASE).await.expect("the lease");
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("contender-b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

// ---------------------------------------------------------------------------------------------
// The Python client's DynamicClient

/// Installs a CRD through the DynamicClient, waits for it to be Established, then works on its
/// custom resources by kind: create (defaults filled in), get, list (with a label selector and
/// across namespaces), merge patch, the status and scale sub-resources, a refused value,
/// replace with a stale resourceVersion, delete, and NotFound afterwards.
const PYTHON_DYNAMIC: &str = r#"
import sys
import time

from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import (
    ConflictError,
    NotFoundError,
    ResourceNotFoundError,
    UnprocessibleEntityError,
)

cfg = client.Configuration()
cfg.host = "http://" + sys.argv[1]
dyn = dynamic.DynamicClient(client.ApiClient(cfg))

crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
crds.create(body={
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "shortNames": ["gd"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "size": {"type": "integer", "minimum": 0},
                    "replicas": {"type": "integer", "default": 1},
                    "colour": {"type": "string", "default": "grey"},
                }},
                "status": {"type": "object", "properties": {
                    "phase": {"type": "string"},
                    "replicas": {"type": "integer"},
                }},
            }}},
            "subresources": {
                "status": {},
                "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"},
            },
        }],
    },
})
for _ in range(400):
    crd = crds.get(name="gadgets.example.com")
    conditions = {c.type: c.status for c in (crd.status.conditions or [])}
    if conditions.get("Established") == "True":
        break
    time.sleep(0.05)
else:
    raise AssertionError("never Established: %s" % crd.status)

# The client's discovery cache predates the type: resources.get refreshes it. Every replica
# serves the type the moment it is Established, so the first attempt succeeds.
gadgets = dyn.resources.get(api_version="example.com/v1", kind="Gadget")
gadgets.create(body={"apiVersion": "example.com/v1", "kind": "Gadget",
                     "metadata": {"name": "probe"}}, namespace="default", dry_run="All")
assert gadgets.namespaced, gadgets
assert gadgets.name == "gadgets", gadgets.name
assert gadgets.short_names == ["gd"], gadgets.short_names
assert sorted(gadgets.subresources) == ["scale", "status"], gadgets.subresources


def gadget(name, size, **labels):
    return {"apiVersion": "example.com/v1", "kind": "Gadget",
            "metadata": {"name": name, "labels": labels}, "spec": {"size": size}}


made = gadgets.create(body=gadget("g1", 3, team="a"), namespace="default")
assert made.kind == "Gadget", made
assert made.metadata.name == "g1" and made.metadata.namespace == "default", made
assert made.spec.colour == "grey" and made.spec.replicas == 1, made.spec
assert made.metadata.generation == 1, made.metadata
gadgets.create(body=gadget("g2", 4, team="b"), namespace="default")

got = gadgets.get(name="g1", namespace="default")
assert got.metadata.uid == made.metadata.uid, got
listed = gadgets.get(namespace="default")
assert listed.kind == "GadgetList", listed.kind
assert [i.metadata.name for i in listed.items] == ["g1", "g2"], listed.items
selected = gadgets.get(namespace="default", label_selector="team=b")
assert [i.metadata.name for i in selected.items] == ["g2"], selected.items
everywhere = gadgets.get()
assert sorted((i.metadata.namespace, i.metadata.name) for i in everywhere.items) == [
    ("default", "g1"), ("default", "g2")], everywhere.items

patched = gadgets.patch(name="g1", namespace="default", body={"spec": {"size": 5}},
                        content_type="application/merge-patch+json")
assert patched.spec.size == 5 and patched.spec.colour == "grey", patched.spec
assert patched.metadata.generation == 2, patched.metadata

# Sub-resources: status changes only the status, scale the replicas.
status = gadgets.status.patch(name="g1", namespace="default",
                              body={"status": {"phase": "Ready", "replicas": 1}},
                              content_type="application/merge-patch+json")
assert status.status.phase == "Ready", status
assert status.metadata.generation == 2, status.metadata
scale = gadgets.scale.get(name="g1", namespace="default")
assert scale.kind == "Scale" and scale.spec.replicas == 1 and scale.status.replicas == 1, scale
scale = gadgets.scale.patch(name="g1", namespace="default", body={"spec": {"replicas": 3}},
                            content_type="application/merge-patch+json")
assert scale.spec.replicas == 3, scale
assert gadgets.get(name="g1", namespace="default").spec.replicas == 3

# The schema refuses a negative size, with Kubernetes' cause.
try:
    gadgets.patch(name="g1", namespace="default", body={"spec": {"size": -1}},
                  content_type="application/merge-patch+json")
    raise AssertionError("a negative size was accepted")
except UnprocessibleEntityError as e:
    assert e.status == 422, e
    body = e.body.decode() if isinstance(e.body, bytes) else e.body
    assert "spec.size" in body and "greater than or equal to 0" in body, body

# Replace with the live resourceVersion, then again with the stale one.
live = gadgets.get(name="g2", namespace="default").to_dict()
live["spec"]["colour"] = "blue"
replaced = gadgets.replace(body=live, namespace="default")
assert replaced.spec.colour == "blue", replaced
try:
    gadgets.replace(body=live, namespace="default")
    raise AssertionError("a stale replace was accepted")
except ConflictError as e:
    assert e.status == 409, e

# Delete; afterwards the object is gone.
deleted = gadgets.delete(name="g1", namespace="default")
# kube-apiserver answers a custom resource's immediate deletion with a Status (details: name,
# group, kind = the plural, uid); Strata answers with the object, as for ServiceAccounts.
assert deleted.kind in ("Gadget", "Status"), deleted
try:
    gadgets.get(name="g1", namespace="default")
    raise AssertionError("g1 is still there")
except NotFoundError as e:
    assert e.status == 404, e
assert [i.metadata.name for i in gadgets.get(namespace="default").items] == ["g2"]

print("OK")
"#;

#[test]
fn python_dynamic_client_on_a_custom_resource() {
    let s = TestServer::start();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("dynamic.py");
    std::fs::write(&script, PYTHON_DYNAMIC).expect("write the script");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg(s.client_addr())
        // DynamicClient caches discovery in $TMPDIR; keep it private to this run.
        .env("TMPDIR", tmp.path())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let run = run_with_timeout(&mut cmd, tmp.path(), Duration::from_secs(120));
    assert!(
        run.success() && run.stdout.lines().last() == Some("OK"),
        "the Python script failed ({}); python3 with the `kubernetes` package is required \
         (/work/shared/tools/install-clients.sh)\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
}
