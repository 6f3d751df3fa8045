//! Checks and their context: a [`Check`] is one rule of the specification (its section, an id, a
//! description and an async function); [`Ctx`] gives it the clients, the namespace the run
//! created and helpers; a check passes, fails with the exchange that showed it, or is skipped
//! with a reason.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use crate::client::{Client, Req, Resp};
use crate::Profile;

/// A section of the specification, as its heading numbers and names it.
#[derive(Debug, PartialEq, Eq)]
pub struct Section {
    /// The heading's number (`4.5`).
    pub number: &'static str,
    /// The heading's name (`Watch`).
    pub title: &'static str,
    /// The short name `--only` also accepts (`watch`).
    pub slug: &'static str,
}

/// Why a check did not pass.
#[derive(Debug)]
pub enum Fail {
    Failed(Failure),
    /// The rule does not apply to this server, with the reason (a feature gate off, …).
    Skipped(String),
}

/// A failed expectation: what was wrong, and the request and response that showed it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub message: String,
    pub exchange: Option<String>,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            exchange: None,
        }
    }
}

impl Fail {
    /// A failure without an exchange to show.
    pub fn msg(message: impl Into<String>) -> Fail {
        Fail::Failed(Failure::new(message))
    }
    /// A failure showing `resp` and the request that got it.
    pub fn with(resp: &Resp, message: impl Into<String>) -> Fail {
        Fail::Failed(Failure {
            message: message.into(),
            exchange: Some(resp.exchange()),
        })
    }
    /// A skip with its reason.
    pub fn skip(reason: impl Into<String>) -> Fail {
        Fail::Skipped(reason.into())
    }
}

/// What a check returns: `Ok(())` when it passed.
pub type CheckResult = Result<(), Fail>;

/// A check's function.
pub type CheckFn = for<'a> fn(&'a Ctx) -> Pin<Box<dyn Future<Output = CheckResult> + Send + 'a>>;

/// One rule of the specification, checked over HTTP.
pub struct Check {
    pub section: &'static Section,
    /// Unique among all checks (`watch-bookmark-after-initial-events`).
    pub id: &'static str,
    pub description: &'static str,
    pub run: CheckFn,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check").field("id", &self.id).finish()
    }
}

/// Builds a [`Check`] from an `async fn(&Ctx) -> CheckResult`.
#[macro_export]
macro_rules! check {
    ($section:expr, $id:literal, $description:literal, $f:path) => {
        $crate::framework::Check {
            section: $section,
            id: $id,
            description: $description,
            run: |cx| Box::pin($f(cx)),
        }
    };
}

/// Fails the check with the exchange of `$resp` unless `$cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $resp:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::framework::Fail::with($resp, format!($($fmt)+)));
        }
    };
}

/// What every check can use: the clients, the run's namespace and the profile.
pub struct Ctx {
    /// Where writes go.
    pub write: Client,
    /// Where reads and watches go (the write server unless `--read-server` is given).
    pub read: Client,
    pub profile: Profile,
    /// The namespace the run created for its objects.
    pub ns: String,
    /// Namespaces created by checks, deleted at the end.
    pub(crate) extra_namespaces: Mutex<Vec<String>>,
    /// Objects given finalizers, whose finalizers are removed at the end.
    pub(crate) finalized: Mutex<Vec<String>>,
    counter: AtomicUsize,
    run_id: String,
}

/// How long a check waits for something the server does asynchronously.
pub const WAIT: Duration = Duration::from_secs(10);

impl Ctx {
    pub(crate) fn new(write: Client, read: Client, profile: Profile, run_id: String) -> Ctx {
        Ctx {
            write,
            read,
            profile,
            ns: format!("conformance-{run_id}"),
            extra_namespaces: Mutex::new(Vec::new()),
            finalized: Mutex::new(Vec::new()),
            counter: AtomicUsize::new(0),
            run_id,
        }
    }

    /// A name unused in this run, starting with `prefix`.
    pub fn name(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{n}")
    }

    /// The label every object of this run carries: `conformance.strata.dev/run=<id>`.
    pub fn run_label(&self) -> (&'static str, &str) {
        ("conformance.strata.dev/run", &self.run_id)
    }

    /// The ServiceAccount collection of the run's namespace.
    pub fn sa_path(&self) -> String {
        format!("/api/v1/namespaces/{}/serviceaccounts", self.ns)
    }

    /// One ServiceAccount of the run's namespace.
    pub fn sa(&self, name: &str) -> String {
        format!("{}/{name}", self.sa_path())
    }

    /// A ServiceAccount body with `name` and the run's label (plus `labels`).
    pub fn sa_body(&self, name: &str, labels: Value) -> Value {
        let (key, value) = self.run_label();
        let mut all = json!({ key: value });
        if let Value::Object(extra) = labels {
            for (k, v) in extra {
                all[k] = v;
            }
        }
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "labels": all},
        })
    }

    /// Creates a ServiceAccount in the run's namespace (through the write server).
    pub async fn create_sa(&self, name: &str, labels: Value) -> Result<Value, Fail> {
        let resp = self
            .write
            .send(Req::post(self.sa_path()).json(&self.sa_body(name, labels)))
            .await?;
        resp.expect_one_of(&[200, 201, 202])?;
        let object = resp.json()?;
        ensure!(
            object["metadata"]["name"] == name,
            &resp,
            "the created object is not named {name}"
        );
        Ok(object)
    }

    /// Reads through the read server.
    pub async fn get(&self, path: &str) -> Result<Resp, Fail> {
        self.read.send(Req::get(path)).await
    }

    /// Reads JSON through the read server, expecting 200.
    pub async fn get_json(&self, path: &str) -> Result<Value, Fail> {
        self.get(path).await?.ok_json(200)
    }

    /// Sends a write through the write server.
    pub async fn send(&self, req: Req) -> Result<Resp, Fail> {
        self.write.send(req).await
    }

    /// Creates a namespace of its own for a check (deleted at the end of the run).
    pub async fn extra_namespace(&self, prefix: &str) -> Result<String, Fail> {
        let name = format!("{}-{}", self.ns, self.name(prefix));
        let (key, value) = self.run_label();
        let resp = self
            .write
            .send(Req::post("/api/v1/namespaces").json(&json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {key: value}},
            })))
            .await?;
        resp.expect_one_of(&[200, 201])?;
        self.extra_namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.clone());
        Ok(name)
    }

    /// Remembers an object given finalizers, so that the end of the run removes them.
    pub fn finalizers_added(&self, path: &str) {
        self.finalized
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path.to_string());
    }

    /// Waits until `path` answers 404 through the read server.
    pub async fn wait_gone(&self, path: &str, limit: Duration) -> Result<(), Fail> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let resp = self.get(path).await?;
            if resp.status == 404 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Fail::with(
                    &resp,
                    format!("{path} still exists {limit:?} later"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `labelSelector=<run label>` plus `name=<value>`, URL-encoded, for filtering lists to
    /// objects a check created.
    pub fn selector(&self, label: &str, value: &str) -> String {
        let (key, run) = self.run_label();
        enc(&format!("{key}={run},{label}={value}"))
    }
}

/// Percent-encodes a query value.
pub fn enc(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The names of a list's items, in order.
pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The object's `metadata.resourceVersion`, `""` when absent.
pub fn rv(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Fails unless `resp` is a Status with `code` and `reason` (the body's `code` too).
pub fn expect_status(resp: &Resp, code: u16, reason: &str) -> Result<Value, Fail> {
    resp.expect(code)?;
    let status = resp.json()?;
    ensure!(
        status["kind"] == "Status" && status["status"] == "Failure",
        resp,
        "expected a Status with status Failure as the body"
    );
    ensure!(
        status["reason"] == reason,
        resp,
        "expected reason {reason}, got {}",
        status["reason"]
    );
    ensure!(
        status["code"] == code,
        resp,
        "the Status' code is {}, not {code}",
        status["code"]
    );
    Ok(status)
}
