//! Authentication: bearer tokens from a static token file, ServiceAccount tokens, and the
//! anonymous user.
//!
//! A request either carries `Authorization: Bearer <token>` or no credentials. A token that no
//! authenticator accepts is a 401, whether or not anonymous requests are allowed; a request
//! without a token is anonymous when that is allowed, else a 401.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use strata_object::Status;
use strata_registry::Registry;

use crate::{UserInfo, AUTHENTICATED, SERVICE_ACCOUNTS};

/// Settings of authentication.
#[derive(Clone, Debug, Default)]
pub struct AuthnConfig {
    /// Requests without credentials are the anonymous user (else 401).
    pub anonymous: bool,
    /// The static tokens (`--token-auth-file`).
    pub token_file: Option<TokenFile>,
}

/// The users of a static token file: the CSV format Kubernetes reads with
/// `--token-auth-file`, `token,user,uid[,"group1,group2"]`, one user per line.
#[derive(Clone, Debug, Default)]
pub struct TokenFile {
    users: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Parses the file's text. Rows with an empty token are skipped; a row with fewer than
    /// three columns, or a token given twice, is an error naming the line.
    pub fn parse(text: &str) -> Result<TokenFile, String> {
        let mut users = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line_no = n + 1;
            if line.trim().is_empty() {
                continue;
            }
            let fields = csv_fields(line).map_err(|e| format!("line {line_no}: {e}"))?;
            if fields.len() < 3 {
                return Err(format!(
                    "line {line_no}: expected at least 3 columns (token,user,uid), found {}",
                    fields.len()
                ));
            }
            let token = fields[0].trim();
            if token.is_empty() {
                continue;
            }
            let mut groups: Vec<String> = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            if !groups.iter().any(|g| g == AUTHENTICATED) {
                groups.push(AUTHENTICATED.into());
            }
            let user = UserInfo {
                name: fields[1].trim().to_string(),
                uid: fields[2].trim().to_string(),
                groups,
                ..Default::default()
            };
            if users.insert(token.to_string(), user).is_some() {
                return Err(format!("line {line_no}: the token is listed twice"));
            }
        }
        Ok(TokenFile { users })
    }

    /// Adds (or replaces) the user of `token`.
    pub fn insert(&mut self, token: &str, user: UserInfo) {
        self.users.insert(token.to_string(), user);
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    fn lookup(&self, token: &str) -> Option<&UserInfo> {
        self.users.get(token)
    }
}

/// Splits one CSV line (RFC 4180 quoting: `"a,b"`, `""` for a quote).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            (false, '"') => return Err("a quote inside an unquoted field".into()),
            (false, ',') => {
                fields.push(std::mem::take(&mut field));
                was_quoted = false;
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("an unterminated quoted field".into());
    }
    fields.push(field);
    Ok(fields)
}

/// What the `Authorization` header holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Credentials<'a> {
    /// No header, or a scheme other than bearer.
    None,
    Bearer(&'a str),
    /// `Bearer` with no token: never valid.
    EmptyBearer,
}

/// Reads the bearer token of an `Authorization` header as Kubernetes does: the scheme is
/// case-insensitive and the token is the second space-separated part.
pub fn credentials(header: Option<&str>) -> Credentials<'_> {
    let Some(header) = header.map(str::trim) else {
        return Credentials::None;
    };
    let mut parts = header.splitn(3, ' ');
    let scheme = parts.next().unwrap_or("");
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Credentials::None;
    }
    match parts.next() {
        Some(token) if !token.is_empty() => Credentials::Bearer(token),
        _ => Credentials::EmptyBearer,
    }
}

/// Authenticates requests.
pub struct Authenticator {
    config: AuthnConfig,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("anonymous", &self.config.anonymous)
            .field(
                "static_tokens",
                &self.config.token_file.as_ref().map_or(0, TokenFile::len),
            )
            .finish()
    }
}

impl Authenticator {
    pub fn new(config: AuthnConfig, registry: Arc<Registry>) -> Self {
        Self { config, registry }
    }

    /// The user behind a request's `Authorization` header, or Kubernetes' 401.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<UserInfo, Status> {
        match credentials(authorization) {
            Credentials::None if self.config.anonymous => Ok(UserInfo::anonymous()),
            Credentials::None | Credentials::EmptyBearer => Err(Status::unauthorized()),
            Credentials::Bearer(token) => self.token(token).await.ok_or_else(Status::unauthorized),
        }
    }

    async fn token(&self, token: &str) -> Option<UserInfo> {
        if let Some(user) = self
            .config
            .token_file
            .as_ref()
            .and_then(|f| f.lookup(token))
        {
            return Some(user.clone());
        }
        self.service_account(token).await
    }

    /// A ServiceAccount token: signed by this cluster for its API audience, live, and naming a
    /// ServiceAccount that still exists with the same uid (one deleted, or deleted and created
    /// again, no longer authenticates).
    async fn service_account(&self, token: &str) -> Option<UserInfo> {
        let issuer = self.registry.token_issuer()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let claims = match issuer.verify(token, &[issuer.issuer()], now) {
            Ok(c) => c,
            Err(why) => {
                tracing::debug!(%why, "bearer token refused");
                return None;
            }
        };
        let k8s = &claims["kubernetes.io"];
        let namespace = k8s["namespace"].as_str()?;
        let name = k8s["serviceaccount"]["name"].as_str()?;
        let uid = k8s["serviceaccount"]["uid"].as_str()?;
        let rt = self.registry.lookup("", "v1", "serviceaccounts")?;
        let sa = self.registry.get(&rt, namespace, name, "").await.ok()?;
        if sa.uid() != uid {
            tracing::debug!(
                namespace,
                name,
                "token of a ServiceAccount that was recreated"
            );
            return None;
        }
        let mut user = UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.to_string(),
            groups: vec![
                SERVICE_ACCOUNTS.into(),
                format!("{SERVICE_ACCOUNTS}:{namespace}"),
                AUTHENTICATED.into(),
            ],
            ..Default::default()
        };
        if let Some(jti) = claims["jti"].as_str() {
            user.extra.insert(
                "authentication.kubernetes.io/credential-id".into(),
                vec![format!("JTI={jti}")],
            );
        }
        Some(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_follow_kubernetes_csv() {
        let f = TokenFile::parse(
            "admin-token,admin,1,\"system:masters,ops\"\n\
             \n\
             ,skipped,2\n\
             plain,alice,3\n\
             extra,bob,4,\"\",ignored\n",
        )
        .unwrap();
        assert_eq!(f.len(), 3);
        let admin = f.lookup("admin-token").unwrap();
        assert_eq!(admin.name, "admin");
        assert_eq!(admin.uid, "1");
        assert_eq!(admin.groups, ["system:masters", "ops", AUTHENTICATED]);
        assert_eq!(f.lookup("plain").unwrap().groups, [AUTHENTICATED]);
        assert_eq!(f.lookup("extra").unwrap().name, "bob");
        assert!(f.lookup("").is_none());
        assert!(TokenFile::parse("t,u\n").unwrap_err().contains("line 1"));
        assert!(TokenFile::parse("t,u,1\nt,v,2\n")
            .unwrap_err()
            .contains("twice"));
        assert!(TokenFile::parse("t,u,1,\"open\n").is_err());
    }

    #[test]
    fn bearer_tokens_are_read_like_kubernetes() {
        assert_eq!(credentials(None), Credentials::None);
        assert_eq!(credentials(Some("Basic abc")), Credentials::None);
        assert_eq!(credentials(Some("Bearer abc")), Credentials::Bearer("abc"));
        assert_eq!(credentials(Some("bearer abc")), Credentials::Bearer("abc"));
        assert_eq!(
            credentials(Some("BEARER abc extra")),
            Credentials::Bearer("abc")
        );
        assert_eq!(credentials(Some("Bearer")), Credentials::EmptyBearer);
        assert_eq!(credentials(Some("Bearer ")), Credentials::EmptyBearer);
    }
}
