//! TLS by default, with the `kube` crate as the client: the generated CA verifies, the admin
//! kubeconfig works as written, a ServiceAccount token authenticates, the CA and admin token
//! survive a restart, and an operator's own certificate can replace the generated one.

use std::path::Path;
use std::time::Duration;

use crate::common::TestServer;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn admin_client(data_dir: &Path) -> (Client, Config) {
    let kubeconfig = Kubeconfig::read_from(data_dir.join("admin.kubeconfig")).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from the admin kubeconfig");
    (Client::try_from(config.clone()).expect("client"), config)
}

fn sa(name: &str) -> ServiceAccount {
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(name.into());
    sa
}

fn is_unauthorized<T: std::fmt::Debug>(r: kube::Result<T>) -> bool {
    matches!(r, Err(kube::Error::Api(s)) if s.code == 401)
}

#[tokio::test]
async fn the_kube_crate_verifies_the_generated_ca_and_uses_the_admin_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_tls_in(dir.path(), &[]);
    let (client, config) = admin_client(dir.path()).await;
    assert_eq!(config.cluster_url.scheme_str(), Some("https"));
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &sa("robot"))
        .await
        .unwrap();
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|i| i.name_any())
        .collect();
    // With the namespace's default ServiceAccount, there from the server's start.
    assert_eq!(names, ["default", "robot"]);

    // A ServiceAccount token authenticates, until the account is gone.
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}
    }))
    .unwrap();
    let answer = api
        .create_token_request("robot", &PostParams::default(), &request)
        .await
        .unwrap();
    let token = answer.status.expect("status").token;
    // RBAC is on: the ServiceAccount may read what `view` allows in its namespace.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "robot-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}],
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let mut robot_config = config.clone();
    robot_config.auth_info = Default::default();
    robot_config.auth_info.token = Some(token.into());
    let robot: Api<ServiceAccount> =
        Api::namespaced(Client::try_from(robot_config.clone()).unwrap(), "default");
    assert_eq!(robot.get("robot").await.unwrap().name_any(), "robot");
    api.delete("robot", &DeleteParams::default()).await.unwrap();
    assert!(is_unauthorized(robot.get("robot").await));

    // No credentials at all: 401 (anonymous access is off by default).
    let mut nobody = config.clone();
    nobody.auth_info = Default::default();
    let anonymous: Api<ServiceAccount> =
        Api::namespaced(Client::try_from(nobody).unwrap(), "default");
    assert!(is_unauthorized(
        anonymous.list(&ListParams::default()).await
    ));

    // A client that does not trust the CA fails the handshake.
    let mut stranger = config.clone();
    stranger.root_cert = None;
    let untrusting: Api<ServiceAccount> =
        Api::namespaced(Client::try_from(stranger).unwrap(), "default");
    assert!(matches!(
        untrusting.list(&ListParams::default()).await,
        Err(e) if !matches!(e, kube::Error::Api(_))
    ));

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    tcp.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut buf)).await;
    assert!(
        !buf.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
}

#[tokio::test]
async fn the_ca_and_admin_token_survive_a_restart_and_own_certificates_replace_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = TestServer::start_tls_in(dir.path(), &[]);
    let ca = std::fs::read(dir.path().join("pki/ca.crt")).unwrap();
    let token = std::fs::read(dir.path().join("pki/admin.token")).unwrap();
    s.kill();
    let _s = TestServer::start_tls_in(dir.path(), &[]);
    assert_eq!(std::fs::read(dir.path().join("pki/ca.crt")).unwrap(), ca);
    assert_eq!(
        std::fs::read(dir.path().join("pki/admin.token")).unwrap(),
        token
    );
    let (client, _) = admin_client(dir.path()).await;
    let api: Api<ServiceAccount> = Api::namespaced(client, "default");
    api.list(&ListParams::default()).await.unwrap();

    // A second server on its own data directory, serving the first one's certificate: the
    // first CA verifies it.
    let other = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let _t = TestServer::start_tls_in(
        other.path(),
        &[
            "--tls-cert-file",
            pki.join("apiserver.crt").to_str().unwrap(),
            "--tls-private-key-file",
            pki.join("apiserver.key").to_str().unwrap(),
        ],
    );
    let (_, first) = admin_client(dir.path()).await;
    let (_, second) = admin_client(other.path()).await;
    assert!(
        !std::fs::read_to_string(other.path().join("admin.kubeconfig"))
            .unwrap()
            .contains("certificate-authority-data")
    );
    let mut config = second.clone();
    config.root_cert = first.root_cert.clone();
    let api: Api<ServiceAccount> = Api::namespaced(Client::try_from(config).unwrap(), "default");
    api.list(&ListParams::default()).await.unwrap();
}
