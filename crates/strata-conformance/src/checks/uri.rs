//! §4.1 URI layout: core and named groups, namespaced and cluster-scoped collections, single
//! resources and sub-resources, and collections across all namespaces.

use serde_json::{json, Value};

use super::URI;
use crate::client::Req;
use crate::framework::{expect_status, names, Check, CheckResult, Ctx};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&URI, "core-group-collection", "§4.1: the core group's namespaced collection is /api/v1/namespaces/<ns>/<resource>", core_collection),
        check!(&URI, "core-group-single-resource", "§4.1: one resource is the collection path plus /<name>", single_resource),
        check!(&URI, "named-group-namespaced-collection", "§4.1: a named group's namespaced collection is /apis/<group>/<version>/namespaces/<ns>/<resource>", named_namespaced),
        check!(&URI, "named-group-cluster-collection", "§4.1: a cluster-scoped collection is /apis/<group>/<version>/<resource>", named_cluster),
        check!(&URI, "all-namespaces-collection", "§4.1: GET /api/v1/<resource> lists a namespaced type across all namespaces", all_namespaces),
        check!(&URI, "namespaces-are-cluster-scoped", "§4.1: /api/v1/namespaces lists namespaces and /api/v1/namespaces/<name> reads one", namespaces),
        check!(&URI, "sub-resource-path", "§4.1: a sub-resource is addressed below its resource (.../<name>/token)", sub_resource),
        check!(&URI, "sub-resource-of-missing-object", "§4.1: a sub-resource of an object that does not exist is 404", sub_resource_missing),
        check!(&URI, "namespace-mismatch", "§4.1: a body naming another namespace than the path is refused (400)", namespace_mismatch),
        check!(&URI, "unknown-resource-type", "§4.1: an unknown resource type is 404 NotFound", unknown_resource),
    ]
}

async fn core_collection(cx: &Ctx) -> CheckResult {
    let name = cx.name("core");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx.get(&cx.sa_path()).await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "ServiceAccountList",
        &resp,
        "kind is {}, not ServiceAccountList",
        list["kind"]
    );
    ensure!(
        names(&list).contains(&name),
        &resp,
        "the list lacks {name}, created just before"
    );
    Ok(())
}

async fn single_resource(cx: &Ctx) -> CheckResult {
    let name = cx.name("single");
    let created = cx.create_sa(&name, Value::Null).await?;
    let resp = cx.get(&cx.sa(&name)).await?;
    let got = resp.ok_json(200)?;
    ensure!(
        got["metadata"]["name"] == name.as_str(),
        &resp,
        "the object read is not {name}"
    );
    ensure!(
        got["metadata"]["uid"] == created["metadata"]["uid"],
        &resp,
        "the object read has another uid than the one created"
    );
    Ok(())
}

async fn named_namespaced(cx: &Ctx) -> CheckResult {
    let path = format!(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{}/roles",
        cx.ns
    );
    let resp = cx.get(&path).await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "RoleList",
        &resp,
        "kind is {}, not RoleList",
        list["kind"]
    );
    ensure!(
        list["apiVersion"] == "rbac.authorization.k8s.io/v1",
        &resp,
        "apiVersion is {}",
        list["apiVersion"]
    );
    Ok(())
}

async fn named_cluster(cx: &Ctx) -> CheckResult {
    let resp = cx
        .get("/apis/rbac.authorization.k8s.io/v1/clusterroles?limit=1")
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "ClusterRoleList",
        &resp,
        "kind is {}, not ClusterRoleList",
        list["kind"]
    );
    for item in list["items"].as_array().into_iter().flatten() {
        ensure!(
            item["metadata"]["namespace"].is_null(),
            &resp,
            "a cluster-scoped object has a namespace"
        );
    }
    Ok(())
}

async fn all_namespaces(cx: &Ctx) -> CheckResult {
    let (name, resp, list) = super::serviceaccounts::listed_across_namespaces(cx, "across").await?;
    let found = list["items"].as_array().into_iter().flatten().any(|i| {
        i["metadata"]["name"] == name.as_str() && i["metadata"]["namespace"] == cx.ns.as_str()
    });
    ensure!(
        found,
        &resp,
        "the list across namespaces lacks {}/{name}",
        cx.ns
    );
    Ok(())
}

async fn namespaces(cx: &Ctx) -> CheckResult {
    let (key, value) = cx.run_label();
    let resp = cx
        .get(&format!(
            "/api/v1/namespaces?labelSelector={}",
            crate::framework::enc(&format!("{key}={value}"))
        ))
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "NamespaceList",
        &resp,
        "kind is {}, not NamespaceList",
        list["kind"]
    );
    ensure!(
        names(&list).contains(&cx.ns),
        &resp,
        "the namespace list lacks {}",
        cx.ns
    );
    let resp = cx.get(&format!("/api/v1/namespaces/{}", cx.ns)).await?;
    let ns = resp.ok_json(200)?;
    ensure!(
        ns["kind"] == "Namespace",
        &resp,
        "kind is {}, not Namespace",
        ns["kind"]
    );
    ensure!(
        ns["metadata"]["namespace"].is_null(),
        &resp,
        "a namespace has a metadata.namespace"
    );
    Ok(())
}

fn token_request() -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    })
}

async fn sub_resource(cx: &Ctx) -> CheckResult {
    let name = cx.name("sub");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::post(format!("{}/token", cx.sa(&name))).json(&token_request()))
        .await?;
    let tr = resp.expect_one_of(&[200, 201])?.json()?;
    ensure!(
        tr["kind"] == "TokenRequest",
        &resp,
        "kind is {}, not TokenRequest",
        tr["kind"]
    );
    ensure!(
        tr["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        &resp,
        "the TokenRequest has no status.token"
    );
    Ok(())
}

async fn sub_resource_missing(cx: &Ctx) -> CheckResult {
    let resp = cx
        .send(Req::post(format!("{}/token", cx.sa(&cx.name("absent")))).json(&token_request()))
        .await?;
    expect_status(&resp, 404, "NotFound")?;
    Ok(())
}

async fn namespace_mismatch(cx: &Ctx) -> CheckResult {
    let name = cx.name("mismatch");
    let mut body = cx.sa_body(&name, Value::Null);
    body["metadata"]["namespace"] = json!(format!("{}-elsewhere", cx.ns));
    let resp = cx.send(Req::post(cx.sa_path()).json(&body)).await?;
    expect_status(&resp, 400, "BadRequest")?;
    let gone = cx.get(&cx.sa(&name)).await?;
    ensure!(
        gone.status == 404,
        &gone,
        "the refused object was created anyway"
    );
    Ok(())
}

async fn unknown_resource(cx: &Ctx) -> CheckResult {
    let resp = cx
        .get(&format!("/api/v1/namespaces/{}/nosuchresources", cx.ns))
        .await?;
    resp.expect(404)?;
    Ok(())
}
