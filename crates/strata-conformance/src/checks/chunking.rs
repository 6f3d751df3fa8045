//! §4.4 List, chunked retrieval and collections: `limit` caps a chunk, `continue` walks the
//! rest, every chunk shows the first one's snapshot and resourceVersion, and a token that is
//! not one is refused.

use serde_json::{json, Value};

use super::CHUNKING;
use crate::client::{Req, Resp};
use crate::framework::{enc, expect_status, names, rv, Check, CheckResult, Ctx, Fail};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&CHUNKING, "limit-caps-chunk", "§4.4 rule 1: with limit the server returns at most limit items and a continue token when more remain", limit_caps),
        check!(&CHUNKING, "continue-walks-collection", "§4.4 rule 2: passing continue back walks every item once, ending with an empty continue", walks),
        check!(&CHUNKING, "chunks-share-resource-version", "§4.4 rule 3: every chunk carries the first chunk's resourceVersion", same_rv),
        check!(&CHUNKING, "chunks-are-one-snapshot", "§4.4 rule 3: objects created or deleted after the first chunk do not change later chunks", snapshot),
        check!(&CHUNKING, "fresh-list-sees-changes", "§4.4 rule 3: a separate list without continue shows the changes", fresh_list),
        check!(&CHUNKING, "invalid-continue-token", "§4.4, §7: a continue token the server did not issue is refused (400 BadRequest)", invalid_token),
    ]
}

/// Creates ServiceAccounts `<mark>-a`, `-b`, `-c` labelled set=<mark>; returns the mark.
async fn three(cx: &Ctx) -> Result<String, Fail> {
    let mark = cx.name("chunk");
    for suffix in ["a", "b", "c"] {
        cx.create_sa(&format!("{mark}-{suffix}"), json!({"set": mark}))
            .await?;
    }
    Ok(mark)
}

fn page_path(cx: &Ctx, mark: &str, limit: u32, token: Option<&str>) -> String {
    let mut path = format!(
        "{}?labelSelector={}&limit={limit}",
        cx.sa_path(),
        cx.selector("set", mark)
    );
    if let Some(token) = token {
        path.push_str(&format!("&continue={}", enc(token)));
    }
    path
}

fn token(list: &Value) -> String {
    list["metadata"]["continue"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Every chunk of limit 1, with the answers.
async fn walk(
    cx: &Ctx,
    mark: &str,
    between: Option<&(dyn Fn() -> Vec<Req> + Sync)>,
) -> Result<Vec<(Resp, Value)>, Fail> {
    let mut pages = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let resp = cx.get(&page_path(cx, mark, 1, next.as_deref())).await?;
        let page = resp.ok_json(200)?;
        let t = token(&page);
        pages.push((resp, page));
        if pages.len() == 1 {
            if let Some(make) = between {
                for req in make() {
                    cx.send(req).await?.expect_one_of(&[200, 201, 202])?;
                }
            }
        }
        if t.is_empty() || pages.len() > 20 {
            return Ok(pages);
        }
        next = Some(t);
    }
}

async fn limit_caps(cx: &Ctx) -> CheckResult {
    let mark = three(cx).await?;
    let resp = cx.get(&page_path(cx, &mark, 2, None)).await?;
    let page = resp.ok_json(200)?;
    let got = names(&page);
    ensure!(
        got.len() <= 2,
        &resp,
        "limit=2 returned {} items",
        got.len()
    );
    ensure!(
        !token(&page).is_empty(),
        &resp,
        "no continue token though {} of 3 items were returned",
        got.len()
    );
    Ok(())
}

async fn walks(cx: &Ctx) -> CheckResult {
    let mark = three(cx).await?;
    let pages = walk(cx, &mark, None).await?;
    let all: Vec<String> = pages.iter().flat_map(|(_, p)| names(p)).collect();
    let want: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|s| format!("{mark}-{s}"))
        .collect();
    let (last, _) = pages.last().ok_or_else(|| Fail::msg("no chunk"))?;
    ensure!(
        all == want,
        last,
        "the chunks hold {all:?}, expected {want:?}"
    );
    Ok(())
}

async fn same_rv(cx: &Ctx) -> CheckResult {
    let mark = three(cx).await?;
    let pages = walk(cx, &mark, None).await?;
    let first = rv(&pages[0].1);
    for (resp, page) in &pages {
        ensure!(
            rv(page) == first,
            resp,
            "this chunk's resourceVersion is {}, the first's {first}",
            rv(page)
        );
    }
    Ok(())
}

async fn snapshot(cx: &Ctx) -> CheckResult {
    let mark = three(cx).await?;
    let late = format!("{mark}-z");
    let body = cx.sa_body(&late, json!({"set": mark}));
    let sa_path = cx.sa_path();
    let doomed = cx.sa(&format!("{mark}-c"));
    let changes = move || vec![Req::post(&sa_path).json(&body), Req::delete(&doomed)];
    let pages = walk(cx, &mark, Some(&changes)).await?;
    let all: Vec<String> = pages.iter().flat_map(|(_, p)| names(p)).collect();
    let want: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|s| format!("{mark}-{s}"))
        .collect();
    let (last, _) = pages.last().ok_or_else(|| Fail::msg("no chunk"))?;
    ensure!(all == want, last, "the chunks hold {all:?}; the snapshot of the first chunk is {want:?} (-z was created and -c deleted after it)");
    Ok(())
}

async fn fresh_list(cx: &Ctx) -> CheckResult {
    let mark = three(cx).await?;
    let first = cx.get(&page_path(cx, &mark, 1, None)).await?;
    first.expect(200)?;
    cx.create_sa(&format!("{mark}-z"), json!({"set": mark}))
        .await?;
    let resp = cx
        .get(&format!(
            "{}?labelSelector={}",
            cx.sa_path(),
            cx.selector("set", &mark)
        ))
        .await?;
    let list = resp.ok_json(200)?;
    ensure!(
        names(&list).contains(&format!("{mark}-z")),
        &resp,
        "a new list lacks {mark}-z, created before it"
    );
    Ok(())
}

async fn invalid_token(cx: &Ctx) -> CheckResult {
    let resp = cx
        .get(&format!(
            "{}?limit=1&continue={}",
            cx.sa_path(),
            enc("not-a-continue-token")
        ))
        .await?;
    expect_status(&resp, 400, "BadRequest")?;
    Ok(())
}
