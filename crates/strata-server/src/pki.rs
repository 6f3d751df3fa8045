//! The server's TLS material and the admin kubeconfig.
//!
//! The certificate authority and the admin token (group `system:masters`) belong to the
//! cluster, not to one replica: they live in the store (`/strata/pki/ca`, `/strata/admin-token`),
//! created once by whichever replica starts first (replicas race with create-if-absent; the
//! loser reads the winner's), so every replica over one etcd serves under one CA and accepts one
//! admin token. A data directory from before they moved into the store keeps its own: on the
//! first start its `pki/ca.{crt,key}` and `pki/admin.token` are what goes into the store. Each
//! start copies the store's CA and token back into `<data-dir>/pki` (for inspection and older
//! tools), signs a fresh serving certificate for the addresses this replica listens on (kept as
//! `pki/apiserver.{crt,key}`), and writes `<data-dir>/admin.kubeconfig`: the server's URL, the
//! CA and the admin token, which therefore work against every replica. Operators may bring their
//! own serving certificate instead (`--tls-cert-file`, `--tls-private-key-file`).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use strata_store::{Store, StoreError};

/// The store key of the generated CA: JSON `{"certificate": PEM, "key": PEM}`.
pub const CA_STORE_KEY: &str = "/strata/pki/ca";
/// The store key of the admin token (its text).
pub const ADMIN_TOKEN_STORE_KEY: &str = "/strata/admin-token";

/// The common name of the generated CA.
const CA_NAME: &str = "strata-ca";
/// The admin user of the generated kubeconfig.
pub const ADMIN_USER: &str = "strata-admin";

/// What TLS serving and the admin kubeconfig need.
pub struct Tls {
    pub server_config: Arc<rustls::ServerConfig>,
    /// PEM of the CA that clients should trust; `None` for an operator's own certificate.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("generated_ca", &self.ca_pem.is_some())
            .finish()
    }
}

fn pki_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("pki")
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

/// Writes `contents` readable by the owner only.
fn write_private(path: &Path, contents: &[u8]) -> Result<(), String> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut f = options.open(path).map_err(|e| io_error(path, e))?;
    f.write_all(contents).map_err(|e| io_error(path, e))
}

fn ca_params() -> Result<CertificateParams, String> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    Ok(params)
}

/// Reads the cluster secret under `key`; when the store has none, stores `candidate()` (an
/// existing local copy, or a fresh one) if no other replica stored one first, and reads again.
async fn shared_secret(
    store: &dyn Store,
    key: &str,
    candidate: impl Fn() -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    let unavailable = |e: StoreError| format!("cannot read or store {key}: {e}");
    loop {
        if let (Some(kv), _) = store.get(key, None).await.map_err(unavailable)? {
            return Ok(kv.value.to_vec());
        }
        let value = candidate()?;
        match store
            .create(key, bytes::Bytes::copy_from_slice(&value))
            .await
        {
            Ok(_) => {
                tracing::info!(key, "stored a cluster secret");
                return Ok(value);
            }
            // Another replica was first: read its value.
            Err(StoreError::Exists(_)) => continue,
            Err(e) => return Err(unavailable(e)),
        }
    }
}

/// Writes `contents` to `path` unless it already holds exactly that. Other contents (a CA or
/// token this data directory had before it joined a cluster that has its own) are kept beside
/// it as `<name>.previous`, not destroyed.
fn mirror(path: &Path, contents: &[u8], private: bool) -> Result<(), String> {
    match std::fs::read(path) {
        Ok(old) if old == contents => return Ok(()),
        Ok(_) => {
            let mut previous = path.as_os_str().to_owned();
            previous.push(".previous");
            std::fs::rename(path, &previous).map_err(|e| io_error(path, e))?;
            tracing::warn!(
                path = %path.display(),
                "the cluster's store holds another CA or admin token than this data directory; \
                 using the store's, the old file is kept with the suffix .previous"
            );
        }
        Err(_) => {}
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    if private {
        write_private(path, contents)
    } else {
        std::fs::write(path, contents).map_err(|e| io_error(path, e))
    }
}

/// The CA's key and certificate (and its PEM): the store's, made or uploaded from the data
/// directory on first start. The certificate object is rebuilt from the same parameters and
/// key, which is all signing needs (the issuer name and key identifier are the same).
async fn certificate_authority(
    store: &dyn Store,
    dir: &Path,
) -> Result<(KeyPair, Certificate, String), String> {
    let key_path = dir.join("ca.key");
    let cert_path = dir.join("ca.crt");
    let candidate = || -> Result<Vec<u8>, String> {
        let (key_pem, cert_pem) = if key_path.exists() && cert_path.exists() {
            let key_pem = std::fs::read_to_string(&key_path).map_err(|e| io_error(&key_path, e))?;
            KeyPair::from_pem(&key_pem).map_err(|e| io_error(&key_path, e))?;
            let cert_pem =
                std::fs::read_to_string(&cert_path).map_err(|e| io_error(&cert_path, e))?;
            tracing::info!(path = %cert_path.display(), "keeping the data directory's CA");
            (key_pem, cert_pem)
        } else {
            let key = KeyPair::generate().map_err(|e| e.to_string())?;
            let cert = ca_params()?
                .self_signed(&key)
                .map_err(|e| format!("making the CA certificate: {e}"))?;
            tracing::info!("created a certificate authority");
            (key.serialize_pem(), cert.pem())
        };
        Ok(stored_ca(&cert_pem, &key_pem))
    };
    let stored = shared_secret(store, CA_STORE_KEY, candidate).await?;
    let (cert_pem, key_pem) = parse_ca(&stored)?;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| format!("{CA_STORE_KEY}: {e}"))?;
    let cert = ca_params()?
        .self_signed(&key)
        .map_err(|e| format!("making the CA certificate: {e}"))?;
    mirror(&key_path, key_pem.as_bytes(), true)?;
    mirror(&cert_path, cert_pem.as_bytes(), false)?;
    Ok((key, cert, cert_pem))
}

/// The stored form of the CA.
fn stored_ca(cert_pem: &str, key_pem: &str) -> Vec<u8> {
    serde_json::json!({"certificate": cert_pem, "key": key_pem})
        .to_string()
        .into_bytes()
}

/// The certificate and key PEM of the stored CA.
fn parse_ca(stored: &[u8]) -> Result<(String, String), String> {
    let bad = || format!("{CA_STORE_KEY} does not hold a certificate and key");
    let v: serde_json::Value = serde_json::from_slice(stored).map_err(|_| bad())?;
    match (v["certificate"].as_str(), v["key"].as_str()) {
        (Some(cert), Some(key)) => Ok((cert.to_string(), key.to_string())),
        _ => Err(bad()),
    }
}

/// A serving certificate for `listen`, signed by the CA: names `localhost`, the loopback
/// addresses, the listening address and the in-cluster service names.
fn serving_certificate(
    listen: SocketAddr,
    ca_key: &KeyPair,
    ca: &Certificate,
) -> Result<(String, KeyPair), String> {
    let mut params = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ])
    .map_err(|e| e.to_string())?;
    let mut ips: Vec<IpAddr> = vec![
        IpAddr::from([127, 0, 0, 1]),
        "::1".parse().unwrap_or(listen.ip()),
    ];
    if !listen.ip().is_unspecified() && !ips.contains(&listen.ip()) {
        ips.push(listen.ip());
    }
    params
        .subject_alt_names
        .extend(ips.into_iter().map(SanType::IpAddress));
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "strata-apiserver");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = std::time::SystemTime::now();
    params.not_before = (now - std::time::Duration::from_secs(3600)).into();
    params.not_after = (now + std::time::Duration::from_secs(365 * 24 * 3600)).into();
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params
        .signed_by(&key, ca, ca_key)
        .map_err(|e| format!("signing the serving certificate: {e}"))?;
    Ok((cert.pem(), key))
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the serving certificate and key do not fit: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TLS from the operator's certificate and key files (PEM).
pub fn from_files(cert: &Path, key: &Path) -> Result<Tls, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| io_error(cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| io_error(cert, e))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate found", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| io_error(key, e))?;
    Ok(Tls {
        server_config: server_config(chain, key)?,
        ca_pem: None,
    })
}

/// TLS from the cluster's CA (the store's, made on first start), with a serving certificate for
/// `listen`.
pub async fn generated(
    store: &dyn Store,
    data_dir: &Path,
    listen: SocketAddr,
) -> Result<Tls, String> {
    let dir = pki_dir(data_dir);
    let (ca_key, ca, ca_pem) = certificate_authority(store, &dir).await?;
    let (cert_pem, key) = serving_certificate(listen, &ca_key, &ca)?;
    // Kept beside the CA for inspection (and for other servers to reuse).
    let cert_path = dir.join("apiserver.crt");
    std::fs::write(&cert_path, &cert_pem).map_err(|e| io_error(&cert_path, e))?;
    write_private(&dir.join("apiserver.key"), key.serialize_pem().as_bytes())?;
    let chain =
        vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| e.to_string())?];
    let key =
        PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).map_err(|e| e.to_string())?;
    Ok(Tls {
        server_config: server_config(chain, key)?,
        ca_pem: Some(ca_pem),
    })
}

/// The certificates of a PEM file (`--root-ca-file`, or the serving chain of `--tls-cert-file`)
/// as a bundle to publish: only its `CERTIFICATE` blocks, each checked to parse, so that a key
/// kept in the same file is never published. Fails when the file holds no certificate.
pub fn certificate_bundle(path: &Path) -> Result<String, String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
    let mut bundle = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find(BEGIN) {
        let block = &rest[start..];
        let Some(end) = block.find(END) else {
            return Err(format!(
                "{}: a certificate is not terminated",
                path.display()
            ));
        };
        let block = &block[..end + END.len()];
        CertificateDer::from_pem_slice(block.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        bundle.push_str(block);
        bundle.push('\n');
        rest = &rest[start + end + END.len()..];
    }
    if bundle.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(bundle)
}

/// The cluster's admin token: the store's, made (or taken from the data directory of an older
/// server) on first start, and copied to `<data-dir>/pki/admin.token`.
pub async fn admin_token(store: &dyn Store, data_dir: &Path) -> Result<String, String> {
    let path = pki_dir(data_dir).join("admin.token");
    let candidate = || -> Result<Vec<u8>, String> {
        if let Ok(token) = std::fs::read_to_string(&path) {
            let token = token.trim();
            if !token.is_empty() {
                return Ok(token.as_bytes().to_vec());
            }
        }
        let bytes: [u8; 32] = rand::random();
        Ok(bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into_bytes())
    };
    let stored = shared_secret(store, ADMIN_TOKEN_STORE_KEY, candidate).await?;
    let token = std::str::from_utf8(&stored)
        .ok()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| format!("{ADMIN_TOKEN_STORE_KEY} does not hold a token"))?
        .to_string();
    mirror(&path, token.as_bytes(), true)?;
    Ok(token)
}

/// Writes `<data-dir>/admin.kubeconfig` for the server at `url`; returns its path.
pub fn write_admin_kubeconfig(
    data_dir: &Path,
    url: &str,
    ca_pem: Option<&str>,
    token: &str,
) -> Result<PathBuf, String> {
    use base64::Engine;
    let ca = match ca_pem {
        Some(pem) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(pem)
        ),
        None => String::new(),
    };
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: strata
  cluster:
    server: {url}
{ca}contexts:
- name: {ADMIN_USER}@strata
  context:
    cluster: strata
    namespace: default
    user: {ADMIN_USER}
current-context: {ADMIN_USER}@strata
users:
- name: {ADMIN_USER}
  user:
    token: {token}
preferences: {{}}
"
    );
    let path = data_dir.join("admin.kubeconfig");
    write_private(&path, text.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle holds the file's certificates and nothing else; a file without one is refused.
    #[test]
    fn bundles_keep_only_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let ca = ca_params().unwrap().self_signed(&key).unwrap();
        let (serving, serving_key) =
            serving_certificate("127.0.0.1:6443".parse().unwrap(), &key, &ca).unwrap();
        let file = dir.path().join("chain.pem");
        std::fs::write(
            &file,
            format!(
                "leaf\n{serving}{}\n{}",
                serving_key.serialize_pem(),
                ca.pem()
            ),
        )
        .unwrap();
        let bundle = certificate_bundle(&file).unwrap();
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2, "{bundle}");
        assert!(!bundle.contains("PRIVATE KEY"), "{bundle}");
        assert!(bundle.starts_with("-----BEGIN CERTIFICATE-----"));
        let parsed: Vec<_> = CertificateDer::pem_slice_iter(bundle.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(parsed.len(), 2);
        std::fs::write(&file, serving_key.serialize_pem()).unwrap();
        let e = certificate_bundle(&file).unwrap_err();
        assert!(e.contains("no certificate found"), "{e}");
    }
}
