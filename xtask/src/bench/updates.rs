//! The update benchmark of `cargo xtask bench`: 64 clients writing one shared ServiceAccount
//! with each patch type, with server-side apply (with and without field conflicts) and with
//! read-modify-write PUTs, and 64 clients each writing their own. It measures writes/s, their
//! latency and the conflicts on the way, not whether the merges are right, which is the tests'
//! job.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};

use super::procfs;
use super::{latency, start_strata, WARMUP};
use crate::load::{self, Connection, Outcome};
use crate::{step, Result};

/// The section of `docs/benchmarks.md` this part rewrites.
pub const SECTION: &str = "Updates";
/// Concurrent writers of every scenario.
pub const CLIENTS: usize = 64;
/// Where the objects live; it exists on a fresh server.
const NAMESPACE: &str = "default";
/// The object every client writes in the shared scenarios.
const SHARED: &str = "shared";
/// The label every client applies in the conflicting apply scenario.
const CONTESTED: &str = "contested";
/// An update still conflicting after this many attempts is given up and counted as an error.
const MAX_ATTEMPTS: u32 = 1000;
/// Longest a single request may take before it counts as an error and its connection is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a client changes its object. Client `i` writes label `c<i>`, with a new value each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// `application/merge-patch+json`.
    MergePatch,
    /// `application/strategic-merge-patch+json`, on the same label.
    StrategicPatch,
    /// `application/json-patch+json`: `replace` of the label, which therefore exists beforehand.
    JsonPatch,
    /// Server-side apply as field manager `client-<i>`; each manager owns its own label, so
    /// nothing conflicts.
    Apply,
    /// Server-side apply of one label, [`CONTESTED`], which every client sets to a value of its
    /// own: a 409 whenever another manager owns it, then the same apply with `force=true`.
    ApplyContested,
    /// GET, set the label, PUT with the resourceVersion read; a 409 starts again from the GET.
    ReadModifyWrite,
}

impl Change {
    fn is_apply(self) -> bool {
        matches!(self, Change::Apply | Change::ApplyContested)
    }

    /// Whether the objects are created with the labels the clients write. Apply must find them
    /// absent, since the creating manager would own them and every apply would conflict.
    fn seeds_labels(self) -> bool {
        !self.is_apply()
    }
}

/// Which object a client writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Object {
    /// All clients write [`SHARED`].
    Shared,
    /// Client `i` writes `own-<i>`.
    Own,
}

impl Object {
    fn name(self, client: usize) -> String {
        match self {
            Object::Shared => SHARED.to_string(),
            Object::Own => format!("own-{client}"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Object::Shared => "shared",
            Object::Own => "own",
        }
    }
}

/// One row of the table.
#[derive(Clone, Copy, Debug)]
struct Case {
    label: &'static str,
    change: Change,
    object: Object,
}

const CASES: [Case; 8] = [
    Case {
        label: "merge patch",
        change: Change::MergePatch,
        object: Object::Shared,
    },
    Case {
        label: "strategic merge patch",
        change: Change::StrategicPatch,
        object: Object::Shared,
    },
    Case {
        label: "JSON patch",
        change: Change::JsonPatch,
        object: Object::Shared,
    },
    Case {
        label: "apply, a label per manager",
        change: Change::Apply,
        object: Object::Shared,
    },
    Case {
        label: "apply, one contested label, then force",
        change: Change::ApplyContested,
        object: Object::Shared,
    },
    Case {
        label: "PUT, read-modify-write",
        change: Change::ReadModifyWrite,
        object: Object::Shared,
    },
    Case {
        label: "merge patch",
        change: Change::MergePatch,
        object: Object::Own,
    },
    Case {
        label: "apply",
        change: Change::Apply,
        object: Object::Own,
    },
];

/// What one scenario measured. Only updates that started after the warm-up and finished before
/// the end count, and only conflicts answered inside that window.
pub struct UpdateResult {
    case: Case,
    /// Writes answered 200, the latencies of those requests alone, and unexpected answers.
    writes: Outcome,
    /// The same writes, timed from the update's first request (its GET, for PUT) through its
    /// conflicts and retries.
    updates: Outcome,
    /// Requests answered 409.
    conflicts: u64,
    /// Writes that took more than one attempt.
    retried: u64,
    /// The most attempts one write took.
    max_attempts: u32,
    server_cpu: Duration,
    /// The machine's busy time less the server's and the client's: a large share means a
    /// disturbed run.
    other_cpu: Duration,
}

impl UpdateResult {
    fn per_second(&self, n: u64) -> f64 {
        n as f64 / self.writes.measured.as_secs_f64().max(f64::EPSILON)
    }
}

/// Runs every scenario for `measure` after [`WARMUP`], each against a fresh server in
/// `scratch`.
pub async fn run(binary: &Path, scratch: &Path, measure: Duration) -> Result<Vec<UpdateResult>> {
    let mut results = Vec::new();
    for (n, case) in CASES.into_iter().enumerate() {
        let mut strata = start_strata(binary, &scratch.join(format!("updates-{n}"))).await?;
        step(&format!(
            "updates: {}, {} object, {CLIENTS} clients: {WARMUP:?} warm-up + {measure:?}",
            case.label,
            case.object.label()
        ));
        create_objects(strata.addr, case).await?;
        let result = measure_case(strata.addr, strata.pid(), case, measure).await?;
        strata.ensure_running()?;
        eprintln!(
            "{:.0} writes/s, {:.0} conflicts/s, {} error(s)",
            result.writes.rps(),
            result.per_second(result.conflicts),
            result.writes.error_count()
        );
        results.push(result);
    }
    Ok(results)
}

/// Creates the objects a scenario writes, with the labels it will change when it needs them.
async fn create_objects(addr: SocketAddr, case: Case) -> Result<()> {
    let seeded = case.change.seeds_labels();
    let objects: Vec<(String, serde_json::Value)> = match case.object {
        Object::Shared => {
            let labels = (0..CLIENTS)
                .filter(|_| seeded)
                .map(|i| (label_key(i), serde_json::Value::from("0")))
                .collect();
            vec![(SHARED.to_string(), serde_json::Value::Object(labels))]
        }
        Object::Own => (0..CLIENTS)
            .map(|i| {
                let labels = if seeded {
                    serde_json::json!({ label_key(i): "0" })
                } else {
                    serde_json::json!({})
                };
                (case.object.name(i), labels)
            })
            .collect(),
    };
    let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
    let mut conn = load::connect(addr).await?;
    for (name, labels) in objects {
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": { "name": name, "labels": labels },
        });
        let (status, answer) = load::request_on(
            &mut conn,
            addr,
            Method::POST,
            &path,
            Some(Bytes::from(body.to_string())),
        )
        .await?;
        if status != StatusCode::CREATED {
            return Err(format!(
                "creating ServiceAccount {name}: expected 201, got {status}: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(300)])
            )
            .into());
        }
    }
    Ok(())
}

/// Runs [`CLIENTS`] writers through warm-up and the measured window, reading the CPU times at
/// the window's ends.
async fn measure_case(
    addr: SocketAddr,
    pid: u32,
    case: Case,
    measure: Duration,
) -> Result<UpdateResult> {
    let warm_end = Instant::now() + WARMUP;
    let end = warm_end + measure;
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            tokio::spawn(async move { client_loop(addr, case, client, warm_end, end).await })
        })
        .collect();
    let cpu = || -> Result<(Duration, Duration, Duration)> {
        Ok((
            procfs::cpu_time(pid)?,
            procfs::cpu_time(std::process::id())?,
            procfs::machine_busy()?,
        ))
    };
    tokio::time::sleep_until(warm_end.into()).await;
    let (server_start, client_start, busy_start) = cpu()?;
    tokio::time::sleep_until(end.into()).await;
    let (server_end, client_end, busy_end) = cpu()?;
    let server_cpu = server_end.saturating_sub(server_start);
    let client_cpu = client_end.saturating_sub(client_start);

    let mut result = UpdateResult {
        case,
        writes: Outcome {
            measured: measure,
            ..Outcome::default()
        },
        updates: Outcome {
            measured: measure,
            ..Outcome::default()
        },
        conflicts: 0,
        retried: 0,
        max_attempts: 0,
        server_cpu,
        other_cpu: busy_end
            .saturating_sub(busy_start)
            .saturating_sub(server_cpu + client_cpu),
    };
    for task in tasks {
        let tally = task.await.unwrap_or_else(|e| {
            let mut tally = Tally::default();
            tally.error("client task panicked".into(), e.to_string());
            tally
        });
        result.writes.ok += tally.writes.ok;
        result.writes.latencies_ns.extend(tally.writes.latencies_ns);
        for (kind, (n, sample)) in tally.writes.errors {
            result.writes.errors.entry(kind).or_insert((0, sample)).0 += n;
        }
        result.updates.ok += tally.updates.ok;
        result
            .updates
            .latencies_ns
            .extend(tally.updates.latencies_ns);
        result.conflicts += tally.conflicts;
        result.retried += tally.retried;
        result.max_attempts = result.max_attempts.max(tally.max_attempts);
    }
    result.writes.latencies_ns.sort_unstable();
    result.updates.latencies_ns.sort_unstable();
    Ok(result)
}

/// One client's counts; see [`UpdateResult`].
#[derive(Default)]
struct Tally {
    writes: Outcome,
    updates: Outcome,
    conflicts: u64,
    retried: u64,
    max_attempts: u32,
}

impl Tally {
    fn error(&mut self, kind: String, sample: String) {
        self.writes.errors.entry(kind).or_insert((0, sample)).0 += 1;
    }
}

/// One client: updates back to back on one keep-alive connection until `end`, reconnecting
/// after a transport failure.
async fn client_loop(
    addr: SocketAddr,
    case: Case,
    client: usize,
    warm_end: Instant,
    end: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let target = Target {
        addr,
        change: case.change,
        client,
        name: case.object.name(client),
        path: format!(
            "/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{}",
            case.object.name(client)
        ),
        warm_end,
        end,
    };
    let mut conn: Option<Connection> = None;
    let mut seq: u64 = 0;
    while Instant::now() < end {
        let Some(open) = conn.as_mut() else {
            match load::connect(addr).await {
                Ok(open) => conn = Some(open),
                Err(e) => {
                    if Instant::now() >= warm_end {
                        tally.error(format!("connect: {e}"), String::new());
                    }
                    // Do not spin against a server that refuses connections.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            continue;
        };
        seq += 1;
        if !target.update(open, seq, &mut tally).await {
            conn = None;
        }
    }
    tally
}

/// What one client writes, and the window its figures count in.
struct Target {
    addr: SocketAddr,
    change: Change,
    client: usize,
    name: String,
    path: String,
    warm_end: Instant,
    end: Instant,
}

impl Target {
    fn counted(&self, from: Instant, to: Instant) -> bool {
        from >= self.warm_end && to <= self.end
    }

    /// One update to value `seq`: writes until a write is answered 200, retrying after each
    /// 409 (with `force=true` for apply, from a fresh GET for PUT). An unexpected answer ends
    /// the update as an error. Returns false when the connection failed and must be replaced.
    async fn update(&self, conn: &mut Connection, seq: u64, tally: &mut Tally) -> bool {
        let started = Instant::now();
        let mut force = false;
        for attempt in 1..=MAX_ATTEMPTS {
            let (method, path, content_type, body) = if self.change == Change::ReadModifyWrite {
                let get_sent = Instant::now();
                let current =
                    match exchange(conn, self.request(Method::GET, &self.path, None)).await {
                        Ok((StatusCode::OK, current)) => current,
                        Ok((status, answer)) => {
                            if self.counted(get_sent, Instant::now()) {
                                tally.error(
                                    format!("GET: HTTP {status}"),
                                    format!("GET {} → {}", self.path, snippet(&answer)),
                                );
                            }
                            return true;
                        }
                        Err(e) => {
                            if self.counted(get_sent, Instant::now()) {
                                tally.error(format!("GET: {e}"), String::new());
                            }
                            return false;
                        }
                    };
                match modified(&current, &label_key(self.client), seq) {
                    Some(body) => (Method::PUT, self.path.clone(), "application/json", body),
                    None => {
                        if self.counted(get_sent, Instant::now()) {
                            tally.error("GET: not an object".into(), snippet(&current));
                        }
                        return true;
                    }
                }
            } else {
                let query = if self.change.is_apply() {
                    let force = if force { "&force=true" } else { "" };
                    format!("?fieldManager=client-{}{force}", self.client)
                } else {
                    String::new()
                };
                (
                    Method::PATCH,
                    format!("{}{query}", self.path),
                    content_type(self.change),
                    patch_body(self.change, self.client, &self.name, seq),
                )
            };
            let shown = format!(
                "{method} {path} ({content_type}) {}",
                String::from_utf8_lossy(&body)
            );
            let sent = Instant::now();
            let mut request = self.request(method, &path, Some(body));
            request
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            let answer = exchange(conn, request).await;
            let done = Instant::now();
            match answer {
                Ok((StatusCode::OK, _)) => {
                    if self.counted(started, done) {
                        tally.writes.ok += 1;
                        tally.writes.latencies_ns.push(nanos(done - sent));
                        tally.updates.ok += 1;
                        tally.updates.latencies_ns.push(nanos(done - started));
                        tally.retried += u64::from(attempt > 1);
                        tally.max_attempts = tally.max_attempts.max(attempt);
                    }
                    return true;
                }
                Ok((StatusCode::CONFLICT, _)) => {
                    if self.counted(sent, done) {
                        tally.conflicts += 1;
                    }
                    force = self.change.is_apply();
                }
                Ok((status, answer)) => {
                    if self.counted(sent, done) {
                        tally.error(
                            format!("HTTP {status}"),
                            format!("{shown} → {}", snippet(&answer)),
                        );
                    }
                    return true;
                }
                Err(e) => {
                    if self.counted(sent, done) {
                        tally.error(e.to_string(), shown);
                    }
                    return false;
                }
            }
        }
        if self.counted(started, Instant::now()) {
            tally.error(
                format!("still conflicting after {MAX_ATTEMPTS} attempts"),
                String::new(),
            );
        }
        true
    }

    fn request(&self, method: Method, path: &str, body: Option<Bytes>) -> Request<Full<Bytes>> {
        // The method, the header values and the paths (built in this file from fixed strings
        // and numbers) are all valid.
        load::json_request(self.addr, method, path, body).expect("bench requests are well-formed")
    }
}

/// Sends one request and reads the whole answer; fails after [`REQUEST_TIMEOUT`].
async fn exchange(
    conn: &mut Connection,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes)> {
    let send = async {
        conn.ready().await?;
        let response = conn.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Result::Ok((status, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, send)
        .await
        .map_err(|_| format!("no answer within {REQUEST_TIMEOUT:?}"))?
}

/// The label client `client` writes.
fn label_key(client: usize) -> String {
    format!("c{client}")
}

fn content_type(change: Change) -> &'static str {
    match change {
        Change::MergePatch => "application/merge-patch+json",
        Change::StrategicPatch => "application/strategic-merge-patch+json",
        Change::JsonPatch => "application/json-patch+json",
        // JSON is YAML, and what kubectl sends for `apply --server-side`.
        Change::Apply | Change::ApplyContested => "application/apply-patch+yaml",
        Change::ReadModifyWrite => "application/json",
    }
}

/// The PATCH body that sets client `client`'s label on object `name` to `seq` (for the
/// contested apply: label [`CONTESTED`] to a value naming the client).
fn patch_body(change: Change, client: usize, name: &str, seq: u64) -> Bytes {
    let key = label_key(client);
    let value = seq.to_string();
    let body = match change {
        Change::MergePatch | Change::StrategicPatch | Change::ReadModifyWrite => {
            serde_json::json!({ "metadata": { "labels": { key: value } } })
        }
        Change::JsonPatch => serde_json::json!([
            { "op": "replace", "path": format!("/metadata/labels/{key}"), "value": value },
        ]),
        Change::Apply => apply_body(name, &key, &value),
        Change::ApplyContested => apply_body(name, CONTESTED, &format!("{key}-{value}")),
    };
    Bytes::from(body.to_string())
}

/// A ServiceAccount apply configuration holding one label.
fn apply_body(name: &str, key: &str, value: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": name, "labels": { key: value } },
    })
}

/// `current` (a GET's body) with label `key` set to `seq`, for a PUT: its resourceVersion
/// stays, so the PUT fails with 409 if the object changed since. None unless `current` is an
/// object whose `metadata` is one.
fn modified(current: &[u8], key: &str, seq: u64) -> Option<Bytes> {
    let mut object: serde_json::Value = serde_json::from_slice(current).ok()?;
    let metadata = object.get_mut("metadata")?.as_object_mut()?;
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()?;
    labels.insert(key.to_string(), seq.to_string().into());
    Some(Bytes::from(object.to_string()))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The start of a body on one line, for the problems list.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        out.push('…');
    }
    out
}

/// The results table: one row per scenario.
pub fn table(results: &[UpdateResult]) -> String {
    let mut out = String::from(
        "| scenario | object | clients | writes/s | p50 | p99 | update p99 | 409s/s | retried | \
         max attempts | server CPU/write | other CPU | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let retried = if r.writes.ok == 0 {
            "–".to_string()
        } else {
            format!("{:.0}%", 100.0 * r.retried as f64 / r.writes.ok as f64)
        };
        let cpu_per_write = if r.writes.ok == 0 {
            "–".to_string()
        } else {
            format!(
                "{:.0} µs",
                r.server_cpu.as_secs_f64() * 1e6 / r.writes.ok as f64
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} | {CLIENTS} | {:.0} | {} | {} | {} | {:.0} | {retried} | {} | \
             {cpu_per_write} | {:.1} s | {} |",
            r.case.label,
            r.case.object.label(),
            r.writes.rps(),
            latency(r.writes.percentile(50.0)),
            latency(r.writes.percentile(99.0)),
            latency(r.updates.percentile(99.0)),
            r.per_second(r.conflicts),
            r.max_attempts,
            r.other_cpu.as_secs_f64(),
            r.writes.error_count(),
        );
    }
    out
}

/// One line per kind of unexpected answer, with the request and the answer.
pub fn problems(results: &[UpdateResult]) -> Vec<String> {
    let mut out = Vec::new();
    for r in results {
        for (kind, (count, sample)) in &r.writes.errors {
            out.push(format!(
                "{}, {} object: {count} × {kind}: `{}`",
                r.case.label,
                r.case.object.label(),
                sample.replace('`', "'")
            ));
        }
    }
    out
}

/// The whole `## Updates` section.
pub fn section(header: &str, measure: Duration, table: &str, problems: &[String]) -> String {
    let mut out = format!("## {SECTION}\n\n{header}");
    let _ = write!(
        out,
        "\nEach row starts a fresh server. {CLIENTS} clients each hold one keep-alive HTTP/1.1 \
         connection and update ServiceAccounts in namespace `{NAMESPACE}` back to back for \
         {seconds} s after {warmup} s of warm-up: all the same object (shared) or each its own \
         (own). Client `i` sets its label `c<i>` to a new value each time: by merge patch or \
         strategic merge patch (`{{\"metadata\":{{\"labels\":{{\"c<i>\":\"<n>\"}}}}}}`), by JSON \
         patch (`replace` of `/metadata/labels/c<i>`; the object is created with all the \
         labels), by server-side apply as field manager `client-<i>` (each manager owns its own \
         label, so nothing conflicts; the object is created without them), or by GET and then \
         PUT with the resourceVersion read, going back to the GET after a 409. In the contested \
         apply every client applies label `{CONTESTED}` with a value of its own, without force; \
         a 409 is counted and the same apply sent again with `force=true`. Writes/s counts \
         writes answered 200; p50 and p99 are the latencies of those requests alone, while \
         update p99 runs from an update's first request (its GET, for PUT) to its successful \
         write, through its conflicts. 409s/s counts conflicts answered; retried is the share \
         of writes that took more than one attempt, and max attempts the most that one write \
         took. Server CPU/write is the server's user + system time in the measured window over \
         the writes; other CPU is the machine's busy time less the server's and the client's \
         (much of it means a disturbed run). Server and client share the machine's cores.\n\n",
        seconds = measure.as_secs(),
        warmup = WARMUP.as_secs(),
    );
    out.push_str(table);
    if !problems.is_empty() {
        out.push_str("\nProblems:\n\n");
        for line in problems {
            let _ = writeln!(out, "- {line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &Bytes) -> serde_json::Value {
        serde_json::from_slice(body).unwrap()
    }

    #[test]
    fn patch_bodies_have_the_documented_shapes() {
        let merge = r#"{"metadata":{"labels":{"c7":"42"}}}"#;
        assert_eq!(patch_body(Change::MergePatch, 7, "shared", 42), merge);
        assert_eq!(patch_body(Change::StrategicPatch, 7, "shared", 42), merge);
        assert_eq!(
            json(&patch_body(Change::JsonPatch, 7, "shared", 42)),
            serde_json::json!([{"op": "replace", "path": "/metadata/labels/c7", "value": "42"}])
        );
        assert_eq!(
            json(&patch_body(Change::Apply, 7, "own-7", 42)),
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "own-7", "labels": {"c7": "42"}},
            })
        );
        let contested = json(&patch_body(Change::ApplyContested, 7, "shared", 42));
        assert_eq!(
            contested["metadata"]["labels"],
            serde_json::json!({"contested": "c7-42"})
        );
    }

    #[test]
    fn a_read_object_is_modified_in_place() {
        let current = br#"{"kind":"ServiceAccount","metadata":{"name":"shared","resourceVersion":"9","labels":{"c1":"0","c2":"0"}}}"#;
        let put = json(&modified(current, "c2", 5).unwrap());
        assert_eq!(put["metadata"]["resourceVersion"], "9");
        assert_eq!(
            put["metadata"]["labels"],
            serde_json::json!({"c1": "0", "c2": "5"})
        );
        let bare = json(&modified(br#"{"metadata":{"name":"a"}}"#, "c0", 1).unwrap());
        assert_eq!(bare["metadata"]["labels"], serde_json::json!({"c0": "1"}));
        assert_eq!(modified(br#"{"metadata":[]}"#, "c0", 1), None);
        assert_eq!(modified(b"[]", "c0", 1), None);
        assert_eq!(modified(b"not json", "c0", 1), None);
    }

    #[test]
    fn only_apply_starts_without_the_labels() {
        for case in CASES {
            assert_eq!(
                case.change.seeds_labels(),
                !case.change.is_apply(),
                "{case:?}"
            );
            assert!(content_type(case.change).starts_with("application/"));
        }
        assert_eq!(Object::Own.name(3), "own-3");
        assert_eq!(Object::Shared.name(3), SHARED);
    }
}
