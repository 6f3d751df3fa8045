//! Command-line configuration of `strata serve`, with flags spelled like kube-apiserver's where
//! one exists.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which storage engine backs the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// RocksDB in `--data-dir` (the default): durable.
    RocksDb,
    /// Memory only: everything is lost at exit. For experiments and tests.
    Memory,
    /// An etcd v3 cluster (`--etcd-servers`), under `--etcd-prefix`.
    Etcd,
}

/// Who decides what an authenticated request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Roles and bindings (`rbac.authorization.k8s.io`); `system:masters` may do everything.
    Rbac,
    /// Everything is allowed: for local tests and benchmarks.
    AlwaysAllow,
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
    /// How long a continue token stays valid (`--continue-token-lifetime`, default 5m).
    pub continue_token_lifetime: Duration,
    /// How often watchers that allow bookmarks get one (`--watch-bookmark-interval`, 1s).
    pub watch_bookmark_interval: Duration,
    /// Events buffered per watcher before it is closed as too slow (`--watch-buffer-size`).
    pub watch_buffer_size: usize,
    /// Events each type's watch cache keeps in its window (`--watch-cache-size`).
    pub watch_cache_size: usize,
    /// The `iss` of ServiceAccount tokens and their default audience
    /// (`--service-account-issuer`).
    pub service_account_issuer: String,
    /// Requests without credentials are `system:anonymous` (`--anonymous-auth`, default true);
    /// otherwise they are 401.
    pub anonymous_auth: bool,
    /// Static bearer tokens, Kubernetes' CSV format (`--token-auth-file`).
    pub token_auth_file: Option<PathBuf>,
    /// Who decides requests (`--authorization-mode`): RBAC (the default) or AlwaysAllow.
    pub authorization_mode: AuthorizationMode,
    /// Serve plain HTTP instead of TLS (`--insecure-http`): for local tests and benchmarks.
    pub insecure_http: bool,
    /// The operator's serving certificate and key (`--tls-cert-file`,
    /// `--tls-private-key-file`); without them the server makes its own CA.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// Kubernetes' `EncryptionConfiguration` (`--encryption-provider-config`): which resources
    /// are encrypted at rest, with which providers and keys.
    pub encryption_provider_config: Option<PathBuf>,
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

impl Default for Config {
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
            continue_token_lifetime: Duration::from_secs(300),
            watch_bookmark_interval: Duration::from_secs(1),
            watch_buffer_size: 1000,
            watch_cache_size: 100_000,
            service_account_issuer: "https://kubernetes.default.svc.cluster.local".into(),
            anonymous_auth: false,
            token_auth_file: None,
            insecure_http: false,
            authorization_mode: AuthorizationMode::Rbac,
            tls_cert_file: None,
            tls_private_key_file: None,
            encryption_provider_config: None,
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

pub const USAGE: &str = "\
usage: strata serve [flags]

Serves HTTPS with a certificate from its own CA and writes DATA_DIR/admin.kubeconfig (the CA
and an admin token): KUBECONFIG=DATA_DIR/admin.kubeconfig kubectl get sa

flags:
  --listen ADDR                     address to serve on (default 127.0.0.1:6443)
  --data-dir DIR                    where the embedded store keeps its data (default ./strata-data)
  --storage-backend rocksdb|etcd|memory
                                    storage engine (default rocksdb)
  --etcd-servers URL[,URL...]       etcd members' client URLs, for --storage-backend etcd
  --etcd-prefix PREFIX              key prefix of the objects in etcd (default /registry)
  --etcd-cafile FILE                CA bundle that signed the etcd members' certificates
  --etcd-certfile FILE              client certificate for etcd (with --etcd-keyfile)
  --etcd-keyfile FILE               the client certificate's private key
  --history-retention DURATION      change history kept for watches and lists (default 5m)
  --etcd-compaction-interval DURATION
                                    how often old history is compacted; 0 turns compaction
                                    off (default: a sixtieth of the retention, 100ms to 5s)
  --feature-gates K=V[,K=V]         e.g. APIResponseCompression=false
  --shutdown-drain DURATION         time allowed for requests in flight at shutdown (default 10s)
  --continue-token-lifetime DURATION
                                    how long a list's continue token stays valid (default 5m)
  --watch-bookmark-interval DURATION
                                    how often watchers that allow bookmarks get one (default 1s)
  --watch-buffer-size N             events buffered per watcher; a watcher that falls further
                                    behind is closed with 410 Expired (default 1000)
  --watch-cache-size N              events kept per resource type for resuming watches
                                    (default 100000; history older than the store's is dropped)
  --service-account-issuer URL      issuer of ServiceAccount tokens and their default audience
                                    (default https://kubernetes.default.svc.cluster.local)
  --anonymous-auth true|false       requests without credentials act as system:anonymous
                                    (default false: they are answered 401)
  --authorization-mode RBAC|AlwaysAllow
                                    who decides requests (default RBAC)
  --insecure-http                   serve plain HTTP instead of TLS (local tests, benchmarks)
  --tls-cert-file FILE              serving certificate chain (PEM); by default the cluster's CA
                                    (made once, kept in the store, copied to DATA_DIR/pki)
                                    signs each replica's own
  --tls-private-key-file FILE       the serving certificate's private key (PEM)
  --token-auth-file FILE            static bearer tokens, one per line: token,user,uid,\"group1,group2\"
  --encryption-provider-config FILE
                                    encrypt resources at rest (Kubernetes' EncryptionConfiguration,
                                    YAML or JSON: aesgcm, aescbc, secretbox and identity providers)
";

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

/// A positive count flag.
fn count(flag: &str, v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} needs a positive integer, got {v:?}")),
    }
}

impl Config {
    /// Parses the arguments after `serve`.
    pub fn from_args(args: &[String]) -> Result<Config, String> {
        let mut c = Config::default();
        for (gate, on) in KNOWN_GATES {
            c.feature_gates.insert(gate.into(), on);
        }
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if arg.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            let mut value = || -> Result<String, String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it.next().cloned().ok_or(format!("{flag} needs a value")),
                }
            };
            match flag.as_str() {
                "--listen" | "--bind-address" => {
                    let v = value()?;
                    c.listen = v.parse().map_err(|_| format!("invalid address {v:?}"))?;
                }
                "--data-dir" => c.data_dir = PathBuf::from(value()?),
                "--storage-backend" => {
                    c.backend = match value()?.as_str() {
                        "rocksdb" => Backend::RocksDb,
                        "etcd" | "etcd3" => Backend::Etcd,
                        "memory" => Backend::Memory,
                        other => return Err(format!("unknown storage backend {other:?}")),
                    }
                }
                "--etcd-servers" => {
                    c.etcd_servers = value()?
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                }
                "--etcd-prefix" => c.etcd_prefix = value()?,
                "--etcd-cafile" => c.etcd_cafile = Some(PathBuf::from(value()?)),
                "--etcd-certfile" => c.etcd_certfile = Some(PathBuf::from(value()?)),
                "--etcd-keyfile" => c.etcd_keyfile = Some(PathBuf::from(value()?)),
                "--history-retention" => c.history_retention = parse_duration(&value()?)?,
                "--etcd-compaction-interval" => {
                    c.compaction_interval = Some(parse_duration(&value()?)?)
                }
                "--shutdown-drain" => c.shutdown_drain = parse_duration(&value()?)?,
                "--continue-token-lifetime" => {
                    c.continue_token_lifetime = parse_duration(&value()?)?
                }
                "--watch-bookmark-interval" => {
                    c.watch_bookmark_interval = parse_duration(&value()?)?
                }
                "--watch-buffer-size" => c.watch_buffer_size = count(&flag, &value()?)?,
                "--watch-cache-size" => c.watch_cache_size = count(&flag, &value()?)?,
                "--service-account-issuer" => c.service_account_issuer = value()?,
                "--anonymous-auth" => {
                    c.anonymous_auth = match value()?.to_ascii_lowercase().as_str() {
                        "true" => true,
                        "false" => false,
                        other => return Err(format!("invalid value for {flag}: {other:?}")),
                    }
                }
                "--token-auth-file" => c.token_auth_file = Some(PathBuf::from(value()?)),
                "--encryption-provider-config" => {
                    c.encryption_provider_config = Some(PathBuf::from(value()?))
                }
                "--insecure-http" => {
                    c.insecure_http = match inline.as_deref().map(str::to_ascii_lowercase) {
                        None => true,
                        Some(v) if v == "true" => true,
                        Some(v) if v == "false" => false,
                        Some(v) => return Err(format!("invalid value for {flag}: {v:?}")),
                    }
                }
                "--authorization-mode" => {
                    c.authorization_mode = match value()?.as_str() {
                        "RBAC" => AuthorizationMode::Rbac,
                        "AlwaysAllow" => AuthorizationMode::AlwaysAllow,
                        other => {
                            return Err(format!(
                                "unknown authorization mode {other:?} (RBAC or AlwaysAllow)"
                            ))
                        }
                    }
                }
                "--tls-cert-file" => c.tls_cert_file = Some(PathBuf::from(value()?)),
                "--tls-private-key-file" => c.tls_private_key_file = Some(PathBuf::from(value()?)),
                "--feature-gates" => {
                    for pair in value()?.split(',').filter(|p| !p.is_empty()) {
                        let (k, v) = pair
                            .split_once('=')
                            .ok_or(format!("invalid feature gate {pair:?}"))?;
                        let on = match v.to_ascii_lowercase().as_str() {
                            "true" => true,
                            "false" => false,
                            _ => return Err(format!("invalid value for feature gate {k}: {v:?}")),
                        };
                        if !KNOWN_GATES.iter().any(|(g, _)| *g == k) {
                            return Err(format!("unrecognized feature gate: {k}"));
                        }
                        c.feature_gates.insert(k.into(), on);
                    }
                }
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown flag {other:?}")),
            }
        }
        if c.tls_cert_file.is_some() != c.tls_private_key_file.is_some() {
            return Err("--tls-cert-file and --tls-private-key-file go together".into());
        }
        if c.insecure_http && c.tls_cert_file.is_some() {
            return Err("--insecure-http serves no TLS: drop the certificate flags".into());
        }
        Ok(c)
    }

    pub fn gate(&self, name: &str) -> bool {
        self.feature_gates.get(name).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn flags() {
        let args: Vec<String> = [
            "--listen=127.0.0.1:0",
            "--data-dir",
            "/tmp/x",
            "--feature-gates",
            "APIResponseCompression=false",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let c = Config::from_args(&args).unwrap();
        assert_eq!(c.listen.port(), 0);
        assert!(!c.gate("APIResponseCompression"));
        assert!(Config::from_args(&["--bogus".into()]).is_err());
        assert!(Config::from_args(&["--feature-gates=Nope=true".into()]).is_err());
    }
}
