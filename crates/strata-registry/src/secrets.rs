//! The cluster's secrets kept in the store (the continue-token key, the ServiceAccount token
//! signing key), created once by whichever replica starts first, and the token sub-resource.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::Value;
use strata_object::Status;
use strata_store::StoreError;

use crate::{RegisteredType, Registry, TokenIssuer};

/// The store key of the cluster's continue-token checksum key.
pub(crate) const TOKEN_KEY: &str = "/strata/continue-token-key";

impl Registry {
    /// Reads the continue-token key, creating it on first start (every replica reads the same).
    /// Reads the 32-byte secret stored under `name`, creating it on first start. Replicas race
    /// to create it; the loser reads the winner's.
    pub(crate) async fn load_secret(&self, name: &str) -> Result<Vec<u8>, Status> {
        let unavailable = |e: StoreError| Status::service_unavailable(format!("{name}: {e}"));
        loop {
            if let (Some(kv), _) = self.store.get(name, None).await.map_err(unavailable)? {
                return Ok(kv.value.to_vec());
            }
            let key: [u8; 32] = rand::random();
            match self.store.create(name, Bytes::copy_from_slice(&key)).await {
                Ok(_) => return Ok(key.to_vec()),
                Err(StoreError::Exists(_)) => continue,
                Err(e) => return Err(unavailable(e)),
            }
        }
    }

    pub(crate) fn token_key(&self) -> &[u8] {
        self.token_key.get().map(Vec::as_slice).unwrap_or(b"")
    }

    /// The signer of ServiceAccount tokens (after [`Registry::start`]).
    pub fn token_issuer(&self) -> Option<&TokenIssuer> {
        self.issuer.get()
    }

    /// The `token` sub-resource: a TokenRequest for ServiceAccount `name`, answered with a
    /// signed token. Nothing is stored; `dryRun` changes nothing either.
    pub async fn create_token(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        request: Value,
    ) -> Result<Value, Status> {
        let issuer = self
            .issuer
            .get()
            .ok_or_else(|| Status::service_unavailable("the token signer is not loaded yet"))?;
        let sa = self.get(rt, namespace, name, "").await?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        issuer.issue(&sa, request, now)
    }
}
