//! Watch over raw HTTP against the real binary, the body read as a stream: framing, event kinds,
//! start semantics per resourceVersion, selectors, bookmarks, streaming lists, the ordering
//! guarantees under concurrent writers, slow watchers, restarts and the one-encode-per-event
//! property of the watch cache. Clients' use of watch is tested with the clients themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{
    assert_status, assert_status_value, enc, metric_value, name_of, rv_of, sa_path, within, Http,
    Next, TestServer, WatchOptions, WatchStream,
};
use serde_json::{json, Value};

/// Deadline of one test; generous for a loaded two-core machine.
const LIMIT: Duration = Duration::from_secs(90);

/// The annotation on the bookmark that closes the initial events of a streaming list.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

fn event_type(e: &Value) -> &str {
    e["type"]
        .as_str()
        .unwrap_or_else(|| panic!("event without a type: {e}"))
}

/// Asserts the shape of every watch event: exactly `type` and `object`, and an object that names
/// its kind.
fn assert_event_shape(e: &Value, kind: &str) {
    let keys: BTreeSet<&str> = e
        .as_object()
        .unwrap_or_else(|| panic!("an event is not an object: {e}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["object", "type"]), "{e}");
    let t = event_type(e);
    assert!(
        ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"].contains(&t),
        "unknown event type in {e}"
    );
    if t == "ERROR" {
        assert_eq!(e["object"]["kind"], "Status", "{e}");
    } else {
        assert_eq!(e["object"]["kind"], kind, "{e}");
        assert_eq!(e["object"]["apiVersion"], "v1", "{e}");
    }
}

/// Asserts that a BOOKMARK carries the watched kind and nothing but a resourceVersion (plus the
/// initial-events-end annotation where `initial_end`); returns its resourceVersion.
fn assert_bookmark(e: &Value, kind: &str, initial_end: bool) -> u64 {
    assert_eq!(e["type"], "BOOKMARK", "{e}");
    let o = e["object"].as_object().unwrap();
    for key in o.keys() {
        assert!(
            ["kind", "apiVersion", "metadata"].contains(&key.as_str()),
            "a bookmark has only kind, apiVersion and metadata: {e}"
        );
    }
    assert_eq!(o["kind"], kind, "{e}");
    assert_eq!(o["apiVersion"], "v1", "{e}");
    let meta = o["metadata"].as_object().unwrap();
    for (key, value) in meta {
        match key.as_str() {
            "resourceVersion" => {}
            // Go renders the zero creationTimestamp of an empty object as null.
            "creationTimestamp" => assert!(value.is_null(), "{e}"),
            "annotations" if initial_end => {
                assert_eq!(
                    value,
                    &json!({INITIAL_EVENTS_END: "true"}),
                    "the bookmark closing the initial events: {e}"
                )
            }
            _ => panic!("unexpected metadata.{key} in a bookmark: {e}"),
        }
    }
    if initial_end {
        assert!(
            meta.contains_key("annotations"),
            "the bookmark closing the initial events is annotated {INITIAL_EVENTS_END}: {e}"
        );
    }
    rv_of(&e["object"])
}

/// (type, name, resourceVersion) of an event.
fn summary(e: &Value) -> (String, String, u64) {
    (
        event_type(e).to_string(),
        name_of(&e["object"]).to_string(),
        rv_of(&e["object"]),
    )
}

/// The `metadata.resourceVersion` of a list as a number.
fn list_rv(list: &Value) -> u64 {
    rv_of(list)
}

/// Opens a watch that must answer 200. A watch of ServiceAccounts without a field selector of
/// its own leaves out the ServiceAccount `default`, which the server makes in every namespace:
/// the tests follow their own writes.
async fn open(s: &TestServer, path: &str) -> WatchStream {
    let path = own(path);
    let w = s.watch(&path).await;
    assert_eq!(w.status, 200, "GET {path}");
    w
}

/// `path` with the field selector that leaves out the `default` ServiceAccount, when it is a
/// ServiceAccount collection without a field selector.
fn own(path: &str) -> String {
    if path.contains("/serviceaccounts?") && !path.contains("fieldSelector=") {
        format!("{path}&fieldSelector=metadata.name%21%3Ddefault")
    } else {
        path.to_string()
    }
}

#[tokio::test]
async fn watch_parameter_spellings() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("spell").await;
        h.create_sa("spell", "a", Value::Null).await;
        let path = sa_path("spell");
        // Go's boolean parsing: anything but absent, "0" and "false" (any case) is true.
        for value in ["1", "true", "True", "TRUE", "t", ""] {
            let mut w = open(&s, &format!("{path}?watch={value}")).await;
            assert_eq!(
                w.header("content-type"),
                "application/json",
                "watch={value}"
            );
            let e = w.next_event().await;
            assert_event_shape(&e, "ServiceAccount");
            assert_eq!(summary(&e).0, "ADDED", "watch={value}: {e}");
            assert_eq!(name_of(&e["object"]), "a");
        }
        let mut w = open(&s, &format!("{path}?watch")).await;
        assert_eq!(event_type(&w.next_event().await), "ADDED", "bare ?watch");
        for value in ["0", "false", "False", "FALSE"] {
            let list = h.get_ok(&format!("{path}?watch={value}")).await;
            assert_eq!(list["kind"], "ServiceAccountList", "watch={value}");
        }
    })
    .await;
}

/// Headers first, then one JSON document per line; ADDED, MODIFIED and DELETED with the object.
#[tokio::test]
async fn stream_framing_and_event_kinds() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("frame").await;
        h.create_namespace("elsewhere").await;
        let start = rv_of(&h.create_sa("frame", "before", Value::Null).await);
        let path = sa_path("frame");

        // Nothing happens after `start`, so only headers can arrive, and they must not wait
        // for a first event.
        let opts = WatchOptions {
            headers_within: Duration::from_secs(3),
            ..WatchOptions::default()
        };
        let mut w = WatchStream::open(
            &s.addr,
            &format!("{path}?watch=1&resourceVersion={start}"),
            opts,
        )
        .await;
        assert_eq!(w.status, 200);
        assert_eq!(w.header("content-type"), "application/json");
        assert_eq!(w.header("transfer-encoding"), "chunked");
        assert_eq!(w.header("content-length"), "");
        w.expect_quiet(Duration::from_millis(500)).await;

        let created = h.create_sa("frame", "x", json!({"app": "demo"})).await;
        h.create_sa("elsewhere", "x", Value::Null).await;
        let e = w.next_event().await;
        assert_event_shape(&e, "ServiceAccount");
        assert_eq!(e["type"], "ADDED");
        let mut expected = created.clone();
        expected["kind"] = json!("ServiceAccount");
        expected["apiVersion"] = json!("v1");
        assert_eq!(e["object"], expected, "ADDED carries the created object");

        let mut changed = created.clone();
        changed["automountServiceAccountToken"] = json!(false);
        let r = h.put_json(&format!("{path}/x"), &changed).await;
        assert_eq!(r.code(), 200);
        let updated = r.json();
        let e = w.next_event().await;
        assert_event_shape(&e, "ServiceAccount");
        assert_eq!(e["type"], "MODIFIED");
        assert_eq!(rv_of(&e["object"]), rv_of(&updated));
        assert_eq!(e["object"]["automountServiceAccountToken"], false);

        let r = h
            .patch_merge(
                &format!("{path}/x"),
                &json!({"metadata": {"labels": {"app": "v2"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let patched_rv = rv_of(&r.json());
        let e = w.next_event().await;
        assert_eq!(summary(&e), ("MODIFIED".into(), "x".into(), patched_rv));
        assert_eq!(e["object"]["metadata"]["labels"]["app"], "v2");

        assert_eq!(h.delete(&format!("{path}/x")).await.code(), 200);
        let e = w.next_event().await;
        assert_event_shape(&e, "ServiceAccount");
        assert_eq!(e["type"], "DELETED");
        assert_eq!(name_of(&e["object"]), "x");
        assert_eq!(e["object"]["metadata"]["uid"], created["metadata"]["uid"]);
        assert_eq!(
            e["object"]["metadata"]["labels"]["app"], "v2",
            "the last state"
        );
        let deleted_rv = rv_of(&e["object"]);
        assert!(
            deleted_rv > patched_rv,
            "DELETED carries the deletion's own resourceVersion: {e}"
        );
        let later = rv_of(&h.create_sa("frame", "y", Value::Null).await);
        assert!(later > deleted_rv);
        let e = w.next_event().await;
        assert_eq!(summary(&e), ("ADDED".into(), "y".into(), later));
    })
    .await;
}

/// Start semantics (spec §4.11 watch table): unset and "0" replay the state as synthetic ADDED
/// events, then follow changes; a version starts right after it.
#[tokio::test]
async fn start_semantics_by_resource_version() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("start").await;
        let path = sa_path("start");
        let a = h.create_sa("start", "a", Value::Null).await;
        let b = h.create_sa("start", "b", Value::Null).await;
        let r = h
            .patch_merge(
                &format!("{path}/a"),
                &json!({"metadata": {"labels": {"v": "2"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let a2 = r.json();
        let c = h.create_sa("start", "c", Value::Null).await;
        assert_eq!(h.delete(&format!("{path}/c")).await.code(), 200);

        for query in [
            "watch=1",
            "watch=1&resourceVersion=",
            "watch=1&resourceVersion=0",
        ] {
            let mut w = open(&s, &format!("{path}?{query}")).await;
            let mut initial = BTreeMap::new();
            for _ in 0..2 {
                let e = w.next_event().await;
                assert_event_shape(&e, "ServiceAccount");
                let (t, name, rv) = summary(&e);
                assert_eq!(t, "ADDED", "{query}: {e}");
                assert!(initial.insert(name, rv).is_none(), "{query}: twice: {e}");
            }
            let want =
                BTreeMap::from([("a".to_string(), rv_of(&a2)), ("b".to_string(), rv_of(&b))]);
            assert_eq!(
                initial, want,
                "{query}: the current state, deleted c not included"
            );
            w.expect_quiet(Duration::from_millis(300)).await;
            let d = h.create_sa("start", "d", Value::Null).await;
            let e = w.next_event().await;
            assert_eq!(
                summary(&e),
                ("ADDED".into(), "d".into(), rv_of(&d)),
                "{query}"
            );
            assert_eq!(h.delete(&format!("{path}/d")).await.code(), 200);
            assert_eq!(event_type(&w.next_event().await), "DELETED", "{query}");
        }

        // From a version: exactly the changes after it, nothing synthetic.
        let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={}", rv_of(&a))).await;
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(summary(&w.next_event().await));
        }
        assert_eq!(got[0], ("ADDED".into(), "b".into(), rv_of(&b)));
        assert_eq!(got[1], ("MODIFIED".into(), "a".into(), rv_of(&a2)));
        assert_eq!(got[2], ("ADDED".into(), "c".into(), rv_of(&c)));
        assert_eq!((got[3].0.as_str(), got[3].1.as_str()), ("DELETED", "c"));
        assert!(got[3].2 > rv_of(&c));
        // d came and went once per query in the loop above.
        let mut last = 0;
        for _ in 0..3 {
            for t in ["ADDED", "DELETED"] {
                let (got_t, name, rv) = summary(&w.next_event().await);
                assert_eq!((got_t.as_str(), name.as_str()), (t, "d"));
                assert!(rv > last);
                last = rv;
            }
        }
        w.expect_quiet(Duration::from_millis(300)).await;

        // From the newest version: nothing until the next change.
        let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={last}")).await;
        w.expect_quiet(Duration::from_millis(500)).await;
        let e_obj = h.create_sa("start", "e", Value::Null).await;
        let e = w.next_event().await;
        assert_eq!(summary(&e), ("ADDED".into(), "e".into(), rv_of(&e_obj)));
    })
    .await;
}

/// A version older than the retained history: the watch is accepted (200), then one ERROR event
/// with a 410 Expired Status ends it.
#[tokio::test]
async fn too_old_resource_version_ends_with_an_error_event() {
    within(LIMIT, async {
        let s = TestServer::start_with(&[
            "--history-retention",
            "1s",
            "--etcd-compaction-interval",
            "1s",
            "--watch-cache-size",
            "16",
        ]);
        let h = s.http();
        h.create_namespace("old").await;
        let path = sa_path("old");
        let first = rv_of(&h.create_sa("old", "first", Value::Null).await);
        for i in 0..40 {
            h.create_sa("old", &format!("n{i}"), Value::Null).await;
        }
        // Let compaction pass `first`: a chunked list at that exact version turns 410.
        let probe = format!("{path}?resourceVersion={first}&resourceVersionMatch=Exact");
        let deadline = Instant::now() + Duration::from_secs(20);
        while h.get(&probe).await.code() == 200 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={first}")).await;
        let events = w.until_end(Duration::from_secs(15)).await;
        assert_eq!(events.len(), 1, "one ERROR event and the end: {events:?}");
        assert_event_shape(&events[0], "ServiceAccount");
        assert_eq!(events[0]["type"], "ERROR");
        assert_status_value(&events[0]["object"], 410, "Expired");
        assert!(events[0]["object"]["message"].is_string());

        // A version inside the window still works.
        let now = list_rv(&h.get_ok(&path).await);
        let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={now}")).await;
        let x = h.create_sa("old", "x", Value::Null).await;
        assert_eq!(
            summary(&w.next_event().await),
            ("ADDED".into(), "x".into(), rv_of(&x))
        );
    })
    .await;
}

/// History is kept for the retention window and no longer (spec §4.5): a version superseded
/// less than the window ago can be watched and listed exactly; one superseded more than the
/// window ago answers 410 within seconds, even with no writes since (the watch cache forgets
/// what the store compacted), while a continue token keeps its own lifetime.
#[tokio::test]
async fn history_leaves_with_the_retention_window() {
    within(LIMIT, async {
        let retention = Duration::from_secs(4);
        let s = TestServer::start_with(&["--history-retention", "4s"]);
        let h = s.http();
        h.create_namespace("win").await;
        let path = sa_path("win");
        h.create_sa("win", "a", Value::Null).await;
        h.create_sa("win", "b", Value::Null).await;
        let first = list_rv(&h.get_ok(&path).await);
        let page = h.get_ok(&format!("{path}?limit=1")).await;
        let token = page["metadata"]["continue"].as_str().unwrap().to_string();
        h.create_sa("win", "c", Value::Null).await;
        let superseded = Instant::now();
        let exact = format!("{path}?resourceVersion={first}&resourceVersionMatch=Exact");

        // Well inside the window: readable, and a watch from it replays the later create.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(h.get(&exact).await.code(), 200);
        let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={first}")).await;
        assert_eq!(summary(&w.next_event().await).1, "c");
        drop(w);

        // Past the window: gone within a few seconds, with nothing written meanwhile.
        let gone = loop {
            let r = h.get(&exact).await;
            if r.code() != 200 || superseded.elapsed() > retention + Duration::from_secs(20) {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let took = superseded.elapsed();
        assert_status(&gone, 410, "Expired");
        assert!(
            took >= retention && took < retention + Duration::from_secs(4),
            "history of {retention:?} kept for {took:?}"
        );
        // The watch cache agrees within its tick (half a bookmark interval).
        let deadline = Instant::now() + Duration::from_secs(3);
        let (mut w, event) = loop {
            let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={first}")).await;
            let event = w.next_event().await;
            if event["type"] == "ERROR" || Instant::now() > deadline {
                break (w, event);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(event["type"], "ERROR", "{event}");
        assert_status_value(&event["object"], 410, "Expired");
        assert!(w.until_end(Duration::from_secs(5)).await.is_empty());

        // The continue token is younger than its own 5-minute lifetime, but its snapshot left
        // the history with the rest.
        let r = h
            .get(&format!("{path}?limit=1&continue={}", enc(&token)))
            .await;
        assert_status(&r, 410, "Expired");
    })
    .await;
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream_cleanly() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("tmo").await;
        let rv = rv_of(&h.create_sa("tmo", "a", Value::Null).await);
        let started = Instant::now();
        let mut w = open(
            &s,
            &format!(
                "{}?watch=1&resourceVersion={rv}&timeoutSeconds=2",
                sa_path("tmo")
            ),
        )
        .await;
        let b = h.create_sa("tmo", "b", Value::Null).await;
        let events = w.until_end(Duration::from_secs(15)).await;
        let took = started.elapsed();
        let got: Vec<_> = events.iter().map(summary).collect();
        assert_eq!(
            got,
            [("ADDED".into(), "b".into(), rv_of(&b))],
            "no ERROR at the end"
        );
        assert!(
            took >= Duration::from_millis(1500),
            "the stream lasts about timeoutSeconds, it ended after {took:?}"
        );

        // Also with the initial state replayed first.
        let mut w = open(&s, &format!("{}?watch=1&timeoutSeconds=1", sa_path("tmo"))).await;
        let events = w.until_end(Duration::from_secs(15)).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(events.iter().all(|e| e["type"] == "ADDED"), "{events:?}");

        // A negative timeout ends the watch at once, as Kubernetes' does, not after the
        // default 30–60 minutes; whatever it sent first is no ERROR.
        let started = Instant::now();
        let mut w = open(&s, &format!("{}?watch=1&timeoutSeconds=-5", sa_path("tmo"))).await;
        let events = w.until_end(Duration::from_secs(15)).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "ended after {:?}",
            started.elapsed()
        );
        assert!(events.iter().all(|e| e["type"] == "ADDED"), "{events:?}");
    })
    .await;
}

/// One object, one namespace, all namespaces, and namespaces themselves.
#[tokio::test]
async fn watch_scopes() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("left").await;
        h.create_namespace("right").await;
        // Their default ServiceAccounts come before the start.
        h.wait_default_sa("left").await;
        h.wait_default_sa("right").await;
        let start = rv_of(&h.create_sa("left", "seed", Value::Null).await);
        let q = format!("watch=1&resourceVersion={start}");
        let mut one = open(
            &s,
            &format!(
                "{}?{q}&fieldSelector={}",
                sa_path("left"),
                enc("metadata.name=x")
            ),
        )
        .await;
        let mut not_x = open(
            &s,
            &format!(
                "{}?{q}&fieldSelector={}",
                sa_path("left"),
                enc("metadata.name!=x")
            ),
        )
        .await;
        let mut left = open(&s, &format!("{}?{q}", sa_path("left"))).await;
        let mut all = open(&s, &format!("/api/v1/serviceaccounts?{q}")).await;
        let mut all_right = open(
            &s,
            &format!(
                "/api/v1/serviceaccounts?{q}&fieldSelector={}",
                enc("metadata.namespace=right")
            ),
        )
        .await;

        let lx = rv_of(&h.create_sa("left", "x", Value::Null).await);
        let ly = rv_of(&h.create_sa("left", "y", Value::Null).await);
        let rx = rv_of(&h.create_sa("right", "x", Value::Null).await);
        let r = h
            .patch_merge(
                &format!("{}/x", sa_path("left")),
                &json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .await;
        let lx2 = rv_of(&r.json());
        assert_eq!(
            h.delete(&format!("{}/x", sa_path("left"))).await.code(),
            200
        );
        // A final write everyone sees, to know the streams are caught up.
        let end_left = rv_of(&h.create_sa("left", "end", Value::Null).await);
        let end_right = rv_of(&h.create_sa("right", "end", Value::Null).await);

        async fn until(
            w: &mut WatchStream,
            ns_name: (&str, &str),
        ) -> Vec<(String, String, String, u64)> {
            let mut got = Vec::new();
            loop {
                let e = w.next_change().await;
                let o = &e["object"];
                let item = (
                    event_type(&e).to_string(),
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    name_of(o).to_string(),
                    rv_of(o),
                );
                let done = item.1 == ns_name.0 && item.2 == ns_name.1;
                got.push(item);
                if done {
                    return got;
                }
            }
        }
        let t = |t: &str, ns: &str, n: &str, rv: u64| {
            (t.to_string(), ns.to_string(), n.to_string(), rv)
        };

        // The watch of one object by name never sees "end": read its three events and check
        // that nothing else follows.
        let mut got = Vec::new();
        for _ in 0..3 {
            let e = one.next_event().await;
            got.push(summary(&e));
        }
        assert_eq!(got[0], ("ADDED".into(), "x".into(), lx));
        assert_eq!(got[1], ("MODIFIED".into(), "x".into(), lx2));
        assert_eq!((got[2].0.as_str(), got[2].1.as_str()), ("DELETED", "x"));
        let del = got[2].2;
        one.expect_quiet(Duration::from_millis(500)).await;

        assert_eq!(
            until(&mut not_x, ("left", "end")).await,
            [
                t("ADDED", "left", "y", ly),
                t("ADDED", "left", "end", end_left)
            ]
        );
        assert_eq!(
            until(&mut left, ("left", "end")).await,
            [
                t("ADDED", "left", "x", lx),
                t("ADDED", "left", "y", ly),
                t("MODIFIED", "left", "x", lx2),
                t("DELETED", "left", "x", del),
                t("ADDED", "left", "end", end_left),
            ]
        );
        assert_eq!(
            until(&mut all, ("right", "end")).await,
            [
                t("ADDED", "left", "x", lx),
                t("ADDED", "left", "y", ly),
                t("ADDED", "right", "x", rx),
                t("MODIFIED", "left", "x", lx2),
                t("DELETED", "left", "x", del),
                t("ADDED", "left", "end", end_left),
                t("ADDED", "right", "end", end_right),
            ]
        );
        assert_eq!(
            until(&mut all_right, ("right", "end")).await,
            [
                t("ADDED", "right", "x", rx),
                t("ADDED", "right", "end", end_right)
            ]
        );

        // Namespaces: the existing ones first, then changes.
        let existing: BTreeSet<String> = h.get_ok("/api/v1/namespaces").await["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| name_of(n).to_string())
            .collect();
        for name in ["default", "kube-system", "kube-public", "left", "right"] {
            assert!(existing.contains(name), "{name} missing from {existing:?}");
        }
        let mut ns = open(&s, "/api/v1/namespaces?watch=1").await;
        let mut initial = BTreeSet::new();
        while initial.len() < existing.len() {
            let e = ns.next_event().await;
            assert_event_shape(&e, "Namespace");
            assert_eq!(e["type"], "ADDED", "{e}");
            assert!(
                initial.insert(name_of(&e["object"]).to_string()),
                "a namespace twice: {e}"
            );
        }
        assert_eq!(initial, existing);
        let created = h.create_namespace("fresh").await;
        let e = ns.next_event().await;
        assert_eq!(
            summary(&e),
            ("ADDED".into(), "fresh".into(), rv_of(&created))
        );
        let r = h
            .patch_merge(
                "/api/v1/namespaces/fresh",
                &json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let e = ns.next_event().await;
        assert_eq!(e["type"], "MODIFIED", "{e}");
        assert_eq!(rv_of(&e["object"]), rv_of(&r.json()));
        assert_eq!(h.delete("/api/v1/namespaces/fresh").await.code(), 200);
        // Kubernetes marks a namespace Terminating first (MODIFIED) and reports DELETED once it
        // is finalized.
        loop {
            let e = ns.next_event().await;
            assert_eq!(name_of(&e["object"]), "fresh", "{e}");
            match event_type(&e) {
                "DELETED" => break,
                "MODIFIED" => {
                    assert!(
                        e["object"]["metadata"]["deletionTimestamp"].is_string(),
                        "{e}"
                    )
                }
                _ => panic!("unexpected {e}"),
            }
        }
    })
    .await;
}

/// A label-selected watch sees an object that stops matching as DELETED (with its last matching
/// state at the version of the change) and one that starts matching as ADDED.
#[tokio::test]
async fn label_selected_watch_follows_objects_in_and_out() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("lbl").await;
        let path = sa_path("lbl");
        let start = rv_of(&h.create_sa("lbl", "seed", Value::Null).await);
        let mut w = open(
            &s,
            &format!(
                "{path}?watch=1&resourceVersion={start}&labelSelector={}",
                enc("app=web")
            ),
        )
        .await;
        let patch = |name: &str, app: &str| {
            let h = h.clone();
            let url = format!("{path}/{name}");
            let body = json!({"metadata": {"labels": {"app": app}}});
            async move {
                let r = h.patch_merge(&url, &body).await;
                assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
                r.json()
            }
        };

        let s1 = h.create_sa("lbl", "s1", json!({"app": "web"})).await;
        h.create_sa("lbl", "s2", json!({"app": "db"})).await;
        let e = w.next_event().await;
        assert_eq!(summary(&e), ("ADDED".into(), "s1".into(), rv_of(&s1)));

        let moved = patch("s1", "db").await;
        let e = w.next_event().await;
        assert_eq!(
            summary(&e),
            ("DELETED".into(), "s1".into(), rv_of(&moved)),
            "{e}"
        );
        assert_eq!(
            e["object"]["metadata"]["labels"]["app"], "web",
            "the DELETED event carries the last state that matched: {e}"
        );

        let joined = patch("s2", "web").await;
        let e = w.next_event().await;
        assert_eq!(
            summary(&e),
            ("ADDED".into(), "s2".into(), rv_of(&joined)),
            "{e}"
        );
        assert_eq!(e["object"]["metadata"]["labels"]["app"], "web");

        // Changes outside the selection are not reported; changes inside are MODIFIED.
        patch("s1", "cache").await;
        let r = h
            .patch_merge(
                &format!("{path}/s2"),
                &json!({"metadata": {"annotations": {"note": "x"}}}),
            )
            .await;
        let e = w.next_event().await;
        assert_eq!(
            summary(&e),
            ("MODIFIED".into(), "s2".into(), rv_of(&r.json())),
            "{e}"
        );
        let back = patch("s1", "web").await;
        let e = w.next_event().await;
        assert_eq!(
            summary(&e),
            ("ADDED".into(), "s1".into(), rv_of(&back)),
            "{e}"
        );
        assert_eq!(h.delete(&format!("{path}/s1")).await.code(), 200);
        let e = w.next_event().await;
        assert_eq!(
            (summary(&e).0.as_str(), summary(&e).1.as_str()),
            ("DELETED", "s1")
        );
        assert!(summary(&e).2 > rv_of(&back));
        w.expect_quiet(Duration::from_millis(300)).await;

        // Starting from the state, only matching objects are replayed.
        let mut w = open(
            &s,
            &format!("{path}?watch=1&labelSelector={}", enc("app=web")),
        )
        .await;
        let e = w.next_event().await;
        assert_eq!(
            (summary(&e).0.as_str(), summary(&e).1.as_str()),
            ("ADDED", "s2")
        );
        w.expect_quiet(Duration::from_millis(300)).await;
    })
    .await;
}

/// Errors in the request are ordinary HTTP errors, before any stream starts.
#[tokio::test]
async fn bad_watch_requests_are_rejected_up_front() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("bad").await;
        let path = sa_path("bad");
        let cases = [
            (
                "watch=1&labelSelector=app%20in%20(web",
                400,
                "BadRequest",
                "",
            ),
            ("watch=1&fieldSelector=spec.x%3Dy", 400, "BadRequest", ""),
            ("watch=1&resourceVersion=abc", 400, "BadRequest", ""),
            ("watch=1&timeoutSeconds=soon", 400, "BadRequest", ""),
            // Streaming lists need resourceVersionMatch=NotOlderThan, and a match on a watch
            // needs sendInitialEvents.
            (
                "watch=1&sendInitialEvents=true",
                422,
                "Invalid",
                "resourceVersionMatch",
            ),
            (
                "watch=1&sendInitialEvents=false",
                422,
                "Invalid",
                "resourceVersionMatch",
            ),
            (
                "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=1",
                422,
                "Invalid",
                "resourceVersionMatch",
            ),
            (
                "watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=0",
                422,
                "Invalid",
                "resourceVersionMatch",
            ),
        ];
        for (query, code, reason, field) in cases {
            let r = h.get(&format!("{path}?{query}")).await;
            assert_eq!(
                r.code(),
                code,
                "{query}: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert_status(&r, code, reason);
            if !field.is_empty() {
                let v = r.json();
                assert_eq!(v["details"]["kind"], "ListOptions", "{query}: {v}");
                let causes = v["details"]["causes"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                assert!(causes.iter().any(|c| c["field"] == field), "{query}: {v}");
            }
        }
    })
    .await;
}

#[tokio::test]
async fn bookmarks_carry_only_a_resource_version() {
    within(LIMIT, async {
        let s = TestServer::start_with(&["--watch-bookmark-interval", "100ms"]);
        let h = s.http();
        h.create_namespace("bm").await;
        let path = sa_path("bm");
        let start = rv_of(&h.create_sa("bm", "a", Value::Null).await);
        let mut with = open(
            &s,
            &format!("{path}?watch=1&resourceVersion={start}&allowWatchBookmarks=true"),
        )
        .await;
        let mut without = open(&s, &format!("{path}?watch=1&resourceVersion={start}")).await;
        let b = rv_of(&h.create_sa("bm", "b", Value::Null).await);

        let e = with.next_event().await;
        assert_eq!(summary(&e), ("ADDED".into(), "b".into(), b));
        let mut bookmarks = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while bookmarks < 3 {
            assert!(
                Instant::now() < deadline,
                "no bookmarks with a 100ms interval"
            );
            let e = with.next_event().await;
            let rv = assert_bookmark(&e, "ServiceAccount", false);
            assert!(rv >= b, "a bookmark is never behind what was sent: {e}");
            bookmarks += 1;
        }

        // Without allowWatchBookmarks there are none.
        let e = without.next_event().await;
        assert_eq!(summary(&e), ("ADDED".into(), "b".into(), b));
        match without.next_within(Duration::from_secs(1)).await {
            Next::Idle => {}
            other => panic!("nothing was asked for, got {other:?}"),
        }

        // Namespaces get bookmarks of their own kind.
        let now = list_rv(&h.get_ok("/api/v1/namespaces").await);
        let mut ns = open(
            &s,
            &format!("/api/v1/namespaces?watch=1&resourceVersion={now}&allowWatchBookmarks=true"),
        )
        .await;
        let e = ns.next_event().await;
        assert_bookmark(&e, "Namespace", false);
    })
    .await;
}

/// sendInitialEvents=true: synthetic ADDED for every object, a BOOKMARK annotated
/// initial-events-end at a version covering them, then the changes.
#[tokio::test]
async fn streaming_list() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("sl").await;
        let path = sa_path("sl");
        let mut want = BTreeMap::new();
        for i in 0..5 {
            let o = h.create_sa("sl", &format!("i{i}"), Value::Null).await;
            want.insert(format!("i{i}"), rv_of(&o));
        }
        assert_eq!(h.delete(&format!("{path}/i4")).await.code(), 200);
        // The newest write anywhere before the requests: a consistent read covers it.
        let last = rv_of(&h.create_namespace("unrelated").await);

        let base = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
        let created: BTreeMap<String, u64> = want.clone();
        want.remove("i4");
        for (n, rv_param) in ["", "&resourceVersion=", "&resourceVersion=0", "&resourceVersion=RV"]
            .into_iter()
            .enumerate()
        {
            // Not older than the newest write: the state after every write above.
            let rv_param = rv_param.replace("RV", &last.to_string());
            let any = rv_param.ends_with("=0");
            let query = format!("{base}{rv_param}");
            let mut w = open(&s, &format!("{path}?{query}")).await;
            let mut initial = BTreeMap::new();
            let bookmark = loop {
                let e = w.next_event().await;
                assert_event_shape(&e, "ServiceAccount");
                if e["type"] == "BOOKMARK" {
                    break e;
                }
                let (t, name, rv) = summary(&e);
                assert_eq!(t, "ADDED", "{query}: {e}");
                assert!(initial.insert(name, rv).is_none(), "{query}: twice: {e}");
            };
            let at = assert_bookmark(&bookmark, "ServiceAccount", true);
            for (name, rv) in &initial {
                assert!(at >= *rv, "{query}: the bookmark covers every listed object");
                assert_eq!(created.get(name), Some(rv), "{query}: {name} at {rv}");
            }
            // "Any" may serve an older state (checked above to be made of real versions); the
            // others are at least as new as the newest write.
            if !(any && at < last) {
                assert!(at >= last, "{query}: the state is at least as new as asked");
                assert_eq!(initial, want, "{query}");
            }
            let name = format!("new{n}");
            let o = h.create_sa("sl", &name, Value::Null).await;
            let e = w.next_change().await;
            assert_eq!(summary(&e), ("ADDED".into(), name.clone(), rv_of(&o)), "{query}");
            assert!(rv_of(&o) > at);
            assert_eq!(h.delete(&format!("{path}/{name}")).await.code(), 200);
            assert_eq!(event_type(&w.next_change().await), "DELETED");
        }

        // sendInitialEvents=false with NotOlderThan: no initial events, changes from then on.
        let now = list_rv(&h.get_ok(&path).await);
        let mut w = open(
            &s,
            &format!(
                "{path}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&resourceVersion={now}"
            ),
        )
        .await;
        let o = h.create_sa("sl", "late", Value::Null).await;
        assert_eq!(
            summary(&w.next_change().await),
            ("ADDED".into(), "late".into(), rv_of(&o))
        );
    })
    .await;
}

/// What one writer task did, in the order the server acknowledged it.
#[derive(Debug, Clone)]
enum Write {
    Created(String, u64),
    Modified(String, u64),
    /// A DELETE answers with the last state; the deletion's own version is only in the watch.
    Deleted(String),
}

/// Creates, updates and deletes `rounds` objects named `w{w}-{i}`; every request must succeed.
async fn churn(h: Http, ns: String, w: usize, rounds: usize, done: Arc<AtomicUsize>) -> Vec<Write> {
    let path = sa_path(&ns);
    let mut log = Vec::new();
    for i in 0..rounds {
        let name = format!("w{w}-{i:03}");
        let o = h
            .create_sa(&ns, &name, json!({"writer": w.to_string()}))
            .await;
        log.push(Write::Created(name.clone(), rv_of(&o)));
        done.fetch_add(1, Ordering::SeqCst);
        let r = h
            .patch_merge(
                &format!("{path}/{name}"),
                &json!({"metadata": {"labels": {"round": i.to_string()}}}),
            )
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        log.push(Write::Modified(name.clone(), rv_of(&r.json())));
        done.fetch_add(1, Ordering::SeqCst);
        if i % 2 == 0 {
            let r = h.delete(&format!("{path}/{name}")).await;
            assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
            log.push(Write::Deleted(name));
            done.fetch_add(1, Ordering::SeqCst);
        }
    }
    log
}

/// Reads a watch until the ADDED event of `sentinel`, plus (when `bookmark_after` is set) until a
/// bookmark at or past it.
async fn read_until(mut w: WatchStream, sentinel: &str, bookmark_after: bool) -> Vec<Value> {
    let mut events = Vec::new();
    let mut sentinel_rv = None;
    loop {
        let e = w.next_event_within(Duration::from_secs(30)).await;
        if let Some(at) = sentinel_rv {
            if e["type"] == "BOOKMARK" && rv_of(&e["object"]) >= at {
                events.push(e);
                return events;
            }
        }
        if e["type"] == "ADDED" && name_of(&e["object"]) == sentinel {
            sentinel_rv = Some(rv_of(&e["object"]));
            events.push(e);
            if !bookmark_after {
                return events;
            }
            continue;
        }
        events.push(e);
    }
}

/// The named watch guarantees (etcd robustness style) with four concurrent writers: ordered, no
/// gaps, no duplicates, resumable from any delivered version, bookmarks never ahead of events,
/// and a list-then-watch that reconstructs the final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guarantees_under_concurrent_writers() {
    within(LIMIT, async {
        let s = TestServer::start_with(&[
            "--watch-bookmark-interval",
            "100ms",
            "--watch-cache-size",
            "10000",
        ]);
        let h = s.http();
        let start = rv_of(&h.create_namespace("g").await);
        let path = sa_path("g");
        let plain = open(&s, &format!("{path}?watch=1&resourceVersion={start}")).await;
        let with_bookmarks = open(
            &s,
            &format!("{path}?watch=1&resourceVersion={start}&allowWatchBookmarks=true"),
        )
        .await;
        let plain = tokio::spawn(read_until(plain, "zz-sentinel", false));
        let with_bookmarks = tokio::spawn(read_until(with_bookmarks, "zz-sentinel", true));

        let done = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..4)
            .map(|w| tokio::spawn(churn(h.clone(), "g".into(), w, 80, done.clone())))
            .collect();
        // A watch that starts from the current state while the writers are busy.
        while done.load(Ordering::SeqCst) < 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let from_state = open(&s, &format!("{path}?watch=1")).await;
        let from_state = tokio::spawn(read_until(from_state, "zz-sentinel", false));

        let mut logs = Vec::new();
        for w in writers {
            logs.push(w.await.expect("writer"));
        }
        let sentinel = rv_of(&h.create_sa("g", "zz-sentinel", Value::Null).await);
        let plain = plain.await.expect("reader");
        let with_bookmarks = with_bookmarks.await.expect("reader");
        let from_state = from_state.await.expect("reader");

        // Every event of the plain watch, in order.
        let seq: Vec<(String, String, u64)> = plain.iter().map(summary).collect();
        for e in &plain {
            assert_event_shape(e, "ServiceAccount");
        }
        for pair in seq.windows(2) {
            assert!(
                pair[0].2 < pair[1].2,
                "resourceVersions must strictly increase: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
        assert!(seq[0].2 > start);
        assert_eq!(
            seq.last().unwrap(),
            &("ADDED".into(), "zz-sentinel".into(), sentinel)
        );

        // No gaps, no extras: every acknowledged write is there as the right event.
        let by_rv: BTreeMap<u64, (String, String)> = seq
            .iter()
            .map(|(t, n, rv)| (*rv, (t.clone(), n.clone())))
            .collect();
        let mut expected_count = 1; // the sentinel
        let mut deleted = BTreeSet::new();
        for log in &logs {
            let mut last_rv_of_name = BTreeMap::new();
            for write in log {
                expected_count += 1;
                match write {
                    Write::Created(name, rv) | Write::Modified(name, rv) => {
                        let t = if matches!(write, Write::Created(..)) {
                            "ADDED"
                        } else {
                            "MODIFIED"
                        };
                        assert_eq!(
                            by_rv.get(rv),
                            Some(&(t.to_string(), name.clone())),
                            "acknowledged write {write:?} is missing from the watch"
                        );
                        last_rv_of_name.insert(name.clone(), *rv);
                    }
                    Write::Deleted(name) => {
                        let del: Vec<_> = seq
                            .iter()
                            .filter(|(t, n, _)| t == "DELETED" && n == name)
                            .collect();
                        assert_eq!(del.len(), 1, "one DELETED for {name}: {del:?}");
                        assert!(del[0].2 > last_rv_of_name[name]);
                        deleted.insert(name.clone());
                    }
                }
            }
        }
        assert_eq!(
            seq.len(),
            expected_count,
            "no events beyond the acknowledged writes"
        );

        // The same sequence with bookmarks interleaved; no event at or below a bookmark already
        // received.
        let mut bookmark_at = 0;
        let mut bookmarks = 0;
        let mut changes = Vec::new();
        for e in &with_bookmarks {
            if e["type"] == "BOOKMARK" {
                let rv = assert_bookmark(e, "ServiceAccount", false);
                assert!(
                    rv >= bookmark_at,
                    "bookmarks go backwards: {rv} after {bookmark_at}"
                );
                bookmark_at = rv;
                bookmarks += 1;
            } else {
                let item = summary(e);
                assert!(
                    item.2 > bookmark_at,
                    "{item:?} arrived after a bookmark at {bookmark_at}"
                );
                changes.push(item);
            }
        }
        assert!(
            bookmarks >= 1,
            "a bookmark at or past the sentinel was awaited"
        );
        assert_eq!(
            changes, seq,
            "the watch with bookmarks saw the same changes"
        );

        // Resuming from a delivered version yields exactly the rest.
        let mid = seq[seq.len() / 2].2;
        let resumed = open(&s, &format!("{path}?watch=1&resourceVersion={mid}")).await;
        let resumed = read_until(resumed, "zz-sentinel", false).await;
        let resumed: Vec<_> = resumed.iter().map(summary).collect();
        let suffix: Vec<_> = seq.iter().filter(|e| e.2 > mid).cloned().collect();
        assert_eq!(resumed, suffix);

        // The watch that started from the state: replaying it gives the final list.
        let mut state: BTreeMap<String, u64> = BTreeMap::new();
        for e in &from_state {
            let (t, name, rv) = summary(e);
            match t.as_str() {
                "ADDED" | "MODIFIED" => {
                    state.insert(name, rv);
                }
                "DELETED" => {
                    assert!(state.remove(&name).is_some(), "DELETED of unknown {name}");
                }
                _ => panic!("unexpected {e}"),
            }
        }
        let list = h.get_ok(&path).await;
        let listed: BTreeMap<String, u64> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (name_of(i).to_string(), rv_of(i)))
            // The watches leave the default ServiceAccount out (see `open`).
            .filter(|(name, _)| name != "default")
            .collect();
        assert_eq!(
            state, listed,
            "list-then-watch from the state ends at the final list"
        );
        assert_eq!(listed.len(), 4 * 40 + 1);
        for name in &deleted {
            assert!(!listed.contains_key(name));
        }
    })
    .await;
}

/// A watcher that does not read is cut off once its buffer fills: the writers and the other
/// watchers carry on, and the slow one finds an ERROR 410 after what it had been sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_watcher_is_cut_off_with_410() {
    within(LIMIT, async {
        let s = TestServer::start_with(&["--watch-buffer-size", "16"]);
        let h = s.http();
        let start = rv_of(&h.create_namespace("slow").await);
        let path = format!("{}?watch=1&resourceVersion={start}", sa_path("slow"));
        let slow = WatchStream::open(
            &s.addr,
            &own(&path),
            WatchOptions {
                recv_buffer: Some(4096),
                ..WatchOptions::default()
            },
        )
        .await;
        assert_eq!(slow.status, 200);
        let fast = open(&s, &path).await;

        // 16 KiB per event: far more in total than the socket buffers between the server and
        // a client that does not read.
        const WRITERS: usize = 2;
        const OBJECTS: usize = 800;
        // The writers never run more than this many events ahead of the reading watcher, so a
        // scheduling hiccup cannot make it lag by the 16 events that would end it as well.
        const MAX_LAG: usize = 8;
        let (progress, progress_rx) = tokio::sync::watch::channel(0usize);
        let fast = tokio::spawn(async move {
            let mut fast = fast;
            let mut got = Vec::new();
            while got.len() < OBJECTS {
                let e = fast.next_event_within(Duration::from_secs(30)).await;
                assert_ne!(
                    e["type"], "ERROR",
                    "the reading watcher was cut off too: {e}"
                );
                got.push(summary(&e));
                progress.send_replace(got.len());
            }
            got
        });
        let filler = "x".repeat(16 * 1024);
        let sent = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let h = h.clone();
                let filler = filler.clone();
                let sent = sent.clone();
                let mut progress = progress_rx.clone();
                tokio::spawn(async move {
                    let mut rvs = Vec::new();
                    for i in 0..OBJECTS / WRITERS {
                        let target = sent.load(Ordering::SeqCst).saturating_sub(MAX_LAG);
                        tokio::time::timeout(
                            Duration::from_secs(30),
                            progress.wait_for(|n| *n >= target),
                        )
                        .await
                        .expect("the reading watcher stopped receiving")
                        .expect("the reading watcher's task ended");
                        let r = h
                            .post_json(
                                &sa_path("slow"),
                                &json!({"metadata": {
                                    "name": format!("w{w}-{i:04}"),
                                    "annotations": {"filler": filler},
                                }}),
                            )
                            .await;
                        assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
                        sent.fetch_add(1, Ordering::SeqCst);
                        rvs.push(rv_of(&r.json()));
                    }
                    rvs
                })
            })
            .collect();
        let mut acked = BTreeSet::new();
        for w in writers {
            acked.extend(w.await.expect("writer"));
        }
        assert_eq!(acked.len(), OBJECTS);
        let fast = fast.await.expect("fast reader");
        let fast_rvs: BTreeSet<u64> = fast.iter().map(|e| e.2).collect();
        assert_eq!(fast_rvs, acked, "the reading watcher got every event");
        assert!(fast.iter().all(|e| e.0 == "ADDED"));

        let mut slow = slow;
        let events = slow.until_end(Duration::from_secs(30)).await;
        let (last, delivered) = events.split_last().expect("the slow watcher got something");
        assert_eq!(
            last["type"], "ERROR",
            "the slow watcher's stream ends with an ERROR"
        );
        assert_status_value(&last["object"], 410, "Expired");
        let delivered: Vec<_> = delivered.iter().map(summary).collect();
        assert!(
            delivered.len() < OBJECTS,
            "the slow watcher was cut off before the end"
        );
        assert_eq!(
            delivered[..],
            fast[..delivered.len()],
            "what the slow watcher got is a prefix of the stream, in order"
        );
    })
    .await;
}

/// Writes before a restart can be watched from a version noted before it, without a 410.
async fn watch_across_restart(graceful: bool) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut s = TestServer::start_in(tmp.path(), &[]);
    let h = s.http();
    h.create_namespace("rs").await;
    let path = sa_path("rs");
    h.create_sa("rs", "a", Value::Null).await;
    let noted = rv_of(&h.create_sa("rs", "b", Value::Null).await);
    let c = rv_of(&h.create_sa("rs", "c", Value::Null).await);
    let r = h
        .patch_merge(
            &format!("{path}/a"),
            &json!({"metadata": {"labels": {"v": "2"}}}),
        )
        .await;
    let a2 = rv_of(&r.json());
    assert_eq!(h.delete(&format!("{path}/b")).await.code(), 200);
    let d = rv_of(&h.create_sa("rs", "d", Value::Null).await);
    if graceful {
        assert!(s.terminate(), "SIGTERM ends the server cleanly");
    } else {
        s.kill();
    }

    let s = TestServer::start_in(tmp.path(), &[]);
    let h = s.http();
    let mut w = open(&s, &format!("{path}?watch=1&resourceVersion={noted}")).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        let e = w.next_event().await;
        assert_event_shape(&e, "ServiceAccount");
        got.push(summary(&e));
    }
    assert_eq!(got[0], ("ADDED".into(), "c".into(), c));
    assert_eq!(got[1], ("MODIFIED".into(), "a".into(), a2));
    assert_eq!((got[2].0.as_str(), got[2].1.as_str()), ("DELETED", "b"));
    assert!(a2 < got[2].2 && got[2].2 < d);
    assert_eq!(got[3], ("ADDED".into(), "d".into(), d));
    let e = rv_of(&h.create_sa("rs", "e", Value::Null).await);
    assert!(e > d);
    assert_eq!(
        summary(&w.next_event().await),
        ("ADDED".into(), "e".into(), e)
    );
}

#[tokio::test]
async fn watch_resumes_across_a_sigterm_restart() {
    within(LIMIT, watch_across_restart(true)).await;
}

#[tokio::test]
async fn watch_resumes_across_a_sigkill_restart() {
    within(LIMIT, watch_across_restart(false)).await;
}

/// The watch cache encodes each event once for all JSON watchers (`/metrics`).
#[tokio::test]
async fn one_encode_per_event_for_many_watchers() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("enc").await;
        // Its default ServiceAccount is made (and encoded) before the count starts.
        h.wait_default_sa("enc").await;
        let start = rv_of(&h.get_ok(&sa_path("enc")).await);
        let labels = [
            ("group", ""),
            ("resource", "serviceaccounts"),
            ("encoding", "json"),
        ];
        let name = "strata_watch_cache_events_encoded_total";
        let mut watchers = Vec::new();
        for _ in 0..5 {
            watchers.push(
                open(
                    &s,
                    &format!("{}?watch=1&resourceVersion={start}", sa_path("enc")),
                )
                .await,
            );
        }
        let metrics = s.get("/metrics").await;
        assert_eq!(metrics.code(), 200);
        assert!(
            metrics.header("content-type").starts_with("text/plain"),
            "{:?}",
            metrics.header("content-type")
        );
        let text = String::from_utf8_lossy(&metrics.body).to_string();
        // A labelled counter may be absent until its first increment.
        let before = metric_value(&text, name, &labels).unwrap_or(0.0);

        const N: usize = 20;
        let mut rvs = Vec::new();
        for i in 0..N {
            rvs.push(rv_of(
                &h.create_sa("enc", &format!("e{i}"), Value::Null).await,
            ));
        }
        for w in &mut watchers {
            let mut got = Vec::new();
            for _ in 0..N {
                got.push(rv_of(&w.next_event().await["object"]));
            }
            assert_eq!(got, rvs, "every watcher gets every event");
        }
        let text = String::from_utf8_lossy(&s.get("/metrics").await.body).to_string();
        let after = metric_value(&text, name, &labels)
            .unwrap_or_else(|| panic!("no {name} sample with {labels:?} in:\n{text}"));
        assert_eq!(
            after - before,
            N as f64,
            "{N} events for 5 watchers are encoded {N} times"
        );
    })
    .await;
}
