//! Test support: starts the real `strata` binary on 127.0.0.1 with a temporary data directory
//! and talks to it over HTTP.
//!
//! `STRATA_TEST_STORAGE` picks the storage every [`TestServer`] runs on: `rocksdb` (the default)
//! is one process on the embedded engine; `etcd` is a throwaway etcd per server (started from
//! `/usr/bin/etcd`) and two `strata serve` replicas over it. On etcd the harness's own requests
//! that write (POST, PUT, PATCH, DELETE) go to replica A and the reads (GET, HEAD) and watch
//! streams go to replica B, so every test also checks that the replicas agree. Real clients
//! (kubectl, kube-rs, the Python client) take one URL: [`TestServer::client_addr`] is a small
//! router in the test process that sends their GETs to B and everything else to A. Clients of
//! a TLS server use its admin kubeconfig, which names replica B alone.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use strata_store_etcd::testing::TestEtcd;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// The storage the test servers run on (`STRATA_TEST_STORAGE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// One process on the embedded RocksDB engine (`rocksdb`, the default).
    RocksDb,
    /// Two replicas over a throwaway etcd (`etcd`).
    Etcd,
}

/// The storage chosen by `STRATA_TEST_STORAGE`; panics on a value it does not know.
pub fn storage() -> Storage {
    match std::env::var("STRATA_TEST_STORAGE").as_deref() {
        Err(_) | Ok("") | Ok("rocksdb") => Storage::RocksDb,
        Ok("etcd") => Storage::Etcd,
        Ok(other) => panic!("STRATA_TEST_STORAGE={other:?}: expected rocksdb or etcd"),
    }
}

/// A running server: one process, or on etcd two replicas and their etcd. Every process is
/// killed (SIGKILL) on drop.
pub struct TestServer {
    /// The processes: the read replica first, then (on etcd) the write replica.
    children: Vec<Child>,
    /// Where reads, watches and real clients go (`host:port`): the only process on RocksDB,
    /// replica B on etcd.
    pub addr: String,
    /// Where the harness's writes go: `addr` on RocksDB, replica A on etcd.
    write_addr: String,
    /// The etcd the replicas share, as long as this server holds it (shared with a server
    /// started again on the same data directory while this one is in scope).
    etcd: Option<Arc<TestEtcd>>,
    /// The router in front of the two replicas, started by the first [`Self::client_addr`].
    router: std::sync::OnceLock<Router>,
    _tmp: Option<tempfile::TempDir>,
    client: HttpClient,
}

/// The answer to one request.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn code(&self) -> u16 {
        self.status.as_u16()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// Flags every test server gets unless it asks for TLS: plain HTTP, requests without
/// credentials allowed, and no authorization (tests of security override these).
const PLAIN: [&str; 3] = [
    "--insecure-http",
    "--anonymous-auth=true",
    "--authorization-mode=AlwaysAllow",
];

/// The `strata` binary: where nextest says it is when the tests run from an archive
/// (`NEXTEST_BIN_EXE_strata`, so that a run does not see the binaries of a later build), else
/// where Cargo built it.
pub fn strata_bin() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_strata")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_strata")))
}

fn spawn(data_dir: &Path, extra: &[&str], tls: bool) -> (Child, String) {
    let mut child = start_process(data_dir, extra, tls);
    let addr = listening_addr(&mut child, tls);
    (child, addr)
}

/// Starts `strata serve` on `data_dir` with the defaults and `extra`, its stdout piped for
/// [`listening_addr`].
fn start_process(data_dir: &Path, extra: &[&str], tls: bool) -> Child {
    let defaults: &[&str] = if tls { &[] } else { &PLAIN };
    Command::new(strata_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(defaults)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start strata")
}

/// Waits for the first line a started server prints and returns the `host:port` it names.
pub fn listening_addr(child: &mut Child, tls: bool) -> String {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the listening line");
    let scheme = if tls { "https://" } else { "http://" };
    line.trim()
        .strip_prefix("strata: listening on ")
        .and_then(|url| url.strip_prefix(scheme))
        .unwrap_or_else(|| panic!("unexpected first line from strata: {line:?}"))
        .to_string()
}

/// The etcds of the servers that run in this process, by data directory: a server started again
/// on a data directory while the first one is still in scope (killed or terminated, as a crash
/// or restart test does) finds the same etcd, as a restarted kube-apiserver finds its cluster.
/// An etcd goes when the last server holding it is dropped.
fn etcd_for(data_dir: &Path) -> Arc<TestEtcd> {
    static LIVE: Mutex<Vec<(PathBuf, Weak<TestEtcd>)>> = Mutex::new(Vec::new());
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|(_, etcd)| etcd.strong_count() > 0);
    if let Some(etcd) = live
        .iter()
        .find(|(dir, _)| dir == data_dir)
        .and_then(|(_, etcd)| etcd.upgrade())
    {
        return etcd;
    }
    // An etcd that dies at start (a loopback port taken by another test between its choice and
    // etcd's bind) is replaced by one on other ports.
    let mut last = String::new();
    let etcd = (0..3)
        .find_map(|_| {
            let etcd = TestEtcd::start().unwrap_or_else(|e| {
                panic!(
                    "STRATA_TEST_STORAGE=etcd needs {} (apt-get install -y etcd-server): {e}",
                    strata_store_etcd::testing::ETCD
                )
            });
            match wait_healthy(&etcd.url) {
                Ok(()) => Some(etcd),
                Err(e) => {
                    last = e;
                    None
                }
            }
        })
        .unwrap_or_else(|| panic!("three etcds in a row did not start: {last}"));
    let etcd = Arc::new(etcd);
    live.push((data_dir.to_path_buf(), Arc::downgrade(&etcd)));
    etcd
}

/// Waits until the etcd at `url` (`http://host:port`) reports itself healthy (it has a leader),
/// asking its `/health` endpoint; fails after 20 s.
fn wait_healthy(url: &str) -> Result<(), String> {
    let addr = url.strip_prefix("http://").expect("an http:// etcd URL");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answer = std::net::TcpStream::connect(addr).and_then(|mut tcp| {
            tcp.set_read_timeout(Some(Duration::from_secs(2)))?;
            tcp.write_all(b"GET /health HTTP/1.0\r\nHost: etcd\r\n\r\n")?;
            let mut text = String::new();
            tcp.read_to_string(&mut text)?;
            Ok(text)
        });
        if matches!(&answer, Ok(text) if text.contains("\"health\":\"true\"")) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "etcd at {url} is not healthy after 20 s: {answer:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An HTTP/1.1 router on 127.0.0.1 in front of two replicas, for clients that take one URL:
/// GET and HEAD go to the read replica, every other method to the write replica. It runs on a
/// thread of its own (the synchronous tests have no runtime) and stops when dropped.
struct Router {
    addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Headers that belong to one connection, not to the request or response the router passes on.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

impl Router {
    fn start(read: &str, write: &str) -> Router {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the router");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("router address").to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (read, write) = (format!("http://{read}"), format!("http://{write}"));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the router's runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("the router's listener");
                let upstream: Client<_, hyper::body::Incoming> =
                    Client::builder(TokioExecutor::new()).build_http();
                let bases = Arc::new((read, write));
                let accept = async {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else {
                            continue;
                        };
                        let (upstream, bases) = (upstream.clone(), bases.clone());
                        let service = hyper::service::service_fn(move |req| {
                            Router::forward(upstream.clone(), bases.clone(), req)
                        });
                        tokio::spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        Router {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    async fn forward(
        upstream: Client<hyper_util::client::legacy::connect::HttpConnector, hyper::body::Incoming>,
        bases: Arc<(String, String)>,
        req: Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        let (mut parts, body) = req.into_parts();
        let base = match parts.method {
            Method::GET | Method::HEAD => &bases.0,
            _ => &bases.1,
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = format!("{base}{path}").parse().expect("upstream URI");
        parts.headers.remove(hyper::header::HOST);
        for name in HOP_BY_HOP {
            parts.headers.remove(name);
        }
        let mut resp = upstream.request(Request::from_parts(parts, body)).await?;
        for name in HOP_BY_HOP {
            resp.headers_mut().remove(name);
        }
        Ok(resp)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The data directory of the write replica (A) of a server on etcd whose read replica (B)
/// has `data_dir`: inside it, since on etcd a data directory holds only the TLS material and
/// the admin kubeconfig.
fn write_replica_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("replica-a")
}

impl TestServer {
    /// Starts a server on a fresh temporary data directory.
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> TestServer {
        let tmp = tempfile::tempdir().expect("temp dir");
        let data_dir = tmp.path().to_path_buf();
        let mut s = Self::start_in(&data_dir, extra);
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server on an existing data directory (kept by the caller).
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> TestServer {
        Self::spawned(data_dir, extra, false)
    }

    /// Starts a plain-HTTP server that requires credentials: the users of the token file
    /// `tokens` (Kubernetes' CSV), and `extra` flags. The directory holds the data and the
    /// token file; keep it as long as the server runs.
    pub fn start_with_tokens(tokens: &str, extra: &[&str]) -> (TestServer, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("tokens.csv");
        std::fs::write(&file, tokens).expect("token file");
        let mut flags = vec![
            "--anonymous-auth=false",
            "--token-auth-file",
            file.to_str().expect("utf-8 path"),
        ];
        flags.extend_from_slice(extra);
        let s = Self::start_in(&dir.path().join("data"), &flags);
        (s, dir)
    }

    /// Starts a server with its defaults (TLS from its own CA, credentials required) on an
    /// existing data directory. Its plain-HTTP helpers do not apply; use the admin kubeconfig.
    pub fn start_tls_in(data_dir: &Path, extra: &[&str]) -> TestServer {
        Self::spawned(data_dir, extra, true)
    }

    /// On RocksDB, or when `extra` names a `--storage-backend`, one process on `data_dir`. On
    /// etcd the etcd of `data_dir` (started unless a server on it is still in scope), and at once
    /// replica B on `data_dir` (the caller finds its admin kubeconfig there, naming B) and
    /// replica A on a directory inside it. The replicas share the CA and admin token through
    /// the store.
    fn spawned(data_dir: &Path, extra: &[&str], tls: bool) -> TestServer {
        let client = Client::builder(TokioExecutor::new()).build_http();
        // A test that names its backend (etcd of its own, memory, or RocksDB for a test about
        // moving data) gets exactly one process on it, whatever `STRATA_TEST_STORAGE` says.
        let chosen = extra
            .iter()
            .any(|f| *f == "--storage-backend" || f.starts_with("--storage-backend="));
        if storage() == Storage::RocksDb || chosen {
            let (child, addr) = spawn(data_dir, extra, tls);
            return TestServer {
                children: vec![child],
                write_addr: addr.clone(),
                addr,
                etcd: None,
                router: Default::default(),
                _tmp: None,
                client,
            };
        }
        let etcd = etcd_for(data_dir);
        let url = etcd.url.clone();
        let mut flags = vec!["--storage-backend", "etcd", "--etcd-servers", &url];
        flags.extend_from_slice(extra);
        // Both replicas start at once, as the replicas of one cluster may: their bootstrap (the
        // namespaces, default roles, CA, admin token and keys) races through etcd. The drop of
        // `server` kills both if either fails to start.
        let mut server = TestServer {
            children: Vec::new(),
            addr: String::new(),
            write_addr: String::new(),
            etcd: Some(etcd),
            router: Default::default(),
            _tmp: None,
            client,
        };
        server.children.push(start_process(data_dir, &flags, tls));
        server
            .children
            .push(start_process(&write_replica_dir(data_dir), &flags, tls));
        server.addr = listening_addr(&mut server.children[0], tls);
        server.write_addr = listening_addr(&mut server.children[1], tls);
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The address (`host:port`, plain HTTP) to give a real client (kubectl, kube-rs, the
    /// Python client), which takes one URL. On RocksDB the server's; on etcd a router that
    /// sends GET and HEAD to replica B and every other method to replica A, streaming bodies
    /// both ways (watches included).
    pub fn client_addr(&self) -> String {
        if self.addr == self.write_addr {
            return self.addr.clone();
        }
        self.router
            .get_or_init(|| Router::start(&self.addr, &self.write_addr))
            .addr
            .clone()
    }

    /// The etcd this server's replicas share; `None` on RocksDB.
    pub fn etcd(&self) -> Option<&TestEtcd> {
        self.etcd.as_deref()
    }

    /// Kills every process with SIGKILL, as a crash would (on etcd both replicas; etcd itself
    /// keeps running while this server is in scope).
    pub fn kill(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM to every process and waits for them to exit; returns whether they all
    /// exited cleanly.
    /// Sends SIGTERM to every process of the server and returns at once.
    pub fn signal_terminate(&self) {
        for c in &self.children {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
        }
    }

    pub fn terminate(&mut self) -> bool {
        let children: Vec<Child> = self.children.drain(..).collect();
        if children.is_empty() {
            return false;
        }
        for c in &children {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
        }
        let mut clean = true;
        for mut c in children {
            let mut exited = false;
            for _ in 0..100 {
                if let Ok(Some(status)) = c.try_wait() {
                    clean &= status.success();
                    exited = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !exited {
                let _ = c.kill();
                let _ = c.wait();
                clean = false;
            }
        }
        clean
    }

    /// Sends a request with optional body and headers.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Reply {
        self.http().send(method, path, body, headers).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.http().get(path).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.http().post_json(path, body).await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> Reply {
        self.http().put_json(path, body).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.http().delete(path).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Asserts that a reply is a Status with this code and reason.
pub fn assert_status(reply: &Reply, code: u16, reason: &str) {
    assert_eq!(
        reply.code(),
        code,
        "body: {}",
        String::from_utf8_lossy(&reply.body)
    );
    let v = reply.json();
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["apiVersion"], "v1", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
}

/// The outcome of a subprocess that ran to its end.
#[derive(Debug)]
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// Runs a command to its end with stdin closed and stdout/stderr captured in files under `dir`
/// (so a chatty child cannot block on a full pipe). Kills it and panics, showing what it printed,
/// if it runs longer than `timeout`.
pub fn run_with_timeout(cmd: &mut Command, dir: &Path, timeout: Duration) -> Finished {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out_path = dir.join(format!("run-{n}.stdout"));
    let err_path = dir.join(format!("run-{n}.stderr"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"));
    let started = std::time::Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let Some(status) = status else {
        panic!("{cmd:?} ran for more than {timeout:?} and was killed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    Finished {
        status,
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers for the list and watch tests.

/// A handle on the server's HTTP API that can be cloned into tasks (the [`TestServer`] itself
/// stays with the test, which may need it to kill or restart the process). On etcd it reads
/// from one replica and writes through the other.
#[derive(Clone)]
pub struct Http {
    /// Where GET and HEAD go.
    base: String,
    /// Where every other method goes.
    write_base: String,
    client: HttpClient,
}

impl Http {
    /// A client for a server at `addr` (`host:port`, plain HTTP) that this harness did not
    /// start, such as one running in the test's own process.
    pub fn to(addr: &str) -> Http {
        Http {
            base: format!("http://{addr}"),
            write_base: format!("http://{addr}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl TestServer {
    /// A cloneable client for this server: reads go to [`TestServer::addr`], writes (on etcd)
    /// to replica A.
    pub fn http(&self) -> Http {
        Http {
            base: format!("http://{}", self.addr),
            write_base: format!("http://{}", self.write_addr),
            client: self.client.clone(),
        }
    }

    /// Sends a JSON merge patch.
    pub async fn patch_merge(&self, path: &str, body: &Value) -> Reply {
        self.http().patch_merge(path, body).await
    }

    /// Opens a watch (or any streaming GET) on its own connection; see [`WatchStream::open`].
    pub async fn watch(&self, path: &str) -> WatchStream {
        WatchStream::open(&self.addr, path, WatchOptions::default()).await
    }
}

impl Http {
    /// Sends a request with optional body and headers.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let base = match method {
            "GET" | "HEAD" => &self.base,
            _ => &self.write_base,
        };
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(format!("{base}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body.unwrap_or(b""))))
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .expect("request timed out")
            .expect("request failed");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None, &[]).await
    }

    /// Sends `body` as JSON with this method and content type.
    pub async fn send_json(
        &self,
        method: &str,
        path: &str,
        body: &Value,
        content_type: &str,
    ) -> Reply {
        let bytes = serde_json::to_vec(body).expect("encode");
        self.send(
            method,
            path,
            Some(&bytes),
            &[("content-type", content_type)],
        )
        .await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.send_json("POST", path, body, "application/json").await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> Reply {
        self.send_json("PUT", path, body, "application/json").await
    }

    pub async fn patch_merge(&self, path: &str, body: &Value) -> Reply {
        self.send_json("PATCH", path, body, "application/merge-patch+json")
            .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send("DELETE", path, None, &[]).await
    }

    /// A request as the bearer of `token`, with a JSON body when one is given.
    pub async fn as_token(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Reply {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("encode"));
        let auth = format!("Bearer {token}");
        self.send(
            method,
            path,
            bytes.as_deref(),
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
        )
        .await
    }

    /// DELETE with a JSON DeleteOptions body.
    pub async fn delete_json(&self, path: &str, options: &Value) -> Reply {
        self.send_json("DELETE", path, options, "application/json")
            .await
    }

    /// Polls `path` until it answers 404; panics after `limit`.
    pub async fn wait_gone(&self, path: &str, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let r = self.get(path).await;
            if r.code() == 404 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path} still there after {limit:?}: {}",
                String::from_utf8_lossy(&r.body)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `metadata.resourceVersion` of an object, event object or list, as a number. Strata's resource
/// versions are decimal revisions; the tests compare them to check ordering guarantees.
pub fn rv_of(v: &Value) -> u64 {
    let s = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no metadata.resourceVersion string in {v}"));
    s.parse()
        .unwrap_or_else(|e| panic!("resourceVersion {s:?} is not a revision ({e}) in {v}"))
}

/// `metadata.name` of an object.
pub fn name_of(v: &Value) -> &str {
    v["metadata"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("no metadata.name in {v}"))
}

/// Percent-encodes a query parameter value (everything but RFC 3986 unreserved characters).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of one sample in Prometheus text exposition format: the line of metric `name` whose
/// labels include all of `labels` (in any order). `None` when there is no such line.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(p) => p,
            None => continue,
        };
        let (metric, label_text) = match series.split_once('{') {
            Some((m, rest)) => (m, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let present: Vec<(String, String)> = label_text
            .split(',')
            .filter(|p| !p.is_empty())
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
            })
            .collect();
        if labels
            .iter()
            .all(|(k, v)| present.iter().any(|(pk, pv)| pk == k && pv == v))
        {
            return value.trim().parse().ok();
        }
    }
    None
}

/// How to open a [`WatchStream`].
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// The response headers must arrive within this time, or the test fails.
    pub headers_within: Duration,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    /// `SO_RCVBUF` for the client socket; a small one lets a test that stops reading fill the
    /// server's send path quickly.
    pub recv_buffer: Option<u32>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            headers_within: Duration::from_secs(10),
            headers: Vec::new(),
            recv_buffer: None,
        }
    }
}

/// What reading a watch stream produced.
#[derive(Debug)]
pub enum Next {
    /// One event (one line of the body, parsed as JSON).
    Event(Value),
    /// The server ended the response cleanly.
    End,
    /// Nothing complete arrived within the wait.
    Idle,
}

/// A streaming response read incrementally, one JSON document per line, over a dedicated HTTP/1.1
/// connection (so a test can hold it open without reading, or read it long after it was opened).
pub struct WatchStream {
    pub status: StatusCode,
    pub headers: HeaderMap,
    path: String,
    body: hyper::body::Incoming,
    buf: Vec<u8>,
    ended: bool,
    conn: tokio::task::JoinHandle<()>,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl WatchStream {
    /// Sends `GET path` to `addr` on a new connection and waits for the response headers (not
    /// for any of the body). Panics if they do not arrive within `opts.headers_within`.
    pub async fn open(addr: &str, path: &str, opts: WatchOptions) -> WatchStream {
        let sock_addr: std::net::SocketAddr = addr.parse().expect("server address");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        if let Some(n) = opts.recv_buffer {
            socket.set_recv_buffer_size(n).expect("SO_RCVBUF");
        }
        let tcp = socket.connect(sock_addr).await.expect("connect");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .expect("HTTP/1.1 handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header("host", addr);
        for (k, v) in &opts.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("request");
        let resp = match tokio::time::timeout(opts.headers_within, sender.send_request(req)).await {
            Ok(r) => r.unwrap_or_else(|e| panic!("GET {path} failed: {e}")),
            Err(_) => panic!(
                "GET {path}: no response headers within {:?}",
                opts.headers_within
            ),
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        WatchStream {
            status,
            headers,
            path: path.to_string(),
            body: resp.into_body(),
            buf: Vec::new(),
            ended: false,
            conn,
        }
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Takes one complete line out of the buffer, skipping empty ones.
    fn take_line(&mut self) -> Option<Value> {
        loop {
            let pos = self.buf.iter().position(|b| *b == b'\n')?;
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = &line[..line.len() - 1];
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(serde_json::from_slice(line).unwrap_or_else(|e| {
                panic!(
                    "watch {}: a line is not one JSON document ({e}): {}",
                    self.path,
                    String::from_utf8_lossy(line)
                )
            }));
        }
    }

    /// The next event, the end of the stream, or `Idle` if nothing complete arrives within `wait`.
    /// Panics if the connection breaks instead of ending cleanly, or if the body ends in the middle
    /// of a line.
    pub async fn next_within(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(v) = self.take_line() {
                return Next::Event(v);
            }
            if self.ended {
                assert!(
                    self.buf.iter().all(u8::is_ascii_whitespace),
                    "watch {}: the body ended inside a line: {}",
                    self.path,
                    String::from_utf8_lossy(&self.buf)
                );
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Next::Idle,
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => panic!(
                    "watch {}: the stream broke instead of ending cleanly: {e}",
                    self.path
                ),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event; panics if the stream ends or nothing arrives within `wait`.
    pub async fn next_event_within(&mut self, wait: Duration) -> Value {
        match self.next_within(wait).await {
            Next::Event(v) => v,
            Next::End => panic!("watch {}: the stream ended, expected an event", self.path),
            Next::Idle => panic!("watch {}: no event within {wait:?}", self.path),
        }
    }

    /// The next event within 15 seconds.
    pub async fn next_event(&mut self) -> Value {
        self.next_event_within(Duration::from_secs(15)).await
    }

    /// The next event that is not a BOOKMARK, within 15 seconds.
    pub async fn next_change(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let e = self.next_event_within(left).await;
            if e["type"] != "BOOKMARK" {
                return e;
            }
        }
    }

    /// Asserts that no event other than BOOKMARKs arrives within `wait` (and that the stream does
    /// not end).
    pub async fn expect_quiet(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await {
                Next::Idle => return,
                Next::Event(e) if e["type"] == "BOOKMARK" => {}
                Next::Event(e) => panic!("watch {}: unexpected event {e}", self.path),
                Next::End => panic!("watch {}: the stream ended unexpectedly", self.path),
            }
        }
    }

    /// Every remaining event up to the end of the stream; panics if the stream has not ended
    /// within `wait`.
    pub async fn until_end(&mut self, wait: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await {
                Next::Event(e) => events.push(e),
                Next::End => return events,
                Next::Idle => panic!(
                    "watch {}: did not end within {wait:?}; got {} events, last {:?}",
                    self.path,
                    events.len(),
                    events.last()
                ),
            }
        }
    }
}

/// Asserts that a JSON value is a Status with this code and reason (as [`assert_status`] does for
/// a whole reply).
pub fn assert_status_value(v: &Value, code: u16, reason: &str) {
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["apiVersion"], "v1", "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
}

/// Runs a test body with a deadline, so that a hung request or watch fails the test instead of
/// hanging it.
pub async fn within<F: std::future::Future>(limit: Duration, body: F) -> F::Output {
    match tokio::time::timeout(limit, body).await {
        Ok(out) => out,
        Err(_) => panic!("the test did not finish within {limit:?}"),
    }
}

/// The ServiceAccount collection path of a namespace.
pub fn sa_path(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/serviceaccounts")
}

/// The `metadata.name`s of a list's items, in list order.
pub fn item_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items array in {list}"))
        .iter()
        .map(|i| name_of(i).to_string())
        .collect()
}

/// What the server's controllers keep in every namespace, as Kubernetes' do: the ServiceAccount
/// `default` and (on a TLS server) the ConfigMap `kube-root-ca.crt`. Tests that count the
/// ServiceAccounts or ConfigMaps of a namespace leave them out, as Kubernetes' e2e tests do.
pub const NAMESPACE_DEFAULTS: [&str; 2] = ["default", "kube-root-ca.crt"];

/// The namespaces a new server starts with, as kube-apiserver's.
pub const STARTING_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// [`item_names`] of a ServiceAccount or ConfigMap list without [`NAMESPACE_DEFAULTS`].
pub fn own_item_names(list: &Value) -> Vec<String> {
    item_names(list)
        .into_iter()
        .filter(|n| !NAMESPACE_DEFAULTS.contains(&n.as_str()))
        .collect()
}

impl Http {
    /// Creates a namespace; panics unless the answer is 201.
    pub async fn create_namespace(&self, name: &str) -> Value {
        let r = self
            .post_json(
                "/api/v1/namespaces",
                &serde_json::json!({"metadata": {"name": name}}),
            )
            .await;
        assert_eq!(
            r.code(),
            201,
            "create namespace {name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.json()
    }

    /// Creates a ServiceAccount with these labels (a JSON object, or null for none); panics unless
    /// the answer is 201. Returns the created object.
    pub async fn create_sa(&self, ns: &str, name: &str, labels: Value) -> Value {
        let mut metadata = serde_json::json!({"name": name});
        if !labels.is_null() {
            metadata["labels"] = labels;
        }
        let r = self
            .post_json(&sa_path(ns), &serde_json::json!({"metadata": metadata}))
            .await;
        assert_eq!(
            r.code(),
            201,
            "create serviceaccount {ns}/{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.json()
    }

    /// Waits (up to 15 s) until the server's ServiceAccount controller has made the `default`
    /// ServiceAccount of `ns`, so that a test can count it in.
    pub async fn wait_default_sa(&self, ns: &str) {
        let path = format!("{}/default", sa_path(ns));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while self.get(&path).await.code() != 200 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no default ServiceAccount in {ns}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// GETs a path that must answer 200 with JSON.
    pub async fn get_ok(&self, path: &str) -> Value {
        let r = self.get(path).await;
        assert_eq!(
            r.code(),
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.json()
    }
}

/// Merges `patch` into `target` recursively (objects merge, anything else replaces): the tests'
/// way of building a body from a base and a variation.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}
