//! Authentication: bearer tokens from a static token file, ServiceAccount tokens, and the
//! anonymous user.
//!
//! A request either carries `Authorization: Bearer <token>` or no credentials. A token that no
//! authenticator accepts is a 401, whether or not anonymous requests are allowed; a request
//! without a token is anonymous when that is allowed, else a 401.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
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
        match self.service_account(token, &self.api_audiences()).await {
            Ok(Some((user, _))) => Some(user),
            Ok(None) => None,
            Err(why) => {
                tracing::debug!(%why, "bearer token refused");
                None
            }
        }
    }

    /// The audiences this server's own API accepts (kube-apiserver's `--api-audiences`, which
    /// defaults to the issuer): what a token is checked against when no audience is asked for.
    pub fn api_audiences(&self) -> Vec<String> {
        self.registry
            .token_issuer()
            .map(|i| vec![i.issuer().to_string()])
            .unwrap_or_default()
    }

    /// Authenticates `token` for `audiences` (the server's own when empty) with every token
    /// authenticator, as a TokenReview asks: the user and the audiences the token is good for
    /// among those asked, or why no authenticator accepted it.
    pub async fn review_token(&self, token: &str, audiences: &[String]) -> TokenOutcome {
        let api = self.api_audiences();
        let wanted: Vec<String> = if audiences.is_empty() {
            api.clone()
        } else {
            audiences.to_vec()
        };
        let mut errors: Vec<String> = Vec::new();
        // Static tokens carry no audience of their own: they are good for the server's
        // audiences only, and so only when the review asks for one of those.
        if let Some(user) = self
            .config
            .token_file
            .as_ref()
            .and_then(|f| f.lookup(token))
        {
            let good_for = intersect(&api, &wanted);
            if !good_for.is_empty() || api.is_empty() {
                return TokenOutcome {
                    user: Some(user.clone()),
                    audiences: good_for,
                    error: None,
                };
            }
        }
        match self.service_account(token, &wanted).await {
            Ok(Some((user, good_for))) => {
                return TokenOutcome {
                    user: Some(user),
                    audiences: good_for,
                    error: None,
                }
            }
            Ok(None) => {}
            Err(why) => errors.push(why),
        }
        // When no authenticator says why, the token is simply not known, as Kubernetes'
        // bearer-token authenticator puts it.
        let error = if errors.is_empty() {
            "invalid bearer token".to_string()
        } else {
            aggregate(&errors)
        };
        TokenOutcome {
            user: None,
            audiences: Vec::new(),
            error: Some(error),
        }
    }

    /// A ServiceAccount token for one of `audiences`: `Ok(None)` when the token is not one this
    /// cluster issued (not a JWT, or another issuer), an error (in Kubernetes' words where it
    /// has them) when it is but does not authenticate, else the user and the audiences it is
    /// good for among `audiences`. Signed by this cluster, live, and naming a ServiceAccount
    /// that still exists with the same uid (one deleted, or deleted and created again, no
    /// longer authenticates).
    async fn service_account(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<(UserInfo, Vec<String>)>, String> {
        let Some(issuer) = self.registry.token_issuer() else {
            return Ok(None);
        };
        let Some(unverified) = unverified_claims(token) else {
            return Ok(None);
        };
        if unverified["iss"] != issuer.issuer() {
            return Ok(None);
        }
        let token_audiences: Vec<String> = match &unverified["aud"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => Vec::new(),
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        // The signature and lifetime, against the token's own audiences: which of them count
        // is decided below, with Kubernetes' message when none does.
        let own: Vec<&str> = token_audiences.iter().map(String::as_str).collect();
        let verified = issuer.verify(token, &own, now);
        if let Err(why) = &verified {
            if !why.contains("expired") && !why.contains("not valid yet") {
                return Err(why.clone());
            }
        }
        let good_for = intersect(&token_audiences, audiences);
        if good_for.is_empty() {
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(&token_audiences),
                go_quoted(audiences)
            ));
        }
        let claims = verified.map_err(|why| {
            if why.contains("expired") {
                "Token has expired.".to_string()
            } else {
                why
            }
        })?;
        let k8s = &claims["kubernetes.io"];
        let field = |v: &Value| v.as_str().map(String::from);
        let (Some(namespace), Some(name), Some(uid)) = (
            field(&k8s["namespace"]),
            field(&k8s["serviceaccount"]["name"]),
            field(&k8s["serviceaccount"]["uid"]),
        ) else {
            return Err("Token could not be validated.".into());
        };
        let Some(rt) = self.registry.lookup("", "v1", "serviceaccounts") else {
            return Err("ServiceAccounts are not served".into());
        };
        let sa = self
            .registry
            .get(&rt, &namespace, &name, "")
            .await
            .map_err(|s| s.message)?;
        if sa.uid() != uid {
            tracing::debug!(
                namespace,
                name,
                "token of a ServiceAccount that was recreated"
            );
            return Err(format!(
                "ServiceAccount UID ({}) does not match claim ({uid})",
                sa.uid()
            ));
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
        Ok(Some((user, good_for)))
    }
}

/// What a TokenReview found: `status.user` and `status.audiences` when the token
/// authenticated, else `status.error`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenOutcome {
    pub user: Option<UserInfo>,
    pub audiences: Vec<String>,
    pub error: Option<String>,
}

/// The claims of a compact JWS, read without checking anything (to see whose it is).
fn unverified_claims(token: &str) -> Option<Value> {
    if token.trim_start().starts_with('{') {
        return None;
    }
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    serde_json::from_slice(&base64url(payload)?).ok()
}

/// Decodes unpadded base64url (a JWS part); `None` for anything else.
fn base64url(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = ((acc << 6) | u32::from(v)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // A lone trailing character cannot end a valid encoding.
    (bits < 6).then_some(out)
}

/// The members of `a` that are also in `b`, in `a`'s order.
fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// A list of strings as Go's `%q` prints a `[]string`: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", items.join(" "))
}

/// Several errors as one message, as Kubernetes aggregates them: one alone as itself, more
/// (repeats dropped) in brackets, comma-separated.
pub fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
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
    fn review_helpers_write_like_kubernetes() {
        assert_eq!(base64url("eyJhIjoxfQ").unwrap(), br#"{"a":1}"#);
        assert_eq!(base64url("-_8").unwrap(), [0xfb, 0xff]);
        assert!(base64url("a=").is_none());
        assert!(base64url("abcde").is_none());
        assert_eq!(
            unverified_claims("eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.c2ln").unwrap()["iss"],
            "x"
        );
        assert!(unverified_claims("not-a-jwt").is_none());
        let auds = ["a".to_string(), "b c".to_string()];
        assert_eq!(go_quoted(&auds), r#"["a" "b c"]"#);
        assert_eq!(go_quoted(&[]), "[]");
        assert_eq!(intersect(&auds, &["b c".into(), "z".into()]), ["b c"]);
        let errs = |e: &[&str]| aggregate(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(errs(&[]), "");
        assert_eq!(errs(&["one"]), "one");
        assert_eq!(errs(&["one", "one"]), "one");
        assert_eq!(errs(&["one", "two", "one"]), "[one, two]");
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
