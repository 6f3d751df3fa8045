//! The Rust `kube` client (kube 5 with k8s-openapi types) against the real binary: ServiceAccount
//! and Namespace create/get/list/replace/merge-patch/delete, conflicts, NotFound and list paging.

use std::time::Duration;

use crate::common::{TestServer, NAMESPACE_DEFAULTS, STARTING_NAMESPACES};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Preconditions;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::{Client, Config, ResourceExt};
use serde_json::json;

/// A client for the server, as `kube::Config::new` would build it for a kubeconfig with
/// `server: http://ADDR` and namespace `default`.
fn client(s: &TestServer) -> Client {
    let url = format!("http://{}", s.client_addr())
        .parse()
        .expect("cluster url");
    let mut config = Config::new(url);
    config.default_namespace = "default".to_string();
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

fn ns(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// The API error (a decoded `Status`) of a failed call; panics on success or on other errors.
fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error (Status), got {other:?}"),
    }
}

fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    items.iter().map(|i| i.name_any()).collect()
}

/// [`names`] without what the server keeps in every namespace (the `default` ServiceAccount).
fn own_names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    names(items)
        .into_iter()
        .filter(|n| !NAMESPACE_DEFAULTS.contains(&n.as_str()))
        .collect()
}

#[tokio::test]
async fn service_account_crud() {
    let s = TestServer::start();
    let sas: Api<ServiceAccount> = Api::default_namespaced(client(&s));

    let created = sas
        .create(&PostParams::default(), &sa("robot"))
        .await
        .unwrap();
    assert_eq!(created.name_any(), "robot");
    assert_eq!(created.namespace().as_deref(), Some("default"));
    let uid = created.uid().expect("uid is set");
    assert!(!uid.is_empty());
    let rv1 = created.resource_version().expect("resourceVersion is set");
    assert!(created.creation_timestamp().is_some());

    let got = sas.get("robot").await.unwrap();
    assert_eq!(got, created);
    assert_eq!(sas.get_opt("robot").await.unwrap(), Some(created.clone()));

    let list = sas.list(&ListParams::default()).await.unwrap();
    assert_eq!(own_names(&list.items), ["robot"]);
    assert!(list.metadata.resource_version.is_some());

    // Replace with the current resourceVersion.
    let mut changed = got.clone();
    changed.automount_service_account_token = Some(false);
    let replaced = sas
        .replace("robot", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.automount_service_account_token, Some(false));
    assert_eq!(replaced.uid().as_deref(), Some(uid.as_str()));
    let rv2 = replaced.resource_version().unwrap();
    assert_ne!(rv2, rv1);

    // Replace with the stale resourceVersion: 409 Conflict.
    let status = api_error(sas.replace("robot", &PostParams::default(), &changed).await);
    assert_eq!(status.code, 409, "{status:?}");
    assert_eq!(status.reason, "Conflict", "{status:?}");
    assert!(status.is_conflict());
    assert!(status.is_failure());
    // Nothing was written by the failed replace.
    assert_eq!(
        sas.get("robot").await.unwrap().resource_version().unwrap(),
        rv2
    );

    // Merge patch.
    let patch =
        json!({"metadata": {"labels": {"team": "a"}}, "automountServiceAccountToken": true});
    let patched = sas
        .patch("robot", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(patched.automount_service_account_token, Some(true));
    assert_ne!(patched.resource_version().unwrap(), rv2);
    // A merge patch with `null` removes the key.
    let with_manager = PatchParams {
        field_manager: Some("kube-test".to_string()),
        ..PatchParams::default()
    };
    let patch = json!({"metadata": {"labels": {"team": null}}});
    let patched = sas
        .patch("robot", &with_manager, &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(!patched.labels().contains_key("team"), "{patched:?}");

    // Delete answers with the object.
    let deleted = sas.delete("robot", &DeleteParams::default()).await.unwrap();
    let deleted = deleted
        .left()
        .expect("DELETE returns the object (Either::Left)");
    assert_eq!(deleted.name_any(), "robot");
    assert_eq!(deleted.uid().as_deref(), Some(uid.as_str()));

    let status = api_error(sas.get("robot").await);
    assert_eq!(status.code, 404, "{status:?}");
    assert_eq!(status.reason, "NotFound", "{status:?}");
    assert!(status.is_not_found());
    assert_eq!(sas.get_opt("robot").await.unwrap(), None);
    let status = api_error(sas.delete("robot", &DeleteParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (404, "NotFound"),
        "{status:?}"
    );

    // The name is free again, with a new uid.
    let again = sas
        .create(&PostParams::default(), &sa("robot"))
        .await
        .unwrap();
    assert_ne!(again.uid().as_deref(), Some(uid.as_str()));
}

#[tokio::test]
async fn create_errors_and_dry_run() {
    let s = TestServer::start();
    let sas: Api<ServiceAccount> = Api::default_namespaced(client(&s));
    sas.create(&PostParams::default(), &sa("dup"))
        .await
        .unwrap();

    let status = api_error(sas.create(&PostParams::default(), &sa("dup")).await);
    assert_eq!(status.code, 409, "{status:?}");
    assert_eq!(status.reason, "AlreadyExists", "{status:?}");
    assert!(status.is_already_exists());

    let status = api_error(sas.create(&PostParams::default(), &sa("Not_Valid")).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{status:?}"
    );

    let missing: Api<ServiceAccount> = Api::namespaced(client(&s), "no-such-namespace");
    let status = api_error(missing.create(&PostParams::default(), &sa("x")).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (404, "NotFound"),
        "{status:?}"
    );

    let status = api_error(sas.get("nope").await);
    assert_eq!(status.code, 404, "{status:?}");
    assert_eq!(status.reason, "NotFound", "{status:?}");
    assert_eq!(status.message, "serviceaccounts \"nope\" not found");
    let details = status.details.expect("details");
    assert_eq!(details.name, "nope");
    assert_eq!(details.kind, "serviceaccounts");

    let pp = PostParams {
        dry_run: true,
        field_manager: Some("kube-test".to_string()),
    };
    let ghost = sas.create(&pp, &sa("ghost")).await.unwrap();
    assert_eq!(ghost.name_any(), "ghost");
    assert_eq!(
        sas.get_opt("ghost").await.unwrap(),
        None,
        "dry run stores nothing"
    );
}

#[tokio::test]
async fn list_pages_through_continue() {
    let s = TestServer::start();
    let sas: Api<ServiceAccount> = Api::default_namespaced(client(&s));
    let want: Vec<String> = (0..5).map(|i| format!("sa-{i}")).collect();
    for name in &want {
        sas.create(&PostParams::default(), &sa(name)).await.unwrap();
    }
    // The namespace's default ServiceAccount is listed first, so six in three pages.
    s.http().wait_default_sa("default").await;
    let want: Vec<String> = std::iter::once("default".to_string()).chain(want).collect();

    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(2);
    let mut pages = 0;
    let mut first_rv = None;
    loop {
        let page = sas.list(&lp).await.unwrap();
        pages += 1;
        assert!(
            page.items.len() <= 2,
            "page {pages} has {} items",
            page.items.len()
        );
        let rv = page
            .metadata
            .resource_version
            .clone()
            .expect("list resourceVersion");
        // All chunks come from one snapshot.
        assert_eq!(first_rv.get_or_insert(rv.clone()), &rv);
        seen.extend(names(&page.items));
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => {
                let remaining = page
                    .metadata
                    .remaining_item_count
                    .expect("remainingItemCount");
                assert_eq!(remaining as usize, want.len() - seen.len());
                // Writes between chunks do not show up in later chunks.
                if pages == 1 {
                    sas.create(&PostParams::default(), &sa("sa-late"))
                        .await
                        .unwrap();
                }
                lp = ListParams::default().limit(2).continue_token(token);
            }
            _ => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, want);

    // A fresh list sees the late one.
    let all = sas.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 7);
    assert!(all.metadata.continue_.as_deref().unwrap_or("").is_empty());
}

#[tokio::test]
async fn list_across_namespaces() {
    let s = TestServer::start();
    let c = client(&s);
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(&PostParams::default(), &ns("other"))
        .await
        .unwrap();
    let in_default: Api<ServiceAccount> = Api::default_namespaced(c.clone());
    let in_other: Api<ServiceAccount> = Api::namespaced(c.clone(), "other");
    in_default
        .create(&PostParams::default(), &sa("a"))
        .await
        .unwrap();
    in_other
        .create(&PostParams::default(), &sa("b"))
        .await
        .unwrap();
    let created_c = in_other
        .create(&PostParams::default(), &sa("c"))
        .await
        .unwrap();
    assert_eq!(created_c.namespace().as_deref(), Some("other"));

    // Each of the five namespaces also has its default ServiceAccount.
    let h = s.http();
    for ns in STARTING_NAMESPACES.into_iter().chain(["other"]) {
        h.wait_default_sa(ns).await;
    }
    let all: Api<ServiceAccount> = Api::all(c.clone());
    let list = all.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 8);
    let mut pairs: Vec<(String, String)> = list
        .items
        .iter()
        .map(|i| (i.namespace().unwrap_or_default(), i.name_any()))
        .filter(|(_, name)| !NAMESPACE_DEFAULTS.contains(&name.as_str()))
        .collect();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            ("default".to_string(), "a".to_string()),
            ("other".to_string(), "b".to_string()),
            ("other".to_string(), "c".to_string()),
        ]
    );
    // Paging works across namespaces too.
    let page = all.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.expect("continue token");
    let rest = all
        .list(&ListParams::default().limit(6).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 6);
    assert!(rest.metadata.continue_.as_deref().unwrap_or("").is_empty());

    assert_eq!(
        own_names(&in_other.list(&ListParams::default()).await.unwrap().items),
        ["b", "c"]
    );
}

#[tokio::test]
async fn namespace_crud() {
    let s = TestServer::start();
    let c = client(&s);
    let namespaces: Api<Namespace> = Api::all(c.clone());

    for name in ["default", "kube-system", "kube-public"] {
        let n = namespaces.get(name).await.unwrap();
        assert_eq!(n.name_any(), name);
    }

    let created = namespaces
        .create(&PostParams::default(), &ns("team-k"))
        .await
        .unwrap();
    assert_eq!(created.name_any(), "team-k");
    assert_eq!(created.namespace(), None);
    let phase = created.status.as_ref().and_then(|st| st.phase.as_deref());
    assert_eq!(phase, Some("Active"));
    assert_eq!(
        created
            .labels()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("team-k")
    );

    let got = namespaces.get("team-k").await.unwrap();
    assert_eq!(got, created);

    let list = namespaces.list(&ListParams::default()).await.unwrap();
    let listed = names(&list.items);
    for name in ["default", "kube-system", "kube-public", "team-k"] {
        assert!(
            listed.iter().any(|n| n == name),
            "{name} missing from {listed:?}"
        );
    }

    let patch = json!({"metadata": {"labels": {"env": "dev"}}});
    let patched = namespaces
        .patch("team-k", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.labels().get("env").map(String::as_str), Some("dev"));

    let mut changed = patched.clone();
    changed
        .labels_mut()
        .insert("tier".to_string(), "x".to_string());
    let replaced = namespaces
        .replace("team-k", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.labels().get("tier").map(String::as_str), Some("x"));
    let status = api_error(
        namespaces
            .replace("team-k", &PostParams::default(), &changed)
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "Conflict"),
        "{status:?}"
    );

    // A service account inside goes with the namespace.
    let inside: Api<ServiceAccount> = Api::namespaced(c.clone(), "team-k");
    inside
        .create(&PostParams::default(), &sa("x"))
        .await
        .unwrap();

    let deleted = namespaces
        .delete("team-k", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = deleted
        .left()
        .expect("DELETE of a namespace returns the Namespace");
    assert_eq!(deleted.name_any(), "team-k");
    // Kubernetes keeps a namespace `Terminating` until it is finalized; either it is gone already
    // or it is on its way out.
    match namespaces.get_opt("team-k").await.unwrap() {
        None => {}
        Some(n) => assert!(n.metadata.deletion_timestamp.is_some(), "{n:?}"),
    }

    let status = api_error(namespaces.get("never-there").await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (404, "NotFound"),
        "{status:?}"
    );
    assert!(status.is_not_found());

    let status = api_error(namespaces.delete("default", &DeleteParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (403, "Forbidden"),
        "{status:?}"
    );
}

/// A dry-run create goes through the same checks as a real one: an existing name is a 409
/// AlreadyExists, as in Kubernetes.
#[tokio::test]
async fn dry_run_create_of_an_existing_name_conflicts() {
    let s = TestServer::start();
    let sas: Api<ServiceAccount> = Api::default_namespaced(client(&s));
    let existing = sas
        .create(&PostParams::default(), &sa("taken"))
        .await
        .unwrap();
    let pp = PostParams {
        dry_run: true,
        field_manager: None,
    };
    let status = api_error(sas.create(&pp, &sa("taken")).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists"),
        "{status:?}"
    );
    assert_eq!(sas.get("taken").await.unwrap(), existing);
}

/// Every patch type through `kube::Api::patch`, with `PatchParams` (field manager, force, dry
/// run), and server-side apply conflicts as the client sees them.
#[tokio::test]
async fn patch_types_and_server_side_apply() {
    let s = TestServer::start();
    let api: Api<ServiceAccount> = Api::default_namespaced(client(&s));
    let mut first = sa("kp");
    first.secrets = Some(vec![k8s_openapi::api::core::v1::ObjectReference {
        name: Some("s1".into()),
        ..Default::default()
    }]);
    api.create(&PostParams::default(), &first)
        .await
        .expect("create");

    // Strategic: secrets merge on name.
    let p = json!({"secrets": [{"name": "s2"}], "metadata": {"labels": {"a": "1"}}});
    let got = api
        .patch("kp", &PatchParams::default(), &Patch::Strategic(&p))
        .await
        .expect("strategic patch");
    let secrets: Vec<String> = got
        .secrets
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.name)
        .collect();
    // Elements the patch names come first, as Kubernetes orders a merged list.
    assert_eq!(secrets, ["s2", "s1"]);

    // JSON patch.
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"}
    ]))
    .expect("a JSON patch");
    let got = api
        .patch("kp", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .expect("json patch");
    assert_eq!(got.labels()["a"], "2");

    // Dry run changes nothing.
    let p = json!({"metadata": {"labels": {"a": "dry"}}});
    let got = api
        .patch("kp", &PatchParams::default().dry_run(), &Patch::Merge(&p))
        .await
        .expect("dry-run patch");
    assert_eq!(got.labels()["a"], "dry");
    assert_eq!(api.get("kp").await.expect("get").labels()["a"], "2");

    // Apply: creates, then conflicts with another manager, then forces.
    let applied = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "kp-ssa", "labels": {"owner": "one"}}
    });
    let got = api
        .patch(
            "kp-ssa",
            &PatchParams::apply("one"),
            &Patch::Apply(&applied),
        )
        .await
        .expect("apply creates");
    assert_eq!(got.labels()["owner"], "one");
    let fields = got.managed_fields();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].manager.as_deref(), Some("one"));
    assert_eq!(fields[0].operation.as_deref(), Some("Apply"));

    let rival = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "kp-ssa", "labels": {"owner": "two"}}
    });
    let err = api_error(
        api.patch("kp-ssa", &PatchParams::apply("two"), &Patch::Apply(&rival))
            .await,
    );
    assert_eq!(err.code, 409);
    assert!(
        err.message.contains("conflict with \"one\""),
        "{}",
        err.message
    );
    let got = api
        .patch(
            "kp-ssa",
            &PatchParams::apply("two").force(),
            &Patch::Apply(&rival),
        )
        .await
        .expect("forced apply");
    assert_eq!(got.labels()["owner"], "two");
}

/// `Api::delete` with every part of `DeleteParams`, and `delete_collection`.
#[tokio::test]
async fn delete_params_and_delete_collection() {
    let s = TestServer::start();
    let c = client(&s);
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(&PostParams::default(), &ns("kdel"))
        .await
        .unwrap();
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kdel");
    let a = api.create(&PostParams::default(), &sa("a")).await.unwrap();

    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-a".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let status = api_error(api.delete("a", &wrong).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    let stale = DeleteParams {
        preconditions: Some(Preconditions {
            uid: a.uid(),
            resource_version: Some("1".into()),
        }),
        ..DeleteParams::default()
    };
    let status = api_error(api.delete("a", &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));

    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::background()
    };
    let kept = api.delete("a", &dry).await.unwrap();
    assert_eq!(kept.left().map(|o| o.name_any()).as_deref(), Some("a"));
    assert!(api.get_opt("a").await.unwrap().is_some());

    let matching = DeleteParams {
        preconditions: Some(Preconditions {
            uid: a.uid(),
            resource_version: a.resource_version(),
        }),
        ..DeleteParams::foreground()
    };
    let gone = api.delete("a", &matching).await.unwrap();
    assert_eq!(gone.left().and_then(|o| o.uid()), a.uid());
    assert!(api.get_opt("a").await.unwrap().is_none());
    api.create(&PostParams::default(), &sa("b")).await.unwrap();
    api.delete("b", &DeleteParams::orphan()).await.unwrap();
    assert!(api.get_opt("b").await.unwrap().is_none());

    // A grace period is accepted (neither kind deletes gracefully).
    api.create(&PostParams::default(), &sa("c")).await.unwrap();
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    api.delete("c", &now).await.unwrap();
    assert!(api.get_opt("c").await.unwrap().is_none());

    for name in ["d1", "d2", "keep"] {
        let mut obj = sa(name);
        if name != "keep" {
            obj.metadata.labels = Some([("app".to_string(), "demo".to_string())].into());
        }
        api.create(&PostParams::default(), &obj).await.unwrap();
    }
    let answer = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=demo"),
        )
        .await
        .unwrap();
    let status = answer.right().expect("deletecollection answers a Status");
    assert!(status.is_success(), "{status:?}");
    let left = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(own_names(&left.items), ["keep"]);
}

/// `kube::runtime::finalizer` driving a small controller: it adds its finalizer, and on
/// deletion cleans up and removes it, whereupon the object goes.
#[tokio::test]
async fn a_finalizer_controller_adds_and_removes_its_finalizer() {
    use futures::StreamExt;
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::finalizer::{finalizer, Event};
    use kube::runtime::watcher;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const FINALIZER: &str = "strata.test/cleanup";

    struct Ctx {
        api: Api<ServiceAccount>,
        cleaned: AtomicUsize,
    }

    async fn reconcile(
        obj: Arc<ServiceAccount>,
        ctx: Arc<Ctx>,
    ) -> Result<Action, kube::runtime::finalizer::Error<std::io::Error>> {
        let counter = ctx.clone();
        finalizer(&ctx.api, FINALIZER, obj, |event| async move {
            match event {
                Event::Apply(_) => Ok(Action::await_change()),
                Event::Cleanup(_) => {
                    counter.cleaned.fetch_add(1, Ordering::SeqCst);
                    Ok(Action::await_change())
                }
            }
        })
        .await
    }

    fn error_policy(
        _obj: Arc<ServiceAccount>,
        _err: &kube::runtime::finalizer::Error<std::io::Error>,
        _ctx: Arc<Ctx>,
    ) -> Action {
        Action::requeue(Duration::from_millis(200))
    }

    let s = TestServer::start();
    let c = client(&s);
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(&PostParams::default(), &ns("kfin"))
        .await
        .unwrap();
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kfin");
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        cleaned: AtomicUsize::new(0),
    });
    let controller = tokio::spawn(
        Controller::new(api.clone(), watcher::Config::default())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {}),
    );

    api.create(&PostParams::default(), &sa("managed"))
        .await
        .unwrap();
    let held = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let obj = api.get("managed").await.unwrap();
            if obj.finalizers().iter().any(|f| f == FINALIZER) {
                return obj;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the controller adds its finalizer");
    assert_eq!(ctx.cleaned.load(Ordering::SeqCst), 0);

    let marked = api
        .delete("managed", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a held object comes back marked");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.uid(), held.uid());
    tokio::time::timeout(Duration::from_secs(20), async {
        while api.get_opt("managed").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the controller cleans up and the object goes");
    assert_eq!(ctx.cleaned.load(Ordering::SeqCst), 1);
    controller.abort();
}
