//! §4.5 Watch: a watch from a list's resourceVersion sees the changes after it, as a chunked
//! stream of JSON events; the initial state (unset or `0`) arrives as ADDED events, an exact
//! version sends none; a watch resumes from an event's version; bookmarks and streaming lists
//! (`sendInitialEvents`).

use std::time::Duration;

use serde_json::{json, Value};

use super::WATCH;
use crate::client::{Req, Watch, WatchNext};
use crate::framework::{rv, Check, CheckResult, Ctx, Fail, WAIT};
use crate::{check, ensure, Profile};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&WATCH, "watch-sees-changes", "§4.5: a watch from a list's resourceVersion reports the later create, update and delete", sees_changes),
        check!(&WATCH, "watch-json-stream", "§4.5: a JSON watch is a chunked application/json stream of {type, object} documents", json_stream),
        check!(&WATCH, "watch-unset-sends-state", "§4.11 watch table, §6: without resourceVersion the watch starts with ADDED for every existing object", unset_state),
        check!(&WATCH, "watch-zero-sends-state", "§4.11 watch table: resourceVersion=0 starts with ADDED for the existing objects", zero_state),
        check!(&WATCH, "watch-exact-no-initial-events", "§4.11 watch table: from a given resourceVersion only later changes arrive, no synthetic ADDED", exact_start),
        check!(&WATCH, "watch-resume-from-event", "§4.5: a new watch from the last event's resourceVersion continues without loss or repetition", resume),
        check!(&WATCH, "streaming-list-initial-events", "§4.5 streaming list: sendInitialEvents=true sends ADDED for existing objects, then a BOOKMARK, then changes (profile kubernetes: skipped when WatchList is off)", streaming_list),
        check!(&WATCH, "streaming-list-bookmark-shape", "§2.5, §6: a BOOKMARK's object has the requested kind and only metadata.resourceVersion of the object's fields", bookmark_shape),
        check!(&WATCH, "streaming-list-needs-not-older-than", "§4.5 streaming list: sendInitialEvents=true without resourceVersionMatch=NotOlderThan is refused", needs_not_older_than),
    ]
}

/// Opens a watch on the ServiceAccounts labelled set=<mark>, with more query parameters.
async fn open(cx: &Ctx, mark: &str, query: &str) -> Result<Watch, Fail> {
    let mut path = format!(
        "{}?watch=1&labelSelector={}",
        cx.sa_path(),
        cx.selector("set", mark)
    );
    if !query.is_empty() {
        path.push('&');
        path.push_str(query);
    }
    cx.read.watch(Req::get(path)).await
}

/// The resourceVersion of the list of ServiceAccounts labelled set=<mark>.
async fn list_rv(cx: &Ctx, mark: &str) -> Result<String, Fail> {
    let list = cx
        .get_json(&format!(
            "{}?labelSelector={}",
            cx.sa_path(),
            cx.selector("set", mark)
        ))
        .await?;
    Ok(rv(&list))
}

fn name_of(event: &Value) -> &str {
    event["object"]["metadata"]["name"].as_str().unwrap_or("")
}

async fn label(cx: &Ctx, name: &str, value: &str) -> Result<Value, Fail> {
    let resp = cx
        .send(Req::patch(cx.sa(name)).body(
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"step": value}}}).to_string(),
        ))
        .await?;
    resp.ok_json(200)
}

async fn sees_changes(cx: &Ctx) -> CheckResult {
    let mark = cx.name("w");
    let from = list_rv(cx, &mark).await?;
    let mut w = open(cx, &mark, &format!("resourceVersion={from}")).await?;
    w.expect_open()?;
    let name = cx.name("w");
    let created = cx.create_sa(&name, json!({"set": mark})).await?;
    let e = w.change(WAIT).await?;
    if e["type"] != "ADDED" || name_of(&e) != name || rv(&e["object"]) != rv(&created) {
        return Err(w.fail(format!(
            "expected ADDED of {name} at resourceVersion {}",
            rv(&created)
        )));
    }
    let updated = label(cx, &name, "one").await?;
    let e = w.change(WAIT).await?;
    if e["type"] != "MODIFIED" || name_of(&e) != name || rv(&e["object"]) != rv(&updated) {
        return Err(w.fail(format!(
            "expected MODIFIED of {name} at resourceVersion {}",
            rv(&updated)
        )));
    }
    cx.send(Req::delete(cx.sa(&name)))
        .await?
        .expect_one_of(&[200, 202])?;
    let e = w.change(WAIT).await?;
    let kind = e["type"].as_str().unwrap_or("");
    if name_of(&e) != name || matches!(kind, "ADDED" | "MODIFIED" | "BOOKMARK" | "ERROR") {
        return Err(w.fail(format!(
            "expected the deletion of {name} to be reported (DELETED)"
        )));
    }
    Ok(())
}

async fn json_stream(cx: &Ctx) -> CheckResult {
    let mark = cx.name("w");
    let from = list_rv(cx, &mark).await?;
    let mut w = open(cx, &mark, &format!("resourceVersion={from}")).await?;
    w.expect_open()?;
    let media = w
        .header("content-type")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if media != "application/json" {
        return Err(w.fail(format!("Content-Type is {media:?}, not application/json")));
    }
    let te = w.header("transfer-encoding").to_ascii_lowercase();
    if !te.contains("chunked") {
        return Err(w.fail(format!("Transfer-Encoding is {te:?}, not chunked")));
    }
    cx.create_sa(&cx.name("w"), json!({"set": mark})).await?;
    let e = w.change(WAIT).await?;
    let keys: Vec<&String> = e
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    if !(e["type"].is_string() && e["object"].is_object() && keys.len() == 2) {
        return Err(w.fail("an event is not a document of exactly type and object"));
    }
    Ok(())
}

/// Reads ADDED events until every name in `want` has arrived.
async fn expect_added(w: &mut Watch, want: &[String]) -> CheckResult {
    let mut missing: Vec<&String> = want.iter().collect();
    while !missing.is_empty() {
        let e = w.change(WAIT).await?;
        if e["type"] != "ADDED" {
            return Err(w.fail(format!(
                "a {} event before the ADDED events of {missing:?}",
                e["type"]
            )));
        }
        missing.retain(|n| n.as_str() != name_of(&e));
    }
    Ok(())
}

async fn two(cx: &Ctx) -> Result<(String, Vec<String>), Fail> {
    let mark = cx.name("w");
    let names = vec![cx.name("w"), cx.name("w")];
    for n in &names {
        cx.create_sa(n, json!({"set": mark})).await?;
    }
    Ok((mark, names))
}

async fn unset_state(cx: &Ctx) -> CheckResult {
    let (mark, names) = two(cx).await?;
    let mut w = open(cx, &mark, "").await?;
    w.expect_open()?;
    expect_added(&mut w, &names).await
}

async fn zero_state(cx: &Ctx) -> CheckResult {
    let (mark, names) = two(cx).await?;
    let mut w = open(cx, &mark, "resourceVersion=0").await?;
    w.expect_open()?;
    expect_added(&mut w, &names).await
}

async fn exact_start(cx: &Ctx) -> CheckResult {
    let (mark, _) = two(cx).await?;
    let from = list_rv(cx, &mark).await?;
    let mut w = open(cx, &mark, &format!("resourceVersion={from}")).await?;
    w.expect_open()?;
    let late = cx.name("w");
    cx.create_sa(&late, json!({"set": mark})).await?;
    let e = w.change(WAIT).await?;
    if name_of(&e) != late {
        return Err(w.fail(format!(
            "the first event is about {:?}, not {late}, created after the start version",
            name_of(&e)
        )));
    }
    Ok(())
}

async fn resume(cx: &Ctx) -> CheckResult {
    let mark = cx.name("w");
    let name = cx.name("w");
    cx.create_sa(&name, json!({"set": mark})).await?;
    let from = list_rv(cx, &mark).await?;
    let mut w = open(cx, &mark, &format!("resourceVersion={from}")).await?;
    w.expect_open()?;
    label(cx, &name, "one").await?;
    let first = w.change(WAIT).await?;
    drop(w);
    let second = label(cx, &name, "two").await?;
    let mut again = open(
        cx,
        &mark,
        &format!("resourceVersion={}", rv(&first["object"])),
    )
    .await?;
    again.expect_open()?;
    let e = again.change(WAIT).await?;
    if e["type"] != "MODIFIED" || rv(&e["object"]) != rv(&second) {
        return Err(again.fail(format!(
            "expected the change after {} (MODIFIED at {}) first",
            rv(&first["object"]),
            rv(&second)
        )));
    }
    Ok(())
}

/// Opens a streaming list, or skips under the kubernetes profile when the server refuses it.
async fn streaming(cx: &Ctx, mark: &str) -> Result<Watch, Fail> {
    let w = open(
        cx,
        mark,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    .await?;
    if let Some(resp) = &w.refused {
        if cx.profile == Profile::Kubernetes && (resp.status == 400 || resp.status == 422) {
            return Err(Fail::skip(format!(
                "the server refuses sendInitialEvents ({}): the WatchList gate is off, as in Kubernetes 1.31",
                resp.status
            )));
        }
    }
    w.expect_open()?;
    Ok(w)
}

async fn streaming_list(cx: &Ctx) -> CheckResult {
    let (mark, names) = two(cx).await?;
    let mut w = streaming(cx, &mark).await?;
    let mut missing: Vec<&String> = names.iter().collect();
    loop {
        let e = w.event(WAIT).await?;
        match e["type"].as_str() {
            Some("ADDED") => missing.retain(|n| n.as_str() != name_of(&e)),
            Some("BOOKMARK") if missing.is_empty() => break,
            _ => {
                return Err(w.fail(format!(
                    "expected ADDED for {missing:?} and then a BOOKMARK"
                )))
            }
        }
    }
    let late = cx.name("w");
    cx.create_sa(&late, json!({"set": mark})).await?;
    let e = w.change(WAIT).await?;
    if e["type"] != "ADDED" || name_of(&e) != late {
        return Err(w.fail(format!("after the bookmark, expected ADDED of {late}")));
    }
    Ok(())
}

async fn bookmark_shape(cx: &Ctx) -> CheckResult {
    let (mark, _) = two(cx).await?;
    let mut w = streaming(cx, &mark).await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let e = match w.next(left.max(Duration::from_millis(1))).await? {
            WatchNext::Event(e) => e,
            _ => return Err(w.fail(format!("no BOOKMARK within {WAIT:?}"))),
        };
        if e["type"] != "BOOKMARK" {
            continue;
        }
        let o = &e["object"];
        ensure_bookmark(&w, o)?;
        return Ok(());
    }
}

fn ensure_bookmark(w: &Watch, o: &Value) -> CheckResult {
    if o["kind"] != "ServiceAccount" {
        return Err(w.fail(format!(
            "the bookmark's kind is {}, not ServiceAccount",
            o["kind"]
        )));
    }
    if rv(o).is_empty() {
        return Err(w.fail("the bookmark has no metadata.resourceVersion"));
    }
    for field in ["name", "namespace", "uid", "labels", "creationTimestamp"] {
        if !o["metadata"][field].is_null() {
            return Err(w.fail(format!("the bookmark carries metadata.{field}")));
        }
    }
    Ok(())
}

async fn needs_not_older_than(cx: &Ctx) -> CheckResult {
    let w = open(cx, &cx.name("w"), "sendInitialEvents=true").await?;
    let Some(resp) = &w.refused else {
        return Err(w.fail("the watch was accepted without resourceVersionMatch=NotOlderThan"));
    };
    ensure!(
        resp.status == 400 || resp.status == 422,
        resp,
        "expected 400 or 422, got {}",
        resp.status
    );
    Ok(())
}
