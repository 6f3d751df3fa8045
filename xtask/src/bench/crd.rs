//! The custom-resource benchmark of `cargo xtask bench --only crd`: one server, one
//! CustomResourceDefinition with a realistic schema (nested objects, list maps with keys, enums,
//! patterns, bounds, defaults and three CEL rules), and 64 clients creating and getting its
//! objects beside ServiceAccounts of about the same size, in the same run. It measures the
//! custom resource's rates as a share of the ServiceAccount's, and the server's CPU per request.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};

use super::procfs;
use super::{latency, start_strata, WARMUP};
use crate::load::{self, Outcome, Scenario, Workload};
use crate::{step, Result};

/// The section of `docs/benchmarks.md` this part rewrites.
pub const SECTION: &str = "Custom resources";
/// Concurrent clients of every measurement.
pub const CLIENTS: usize = 64;
/// Each scenario runs this many times, the four of them in turn, so that drift in the machine's
/// load (other processes, the store growing) falls on all of them alike. The rounds share the
/// measured time of two (see [`round_window`]): more, shorter rounds follow the drift closer.
pub const ROUNDS: usize = 4;

/// One round's measured window, given the `--seconds` of the run: together the rounds measure
/// each scenario for twice that.
pub fn round_window(measure: Duration) -> Duration {
    measure * 2 / ROUNDS as u32
}
/// Custom-resource creates per second, as a share of ServiceAccount creates per second.
const CREATE_TARGET: f64 = 0.70;
/// Custom-resource gets per second, as a share of ServiceAccount gets per second.
const GET_TARGET: f64 = 0.90;
/// How long the CRD may take to be established and served.
const ESTABLISH_LIMIT: Duration = Duration::from_secs(30);

const NAMESPACE: &str = "default";
const GROUP: &str = "bench.strata.dev";
const PLURAL: &str = "webapps";
const KIND: &str = "WebApp";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// The object every get scenario reads; created before the first measurement.
const GET_NAME: &str = "bench-get";

const SA_CREATE: &str = "create ServiceAccount";
const CR_CREATE: &str = "create WebApp (custom resource)";
const SA_GET: &str = "get ServiceAccount";
const CR_GET: &str = "get WebApp (custom resource)";

fn sa_collection() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts")
}

fn cr_collection() -> String {
    format!("/apis/{GROUP}/v1/namespaces/{NAMESPACE}/{PLURAL}")
}

/// The CustomResourceDefinition: a namespaced `WebApp` with one version, the status
/// sub-resource and printer columns. Its schema has nested objects, two list maps (one with a
/// two-part key), int-or-string quantities, a string map, enums, patterns, bounds, defaults at
/// several levels and three CEL rules: replicas ordered, ports in range, image pinned.
pub fn crd() -> Value {
    let quantity = json!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": "^[0-9]+(\\.[0-9]+)?(m|Ki|Mi|Gi|Ti)?$"
    });
    let resources = json!({
        "type": "object",
        "properties": {"cpu": quantity, "memory": quantity}
    });
    let spec = json!({
        "type": "object",
        "required": ["image", "ports"],
        "x-kubernetes-validations": [
            {"rule": "self.minReplicas <= self.maxReplicas",
             "message": "minReplicas must not exceed maxReplicas",
             "fieldPath": ".minReplicas"},
            {"rule": "self.ports.all(p, p.port > 0 && p.port < 65536)",
             "message": "every port must be between 1 and 65535"}
        ],
        "properties": {
            "image": {
                "type": "string",
                "maxLength": 256,
                "pattern": "^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]+)?$",
                "x-kubernetes-validations": [
                    {"rule": "!self.endsWith(':latest')",
                     "message": "the image must be pinned to a version, not :latest"}
                ]
            },
            "minReplicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 1000, "default": 1},
            "maxReplicas": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 1000, "default": 10},
            "tier": {"type": "string", "enum": ["frontend", "backend", "batch"], "default": "backend"},
            "ports": {
                "type": "array",
                "minItems": 1,
                "maxItems": 16,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {
                    "type": "object",
                    "required": ["port"],
                    "properties": {
                        "name": {"type": "string", "maxLength": 15, "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$"},
                        "port": {"type": "integer", "format": "int32"},
                        "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"], "default": "TCP"}
                    }
                }
            },
            "env": {
                "type": "array",
                "maxItems": 64,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                        "value": {"type": "string", "maxLength": 4096}
                    }
                }
            },
            "resources": {
                "type": "object",
                "properties": {"requests": resources, "limits": resources}
            },
            "selector": {
                "type": "object",
                "maxProperties": 16,
                "additionalProperties": {"type": "string", "maxLength": 63}
            },
            "rollout": {
                "type": "object",
                "default": {},
                "properties": {
                    "strategy": {"type": "string", "enum": ["RollingUpdate", "Recreate"], "default": "RollingUpdate"},
                    "maxSurge": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "maxUnavailable": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "pausedUntil": {"type": "string", "format": "date-time", "nullable": true}
                }
            },
            "owner": {"type": "string", "format": "email", "maxLength": 128}
        }
    });
    let status = json!({
        "type": "object",
        "properties": {
            "readyReplicas": {"type": "integer", "format": "int32"},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": {
                    "type": "object",
                    "required": ["type", "status"],
                    "properties": {
                        "type": {"type": "string"},
                        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                        "reason": {"type": "string"},
                        "message": {"type": "string"},
                        "lastTransitionTime": {"type": "string", "format": "date-time"}
                    }
                }
            }
        }
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "webapp", "kind": KIND, "shortNames": ["wa"]},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": spec, "status": status}
                }},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Tier", "type": "string", "jsonPath": ".spec.tier"},
                    {"name": "Max", "type": "integer", "jsonPath": ".spec.maxReplicas"},
                    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"}
                ]
            }]
        }
    })
}

/// The metadata both kinds of object carry: a name, four labels and two annotations.
fn metadata(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {
            "app.kubernetes.io/name": "shop",
            "app.kubernetes.io/component": "frontend",
            "app.kubernetes.io/part-of": "storefront",
            "team": "payments"
        },
        "annotations": {
            "bench.strata.dev/owner": "shop-team@example.com",
            "bench.strata.dev/runbook": "https://runbooks.example.com/storefront/frontend"
        }
    })
}

/// A ServiceAccount as a workload's: labels, annotations (a cloud role among them), token and
/// image pull secrets; about the size of [`web_app`].
pub fn service_account(name: &str) -> Value {
    let mut metadata = metadata(name);
    metadata["annotations"]["eks.amazonaws.com/role-arn"] =
        json!("arn:aws:iam::123456789012:role/storefront-frontend-production-access");
    metadata["annotations"]["bench.strata.dev/description"] = json!(
        "Identity of the storefront frontend: reads the catalogue, writes carts and sessions, \
         publishes checkout events to the order queue."
    );
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata,
        "secrets": [
            {"name": "shop-frontend-token"},
            {"name": "shop-frontend-tls"},
            {"name": "shop-frontend-oauth"}
        ],
        "imagePullSecrets": [{"name": "registry-example-com"}, {"name": "registry-mirror"}],
        "automountServiceAccountToken": false
    })
}

/// A `WebApp` that passes every rule; the schema defaults two ports' protocols and the rollout
/// strategy.
pub fn web_app(name: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": KIND,
        "metadata": metadata(name),
        "spec": {
            "image": "registry.example.com/shop/frontend:v1.24.3",
            "minReplicas": 2,
            "maxReplicas": 12,
            "tier": "frontend",
            "ports": [
                {"name": "http", "port": 8080},
                {"name": "metrics", "port": 9090},
                {"name": "dns", "port": 5353, "protocol": "UDP"}
            ],
            "env": [
                {"name": "MODE", "value": "production"},
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "CACHE_URL", "value": "redis://cache.shop.svc:6379/0"},
                {"name": "FEATURE_FLAGS", "value": "checkout-v2,search-beta"}
            ],
            "resources": {
                "requests": {"cpu": "250m", "memory": "256Mi"},
                "limits": {"cpu": 2, "memory": "1Gi"}
            },
            "selector": {"app": "shop", "component": "frontend"},
            "rollout": {"maxSurge": "25%", "maxUnavailable": 0},
            "owner": "shop-team@example.com"
        }
    })
}

/// A create body with [`load::NAME_SLOT`] for the name.
fn template(object: fn(&str) -> Value) -> Arc<str> {
    Arc::from(object(load::NAME_SLOT).to_string())
}

/// One scenario: what its clients send and expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    SaCreate,
    CrCreate,
    SaGet,
    CrGet,
}

const CASES: [Case; 4] = [Case::SaCreate, Case::CrCreate, Case::SaGet, Case::CrGet];

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::SaCreate => SA_CREATE,
            Case::CrCreate => CR_CREATE,
            Case::SaGet => SA_GET,
            Case::CrGet => CR_GET,
        }
    }

    fn workload(self) -> Workload {
        match self {
            Case::SaCreate => Workload::Create {
                path: sa_collection(),
                body: template(service_account),
            },
            Case::CrCreate => Workload::Create {
                path: cr_collection(),
                body: template(web_app),
            },
            Case::SaGet => Workload::Get {
                path: format!("{}/{GET_NAME}", sa_collection()),
            },
            Case::CrGet => Workload::Get {
                path: format!("{}/{GET_NAME}", cr_collection()),
            },
        }
    }

    fn expect(self) -> StatusCode {
        match self {
            Case::SaCreate | Case::CrCreate => StatusCode::CREATED,
            Case::SaGet | Case::CrGet => StatusCode::OK,
        }
    }
}

/// What one scenario measured over all its rounds.
pub struct Row {
    case: Case,
    outcome: Outcome,
    /// The server's CPU time within the measured windows.
    server_cpu: Duration,
    /// The machine's busy time within the measured windows less the server's: the load
    /// generator, and anything else running.
    rest_cpu: Duration,
}

/// `cpu` spread over `ok` counted requests; `None` when none counted.
fn per_request(cpu: Duration, ok: u64) -> Option<Duration> {
    let ok = u32::try_from(ok).ok().filter(|n| *n > 0)?;
    Some(cpu / ok)
}

/// A CPU time per request as the table and the progress lines print it.
fn micros(per: Option<Duration>) -> String {
    per.map_or("–".into(), |d| format!("{:.1} µs", d.as_secs_f64() * 1e6))
}

impl Row {
    /// The server's CPU time per counted request.
    fn cpu_per_request(&self) -> Option<Duration> {
        per_request(self.server_cpu, self.outcome.ok)
    }

    fn cores(&self, used: Duration) -> f64 {
        used.as_secs_f64() / self.outcome.measured.as_secs_f64().max(f64::EPSILON)
    }
}

/// Everything one run measured.
pub struct Results {
    rows: Vec<Row>,
    /// From the CRD's create to its first custom resource accepted.
    established: Duration,
    /// Sizes of the create bodies and of the get answers, in bytes.
    sa_bytes: (usize, usize),
    cr_bytes: (usize, usize),
}

/// Starts a server in `scratch`, installs the CRD, creates the objects the gets read, then runs
/// the four scenarios [`ROUNDS`] times in turn (forwards, then backwards), each for
/// [`round_window`] of `measure` after [`WARMUP`].
pub async fn run(binary: &Path, scratch: &Path, measure: Duration) -> Result<Results> {
    let measure = round_window(measure);
    let mut strata = start_strata(binary, &scratch.join("crd")).await?;
    let addr = strata.addr;
    step(&format!("crd: installing {PLURAL}.{GROUP}"));
    let established = install(addr).await?;
    eprintln!("established and served after {established:?}");
    let sa_bytes = seed(addr, &sa_collection(), service_account(GET_NAME)).await?;
    let cr_bytes = seed(addr, &cr_collection(), web_app(GET_NAME)).await?;

    let mut rows: Vec<Row> = CASES
        .iter()
        .map(|&case| Row {
            case,
            outcome: Outcome::default(),
            server_cpu: Duration::ZERO,
            rest_cpu: Duration::ZERO,
        })
        .collect();
    let mut next_client = 0;
    for round in 1..=ROUNDS {
        // Even rounds run the scenarios in reverse order. The store only grows, and the machine
        // drifts, so a fixed order would always run one kind's creates on a larger store and
        // later in each round than the other's; A-B then B-A puts that on both alike.
        let order: Vec<usize> = if round % 2 == 1 {
            (0..rows.len()).collect()
        } else {
            (0..rows.len()).rev().collect()
        };
        for i in order {
            let row = &mut rows[i];
            step(&format!(
                "crd: {}, {CLIENTS} clients, round {round}/{ROUNDS}: {WARMUP:?} warm-up + \
                 {measure:?}",
                row.case.label()
            ));
            let scenario = Scenario {
                addr,
                clients: CLIENTS,
                first_client: next_client,
                workload: row.case.workload(),
                expect: row.case.expect(),
                warmup: WARMUP,
                measure,
                access: load::Access::default(),
                http2_connections: 0,
            };
            next_client += CLIENTS;
            let (outcome, server, rest) = measure_scenario(&scenario, strata.pid()).await?;
            // Each round's own figures, so that a run's spread between rounds shows.
            eprintln!(
                "{:.0} requests/s, {} error(s), server CPU {} per request, rest of the machine \
                 {:.2} cores",
                outcome.rps(),
                outcome.error_count(),
                micros(per_request(server, outcome.ok)),
                rest.as_secs_f64() / measure.as_secs_f64(),
            );
            add(&mut row.outcome, outcome);
            row.server_cpu += server;
            row.rest_cpu += rest;
            strata.ensure_running()?;
        }
    }
    for row in &mut rows {
        row.outcome.latencies_ns.sort_unstable();
    }
    Ok(Results {
        rows,
        established,
        sa_bytes,
        cr_bytes,
    })
}

/// Runs one scenario, reading the server's and the machine's CPU counters at the ends of its
/// measured window (a task sleeps through the warm-up beside the clients).
pub(super) async fn measure_scenario(
    scenario: &Scenario,
    pid: u32,
) -> Result<(Outcome, Duration, Duration)> {
    let (warmup, measure) = (scenario.warmup, scenario.measure);
    let probe = tokio::spawn(async move {
        tokio::time::sleep(warmup).await;
        let server = procfs::cpu_time(pid)?;
        let busy = procfs::machine_busy()?;
        tokio::time::sleep(measure).await;
        let server = procfs::cpu_time(pid)?.saturating_sub(server);
        let busy = procfs::machine_busy()?.saturating_sub(busy);
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((server, busy.saturating_sub(server)))
    });
    let outcome = load::run(scenario).await;
    let (server, rest) = probe
        .await
        .map_err(|e| format!("CPU probe: {e}"))?
        .map_err(|e| e.to_string())?;
    Ok((outcome, server, rest))
}

/// Adds one round's outcome to a scenario's total.
pub(super) fn add(total: &mut Outcome, round: Outcome) {
    total.ok += round.ok;
    total.latencies_ns.extend(round.latencies_ns);
    total.measured += round.measured;
    for (kind, (n, sample)) in round.errors {
        total.errors.entry(kind).or_insert((0, sample)).0 += n;
    }
}

/// Creates the CRD and waits until it is Established and a custom resource is accepted (a
/// dry-run create answered 201). Returns how long that took.
async fn install(addr: SocketAddr) -> Result<Duration> {
    let started = Instant::now();
    let (status, body) =
        load::request_once(addr, Method::POST, CRDS, Some(crd().to_string())).await?;
    if status != StatusCode::CREATED {
        return Err(format!(
            "creating the CRD: expected 201, got {status}: {}",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    let crd_path = format!("{CRDS}/{PLURAL}.{GROUP}");
    let probe_path = format!("{}?dryRun=All", cr_collection());
    let probe = web_app("probe").to_string();
    let mut last = String::new();
    while started.elapsed() < ESTABLISH_LIMIT {
        let (_, body) = load::request_once(addr, Method::GET, &crd_path, None).await?;
        let crd: Value = serde_json::from_slice(&body).unwrap_or_default();
        let established = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if established {
            let (status, body) =
                load::request_once(addr, Method::POST, &probe_path, Some(probe.clone())).await?;
            if status == StatusCode::CREATED {
                return Ok(started.elapsed());
            }
            last = format!(
                "a dry-run create answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            );
            // A 422 means the schema refuses the benchmark's own object: no use waiting.
            if status == StatusCode::UNPROCESSABLE_ENTITY {
                break;
            }
        } else {
            last = "not Established".into();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("the CRD was not ready within {ESTABLISH_LIMIT:?}: {last}").into())
}

/// Creates `object` in `collection`, then gets it; returns the sizes of the create body and of
/// the get answer.
async fn seed(addr: SocketAddr, collection: &str, object: Value) -> Result<(usize, usize)> {
    let body = object.to_string();
    let sent = body.len();
    let (status, answer) = load::request_once(addr, Method::POST, collection, Some(body)).await?;
    if status != StatusCode::CREATED {
        return Err(format!(
            "creating {collection}/{GET_NAME}: expected 201, got {status}: {}",
            String::from_utf8_lossy(&answer)
        )
        .into());
    }
    let path = format!("{collection}/{GET_NAME}");
    let (status, answer) = load::request_once(addr, Method::GET, &path, None).await?;
    if status != StatusCode::OK {
        return Err(format!("getting {path}: expected 200, got {status}").into());
    }
    Ok((sent, answer.len()))
}

fn row(results: &Results, case: Case) -> Option<&Row> {
    results.rows.iter().find(|r| r.case == case)
}

/// The ServiceAccount scenario a custom-resource one is compared with.
fn baseline(case: Case) -> Option<Case> {
    match case {
        Case::CrCreate => Some(Case::SaCreate),
        Case::CrGet => Some(Case::SaGet),
        Case::SaCreate | Case::SaGet => None,
    }
}

/// The table: per scenario, rate, latency, errors, CPU, and the custom resource's rate and CPU
/// per request against the ServiceAccount's.
pub fn table(results: &Results) -> String {
    let mut out = String::from(
        "| scenario | clients | requests/s | p50 | p99 | errors | server CPU per request | \
         server CPU | rest of machine | rate vs ServiceAccount | CPU per request vs \
         ServiceAccount |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in &results.rows {
        let base = baseline(r.case).and_then(|b| row(results, b));
        let rate = base
            .map(|b| b.outcome.rps())
            .filter(|b| *b > 0.0)
            .map_or("–".into(), |b| {
                format!("{:.0}%", 100.0 * r.outcome.rps() / b)
            });
        let cpu = match (r.cpu_per_request(), base.and_then(Row::cpu_per_request)) {
            (Some(mine), Some(theirs)) if !theirs.is_zero() => {
                format!("{:.2}×", mine.as_secs_f64() / theirs.as_secs_f64())
            }
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {CLIENTS} | {:.0} | {} | {} | {} | {} | {:.2} cores | {:.2} cores | {rate} | \
             {cpu} |",
            r.case.label(),
            r.outcome.rps(),
            latency(r.outcome.percentile(50.0)),
            latency(r.outcome.percentile(99.0)),
            r.outcome.error_count(),
            micros(r.cpu_per_request()),
            r.cores(r.server_cpu),
            r.cores(r.rest_cpu),
        );
    }
    out
}

/// Problems worth a line: errors, with a sample answer.
pub fn problems(results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for r in &results.rows {
        for (kind, (count, sample)) in &r.outcome.errors {
            out.push(format!(
                "{}: {count} × {kind} `{}`",
                r.case.label(),
                sample.replace('`', "'")
            ));
        }
    }
    out
}

/// The issue's two targets; a scenario with errors fails whatever its rate.
pub fn verdicts(results: &Results) -> Vec<(String, bool)> {
    [(Case::CrCreate, CREATE_TARGET), (Case::CrGet, GET_TARGET)]
        .into_iter()
        .map(|(case, target)| {
            let base = baseline(case).expect("custom-resource scenarios have a baseline");
            let wanted = format!(
                "{} ≥ {:.0}% of {}, {CLIENTS} clients",
                case.label(),
                target * 100.0,
                base.label()
            );
            match (row(results, case), row(results, base)) {
                (Some(cr), Some(sa)) if sa.outcome.rps() > 0.0 => {
                    let ratio = cr.outcome.rps() / sa.outcome.rps();
                    let errors = cr.outcome.error_count() + sa.outcome.error_count();
                    let pass = ratio >= target && errors == 0;
                    let verdict = if pass { "PASS" } else { "FAIL" };
                    let note = if errors > 0 {
                        format!(", {errors} errors")
                    } else {
                        String::new()
                    };
                    (
                        format!("{wanted}: **{verdict}** ({:.0}%{note})", ratio * 100.0),
                        pass,
                    )
                }
                _ => (format!("{wanted}: **FAIL** (not measured)"), false),
            }
        })
        .collect()
}

/// The section for `docs/benchmarks.md`.
pub fn section(header: &str, results: &Results, measure: Duration) -> String {
    let mut out = format!("## {SECTION}\n\n{header}");
    let _ = write!(
        out,
        "\nOne fresh `strata serve --insecure-http --authorization-mode=AlwaysAllow` on RocksDB. \
         The benchmark creates the CustomResourceDefinition `{PLURAL}.{GROUP}` (kind `{KIND}`, \
         namespaced, status sub-resource; its schema, in `xtask/src/bench/crd.rs`, has nested \
         objects, two list maps with keys, int-or-string quantities, enums, patterns, bounds, \
         defaults and three CEL rules: `self.minReplicas <= self.maxReplicas`, \
         `self.ports.all(p, p.port > 0 && p.port < 65536)` with at most 16 ports, and \
         `!self.endsWith(':latest')` on the image) and waits until it is Established and a \
         dry-run create is accepted ({established:.2} s). Then {CLIENTS} keep-alive HTTP/1.1 \
         clients create objects with distinct names, and get one object by name, in namespace \
         `{NAMESPACE}`: ServiceAccounts (labels, annotations, secret references: {sa_sent} bytes \
         of JSON per create, {sa_got} bytes per get answer) and `{KIND}`s (the same metadata and a \
         spec the schema defaults in three places: {cr_sent} bytes per create, {cr_got} per get \
         answer). The four scenarios run in turn, {ROUNDS} rounds (even rounds in reverse order, so \
         that neither kind always runs on the larger store), each {seconds} s after {warmup} s of \
         warm-up; a row sums its rounds. Only requests that start after a warm-up and end \
         within its window count. CPU columns are busy cores within the measured windows: the \
         server's, and the rest of the machine (the load generator, and anything else running). \
         Server and load generator share the machine's cores, so compare the ratios, not the \
         rates of different runs.\n\n",
        established = results.established.as_secs_f64(),
        sa_sent = results.sa_bytes.0,
        sa_got = results.sa_bytes.1,
        cr_sent = results.cr_bytes.0,
        cr_got = results.cr_bytes.1,
        seconds = round_window(measure).as_secs_f64(),
        warmup = WARMUP.as_secs(),
    );
    out.push_str(&table(results));
    let problems = problems(results);
    if !problems.is_empty() {
        out.push_str("\nErrors:\n\n");
        for line in problems {
            let _ = writeln!(out, "- {line}");
        }
    }
    out.push_str("\nTargets:\n\n");
    for (line, _) in verdicts(results) {
        let _ = writeln!(out, "- {line}");
    }
    let _ = write!(
        out,
        "\nWhere a custom-resource create spends its time: see \
         [Custom resources: what dominates](#custom-resources-what-dominates).\n"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(case: Case, ok: u64, cpu_ms: u64, errors: u64) -> Row {
        let mut outcome = Outcome {
            ok,
            measured: Duration::from_secs(1),
            ..Outcome::default()
        };
        if errors > 0 {
            outcome
                .errors
                .insert("HTTP 422".into(), (errors, "invalid".into()));
        }
        Row {
            case,
            outcome,
            server_cpu: Duration::from_millis(cpu_ms),
            rest_cpu: Duration::ZERO,
        }
    }

    fn results(cr_create: u64, cr_get: u64, errors: u64) -> Results {
        Results {
            rows: vec![
                row(Case::SaCreate, 1000, 500, 0),
                row(Case::CrCreate, cr_create, 750, errors),
                row(Case::SaGet, 10_000, 1000, 0),
                row(Case::CrGet, cr_get, 1000, 0),
            ],
            established: Duration::from_millis(300),
            sa_bytes: (900, 1200),
            cr_bytes: (1000, 1400),
        }
    }

    #[test]
    fn targets_are_the_issue_ratios() {
        let passing = verdicts(&results(700, 9000, 0));
        assert!(passing.iter().all(|(_, pass)| *pass), "{passing:?}");
        assert!(passing[0].0.contains("**PASS** (70%)"), "{}", passing[0].0);
        let failing = verdicts(&results(699, 8999, 0));
        assert!(failing.iter().all(|(_, pass)| !*pass), "{failing:?}");
        let errors = verdicts(&results(900, 9500, 3));
        assert!(
            !errors[0].1 && errors[0].0.contains("3 errors"),
            "{errors:?}"
        );
        assert!(errors[1].1);
    }

    #[test]
    fn table_compares_with_the_service_account() {
        let t = table(&results(500, 9000, 0));
        let line = t
            .lines()
            .find(|l| l.starts_with(&format!("| {CR_CREATE} |")))
            .unwrap();
        // Half the rate, three times the CPU per request (1.5 ms against 0.5 ms).
        assert!(line.contains("| 50% | 3.00× |"), "{line}");
        assert!(line.contains("| 1500.0 µs |"), "{line}");
        let sa = t
            .lines()
            .find(|l| l.starts_with(&format!("| {SA_GET} |")))
            .unwrap();
        assert!(sa.ends_with("| – | – |"), "{sa}");
    }

    #[test]
    fn bodies_are_realistic_and_named_from_the_slot() {
        for (object, template) in [
            (service_account("x"), template(service_account)),
            (web_app("x"), template(web_app)),
        ] {
            let size = object.to_string().len();
            assert!((700..1400).contains(&size), "{size}: {object}");
            assert_eq!(template.matches(load::NAME_SLOT).count(), 1);
            let named: Value =
                serde_json::from_str(&template.replacen(load::NAME_SLOT, "bench-1-2", 1)).unwrap();
            assert_eq!(named["metadata"]["name"], "bench-1-2");
        }
        let crd = crd();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let rules = spec["x-kubernetes-validations"].as_array().unwrap().len()
            + spec["properties"]["image"]["x-kubernetes-validations"]
                .as_array()
                .unwrap()
                .len();
        assert_eq!(rules, 3);
    }

    #[test]
    fn rounds_add_up() {
        let mut total = Outcome::default();
        for _ in 0..2 {
            let mut round = row(Case::SaGet, 10, 0, 1).outcome;
            round.latencies_ns = vec![5, 1];
            add(&mut total, round);
        }
        assert_eq!(total.ok, 20);
        assert_eq!(total.measured, Duration::from_secs(2));
        assert_eq!(total.error_count(), 2);
        assert_eq!(total.latencies_ns.len(), 4);
    }
}
