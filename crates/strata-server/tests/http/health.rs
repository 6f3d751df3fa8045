//! The health endpoints in Kubernetes' format: `/livez`, `/readyz` and `/healthz` answer `ok`,
//! list their checks with `?verbose`, skip one with `?exclude=`, and serve each check on its own
//! path. (With storage unreachable `/readyz` fails and `/livez` does not: see `etcd_faults`.)
//! Told to stop, a server fails `/readyz` for `--shutdown-delay-duration` while it goes on
//! serving, then stops.

use crate::common::{storage, Storage, TestServer};

#[tokio::test]
async fn health_endpoints_list_their_checks() {
    let s = TestServer::start();
    // The storage check is named after the backend, as kube-apiserver names its `etcd` check.
    let check = match storage() {
        Storage::RocksDb => "storage",
        Storage::Etcd => "etcd",
    };
    for path in ["/livez", "/readyz", "/healthz"] {
        let r = s.get(path).await;
        assert_eq!(r.code(), 200, "{path}");
        assert_eq!(&r.body[..], b"ok", "{path}");
        assert_eq!(r.header("content-type"), "text/plain; charset=utf-8");
        assert_eq!(r.header("x-content-type-options"), "nosniff");
    }
    let r = s.get("/livez?verbose").await;
    assert_eq!(r.code(), 200);
    assert_eq!(&r.body[..], b"[+]ping ok\nlivez check passed\n");
    let r = s.get("/readyz?verbose").await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        format!("[+]ping ok\n[+]{check} ok\n[+]shutdown ok\nreadyz check passed\n")
    );
    let r = s
        .get(&format!("/readyz?verbose&exclude={check}&exclude=nothing"))
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        format!(
            "[+]ping ok\n[+]{check} excluded: ok\n[+]shutdown ok\n\
             warn: some health checks cannot be excluded: no matches for \"nothing\"\n\
             readyz check passed\n"
        )
    );
    for path in [
        "/readyz/ping",
        &format!("/readyz/{check}"),
        "/livez/ping",
        "/healthz/ping",
    ] {
        let r = s.get(path).await;
        assert_eq!(r.code(), 200, "{path}");
        assert_eq!(&r.body[..], b"ok", "{path}");
    }
    // `/livez` has no storage check; an unknown check is not found.
    assert_eq!(s.get(&format!("/livez/{check}")).await.code(), 404);
    assert_eq!(s.get("/readyz/nothing").await.code(), 404);
    // Health is read-only.
    assert_eq!(s.send("POST", "/readyz", None, &[]).await.code(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_while_a_stopping_server_still_serves() {
    let s = TestServer::start_with(&["--shutdown-delay-duration=3s"]);
    assert_eq!(s.get("/readyz").await.code(), 200);
    let started = std::time::Instant::now();
    s.signal_terminate();
    let mut failing = None;
    while started.elapsed() < std::time::Duration::from_secs(2) {
        let r = s.get("/readyz?verbose").await;
        if r.code() != 200 {
            failing = Some(r);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = failing.expect("/readyz failing within 2 s of SIGTERM");
    assert_eq!(r.code(), 500);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        body.contains("[-]shutdown failed: reason withheld\n"),
        "{body}"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    // Still serving meanwhile: liveness and ordinary requests.
    assert_eq!(s.get("/livez").await.code(), 200);
    assert_eq!(s.get("/readyz/shutdown").await.code(), 500);
    assert_eq!(s.get("/api/v1/namespaces/default").await.code(), 200);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "the checks above ran within the delay"
    );
}
