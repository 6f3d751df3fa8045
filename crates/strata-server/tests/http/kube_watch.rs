//! kube-rs's `watcher` and `reflector` (kube 5, kube-runtime) against the real binary: with the
//! default list-then-watch and with streaming lists, a reflector fed during concurrent churn ends
//! up holding exactly what the server lists. Raw watch semantics are in watch.rs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{within, TestServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Client, Config, ResourceExt};
use serde_json::json;

const NS: &str = "kw";

/// A client for the server, as `kube::Config::new` would build it for a kubeconfig with
/// `server: http://ADDR`.
fn client(s: &TestServer) -> Client {
    let url = format!("http://{}", s.client_addr())
        .parse()
        .expect("cluster url");
    let mut config = Config::new(url);
    config.default_namespace = NS.to_string();
    config.read_timeout = Some(Duration::from_secs(30));
    Client::try_from(config).expect("build the kube client")
}

fn sa(name: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    }
}

/// (name → resourceVersion) of a set of objects.
fn versions<'a>(items: impl Iterator<Item = &'a ServiceAccount>) -> BTreeMap<String, String> {
    items
        .map(|i| (i.name_any(), i.resource_version().unwrap_or_default()))
        .collect()
}

/// One writer: creates, patches and deletes its own objects, and touches the shared seed ones.
async fn churn(api: Api<ServiceAccount>, w: usize, rounds: usize, done: Arc<AtomicUsize>) {
    for i in 0..rounds {
        let name = format!("c{w}-{i:03}");
        api.create(&PostParams::default(), &sa(&name))
            .await
            .expect("create");
        let patch = json!({"metadata": {"labels": {"round": i.to_string()}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        let seed = format!("seed-{}", (w + i) % 10);
        let patch = json!({"metadata": {"annotations": {format!("w{w}"): i.to_string()}}});
        api.patch(&seed, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch a seed");
        if i % 3 != 0 {
            api.delete(&name, &DeleteParams::default())
                .await
                .expect("delete");
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs a reflector with `config` while three writers churn, then checks that its store converges
/// to the server's list with no watch errors and a single initial listing.
async fn reflector_converges(config: watcher::Config) {
    let s = TestServer::start();
    let c = client(&s);
    Api::<Namespace>::all(c.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NS.to_string()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .expect("create the namespace");
    s.http().wait_default_sa(NS).await;
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), NS);
    for i in 0..10 {
        api.create(&PostParams::default(), &sa(&format!("seed-{i}")))
            .await
            .expect("create a seed");
    }

    let done = Arc::new(AtomicUsize::new(0));
    let rounds = 40;
    let writers: Vec<_> = (0..3)
        .map(|w| tokio::spawn(churn(api.clone(), w, rounds, done.clone())))
        .collect();

    // Start the reflector while the writers are busy, so the initial listing races with writes.
    while done.load(Ordering::SeqCst) < 10 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (store, writer) = reflector::store::<ServiceAccount>();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    // The first few errors, for failure messages (copied so no lock is held while panicking).
    let first_errors = |errors: &Mutex<Vec<String>>| -> Vec<String> {
        errors.lock().unwrap().iter().take(3).cloned().collect()
    };
    let inits = Arc::new(AtomicUsize::new(0));
    let stream = reflector(writer, watcher(api.clone(), config)).default_backoff();
    let driver = {
        let errors = errors.clone();
        let inits = inits.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => {
                        inits.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(e) => errors.lock().unwrap().push(e.to_string()),
                }
            }
        })
    };
    tokio::time::timeout(Duration::from_secs(20), store.wait_until_ready())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the reflector never finished its initial listing; errors: {:?}",
                first_errors(&errors)
            )
        })
        .expect("store ready");

    for w in writers {
        w.await.expect("writer");
    }
    let list = api.list(&ListParams::default()).await.expect("list");
    let want = versions(list.items.iter());
    // The seeds, what the writers left, and the namespace's default ServiceAccount.
    assert_eq!(want.len(), 10 + 3 * (rounds / 3 + 1) + 1, "{want:?}");
    assert!(want.contains_key("default"), "{want:?}");

    // The store catches up with the last events shortly after the writes end.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let state = store.state();
        let have = versions(state.iter().map(|a| a.as_ref()));
        if have == want {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| have.get(*k) != Some(v))
                .collect();
            let extra: Vec<_> = have
                .iter()
                .filter(|(k, v)| want.get(*k) != Some(v))
                .collect();
            panic!(
                "the reflector store differs from the server's list\nmissing or stale: {missing:?}\n\
                 extra or stale: {extra:?}\nwatch errors: {:?}",
                first_errors(&errors)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    driver.abort();
    let seen_errors = first_errors(&errors);
    assert!(seen_errors.is_empty(), "watch errors: {seen_errors:?}");
    assert_eq!(
        inits.load(Ordering::SeqCst),
        1,
        "one initial listing, no relist (a relist means the watch failed)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reflector_with_list_then_watch() {
    within(
        Duration::from_secs(90),
        reflector_converges(watcher::Config::default()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reflector_with_streaming_lists() {
    within(
        Duration::from_secs(90),
        reflector_converges(watcher::Config::default().streaming_lists()),
    )
    .await;
}

/// Paging in the initial listing: a small page size makes the watcher follow `continue` tokens
/// while objects change underneath it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reflector_with_small_pages() {
    within(
        Duration::from_secs(90),
        reflector_converges(watcher::Config::default().page_size(3)),
    )
    .await;
}
