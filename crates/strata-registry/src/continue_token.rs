//! Continue tokens of chunked lists: opaque to clients, they carry the snapshot revision and the
//! next key (relative to the collection's key prefix), in the layout Kubernetes uses, plus when
//! the first page was served and an HMAC-SHA256 over all of it, so that an edited or foreign
//! token is refused instead of listing from wherever it points.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use strata_object::Status;

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// A decoded continue token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    /// The snapshot revision; -1 means "continue at the latest revision".
    #[serde(rename = "rv")]
    pub revision: i64,
    /// The next key to read, relative to the collection prefix.
    pub start: String,
    /// When the list's first page was served (seconds since the Unix epoch).
    pub issued: u64,
    /// Keys of the collection before `start` at the snapshot, and all its keys; both 0 when
    /// unknown. They let a continued page compute `remainingItemCount` without a count.
    pub passed: u64,
    pub total: u64,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
    #[serde(default)]
    t: u64,
    #[serde(default)]
    o: u64,
    #[serde(default)]
    n: u64,
    #[serde(default)]
    s: String,
}

/// The token's MAC: HMAC-SHA256 keyed with the cluster's token key over the collection and
/// every field, each length-framed so that no two tokens share an input.
fn mac(key: &[u8], collection: &str, wire: &Wire) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any size");
    for text in [collection, TOKEN_VERSION, wire.start.as_str()] {
        mac.update(&(text.len() as u64).to_be_bytes());
        mac.update(text.as_bytes());
    }
    mac.update(&wire.rv.to_be_bytes());
    for n in [wire.t, wire.o, wire.n] {
        mac.update(&n.to_be_bytes());
    }
    mac
}

/// How many bytes of the MAC a token carries.
const MAC_BYTES: usize = 16;

impl ContinueToken {
    /// The token's text, checksummed with the cluster's token `key` and bound to the
    /// `collection` (its key prefix) it pages through.
    pub fn encode(&self, key: &[u8], collection: &str) -> String {
        let mut wire = Wire {
            v: TOKEN_VERSION.into(),
            rv: self.revision,
            start: self.start.clone(),
            t: self.issued,
            o: self.passed,
            n: self.total,
            s: String::new(),
        };
        let tag = mac(key, collection, &wire).finalize().into_bytes();
        wire.s = URL_SAFE_NO_PAD.encode(&tag[..MAC_BYTES]);
        URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&wire).expect("strings and numbers always serialize"))
    }

    /// Decodes a token, rejecting with 400 anything this cluster did not issue for this
    /// collection.
    pub fn decode(token: &str, key: &[u8], collection: &str) -> Result<Self, Status> {
        let bad = |why: &str| {
            Status::bad_request(format!(
                "invalid continue token: continue key is not valid: {why}"
            ))
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad("not base64"))?;
        let wire: Wire = serde_json::from_slice(&bytes).map_err(|_| bad("not a continue token"))?;
        if wire.v != TOKEN_VERSION {
            return Err(bad("server does not recognize this encoded version"));
        }
        if wire.rv == 0 || wire.rv < -1 {
            return Err(bad(&format!(
                "incorrect encoded start resourceVersion (version {TOKEN_VERSION})"
            )));
        }
        if wire.start.is_empty() {
            return Err(bad(&format!(
                "encoded start key empty (version {TOKEN_VERSION})"
            )));
        }
        if wire.start.starts_with('/') || wire.start.split('/').any(|p| p == "..") {
            return Err(bad("start key leaves the collection"));
        }
        let tag = URL_SAFE_NO_PAD.decode(&wire.s).unwrap_or_default();
        // Constant time: the comparison reveals nothing about how much of a forgery matched.
        if tag.len() != MAC_BYTES
            || mac(key, collection, &wire)
                .verify_truncated_left(&tag)
                .is_err()
        {
            return Err(bad(
                "the token was not issued for this collection by this cluster, or was altered",
            ));
        }
        Ok(Self {
            revision: wire.rv,
            start: wire.start,
            issued: wire.t,
            passed: wire.o,
            total: wire.n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let key = b"cluster key";
        let t = ContinueToken {
            revision: 42,
            start: "default/b\0".into(),
            issued: 1_700_000_000,
            passed: 500,
            total: 1200,
        };
        let c = "/registry/serviceaccounts/default/";
        assert_eq!(ContinueToken::decode(&t.encode(key, c), key, c).unwrap(), t);
        let other_cluster = t.encode(b"other", c);
        assert_eq!(
            ContinueToken::decode(&other_cluster, key, c)
                .unwrap_err()
                .code,
            400
        );
        let other_collection = t.encode(key, "/registry/namespaces/");
        assert_eq!(
            ContinueToken::decode(&other_collection, key, c)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(ContinueToken::decode("%%%", key, c).unwrap_err().code, 400);
        assert_eq!(ContinueToken::decode("e30", key, c).unwrap_err().code, 400);
        let foreign = URL_SAFE_NO_PAD.encode(br#"{"v":"x/v9","rv":1,"start":"a"}"#);
        assert_eq!(
            ContinueToken::decode(&foreign, key, c).unwrap_err().code,
            400
        );
        let unsigned = URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":1,"start":"a"}"#);
        assert_eq!(
            ContinueToken::decode(&unsigned, key, c).unwrap_err().code,
            400
        );
        // Any edited field, or a cut signature, is refused.
        let wire: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(t.encode(key, c)).unwrap()).unwrap();
        for (field, value) in [
            ("rv", serde_json::json!(41)),
            ("start", serde_json::json!("default/c")),
            ("o", serde_json::json!(0)),
            ("s", serde_json::json!("AAAA")),
        ] {
            let mut edited = wire.clone();
            edited[field] = value;
            let text = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&edited).unwrap());
            assert_eq!(
                ContinueToken::decode(&text, key, c).unwrap_err().code,
                400,
                "{field}"
            );
        }
        let escape = URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#);
        assert_eq!(
            ContinueToken::decode(&escape, key, c).unwrap_err().code,
            400
        );
    }
}
