//! `/metrics` against the real binary: after a known sequence of requests (creates, a dry run,
//! gets, a 404, a list, a watch) the request counters move by exactly those requests under
//! kube-apiserver's names and labels, the histograms have kube-apiserver's buckets, the watch
//! is long-running while open, storage latency and object counts follow the writes, and the
//! process figures are there. `/metrics` is a non-resource URL that RBAC guards: the
//! `system:monitoring` group reads it, others get 403. With `STRATA_REQUEST_METRICS=off` (a
//! benchmarking aid) requests are not recorded while `/metrics` still serves the process and
//! cache figures.
//!
//! On etcd every request of a test goes to one replica (each replica has its own metrics).

use std::time::Duration;

use crate::common::{
    metric_value, storage, within, Http, Storage, TestServer, WatchOptions, WatchStream,
};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(90);

/// kube-apiserver's `apiserver_request_duration_seconds` buckets, as the exposition writes them.
const LATENCY_BUCKETS: [&str; 24] = [
    "0.005", "0.025", "0.05", "0.1", "0.2", "0.4", "0.6", "0.8", "1", "1.25", "1.5", "2", "3", "4",
    "5", "6", "8", "10", "15", "20", "30", "45", "60", "+Inf",
];

/// kube-apiserver's `apiserver_response_sizes` buckets (1 KB to 1 GB).
const SIZE_BUCKETS: [&str; 8] = [
    "1000", "10000", "100000", "1e+06", "1e+07", "1e+08", "1e+09", "+Inf",
];

struct Scrape(String);

impl Scrape {
    async fn of(h: &Http) -> Scrape {
        let r = h.get("/metrics").await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            r.header("content-type"),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        Scrape(String::from_utf8(r.body.to_vec()).expect("utf-8"))
    }

    /// A sample's value; 0 when the series does not exist (yet).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_value(&self.0, name, labels).unwrap_or(0.0)
    }

    /// The `le` labels of the buckets of histogram `name` whose labels include `labels`.
    fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> Vec<String> {
        let bucket = format!("{name}_bucket{{");
        self.0
            .lines()
            .filter(|l| l.starts_with(&bucket))
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?;
                Some(le.split('"').next()?.to_string())
            })
            .collect()
    }
}

/// The labels of a request for configmaps.
fn configmaps<'a>(verb: &'a str, scope: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("verb", verb),
        ("group", ""),
        ("version", "v1"),
        ("resource", "configmaps"),
        ("subresource", ""),
        ("scope", scope),
        ("component", "apiserver"),
    ]
}

fn with<'a>(
    mut labels: Vec<(&'a str, &'a str)>,
    more: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    labels.extend_from_slice(more);
    labels
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_metrics_count_a_known_sequence() {
    let s = TestServer::start();
    // Everything to one replica, whose metrics then tell the whole story.
    let h = Http::to(&s.addr);
    within(LIMIT, async {
        let ns = h
            .post_json("/api/v1/namespaces", &json!({"metadata": {"name": "m"}}))
            .await;
        assert_eq!(ns.code(), 201);
        let cms = "/api/v1/namespaces/m/configmaps";
        let before = Scrape::of(&h).await;

        for name in ["a", "b", "c"] {
            assert_eq!(h.post_json(cms, &config_map(name)).await.code(), 201);
        }
        let dry = h
            .post_json(&format!("{cms}?dryRun=All"), &config_map("d"))
            .await;
        assert_eq!(dry.code(), 201);
        for name in ["a", "b"] {
            assert_eq!(h.get(&format!("{cms}/{name}")).await.code(), 200);
        }
        assert_eq!(h.get(&format!("{cms}/nope")).await.code(), 404);
        assert_eq!(h.get(cms).await.code(), 200);

        // A watch: long-running while open, counted once it ends.
        let list = h.get(cms).await.json();
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let mut watch = WatchStream::open(
            &s.addr,
            &format!("{cms}?watch=1&resourceVersion={rv}&timeoutSeconds=3"),
            WatchOptions::default(),
        )
        .await;
        assert_eq!(watch.status.as_u16(), 200);
        assert_eq!(h.post_json(cms, &config_map("e")).await.code(), 201);
        let event = watch.next_event().await;
        assert_eq!(event["type"], "ADDED");
        let during = Scrape::of(&h).await;
        let open = configmaps("WATCH", "namespace");
        assert_eq!(during.value("apiserver_longrunning_requests", &open), 1.0);
        let kind = [("group", ""), ("version", "v1"), ("kind", "ConfigMap")];
        assert_eq!(during.value("apiserver_registered_watchers", &kind), 1.0);
        assert!(during.value("apiserver_watch_events_total", &kind) >= 1.0);
        // The scrape itself is the one read-only request in flight; watches are not counted.
        let kind_of = |k| [("request_kind", k)];
        assert_eq!(
            during.value("apiserver_current_inflight_requests", &kind_of("readOnly")),
            1.0
        );
        assert_eq!(
            during.value("apiserver_current_inflight_requests", &kind_of("mutating")),
            0.0
        );
        watch.until_end(Duration::from_secs(15)).await;

        // The server records the watch when its body is dropped, just after the stream ended.
        let watched = with(
            configmaps("WATCH", "namespace"),
            &[("code", "200"), ("dry_run", "")],
        );
        let after = loop {
            let scrape = Scrape::of(&h).await;
            if scrape.value("apiserver_request_total", &watched)
                > before.value("apiserver_request_total", &watched)
            {
                break scrape;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };

        let delta = |labels: &[(&str, &str)]| {
            after.value("apiserver_request_total", labels)
                - before.value("apiserver_request_total", labels)
        };
        let code = |verb, scope, code, dry_run| {
            with(
                configmaps(verb, scope),
                &[("code", code), ("dry_run", dry_run)],
            )
        };
        assert_eq!(delta(&code("POST", "resource", "201", "")), 4.0);
        assert_eq!(delta(&code("POST", "resource", "201", "All")), 1.0);
        assert_eq!(delta(&code("GET", "resource", "200", "")), 2.0);
        assert_eq!(delta(&code("GET", "resource", "404", "")), 1.0);
        assert_eq!(delta(&code("LIST", "namespace", "200", "")), 2.0);
        assert_eq!(delta(&code("WATCH", "namespace", "200", "")), 1.0);
        assert_eq!(after.value("apiserver_longrunning_requests", &open), 0.0);
        // Creating the namespace was counted too, with its own labels.
        let namespaces = [
            ("verb", "POST"),
            ("resource", "namespaces"),
            ("scope", "resource"),
            ("code", "201"),
        ];
        assert_eq!(after.value("apiserver_request_total", &namespaces), 1.0);

        // Latency: one observation per request, in kube-apiserver's buckets.
        let gets = with(configmaps("GET", "resource"), &[("dry_run", "")]);
        let count = |s: &Scrape| s.value("apiserver_request_duration_seconds_count", &gets);
        assert_eq!(count(&after) - count(&before), 3.0);
        assert_eq!(
            after.buckets("apiserver_request_duration_seconds", &gets),
            LATENCY_BUCKETS
        );
        assert_eq!(
            after.value(
                "apiserver_request_duration_seconds_bucket",
                &with(gets.clone(), &[("le", "+Inf")])
            ),
            after.value("apiserver_request_duration_seconds_count", &gets)
        );
        // Response sizes: reads only (a GET of one ConfigMap is well under 1000 bytes).
        let sized = configmaps("GET", "resource");
        assert_eq!(
            after.buckets("apiserver_response_sizes", &sized),
            SIZE_BUCKETS
        );
        let small = with(sized.clone(), &[("le", "1000")]);
        assert_eq!(
            after.value("apiserver_response_sizes_bucket", &small)
                - before.value("apiserver_response_sizes_bucket", &small),
            3.0
        );
        assert!(after
            .buckets("apiserver_response_sizes", &configmaps("POST", "resource"))
            .is_empty());

        // Storage: each create reached the store (not the dry run), and the cache counts them.
        let stored = [("operation", "create"), ("type", "configmaps")];
        let creates = |s: &Scrape| s.value("etcd_request_duration_seconds_count", &stored);
        assert_eq!(creates(&after) - creates(&before), 4.0);
        assert_eq!(
            after.buckets("etcd_request_duration_seconds", &stored),
            LATENCY_BUCKETS
        );
        assert_eq!(
            after.value("apiserver_storage_objects", &[("resource", "configmaps")]),
            before.value("apiserver_storage_objects", &[("resource", "configmaps")]) + 4.0
        );

        // Anonymous requests authenticate; AlwaysAllow allows them.
        let ok = [("result", "success")];
        assert!(
            after.value("authentication_attempts", &ok)
                > before.value("authentication_attempts", &ok)
        );
        let allowed = [("type", "AlwaysAllow"), ("decision", "allowed")];
        assert!(
            after.value("apiserver_authorization_decisions_total", &allowed)
                > before.value("apiserver_authorization_decisions_total", &allowed)
        );

        // The process.
        assert!(after.value("process_cpu_seconds_total", &[]) > 0.0);
        assert!(after.value("process_resident_memory_bytes", &[]) > 1e6);
        assert!(after.value("process_open_fds", &[]) > 3.0);
        assert!(after.value("process_start_time_seconds", &[]) > 1.7e9);
        // The embedded store's group commit: the three creates' writes (and the namespace
        // controller's, if any), in batches timed in etcd's WAL fsync buckets. Over etcd,
        // etcd reports its own fsyncs, and the series are not there.
        if storage() == Storage::RocksDb {
            let writes = "strata_rocksdb_writes_total";
            assert!(after.value(writes, &[]) >= before.value(writes, &[]) + 3.0);
            let commits = "strata_rocksdb_commit_duration_seconds_count";
            let committed = after.value(commits, &[]) - before.value(commits, &[]);
            assert!(
                (1.0..=after.value(writes, &[]) - before.value(writes, &[])).contains(&committed),
                "{committed} commits"
            );
            assert!(after.value("strata_rocksdb_commit_duration_seconds_sum", &[]) > 0.0);
            let bounds = after.buckets("strata_rocksdb_commit_duration_seconds", &[]);
            assert_eq!(bounds.len(), 15, "{bounds:?}");
            assert_eq!(bounds[0].parse::<f64>().ok(), Some(0.001));
            assert_eq!(bounds[13].parse::<f64>().ok(), Some(8.192));
            assert_eq!(bounds[14], "+Inf");
            assert!(after.0.contains("strata_rocksdb_disk_gets_total "));
        } else {
            assert!(!after.0.contains("strata_rocksdb_"));
        }
        // The watch caches' own figures are still there.
        assert!(
            after.value(
                "strata_watch_cache_objects",
                &[("group", ""), ("resource", "configmaps")]
            ) >= 4.0
        );
    })
    .await;
}

const TOKENS: &str = "admin-token,admin,1,system:masters\n\
                      prom-token,prometheus,2,system:monitoring\n\
                      carol-token,carol,3\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_is_a_non_resource_url_for_system_monitoring() {
    let (s, _dir) = TestServer::start_with_tokens(TOKENS, &["--authorization-mode=RBAC"]);
    let h = Http::to(&s.addr);
    within(LIMIT, async {
        let get = |token: &'static str, path: &'static str| {
            let h = h.clone();
            async move { h.as_token(token, "GET", path, None).await }
        };
        // The bootstrap policy: Kubernetes' system:monitoring role and its binding.
        let role = get(
            "admin-token",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:monitoring",
        )
        .await;
        assert_eq!(role.code(), 200);
        let urls = &role.json()["rules"][0]["nonResourceURLs"];
        assert!(
            urls.as_array().unwrap().contains(&json!("/metrics")),
            "{urls}"
        );
        let binding = get(
            "admin-token",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:monitoring",
        )
        .await;
        assert_eq!(binding.code(), 200);
        assert_eq!(binding.json()["subjects"][0]["name"], "system:monitoring");

        let denied = get("carol-token", "/metrics").await;
        assert_eq!(denied.code(), 403);
        assert_eq!(
            denied.json()["message"],
            "forbidden: User \"carol\" cannot get path \"/metrics\""
        );
        assert_eq!(get("nobody-token", "/metrics").await.code(), 401);
        for path in ["/livez", "/readyz", "/healthz"] {
            assert_eq!(get("prom-token", path).await.code(), 200, "{path}");
        }
        // A monitoring identity reads metrics and nothing else.
        assert_eq!(get("prom-token", "/api/v1/namespaces").await.code(), 403);
        let r = get("prom-token", "/metrics").await;
        assert_eq!(r.code(), 200);
        let text = String::from_utf8(r.body.to_vec()).unwrap();
        let value =
            |name, labels: &[(&str, &str)]| metric_value(&text, name, labels).unwrap_or(0.0);
        let rbac = |d| [("type", "RBAC"), ("name", "rbac"), ("decision", d)];
        assert!(value("apiserver_authorization_decisions_total", &rbac("denied")) >= 2.0);
        assert!(value("apiserver_authorization_decisions_total", &rbac("allowed")) >= 1.0);
        assert!(value("authorization_attempts_total", &[("result", "denied")]) >= 2.0);
        assert!(value("authentication_attempts", &[("result", "failure")]) >= 1.0);
        assert!(value("authentication_attempts", &[("result", "success")]) >= 4.0);
        // The refused requests are counted with their codes.
        let forbidden = [
            ("verb", "LIST"),
            ("resource", "namespaces"),
            ("scope", "cluster"),
            ("code", "403"),
        ];
        assert_eq!(value("apiserver_request_total", &forbidden), 1.0);
        let metrics_403 = [
            ("subresource", "/metrics"),
            ("code", "403"),
            ("component", ""),
        ];
        assert_eq!(value("apiserver_request_total", &metrics_403), 1.0);
    })
    .await;
}

/// A `strata serve` started with `STRATA_REQUEST_METRICS=off` (TestServer passes no
/// environment), on RocksDB or, with `STRATA_TEST_STORAGE=etcd`, alone on a throwaway etcd;
/// killed on drop.
struct Unmetered {
    child: std::process::Child,
    addr: String,
    _etcd: Option<strata_store_etcd::testing::TestEtcd>,
    _dir: tempfile::TempDir,
}

impl Unmetered {
    fn start() -> Unmetered {
        let dir = tempfile::tempdir().unwrap();
        let etcd = match crate::common::storage() {
            crate::common::Storage::Etcd => Some(
                strata_store_etcd::testing::TestEtcd::start()
                    .expect("start /usr/bin/etcd (Debian's etcd-server)"),
            ),
            crate::common::Storage::RocksDb => None,
        };
        let mut cmd = std::process::Command::new(crate::common::strata_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args([
                "--insecure-http",
                "--anonymous-auth=true",
                "--authorization-mode=AlwaysAllow",
            ])
            .env("STRATA_REQUEST_METRICS", "off")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        if let Some(etcd) = &etcd {
            cmd.args(["--storage-backend", "etcd", "--etcd-servers", &etcd.url]);
        }
        let mut child = cmd.spawn().expect("start strata");
        let addr = crate::common::listening_addr(&mut child, false);
        Unmetered {
            child,
            addr,
            _etcd: etcd,
            _dir: dir,
        }
    }
}

impl Drop for Unmetered {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The samples (not the HELP and TYPE lines) of metric family `name`.
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ', '_']))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_metrics_off_records_no_requests_and_metrics_still_answers() {
    let s = Unmetered::start();
    let h = Http::to(&s.addr);
    within(LIMIT, async {
        // Wait until the server is ready (the listening line comes before the first request).
        let mut ready = h.get("/readyz").await;
        while ready.code() != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            ready = h.get("/readyz").await;
        }
        let ns = h
            .post_json("/api/v1/namespaces", &json!({"metadata": {"name": "m"}}))
            .await;
        assert_eq!(ns.code(), 201);
        let cms = "/api/v1/namespaces/m/configmaps";
        for name in ["a", "b"] {
            assert_eq!(h.post_json(cms, &config_map(name)).await.code(), 201);
        }
        assert_eq!(h.get(&format!("{cms}/a")).await.code(), 200);
        assert_eq!(h.get(&format!("{cms}/nope")).await.code(), 404);
        assert_eq!(h.get(cms).await.code(), 200);
        let first = Scrape::of(&h).await;
        for _ in 0..5 {
            assert_eq!(h.get(&format!("{cms}/b")).await.code(), 200);
        }
        let second = Scrape::of(&h).await;
        for scrape in [&first, &second] {
            let text = &scrape.0;
            // Nothing of the requests: not counted, timed, sized, nor authenticated.
            for family in [
                "apiserver_request_total",
                "apiserver_request_duration_seconds",
                "apiserver_response_sizes",
                "apiserver_longrunning_requests",
                "etcd_request_duration_seconds",
            ] {
                assert_eq!(samples(text, family), Vec::<&str>::new(), "{family}");
            }
            for result in ["success", "failure", "error"] {
                assert_eq!(
                    scrape.value("authentication_attempts", &[("result", result)]),
                    0.0
                );
            }
            assert_eq!(
                scrape.value("authorization_attempts_total", &[("result", "allowed")]),
                0.0
            );
            assert_eq!(
                scrape.value(
                    "apiserver_current_inflight_requests",
                    &[("request_kind", "readOnly")]
                ),
                0.0
            );
            // The figures read at scrape time are all there.
            assert!(
                scrape.value("process_start_time_seconds", &[]) > 0.0,
                "{text}"
            );
            assert!(scrape.value("process_resident_memory_bytes", &[]) > 0.0);
            assert_eq!(
                scrape.value("apiserver_storage_objects", &[("resource", "configmaps")]),
                2.0,
                "{text}"
            );
        }
    })
    .await;
}

/// A list whose length is not known when it starts (a Table, or pretty JSON) is sent a chunk
/// at a time; its size is still recorded once, as the bytes it sent.
#[tokio::test]
async fn chunked_answers_record_the_size_they_sent() {
    let s = TestServer::start();
    let h = Http::to(&s.addr);
    within(LIMIT, async {
        let ns = h
            .post_json(
                "/api/v1/namespaces",
                &json!({"metadata": {"name": "sized"}}),
            )
            .await;
        assert_eq!(ns.code(), 201);
        let cms = "/api/v1/namespaces/sized/configmaps";
        for i in 0..50 {
            let r = h.post_json(cms, &config_map(&format!("cm-{i}"))).await;
            assert_eq!(r.code(), 201);
        }
        let lists = configmaps("LIST", "namespace");
        let before = Scrape::of(&h).await;
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
        let t = h.send("GET", cms, None, &[("accept", table)]).await;
        assert_eq!(t.code(), 200);
        assert_eq!(
            t.header("content-length"),
            "",
            "a Table's length is not known"
        );
        let pretty = h.get(&format!("{cms}?pretty=true")).await;
        assert_eq!(pretty.code(), 200);
        let compact = h.get(cms).await;
        assert_eq!(compact.code(), 200);
        assert_eq!(
            compact.header("content-length"),
            compact.body.len().to_string()
        );
        let after = Scrape::of(&h).await;
        let delta = |name: &str| after.value(name, &lists) - before.value(name, &lists);
        assert_eq!(delta("apiserver_response_sizes_count"), 3.0);
        let sent = t.body.len() + pretty.body.len() + compact.body.len();
        assert_eq!(delta("apiserver_response_sizes_sum"), sent as f64);
    })
    .await;
}
