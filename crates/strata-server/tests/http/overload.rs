//! Overload: beyond `--max-requests-inflight` a read is answered 429 with `Retry-After` and a
//! Status at once, while health checks, watches and the requests already admitted go on; a
//! request slower than `--request-timeout` is answered 504.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{assert_status, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_beyond_the_inflight_limit_get_429() {
    let s = TestServer::start_with(&["--max-requests-inflight=2"]);
    let h = s.http();
    let list = "/api/v1/namespaces/default/serviceaccounts";
    let rv: u64 = h.get(list).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // Two slow reads hold both slots: a resourceVersion the store has not reached waits
    // (up to 3 s) before its 504.
    let slow = format!(
        "{list}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
        rv + 1_000_000
    );
    let holders: Vec<_> = (0..2)
        .map(|_| {
            let h = h.clone();
            let slow = slow.clone();
            tokio::spawn(async move { h.get(&slow).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let r = h.get(list).await;
    assert_status(&r, 429, "TooManyRequests");
    assert_eq!(r.header("retry-after"), "1");
    let status: Value = r.json();
    assert_eq!(
        status["message"],
        "Too many requests, please try again later."
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    // Health and watches are not counted.
    assert_eq!(h.get("/readyz").await.code(), 200);
    let mut watch = s.watch("/api/v1/namespaces?watch=true").await;
    let first = watch.next_event().await;
    assert_eq!(first["type"], "ADDED");
    // The admitted requests finish as they would have.
    for holder in holders {
        let r = holder.await.unwrap();
        assert_eq!(r.code(), 504, "{}", String::from_utf8_lossy(&r.body));
    }
    // And with the slots free, reads are served again.
    assert_eq!(h.get(list).await.code(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_slower_than_the_request_timeout_gets_504() {
    let s = TestServer::start_with(&["--request-timeout=1s"]);
    let h = s.http();
    let list = "/api/v1/namespaces/default/serviceaccounts";
    let rv: u64 = h.get(list).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let started = Instant::now();
    // Would wait 3 s for a resourceVersion the store has not reached.
    let r = h
        .get(&format!(
            "{list}?resourceVersion={}&resourceVersionMatch=NotOlderThan",
            rv + 1_000_000
        ))
        .await;
    let took = started.elapsed();
    assert_status(&r, 504, "Timeout");
    assert_eq!(
        r.json()["message"],
        "Timeout: request did not complete within requested timeout - context deadline exceeded"
    );
    assert!(
        took < Duration::from_millis(2500),
        "answered at the timeout, took {took:?}"
    );
    // Watches are long-running: they outlive the timeout.
    let mut watch = s.watch("/api/v1/namespaces?watch=true").await;
    watch.next_event().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = h
        .post_json(
            "/api/v1/namespaces",
            &serde_json::json!({"metadata": {"name": "later"}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    let mut seen = false;
    for _ in 0..10 {
        let event = watch.next_event().await;
        if event["object"]["metadata"]["name"] == "later" {
            seen = true;
            break;
        }
    }
    assert!(seen, "the watch still delivers after the timeout");
}
