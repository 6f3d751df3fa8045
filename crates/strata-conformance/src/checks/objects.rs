//! §2 Resources and their fields: object names (§2.1), the common object fields (§2.3) and
//! collection metadata (§2.4).

use serde_json::{json, Value};

use super::OBJECTS;
use crate::client::Req;
use crate::framework::{enc, expect_status, names, rv, Check, CheckResult, Ctx, Fail, WAIT};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&OBJECTS, "names-unique-in-namespace", "§2.1.1: a second object of a kind with a taken name is refused (409 AlreadyExists)", names_unique),
        check!(&OBJECTS, "names-reusable-after-delete", "§2.1.2: after deletion the name can be used again (a new uid)", names_reusable),
        check!(&OBJECTS, "names-cluster-scoped-unique", "§2.1.3: a cluster-scoped name is unique across the cluster", cluster_names),
        check!(&OBJECTS, "generate-name", "§2.3: generateName makes the server choose a unique name with that prefix", generate_name),
        check!(&OBJECTS, "object-metadata", "§2.3: a created object has kind, apiVersion, name, namespace, uid, creationTimestamp and resourceVersion", object_metadata),
        check!(&OBJECTS, "uid-unique", "§2.3: every object gets its own uid", uid_unique),
        check!(&OBJECTS, "resource-version-changes", "§2.3: a write gives the object a new resourceVersion", rv_changes),
        check!(&OBJECTS, "collection-kind", "§2.4: a collection is <Kind>List (never List), apiVersion v1, with a resourceVersion and items of the item kind", collection_kind),
        check!(&OBJECTS, "remaining-item-count", "§2.4: a chunk's remainingItemCount counts the later items of the collection", remaining_count),
        check!(&OBJECTS, "remaining-item-count-omitted", "§2.4: remainingItemCount is omitted with a label selector, on the last chunk and when unchunked", remaining_omitted),
    ]
}

async fn names_unique(cx: &Ctx) -> CheckResult {
    let name = cx.name("twice");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let status = expect_status(&resp, 409, "AlreadyExists")?;
    ensure!(
        status["details"]["name"] == name.as_str(),
        &resp,
        "the Status' details.name should be {name}"
    );
    Ok(())
}

async fn names_reusable(cx: &Ctx) -> CheckResult {
    let name = cx.name("reuse");
    let first = cx.create_sa(&name, Value::Null).await?;
    cx.send(Req::delete(cx.sa(&name)))
        .await?
        .expect_one_of(&[200, 202])?;
    cx.wait_gone(&cx.sa(&name), WAIT).await?;
    let resp = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let second = resp.expect_one_of(&[200, 201, 202])?.json()?;
    ensure!(
        second["metadata"]["uid"] != first["metadata"]["uid"],
        &resp,
        "the new object has the deleted one's uid {}",
        first["metadata"]["uid"]
    );
    Ok(())
}

async fn cluster_names(cx: &Ctx) -> CheckResult {
    let ns = cx.extra_namespace("names").await?;
    let resp = cx
        .send(Req::post("/api/v1/namespaces").json(&json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
        })))
        .await?;
    expect_status(&resp, 409, "AlreadyExists")?;
    Ok(())
}

async fn generate_name(cx: &Ctx) -> CheckResult {
    let mut made = Vec::new();
    for _ in 0..2 {
        let mut body = cx.sa_body("", Value::Null);
        body["metadata"].as_object_mut().map(|m| m.remove("name"));
        body["metadata"]["generateName"] = json!("gen-");
        let resp = cx.send(Req::post(cx.sa_path()).json(&body)).await?;
        let object = resp.expect_one_of(&[200, 201, 202])?.json()?;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        ensure!(
            name.starts_with("gen-") && name.len() > 4,
            &resp,
            "expected a name generated from the prefix gen-, got {name:?}"
        );
        made.push((name, resp));
    }
    ensure!(
        made[0].0 != made[1].0,
        &made[1].1,
        "two objects got the same generated name {}",
        made[0].0
    );
    Ok(())
}

async fn object_metadata(cx: &Ctx) -> CheckResult {
    let name = cx.name("meta");
    let resp = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let o = resp.expect_one_of(&[200, 201, 202])?.json()?;
    let m = &o["metadata"];
    ensure!(
        o["kind"] == "ServiceAccount",
        &resp,
        "kind is {}, not ServiceAccount",
        o["kind"]
    );
    ensure!(
        o["apiVersion"] == "v1",
        &resp,
        "apiVersion is {}, not v1",
        o["apiVersion"]
    );
    ensure!(
        m["namespace"] == cx.ns.as_str(),
        &resp,
        "metadata.namespace is {}, not {}",
        m["namespace"],
        cx.ns
    );
    for field in ["uid", "resourceVersion", "creationTimestamp"] {
        ensure!(
            m[field].as_str().is_some_and(|s| !s.is_empty()),
            &resp,
            "metadata.{field} is missing"
        );
    }
    let created = m["creationTimestamp"].as_str().unwrap_or("");
    ensure!(
        created.len() >= 20 && created.as_bytes()[4] == b'-' && created.contains('T'),
        &resp,
        "metadata.creationTimestamp {created:?} is not an RFC 3339 time"
    );
    ensure!(
        m["deletionTimestamp"].is_null(),
        &resp,
        "a live object has a deletionTimestamp"
    );
    Ok(())
}

async fn uid_unique(cx: &Ctx) -> CheckResult {
    let a = cx.create_sa(&cx.name("uid"), Value::Null).await?;
    let name = cx.name("uid");
    let resp = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let b = resp.expect_one_of(&[200, 201, 202])?.json()?;
    ensure!(
        a["metadata"]["uid"] != b["metadata"]["uid"],
        &resp,
        "two objects share the uid {}",
        a["metadata"]["uid"]
    );
    Ok(())
}

async fn rv_changes(cx: &Ctx) -> CheckResult {
    let name = cx.name("rv");
    let created = cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::patch(cx.sa(&name)).body(
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"changed": "yes"}}}).to_string(),
        ))
        .await?;
    let patched = resp.ok_json(200)?;
    ensure!(
        !rv(&patched).is_empty() && rv(&patched) != rv(&created),
        &resp,
        "the resourceVersion stayed {} after a change",
        rv(&created)
    );
    Ok(())
}

async fn collection_kind(cx: &Ctx) -> CheckResult {
    cx.create_sa(&cx.name("kind"), Value::Null).await?;
    let resp = cx.get(&cx.sa_path()).await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "ServiceAccountList",
        &resp,
        "kind is {}, not ServiceAccountList",
        list["kind"]
    );
    ensure!(
        list["apiVersion"] == "v1",
        &resp,
        "apiVersion is {}, not v1",
        list["apiVersion"]
    );
    ensure!(
        !rv(&list).is_empty(),
        &resp,
        "metadata.resourceVersion is missing"
    );
    let items = list["items"].as_array();
    ensure!(
        items.is_some_and(|i| !i.is_empty()),
        &resp,
        "items is missing or empty"
    );
    for item in items.into_iter().flatten() {
        ensure!(
            item["kind"].is_null() || item["kind"] == "ServiceAccount",
            &resp,
            "an item has kind {}",
            item["kind"]
        );
    }
    Ok(())
}

async fn remaining_count(cx: &Ctx) -> CheckResult {
    for _ in 0..3 {
        cx.create_sa(&cx.name("remaining"), Value::Null).await?;
    }
    let resp = cx.get(&format!("{}?limit=1", cx.sa_path())).await?;
    let page = resp.ok_json(200)?;
    ensure!(
        page["metadata"]["continue"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        &resp,
        "a chunk of 1 of at least 3 items has no continue token"
    );
    let Some(remaining) = page["metadata"]["remainingItemCount"].as_u64() else {
        return Err(Fail::with(
            &resp,
            "a chunk with later items has no remainingItemCount",
        ));
    };
    // The whole collection at the chunk's resourceVersion.
    let at = rv(&page);
    let full_resp = cx
        .get(&format!(
            "{}?resourceVersion={}&resourceVersionMatch=Exact",
            cx.sa_path(),
            enc(&at)
        ))
        .await?;
    let full = full_resp.ok_json(200)?;
    let total = names(&full).len() as u64;
    ensure!(
        remaining + 1 == total,
        &resp,
        "remainingItemCount is {remaining}, but the collection at resourceVersion {at} has {total} items after this chunk's 1"
    );
    Ok(())
}

async fn remaining_omitted(cx: &Ctx) -> CheckResult {
    let mark = cx.name("omit");
    for _ in 0..3 {
        cx.create_sa(&cx.name("omitted"), json!({"set": mark}))
            .await?;
    }
    let filtered = cx
        .get(&format!(
            "{}?limit=1&labelSelector={}",
            cx.sa_path(),
            cx.selector("set", &mark)
        ))
        .await?;
    let page = filtered.ok_json(200)?;
    ensure!(
        page["metadata"]["continue"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        &filtered,
        "a chunk of 1 of 3 matching items has no continue token"
    );
    ensure!(
        page["metadata"]["remainingItemCount"].is_null(),
        &filtered,
        "remainingItemCount is set on a list with a label selector"
    );
    let whole = cx.get(&cx.sa_path()).await?;
    ensure!(
        whole.ok_json(200)?["metadata"]["remainingItemCount"].is_null(),
        &whole,
        "remainingItemCount is set on an unchunked list"
    );
    let last = cx.get(&format!("{}?limit=500", cx.sa_path())).await?;
    let last_page = last.ok_json(200)?;
    ensure!(
        last_page["metadata"]["continue"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        &last,
        "a chunk holding the whole collection has a continue token"
    );
    ensure!(
        last_page["metadata"]["remainingItemCount"].is_null(),
        &last,
        "remainingItemCount is set on the last chunk"
    );
    Ok(())
}
