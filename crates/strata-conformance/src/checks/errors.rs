//! §7 Errors: failures answer with a `Status` body whose code matches the HTTP status, 409 for
//! a taken name, 400 for a body that does not decode, and `Warning` headers in the
//! `299 - "text"` form.

use serde_json::Value;

use super::ERRORS;
use crate::client::Req;
use crate::framework::{expect_status, Check, CheckResult, Ctx};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&ERRORS, "status-body", "§7, §2.7: an error answers a Status (kind, apiVersion v1, status Failure, code, reason, message, details)", status_body),
        check!(&ERRORS, "malformed-body", "§7: a body that is not valid JSON is 400 BadRequest", malformed),
        check!(&ERRORS, "already-exists", "§7, §2.1: creating a taken name is 409 AlreadyExists", already_exists),
        check!(&ERRORS, "warning-header-form", "§7: a Warning header entry is 299 - \"text\"", warning_form),
    ]
}

async fn status_body(cx: &Ctx) -> CheckResult {
    let name = cx.name("absent");
    let resp = cx.get(&cx.sa(&name)).await?;
    let status = expect_status(&resp, 404, "NotFound")?;
    ensure!(
        status["apiVersion"] == "v1",
        &resp,
        "the Status' apiVersion is {}, not v1",
        status["apiVersion"]
    );
    ensure!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains(&name)),
        &resp,
        "the message does not name {name}"
    );
    ensure!(
        status["details"]["name"] == name.as_str()
            && status["details"]["kind"] == "serviceaccounts",
        &resp,
        "details should name {name} of kind serviceaccounts"
    );
    Ok(())
}

async fn malformed(cx: &Ctx) -> CheckResult {
    let resp = cx
        .send(Req::post(cx.sa_path()).body("application/json", "{\"metadata\": {\"name\": "))
        .await?;
    expect_status(&resp, 400, "BadRequest")?;
    Ok(())
}

async fn already_exists(cx: &Ctx) -> CheckResult {
    let name = cx.name("taken");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&name, Value::Null)))
        .await?;
    let status = expect_status(&resp, 409, "AlreadyExists")?;
    ensure!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("already exists")),
        &resp,
        "the message does not say the object already exists"
    );
    Ok(())
}

async fn warning_form(cx: &Ctx) -> CheckResult {
    let name = cx.name("warned");
    let mut body = cx.sa_body(&name, Value::Null);
    body["conformanceUnknown"] = serde_json::json!(1);
    let resp = cx
        .send(Req::post(format!("{}?fieldValidation=Warn", cx.sa_path())).json(&body))
        .await?;
    resp.expect_one_of(&[200, 201, 202])?;
    let warnings = resp.header_all("warning");
    ensure!(
        !warnings.is_empty(),
        &resp,
        "no Warning header for an unknown field"
    );
    for w in &warnings {
        ensure!(
            w.starts_with("299 - \"") && w.ends_with('"'),
            &resp,
            "the Warning {w:?} is not of the form 299 - \"text\""
        );
    }
    Ok(())
}
