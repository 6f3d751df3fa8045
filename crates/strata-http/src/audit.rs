//! Auditing as kube-apiserver does it: an `audit.k8s.io/v1` Policy decides per request how much
//! is recorded (`None`, `Metadata`, `Request`, `RequestResponse`), and each recorded stage of the
//! request (`RequestReceived`, `ResponseStarted` for watches, `ResponseComplete`, `Panic`)
//! becomes one `audit.k8s.io/v1` Event, written as a JSON line by a [`Backend`].
//!
//! The frontend records: `Frontend::handle` starts a [`Handle`] (only when auditing is on; a
//! request otherwise carries nothing), `handlers::dispatch` evaluates the policy once the user
//! is known and notes impersonation and the authorization decision, `handlers::body` hands over
//! the request body when the level wants it, and `handlers::route` completes the event from the
//! response. The backend never blocks a request for long: events go through a bounded queue to
//! a writer thread (the server composition gives it the file), and an event that finds the
//! queue full is dropped and counted in `apiserver_audit_error_total`.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use strata_auth::authz::Attributes;
use strata_auth::UserInfo;
use time::OffsetDateTime;

use crate::guarded::with_guard;
use crate::respond::{self, Body};

/// How much of a request is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Level {
    /// Nothing.
    None,
    /// Who, what, when and the outcome; no bodies.
    Metadata,
    /// Metadata and the request's object.
    Request,
    /// Metadata, the request's object and the response's.
    RequestResponse,
}

impl Level {
    const ALL: [(&'static str, Level); 4] = [
        ("None", Level::None),
        ("Metadata", Level::Metadata),
        ("Request", Level::Request),
        ("RequestResponse", Level::RequestResponse),
    ];

    fn name(self) -> &'static str {
        Self::ALL[self as usize].0
    }
}

/// A point in a request's life at which an event is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    const ALL: [(&'static str, Stage); 4] = [
        ("RequestReceived", Stage::RequestReceived),
        ("ResponseStarted", Stage::ResponseStarted),
        ("ResponseComplete", Stage::ResponseComplete),
        ("Panic", Stage::Panic),
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The policy file as written (unknown fields are ignored, as kube-apiserver's decoder does).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyDoc {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    rules: Vec<RuleDoc>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleDoc {
    #[serde(default)]
    level: String,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

/// One rule of a policy, its stages already joined with the policy's.
#[derive(Clone, Debug)]
struct Rule {
    level: Level,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<String>,
    omit_stages: u8,
    omit_managed_fields: Option<bool>,
}

/// An `audit.k8s.io/v1` Policy: rules tried in order, the first that matches deciding.
#[derive(Clone, Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: u8,
    omit_managed_fields: bool,
}

/// What the policy decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestConfig {
    pub level: Level,
    omit_stages: u8,
    pub omit_managed_fields: bool,
}

impl RequestConfig {
    fn omits(&self, stage: Stage) -> bool {
        self.omit_stages & stage.bit() != 0
    }
}

impl Policy {
    /// Reads the policy file at `path`; the error names the file and the problem.
    pub fn load(path: &std::path::Path) -> Result<Policy, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("audit policy file {}: {e}", path.display()))?;
        Policy::parse(&bytes).map_err(|e| format!("audit policy file {}: {e}", path.display()))
    }

    /// Parses a policy (YAML or JSON) and checks it as kube-apiserver does: `audit.k8s.io/v1`
    /// only, at least one rule, known levels and stages, rules about either resources or
    /// non-resource URLs.
    pub fn parse(bytes: &[u8]) -> Result<Policy, String> {
        let value = strata_codec::yaml::decode(bytes).map_err(|e| format!("not YAML: {e}"))?;
        if !value.is_object() {
            return Err("expected a Policy object".into());
        }
        let doc: PolicyDoc =
            serde_json::from_value(value).map_err(|e| format!("not a Policy: {e}"))?;
        if doc.api_version != "audit.k8s.io/v1" || doc.kind != "Policy" {
            return Err(format!(
                "expected kind Policy of apiVersion audit.k8s.io/v1, found kind {:?} of \
                 apiVersion {:?}",
                doc.kind, doc.api_version
            ));
        }
        let mut errors = Vec::new();
        let policy_stages = stages(&doc.omit_stages, "omitStages", &mut errors);
        let mut rules = Vec::new();
        for (i, r) in doc.rules.into_iter().enumerate() {
            let at = format!("rules[{i}]");
            let level = match Level::ALL.iter().find(|(n, _)| *n == r.level) {
                Some((_, l)) => *l,
                None if r.level.is_empty() => {
                    errors.push(format!("{at}.level: Required value"));
                    Level::None
                }
                None => {
                    errors.push(format!(
                        "{at}.level: Unsupported value: {:?}: supported values: \"None\", \
                         \"Metadata\", \"Request\", \"RequestResponse\"",
                        r.level
                    ));
                    Level::None
                }
            };
            if !r.non_resource_urls.is_empty()
                && (!r.resources.is_empty() || !r.namespaces.is_empty())
            {
                errors.push(format!(
                    "{at}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both \
                     regular resources and non-resource URLs",
                    r.non_resource_urls
                ));
            }
            for (j, url) in r.non_resource_urls.iter().enumerate() {
                if url == "*" {
                    continue;
                }
                if !url.starts_with('/') {
                    errors.push(format!(
                        "{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL \
                         rules must begin with a '/' character"
                    ));
                } else if url[..url.len() - 1].contains('*') {
                    errors.push(format!(
                        "{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL \
                         wildcards ('*') must be the final character of the rule"
                    ));
                }
            }
            for (j, gr) in r.resources.iter().enumerate() {
                if !gr.resource_names.is_empty() {
                    if gr.resources.is_empty() {
                        errors.push(format!(
                            "{at}.resources[{j}].resourceNames: Invalid value: {:?}: using \
                             resourceNames requires at least one resource",
                            gr.resource_names
                        ));
                    }
                    for res in &gr.resources {
                        if res.contains('*') {
                            errors.push(format!(
                                "{at}.resources[{j}].resources: Invalid value: {res:?}: \
                                 resourceNames cannot be used with a wildcard resource"
                            ));
                        }
                    }
                }
            }
            let own = stages(&r.omit_stages, &format!("{at}.omitStages"), &mut errors);
            rules.push(Rule {
                level,
                users: r.users,
                user_groups: r.user_groups,
                verbs: r.verbs,
                resources: r.resources,
                namespaces: r.namespaces,
                non_resource_urls: r.non_resource_urls,
                omit_stages: own | policy_stages,
                omit_managed_fields: r.omit_managed_fields,
            });
        }
        if rules.is_empty() && errors.is_empty() {
            errors.push("the policy has no rules".into());
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        Ok(Policy {
            rules,
            omit_stages: policy_stages,
            omit_managed_fields: doc.omit_managed_fields,
        })
    }

    /// The level and options of the first rule matching `attrs` (nothing matching: `None`).
    pub fn evaluate(&self, attrs: &Attributes) -> RequestConfig {
        for rule in &self.rules {
            if rule.matches(attrs) {
                return RequestConfig {
                    level: rule.level,
                    omit_stages: rule.omit_stages,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                };
            }
        }
        RequestConfig {
            level: Level::None,
            omit_stages: self.omit_stages,
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

/// The bits of the stages named, recording unknown names in `errors`.
fn stages(names: &[String], at: &str, errors: &mut Vec<String>) -> u8 {
    let mut bits = 0;
    for (i, name) in names.iter().enumerate() {
        match Stage::ALL.iter().find(|(n, _)| n == name) {
            Some((_, s)) => bits |= s.bit(),
            None => errors.push(format!(
                "{at}[{i}]: Unsupported value: {name:?}: supported values: \"RequestReceived\", \
                 \"ResponseStarted\", \"ResponseComplete\", \"Panic\""
            )),
        }
    }
    bits
}

impl Rule {
    fn matches(&self, a: &Attributes) -> bool {
        // A request whose user is not known yet (failed authentication) has an empty name.
        let known = !a.user.name.is_empty();
        let user_listed = known && self.users.contains(&a.user.name);
        if !self.users.is_empty() && !user_listed {
            return false;
        }
        let group_listed = known && a.user.groups.iter().any(|g| self.user_groups.contains(g));
        if !self.user_groups.is_empty() && !group_listed {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&a.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(a);
        }
        if !self.non_resource_urls.is_empty() {
            return !a.resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&a.path, spec));
        }
        true
    }

    fn matches_resource(&self, a: &Attributes) -> bool {
        if !a.resource_request {
            return false;
        }
        // Cluster-scoped requests have the namespace "".
        if !self.namespaces.is_empty() && !self.namespaces.contains(&a.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        self.resources.iter().any(|gr| {
            gr.group == a.api_group
                && (gr.resources.is_empty()
                    || gr.resources.iter().any(|res| {
                        (gr.resource_names.is_empty() || gr.resource_names.contains(&a.name))
                            && (*res == combined
                                || res == "*"
                                || (!a.subresource.is_empty()
                                    && res.strip_prefix("*/") == Some(a.subresource.as_str()))
                                || res.strip_suffix("/*") == Some(a.resource.as_str()))
                    }))
        })
    }
}

/// A non-resource URL rule: `*`, the exact path, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// `authentication.k8s.io/v1` UserInfo as events carry it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EventUser {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for EventUser {
    fn from(u: &UserInfo) -> Self {
        EventUser {
            username: u.name.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
            extra: u.extra.clone(),
        }
    }
}

/// What a resource request was about.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The response's outcome, a `metav1.Status` reduced to what events keep.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResponseStatus {
    /// Always `{}`, as Kubernetes writes the empty ListMeta.
    pub metadata: Map<String, Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

/// An `audit.k8s.io/v1` Event, its fields in Kubernetes' order.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: EventUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<EventUser>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    pub request_received_timestamp: String,
    pub stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The audit counters kube-apiserver has, on the server's registry.
#[derive(Debug)]
pub struct AuditMetrics {
    events: Counter,
    errors: Family<[(&'static str, &'static str); 1], Counter>,
    levels: Family<[(&'static str, &'static str); 1], Counter>,
}

impl AuditMetrics {
    /// Registers `apiserver_audit_event_total`, `apiserver_audit_error_total{plugin}` and
    /// `apiserver_audit_level_total{level}` on `metrics`.
    pub fn register(metrics: &crate::Metrics) -> Arc<AuditMetrics> {
        let m = AuditMetrics {
            events: Counter::default(),
            errors: Family::default(),
            levels: Family::default(),
        };
        metrics.register(|r| {
            r.register(
                "apiserver_audit_event",
                "Audit events made and handed to the audit backend",
                m.events.clone(),
            );
            r.register(
                "apiserver_audit_error",
                "Audit events lost, by the backend plugin that lost them: buffered (the queue \
                 was full) or log (the write failed)",
                m.errors.clone(),
            );
            r.register(
                "apiserver_audit_level",
                "Requests by the audit level the policy gave them (one per request)",
                m.levels.clone(),
            );
        });
        Arc::new(m)
    }

    /// Counts `n` events lost by `plugin`.
    pub fn error(&self, plugin: &'static str, n: u64) {
        self.errors.get_or_create(&[("plugin", plugin)]).inc_by(n);
    }
}

/// Where event lines are written: a file, stdout, or anything else that takes bytes.
pub trait Writer: Send + 'static {
    /// Writes one line (with its newline).
    fn write_line(&mut self, line: &[u8]) -> io::Result<()>;
    /// Flushes what was written.
    fn flush(&mut self) -> io::Result<()>;
}

/// When a request waits for its events (`--audit-log-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The response waits until its events are written (at most [`BLOCKING_LIMIT`]).
    Blocking,
    /// Events are queued and written by the writer thread; a full queue drops them.
    Batch,
}

/// How long a request waits for its event to be written in blocking mode before the event is
/// given up (and counted as an error of the `log` plugin).
pub const BLOCKING_LIMIT: Duration = Duration::from_secs(5);

/// Events queued for the writer at most (kube-apiserver's `--audit-log-batch-buffer-size`).
pub const QUEUE: usize = 10_000;

struct Queued {
    line: Vec<u8>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The log backend: a bounded queue to a writer thread.
pub struct Backend {
    tx: tokio::sync::mpsc::Sender<Queued>,
    mode: Mode,
    metrics: Arc<AuditMetrics>,
}

impl Backend {
    /// Starts the writer thread over `writer`.
    pub fn start(writer: Box<dyn Writer>, mode: Mode, metrics: Arc<AuditMetrics>) -> Backend {
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(writer, rx, m))
            .expect("starting the audit log writer");
        Backend { tx, mode, metrics }
    }

    /// Hands over one event; in blocking mode, waits until it is written.
    async fn process(&self, line: Vec<u8>) {
        self.metrics.events.inc();
        match self.mode {
            Mode::Batch => self.enqueue(line),
            Mode::Blocking => {
                let (done, written) = tokio::sync::oneshot::channel();
                let queued = Queued {
                    line,
                    done: Some(done),
                };
                let sent = tokio::time::timeout(BLOCKING_LIMIT, async {
                    self.tx.send(queued).await.is_ok() && written.await.is_ok()
                })
                .await;
                if !matches!(sent, Ok(true)) {
                    self.metrics.error("log", 1);
                }
            }
        }
    }

    /// Queues one event without waiting (from a dropped watch body, say).
    fn process_now(&self, line: Vec<u8>) {
        self.metrics.events.inc();
        self.enqueue(line);
    }

    fn enqueue(&self, line: Vec<u8>) {
        if self.tx.try_send(Queued { line, done: None }).is_err() {
            self.metrics.error("buffered", 1);
        }
    }
}

fn write_loop(
    mut writer: Box<dyn Writer>,
    mut rx: tokio::sync::mpsc::Receiver<Queued>,
    metrics: Arc<AuditMetrics>,
) {
    let mut acks = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut next = Some(first);
        let mut failed = 0;
        while let Some(q) = next {
            if let Err(e) = writer.write_line(&q.line) {
                failed += 1;
                tracing::warn!(error = %e, "writing the audit log");
            }
            acks.extend(q.done);
            next = if acks.len() < 256 {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if let Err(e) = writer.flush() {
            tracing::warn!(error = %e, "flushing the audit log");
        }
        if failed > 0 {
            metrics.error("log", failed);
        }
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
    }
    let _ = writer.flush();
}

/// Auditing: the policy and the backend. `None` in the frontend when there is no policy.
pub struct Auditor {
    policy: Policy,
    backend: Backend,
    metrics: Arc<AuditMetrics>,
}

impl Auditor {
    pub fn new(policy: Policy, backend: Backend) -> Auditor {
        let metrics = backend.metrics.clone();
        Auditor {
            policy,
            backend,
            metrics,
        }
    }
}

/// The connection's peer, noted on a request when auditing is on.
#[derive(Clone, Copy, Debug)]
struct Peer(SocketAddr);

/// Notes the address `req` came from, when auditing is on.
pub(crate) fn note_peer<B>(auditing: bool, req: &mut Request<B>, peer: SocketAddr) {
    if auditing {
        req.extensions_mut().insert(Peer(peer));
    }
}

/// The request's audit ID: the client's `Audit-ID` header when it sent one, else a new UUID.
pub(crate) fn audit_id(headers: &HeaderMap) -> String {
    match headers.get("audit-id").and_then(|v| v.to_str().ok()) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => strata_registry::random_uuid(),
    }
}

/// How far a request's audit has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// The policy has not been asked yet.
    Started,
    /// The level is `None`: nothing more is recorded.
    Off,
    /// Recorded at the event's level.
    On,
    /// Authentication failed: one event when the response starts.
    Unauthenticated,
    /// The last event went out.
    Done,
}

struct Record {
    auditor: Arc<Auditor>,
    event: Event,
    config: RequestConfig,
    progress: Progress,
    method: Method,
    /// The request body and its content type, when the level records it (or Metadata needs
    /// the object's name and uid).
    body: Option<(Bytes, String)>,
}

/// A request's audit, in its extensions while it is served (only when auditing is on).
#[derive(Clone)]
pub(crate) struct Handle(Arc<Mutex<Record>>);

fn now() -> String {
    strata_object::format_micro_time(OffsetDateTime::now_utc())
}

/// The source IPs as kube-apiserver lists them: `X-Forwarded-For`'s addresses, then
/// `X-Real-Ip` if not among them, then the peer unless it is already last.
fn source_ips(headers: &HeaderMap, peer: Option<SocketAddr>) -> Vec<String> {
    let mut ips: Vec<std::net::IpAddr> = Vec::new();
    if let Some(v) = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        ips.extend(
            v.split(',')
                .filter_map(|p| p.trim().parse::<std::net::IpAddr>().ok()),
        );
    }
    if let Some(ip) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
    {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if let Some(peer) = peer {
        if ips.last() != Some(&peer.ip()) {
            ips.push(peer.ip());
        }
    }
    ips.iter().map(ToString::to_string).collect()
}

/// Starts the audit of `req` (auditing is on): what is known before authentication.
pub(crate) fn begin<B>(auditor: &Arc<Auditor>, req: &mut Request<B>, id: &str) {
    const MAX_USER_AGENT: usize = 1024;
    let mut user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if user_agent.len() > MAX_USER_AGENT {
        let mut cut = MAX_USER_AGENT;
        while !user_agent.is_char_boundary(cut) {
            cut -= 1;
        }
        user_agent.truncate(cut);
        user_agent.push_str("...TRUNCATED");
    }
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let received = now();
    let event = Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level: Level::None,
        audit_id: id.to_string(),
        stage: Stage::RequestReceived,
        request_uri: req.uri().path_and_query().map_or_else(
            || req.uri().path().to_string(),
            |pq| pq.as_str().to_string(),
        ),
        verb: String::new(),
        user: EventUser::default(),
        impersonated_user: None,
        source_ips: source_ips(req.headers(), peer),
        user_agent,
        object_ref: None,
        response_status: None,
        request_object: None,
        response_object: None,
        stage_timestamp: received.clone(),
        request_received_timestamp: received,
        annotations: BTreeMap::new(),
    };
    let record = Record {
        auditor: auditor.clone(),
        event,
        config: RequestConfig {
            level: Level::None,
            omit_stages: 0,
            omit_managed_fields: false,
        },
        progress: Progress::Started,
        method: req.method().clone(),
        body: None,
    };
    req.extensions_mut()
        .insert(Handle(Arc::new(Mutex::new(record))));
}

/// The audit of `req`, when auditing is on.
pub(crate) fn of<B>(req: &Request<B>) -> Option<Handle> {
    req.extensions().get::<Handle>().cloned()
}

impl Handle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The policy's decision for `attrs` (the authenticated user's request); records
    /// `RequestReceived` unless the level is `None` or the stage is omitted.
    pub(crate) async fn authenticated(&self, attrs: &Attributes) {
        let line = {
            let mut r = self.lock();
            if r.progress != Progress::Started {
                return;
            }
            let config = r.auditor.policy.evaluate(attrs);
            r.auditor
                .metrics
                .levels
                .get_or_create(&[("level", config.level.name())])
                .inc();
            r.config = config;
            if config.level == Level::None {
                r.progress = Progress::Off;
                return;
            }
            r.progress = Progress::On;
            let e = &mut r.event;
            e.level = config.level;
            e.verb = attrs.verb.clone();
            e.user = EventUser::from(&attrs.user);
            e.object_ref = object_ref(attrs);
            if config.omits(Stage::RequestReceived) {
                return;
            }
            e.stage = Stage::RequestReceived;
            e.stage_timestamp = e.request_received_timestamp.clone();
            serde_line(e)
        };
        self.send(line).await;
    }

    /// Authentication failed: the policy is asked about a request without a user, and the
    /// event is recorded once, when the response (the 401) starts.
    pub(crate) fn unauthenticated(&self, attrs: &Attributes) {
        let mut r = self.lock();
        if r.progress != Progress::Started {
            return;
        }
        let config = r.auditor.policy.evaluate(attrs);
        r.auditor
            .metrics
            .levels
            .get_or_create(&[("level", config.level.name())])
            .inc();
        r.config = config;
        if config.level == Level::None {
            r.progress = Progress::Off;
            return;
        }
        r.progress = Progress::Unauthenticated;
        r.event.level = config.level;
        r.event.verb = attrs.verb.clone();
        r.event.object_ref = object_ref(attrs);
    }

    /// The request runs as `user` (impersonation).
    pub(crate) fn impersonated(&self, user: &UserInfo) {
        let mut r = self.lock();
        if r.progress == Progress::On {
            r.event.impersonated_user = Some(EventUser::from(user));
        }
    }

    /// The authorizer's decision, as the `authorization.k8s.io/*` annotations.
    pub(crate) fn authorized(&self, allowed: bool, reason: &str) {
        let mut r = self.lock();
        if r.progress == Progress::On {
            let a = &mut r.event.annotations;
            a.insert(
                "authorization.k8s.io/decision".into(),
                if allowed { "allow" } else { "forbid" }.into(),
            );
            a.insert("authorization.k8s.io/reason".into(), reason.into());
        }
    }

    /// Keeps the request body (of an object write or a patch) for the event.
    pub(crate) fn note_body(&self, bytes: &Bytes, content_type: &str) {
        let mut r = self.lock();
        if r.progress == Progress::On {
            r.body = Some((bytes.clone(), content_type.to_string()));
        }
    }

    /// Completes the audit with the response: `ResponseComplete` (a watch: `ResponseStarted`
    /// now, `ResponseComplete` when its stream ends). In blocking mode the response waits
    /// until the event is written.
    pub(crate) async fn finish(self, resp: Response<Body>, long_running: bool) -> Response<Body> {
        let (progress, level) = {
            let r = self.lock();
            (r.progress, r.config.level)
        };
        match progress {
            Progress::Started | Progress::Off | Progress::Done => return resp,
            Progress::Unauthenticated => {
                let (resp, status, _) = read_response(resp, false).await;
                let line = {
                    let mut r = self.lock();
                    r.progress = Progress::Done;
                    r.event.response_status = Some(status);
                    stage_line(&mut r, Stage::ResponseStarted)
                };
                self.send(line).await;
                return resp;
            }
            Progress::On => {}
        }
        self.take_request_object();
        let code = resp.status().as_u16();
        if long_running && resp.status().is_success() {
            let line = {
                let mut r = self.lock();
                r.event.response_status = Some(ResponseStatus {
                    code,
                    ..Default::default()
                });
                stage_line(&mut r, Stage::ResponseStarted)
            };
            self.send(line).await;
            let guard = WatchEnd(self);
            return resp.map(|inner| with_guard(inner, guard));
        }
        let (resp, status, object) = read_response(resp, level == Level::RequestResponse).await;
        let (started, complete) = {
            let mut r = self.lock();
            r.progress = Progress::Done;
            r.event.response_status = Some(status);
            if let Some(mut object) = object {
                if r.config.omit_managed_fields {
                    omit_managed_fields(&mut object);
                }
                r.event.response_object = Some(object);
            }
            // A watch refused (403, 410...) still has its response start, as in Kubernetes,
            // whose long-running requests record the stage whatever the code.
            let started = if long_running {
                stage_line(&mut r, Stage::ResponseStarted)
            } else {
                None
            };
            (started, stage_line(&mut r, Stage::ResponseComplete))
        };
        self.send(started).await;
        self.send(complete).await;
        resp
    }

    /// Decodes the kept request body: the object's name, uid and resourceVersion complete the
    /// object reference (of a create or update); from `Request` on, the body is the event's
    /// `requestObject`.
    fn take_request_object(&self) {
        let mut r = self.lock();
        let Some((bytes, content_type)) = r.body.take() else {
            return;
        };
        let names_object = matches!(r.method, Method::POST | Method::PUT);
        if !names_object && r.config.level < Level::Request {
            return;
        }
        let Some(mut value) = decode(&content_type, &bytes) else {
            return;
        };
        if names_object {
            let meta = value.get("metadata").and_then(Value::as_object);
            if let (Some(meta), Some(oref)) = (meta, r.event.object_ref.as_mut()) {
                let field = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or("");
                for (slot, key) in [
                    (&mut oref.namespace, "namespace"),
                    (&mut oref.name, "name"),
                    (&mut oref.uid, "uid"),
                    (&mut oref.resource_version, "resourceVersion"),
                ] {
                    if slot.is_empty() {
                        *slot = field(key).to_string();
                    }
                }
            }
        }
        if r.config.level >= Level::Request {
            if r.config.omit_managed_fields {
                omit_managed_fields(&mut value);
            }
            r.event.request_object = Some(value);
        }
    }

    async fn send(&self, line: Option<Vec<u8>>) {
        if let Some(line) = line {
            let auditor = self.lock().auditor.clone();
            auditor.backend.process(line).await;
        }
    }
}

/// What a resource request is about; `None` for other paths.
fn object_ref(attrs: &Attributes) -> Option<ObjectRef> {
    attrs.resource_request.then(|| ObjectRef {
        resource: attrs.resource.clone(),
        namespace: attrs.namespace.clone(),
        name: attrs.name.clone(),
        api_group: attrs.api_group.clone(),
        api_version: attrs.api_version.clone(),
        subresource: attrs.subresource.clone(),
        ..Default::default()
    })
}

/// The event of `stage` as a JSON line, or `None` when the policy omits the stage.
fn stage_line(r: &mut Record, stage: Stage) -> Option<Vec<u8>> {
    if r.config.omits(stage) {
        return None;
    }
    r.event.stage = stage;
    r.event.stage_timestamp = now();
    serde_line(&r.event)
}

fn serde_line(e: &Event) -> Option<Vec<u8>> {
    let mut line = serde_json::to_vec(e).ok()?;
    line.push(b'\n');
    Some(line)
}

/// Reads a complete response: its status for the event (a Status body's status, message,
/// reason and details; else the code) and, when `object` is asked, the decoded body.
async fn read_response(
    resp: Response<Body>,
    object: bool,
) -> (Response<Body>, ResponseStatus, Option<Value>) {
    let code = resp.status().as_u16();
    let mut status = ResponseStatus {
        code,
        ..Default::default()
    };
    if !object && resp.status().is_success() {
        return (resp, status, None);
    }
    let (parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return (
                Response::from_parts(parts, respond::broken_off(e)),
                status,
                None,
            )
        }
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let value = decode(content_type, &bytes);
    if let Some(v) = value.as_ref().filter(|v| v["kind"] == "Status") {
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        status.status = text("status");
        status.message = text("message");
        status.reason = text("reason");
        status.details = v.get("details").cloned();
        if let Some(c) = v.get("code").and_then(Value::as_u64) {
            status.code = c as u16;
        }
    }
    let resp = Response::from_parts(parts, respond::full(bytes));
    (resp, status, value.filter(|_| object))
}

/// A body in any of the API's encodings, as JSON.
fn decode(content_type: &str, bytes: &[u8]) -> Option<Value> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if bytes.is_empty() {
        return None;
    }
    if essence.contains("protobuf") {
        return strata_codec::proto::decode(bytes, "", "").ok();
    }
    if essence.contains("cbor") {
        return strata_codec::cbor::decode(bytes).ok();
    }
    if essence.contains("yaml") {
        return strata_codec::yaml::decode(bytes).ok();
    }
    serde_json::from_slice(bytes).ok()
}

/// Removes `metadata.managedFields` from an object, or from each item of a list.
fn omit_managed_fields(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
}

/// Records a watch's `ResponseComplete` when its stream ends (the body is dropped), or a
/// `Panic` when the handler panicked before.
struct WatchEnd(Handle);

impl Drop for WatchEnd {
    fn drop(&mut self) {
        let (line, auditor) = {
            let mut r = self.0.lock();
            r.progress = Progress::Done;
            (
                stage_line(&mut r, Stage::ResponseComplete),
                r.auditor.clone(),
            )
        };
        if let Some(line) = line {
            auditor.backend.process_now(line);
        }
    }
}

/// Records a `Panic` event when a request's handling unwinds before its audit finished.
pub(crate) struct PanicGuard(pub(crate) Option<Handle>);

impl Drop for PanicGuard {
    fn drop(&mut self) {
        let Some(h) = &self.0 else {
            return;
        };
        if !std::thread::panicking() {
            return;
        }
        let (line, auditor) = {
            let mut r = h.lock();
            if r.progress != Progress::On {
                return;
            }
            r.progress = Progress::Done;
            r.event.response_status = Some(ResponseStatus {
                status: "Failure".into(),
                message: "APIServer panic'd".into(),
                reason: "InternalError".into(),
                code: 500,
                ..Default::default()
            });
            (stage_line(&mut r, Stage::Panic), r.auditor.clone())
        };
        if let Some(line) = line {
            auditor.backend.process_now(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(user: &str, groups: &[&str], verb: &str, path: &str) -> Attributes {
        let user = UserInfo {
            name: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        match crate::request::RequestInfo::parse(path) {
            Some(info) => Attributes {
                user,
                verb: verb.into(),
                namespace: info.namespace,
                api_group: info.group,
                api_version: info.version,
                resource: info.resource,
                subresource: info.subresource,
                name: info.name,
                resource_request: true,
                path: path.into(),
            },
            None => Attributes {
                user,
                verb: verb.into(),
                path: path.into(),
                ..Default::default()
            },
        }
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
omitManagedFields: true
rules:
- level: None
  users: [system:kube-proxy]
  verbs: [watch]
- level: Metadata
  resources:
  - group: ""
    resources: [secrets, "pods/log", "*/scale"]
- level: Request
  resources:
  - group: apps
    resources: ["deployments/*"]
  namespaces: [team]
- level: RequestResponse
  userGroups: [auditors]
  omitManagedFields: false
  resources:
  - group: ""
    resources: [configmaps]
    resourceNames: [watched]
- level: Metadata
  nonResourceURLs: ["/healthz*", /version]
- level: Request
  namespaces: [""]
"#;

    #[test]
    fn first_matching_rule_decides() {
        let p = Policy::parse(POLICY.as_bytes()).unwrap();
        let level = |a: Attributes| p.evaluate(&a).level;
        assert_eq!(
            level(attrs("system:kube-proxy", &[], "watch", "/api/v1/secrets")),
            Level::None
        );
        assert_eq!(
            level(attrs("bob", &[], "get", "/api/v1/namespaces/a/secrets/s")),
            Level::Metadata
        );
        assert_eq!(
            level(attrs("bob", &[], "get", "/api/v1/namespaces/a/pods/p/log")),
            Level::Metadata
        );
        assert_eq!(
            level(attrs(
                "bob",
                &[],
                "update",
                "/api/v1/namespaces/x/replicationcontrollers/r/scale"
            )),
            Level::Metadata
        );
        // The group must match too.
        assert_eq!(
            level(attrs(
                "bob",
                &[],
                "update",
                "/apis/apps/v1/namespaces/x/deployments/d/scale"
            )),
            Level::None
        );
        // `deployments/*`, only in `team`.
        assert_eq!(
            level(attrs(
                "bob",
                &[],
                "update",
                "/apis/apps/v1/namespaces/team/deployments/d/status"
            )),
            Level::Request
        );
        // As kube-apiserver's checker: `deployments/*` also matches the resource itself.
        assert_eq!(
            level(attrs(
                "bob",
                &[],
                "update",
                "/apis/apps/v1/namespaces/team/deployments/d"
            )),
            Level::Request
        );
        assert_eq!(
            level(attrs(
                "bob",
                &[],
                "update",
                "/apis/apps/v1/namespaces/other/deployments/d/status"
            )),
            Level::None
        );
        let c = p.evaluate(&attrs(
            "eve",
            &["auditors"],
            "get",
            "/api/v1/namespaces/a/configmaps/watched",
        ));
        assert_eq!(c.level, Level::RequestResponse);
        assert!(!c.omit_managed_fields);
        assert!(c.omits(Stage::RequestReceived));
        assert_eq!(
            level(attrs(
                "eve",
                &["auditors"],
                "get",
                "/api/v1/namespaces/a/configmaps/other"
            )),
            Level::None
        );
        assert_eq!(
            level(attrs("x", &[], "get", "/healthz/etcd")),
            Level::Metadata
        );
        assert_eq!(level(attrs("x", &[], "get", "/version")), Level::Metadata);
        assert_eq!(level(attrs("x", &[], "get", "/versions")), Level::None);
        // Cluster-scoped resources are in the namespace "".
        assert_eq!(
            level(attrs("x", &[], "list", "/api/v1/namespaces")),
            Level::Request
        );
        let c = p.evaluate(&attrs("x", &[], "list", "/api/v1/namespaces"));
        assert!(c.omit_managed_fields);
    }

    #[test]
    fn bad_policies_are_refused_with_the_problem() {
        let err = |s: &str| Policy::parse(s.as_bytes()).unwrap_err();
        assert!(
            err("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]")
                .contains("audit.k8s.io/v1beta1")
        );
        assert!(err("apiVersion: audit.k8s.io/v1\nkind: Policy\n").contains("no rules"));
        assert!(
            err("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]")
                .contains("rules[0].level: Unsupported value: \"Loud\"")
        );
        assert!(err(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, omitStages: [Later]}]"
        )
        .contains("rules[0].omitStages[0]"));
        assert!(err(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/a], namespaces: [x]}]"
        )
        .contains("both"));
        assert!(err("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [a*]}]")
            .contains("'/'"));
        assert!(err("{").contains("not YAML"));
    }

    /// A writer that holds its first line until released, then writes the rest at once.
    struct Gate {
        entered: Option<std::sync::mpsc::Sender<()>>,
        release: std::sync::mpsc::Receiver<()>,
        written: Arc<Mutex<usize>>,
    }

    impl Writer for Gate {
        fn write_line(&mut self, _line: &[u8]) -> io::Result<()> {
            if let Some(entered) = self.entered.take() {
                entered.send(()).unwrap();
                self.release.recv().unwrap();
            }
            *self.written.lock().unwrap() += 1;
            Ok(())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn batch_mode_drops_and_counts_what_the_full_queue_cannot_take() {
        let metrics = AuditMetrics::register(&crate::Metrics::new());
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let written = Arc::new(Mutex::new(0));
        let gate = Gate {
            entered: Some(entered_tx),
            release: release_rx,
            written: written.clone(),
        };
        let backend = Backend::start(Box::new(gate), Mode::Batch, metrics.clone());
        backend.process(b"first\n".to_vec()).await;
        entered.recv().unwrap();
        // The writer holds the first line; the queue takes QUEUE more and drops the rest,
        // without waiting.
        for _ in 0..QUEUE + 3 {
            backend.process(b"more\n".to_vec()).await;
        }
        let buffered = metrics
            .errors
            .get_or_create(&[("plugin", "buffered")])
            .get();
        assert_eq!(buffered, 3);
        assert_eq!(metrics.events.get(), (QUEUE + 4) as u64);
        release.send(()).unwrap();
        drop(backend);
        for _ in 0..1000 {
            if *written.lock().unwrap() == QUEUE + 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(*written.lock().unwrap(), QUEUE + 1);
        assert_eq!(metrics.errors.get_or_create(&[("plugin", "log")]).get(), 0);
    }

    #[test]
    fn source_ips_follow_forwarded_for_then_the_peer() {
        let mut h = HeaderMap::new();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(source_ips(&h, Some(peer)), ["127.0.0.1"]);
        h.insert(
            "x-forwarded-for",
            "10.0.0.1, bogus, 10.0.0.2".parse().unwrap(),
        );
        h.insert("x-real-ip", "10.0.0.1".parse().unwrap());
        assert_eq!(
            source_ips(&h, Some(peer)),
            ["10.0.0.1", "10.0.0.2", "127.0.0.1"]
        );
    }
}
