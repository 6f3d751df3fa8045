//! Strata on etcd: two server processes over one etcd behave to a client like one server.
//! Writes through one replica are read, listed, paged and watched through the other; stale
//! writes conflict across them; the objects sit under kube-apiserver's key layout.

use std::time::Duration;

use serde_json::{json, Value};
use strata_store::Store;
use strata_store_etcd::testing::TestEtcd;

use crate::common::{
    assert_status, enc, item_names, own_item_names, rv_of, sa_path, within, TestServer,
};

/// The field selector that leaves out the ServiceAccount the server makes in every namespace.
const NOT_DEFAULT: &str = "fieldSelector=metadata.name%21%3Ddefault";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_over_one_etcd_behave_as_one_server() {
    within(Duration::from_secs(90), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd (Debian's etcd-server)");
        // Ready once a client connects; the servers connect at start.
        let direct = etcd.store("").await;
        let flags = [
            "--storage-backend",
            "etcd",
            "--etcd-servers",
            etcd.url.as_str(),
        ];
        let server_a = TestServer::start_with(&flags);
        let server_b = TestServer::start_with(&flags);
        let (a, b) = (server_a.http(), server_b.http());

        a.create_namespace("shared").await;
        // The namespace's default ServiceAccount comes first; what follows is the test's.
        a.wait_default_sa("shared").await;
        let one = a.create_sa("shared", "one", Value::Null).await;
        // A consistent read through the other replica sees the write at once.
        let got = b.get_ok(&format!("{}/one", sa_path("shared"))).await;
        assert_eq!(got["metadata"]["uid"], one["metadata"]["uid"]);
        assert_eq!(rv_of(&got), rv_of(&one));

        // A watch through B from A's write sees A's next write.
        let mut watch = crate::common::WatchStream::open(
            &server_b.addr,
            &format!(
                "{}?watch=1&resourceVersion={}",
                sa_path("shared"),
                rv_of(&one)
            ),
            Default::default(),
        )
        .await;
        assert_eq!(watch.status, 200);
        let two = a.create_sa("shared", "two", Value::Null).await;
        let event = watch.next_event().await;
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], "two");
        assert_eq!(rv_of(&event["object"]), rv_of(&two));

        // A stale write through B conflicts with A's newer one.
        let mut stale = got.clone();
        stale["metadata"]["labels"] = json!({"from": "b"});
        let r = a
            .patch_merge(
                &format!("{}/one", sa_path("shared")),
                &json!({"metadata": {"labels": {"from": "a"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let r = b
            .put_json(&format!("{}/one", sa_path("shared")), &stale)
            .await;
        assert_status(&r, 409, "Conflict");

        // A chunked list started on A continues on B (the token key is shared in etcd).
        let first = a
            .get_ok(&format!("{}?limit=1&{NOT_DEFAULT}", sa_path("shared")))
            .await;
        assert_eq!(item_names(&first), ["one"]);
        let token = first["metadata"]["continue"].as_str().unwrap().to_string();
        let rest = b
            .get_ok(&format!(
                "{}?limit=1&continue={}&{NOT_DEFAULT}",
                sa_path("shared"),
                enc(&token)
            ))
            .await;
        assert_eq!(item_names(&rest), ["two"]);
        assert_eq!(
            rest["metadata"]["resourceVersion"],
            first["metadata"]["resourceVersion"]
        );

        // kube-apiserver's layout: etcdctl get --prefix /registry/serviceaccounts shows them.
        let (kv, _) = direct
            .get("/registry/serviceaccounts/shared/one", None)
            .await
            .unwrap();
        let stored: Value =
            serde_json::from_slice(&kv.expect("stored under /registry").value).unwrap();
        assert_eq!(stored["metadata"]["name"], "one");
    })
    .await;
}

/// Consistent reads through replica B stay correct and prompt when the last etcd revision came
/// from a key outside Strata's prefix (etcd 3.4.23 cannot prove the watch cache current then:
/// the read goes to etcd), and a non-default `--etcd-prefix` takes `/registry`'s place as in
/// kube-apiserver's layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_across_replicas_when_other_keys_move_the_revision() {
    within(Duration::from_secs(90), async {
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd (Debian's etcd-server)");
        let direct = etcd.store("").await;
        let flags = [
            "--storage-backend",
            "etcd",
            "--etcd-servers",
            etcd.url.as_str(),
            "--etcd-prefix",
            "/tenant-a",
        ];
        let server_a = TestServer::start_with(&flags);
        let server_b = TestServer::start_with(&flags);
        let (a, b) = (server_a.http(), server_b.http());
        a.create_namespace("shared").await;
        a.wait_default_sa("shared").await;
        let one = a.create_sa("shared", "one", Value::Null).await;
        let listed = b.get_ok(&sa_path("shared")).await;
        assert_eq!(own_item_names(&listed), ["one"]);

        // Another tenant of the etcd cluster writes: the revision moves, Strata's keys don't.
        for i in 0..3 {
            direct
                .create(&format!("/elsewhere/{i}"), "x".into())
                .await
                .unwrap();
        }
        let foreign = direct.consistent_revision().await.unwrap();
        // A's write after that is seen at once through B, by get, list and watch.
        let r = a
            .patch_merge(
                &format!("{}/one", sa_path("shared")),
                &json!({"metadata": {"labels": {"v": "2"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let updated = r.json();
        assert!(rv_of(&updated) > foreign.get());
        let got = b.get_ok(&format!("{}/one", sa_path("shared"))).await;
        assert_eq!(got["metadata"]["labels"]["v"], "2");
        assert_eq!(got["metadata"]["uid"], one["metadata"]["uid"]);
        // More foreign writes: now nothing under the prefix produced the latest revision.
        direct.create("/elsewhere/late", "x".into()).await.unwrap();
        let latest = direct.consistent_revision().await.unwrap();
        let got = b.get_ok(&format!("{}/one", sa_path("shared"))).await;
        assert_eq!(got["metadata"]["labels"]["v"], "2");
        assert_eq!(rv_of(&got), rv_of(&updated));
        let list = b.get_ok(&sa_path("shared")).await;
        assert_eq!(own_item_names(&list), ["one"]);
        let list_rv: u64 = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            list_rv >= latest.get(),
            "a consistent list is at or after the latest revision: {list_rv} < {latest}"
        );
        // A watch from "now" on B starts and sees A's next write.
        let mut watch = crate::common::WatchStream::open(
            &server_b.addr,
            &format!("{}?watch=1&{NOT_DEFAULT}", sa_path("shared")),
            Default::default(),
        )
        .await;
        assert_eq!(watch.status, 200);
        let seen = watch.next_event().await;
        assert_eq!(seen["object"]["metadata"]["name"], "one");
        let two = a.create_sa("shared", "two", Value::Null).await;
        let event = watch.next_event().await;
        assert_eq!(event["type"], "ADDED");
        assert_eq!(rv_of(&event["object"]), rv_of(&two));

        // Foreign writes again, seen by A through a consistent read: creating in a namespace
        // (whose admission reads the namespace cache) is not held up by the unreachable revision.
        direct.create("/elsewhere/later", "x".into()).await.unwrap();
        a.get_ok(&format!("{}/one", sa_path("shared"))).await;
        let three = a.create_sa("shared", "three", Value::Null).await;
        assert_eq!(three["metadata"]["name"], "three");
        let event = watch.next_event().await;
        assert_eq!(event["object"]["metadata"]["name"], "three");

        // The objects sit at <prefix>/<resource>/<namespace>/<name>, kube-apiserver's layout.
        let (kv, _) = direct
            .get("/tenant-a/serviceaccounts/shared/one", None)
            .await
            .unwrap();
        assert!(kv.is_some(), "stored under /tenant-a/serviceaccounts");
        let (nested, _) = direct
            .get("/tenant-a/registry/serviceaccounts/shared/one", None)
            .await
            .unwrap();
        assert!(nested.is_none());
    })
    .await;
}
