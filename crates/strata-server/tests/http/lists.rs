//! Lists over raw HTTP against the real binary: chunking with `limit`/`continue`, label and field
//! selectors (list and deletecollection), and the `resourceVersion`/`resourceVersionMatch` tables
//! of spec §4.11 for get and list. Watch has its own file (watch.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{
    assert_status, enc, own_item_names as item_names, rv_of, sa_path, within, Http, Reply,
    TestServer, NAMESPACE_DEFAULTS,
};
use serde_json::{json, Value};

/// Deadline of one test; generous for a loaded two-core machine.
const LIMIT: Duration = Duration::from_secs(60);

/// `metadata.continue` of a list, or "" when it is absent.
fn continue_of(list: &Value) -> String {
    list["metadata"]["continue"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `metadata.resourceVersion` of a list, as the opaque string it is.
fn list_rv(list: &Value) -> String {
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("no collection resourceVersion in {list}"))
        .to_string()
}

/// (name, resourceVersion) of every item, in list order, leaving out the namespace's default
/// ServiceAccount (the server's; `item_names` is `own_item_names` here for the same reason).
fn name_rvs(list: &Value) -> Vec<(String, u64)> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap().to_string(),
                rv_of(i),
            )
        })
        .filter(|(name, _)| !NAMESPACE_DEFAULTS.contains(&name.as_str()))
        .collect()
}

/// Follows `continue` from a first page to the end and returns every page.
async fn all_pages(h: &Http, path: &str, limit: usize, first: Value) -> Vec<Value> {
    let mut pages = vec![first];
    loop {
        let token = continue_of(pages.last().unwrap());
        if token.is_empty() {
            return pages;
        }
        assert!(pages.len() < 100, "paging does not end");
        let next = h
            .get_ok(&format!("{path}?limit={limit}&continue={}", enc(&token)))
            .await;
        pages.push(next);
    }
}

/// Asserts a 422 Invalid for ListOptions whose causes name `field`.
fn assert_invalid_list_options(r: &Reply, field: &str, what: &str) {
    assert_eq!(
        r.code(),
        422,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_status(r, 422, "Invalid");
    let v = r.json();
    assert_eq!(v["details"]["kind"], "ListOptions", "{what}: {v}");
    let causes = v["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no details.causes in {v}"));
    assert!(
        causes.iter().any(|c| c["field"] == field),
        "{what}: no cause for field {field:?} in {v}"
    );
}

/// Asserts the "too large resource version" answer of spec §4.11 and notes §2.5: 504 with a
/// `Retry-After` header, a message saying so, and the machine-readable cause clients key on.
fn assert_too_large(r: &Reply, what: &str) {
    assert_eq!(
        r.code(),
        504,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_status(r, 504, "Timeout");
    let retry = r.header("retry-after");
    assert!(
        retry.parse::<u64>().is_ok_and(|n| n >= 1),
        "{what}: Retry-After should be a positive number of seconds, got {retry:?}"
    );
    let v = r.json();
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Too large resource version"),
        "{what}: {message:?}"
    );
    let causes = v["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        causes
            .iter()
            .any(|c| c["reason"] == "ResourceVersionTooLarge"),
        "{what}: no ResourceVersionTooLarge cause in {v}"
    );
}

#[tokio::test]
async fn chunks_come_from_one_snapshot() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("chunks").await;
        // Its default ServiceAccount sorts after the test's ten: eleven in all.
        h.wait_default_sa("chunks").await;
        let path = sa_path("chunks");
        let mut created = BTreeMap::new();
        for i in 0..10 {
            let name = format!("a{i}");
            let o = h.create_sa("chunks", &name, Value::Null).await;
            created.insert(name, rv_of(&o));
        }

        let first = h.get_ok(&format!("{path}?limit=3")).await;
        assert_eq!(first["kind"], "ServiceAccountList");
        assert_eq!(item_names(&first), ["a0", "a1", "a2"]);
        assert_eq!(first["metadata"]["remainingItemCount"], 8, "{first}");
        let snapshot = list_rv(&first);
        assert!(!continue_of(&first).is_empty(), "{first}");

        // Writes after the first chunk: a new name that sorts into a later chunk, an update and
        // a delete of objects not yet returned. None of them may show.
        h.create_sa("chunks", "a4x", Value::Null).await;
        let r = h
            .patch_merge(
                &format!("{path}/a5"),
                &json!({"metadata": {"labels": {"changed": "yes"}}}),
            )
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        let r = h.delete(&format!("{path}/a7")).await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));

        let pages = all_pages(&h, &path, 3, first).await;
        assert_eq!(pages.len(), 4, "11 items in chunks of 3");
        let mut seen = Vec::new();
        for (n, page) in pages.iter().enumerate() {
            assert_eq!(page["kind"], "ServiceAccountList");
            assert_eq!(
                list_rv(page),
                snapshot,
                "chunk {n} is from another snapshot"
            );
            assert!(page["items"].as_array().unwrap().len() <= 3, "{page}");
            for item in page["items"].as_array().unwrap() {
                assert!(
                    item["metadata"].get("labels").is_none(),
                    "an update made after the snapshot shows in chunk {n}: {item}"
                );
            }
            seen.extend(name_rvs(page));
        }
        let want: Vec<(String, u64)> = created.into_iter().collect();
        assert_eq!(seen, want, "the chunks together are the snapshot");
        let last = pages.last().unwrap();
        assert!(
            last["metadata"].get("remainingItemCount").is_none(),
            "the last chunk has no remainingItemCount: {last}"
        );

        // A new list sees the writes.
        let now = h.get_ok(&path).await;
        let names = item_names(&now);
        assert!(names.contains(&"a4x".to_string()), "{names:?}");
        assert!(!names.contains(&"a7".to_string()), "{names:?}");
        assert_ne!(list_rv(&now), snapshot);
    })
    .await;
}

#[tokio::test]
async fn a_list_larger_than_one_chunk_arrives_whole_with_its_length() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("big").await;
        h.wait_default_sa("big").await;
        // 120 objects of about 2 KiB: the answer is sent in several 64 KiB chunks.
        let filler = "x".repeat(2000);
        for i in 0..120 {
            let body = json!({"metadata": {"name": format!("s{i:03}"),
                "annotations": {"filler": filler}}});
            let r = h.post_json(&sa_path("big"), &body).await;
            assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
        }
        let r = h.get(&sa_path("big")).await;
        assert_eq!(r.code(), 200);
        assert!(r.body.len() > 3 * 64 * 1024, "{} bytes", r.body.len());
        let length = r.headers["content-length"]
            .to_str()
            .unwrap()
            .parse::<usize>();
        assert_eq!(length, Ok(r.body.len()), "Content-Length matches the body");
        assert!(r.body.ends_with(b"]}\n"));
        let list = r.json();
        assert_eq!(list["kind"], "ServiceAccountList");
        let names = item_names(&list);
        let wanted: Vec<String> = (0..120).map(|i| format!("s{i:03}")).collect();
        assert_eq!(names, wanted);
        for item in list["items"].as_array().unwrap() {
            assert!(item.get("kind").is_none(), "typed list items carry no kind");
            if item["metadata"]["name"] != "default" {
                assert_eq!(item["metadata"]["annotations"]["filler"], filler.as_str());
            }
        }
        // The same list in pages carries the same items.
        let first = h.get_ok(&format!("{}?limit=50", sa_path("big"))).await;
        let pages = all_pages(&h, &sa_path("big"), 50, first).await;
        let paged: Vec<String> = pages.iter().flat_map(item_names).collect();
        assert_eq!(paged, wanted);
    })
    .await;
}

#[tokio::test]
async fn remaining_item_count_is_exact_and_omitted_where_unknown() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("count").await;
        // Seven, and the default ServiceAccount after them.
        h.wait_default_sa("count").await;
        let path = sa_path("count");
        for i in 0..7 {
            h.create_sa("count", &format!("c{i}"), json!({"app": "x"}))
                .await;
        }

        // Exact on every chunk but the last: the number of items not yet returned.
        let first = h.get_ok(&format!("{path}?limit=2")).await;
        let pages = all_pages(&h, &path, 2, first).await;
        assert_eq!(pages.len(), 4);
        let mut returned = 0;
        for (n, page) in pages.iter().enumerate() {
            returned += page["items"].as_array().unwrap().len();
            if n + 1 < pages.len() {
                assert_eq!(
                    page["metadata"]["remainingItemCount"],
                    8 - returned,
                    "chunk {n}: {page}"
                );
            } else {
                assert!(
                    page["metadata"].get("remainingItemCount").is_none(),
                    "last chunk: {page}"
                );
            }
        }
        assert_eq!(returned, 8);

        // A limit that covers everything: one complete chunk, no token, no count.
        let whole = h.get_ok(&format!("{path}?limit=50")).await;
        assert_eq!(whole["items"].as_array().unwrap().len(), 8);
        assert!(continue_of(&whole).is_empty(), "{whole}");
        assert!(
            whole["metadata"].get("remainingItemCount").is_none(),
            "{whole}"
        );

        // Unchunked.
        let whole = h.get_ok(&path).await;
        assert!(
            whole["metadata"].get("remainingItemCount").is_none(),
            "{whole}"
        );
        assert!(continue_of(&whole).is_empty(), "{whole}");

        // With selectors the count is unknown and omitted, also on chunks that have a token.
        for selector in [
            "labelSelector=app%3Dx",
            "fieldSelector=metadata.name%21%3Dc3",
        ] {
            let first = h.get_ok(&format!("{path}?limit=2&{selector}")).await;
            assert!(
                !continue_of(&first).is_empty(),
                "{selector}: more items match than the limit: {first}"
            );
            assert!(
                first["metadata"].get("remainingItemCount").is_none(),
                "{selector}: {first}"
            );
            // Follow the chunks (with the selector) to the end; none carries a count.
            let mut page = first;
            let mut names = item_names(&page);
            while !continue_of(&page).is_empty() {
                page = h
                    .get_ok(&format!(
                        "{path}?limit=2&{selector}&continue={}",
                        enc(&continue_of(&page))
                    ))
                    .await;
                assert!(
                    page["metadata"].get("remainingItemCount").is_none(),
                    "{selector}: {page}"
                );
                names.extend(item_names(&page));
                assert!(names.len() <= 8, "paging does not end");
            }
            let want: Vec<String> = (0..7)
                .map(|i| format!("c{i}"))
                .filter(|n| !selector.starts_with("field") || n != "c3")
                .collect();
            assert_eq!(names, want, "{selector}");
        }
    })
    .await;
}

#[tokio::test]
async fn tampered_and_foreign_continue_tokens_are_rejected() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("one").await;
        h.create_namespace("two").await;
        // The default ServiceAccount sorts first: default, t0 | t1, t2 | t3.
        h.wait_default_sa("one").await;
        for ns in ["one", "two"] {
            for i in 0..4 {
                h.create_sa(ns, &format!("t{i}"), Value::Null).await;
            }
        }
        let first = h.get_ok(&format!("{}?limit=2", sa_path("one"))).await;
        let token = continue_of(&first);
        assert!(!token.is_empty(), "{first}");
        // The token works as handed out (percent-encoded, as clients send it).
        let next = h
            .get_ok(&format!(
                "{}?limit=2&continue={}",
                sa_path("one"),
                enc(&token)
            ))
            .await;
        assert_eq!(item_names(&next), ["t1", "t2"]);

        let mut tampered = vec![
            "bogus".to_string(),
            token[..token.len() / 2].to_string(),
            format!("{token}AAAA"),
        ];
        // Not the last character: in base64 it may carry only padding bits.
        for at in [0, token.len() / 2, token.len() - 2] {
            let mut bytes = token.clone().into_bytes();
            bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
            tampered.push(String::from_utf8(bytes).unwrap());
        }
        for bad in &tampered {
            let r = h
                .get(&format!("{}?limit=2&continue={}", sa_path("one"), enc(bad)))
                .await;
            assert_eq!(
                r.code(),
                400,
                "tampered token {bad:?}: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert_status(&r, 400, "BadRequest");
        }

        // Tokens handed out for another collection: another namespace, all namespaces, and
        // another resource type.
        let ns_list = h.get_ok("/api/v1/namespaces?limit=1").await;
        let ns_token = continue_of(&ns_list);
        assert!(!ns_token.is_empty(), "{ns_list}");
        let all = h.get_ok("/api/v1/serviceaccounts?limit=1").await;
        let all_token = continue_of(&all);
        assert!(!all_token.is_empty(), "{all}");
        for (what, path, foreign) in [
            (
                "namespace one's token on namespace two",
                sa_path("two"),
                &token,
            ),
            (
                "a namespaces token on serviceaccounts",
                sa_path("one"),
                &ns_token,
            ),
            (
                "the all-namespaces token on one namespace",
                sa_path("one"),
                &all_token,
            ),
            (
                "namespace one's token on all namespaces",
                "/api/v1/serviceaccounts".to_string(),
                &token,
            ),
        ] {
            let r = h
                .get(&format!("{path}?limit=2&continue={}", enc(foreign)))
                .await;
            assert_eq!(
                r.code(),
                400,
                "{what}: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert_status(&r, 400, "BadRequest");
        }
    })
    .await;
}

#[tokio::test]
async fn continue_token_expires_after_its_lifetime() {
    within(LIMIT, async {
        let s = TestServer::start_with(&["--continue-token-lifetime", "3s"]);
        let h = s.http();
        h.create_namespace("life").await;
        // The default ServiceAccount sorts first: default | l0 | l1 ...
        h.wait_default_sa("life").await;
        let path = sa_path("life");
        for i in 0..4 {
            h.create_sa("life", &format!("l{i}"), Value::Null).await;
        }
        let first = h.get_ok(&format!("{path}?limit=1")).await;
        // A fresh token works.
        let second = h
            .get_ok(&format!(
                "{path}?limit=1&continue={}",
                enc(&continue_of(&first))
            ))
            .await;
        assert_eq!(item_names(&second), ["l0"]);
        let token = continue_of(&second);
        assert!(!token.is_empty());

        // Older than its lifetime (counted from this token or from the first chunk alike).
        tokio::time::sleep(Duration::from_millis(4500)).await;
        let r = h
            .get(&format!("{path}?limit=1&continue={}", enc(&token)))
            .await;
        assert_status(&r, 410, "Expired");

        // Starting over works.
        let again = h.get_ok(&format!("{path}?limit=1")).await;
        assert_eq!(crate::common::item_names(&again), ["default"]);
    })
    .await;
}

/// With a short history, the snapshot of a chunked list and an old exact revision stop being
/// readable: 410 Expired. A "not older than" read of the same old version is still served.
#[tokio::test]
async fn compacted_revisions_are_gone_for_lists() {
    within(LIMIT, async {
        let s = TestServer::start_with(&[
            "--history-retention",
            "1s",
            "--etcd-compaction-interval",
            "1s",
        ]);
        let h = s.http();
        h.create_namespace("old").await;
        h.wait_default_sa("old").await;
        let path = sa_path("old");
        for i in 0..4 {
            h.create_sa("old", &format!("o{i}"), Value::Null).await;
        }
        let first = h.get_ok(&format!("{path}?limit=1")).await;
        let token = continue_of(&first);
        let snapshot = list_rv(&first);
        // History moves on after the first chunk.
        for i in 0..5 {
            h.create_sa("old", &format!("p{i}"), Value::Null).await;
        }
        let r = h
            .patch_merge(
                &format!("{path}/o2"),
                &json!({"metadata": {"labels": {"v": "2"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);

        // Wait until the snapshot's revision has been compacted away.
        let exact = format!("{path}?resourceVersion={snapshot}&resourceVersionMatch=Exact");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let gone = loop {
            let r = h.get(&exact).await;
            if r.code() != 200 || tokio::time::Instant::now() > deadline {
                break r;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        assert_status(&gone, 410, "Expired");

        let r = h
            .get(&format!("{path}?limit=1&continue={}", enc(&token)))
            .await;
        assert_status(&r, 410, "Expired");
        let r = h
            .get(&format!(
                "{path}?limit=2&resourceVersion={snapshot}&resourceVersionMatch=Exact"
            ))
            .await;
        assert_status(&r, 410, "Expired");
        // Paging with a resourceVersion and no match means Exact as well.
        let r = h
            .get(&format!("{path}?limit=2&resourceVersion={snapshot}"))
            .await;
        assert_status(&r, 410, "Expired");

        // Not older than an old version: the current state satisfies it.
        let list = h
            .get_ok(&format!(
                "{path}?resourceVersion={snapshot}&resourceVersionMatch=NotOlderThan"
            ))
            .await;
        // Nine, and the default ServiceAccount.
        assert_eq!(list["items"].as_array().unwrap().len(), 10);
        let list = h
            .get_ok(&format!("{path}?resourceVersion={snapshot}"))
            .await;
        assert_eq!(list["items"].as_array().unwrap().len(), 10);
        let got = h
            .get_ok(&format!("{path}/o2?resourceVersion={snapshot}"))
            .await;
        assert_eq!(got["metadata"]["labels"]["v"], "2");
    })
    .await;
}

/// Creates s1..s5 in `ns` with these labels:
/// s1 app=web,tier=front · s2 app=db,tier=back · s3 app=web · s4 (none) · s5 app=cache,tier=back,env=prod
async fn labelled_set(h: &Http, ns: &str) {
    h.create_namespace(ns).await;
    h.create_sa(ns, "s1", json!({"app": "web", "tier": "front"}))
        .await;
    h.create_sa(ns, "s2", json!({"app": "db", "tier": "back"}))
        .await;
    h.create_sa(ns, "s3", json!({"app": "web"})).await;
    h.create_sa(ns, "s4", Value::Null).await;
    h.create_sa(
        ns,
        "s5",
        json!({"app": "cache", "tier": "back", "env": "prod"}),
    )
    .await;
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        labelled_set(&h, "sel").await;
        let path = sa_path("sel");
        let cases: &[(&str, &[&str])] = &[
            ("app=web", &["s1", "s3"]),
            ("app==web", &["s1", "s3"]),
            // `!=` and `notin` also match objects without the key.
            ("app!=web", &["s2", "s4", "s5"]),
            ("app in (web,db)", &["s1", "s2", "s3"]),
            ("app notin (web,db)", &["s4", "s5"]),
            ("tier", &["s1", "s2", "s5"]),
            ("!tier", &["s3", "s4"]),
            ("app=web,tier", &["s1"]),
            ("tier=back,app!=db", &["s5"]),
            ("app in (web),!tier", &["s3"]),
            ("env=prod,tier=back", &["s5"]),
            ("app=none", &[]),
            ("", &["s1", "s2", "s3", "s4", "s5"]),
        ];
        for (selector, want) in cases {
            let list = h
                .get_ok(&format!("{path}?labelSelector={}", enc(selector)))
                .await;
            assert_eq!(item_names(&list), *want, "labelSelector={selector:?}");
            // The same through chunks of one.
            let first = h
                .get_ok(&format!("{path}?limit=1&labelSelector={}", enc(selector)))
                .await;
            let mut names = item_names(&first);
            let mut page = first;
            while !continue_of(&page).is_empty() {
                page = h
                    .get_ok(&format!(
                        "{path}?limit=1&labelSelector={}&continue={}",
                        enc(selector),
                        enc(&continue_of(&page))
                    ))
                    .await;
                names.extend(item_names(&page));
                assert!(names.len() <= 6, "paging does not end");
            }
            assert_eq!(names, *want, "chunked labelSelector={selector:?}");
        }

        // Across namespaces as well.
        labelled_set(&h, "sel2").await;
        let list = h
            .get_ok(&format!(
                "/api/v1/serviceaccounts?labelSelector={}",
                enc("app=web")
            ))
            .await;
        let pairs: Vec<(String, String)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["metadata"]["namespace"].as_str().unwrap().to_string(),
                    i["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want: Vec<(String, String)> =
            [("sel", "s1"), ("sel", "s3"), ("sel2", "s1"), ("sel2", "s3")]
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
        assert_eq!(pairs, want);
    })
    .await;
}

#[tokio::test]
async fn field_selectors_filter_lists() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        labelled_set(&h, "fa").await;
        h.create_namespace("fb").await;
        h.create_sa("fb", "s1", Value::Null).await;
        h.create_sa("fb", "other", Value::Null).await;
        let path = sa_path("fa");
        let all = "/api/v1/serviceaccounts";
        let cases: Vec<(String, &str, Vec<&str>)> = vec![
            (path.clone(), "metadata.name=s2", vec!["fa/s2"]),
            (path.clone(), "metadata.name==s2", vec!["fa/s2"]),
            (
                path.clone(),
                "metadata.name!=s2",
                vec!["fa/s1", "fa/s3", "fa/s4", "fa/s5"],
            ),
            (
                path.clone(),
                "metadata.namespace=fa",
                vec!["fa/s1", "fa/s2", "fa/s3", "fa/s4", "fa/s5"],
            ),
            (path.clone(), "metadata.namespace==fb", vec![]),
            (path.clone(), "metadata.namespace!=fa", vec![]),
            (
                path.clone(),
                "metadata.name=s1,metadata.namespace=fa",
                vec!["fa/s1"],
            ),
            (
                path.clone(),
                "metadata.name!=s1,metadata.name!=s2",
                vec!["fa/s3", "fa/s4", "fa/s5"],
            ),
            (
                all.to_string(),
                "metadata.namespace=fb",
                vec!["fb/other", "fb/s1"],
            ),
            (
                all.to_string(),
                "metadata.namespace==fb",
                vec!["fb/other", "fb/s1"],
            ),
            (
                all.to_string(),
                "metadata.namespace!=fa",
                vec!["fb/other", "fb/s1"],
            ),
            (all.to_string(), "metadata.name=s1", vec!["fa/s1", "fb/s1"]),
            (
                all.to_string(),
                "metadata.name=s1,metadata.namespace!=fa",
                vec!["fb/s1"],
            ),
        ];
        for (base, selector, want) in &cases {
            let list = h
                .get_ok(&format!("{base}?fieldSelector={}", enc(selector)))
                .await;
            let got: Vec<String> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    format!(
                        "{}/{}",
                        i["metadata"]["namespace"].as_str().unwrap(),
                        i["metadata"]["name"].as_str().unwrap()
                    )
                })
                // Not the namespaces' default ServiceAccounts.
                .filter(|n| !n.ends_with("/default"))
                .collect();
            assert_eq!(got, *want, "{base}?fieldSelector={selector}");
        }

        // Label and field selectors together.
        let list = h
            .get_ok(&format!(
                "{path}?labelSelector={}&fieldSelector={}",
                enc("app=web"),
                enc("metadata.name!=s1")
            ))
            .await;
        assert_eq!(item_names(&list), ["s3"]);
    })
    .await;
}

#[tokio::test]
async fn deletecollection_honours_selectors() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        labelled_set(&h, "dc").await;
        let path = sa_path("dc");

        let r = h
            .delete(&format!("{path}?labelSelector={}", enc("app=web")))
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(item_names(&h.get_ok(&path).await), ["s2", "s4", "s5"]);

        let r = h
            .delete(&format!(
                "{path}?labelSelector={}",
                enc("tier notin (back)")
            ))
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(item_names(&h.get_ok(&path).await), ["s2", "s5"]);

        let r = h
            .delete(&format!(
                "{path}?fieldSelector={}",
                enc("metadata.name!=s5")
            ))
            .await;
        assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(item_names(&h.get_ok(&path).await), ["s5"]);

        // A malformed selector deletes nothing.
        let r = h
            .delete(&format!("{path}?labelSelector={}", enc("app in (web")))
            .await;
        assert_status(&r, 400, "BadRequest");
        let r = h
            .delete(&format!("{path}?fieldSelector={}", enc("spec.nothing=x")))
            .await;
        assert_status(&r, 400, "BadRequest");
        assert_eq!(item_names(&h.get_ok(&path).await), ["s5"]);
    })
    .await;
}

#[tokio::test]
async fn malformed_selectors_are_bad_requests() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        labelled_set(&h, "bad").await;
        let path = sa_path("bad");
        for selector in [
            "app in (web",
            "app notin web",
            "app=web,",
            "=web",
            "!",
            "a b",
            "app=we b",
            "in (a)",
            "app=-bad-value-",
            "-bad-key=x",
        ] {
            for base in [path.as_str(), "/api/v1/serviceaccounts"] {
                let r = h
                    .get(&format!("{base}?labelSelector={}", enc(selector)))
                    .await;
                assert_eq!(
                    r.code(),
                    400,
                    "labelSelector={selector:?} on {base}: {}",
                    String::from_utf8_lossy(&r.body)
                );
                assert_status(&r, 400, "BadRequest");
            }
        }
        for selector in [
            "metadata.name",
            "metadata.name>s1",
            "=s1",
            "spec.secrets=x",
            "metadata.labels=x",
            "status.phase=Active",
            "metadata.uid=abc",
        ] {
            for base in [path.as_str(), "/api/v1/serviceaccounts"] {
                let r = h
                    .get(&format!("{base}?fieldSelector={}", enc(selector)))
                    .await;
                assert_eq!(
                    r.code(),
                    400,
                    "fieldSelector={selector:?} on {base}: {}",
                    String::from_utf8_lossy(&r.body)
                );
                assert_status(&r, 400, "BadRequest");
            }
        }
    })
    .await;
}

/// get: unset = most recent, "0" = any, other = not older than (spec §4.11).
#[tokio::test]
async fn get_resource_version_semantics() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("getrv").await;
        let path = format!("{}/x", sa_path("getrv"));
        let v1 = h.create_sa("getrv", "x", Value::Null).await;
        let rv1 = rv_of(&v1);
        let r = h
            .patch_merge(&path, &json!({"metadata": {"labels": {"v": "2"}}}))
            .await;
        assert_eq!(r.code(), 200);
        let rv2 = rv_of(&r.json());
        assert!(rv2 > rv1);

        // Most recent.
        let got = h.get_ok(&path).await;
        assert_eq!(rv_of(&got), rv2);
        assert_eq!(got["metadata"]["labels"]["v"], "2");
        // Any: some version of the object.
        let got = h.get_ok(&format!("{path}?resourceVersion=0")).await;
        assert_eq!(got["metadata"]["name"], "x");
        assert!([rv1, rv2].contains(&rv_of(&got)), "{got}");
        // Not older than an older version, and not older than the current one.
        let got = h.get_ok(&format!("{path}?resourceVersion={rv1}")).await;
        assert!(rv_of(&got) >= rv1, "{got}");
        let got = h.get_ok(&format!("{path}?resourceVersion={rv2}")).await;
        assert_eq!(rv_of(&got), rv2, "{got}");
        assert_eq!(got["metadata"]["labels"]["v"], "2");

        // A missing object is NotFound whatever the version asked for.
        for rv in ["", "0", &rv2.to_string()] {
            let r = h
                .get(&format!("{}/nobody?resourceVersion={rv}", sa_path("getrv")))
                .await;
            assert_status(&r, 404, "NotFound");
        }
        // Not a resource version at all.
        let r = h.get(&format!("{path}?resourceVersion=abc")).await;
        assert_status(&r, 400, "BadRequest");
    })
    .await;
}

/// A version a little ahead of the store is waited for: the request is answered once a write
/// reaches it.
#[tokio::test]
async fn near_future_resource_version_is_waited_for() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("soon").await;
        let last = rv_of(&h.create_sa("soon", "a", Value::Null).await);
        let ahead = last + 1;
        let path = sa_path("soon");

        let get_url = format!("{path}/a?resourceVersion={ahead}");
        let list_url = format!("{path}?resourceVersion={ahead}&resourceVersionMatch=NotOlderThan");
        let get = h.get(&get_url);
        let list = h.get(&list_url);
        let write = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            h.create_sa("soon", "b", Value::Null).await
        };
        let (get, list, b) = tokio::join!(get, list, write);
        assert!(rv_of(&b) >= ahead);
        assert_eq!(get.code(), 200, "{}", String::from_utf8_lossy(&get.body));
        assert_eq!(get.json()["metadata"]["name"], "a");
        assert_eq!(list.code(), 200, "{}", String::from_utf8_lossy(&list.body));
        let list = list.json();
        let at = list_rv(&list).parse::<u64>().unwrap();
        assert!(at >= ahead, "{list}");
        // The revision counts every write to the store (on etcd also the replicas' own keys),
        // so another write may reach `ahead` before `b`: the list holds what existed at `at`.
        let expected: &[&str] = if at >= rv_of(&b) { &["a", "b"] } else { &["a"] };
        assert_eq!(item_names(&list), expected, "{list}");
    })
    .await;
}

/// Versions the store will not reach soon: 504 with Retry-After, after a short wait.
#[tokio::test]
async fn far_future_resource_versions_time_out() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("later").await;
        let last = rv_of(&h.create_sa("later", "a", Value::Null).await);
        let far = last + 1_000_000_000;
        let path = sa_path("later");
        let urls = [
            format!("{path}/a?resourceVersion={far}"),
            format!("{path}?resourceVersion={far}"),
            format!("{path}?resourceVersion={far}&resourceVersionMatch=NotOlderThan"),
            format!("{path}?resourceVersion={far}&resourceVersionMatch=NotOlderThan&limit=1"),
            format!("{path}?resourceVersion={far}&resourceVersionMatch=Exact"),
            format!("{path}?resourceVersion={far}&resourceVersionMatch=Exact&limit=1"),
            format!("{path}?resourceVersion={far}&limit=1"),
        ];
        let replies = futures::future::join_all(urls.iter().map(|u| h.get(u))).await;
        for (url, r) in urls.iter().zip(&replies) {
            assert_too_large(r, url);
        }
    })
    .await;
}

/// The list table of spec §4.11, cell by cell (invalid cells are in
/// `invalid_resource_version_combinations`).
#[tokio::test]
async fn list_resource_version_semantics() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("tbl").await;
        let path = sa_path("tbl");
        let a0 = rv_of(&h.create_sa("tbl", "a0", Value::Null).await);
        let a1 = rv_of(&h.create_sa("tbl", "a1", Value::Null).await);
        let a2 = rv_of(&h.create_sa("tbl", "a2", Value::Null).await);
        // The state at `snap` is a0, a1, a2 as created.
        let snap = a2;
        let at_snap = vec![
            ("a0".to_string(), a0),
            ("a1".to_string(), a1),
            ("a2".to_string(), a2),
        ];
        let a3 = rv_of(&h.create_sa("tbl", "a3", Value::Null).await);
        let r = h
            .patch_merge(
                &format!("{path}/a0"),
                &json!({"metadata": {"labels": {"v": "2"}}}),
            )
            .await;
        assert_eq!(r.code(), 200);
        let a0b = rv_of(&r.json());
        assert_eq!(h.delete(&format!("{path}/a1")).await.code(), 200);
        let a4 = rv_of(&h.create_sa("tbl", "a4", Value::Null).await);
        let now = vec![
            ("a0".to_string(), a0b),
            ("a2".to_string(), a2),
            ("a3".to_string(), a3),
            ("a4".to_string(), a4),
        ];

        // Follows the chunks of a paged list and returns all items; every chunk must carry the
        // first chunk's collection resourceVersion.
        async fn paged(h: &Http, path: &str, query: &str) -> (String, Vec<(String, u64)>) {
            let sep = if query.is_empty() { "" } else { "&" };
            let first = h.get_ok(&format!("{path}?limit=2{sep}{query}")).await;
            assert!(
                first["items"].as_array().unwrap().len() <= 2,
                "{query}: {first}"
            );
            let rv = list_rv(&first);
            let pages = all_pages(h, path, 2, first).await;
            let mut items = Vec::new();
            for p in &pages {
                assert_eq!(list_rv(p), rv, "{query}: chunks from different snapshots");
                items.extend(name_rvs(p));
            }
            (rv, items)
        }

        // resourceVersionMatch unset, no limit: Most Recent / Any / Not Older Than.
        let list = h.get_ok(&path).await;
        assert_eq!(name_rvs(&list), now, "most recent");
        assert!(list_rv(&list).parse::<u64>().unwrap() >= a4);
        let list = h.get_ok(&format!("{path}?resourceVersion=0")).await;
        assert_eq!(list["kind"], "ServiceAccountList", "any");
        let list = h.get_ok(&format!("{path}?resourceVersion={snap}")).await;
        assert!(
            list_rv(&list).parse::<u64>().unwrap() >= snap,
            "not older than: {list}"
        );
        assert!(item_names(&list).contains(&"a2".to_string()), "{list}");

        // Unset match, with limit: Most Recent / Any / Exact.
        let (rv, items) = paged(&h, &path, "").await;
        assert_eq!(items, now, "most recent, paged");
        assert!(rv.parse::<u64>().unwrap() >= a4);
        // Any, paged: the server may ignore the limit for "0" and answer in one piece.
        let list = h.get_ok(&format!("{path}?limit=2&resourceVersion=0")).await;
        if !continue_of(&list).is_empty() {
            assert!(list["items"].as_array().unwrap().len() <= 2, "{list}");
        }
        let (rv, items) = paged(&h, &path, &format!("resourceVersion={snap}")).await;
        assert_eq!(
            rv,
            snap.to_string(),
            "exact, paged: collection resourceVersion"
        );
        assert_eq!(items, at_snap, "exact, paged: the state at {snap}");

        // With a continue token: "0" is tolerated (the token decides), another version is not.
        let first = h.get_ok(&format!("{path}?limit=2")).await;
        let token = enc(&continue_of(&first));
        let rest = h
            .get_ok(&format!(
                "{path}?limit=2&continue={token}&resourceVersion=0"
            ))
            .await;
        assert_eq!(list_rv(&rest), list_rv(&first));
        assert_eq!(item_names(&rest), ["a3", "a4"]);
        let r = h
            .get(&format!(
                "{path}?limit=2&continue={token}&resourceVersion={snap}"
            ))
            .await;
        assert_status(&r, 400, "BadRequest");
        let current = list_rv(&first);
        let r = h
            .get(&format!(
                "{path}?limit=2&continue={token}&resourceVersion={current}"
            ))
            .await;
        assert_status(&r, 400, "BadRequest");

        // Exact, without and with limit.
        let list = h
            .get_ok(&format!(
                "{path}?resourceVersion={snap}&resourceVersionMatch=Exact"
            ))
            .await;
        assert_eq!(list_rv(&list), snap.to_string(), "exact");
        assert_eq!(name_rvs(&list), at_snap, "exact: the state at {snap}");
        let (rv, items) = paged(
            &h,
            &path,
            &format!("resourceVersion={snap}&resourceVersionMatch=Exact"),
        )
        .await;
        assert_eq!(rv, snap.to_string(), "exact, paged");
        assert_eq!(items, at_snap, "exact, paged: the state at {snap}");
        // Exact at the version of a later write.
        let list = h
            .get_ok(&format!(
                "{path}?resourceVersion={a3}&resourceVersionMatch=Exact"
            ))
            .await;
        assert_eq!(list_rv(&list), a3.to_string());
        assert_eq!(item_names(&list), ["a0", "a1", "a2", "a3"]);

        // NotOlderThan, without and with limit: "0" is Any, a version is a lower bound.
        for query in [
            "resourceVersion=0&resourceVersionMatch=NotOlderThan",
            "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=2",
        ] {
            let list = h.get_ok(&format!("{path}?{query}")).await;
            assert_eq!(list["kind"], "ServiceAccountList", "{query}");
        }
        let list = h
            .get_ok(&format!(
                "{path}?resourceVersion={snap}&resourceVersionMatch=NotOlderThan"
            ))
            .await;
        let at = list_rv(&list).parse::<u64>().unwrap();
        assert!(at >= snap, "not older than {snap}: {list}");
        if at >= a4 {
            assert_eq!(name_rvs(&list), now);
        }
        let (rv, items) = paged(
            &h,
            &path,
            &format!("resourceVersion={snap}&resourceVersionMatch=NotOlderThan"),
        )
        .await;
        let at = rv.parse::<u64>().unwrap();
        assert!(at >= snap, "not older than {snap}, paged");
        if at >= a4 {
            assert_eq!(items, now);
        }
        // The newest version is not older than itself.
        let list = h
            .get_ok(&format!(
                "{path}?resourceVersion={a4}&resourceVersionMatch=NotOlderThan"
            ))
            .await;
        assert_eq!(name_rvs(&list), now);
    })
    .await;
}

/// The invalid cells of the list table and other malformed combinations.
#[tokio::test]
async fn invalid_resource_version_combinations() {
    within(LIMIT, async {
        let s = TestServer::start();
        let h = s.http();
        h.create_namespace("inv").await;
        let path = sa_path("inv");
        for i in 0..3 {
            h.create_sa("inv", &format!("i{i}"), Value::Null).await;
        }
        let first = h.get_ok(&format!("{path}?limit=1")).await;
        let token = enc(&continue_of(&first));
        let rv = list_rv(&first);

        for query in [
            "resourceVersionMatch=Exact".to_string(),
            "resourceVersionMatch=Exact&limit=1".to_string(),
            "resourceVersionMatch=Exact&resourceVersion=".to_string(),
            "resourceVersionMatch=NotOlderThan".to_string(),
            "resourceVersionMatch=NotOlderThan&limit=1".to_string(),
            "resourceVersionMatch=NotOlderThan&resourceVersion=".to_string(),
            // Exact at "0" is meaningless.
            "resourceVersionMatch=Exact&resourceVersion=0".to_string(),
            "resourceVersionMatch=Exact&resourceVersion=0&limit=1".to_string(),
            // Unknown match values.
            format!("resourceVersionMatch=Newest&resourceVersion={rv}"),
            format!("resourceVersionMatch=exact&resourceVersion={rv}"),
            // A match together with a continue token.
            format!("resourceVersionMatch=NotOlderThan&resourceVersion=0&limit=1&continue={token}"),
            format!("resourceVersionMatch=Exact&resourceVersion={rv}&limit=1&continue={token}"),
        ] {
            let r = h.get(&format!("{path}?{query}")).await;
            assert_invalid_list_options(&r, "resourceVersionMatch", &query);
        }
        // sendInitialEvents belongs to watch only.
        let r = h
            .get(&format!(
                "{path}?sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0"
            ))
            .await;
        assert_invalid_list_options(&r, "sendInitialEvents", "sendInitialEvents on a list");

        // A continue token with an explicit version other than "0".
        let r = h
            .get(&format!(
                "{path}?limit=1&continue={token}&resourceVersion={rv}"
            ))
            .await;
        assert_status(&r, 400, "BadRequest");
        // Versions that are not versions.
        for bad in ["abc", "-1", "1.5", "12abc"] {
            let r = h.get(&format!("{path}?resourceVersion={bad}")).await;
            assert_status(&r, 400, "BadRequest");
            let r = h
                .get(&format!(
                    "{path}?resourceVersion={bad}&resourceVersionMatch=Exact"
                ))
                .await;
            assert_status(&r, 400, "BadRequest");
        }
    })
    .await;
}

/// GET `path` as `accept`, gzipped if the server will.
async fn get_gzipped(http: &Http, path: &str, accept: &str) -> Reply {
    http.send(
        "GET",
        path,
        None,
        &[("accept", accept), ("accept-encoding", "gzip")],
    )
    .await
}

/// A list longer than one of the server's chunks, pretty (asked with `?pretty=true`, or by a
/// `curl` User-Agent), gzipped, or both: each answer is the compact list's value, indented as
/// Kubernetes indents (two spaces, no trailing newline), and a gzipped answer unzips to the
/// bytes of the same answer unzipped. In YAML, CBOR and protobuf the list, sent a chunk at a
/// time too, decodes to the same items.
#[tokio::test]
async fn long_lists_pretty_and_gzipped_carry_the_compact_lists_value() {
    use std::io::Read;
    // CBOR is served only with its gate on, as in Kubernetes.
    let s = TestServer::start_with(&["--feature-gates", "CBORServingAndStorage=true"]);
    let ns = "long-lists";
    s.http().create_namespace(ns).await;
    let padding = "p".repeat(2048);
    for i in 0..100 {
        let body = json!({"metadata": {"name": format!("sa-{i:03}"),
            "annotations": {"padding": padding, "quote": "\"{[,:]}\" \\ é"}}});
        let r = s.post_json(&sa_path(ns), &body).await;
        assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    }
    let gunzip = |r: &Reply| {
        assert_eq!(r.header("content-encoding"), "gzip");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .expect("a gzip body");
        out
    };
    let http = s.http();
    let path = sa_path(ns);
    let compact = http.get(&path).await;
    assert_eq!(compact.code(), 200);
    assert!(
        compact.body.len() > 200 * 1024,
        "{} bytes",
        compact.body.len()
    );
    assert!(compact.body.ends_with(b"]}\n"));
    let list: Value = compact.json();
    assert!(list["items"].as_array().unwrap().len() >= 100);
    let want = serde_json::to_vec_pretty(&list).unwrap();
    let pretty_path = format!("{path}?pretty=true");
    for (path, headers) in [
        (pretty_path.as_str(), vec![]),
        (path.as_str(), vec![("user-agent", "curl/8.11.1")]),
    ] {
        let r = http.send("GET", path, None, &headers).await;
        assert_eq!(r.code(), 200);
        assert_eq!(r.header("content-type"), "application/json");
        assert!(
            r.body[..] == want[..],
            "{path} {headers:?}: {}",
            String::from_utf8_lossy(&r.body[..200.min(r.body.len())])
        );
        let mut zipped = headers.clone();
        zipped.push(("accept-encoding", "gzip"));
        let r = http.send("GET", path, None, &zipped).await;
        assert_eq!(r.code(), 200);
        assert!(r.body.len() < want.len() / 4, "{} bytes", r.body.len());
        assert!(gunzip(&r) == want, "{path} {zipped:?}");
    }
    let r = http
        .send("GET", &path, None, &[("accept-encoding", "gzip")])
        .await;
    assert_eq!(r.code(), 200);
    assert!(gunzip(&r)[..] == compact.body[..]);
    // The other formats carry the same items, gzipped or not. A protobuf list announces its
    // length (its envelope needs the items' lengths first anyway); YAML and CBOR lists are
    // written item by item as they are sent, like Kubernetes' large answers, so a length they
    // give must be the body's.
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    for accept in [
        "application/yaml",
        "application/cbor",
        "application/vnd.kubernetes.protobuf",
    ] {
        let r = http.send("GET", &path, None, &[("accept", accept)]).await;
        assert_eq!(r.code(), 200, "{accept}");
        let length = r.header("content-length");
        if accept.contains("protobuf") || !length.is_empty() {
            assert_eq!(length, r.body.len().to_string(), "{accept}");
        }
        let zipped = get_gzipped(&http, &path, accept).await;
        assert!(gunzip(&zipped)[..] == r.body[..], "{accept}");
        match accept {
            "application/yaml" => {
                let v: Value = serde_norway::from_slice(&r.body).expect("a YAML list");
                assert_eq!(v, list);
            }
            "application/cbor" => {
                let (v, rest) = crate::cbor::from_cbor(&r.body);
                assert!(rest.is_empty());
                assert_eq!(v, list);
            }
            _ => {
                use prost::Message;
                let (kind, raw) = crate::protobuf::open(&r.body);
                assert_eq!(kind, "ServiceAccountList");
                let got = k8s_pb::api::core::v1::ServiceAccountList::decode(&raw[..])
                    .expect("a ServiceAccountList");
                let rv = got.metadata.and_then(|m| m.resource_version);
                assert_eq!(rv.as_deref(), list["metadata"]["resourceVersion"].as_str());
                let got: Vec<String> = got
                    .items
                    .into_iter()
                    .map(|i| i.metadata.and_then(|m| m.name).unwrap_or_default())
                    .collect();
                assert_eq!(got, names);
            }
        }
    }
    // A Table, as kubectl asks for it, has a row per item, pretty or gzipped alike.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let r = http.send("GET", &path, None, &[("accept", table)]).await;
    assert_eq!(r.code(), 200);
    let t: Value = r.json();
    // Rows by their first cell, the name (ages may tick between two requests).
    let row_names = |t: &Value| -> Vec<String> {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["cells"][0].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(row_names(&t), names);
    let pretty = http
        .send("GET", &pretty_path, None, &[("accept", table)])
        .await;
    let pretty_t: Value = serde_json::from_slice(&pretty.body).unwrap();
    assert!(pretty.body.starts_with(b"{\n  \"kind\": \"Table\""));
    assert_eq!(row_names(&pretty_t), names);
    let zipped = get_gzipped(&http, &path, table).await;
    let zipped_t: Value = serde_json::from_slice(&gunzip(&zipped)).unwrap();
    assert_eq!(row_names(&zipped_t), names);
    // A short answer is compressed whole, its length announced.
    let one = format!("{path}/sa-000");
    let r = http
        .send("GET", &one, None, &[("accept-encoding", "gzip")])
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.header("content-length"), r.body.len().to_string());
    let plain = http.get(&one).await;
    assert!(gunzip(&r)[..] == plain.body[..]);
}

/// The encodings other than JSON that the watch cache keeps on each object for the next
/// reader (here YAML, protobuf and Table rows) stay within `--watch-cache-encodings-mib`:
/// lists larger than that budget come whole and alike every time, the encodings kept longest
/// are dropped (and made again when asked for), and `/metrics` shows the kept bytes under the
/// limit.
#[tokio::test]
async fn kept_encodings_stay_within_their_budget() {
    let s = TestServer::start_with(&["--watch-cache-encodings-mib=1"]);
    let h = Http::to(&s.addr);
    within(LIMIT, async {
        let ns = "kept-encodings";
        h.create_namespace(ns).await;
        // 48 objects of about 32 KiB: each format's items alone exceed the budget.
        let padding = "k".repeat(32 * 1024);
        for i in 0..48 {
            let body = json!({"metadata": {"name": format!("sa-{i:02}"),
                "annotations": {"padding": padding}}});
            let r = h.post_json(&sa_path(ns), &body).await;
            assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
        }
        let path = sa_path(ns);
        let list: Value = h.get(&path).await.json();
        assert_eq!(item_names(&list).len(), 48);
        let names = crate::common::item_names(&list);
        let scrape = |text: &str, name: &str| {
            crate::common::metric_value(text, name, &[]).unwrap_or_else(|| panic!("no {name}"))
        };
        let mut answers: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
        for round in 0..2 {
            for accept in [
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
                table,
            ] {
                let r = h.send("GET", &path, None, &[("accept", accept)]).await;
                assert_eq!(r.code(), 200, "{accept}, round {round}");
                answers.entry(accept).or_default().push(r.body.to_vec());
            }
            let metrics = h.get("/metrics").await;
            let text = String::from_utf8_lossy(&metrics.body);
            let kept = scrape(&text, "strata_watch_cache_kept_encoding_bytes");
            let limit = scrape(&text, "strata_watch_cache_kept_encoding_limit_bytes");
            assert_eq!(limit, f64::from(1 << 20));
            assert!(kept > 0.0 && kept <= limit, "{kept} bytes kept");
            let dropped = scrape(&text, "strata_watch_cache_kept_encodings_dropped_total");
            assert!(dropped > 0.0, "nothing dropped in round {round}");
        }
        let yaml = &answers["application/yaml"];
        assert_eq!(yaml[0], yaml[1], "YAML made again is the same");
        let v: Value = serde_norway::from_slice(&yaml[0]).expect("a YAML list");
        assert_eq!(v, list);
        let proto = &answers["application/vnd.kubernetes.protobuf"];
        assert_eq!(proto[0], proto[1], "protobuf made again is the same");
        for body in &answers[table] {
            let t: Value = serde_json::from_slice(body).expect("a Table");
            let rows: Vec<String> = t["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| row["cells"][0].as_str().unwrap().to_string())
                .collect();
            assert_eq!(rows, names);
        }
    })
    .await;
}
