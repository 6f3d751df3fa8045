//! `strata snapshot save` and `restore` move a cluster between engines: from a running RocksDB
//! server into a fresh etcd, and from etcd back into a fresh data directory. Objects keep their
//! uid, creationTimestamp, managedFields, finalizers and labels; their resourceVersions are the
//! target's revisions; a ServiceAccount token minted before the move still authenticates, and
//! RBAC still grants it what its RoleBinding grants. Damaged files and non-empty targets are
//! refused with exit code 1.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use strata_store::Store;
use strata_store_etcd::testing::TestEtcd;

use crate::common::{run_with_timeout, rv_of, within, Finished, Http};
use crate::one_process::{strata_bin, OneProcess};

const ADMIN: &str = "admin-token-0123456789";
const TOKENS: &str = "admin-token-0123456789,admin,admin-uid,\"system:masters\"\n";
const ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles";
const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
const SAS: &str = "/api/v1/namespaces/team/serviceaccounts";

/// Every object the test makes, by path.
fn paths() -> Vec<String> {
    vec![
        "/api/v1/namespaces/team".into(),
        format!("{SAS}/robot"),
        format!("{SAS}/plain"),
        format!("{ROLES}/sa-reader"),
        format!("{BINDINGS}/robot-reads"),
    ]
}

fn strata(args: &[&str], dir: &Path) -> Finished {
    let mut cmd = Command::new(strata_bin());
    cmd.args(args).env("RUST_LOG", "warn");
    run_with_timeout(&mut cmd, dir, Duration::from_secs(60))
}

fn assert_ok(run: &Finished) {
    assert!(run.success(), "{run:?}");
}

/// A failure with exit code 1, a message naming `expected`, and no panic.
fn assert_fails(run: &Finished, expected: &str) {
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(run.stderr.contains(expected), "{expected:?}: {run:?}");
    assert!(!run.stderr.contains("panicked"), "{run:?}");
}

async fn admin(http: &Http, method: &str, path: &str, body: Option<&Value>) -> Value {
    let r = http.as_token(ADMIN, method, path, body).await;
    assert!(
        r.code() == 200 || r.code() == 201,
        "{method} {path}: {} {}",
        r.code(),
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

/// The fields a move must keep, per object.
async fn kept(http: &Http) -> Vec<Value> {
    let mut out = Vec::new();
    for path in paths() {
        let obj = admin(http, "GET", &path, None).await;
        let m = &obj["metadata"];
        assert!(!m["uid"].as_str().unwrap_or("").is_empty(), "{obj}");
        out.push(json!({
            "path": path,
            "uid": m["uid"],
            "creationTimestamp": m["creationTimestamp"],
            "managedFields": m["managedFields"],
            "finalizers": m["finalizers"],
            "labels": m["labels"],
            "rules": obj["rules"],
            "subjects": obj["subjects"],
        }));
    }
    out
}

/// What the robot's token may do: read ServiceAccounts in `team` (its RoleBinding), nothing
/// else.
async fn robot_can_read_only_its_namespace(http: &Http, token: &str) {
    let r = http.as_token(token, "GET", SAS, None).await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let r = http
        .as_token(token, "GET", "/api/v1/namespaces", None)
        .await;
    assert_eq!(r.code(), 403, "{}", String::from_utf8_lossy(&r.body));
    let r = http.as_token("not-a-token", "GET", SAS, None).await;
    assert_eq!(r.code(), 401, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_rocksdb_server_moves_to_etcd_and_back() {
    within(Duration::from_secs(180), async {
        let work = tempfile::tempdir().unwrap();
        let tokens = work.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let tokens = tokens.to_str().unwrap().to_string();
        let auth = [
            "--insecure-http",
            "--anonymous-auth=false",
            "--token-auth-file",
            tokens.as_str(),
            "--authorization-mode=RBAC",
        ];
        let rocks_dir = work.path().join("rocks");
        let rocks = OneProcess::start(&rocks_dir, &auth, false);
        let r = rocks.http();

        admin(
            &r,
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"metadata": {"name": "team"}})),
        )
        .await;
        let sa = json!({"metadata": {
            "name": "robot",
            "labels": {"app": "web", "tier": "back"},
            "finalizers": ["example.com/keep"],
        }});
        admin(&r, "POST", SAS, Some(&sa)).await;
        admin(&r, "POST", SAS, Some(&json!({"metadata": {"name": "plain"}}))).await;
        let role = json!({
            "metadata": {"name": "sa-reader"},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list"]}],
        });
        admin(&r, "POST", ROLES, Some(&role)).await;
        let binding = json!({
            "metadata": {"name": "robot-reads"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sa-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}],
        });
        admin(&r, "POST", BINDINGS, Some(&binding)).await;
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        });
        let answer = admin(&r, "POST", &format!("{SAS}/robot/token"), Some(&request)).await;
        let robot = answer["status"]["token"].as_str().unwrap().to_string();
        robot_can_read_only_its_namespace(&r, &robot).await;
        let before = kept(&r).await;
        assert!(before[1]["managedFields"].is_array(), "{}", before[1]);

        // Saved while the server runs on the data directory.
        let file = work.path().join("cluster.snap");
        let file_arg = file.to_str().unwrap();
        let rocks_arg = rocks_dir.to_str().unwrap();
        let run = strata(&["snapshot", "save", file_arg, "--data-dir", rocks_arg], work.path());
        assert_ok(&run);
        assert!(run.stdout.contains("saved"), "{run:?}");

        // Damaged copies are refused, and leave the target untouched.
        let good = std::fs::read(&file).unwrap();
        let bad = work.path().join("bad.snap");
        let bad_arg = bad.to_str().unwrap();
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd (Debian's etcd-server)");
        let direct = etcd.store("").await;
        let etcd_flags = ["--storage-backend", "etcd", "--etcd-servers", etcd.url.as_str()];
        let restore_bad = |bytes: Vec<u8>, expected: &'static str| {
            std::fs::write(&bad, bytes).unwrap();
            let mut args = vec!["snapshot", "restore", bad_arg];
            args.extend_from_slice(&etcd_flags);
            assert_fails(&strata(&args, work.path()), expected);
        };
        restore_bad(good[..good.len() / 2].to_vec(), "truncated");
        restore_bad(b"hello, not a snapshot at all".to_vec(), "not a Strata snapshot");
        let mut flipped = good.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x01;
        restore_bad(flipped, "");
        let untouched = direct
            .range(strata_store::RangeRequest { prefix: "/".into(), ..Default::default() })
            .await
            .unwrap();
        assert!(untouched.kvs.is_empty(), "{:?}", untouched.kvs);

        // Restored into the fresh etcd; a second restore finds it not empty.
        let mut args = vec!["snapshot", "restore", file_arg];
        args.extend_from_slice(&etcd_flags);
        assert_ok(&strata(&args, work.path()));
        assert_fails(&strata(&args, work.path()), "not empty");

        // A server on etcd serves everything as it was.
        let mut flags: Vec<&str> = etcd_flags.to_vec();
        flags.extend_from_slice(&auth);
        let on_etcd_dir = work.path().join("on-etcd");
        let on_etcd = OneProcess::start(&on_etcd_dir, &flags, false);
        let e = on_etcd.http();
        assert_eq!(kept(&e).await, before);
        robot_can_read_only_its_namespace(&e, &robot).await;
        // The admin token moved with the store.
        assert_eq!(
            std::fs::read(on_etcd_dir.join("pki/admin.token")).unwrap(),
            std::fs::read(rocks_dir.join("pki/admin.token")).unwrap()
        );
        // resourceVersions are etcd's revisions of the restored keys.
        let got = admin(&e, "GET", &format!("{SAS}/robot"), None).await;
        let (kv, _) = direct
            .get("/registry/serviceaccounts/team/robot", None)
            .await
            .unwrap();
        assert_eq!(rv_of(&got), kv.expect("restored under /registry").mod_revision.get());
        // The restore's own history is compacted: a watch or list from before it is 410.
        let r = e
            .as_token(
                ADMIN,
                "GET",
                &format!(
                    "{SAS}?resourceVersion={}&resourceVersionMatch=Exact",
                    rv_of(&got) - 1
                ),
                None,
            )
            .await;
        crate::common::assert_status(&r, 410, "Expired");
        // The restored server writes as usual.
        admin(&e, "POST", SAS, Some(&json!({"metadata": {"name": "after-move"}}))).await;

        // And back: saved from etcd while a server runs on it, into a fresh data directory.
        let back = work.path().join("back.snap");
        let back_arg = back.to_str().unwrap();
        let mut args = vec!["snapshot", "save", back_arg];
        args.extend_from_slice(&etcd_flags);
        assert_ok(&strata(&args, work.path()));
        let again_dir = work.path().join("again");
        let again_arg = again_dir.to_str().unwrap();
        assert_ok(&strata(
            &["snapshot", "restore", back_arg, "--data-dir", again_arg],
            work.path(),
        ));
        drop(on_etcd);
        let again = OneProcess::start(&again_dir, &auth, false);
        let a = again.http();
        assert_eq!(kept(&a).await, before);
        admin(&a, "GET", &format!("{SAS}/after-move"), None).await;
        robot_can_read_only_its_namespace(&a, &robot).await;
    })
    .await;
}

#[tokio::test]
async fn snapshot_usage_and_missing_sources_are_clear_errors() {
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("nothing-here");
    let file = work.path().join("x.snap");
    let run = strata(
        &[
            "snapshot",
            "save",
            file.to_str().unwrap(),
            "--data-dir",
            missing.to_str().unwrap(),
        ],
        work.path(),
    );
    assert_fails(&run, "holds no store");
    assert!(!file.exists());
    let run = strata(
        &["snapshot", "restore", file.to_str().unwrap()],
        work.path(),
    );
    assert_fails(&run, "x.snap");
    let run = strata(&["snapshot", "save"], work.path());
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(
        run.stderr.contains("Usage: strata snapshot save"),
        "{run:?}"
    );
    let run = strata(&["snapshot", "save", "f", "--listen", "x"], work.path());
    assert_eq!(run.status.code(), Some(2), "{run:?}");
}

/// The names of the ServiceAccounts in `busy`, read at `rv` exactly (or the latest for "").
async fn busy_names(http: &Http, rv: &str) -> Vec<String> {
    let path = match rv {
        "" => format!("{}?limit=100000", crate::common::sa_path("busy")),
        rv => format!(
            "{}?resourceVersion={rv}&resourceVersionMatch=Exact",
            crate::common::sa_path("busy")
        ),
    };
    crate::common::item_names(&http.get_ok(&path).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_while_a_client_writes_holds_exactly_one_revision() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    within(Duration::from_secs(180), async {
        let work = tempfile::tempdir().unwrap();
        let etcd = TestEtcd::start().expect("start /usr/bin/etcd (Debian's etcd-server)");
        let _ready = etcd.store("").await;
        let plain = [
            "--insecure-http",
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
        ];
        for source in ["rocksdb", "etcd"] {
            let mut flags: Vec<&str> = plain.to_vec();
            if source == "etcd" {
                flags.extend(["--storage-backend", "etcd", "--etcd-servers", &etcd.url]);
            }
            let dir = work.path().join(source);
            let server = OneProcess::start(&dir, &flags, false);
            let http = server.http();
            http.create_namespace("busy").await;

            // A client creates ServiceAccounts one after another until told to stop.
            let (created, stop) = (
                Arc::new(AtomicUsize::new(0)),
                Arc::new(AtomicBool::new(false)),
            );
            let writer = {
                let (http, created, stop) = (http.clone(), created.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let n = created.load(Ordering::SeqCst);
                        http.create_sa("busy", &format!("sa-{n:05}"), Value::Null)
                            .await;
                        created.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let wait_for = |n: usize| {
                let created = created.clone();
                async move {
                    while created.load(Ordering::SeqCst) < n {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            };
            wait_for(20).await;

            let file = work.path().join(format!("{source}.snap"));
            let mut args = vec!["snapshot", "save", file.to_str().unwrap()];
            match source {
                "etcd" => args.extend(["--storage-backend", "etcd", "--etcd-servers", &etcd.url]),
                _ => args.extend(["--data-dir", dir.to_str().unwrap()]),
            }
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let cwd = work.path().to_path_buf();
            let run = tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                strata(&args, &cwd)
            })
            .await
            .unwrap();
            assert_ok(&run);
            let after_save = created.load(Ordering::SeqCst);
            wait_for(after_save + 5).await;
            stop.store(true, Ordering::SeqCst);
            writer.await.unwrap();

            // `saved N keys at revision R to FILE`: the source's state at R, exactly.
            let revision = run
                .stdout
                .split_whitespace()
                .skip_while(|w| *w != "revision")
                .nth(1)
                .unwrap_or_else(|| panic!("no revision in {run:?}"))
                .to_string();
            let at_save = busy_names(&http, &revision).await;
            let latest = busy_names(&http, "").await;
            assert!(at_save.len() >= 20, "{source}: {}", at_save.len());
            assert!(
                latest.len() > at_save.len(),
                "{source}: later writes are not in it"
            );

            let restored_dir = work.path().join(format!("{source}-restored"));
            assert_ok(&strata(
                &[
                    "snapshot",
                    "restore",
                    file.to_str().unwrap(),
                    "--data-dir",
                    restored_dir.to_str().unwrap(),
                ],
                work.path(),
            ));
            let restored = OneProcess::start(&restored_dir, &plain, false);
            assert_eq!(busy_names(&restored.http(), "").await, at_save, "{source}");
        }
    })
    .await;
}
