//! Reads what a run needs from a kubeconfig file: the current (or named) context's server, its
//! CA, whether to skip TLS verification, and the user's bearer token or client certificate.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

/// The connection settings of one kubeconfig context.
#[derive(Clone, Debug, Default)]
pub struct KubeconfigContext {
    pub server: String,
    pub ca_pem: Option<Vec<u8>>,
    pub insecure: bool,
    pub token: Option<String>,
    pub client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
}

/// Reads `path` and resolves `context` (the file's `current-context` when `None`).
pub fn load(path: &Path, context: Option<&str>) -> Result<KubeconfigContext, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("could not read the kubeconfig {}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    parse(&text, &dir, context).map_err(|e| format!("kubeconfig {}: {e}", path.display()))
}

/// Resolves `context` in a kubeconfig's text; relative file names are relative to `dir`.
pub fn parse(text: &str, dir: &Path, context: Option<&str>) -> Result<KubeconfigContext, String> {
    let config: Value =
        serde_norway::from_str(text).map_err(|e| format!("not a kubeconfig (YAML): {e}"))?;
    let context_name = match context {
        Some(name) => name.to_string(),
        None => config["current-context"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or("no current-context (give --context)")?
            .to_string(),
    };
    let context = named(&config, "contexts", &context_name)?;
    let cluster_name = context["context"]["cluster"]
        .as_str()
        .ok_or_else(|| format!("context {context_name} names no cluster"))?;
    let cluster = &named(&config, "clusters", cluster_name)?["cluster"];
    let mut out = KubeconfigContext {
        server: cluster["server"]
            .as_str()
            .ok_or_else(|| format!("cluster {cluster_name} has no server"))?
            .to_string(),
        insecure: cluster["insecure-skip-tls-verify"]
            .as_bool()
            .unwrap_or(false),
        ..Default::default()
    };
    out.ca_pem = data_or_file(
        cluster,
        "certificate-authority-data",
        "certificate-authority",
        dir,
    )?;
    if let Some(user_name) = context["context"]["user"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        let user = &named(&config, "users", user_name)?["user"];
        if let Some(token) = user["token"].as_str() {
            out.token = Some(token.to_string());
        } else if let Some(file) = user["tokenFile"].as_str() {
            let path = resolve(dir, file);
            let token = std::fs::read_to_string(&path)
                .map_err(|e| format!("could not read tokenFile {}: {e}", path.display()))?;
            out.token = Some(token.trim().to_string());
        }
        let cert = data_or_file(user, "client-certificate-data", "client-certificate", dir)?;
        let key = data_or_file(user, "client-key-data", "client-key", dir)?;
        match (cert, key) {
            (Some(cert), Some(key)) => out.client_cert_pem = Some((cert, key)),
            (None, None) => {}
            _ => {
                return Err(format!(
                    "user {user_name}: a client certificate needs its key"
                ))
            }
        }
        if out.token.is_none() && out.client_cert_pem.is_none() {
            for unsupported in ["exec", "auth-provider", "username"] {
                if !user[unsupported].is_null() {
                    return Err(format!(
                        "user {user_name}: `{unsupported}` credentials are not supported; \
                         give --token or a kubeconfig with a token or client certificate"
                    ));
                }
            }
        }
    }
    Ok(out)
}

fn named<'a>(config: &'a Value, list: &str, name: &str) -> Result<&'a Value, String> {
    config[list]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == name))
        .ok_or_else(|| format!("no entry named {name:?} in {list}"))
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    let path = Path::new(file);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        dir.join(path)
    }
}

fn data_or_file(
    section: &Value,
    data_key: &str,
    file_key: &str,
    dir: &Path,
) -> Result<Option<Vec<u8>>, String> {
    if let Some(data) = section[data_key].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("{data_key} is not base64: {e}"))?;
        return Ok(Some(bytes));
    }
    if let Some(file) = section[file_key].as_str() {
        let path = resolve(dir, file);
        let bytes = std::fs::read(&path)
            .map_err(|e| format!("could not read {file_key} {}: {e}", path.display()))?;
        return Ok(Some(bytes));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_context_gives_server_ca_and_token() {
        let text = "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
clusters:\n- name: one\n  cluster:\n    server: https://one:6443\n    certificate-authority-data: aGVsbG8=\n\
- name: two\n  cluster:\n    server: https://two:6443\n    insecure-skip-tls-verify: true\n\
contexts:\n- name: a\n  context: {cluster: one, user: u}\n- name: b\n  context: {cluster: two, user: u}\n\
users:\n- name: u\n  user:\n    token: secret\n";
        let b = parse(text, Path::new("."), None).unwrap();
        assert_eq!(b.server, "https://two:6443");
        assert!(b.insecure);
        assert_eq!(b.ca_pem, None);
        assert_eq!(b.token.as_deref(), Some("secret"));
        let a = parse(text, Path::new("."), Some("a")).unwrap();
        assert_eq!(a.server, "https://one:6443");
        assert_eq!(a.ca_pem.as_deref(), Some(&b"hello"[..]));
        let missing = parse(text, Path::new("."), Some("c")).unwrap_err();
        assert!(
            missing.contains("no entry named \"c\" in contexts"),
            "{missing}"
        );
    }

    #[test]
    fn exec_credentials_are_refused_with_a_reason() {
        let text = "current-context: a\nclusters:\n- name: c\n  cluster: {server: 'https://x'}\n\
contexts:\n- name: a\n  context: {cluster: c, user: u}\n\
users:\n- name: u\n  user:\n    exec: {command: aws}\n";
        let e = parse(text, Path::new("."), None).unwrap_err();
        assert!(e.contains("`exec` credentials are not supported"), "{e}");
    }
}
