//! The health endpoints in Kubernetes' format, with kube-apiserver's check names: `/livez`,
//! `/readyz` and `/healthz` answer `ok`, list their checks with `?verbose`, skip one with
//! `?exclude=`, and serve each check on its own path. With storage unreachable `/readyz` and
//! `/healthz` fail, 503, naming the storage check, and `/livez` does not (also across a whole
//! etcd cluster's outage: see `etcd_faults`). Told to stop, a server fails `/readyz` (503) for
//! `--shutdown-delay-duration` while it goes on serving, then stops.

use std::time::{Duration, Instant};

use strata_store_etcd::testing::TestEtcd;

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
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "[+]ping ok\n[+]log ok\nlivez check passed\n"
    );
    let r = s.get("/readyz?verbose").await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        format!(
            "[+]ping ok\n[+]log ok\n[+]{check} ok\n[+]informer-sync ok\n[+]shutdown ok\n\
             readyz check passed\n"
        )
    );
    let r = s.get("/healthz?verbose").await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        format!("[+]ping ok\n[+]log ok\n[+]{check} ok\nhealthz check passed\n")
    );
    // Unknown names are reported once each, sorted, as kube-apiserver reports them.
    let r = s
        .get(&format!(
            "/readyz?verbose&exclude=nothing&exclude={check}&exclude=informer-sync&exclude=else&exclude=nothing"
        ))
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        format!(
            "[+]ping ok\n[+]log ok\n[+]{check} excluded: ok\n[+]informer-sync excluded: ok\n\
             [+]shutdown ok\n\
             warn: some health checks cannot be excluded: no matches for \"else\",\"nothing\"\n\
             readyz check passed\n"
        )
    );
    // Without `verbose` a passing endpoint says `ok`, exclusions or not.
    let r = s.get("/livez?exclude=log&exclude=nothing").await;
    assert_eq!((r.code(), &r.body[..]), (200, &b"ok"[..]));
    for path in [
        "/readyz/ping",
        "/readyz/log",
        &format!("/readyz/{check}"),
        "/readyz/informer-sync",
        "/readyz/shutdown",
        "/livez/ping",
        "/livez/log",
        "/healthz/ping",
        "/healthz/log",
        &format!("/healthz/{check}"),
    ] {
        let r = s.get(path).await;
        assert_eq!(r.code(), 200, "{path}");
        assert_eq!(&r.body[..], b"ok", "{path}");
    }
    // `/livez` has no storage check, `/healthz` no informer-sync or shutdown; an unknown
    // check is not found.
    assert_eq!(s.get(&format!("/livez/{check}")).await.code(), 404);
    assert_eq!(s.get("/livez/shutdown").await.code(), 404);
    assert_eq!(s.get("/healthz/informer-sync").await.code(), 404);
    assert_eq!(s.get("/healthz/shutdown").await.code(), 404);
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
    assert_eq!(r.code(), 503);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        body.contains("[-]shutdown failed: reason withheld\n"),
        "{body}"
    );
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    // Still serving meanwhile: liveness and ordinary requests.
    assert_eq!(s.get("/livez").await.code(), 200);
    let r = s.get("/readyz/shutdown").await;
    assert_eq!(
        (r.code(), String::from_utf8_lossy(&r.body).as_ref()),
        (503, "internal server error: the server is shutting down\n")
    );
    assert_eq!(s.get("/api/v1/namespaces/default").await.code(), 200);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "the checks above ran within the delay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_healthz_fail_while_etcd_is_unreachable() {
    // A server of its own on an etcd of its own, whatever STRATA_TEST_STORAGE says.
    let etcd = TestEtcd::start().expect("start etcd");
    let s = TestServer::start_with(&["--storage-backend", "etcd", "--etcd-servers", &etcd.url]);
    let r = s.get("/readyz?verbose").await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    drop(etcd);
    let started = Instant::now();
    let r = s.get("/readyz?verbose").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the storage check has a deadline"
    );
    assert_eq!(
        (r.code(), String::from_utf8_lossy(&r.body).as_ref()),
        (
            503,
            "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]informer-sync ok\n\
             [+]shutdown ok\nreadyz check failed\n"
        )
    );
    assert_eq!(r.header("content-type"), "text/plain; charset=utf-8");
    // Without `verbose` a failure is listed all the same.
    let r = s.get("/healthz").await;
    assert_eq!(
        (r.code(), String::from_utf8_lossy(&r.body).as_ref()),
        (
            503,
            "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\nhealthz check failed\n"
        )
    );
    // The check's own path says why.
    let r = s.get("/readyz/etcd").await;
    assert_eq!(r.code(), 503);
    assert!(
        String::from_utf8_lossy(&r.body).starts_with("internal server error: "),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // Excluded, the storage no longer decides; liveness never looked at it.
    assert_eq!(s.get("/readyz?exclude=etcd").await.code(), 200);
    let r = s.get("/livez").await;
    assert_eq!((r.code(), &r.body[..]), (200, &b"ok"[..]));
}
