//! Golden fixtures (`testdata/HEAD`): every kind in every format decodes to the value of its JSON
//! fixture and encodes back to identical bytes. It is not a test of validation or of HTTP.
//!
//! The objects below are the one source of the fixtures: with `STRATA_BLESS=1` (what
//! `cargo xtask fixtures` sets) the test rewrites the files from them instead of comparing.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use strata_codec::json::DecodeError;
use strata_codec::proto::generated::k8s::io::apimachinery::pkg::apis::meta::v1::WatchEvent;
use strata_codec::{cbor, json, proto, yaml};

/// How a fixture's kind is written in protobuf.
#[derive(Clone, Copy, PartialEq)]
enum Protobuf {
    /// An object in the `k8s\0` envelope (`proto::encode`).
    Object,
    /// A length-prefixed watch frame around an enveloped object (`proto::watch_frame`).
    WatchFrame,
}

struct Fixture {
    /// The file stem: `<group>.<version>.<Kind>`, the group left out for the core group.
    stem: &'static str,
    value: Value,
    protobuf: Protobuf,
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Json,
    Yaml,
    Protobuf,
    Cbor,
}

const FORMATS: [Format; 4] = [Format::Json, Format::Yaml, Format::Protobuf, Format::Cbor];

impl Format {
    fn extension(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Protobuf => "pb",
            Format::Cbor => "cbor",
        }
    }

    fn encode(self, fixture: &Fixture, v: &Value) -> Result<Vec<u8>, DecodeError> {
        match self {
            Format::Json => Ok(json::encode(v, false)),
            Format::Yaml => Ok(yaml::encode(v)),
            Format::Cbor => Ok(cbor::encode(v)),
            Format::Protobuf => match fixture.protobuf {
                Protobuf::Object => proto::encode(v),
                Protobuf::WatchFrame => {
                    let event_type = v["type"].as_str().unwrap_or_default();
                    Ok(proto::watch_frame(
                        event_type,
                        &proto::encode(&v["object"])?,
                    ))
                }
            },
        }
    }

    fn decode(self, fixture: &Fixture, bytes: &[u8]) -> Result<Value, DecodeError> {
        match self {
            Format::Json => json::decode(bytes),
            Format::Yaml => yaml::decode(bytes),
            Format::Cbor => cbor::decode(bytes),
            Format::Protobuf => match fixture.protobuf {
                Protobuf::Object => proto::decode(bytes, "", ""),
                Protobuf::WatchFrame => decode_watch_frame(bytes),
            },
        }
    }
}

/// The inverse of `proto::watch_frame`, which the codec does not need itself.
fn decode_watch_frame(bytes: &[u8]) -> Result<Value, DecodeError> {
    use prost::Message;
    let fail = |what: String| DecodeError(format!("watch frame: {what}"));
    let (head, body) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| fail("shorter than its length prefix".into()))?;
    let len = u32::from_be_bytes(*head) as usize;
    if len != body.len() {
        return Err(fail(format!(
            "length {len}, but {} bytes follow",
            body.len()
        )));
    }
    let event = WatchEvent::decode(body).map_err(|e| fail(e.to_string()))?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    Ok(json!({
        "type": event.r#type.unwrap_or_default(),
        "object": proto::decode(&raw, "", "")?,
    }))
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/HEAD")
}

fn blessing() -> bool {
    std::env::var_os("STRATA_BLESS").is_some_and(|v| v == "1")
}

#[test]
fn fixtures_decode_to_their_json_value_and_encode_to_identical_bytes() {
    let dir = testdata();
    if blessing() {
        bless(&dir);
        return;
    }
    let mut failures = Vec::new();
    for fixture in fixtures() {
        failures.extend(check(&dir, &fixture));
    }
    assert!(
        failures.is_empty(),
        "{} fixture problem(s):\n  - {}\nRegenerate with `cargo xtask fixtures` if the change \
         is intended.",
        failures.len(),
        failures.join("\n  - ")
    );
}

/// Every file in `testdata/HEAD` belongs to a fixture, so none goes stale unchecked.
#[test]
fn every_file_is_a_fixture() {
    let expected: Vec<String> = fixtures()
        .iter()
        .flat_map(|f| FORMATS.map(|format| format!("{}.{}", f.stem, format.extension())))
        .collect();
    let Ok(entries) = std::fs::read_dir(testdata()) else {
        return; // Reported by the other test.
    };
    let strays: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !expected.contains(name))
        .collect();
    assert!(
        strays.is_empty(),
        "files of no fixture in testdata/HEAD: {strays:?}"
    );
}

fn bless(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create testdata/HEAD");
    for fixture in fixtures() {
        for format in FORMATS {
            let bytes = format
                .encode(&fixture, &fixture.value)
                .unwrap_or_else(|e| panic!("{} has no {format:?} form: {e}", fixture.stem));
            let path = dir.join(format!("{}.{}", fixture.stem, format.extension()));
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    eprintln!("wrote the fixtures in {}", dir.display());
}

fn check(dir: &Path, fixture: &Fixture) -> Vec<String> {
    let mut failures = Vec::new();
    let read = |format: Format| {
        let name = format!("{}.{}", fixture.stem, format.extension());
        std::fs::read(dir.join(&name)).map_err(|e| format!("{name}: {e}"))
    };
    // The JSON fixture is the reference value, and it must be the source's current encoding.
    let reference = match read(Format::Json) {
        Ok(bytes) => {
            if bytes != json::encode(&fixture.value, false) {
                failures.push(format!(
                    "{}.json differs from the fixture source in tests/fixtures.rs",
                    fixture.stem
                ));
            }
            match json::decode(&bytes) {
                Ok(v) => v,
                Err(e) => return vec![format!("{}.json: {e}", fixture.stem)],
            }
        }
        Err(e) => return vec![e],
    };
    for format in FORMATS {
        let name = format!("{}.{}", fixture.stem, format.extension());
        let bytes = match read(format) {
            Ok(bytes) => bytes,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let decoded = match format.decode(fixture, &bytes) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{name}: does not decode: {e}"));
                continue;
            }
        };
        if let Some(at) = first_difference(&decoded, &reference, "") {
            failures.push(format!(
                "{name}: decodes to a value other than the JSON fixture's, first at {at}"
            ));
        }
        match format.encode(fixture, &decoded) {
            Ok(again) if again == bytes => {}
            Ok(_) => failures.push(format!("{name}: re-encoding gives other bytes")),
            Err(e) => failures.push(format!("{name}: does not re-encode: {e}")),
        }
    }
    failures
}

/// The path of the first member or element where `a` and `b` differ, if they do (`.` for the
/// root). Object members compare in any order, as `Value`'s equality does.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    let here = || {
        Some(if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        })
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => {
                        if let Some(d) = first_difference(v, w, &format!("{path}.{k}")) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{path}.{k} (only in the decoded value)")),
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k} (missing from the decoded value)"))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => here(),
    }
}

// The fixture source. Members are in Kubernetes' field order (the Go structs' order), the order
// its JSON serializer writes them in.

fn service_account() -> Value {
    json!({
        "kind": "ServiceAccount",
        "apiVersion": "v1",
        "metadata": {
            "name": "ci-runner-7fq2d",
            "generateName": "ci-runner-",
            "namespace": "ci",
            "selfLink": "/api/v1/namespaces/ci/serviceaccounts/ci-runner-7fq2d",
            "uid": "3f6c1a52-9b1e-4d0a-8c7e-2b9f5e4d1a07",
            "resourceVersion": "48213",
            "generation": 2,
            "creationTimestamp": "2026-11-20T08:15:42Z",
            "deletionTimestamp": "2026-11-21T17:03:09Z",
            "deletionGracePeriodSeconds": 0,
            "labels": {
                "app.kubernetes.io/name": "ci-runner",
                "app.kubernetes.io/part-of": "build",
                "team": "platform"
            },
            "annotations": {
                "example.com/owner": "platform-team@example.com",
                "kubernetes.io/description": "Runs CI jobs for the build pipeline: \"make test\", ünïcode ✓"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "ci-controller",
                "uid": "a1d3b0f4-52c7-4e8b-9a16-0c2e7d5f8b31",
                "controller": true,
                "blockOwnerDeletion": true
            }],
            "finalizers": ["example.com/revoke-tokens"],
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-20T08:15:42Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:automountServiceAccountToken": {},
                        "f:imagePullSecrets": {".": {}, "k:{\"name\":\"registry-credentials\"}": {}},
                        "f:metadata": {
                            "f:annotations": {".": {}, "f:kubernetes.io/description": {}},
                            "f:labels": {".": {}, "f:team": {}}
                        }
                    }
                },
                {
                    "manager": "ci-controller",
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": "2026-11-21T17:03:09Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:finalizers": {"v:\"example.com/revoke-tokens\"": {}},
                            "f:ownerReferences": {"k:{\"uid\":\"a1d3b0f4-52c7-4e8b-9a16-0c2e7d5f8b31\"}": {}}
                        },
                        "f:secrets": {}
                    }
                }
            ]
        },
        "secrets": [
            {"name": "ci-runner-dockercfg-k8m2x"},
            {
                "kind": "Secret",
                "namespace": "ci",
                "name": "ci-runner-token-4xk9z",
                "uid": "c7e9a2d1-0b4f-4f6a-8d3e-5a1b2c9f7e60",
                "apiVersion": "v1",
                "resourceVersion": "48190",
                "fieldPath": "data.token"
            }
        ],
        "imagePullSecrets": [{"name": "registry-credentials"}],
        "automountServiceAccountToken": false
    })
}

/// A plain `default` ServiceAccount, as the service-account controller creates one.
fn default_service_account(namespace: &str, uid: &str, rv: &str) -> Value {
    json!({
        "metadata": {
            "name": "default",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-19T23:58:01Z"
        }
    })
}

fn list_item(mut object: Value) -> Value {
    // Items of a typed list carry no kind or apiVersion, in JSON as in protobuf.
    if let Value::Object(m) = &mut object {
        m.shift_remove("kind");
        m.shift_remove("apiVersion");
    }
    object
}

fn service_account_list() -> Value {
    json!({
        "kind": "ServiceAccountList",
        "apiVersion": "v1",
        "metadata": {
            "selfLink": "/api/v1/serviceaccounts",
            "resourceVersion": "48230",
            "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDgyMzAsInN0YXJ0IjoiY2kvY2ktcnVubmVyLTdmcTJkXHUwMDAwIn0",
            "remainingItemCount": 17
        },
        "items": [
            default_service_account("ci", "0d5b7c1e-6f2a-4b39-8e04-91c3a7d2f5b8", "311"),
            list_item(service_account())
        ]
    })
}

fn namespace() -> Value {
    json!({
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": "payments-q8x2m",
            "generateName": "payments-",
            "selfLink": "/api/v1/namespaces/payments-q8x2m",
            "uid": "5e2f9c7a-1d4b-4a8e-b6c3-7f0a9e2d4c15",
            "resourceVersion": "51877",
            "generation": 1,
            "creationTimestamp": "2026-11-18T14:02:37Z",
            "deletionTimestamp": "2026-11-21T17:10:00Z",
            "deletionGracePeriodSeconds": 0,
            "labels": {
                "environment": "staging",
                "kubernetes.io/metadata.name": "payments-q8x2m",
                "team": "payments"
            },
            "annotations": {
                "example.com/cost-center": "4711",
                "scheduler.alpha.kubernetes.io/node-selector": "env=staging"
            },
            "ownerReferences": [{
                "apiVersion": "tenancy.example.com/v1",
                "kind": "Tenant",
                "name": "payments",
                "uid": "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
                "controller": true,
                "blockOwnerDeletion": false
            }],
            "finalizers": ["tenancy.example.com/cleanup"],
            "managedFields": [
                {
                    "manager": "tenant-operator",
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": "2026-11-18T14:02:37Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:annotations": {"f:example.com/cost-center": {}},
                            "f:finalizers": {"v:\"tenancy.example.com/cleanup\"": {}},
                            "f:labels": {"f:environment": {}, "f:team": {}}
                        }
                    }
                },
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-21T17:10:05Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:status": {
                            "f:conditions": {
                                ".": {},
                                "k:{\"type\":\"NamespaceContentRemaining\"}": {".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}
                            },
                            "f:phase": {}
                        }
                    },
                    "subresource": "status"
                }
            ]
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {
            "phase": "Terminating",
            "conditions": [
                {
                    "type": "NamespaceDeletionDiscoveryFailure",
                    "status": "False",
                    "lastTransitionTime": "2026-11-21T17:10:05Z",
                    "reason": "ResourcesDiscovered",
                    "message": "All resources successfully discovered"
                },
                {
                    "type": "NamespaceContentRemaining",
                    "status": "True",
                    "lastTransitionTime": "2026-11-21T17:10:05Z",
                    "reason": "SomeResourcesRemain",
                    "message": "Some resources are remaining: serviceaccounts. has 1 resource instances"
                },
                {
                    "type": "NamespaceFinalizersRemaining",
                    "status": "True",
                    "lastTransitionTime": "2026-11-21T17:10:05Z",
                    "reason": "SomeFinalizersRemain",
                    "message": "Some content in the namespace has finalizers remaining: example.com/revoke-tokens in 1 resource instances"
                }
            ]
        }
    })
}

fn namespace_list() -> Value {
    json!({
        "kind": "NamespaceList",
        "apiVersion": "v1",
        "metadata": {
            "selfLink": "/api/v1/namespaces",
            "resourceVersion": "51880",
            "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NTE4ODAsInN0YXJ0IjoicGF5bWVudHMtcTh4Mm1cdTAwMDAifQ",
            "remainingItemCount": 4
        },
        "items": [
            {
                "metadata": {
                    "name": "default",
                    "uid": "e4c2a9b7-3f1d-4e6a-9b0c-8d7f6e5a4b32",
                    "resourceVersion": "196",
                    "creationTimestamp": "2026-11-19T23:57:48Z",
                    "labels": {"kubernetes.io/metadata.name": "default"}
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}
            },
            list_item(namespace())
        ]
    })
}

fn status() -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "TokenRequest.authentication.k8s.io \"ci-runner-7fq2d\" is invalid: [spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes, spec.audiences[1]: Required value]",
        "reason": "Invalid",
        "details": {
            "name": "ci-runner-7fq2d",
            "group": "authentication.k8s.io",
            "kind": "TokenRequest",
            "uid": "3f6c1a52-9b1e-4d0a-8c7e-2b9f5e4d1a07",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 60: may not specify a duration less than 10 minutes",
                    "field": "spec.expirationSeconds"
                },
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value",
                    "field": "spec.audiences[1]"
                }
            ],
            "retryAfterSeconds": 2
        },
        "code": 422
    })
}

fn watch_event() -> Value {
    json!({"type": "ADDED", "object": service_account()})
}

fn delete_options() -> Value {
    json!({
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 30,
        "preconditions": {
            "uid": "3f6c1a52-9b1e-4d0a-8c7e-2b9f5e4d1a07",
            "resourceVersion": "48213"
        },
        "orphanDependents": false,
        "propagationPolicy": "Foreground",
        "dryRun": ["All"],
        "ignoreStoreReadErrorWithClusterBreakingPotential": false
    })
}

fn token_request() -> Value {
    json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": "ci-runner-7fq2d",
            "namespace": "ci",
            "creationTimestamp": "2026-11-21T16:59:30Z"
        },
        "spec": {
            "audiences": ["https://kubernetes.default.svc.cluster.local", "vault"],
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": "ci-job-5b8cd",
                "uid": "f0e1d2c3-b4a5-4968-8776-a5b4c3d2e1f0"
            },
            "expirationSeconds": 3600
        },
        "status": {
            "token": "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZpeHR1cmUifQ.eyJhdWQiOlsiaHR0cHM6Ly9rdWJlcm5ldGVzLmRlZmF1bHQuc3ZjLmNsdXN0ZXIubG9jYWwiLCJ2YXVsdCJdLCJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6Y2k6Y2ktcnVubmVyLTdmcTJkIn0.Zml4dHVyZS1zaWduYXR1cmU",
            "expirationTimestamp": "2026-11-21T17:59:30Z"
        }
    })
}

fn config_map() -> Value {
    json!({
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {
            "name": "proxy-settings",
            "namespace": "edge",
            "uid": "9a1c4e7b-2d3f-4b6a-8c5d-0e1f2a3b4c5d",
            "resourceVersion": "60217",
            "creationTimestamp": "2026-11-22T10:11:12Z",
            "labels": {"app.kubernetes.io/name": "edge-proxy"},
            "managedFields": [{
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-22T10:11:12Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:binaryData": {".": {}, "f:ca.der": {}}, "f:data": {".": {}, "f:proxy.conf": {}}}
            }]
        },
        "immutable": true,
        "data": {
            "proxy.conf": "listen 8443;\nupstream api { server 10.0.0.1:6443; }\n",
            "empty": ""
        },
        "binaryData": {"ca.der": "MIIBszCCAVmgAwIBAgIUEjRWeJCrze8=", "blank": ""}
    })
}

fn config_map_list() -> Value {
    json!({
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "60230", "remainingItemCount": 2, "continue": "e30"},
        "items": [
            list_item(config_map()),
            {"metadata": {"name": "kube-root-ca.crt", "namespace": "edge", "uid": "1b2c3d4e-5f60-4718-293a-4b5c6d7e8f90", "resourceVersion": "12", "creationTimestamp": "2026-11-22T10:00:00Z"}, "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}}
        ]
    })
}

fn secret() -> Value {
    json!({
        "kind": "Secret",
        "apiVersion": "v1",
        "metadata": {
            "name": "edge-tls",
            "namespace": "edge",
            "uid": "2c4e6a8b-0d1f-4a3c-9e5b-7d9f1b3d5f7a",
            "resourceVersion": "60301",
            "creationTimestamp": "2026-11-22T10:20:00Z",
            "labels": {"app.kubernetes.io/name": "edge-proxy"},
            "managedFields": [{
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-11-22T10:20:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:tls.crt": {}, "f:tls.key": {}}, "f:type": {}}
            }]
        },
        "immutable": true,
        "data": {
            "tls.crt": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
            "tls.key": "AAEC/w==",
            "empty": ""
        },
        "type": "kubernetes.io/tls"
    })
}

fn secret_list() -> Value {
    json!({
        "kind": "SecretList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "60310"},
        "items": [
            list_item(secret()),
            {"metadata": {"name": "db", "namespace": "edge", "uid": "3d5f7b9c-1e2a-4b4d-8f6c-8e0a2c4e6a8b", "resourceVersion": "40", "creationTimestamp": "2026-11-22T10:00:00Z"}, "data": {"password": "czNjcmV0"}, "type": "Opaque"}
        ]
    })
}

fn event() -> Value {
    json!({
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": "edge-proxy-0.187a2b3c4d5e6f70",
            "namespace": "edge",
            "uid": "4e6a8c0d-2f3b-4c5e-9a7d-9f1b3d5f7a9c",
            "resourceVersion": "60405",
            "creationTimestamp": "2026-11-22T10:30:00Z"
        },
        "involvedObject": {"kind": "Pod", "namespace": "edge", "name": "edge-proxy-0", "uid": "5f7b9d1e-3a4c-4d6f-8b8e-0a2c4e6a8c0d", "apiVersion": "v1", "resourceVersion": "60390", "fieldPath": "spec.containers{proxy}"},
        "reason": "Pulled",
        "message": "Successfully pulled image \"edge-proxy:1.4\" in 1.2s",
        "source": {"component": "kubelet", "host": "node-7"},
        "firstTimestamp": "2026-11-22T10:30:00Z",
        "lastTimestamp": "2026-11-22T10:35:00Z",
        "count": 3,
        "type": "Normal",
        "eventTime": "2026-11-22T10:30:00.123456Z",
        "series": {"count": 3, "lastObservedTime": "2026-11-22T10:35:00.000001Z"},
        "action": "Pulling",
        "reportingComponent": "kubelet",
        "reportingInstance": "node-7"
    })
}

fn events_v1_event() -> Value {
    json!({
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {
            "name": "edge-proxy.187a2b3c4d5e6f71",
            "namespace": "edge",
            "uid": "6a8c0e2f-4b5d-4e7a-9c9f-1b3d5f7a9c0e",
            "resourceVersion": "60410",
            "creationTimestamp": "2026-11-22T10:31:00Z"
        },
        "eventTime": "2026-11-22T10:31:00.500000Z",
        "reportingController": "example.com/autoscaler",
        "reportingInstance": "autoscaler-5d8f",
        "action": "Scaling",
        "reason": "ScaledUp",
        "regarding": {"kind": "Deployment", "namespace": "edge", "name": "edge-proxy", "apiVersion": "apps/v1"},
        "note": "replicas 2 -> 3",
        "type": "Normal",
        "deprecatedSource": {}
    })
}

fn lease() -> Value {
    json!({
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {
            "name": "edge-controller",
            "namespace": "edge",
            "uid": "7b9d1f3a-5c6e-4f8b-8d0a-2c4e6a8c0e2f",
            "resourceVersion": "60420",
            "creationTimestamp": "2026-11-22T10:00:00Z"
        },
        "spec": {
            "holderIdentity": "edge-controller-6c9f_3b1e",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-22T10:00:00.000000Z",
            "renewTime": "2026-11-22T10:36:12.654321Z",
            "leaseTransitions": 0
        }
    })
}

fn rbac_meta(name: &str, namespace: Option<&str>) -> Value {
    let mut meta = json!({
        "name": name,
        "uid": "4c3b2a19-0f8e-4d7c-b6a5-948372615049",
        "resourceVersion": "7120",
        "creationTimestamp": "2026-11-23T09:08:07Z",
        "labels": {"rbac.example.com/aggregate-to-ops": "true"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}
    });
    if let Some(ns) = namespace {
        meta.as_object_mut()
            .unwrap()
            .shift_insert(1, "namespace".into(), json!(ns));
    }
    meta
}

fn role() -> Value {
    json!({
        "kind": "Role",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": rbac_meta("config-reader", Some("edge")),
        "rules": [
            {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["proxy-settings"]},
            {"verbs": ["*"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"]}
        ]
    })
}

fn cluster_role() -> Value {
    json!({
        "kind": "ClusterRole",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": rbac_meta("ops", None),
        "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/metrics/*"]}],
        "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"rbac.example.com/aggregate-to-ops": "true"}},
            {"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["edge", "core"]},
                {"key": "legacy", "operator": "DoesNotExist"}
            ]}
        ]}
    })
}

fn cluster_role_list() -> Value {
    json!({
        "kind": "ClusterRoleList",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"resourceVersion": "7125"},
        "items": [list_item(cluster_role())]
    })
}

fn role_binding() -> Value {
    json!({
        "kind": "RoleBinding",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": rbac_meta("config-readers", Some("edge")),
        "subjects": [
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice@example.com"},
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "edge-oncall"},
            {"kind": "ServiceAccount", "name": "edge-proxy", "namespace": "edge"}
        ],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "config-reader"}
    })
}

fn cluster_role_binding() -> Value {
    json!({
        "kind": "ClusterRoleBinding",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": rbac_meta("ops", None),
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:masters"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ops"}
    })
}

fn fixtures() -> Vec<Fixture> {
    let object = |stem, value| Fixture {
        stem,
        value,
        protobuf: Protobuf::Object,
    };
    vec![
        object("v1.ServiceAccount", service_account()),
        object("v1.ServiceAccountList", service_account_list()),
        object("v1.Namespace", namespace()),
        object("v1.NamespaceList", namespace_list()),
        object("v1.Status", status()),
        Fixture {
            stem: "v1.WatchEvent",
            value: watch_event(),
            protobuf: Protobuf::WatchFrame,
        },
        object("v1.DeleteOptions", delete_options()),
        object("authentication.k8s.io.v1.TokenRequest", token_request()),
        object("v1.ConfigMap", config_map()),
        object("v1.ConfigMapList", config_map_list()),
        object("v1.Secret", secret()),
        object("v1.SecretList", secret_list()),
        object("v1.Event", event()),
        object("events.k8s.io.v1.Event", events_v1_event()),
        object("coordination.k8s.io.v1.Lease", lease()),
        object("rbac.authorization.k8s.io.v1.Role", role()),
        object("rbac.authorization.k8s.io.v1.ClusterRole", cluster_role()),
        object(
            "rbac.authorization.k8s.io.v1.ClusterRoleList",
            cluster_role_list(),
        ),
        object("rbac.authorization.k8s.io.v1.RoleBinding", role_binding()),
        object(
            "rbac.authorization.k8s.io.v1.ClusterRoleBinding",
            cluster_role_binding(),
        ),
    ]
}
