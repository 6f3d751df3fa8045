//! Secrets encrypted at rest (`--encryption-provider-config`, Kubernetes'
//! `EncryptionConfiguration`): the stored values, read from the stopped server's RocksDB or
//! straight from etcd, hold no plaintext but `k8s:enc:aesgcm:v1:<key>:` and the ciphertext,
//! while the API answers the plain Secrets; a key rotation (new key first, every Secret
//! replaced unchanged, the old key dropped) leaves every Secret readable under the new key; a
//! server without the key reports the Secrets it cannot decrypt by key, and keeps serving.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};
use strata_store::{RangeRequest, Store};

use crate::common::TestServer;

const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
/// Secret data no stored value may show, in the clear or in the base64 of the JSON form.
const PASSWORD: &str = "correct-horse-battery-staple";

/// Writes an `EncryptionConfiguration` for Secrets: AES-GCM with these keys (the first
/// writes), then `identity` when asked.
fn config_file(dir: &Path, file: &str, keys: &[(&str, u8)], identity: bool) -> PathBuf {
    let keys: Vec<String> = keys
        .iter()
        .map(|(name, fill)| {
            format!(
                "          - name: {name}\n            secret: {}\n",
                BASE64.encode([*fill; 32])
            )
        })
        .collect();
    let identity = if identity {
        "      - identity: {}\n"
    } else {
        ""
    };
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  \
         - resources:\n      - secrets\n    providers:\n      - aesgcm:\n          keys:\n{}{identity}",
        keys.concat()
    );
    let path = dir.join(file);
    std::fs::write(&path, text).expect("write the encryption config");
    path
}

fn start(data: &Path, config: Option<&Path>) -> TestServer {
    match config {
        Some(path) => TestServer::start_in(
            data,
            &[
                "--encryption-provider-config",
                path.to_str().expect("utf-8 path"),
            ],
        ),
        None => TestServer::start_in(data, &[]),
    }
}

/// Every stored key and value under `/registry/`, read beside the server: from its RocksDB
/// (the server must be stopped) or from its etcd.
async fn raw_store(server: &TestServer, data: &Path) -> Vec<(String, Vec<u8>)> {
    let req = RangeRequest {
        prefix: "/registry/".into(),
        ..Default::default()
    };
    let kvs = match server.etcd() {
        Some(etcd) => {
            // No prefix, no root: the Store keys are etcd's own keys.
            let store = strata_store_etcd::EtcdStore::connect(std::slice::from_ref(&etcd.url), "")
                .await
                .expect("connect to etcd");
            store.range(req).await.expect("read etcd").kvs
        }
        None => {
            let store = strata_store_rocksdb::RocksStore::open_read_only(&data.join("store"))
                .expect("open the stopped server's store");
            store.range(req).await.expect("read RocksDB").kvs
        }
    };
    kvs.into_iter()
        .map(|kv| (kv.key, kv.value.to_vec()))
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The stored values of the Secrets, by key, after checking that none shows its data, name or
/// JSON, and that each starts with `prefix`.
fn assert_encrypted(raw: &[(String, Vec<u8>)], names: &[String], prefix: &str) {
    let secret_b64 = BASE64.encode(PASSWORD);
    for name in names {
        let key = format!("/registry/secrets/default/{name}");
        let (_, value) = raw
            .iter()
            .find(|(k, _)| *k == key)
            .unwrap_or_else(|| panic!("{key} is not stored"));
        assert!(
            value.starts_with(prefix.as_bytes()),
            "{key}: {:?}",
            String::from_utf8_lossy(&value[..value.len().min(40)])
        );
        for plain in [
            PASSWORD,
            secret_b64.as_str(),
            name.as_str(),
            "\"kind\"",
            "Opaque",
        ] {
            assert!(
                !contains(value, plain),
                "{key} shows {plain:?} in the clear"
            );
        }
    }
}

fn secret(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": {"app": "vault"}},
        "stringData": {"password": format!("{PASSWORD}-{name}")}
    })
}

/// The Secret's password as the API answers it.
async fn password(server: &TestServer, name: &str) -> String {
    let r = server.get(&format!("{SECRETS}/{name}")).await;
    assert_eq!(
        r.code(),
        200,
        "{name}: {}",
        String::from_utf8_lossy(&r.body)
    );
    let data = r.json()["data"]["password"]
        .as_str()
        .expect("data.password")
        .to_string();
    String::from_utf8(BASE64.decode(data).expect("base64")).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_encrypted_at_rest_and_keys_rotate() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let names: Vec<String> = (1..=3).map(|i| format!("db-{i}")).collect();
    let all: Vec<String> = std::iter::once("before".to_string())
        .chain(names.iter().cloned())
        .collect();

    // A Secret stored before encryption was configured stays plain until rewritten.
    let mut server = start(&data, None);
    let r = server.post_json(SECRETS, &secret("before")).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(server.terminate());

    // AES-GCM with key k1 first, identity to read the plain one.
    let first = config_file(tmp.path(), "first.yaml", &[("k1", 1)], true);
    let mut server = start(&data, Some(&first));
    for name in &names {
        let r = server.post_json(SECRETS, &secret(name)).await;
        assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            r.json()["data"]["password"],
            BASE64.encode(format!("{PASSWORD}-{name}"))
        );
    }
    let r = server
        .post_json(
            CONFIGMAPS,
            &json!({"metadata": {"name": "settings"}, "data": {"mode": "plain-config-value"}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    for name in &all {
        assert_eq!(password(&server, name).await, format!("{PASSWORD}-{name}"));
    }
    let list = server
        .get(&format!("{SECRETS}?labelSelector=app%3Dvault"))
        .await;
    assert_eq!(list.json()["items"].as_array().unwrap().len(), all.len());
    assert!(server.terminate());

    let raw = raw_store(&server, &data).await;
    assert_encrypted(&raw, &names, "k8s:enc:aesgcm:v1:k1:");
    // The plain one is still plain, and other resources are not encrypted: the reading
    // above does see plaintext where there is some.
    let plain = |key: &str| &raw.iter().find(|(k, _)| k == key).expect(key).1;
    assert!(contains(
        plain("/registry/secrets/default/before"),
        "\"kind\""
    ));
    assert!(contains(
        plain("/registry/configmaps/default/settings"),
        "plain-config-value"
    ));

    // Rotation: the new key first, the old one still listed; replace every Secret unchanged
    // (what `kubectl get secrets -A -o json | kubectl replace -f -` sends).
    let rotating = config_file(tmp.path(), "rotating.yaml", &[("k2", 2), ("k1", 1)], true);
    let mut server = start(&data, Some(&rotating));
    let list = server.get("/api/v1/secrets").await.json();
    let items = list["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), all.len(), "{list}");
    for item in items {
        let name = item["metadata"]["name"].as_str().unwrap().to_string();
        let before = item["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let r = server.put_json(&format!("{SECRETS}/{name}"), &item).await;
        assert_eq!(
            r.code(),
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        // Nothing changed, yet the value was rewritten under the new key.
        assert_ne!(
            r.json()["metadata"]["resourceVersion"].as_str().unwrap(),
            before,
            "{name} was not rewritten"
        );
    }
    // Replaced again, a current value is a no-op as usual.
    let current = server.get(&format!("{SECRETS}/db-1")).await.json();
    let r = server.put_json(&format!("{SECRETS}/db-1"), &current).await;
    assert_eq!(
        r.json()["metadata"]["resourceVersion"],
        current["metadata"]["resourceVersion"]
    );
    assert!(server.terminate());
    let raw = raw_store(&server, &data).await;
    assert_encrypted(&raw, &all, "k8s:enc:aesgcm:v1:k2:");

    // Only the new key, no identity: every Secret reads.
    let rotated = config_file(tmp.path(), "rotated.yaml", &[("k2", 2)], false);
    let mut server = start(&data, Some(&rotated));
    for name in &all {
        assert_eq!(password(&server, name).await, format!("{PASSWORD}-{name}"));
    }
    let list = server.get(SECRETS).await;
    assert_eq!(list.code(), 200);
    assert_eq!(list.json()["items"].as_array().unwrap().len(), all.len());
    assert!(server.terminate());

    // A server with only the retired key cannot decrypt them: it says which object and why,
    // as a corrupt object (500), and goes on serving everything else.
    let retired = config_file(tmp.path(), "retired.yaml", &[("k1", 1)], false);
    let server = TestServer::start_in(
        &data,
        &[
            "--encryption-provider-config",
            retired.to_str().unwrap(),
            "--feature-gates",
            "AllowUnsafeMalformedObjectDeletion=true",
        ],
    );
    let r = server.get(&format!("{SECRETS}/db-1")).await;
    assert_eq!(r.code(), 500, "{}", String::from_utf8_lossy(&r.body));
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("corrupt object")
            && message.contains("/registry/secrets/default/db-1")
            && message.contains("no matching key was found for the provided AES transformer"),
        "{message}"
    );
    let r = server.get(SECRETS).await;
    assert_eq!(r.code(), 500, "{}", String::from_utf8_lossy(&r.body));
    let r = server.get(&format!("{CONFIGMAPS}/settings")).await;
    assert_eq!(r.code(), 200);
    // An undecryptable Secret can be force-deleted (KEP-3926's way out), the others stay.
    let force = json!({"ignoreStoreReadErrorWithClusterBreakingPotential": true});
    let r = server
        .http()
        .delete_json(&format!("{SECRETS}/db-3"), &force)
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(server.get(&format!("{SECRETS}/db-3")).await.code(), 404);
    assert_eq!(server.get(&format!("{SECRETS}/db-2")).await.code(), 500);
    drop(server);

    // Without the flag, the encrypted Secrets are refused the same way, saying why.
    let server = start(&data, None);
    let r = server.get(&format!("{SECRETS}/db-1")).await;
    assert_eq!(r.code(), 500, "{}", String::from_utf8_lossy(&r.body));
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("/registry/secrets/default/db-1")
            && message.contains("identity transformer tried to read encrypted data"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_encryption_config_stops_the_start_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- \
         resources: [secrets]\n  providers:\n  - kms:\n      apiVersion: v2\n      name: vault\n      \
         endpoint: unix:///tmp/kms.sock\n",
    )
    .unwrap();
    let short = tmp.path().join("short.yaml");
    std::fs::write(
        &short,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- \
         resources: [secrets]\n  providers:\n  - aesgcm:\n      keys: [{name: k, secret: c2hvcnQ=}]\n",
    )
    .unwrap();
    for (file, reason) in [
        (bad, "the kms provider is not supported"),
        (
            short,
            "secret is not of the expected length, got 5, expected one of [16 24 32]",
        ),
        (tmp.path().join("missing.yaml"), "cannot read"),
    ] {
        let mut cmd = std::process::Command::new(crate::common::strata_bin());
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--storage-backend",
            "memory",
        ])
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("--encryption-provider-config")
        .arg(&file)
        .env("RUST_LOG", "warn");
        let run = crate::common::run_with_timeout(
            &mut cmd,
            tmp.path(),
            std::time::Duration::from_secs(30),
        );
        assert_eq!(run.status.code(), Some(1), "{run:?}");
        assert!(run.stderr.contains(reason), "{reason:?}: {run:?}");
        assert!(!run.stderr.contains("panicked"), "{run:?}");
    }
}
