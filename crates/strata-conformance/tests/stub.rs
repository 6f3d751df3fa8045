//! The checker against a server that is not Strata: a small hyper stub on 127.0.0.1 that keeps
//! ServiceAccounts in memory and gets three rules of §4.2 wrong on purpose. Exactly those
//! checks fail, each with a message saying what was wrong and the exchange that showed it; the
//! run still deletes its namespace; and an unreachable server stops the run with a reason.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use strata_conformance::{Options, Outcome};

/// What the stub holds and saw.
#[derive(Default)]
struct State {
    /// (namespace, name) -> object.
    objects: BTreeMap<(String, String), Value>,
    namespaces: Vec<String>,
    deleted_namespaces: Vec<String>,
    revision: u64,
}

type Shared = Arc<Mutex<State>>;

fn reply(code: u16, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Response<Full<Bytes>> {
    reply(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "reason": reason, "message": message, "code": code}),
    )
}

fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| {
            let v = v
                .replace("%3D", "=")
                .replace("%2C", ",")
                .replace("%2F", "/");
            v.replace("%2E", ".")
        })
    })
}

fn selected(object: &Value, selector: Option<&str>) -> bool {
    selector.is_none_or(|s| {
        s.split(',')
            .filter(|t| !t.is_empty())
            .all(|term| match term.split_once('=') {
                Some((k, v)) => object["metadata"]["labels"][k] == v,
                None => false,
            })
    })
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

async fn handle(
    state: Shared,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let input: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let selector = query_value(&query, "labelSelector");
    let mut s = state.lock().unwrap();
    s.revision += 1;
    let revision = s.revision.to_string();
    let list = |items: Vec<Value>, revision: &str| {
        reply(
            200,
            &json!({"kind": "ServiceAccountList", "apiVersion": "v1",
                           "metadata": {"resourceVersion": revision}, "items": items}),
        )
    };
    let resp = match (method, segments.as_slice()) {
        (Method::POST, ["api", "v1", "namespaces"]) => {
            let name = input["metadata"]["name"].as_str().unwrap_or("").to_string();
            s.namespaces.push(name);
            reply(201, &input)
        }
        (Method::DELETE, ["api", "v1", "namespaces", ns]) => {
            s.deleted_namespaces.push(ns.to_string());
            reply(
                200,
                &json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns}}),
            )
        }
        (Method::GET, ["api", "v1", "serviceaccounts"]) => {
            let items = s
                .objects
                .values()
                .filter(|o| selected(o, selector.as_deref()))
                .cloned()
                .collect();
            list(items, &revision)
        }
        (Method::GET, ["api", "v1", "namespaces", ns, "serviceaccounts"]) => {
            let items = s
                .objects
                .iter()
                .filter(|((n, _), o)| n == ns && selected(o, selector.as_deref()))
                .map(|(_, o)| o.clone())
                .collect();
            list(items, &revision)
        }
        (Method::POST, ["api", "v1", "namespaces", ns, "serviceaccounts"]) => {
            let name = input["metadata"]["name"].as_str().unwrap_or("").to_string();
            let key = (ns.to_string(), name.clone());
            match s.objects.entry(key) {
                std::collections::btree_map::Entry::Occupied(_) => status(
                    409,
                    "AlreadyExists",
                    &format!("serviceaccounts \"{name}\" already exists"),
                ),
                std::collections::btree_map::Entry::Vacant(slot) => {
                    let mut o = input.clone();
                    o["kind"] = json!("ServiceAccount");
                    o["apiVersion"] = json!("v1");
                    o["metadata"]["namespace"] = json!(ns);
                    o["metadata"]["uid"] = json!(format!("uid-{revision}"));
                    o["metadata"]["resourceVersion"] = json!(revision);
                    o["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
                    slot.insert(o.clone());
                    reply(201, &o)
                }
            }
        }
        // Wrong on purpose: deletecollection answers 204 without a body and deletes nothing.
        (Method::DELETE, ["api", "v1", "namespaces", _, "serviceaccounts"]) => Response::builder()
            .status(204)
            .body(Full::new(Bytes::new()))
            .unwrap(),
        (method, ["api", "v1", "namespaces", ns, "serviceaccounts", name]) => {
            let key = (ns.to_string(), name.to_string());
            match (method, s.objects.get(&key).cloned()) {
                // Wrong on purpose: "not found" as plain text instead of a Status.
                (_, None) => Response::builder()
                    .status(404)
                    .header("Content-Type", "text/plain")
                    .body(Full::new(Bytes::from_static(b"not found")))
                    .unwrap(),
                // Wrong on purpose: pretty=true is ignored (reply is always compact).
                (Method::GET, Some(o)) => reply(200, &o),
                (Method::PUT, Some(_)) => {
                    let mut o = input.clone();
                    o["metadata"]["resourceVersion"] = json!(revision);
                    s.objects.insert(key, o.clone());
                    reply(200, &o)
                }
                (Method::PATCH, Some(mut o)) => {
                    merge(&mut o, &input);
                    o["metadata"]["resourceVersion"] = json!(revision);
                    s.objects.insert(key, o.clone());
                    reply(200, &o)
                }
                (Method::DELETE, Some(o)) => {
                    s.objects.remove(&key);
                    reply(200, &o)
                }
                _ => status(405, "MethodNotAllowed", "not here"),
            }
        }
        _ => status(404, "NotFound", "the stub serves ServiceAccounts only"),
    };
    Ok(resp)
}

/// Serves the stub on a free port until the test ends; returns its URL and state.
async fn start_stub() -> (String, Shared) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state: Shared = Arc::default();
    let shared = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let state = shared.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(state.clone(), req));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, state)
}

fn failure(report: &strata_conformance::Report, id: &str) -> (String, String) {
    match &report
        .result(id)
        .unwrap_or_else(|| panic!("{id} ran"))
        .outcome
    {
        Outcome::Failed(f) => (f.message.clone(), f.exchange.clone().unwrap_or_default()),
        other => panic!("{id}: expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_wrong_answers_fail_with_what_was_wrong() {
    let (url, state) = start_stub().await;
    let mut options = Options::new(&url);
    options.only = vec!["serviceaccounts".to_string()];
    let report = strata_conformance::run(&options)
        .await
        .expect("the run starts");
    let tables = report.tables();

    assert_eq!(
        report.failed_ids(),
        ["sa-get-missing", "sa-deletecollection", "sa-pretty"],
        "{tables}"
    );
    assert_eq!(report.passed(), 7, "{tables}");

    let (message, exchange) = failure(&report, "sa-get-missing");
    assert!(
        message.contains("the response body is not JSON"),
        "{message}"
    );
    assert!(
        exchange.contains(&format!(
            "GET /api/v1/namespaces/{}/serviceaccounts/missing-",
            report.namespace
        )),
        "{exchange}"
    );
    assert!(
        exchange.contains("response: 404")
            && exchange.contains("content-type: text/plain")
            && exchange.contains("body: not found"),
        "{exchange}"
    );

    let (message, exchange) = failure(&report, "sa-deletecollection");
    assert_eq!(message, "expected HTTP 200, got 204");
    assert!(
        exchange.contains("DELETE /api/v1/namespaces/") && exchange.contains("labelSelector="),
        "{exchange}"
    );

    let (message, _) = failure(&report, "sa-pretty");
    assert_eq!(message, "the body is not indented");

    // The tables show each failure under its section, with the exchange.
    assert!(
        tables.contains("§4.2 ServiceAccount operations"),
        "{tables}"
    );
    assert!(tables.contains("FAILED   sa-pretty"), "{tables}");
    assert!(
        tables.contains("10 checks: 7 passed, 3 failed, 0 skipped"),
        "{tables}"
    );
    let junit = report.to_junit();
    assert!(
        junit.contains("tests=\"10\" failures=\"3\" skipped=\"0\""),
        "{junit}"
    );

    // The namespace the run created was deleted at the end, failures or not.
    let s = state.lock().unwrap();
    assert_eq!(s.namespaces, std::slice::from_ref(&report.namespace));
    assert_eq!(
        s.deleted_namespaces,
        std::slice::from_ref(&report.namespace)
    );
    assert!(report.namespace.starts_with("conformance-"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_stops_the_run_with_the_reason() {
    // A port nothing listens on: bound, then closed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let error = strata_conformance::run(&Options::new(&url))
        .await
        .unwrap_err();
    assert!(
        error.contains("the request failed") && error.contains("POST /api/v1/namespaces"),
        "{error}"
    );
}
