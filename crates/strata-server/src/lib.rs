//! The composition root of Strata: opens the configured store, registers the built-in types,
//! creates the bootstrap namespaces, runs the compactor and serves HTTP until shutdown.

pub mod audit_log;
pub mod config;
pub mod pki;
pub mod snapshot;
pub mod storage_metrics;

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_auth::authn::{AuthnConfig, TokenFile};
use strata_auth::rbac::RbacAuthorizer;
use strata_auth::{UserInfo, AUTHENTICATED, MASTERS};
use strata_controllers::namespace::{NamespaceController, NamespaceControllerConfig};
use strata_controllers::{CrdController, RootCaPublisher, ServiceAccountController};
use strata_http::{Frontend, FrontendConfig};
use strata_registry::encryption::{EncryptingStore, EncryptionConfig};
use strata_registry::{Registry, RegistryConfig, WriteOptions};
use strata_store::{MemoryStore, Revision, Store};
use strata_store_etcd::{EtcdOptions, EtcdStore, EtcdTls};
use strata_store_rocksdb::{RocksOptions, RocksStore};
use strata_watch::CacheConfig;
use tokio::net::TcpListener;

pub use config::{AuthorizationMode, Backend, Config};

/// Namespaces every server has from its first start.
pub const BOOTSTRAP_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// How long a starting server waits for etcd to accept connections.
const ETCD_START_WAIT: Duration = Duration::from_secs(60);

/// How long a starting server waits for its controllers' watches before it accepts requests.
const CONTROLLERS_SYNC_WAIT: Duration = Duration::from_secs(5);

/// Whether connecting to etcd failed only because nothing listens there (yet).
fn not_listening(e: &strata_store::StoreError) -> bool {
    e.to_string().contains("Connection refused")
}

/// Opens the store named by the configuration.
pub async fn open_store(config: &Config) -> Result<Arc<dyn Store>, String> {
    open_engine(config, false).await.map(|(store, _)| store)
}

/// Opens the store named by the configuration; the embedded engine also as itself, with its
/// background compactions held back when `defer_compactions` (see
/// [`RocksOptions::defer_compactions`]).
async fn open_engine(
    config: &Config,
    defer_compactions: bool,
) -> Result<(Arc<dyn Store>, Option<Arc<RocksStore>>), String> {
    Ok(match config.backend {
        Backend::Memory => (Arc::new(MemoryStore::new()), None),
        Backend::Etcd => {
            if config.etcd_servers.is_empty() {
                return Err("--storage-backend etcd needs --etcd-servers".into());
            }
            // The registry's keys begin with `/registry/`: the etcd prefix takes its place, so
            // objects sit where kube-apiserver puts them (`<prefix>/<resource>/<ns>/<name>`).
            let options = EtcdOptions {
                prefix: config.etcd_prefix.clone(),
                root: "/registry".into(),
                tls: EtcdTls {
                    ca_file: config.etcd_cafile.clone(),
                    cert_file: config.etcd_certfile.clone(),
                    key_file: config.etcd_keyfile.clone(),
                },
            };
            // etcd may start after Strata (a cluster booting together): wait for it while no
            // member accepts connections, up to ETCD_START_WAIT. Any other failure (TLS, a
            // refused certificate) is the operator's to fix, and ends the start at once.
            let deadline = tokio::time::Instant::now() + ETCD_START_WAIT;
            let store = loop {
                match EtcdStore::connect_with(&config.etcd_servers, &options).await {
                    Ok(store) => break store,
                    Err(e) if not_listening(&e) && tokio::time::Instant::now() < deadline => {
                        tracing::warn!(%e, "waiting for etcd to accept connections");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => {
                        return Err(format!(
                            "cannot reach etcd at {}: {e}",
                            config.etcd_servers.join(",")
                        ))
                    }
                }
            };
            tracing::info!(
                endpoints = %config.etcd_servers.join(","),
                prefix = %config.etcd_prefix,
                "opened the etcd store"
            );
            (Arc::new(store), None)
        }
        Backend::RocksDb => {
            std::fs::create_dir_all(&config.data_dir).map_err(|e| {
                format!(
                    "cannot create data directory {}: {e}",
                    config.data_dir.display()
                )
            })?;
            let options = RocksOptions {
                defer_compactions,
                ..RocksOptions::default()
            };
            let store = RocksStore::open(&config.data_dir.join("store"), options).map_err(|e| {
                format!(
                    "cannot open the store in {}: {e}",
                    config.data_dir.display()
                )
            })?;
            let path = config.data_dir.join("store");
            tracing::info!(path = %path.display(), "opened the RocksDB store");
            let store = Arc::new(store);
            (store.clone(), Some(store))
        }
    })
}

/// Writes `value` under `key` in the embedded store of `data_dir`, bypassing every check: the
/// store hook of `strata debug put-raw`, with which tests (and operators reproducing a
/// problem) put an undecodable object in place. The server must not be running.
pub async fn put_raw(data_dir: &std::path::Path, key: &str, value: &[u8]) -> Result<(), String> {
    let store = RocksStore::open(&data_dir.join("store"), RocksOptions::default())
        .map_err(|e| format!("cannot open the store in {}: {e}", data_dir.display()))?;
    let value = bytes::Bytes::copy_from_slice(value);
    let (current, _) = store.get(key, None).await.map_err(|e| e.to_string())?;
    match current {
        Some(kv) => store.update(key, value, kv.mod_revision).await,
        None => store.create(key, value).await,
    }
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// Creates the bootstrap namespaces that do not exist yet.
pub async fn bootstrap(registry: &Registry) -> Result<(), String> {
    let ns = registry
        .lookup("", "v1", "namespaces")
        .ok_or("namespaces are not registered")?;
    for name in BOOTSTRAP_NAMESPACES {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match registry
            .create(&ns, "", body, &WriteOptions::default())
            .await
        {
            Ok(_) => tracing::info!(namespace = name, "created bootstrap namespace"),
            Err(s) if s.is_already_exists() => {}
            Err(s) => return Err(format!("cannot create namespace {name}: {s}")),
        }
    }
    // The default roles and bindings, created when missing (never overwritten: operators may
    // change them).
    let (roles, bindings) = strata_auth::policy::defaults();
    for (resource, objects) in [("clusterroles", roles), ("clusterrolebindings", bindings)] {
        let Some(rt) = registry.lookup(strata_auth::rbac::GROUP, "v1", resource) else {
            continue;
        };
        for obj in objects {
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            match registry
                .create(&rt, "", obj, &WriteOptions::default())
                .await
            {
                Ok(_) => tracing::debug!(resource, name, "created a default"),
                Err(s) if s.is_already_exists() => {}
                Err(s) => return Err(format!("cannot create {resource} {name}: {s}")),
            }
        }
    }
    Ok(())
}

/// Compacts history older than `retention`, looking every `tick` (never when `tick` is zero).
/// The store's current revision is sampled at each look; the newest sample at least
/// `retention` old is the compaction point, so a revision stays readable for the retention
/// after it was superseded, and leaves at most one `tick` later.
async fn compactor(store: Arc<dyn Store>, retention: Duration, tick: Duration) {
    if tick.is_zero() {
        return;
    }
    let mut samples: VecDeque<(Instant, Revision)> = VecDeque::new();
    loop {
        tokio::time::sleep(tick).await;
        let now = Instant::now();
        samples.push_back((now, store.current_revision()));
        let mut target = None;
        while let Some(&(t, rev)) = samples.front() {
            if now.duration_since(t) >= retention {
                target = Some(rev);
                samples.pop_front();
            } else {
                break;
            }
        }
        if let Some(rev) = target {
            if rev > store.compacted_revision() {
                match store.compact(rev).await {
                    Ok(()) => tracing::debug!(revision = rev.get(), "compacted history"),
                    Err(e) => tracing::warn!(error = %e, "compaction failed"),
                }
            }
        }
    }
}

/// Whether requests and storage calls are recorded in the metrics: yes unless the environment
/// variable `STRATA_REQUEST_METRICS` is `off` (or `false`, `0`), which only a benchmark of their
/// cost wants (`cargo xtask bench --only metrics`). Not a flag: kube-apiserver has none.
fn request_metrics_on() -> Result<bool, String> {
    match std::env::var("STRATA_REQUEST_METRICS") {
        Err(std::env::VarError::NotPresent) => Ok(true),
        Ok(v) => match v.as_str() {
            "" | "on" | "true" | "1" => Ok(true),
            "off" | "false" | "0" => Ok(false),
            other => Err(format!(
                "STRATA_REQUEST_METRICS={other:?}: expected on or off"
            )),
        },
        Err(e) => Err(format!("STRATA_REQUEST_METRICS: {e}")),
    }
}

/// The CA bundle published in every namespace's `kube-root-ca.crt`: the `--root-ca-file`, else
/// the CA that signed the generated serving certificate, else (the operator's own serving
/// certificate) the certificates of `--tls-cert-file`; none on plain HTTP without the file.
fn root_ca_bundle(config: &Config, tls: Option<&pki::Tls>) -> Result<Option<String>, String> {
    if let Some(path) = &config.root_ca_file {
        return pki::certificate_bundle(path).map(Some);
    }
    match (tls, &config.tls_cert_file) {
        (
            Some(pki::Tls {
                ca_pem: Some(ca), ..
            }),
            _,
        ) => Ok(Some(ca.clone())),
        (Some(_), Some(chain)) => pki::certificate_bundle(chain).map(Some),
        _ => Ok(None),
    }
}

/// A server bound to its address, ready to serve.
pub struct Server {
    listener: TcpListener,
    frontend: Arc<Frontend>,
    store: Arc<dyn Store>,
    config: Config,
    tls: Option<pki::Tls>,
    url: String,
    /// Serves the custom resource types; runs with the server.
    crds: Option<Arc<CrdController>>,
    /// The CA bundle the root CA publisher puts in every namespace; `None` when there is none
    /// to publish (plain HTTP without `--root-ca-file`).
    root_ca: Option<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .finish()
    }
}

impl Server {
    /// Opens storage, bootstraps and binds the listener.
    pub async fn start(config: Config) -> Result<Server, String> {
        let encryption = match &config.encryption_provider_config {
            Some(path) => Some(EncryptionConfig::load(path)?),
            None => None,
        };
        // A bad audit policy stops the server before it touches anything.
        let audit_policy = match &config.audit.policy_file {
            Some(path) => Some(strata_http::audit::Policy::load(path)?),
            None => None,
        };
        let request_metrics = request_metrics_on()?;
        if !request_metrics {
            tracing::warn!(
                "request and storage metrics are off (STRATA_REQUEST_METRICS=off): for \
                 measuring their cost only"
            );
        }
        // Every request to the engine is timed for /metrics (etcd_request_duration_seconds).
        let metrics = Arc::new(strata_http::Metrics::new());
        let audit_metrics = strata_http::audit::AuditMetrics::register(&metrics);
        // The embedded engine compacts only once the registry's start has read the store.
        let (store, engine) = open_engine(&config, true).await?;
        if let Some(engine) = &engine {
            let collector = storage_metrics::RocksCollector(engine.clone());
            metrics.register(|r| r.register_collector(Box::new(collector)));
        }
        let store: Arc<dyn Store> = if request_metrics {
            Arc::new(storage_metrics::TimedStore::new(
                store,
                storage_metrics::StorageMetrics::new(&metrics),
            ))
        } else {
            store
        };
        // The registry reads and writes through the encryption layer; everything else (the
        // compactor, the cluster's own keys, snapshots) sees the stored bytes as they are.
        let registry_store: Arc<dyn Store> = match encryption {
            Some(encryption) => {
                // AES-GCM authenticates a value with its etcd key, as kube-apiserver does.
                let root = match config.backend {
                    Backend::Etcd => config.etcd_prefix.as_str(),
                    Backend::RocksDb | Backend::Memory => "/registry",
                };
                tracing::info!(?encryption, "encrypting resources at rest");
                Arc::new(EncryptingStore::new(store.clone(), encryption, root))
            }
            None => store.clone(),
        };
        let registry_config = RegistryConfig {
            cache: CacheConfig {
                window_events: config.watch_cache_size,
                watcher_buffer: config.watch_buffer_size,
                bookmark_interval: config.watch_bookmark_interval,
                kept_encodings_bytes: config.watch_cache_encodings_bytes,
                ..CacheConfig::default()
            },
            continue_token_lifetime: config.continue_token_lifetime,
            watch_list: config.gate("WatchList"),
            service_account_issuer: config.service_account_issuer.clone(),
            unsafe_malformed_object_deletion: config.gate("AllowUnsafeMalformedObjectDeletion"),
        };
        let registry = Arc::new(Registry::with_builtin_types(
            registry_store,
            registry_config,
        ));
        registry
            .start()
            .await
            .map_err(|s| format!("cannot start the registry: {}", s.message))?;
        if let Some(engine) = &engine {
            engine
                .resume_compactions()
                .map_err(|e| format!("cannot resume the store's compactions: {e}"))?;
        }
        bootstrap(&registry).await?;
        // The types of established CRDs are served from the first request on.
        let crds = CrdController::new(registry.clone()).map(Arc::new);
        if let Some(c) = &crds {
            c.serve_existing()
                .await
                .map_err(|s| format!("cannot serve the custom resource types: {}", s.message))?;
            let controller = Arc::downgrade(c);
            registry.set_types_catch_up(Arc::new(move || {
                let controller = controller.clone();
                Box::pin(async move {
                    if let Some(c) = controller.upgrade() {
                        c.catch_up().await;
                    }
                })
            }));
        }
        let frontend_config = FrontendConfig {
            compression: config.gate("APIResponseCompression"),
            formats: strata_http::negotiate::Formats {
                cbor: config.gate("CBORServingAndStorage"),
            },
            max_requests_inflight: config.max_requests_inflight,
            max_mutating_requests_inflight: config.max_mutating_requests_inflight,
            request_timeout: config.request_timeout,
            http2_max_streams_per_connection: config.http2_max_streams_per_connection,
            request_metrics,
            storage_check: match config.backend {
                Backend::Etcd => "etcd",
                Backend::RocksDb | Backend::Memory => "storage",
            },
            ..FrontendConfig::default()
        };
        let mut token_file = match &config.token_auth_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                TokenFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => TokenFile::default(),
        };
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            format!(
                "cannot create data directory {}: {e}",
                config.data_dir.display()
            )
        })?;
        let admin_token = pki::admin_token(store.as_ref(), &config.data_dir).await?;
        token_file.insert(
            &admin_token,
            UserInfo {
                name: pki::ADMIN_USER.into(),
                groups: vec![MASTERS.into(), AUTHENTICATED.into()],
                ..Default::default()
            },
        );
        let token_file = Some(token_file);
        let mut frontend = Frontend::new(registry.clone(), frontend_config)
            .with_authentication(AuthnConfig {
                anonymous: config.anonymous_auth,
                token_file,
            })
            .with_metrics(metrics)
            // The watch caches are loaded by `registry.start()` above; `/readyz` also waits for
            // the CRD controller (see `Server::run`).
            .with_informer("watch-cache", || true);
        if let Some(c) = &crds {
            let controller = Arc::downgrade(c);
            frontend = frontend.with_informer("customresourcedefinitions", move || {
                controller.upgrade().is_some_and(|c| c.has_synced())
            });
        }
        if let Some(auditor) = audit_log::auditor(&config.audit, audit_policy, audit_metrics)? {
            frontend = frontend.with_audit(auditor);
        }
        if config.authorization_mode == AuthorizationMode::Rbac {
            frontend = frontend.with_rbac(Arc::new(RbacAuthorizer::new(registry.clone())));
        }
        let frontend = Arc::new(frontend);
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let bound = listener.local_addr().unwrap_or(config.listen);
        let tls = match (&config.tls_cert_file, &config.tls_private_key_file) {
            _ if config.insecure_http => None,
            (Some(cert), Some(key)) => Some(pki::from_files(cert, key)?),
            _ => Some(pki::generated(store.as_ref(), &config.data_dir, bound).await?),
        };
        let root_ca = root_ca_bundle(&config, tls.as_ref())?;
        let host = if bound.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], bound.port()))
        } else {
            bound
        };
        let url = match tls {
            Some(_) => format!("https://{host}"),
            None => format!("http://{host}"),
        };
        let kubeconfig = pki::write_admin_kubeconfig(
            &config.data_dir,
            &url,
            tls.as_ref().and_then(|t| t.ca_pem.as_deref()),
            &admin_token,
        )?;
        tracing::info!(kubeconfig = %kubeconfig.display(), "wrote the admin kubeconfig");
        Ok(Server {
            listener,
            frontend,
            store,
            config,
            tls,
            url,
            crds,
            root_ca,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The registry this server serves: types can be added to and removed from it while the
    /// server runs.
    pub fn registry(&self) -> Arc<Registry> {
        self.frontend.registry.clone()
    }

    /// The URL clients use: `https://` unless the server runs with `--insecure-http`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let compaction = tokio::spawn(compactor(
            self.store.clone(),
            self.config.history_retention,
            self.config.compaction_tick(),
        ));
        let registry = &self.frontend.registry;
        let enabled = |name| self.config.controller_enabled(name);
        let namespaces = enabled(config::NAMESPACE_CONTROLLER)
            .then(|| {
                NamespaceController::new(registry.clone(), NamespaceControllerConfig::default())
            })
            .flatten()
            .map(|c| tokio::spawn(c.run()));
        let service_accounts = enabled(config::SERVICE_ACCOUNT_CONTROLLER)
            .then(|| ServiceAccountController::new(registry.clone()))
            .flatten()
            .map(Arc::new);
        let root_ca = match &self.root_ca {
            Some(bundle) if enabled(config::ROOT_CA_PUBLISHER) => {
                RootCaPublisher::new(registry.clone(), bundle.clone()).map(Arc::new)
            }
            _ => None,
        };
        let crds = self.crds.map(|c| {
            let task = tokio::spawn(c.clone().run());
            (c, task)
        });
        let service_accounts = service_accounts.map(|c| {
            let task = tokio::spawn(c.clone().run());
            (c, task)
        });
        let root_ca = root_ca.map(|c| {
            let task = tokio::spawn(c.clone().run());
            (c, task)
        });
        // The CRD controller opens its watch before the first request is accepted, so that
        // `/readyz` (informer-sync) is not failing at start; a watch that cannot be opened
        // within a few seconds leaves the server serving and `/readyz` failing. The
        // ServiceAccount controller and the root CA publisher make their first pass over the
        // namespaces there are, so that those have their `default` ServiceAccount and
        // `kube-root-ca.crt` from the first request on.
        let synced = || {
            crds.as_ref().is_none_or(|(c, _)| c.has_synced())
                && service_accounts
                    .as_ref()
                    .is_none_or(|(c, _)| c.has_synced())
                && root_ca.as_ref().is_none_or(|(c, _)| c.has_synced())
        };
        let deadline = Instant::now() + CONTROLLERS_SYNC_WAIT;
        while !synced() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let crds = crds.map(|(_, task)| task);
        let service_accounts = service_accounts.map(|(_, task)| task);
        let root_ca = root_ca.map(|(_, task)| task);
        strata_http::serve(
            self.listener,
            self.frontend,
            self.tls.map(|t| t.server_config),
            shutdown,
            self.config.shutdown_delay,
            self.config.shutdown_drain,
        )
        .await;
        compaction.abort();
        for task in [namespaces, crds, service_accounts, root_ca]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }
}
