//! Tables with Kubernetes' printer columns for the built-in kinds (ServiceAccount, ConfigMap,
//! Namespace, RoleBinding, ClusterRoleBinding; Role and ClusterRole keep the default columns),
//! over HTTP (lists, single objects, watches) and through kubectl 1.31 and 1.37 (`get`, `get -o
//! wide`) against a TLS server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{run_with_timeout, TestServer, WatchOptions, WatchStream};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// GETs `path` as a Table (`accept` names the Table's group and version), asserting a 200.
async fn table_as(s: &TestServer, path: &str, accept: &str) -> Value {
    let r = s.send("GET", path, None, &[("accept", accept)]).await;
    assert_eq!(
        r.code(),
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    let t = r.json();
    assert_eq!(t["kind"], "Table", "{t}");
    t
}

async fn table(s: &TestServer, path: &str) -> Value {
    table_as(s, path, TABLE).await
}

async fn create(s: &TestServer, path: &str, body: Value) -> Value {
    let r = s.post_json(path, &body).await;
    assert_eq!(
        r.code(),
        201,
        "POST {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

/// The column definitions as (name, type, format, priority), checking each has a description.
fn columns(t: &Value) -> Vec<(String, String, String, i64)> {
    t["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no columnDefinitions: {t}"))
        .iter()
        .map(|c| {
            assert!(
                c["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{c}"
            );
            (
                c["name"].as_str().unwrap().to_string(),
                c["type"].as_str().unwrap().to_string(),
                c["format"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn col(name: &str, ty: &str, format: &str, priority: i64) -> (String, String, String, i64) {
    (name.into(), ty.into(), format.into(), priority)
}

/// The cells of the row whose first cell is `name`.
fn cells<'a>(t: &'a Value, name: &str) -> &'a Vec<Value> {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == name)
        .unwrap_or_else(|| panic!("no row {name}: {t}"))["cells"]
        .as_array()
        .unwrap()
}

/// An age cell of an object made moments ago: a few seconds, as Kubernetes writes them.
fn assert_fresh_age(cell: &Value) {
    let age = cell.as_str().unwrap_or_else(|| panic!("age {cell}"));
    let secs = age
        .strip_suffix('s')
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("age {age:?} is not a number of seconds"));
    assert!(secs < 120, "{age}");
}

fn name_col() -> (String, String, String, i64) {
    col("Name", "string", "name", 0)
}

fn age_col() -> (String, String, String, i64) {
    col("Age", "string", "", 0)
}

#[tokio::test]
async fn core_kinds_have_kubernetes_columns() {
    let s = TestServer::start();
    let sa = "/api/v1/namespaces/default/serviceaccounts";
    create(
        &s,
        sa,
        json!({"metadata": {"name": "robot"}, "secrets": [{"name": "a"}, {"name": "b"}]}),
    )
    .await;
    create(&s, sa, json!({"metadata": {"name": "plain"}})).await;
    let t = table(&s, sa).await;
    assert_eq!(
        columns(&t),
        [name_col(), col("Secrets", "string", "", 0), age_col()]
    );
    let robot = cells(&t, "robot");
    assert_eq!(robot[1], 2, "{t}");
    assert_fresh_age(&robot[2]);
    assert_eq!(cells(&t, "plain")[1], 0, "{t}");
    // The default includeObject: each row carries the object's metadata.
    let row = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "robot");
    assert_eq!(row.unwrap()["object"]["kind"], "PartialObjectMetadata");

    // One object: the same columns, one row; the group asked for is echoed.
    let t = table_as(
        &s,
        &format!("{sa}/robot"),
        "application/json;as=Table;g=meta.svc.io;v=v1",
    )
    .await;
    assert_eq!(t["apiVersion"], "meta.svc.io/v1");
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
    assert_eq!(columns(&t)[1].0, "Secrets");
    assert_eq!(t["rows"][0]["cells"][1], 2);

    // ConfigMap: DATA counts data and binaryData keys together.
    let cm = "/api/v1/namespaces/default/configmaps";
    create(
        &s,
        cm,
        json!({"metadata": {"name": "settings"}, "data": {"a": "1", "b": "2"},
               "binaryData": {"c": "AAEC"}}),
    )
    .await;
    create(&s, cm, json!({"metadata": {"name": "empty"}})).await;
    let t = table(&s, &format!("{cm}?includeObject=None")).await;
    assert_eq!(
        columns(&t),
        [name_col(), col("Data", "string", "", 0), age_col()]
    );
    assert_eq!(cells(&t, "settings")[1], 3, "{t}");
    assert_eq!(cells(&t, "empty")[1], 0, "{t}");
    assert_fresh_age(&cells(&t, "settings")[2]);
    assert!(t["rows"][0].get("object").is_none(), "{t}");

    // Namespace: STATUS is the phase, so a namespace being deleted shows Terminating.
    let ns = "/api/v1/namespaces";
    create(
        &s,
        ns,
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .await;
    let t = table(&s, ns).await;
    assert_eq!(
        columns(&t),
        [name_col(), col("Status", "string", "", 0), age_col()]
    );
    assert_eq!(cells(&t, "default")[1], "Active", "{t}");
    assert_eq!(cells(&t, "held")[1], "Active", "{t}");
    assert_fresh_age(&cells(&t, "held")[2]);
    let r = s.delete(&format!("{ns}/held")).await;
    assert!(r.code() == 200 || r.code() == 202, "{}", r.code());
    let t = table(&s, &format!("{ns}/held")).await;
    assert_eq!(t["rows"][0]["cells"][0], "held");
    assert_eq!(t["rows"][0]["cells"][1], "Terminating", "{t}");
}

#[tokio::test]
async fn rbac_kinds_have_kubernetes_columns() {
    let s = TestServer::start();
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let rb = format!("{rbac}/namespaces/default/rolebindings");
    create(
        &s,
        &rb,
        json!({
            "metadata": {"name": "readers"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "ann"},
                {"kind": "ServiceAccount", "name": "robot", "namespace": "ops"},
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"},
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"},
                {"kind": "ServiceAccount", "name": "builder", "namespace": "default"},
            ],
        }),
    )
    .await;
    create(
        &s,
        &format!("{rbac}/namespaces/default/roles"),
        json!({"metadata": {"name": "pod-reader"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    )
    .await;
    create(
        &s,
        &rb,
        json!({
            "metadata": {"name": "local"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        }),
    )
    .await;
    let binding_columns = vec![
        name_col(),
        col("Role", "string", "", 0),
        age_col(),
        col("Users", "string", "", 1),
        col("Groups", "string", "", 1),
        col("ServiceAccounts", "string", "", 1),
    ];
    let t = table(&s, &rb).await;
    assert_eq!(columns(&t), binding_columns);
    let wide_descriptions: Vec<&str> = t["columnDefinitions"].as_array().unwrap()[3..]
        .iter()
        .map(|c| c["description"].as_str().unwrap())
        .collect();
    assert_eq!(
        wide_descriptions,
        [
            "Users in the roleBinding",
            "Groups in the roleBinding",
            "ServiceAccounts in the roleBinding"
        ]
    );
    let readers = cells(&t, "readers");
    assert_eq!(readers[1], "ClusterRole/view");
    assert_fresh_age(&readers[2]);
    assert_eq!(readers[3], "ann, bob");
    assert_eq!(readers[4], "devs");
    assert_eq!(readers[5], "ops/robot, default/builder");
    assert_eq!(
        cells(&t, "local")[1..],
        [
            json!("Role/pod-reader"),
            cells(&t, "local")[2].clone(),
            json!(""),
            json!(""),
            json!("")
        ]
    );

    let crb = format!("{rbac}/clusterrolebindings");
    create(
        &s,
        &crb,
        json!({
            "metadata": {"name": "ops-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "ops"}],
        }),
    )
    .await;
    let t = table(&s, &format!("{crb}/ops-edit")).await;
    assert_eq!(columns(&t), binding_columns);
    assert_eq!(
        t["columnDefinitions"][3]["description"],
        "Users in the clusterRoleBinding"
    );
    let row = &t["rows"][0]["cells"];
    assert_eq!(row[0], "ops-edit");
    assert_eq!(row[1], "ClusterRole/edit");
    assert_eq!(row[3], "");
    assert_eq!(row[4], "ops");
    assert_eq!(row[5], "");

    // Roles and ClusterRoles keep the default columns: Name and Created At (RFC 3339).
    for path in [
        format!("{rbac}/namespaces/default/roles"),
        format!("{rbac}/clusterroles"),
    ] {
        let t = table(&s, &path).await;
        assert_eq!(
            columns(&t),
            [name_col(), col("Created At", "date", "", 0)],
            "{path}"
        );
        for row in t["rows"].as_array().unwrap() {
            let created = row["cells"][1].as_str().unwrap();
            assert_eq!(
                Some(created),
                row["object"]["metadata"]["creationTimestamp"].as_str()
            );
            assert!(created.ends_with('Z') && created.len() == 20, "{created}");
        }
    }
}

/// A Table watch sends the columns in its first event and a row of the type's cells in each.
#[tokio::test]
async fn watch_tables_carry_the_columns() {
    let s = TestServer::start();
    let sa = "/api/v1/namespaces/default/serviceaccounts";
    create(
        &s,
        sa,
        json!({"metadata": {"name": "first"}, "secrets": [{"name": "x"}]}),
    )
    .await;
    let opts = WatchOptions {
        headers: vec![("accept".into(), TABLE.into())],
        ..WatchOptions::default()
    };
    // (Not the namespace's default ServiceAccount, which the server keeps there.)
    let watch = format!("{sa}?watch=1&fieldSelector=metadata.name%21%3Ddefault");
    let mut w = WatchStream::open(&s.addr, &watch, opts).await;
    assert_eq!(w.status, 200);
    let e = w.next_event().await;
    assert_eq!(e["type"], "ADDED", "{e}");
    let t = &e["object"];
    assert_eq!(t["kind"], "Table");
    assert_eq!(
        columns(t),
        [name_col(), col("Secrets", "string", "", 0), age_col()]
    );
    assert_eq!(t["rows"][0]["cells"][0], "first");
    assert_eq!(t["rows"][0]["cells"][1], 1);
    assert_fresh_age(&t["rows"][0]["cells"][2]);
    create(&s, sa, json!({"metadata": {"name": "second"}})).await;
    let e = w.next_event().await;
    assert_eq!(e["type"], "ADDED", "{e}");
    assert!(e["object"]["columnDefinitions"].is_null(), "{e}");
    assert_eq!(e["object"]["rows"][0]["cells"][0], "second");
    assert_eq!(e["object"]["rows"][0]["cells"][1], 0);
}

// ---------------------------------------------------------------------------------------------
// kubectl against a TLS server with its admin kubeconfig.

const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

fn find_kubectl(name: &str) -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/bin")];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Runs `bin` with `kubeconfig` and `args`, asserting success; returns stdout.
fn kubectl(bin: &Path, kubeconfig: &Path, home: &Path, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(home.join("cache"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home);
    let r = run_with_timeout(&mut cmd, home, KUBECTL_TIMEOUT);
    assert!(
        r.success(),
        "{} {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
        bin.display(),
        r.status,
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// The words of the line of `out` that starts with `first` (a header or a row).
fn words<'a>(out: &'a str, first: &str) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&first))
        .unwrap_or_else(|| panic!("no line starting with {first}:\n{out}"))
}

fn kubectl_columns(binary: &str) {
    let Some(bin) = find_kubectl(binary) else {
        eprintln!(
            "\n!!!!!!!! SKIPPED: {binary} is not installed (run /work/shared/tools/install-clients.sh); \
             this kubectl test asserts nothing !!!!!!!!\n"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let _s = TestServer::start_tls_in(dir.path(), &[]);
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let home = tempfile::tempdir().expect("home dir");
    let k = |args: &[&str]| kubectl(&bin, &kubeconfig, home.path(), args);

    k(&["create", "namespace", "team"]);
    k(&["create", "serviceaccount", "robot", "-n", "team"]);
    k(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ]);
    k(&[
        "create",
        "rolebinding",
        "readers",
        "-n",
        "team",
        "--clusterrole=view",
        "--user=ann",
        "--user=bob",
        "--group=devs",
        "--serviceaccount=team:robot",
    ]);

    let out = k(&["get", "namespaces"]);
    assert_eq!(words(&out, "NAME"), ["NAME", "STATUS", "AGE"], "{out}");
    assert_eq!(words(&out, "team")[1], "Active", "{out}");

    let out = k(&["get", "serviceaccounts", "-n", "team"]);
    assert_eq!(words(&out, "NAME"), ["NAME", "SECRETS", "AGE"], "{out}");
    assert_eq!(words(&out, "robot")[1], "0", "{out}");

    let out = k(&["get", "configmaps", "-n", "team"]);
    assert_eq!(words(&out, "NAME"), ["NAME", "DATA", "AGE"], "{out}");
    assert_eq!(words(&out, "settings")[1], "2", "{out}");

    let out = k(&["get", "rolebindings", "-n", "team"]);
    assert_eq!(words(&out, "NAME"), ["NAME", "ROLE", "AGE"], "{out}");
    assert_eq!(words(&out, "readers")[1], "ClusterRole/view", "{out}");

    let out = k(&["get", "rolebindings", "-n", "team", "-o", "wide"]);
    assert_eq!(
        words(&out, "NAME"),
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{out}"
    );
    assert_eq!(
        words(&out, "readers")[3..],
        ["ann,", "bob", "devs", "team/robot"],
        "{out}"
    );

    let out = k(&["get", "clusterrolebindings", "-o", "wide"]);
    assert_eq!(
        words(&out, "NAME"),
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{out}"
    );

    let out = k(&["get", "clusterroles"]);
    assert_eq!(words(&out, "NAME"), ["NAME", "CREATED", "AT"], "{out}");
    assert!(words(&out, "cluster-admin")[1].ends_with('Z'), "{out}");
}

#[test]
fn kubectl_1_31_prints_kubernetes_columns() {
    kubectl_columns("kubectl-1.31");
}

#[test]
fn kubectl_1_37_prints_kubernetes_columns() {
    kubectl_columns("kubectl-1.37");
}

/// Table lists are written from rows kept on each object version with their ages left open;
/// a Table of one object is rendered from the object. The two agree, cell for cell (ages,
/// which may tick between requests, aside) and object for object, for every `includeObject`,
/// on the first list (which keeps the rows) and on later ones (which reuse them), pretty
/// (`?pretty=true`) or not; and a changed object's row shows the change.
#[tokio::test]
async fn table_lists_from_kept_rows_equal_rendered_tables() {
    let s = TestServer::start();
    let sa = "/api/v1/namespaces/default/serviceaccounts";
    let cm = "/api/v1/namespaces/default/configmaps";
    for i in 0..5 {
        let secrets: Vec<Value> = (0..i).map(|j| json!({"name": format!("s{j}")})).collect();
        create(
            &s,
            sa,
            json!({"metadata": {"name": format!("sa-{i}"), "labels": {"i": i.to_string()}},
                "secrets": secrets}),
        )
        .await;
        create(
            &s,
            cm,
            json!({"metadata": {"name": format!("cm-{i}")}, "data": {"k": "v".repeat(i)}}),
        )
        .await;
    }
    // Cells of date columns and of `Age` columns (ages, which Kubernetes types as strings) are
    // left out of the comparison: a second may pass between two requests.
    let comparable = |t: &Value| {
        let dates: Vec<usize> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, c)| c["type"] == "date" || c["name"] == "Age")
            .map(|(i, _)| i)
            .collect();
        let mut t = t.clone();
        for row in t["rows"].as_array_mut().unwrap() {
            for &i in &dates {
                assert!(row["cells"][i].is_string(), "{row}");
                row["cells"][i] = Value::Null;
            }
        }
        t
    };
    // The ServiceAccounts without the namespace's default one, which the server keeps there.
    let own = "fieldSelector=metadata.name%21%3Ddefault";
    for (base, query) in [(sa, format!("{own}&")), (cm, String::new())] {
        for include in ["None", "Metadata", "Object"] {
            let path = format!("{base}?{query}includeObject={include}");
            let pretty = comparable(&table(&s, &format!("{path}&pretty=true")).await);
            let rows = pretty["rows"].as_array().unwrap();
            assert_eq!(rows.len(), 5);
            for row in rows {
                // Both kinds' first column is the name.
                let name = row["cells"][0].as_str().expect("a name");
                let one = format!("{base}/{name}?includeObject={include}");
                let rendered = comparable(&table(&s, &one).await);
                assert_eq!(
                    rendered["rows"].as_array().unwrap(),
                    std::slice::from_ref(row),
                    "{one}"
                );
            }
            for _ in 0..2 {
                assert_eq!(comparable(&table(&s, &path).await), pretty, "{path}");
            }
        }
    }
    let r = s
        .patch_merge(
            &format!("{sa}/sa-0"),
            &json!({"secrets": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}),
        )
        .await;
    assert_eq!(r.code(), 200);
    let t = table(&s, &format!("{sa}?{own}")).await;
    let secrets = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["name"] == "Secrets")
        .expect("a Secrets column");
    assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "sa-0");
    assert_eq!(t["rows"][0]["cells"][secrets], 3, "{t}");
    let rendered = table(&s, &format!("{sa}?{own}&pretty=true")).await;
    assert_eq!(comparable(&t), comparable(&rendered));
}
