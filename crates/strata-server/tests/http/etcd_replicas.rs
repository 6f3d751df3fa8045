//! What replicas over one etcd share beyond objects: RBAC decisions (a binding made through one
//! replica takes effect on the other), the namespace controller's work (both replicas run it;
//! finalizing is idempotent), etcd's request limit (413, not 500), compaction (one replica
//! compacts per interval), and TLS to etcd (`--etcd-cafile`, `--etcd-certfile`,
//! `--etcd-keyfile`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType};
use serde_json::{json, Value};
use strata_store::{Revision, Store};
use strata_store_etcd::testing::TestEtcd;
use strata_store_etcd::EtcdStore;

use crate::common::{assert_status, item_names, sa_path, within, TestServer};

const TOKENS: &str = "admin-token,admin,1,system:masters\nalice-token,alice,2\n";

fn etcd_flags(url: &str) -> Vec<&str> {
    vec!["--storage-backend", "etcd", "--etcd-servers", url]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_made_on_one_replica_takes_effect_on_the_other_within_a_second() {
    within(Duration::from_secs(90), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd");
        etcd.store("").await;
        let mut flags = etcd_flags(&etcd.url);
        flags.push("--authorization-mode=RBAC");
        let (server_a, _a_dir) = TestServer::start_with_tokens(TOKENS, &flags);
        let (server_b, _b_dir) = TestServer::start_with_tokens(TOKENS, &flags);
        let (a, b) = (server_a.http(), server_b.http());
        let r = a
            .as_token(
                "admin-token",
                "POST",
                "/api/v1/namespaces",
                Some(&json!({"metadata": {"name": "team"}})),
            )
            .await;
        assert_eq!(r.code(), 201);
        let r = b.as_token("alice-token", "GET", &sa_path("team"), None).await;
        assert_status(&r, 403, "Forbidden");

        let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/team";
        let role = json!({"metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["list"]}]});
        let r = a
            .as_token("admin-token", "POST", &format!("{rbac}/roles"), Some(&role))
            .await;
        assert_eq!(r.code(), 201);
        let binding = json!({"metadata": {"name": "alice-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]});
        let r = a
            .as_token(
                "admin-token",
                "POST",
                &format!("{rbac}/rolebindings"),
                Some(&binding),
            )
            .await;
        assert_eq!(r.code(), 201);
        // The decision changes on B within a second of A's answer.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            let r = b.as_token("alice-token", "GET", &sa_path("team"), None).await;
            if r.code() == 200 {
                break;
            }
            assert_status(&r, 403, "Forbidden");
            assert!(
                tokio::time::Instant::now() < deadline,
                "B still forbids alice a second after the binding"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_replicas_finalize_a_terminating_namespace_and_agree() {
    within(Duration::from_secs(90), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd");
        etcd.store("").await;
        let flags = etcd_flags(&etcd.url);
        let server_a = TestServer::start_with(&flags);
        let server_b = TestServer::start_with(&flags);
        let (a, b) = (server_a.http(), server_b.http());
        for round in 0..3 {
            let ns = format!("doomed-{round}");
            a.create_namespace(&ns).await;
            for i in 0..20 {
                // Half the objects through each replica.
                let via = if i % 2 == 0 { &a } else { &b };
                via.create_sa(&ns, &format!("sa-{i}"), Value::Null).await;
            }
            // Deleted through one replica; both namespace controllers see it terminate.
            let via = if round % 2 == 0 { &a } else { &b };
            let r = via.delete(&format!("/api/v1/namespaces/{ns}")).await;
            assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
            a.wait_gone(&format!("/api/v1/namespaces/{ns}"), Duration::from_secs(30))
                .await;
            b.wait_gone(&format!("/api/v1/namespaces/{ns}"), Duration::from_secs(5))
                .await;
            for h in [&a, &b] {
                let list = h.get_ok(&sa_path(&ns)).await;
                assert!(item_names(&list).is_empty(), "{list}");
            }
            // The name is free again, and a new namespace of that name lives on.
            a.create_namespace(&ns).await;
            b.create_sa(&ns, "survivor", Value::Null).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let got = a.get_ok(&format!("{}/survivor", sa_path(&ns))).await;
            assert_eq!(got["metadata"]["name"], "survivor");
            let phase = a.get_ok(&format!("/api/v1/namespaces/{ns}")).await;
            assert_eq!(phase["status"]["phase"], "Active");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_over_etcds_request_limit_is_413() {
    within(Duration::from_secs(60), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd");
        etcd.store("").await;
        let server = TestServer::start_with(&etcd_flags(&etcd.url));
        let h = server.http();
        h.create_namespace("big").await;
        // Annotations stop at 256 KiB; a long list of secret references has no such limit.
        let refs = |count: usize| -> Value {
            (0..count)
                .map(|i| json!({"name": format!("{i:05}-{}", "s".repeat(240))}))
                .collect()
        };
        // ~2.2 MiB: under the API's 3 MiB body limit, over etcd's 1.5 MiB request limit.
        let sa = json!({"metadata": {"name": "huge"}, "secrets": refs(9000)});
        let r = h.post_json(&sa_path("big"), &sa).await;
        assert_status(&r, 413, "RequestEntityTooLarge");
        let message = r.json()["message"].as_str().unwrap_or("").to_string();
        assert!(
            message.starts_with("Request entity too large: "),
            "{message}"
        );
        // ~1.6 MiB: refused by etcd's own check rather than gRPC's message limit.
        let sa = json!({"metadata": {"name": "huge"}, "secrets": refs(6500)});
        let r = h.post_json(&sa_path("big"), &sa).await;
        assert_status(&r, 413, "RequestEntityTooLarge");
        let r = h.get(&format!("{}/huge", sa_path("big"))).await;
        assert_eq!(r.code(), 404);
        // An update that grows an object over the limit too; the object stays as it was.
        h.create_sa("big", "grows", Value::Null).await;
        let r = h
            .patch_merge(
                &format!("{}/grows", sa_path("big")),
                &json!({"secrets": refs(6500)}),
            )
            .await;
        assert_status(&r, 413, "RequestEntityTooLarge");
        h.get_ok(&format!("{}/grows", sa_path("big"))).await;
    })
    .await;
}

/// kube-apiserver's election: every replica tries each interval, one compare-and-swap wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_compact_once_per_interval() {
    within(Duration::from_secs(60), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd");
        let a = etcd.store("/registry").await;
        let b = etcd.store("/registry").await;
        let direct = etcd.store("").await;
        let version = || async {
            let (kv, _) = direct.get(&a.compaction_key(), None).await.unwrap();
            kv.map(|kv| String::from_utf8(kv.value.to_vec()).unwrap())
        };
        let mut last = Revision(0);
        for round in 0..3u64 {
            for i in 0..5 {
                last = a
                    .create(&format!("/k/{round}-{i}"), "v".into())
                    .await
                    .unwrap()
                    .mod_revision;
            }
            // Both replicas compact in the same interval: A wins, B finds the key moved.
            a.compact(last).await.unwrap();
            b.compact(last).await.unwrap();
            assert_eq!(
                version().await.as_deref(),
                Some(last.get().to_string().as_str())
            );
            assert_eq!(a.compacted_revision(), last);
            assert!(b.compacted_revision() < last, "B did not compact itself");
            // etcd refuses reads before the point, through either replica.
            let before = Revision(last.get() - 1);
            for s in [&a, &b] {
                assert!(matches!(
                    s.get("/k/x", Some(before)).await,
                    Err(strata_store::StoreError::Compacted { .. })
                ));
            }
            // Next interval B tries first, and wins.
            let next = b
                .create(&format!("/k/{round}-b"), "v".into())
                .await
                .unwrap();
            b.compact(next.mod_revision).await.unwrap();
            a.compact(next.mod_revision).await.unwrap();
            assert_eq!(b.compacted_revision(), next.mod_revision);
            assert!(a.compacted_revision() < next.mod_revision);
        }
        // Hidden from the Store API: no range or feed shows the election key.
        let all = direct
            .range(strata_store::RangeRequest {
                prefix: "/registry/compact".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(all.kvs.len(), 1, "a plain store over the root sees it");
        let mine = a
            .range(strata_store::RangeRequest {
                prefix: "/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(mine
            .kvs
            .iter()
            .all(|kv| !kv.key.contains("compact_rev_key")));
        // It sorts first, yet a page of one still holds one key, and paging goes on from it.
        let page = a
            .range(strata_store::RangeRequest {
                prefix: "/".into(),
                limit: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.kvs.len(), 1);
        assert_eq!(page.kvs[0].key, mine.kvs[0].key);
        assert!(page.remaining > 0);
    })
    .await;
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An etcd that serves clients over TLS only and requires client certificates.
struct TlsEtcd {
    child: Child,
    dir: tempfile::TempDir,
    url: String,
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_tls_etcd() -> TlsEtcd {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf = |name: &str, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_crt, server_key) = leaf("localhost", ExtendedKeyUsagePurpose::ServerAuth);
    let (client_crt, client_key) = leaf("strata", ExtendedKeyUsagePurpose::ClientAuth);
    let files = [
        ("ca.crt", ca_cert.pem()),
        ("server.crt", server_crt),
        ("server.key", server_key),
        ("client.crt", client_crt),
        ("client.key", client_key),
    ];
    for (name, pem) in files {
        std::fs::write(dir.path().join(name), pem).unwrap();
    }
    let (client, peer) = (free_port(), free_port());
    let url = format!("https://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let path = |name: &str| dir.path().join(name).display().to_string();
    let child = Command::new(strata_store_etcd::testing::ETCD)
        .arg("--name=tls")
        .arg(format!("--data-dir={}", path("data")))
        .arg(format!("--listen-client-urls={url}"))
        .arg(format!("--advertise-client-urls={url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=tls={peer_url}"))
        .arg(format!("--cert-file={}", path("server.crt")))
        .arg(format!("--key-file={}", path("server.key")))
        .arg(format!("--trusted-ca-file={}", path("ca.crt")))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start /usr/bin/etcd");
    TlsEtcd { child, dir, url }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strata_reaches_etcd_over_tls_with_a_client_certificate() {
    within(Duration::from_secs(60), async {
        let etcd = start_tls_etcd();
        let path = |name: &str| etcd.dir.path().join(name).display().to_string();
        let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
        // Wait until the member answers, through the engine with the same files.
        let options = strata_store_etcd::EtcdOptions {
            prefix: "/registry".into(),
            root: "/registry".into(),
            tls: strata_store_etcd::EtcdTls {
                ca_file: Some(ca.clone().into()),
                cert_file: Some(cert.clone().into()),
                key_file: Some(key.clone().into()),
            },
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let direct = loop {
            match EtcdStore::connect_with(std::slice::from_ref(&etcd.url), &options).await {
                Ok(store) => break store,
                Err(e) => {
                    assert!(tokio::time::Instant::now() < deadline, "etcd over TLS: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let mut flags = etcd_flags(&etcd.url);
        flags.extend_from_slice(&["--etcd-cafile", &ca, "--etcd-certfile", &cert]);
        flags.extend_from_slice(&["--etcd-keyfile", &key]);
        let server = TestServer::start_with(&flags);
        let h = server.http();
        h.create_namespace("secure").await;
        h.create_sa("secure", "one", Value::Null).await;
        let (kv, _) = direct
            .get("/registry/serviceaccounts/secure/one", None)
            .await
            .unwrap();
        assert!(kv.is_some());
        // Without the client certificate etcd turns Strata away: it does not start.
        let out = Command::new(crate::common::strata_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--insecure-http"])
            .args(["--data-dir", &path("nocert")])
            .args(["--storage-backend", "etcd", "--etcd-servers", &etcd.url])
            .args(["--etcd-cafile", &ca])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cannot reach etcd"), "{stderr}");
    })
    .await;
}

/// A replica started before its etcd waits for it (a cluster booting together), then serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_before_etcd_waits_for_it() {
    within(Duration::from_secs(90), async {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let late = {
            let url = url.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2500));
                let listen = format!("--listen-client-urls={url}");
                let advertise = format!("--advertise-client-urls={url}");
                TestEtcd::start_with(&[listen.as_str(), advertise.as_str()])
                    .expect("start /usr/bin/etcd")
            })
        };
        let started = std::time::Instant::now();
        let server = tokio::task::spawn_blocking(move || TestServer::start_with(&etcd_flags(&url)))
            .await
            .unwrap();
        let _etcd = late.join().unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "it did not wait"
        );
        let h = server.http();
        h.create_namespace("late").await;
        h.create_sa("late", "one", Value::Null).await;
        h.get_ok(&format!("{}/one", sa_path("late"))).await;
    })
    .await;
}
