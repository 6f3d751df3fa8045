//! The registry in process over the in-memory store: the REST semantics of every verb without
//! HTTP, fast enough to run many cases. Each test runs twice: over a store numbered 1, 2, 3…
//! like the embedded engine, and over one whose revisions start at 5000 and step by 7, as one
//! user of a shared etcd sees them, so nothing here depends on how revisions are numbered.

use std::sync::Arc;

use serde_json::json;
use strata_object::{Object, StatusReason};
use strata_registry::{
    cache, DeleteOptions, FieldValidation, ListOptions, PatchKind, Preconditions, RegisteredType,
    Registry, RegistryConfig, StreamItem, WatchOptions, WriteOptions,
};
use strata_store::{MemoryStore, Revision, Store};

async fn registry(store: MemoryStore) -> Arc<Registry> {
    let store: Arc<dyn Store> = Arc::new(store);
    let registry = Arc::new(Registry::with_builtin_types(
        store,
        RegistryConfig::default(),
    ));
    registry.start().await.expect("start the registry");
    for ns in ["default", "other"] {
        let namespaces = registry.lookup("", "v1", "namespaces").unwrap();
        registry
            .create(
                &namespaces,
                "",
                json!({"metadata": {"name": ns}}),
                &WriteOptions::default(),
            )
            .await
            .unwrap();
    }
    registry
}

/// Runs `test` over both numberings.
macro_rules! both_numberings {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn counted() {
                super::$name(super::registry(strata_store::MemoryStore::new()).await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn shared_keyspace() {
                let store = strata_store::MemoryStore::numbered(strata_store::Revision(5000), 7);
                super::$name(super::registry(store).await).await;
            }
        }
    )*};
}

both_numberings!(
    lifecycle_of_an_object,
    optimistic_concurrency,
    lists_page_through_one_snapshot,
    patches_and_apply_track_managers,
    finalizers_hold_deletion,
    watches_replay_and_follow,
);

fn sa(r: &Registry) -> Arc<RegisteredType> {
    r.lookup("", "v1", "serviceaccounts").unwrap()
}

fn rv(o: &Object) -> u64 {
    o.resource_version().parse().unwrap()
}

fn opts() -> WriteOptions {
    WriteOptions {
        field_manager: "test".into(),
        ..Default::default()
    }
}

async fn lifecycle_of_an_object(r: Arc<Registry>) {
    let t = sa(&r);
    let created = r
        .create(&t, "default", json!({"metadata": {"name": "a"}}), &opts())
        .await
        .unwrap();
    assert!(created.created);
    let a = created.object;
    assert_eq!(a.namespace(), "default");
    assert!(!a.uid().is_empty());
    assert_eq!(r.get(&t, "default", "a", "").await.unwrap(), a);
    let again = r
        .create(&t, "default", json!({"metadata": {"name": "a"}}), &opts())
        .await
        .unwrap_err();
    assert!(again.is_already_exists(), "{again:?}");
    let missing = r
        .create(&t, "nowhere", json!({"metadata": {"name": "a"}}), &opts())
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");

    // Dry run decides everything and stores nothing.
    let dry = WriteOptions {
        dry_run: true,
        ..opts()
    };
    r.create(&t, "default", json!({"metadata": {"name": "b"}}), &dry)
        .await
        .unwrap();
    assert!(r
        .get(&t, "default", "b", "")
        .await
        .unwrap_err()
        .is_not_found());

    // Strict field validation refuses unknown fields with 400; Warn warns and prunes.
    let strict = WriteOptions {
        field_validation: FieldValidation::Strict,
        ..opts()
    };
    let refused = r
        .create(
            &t,
            "default",
            json!({"metadata": {"name": "c"}, "spec": {}}),
            &strict,
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code, 400);
    let warned = r
        .create(
            &t,
            "default",
            json!({"metadata": {"name": "c"}, "spec": {}}),
            &opts(),
        )
        .await
        .unwrap();
    assert_eq!(warned.warnings, ["unknown field \"spec\""]);
    assert!(warned.object.as_map().get("spec").is_none());

    let deleted = r
        .delete(&t, "default", "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(deleted.removed);
    assert!(r
        .get(&t, "default", "a", "")
        .await
        .unwrap_err()
        .is_not_found());
    assert!(r
        .delete(&t, "default", "a", &DeleteOptions::default())
        .await
        .unwrap_err()
        .is_not_found());
}

async fn optimistic_concurrency(r: Arc<Registry>) {
    let t = sa(&r);
    let a = r
        .create(&t, "default", json!({"metadata": {"name": "a"}}), &opts())
        .await
        .unwrap()
        .object;
    let mut v = a.clone().into_value();
    v["metadata"]["labels"] = json!({"x": "1"});
    let updated = r
        .update(&t, "default", "a", v.clone(), &opts())
        .await
        .unwrap()
        .object;
    assert!(rv(&updated) > rv(&a));
    // The same body again carries a stale resourceVersion: 409 Conflict.
    let stale = r.update(&t, "default", "a", v, &opts()).await.unwrap_err();
    assert!(stale.is(StatusReason::Conflict), "{stale:?}");
    // A no-op update writes nothing.
    let same = r
        .update(&t, "default", "a", updated.clone().into_value(), &opts())
        .await
        .unwrap()
        .object;
    assert_eq!(same.resource_version(), updated.resource_version());
    // Delete preconditions.
    let wrong_uid = DeleteOptions {
        preconditions: Some(Preconditions {
            uid: Some("not-it".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let refused = r.delete(&t, "default", "a", &wrong_uid).await.unwrap_err();
    assert!(refused.is_conflict(), "{refused:?}");
}

async fn lists_page_through_one_snapshot(r: Arc<Registry>) {
    let t = sa(&r);
    for i in 0..5 {
        r.create(
            &t,
            "default",
            json!({"metadata": {"name": format!("s{i}")}}),
            &opts(),
        )
        .await
        .unwrap();
    }
    r.create(
        &t,
        "other",
        json!({"metadata": {"name": "elsewhere"}}),
        &opts(),
    )
    .await
    .unwrap();
    let names = |items: &[Arc<strata_registry::CachedObject>]| -> Vec<String> {
        items
            .iter()
            .map(|c| cache::to_object(c).unwrap().name().to_string())
            .collect()
    };
    let first = r
        .list(
            &t,
            "default",
            &ListOptions {
                limit: 2,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(names(&first.items), ["s0", "s1"]);
    assert_eq!(first.remaining_item_count, Some(3));
    // Changes after the first page do not show in the later pages.
    r.create(&t, "default", json!({"metadata": {"name": "s2a"}}), &opts())
        .await
        .unwrap();
    let mut seen = names(&first.items);
    let mut token = first.continue_token.clone();
    while !token.is_empty() {
        let page = r
            .list(
                &t,
                "default",
                &ListOptions {
                    limit: 2,
                    continue_token: token,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(page.resource_version, first.resource_version);
        seen.extend(names(&page.items));
        token = page.continue_token;
    }
    assert_eq!(seen, ["s0", "s1", "s2", "s3", "s4"]);
    // Across namespaces, and at the exact snapshot revision.
    let all = r.list(&t, "", &ListOptions::default()).await.unwrap();
    assert_eq!(all.items.len(), 7);
    let exact = r
        .list(
            &t,
            "default",
            &ListOptions {
                resource_version: first.resource_version.clone(),
                resource_version_match: "Exact".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(names(&exact.items), ["s0", "s1", "s2", "s3", "s4"]);
    // A revision the store has not reached is refused after a wait (504 with Retry-After).
    let future = (first.resource_version.parse::<u64>().unwrap() + 1_000_000).to_string();
    let too_new = r
        .list(
            &t,
            "default",
            &ListOptions {
                resource_version: future,
                resource_version_match: "NotOlderThan".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(too_new.code, 504, "{too_new:?}");
}

async fn patches_and_apply_track_managers(r: Arc<Registry>) {
    let t = sa(&r);
    r.create(&t, "default", json!({"metadata": {"name": "p"}}), &opts())
        .await
        .unwrap();
    let merged = r
        .patch(
            &t,
            "default",
            "p",
            PatchKind::Merge,
            json!({"metadata": {"labels": {"a": "1"}}}),
            &opts(),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(merged.as_map()["metadata"]["labels"]["a"], "1");
    let json_patched = r
        .patch(
            &t,
            "default",
            "p",
            PatchKind::Json,
            json!([{"op": "add", "path": "/metadata/labels/b", "value": "2"}]),
            &opts(),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(json_patched.as_map()["metadata"]["labels"]["b"], "2");
    let failed = r
        .patch(
            &t,
            "default",
            "p",
            PatchKind::Json,
            json!([{"op": "test", "path": "/metadata/labels/b", "value": "3"}]),
            &opts(),
        )
        .await
        .unwrap_err();
    assert_eq!(failed.code, 422);

    let applier = |manager: &str, force: bool| WriteOptions {
        field_manager: manager.into(),
        manager_given: true,
        force,
        ..Default::default()
    };
    let config = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "p", "labels": {"a": "mine"}}});
    let conflict = r
        .patch(
            &t,
            "default",
            "p",
            PatchKind::Apply,
            config.clone(),
            &applier("ops", false),
        )
        .await
        .unwrap_err();
    assert_eq!(conflict.code, 409);
    let forced = r
        .patch(
            &t,
            "default",
            "p",
            PatchKind::Apply,
            config,
            &applier("ops", true),
        )
        .await
        .unwrap()
        .object;
    assert_eq!(forced.as_map()["metadata"]["labels"]["a"], "mine");
    let managers: Vec<&str> = forced.as_map()["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"ops") && managers.contains(&"test"),
        "{managers:?}"
    );
    // Apply without a named manager, and force without apply, are refused.
    let unnamed = WriteOptions::default();
    assert_eq!(
        r.patch(&t, "default", "p", PatchKind::Apply, json!({}), &unnamed)
            .await
            .unwrap_err()
            .code,
        422
    );
    assert_eq!(
        r.patch(
            &t,
            "default",
            "p",
            PatchKind::Merge,
            json!({}),
            &applier("x", true)
        )
        .await
        .unwrap_err()
        .code,
        422
    );
}

async fn finalizers_hold_deletion(r: Arc<Registry>) {
    let t = sa(&r);
    r.create(
        &t,
        "default",
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        &opts(),
    )
    .await
    .unwrap();
    let first = r
        .delete(&t, "default", "held", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(!first.removed);
    let marked = first.object.unwrap();
    assert!(!marked.deletion_timestamp().is_empty());
    let released = r
        .patch(
            &t,
            "default",
            "held",
            PatchKind::Merge,
            json!({"metadata": {"finalizers": null}}),
            &opts(),
        )
        .await;
    assert!(released.is_ok(), "{released:?}");
    assert!(r
        .get(&t, "default", "held", "")
        .await
        .unwrap_err()
        .is_not_found());
}

async fn watches_replay_and_follow(r: Arc<Registry>) {
    let t = sa(&r);
    let a = r
        .create(&t, "default", json!({"metadata": {"name": "w1"}}), &opts())
        .await
        .unwrap()
        .object;
    r.create(&t, "default", json!({"metadata": {"name": "w2"}}), &opts())
        .await
        .unwrap();
    let mut watch = r
        .watch(
            t.clone(),
            "default",
            &WatchOptions {
                resource_version: a.resource_version().to_string(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut next =
        async || match tokio::time::timeout(std::time::Duration::from_secs(5), watch.next())
            .await
            .expect("an event within 5 s")
        {
            Some(StreamItem::Event(kind, obj)) => (kind, cache::to_object(&obj).unwrap()),
            other => panic!("expected an event, got {other:?}"),
        };
    let (_, replayed) = next().await;
    assert_eq!(replayed.name(), "w2");
    let d = r
        .delete(&t, "default", "w1", &DeleteOptions::default())
        .await
        .unwrap();
    assert!(d.removed);
    let (kind, gone) = next().await;
    assert_eq!(kind, strata_registry::EventType::Deleted);
    assert_eq!(gone.name(), "w1");
    assert!(rv(&gone) > rv(&replayed));
    let revision: Revision = r.store().current_revision();
    assert!(revision.get() >= rv(&gone));
}

/// Types registered while serving: two registrations of one type race and exactly one wins;
/// the winner serves objects stored before it came (its cache loads them), and removal stops
/// the serving, not the storing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_come_and_go_while_serving() {
    let r = registry(MemoryStore::new()).await;
    let mut info = strata_object::builtin::config_map();
    info.group = "example.com".into();
    info.resource = "settings".into();
    info.kind = "Setting".into();
    info.list_kind = "SettingList".into();
    info.protobuf = false;
    // An object already in the store under the new type's prefix.
    r.store()
        .create(
            &info.key("default", "early"),
            bytes::Bytes::from_static(
                br#"{"apiVersion":"example.com/v1","kind":"Setting","metadata":{"name":"early","namespace":"default","uid":"u-1","creationTimestamp":"2026-11-25T00:00:00Z"}}"#,
            ),
        )
        .await
        .unwrap();
    let strategy =
        || -> Arc<dyn strata_registry::Strategy> { Arc::new(strata_registry::DefaultStrategy) };
    let (a, b) = tokio::join!(
        r.add_type(info.clone(), strategy()),
        r.add_type(info.clone(), strategy())
    );
    assert_eq!(a.is_ok() as u8 + b.is_ok() as u8, 1, "{a:?} {b:?}");
    let t = r.lookup("example.com", "v1", "settings").unwrap();
    assert_eq!(
        r.get(&t, "default", "early", "").await.unwrap().name(),
        "early"
    );
    let generation = r.generation();
    assert!(r.remove_type("example.com", "v1", "settings"));
    assert!(r.generation() > generation);
    assert!(r.lookup("example.com", "v1", "settings").is_none());
    assert!(r
        .store()
        .get(&info.key("default", "early"), None)
        .await
        .unwrap()
        .0
        .is_some());
}
