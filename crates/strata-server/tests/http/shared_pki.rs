//! Replicas over one etcd share the cluster's CA and admin token (they live in the store): the
//! admin kubeconfig written by replica A verifies replica B's serving certificate and
//! authenticates on B; a data directory from before keeps its own CA and token, or, joining a
//! cluster that has one, takes the cluster's and keeps its old files beside.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use strata_store::Store;
use strata_store_etcd::testing::TestEtcd;

use crate::common::within;
use crate::one_process::OneProcess;

/// A client from `data_dir/admin.kubeconfig`, pointed at `addr` instead of the server that
/// wrote it.
async fn admin_client_for(data_dir: &Path, addr: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(data_dir.join("admin.kubeconfig")).expect("kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from the admin kubeconfig");
    config.cluster_url = format!("https://{addr}").parse().expect("url");
    Client::try_from(config).expect("client")
}

fn sa(name: &str) -> ServiceAccount {
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(name.into());
    sa
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_a_admin_kubeconfig_works_against_replica_b() {
    within(Duration::from_secs(90), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd (Debian's etcd-server)");
        let direct = etcd.store("").await;
        let flags = [
            "--storage-backend",
            "etcd",
            "--etcd-servers",
            etcd.url.as_str(),
        ];
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // Started together: both race to create the CA and the token; one wins.
        let (a, b) = std::thread::scope(|scope| {
            let a = scope.spawn(|| OneProcess::start(dir_a.path(), &flags, true));
            let b = scope.spawn(|| OneProcess::start(dir_b.path(), &flags, true));
            (a.join().unwrap(), b.join().unwrap())
        });

        // One CA and one token, in the store and in both data directories.
        let read = |dir: &Path, file: &str| std::fs::read(dir.join("pki").join(file)).unwrap();
        assert_eq!(read(dir_a.path(), "ca.crt"), read(dir_b.path(), "ca.crt"));
        assert_eq!(
            read(dir_a.path(), "admin.token"),
            read(dir_b.path(), "admin.token")
        );
        // In etcd under the server's prefix (where exactly is the etcd engine's layout).
        let all = direct
            .range(strata_store::RangeRequest {
                prefix: "/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let stored = all
            .kvs
            .iter()
            .find(|kv| kv.key.ends_with("/strata/admin-token"))
            .expect("the admin token is in etcd");
        assert_eq!(stored.value.to_vec(), read(dir_a.path(), "admin.token"));
        // Each replica signs its own serving certificate.
        assert_ne!(
            read(dir_a.path(), "apiserver.crt"),
            read(dir_b.path(), "apiserver.crt")
        );

        // A's kubeconfig (its CA and its token) against B over TLS, and against A.
        let on_b: Api<ServiceAccount> =
            Api::namespaced(admin_client_for(dir_a.path(), &b.addr).await, "default");
        on_b.create(&PostParams::default(), &sa("made-on-b"))
            .await
            .unwrap();
        let on_a: Api<ServiceAccount> =
            Api::namespaced(admin_client_for(dir_a.path(), &a.addr).await, "default");
        let names: Vec<String> = on_a
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|i| i.name_any())
            // Not the namespace's default ServiceAccount, which the server keeps there.
            .filter(|n| n != "default")
            .collect();
        assert_eq!(names, ["made-on-b"]);
        // And B's kubeconfig against A.
        let b_on_a: Api<ServiceAccount> =
            Api::namespaced(admin_client_for(dir_b.path(), &a.addr).await, "default");
        assert_eq!(
            b_on_a.get("made-on-b").await.unwrap().name_any(),
            "made-on-b"
        );

        // A data directory that had a CA of its own joins: it serves under the cluster's CA,
        // and keeps its old files beside (`.previous`).
        let dir_c = tempfile::tempdir().unwrap();
        drop(OneProcess::start(
            dir_c.path(),
            &["--storage-backend", "memory"],
            true,
        ));
        let own_ca = read(dir_c.path(), "ca.crt");
        assert_ne!(own_ca, read(dir_a.path(), "ca.crt"));
        let c = OneProcess::start(dir_c.path(), &flags, true);
        assert_eq!(read(dir_c.path(), "ca.crt"), read(dir_a.path(), "ca.crt"));
        assert_eq!(read(dir_c.path(), "ca.crt.previous"), own_ca);
        let a_on_c: Api<ServiceAccount> =
            Api::namespaced(admin_client_for(dir_a.path(), &c.addr).await, "default");
        assert_eq!(
            a_on_c.get("made-on-b").await.unwrap().name_any(),
            "made-on-b"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_with_its_own_ca_and_token_keeps_them() {
    // Files as an older server left them: the store has no CA or token yet.
    let dir = tempfile::tempdir().unwrap();
    let first = OneProcess::start(dir.path(), &["--storage-backend", "memory"], true);
    drop(first);
    let pki = dir.path().join("pki");
    let (ca, token) = (
        std::fs::read(pki.join("ca.crt")).unwrap(),
        std::fs::read(pki.join("admin.token")).unwrap(),
    );
    // A memory store starts empty every time: the files are what it takes in.
    let s = OneProcess::start(dir.path(), &["--storage-backend", "memory"], true);
    assert_eq!(std::fs::read(pki.join("ca.crt")).unwrap(), ca);
    assert_eq!(std::fs::read(pki.join("admin.token")).unwrap(), token);
    let api: Api<ServiceAccount> =
        Api::namespaced(admin_client_for(dir.path(), &s.addr).await, "default");
    api.list(&ListParams::default()).await.unwrap();
}
