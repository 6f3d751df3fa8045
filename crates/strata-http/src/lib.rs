//! The HTTP frontend of Strata: routes requests by the URI layout of spec §4.1, negotiates media
//! types, calls the registry, and renders objects and `Status` errors.
//!
//! It does not decide REST semantics (that is `strata-registry`) nor turn storage errors into
//! Status (also the registry); it only renders what it is given.

mod access;
pub mod audit;
mod discovery;
mod guarded;
mod handlers;
pub mod httplog;
mod inflight;
pub mod limits;
pub mod metrics;
pub mod negotiate;
mod openapi;
mod query;
mod request;
mod respond;
mod table;
mod watch;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use strata_auth::authn::{Authenticator, AuthnConfig};
use strata_auth::authz::{AllowAll, Authorizer};
use strata_auth::rbac::RbacAuthorizer;
use strata_registry::Registry;
use tokio::net::TcpListener;
use tokio_util::either::Either;

pub use metrics::Metrics;
pub use request::RequestInfo;
pub use respond::Body;

/// The largest request body accepted (3 MiB, as Kubernetes).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Settings of the frontend.
#[derive(Clone, Debug)]
pub struct FrontendConfig {
    /// The version reported at `/version`.
    pub git_version: String,
    /// The largest request body accepted.
    pub max_body_bytes: usize,
    /// Gzip get and list responses for clients that accept it (`APIResponseCompression`).
    pub compression: bool,
    /// The optional encodings offered (CBOR behind `CBORServingAndStorage`).
    pub formats: negotiate::Formats,
    /// The name of the storage check of `/readyz` and `/healthz` (`etcd` on etcd, as
    /// kube-apiserver names it).
    pub storage_check: &'static str,
    /// Read-only requests served at once before others get 429 (`--max-requests-inflight`,
    /// 400; 0: no limit). Watches and `system:masters` are not counted.
    pub max_requests_inflight: usize,
    /// The same for mutating requests (`--max-mutating-requests-inflight`, 200).
    pub max_mutating_requests_inflight: usize,
    /// How long a request other than a watch may take before it is answered 504
    /// (`--request-timeout`, 60 s; zero: no limit).
    pub request_timeout: Duration,
    /// The streams a client may open at once on one HTTP/2 connection
    /// (`--http2-max-streams-per-connection`; 0: [`limits::DEFAULT_HTTP2_MAX_STREAMS`]).
    pub http2_max_streams_per_connection: u32,
    /// Record requests in the request and authentication metrics (the default). Off only to
    /// measure what the recording costs (`STRATA_REQUEST_METRICS=off`): requests then skip it
    /// entirely, and `/metrics` shows the process and cache figures alone.
    pub request_metrics: bool,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        Self {
            git_version: "v1.31.0-strata".into(),
            max_body_bytes: MAX_BODY_BYTES,
            compression: true,
            formats: negotiate::Formats::default(),
            storage_check: "storage",
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            request_timeout: Duration::from_secs(60),
            http2_max_streams_per_connection: 0,
            request_metrics: true,
        }
    }
}

/// Everything a request handler needs.
pub struct Frontend {
    pub registry: Arc<Registry>,
    pub config: FrontendConfig,
    /// The OpenAPI documents and the registry generation they were built for.
    openapi: std::sync::Mutex<(u64, Arc<OpenApiDocuments>)>,
    /// Set when the server shuts down: watch streams end so connections can drain.
    closing: tokio::sync::watch::Sender<bool>,
    /// Set when the shutdown signal came, before the listener closes: `/readyz` fails.
    shutting_down: std::sync::atomic::AtomicBool,
    /// The in-flight limits and counters.
    inflight: inflight::Limits,
    authorizer: Arc<dyn Authorizer>,
    /// The RBAC authorizer when it is the one in charge (for the escalation checks of role and
    /// binding writes).
    rbac: Option<Arc<RbacAuthorizer>>,
    authenticator: Authenticator,
    /// What `/metrics` shows; requests are recorded in `handlers::route`.
    metrics: Arc<Metrics>,
    /// What the health checks read besides storage and shutdown.
    health: handlers::Health,
    /// Auditing (`--audit-policy-file`); `None`, the default, records nothing.
    audit: Option<Arc<audit::Auditor>>,
}

impl std::fmt::Debug for Frontend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frontend").finish_non_exhaustive()
    }
}

/// The OpenAPI v3 documents by path below `/openapi/v3/`.
type OpenApiDocuments = std::collections::BTreeMap<String, serde_json::Value>;

impl Frontend {
    /// The OpenAPI documents of the types served now, rebuilt after a type came or went.
    fn openapi(&self) -> Arc<OpenApiDocuments> {
        let generation = self.registry.generation();
        let mut cached = self.openapi.lock().unwrap_or_else(|e| e.into_inner());
        if cached.0 != generation {
            *cached = (generation, Arc::new(openapi::documents(&self.registry)));
        }
        cached.1.clone()
    }

    pub fn new(registry: Arc<Registry>, config: FrontendConfig) -> Self {
        let openapi = (
            registry.generation(),
            Arc::new(openapi::documents(&registry)),
        );
        let authenticator = Authenticator::new(
            AuthnConfig {
                anonymous: true,
                token_file: None,
            },
            registry.clone(),
        );
        let inflight = inflight::Limits::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
        );
        Self {
            registry,
            config,
            openapi: std::sync::Mutex::new(openapi),
            closing: tokio::sync::watch::Sender::new(false),
            shutting_down: Default::default(),
            inflight,
            authorizer: Arc::new(AllowAll),
            rbac: None,
            authenticator,
            metrics: Arc::new(Metrics::new()),
            health: Default::default(),
            audit: None,
        }
    }

    /// Audits requests with `auditor` (its policy and log backend).
    pub fn with_audit(mut self, auditor: audit::Auditor) -> Self {
        self.audit = Some(Arc::new(auditor));
        self
    }

    /// Adds a part of the server that loads its state before serving to `/readyz`'s
    /// `informer-sync` check, which fails (naming it) while `synced` says false.
    pub fn with_informer(
        mut self,
        name: impl Into<String>,
        synced: impl Fn() -> bool + Send + Sync + 'static,
    ) -> Self {
        self.health.informers.push((name.into(), Arc::new(synced)));
        self
    }

    /// Records requests in `metrics` (which the server composition may have added its own
    /// metrics to) instead of a set of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics `/metrics` shows.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Authenticates requests with `config` (by default: anonymous allowed, no static tokens;
    /// ServiceAccount tokens always authenticate).
    pub fn with_authentication(mut self, config: AuthnConfig) -> Self {
        self.authenticator = Authenticator::new(config, self.registry.clone());
        self
    }

    /// Puts `authorizer` in charge of every request's check.
    pub fn with_authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Self {
        self.authorizer = authorizer;
        self.rbac = None;
        self
    }

    /// Puts RBAC in charge, escalation checks of role and binding writes included.
    pub fn with_rbac(mut self, rbac: Arc<RbacAuthorizer>) -> Self {
        self.authorizer = rbac.clone();
        self.rbac = Some(rbac);
        self
    }

    /// Handles one request; never fails (errors are rendered as Status responses).
    pub async fn handle(&self, mut req: Request<Incoming>) -> Response<Body> {
        let id = audit::audit_id(req.headers());
        if let Some(auditor) = &self.audit {
            audit::begin(auditor, &mut req, &id);
        }
        httplog::note_audit_id(&mut req, &id);
        let gzip = self.config.compression && respond::accepts_gzip(req.headers());
        let mut resp = handlers::route(self, req).await;
        if gzip && resp.extensions().get::<respond::Compressible>().is_some() {
            resp = respond::gzip(resp).await;
        }
        let h = resp.headers_mut();
        h.entry(header::CACHE_CONTROL)
            .or_insert(HeaderValue::from_static("no-cache, private"));
        if let Ok(v) = HeaderValue::from_str(&id) {
            h.insert("audit-id", v);
        }
        resp
    }
}

/// Serves HTTP/1.1 on `listener` until `shutdown` completes; then `/readyz` fails (its
/// `shutdown` check) while the server goes on serving for `delay`, so load balancers take it
/// out of rotation; then it stops accepting and waits up to `drain` for requests in flight.
pub async fn serve(
    listener: TcpListener,
    frontend: Arc<Frontend>,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    delay: Duration,
    drain: Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = limits::builder(frontend.config.http2_max_streams_per_connection);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    tokio::pin!(shutdown);
    // Set once the shutdown signal came: when to stop accepting.
    let mut stop_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let frontend = frontend.clone();
                // The connection's deadlines (see limits::supervise).
                let activity = limits::Activity::new();
                let requests = activity.clone();
                let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let request = requests.begin();
                    httplog::note_peer(&mut req, peer);
                    audit::note_peer(frontend.audit.is_some(), &mut req, peer);
                    let frontend = frontend.clone();
                    let too_large = limits::header_too_large(&req);
                    async move {
                        let resp = match too_large {
                            Some(resp) => resp,
                            None => frontend.handle(req).await,
                        };
                        Ok::<_, Infallible>(resp.map(|body| guarded::with_guard(body, request)))
                    }
                });
                let builder = builder.clone();
                let watcher = graceful.watcher();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let stream = match acceptor {
                        Some(acceptor) => {
                            // The handshake gets a deadline of its own, so a silent client cannot
                            // hold a task forever.
                            let handshake = tokio::time::timeout(
                                Duration::from_secs(10),
                                acceptor.accept(stream),
                            );
                            let stream = match handshake.await {
                                Ok(Ok(s)) => s,
                                Ok(Err(e)) => {
                                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, "TLS handshake timed out");
                                    return;
                                }
                            };
                            activity.handshake_done();
                            Either::Left(stream)
                        }
                        None => Either::Right(stream),
                    };
                    let stream = limits::Watched::new(stream, activity.clone());
                    let conn =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let conn = watcher.watch(conn.into_owned());
                    let result = limits::supervise(conn, &activity).await;
                    match result {
                        Some(Ok(())) => {}
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        None => tracing::debug!(%peer, "header or idle timeout; closed"),
                    }
                });
            }
            _ = &mut shutdown, if stop_at.is_none() => {
                frontend.shutting_down.store(true, std::sync::atomic::Ordering::SeqCst);
                if delay.is_zero() {
                    break;
                }
                tracing::info!(?delay, "shutting down: /readyz fails, still serving");
                stop_at = Some(tokio::time::Instant::now() + delay);
            }
            _ = async { tokio::time::sleep_until(stop_at.unwrap_or_else(tokio::time::Instant::now)).await },
                if stop_at.is_some() => break,
        }
    }
    drop(listener);
    frontend.closing.send_replace(true);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain period; closing");
    }
}
