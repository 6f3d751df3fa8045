//! What every namespace holds without anyone creating it, as on a Kubernetes control plane: the
//! ServiceAccount `default` (the ServiceAccount controller) and the ConfigMap
//! `kube-root-ca.crt` with the CA bundle that verifies the server (the root CA publisher).
//! Both appear in the namespaces there are at start and in new ones, come back when deleted
//! (the ConfigMap also when its content is changed), never appear in a namespace being
//! terminated, can be turned off with `--controllers`, and two replicas over one etcd write
//! each object once.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use serde_json::{json, Value};
use strata_store_etcd::testing::TestEtcd;

use crate::common::{rv_of, sa_path, within, Http, TestServer, WatchStream};

/// The namespaces every server has from its first start.
const BOOTSTRAP: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// How long a test waits for a controller to act before it fails (generous: the machine may be
/// busy; the controllers act within milliseconds).
const PATIENCE: Duration = Duration::from_secs(15);

/// GETs `path` until `done` holds for the reply's code and body; returns the body.
async fn eventually(h: &Http, path: &str, what: &str, done: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let r = h.get(path).await;
        let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        if done(r.code(), &body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: GET {path} still answers {}: {body}",
            r.code()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for the `default` ServiceAccount of `ns`; returns it.
async fn default_sa(h: &Http, ns: &str) -> Value {
    eventually(
        h,
        &format!("{}/default", sa_path(ns)),
        &format!("the default ServiceAccount of {ns}"),
        |code, _| code == 200,
    )
    .await
}

/// The path of the `kube-root-ca.crt` ConfigMap of `ns`.
fn root_ca_path(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/configmaps/kube-root-ca.crt")
}

/// A PEM file with one self-signed certificate, for `--root-ca-file`; returns its text.
fn write_ca(path: &Path) -> String {
    let cert = rcgen::generate_simple_self_signed(vec!["strata-test-ca".to_string()])
        .expect("a self-signed certificate");
    let pem = cert.cert.pem();
    std::fs::write(path, &pem).expect("write the CA file");
    pem
}

/// A certificate bundle without its line breaks, to compare bundles written differently.
fn squeezed(pem: &str) -> String {
    pem.chars().filter(|c| !c.is_whitespace()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_active_namespace_has_a_default_service_account() {
    within(Duration::from_secs(90), async {
        let s = TestServer::start();
        let h = s.http();
        for ns in BOOTSTRAP {
            let sa = default_sa(&h, ns).await;
            assert_eq!(sa["metadata"]["namespace"], ns);
        }

        // A new namespace gets one; deleted, it comes back as a new object.
        h.create_namespace("team").await;
        let first = default_sa(&h, "team").await;
        let r = h.delete(&format!("{}/default", sa_path("team"))).await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        let uid = first["metadata"]["uid"].clone();
        let again = eventually(
            &h,
            &format!("{}/default", sa_path("team")),
            "the default ServiceAccount recreated",
            |code, body| code == 200 && body["metadata"]["uid"] != uid,
        )
        .await;
        assert_eq!(again["metadata"]["name"], "default");

        // A terminating namespace (held by a finalizer on a ConfigMap) loses its default
        // ServiceAccount to namespace termination, and does not get it back.
        let held = h
            .post_json(
                "/api/v1/namespaces/team/configmaps",
                &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
            )
            .await;
        assert_eq!(held.code(), 201, "{}", String::from_utf8_lossy(&held.body));
        let list = h.get_ok(&sa_path("team")).await;
        let mut watch = WatchStream::open(
            &s.addr,
            &format!(
                "{}?watch=1&resourceVersion={}",
                sa_path("team"),
                rv_of(&list)
            ),
            Default::default(),
        )
        .await;
        assert_eq!(watch.status, 200);
        let r = h.delete("/api/v1/namespaces/team").await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        let gone = watch.next_change().await;
        assert_eq!(gone["type"], "DELETED", "{gone}");
        assert_eq!(gone["object"]["metadata"]["name"], "default");
        watch.expect_quiet(Duration::from_secs(2)).await;
        let ns = h.get_ok("/api/v1/namespaces/team").await;
        assert_eq!(ns["status"]["phase"], "Terminating", "{ns}");
        // Released, the namespace goes.
        let r = h
            .patch_merge(
                "/api/v1/namespaces/team/configmaps/held",
                &json!({"metadata": {"finalizers": null}}),
            )
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        h.wait_gone("/api/v1/namespaces/team", PATIENCE).await;
    })
    .await;
}

/// A client from `data_dir/admin.kubeconfig`.
async fn admin_client(data_dir: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(data_dir.join("admin.kubeconfig")).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from the admin kubeconfig");
    Client::try_from(config).expect("client")
}

/// A client like the admin's but trusting only `ca_pem`.
async fn client_trusting(data_dir: &Path, ca_pem: &str) -> Client {
    let mut kubeconfig =
        Kubeconfig::read_from(data_dir.join("admin.kubeconfig")).expect("kubeconfig");
    let cluster = kubeconfig.clusters[0]
        .cluster
        .as_mut()
        .expect("the kubeconfig's cluster");
    cluster.certificate_authority_data =
        Some(base64::engine::general_purpose::STANDARD.encode(ca_pem));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// Gets `kube-root-ca.crt` until `done` holds for it.
async fn root_ca_until(
    api: &Api<ConfigMap>,
    what: &str,
    done: impl Fn(&ConfigMap) -> bool,
) -> ConfigMap {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = api.get_opt("kube-root-ca.crt").await.expect("get");
        if let Some(cm) = &got {
            if done(cm) {
                return cm.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: kube-root-ca.crt is {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ConfigMap's `ca.crt`.
fn ca_of(cm: &ConfigMap) -> &str {
    cm.data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .map_or("", String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_namespace_publishes_the_ca_that_signs_the_serving_certificate() {
    within(Duration::from_secs(90), async {
        let dir = tempfile::tempdir().unwrap();
        let _s = TestServer::start_tls_in(dir.path(), &[]);
        let ca = std::fs::read_to_string(dir.path().join("pki/ca.crt")).unwrap();
        let client = admin_client(dir.path()).await;
        let published = |cm: &ConfigMap| ca_of(cm) == ca;
        for ns in BOOTSTRAP {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let cm = root_ca_until(&api, ns, published).await;
            assert_eq!(cm.data.as_ref().unwrap().len(), 1, "{cm:?}");
            let description = &cm.annotations()["kubernetes.io/description"];
            assert!(description.contains("CA bundle"), "{description}");
            let managers: Vec<_> = cm
                .managed_fields()
                .iter()
                .filter_map(|m| m.manager.as_deref())
                .collect();
            assert_eq!(managers, ["kube-controller-manager"]);
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some("apps".into());
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "apps");
        let cm = root_ca_until(&api, "a new namespace", published).await;

        // The bundle verifies the server: a client that trusts only it gets through.
        let trusting = client_trusting(dir.path(), ca_of(&cm)).await;
        Api::<ConfigMap>::namespaced(trusting, "apps")
            .get("kube-root-ca.crt")
            .await
            .expect("verified with the published CA");

        // Changed data (another bundle, another key) is put back; the operator's own
        // annotations stay. A removed description comes back.
        let patch = json!({
            "metadata": {"annotations": {"kubernetes.io/description": null, "team": "x"}},
            "data": {"ca.crt": "not a CA", "extra": "1"},
        });
        api.patch(
            "kube-root-ca.crt",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
        let fixed = root_ca_until(&api, "repaired", |cm| {
            published(cm) && cm.data.as_ref().unwrap().len() == 1
        })
        .await;
        assert_eq!(fixed.annotations()["team"], "x");
        assert!(fixed
            .annotations()
            .contains_key("kubernetes.io/description"));

        // Deleted: published again, as a new object.
        let uid = fixed.uid();
        api.delete("kube-root-ca.crt", &DeleteParams::default())
            .await
            .unwrap();
        root_ca_until(&api, "recreated", |cm| published(cm) && cm.uid() != uid).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_certificate_publishes_its_chain_or_the_root_ca_file() {
    within(Duration::from_secs(120), async {
        // The first server's CA and serving certificate stand for an operator's.
        let first = tempfile::tempdir().unwrap();
        let s = TestServer::start_tls_in(first.path(), &[]);
        let pki = first.path().join("pki");
        let ca = std::fs::read_to_string(pki.join("ca.crt")).unwrap();
        let leaf = std::fs::read_to_string(pki.join("apiserver.crt")).unwrap();
        drop(s);
        let (cert, key) = (pki.join("apiserver.crt"), pki.join("apiserver.key"));
        let own = [
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-private-key-file",
            key.to_str().unwrap(),
        ];

        // Without --root-ca-file: the certificates of --tls-cert-file.
        let dir = tempfile::tempdir().unwrap();
        let s = TestServer::start_tls_in(dir.path(), &own);
        let api: Api<ConfigMap> =
            Api::namespaced(client_trusting(dir.path(), &ca).await, "default");
        root_ca_until(&api, "the serving chain", |cm| {
            squeezed(ca_of(cm)) == squeezed(&leaf)
        })
        .await;
        drop(s);

        // With --root-ca-file: that file's certificates.
        let dir = tempfile::tempdir().unwrap();
        let root = pki.join("ca.crt");
        let mut flags = own.to_vec();
        flags.extend(["--root-ca-file", root.to_str().unwrap()]);
        let _s = TestServer::start_tls_in(dir.path(), &flags);
        let api: Api<ConfigMap> =
            Api::namespaced(client_trusting(dir.path(), &ca).await, "kube-system");
        root_ca_until(&api, "the root CA file", |cm| {
            squeezed(ca_of(cm)) == squeezed(&ca)
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_can_be_turned_off_and_existing_namespaces_are_caught_up_at_start() {
    within(Duration::from_secs(90), async {
        let dir = tempfile::tempdir().unwrap();
        let files = tempfile::tempdir().unwrap();
        let ca_file = files.path().join("ca.pem");
        let bundle = write_ca(&ca_file);
        let ca_flag = ca_file.to_str().unwrap();
        // Plain HTTP publishes nothing unless given --root-ca-file.
        let mut s = TestServer::start_in(
            dir.path(),
            &["--controllers=*,-serviceaccount", "--root-ca-file", ca_flag],
        );
        let h = s.http();
        h.create_namespace("before").await;
        let cm = eventually(&h, &root_ca_path("before"), "the root CA", |code, _| {
            code == 200
        })
        .await;
        assert_eq!(
            squeezed(cm["data"]["ca.crt"].as_str().unwrap()),
            squeezed(&bundle)
        );
        // The ServiceAccount controller is off: no default ServiceAccount anywhere.
        let all = h.get_ok("/api/v1/serviceaccounts").await;
        assert_eq!(all["items"], json!([]), "{all}");
        s.kill();

        // Started again with every controller: the namespaces there are get theirs.
        let s = TestServer::start_in(dir.path(), &[]);
        let h = s.http();
        for ns in ["before", "default", "kube-system"] {
            default_sa(&h, ns).await;
        }
        // Without --root-ca-file on plain HTTP the ConfigMaps stay as they are.
        h.create_namespace("after").await;
        default_sa(&h, "after").await;
        let r = h.get(&root_ca_path("after")).await;
        assert_eq!(r.code(), 404);
    })
    .await;
}

/// The events of a watch until every namespace in `namespaces` has had an ADDED, then quiet.
async fn added_once_each(watch: &mut WatchStream, namespaces: &[String], what: &str) {
    let mut added: Vec<String> = Vec::new();
    while namespaces.iter().any(|n| !added.contains(n)) {
        let e = watch.next_change().await;
        let ns = e["object"]["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert_eq!(e["type"], "ADDED", "{what}: {e}");
        assert!(!added.contains(&ns), "{what}: a second ADDED in {ns}: {e}");
        added.push(ns);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_one_etcd_write_each_default_once() {
    within(Duration::from_secs(120), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd (Debian's etcd-server)");
        let files = tempfile::tempdir().unwrap();
        let ca_file = files.path().join("ca.pem");
        write_ca(&ca_file);
        let flags = [
            "--storage-backend",
            "etcd",
            "--etcd-servers",
            etcd.url.as_str(),
            "--root-ca-file",
            ca_file.to_str().unwrap(),
        ];
        let server_a = TestServer::start_with(&flags);
        let server_b = TestServer::start_with(&flags);
        let (a, b) = (server_a.http(), server_b.http());
        // Both replicas made their first pass before serving.
        for ns in BOOTSTRAP {
            b.get_ok(&format!("{}/default", sa_path(ns))).await;
            b.get_ok(&root_ca_path(ns)).await;
        }

        let from = rv_of(&a.get_ok("/api/v1/namespaces").await);
        let open = |path: &str| {
            let path = format!("{path}?watch=1&resourceVersion={from}");
            let addr = server_b.addr.clone();
            async move { WatchStream::open(&addr, &path, Default::default()).await }
        };
        let mut accounts = open("/api/v1/serviceaccounts").await;
        let mut config_maps = open("/api/v1/configmaps").await;
        let names: Vec<String> = (0..8).map(|i| format!("shared-{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let through = if i % 2 == 0 { &a } else { &b };
            through.create_namespace(name).await;
        }
        added_once_each(&mut accounts, &names, "serviceaccounts").await;
        added_once_each(&mut config_maps, &names, "configmaps").await;
        // Nobody rewrites what the other replica wrote.
        accounts.expect_quiet(Duration::from_secs(2)).await;
        config_maps.expect_quiet(Duration::from_millis(200)).await;

        // A deleted default comes back once.
        let r = a.delete(&format!("{}/default", sa_path("shared-3"))).await;
        assert_eq!(r.code(), 200);
        let e = accounts.next_change().await;
        assert_eq!(e["type"], "DELETED", "{e}");
        let e = accounts.next_change().await;
        assert_eq!(e["type"], "ADDED", "{e}");
        assert_eq!(e["object"]["metadata"]["namespace"], "shared-3");
        accounts.expect_quiet(Duration::from_secs(2)).await;
    })
    .await;
}
