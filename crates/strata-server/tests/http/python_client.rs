//! The official Python client (`kubernetes` package, CoreV1Api, VersionApi, DynamicClient and
//! watch.Watch) against the real binary: ServiceAccount and Namespace CRUD, paging, errors,
//! /version/ and watch streams.
//!
//! Skipped with a loud notice when `python3` or its `kubernetes` package is missing (see
//! /work/shared/tools/install-clients.sh).

use std::process::Command;
use std::time::Duration;

use crate::common::{run_with_timeout, TestServer};

const SCRIPT: &str = r#"
import json
import sys
import time

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

cfg = client.Configuration()
cfg.host = "http://" + sys.argv[1]
api_client = client.ApiClient(cfg)
v1 = client.CoreV1Api(api_client)


def expect_status(call, code, reason):
    try:
        call()
    except ApiException as e:
        assert e.status == code, (e.status, e.body)
        body = json.loads(e.body)
        assert body["kind"] == "Status", body
        assert body["reason"] == reason, body
        assert body["code"] == code, body
        return body
    raise AssertionError("expected %d %s" % (code, reason))


def sa(name, **labels):
    # The body goes out without kind/apiVersion.
    return client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name, labels=labels or None))


# Create and read.
created = v1.create_namespaced_service_account("default", sa("robot", app="demo"))
assert created.kind == "ServiceAccount", created
assert created.api_version == "v1", created
assert created.metadata.name == "robot"
assert created.metadata.namespace == "default"
assert created.metadata.uid
assert created.metadata.creation_timestamp is not None
got = v1.read_namespaced_service_account("robot", "default")
assert got.metadata.uid == created.metadata.uid
assert got.metadata.labels == {"app": "demo"}, got.metadata.labels

expect_status(lambda: v1.create_namespaced_service_account("default", sa("robot")), 409, "AlreadyExists")
body = expect_status(lambda: v1.read_namespaced_service_account("nope", "default"), 404, "NotFound")
assert body["message"] == 'serviceaccounts "nope" not found', body
expect_status(lambda: v1.create_namespaced_service_account("nowhere", sa("x")), 404, "NotFound")

# Dry run stores nothing.
ghost = v1.create_namespaced_service_account("default", sa("ghost"), dry_run="All", field_manager="py")
assert ghost.metadata.name == "ghost"
expect_status(lambda: v1.read_namespaced_service_account("ghost", "default"), 404, "NotFound")

# Replace with the live resourceVersion; the same body again is stale.
got.automount_service_account_token = False
replaced = v1.replace_namespaced_service_account("robot", "default", got)
assert replaced.automount_service_account_token is False
assert replaced.metadata.resource_version != got.metadata.resource_version
expect_status(lambda: v1.replace_namespaced_service_account("robot", "default", got), 409, "Conflict")

# Paging with limit=1 and _continue.
for name in ["b1", "b2", "b3"]:
    v1.create_namespaced_service_account("default", sa(name))
# With the namespace's own ServiceAccount "default", which the server keeps there.
page = v1.list_namespaced_service_account("default", limit=1)
assert page.kind == "ServiceAccountList", page.kind
assert page.metadata.remaining_item_count == 4, page.metadata
names = [i.metadata.name for i in page.items]
pages = 1
while page.metadata._continue:
    page = v1.list_namespaced_service_account("default", limit=1, _continue=page.metadata._continue)
    names += [i.metadata.name for i in page.items]
    pages += 1
    assert pages < 10, "paging does not end"
assert names == ["b1", "b2", "b3", "default", "robot"], names
assert pages == 5, pages
everywhere = v1.list_service_account_for_all_namespaces()
assert sorted(
    (i.metadata.namespace, i.metadata.name) for i in everywhere.items if i.metadata.name != "default"
) == [("default", n) for n in ["b1", "b2", "b3", "robot"]], everywhere.items

# Delete returns the object; the name is then free.
deleted = v1.delete_namespaced_service_account("robot", "default")
assert deleted.metadata.name == "robot", deleted
expect_status(lambda: v1.read_namespaced_service_account("robot", "default"), 404, "NotFound")
expect_status(lambda: v1.delete_namespaced_service_account("robot", "default"), 404, "NotFound")
# DeleteOptions as the client sends them, and deletecollection with a selector.
for name, labels in [("c1", {"app": "demo"}), ("c2", {"app": "demo"}), ("c3", {"app": "other"})]:
    v1.create_namespaced_service_account(
        "default", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name, labels=labels))
    )
c1 = v1.read_namespaced_service_account("c1", "default")
expect_status(
    lambda: v1.delete_namespaced_service_account(
        "c1", "default", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="nope"))
    ),
    409,
    "Conflict",
)
kept = v1.delete_namespaced_service_account("c1", "default", dry_run="All")
assert kept.metadata.name == "c1", kept
assert v1.read_namespaced_service_account("c1", "default").metadata.uid == c1.metadata.uid
expect_status(
    lambda: v1.delete_namespaced_service_account("c1", "default", propagation_policy="Sideways"),
    422,
    "Invalid",
)
gone = v1.delete_namespaced_service_account(
    "c1",
    "default",
    body=client.V1DeleteOptions(
        grace_period_seconds=0,
        propagation_policy="Foreground",
        preconditions=client.V1Preconditions(uid=c1.metadata.uid),
    ),
)
assert gone.metadata.uid == c1.metadata.uid, gone
status = v1.delete_collection_namespaced_service_account("default", label_selector="app=demo")
assert status.status == "Success", status
assert [
    i.metadata.name for i in v1.list_namespaced_service_account("default").items if i.metadata.name != "default"
] == [
    "b1",
    "b2",
    "b3",
    "c3",
]
status = v1.delete_collection_namespaced_service_account("default", dry_run="All")
assert status.status == "Success", status
assert [
    i.metadata.name for i in v1.list_namespaced_service_account("default").items if i.metadata.name != "default"
] == [
    "b1",
    "b2",
    "b3",
    "c3",
]
status = v1.delete_collection_namespaced_service_account("default")
assert status.status == "Success", status
# (The server makes the default ServiceAccount again.)
assert [
    i.metadata.name for i in v1.list_namespaced_service_account("default").items if i.metadata.name != "default"
] == []

# /version/ (with the trailing slash).
version = client.VersionApi(api_client).get_code()
assert version.major == "1", version
assert version.git_version, version

# Namespaces.
namespaces = [n.metadata.name for n in v1.list_namespace().items]
for name in ["default", "kube-public", "kube-system"]:
    assert name in namespaces, namespaces
ns = v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="py-ns")))
assert ns.status.phase == "Active", ns.status
assert v1.read_namespace("py-ns").metadata.uid == ns.metadata.uid
# A finalizer on its content holds the namespace in Terminating until the script releases it
# (else the namespace controller may finish before the create below is refused).
held = sa("inside")
held.metadata.finalizers = ["example.com/hold"]
v1.create_namespaced_service_account("py-ns", held)
# The generated client reads the answer (the Namespace) as a V1Status; it must decode.
v1.delete_namespace("py-ns")
left = v1.read_namespace("py-ns")
assert left.status.phase == "Terminating", left.status
assert left.metadata.deletion_timestamp is not None, left
expect_status(lambda: v1.create_namespaced_service_account("py-ns", sa("late")), 403, "Forbidden")
v1.patch_namespaced_service_account("inside", "py-ns", {"metadata": {"finalizers": None}})
for _ in range(200):
    try:
        v1.read_namespace("py-ns")
    except ApiException as e:
        assert e.status == 404, (e.status, e.body)
        break
    time.sleep(0.1)
else:
    raise AssertionError("namespace py-ns was never finalized")
expect_status(lambda: v1.read_namespace("never"), 404, "NotFound")

# DynamicClient: legacy discovery (/version, /apis, /api/v1), then JSON merge patch.
dyn = dynamic.DynamicClient(api_client)
sas = dyn.resources.get(api_version="v1", kind="ServiceAccount")
assert sas.namespaced
made = sas.create(body={"metadata": {"name": "dyn"}}, namespace="default")
assert made.metadata.name == "dyn"
patched = sas.patch(
    name="dyn",
    namespace="default",
    body={"metadata": {"labels": {"a": "b"}}},
    content_type="application/merge-patch+json",
)
assert patched.metadata.labels.a == "b", patched
listed = sas.get(namespace="default")
assert [i.metadata.name for i in listed.items if i.metadata.name != "default"] == ["dyn"], listed
nss = dyn.resources.get(api_version="v1", kind="Namespace")
assert not nss.namespaced
assert nss.get(name="default").status.phase == "Active"

print("OK")
"#;

/// Watch streams: a watch with `timeout_seconds` replays the existing objects as ADDED and ends
/// by itself; one from a resourceVersion delivers the changes made after it.
const WATCH_SCRIPT: &str = r#"
import sys
import threading
import time

from kubernetes import client, watch

cfg = client.Configuration()
cfg.host = "http://" + sys.argv[1]
v1 = client.CoreV1Api(client.ApiClient(cfg))
ns = "pywatch"


def sa(name):
    return client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))


v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
for name in ["p1", "p2", "p3"]:
    v1.create_namespaced_service_account(ns, sa(name))

w = watch.Watch()
started = time.monotonic()
# (Not the namespace's default ServiceAccount, which the server makes.)
own = "metadata.name!=default"
events = list(
    w.stream(v1.list_namespaced_service_account, namespace=ns, field_selector=own, timeout_seconds=2)
)
took = time.monotonic() - started
assert [e["type"] for e in events] == ["ADDED"] * 3, [(e["type"], e["raw_object"]) for e in events]
assert sorted(e["object"].metadata.name for e in events) == ["p1", "p2", "p3"], events
assert all(isinstance(e["object"], client.V1ServiceAccount) for e in events), events
assert all(e["object"].metadata.namespace == ns for e in events), events
assert 1.0 <= took < 30, took

# From the list's resourceVersion: only what happens afterwards.
rv = v1.list_namespaced_service_account(ns).metadata.resource_version


def later():
    time.sleep(0.5)
    v1.create_namespaced_service_account(ns, sa("p4"))
    v1.delete_namespaced_service_account("p1", ns)


writer = threading.Thread(target=later)
writer.start()
seen = []
for e in w.stream(
    v1.list_namespaced_service_account,
    namespace=ns,
    field_selector=own,
    resource_version=rv,
    timeout_seconds=10,
):
    seen.append((e["type"], e["object"].metadata.name))
    if len(seen) == 2:
        w.stop()
writer.join()
assert seen == [("ADDED", "p4"), ("DELETED", "p1")], seen

print("OK")
"#;

/// Patches from the Python client: `patch_namespaced_service_account` with a dict (sent as a
/// strategic merge patch) and with a list (a JSON patch), DynamicClient server-side apply, and
/// `create_namespaced_service_account_token`.
const PATCH_SCRIPT: &str = r#"
import sys

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

cfg = client.Configuration()
cfg.host = "http://" + sys.argv[1]
api_client = client.ApiClient(cfg)
v1 = client.CoreV1Api(api_client)

v1.create_namespaced_service_account("default", {
    "metadata": {"name": "py", "labels": {"a": "1"}},
    "secrets": [{"name": "s1"}],
})
# A dict body goes out as a strategic merge patch: secrets merge on their name.
sa = v1.patch_namespaced_service_account("py", "default", {
    "metadata": {"labels": {"b": "2"}},
    "secrets": [{"name": "s2"}],
})
assert sa.metadata.labels == {"a": "1", "b": "2"}, sa.metadata.labels
# Elements the patch names come first, as Kubernetes orders a merged list.
assert [s.name for s in sa.secrets] == ["s2", "s1"], sa.secrets

# A list body is a JSON patch.
sa = v1.patch_namespaced_service_account("py", "default", [
    {"op": "remove", "path": "/metadata/labels/a"},
])
assert sa.metadata.labels == {"b": "2"}, sa.metadata.labels

# Server-side apply through the dynamic client.
dyn = dynamic.DynamicClient(api_client)
sas = dyn.resources.get(api_version="v1", kind="ServiceAccount")
applied = sas.server_side_apply(
    body={"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": "py-ssa", "namespace": "default", "labels": {"by": "python"}}},
    namespace="default", field_manager="python-ssa")
assert applied.metadata.labels["by"] == "python", applied
managers = [(m.manager, m.operation) for m in applied.metadata.managedFields]
assert managers == [("python-ssa", "Apply")], managers
try:
    sas.server_side_apply(
        body={"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "py-ssa", "namespace": "default", "labels": {"by": "other"}}},
        namespace="default", field_manager="other")
    raise AssertionError("expected a conflict")
except ApiException as e:
    assert e.status == 409, (e.status, e.body)
applied = sas.server_side_apply(
    body={"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": "py-ssa", "namespace": "default", "labels": {"by": "other"}}},
    namespace="default", field_manager="other", force_conflicts=True)
assert applied.metadata.labels["by"] == "other", applied

# The token sub-resource.
tr = v1.create_namespaced_service_account_token(
    "py", "default", {"spec": {"audiences": ["x"], "expirationSeconds": 600}})
assert tr.status.token.count(".") == 2, tr.status
assert tr.spec.audiences == ["x"], tr.spec

print("OK")
"#;

/// Whether python3 with the `kubernetes` package is there; prints a loud skip notice if not.
pub(crate) fn python_client_available() -> bool {
    let probe = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output();
    match probe {
        Ok(out) if out.status.success() => true,
        other => {
            eprintln!(
                "\n!!!!!!!! SKIPPED: python3 with the `kubernetes` package is not available \
                 (run /work/shared/tools/install-clients.sh); this test asserts nothing: {other:?} !!!!!!!!\n"
            );
            false
        }
    }
}

/// Runs a Python script against a fresh server and asserts that it ends by printing OK.
fn run_script(text: &str) {
    let s = TestServer::start();
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("client.py");
    std::fs::write(&script, text).expect("write the script");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg(s.client_addr())
        // DynamicClient caches discovery in $TMPDIR; keep it private to this run.
        .env("TMPDIR", tmp.path())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let run = run_with_timeout(&mut cmd, tmp.path(), Duration::from_secs(120));
    assert!(
        run.success() && run.stdout.lines().last() == Some("OK"),
        "the Python client script failed ({})\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
}

#[test]
fn python_kubernetes_client() {
    if python_client_available() {
        run_script(SCRIPT);
    }
}

#[test]
fn python_watch() {
    if python_client_available() {
        run_script(WATCH_SCRIPT);
    }
}

#[test]
fn python_patches_and_server_side_apply() {
    if python_client_available() {
        run_script(PATCH_SCRIPT);
    }
}
