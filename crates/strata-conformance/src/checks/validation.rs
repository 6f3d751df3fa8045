//! §4.9 Field validation: `fieldValidation=Strict` refuses unknown and duplicate fields (400,
//! every one named), `Warn` (the default) accepts with a `Warning` per field, `Ignore` accepts
//! silently, unknown fields are dropped, a type error is fatal at every level, a required field
//! is required; strict patches differ between the specification and Kubernetes (`--profile`).

use serde_json::{json, Value};

use super::VALIDATION;
use crate::client::{Req, Resp};
use crate::framework::{expect_status, Check, CheckResult, Ctx, Fail};
use crate::{check, ensure, Profile};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&VALIDATION, "strict-unknown-fields", "§4.9: Strict refuses unknown fields with 400 BadRequest naming every one", strict_unknown),
        check!(&VALIDATION, "strict-duplicate-fields", "§4.9: Strict refuses duplicate fields with 400 BadRequest naming them", strict_duplicate),
        check!(&VALIDATION, "strict-on-put", "§4.9: Strict applies to PUT", strict_put),
        check!(&VALIDATION, "strict-on-patch", "§4.9: Strict applies to PATCH: a merge patch adding an unknown field is 400 (profile kubernetes: 422)", strict_patch),
        check!(&VALIDATION, "warn-is-default", "§4.9: without fieldValidation the request succeeds with a Warning header per unknown field", warn_default),
        check!(&VALIDATION, "warn-duplicate-fields", "§4.9, §7: Warn reports a duplicate field in a Warning header", warn_duplicate),
        check!(&VALIDATION, "ignore-is-silent", "§4.9: Ignore succeeds without warnings", ignore),
        check!(&VALIDATION, "unknown-fields-dropped", "§4.9: unknown fields are dropped from the stored object", dropped),
        check!(&VALIDATION, "type-error-is-fatal", "§4.9: a type mismatch is 400 BadRequest naming it, whatever the level", type_error),
        check!(&VALIDATION, "required-field", "§4.9: omitting a required field (metadata.name without generateName) is an error", required),
    ]
}

fn with_extra(cx: &Ctx, name: &str) -> Value {
    let mut body = cx.sa_body(name, Value::Null);
    body["conformanceUnknown"] = json!(1);
    body["metadata"]["conformanceUnknownToo"] = json!("x");
    body
}

async fn post_raw(cx: &Ctx, query: &str, body: String) -> Result<Resp, Fail> {
    cx.send(Req::post(format!("{}{query}", cx.sa_path())).body("application/json", body))
        .await
}

fn message(status: &Value) -> &str {
    status["message"].as_str().unwrap_or("")
}

async fn strict_unknown(cx: &Ctx) -> CheckResult {
    let name = cx.name("strict");
    let resp = post_raw(
        cx,
        "?fieldValidation=Strict",
        with_extra(cx, &name).to_string(),
    )
    .await?;
    let status = expect_status(&resp, 400, "BadRequest")?;
    for field in ["conformanceUnknown", "metadata.conformanceUnknownToo"] {
        ensure!(
            message(&status).contains(&format!("unknown field \"{field}\"")),
            &resp,
            "the message does not name unknown field \"{field}\""
        );
    }
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(read.status == 404, &read, "the refused object was stored");
    Ok(())
}

fn duplicated(cx: &Ctx, name: &str) -> String {
    let (key, value) = cx.run_label();
    format!(
        r#"{{"apiVersion":"v1","kind":"ServiceAccount","metadata":{{"name":"{name}","labels":{{"{key}":"{value}"}}}},"automountServiceAccountToken":true,"automountServiceAccountToken":false}}"#
    )
}

async fn strict_duplicate(cx: &Ctx) -> CheckResult {
    let name = cx.name("strict");
    let resp = post_raw(cx, "?fieldValidation=Strict", duplicated(cx, &name)).await?;
    let status = expect_status(&resp, 400, "BadRequest")?;
    ensure!(
        message(&status).contains("duplicate field \"automountServiceAccountToken\""),
        &resp,
        "the message does not name duplicate field \"automountServiceAccountToken\""
    );
    Ok(())
}

async fn strict_put(cx: &Ctx) -> CheckResult {
    let name = cx.name("strict");
    let created = cx.create_sa(&name, Value::Null).await?;
    let mut body = with_extra(cx, &name);
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let resp = cx
        .send(Req::put(format!("{}?fieldValidation=Strict", cx.sa(&name))).json(&body))
        .await?;
    let status = expect_status(&resp, 400, "BadRequest")?;
    ensure!(
        message(&status).contains("conformanceUnknown"),
        &resp,
        "the message does not name the unknown field"
    );
    Ok(())
}

async fn strict_patch(cx: &Ctx) -> CheckResult {
    let name = cx.name("strict");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(
            Req::patch(format!("{}?fieldValidation=Strict", cx.sa(&name))).body(
                "application/merge-patch+json",
                json!({"conformanceUnknown": 1}).to_string(),
            ),
        )
        .await?;
    let status = match cx.profile {
        Profile::Spec => expect_status(&resp, 400, "BadRequest")?,
        Profile::Kubernetes => expect_status(&resp, 422, "Invalid")?,
    };
    ensure!(
        message(&status).contains("conformanceUnknown"),
        &resp,
        "the message does not name the unknown field"
    );
    Ok(())
}

fn warnings(resp: &Resp) -> Vec<String> {
    resp.header_all("warning")
}

async fn warn_default(cx: &Ctx) -> CheckResult {
    for query in ["", "?fieldValidation=Warn"] {
        let name = cx.name("warn");
        let resp = post_raw(cx, query, with_extra(cx, &name).to_string()).await?;
        resp.expect_one_of(&[200, 201, 202])?;
        let w = warnings(&resp);
        for field in ["conformanceUnknown", "metadata.conformanceUnknownToo"] {
            ensure!(
                w.iter()
                    .any(|h| h.contains(&format!("unknown field \\\"{field}\\\""))
                        || h.contains(&format!("unknown field \"{field}\""))),
                &resp,
                "no Warning names unknown field {field} (fieldValidation {query:?})"
            );
        }
    }
    Ok(())
}

async fn warn_duplicate(cx: &Ctx) -> CheckResult {
    let name = cx.name("warn");
    let resp = post_raw(cx, "?fieldValidation=Warn", duplicated(cx, &name)).await?;
    resp.expect_one_of(&[200, 201, 202])?;
    ensure!(
        warnings(&resp)
            .iter()
            .any(|h| h.contains("duplicate field") && h.contains("automountServiceAccountToken")),
        &resp,
        "no Warning names the duplicate field automountServiceAccountToken"
    );
    Ok(())
}

async fn ignore(cx: &Ctx) -> CheckResult {
    let name = cx.name("ignore");
    let resp = post_raw(
        cx,
        "?fieldValidation=Ignore",
        with_extra(cx, &name).to_string(),
    )
    .await?;
    resp.expect_one_of(&[200, 201, 202])?;
    ensure!(
        !warnings(&resp)
            .iter()
            .any(|h| h.contains("conformanceUnknown")),
        &resp,
        "Ignore still warned about the unknown fields"
    );
    Ok(())
}

async fn dropped(cx: &Ctx) -> CheckResult {
    let name = cx.name("drop");
    post_raw(
        cx,
        "?fieldValidation=Ignore",
        with_extra(cx, &name).to_string(),
    )
    .await?
    .expect_one_of(&[200, 201, 202])?;
    let read = cx.get(&cx.sa(&name)).await?;
    let o = read.ok_json(200)?;
    ensure!(
        o["conformanceUnknown"].is_null() && o["metadata"]["conformanceUnknownToo"].is_null(),
        &read,
        "the stored object kept the unknown fields"
    );
    Ok(())
}

async fn type_error(cx: &Ctx) -> CheckResult {
    for level in ["Ignore", "Warn", "Strict"] {
        let name = cx.name("type");
        let mut body = with_extra(cx, &name);
        body["automountServiceAccountToken"] = json!("yes");
        let resp = post_raw(cx, &format!("?fieldValidation={level}"), body.to_string()).await?;
        let status = expect_status(&resp, 400, "BadRequest")?;
        ensure!(
            message(&status).contains("automountServiceAccountToken"),
            &resp,
            "the message does not name automountServiceAccountToken (level {level})"
        );
    }
    Ok(())
}

async fn required(cx: &Ctx) -> CheckResult {
    let mut body = cx.sa_body("", Value::Null);
    body["metadata"].as_object_mut().map(|m| m.remove("name"));
    let resp = cx.send(Req::post(cx.sa_path()).json(&body)).await?;
    ensure!(
        resp.status == 400 || resp.status == 422,
        &resp,
        "expected 400 or 422 for an object without a name, got {}",
        resp.status
    );
    ensure!(
        String::from_utf8_lossy(&resp.body).contains("metadata.name"),
        &resp,
        "the error does not name metadata.name"
    );
    Ok(())
}
