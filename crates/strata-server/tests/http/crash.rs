//! Durability: every write acknowledged before a SIGKILL is there after a restart.

use std::sync::Arc;
use std::time::Duration;

use crate::common::TestServer;
use serde_json::json;
use tokio::sync::Mutex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(tmp.path(), &[]);
    let server_ref = Arc::new(server_handle(&server));
    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..16 {
        let acked = acked.clone();
        let s = server_ref.clone();
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let name = format!("w{w}-{i}");
                let body = serde_json::to_vec(&json!({"metadata": {"name": name}})).unwrap();
                let Ok(r) = s.post(&body).await else { break };
                if r.0 != 201 {
                    break;
                }
                acked.lock().await.push((name, r.1));
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill();
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().await.clone();
    assert!(
        acked.len() > 16,
        "writers made progress before the kill ({})",
        acked.len()
    );
    let max_rv = acked.iter().map(|(_, rv)| *rv).max().unwrap();

    let server = TestServer::start_in(tmp.path(), &[]);
    let list = server
        .get("/api/v1/namespaces/default/serviceaccounts")
        .await
        .json();
    let stored: std::collections::HashMap<String, u64> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap().to_string(),
                i["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap(),
            )
        })
        .collect();
    for (name, rv) in &acked {
        assert_eq!(
            stored.get(name),
            Some(rv),
            "acknowledged {name} at {rv} was lost"
        );
    }
    let r = server
        .post_json(
            "/api/v1/namespaces/default/serviceaccounts",
            &json!({"metadata": {"name": "after-crash"}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    let rv: u64 = r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv > max_rv, "revisions keep increasing after the restart");
}

/// A minimal client usable from many tasks while the test keeps the server handle to kill it.
struct Handle {
    url: String,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
}

fn server_handle(s: &TestServer) -> Handle {
    Handle {
        url: s.url("/api/v1/namespaces/default/serviceaccounts"),
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    }
}

impl Handle {
    async fn post(&self, body: &[u8]) -> Result<(u16, u64), ()> {
        use http_body_util::BodyExt;
        let req = hyper::Request::post(&self.url)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
                body,
            )))
            .map_err(|_| ())?;
        let resp = self.client.request(req).await.map_err(|_| ())?;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|_| ())?.to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|_| ())?;
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Ok((code, rv))
    }
}
