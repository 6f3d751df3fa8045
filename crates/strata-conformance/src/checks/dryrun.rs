//! §4.7 Dry run: `dryRun=All` on POST, PUT, PATCH and DELETE answers as the real request would
//! and persists nothing (no change, no watch event); other values are refused; the empty value
//! differs between the specification and Kubernetes (`--profile`).

use serde_json::{json, Value};

use super::DRYRUN;
use crate::client::Req;
use crate::framework::{names, rv, Check, CheckResult, Ctx, WAIT};
use crate::{check, ensure, Profile};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&DRYRUN, "dry-run-create", "§4.7: POST with dryRun=All answers 201 with the object and stores nothing", create),
        check!(&DRYRUN, "dry-run-generate-name", "§4.7: a dry-run create with generateName answers a generated name and stores nothing", generate_name),
        check!(&DRYRUN, "dry-run-update", "§4.7: PUT with dryRun=All answers the updated object and leaves the stored one", update),
        check!(&DRYRUN, "dry-run-patch", "§4.7: PATCH with dryRun=All answers the patched object and leaves the stored one", patch),
        check!(&DRYRUN, "dry-run-delete", "§4.7: DELETE with dryRun=All answers as a delete would and keeps the object", delete),
        check!(&DRYRUN, "dry-run-no-watch-event", "§4.7: a dry run has no side effects: no watch event", no_event),
        check!(&DRYRUN, "dry-run-unknown-value", "§4.7: a dryRun value other than All (or empty) is refused and nothing is stored", unknown_value),
        check!(&DRYRUN, "dry-run-empty-value", "§4.7: an empty dryRun value is an ordinary request (profile kubernetes: refused with 422)", empty_value),
    ]
}

async fn create(cx: &Ctx) -> CheckResult {
    let name = cx.name("dry");
    let resp = cx
        .send(
            Req::post(format!("{}?dryRun=All", cx.sa_path())).json(&cx.sa_body(&name, Value::Null)),
        )
        .await?;
    let o = resp.ok_json(201)?;
    ensure!(
        o["metadata"]["name"] == name.as_str() && o["kind"] == "ServiceAccount",
        &resp,
        "the answer is not the ServiceAccount that would be created"
    );
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.status == 404,
        &read,
        "the dry-run create stored {name}"
    );
    Ok(())
}

async fn generate_name(cx: &Ctx) -> CheckResult {
    let mark = cx.name("drygen");
    let mut body = cx.sa_body("", json!({"set": mark}));
    body["metadata"].as_object_mut().map(|m| m.remove("name"));
    body["metadata"]["generateName"] = json!("dry-");
    let resp = cx
        .send(Req::post(format!("{}?dryRun=All", cx.sa_path())).json(&body))
        .await?;
    let o = resp.ok_json(201)?;
    ensure!(
        o["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("dry-") && n.len() > 4),
        &resp,
        "the answer has no generated name"
    );
    let list = cx
        .get_json(&format!(
            "{}?labelSelector={}",
            cx.sa_path(),
            cx.selector("set", &mark)
        ))
        .await?;
    ensure!(
        names(&list).is_empty(),
        &resp,
        "the dry run stored {:?}",
        names(&list)
    );
    Ok(())
}

async fn update(cx: &Ctx) -> CheckResult {
    let name = cx.name("dry");
    let mut o = cx.create_sa(&name, Value::Null).await?;
    let before = rv(&o);
    o["metadata"]["labels"]["dry"] = json!("yes");
    let resp = cx
        .send(Req::put(format!("{}?dryRun=All", cx.sa(&name))).json(&o))
        .await?;
    let answered = resp.ok_json(200)?;
    ensure!(
        answered["metadata"]["labels"]["dry"] == "yes",
        &resp,
        "the answer lacks the change"
    );
    let stored = cx.get_json(&cx.sa(&name)).await?;
    ensure!(
        stored["metadata"]["labels"]["dry"].is_null() && rv(&stored) == before,
        &resp,
        "the dry-run PUT changed the stored object"
    );
    Ok(())
}

async fn patch(cx: &Ctx) -> CheckResult {
    let name = cx.name("dry");
    let created = cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::patch(format!("{}?dryRun=All", cx.sa(&name))).body(
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"dry": "yes"}}}).to_string(),
        ))
        .await?;
    let answered = resp.ok_json(200)?;
    ensure!(
        answered["metadata"]["labels"]["dry"] == "yes",
        &resp,
        "the answer lacks the change"
    );
    let stored = cx.get_json(&cx.sa(&name)).await?;
    ensure!(
        stored["metadata"]["labels"]["dry"].is_null() && rv(&stored) == rv(&created),
        &resp,
        "the dry-run PATCH changed the stored object"
    );
    Ok(())
}

async fn delete(cx: &Ctx) -> CheckResult {
    let name = cx.name("dry");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::delete(format!("{}?dryRun=All", cx.sa(&name))))
        .await?;
    resp.expect_one_of(&[200, 202])?;
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.status == 200,
        &read,
        "the dry-run DELETE deleted {name}"
    );
    Ok(())
}

async fn no_event(cx: &Ctx) -> CheckResult {
    let mark = cx.name("drywatch");
    let list = cx
        .get_json(&format!(
            "{}?labelSelector={}",
            cx.sa_path(),
            cx.selector("set", &mark)
        ))
        .await?;
    let mut w = cx
        .read
        .watch(Req::get(format!(
            "{}?watch=1&labelSelector={}&resourceVersion={}",
            cx.sa_path(),
            cx.selector("set", &mark),
            rv(&list)
        )))
        .await?;
    w.expect_open()?;
    let ghost = cx.name("dry");
    cx.send(
        Req::post(format!("{}?dryRun=All", cx.sa_path()))
            .json(&cx.sa_body(&ghost, json!({"set": mark}))),
    )
    .await?
    .expect(201)?;
    let real = cx.name("dry");
    cx.create_sa(&real, json!({"set": mark})).await?;
    let e = w.change(WAIT).await?;
    if e["object"]["metadata"]["name"] != real.as_str() {
        return Err(w.fail(format!(
            "the first event is not about {real}: the dry-run create of {ghost} was seen"
        )));
    }
    Ok(())
}

async fn unknown_value(cx: &Ctx) -> CheckResult {
    let name = cx.name("dry");
    let resp = cx
        .send(
            Req::post(format!("{}?dryRun=Sometimes", cx.sa_path()))
                .json(&cx.sa_body(&name, Value::Null)),
        )
        .await?;
    ensure!(
        resp.status == 400 || resp.status == 422,
        &resp,
        "expected 400 or 422 for dryRun=Sometimes, got {}",
        resp.status
    );
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.status == 404,
        &read,
        "the refused request stored {name}"
    );
    Ok(())
}

async fn empty_value(cx: &Ctx) -> CheckResult {
    let name = cx.name("dry");
    let resp = cx
        .send(Req::post(format!("{}?dryRun=", cx.sa_path())).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let read = cx.get(&cx.sa(&name)).await?;
    match cx.profile {
        Profile::Spec => {
            resp.expect(201)?;
            ensure!(
                read.status == 200,
                &read,
                "an empty dryRun is an ordinary request, but {name} was not stored"
            );
        }
        Profile::Kubernetes => {
            resp.expect(422)?;
            ensure!(
                read.status == 404,
                &read,
                "the refused request stored {name}"
            );
        }
    }
    Ok(())
}
