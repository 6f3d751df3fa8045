//! §4.3 Media types and content negotiation: JSON by default, YAML, the protobuf envelope
//! (§4.3.1), Tables (§2.6), CBOR (§4.3.3, alpha: skipped when the server refuses it), `Accept`
//! fallbacks, 406 and 415.

use serde_json::Value;

use super::MEDIA;
use crate::client::{Req, Resp};
use crate::framework::{expect_status, names, Check, CheckResult, Ctx, Fail};
use crate::{check, ensure, Profile};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&MEDIA, "json-by-default", "§4.3.2: without a preferred format the answer is application/json", json_default),
        check!(&MEDIA, "yaml-response", "§4.3 rule 1: Accept application/yaml gets YAML with a matching Content-Type", yaml_response),
        check!(&MEDIA, "yaml-request", "§4.3 rule 2, §4.3.2: a YAML body with Content-Type application/yaml creates the object", yaml_request),
        check!(&MEDIA, "protobuf-response", "§4.3.1: a protobuf answer starts with k8s\\0 and holds runtime.Unknown with typeMeta and raw (profile kubernetes: application/vnd.kubernetes.protobuf)", protobuf_response),
        check!(&MEDIA, "protobuf-request-json-response", "§4.3 rule 5: a protobuf request body may be answered in JSON", protobuf_request),
        check!(&MEDIA, "not-acceptable", "§4.3 rule 3, §7: an Accept naming no supported type is 406 NotAcceptable", not_acceptable),
        check!(&MEDIA, "accept-fallback", "§4.3 rule 4: the server falls back to a later type of the Accept list", accept_fallback),
        check!(&MEDIA, "table", "§2.6, §4.3: the Table representation (kind Table, columnDefinitions with name and type, a row per object; profile kubernetes: meta.k8s.io)", table),
        check!(&MEDIA, "table-or-json-fallback", "§4.3 rule 4: Table with a JSON fallback is answered", table_fallback),
        check!(&MEDIA, "unsupported-content-type", "§4.3 rule 2: a body of a media type the server does not read is 415 UnsupportedMediaType", unsupported_body),
        check!(&MEDIA, "cbor-response", "§4.3.3: Accept application/cbor gets one CBOR data item (skipped when CBOR is off)", cbor_response),
        check!(&MEDIA, "cbor-watch-sequence", "§4.3.3, §6: a CBOR watch is application/cbor-seq (skipped when CBOR is off)", cbor_watch),
    ]
}

fn protobuf_type(cx: &Ctx) -> &'static str {
    match cx.profile {
        Profile::Spec => "application/vnd.svc.protobuf",
        Profile::Kubernetes => "application/vnd.kubernetes.protobuf",
    }
}

fn table_accept(cx: &Ctx) -> (&'static str, &'static str) {
    match cx.profile {
        Profile::Spec => (
            "application/json;as=Table;g=meta.svc.io;v=v1",
            "meta.svc.io/v1",
        ),
        Profile::Kubernetes => (
            "application/json;as=Table;g=meta.k8s.io;v=v1",
            "meta.k8s.io/v1",
        ),
    }
}

fn media_type(resp: &Resp) -> String {
    resp.header("content-type")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

async fn json_default(cx: &Ctx) -> CheckResult {
    cx.create_sa(&cx.name("json"), Value::Null).await?;
    let resp = cx
        .read
        .send(Req::get(cx.sa_path()).header("Accept", ""))
        .await?;
    resp.expect(200)?;
    ensure!(
        media_type(&resp) == "application/json",
        &resp,
        "Content-Type is {:?}, not application/json",
        resp.header("content-type")
    );
    let list = resp.json()?;
    ensure!(
        list["kind"] == "ServiceAccountList",
        &resp,
        "kind is {}",
        list["kind"]
    );
    Ok(())
}

fn yaml(resp: &Resp) -> Result<Value, Fail> {
    serde_norway::from_slice(&resp.body)
        .map_err(|e| Fail::with(resp, format!("the body is not YAML: {e}")))
}

async fn yaml_response(cx: &Ctx) -> CheckResult {
    let name = cx.name("yaml");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .read
        .send(Req::get(cx.sa(&name)).header("Accept", "application/yaml"))
        .await?;
    resp.expect(200)?;
    ensure!(
        media_type(&resp) == "application/yaml",
        &resp,
        "Content-Type is {:?}, not application/yaml",
        resp.header("content-type")
    );
    ensure!(
        serde_json::from_slice::<Value>(&resp.body).is_err() || !resp.body.starts_with(b"{"),
        &resp,
        "the body is JSON, not YAML"
    );
    let object = yaml(&resp)?;
    ensure!(
        object["kind"] == "ServiceAccount" && object["metadata"]["name"] == name.as_str(),
        &resp,
        "the YAML is not the ServiceAccount {name}"
    );
    Ok(())
}

async fn yaml_request(cx: &Ctx) -> CheckResult {
    let name = cx.name("yaml-in");
    let (key, value) = cx.run_label();
    // Quoted: a run id of digits alone would read as a YAML number, not a label value.
    let body = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  labels:\n    {key}: '{value}'\n"
    );
    let resp = cx
        .send(
            Req::post(cx.sa_path())
                .body("application/yaml", body)
                .header("Accept", "application/yaml"),
        )
        .await?;
    resp.expect_one_of(&[200, 201, 202])?;
    ensure!(
        media_type(&resp) == "application/yaml",
        &resp,
        "Content-Type is {:?}, not application/yaml",
        resp.header("content-type")
    );
    let object = yaml(&resp)?;
    ensure!(
        object["metadata"]["name"] == name.as_str(),
        &resp,
        "the answer is not the ServiceAccount {name}"
    );
    Ok(())
}

// --- a minimal protobuf reader and writer, enough for the envelope and a ServiceAccount ---

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn field(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint(number << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// The length-delimited fields of a message, as (number, bytes); `None` when malformed.
fn fields(mut data: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    fn read_varint(data: &mut &[u8]) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = data.split_first()?;
            *data = rest;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !data.is_empty() {
        let key = read_varint(&mut data)?;
        match key & 7 {
            0 => {
                read_varint(&mut data)?;
            }
            2 => {
                let len = usize::try_from(read_varint(&mut data)?).ok()?;
                if len > data.len() {
                    return None;
                }
                out.push((key >> 3, &data[..len]));
                data = &data[len..];
            }
            1 => data = data.get(8..)?,
            5 => data = data.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

fn string_field(message: &[u8], number: u64) -> Option<String> {
    fields(message)?
        .into_iter()
        .find(|(n, _)| *n == number)
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
}

const MAGIC: &[u8] = b"k8s\0";

async fn protobuf_response(cx: &Ctx) -> CheckResult {
    let name = cx.name("proto");
    cx.create_sa(&name, Value::Null).await?;
    let media = protobuf_type(cx);
    let resp = cx
        .read
        .send(Req::get(cx.sa(&name)).header("Accept", media))
        .await?;
    resp.expect(200)?;
    ensure!(
        media_type(&resp) == media,
        &resp,
        "Content-Type is {:?}, not {media}",
        resp.header("content-type")
    );
    ensure!(
        resp.body.starts_with(MAGIC),
        &resp,
        "the body does not start with the magic prefix 6b 38 73 00"
    );
    let Some(unknown) = fields(&resp.body[MAGIC.len()..]) else {
        return Err(Fail::with(
            &resp,
            "after the prefix the body is not a protobuf message",
        ));
    };
    let type_meta = unknown.iter().find(|(n, _)| *n == 1).map(|(_, b)| *b);
    let raw = unknown.iter().find(|(n, _)| *n == 2).map(|(_, b)| *b);
    let (Some(type_meta), Some(raw)) = (type_meta, raw) else {
        return Err(Fail::with(
            &resp,
            "the Unknown message lacks typeMeta (1) or raw (2)",
        ));
    };
    let api_version = string_field(type_meta, 1).unwrap_or_default();
    let kind = string_field(type_meta, 2).unwrap_or_default();
    ensure!(
        api_version == "v1" && kind == "ServiceAccount",
        &resp,
        "typeMeta is {api_version:?} {kind:?}, not v1 ServiceAccount"
    );
    let metadata = fields(raw)
        .and_then(|f| {
            f.into_iter()
                .find(|(n, _)| *n == 1)
                .map(|(_, b)| b.to_vec())
        })
        .unwrap_or_default();
    let got = string_field(&metadata, 1).unwrap_or_default();
    ensure!(
        got == name,
        &resp,
        "raw's metadata.name is {got:?}, not {name}"
    );
    Ok(())
}

async fn protobuf_request(cx: &Ctx) -> CheckResult {
    let name = cx.name("proto-in");
    let (key, value) = cx.run_label();
    let mut label = Vec::new();
    field(1, key.as_bytes(), &mut label);
    field(2, value.as_bytes(), &mut label);
    let mut meta = Vec::new();
    field(1, name.as_bytes(), &mut meta);
    field(3, cx.ns.as_bytes(), &mut meta);
    field(11, &label, &mut meta);
    let mut sa = Vec::new();
    field(1, &meta, &mut sa);
    let mut type_meta = Vec::new();
    field(1, b"v1", &mut type_meta);
    field(2, b"ServiceAccount", &mut type_meta);
    let mut body = MAGIC.to_vec();
    field(1, &type_meta, &mut body);
    field(2, &sa, &mut body);
    let resp = cx
        .send(
            Req::post(cx.sa_path())
                .body(protobuf_type(cx), body)
                .header("Accept", "application/json"),
        )
        .await?;
    resp.expect_one_of(&[200, 201, 202])?;
    ensure!(
        media_type(&resp) == "application/json",
        &resp,
        "Content-Type is {:?}, not application/json",
        resp.header("content-type")
    );
    let object = resp.json()?;
    ensure!(
        object["metadata"]["name"] == name.as_str(),
        &resp,
        "the answer is not the ServiceAccount {name}"
    );
    Ok(())
}

async fn not_acceptable(cx: &Ctx) -> CheckResult {
    let resp = cx
        .read
        .send(Req::get(cx.sa_path()).header("Accept", "application/x-conformance-nothing"))
        .await?;
    resp.expect(406)?;
    if media_type(&resp) == "application/json" {
        expect_status(&resp, 406, "NotAcceptable")?;
    }
    Ok(())
}

async fn accept_fallback(cx: &Ctx) -> CheckResult {
    let resp = cx
        .read
        .send(Req::get(cx.sa_path()).header(
            "Accept",
            "application/x-conformance-nothing, application/json",
        ))
        .await?;
    resp.expect(200)?;
    ensure!(
        media_type(&resp) == "application/json",
        &resp,
        "Content-Type is {:?}, not the fallback application/json",
        resp.header("content-type")
    );
    let accept = format!("{}, application/json", protobuf_type(cx));
    let resp = cx
        .read
        .send(Req::get(cx.sa_path()).header("Accept", &accept))
        .await?;
    resp.expect(200)?;
    let got = media_type(&resp);
    ensure!(
        got == protobuf_type(cx) || got == "application/json",
        &resp,
        "Content-Type {got:?} is none of {accept}"
    );
    Ok(())
}

async fn table(cx: &Ctx) -> CheckResult {
    let name = cx.name("table");
    cx.create_sa(&name, Value::Null).await?;
    let (accept, api_version) = table_accept(cx);
    let path = format!(
        "{}?labelSelector={}",
        cx.sa_path(),
        crate::framework::enc(&format!("{}={}", cx.run_label().0, cx.run_label().1))
    );
    let resp = cx
        .read
        .send(Req::get(&path).header("Accept", accept))
        .await?;
    let table = resp.ok_json(200)?;
    ensure!(
        table["kind"] == "Table" && table["apiVersion"] == api_version,
        &resp,
        "expected a {api_version} Table, got {} {}",
        table["apiVersion"],
        table["kind"]
    );
    let Some(columns) = table["columnDefinitions"].as_array() else {
        return Err(Fail::with(&resp, "the Table has no columnDefinitions"));
    };
    for c in columns {
        ensure!(
            c["name"].is_string() && c["type"].is_string(),
            &resp,
            "a column lacks name or type: {c}"
        );
    }
    ensure!(
        columns
            .first()
            .is_some_and(|c| c["name"] == "Name" && c["type"] == "string"),
        &resp,
        "the first column is not Name (string)"
    );
    let rows = table["rows"].as_array().map(Vec::len).unwrap_or(0);
    let listed = names(&cx.get_json(&path).await?).len();
    ensure!(rows == listed, &resp, "{rows} rows for {listed} objects");
    Ok(())
}

async fn table_fallback(cx: &Ctx) -> CheckResult {
    let (accept, _) = table_accept(cx);
    let resp = cx
        .read
        .send(Req::get(cx.sa_path()).header("Accept", &format!("{accept}, application/json")))
        .await?;
    let body = resp.ok_json(200)?;
    ensure!(
        body["kind"] == "Table" || body["kind"] == "ServiceAccountList",
        &resp,
        "neither a Table nor the list: kind {}",
        body["kind"]
    );
    Ok(())
}

async fn unsupported_body(cx: &Ctx) -> CheckResult {
    let resp = cx
        .send(Req::post(cx.sa_path()).body("text/x-conformance", "name: nothing"))
        .await?;
    expect_status(&resp, 415, "UnsupportedMediaType")?;
    Ok(())
}

/// Skips when the server refuses CBOR (the alpha gate is off by default).
fn cbor_off(resp: &Resp) -> CheckResult {
    if resp.status == 406 || resp.status == 415 {
        return Err(Fail::skip(format!(
            "the server answers {} to CBOR: the alpha feature (gate CBORServingAndStorage) is off",
            resp.status
        )));
    }
    Ok(())
}

async fn cbor_response(cx: &Ctx) -> CheckResult {
    let name = cx.name("cbor");
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .read
        .send(Req::get(cx.sa(&name)).header("Accept", "application/cbor"))
        .await?;
    cbor_off(&resp)?;
    resp.expect(200)?;
    ensure!(
        media_type(&resp) == "application/cbor",
        &resp,
        "Content-Type is {:?}, not application/cbor",
        resp.header("content-type")
    );
    // One data item: a map, possibly behind the self-described CBOR tag (d9 d9 f7).
    let body = resp
        .body
        .strip_prefix(&[0xd9, 0xd9, 0xf7][..])
        .unwrap_or(&resp.body);
    ensure!(
        body.first().is_some_and(|b| b >> 5 == 5),
        &resp,
        "the body is not a CBOR map"
    );
    ensure!(
        resp.body.windows(name.len()).any(|w| w == name.as_bytes()),
        &resp,
        "the body does not hold the name {name}"
    );
    Ok(())
}

async fn cbor_watch(cx: &Ctx) -> CheckResult {
    let probe = cx
        .read
        .send(Req::get(cx.sa_path()).header("Accept", "application/cbor"))
        .await?;
    cbor_off(&probe)?;
    let list = cx.get_json(&cx.sa_path()).await?;
    let path = format!(
        "{}?watch=1&resourceVersion={}",
        cx.sa_path(),
        crate::framework::rv(&list)
    );
    let watch = cx
        .read
        .watch(Req::get(path).header("Accept", "application/cbor"))
        .await?;
    watch.expect_open()?;
    let got = watch
        .header("content-type")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if got != "application/cbor-seq" {
        return Err(watch.fail(format!("Content-Type is {got:?}, not application/cbor-seq")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_fields_round_trip() {
        let mut inner = Vec::new();
        field(1, b"v1", &mut inner);
        field(2, b"ServiceAccount", &mut inner);
        let mut outer = Vec::new();
        field(1, &inner, &mut outer);
        let f = fields(&outer).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(string_field(f[0].1, 2).as_deref(), Some("ServiceAccount"));
        assert!(fields(&[0x0a, 0x05, 1]).is_none());
    }
}
