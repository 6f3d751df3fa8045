//! ServiceAccount tokens: the `token` sub-resource (a TokenRequest of
//! `authentication.k8s.io/v1`) answered with a signed JWT whose claims follow Kubernetes'.
//!
//! Tokens are signed with ES256 (ECDSA on P-256 with SHA-256), one of the algorithms Kubernetes
//! accepts for service-account keys. The private key is 32 random bytes kept in the store under
//! [`SIGNING_KEY`], created once by whichever replica starts first, so every replica signs with
//! the same key and tokens survive restarts.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::{Signer, Verifier};
use p256::ecdsa::{Signature, SigningKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use strata_object::field::FieldError;
use strata_object::{format_unix, Object, Status};

/// The store key of the service-account token signing key.
pub(crate) const SIGNING_KEY: &str = "/strata/service-account-signing-key";

/// The token lifetime when the request names none (Kubernetes' default).
const DEFAULT_EXPIRATION: i64 = 3600;
/// The shortest lifetime a client may ask for.
const MIN_EXPIRATION: i64 = 600;
/// The longest (2^32 seconds).
const MAX_EXPIRATION: i64 = 1 << 32;

/// Signs service-account tokens.
pub struct TokenIssuer {
    key: SigningKey,
    key_id: String,
    issuer: String,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("key_id", &self.key_id)
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl TokenIssuer {
    /// An issuer for the 32-byte private scalar `secret`; `None` if it is not a valid P-256
    /// scalar (zero or not below the group order: odds of about 2^-32 for random bytes).
    pub fn new(secret: &[u8], issuer: &str) -> Option<TokenIssuer> {
        let key = SigningKey::from_slice(secret).ok()?;
        let public = key.verifying_key().to_encoded_point(false);
        let key_id = URL_SAFE_NO_PAD.encode(Sha256::digest(public.as_bytes()));
        Some(TokenIssuer {
            key,
            key_id,
            issuer: issuer.to_string(),
        })
    }

    /// The issuer (`iss`) of every token, and the default audience.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The public key as a JSON Web Key Set, for others to verify tokens with.
    pub fn jwks(&self) -> Value {
        let public = self.key.verifying_key().to_encoded_point(false);
        let coordinate =
            |c: Option<&p256::FieldBytes>| c.map(|b| URL_SAFE_NO_PAD.encode(b)).unwrap_or_default();
        json!({"keys": [{
            "use": "sig",
            "kty": "EC",
            "kid": self.key_id,
            "crv": "P-256",
            "alg": "ES256",
            "x": coordinate(public.x()),
            "y": coordinate(public.y()),
        }]})
    }

    /// Signs `claims` as a compact JWS.
    fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let encode = |v: &Value| URL_SAFE_NO_PAD.encode(strata_codec::json::compact(v));
        let input = format!("{}.{}", encode(&header), encode(claims));
        let signature: Signature = self.key.sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
    }

    /// Checks a token this issuer signed: the ES256 signature, `iss`, an audience among
    /// `audiences`, and `nbf <= now < exp` (Unix seconds; a minute of clock skew allowed either
    /// way, as Kubernetes allows). Returns the claims, or why the token is refused.
    pub fn verify(&self, token: &str, audiences: &[&str], now: i64) -> Result<Value, String> {
        const LEEWAY: i64 = 60;
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a compact JWS".into());
        };
        let decode = |part: &str| -> Result<Value, String> {
            let bytes = URL_SAFE_NO_PAD
                .decode(part)
                .map_err(|e| format!("bad base64url: {e}"))?;
            serde_json::from_slice(&bytes).map_err(|e| format!("bad JSON: {e}"))
        };
        let head = decode(header)?;
        if head["alg"] != "ES256" {
            return Err(format!("unsupported algorithm {}", head["alg"]));
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .ok()
            .and_then(|b| Signature::from_slice(&b).ok())
            .ok_or("malformed signature")?;
        let signed = &token[..header.len() + 1 + payload.len()];
        self.key
            .verifying_key()
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| "invalid signature")?;
        let claims = decode(payload)?;
        if claims["iss"] != self.issuer.as_str() {
            return Err("issuer mismatch".into());
        }
        let aud: Vec<&str> = match &claims["aud"] {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !aud.iter().any(|a| audiences.contains(a)) {
            return Err("token audiences are not accepted".into());
        }
        let time = |k: &str| claims[k].as_i64();
        match (time("exp"), time("nbf")) {
            (Some(exp), _) if now >= exp + LEEWAY => return Err("token has expired".into()),
            (_, Some(nbf)) if now + LEEWAY < nbf => return Err("token is not valid yet".into()),
            (None, _) => return Err("token has no expiry".into()),
            _ => {}
        }
        Ok(claims)
    }

    /// Answers a TokenRequest for the ServiceAccount `sa`: checks it as Kubernetes does, and
    /// returns it completed with the token and its expiry. `now` is in Unix seconds.
    pub fn issue(&self, sa: &Object, request: Value, now: i64) -> Result<Value, Status> {
        let mut request = match request {
            Value::Object(m) => m,
            _ => return Err(Status::bad_request("a TokenRequest must be an object")),
        };
        let (ns, name) = (sa.namespace(), sa.name());
        let invalid = |name: &str, errors: &[FieldError]| {
            Status::invalid("authentication.k8s.io", "TokenRequest", name, errors)
        };
        let meta = request
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| Status::bad_request("metadata must be an object"))?;
        for (field, want) in [("name", name), ("namespace", ns)] {
            match meta.get(field).and_then(Value::as_str) {
                Some(given) if !given.is_empty() && given != want => {
                    return Err(invalid(
                        given,
                        &[FieldError::invalid_string(
                            &format!("metadata.{field}"),
                            given,
                            "must match the service account name if specified",
                        )],
                    ))
                }
                _ => {}
            }
            meta.insert(field.into(), json!(want));
        }
        meta.insert("creationTimestamp".into(), json!(format_unix(now)));

        let spec = request
            .entry("spec")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or_else(|| Status::bad_request("spec must be an object"))?;
        let expiration = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| Status::bad_request("spec.expirationSeconds must be an integer"))?,
        };
        let too = if expiration < MIN_EXPIRATION {
            Some("may not specify a duration less than 10 minutes")
        } else if expiration > MAX_EXPIRATION {
            Some("may not specify a duration larger than 2^32 seconds")
        } else {
            None
        };
        if let Some(why) = too {
            return Err(invalid(
                "",
                &[FieldError::new(
                    strata_object::field::FieldErrorKind::Invalid,
                    "spec.expirationSeconds",
                    Some(expiration.to_string()),
                    why,
                )],
            ));
        }
        spec.insert("expirationSeconds".into(), json!(expiration));
        let audiences: Vec<String> = match spec.get("audiences") {
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|v| v.as_str().map(String::from))
                .collect::<Option<_>>()
                .ok_or_else(|| Status::bad_request("spec.audiences must be strings"))?,
            _ => vec![self.issuer.clone()],
        };
        spec.insert("audiences".into(), json!(audiences));
        if let Some(bound) = spec.get("boundObjectRef").filter(|v| !v.is_null()) {
            let kind = bound.get("kind").and_then(Value::as_str).unwrap_or("");
            let name = bound.get("name").and_then(Value::as_str).unwrap_or("");
            return Err(match kind {
                // Strata serves neither pods nor secrets, so none can be bound to.
                "Pod" => Status::not_found("", "pods", name),
                "Secret" => Status::not_found("", "secrets", name),
                "Node" => Status::bad_request(
                    "cannot bind token to a Node object as the \"ServiceAccountTokenNodeBinding\" feature-gate is disabled",
                ),
                other => Status::bad_request(format!(
                    "cannot bind token to object of type {other}"
                )),
            });
        }

        let expires = now + expiration;
        let claims = json!({
            "aud": audiences,
            "exp": expires,
            "iat": now,
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": {
                "namespace": ns,
                "serviceaccount": {"name": name, "uid": sa.uid()},
            },
            "nbf": now,
            "sub": format!("system:serviceaccount:{ns}:{name}"),
        });
        request.insert(
            "status".into(),
            json!({"token": self.sign(&claims), "expirationTimestamp": format_unix(expires)}),
        );
        request.insert("kind".into(), json!("TokenRequest"));
        request.insert("apiVersion".into(), json!("authentication.k8s.io/v1"));
        Ok(Value::Object(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::VerifyingKey;

    fn sa() -> Object {
        Object::from_value(json!({"metadata": {"name": "robot", "namespace": "ns1", "uid": "u-1"}}))
            .unwrap()
    }

    #[test]
    fn tokens_carry_kubernetes_claims_and_verify_with_the_published_key() {
        let issuer = TokenIssuer::new(&[7u8; 32], "https://strata.test").unwrap();
        let out = issuer
            .issue(&sa(), json!({"spec": {"expirationSeconds": 600}}), 1_000)
            .unwrap();
        assert_eq!(out["metadata"]["name"], "robot");
        assert_eq!(out["spec"]["audiences"], json!(["https://strata.test"]));
        assert_eq!(out["status"]["expirationTimestamp"], format_unix(1_600));
        let token = out["status"]["token"].as_str().unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:ns1:robot");
        assert_eq!(claims["kubernetes.io"]["serviceaccount"]["uid"], "u-1");
        assert_eq!(claims["exp"], 1_600);

        // The JWKS coordinates rebuild the key that verifies the signature.
        let jwk = &issuer.jwks()["keys"][0];
        let mut point = vec![4u8];
        for c in ["x", "y"] {
            point.extend(URL_SAFE_NO_PAD.decode(jwk[c].as_str().unwrap()).unwrap());
        }
        let key = VerifyingKey::from_sec1_bytes(&point).unwrap();
        let sig = Signature::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
        let signed = format!("{}.{}", parts[0], parts[1]);
        assert!(key.verify(signed.as_bytes(), &sig).is_ok());
        assert!(key.verify(b"tampered", &sig).is_err());
    }

    #[test]
    fn verify_accepts_its_own_live_tokens_only() {
        let issuer = TokenIssuer::new(&[7u8; 32], "https://strata.test").unwrap();
        let out = issuer
            .issue(&sa(), json!({"spec": {"audiences": ["api", "x"]}}), 1_000)
            .unwrap();
        let token = out["status"]["token"].as_str().unwrap();
        let claims = issuer.verify(token, &["x"], 1_500).unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:ns1:robot");
        // Expired (an hour by default, a minute of leeway), not yet valid, wrong audience.
        assert!(issuer.verify(token, &["x"], 1_000 + 3_600 + 60).is_err());
        assert!(issuer.verify(token, &["x"], 1_000 - 61).is_err());
        assert!(issuer.verify(token, &["other"], 1_500).is_err());
        // Another key, another issuer, a tampered payload, garbage.
        let stranger = TokenIssuer::new(&[8u8; 32], "https://strata.test").unwrap();
        assert!(stranger.verify(token, &["x"], 1_500).is_err());
        let renamed = TokenIssuer::new(&[7u8; 32], "https://other").unwrap();
        assert!(renamed.verify(token, &["x"], 1_500).is_err());
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(br#"{"iss":"https://strata.test","aud":["x"],"exp":9999999999,"sub":"system:serviceaccount:ns1:admin"}"#);
        assert!(issuer.verify(&parts.join("."), &["x"], 1_500).is_err());
        for junk in ["", "a.b", "a.b.c", "....", "e30.e30.e30"] {
            assert!(issuer.verify(junk, &["x"], 1_500).is_err(), "{junk}");
        }
    }

    #[test]
    fn requests_are_checked() {
        let issuer = TokenIssuer::new(&[7u8; 32], "iss").unwrap();
        let short = issuer.issue(&sa(), json!({"spec": {"expirationSeconds": 60}}), 0);
        assert_eq!(short.unwrap_err().code, 422);
        let other = issuer.issue(&sa(), json!({"metadata": {"name": "x"}}), 0);
        assert_eq!(other.unwrap_err().code, 422);
        let pod = json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": "p"}}});
        assert_eq!(issuer.issue(&sa(), pod, 0).unwrap_err().code, 404);
        assert!(TokenIssuer::new(&[0u8; 32], "iss").is_none());
    }
}
