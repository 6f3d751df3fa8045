//! Faults on etcd (issue 15 item 5): a 3-member etcd cluster on loopback ports and two Strata
//! replicas, A and B, each given all three endpoints. Writes through one replica are watched
//! through the other in order, without gaps or duplicates, and resumably; a client whose replica
//! is SIGKILLed re-watches on the other from its last resourceVersion and loses nothing; killing
//! the etcd leader under write load loses no acknowledged write and delivers no event twice or
//! out of order; one member down changes nothing a client sees; and with every member down a
//! replica answers with a 5xx Status promptly and `/readyz` fails until etcd is back.
//!
//! The replicas are started here, not through the common harness, so that a test can kill one
//! and keep talking to the other, and every request is made with a client that reports a
//! broken connection or a timeout as a result instead of failing the test.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use strata_store_etcd::testing::TestEtcdCluster;

use crate::common::{sa_path, within};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// The namespace every test writes in.
const NS: &str = "faults";

/// How long one request may take before the client gives up on it (and counts it as not
/// acknowledged). Longer than any answer a healthy replica gives.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// One `strata serve` process on the cluster, plain HTTP, no authentication or authorization.
struct Replica {
    name: &'static str,
    child: Option<Child>,
    addr: String,
    client: HttpClient,
    _dir: tempfile::TempDir,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a request produced: the status and body, or why there was no answer.
type Answer = Result<(u16, Value), String>;

impl Replica {
    /// Starts a replica over every member of `cluster` and waits for its listening line.
    fn start(name: &'static str, cluster: &TestEtcdCluster) -> Replica {
        let dir = tempfile::tempdir().expect("temp dir");
        let servers = cluster.endpoints().join(",");
        let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args([
                "--insecure-http",
                "--anonymous-auth=true",
                "--authorization-mode=AlwaysAllow",
                "--storage-backend",
                "etcd",
                "--etcd-servers",
                &servers,
            ])
            // `STRATA_FAULTS_LOG` (a `RUST_LOG` filter) shows what the replicas log.
            .env(
                "RUST_LOG",
                std::env::var("STRATA_FAULTS_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start strata");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("strata: listening on http://")
            .unwrap_or_else(|| panic!("replica {name}: unexpected first line {line:?}"))
            .to_string();
        Replica {
            name,
            child: Some(child),
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
            _dir: dir,
        }
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A cloneable handle for tasks.
    fn api(&self) -> Api {
        Api {
            name: self.name,
            addr: self.addr.clone(),
            client: self.client.clone(),
        }
    }
}

/// Requests to one replica that report failures instead of panicking.
#[derive(Clone)]
struct Api {
    name: &'static str,
    addr: String,
    client: HttpClient,
}

impl Api {
    /// Sends a request; a body that is not JSON comes back as a JSON string.
    async fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        self.send_within(method, path, body, REQUEST_TIMEOUT).await
    }

    async fn send_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        limit: Duration,
    ) -> Answer {
        let (bytes, content_type) = match body {
            Some(b) if method == "PATCH" => (
                serde_json::to_vec(b).expect("encode"),
                "application/merge-patch+json",
            ),
            Some(b) => (serde_json::to_vec(b).expect("encode"), "application/json"),
            None => (Vec::new(), "application/json"),
        };
        let req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(bytes)))
            .expect("request");
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            let value = serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
            Ok((status, value))
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "{method} {path} on {}: no answer in {limit:?}",
                self.name
            )),
        }
    }

    /// Sends a request that must answer `code`; returns the body.
    async fn expect(&self, code: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
        match self.send(method, path, body).await {
            Ok((c, v)) if c == code => v,
            other => panic!(
                "{method} {path} on replica {}: expected {code}, got {other:?}",
                self.name
            ),
        }
    }

    /// Creates the namespace, retrying while the replica settles.
    async fn create_namespace(&self, name: &str) -> Value {
        let body = json!({"metadata": {"name": name}});
        self.expect(201, "POST", "/api/v1/namespaces", Some(&body))
            .await
    }

    /// Creates ServiceAccount `name` in [`NS`] once: the created object, or what went wrong.
    async fn create_sa(&self, name: &str) -> Answer {
        let body = json!({"metadata": {"name": name}});
        self.send("POST", &sa_path(NS), Some(&body)).await
    }

    /// Creates ServiceAccount `name` until the create is known to have happened: retried after
    /// failures (5xx, timeouts, broken connections: not acknowledged, but possibly committed);
    /// a retry's 409 AlreadyExists is the earlier attempt having committed, and the object is
    /// then read back. Returns the acknowledged object, how many attempts failed, and whether
    /// a failed attempt turned out to have committed.
    async fn create_sa_surely(&self, name: &str, deadline: Instant) -> (Value, u32, bool) {
        let mut failures = 0;
        loop {
            match self.create_sa(name).await {
                Ok((201, v)) => return (v, failures, false),
                Ok((409, v)) if failures > 0 && v["reason"] == "AlreadyExists" => {
                    let path = format!("{}/{name}", sa_path(NS));
                    if let Ok((200, got)) = self.send("GET", &path, None).await {
                        return (got, failures, true);
                    }
                }
                Ok((code, v)) if code >= 500 => assert_eq!(v["kind"], "Status", "{v}"),
                Ok((code, v)) => panic!("create {name} on {}: {code} {v}", self.name),
                Err(_) => {}
            }
            failures += 1;
            assert!(
                Instant::now() < deadline,
                "create {name} on replica {} still fails after {failures} attempts",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Api {
    /// Sets label `n` of ServiceAccount `name` to `value` by a merge patch until a patch is
    /// acknowledged: retried after failures like [`Api::create_sa_surely`]. The patch is
    /// idempotent: when a failed attempt committed, the retry changes nothing and answers the
    /// object as that attempt left it. Returns the object and how many attempts failed.
    async fn label_sa_surely(&self, name: &str, value: &str, deadline: Instant) -> (Value, u32) {
        let path = format!("{}/{name}", sa_path(NS));
        let patch = json!({"metadata": {"labels": {"n": value}}});
        let mut failures = 0;
        loop {
            match self.send("PATCH", &path, Some(&patch)).await {
                Ok((200, v)) => return (v, failures),
                Ok((code, v)) if code >= 500 => assert_eq!(v["kind"], "Status", "{v}"),
                Ok((code, v)) => panic!("patch {name} on {}: {code} {v}", self.name),
                Err(_) => {}
            }
            failures += 1;
            assert!(
                Instant::now() < deadline,
                "patch {name} on replica {} still fails after {failures} attempts",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Api {
    /// Deletes ServiceAccount `name` until it is known to be gone: retried after failures; a
    /// retry's 404 is an earlier attempt having committed. Returns how many attempts failed.
    async fn delete_sa_surely(&self, name: &str, deadline: Instant) -> u32 {
        let path = format!("{}/{name}", sa_path(NS));
        let mut failures = 0;
        loop {
            match self.send("DELETE", &path, None).await {
                Ok((200, _)) => return failures,
                Ok((404, _)) if failures > 0 => return failures,
                Ok((code, v)) if code >= 500 => assert_eq!(v["kind"], "Status", "{v}"),
                Ok((code, v)) => panic!("delete {name} on {}: {code} {v}", self.name),
                Err(_) => {}
            }
            failures += 1;
            assert!(
                Instant::now() < deadline,
                "delete {name} on replica {} still fails after {failures} attempts",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The resourceVersion of an object as a number.
fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {v}"))
}

/// One change as a client sees it: the event type, the object's name and its resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Change {
    rv: u64,
    kind: String,
    name: String,
}

impl Change {
    fn of(kind: &str, object: &Value) -> Change {
        Change {
            rv: rv(object),
            kind: kind.to_string(),
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }
}

/// What reading a watch produced next.
#[derive(Debug)]
enum Read {
    /// A change (ADDED, MODIFIED, DELETED).
    Change(Change),
    /// A BOOKMARK at this resourceVersion.
    Bookmark(u64),
    /// An ERROR event, with its Status.
    Error(Value),
    /// The server ended the stream cleanly.
    End,
    /// The connection broke (the replica died) or the stream could not be opened.
    Broken(String),
    /// Nothing within the wait.
    Idle,
}

/// A watch over its own HTTP/1.1 connection, tolerant of the server dying under it.
struct Watch {
    body: Option<hyper::body::Incoming>,
    buf: Vec<u8>,
    conn: Option<tokio::task::JoinHandle<()>>,
    error: Option<String>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.abort();
        }
    }
}

impl Watch {
    /// Watches the ServiceAccounts of [`NS`] through `api` from resourceVersion `from`, with
    /// bookmarks, leaving out the `default` ServiceAccount the server makes (the tests follow
    /// their own writes). A watch that cannot be opened (refused connection, a non-200 answer) reads as
    /// `Broken` at once.
    async fn open(api: &Api, from: u64) -> Watch {
        let path = format!(
            "{}?watch=1&resourceVersion={from}&allowWatchBookmarks=true\
             &fieldSelector=metadata.name%21%3Ddefault",
            sa_path(NS)
        );
        let broken = |e: String| Watch {
            body: None,
            buf: Vec::new(),
            conn: None,
            error: Some(e),
        };
        let opened = async {
            let tcp = tokio::net::TcpStream::connect(&api.addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                    .await
                    .map_err(|e| format!("handshake: {e}"))?;
            let conn = tokio::spawn(async move {
                let _ = conn.await;
            });
            let req = Request::builder()
                .method(Method::GET)
                .uri(&path)
                .header("host", &api.addr)
                .body(http_body_util::Empty::<Bytes>::new())
                .expect("request");
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| format!("request: {e}"))?;
            if resp.status() != 200 {
                let status = resp.status();
                let body = resp.into_body().collect().await.map(|b| b.to_bytes());
                return Err(format!("watch answered {status}: {body:?}"));
            }
            Ok((resp.into_body(), conn))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, opened).await {
            Ok(Ok((body, conn))) => Watch {
                body: Some(body),
                buf: Vec::new(),
                conn: Some(conn),
                error: None,
            },
            Ok(Err(e)) => broken(e),
            Err(_) => broken(format!("no watch headers within {REQUEST_TIMEOUT:?}")),
        }
    }

    fn take_line(&mut self) -> Option<Value> {
        loop {
            let pos = self.buf.iter().position(|b| *b == b'\n')?;
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(serde_json::from_slice(&line).unwrap_or_else(|e| {
                panic!(
                    "a watch line is not JSON ({e}): {}",
                    String::from_utf8_lossy(&line)
                )
            }));
        }
    }

    /// The next thing the watch produced within `wait`.
    async fn next(&mut self, wait: Duration) -> Read {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(event) = self.take_line() {
                let kind = event["type"].as_str().unwrap_or_default();
                return match kind {
                    "BOOKMARK" => Read::Bookmark(rv(&event["object"])),
                    "ERROR" => Read::Error(event["object"].clone()),
                    "ADDED" | "MODIFIED" | "DELETED" => {
                        Read::Change(Change::of(kind, &event["object"]))
                    }
                    other => panic!("unexpected watch event type {other:?}: {event}"),
                };
            }
            if let Some(e) = &self.error {
                return Read::Broken(e.clone());
            }
            let Some(body) = self.body.as_mut() else {
                return Read::End;
            };
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Read::Idle,
                Ok(None) => {
                    self.body = None;
                    if !self.buf.iter().all(u8::is_ascii_whitespace) {
                        self.error = Some("the stream ended inside a line".into());
                    }
                }
                Ok(Some(Err(e))) => self.error = Some(e.to_string()),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

/// Reads changes from `watch` until one at or past `until` arrived; returns them. Panics on
/// anything but changes and bookmarks, or when `limit` passes first.
async fn read_until(watch: &mut Watch, until: u64, limit: Duration) -> Vec<Change> {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    let mut last = 0;
    while last < until {
        let left = deadline.saturating_duration_since(Instant::now());
        match watch.next(left).await {
            Read::Change(c) => {
                last = c.rv;
                seen.push(c);
            }
            Read::Bookmark(r) => last = last.max(r),
            Read::Idle => panic!(
                "the watch did not reach {until} within {limit:?}; last {last}, got {seen:?}"
            ),
            other => panic!("the watch ended before {until}: {other:?}; got {seen:?}"),
        }
    }
    seen
}

/// Asserts that `seen` is `expected` exactly: every acknowledged change once, in
/// resourceVersion order, nothing else.
fn assert_same_changes(seen: &[Change], expected: &[Change], what: &str) {
    let extra = assert_changes(seen, expected, &BTreeSet::new(), what);
    assert!(extra.is_empty());
}

/// As [`assert_same_changes`], but changes to the objects named in `unsure` that nobody
/// acknowledged are allowed: a write whose attempt failed (503 after the engine's deadline)
/// may still be applied by etcd later, even after the client's next writes. Returns those.
fn assert_changes(
    seen: &[Change],
    expected: &[Change],
    unsure: &BTreeSet<String>,
    what: &str,
) -> Vec<Change> {
    for pair in seen.windows(2) {
        assert!(
            pair[0].rv < pair[1].rv,
            "{what}: out of order or repeated: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    // A DELETE answers the object as it was before (at its last change's resourceVersion) while
    // the DELETED event carries the deletion's, so a deletion is matched by name.
    let key = |c: &Change| {
        let rv = if c.kind == "DELETED" { 0 } else { c.rv };
        (rv, c.kind.clone(), c.name.clone())
    };
    let seen_set: BTreeSet<_> = seen.iter().map(key).collect();
    let expected_set: BTreeSet<_> = expected.iter().map(key).collect();
    assert_eq!(
        seen_set.len(),
        seen.len(),
        "{what}: a change repeated: {seen:?}"
    );
    let missing: Vec<_> = expected_set.difference(&seen_set).collect();
    let (allowed, extra): (Vec<_>, Vec<_>) = seen_set
        .difference(&expected_set)
        .partition(|(_, _, name)| unsure.contains(name));
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing (gaps) {missing:?}; not acknowledged {extra:?}"
    );
    allowed
        .into_iter()
        .map(|(rv, kind, name)| Change {
            rv: *rv,
            kind: kind.clone(),
            name: name.clone(),
        })
        .collect()
}

/// A 3-member cluster with two replicas over it and the test namespace; returns them and the
/// namespace's resourceVersion.
async fn setup() -> (TestEtcdCluster, Replica, Replica, u64) {
    let cluster = TestEtcdCluster::start(3)
        .expect("start a 3-member etcd cluster from /usr/bin/etcd (Debian's etcd-server)");
    // Answering once a leader is elected; the replicas connect at start.
    cluster.leader().await;
    let a = Replica::start("A", &cluster);
    let b = Replica::start("B", &cluster);
    let ns = a.api().create_namespace(NS).await;
    (cluster, a, b, rv(&ns))
}

/// The change an acknowledged write made, from the object it answered.
fn acked(kind: &str, answer: &Value) -> Change {
    Change::of(kind, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_faults_watch_on_b_of_writes_on_a_is_ordered_gapless_and_resumable() {
    within(Duration::from_secs(120), async {
        let (_cluster, a, b, from) = setup().await;
        let (a, b) = (a.api(), b.api());
        let mut expected = Vec::new();
        // Some writes before the watch opens: it replays them from `from`.
        for i in 0..8 {
            let v = a
                .expect(
                    201,
                    "POST",
                    &sa_path(NS),
                    Some(&json!({"metadata": {"name": format!("s{i}")}})),
                )
                .await;
            expected.push(acked("ADDED", &v));
        }
        let mut watch = Watch::open(&b, from).await;
        // More while it is open: updates, deletes and creates.
        for i in 0..4 {
            let path = format!("{}/s{i}", sa_path(NS));
            let patch = json!({"metadata": {"labels": {"round": "1"}}});
            let v = a.expect(200, "PATCH", &path, Some(&patch)).await;
            expected.push(acked("MODIFIED", &v));
        }
        for i in 4..6 {
            let path = format!("{}/s{i}", sa_path(NS));
            let v = a.expect(200, "DELETE", &path, None).await;
            expected.push(acked("DELETED", &v));
        }
        for i in 8..12 {
            let v = a
                .expect(
                    201,
                    "POST",
                    &sa_path(NS),
                    Some(&json!({"metadata": {"name": format!("s{i}")}})),
                )
                .await;
            expected.push(acked("ADDED", &v));
        }
        let last = expected.last().map_or(0, |c| c.rv);
        let mut seen = read_until(&mut watch, last, Duration::from_secs(20)).await;
        assert_same_changes(&seen, &expected, "first watch");
        // The client goes away; writes go on; it resumes from the last resourceVersion it saw.
        drop(watch);
        for i in 12..16 {
            let v = a
                .expect(
                    201,
                    "POST",
                    &sa_path(NS),
                    Some(&json!({"metadata": {"name": format!("s{i}")}})),
                )
                .await;
            expected.push(acked("ADDED", &v));
        }
        let path = format!("{}/s8", sa_path(NS));
        let v = a
            .expect(
                200,
                "PATCH",
                &path,
                Some(&json!({"metadata": {"labels": {"round": "2"}}})),
            )
            .await;
        expected.push(acked("MODIFIED", &v));
        let mut resumed = Watch::open(&b, last).await;
        let last = expected.last().map_or(0, |c| c.rv);
        seen.extend(read_until(&mut resumed, last, Duration::from_secs(20)).await);
        assert_same_changes(&seen, &expected, "watch and resumed watch");
        // And nothing more arrives (bookmarks may).
        let quiet_until = Instant::now() + Duration::from_millis(1500);
        loop {
            let left = quiet_until.saturating_duration_since(Instant::now());
            match resumed.next(left).await {
                Read::Idle => break,
                Read::Bookmark(_) => {}
                other => panic!("after the last write the watch produced {other:?}"),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_faults_a_client_rewatches_on_b_after_replica_a_is_killed() {
    within(Duration::from_secs(120), async {
        let (_cluster, mut replica_a, b, from) = setup().await;
        let a = replica_a.api();
        let b = b.api();
        // Writes through B, one at a time, every acknowledged one recorded.
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (b, acknowledged) = (b.clone(), acknowledged.clone());
            tokio::spawn(async move {
                for i in 0..60 {
                    let body = json!({"metadata": {"name": format!("w{i}")}});
                    let v = b.expect(201, "POST", &sa_path(NS), Some(&body)).await;
                    acknowledged.lock().unwrap().push(acked("ADDED", &v));
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            })
        };
        // The client watches through A until A dies under it.
        let mut watch = Watch::open(&a, from).await;
        let mut seen = Vec::new();
        let mut last = from;
        let ended = loop {
            if seen.len() == 20 {
                replica_a.kill();
            }
            match watch.next(Duration::from_secs(20)).await {
                Read::Change(c) => {
                    last = c.rv;
                    seen.push(c);
                }
                Read::Bookmark(r) => last = last.max(r),
                Read::Idle => panic!("the watch on A went quiet; got {seen:?}"),
                other => break other,
            }
        };
        assert!(seen.len() >= 20, "A's watch ended early: {ended:?}");
        println!(
            "the watch on A ended after {} events with {ended:?}",
            seen.len()
        );
        // It re-watches on B from the last resourceVersion it saw.
        let mut rewatch = Watch::open(&b, last).await;
        writer.await.expect("the writer");
        let expected = acknowledged.lock().unwrap().clone();
        let until = expected.last().map_or(0, |c| c.rv);
        if last < until {
            seen.extend(read_until(&mut rewatch, until, Duration::from_secs(20)).await);
        }
        assert_same_changes(&seen, &expected, "the watch on A, then on B");
    })
    .await;
}

/// What one watching client saw across its re-watches.
#[derive(Debug, Default)]
struct Watcher {
    changes: Vec<Change>,
    /// Why each stream ended before the client stopped.
    rewatches: Vec<String>,
}

/// A client that watches through `api` from `from` and re-watches from the last
/// resourceVersion it saw whenever its stream ends, breaks or reports an error, until `stop`
/// is set and it saw `until` (read from the shared cell once `stop` is set).
async fn watch_through_faults(
    api: Api,
    from: u64,
    stop: Arc<AtomicBool>,
    until: Arc<Mutex<u64>>,
) -> Watcher {
    let mut out = Watcher::default();
    let mut last = from;
    'rewatch: loop {
        let mut watch = Watch::open(&api, last).await;
        loop {
            if stop.load(Ordering::SeqCst) && last >= *until.lock().unwrap() {
                break 'rewatch;
            }
            match watch.next(Duration::from_millis(500)).await {
                Read::Change(c) => {
                    last = c.rv;
                    out.changes.push(c);
                }
                Read::Bookmark(r) => last = last.max(r),
                Read::Idle => {}
                Read::Error(status) => {
                    // 410 Expired, or the replica giving up on its storage: start again from
                    // the last resourceVersion seen.
                    out.rewatches.push(format!("error event {status}"));
                    break;
                }
                Read::Broken(e) => {
                    out.rewatches.push(format!("broken: {e}"));
                    break;
                }
                Read::End => {
                    out.rewatches.push("ended".into());
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_faults_killing_the_etcd_leader_under_write_load_loses_nothing() {
    within(Duration::from_secs(240), async {
        let (mut cluster, a, b, from) = setup().await;
        let (a, b) = (a.api(), b.api());
        let stop = Arc::new(AtomicBool::new(false));
        let until = Arc::new(Mutex::new(u64::MAX));
        let watchers: Vec<_> = [&a, &b]
            .into_iter()
            .map(|api| {
                tokio::spawn(watch_through_faults(
                    api.clone(),
                    from,
                    stop.clone(),
                    until.clone(),
                ))
            })
            .collect();
        // Four writers, two through each replica, each creating 40 ServiceAccounts and
        // labelling every fourth one after the next is created.
        let acknowledged: Arc<Mutex<Vec<(Change, Instant)>>> = Arc::default();
        let failed_attempts = Arc::new(Mutex::new(0u32));
        let committed_unacknowledged = Arc::new(Mutex::new(0u32));
        let deadline = Instant::now() + Duration::from_secs(150);
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let api = if w % 2 == 0 { a.clone() } else { b.clone() };
                let (acknowledged, failed_attempts, committed_unacknowledged) = (
                    acknowledged.clone(),
                    failed_attempts.clone(),
                    committed_unacknowledged.clone(),
                );
                tokio::spawn(async move {
                    for n in 0..40 {
                        let name = format!("c{w}-{n}");
                        let (v, failures, existed) = api.create_sa_surely(&name, deadline).await;
                        *failed_attempts.lock().unwrap() += failures;
                        *committed_unacknowledged.lock().unwrap() += u32::from(existed);
                        acknowledged
                            .lock()
                            .unwrap()
                            .push((acked("ADDED", &v), Instant::now()));
                        if n % 4 == 1 {
                            let earlier = format!("c{w}-{}", n - 1);
                            let (v, failures) = api
                                .label_sa_surely(&earlier, &n.to_string(), deadline)
                                .await;
                            *failed_attempts.lock().unwrap() += failures;
                            acknowledged
                                .lock()
                                .unwrap()
                                .push((acked("MODIFIED", &v), Instant::now()));
                        }
                    }
                })
            })
            .collect();
        // Under load, the leader dies.
        while acknowledged.lock().unwrap().len() < 40 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let leader = cluster.leader().await;
        cluster.kill(leader);
        let killed_at = Instant::now();
        let new_leader = cluster.leader().await;
        let elected_in = killed_at.elapsed();
        for w in writers {
            w.await.expect("a writer");
        }
        let acknowledged = acknowledged.lock().unwrap().clone();
        let after_kill = acknowledged.iter().filter(|(_, t)| *t > killed_at).count();
        println!(
            "killed leader {leader}; member {new_leader} led after {elected_in:?}; \
             {} writes acknowledged, {after_kill} after the kill, {} failed attempts, \
             {} creates found committed by a failed attempt",
            acknowledged.len(),
            failed_attempts.lock().unwrap(),
            committed_unacknowledged.lock().unwrap()
        );
        assert_eq!(acknowledged.len(), 200);
        assert!(after_kill > 0, "no write was acknowledged after the kill");
        // Every acknowledged write is there, through both replicas: each object at its last
        // acknowledged change.
        let expected: Vec<Change> = acknowledged.iter().map(|(c, _)| c.clone()).collect();
        let mut last_change: BTreeMap<&str, &Change> = BTreeMap::new();
        for c in &expected {
            last_change.insert(&c.name, c);
        }
        for api in [&a, &b] {
            let list = api.expect(200, "GET", &sa_path(NS), None).await;
            let stored: BTreeMap<String, u64> = list["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| (i["metadata"]["name"].as_str().unwrap().to_string(), rv(i)))
                .filter(|(name, _)| name != "default")
                .collect();
            assert_eq!(stored.len(), last_change.len(), "{stored:?}");
            for c in last_change.values() {
                assert_eq!(
                    stored.get(&c.name),
                    Some(&c.rv),
                    "{} through replica {}",
                    c.name,
                    api.name
                );
            }
        }
        // The watches saw each acknowledged write once, in order.
        *until.lock().unwrap() = expected.iter().map(|c| c.rv).max().unwrap_or(0);
        stop.store(true, Ordering::SeqCst);
        for (w, name) in watchers.into_iter().zip(["A", "B"]) {
            let seen = tokio::time::timeout(Duration::from_secs(30), w)
                .await
                .unwrap_or_else(|_| panic!("the watcher on {name} did not catch up"))
                .expect("a watcher");
            println!(
                "the watcher on {name} saw {} changes and re-watched {} times: {:?}",
                seen.changes.len(),
                seen.rewatches.len(),
                seen.rewatches
            );
            let mut sorted = expected.clone();
            sorted.sort();
            assert_same_changes(&seen.changes, &sorted, &format!("the watcher on {name}"));
        }
        cluster.restart(leader).expect("restart the killed member");
    })
    .await;
}

/// Create, read, list, update, watch and delete across the two replicas, under `tag`. Writes
/// are retried after a 5xx or no answer, as a client would (see [`Api::create_sa_surely`]);
/// reads must succeed at once. Returns the changes it made, as a watcher sees them, and how
/// many write attempts failed.
async fn exercise(a: &Api, b: &Api, tag: &str) -> (Vec<Change>, u32) {
    exercise_reading(a, b, tag, false).await
}

/// [`exercise`], with reads retried after a 5xx as well when `retry_reads` (a member that
/// froze may leave a read waiting for an election on a busy machine); the failed reads count
/// with the failed writes.
async fn exercise_reading(a: &Api, b: &Api, tag: &str, retry_reads: bool) -> (Vec<Change>, u32) {
    let mut failed_reads = 0;
    let read = |code: u16, path: String| {
        let b = b.clone();
        async move {
            let mut failures = 0;
            loop {
                match b.send("GET", &path, None).await {
                    Ok((c, v)) if c == code => return (v, failures),
                    Ok((c, v)) if retry_reads && c >= 500 && v["kind"] == "Status" => {}
                    other => panic!("GET {path} on replica B: expected {code}, got {other:?}"),
                }
                failures += 1;
                assert!(failures < 20, "GET {path} on replica B keeps failing");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let (created, mut failed, _) = a.create_sa_surely(tag, deadline).await;
    let path = format!("{}/{tag}", sa_path(NS));
    let (got, failures) = read(200, path.clone()).await;
    failed_reads += failures;
    assert_eq!(got["metadata"]["uid"], created["metadata"]["uid"]);
    let (list, failures) = read(200, sa_path(NS)).await;
    failed_reads += failures;
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == tag),
        "{tag} not listed through B: {list}"
    );
    let mut watch = Watch::open(a, rv(&created)).await;
    let (patched, failures) = b.label_sa_surely(tag, "seen", deadline).await;
    failed += failures;
    let seen = read_until(&mut watch, rv(&patched), Duration::from_secs(20)).await;
    assert_eq!(seen, [acked("MODIFIED", &patched)]);
    failed += a.delete_sa_surely(tag, deadline).await;
    // The DELETED event comes at the deletion's resourceVersion, after the patch's.
    let seen = read_until(&mut watch, rv(&patched) + 1, Duration::from_secs(20)).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (seen[0].kind.as_str(), seen[0].name.as_str()),
        ("DELETED", tag)
    );
    failed_reads += read(404, path.clone()).await.1;
    println!(
        "{tag}: create, get, list, patch, watch and delete took {:?}, {failed} write and \
         {failed_reads} read attempts failed",
        started.elapsed()
    );
    failed += failed_reads;
    let changes = vec![
        acked("ADDED", &created),
        acked("MODIFIED", &patched),
        Change {
            rv: 0,
            kind: "DELETED".into(),
            name: tag.into(),
        },
    ];
    (changes, failed)
}

/// A client watching through `api` from `from` until told to stop (see
/// [`watch_through_faults`]): stop it with [`LongWatch::finish`].
struct LongWatch {
    stop: Arc<AtomicBool>,
    until: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<Watcher>,
}

impl LongWatch {
    fn start(api: &Api, from: u64) -> LongWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let until = Arc::new(Mutex::new(u64::MAX));
        let task = tokio::spawn(watch_through_faults(
            api.clone(),
            from,
            stop.clone(),
            until.clone(),
        ));
        LongWatch { stop, until, task }
    }

    /// Waits until the client saw `through` and returns what it saw.
    async fn finish(self, through: u64) -> Watcher {
        *self.until.lock().unwrap() = through;
        self.stop.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .unwrap_or_else(|_| panic!("the watching client did not reach {through}"))
            .expect("the watching client")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_faults_one_member_down_changes_nothing() {
    within(Duration::from_secs(180), async {
        let (mut cluster, a, b, from) = setup().await;
        let (a, b) = (a.api(), b.api());
        // A client watches through B all along.
        let watching = LongWatch::start(&b, from);
        let (mut changes, _) = exercise(&a, &b, "all-up").await;
        // A follower down: the first one in `--etcd-servers` when the leader is not first.
        let leader = cluster.leader().await;
        let follower = usize::from(leader == 0);
        cluster.kill(follower);
        changes.extend(exercise(&a, &b, "follower-down").await.0);
        assert_ready(&a).await;
        assert_ready(&b).await;
        // A replica starting now connects through the members that answer.
        let c = Replica::start("C", &cluster);
        changes.extend(exercise(&c.api(), &b, "follower-down-c").await.0);
        assert_ready(&c.api()).await;
        cluster.restart(follower).expect("restart the follower");
        cluster.wait_member(follower).await;
        changes.extend(exercise(&a, &b, "follower-back").await.0);
        // The leader down: after the election, the same.
        let leader = cluster.leader().await;
        cluster.kill(leader);
        cluster.leader().await;
        changes.extend(exercise(&a, &b, "leader-down").await.0);
        changes.extend(exercise(&c.api(), &a, "leader-down-c").await.0);
        assert_ready(&a).await;
        assert_ready(&b).await;
        cluster.restart(leader).expect("restart the old leader");
        cluster.wait_member(leader).await;
        // Every member down once, in turn: whichever one a replica's own watch of etcd uses
        // goes away at some point.
        for i in 0..cluster.size() {
            cluster.kill(i);
            cluster.leader().await;
            changes.extend(exercise(&a, &b, &format!("member{i}-down")).await.0);
            cluster.restart(i).expect("restart the member");
            cluster.wait_member(i).await;
        }
        changes.extend(exercise(&a, &b, "all-back").await.0);
        let through = changes.iter().map(|c| c.rv).max().unwrap_or(0) + 1;
        let seen = watching.finish(through).await;
        println!("the watching client re-watched {:?}", seen.rewatches);
        assert_same_changes(&seen.changes, &changes, "the client watching through B");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_faults_a_frozen_member_changes_nothing() {
    within(Duration::from_secs(180), async {
        let (cluster, a, b, from) = setup().await;
        let (a, b) = (a.api(), b.api());
        let watching = LongWatch::start(&b, from);
        let (mut changes, _) = exercise(&a, &b, "all-up").await;
        // SIGSTOP: connections to the member stay open and nothing answers on them, as behind
        // a partition. Each member in turn, the leader among them.
        let mut unsure = BTreeSet::new();
        for i in 0..cluster.size() {
            cluster.pause(i);
            cluster.leader().await;
            let tag = format!("member{i}-frozen");
            let (made, failed) = exercise_reading(&a, &b, &tag, true).await;
            changes.extend(made);
            if failed > 0 {
                unsure.insert(tag);
            }
            assert_ready(&a).await;
            assert_ready(&b).await;
            cluster.resume(i);
            cluster.wait_member(i).await;
        }
        changes.extend(exercise(&a, &b, "all-thawed").await.0);
        let through = changes.iter().map(|c| c.rv).max().unwrap_or(0) + 1;
        let seen = watching.finish(through).await;
        println!("the watching client re-watched {:?}", seen.rewatches);
        let late = assert_changes(
            &seen.changes,
            &changes,
            &unsure,
            "the client watching through B",
        );
        println!("applied after their attempts had failed: {late:?}");
    })
    .await;
}

/// Asserts that `/readyz` answers 200 `ok`.
async fn assert_ready(api: &Api) {
    let ready = api.send("GET", "/readyz", None).await;
    assert!(
        matches!(&ready, Ok((200, v)) if v == "ok"),
        "/readyz on {}: {ready:?}",
        api.name
    );
}

/// Whether the answer is a 5xx Status.
fn is_5xx_status(answer: &Answer) -> bool {
    matches!(answer, Ok((code, v)) if *code >= 500 && v["kind"] == "Status" && v["code"] == *code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_faults_with_etcd_unreachable_a_replica_fails_fast_and_is_not_ready() {
    within(Duration::from_secs(180), async {
        let (mut cluster, a, b, _) = setup().await;
        let (a, b) = (a.api(), b.api());
        let before = a
            .expect(
                201,
                "POST",
                &sa_path(NS),
                Some(&json!({"metadata": {"name": "before"}})),
            )
            .await;
        // A client watches through B across the outage, re-watching when its stream ends.
        let stop = Arc::new(AtomicBool::new(false));
        let until = Arc::new(Mutex::new(u64::MAX));
        let watcher = tokio::spawn(watch_through_faults(
            b.clone(),
            rv(&before),
            stop.clone(),
            until.clone(),
        ));
        assert_ready(&a).await;
        let verbose = a.send("GET", "/readyz?verbose", None).await;
        assert!(
            matches!(&verbose, Ok((200, v)) if v == "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]informer-sync ok\n[+]shutdown ok\nreadyz check passed\n"),
            "{verbose:?}"
        );
        for i in 0..cluster.size() {
            cluster.kill(i);
        }
        let path = format!("{}/before", sa_path(NS));
        let body = json!({"metadata": {"name": "during"}});
        let requests: [(&str, &str, Option<&Value>); 3] = [
            ("GET", &path, None),
            ("GET", &sa_path(NS), None),
            ("POST", &sa_path(NS), Some(&body)),
        ];
        for (method, path, body) in requests {
            let started = Instant::now();
            let answer = a
                .send_within(method, path, body, Duration::from_secs(30))
                .await;
            let took = started.elapsed();
            println!("with etcd down, {method} {path} answered in {took:?}: {answer:?}");
            assert!(is_5xx_status(&answer), "{method} {path}: {answer:?}");
        }
        let started = Instant::now();
        let ready = a.send("GET", "/readyz?verbose", None).await;
        println!(
            "with etcd down, /readyz answered in {:?}: {ready:?}",
            started.elapsed()
        );
        let (code, text) = ready.expect("/readyz answers");
        assert_eq!(code, 503, "{text}");
        assert_eq!(
            text,
            "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]informer-sync ok\n\
             [+]shutdown ok\nreadyz check failed\n"
        );
        let live = a.send("GET", "/livez", None).await.expect("/livez answers");
        assert_eq!(live.0, 200, "/livez does not depend on storage: {live:?}");
        // etcd comes back: the replica is ready again and serves.
        for i in 0..cluster.size() {
            cluster.restart(i).expect("restart a member");
        }
        cluster.leader().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, v)) = a.send("GET", "/readyz", None).await {
                assert_eq!(v, "ok");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz still fails 60 s after etcd came back"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let after = a
            .expect(
                201,
                "POST",
                &sa_path(NS),
                Some(&json!({"metadata": {"name": "after"}})),
            )
            .await;
        a.expect(200, "GET", &path, None).await;
        // The watching client saw the write after the outage, once, and nothing else.
        *until.lock().unwrap() = rv(&after);
        stop.store(true, Ordering::SeqCst);
        let seen = tokio::time::timeout(Duration::from_secs(30), watcher)
            .await
            .expect("the watcher on B did not see the write after the outage")
            .expect("the watcher");
        println!(
            "the watcher on B re-watched {} times across the outage: {:?}",
            seen.rewatches.len(),
            seen.rewatches
        );
        assert_same_changes(&seen.changes, &[acked("ADDED", &after)], "the watcher on B");
        let list = a.expect(200, "GET", &sa_path(NS), None).await;
        let names: BTreeSet<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        assert!(
            names.contains("before") && names.contains("after"),
            "{names:?}"
        );
    })
    .await;
}
