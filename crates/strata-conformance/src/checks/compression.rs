//! §4.10 Response compression: get and list answers to `Accept-Encoding: gzip` are gzip
//! (`content-encoding: gzip`), and only then. The object is large (over Kubernetes' 128 KiB
//! threshold), so that every implementation compresses it.

use std::io::Read;

use serde_json::{json, Value};

use super::COMPRESSION;
use crate::client::{Req, Resp};
use crate::framework::{Check, CheckResult, Ctx, Fail};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(
            &COMPRESSION,
            "gzip-get",
            "§4.10: a get with Accept-Encoding: gzip is answered gzip-compressed",
            gzip_get
        ),
        check!(
            &COMPRESSION,
            "gzip-list",
            "§4.10: a list with Accept-Encoding: gzip is answered gzip-compressed",
            gzip_list
        ),
        check!(
            &COMPRESSION,
            "no-gzip-unasked",
            "§4.10: without Accept-Encoding the answer is not compressed",
            unasked
        ),
    ]
}

/// A ServiceAccount with 150 KiB of annotations, labelled set=<mark>.
async fn large(cx: &Ctx) -> Result<(String, String), Fail> {
    let mark = cx.name("gz");
    let name = cx.name("gz");
    let mut body = cx.sa_body(&name, json!({"set": mark}));
    body["metadata"]["annotations"] = json!({"conformance/padding": "x".repeat(150 * 1024)});
    cx.send(Req::post(cx.sa_path()).json(&body))
        .await?
        .expect_one_of(&[200, 201, 202])?;
    Ok((mark, name))
}

fn gunzip(resp: &Resp) -> Result<Value, Fail> {
    let encoding = resp.header("content-encoding").to_ascii_lowercase();
    if encoding != "gzip" {
        return Err(Fail::with(
            resp,
            format!("content-encoding is {encoding:?}, not gzip (is APIResponseCompression off?)"),
        ));
    }
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&resp.body[..])
        .read_to_end(&mut text)
        .map_err(|e| Fail::with(resp, format!("the body is not gzip: {e}")))?;
    serde_json::from_slice(&text)
        .map_err(|e| Fail::with(resp, format!("the gunzipped body is not JSON: {e}")))
}

async fn gzip_get(cx: &Ctx) -> CheckResult {
    let (_, name) = large(cx).await?;
    let resp = cx
        .read
        .send(Req::get(cx.sa(&name)).header("Accept-Encoding", "gzip"))
        .await?;
    resp.expect(200)?;
    let o = gunzip(&resp)?;
    ensure!(
        o["metadata"]["name"] == name.as_str(),
        &resp,
        "the gunzipped body is not {name}"
    );
    Ok(())
}

async fn gzip_list(cx: &Ctx) -> CheckResult {
    let (mark, name) = large(cx).await?;
    let path = format!(
        "{}?labelSelector={}",
        cx.sa_path(),
        cx.selector("set", &mark)
    );
    let resp = cx
        .read
        .send(Req::get(path).header("Accept-Encoding", "gzip"))
        .await?;
    resp.expect(200)?;
    let list = gunzip(&resp)?;
    ensure!(
        list["items"][0]["metadata"]["name"] == name.as_str(),
        &resp,
        "the gunzipped list lacks {name}"
    );
    Ok(())
}

async fn unasked(cx: &Ctx) -> CheckResult {
    let (_, name) = large(cx).await?;
    let resp = cx.read.send(Req::get(cx.sa(&name))).await?;
    resp.expect(200)?;
    ensure!(
        resp.header("content-encoding").is_empty() || resp.header("content-encoding") == "identity",
        &resp,
        "the answer is compressed though the client did not ask"
    );
    resp.json()?;
    Ok(())
}
