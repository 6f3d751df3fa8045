//! Command-line configuration of `strata serve`, with flags spelled like kube-apiserver's where
//! one exists.
//!
//! The flags are parsed by clap ([`ServeFlags`], [`StorageFlags`]) into [`Config`], the plain
//! struct the rest of the server reads; tests build a `Config` directly. Every flag can also be
//! given as an environment variable, `STRATA_` and the flag's name in upper snake case
//! (`--data-dir` is `STRATA_DATA_DIR`); a flag on the command line wins over its variable. In
//! `--help` the flags are grouped under kube-apiserver's headings ([`heading`]). A flag given
//! twice keeps its last value, as kube-apiserver's do, except `--feature-gates`, whose pairs add
//! up.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, ValueEnum};

/// Which storage engine backs the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// RocksDB in `--data-dir` (the default): durable.
    #[value(name = "rocksdb")]
    RocksDb,
    /// Memory only: everything is lost at exit. For experiments and tests.
    Memory,
    /// An etcd v3 cluster (`--etcd-servers`), under `--etcd-prefix`.
    #[value(alias = "etcd3")]
    Etcd,
}

/// Who decides what an authenticated request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuthorizationMode {
    /// Roles and bindings (`rbac.authorization.k8s.io`); `system:masters` may do everything.
    #[value(name = "RBAC")]
    Rbac,
    /// Everything is allowed: for local tests and benchmarks.
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
}

/// How log lines are written (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event: time, level, target, message, fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's
    /// fields, for log collectors.
    Json,
}

/// When a request waits for its audit events to be written (`--audit-log-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuditLogMode {
    /// The response waits until its events are in the log (kube-apiserver's default for the
    /// log), at most a few seconds.
    #[default]
    Blocking,
    /// Events are queued and written in the background; a full queue drops them.
    Batch,
}

/// The audit log's settings (kube-apiserver's `--audit-*` flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditConfig {
    /// The `audit.k8s.io/v1` Policy; without one nothing is audited.
    pub policy_file: Option<PathBuf>,
    /// Where events are written; `-` is stdout. Without it nothing is audited.
    pub log_path: Option<String>,
    /// Megabytes a log file may reach before it is rotated (0: lumberjack's 100).
    pub log_maxsize: u64,
    /// Rotated files kept (0: all).
    pub log_maxbackup: usize,
    /// Days a rotated file is kept (0: no limit).
    pub log_maxage: u64,
    pub log_mode: AuditLogMode,
}

/// The settings of one server.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub backend: Backend,
    /// The etcd members' client URLs (`--etcd-servers`), for the etcd backend.
    pub etcd_servers: Vec<String>,
    /// The key prefix of every object in etcd (`--etcd-prefix`, default `/registry`).
    pub etcd_prefix: String,
    /// TLS to etcd (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`).
    pub etcd_cafile: Option<PathBuf>,
    pub etcd_certfile: Option<PathBuf>,
    pub etcd_keyfile: Option<PathBuf>,
    /// How much change history is kept (`--history-retention`, default 5m).
    pub history_retention: Duration,
    /// How often compaction runs (`--etcd-compaction-interval`); zero turns it off. `None`,
    /// the default, follows the retention closely (see [`Config::compaction_tick`]).
    pub compaction_interval: Option<Duration>,
    pub feature_gates: BTreeMap<String, bool>,
    /// How long in-flight requests may take to finish at shutdown.
    pub shutdown_drain: Duration,
    /// How long the server keeps serving after the shutdown signal, `/readyz` failing
    /// (`--shutdown-delay-duration`, default 0).
    pub shutdown_delay: Duration,
    /// `--max-requests-inflight` (400) and `--max-mutating-requests-inflight` (200).
    pub max_requests_inflight: usize,
    pub max_mutating_requests_inflight: usize,
    /// `--request-timeout` (1m).
    pub request_timeout: Duration,
    /// How long a continue token stays valid (`--continue-token-lifetime`, default 5m).
    pub continue_token_lifetime: Duration,
    /// How often watchers that allow bookmarks get one (`--watch-bookmark-interval`, 1s).
    pub watch_bookmark_interval: Duration,
    /// Events buffered per watcher before it is closed as too slow (`--watch-buffer-size`).
    pub watch_buffer_size: usize,
    /// Events each type's watch cache keeps in its window (`--watch-cache-size`).
    pub watch_cache_size: usize,
    /// Bytes of encodings other than JSON the watch caches keep on their objects
    /// (`--watch-cache-encodings-mib`, default 32 MiB).
    pub watch_cache_encodings_bytes: usize,
    /// The `iss` of ServiceAccount tokens and their default audience
    /// (`--service-account-issuer`).
    pub service_account_issuer: String,
    /// Requests without credentials are `system:anonymous` (`--anonymous-auth`, default false);
    /// otherwise they are 401.
    pub anonymous_auth: bool,
    /// Static bearer tokens, Kubernetes' CSV format (`--token-auth-file`).
    pub token_auth_file: Option<PathBuf>,
    /// Who decides requests (`--authorization-mode`): RBAC (the default) or AlwaysAllow.
    pub authorization_mode: AuthorizationMode,
    /// Serve plain HTTP instead of TLS (`--insecure-http`): for local tests and benchmarks.
    pub insecure_http: bool,
    /// Streams a client may open at once on one HTTP/2 connection
    /// (`--http2-max-streams-per-connection`; 0, the default, is Go's 250).
    pub http2_max_streams_per_connection: u32,
    /// The operator's serving certificate and key (`--tls-cert-file`,
    /// `--tls-private-key-file`); without them the server makes its own CA.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// The CA bundle published in every namespace's `kube-root-ca.crt` ConfigMap
    /// (`--root-ca-file`, kube-controller-manager's flag). Without it the server publishes the
    /// CA it made, or with `--tls-cert-file` the certificates of that file; with
    /// `--insecure-http` and no file nothing is published.
    pub root_ca_file: Option<PathBuf>,
    /// Which of the controllers run (`--controllers`, kube-controller-manager's flag): `*` for
    /// every one, a name to turn one on, `-name` to turn it off; names are canonical (the
    /// aliases of [`CONTROLLERS`] are resolved when parsed). See [`Config::controller_enabled`].
    pub controllers: Vec<String>,
    /// Kubernetes' `EncryptionConfiguration` (`--encryption-provider-config`): which resources
    /// are encrypted at rest, with which providers and keys.
    pub encryption_provider_config: Option<PathBuf>,
    /// The audit log: which requests are recorded how (`--audit-policy-file`), and where and
    /// how the events are written (`--audit-log-*`).
    pub audit: AuditConfig,
    /// How log lines are written (`--log-format`); the `strata` binary sets up logging with it
    /// before it starts the server.
    pub log_format: LogFormat,
    /// How much is logged (`-v`/`--v`, klog's verbosity levels, default 0): from 3 on, one
    /// line per request; from 5 on, debug lines; from 7 on, everything. `RUST_LOG` wins.
    pub verbosity: u8,
}

impl Config {
    /// How often the compactor looks at the store: the configured interval, or by default a
    /// sixtieth of the retention between 100 ms and 5 s, so that a revision leaves the history
    /// within seconds of leaving the retention window (spec §4.5). Kubernetes compacts every
    /// 5 minutes what is older than 5 minutes, keeping up to twice the window.
    pub fn compaction_tick(&self) -> Duration {
        self.compaction_interval.unwrap_or_else(|| {
            (self.history_retention / 60).clamp(Duration::from_millis(100), Duration::from_secs(5))
        })
    }
}

/// The controllers `--controllers` names, each with kube-controller-manager's name and its
/// short alias; all run by default.
pub const CONTROLLERS: [(&str, &str); 3] = [
    (NAMESPACE_CONTROLLER, "namespace"),
    (SERVICE_ACCOUNT_CONTROLLER, "serviceaccount"),
    (ROOT_CA_PUBLISHER, "root-ca-cert-publisher"),
];
/// Namespace termination.
pub const NAMESPACE_CONTROLLER: &str = "namespace-controller";
/// The `default` ServiceAccount of every namespace.
pub const SERVICE_ACCOUNT_CONTROLLER: &str = "serviceaccount-controller";
/// The `kube-root-ca.crt` ConfigMap of every namespace.
pub const ROOT_CA_PUBLISHER: &str = "root-ca-certificate-publisher-controller";

impl Default for Config {
    /// The flags' defaults, except that no feature gate is set (a test turns on the ones it
    /// needs; the command line starts from [`KNOWN_GATES`]).
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 6443)),
            data_dir: PathBuf::from("strata-data"),
            backend: Backend::RocksDb,
            etcd_servers: Vec::new(),
            etcd_prefix: "/registry".into(),
            etcd_cafile: None,
            etcd_certfile: None,
            etcd_keyfile: None,
            history_retention: Duration::from_secs(300),
            compaction_interval: None,
            feature_gates: BTreeMap::new(),
            shutdown_drain: Duration::from_secs(10),
            shutdown_delay: Duration::ZERO,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            request_timeout: Duration::from_secs(60),
            continue_token_lifetime: Duration::from_secs(300),
            watch_bookmark_interval: Duration::from_secs(1),
            watch_buffer_size: 1000,
            watch_cache_size: 100_000,
            watch_cache_encodings_bytes: 32 << 20,
            service_account_issuer: "https://kubernetes.default.svc.cluster.local".into(),
            anonymous_auth: false,
            token_auth_file: None,
            insecure_http: false,
            http2_max_streams_per_connection: 0,
            authorization_mode: AuthorizationMode::Rbac,
            tls_cert_file: None,
            tls_private_key_file: None,
            root_ca_file: None,
            controllers: vec!["*".into()],
            encryption_provider_config: None,
            audit: AuditConfig::default(),
            log_format: LogFormat::Text,
            verbosity: 0,
        }
    }
}

/// Feature gates the server knows, with their defaults.
pub const KNOWN_GATES: [(&str, bool); 4] = [
    ("APIResponseCompression", true),
    ("CBORServingAndStorage", false),
    ("AllowUnsafeMalformedObjectDeletion", false),
    ("WatchList", true),
];

/// The `--help` headings, kube-apiserver's flag groups: a flag Strata shares with
/// kube-apiserver sits under the same heading, and one of Strata's own under the nearest.
pub mod heading {
    /// Flags about the server as a whole (kube-apiserver: `--feature-gates`,
    /// `--shutdown-delay-duration`, `--max-requests-inflight`, ...).
    pub const GENERIC: &str = "Generic flags";
    /// The storage (kube-apiserver: `--etcd-*`, `--storage-backend`,
    /// `--encryption-provider-config`, `--watch-cache-sizes`).
    pub const ETCD: &str = "Etcd flags";
    /// The listener and its TLS (kube-apiserver: `--bind-address`, `--tls-cert-file`, ...).
    pub const SECURE_SERVING: &str = "Secure serving flags";
    /// The audit log (kube-apiserver: `--audit-policy-file`, `--audit-log-*`).
    pub const AUDITING: &str = "Auditing flags";
    /// Who a request is (kube-apiserver: `--anonymous-auth`, `--token-auth-file`,
    /// `--service-account-issuer`, ...).
    pub const AUTHENTICATION: &str = "Authentication flags";
    /// What a request may do (kube-apiserver: `--authorization-mode`, ...).
    pub const AUTHORIZATION: &str = "Authorization flags";
    /// Logging (kube-apiserver: `--logging-format`, `-v`, ...).
    pub const LOGS: &str = "Logs flags";
    /// Everything else.
    pub const MISC: &str = "Misc flags";
    /// `--help` and `--version`.
    pub const GLOBAL: &str = "Global flags";
}

/// The storage flags: `strata serve` has them, and `strata snapshot save|restore` has only them.
#[derive(Args, Clone, Debug)]
pub struct StorageFlags {
    /// Where the server keeps its data: the embedded store (in DIR/store), the cluster's CA and
    /// serving certificate (DIR/pki) and the admin kubeconfig (DIR/admin.kubeconfig).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "strata-data",
        env = "STRATA_DATA_DIR",
        help_heading = heading::GENERIC
    )]
    data_dir: PathBuf,
    /// The storage engine: rocksdb (embedded, in --data-dir), etcd (an etcd v3 cluster,
    /// --etcd-servers; etcd3 is the same) or memory (everything is lost at exit).
    #[arg(
        long,
        value_name = "ENGINE",
        default_value = "rocksdb",
        hide_possible_values = true,
        env = "STRATA_STORAGE_BACKEND",
        help_heading = heading::ETCD
    )]
    storage_backend: Backend,
    /// The etcd members' client URLs, comma separated, for --storage-backend etcd.
    #[arg(
        long,
        value_name = "URL[,URL...]",
        value_delimiter = ',',
        action = ArgAction::Set,
        env = "STRATA_ETCD_SERVERS",
        help_heading = heading::ETCD
    )]
    etcd_servers: Vec<String>,
    /// The key prefix of every object in etcd.
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "/registry",
        env = "STRATA_ETCD_PREFIX",
        help_heading = heading::ETCD
    )]
    etcd_prefix: String,
    /// The CA bundle that signed the etcd members' certificates.
    #[arg(
        long,
        value_name = "FILE",
        env = "STRATA_ETCD_CAFILE",
        help_heading = heading::ETCD
    )]
    etcd_cafile: Option<PathBuf>,
    /// The client certificate for etcd (with --etcd-keyfile).
    #[arg(
        long,
        value_name = "FILE",
        requires = "etcd_keyfile",
        env = "STRATA_ETCD_CERTFILE",
        help_heading = heading::ETCD
    )]
    etcd_certfile: Option<PathBuf>,
    /// The private key of the etcd client certificate.
    #[arg(
        long,
        value_name = "FILE",
        requires = "etcd_certfile",
        env = "STRATA_ETCD_KEYFILE",
        help_heading = heading::ETCD
    )]
    etcd_keyfile: Option<PathBuf>,
}

/// The flags of `strata serve` (and of `strata` without a command), in [`Config`]'s terms.
#[derive(Args, Clone, Debug)]
pub struct ServeFlags {
    #[command(flatten)]
    storage: StorageFlags,

    /// Feature gates to turn on or off, as NAME=true|false pairs, comma separated; repeated
    /// flags add up. Known gates: APIResponseCompression=true|false (default true),
    /// CBORServingAndStorage=true|false (default false),
    /// AllowUnsafeMalformedObjectDeletion=true|false (default false), WatchList=true|false
    /// (default true).
    #[arg(
        long,
        value_name = "NAME=BOOL[,...]",
        value_parser = parse_gates,
        action = ArgAction::Append,
        env = "STRATA_FEATURE_GATES",
        help_heading = heading::GENERIC
    )]
    feature_gates: Vec<Gates>,
    /// The controllers to run, comma separated: * is every one, NAME turns one on, -NAME turns
    /// it off (*,-serviceaccount runs all but that one). Controllers: namespace-controller
    /// (namespace), serviceaccount-controller (serviceaccount),
    /// root-ca-certificate-publisher-controller (root-ca-cert-publisher).
    #[arg(
        long,
        value_name = "NAME[,...]",
        default_value = "*",
        value_delimiter = ',',
        action = ArgAction::Set,
        value_parser = controller_name,
        env = "STRATA_CONTROLLERS",
        help_heading = heading::GENERIC
    )]
    controllers: Vec<String>,
    /// How long requests in flight may take to finish at shutdown (SIGTERM or SIGINT).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = duration,
        env = "STRATA_SHUTDOWN_DRAIN",
        help_heading = heading::GENERIC
    )]
    shutdown_drain: Duration,

    /// How long the server keeps serving after SIGTERM or SIGINT with /readyz failing, so
    /// load balancers stop sending new requests before it stops listening (kube-apiserver's
    /// flag).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        value_parser = duration,
        env = "STRATA_SHUTDOWN_DELAY_DURATION",
        help_heading = heading::GENERIC
    )]
    shutdown_delay_duration: Duration,

    /// Read-only requests served at once; beyond it, 429 (watches and system:masters are not
    /// counted; 0: no limit).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 400,
        env = "STRATA_MAX_REQUESTS_INFLIGHT",
        help_heading = heading::GENERIC
    )]
    max_requests_inflight: usize,

    /// Mutating requests served at once; beyond it, 429 (0: no limit).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 200,
        env = "STRATA_MAX_MUTATING_REQUESTS_INFLIGHT",
        help_heading = heading::GENERIC
    )]
    max_mutating_requests_inflight: usize,

    /// How long a request other than a watch may take before it is answered 504.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1m",
        value_parser = duration,
        env = "STRATA_REQUEST_TIMEOUT",
        help_heading = heading::GENERIC
    )]
    request_timeout: Duration,

    /// How much change history is kept for watches and lists from a resourceVersion.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        value_parser = duration,
        env = "STRATA_HISTORY_RETENTION",
        help_heading = heading::ETCD
    )]
    history_retention: Duration,
    /// How often history older than --history-retention is compacted; 0 turns compaction off.
    /// By default a sixtieth of the retention, between 100ms and 5s.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = duration,
        env = "STRATA_ETCD_COMPACTION_INTERVAL",
        help_heading = heading::ETCD
    )]
    etcd_compaction_interval: Option<Duration>,
    /// Events kept per resource type for resuming watches (history older than the store's is
    /// dropped).
    #[arg(
        long,
        value_name = "N",
        default_value = "100000",
        value_parser = positive,
        env = "STRATA_WATCH_CACHE_SIZE",
        help_heading = heading::ETCD
    )]
    watch_cache_size: usize,
    /// Encrypts resources at rest: Kubernetes' EncryptionConfiguration, YAML or JSON (aesgcm,
    /// aescbc, secretbox and identity providers).
    #[arg(
        long,
        value_name = "FILE",
        env = "STRATA_ENCRYPTION_PROVIDER_CONFIG",
        help_heading = heading::ETCD
    )]
    encryption_provider_config: Option<PathBuf>,

    /// The address to serve on.
    #[arg(
        long,
        visible_alias = "bind-address",
        value_name = "ADDR",
        default_value = "127.0.0.1:6443",
        env = "STRATA_LISTEN",
        help_heading = heading::SECURE_SERVING
    )]
    listen: SocketAddr,
    /// The serving certificate chain (PEM). Without it the cluster's CA (made once, kept in
    /// the store, copied to DATA_DIR/pki) signs each replica's own.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_private_key_file",
        env = "STRATA_TLS_CERT_FILE",
        help_heading = heading::SECURE_SERVING
    )]
    tls_cert_file: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert_file",
        env = "STRATA_TLS_PRIVATE_KEY_FILE",
        help_heading = heading::SECURE_SERVING
    )]
    tls_private_key_file: Option<PathBuf>,
    /// The CA bundle (PEM) published as ca.crt in the ConfigMap kube-root-ca.crt of every
    /// namespace, for clients in the cluster to verify this server. By default the cluster's CA,
    /// or with --tls-cert-file the certificates of that file.
    #[arg(
        long,
        value_name = "FILE",
        env = "STRATA_ROOT_CA_FILE",
        help_heading = heading::SECURE_SERVING
    )]
    root_ca_file: Option<PathBuf>,
    /// Serves plain HTTP instead of TLS: for local tests and benchmarks.
    #[arg(
        long,
        value_name = "BOOL",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = boolean,
        env = "STRATA_INSECURE_HTTP",
        help_heading = heading::SECURE_SERVING
    )]
    insecure_http: bool,
    /// The most streams a client may open at once on one HTTP/2 connection, announced in the
    /// server's SETTINGS; 0 means Go's default, 250 (kube-apiserver's flag).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        env = "STRATA_HTTP2_MAX_STREAMS_PER_CONNECTION",
        help_heading = heading::SECURE_SERVING
    )]
    http2_max_streams_per_connection: u32,

    /// The audit policy (an audit.k8s.io/v1 Policy, YAML or JSON): which requests are recorded
    /// in the audit log, and at which level. Without it nothing is audited.
    #[arg(
        long,
        value_name = "FILE",
        env = "STRATA_AUDIT_POLICY_FILE",
        help_heading = heading::AUDITING
    )]
    audit_policy_file: Option<PathBuf>,
    /// Where audit events are written, one JSON line each; - writes them to stdout. Without it
    /// nothing is audited.
    #[arg(
        long,
        value_name = "PATH",
        env = "STRATA_AUDIT_LOG_PATH",
        help_heading = heading::AUDITING
    )]
    audit_log_path: Option<String>,
    /// Size in megabytes at which the audit log is rotated (0: 100).
    #[arg(
        long,
        value_name = "MB",
        default_value_t = 0,
        env = "STRATA_AUDIT_LOG_MAXSIZE",
        help_heading = heading::AUDITING
    )]
    audit_log_maxsize: u64,
    /// How many rotated audit logs are kept (0: all of them).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        env = "STRATA_AUDIT_LOG_MAXBACKUP",
        help_heading = heading::AUDITING
    )]
    audit_log_maxbackup: usize,
    /// For how many days rotated audit logs are kept, judged by the time in their names (0: no
    /// limit).
    #[arg(
        long,
        value_name = "DAYS",
        default_value_t = 0,
        env = "STRATA_AUDIT_LOG_MAXAGE",
        help_heading = heading::AUDITING
    )]
    audit_log_maxage: u64,
    /// How audit events are written: json (one audit.k8s.io/v1 Event per line; the only format
    /// Strata writes).
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "json",
        value_parser = audit_log_format,
        env = "STRATA_AUDIT_LOG_FORMAT",
        help_heading = heading::AUDITING
    )]
    audit_log_format: String,
    /// blocking: a response waits until its audit events are written (a few seconds at most);
    /// batch: events are queued and written in the background, dropped when the queue is full.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "blocking",
        value_parser = audit_log_mode,
        env = "STRATA_AUDIT_LOG_MODE",
        help_heading = heading::AUDITING
    )]
    audit_log_mode: AuditLogMode,

    /// Requests without credentials act as system:anonymous; when false they are answered 401.
    #[arg(
        long,
        value_name = "BOOL",
        action = ArgAction::Set,
        default_value = "false",
        value_parser = boolean,
        env = "STRATA_ANONYMOUS_AUTH",
        help_heading = heading::AUTHENTICATION
    )]
    anonymous_auth: bool,
    /// Static bearer tokens, one per line: token,user,uid,"group1,group2".
    #[arg(
        long,
        value_name = "FILE",
        env = "STRATA_TOKEN_AUTH_FILE",
        help_heading = heading::AUTHENTICATION
    )]
    token_auth_file: Option<PathBuf>,
    /// The issuer of ServiceAccount tokens and their default audience.
    #[arg(
        long,
        value_name = "URL",
        default_value = "https://kubernetes.default.svc.cluster.local",
        env = "STRATA_SERVICE_ACCOUNT_ISSUER",
        help_heading = heading::AUTHENTICATION
    )]
    service_account_issuer: String,

    /// Who decides requests: RBAC (roles and bindings) or AlwaysAllow (everything is allowed).
    #[arg(
        long,
        value_name = "MODE",
        default_value = "RBAC",
        hide_possible_values = true,
        env = "STRATA_AUTHORIZATION_MODE",
        help_heading = heading::AUTHORIZATION
    )]
    authorization_mode: AuthorizationMode,

    /// How log lines are written on stderr: text, or json (one JSON object per line). RUST_LOG
    /// picks what is logged (default info).
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "text",
        hide_possible_values = true,
        env = "STRATA_LOG_FORMAT",
        help_heading = heading::LOGS
    )]
    log_format: LogFormat,
    /// Log verbosity, as kube-apiserver's klog levels: 0 to 2 log what the server does, 3 and
    /// up add one line per request (verb, URI, user, status, latency, size), 5 and up debug
    /// lines, 7 and up everything. RUST_LOG, when set, overrides it.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "LEVEL",
        default_value_t = 0,
        env = "STRATA_V",
        help_heading = heading::LOGS
    )]
    v: u8,

    /// How long a list's continue token stays valid.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        value_parser = duration,
        env = "STRATA_CONTINUE_TOKEN_LIFETIME",
        help_heading = heading::MISC
    )]
    continue_token_lifetime: Duration,
    /// How often watchers that allow bookmarks get one.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = duration,
        env = "STRATA_WATCH_BOOKMARK_INTERVAL",
        help_heading = heading::MISC
    )]
    watch_bookmark_interval: Duration,
    /// Events buffered per watcher; a watcher that falls further behind is closed with 410
    /// Expired.
    #[arg(
        long,
        value_name = "N",
        default_value = "1000",
        value_parser = positive,
        env = "STRATA_WATCH_BUFFER_SIZE",
        help_heading = heading::MISC
    )]
    watch_buffer_size: usize,
    /// MiB of encodings other than JSON (protobuf, YAML, CBOR, Table rows, watch event frames)
    /// kept on cached objects for the next reader; past it the longest kept are dropped, to be
    /// made again when next asked for. 0 keeps none.
    #[arg(
        long = "watch-cache-encodings-mib",
        value_name = "MIB",
        default_value = "32",
        value_parser = mebibytes,
        env = "STRATA_WATCH_CACHE_ENCODINGS_MIB",
        help_heading = heading::MISC
    )]
    watch_cache_encodings_bytes: usize,
}

/// `--help` and `--version` under kube-apiserver's "Global flags" heading, in every command
/// and subcommand. The command that flattens these sets `disable_help_flag` and
/// `disable_version_flag` (clap's own flags), and `propagate_version`.
#[derive(Args, Clone, Debug)]
pub struct GlobalFlags {
    /// Prints help (a summary with -h).
    #[arg(short = 'h', long, global = true, action = ArgAction::Help, help_heading = heading::GLOBAL)]
    help: Option<bool>,
    /// Prints the version.
    #[arg(long, global = true, action = ArgAction::Version, help_heading = heading::GLOBAL)]
    version: Option<bool>,
}

/// What `strata serve` (and `strata` without a command) says about itself in `--help`.
pub const SERVE_ABOUT: &str = "Serves the Kubernetes API";

/// The longer form, under the usage line of `strata serve --help`.
pub const SERVE_LONG_ABOUT: &str = "\
Serves the Kubernetes API.

By default it serves HTTPS with a certificate from its own CA and writes
DATA_DIR/admin.kubeconfig (the CA and an admin token):
KUBECONFIG=DATA_DIR/admin.kubeconfig kubectl get sa

Every flag can also be set with an environment variable, STRATA_ and the flag's name in upper
snake case (--data-dir is STRATA_DATA_DIR); the command line wins. Durations are written as
Go writes them: 300ms, 5s, 5m, 1h30m (a bare number is seconds).";

/// `strata serve FLAGS` alone, for [`Config::from_args`].
#[derive(Parser, Debug)]
#[command(
    name = "strata serve",
    about = SERVE_ABOUT,
    long_about = SERVE_LONG_ABOUT,
    version,
    args_override_self = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct ServeCommand {
    #[command(flatten)]
    flags: ServeFlags,
    #[command(flatten)]
    global: GlobalFlags,
}

/// The pairs of one `--feature-gates` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gates(Vec<(String, bool)>);

/// Parses `NAME=BOOL[,NAME=BOOL...]`, every name a known gate.
fn parse_gates(value: &str) -> Result<Gates, String> {
    let mut gates = Vec::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, on) = pair
            .split_once('=')
            .ok_or(format!("{pair:?} is not NAME=true|false"))?;
        let (name, on) = (name.trim(), on.trim());
        if !KNOWN_GATES.iter().any(|(gate, _)| *gate == name) {
            let known: Vec<&str> = KNOWN_GATES.iter().map(|(gate, _)| *gate).collect();
            return Err(format!(
                "unrecognized feature gate: {name} (known: {})",
                known.join(", ")
            ));
        }
        let on = boolean(on).map_err(|_| format!("invalid value of {name}: {on:?}"))?;
        gates.push((name.to_string(), on));
    }
    Ok(Gates(gates))
}

/// A boolean as Go's `strconv.ParseBool` (kube-apiserver's flags) reads one, in any case:
/// true, t, 1, false, f, 0.
fn boolean(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "t" | "1" => Ok(true),
        "false" | "f" | "0" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

/// A duration flag: [`parse_duration`] with the message clap puts after the flag's name.
fn duration(value: &str) -> Result<Duration, String> {
    parse_duration(value).map_err(|_| "expected a duration such as 300ms, 5s, 5m or 1h30m".into())
}

/// `--audit-log-format`: json; kube-apiserver's legacy text format is refused.
fn audit_log_format(value: &str) -> Result<String, String> {
    match value {
        "json" => Ok(value.into()),
        "legacy" => Err("the legacy format is not supported: Strata writes json".into()),
        _ => Err("expected json".into()),
    }
}

/// `--audit-log-mode`: blocking or batch (kube-apiserver's blocking-strict is refused).
fn audit_log_mode(value: &str) -> Result<AuditLogMode, String> {
    match value {
        "blocking" => Ok(AuditLogMode::Blocking),
        "batch" => Ok(AuditLogMode::Batch),
        "blocking-strict" => Err("blocking-strict is not supported: use blocking or batch".into()),
        _ => Err("expected blocking or batch".into()),
    }
}

/// One `--controllers` item: `*`, a controller's name or alias, or either after `-`; aliases
/// become names.
fn controller_name(value: &str) -> Result<String, String> {
    let value = value.trim();
    // `*` as it is; an empty item (`--controllers=`) names nothing.
    if value == "*" || value.is_empty() {
        return Ok(value.into());
    }
    let (minus, name) = match value.strip_prefix('-') {
        Some(name) => ("-", name),
        None => ("", value),
    };
    match CONTROLLERS
        .iter()
        .find(|(canonical, alias)| name == *canonical || name == *alias)
    {
        Some((canonical, _)) => Ok(format!("{minus}{canonical}")),
        None => {
            let known: Vec<&str> = CONTROLLERS.iter().map(|(c, _)| *c).collect();
            Err(format!(
                "{name:?} is not a known controller (known: {})",
                known.join(", ")
            ))
        }
    }
}

/// A positive count flag.
fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a positive whole number".into()),
    }
}

/// A size flag in MiB, 0 included; the answer is in bytes.
fn mebibytes(value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .and_then(|mib| mib.checked_mul(1 << 20))
        .ok_or_else(|| "expected a whole number of MiB".into())
}

/// Parses a Go-style duration: `300ms`, `5s`, `5m`, `1h30m`; a bare number means seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}");
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(digits);
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += Duration::from_secs_f64(value * scale);
        rest = tail;
    }
    Ok(total)
}

impl StorageFlags {
    /// A [`Config`] with these storage settings and every other one at its default.
    pub fn into_config(self) -> Config {
        let mut config = Config::default();
        self.apply(&mut config);
        config
    }

    fn apply(self, c: &mut Config) {
        c.data_dir = self.data_dir;
        c.backend = self.storage_backend;
        c.etcd_servers = self
            .etcd_servers
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        c.etcd_prefix = self.etcd_prefix;
        c.etcd_cafile = self.etcd_cafile;
        c.etcd_certfile = self.etcd_certfile;
        c.etcd_keyfile = self.etcd_keyfile;
    }
}

impl ServeFlags {
    /// The [`Config`] these flags describe: the known feature gates at their defaults, then
    /// the ones given. Fails, as clap's errors do, on a combination of flags that cannot go
    /// together.
    pub fn into_config(self) -> Result<Config, clap::Error> {
        if self.insecure_http && self.tls_cert_file.is_some() {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                "the argument '--insecure-http' cannot be used with '--tls-cert-file <FILE>': \
                 plain HTTP serves no certificate\n",
            ));
        }
        let mut c = Config::default();
        self.storage.apply(&mut c);
        for (gate, on) in KNOWN_GATES {
            c.feature_gates.insert(gate.into(), on);
        }
        for Gates(pairs) in self.feature_gates {
            c.feature_gates.extend(pairs);
        }
        c.shutdown_drain = self.shutdown_drain;
        c.shutdown_delay = self.shutdown_delay_duration;
        c.max_requests_inflight = self.max_requests_inflight;
        c.max_mutating_requests_inflight = self.max_mutating_requests_inflight;
        c.request_timeout = self.request_timeout;
        c.history_retention = self.history_retention;
        c.compaction_interval = self.etcd_compaction_interval;
        c.watch_cache_size = self.watch_cache_size;
        c.encryption_provider_config = self.encryption_provider_config;
        c.listen = self.listen;
        c.tls_cert_file = self.tls_cert_file;
        c.tls_private_key_file = self.tls_private_key_file;
        c.root_ca_file = self.root_ca_file;
        c.controllers = self.controllers;
        c.insecure_http = self.insecure_http;
        c.http2_max_streams_per_connection = self.http2_max_streams_per_connection;
        c.audit = AuditConfig {
            policy_file: self.audit_policy_file,
            log_path: self.audit_log_path.filter(|p| !p.is_empty()),
            log_maxsize: self.audit_log_maxsize,
            log_maxbackup: self.audit_log_maxbackup,
            log_maxage: self.audit_log_maxage,
            log_mode: self.audit_log_mode,
        };
        c.anonymous_auth = self.anonymous_auth;
        c.token_auth_file = self.token_auth_file;
        c.service_account_issuer = self.service_account_issuer;
        c.authorization_mode = self.authorization_mode;
        c.log_format = self.log_format;
        c.verbosity = self.v;
        c.continue_token_lifetime = self.continue_token_lifetime;
        c.watch_bookmark_interval = self.watch_bookmark_interval;
        c.watch_buffer_size = self.watch_buffer_size;
        c.watch_cache_encodings_bytes = self.watch_cache_encodings_bytes;
        Ok(c)
    }
}

impl Config {
    /// Parses the arguments after `strata serve` (and the `STRATA_*` environment variables).
    /// The error is clap's: `err.exit()` prints it (or the help, for `--help`) and exits with
    /// its code, 2 for a bad flag; `err.to_string()` is the message.
    pub fn from_args<I, T>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let command = ServeCommand::try_parse_from(
            std::iter::once(std::ffi::OsString::from("strata serve"))
                .chain(args.into_iter().map(Into::into)),
        )?;
        command.flags.into_config()
    }

    pub fn gate(&self, name: &str) -> bool {
        self.feature_gates.get(name).copied().unwrap_or(false)
    }

    /// Whether `--controllers` runs the controller `name` (one of [`CONTROLLERS`]' names), as
    /// kube-controller-manager reads the flag: `-name` turns it off, `name` on, and otherwise
    /// `*` runs it (every controller is on by default).
    pub fn controller_enabled(&self, name: &str) -> bool {
        let said = |item: &str| self.controllers.iter().any(|c| c == item);
        if said(&format!("-{name}")) {
            return false;
        }
        said(name) || said("*")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    /// Parses `args` after `strata serve`.
    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::from_args(args)
    }

    /// The message of a parse that must fail, with its kind.
    fn error(args: &[&str]) -> (ErrorKind, String) {
        let err = parse(args).expect_err("the flags are refused");
        (err.kind(), err.to_string())
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn clap_definitions_are_consistent() {
        ServeCommand::command().debug_assert();
    }

    /// No flag: every setting is `Config::default()`'s, with the known gates at their
    /// defaults.
    #[test]
    fn defaults_are_config_default() {
        let c = parse(&[]).unwrap();
        let d = Config::default();
        assert_eq!(c.listen, d.listen);
        assert_eq!(c.data_dir, d.data_dir);
        assert_eq!(c.backend, d.backend);
        assert_eq!(c.etcd_servers, d.etcd_servers);
        assert_eq!(c.etcd_prefix, d.etcd_prefix);
        assert_eq!(
            (&c.etcd_cafile, &c.etcd_certfile, &c.etcd_keyfile),
            (&None, &None, &None)
        );
        assert_eq!(c.history_retention, d.history_retention);
        assert_eq!(c.compaction_interval, d.compaction_interval);
        assert_eq!(c.shutdown_drain, d.shutdown_drain);
        assert_eq!(c.continue_token_lifetime, d.continue_token_lifetime);
        assert_eq!(c.watch_bookmark_interval, d.watch_bookmark_interval);
        assert_eq!(c.watch_buffer_size, d.watch_buffer_size);
        assert_eq!(c.watch_cache_size, d.watch_cache_size);
        assert_eq!(c.watch_cache_encodings_bytes, d.watch_cache_encodings_bytes);
        assert_eq!(c.service_account_issuer, d.service_account_issuer);
        assert_eq!(c.anonymous_auth, d.anonymous_auth);
        assert_eq!(c.token_auth_file, d.token_auth_file);
        assert_eq!(c.authorization_mode, d.authorization_mode);
        assert_eq!(c.insecure_http, d.insecure_http);
        assert_eq!(c.http2_max_streams_per_connection, 0);
        assert_eq!(c.tls_cert_file, d.tls_cert_file);
        assert_eq!(c.tls_private_key_file, d.tls_private_key_file);
        assert_eq!(c.root_ca_file, d.root_ca_file);
        assert_eq!(c.controllers, d.controllers);
        assert_eq!(c.encryption_provider_config, d.encryption_provider_config);
        assert_eq!(c.log_format, d.log_format);
        assert_eq!(c.verbosity, 0);
        let gates: BTreeMap<String, bool> = KNOWN_GATES
            .iter()
            .map(|(g, on)| (g.to_string(), *on))
            .collect();
        assert_eq!(c.feature_gates, gates);
    }

    #[test]
    fn every_flag_kind_parses() {
        let c = parse(&[
            "--listen=127.0.0.1:0",
            "--data-dir",
            "/tmp/x",
            "--storage-backend",
            "etcd3",
            "--etcd-servers",
            "http://a:2379, http://b:2379,",
            "--etcd-prefix=/p",
            "--etcd-cafile=/ca",
            "--etcd-certfile=/cert",
            "--etcd-keyfile=/key",
            "--history-retention",
            "1h30m",
            "--etcd-compaction-interval=0",
            "--shutdown-drain=250ms",
            "--shutdown-delay-duration=3s",
            "--max-requests-inflight=7",
            "--max-mutating-requests-inflight=0",
            "--request-timeout=30s",
            "--continue-token-lifetime=7",
            "--watch-bookmark-interval=2s",
            "--watch-buffer-size=5",
            "--watch-cache-size",
            "6",
            "--watch-cache-encodings-mib=3",
            "--service-account-issuer=https://issuer",
            "--anonymous-auth",
            "TRUE",
            "--token-auth-file=/tokens.csv",
            "--authorization-mode=AlwaysAllow",
            "--tls-cert-file=/tls.crt",
            "--tls-private-key-file=/tls.key",
            "--root-ca-file=/root-ca.crt",
            "--controllers=*,-serviceaccount",
            "--encryption-provider-config=/enc.yaml",
            "--log-format=json",
            "--v=3",
        ])
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.backend, Backend::Etcd);
        assert_eq!(c.etcd_servers, ["http://a:2379", "http://b:2379"]);
        assert_eq!(c.etcd_prefix, "/p");
        assert_eq!(c.etcd_cafile, Some(PathBuf::from("/ca")));
        assert_eq!(c.etcd_certfile, Some(PathBuf::from("/cert")));
        assert_eq!(c.etcd_keyfile, Some(PathBuf::from("/key")));
        assert_eq!(c.history_retention, Duration::from_secs(5400));
        assert_eq!(c.compaction_interval, Some(Duration::ZERO));
        assert_eq!(c.shutdown_drain, Duration::from_millis(250));
        assert_eq!(c.shutdown_delay, Duration::from_secs(3));
        assert_eq!(c.max_requests_inflight, 7);
        assert_eq!(c.max_mutating_requests_inflight, 0);
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.continue_token_lifetime, Duration::from_secs(7));
        assert_eq!(c.watch_bookmark_interval, Duration::from_secs(2));
        assert_eq!(c.watch_buffer_size, 5);
        assert_eq!(c.watch_cache_size, 6);
        assert_eq!(c.watch_cache_encodings_bytes, 3 << 20);
        assert_eq!(c.service_account_issuer, "https://issuer");
        assert!(c.anonymous_auth);
        assert_eq!(c.token_auth_file, Some(PathBuf::from("/tokens.csv")));
        assert_eq!(c.authorization_mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(c.tls_cert_file, Some(PathBuf::from("/tls.crt")));
        assert_eq!(c.tls_private_key_file, Some(PathBuf::from("/tls.key")));
        assert_eq!(c.root_ca_file, Some(PathBuf::from("/root-ca.crt")));
        assert_eq!(c.controllers, ["*", "-serviceaccount-controller"]);
        assert_eq!(
            c.encryption_provider_config,
            Some(PathBuf::from("/enc.yaml"))
        );
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.verbosity, 3);
        assert_eq!(parse(&["-v", "4"]).unwrap().verbosity, 4);
        assert_eq!(parse(&["-v5"]).unwrap().verbosity, 5);

        let c = parse(&["--bind-address", "0.0.0.0:7443", "--storage-backend=memory"]).unwrap();
        assert_eq!(c.listen, "0.0.0.0:7443".parse().unwrap());
        assert_eq!(c.backend, Backend::Memory);
        let c = parse(&["--http2-max-streams-per-connection=1000"]).unwrap();
        assert_eq!(c.http2_max_streams_per_connection, 1000);
    }

    /// `--insecure-http` alone is true; with a value it takes `=`.
    #[test]
    fn optional_boolean() {
        assert!(parse(&["--insecure-http"]).unwrap().insecure_http);
        assert!(parse(&["--insecure-http=true"]).unwrap().insecure_http);
        assert!(!parse(&["--insecure-http=false"]).unwrap().insecure_http);
        assert!(
            !parse(&[
                "--insecure-http=false",
                "--tls-cert-file=/c",
                "--tls-private-key-file=/k"
            ])
            .unwrap()
            .insecure_http
        );
        let (kind, message) = error(&["--insecure-http", "true"]);
        assert_eq!(kind, ErrorKind::UnknownArgument, "{message}");
    }

    /// A flag given twice keeps its last value, as the tests' defaults followed by their own
    /// flags rely on; feature gates add up.
    #[test]
    fn the_last_value_wins() {
        let c = parse(&[
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
            "--insecure-http",
            "--anonymous-auth=false",
            "--authorization-mode=RBAC",
            "--insecure-http=false",
            "--etcd-servers=http://a:1",
            "--etcd-servers=http://b:2",
            "--feature-gates=APIResponseCompression=false,WatchList=false",
            "--feature-gates",
            "WatchList=true,CBORServingAndStorage=true",
        ])
        .unwrap();
        assert!(!c.anonymous_auth);
        assert_eq!(c.authorization_mode, AuthorizationMode::Rbac);
        assert!(!c.insecure_http);
        assert_eq!(c.etcd_servers, ["http://b:2"]);
        assert!(!c.gate("APIResponseCompression"));
        assert!(c.gate("WatchList"));
        assert!(c.gate("CBORServingAndStorage"));
        assert!(!c.gate("AllowUnsafeMalformedObjectDeletion"));
    }

    /// Bad values name the flag, as clap words it, and exit 2.
    #[test]
    fn bad_values_name_the_flag() {
        for (args, flag, detail) in [
            (
                &["--history-retention", "5x"][..],
                "'--history-retention <DURATION>'",
                "expected a duration",
            ),
            (
                &["--listen=localhost"],
                "'--listen <ADDR>'",
                "invalid socket address",
            ),
            (
                &["--watch-buffer-size=0"],
                "'--watch-buffer-size <N>'",
                "positive whole number",
            ),
            (
                &["--watch-cache-size=-3"],
                "'--watch-cache-size <N>'",
                "positive whole number",
            ),
            (
                &["--watch-cache-encodings-mib=lots"],
                "'--watch-cache-encodings-mib <MIB>'",
                "whole number of MiB",
            ),
            (
                &["--anonymous-auth=maybe"],
                "'--anonymous-auth <BOOL>'",
                "expected true or false",
            ),
            (
                &["--insecure-http=yes"],
                "'--insecure-http[=<BOOL>]'",
                "expected true or false",
            ),
            (
                &["--storage-backend=mysql"],
                "'--storage-backend <ENGINE>'",
                "rocksdb, memory, etcd",
            ),
            (
                &["--authorization-mode=Node"],
                "'--authorization-mode <MODE>'",
                "RBAC, AlwaysAllow",
            ),
            (
                &["--log-format=xml"],
                "'--log-format <FORMAT>'",
                "text, json",
            ),
            (&["--v=loud"], "'--v <LEVEL>'", "invalid digit"),
            (
                &["--feature-gates=Nope=true"],
                "'--feature-gates <NAME=BOOL[,...]>'",
                "unrecognized feature gate: Nope",
            ),
            (
                &["--feature-gates=WatchList=yes"],
                "'--feature-gates <NAME=BOOL[,...]>'",
                "invalid value of WatchList",
            ),
            (
                &["--feature-gates=WatchList"],
                "'--feature-gates <NAME=BOOL[,...]>'",
                "is not NAME=true|false",
            ),
        ] {
            let err = parse(args).expect_err("refused");
            let message = err.to_string();
            assert!(
                [ErrorKind::InvalidValue, ErrorKind::ValueValidation].contains(&err.kind()),
                "{args:?}: {message}"
            );
            assert_eq!(err.exit_code(), 2);
            assert!(
                message.starts_with("error: invalid value '") && message.contains(flag),
                "{args:?}: {message}"
            );
            assert!(message.contains(detail), "{args:?}: {message}");
        }
    }

    #[test]
    fn bad_flags_and_combinations() {
        let (kind, message) = error(&["--bogus"]);
        assert_eq!(kind, ErrorKind::UnknownArgument);
        assert!(
            message.contains("unexpected argument '--bogus'"),
            "{message}"
        );
        let (kind, message) = error(&["--data-dri=x"]);
        assert_eq!(kind, ErrorKind::UnknownArgument);
        assert!(
            message.contains("a similar argument exists: '--data-dir'"),
            "{message}"
        );
        let (kind, message) = error(&["--data-dir"]);
        assert_eq!(kind, ErrorKind::InvalidValue, "{message}");
        assert!(message.contains("'--data-dir <DIR>'"), "{message}");
        let (kind, message) = error(&["--tls-cert-file=/c"]);
        assert_eq!(kind, ErrorKind::MissingRequiredArgument);
        assert!(
            message.contains("--tls-private-key-file <FILE>"),
            "{message}"
        );
        let (kind, message) = error(&["--etcd-keyfile=/k"]);
        assert_eq!(kind, ErrorKind::MissingRequiredArgument);
        assert!(message.contains("--etcd-certfile <FILE>"), "{message}");
        let (kind, message) = error(&[
            "--insecure-http",
            "--tls-cert-file=/c",
            "--tls-private-key-file=/k",
        ]);
        assert_eq!(kind, ErrorKind::ArgumentConflict);
        assert!(message.contains("'--insecure-http'"), "{message}");
        let (kind, _) = error(&["extra"]);
        assert_eq!(kind, ErrorKind::UnknownArgument);
    }

    /// The help lists every flag under kube-apiserver's headings, with its default and its
    /// environment variable; the feature gates' help names every known gate.
    #[test]
    fn help_groups_flags_and_names_variables() {
        let help = ServeCommand::command().render_long_help().to_string();
        let mut at = 0;
        for heading in [
            heading::GENERIC,
            heading::ETCD,
            heading::SECURE_SERVING,
            heading::AUTHENTICATION,
            heading::AUTHORIZATION,
            heading::LOGS,
            heading::MISC,
            heading::GLOBAL,
        ] {
            let found = help[at..]
                .find(&format!("{heading}:"))
                .unwrap_or_else(|| panic!("{heading} after byte {at} in\n{help}"));
            at += found;
        }
        for arg in ServeCommand::command().get_arguments() {
            let long = arg.get_long().expect("every flag is long");
            assert!(help.contains(&format!("--{long}")), "--{long} in\n{help}");
            if let Some(env) = arg.get_env() {
                let expected = format!("STRATA_{}", long.to_uppercase().replace('-', "_"));
                assert_eq!(env.to_str(), Some(expected.as_str()), "--{long}");
                assert!(help.contains(&expected), "{expected} in\n{help}");
            } else {
                assert!(
                    ["help", "version"].contains(&long),
                    "--{long} has no variable"
                );
            }
        }
        assert!(help.contains("[default: 5m]"), "{help}");
        let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
        for (gate, on) in KNOWN_GATES {
            assert!(
                words.contains(&format!("{gate}=true|false (default {on})")),
                "{gate} in\n{help}"
            );
        }
    }

    /// Values come from `STRATA_*` variables, and the command line wins. The variables are set
    /// in a child process (this test binary again, running only [`env_child`]), so that no
    /// other test sees them.
    #[test]
    fn environment_variables() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "config::tests::env_child", "--nocapture"])
            .env("STRATA_CONFIG_ENV_CHILD", "1")
            .env("STRATA_DATA_DIR", "/from-env")
            .env("STRATA_LISTEN", "127.0.0.1:7000")
            .env("STRATA_HISTORY_RETENTION", "90s")
            .env("STRATA_INSECURE_HTTP", "true")
            .env("STRATA_ETCD_SERVERS", "http://a:1,http://b:2")
            .env("STRATA_FEATURE_GATES", "WatchList=false")
            .env("STRATA_AUTHORIZATION_MODE", "AlwaysAllow")
            .env("STRATA_LOG_FORMAT", "json")
            .env("STRATA_WATCH_BUFFER_SIZE", "0")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(stdout.contains("env child checked"), "{stdout}");
    }

    /// The half of [`environment_variables`] that runs in the child; it checks nothing unless
    /// that test started it.
    #[test]
    fn env_child() {
        if std::env::var_os("STRATA_CONFIG_ENV_CHILD").is_none() {
            return;
        }
        // A bad value from a variable is an error naming the flag.
        let message = error(&[]).1;
        assert!(message.contains("'--watch-buffer-size <N>'"), "{message}");
        let c = parse(&["--watch-buffer-size=3", "--listen=127.0.0.1:7001"]).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/from-env"));
        assert_eq!(c.listen, "127.0.0.1:7001".parse().unwrap());
        assert_eq!(c.history_retention, Duration::from_secs(90));
        assert!(c.insecure_http);
        assert_eq!(c.etcd_servers, ["http://a:1", "http://b:2"]);
        assert!(!c.gate("WatchList"));
        assert!(c.gate("APIResponseCompression"));
        assert_eq!(c.authorization_mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.watch_buffer_size, 3);
        println!("env child checked");
    }

    /// `--controllers` as kube-controller-manager reads it: names or aliases, `*`, `-name`.
    #[test]
    fn controllers_flag() {
        let none: [&str; 0] = [];
        let c = Config::from_args(none).unwrap();
        for (name, _) in CONTROLLERS {
            assert!(c.controller_enabled(name), "{name} runs by default");
            assert!(Config::default().controller_enabled(name), "{name}");
        }
        let c = Config::from_args(["--controllers=*,-serviceaccount"]).unwrap();
        assert!(!c.controller_enabled(SERVICE_ACCOUNT_CONTROLLER));
        assert!(c.controller_enabled(ROOT_CA_PUBLISHER));
        assert!(c.controller_enabled(NAMESPACE_CONTROLLER));
        let c = Config::from_args([
            "--controllers",
            "namespace-controller,root-ca-cert-publisher",
        ])
        .unwrap();
        assert!(c.controller_enabled(NAMESPACE_CONTROLLER));
        assert!(c.controller_enabled(ROOT_CA_PUBLISHER));
        assert!(!c.controller_enabled(SERVICE_ACCOUNT_CONTROLLER));
        // `-name` wins over `name`; an empty list runs nothing.
        let c = Config::from_args(["--controllers=namespace,-namespace"]).unwrap();
        assert!(!c.controller_enabled(NAMESPACE_CONTROLLER));
        let c = Config::from_args(["--controllers="]).unwrap();
        assert!(!c.controller_enabled(NAMESPACE_CONTROLLER));
        let e = Config::from_args(["--controllers=*,-replicaset"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--controllers") && e.contains("\"replicaset\" is not a known controller"),
            "{e}"
        );
    }

    /// The auditing flags, under kube-apiserver's names and defaults.
    #[test]
    fn audit_flags() {
        let none: [&str; 0] = [];
        let c = Config::from_args(none).unwrap();
        assert_eq!(c.audit, AuditConfig::default());
        assert_eq!(c.audit.log_mode, AuditLogMode::Blocking);
        let c = Config::from_args([
            "--audit-policy-file=/policy.yaml",
            "--audit-log-path",
            "-",
            "--audit-log-maxsize=5",
            "--audit-log-maxbackup=3",
            "--audit-log-maxage=7",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
        ])
        .unwrap();
        assert_eq!(
            c.audit,
            AuditConfig {
                policy_file: Some(PathBuf::from("/policy.yaml")),
                log_path: Some("-".into()),
                log_maxsize: 5,
                log_maxbackup: 3,
                log_maxage: 7,
                log_mode: AuditLogMode::Batch,
            }
        );
        for (arg, words) in [
            (
                "--audit-log-format=legacy",
                "the legacy format is not supported",
            ),
            (
                "--audit-log-mode=blocking-strict",
                "blocking-strict is not supported",
            ),
            ("--audit-log-mode=later", "expected blocking or batch"),
            ("--audit-log-maxsize=-1", "--audit-log-maxsize"),
        ] {
            let e = Config::from_args([arg]).unwrap_err().to_string();
            let flag = arg.split('=').next().unwrap();
            assert!(e.contains(flag) && e.contains(words), "{arg}: {e}");
        }
    }
}
