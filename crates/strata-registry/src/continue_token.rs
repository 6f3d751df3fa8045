//! Continue tokens of chunked lists: opaque to clients, they carry the snapshot revision and the
//! next key (relative to the collection's key prefix), in the same layout Kubernetes uses.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
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
}

#[derive(Serialize, Deserialize)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
}

impl ContinueToken {
    pub fn encode(&self) -> String {
        let wire = Wire {
            v: TOKEN_VERSION.into(),
            rv: self.revision,
            start: self.start.clone(),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).unwrap_or_default())
    }

    /// Decodes a token, rejecting anything this server did not issue with 400.
    pub fn decode(token: &str) -> Result<Self, Status> {
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
        Ok(Self {
            revision: wire.rv,
            start: wire.start,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let t = ContinueToken {
            revision: 42,
            start: "default/b\0".into(),
        };
        assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
        assert_eq!(ContinueToken::decode("%%%").unwrap_err().code, 400);
        assert_eq!(ContinueToken::decode("e30").unwrap_err().code, 400);
        let foreign = URL_SAFE_NO_PAD.encode(br#"{"v":"x/v9","rv":1,"start":"a"}"#);
        assert_eq!(ContinueToken::decode(&foreign).unwrap_err().code, 400);
        let escape = URL_SAFE_NO_PAD.encode(br#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#);
        assert_eq!(ContinueToken::decode(&escape).unwrap_err().code, 400);
    }
}
