//! The HTTP pieces of `cargo xtask bench`: a closed-loop load generator (one keep-alive HTTP/1.1
//! connection per client, or clients sharing HTTP/2 connections; requests sent back to back)
//! and the trivial "hello" server that sets the ceiling. Neither knows anything about Strata
//! beyond URL paths and bodies.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::Result;

/// Longest a single request may take before it counts as an error and its connection is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What every client of a scenario sends, over and over.
#[derive(Clone, Debug)]
pub enum Workload {
    /// `GET path`.
    Get { path: String },
    /// `POST` a new ServiceAccount named `bench-<client>-<seq>` into namespace `default`.
    CreateServiceAccount,
    /// `POST body` to `path`, with [`NAME_SLOT`] in `body` replaced by `bench-<client>-<seq>`.
    Create { path: String, body: Arc<str> },
}

/// Where [`Workload::Create`] puts each new object's name in its body.
pub const NAME_SLOT: &str = "@NAME@";

/// How clients reach the server: plain HTTP without credentials by default, or TLS (trusting
/// one CA) and a bearer token.
#[derive(Clone, Default)]
pub struct Access {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub token: Option<String>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.tls.is_some())
            .field("token", &self.token.is_some())
            .finish()
    }
}

impl Access {
    /// TLS trusting the CA certificates of `ca_pem`, with `token`.
    pub fn tls(ca_pem: &[u8], token: &str) -> Result<Access> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem) {
            roots.add(cert.map_err(|e| format!("CA certificate: {e}"))?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Access {
            tls: Some(Arc::new(config)),
            token: Some(token.to_string()),
        })
    }

    /// Plain HTTP with `token`.
    pub fn token(token: &str) -> Access {
        Access {
            tls: None,
            token: Some(token.to_string()),
        }
    }
}

/// One measured run: `clients` concurrent connections against `addr`.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub addr: SocketAddr,
    pub clients: usize,
    /// Client numbers start here, so object names stay unique across scenarios.
    pub first_client: usize,
    pub workload: Workload,
    pub expect: StatusCode,
    pub warmup: Duration,
    pub measure: Duration,
    pub access: Access,
    /// 0: each client has a keep-alive HTTP/1.1 connection of its own. n > 0: the clients
    /// share n HTTP/2 connections (h2c with prior knowledge, plain HTTP only), each request a
    /// stream, as client-go and etcd's clients send concurrent requests.
    pub http2_connections: usize,
}

/// What a scenario measured. Only requests that started after the warm-up and finished before
/// the end count.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Responses with the expected status.
    pub ok: u64,
    /// Latencies of the `ok` responses, in nanoseconds, sorted.
    pub latencies_ns: Vec<u64>,
    /// Unexpected statuses and transport failures: kind → (count, first response body seen).
    pub errors: BTreeMap<String, (u64, String)>,
    pub measured: Duration,
}

impl Outcome {
    /// Successful requests per second.
    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.measured.as_secs_f64().max(f64::EPSILON)
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().map(|(n, _)| n).sum()
    }

    /// The nearest-rank percentile `p` (0–100) of successful latencies.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.latencies_ns, p).map(Duration::from_nanos)
    }

    fn merge(&mut self, other: Outcome) {
        self.ok += other.ok;
        self.latencies_ns.extend(other.latencies_ns);
        for (kind, (n, sample)) in other.errors {
            let entry = self.errors.entry(kind).or_insert((0, sample));
            entry.0 += n;
        }
    }

    fn record_error(&mut self, kind: String, sample: String) {
        self.errors.entry(kind).or_insert((0, sample)).0 += 1;
    }
}

fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Runs a scenario to completion: warm-up, then the measured window.
pub async fn run(scenario: &Scenario) -> Outcome {
    let start = Instant::now();
    let warm_end = start + scenario.warmup;
    let end = warm_end + scenario.measure;
    let mut total = Outcome {
        measured: scenario.measure,
        ..Outcome::default()
    };
    let mut shared = Vec::with_capacity(scenario.http2_connections);
    for _ in 0..scenario.http2_connections {
        match connect_h2(scenario.addr).await {
            Ok(sender) => shared.push(sender),
            Err(e) => {
                total.record_error(format!("connect (HTTP/2): {e}"), String::new());
                return total;
            }
        }
    }
    let tasks: Vec<_> = (0..scenario.clients)
        .map(|i| {
            let client = scenario.first_client + i;
            let scenario = scenario.clone();
            let sender =
                (!shared.is_empty()).then(|| Sender::Http2(shared[i % shared.len()].clone()));
            tokio::spawn(async move { client_loop(&scenario, client, sender, warm_end, end).await })
        })
        .collect();
    for task in tasks {
        match task.await {
            Ok(outcome) => total.merge(outcome),
            Err(e) => total.record_error("client task panicked".into(), e.to_string()),
        }
    }
    total.latencies_ns.sort_unstable();
    total
}

/// A client's way to the server: its own HTTP/1.1 connection, or a shared HTTP/2 one.
enum Sender {
    Http1(Connection),
    Http2(H2Connection),
}

impl Sender {
    async fn send(&mut self, mut request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes)> {
        match self {
            Sender::Http1(conn) => send(conn, request).await,
            Sender::Http2(conn) => {
                // HTTP/2 carries the scheme and authority in the request's URI.
                let host = request.headers().get(HOST).cloned();
                if let Some(host) = host.as_ref().and_then(|h| h.to_str().ok()) {
                    *request.uri_mut() = format!("http://{host}{}", request.uri()).parse()?;
                }
                conn.ready().await?;
                collect(conn.send_request(request).await?).await
            }
        }
    }
}

async fn client_loop(
    scenario: &Scenario,
    client: usize,
    mut sender: Option<Sender>,
    warm_end: Instant,
    end: Instant,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut seq: u64 = 0;
    while Instant::now() < end {
        let Some(conn) = sender.as_mut() else {
            let connected = if scenario.http2_connections > 0 {
                connect_h2(scenario.addr).await.map(Sender::Http2)
            } else {
                connect_with(scenario.addr, &scenario.access)
                    .await
                    .map(Sender::Http1)
            };
            match connected {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    if Instant::now() >= warm_end {
                        outcome.record_error(format!("connect: {e}"), String::new());
                    }
                    // Do not spin against a server that refuses connections.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            continue;
        };
        let mut request = build_request(&scenario.workload, scenario.addr, client, seq);
        if let Some(token) = &scenario.access.token {
            if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("Bearer {token}")) {
                request
                    .headers_mut()
                    .insert(hyper::header::AUTHORIZATION, v);
            }
        }
        seq += 1;
        let started = Instant::now();
        let result = tokio::time::timeout(REQUEST_TIMEOUT, conn.send(request)).await;
        let done = Instant::now();
        let counted = started >= warm_end && done <= end;
        match result {
            Ok(Ok((status, _))) if status == scenario.expect => {
                if counted {
                    outcome.ok += 1;
                    outcome
                        .latencies_ns
                        .push(u64::try_from((done - started).as_nanos()).unwrap_or(u64::MAX));
                }
            }
            Ok(Ok((status, body))) => {
                if counted {
                    outcome.record_error(format!("HTTP {status}"), snippet(&body));
                }
            }
            Ok(Err(e)) => {
                if counted {
                    outcome.record_error(format!("transport: {e}"), String::new());
                }
                sender = None;
            }
            Err(_) => {
                if counted {
                    outcome.record_error("timeout".into(), String::new());
                }
                sender = None;
            }
        }
    }
    outcome
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        out.push('…');
    }
    out
}

fn build_request(
    workload: &Workload,
    addr: SocketAddr,
    client: usize,
    seq: u64,
) -> Request<Full<Bytes>> {
    let builder = Request::builder()
        .header(HOST, addr.to_string())
        .header(ACCEPT, "application/json");
    let request = match workload {
        Workload::Get { path } => builder
            .method(Method::GET)
            .uri(path.as_str())
            .body(Full::new(Bytes::new())),
        Workload::CreateServiceAccount => builder
            .method(Method::POST)
            .uri("/api/v1/namespaces/default/serviceaccounts")
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(service_account_body(&format!(
                "bench-{client}-{seq}"
            ))))),
        Workload::Create { path, body } => builder
            .method(Method::POST)
            .uri(path.as_str())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.replacen(
                NAME_SLOT,
                &format!("bench-{client}-{seq}"),
                1,
            )))),
    };
    // The method, the header values and the paths (fixed strings in this file) are all valid.
    request.expect("bench requests are well-formed")
}

/// The body that creates a ServiceAccount called `name`.
pub fn service_account_body(name: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": name },
    })
    .to_string()
}

/// The sending half of a client connection.
pub type Connection = SendRequest<Full<Bytes>>;

/// Opens one keep-alive HTTP/1.1 connection to `addr` as `access` says (TLS or not).
pub async fn connect_with(addr: SocketAddr, access: &Access) -> Result<Connection> {
    let Some(tls) = &access.tls else {
        return connect(addr).await;
    };
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, stream)
        .await?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// The sending half of a shared HTTP/2 client connection.
pub type H2Connection = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// Opens an HTTP/2 connection to `addr` (h2c with prior knowledge), Nagle off, its driver
/// spawned.
pub async fn connect_h2(addr: SocketAddr) -> Result<H2Connection> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Opens one keep-alive HTTP/1.1 connection to `addr`, with Nagle off.
pub async fn connect(addr: SocketAddr) -> Result<Connection> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        // The error, if any, surfaces again on the next send; nothing to add here.
        let _ = connection.await;
    });
    Ok(sender)
}

async fn send(conn: &mut Connection, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes)> {
    conn.ready().await?;
    collect(conn.send_request(request).await?).await
}

/// A response's status and whole body.
async fn collect(response: Response<Incoming>) -> Result<(StatusCode, Bytes)> {
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Sends `request` on `conn` and returns the status, headers and whole body; fails after
/// [`REQUEST_TIMEOUT`].
pub async fn send_full(
    conn: &mut Connection,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, hyper::HeaderMap, Bytes)> {
    let answer = async {
        conn.ready().await?;
        let response = conn.send_request(request).await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, headers, body))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, answer)
        .await
        .map_err(|_| format!("no answer within {REQUEST_TIMEOUT:?}"))?
        .map_err(|e| e.to_string().into())
}

/// One request on a fresh connection made as `access` says, with its token: setup of servers
/// that require credentials.
pub async fn request_with(
    addr: SocketAddr,
    access: &Access,
    method: Method,
    path: &str,
    body: Option<String>,
) -> Result<(StatusCode, Bytes)> {
    let mut conn = connect_with(addr, access).await?;
    let mut request = json_request(addr, method, path, body.map(Bytes::from))?;
    if let Some(token) = &access.token {
        request.headers_mut().insert(
            hyper::header::AUTHORIZATION,
            hyper::header::HeaderValue::from_str(&format!("Bearer {token}"))?,
        );
    }
    let (status, _, body) = send_full(&mut conn, request).await?;
    Ok((status, body))
}

/// One request on a fresh connection: readiness probes and setup.
pub async fn request_once(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<String>,
) -> Result<(StatusCode, Bytes)> {
    let mut conn = connect(addr).await?;
    request_on(&mut conn, addr, method, path, body.map(Bytes::from)).await
}

/// One request on an open connection, with a JSON body when `body` is given; fails after
/// [`REQUEST_TIMEOUT`].
pub async fn request_on(
    conn: &mut Connection,
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<Bytes>,
) -> Result<(StatusCode, Bytes)> {
    let request = json_request(addr, method, path, body)?;
    tokio::time::timeout(REQUEST_TIMEOUT, send(conn, request))
        .await
        .map_err(|_| format!("{path}: no answer within {REQUEST_TIMEOUT:?}"))?
}

/// A request that accepts JSON and, when `body` is given, sends it as JSON.
pub fn json_request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Option<Bytes>,
) -> Result<Request<Full<Bytes>>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, addr.to_string())
        .header(ACCEPT, "application/json");
    if body.is_some() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    Ok(builder.body(Full::new(body.unwrap_or_default()))?)
}

/// The hidden `cargo xtask hello-server --listen ADDR`: answers every request with 200 and a
/// small JSON body, as fast as hyper can. The ceiling for `bench`.
pub fn hello_server_main(args: &[String]) -> Result<()> {
    let addr: SocketAddr = match args {
        [flag, addr] if flag == "--listen" => addr.parse()?,
        _ => return Err("usage: cargo xtask hello-server --listen ADDR".into()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(addr).await?;
        serve_hello(listener).await
    })
}

async fn serve_hello(listener: TcpListener) -> Result<()> {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Usually out of file descriptors; back off instead of exiting.
                eprintln!("hello-server: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Best effort: Nagle only adds latency for request/response traffic.
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(hello);
            // A client hanging up mid-request is normal at the end of a run. HTTP/1.1, or
            // HTTP/2 with prior knowledge, as Strata serves them.
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
        });
    }
}

const HELLO_BODY: &str = r#"{"kind":"Status","apiVersion":"v1","status":"Success","code":200}"#;

async fn hello(_request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut response = Response::new(Full::new(Bytes::from_static(HELLO_BODY.as_bytes())));
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let data: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&data, 50.0), Some(50));
        assert_eq!(percentile(&data, 99.0), Some(99));
        assert_eq!(percentile(&data, 100.0), Some(100));
        assert_eq!(percentile(&data, 0.0), Some(1));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    /// The load generator against the hello server over loopback, briefly: requests flow, a
    /// wrong expected status is counted as an error, and nothing counts outside the window.
    #[test]
    fn load_generator_measures_the_hello_server() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(serve_hello(listener));
            let mut scenario = Scenario {
                addr,
                clients: 4,
                first_client: 0,
                workload: Workload::Get { path: "/".into() },
                expect: StatusCode::OK,
                warmup: Duration::from_millis(50),
                measure: Duration::from_millis(200),
                access: Access::default(),
                http2_connections: 0,
            };
            let outcome = run(&scenario).await;
            assert!(outcome.ok > 0);
            assert_eq!(outcome.error_count(), 0, "{:?}", outcome.errors);
            assert_eq!(outcome.latencies_ns.len() as u64, outcome.ok);
            assert!(outcome.latencies_ns.windows(2).all(|w| w[0] <= w[1]));

            // Four clients sharing two HTTP/2 connections.
            scenario.http2_connections = 2;
            let outcome = run(&scenario).await;
            assert!(outcome.ok > 0);
            assert_eq!(outcome.error_count(), 0, "{:?}", outcome.errors);

            scenario.expect = StatusCode::CREATED;
            scenario.workload = Workload::CreateServiceAccount;
            let outcome = run(&scenario).await;
            assert_eq!(outcome.ok, 0);
            let (count, sample) = &outcome.errors["HTTP 200 OK"];
            assert!(*count > 0);
            assert_eq!(sample, HELLO_BODY);
        });
    }

    #[test]
    fn service_account_body_is_the_documented_shape() {
        assert_eq!(
            service_account_body("bench-3-17"),
            r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"bench-3-17"}}"#
        );
    }
}
