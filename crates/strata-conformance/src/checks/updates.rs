//! §4.6 Updating existing resources: PUT with a resourceVersion (409 when stale), conditional
//! patches, JSON patch (with `test`), JSON merge patch, strategic merge patch, and server-side
//! apply (create or patch, managed fields, conflicts and `force`).

use serde_json::{json, Value};

use super::UPDATES;
use crate::client::{Req, Resp};
use crate::framework::{expect_status, rv, Check, CheckResult, Ctx, Fail};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&UPDATES, "put-current-resource-version", "§4.6 PUT rule 1: a PUT carrying the object's resourceVersion replaces it", put_current),
        check!(&UPDATES, "put-stale-resource-version", "§4.6 PUT rule 2, §7: a PUT with a stale resourceVersion is 409 Conflict", put_stale),
        check!(&UPDATES, "patch-stale-resource-version", "§4.6 PATCH notes, §7: a patch conditional on a stale resourceVersion is 409 Conflict", patch_stale),
        check!(&UPDATES, "json-patch", "§4.6: application/json-patch+json applies RFC 6902 operations in order", json_patch),
        check!(&UPDATES, "json-patch-test-fails", "§4.6: a JSON patch whose test operation does not hold fails and changes nothing", json_patch_test),
        check!(&UPDATES, "merge-patch", "§4.6: application/merge-patch+json merges maps, null removes a key, lists are replaced", merge_patch),
        check!(&UPDATES, "strategic-merge-patch", "§4.6: application/strategic-merge-patch+json merges a list by its merge key (secrets by name)", strategic),
        check!(&UPDATES, "strategic-merge-delete-directive", "§4.6: a strategic merge patch's $patch: delete removes a list item", strategic_delete),
        check!(&UPDATES, "unknown-patch-type", "§4.6: a PATCH of a content type that is no patch type is 415 UnsupportedMediaType", unknown_patch),
        check!(&UPDATES, "apply-creates", "§4.6: server-side apply creates an absent object (201)", apply_creates),
        check!(&UPDATES, "apply-records-manager", "§4.6: apply records the fieldManager's fields in managedFields (operation Apply)", apply_manager),
        check!(&UPDATES, "apply-conflict", "§4.6: applying a field another manager owns is 409 Conflict naming the manager", apply_conflict),
        check!(&UPDATES, "apply-force", "§4.6: force=true takes the conflicting field over", apply_force),
        check!(&UPDATES, "apply-needs-field-manager", "§4.6: apply without fieldManager is refused", apply_needs_manager),
        check!(&UPDATES, "update-records-manager", "§4.6: a PUT's fieldManager is recorded in managedFields (operation Update)", update_manager),
    ]
}

async fn patch(
    cx: &Ctx,
    name: &str,
    content_type: &str,
    body: &Value,
    query: &str,
) -> Result<Resp, Fail> {
    cx.send(Req::patch(format!("{}{query}", cx.sa(name))).body(content_type, body.to_string()))
        .await
}

async fn put_current(cx: &Ctx) -> CheckResult {
    let name = cx.name("put");
    let mut o = cx.create_sa(&name, Value::Null).await?;
    o["metadata"]["labels"]["step"] = json!("two");
    let resp = cx.send(Req::put(cx.sa(&name)).json(&o)).await?;
    let updated = resp.ok_json(200)?;
    ensure!(
        updated["metadata"]["labels"]["step"] == "two",
        &resp,
        "the replacement was not stored"
    );
    Ok(())
}

async fn put_stale(cx: &Ctx) -> CheckResult {
    let name = cx.name("stale");
    let mut old = cx.create_sa(&name, Value::Null).await?;
    patch(
        cx,
        &name,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"step": "newer"}}}),
        "",
    )
    .await?
    .expect(200)?;
    old["metadata"]["labels"]["step"] = json!("stale");
    let resp = cx.send(Req::put(cx.sa(&name)).json(&old)).await?;
    expect_status(&resp, 409, "Conflict")?;
    let now = cx.get_json(&cx.sa(&name)).await?;
    ensure!(
        now["metadata"]["labels"]["step"] == "newer",
        &resp,
        "the stale PUT changed the object"
    );
    Ok(())
}

async fn patch_stale(cx: &Ctx) -> CheckResult {
    let name = cx.name("cond");
    let old = cx.create_sa(&name, Value::Null).await?;
    patch(
        cx,
        &name,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"step": "newer"}}}),
        "",
    )
    .await?
    .expect(200)?;
    let body = json!({"metadata": {"resourceVersion": rv(&old), "labels": {"step": "stale"}}});
    let resp = patch(cx, &name, "application/merge-patch+json", &body, "").await?;
    expect_status(&resp, 409, "Conflict")?;
    Ok(())
}

async fn json_patch(cx: &Ctx) -> CheckResult {
    let name = cx.name("jp");
    cx.create_sa(&name, Value::Null).await?;
    let ops = json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}},
        {"op": "replace", "path": "/metadata/annotations/a", "value": "2"},
        {"op": "add", "path": "/metadata/annotations/b", "value": "3"},
    ]);
    let resp = patch(cx, &name, "application/json-patch+json", &ops, "").await?;
    let o = resp.ok_json(200)?;
    ensure!(
        o["metadata"]["annotations"] == json!({"a": "2", "b": "3"}),
        &resp,
        "expected annotations a=2, b=3 after the operations in order"
    );
    Ok(())
}

async fn json_patch_test(cx: &Ctx) -> CheckResult {
    let name = cx.name("jpt");
    cx.create_sa(&name, Value::Null).await?;
    let ops = json!([
        {"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}},
        {"op": "test", "path": "/metadata/name", "value": "something-else"},
    ]);
    let resp = patch(cx, &name, "application/json-patch+json", &ops, "").await?;
    ensure!(
        (400..500).contains(&resp.status),
        &resp,
        "expected a 4xx for a failed test operation, got {}",
        resp.status
    );
    let now = cx.get_json(&cx.sa(&name)).await?;
    ensure!(
        now["metadata"]["annotations"].is_null(),
        &resp,
        "the failed patch's first operation was applied"
    );
    Ok(())
}

async fn merge_patch(cx: &Ctx) -> CheckResult {
    let name = cx.name("mp");
    let mut body = cx.sa_body(&name, json!({"drop": "me", "keep": "me"}));
    body["secrets"] = json!([{"name": "a"}]);
    cx.send(Req::post(cx.sa_path()).json(&body))
        .await?
        .expect_one_of(&[200, 201, 202])?;
    let resp = patch(
        cx,
        &name,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"drop": null, "new": "yes"}}, "secrets": [{"name": "b"}]}),
        "",
    )
    .await?;
    let o = resp.ok_json(200)?;
    let labels = &o["metadata"]["labels"];
    ensure!(
        labels["drop"].is_null() && labels["keep"] == "me" && labels["new"] == "yes",
        &resp,
        "labels should lose drop, keep keep and gain new: {labels}"
    );
    ensure!(
        o["secrets"] == json!([{"name": "b"}]),
        &resp,
        "a merge patch replaces a list: secrets should be [b], got {}",
        o["secrets"]
    );
    Ok(())
}

fn secret_names(o: &Value) -> Vec<String> {
    let mut names: Vec<String> = o["secrets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

async fn with_secrets(cx: &Ctx, prefix: &str, secrets: Value) -> Result<String, Fail> {
    let name = cx.name(prefix);
    let mut body = cx.sa_body(&name, Value::Null);
    body["secrets"] = secrets;
    cx.send(Req::post(cx.sa_path()).json(&body))
        .await?
        .expect_one_of(&[200, 201, 202])?;
    Ok(name)
}

async fn strategic(cx: &Ctx) -> CheckResult {
    let name = with_secrets(cx, "smp", json!([{"name": "a"}])).await?;
    let resp = patch(
        cx,
        &name,
        "application/strategic-merge-patch+json",
        &json!({"secrets": [{"name": "b"}]}),
        "",
    )
    .await?;
    let o = resp.ok_json(200)?;
    ensure!(
        secret_names(&o) == ["a", "b"],
        &resp,
        "secrets merge by name: expected a and b, got {}",
        o["secrets"]
    );
    Ok(())
}

async fn strategic_delete(cx: &Ctx) -> CheckResult {
    let name = with_secrets(cx, "smpd", json!([{"name": "a"}, {"name": "b"}])).await?;
    let resp = patch(
        cx,
        &name,
        "application/strategic-merge-patch+json",
        &json!({"secrets": [{"name": "a", "$patch": "delete"}]}),
        "",
    )
    .await?;
    let o = resp.ok_json(200)?;
    ensure!(
        secret_names(&o) == ["b"],
        &resp,
        "expected only b left, got {}",
        o["secrets"]
    );
    Ok(())
}

async fn unknown_patch(cx: &Ctx) -> CheckResult {
    let name = cx.name("upt");
    cx.create_sa(&name, Value::Null).await?;
    let resp = patch(cx, &name, "application/x-conformance-patch", &json!({}), "").await?;
    expect_status(&resp, 415, "UnsupportedMediaType")?;
    Ok(())
}

fn applied(cx: &Ctx, name: &str, labels: Value) -> Value {
    cx.sa_body(name, labels)
}

async fn apply(cx: &Ctx, name: &str, body: &Value, query: &str) -> Result<Resp, Fail> {
    patch(cx, name, "application/apply-patch+yaml", body, query).await
}

async fn apply_creates(cx: &Ctx) -> CheckResult {
    let name = cx.name("apply");
    let (key, value) = cx.run_label();
    // Quoted: a run id of digits alone would read as a YAML number, not a label value.
    let yaml = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  labels:\n    {key}: '{value}'\n    owner: a\n"
    );
    let resp = cx
        .send(
            Req::patch(format!("{}?fieldManager=conformance-a", cx.sa(&name)))
                .body("application/apply-patch+yaml", yaml),
        )
        .await?;
    let o = resp.ok_json(201)?;
    ensure!(
        o["metadata"]["labels"]["owner"] == "a",
        &resp,
        "the applied label is missing"
    );
    let read = cx.get(&cx.sa(&name)).await?;
    read.expect(200)?;
    Ok(())
}

fn managers(o: &Value) -> Vec<(String, String)> {
    o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or("").to_string(),
                m["operation"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

async fn apply_manager(cx: &Ctx) -> CheckResult {
    let name = cx.name("apply");
    apply(
        cx,
        &name,
        &applied(cx, &name, json!({"owner": "a"})),
        "?fieldManager=conformance-a",
    )
    .await?
    .expect_one_of(&[200, 201])?;
    let resp = apply(
        cx,
        &name,
        &applied(cx, &name, json!({"owner": "a", "more": "yes"})),
        "?fieldManager=conformance-a",
    )
    .await?;
    let o = resp.ok_json(200)?;
    ensure!(
        o["metadata"]["labels"]["more"] == "yes",
        &resp,
        "the second apply's label is missing"
    );
    ensure!(
        managers(&o).contains(&("conformance-a".into(), "Apply".into())),
        &resp,
        "managedFields lacks manager conformance-a with operation Apply"
    );
    let entry = o["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["manager"] == "conformance-a")
        .cloned()
        .unwrap_or(Value::Null);
    ensure!(
        entry["fieldsType"] == "FieldsV1"
            && entry["fieldsV1"]["f:metadata"]["f:labels"]["f:more"].is_object(),
        &resp,
        "conformance-a's fieldsV1 lacks f:metadata.f:labels.f:more"
    );
    Ok(())
}

/// conformance-a applies label `owner=a`, then conformance-b applies `owner=b` with `extra`
/// query parameters; the answer to b's apply.
async fn owned_by_a_applied_by_b(cx: &Ctx, name: &str, extra: &str) -> Result<Resp, Fail> {
    apply(
        cx,
        name,
        &applied(cx, name, json!({"owner": "a"})),
        "?fieldManager=conformance-a",
    )
    .await?
    .expect_one_of(&[200, 201])?;
    apply(
        cx,
        name,
        &applied(cx, name, json!({"owner": "b"})),
        &format!("?fieldManager=conformance-b{extra}"),
    )
    .await
}

async fn apply_conflict(cx: &Ctx) -> CheckResult {
    let name = cx.name("apply");
    let resp = owned_by_a_applied_by_b(cx, &name, "").await?;
    let status = expect_status(&resp, 409, "Conflict")?;
    let message = status["message"].as_str().unwrap_or("");
    ensure!(
        message.contains("conformance-a"),
        &resp,
        "the conflict does not name the owning manager conformance-a"
    );
    let now = cx.get_json(&cx.sa(&name)).await?;
    ensure!(
        now["metadata"]["labels"]["owner"] == "a",
        &resp,
        "the refused apply changed the object"
    );
    Ok(())
}

async fn apply_force(cx: &Ctx) -> CheckResult {
    let name = cx.name("apply");
    let resp = owned_by_a_applied_by_b(cx, &name, "&force=true").await?;
    let o = resp.ok_json(200)?;
    ensure!(
        o["metadata"]["labels"]["owner"] == "b",
        &resp,
        "the forced apply did not set owner=b"
    );
    ensure!(
        managers(&o).contains(&("conformance-b".into(), "Apply".into())),
        &resp,
        "managedFields lacks conformance-b (Apply)"
    );
    Ok(())
}

async fn apply_needs_manager(cx: &Ctx) -> CheckResult {
    let name = cx.name("apply");
    let resp = apply(cx, &name, &applied(cx, &name, Value::Null), "").await?;
    ensure!(
        resp.status == 400 || resp.status == 422,
        &resp,
        "expected 400 or 422 for an apply without fieldManager, got {}",
        resp.status
    );
    let read = cx.get(&cx.sa(&name)).await?;
    ensure!(
        read.status == 404,
        &read,
        "the refused apply created the object"
    );
    Ok(())
}

async fn update_manager(cx: &Ctx) -> CheckResult {
    let name = cx.name("upd");
    let mut o = cx.create_sa(&name, Value::Null).await?;
    o["metadata"]["labels"]["put"] = json!("yes");
    let resp = cx
        .send(Req::put(format!("{}?fieldManager=conformance-put", cx.sa(&name))).json(&o))
        .await?;
    let updated = resp.ok_json(200)?;
    ensure!(
        managers(&updated).contains(&("conformance-put".into(), "Update".into())),
        &resp,
        "managedFields lacks conformance-put with operation Update"
    );
    Ok(())
}
