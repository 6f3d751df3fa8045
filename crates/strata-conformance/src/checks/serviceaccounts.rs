//! §4.2 ServiceAccount operations: get, list (namespace and all namespaces), create, update,
//! patch, delete and deletecollection, with their success codes and bodies, and `pretty`.

use serde_json::{json, Value};

use super::SERVICEACCOUNTS as SA;
use crate::client::{Req, Resp};
use crate::framework::{expect_status, names, rv, Check, CheckResult, Ctx, Fail, WAIT};
use crate::{check, ensure, Profile};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&SA, "sa-create", "§4.2 create: POST answers 200, 201 or 202 with the ServiceAccount", create),
        check!(&SA, "sa-get", "§4.2 get: 200 with the ServiceAccount", get),
        check!(&SA, "sa-get-missing", "§4.2 get: a name that does not exist is 404 NotFound", get_missing),
        check!(&SA, "sa-list-namespace", "§4.2 list (namespace): 200 ServiceAccountList", list_namespace),
        check!(&SA, "sa-list-all-namespaces", "§4.2 list (all namespaces): 200 ServiceAccountList", list_all),
        check!(&SA, "sa-replace", "§4.2 update (replace): PUT answers 200 or 201 with the new ServiceAccount", replace),
        check!(&SA, "sa-patch", "§4.2 patch: PATCH answers 200 or 201 with the patched ServiceAccount", patch),
        check!(&SA, "sa-delete", "§4.2 delete: 200 or 202 with the ServiceAccount (profile kubernetes: or a Success Status), then it is gone", delete),
        check!(&SA, "sa-deletecollection", "§4.2 deletecollection: 200 with a Status (profile kubernetes: the list of deleted objects), matching objects gone, others kept", deletecollection),
        check!(&SA, "sa-pretty", "§4.2: pretty=true indents the same JSON", pretty),
    ]
}

async fn create(cx: &Ctx) -> CheckResult {
    let name = cx.name("create");
    let resp = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let o = resp.expect_one_of(&[200, 201, 202])?.json()?;
    ensure!(
        o["kind"] == "ServiceAccount" && o["apiVersion"] == "v1",
        &resp,
        "the answer is a {} {}, not a v1 ServiceAccount",
        o["apiVersion"],
        o["kind"]
    );
    ensure!(
        o["metadata"]["name"] == name.as_str(),
        &resp,
        "the answer is not named {name}"
    );
    let (key, value) = cx.run_label();
    ensure!(
        o["metadata"]["labels"][key] == value,
        &resp,
        "the answer lost the labels sent"
    );
    Ok(())
}

async fn get(cx: &Ctx) -> CheckResult {
    let name = cx.name("get");
    let created = cx.create_sa(&name, Value::Null).await?;
    let resp = cx.get(&cx.sa(&name)).await?;
    let o = resp.ok_json(200)?;
    ensure!(
        o["kind"] == "ServiceAccount" && o["apiVersion"] == "v1",
        &resp,
        "the answer is a {} {}, not a v1 ServiceAccount",
        o["apiVersion"],
        o["kind"]
    );
    ensure!(
        o["metadata"]["uid"] == created["metadata"]["uid"],
        &resp,
        "another uid than the created object's"
    );
    ensure!(
        rv(&o) == rv(&created),
        &resp,
        "resourceVersion {} differs from the created object's {}",
        rv(&o),
        rv(&created)
    );
    Ok(())
}

async fn get_missing(cx: &Ctx) -> CheckResult {
    let name = cx.name("missing");
    let resp = cx.get(&cx.sa(&name)).await?;
    let status = expect_status(&resp, 404, "NotFound")?;
    ensure!(
        status["details"]["name"] == name.as_str(),
        &resp,
        "details.name should be {name}"
    );
    Ok(())
}

async fn list_namespace(cx: &Ctx) -> CheckResult {
    let a = cx.name("list");
    let b = cx.name("list");
    cx.create_sa(&a, Value::Null).await?;
    cx.create_sa(&b, Value::Null).await?;
    let resp = cx.get(&cx.sa_path()).await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "ServiceAccountList",
        &resp,
        "kind is {}",
        list["kind"]
    );
    let found = names(&list);
    ensure!(
        found.contains(&a) && found.contains(&b),
        &resp,
        "the list lacks {a} or {b}"
    );
    for item in list["items"].as_array().into_iter().flatten() {
        ensure!(
            item["metadata"]["namespace"] == cx.ns.as_str(),
            &resp,
            "an item of another namespace: {}",
            item["metadata"]["namespace"]
        );
    }
    Ok(())
}

/// Creates a ServiceAccount with a label of its own and lists ServiceAccounts across all
/// namespaces by that label: the name, the answer and its ServiceAccountList.
pub(super) async fn listed_across_namespaces(
    cx: &Ctx,
    prefix: &str,
) -> Result<(String, Resp, Value), Fail> {
    let mark = cx.name(prefix);
    let name = cx.name(prefix);
    cx.create_sa(&name, json!({"set": mark})).await?;
    let resp = cx
        .get(&format!(
            "/api/v1/serviceaccounts?labelSelector={}",
            cx.selector("set", &mark)
        ))
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "ServiceAccountList",
        &resp,
        "kind is {}, not ServiceAccountList",
        list["kind"]
    );
    Ok((name, resp, list))
}

async fn list_all(cx: &Ctx) -> CheckResult {
    let (name, resp, list) = listed_across_namespaces(cx, "all").await?;
    ensure!(
        names(&list) == [name.clone()],
        &resp,
        "expected exactly [{name}] for the label selector"
    );
    Ok(())
}

async fn replace(cx: &Ctx) -> CheckResult {
    let name = cx.name("replace");
    let mut o = cx.create_sa(&name, Value::Null).await?;
    o["metadata"]["labels"]["replaced"] = json!("yes");
    let resp = cx.send(Req::put(cx.sa(&name)).json(&o)).await?;
    let updated = resp.expect_one_of(&[200, 201])?.json()?;
    ensure!(
        updated["kind"] == "ServiceAccount",
        &resp,
        "kind is {}",
        updated["kind"]
    );
    ensure!(
        updated["metadata"]["labels"]["replaced"] == "yes",
        &resp,
        "the answer lacks the new label"
    );
    ensure!(
        rv(&updated) != rv(&o),
        &resp,
        "the resourceVersion did not change"
    );
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.ok_json(200)?["metadata"]["labels"]["replaced"] == "yes",
        &read,
        "a read after the PUT lacks the new label"
    );
    Ok(())
}

async fn patch(cx: &Ctx) -> CheckResult {
    let name = cx.name("patch");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::patch(cx.sa(&name)).body(
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {"patched": "yes"}}}).to_string(),
        ))
        .await?;
    let o = resp.expect_one_of(&[200, 201])?.json()?;
    ensure!(
        o["kind"] == "ServiceAccount",
        &resp,
        "kind is {}",
        o["kind"]
    );
    ensure!(
        o["metadata"]["annotations"]["patched"] == "yes",
        &resp,
        "the answer lacks the patched annotation"
    );
    Ok(())
}

async fn delete(cx: &Ctx) -> CheckResult {
    let name = cx.name("delete");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx.send(Req::delete(cx.sa(&name))).await?;
    let body = resp.expect_one_of(&[200, 202])?.json()?;
    let is_object = body["kind"] == "ServiceAccount" && body["metadata"]["name"] == name.as_str();
    let is_success = body["kind"] == "Status" && body["status"] == "Success";
    match cx.profile {
        Profile::Spec => ensure!(
            is_object,
            &resp,
            "expected the deleted ServiceAccount {name} as the body"
        ),
        Profile::Kubernetes => ensure!(
            is_object || is_success,
            &resp,
            "expected the deleted ServiceAccount or a Success Status"
        ),
    }
    cx.wait_gone(&cx.sa(&name), WAIT).await
}

async fn deletecollection(cx: &Ctx) -> CheckResult {
    let mark = cx.name("dc");
    let doomed = [cx.name("dc"), cx.name("dc")];
    for name in &doomed {
        cx.create_sa(name, json!({"set": mark})).await?;
    }
    let kept = cx.name("dc-kept");
    cx.create_sa(&kept, json!({"set": format!("{mark}-other")}))
        .await?;
    let resp = cx
        .send(Req::delete(format!(
            "{}?labelSelector={}",
            cx.sa_path(),
            cx.selector("set", &mark)
        )))
        .await?;
    let body = resp.ok_json(200)?;
    match cx.profile {
        Profile::Spec => {
            ensure!(
                body["kind"] == "Status" && body["status"] == "Success",
                &resp,
                "expected a Status with status Success"
            )
        }
        Profile::Kubernetes => {
            ensure!(
                body["kind"] == "ServiceAccountList",
                &resp,
                "expected a ServiceAccountList of the deleted objects"
            );
            let mut got = names(&body);
            got.sort();
            let mut want = doomed.to_vec();
            want.sort();
            ensure!(got == want, &resp, "expected the deleted objects {want:?}");
        }
    }
    for name in &doomed {
        cx.wait_gone(&cx.sa(name), WAIT).await?;
    }
    let still = cx.get(&cx.sa(&kept)).await?;
    still.expect(200)?;
    Ok(())
}

async fn pretty(cx: &Ctx) -> CheckResult {
    let name = cx.name("pretty");
    cx.create_sa(&name, Value::Null).await?;
    let plain = cx.get(&cx.sa(&name)).await?;
    let resp = cx.get(&format!("{}?pretty=true", cx.sa(&name))).await?;
    let value = resp.ok_json(200)?;
    let text = String::from_utf8_lossy(&resp.body);
    ensure!(text.contains("\n  \""), &resp, "the body is not indented");
    ensure!(
        value == plain.ok_json(200)?,
        &resp,
        "the pretty body holds other JSON than the plain one"
    );
    Ok(())
}
