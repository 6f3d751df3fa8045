//! Media types over HTTP: YAML request and response bodies on every verb and for errors, and
//! what is refused (415 for unreadable bodies, 406 for unservable answers).

use crate::common::{assert_status, TestServer};

const YAML: &str = "application/yaml";
/// Lists leave out the ServiceAccount `default`, which the server makes in every namespace.
const NOT_DEFAULT: &str = "fieldSelector=metadata.name%21%3Ddefault";

fn yaml(body: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(body);
    serde_json::to_value(
        serde_norway::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("not YAML ({e}): {text}")),
    )
    .unwrap()
}

#[tokio::test]
async fn yaml_bodies_on_every_verb() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/serviceaccounts";
    let accept = [("accept", YAML), ("content-type", YAML)];

    let created = s
        .send(
            "POST",
            base,
            Some(b"metadata:\n  name: y1\n  labels:\n    app: web\n"),
            &accept,
        )
        .await;
    assert_eq!(
        created.code(),
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    assert_eq!(created.header("content-type"), YAML);
    let v = yaml(&created.body);
    assert_eq!(v["kind"], "ServiceAccount");
    assert_eq!(v["metadata"]["labels"]["app"], "web");

    let got = s.send("GET", &format!("{base}/y1"), None, &accept).await;
    assert_eq!(got.code(), 200);
    assert_eq!(yaml(&got.body)["metadata"]["name"], "y1");

    let own = format!("{base}?{NOT_DEFAULT}");
    let list = s.send("GET", &own, None, &accept).await;
    assert_eq!(list.code(), 200);
    let l = yaml(&list.body);
    assert_eq!(l["kind"], "ServiceAccountList");
    assert_eq!(l["items"][0]["metadata"]["name"], "y1");

    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let put = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: y1\n  resourceVersion: \"{rv}\"\n  labels:\n    app: db\n"
    );
    let replaced = s
        .send("PUT", &format!("{base}/y1"), Some(put.as_bytes()), &accept)
        .await;
    assert_eq!(
        replaced.code(),
        200,
        "{}",
        String::from_utf8_lossy(&replaced.body)
    );
    assert_eq!(yaml(&replaced.body)["metadata"]["labels"]["app"], "db");

    // YAML for the answer, JSON for the request (the two are independent).
    let patched = s
        .send(
            "PATCH",
            &format!("{base}/y1"),
            Some(br#"{"metadata":{"labels":{"tier":"x"}}}"#),
            &[
                ("accept", YAML),
                ("content-type", "application/merge-patch+json"),
            ],
        )
        .await;
    assert_eq!(patched.code(), 200);
    assert_eq!(yaml(&patched.body)["metadata"]["labels"]["tier"], "x");

    let deleted = s.send("DELETE", &format!("{base}/y1"), None, &accept).await;
    assert_eq!(deleted.code(), 200);
    assert_eq!(yaml(&deleted.body)["metadata"]["name"], "y1");

    // Errors come back in YAML too.
    let missing = s.send("GET", &format!("{base}/y1"), None, &accept).await;
    assert_eq!(missing.code(), 404);
    assert_eq!(missing.header("content-type"), YAML);
    let st = yaml(&missing.body);
    assert_eq!(
        (st["kind"].as_str(), st["code"].as_i64()),
        (Some("Status"), Some(404))
    );
}

#[tokio::test]
async fn malformed_and_unsupported_bodies() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/serviceaccounts";
    for body in [
        &b"metadata: [unclosed"[..],
        b"\xff\xfe\x00",
        b"- just\n- a list\n",
    ] {
        let r = s
            .send("POST", base, Some(body), &[("content-type", YAML)])
            .await;
        assert_status(&r, 400, "BadRequest");
    }
    let r = s
        .send(
            "POST",
            base,
            Some(b"name=x"),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_status(&r, 415, "UnsupportedMediaType");
    let r = s.send("GET", base, None, &[("accept", "text/html")]).await;
    assert_status(&r, 406, "NotAcceptable");
    // Watches have no YAML form.
    let r = s
        .send("GET", &format!("{base}?watch=1"), None, &[("accept", YAML)])
        .await;
    assert_eq!(r.code(), 406);
    // Nothing was stored by the refused requests.
    let list = s.get(&format!("{base}?{NOT_DEFAULT}")).await.json();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
}

fn gunzip(body: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

#[tokio::test]
async fn get_and_list_are_gzipped_when_accepted() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/serviceaccounts";
    assert_eq!(
        s.post_json(base, &serde_json::json!({"metadata": {"name": "z"}}))
            .await
            .code(),
        201
    );
    let gz = [("accept-encoding", "gzip")];
    for path in [base.to_string(), format!("{base}/z")] {
        let r = s.send("GET", &path, None, &gz).await;
        assert_eq!(r.code(), 200);
        assert_eq!(r.header("content-encoding"), "gzip", "{path}");
        let plain = s.get(&path).await;
        assert_eq!(plain.header("content-encoding"), "");
        assert_eq!(gunzip(&r.body), plain.body.to_vec(), "{path}");
    }
    // A refused coding, and a watch stream, stay identity.
    let r = s
        .send("GET", base, None, &[("accept-encoding", "gzip;q=0, br")])
        .await;
    assert_eq!(r.header("content-encoding"), "");
    let r = s
        .send(
            "GET",
            &format!("{base}?watch=1&timeoutSeconds=1"),
            None,
            &gz,
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.header("content-encoding"), "");
    assert!(String::from_utf8_lossy(&r.body).contains("\"ADDED\""));
}

#[tokio::test]
async fn compression_gate_off_means_identity() {
    let s = TestServer::start_with(&["--feature-gates", "APIResponseCompression=false"]);
    let r = s
        .send(
            "GET",
            "/api/v1/namespaces",
            None,
            &[("accept-encoding", "gzip")],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.header("content-encoding"), "");
    assert_eq!(r.json()["kind"], "NamespaceList");
}

/// ConfigMaps whose YAML takes every style the emitter has: block scalars with empty and
/// indented lines, quoted strings, long and non-ASCII text, and no data at all.
fn awkward_config_maps() -> Vec<serde_json::Value> {
    let data = [
        serde_json::json!({"script": "line one\n\n  indented\nlast\n", "trailing": "a\n\n\n"}),
        serde_json::json!({"quote": "'x' \"y\"", "colon": "a: b", "dash": "- x", "yes": "yes",
            "num": "0123", "spaces": "a \n b", "empty": ""}),
        serde_json::json!({"long": "word ".repeat(60), "unicode": "grüße 日本 \u{1F600}",
            "tab": "a\tb\n\tc", "crlf": "a\r\nb"}),
    ];
    let mut maps: Vec<serde_json::Value> = data
        .into_iter()
        .enumerate()
        .map(|(i, d)| serde_json::json!({"metadata": {"name": format!("cm-{i}")}, "data": d}))
        .collect();
    maps.push(serde_json::json!({"metadata": {"name": "cm-empty", "labels": {"a": "b"}}}));
    maps
}

/// A YAML list is assembled from each object's YAML, kept per object version: the bytes equal
/// what the encoder writes for the whole list (its own decoded form encoded again), on the
/// first list and on later ones that reuse the kept encodings, for whole lists and pages.
#[tokio::test]
async fn yaml_lists_are_the_encoders_bytes() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/configmaps";
    for cm in awkward_config_maps() {
        assert_eq!(s.post_json(base, &cm).await.code(), 201);
    }
    let json = s.get(base).await.json();
    for path in [
        base.to_string(),
        base.to_string(),
        format!("{base}?limit=2"),
    ] {
        let list = s.send("GET", &path, None, &[("accept", YAML)]).await;
        assert_eq!(list.code(), 200);
        assert_eq!(list.header("content-type"), YAML);
        let text = String::from_utf8_lossy(&list.body).into_owned();
        let decoded = yaml(&list.body);
        // What the encoder (serde_norway, as Strata's codec calls it) writes for the list.
        assert_eq!(serde_norway::to_string(&decoded).unwrap(), text, "{path}");
        if path.contains("limit") {
            assert_eq!(decoded["items"].as_array().map(Vec::len), Some(2));
            assert_eq!(
                decoded["items"].as_array().unwrap()[..],
                json["items"].as_array().unwrap()[..2],
                "{text}"
            );
            assert!(decoded["metadata"]["continue"].is_string(), "{text}");
            assert_eq!(decoded["metadata"]["remainingItemCount"], 2, "{text}");
        } else {
            assert_eq!(decoded, json, "{text}");
            assert!(text.contains("script: |"), "{text}");
        }
    }
    let none = s
        .send(
            "GET",
            "/api/v1/namespaces/kube-system/configmaps?labelSelector=none%3Dnone",
            None,
            &[("accept", YAML)],
        )
        .await;
    assert_eq!(none.code(), 200);
    let text = String::from_utf8_lossy(&none.body).into_owned();
    assert_eq!(serde_norway::to_string(&yaml(&none.body)).unwrap(), text);
    assert!(text.contains("\nitems: []\n"), "{text}");
}
