//! §4.11 Resource version parameter semantics: the get, list and watch tables (Most Recent,
//! Any, Not Older Than, Exact, Continue Token), the invalid combinations, and versions the
//! server has not reached (504 or Retry-After, "too large").

use serde_json::{json, Value};

use super::RV;
use crate::client::Resp;
use crate::framework::{enc, expect_status, names, rv, Check, CheckResult, Ctx, Fail, WAIT};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&RV, "get-unset-most-recent", "§4.11 get: without resourceVersion a get returns the latest write", get_unset),
        check!(&RV, "get-zero-any", "§4.11 get: resourceVersion=0 returns the object at any version", get_zero),
        check!(&RV, "get-not-older-than", "§4.11 get: resourceVersion=<v> returns the object at least as new as v", get_not_older),
        check!(&RV, "list-unset-most-recent", "§4.11 list: without resourceVersion a list shows the latest writes", list_unset),
        check!(&RV, "list-match-without-version", "§4.11: resourceVersionMatch without resourceVersion is invalid", match_without_rv),
        check!(&RV, "list-exact", "§4.11 list: Exact returns the collection at exactly that resourceVersion", list_exact),
        check!(&RV, "list-exact-with-limit", "§4.11 list: Exact with limit returns chunks at exactly that resourceVersion", list_exact_limit),
        check!(&RV, "list-limit-version-is-exact", "§4.11 list: limit with a resourceVersion and no match is Exact", list_limit_exact),
        check!(&RV, "list-exact-zero-invalid", "§4.11 list: Exact with resourceVersion 0 is invalid", exact_zero),
        check!(&RV, "list-not-older-than", "§4.11 list: NotOlderThan returns a collection no older than the version", list_not_older),
        check!(&RV, "list-not-older-than-zero", "§4.11 list: NotOlderThan with 0 is Any", list_not_older_zero),
        check!(&RV, "list-continue-with-version", "§4.11, §7: continue with a resourceVersion other than 0 is 400 BadRequest", continue_with_rv),
        check!(&RV, "list-continue-with-zero", "§4.11: continue with resourceVersion 0 is treated as the continue token alone", continue_with_zero),
        check!(&RV, "version-too-large", "§4.11: a version the server has not reached is 504 or has Retry-After, saying it is too large", too_large),
    ]
}

async fn marked(cx: &Ctx, count: usize) -> Result<(String, Vec<String>), Fail> {
    let mark = cx.name("rv");
    let mut made = Vec::new();
    for _ in 0..count {
        let name = cx.name("rv");
        cx.create_sa(&name, json!({"set": mark})).await?;
        made.push(name);
    }
    Ok((mark, made))
}

fn list_path(cx: &Ctx, mark: &str, query: &str) -> String {
    format!(
        "{}?labelSelector={}&{query}",
        cx.sa_path(),
        cx.selector("set", mark)
    )
}

async fn relabel(cx: &Ctx, name: &str, step: &str) -> Result<Value, Fail> {
    cx.send(crate::client::Req::patch(cx.sa(name)).body(
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"step": step}}}).to_string(),
    ))
    .await?
    .ok_json(200)
}

async fn get_unset(cx: &Ctx) -> CheckResult {
    let name = cx.name("rv");
    cx.create_sa(&name, Value::Null).await?;
    let written = relabel(cx, &name, "latest").await?;
    let resp = cx.get(&cx.sa(&name)).await?;
    let o = resp.ok_json(200)?;
    ensure!(
        rv(&o) == rv(&written) && o["metadata"]["labels"]["step"] == "latest",
        &resp,
        "expected the latest write (resourceVersion {})",
        rv(&written)
    );
    Ok(())
}

async fn get_zero(cx: &Ctx) -> CheckResult {
    let name = cx.name("rv");
    let created = cx.create_sa(&name, Value::Null).await?;
    // "Any" may be older than the create: a 404 is allowed until the server's data catches up.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let resp = cx
            .get(&format!("{}?resourceVersion=0", cx.sa(&name)))
            .await?;
        if resp.status == 404 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        let o = resp.ok_json(200)?;
        ensure!(
            o["metadata"]["uid"] == created["metadata"]["uid"],
            &resp,
            "not the object created"
        );
        return Ok(());
    }
}

async fn get_not_older(cx: &Ctx) -> CheckResult {
    let name = cx.name("rv");
    cx.create_sa(&name, Value::Null).await?;
    let written = relabel(cx, &name, "two").await?;
    let resp = cx
        .get(&format!(
            "{}?resourceVersion={}",
            cx.sa(&name),
            enc(&rv(&written))
        ))
        .await?;
    let o = resp.ok_json(200)?;
    ensure!(
        o["metadata"]["labels"]["step"] == "two",
        &resp,
        "older than the version asked for ({})",
        rv(&written)
    );
    Ok(())
}

async fn list_unset(cx: &Ctx) -> CheckResult {
    let (mark, made) = marked(cx, 2).await?;
    let resp = cx.get(&list_path(cx, &mark, "")).await?;
    let list = resp.ok_json(200)?;
    ensure!(
        names(&list) == made,
        &resp,
        "expected {made:?}, written just before"
    );
    Ok(())
}

fn invalid(resp: &Resp) -> CheckResult {
    ensure!(
        resp.status == 400 || resp.status == 422,
        resp,
        "expected the request to be refused as invalid (400 or 422), got {}",
        resp.status
    );
    Ok(())
}

async fn match_without_rv(cx: &Ctx) -> CheckResult {
    for m in ["NotOlderThan", "Exact"] {
        let resp = cx
            .get(&format!("{}?resourceVersionMatch={m}", cx.sa_path()))
            .await?;
        invalid(&resp)?;
    }
    Ok(())
}

/// A collection's resourceVersion taken before one more object is created.
async fn before_and_after(cx: &Ctx) -> Result<(String, Vec<String>, String), Fail> {
    let (mark, made) = marked(cx, 2).await?;
    let at = rv(&cx.get_json(&list_path(cx, &mark, "")).await?);
    cx.create_sa(&cx.name("rv"), json!({"set": mark})).await?;
    Ok((mark, made, at))
}

async fn list_exact(cx: &Ctx) -> CheckResult {
    let (mark, made, at) = before_and_after(cx).await?;
    let resp = cx
        .get(&list_path(
            cx,
            &mark,
            &format!("resourceVersion={}&resourceVersionMatch=Exact", enc(&at)),
        ))
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        rv(&list) == at,
        &resp,
        "the collection's resourceVersion is {}, not the {at} asked for",
        rv(&list)
    );
    ensure!(
        names(&list) == made,
        &resp,
        "expected the collection at {at}: {made:?}"
    );
    Ok(())
}

async fn list_exact_limit(cx: &Ctx) -> CheckResult {
    let (mark, made, at) = before_and_after(cx).await?;
    let resp = cx
        .get(&list_path(
            cx,
            &mark,
            &format!(
                "resourceVersion={}&resourceVersionMatch=Exact&limit=1",
                enc(&at)
            ),
        ))
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        rv(&list) == at,
        &resp,
        "the chunk's resourceVersion is {}, not {at}",
        rv(&list)
    );
    ensure!(
        names(&list) == made[..1],
        &resp,
        "expected the first item at {at}: {}",
        made[0]
    );
    Ok(())
}

async fn list_limit_exact(cx: &Ctx) -> CheckResult {
    let (mark, made, at) = before_and_after(cx).await?;
    let mut all = Vec::new();
    let first = cx
        .get(&list_path(
            cx,
            &mark,
            &format!("resourceVersion={}&limit=1", enc(&at)),
        ))
        .await?;
    let mut page = first.ok_json(200)?;
    ensure!(
        rv(&page) == at,
        &first,
        "the chunk's resourceVersion is {}, not {at}",
        rv(&page)
    );
    loop {
        all.extend(names(&page));
        let token = page["metadata"]["continue"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if token.is_empty() || all.len() > 10 {
            break;
        }
        page = cx
            .get_json(&list_path(
                cx,
                &mark,
                &format!("limit=1&continue={}", enc(&token)),
            ))
            .await?;
    }
    ensure!(
        all == made,
        &first,
        "the chunks hold {all:?}; at {at} the collection was {made:?}"
    );
    Ok(())
}

async fn exact_zero(cx: &Ctx) -> CheckResult {
    let resp = cx
        .get(&format!(
            "{}?resourceVersion=0&resourceVersionMatch=Exact",
            cx.sa_path()
        ))
        .await?;
    invalid(&resp)
}

async fn list_not_older(cx: &Ctx) -> CheckResult {
    let (mark, made) = marked(cx, 2).await?;
    let at = rv(&cx.get_json(&list_path(cx, &mark, "")).await?);
    for extra in ["", "&limit=1"] {
        let resp = cx
            .get(&list_path(
                cx,
                &mark,
                &format!(
                    "resourceVersion={}&resourceVersionMatch=NotOlderThan{extra}",
                    enc(&at)
                ),
            ))
            .await?;
        let list = resp.ok_json(200)?;
        let got = names(&list);
        ensure!(
            !got.is_empty() && made.starts_with(&got),
            &resp,
            "expected the objects written before {at}: {made:?}"
        );
    }
    Ok(())
}

async fn list_not_older_zero(cx: &Ctx) -> CheckResult {
    let resp = cx
        .get(&format!(
            "{}?resourceVersion=0&resourceVersionMatch=NotOlderThan",
            cx.sa_path()
        ))
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        list["kind"] == "ServiceAccountList",
        &resp,
        "kind is {}",
        list["kind"]
    );
    Ok(())
}

async fn first_token(cx: &Ctx, mark: &str) -> Result<(String, String), Fail> {
    let resp = cx.get(&list_path(cx, mark, "limit=1")).await?;
    let page = resp.ok_json(200)?;
    let token = page["metadata"]["continue"]
        .as_str()
        .unwrap_or("")
        .to_string();
    ensure!(
        !token.is_empty(),
        &resp,
        "no continue token for a chunk of 1 of 2"
    );
    Ok((token, rv(&page)))
}

async fn continue_with_rv(cx: &Ctx) -> CheckResult {
    let (mark, _) = marked(cx, 2).await?;
    let (token, at) = first_token(cx, &mark).await?;
    let resp = cx
        .get(&list_path(
            cx,
            &mark,
            &format!(
                "limit=1&continue={}&resourceVersion={}",
                enc(&token),
                enc(&at)
            ),
        ))
        .await?;
    expect_status(&resp, 400, "BadRequest")?;
    Ok(())
}

async fn continue_with_zero(cx: &Ctx) -> CheckResult {
    let (mark, made) = marked(cx, 2).await?;
    let (token, at) = first_token(cx, &mark).await?;
    let resp = cx
        .get(&list_path(
            cx,
            &mark,
            &format!("limit=1&continue={}&resourceVersion=0", enc(&token)),
        ))
        .await?;
    let page = resp.ok_json(200)?;
    ensure!(
        names(&page) == made[1..] && rv(&page) == at,
        &resp,
        "expected the second chunk ({}) at {at}",
        made[1]
    );
    Ok(())
}

async fn too_large(cx: &Ctx) -> CheckResult {
    let list = cx.get_json(&cx.sa_path()).await?;
    let Ok(current) = rv(&list).parse::<u64>() else {
        return Err(Fail::skip(format!(
            "resourceVersions here are not numbers ({:?}): no way to name one the server has not reached",
            rv(&list)
        )));
    };
    let ahead = current + 1_000_000_000;
    let resp = cx
        .get(&format!(
            "{}?resourceVersion={ahead}&resourceVersionMatch=NotOlderThan",
            cx.sa_path()
        ))
        .await?;
    ensure!(
        resp.status == 504 || !resp.header("retry-after").is_empty(),
        &resp,
        "expected 504 or a Retry-After header for a version the server has not reached"
    );
    let text = String::from_utf8_lossy(&resp.body).to_ascii_lowercase();
    ensure!(
        text.contains("too large"),
        &resp,
        "the answer does not say the resource version is too large"
    );
    Ok(())
}
