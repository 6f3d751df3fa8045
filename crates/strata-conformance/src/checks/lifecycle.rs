//! §3 States and transitions: deletion in two phases. A first delete sets
//! `deletionTimestamp` on an object with finalizers (Terminating); removing the last finalizer,
//! in any order, removes it; deleting a namespace deletes what is in it.

use std::time::Duration;

use serde_json::{json, Value};

use super::LIFECYCLE;
use crate::client::Req;
use crate::framework::{Check, CheckResult, Ctx, Fail, WAIT};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&LIFECYCLE, "delete-with-finalizers-terminates", "§3: the first delete of an object with finalizers sets deletionTimestamp and keeps the object", terminates),
        check!(&LIFECYCLE, "deletion-timestamp-set-once", "§3, §2.3: a second delete of a Terminating object leaves deletionTimestamp as the first set it", set_once),
        check!(&LIFECYCLE, "last-finalizer-removes-object", "§3: removing the last finalizer removes the object and frees its name", last_finalizer),
        check!(&LIFECYCLE, "finalizers-any-order", "§3, §2.3: finalizers may be reordered and removed in any order", any_order),
        check!(&LIFECYCLE, "namespace-deletion-deletes-contents", "§3: a namespaced object is deleted when its namespace is deleted", namespace_contents),
    ]
}

const HOLD: &str = "conformance.strata.dev/hold";
const HOLD_TOO: &str = "conformance.strata.dev/hold-too";

/// Creates a ServiceAccount with `finalizers`, remembered for the cleanup.
async fn create_held(cx: &Ctx, prefix: &str, finalizers: &[&str]) -> Result<(String, Value), Fail> {
    let name = cx.name(prefix);
    let mut body = cx.sa_body(&name, Value::Null);
    body["metadata"]["finalizers"] = json!(finalizers);
    let resp = cx.send(Req::post(cx.sa_path()).json(&body)).await?;
    let object = resp.expect_one_of(&[200, 201, 202])?.json()?;
    cx.finalizers_added(&cx.sa(&name));
    ensure!(
        object["metadata"]["finalizers"] == json!(finalizers),
        &resp,
        "the created object's finalizers are {}, not {:?}",
        object["metadata"]["finalizers"],
        finalizers
    );
    Ok((name, object))
}

async fn set_finalizers(
    cx: &Ctx,
    name: &str,
    finalizers: Value,
) -> Result<crate::client::Resp, Fail> {
    cx.send(Req::patch(cx.sa(name)).body(
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": finalizers}}).to_string(),
    ))
    .await
}

async fn terminates(cx: &Ctx) -> CheckResult {
    let (name, _) = create_held(cx, "terminating", &[HOLD]).await?;
    let resp = cx.send(Req::delete(cx.sa(&name))).await?;
    resp.expect_one_of(&[200, 202])?;
    let read = cx.get(&cx.sa(&name)).await?;
    let object = read.ok_json(200)?;
    ensure!(
        object["metadata"]["deletionTimestamp"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        &read,
        "a deleted object with finalizers has no deletionTimestamp"
    );
    ensure!(
        object["metadata"]["finalizers"] == json!([HOLD]),
        &read,
        "the finalizers changed: {}",
        object["metadata"]["finalizers"]
    );
    Ok(())
}

async fn set_once(cx: &Ctx) -> CheckResult {
    let (name, _) = create_held(cx, "twice-deleted", &[HOLD]).await?;
    cx.send(Req::delete(cx.sa(&name)))
        .await?
        .expect_one_of(&[200, 202])?;
    let first = cx.get_json(&cx.sa(&name)).await?;
    let stamp = first["metadata"]["deletionTimestamp"].clone();
    ensure_stamp(&stamp)?;
    // Timestamps have a resolution of one second: a second delete a second later would move it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let resp = cx.send(Req::delete(cx.sa(&name))).await?;
    resp.expect_one_of(&[200, 202])?;
    let read = cx.get(&cx.sa(&name)).await?;
    let again = read.ok_json(200)?;
    ensure!(
        again["metadata"]["deletionTimestamp"] == stamp,
        &read,
        "deletionTimestamp moved from {stamp} to {}",
        again["metadata"]["deletionTimestamp"]
    );
    Ok(())
}

fn ensure_stamp(stamp: &Value) -> CheckResult {
    if stamp.as_str().is_some_and(|s| !s.is_empty()) {
        Ok(())
    } else {
        Err(Fail::msg(
            "a deleted object with finalizers has no deletionTimestamp",
        ))
    }
}

async fn last_finalizer(cx: &Ctx) -> CheckResult {
    let (name, _) = create_held(cx, "last", &[HOLD]).await?;
    cx.send(Req::delete(cx.sa(&name)))
        .await?
        .expect_one_of(&[200, 202])?;
    let resp = set_finalizers(cx, &name, json!(null)).await?;
    resp.expect_one_of(&[200, 404])?;
    cx.wait_gone(&cx.sa(&name), WAIT).await?;
    let again = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    again.expect_one_of(&[200, 201, 202])?;
    Ok(())
}

async fn any_order(cx: &Ctx) -> CheckResult {
    let (name, _) = create_held(cx, "order", &[HOLD, HOLD_TOO]).await?;
    let resp = set_finalizers(cx, &name, json!([HOLD_TOO, HOLD])).await?;
    let reordered = resp.ok_json(200)?;
    ensure!(
        reordered["metadata"]["finalizers"] == json!([HOLD_TOO, HOLD]),
        &resp,
        "the finalizers were not reordered"
    );
    cx.send(Req::delete(cx.sa(&name)))
        .await?
        .expect_one_of(&[200, 202])?;
    // Remove the one that is now last first: no order is enforced.
    let resp = set_finalizers(cx, &name, json!([HOLD_TOO])).await?;
    let held = resp.ok_json(200)?;
    ensure!(
        held["metadata"]["finalizers"] == json!([HOLD_TOO]),
        &resp,
        "expected one finalizer left"
    );
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.status == 200,
        &read,
        "the object went while a finalizer remained"
    );
    set_finalizers(cx, &name, json!([]))
        .await?
        .expect_one_of(&[200, 404])?;
    cx.wait_gone(&cx.sa(&name), WAIT).await
}

async fn namespace_contents(cx: &Ctx) -> CheckResult {
    let ns = cx.extra_namespace("doomed").await?;
    let name = cx.name("inside");
    let mut body = cx.sa_body(&name, Value::Null);
    body["metadata"]["namespace"] = json!(ns);
    let path = format!("/api/v1/namespaces/{ns}/serviceaccounts");
    cx.send(Req::post(&path).json(&body))
        .await?
        .expect_one_of(&[200, 201, 202])?;
    cx.send(Req::delete(format!("/api/v1/namespaces/{ns}")))
        .await?
        .expect_one_of(&[200, 202])?;
    cx.wait_gone(&format!("{path}/{name}"), Duration::from_secs(60))
        .await
}
