//! The ServiceAccount `token` sub-resource: a TokenRequest answered with a signed JWT whose
//! signature checks out against the published JWKS, the errors Kubernetes gives, and a signing
//! key that survives a restart.

use crate::common::{assert_status, sa_path, TestServer};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use serde_json::{json, Value};

fn b64json(part: &str) -> Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("JSON")
}

/// Checks `token`'s signature with the key of the server's JWKS; returns its claims.
async fn verify(s: &TestServer, token: &str) -> Value {
    let jwks = s.get("/openid/v1/jwks").await;
    assert_eq!(jwks.code(), 200);
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a compact JWS: {token}");
    let header = b64json(parts[0]);
    assert_eq!(header["alg"], "ES256");
    let keys = jwks.json()["keys"].as_array().cloned().unwrap_or_default();
    let jwk = keys
        .iter()
        .find(|k| k["kid"] == header["kid"])
        .expect("the token's key is published");
    let mut point = vec![4u8];
    for c in ["x", "y"] {
        point.extend(URL_SAFE_NO_PAD.decode(jwk[c].as_str().unwrap()).unwrap());
    }
    let key = VerifyingKey::from_sec1_bytes(&point).expect("a P-256 key");
    let sig = Signature::from_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).expect("r||s");
    key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
        .expect("the signature verifies");
    b64json(parts[1])
}

#[tokio::test]
async fn token_requests_return_verifiable_tokens() {
    let s = TestServer::start();
    let created = s
        .post_json(&sa_path("default"), &json!({"metadata": {"name": "bot"}}))
        .await
        .json();
    let path = format!("{}/bot/token", sa_path("default"));
    let r = s
        .post_json(
            &path,
            &json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                    "spec": {"audiences": ["api", "vault"], "expirationSeconds": 900}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["kind"], "TokenRequest");
    assert_eq!(v["metadata"]["name"], "bot");
    assert_eq!(v["metadata"]["namespace"], "default");
    assert!(v["status"]["expirationTimestamp"].is_string());
    let claims = verify(&s, v["status"]["token"].as_str().unwrap()).await;
    assert_eq!(claims["sub"], "system:serviceaccount:default:bot");
    assert_eq!(claims["aud"], json!(["api", "vault"]));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        900
    );
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["uid"],
        created["metadata"]["uid"]
    );

    // Defaults: one hour, the issuer as audience.
    let v = s.post_json(&path, &json!({})).await.json();
    let claims = verify(&s, v["status"]["token"].as_str().unwrap()).await;
    let discovery = s.get("/.well-known/openid-configuration").await.json();
    assert_eq!(claims["iss"], discovery["issuer"]);
    assert_eq!(claims["aud"], json!([discovery["issuer"]]));
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );

    // Errors as Kubernetes gives them.
    let r = s
        .post_json(&path, &json!({"spec": {"expirationSeconds": 60}}))
        .await;
    assert_status(&r, 422, "Invalid");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("may not specify a duration less than 10 minutes"));
    let r = s
        .post_json(&path, &json!({"metadata": {"name": "someone-else"}}))
        .await;
    assert_status(&r, 422, "Invalid");
    let r = s
        .post_json(&format!("{}/nobody/token", sa_path("default")), &json!({}))
        .await;
    assert_status(&r, 404, "NotFound");
    let r = s.get(&path).await;
    assert_status(&r, 405, "MethodNotAllowed");
}

#[tokio::test]
async fn the_signing_key_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // The first server is killed, not dropped: on etcd its handle keeps the etcd that the
    // restarted server finds.
    let mut s = TestServer::start_in(dir.path(), &[]);
    s.post_json(&sa_path("default"), &json!({"metadata": {"name": "bot"}}))
        .await;
    let v = s
        .post_json(&format!("{}/bot/token", sa_path("default")), &json!({}))
        .await
        .json();
    let first = v["status"]["token"].as_str().unwrap().to_string();
    s.kill();
    let s = TestServer::start_in(dir.path(), &[]);
    let claims = verify(&s, &first).await;
    assert_eq!(claims["sub"], "system:serviceaccount:default:bot");
}
