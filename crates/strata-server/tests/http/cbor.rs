//! CBOR (spec §4.3.3) behind the `CBORServingAndStorage` gate: refused while the gate is off;
//! when on, request and response bodies, errors, watch streams as CBOR sequences, and
//! server-side apply in CBOR. Bodies are checked with ciborium, independently of Strata's codec.

use crate::common::{assert_status, sa_path, TestServer};
use serde_json::{json, Value};

const CBOR: &str = "application/cbor";
const SELF_DESCRIBED: u64 = 55799;

/// Encodes a JSON value as a client would: text strings, self-described tag.
fn to_cbor(v: &Value) -> Vec<u8> {
    fn conv(v: &Value) -> ciborium::Value {
        match v {
            Value::Null => ciborium::Value::Null,
            Value::Bool(b) => ciborium::Value::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => ciborium::Value::Integer(i.into()),
                None => ciborium::Value::Float(n.as_f64().unwrap_or_default()),
            },
            Value::String(s) => ciborium::Value::Text(s.clone()),
            Value::Array(a) => ciborium::Value::Array(a.iter().map(conv).collect()),
            Value::Object(m) => ciborium::Value::Map(
                m.iter()
                    .map(|(k, v)| (ciborium::Value::Text(k.clone()), conv(v)))
                    .collect(),
            ),
        }
    }
    let mut out = Vec::new();
    let tagged = ciborium::Value::Tag(SELF_DESCRIBED, Box::new(conv(v)));
    ciborium::ser::into_writer(&tagged, &mut out).expect("encode");
    out
}

/// Reads one CBOR data item as the server wrote it: tagged self-described, every string a byte
/// string. Returns the JSON form and the bytes left over.
pub(crate) fn from_cbor(bytes: &[u8]) -> (Value, &[u8]) {
    fn conv(v: ciborium::Value) -> Value {
        match v {
            ciborium::Value::Null => Value::Null,
            ciborium::Value::Bool(b) => Value::Bool(b),
            ciborium::Value::Integer(i) => json!(i128::from(i) as i64),
            ciborium::Value::Float(f) => json!(f),
            ciborium::Value::Bytes(b) => {
                Value::String(String::from_utf8(b).expect("a UTF-8 byte string"))
            }
            ciborium::Value::Text(t) => panic!("the server wrote a text string: {t:?}"),
            ciborium::Value::Array(a) => Value::Array(a.into_iter().map(conv).collect()),
            ciborium::Value::Map(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| match conv(k) {
                        Value::String(k) => (k, conv(v)),
                        other => panic!("a map key that is not a string: {other}"),
                    })
                    .collect(),
            ),
            other => panic!("unexpected CBOR item {other:?}"),
        }
    }
    let mut reader = bytes;
    let item: ciborium::Value = ciborium::de::from_reader(&mut reader).expect("one CBOR item");
    let inner = match item {
        ciborium::Value::Tag(SELF_DESCRIBED, inner) => *inner,
        other => panic!("not tagged self-described CBOR: {other:?}"),
    };
    (conv(inner), reader)
}

#[tokio::test]
async fn cbor_is_refused_while_the_gate_is_off() {
    let s = TestServer::start();
    let body = to_cbor(&json!({"metadata": {"name": "c0"}}));
    let r = s
        .send(
            "POST",
            &sa_path("default"),
            Some(&body),
            &[("content-type", CBOR)],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");
    let r = s
        .send("GET", &sa_path("default"), None, &[("accept", CBOR)])
        .await;
    assert_status(&r, 406, "NotAcceptable");
    let r = s
        .send(
            "PATCH",
            &format!("{}/c0?fieldManager=m", sa_path("default")),
            Some(&body),
            &[("content-type", "application/apply-patch+cbor")],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");
}

#[tokio::test]
async fn cbor_bodies_responses_errors_and_watch() {
    let s = TestServer::start_with(&["--feature-gates", "CBORServingAndStorage=true"]);
    let base = sa_path("default");
    let headers = [("content-type", CBOR), ("accept", CBOR)];

    let body = to_cbor(&json!({"metadata": {"name": "c1", "labels": {"app": "web"}}}));
    let r = s.send("POST", &base, Some(&body), &headers).await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), CBOR);
    let (created, rest) = from_cbor(&r.body);
    assert!(rest.is_empty(), "one data item");
    assert_eq!(created["kind"], "ServiceAccount");
    assert_eq!(created["metadata"]["labels"]["app"], "web");
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let r = s.send("GET", &format!("{base}/c1"), None, &headers).await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        from_cbor(&r.body).0["metadata"]["uid"],
        created["metadata"]["uid"]
    );
    let r = s.send("GET", &base, None, &headers).await;
    assert_eq!(r.code(), 200);
    let (list, _) = from_cbor(&r.body);
    assert_eq!(list["kind"], "ServiceAccountList");
    assert_eq!(list["items"][0]["metadata"]["name"], "c1");

    // Errors come back in CBOR too.
    let r = s
        .send("GET", &format!("{base}/absent"), None, &headers)
        .await;
    assert_eq!(r.code(), 404);
    assert_eq!(r.header("content-type"), CBOR);
    let (st, _) = from_cbor(&r.body);
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "NotFound");

    // Malformed CBOR is a 400, duplicate keys included.
    let r = s
        .send("POST", &base, Some(b"\xd9\xd9\xf7\xa1"), &headers)
        .await;
    assert_eq!(r.code(), 400);
    let dup = b"\xa1\x68metadata\xa2\x64name\x62c2\x64name\x62c3";
    let r = s.send("POST", &base, Some(dup), &headers).await;
    assert_eq!(r.code(), 400);

    // JSON in, CBOR out, and the other way round: the two directions are independent.
    let r = s
        .send(
            "POST",
            &base,
            Some(br#"{"metadata":{"name":"c4"}}"#),
            &[("content-type", "application/json"), ("accept", CBOR)],
        )
        .await;
    assert_eq!(r.code(), 201);
    assert_eq!(from_cbor(&r.body).0["metadata"]["name"], "c4");

    // Server-side apply in CBOR; other patch types have no CBOR form.
    let config = to_cbor(&json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "c5", "labels": {"by": "apply"}}
    }));
    let r = s
        .send(
            "PATCH",
            &format!("{base}/c5?fieldManager=cbor-client"),
            Some(&config),
            &[
                ("content-type", "application/apply-patch+cbor"),
                ("accept", CBOR),
            ],
        )
        .await;
    assert_eq!(r.code(), 201, "{:?}", from_cbor(&r.body).0);
    assert_eq!(from_cbor(&r.body).0["metadata"]["labels"]["by"], "apply");
    let r = s
        .send(
            "PATCH",
            &format!("{base}/c5"),
            Some(&config),
            &[("content-type", "application/merge-patch+cbor")],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");

    // A watch is a CBOR sequence of events.
    let r = s
        .send(
            "GET",
            &format!("{base}?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
            None,
            &[("accept", CBOR)],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.header("content-type"), "application/cbor-seq");
    let mut rest: &[u8] = &r.body;
    let mut seen = Vec::new();
    while !rest.is_empty() {
        let (event, more) = from_cbor(rest);
        seen.push((
            event["type"].as_str().unwrap().to_string(),
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        ));
        rest = more;
    }
    assert!(seen.contains(&("ADDED".into(), "c4".into())), "{seen:?}");
    assert!(seen.contains(&("ADDED".into(), "c5".into())), "{seen:?}");
}

/// Checks that `body` is in the deterministic form the server's encoder writes (RFC 8949
/// §4.2.1): written again by ciborium from what it read (definite lengths, shortest heads and
/// floats) it is the same bytes, and every map's keys are sorted shorter first, then bytewise.
fn assert_deterministic(body: &[u8]) {
    fn sorted(v: &ciborium::Value) {
        match v {
            ciborium::Value::Tag(_, inner) => sorted(inner),
            ciborium::Value::Array(items) => items.iter().for_each(sorted),
            ciborium::Value::Map(entries) => {
                let keys: Vec<&[u8]> = entries
                    .iter()
                    .map(|(k, _)| k.as_bytes().map(Vec::as_slice).expect("a byte-string key"))
                    .collect();
                assert!(
                    keys.windows(2)
                        .all(|w| (w[0].len(), w[0]) < (w[1].len(), w[1])),
                    "keys out of order: {keys:?}"
                );
                entries.iter().for_each(|(_, v)| sorted(v));
            }
            _ => {}
        }
    }
    let item: ciborium::Value = ciborium::de::from_reader(body).expect("one CBOR item");
    let mut again = Vec::new();
    ciborium::ser::into_writer(&item, &mut again).expect("encode");
    assert!(again == body, "not the shortest definite-length form");
    sorted(&item);
}

/// A CBOR list is assembled from each object's CBOR item, kept per object version: the bytes
/// are in the encoder's deterministic form, on the first list and on later ones that
/// reuse the kept items, for whole lists, pages and empty lists; ciborium reads it as the JSON
/// list.
#[tokio::test]
async fn cbor_lists_are_deterministic_and_equal_the_json_list() {
    let s = TestServer::start_with(&["--feature-gates", "CBORServingAndStorage=true"]);
    let base = "/api/v1/namespaces/default/configmaps";
    for i in 0..30 {
        let cm = json!({"metadata": {"name": format!("cm-{i:02}"), "labels": {"i": i.to_string()}},
            "data": {"text": "x".repeat(i * 10), "multi": "a\nb"}});
        assert_eq!(s.post_json(base, &cm).await.code(), 201);
    }
    let json = s.get(base).await.json();
    let paths = [
        base.to_string(),
        base.to_string(),
        format!("{base}?limit=25"),
        format!("{base}?labelSelector=none%3Dnone"),
    ];
    for path in paths {
        let list = s.send("GET", &path, None, &[("accept", CBOR)]).await;
        assert_eq!(list.code(), 200, "{path}");
        assert_eq!(list.header("content-type"), CBOR);
        assert_deterministic(&list.body);
        let (decoded, rest) = from_cbor(&list.body);
        assert!(rest.is_empty());
        let items = decoded["items"].as_array().expect("items");
        if path.contains("limit") {
            assert_eq!(items[..], json["items"].as_array().unwrap()[..25]);
            assert!(decoded["metadata"]["continue"].is_string());
            assert_eq!(decoded["metadata"]["remainingItemCount"], 5);
        } else if path.contains("labelSelector") {
            assert!(items.is_empty());
        } else {
            assert_eq!(decoded, json);
        }
    }
}
