//! The ServiceAccount and Namespace API over JSON, driven with raw HTTP against the real binary.

use std::time::Duration;

use crate::common::{assert_status, own_item_names, within, TestServer, STARTING_NAMESPACES};
use serde_json::{json, Value};

const SA: &str = "/api/v1/namespaces/default/serviceaccounts";

#[tokio::test]
async fn service_account_lifecycle() {
    let s = TestServer::start();
    // Create without kind/apiVersion, as the Python client sends it.
    let r = s
        .post_json(SA, &json!({"metadata": {"name": "robot"}}))
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let created = r.json();
    assert_eq!(created["kind"], "ServiceAccount");
    assert_eq!(created["apiVersion"], "v1");
    assert_eq!(created["metadata"]["namespace"], "default");
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(created["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let rv1 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let got = s.get(&format!("{SA}/robot")).await;
    assert_eq!(got.code(), 200);
    assert_eq!(got.json(), created);
    assert_eq!(got.header("content-type"), "application/json");

    // PUT with the current resourceVersion replaces; a stale one conflicts.
    let mut replacement = created.clone();
    replacement["automountServiceAccountToken"] = json!(false);
    let r = s.put_json(&format!("{SA}/robot"), &replacement).await;
    assert_eq!(r.code(), 200);
    let updated = r.json();
    assert_eq!(updated["automountServiceAccountToken"], false);
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_ne!(updated["metadata"]["resourceVersion"], rv1.as_str());
    let r = s.put_json(&format!("{SA}/robot"), &replacement).await;
    assert_status(&r, 409, "Conflict");

    // An update that changes nothing keeps the resourceVersion.
    let r = s.put_json(&format!("{SA}/robot"), &updated).await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        r.json()["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );

    // Merge patch.
    let r = s
        .send(
            "PATCH",
            &format!("{SA}/robot"),
            Some(br#"{"metadata":{"labels":{"team":"a"}},"secrets":[{"name":"tok","kind":"Secret"}]}"#),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let patched = r.json();
    assert_eq!(patched["metadata"]["labels"]["team"], "a");
    // Secret references are reduced to their names.
    assert_eq!(patched["secrets"], json!([{"name": "tok"}]));

    // The other patch types come later; they are refused cleanly.
    let r = s
        .send(
            "PATCH",
            &format!("{SA}/robot"),
            Some(b"[]"),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");

    let r = s.delete(&format!("{SA}/robot")).await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.json()["metadata"]["name"], "robot");
    let r = s.get(&format!("{SA}/robot")).await;
    assert_status(&r, 404, "NotFound");
    assert_eq!(r.json()["details"]["kind"], "serviceaccounts");
    assert_eq!(r.json()["message"], "serviceaccounts \"robot\" not found");
    // The name is free again.
    let r = s
        .post_json(SA, &json!({"metadata": {"name": "robot"}}))
        .await;
    assert_eq!(r.code(), 201);
}

/// Whether `s` is a version-4 UUID in its canonical text form: 8-4-4-4-12 lower-case hex
/// digits, version nibble 4, variant bits 10.
fn is_uuid_v4(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    lens == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        && groups[2].starts_with('4')
        && groups[3].starts_with(['8', '9', 'a', 'b'])
}

#[tokio::test]
async fn uids_and_audit_ids_are_fresh_version_4_uuids() {
    let s = TestServer::start();
    let mut uids = std::collections::HashSet::new();
    let mut audit_ids = std::collections::HashSet::new();
    for i in 0..20 {
        let r = s
            .post_json(SA, &json!({"metadata": {"name": format!("uid-{i}")}}))
            .await;
        assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
        let uid = r.json()["metadata"]["uid"].as_str().unwrap().to_string();
        assert!(is_uuid_v4(&uid), "uid {uid:?}");
        uids.insert(uid);
        let id = r.header("audit-id").to_string();
        assert!(is_uuid_v4(&id), "Audit-Id {id:?}");
        audit_ids.insert(id);
        // A read gets an Audit-Id of its own as well.
        let id = s
            .get(&format!("{SA}/uid-{i}"))
            .await
            .header("audit-id")
            .to_string();
        assert!(is_uuid_v4(&id), "Audit-Id {id:?}");
        audit_ids.insert(id);
    }
    assert_eq!(uids.len(), 20, "every create has a uid of its own");
    assert_eq!(
        audit_ids.len(),
        40,
        "every request has an Audit-Id of its own"
    );
}

#[tokio::test]
async fn lists_in_a_namespace_and_across_namespaces() {
    let s = TestServer::start();
    let r = s
        .post_json(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "other"}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    for (ns, name) in [("default", "a"), ("default", "b"), ("other", "c")] {
        let r = s
            .post_json(
                &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
                &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
            )
            .await;
        assert_eq!(r.code(), 201);
    }
    let list = s.get(SA).await.json();
    assert_eq!(list["kind"], "ServiceAccountList");
    assert_eq!(list["apiVersion"], "v1");
    assert!(list["metadata"]["resourceVersion"].is_string());
    assert_eq!(own_item_names(&list), ["a", "b"]);
    assert!(
        list["items"][0].get("kind").is_none(),
        "items carry no type fields"
    );

    // Across namespaces: the three, and the default ServiceAccount of each of the five
    // namespaces (the four the server starts with and `other`).
    let h = s.http();
    for ns in STARTING_NAMESPACES.into_iter().chain(["other"]) {
        h.wait_default_sa(ns).await;
    }
    let all = s.get("/api/v1/serviceaccounts").await.json();
    assert_eq!(own_item_names(&all), ["a", "b", "c"]);
    assert_eq!(all["items"].as_array().unwrap().len(), 8);

    // Chunks: limit, continue, remainingItemCount; one snapshot across chunks.
    let first = s.get("/api/v1/serviceaccounts?limit=2").await.json();
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["metadata"]["remainingItemCount"], 6);
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    s.post_json(SA, &json!({"metadata": {"name": "z-late"}}))
        .await;
    let second = s
        .get(&format!("/api/v1/serviceaccounts?limit=6&continue={token}"))
        .await
        .json();
    assert_eq!(second["items"].as_array().unwrap().len(), 6);
    assert_eq!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    assert!(second["metadata"].get("continue").is_none());
    assert!(second["metadata"].get("remainingItemCount").is_none());
    let r = s
        .get("/api/v1/serviceaccounts?limit=2&continue=bogus")
        .await;
    assert_status(&r, 400, "BadRequest");

    // No ConfigMaps in kube-public (a plain-HTTP server publishes no root CA).
    let empty = s
        .get("/api/v1/namespaces/kube-public/configmaps")
        .await
        .json();
    assert_eq!(empty["items"], json!([]));
}

#[tokio::test]
async fn generate_name_yields_unique_names() {
    let s = TestServer::start();
    let mut names = std::collections::HashSet::new();
    for _ in 0..20 {
        let r = s
            .post_json(SA, &json!({"metadata": {"generateName": "gen-"}}))
            .await;
        assert_eq!(r.code(), 201);
        let name = r.json()["metadata"]["name"].as_str().unwrap().to_string();
        assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
        assert!(names.insert(name));
    }
}

#[tokio::test]
async fn errors_are_statuses_with_kubernetes_reasons() {
    let s = TestServer::start();
    let r = s.post_json(SA, &json!({"metadata": {"name": "dup"}})).await;
    assert_eq!(r.code(), 201);
    assert_status(
        &s.post_json(SA, &json!({"metadata": {"name": "dup"}})).await,
        409,
        "AlreadyExists",
    );
    // A missing namespace.
    let r = s
        .post_json(
            "/api/v1/namespaces/nope/serviceaccounts",
            &json!({"metadata": {"name": "x"}}),
        )
        .await;
    assert_status(&r, 404, "NotFound");
    assert_eq!(r.json()["details"]["kind"], "namespaces");
    // Invalid names.
    let r = s
        .post_json(SA, &json!({"metadata": {"name": "Not_Valid"}}))
        .await;
    assert_status(&r, 422, "Invalid");
    let v = r.json();
    assert_eq!(v["details"]["kind"], "ServiceAccount");
    assert_eq!(v["details"]["causes"][0]["field"], "metadata.name");
    let r = s.post_json(SA, &json!({"metadata": {}})).await;
    assert_status(&r, 422, "Invalid");
    let r = s
        .post_json("/api/v1/namespaces", &json!({"metadata": {"name": "a.b"}}))
        .await;
    assert_status(&r, 422, "Invalid");
    // Body contradicting the URL.
    let r = s
        .post_json(
            SA,
            &json!({"metadata": {"name": "x", "namespace": "kube-system"}}),
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    let r = s
        .put_json(
            &format!("{SA}/dup"),
            &json!({"metadata": {"name": "other"}}),
        )
        .await;
    assert_status(&r, 400, "BadRequest");
    let r = s
        .post_json(SA, &json!({"apiVersion": "v2", "metadata": {"name": "x"}}))
        .await;
    assert_status(&r, 400, "BadRequest");
    // Malformed bodies.
    for body in [&b"{"[..], b"[1,2]", b"", b"{\"metadata\": {\"name\": 5}}"] {
        let r = s
            .send(
                "POST",
                SA,
                Some(body),
                &[("content-type", "application/json")],
            )
            .await;
        assert_status(&r, 400, "BadRequest");
    }
    // Oversize body.
    // The server answers before reading the rest, so speak raw HTTP to see the answer.
    let head = raw_exchange(
        &s.addr,
        &format!(
            "POST {SA} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
            3 * 1024 * 1024 + 10
        ),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("RequestEntityTooLarge"), "{head}");
    // Unsupported request and response types.
    let r = s
        .send(
            "POST",
            SA,
            Some(b"x"),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");
    let r = s.send("GET", SA, None, &[("accept", "text/html")]).await;
    assert_status(&r, 406, "NotAcceptable");
    // Unknown paths and methods.
    assert_status(&s.get("/api/v1/widgets").await, 404, "NotFound");
    assert_status(
        &s.get("/apis/example.com/v1/widgets").await,
        404,
        "NotFound",
    );
    assert_eq!(s.get("/nothing-here").await.code(), 404);
    assert_status(
        &s.send("POST", &format!("{SA}/dup"), Some(b"{}"), &[]).await,
        405,
        "MethodNotAllowed",
    );
    assert_status(
        &s.send("DELETE", "/api/v1/namespaces", None, &[]).await,
        405,
        "MethodNotAllowed",
    );
    // Bad query parameters.
    assert_status(&s.get(&format!("{SA}?limit=ten")).await, 400, "BadRequest");
    assert_status(
        &s.get(&format!("{SA}?resourceVersionMatch=Exact")).await,
        422,
        "Invalid",
    );
    assert_status(
        &s.send("POST", &format!("{SA}?dryRun=Sometimes"), Some(b"{}"), &[])
            .await,
        422,
        "Invalid",
    );
    // None of that lost the object that exists.
    assert_eq!(s.get(&format!("{SA}/dup")).await.code(), 200);
}

/// Writes `request` on a fresh connection and returns what the server answers first.
async fn raw_exchange(addr: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 8192];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut buf))
        .await
        .expect("answer in time")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn query_strings_parse_like_kubernetes() {
    let s = TestServer::start();
    // A leading `&` is tolerated; `pretty=True` indents.
    let r = s.get(&format!("{SA}?&pretty=True")).await;
    assert_eq!(r.code(), 200);
    assert!(
        r.body.starts_with(b"{\n  \""),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // Dry run stores nothing.
    let r = s
        .post_json(
            &format!("{SA}?dryRun=All"),
            &json!({"metadata": {"name": "ghost"}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    assert_eq!(r.json()["metadata"]["name"], "ghost");
    assert_status(&s.get(&format!("{SA}/ghost")).await, 404, "NotFound");
}

#[tokio::test]
async fn namespaces_crud() {
    let s = TestServer::start();
    for ns in ["default", "kube-system", "kube-public"] {
        let r = s.get(&format!("/api/v1/namespaces/{ns}")).await;
        assert_eq!(r.code(), 200, "{ns} exists from the start");
    }
    let r = s
        .post_json(
            "/api/v1/namespaces",
            &json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "team-a"}, "spec": {}, "status": {}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    let ns = r.json();
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team-a"
    );
    assert!(ns["metadata"].get("namespace").is_none());

    let mut changed = ns.clone();
    changed["metadata"]["labels"]["env"] = json!("dev");
    changed["status"]["phase"] = json!("Terminating");
    let r = s.put_json("/api/v1/namespaces/team-a", &changed).await;
    assert_eq!(r.code(), 200);
    let v = r.json();
    assert_eq!(v["metadata"]["labels"]["env"], "dev");
    assert_eq!(
        v["status"]["phase"], "Active",
        "status is not writable through the main resource"
    );

    let list = s.get("/api/v1/namespaces").await.json();
    assert_eq!(list["kind"], "NamespaceList");
    assert!(list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["metadata"]["name"] == "team-a"));

    // A namespace takes its contents along: it terminates, then goes.
    s.post_json(
        "/api/v1/namespaces/team-a/serviceaccounts",
        &json!({"metadata": {"name": "x"}}),
    )
    .await;
    let terminating = s.delete("/api/v1/namespaces/team-a").await;
    assert_eq!(terminating.code(), 200);
    assert_eq!(terminating.json()["status"]["phase"], "Terminating");
    within(Duration::from_secs(20), async {
        while s.get("/api/v1/namespaces/team-a").await.code() != 404 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // Its ServiceAccounts went with it; the other namespaces keep only their default ones.
    let all = s.get("/api/v1/serviceaccounts").await.json();
    assert!(
        all["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["metadata"]["namespace"] != "team-a"),
        "{all}"
    );
    assert_eq!(own_item_names(&all), Vec::<String>::new());
    assert_status(
        &s.delete("/api/v1/namespaces/default").await,
        403,
        "Forbidden",
    );
}

#[tokio::test]
async fn deletecollection_returns_status() {
    let s = TestServer::start();
    for n in ["a", "b", "c"] {
        s.post_json(SA, &json!({"metadata": {"name": n}})).await;
    }
    let r = s.delete(SA).await;
    assert_eq!(r.code(), 200);
    let v = r.json();
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["status"], "Success");
    // All three went (the default ServiceAccount too, which the server makes again).
    assert_eq!(
        own_item_names(&s.get(SA).await.json()),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn finalizers_hold_objects_until_removed() {
    let s = TestServer::start();
    let r = s
        .post_json(
            SA,
            &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .await;
    assert_eq!(r.code(), 201);
    let r = s.delete(&format!("{SA}/held")).await;
    assert_eq!(r.code(), 200);
    let marked = r.json();
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(s.get(&format!("{SA}/held")).await.code(), 200);
    let r = s
        .send(
            "PATCH",
            &format!("{SA}/held"),
            Some(br#"{"metadata":{"finalizers":null}}"#),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_status(&s.get(&format!("{SA}/held")).await, 404, "NotFound");
}

#[tokio::test]
async fn discovery_and_openapi() {
    let s = TestServer::start();
    let agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let r = s.send("GET", "/api", None, &[("accept", agg)]).await;
    assert_eq!(
        r.header("content-type"),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let v = r.json();
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    let resources = &v["items"][0]["versions"][0]["resources"];
    let sa = resources
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "serviceaccounts")
        .unwrap();
    assert_eq!(sa["scope"], "Namespaced");
    assert_eq!(sa["shortNames"], json!(["sa"]));
    assert_eq!(
        sa["subresources"][0]["responseKind"]["kind"],
        "TokenRequest"
    );
    let r = s.send("GET", "/apis", None, &[("accept", agg)]).await;
    let groups = r.json()["items"].clone();
    let group = |name: &str| {
        groups
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {groups}"))
            .clone()
    };
    let resources = |g: &Value| -> Vec<String> {
        g["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["resource"].as_str().unwrap().to_string())
            .collect()
    };
    // The access and rules reviews are virtual types: listed, create only.
    let authz = group("authorization.k8s.io");
    assert_eq!(
        resources(&authz),
        [
            "localsubjectaccessreviews",
            "selfsubjectaccessreviews",
            "selfsubjectrulesreviews",
            "subjectaccessreviews"
        ]
    );
    assert_eq!(
        authz["versions"][0]["resources"][1]["verbs"],
        json!(["create"])
    );
    assert_eq!(
        resources(&group("authentication.k8s.io")),
        ["selfsubjectreviews", "tokenreviews"]
    );
    let legacy_authz = s.get("/apis/authorization.k8s.io/v1").await.json();
    assert_eq!(legacy_authz["kind"], "APIResourceList");
    let rbac_group = group("rbac.authorization.k8s.io");
    let rbac: Vec<&str> = rbac_group["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    assert_eq!(
        rbac,
        [
            "clusterrolebindings",
            "clusterroles",
            "rolebindings",
            "roles"
        ]
    );

    let legacy = s
        .send("GET", "/api", None, &[("accept", "application/json, */*")])
        .await;
    assert_eq!(legacy.header("content-type"), "application/json");
    assert_eq!(legacy.json()["versions"], json!(["v1"]));
    assert_eq!(s.get("/apis").await.json()["kind"], "APIGroupList");
    let v1 = s.get("/api/v1").await.json();
    assert_eq!(v1["kind"], "APIResourceList");
    let ns = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "namespaces")
        .unwrap();
    assert_eq!(ns["namespaced"], false);
    assert_eq!(ns["shortNames"], json!(["ns"]));

    let index = s.get("/openapi/v3").await.json();
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = s.get(&url).await.json();
    let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/serviceaccounts/{name}"]["patch"];
    let params: Vec<_> = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        assert!(params.contains(&json!(p)), "{p} missing");
    }
    assert!(
        doc["components"]["schemas"]["io.k8s.api.core.v1.ServiceAccount"]["properties"]["secrets"]
            ["x-kubernetes-patch-merge-key"]
            == "name"
    );

    for path in ["/version", "/version/"] {
        let v = s.get(path).await.json();
        assert_eq!(v["major"], "1");
        assert!(v["gitVersion"].is_string());
    }
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(s.get(path).await.code(), 200);
    }
}

#[tokio::test]
async fn tables_for_kubectl() {
    let s = TestServer::start();
    s.post_json(SA, &json!({"metadata": {"name": "t"}})).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    // The test's own ServiceAccount only (not the namespace's default one).
    let only_t = format!("{SA}?fieldSelector=metadata.name%3Dt");
    let t = s
        .send("GET", &only_t, None, &[("accept", accept)])
        .await
        .json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["columnDefinitions"][0]["name"], "Name");
    // ServiceAccounts have Kubernetes' columns (Name, Secrets, Age): tests/http/tables.rs.
    assert_eq!(t["columnDefinitions"][1]["name"], "Secrets");
    assert_eq!(t["rows"][0]["cells"][0], "t");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "default");
    let t = s
        .send(
            "GET",
            &format!("{SA}/t"),
            None,
            &[("accept", "application/json;as=Table;g=meta.svc.io;v=v1")],
        )
        .await
        .json();
    assert_eq!(t["apiVersion"], "meta.svc.io/v1");
    assert_eq!(t["rows"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn restart_keeps_data_and_sigterm_is_graceful() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = TestServer::start_in(tmp.path(), &[]);
    let r = s
        .post_json(SA, &json!({"metadata": {"name": "kept"}}))
        .await;
    let rv: u64 = r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(s.terminate(), "SIGTERM ends the server cleanly");
    let s = TestServer::start_in(tmp.path(), &[]);
    assert_eq!(s.get(&format!("{SA}/kept")).await.code(), 200);
    let r = s
        .post_json(SA, &json!({"metadata": {"name": "after"}}))
        .await;
    let rv2: u64 = r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv);
}

/// ConfigMaps, the proof that a kind is a registration: create, Kubernetes' validation,
/// immutability and discovery (protobuf: the `protobuf` module).
#[tokio::test]
async fn config_maps() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/configmaps";
    let r = s
        .post_json(
            base,
            &json!({"metadata": {"name": "settings"}, "data": {"mode": "fast"},
                    "binaryData": {"blob": "AAEC"}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let created = r.json();
    assert_eq!(created["kind"], "ConfigMap");
    assert_eq!(created["binaryData"]["blob"], "AAEC");

    // Kubernetes' validation.
    let r = s
        .post_json(
            base,
            &json!({"metadata": {"name": "bad"}, "data": {"a/b": "x", "dup": "1"},
                    "binaryData": {"dup": "AA=="}}),
        )
        .await;
    assert_status(&r, 422, "Invalid");
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("ConfigMap \"bad\" is invalid: ["),
        "{message}"
    );
    assert!(message.contains("data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters"), "{message}");
    assert!(
        message
            .contains("data[dup]: Invalid value: \"dup\": duplicate of key present in binaryData"),
        "{message}"
    );

    // Once immutable, only metadata may change, and immutable stays.
    let r = s
        .patch_merge(&format!("{base}/settings"), &json!({"immutable": true}))
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let r = s
        .patch_merge(
            &format!("{base}/settings"),
            &json!({"data": {"mode": "slow"}}),
        )
        .await;
    assert_status(&r, 422, "Invalid");
    assert!(r.json()["message"]
        .as_str()
        .unwrap()
        .contains("data: Forbidden: field is immutable when `immutable` is set"));
    let r = s
        .patch_merge(
            &format!("{base}/settings"),
            &json!({"metadata": {"labels": {"tier": "edge"}}}),
        )
        .await;
    assert_eq!(r.code(), 200);

    // Discovery lists it with its short name.
    let v1 = s.get("/api/v1").await.json();
    let cm = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "configmaps")
        .expect("configmaps in discovery")
        .clone();
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["namespaced"], true);
    assert_eq!(cm["shortNames"], json!(["cm"]));
}
