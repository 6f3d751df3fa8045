//! The protobuf encoding over HTTP, checked against an independent build of Kubernetes' protos
//! (the `k8s-pb` crate): what Strata encodes decodes there, and what it encodes decodes here.

use crate::common::{assert_status, TestServer};

/// Lists and watches leave out the ServiceAccount `default`, which the server makes in every
/// namespace.
const NOT_DEFAULT: &str = "fieldSelector=metadata.name%21%3Ddefault";
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;

const K8S_PB: &str = "application/vnd.kubernetes.protobuf";
const SVC_PB: &str = "application/vnd.svc.protobuf";
const MAGIC: &[u8] = b"k8s\0";

fn envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let u = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(u.encode_to_vec());
    out
}

/// Opens an envelope; returns (kind, message bytes).
pub(crate) fn open(body: &[u8]) -> (String, Vec<u8>) {
    let rest = body
        .strip_prefix(MAGIC)
        .unwrap_or_else(|| panic!("no k8s\\0 prefix: {:?}", String::from_utf8_lossy(body)));
    let u = Unknown::decode(rest).expect("an Unknown envelope");
    let tm = u.type_meta.unwrap_or_default();
    assert_eq!(tm.api_version.as_deref(), Some("v1"));
    (tm.kind.unwrap_or_default(), u.raw.unwrap_or_default())
}

fn service_account(name: &str) -> core::ServiceAccount {
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("app".to_string(), "pb".to_string());
    core::ServiceAccount {
        metadata: Some(meta::ObjectMeta {
            name: Some(name.into()),
            labels,
            ..Default::default()
        }),
        image_pull_secrets: vec![core::LocalObjectReference {
            name: Some("registry".into()),
        }],
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

#[tokio::test]
async fn objects_cross_between_independent_protobuf_builds() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/serviceaccounts";
    // k8s-pb encodes, Strata decodes (the way kubectl >= 1.32 creates).
    let body = envelope("ServiceAccount", service_account("pb1").encode_to_vec());
    let r = s
        .send(
            "POST",
            base,
            Some(&body),
            &[("content-type", K8S_PB), ("accept", K8S_PB)],
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), K8S_PB);
    // Strata encodes, k8s-pb decodes.
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "ServiceAccount");
    let sa = core::ServiceAccount::decode(raw.as_slice()).expect("a ServiceAccount");
    let m = sa.metadata.clone().unwrap_or_default();
    assert_eq!(m.name.as_deref(), Some("pb1"));
    assert_eq!(m.namespace.as_deref(), Some("default"));
    assert!(m.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(m
        .creation_timestamp
        .and_then(|t| t.seconds)
        .is_some_and(|s| s > 0));
    assert_eq!(m.labels.get("app").map(String::as_str), Some("pb"));
    assert_eq!(sa.automount_service_account_token, Some(false));
    assert_eq!(sa.image_pull_secrets[0].name.as_deref(), Some("registry"));

    // The JSON view of the same object agrees.
    let json = s.get(&format!("{base}/pb1")).await.json();
    assert_eq!(json["automountServiceAccountToken"], false);
    assert_eq!(
        json["metadata"]["resourceVersion"].as_str(),
        m.resource_version.as_deref()
    );

    // get and list in protobuf, under the spec's name too (echoed back).
    let r = s
        .send("GET", &format!("{base}/pb1"), None, &[("accept", SVC_PB)])
        .await;
    assert_eq!(r.header("content-type"), SVC_PB);
    assert_eq!(open(&r.body).0, "ServiceAccount");
    let own = format!("{base}?{NOT_DEFAULT}");
    let r = s.send("GET", &own, None, &[("accept", K8S_PB)]).await;
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "ServiceAccountList");
    let list = core::ServiceAccountList::decode(raw.as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.and_then(|m| m.resource_version).is_some());

    // update with a protobuf body
    let mut changed = sa.clone();
    changed.automount_service_account_token = Some(true);
    let r = s
        .send(
            "PUT",
            &format!("{base}/pb1"),
            Some(&envelope("ServiceAccount", changed.encode_to_vec())),
            &[("content-type", K8S_PB), ("accept", K8S_PB)],
        )
        .await;
    assert_eq!(r.code(), 200, "{}", String::from_utf8_lossy(&r.body));
    let back = core::ServiceAccount::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(back.automount_service_account_token, Some(true));

    // Namespaces too.
    let ns = core::Namespace {
        metadata: Some(meta::ObjectMeta {
            name: Some("pbns".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = s
        .send(
            "POST",
            "/api/v1/namespaces",
            Some(&envelope("Namespace", ns.encode_to_vec())),
            &[("content-type", K8S_PB), ("accept", K8S_PB)],
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let created = core::Namespace::decode(open(&r.body).1.as_slice()).unwrap();
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );

    // delete answers the object in protobuf
    let r = s
        .send(
            "DELETE",
            &format!("{base}/pb1"),
            None,
            &[("accept", K8S_PB)],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(open(&r.body).0, "ServiceAccount");
}

#[tokio::test]
async fn errors_and_bad_bodies_in_protobuf() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/serviceaccounts";
    // An error answered to a protobuf client is a protobuf Status.
    let r = s
        .send(
            "GET",
            &format!("{base}/missing"),
            None,
            &[("accept", K8S_PB)],
        )
        .await;
    assert_eq!(r.code(), 404);
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "Status");
    let st = meta::Status::decode(raw.as_slice()).unwrap();
    assert_eq!(st.code, Some(404));
    assert_eq!(st.reason.as_deref(), Some("NotFound"));

    // Bodies that are not enveloped protobuf are 400, and nothing is stored.
    let ct = [("content-type", K8S_PB)];
    for body in [
        br#"{"metadata":{"name":"x"}}"#.to_vec(),
        b"k8s\0\xff\xff\xff\xff".to_vec(),
        envelope("ServiceAccount", vec![0x0a, 0x05, 0x01]),
        Vec::new(),
    ] {
        let r = s.send("POST", base, Some(&body), &ct).await;
        assert_status(&r, 400, "BadRequest");
    }
    let list = s.get(&format!("{base}?{NOT_DEFAULT}")).await.json();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
    // Protobuf has no Table form.
    let r = s
        .send(
            "GET",
            base,
            None,
            &[(
                "accept",
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
            )],
        )
        .await;
    assert_eq!(r.code(), 406);
}

#[tokio::test]
async fn protobuf_watch_frames() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/serviceaccounts";
    assert_eq!(
        s.post_json(base, &serde_json::json!({"metadata": {"name": "w1"}}))
            .await
            .code(),
        201
    );
    let r = s
        .send(
            "GET",
            &format!("{base}?watch=1&timeoutSeconds=1&{NOT_DEFAULT}"),
            None,
            &[("accept", "application/vnd.kubernetes.protobuf;stream=watch")],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(
        r.header("content-type"),
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let mut body = &r.body[..];
    let mut events = Vec::new();
    while body.len() >= 4 {
        let len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
        let frame = &body[4..4 + len];
        body = &body[4 + len..];
        let ev = meta::WatchEvent::decode(frame).expect("a WatchEvent frame");
        let raw = ev.object.and_then(|o| o.raw).unwrap_or_default();
        let (kind, msg) = open(&raw);
        events.push((ev.r#type.unwrap_or_default(), kind, msg));
    }
    assert!(body.is_empty(), "trailing bytes after the last frame");
    assert_eq!(events[0].0, "ADDED");
    assert_eq!(events[0].1, "ServiceAccount");
    let sa = core::ServiceAccount::decode(events[0].2.as_slice()).unwrap();
    assert_eq!(sa.metadata.unwrap_or_default().name.as_deref(), Some("w1"));
}

/// ConfigMaps in protobuf both ways, binary data included: a ConfigMap posted from the
/// independent build is stored as JSON with base64 values, and read back byte for byte.
#[tokio::test]
async fn config_maps_cross_between_independent_protobuf_builds() {
    let s = TestServer::start();
    let base = "/api/v1/namespaces/default/configmaps";
    let mut data = std::collections::BTreeMap::new();
    data.insert("mode".to_string(), "fast".to_string());
    let mut binary_data = std::collections::BTreeMap::new();
    binary_data.insert("blob".to_string(), vec![0u8, 1, 2, 255]);
    let cm = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: Some("settings".into()),
            ..Default::default()
        }),
        data,
        binary_data,
        immutable: Some(false),
    };
    let r = s
        .send(
            "POST",
            base,
            Some(&envelope("ConfigMap", cm.encode_to_vec())),
            &[("content-type", K8S_PB), ("accept", "application/json")],
        )
        .await;
    assert_eq!(r.code(), 201, "{}", String::from_utf8_lossy(&r.body));
    let json = r.json();
    assert_eq!(json["binaryData"]["blob"], "AAEC/w==");
    assert_eq!(json["data"]["mode"], "fast");
    assert_eq!(json["immutable"], false);

    let r = s
        .send(
            "GET",
            &format!("{base}/settings"),
            None,
            &[("accept", K8S_PB)],
        )
        .await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.header("content-type"), K8S_PB);
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "ConfigMap");
    let back = core::ConfigMap::decode(raw.as_slice()).unwrap();
    assert_eq!(back.data, cm.data);
    assert_eq!(back.binary_data, cm.binary_data);
    assert_eq!(back.immutable, Some(false));

    let r = s.send("GET", base, None, &[("accept", SVC_PB)]).await;
    assert_eq!(r.header("content-type"), SVC_PB);
    let (kind, raw) = open(&r.body);
    assert_eq!(kind, "ConfigMapList");
    let list = core::ConfigMapList::decode(raw.as_slice()).unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].binary_data, cm.binary_data);
}
