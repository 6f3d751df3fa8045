//! §4.8 Deletion options: delete preconditions, and the forced deletion of unreadable objects
//! (`ignoreStoreReadErrorWithClusterBreakingPotential`): refused with other unsafe-incompatible
//! options (400 in the specification, 422 in Kubernetes) and on a readable object.

use serde_json::{json, Value};

use super::DELETION;
use crate::client::Req;
use crate::framework::{expect_status, rv, Check, CheckResult, Ctx, Fail};
use crate::{check, ensure, Profile};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&DELETION, "delete-precondition-uid", "§4.8, §3: a delete whose uid precondition does not match is 409 Conflict and deletes nothing", precondition_uid),
        check!(&DELETION, "delete-precondition-resource-version", "§4.8: a delete whose resourceVersion precondition is stale is 409 Conflict", precondition_rv),
        check!(&DELETION, "forced-delete-exclusive-options", "§4.8 rule 4, §7: the forced-deletion option with dryRun, gracePeriodSeconds, preconditions, propagationPolicy or orphanDependents is refused (400; profile kubernetes: 422)", exclusive),
        check!(&DELETION, "forced-delete-readable-object", "§4.8 rule 5: the forced-deletion option on a readable object is refused and the object stays", readable),
    ]
}

async fn delete_with(cx: &Ctx, name: &str, options: &Value) -> Result<crate::client::Resp, Fail> {
    cx.send(Req::delete(cx.sa(name)).json(options)).await
}

async fn precondition_uid(cx: &Ctx) -> CheckResult {
    let name = cx.name("pre");
    cx.create_sa(&name, Value::Null).await?;
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}});
    let resp = delete_with(cx, &name, &options).await?;
    expect_status(&resp, 409, "Conflict")?;
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.status == 200,
        &read,
        "the refused delete deleted {name}"
    );
    Ok(())
}

async fn precondition_rv(cx: &Ctx) -> CheckResult {
    let name = cx.name("pre");
    let old = cx.create_sa(&name, Value::Null).await?;
    cx.send(Req::patch(cx.sa(&name)).body(
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"step": "newer"}}}).to_string(),
    ))
    .await?
    .expect(200)?;
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": rv(&old)}});
    let resp = delete_with(cx, &name, &options).await?;
    expect_status(&resp, 409, "Conflict")?;
    Ok(())
}

async fn exclusive(cx: &Ctx) -> CheckResult {
    let name = cx.name("force");
    cx.create_sa(&name, Value::Null).await?;
    let cases = [
        ("dryRun", json!(["All"])),
        ("gracePeriodSeconds", json!(0)),
        (
            "preconditions",
            json!({"uid": "00000000-0000-0000-0000-000000000000"}),
        ),
        ("propagationPolicy", json!("Background")),
        ("orphanDependents", json!(false)),
    ];
    for (field, value) in cases {
        let mut options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "ignoreStoreReadErrorWithClusterBreakingPotential": true});
        options[field] = value;
        let resp = delete_with(cx, &name, &options).await?;
        let status = match cx.profile {
            Profile::Spec => expect_status(&resp, 400, "BadRequest")?,
            Profile::Kubernetes => expect_status(&resp, 422, "Invalid")?,
        };
        let message = status["message"].as_str().unwrap_or("");
        ensure!(
            message.contains(field),
            &resp,
            "the refusal does not name {field}"
        );
        let read = cx.get(&cx.sa(&name)).await?;
        ensure!(
            read.status == 200,
            &read,
            "the refused delete (with {field}) deleted {name}"
        );
    }
    Ok(())
}

async fn readable(cx: &Ctx) -> CheckResult {
    let name = cx.name("force");
    cx.create_sa(&name, Value::Null).await?;
    let options = json!({"apiVersion": "v1", "kind": "DeleteOptions", "ignoreStoreReadErrorWithClusterBreakingPotential": true});
    let resp = delete_with(cx, &name, &options).await?;
    let read = cx.get(&cx.sa(&name)).await?;
    if resp.status < 300 && read.status == 404 && cx.profile == Profile::Kubernetes {
        return Err(Fail::skip("the server ignored the option and deleted the object (Kubernetes before 1.32 has no forced deletion)"));
    }
    ensure!(
        (400..500).contains(&resp.status),
        &resp,
        "expected the request to be refused (4xx), got {}",
        resp.status
    );
    ensure!(
        read.status == 200,
        &read,
        "the refused delete deleted {name}"
    );
    Ok(())
}
