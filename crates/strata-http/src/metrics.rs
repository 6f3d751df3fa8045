//! Prometheus metrics: the request metrics the frontend records (kube-apiserver's names, labels
//! and buckets), the watch caches' figures read at scrape time, and the process' own.
//!
//! The request path stays cheap: a request's label values are read from its method, path and
//! query without allocating, and the series they name (`Series`: the latency histogram, the
//! response-size histogram, the counters by code) are found in one map keyed by those values,
//! built once per distinct label set. Only the first request of a label set builds strings.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use http::{header, HeaderMap, Method, Response};
use hyper::body::Body as HttpBody;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use strata_object::Status;

use crate::guarded::{counted, with_guard};
use crate::respond::Body;

pub mod sharded;

use self::sharded::{Counter, Gauge, Histogram};

/// `apiserver_request_duration_seconds`' buckets (also those of `etcd_request_duration_seconds`).
pub const LATENCY_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// The component label of requests served by the API machinery.
const APISERVER: &str = "apiserver";

/// The label set of `apiserver_request_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    dry_run: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
    code: String,
}

/// The label set of `apiserver_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    verb: String,
    dry_run: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

/// The label set of `apiserver_response_sizes` and `apiserver_longrunning_requests`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

type ResultLabel = [(&'static str, &'static str); 1];
type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn size_histogram() -> Histogram {
    // 1 KB to 1 GB, as kube-apiserver.
    Histogram::new(exponential_buckets(1000.0, 10.0, 7))
}

fn auth_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Whether a request counts in the read-only or the mutating in-flight figure; watches count
/// in neither (they are long-running, as kube-apiserver's in-flight limits treat them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    ReadOnly,
    Mutating,
    LongRunning,
}

/// What the metrics of one request are labelled with, read from the request itself.
#[derive(Debug, PartialEq, Eq)]
struct Labels<'a> {
    verb: &'static str,
    dry_run: &'static str,
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    subresource: &'a str,
    scope: &'static str,
    component: &'static str,
    /// A resource path (recorded only when its type is served).
    resource_request: bool,
}

/// Reads a request's labels as kube-apiserver reports them: the verb is the HTTP method with
/// GET split into GET (one object), LIST and WATCH, and PATCH with an apply content type
/// reported as APPLY (a DELETE of a collection stays DELETE, with a namespace or cluster
/// scope, as in kube-apiserver's metrics); the scope is `resource` for a named object or a
/// create, `namespace` within a namespace, else `cluster`; non-resource paths carry their path
/// as sub-resource and no scope. `None` for a path nothing serves (not recorded, so that
/// arbitrary paths cannot grow the metrics).
fn labels<'a>(
    method: &Method,
    path: &'a str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Option<(Labels<'a>, Kind)> {
    let query = query.unwrap_or("");
    let dry_run = dry_run(query);
    let Some(p) = parse_resource_path(path) else {
        let (subresource, component) = non_resource(path)?;
        let verb = match *method {
            Method::GET | Method::HEAD => "GET",
            _ => other_verb(method),
        };
        let kind = if verb == "GET" {
            Kind::ReadOnly
        } else {
            Kind::Mutating
        };
        let labels = Labels {
            verb,
            dry_run,
            group: "",
            version: "",
            resource: "",
            subresource,
            scope: "",
            component,
            resource_request: false,
        };
        return Some((labels, kind));
    };
    let scope = if !p.name.is_empty() || *method == Method::POST {
        "resource"
    } else if !p.namespace.is_empty() {
        "namespace"
    } else {
        "cluster"
    };
    let watch = p.watch || (*method == Method::GET && watch_param(query));
    let verb = match *method {
        Method::GET | Method::HEAD if watch => "WATCH",
        Method::GET | Method::HEAD if scope == "resource" => "GET",
        Method::GET | Method::HEAD => "LIST",
        Method::PATCH if is_apply(headers) => "APPLY",
        _ => other_verb(method),
    };
    let kind = match verb {
        "WATCH" => Kind::LongRunning,
        "GET" | "LIST" => Kind::ReadOnly,
        _ => Kind::Mutating,
    };
    let labels = Labels {
        verb,
        dry_run,
        group: p.group,
        version: p.version,
        resource: p.resource,
        subresource: p.subresource,
        scope,
        component: APISERVER,
        resource_request: true,
    };
    Some((labels, kind))
}

/// A request's verb as its metrics name it (LIST, WATCH, APPLY...), for its log line; any
/// path has one.
pub(crate) fn verb(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> &'static str {
    match labels(method, path, query, headers) {
        Some((labels, _)) => labels.verb,
        None if *method == Method::HEAD => "GET",
        None => other_verb(method),
    }
}

fn other_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
}

fn is_apply(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .is_some_and(|v| v.starts_with("application/apply-patch+"))
}

/// The `dry_run` label: empty without `dryRun`, `All` when every value is `All`, else
/// `invalid`.
fn dry_run(query: &str) -> &'static str {
    if !query.contains("dryRun") {
        return "";
    }
    let mut any = false;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "dryRun" {
            if v != "All" {
                return "invalid";
            }
            any = true;
        }
    }
    if any {
        "All"
    } else {
        ""
    }
}

/// `watch=<true>` as the API reads booleans (the first value; absent, `0` and `false` are
/// false).
fn watch_param(query: &str) -> bool {
    if !query.contains("watch") {
        return false;
    }
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "watch")
        .is_some_and(|(_, v)| !v.eq_ignore_ascii_case("false") && v != "0")
}

/// The fixed non-resource paths, named as kube-apiserver names them in its metrics (the path
/// as sub-resource; `component` empty except for discovery).
fn non_resource(path: &str) -> Option<(&'static str, &'static str)> {
    let under = |base: &str| {
        path.strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    Some(match path {
        _ if under("/healthz") => ("/healthz", ""),
        _ if under("/livez") => ("/livez", ""),
        _ if under("/readyz") => ("/readyz", ""),
        "/metrics" => ("/metrics", ""),
        "/version" | "/version/" => ("/version", ""),
        "/openapi/v3" => ("openapi/v3", ""),
        _ if path.starts_with("/openapi/v3/") => ("openapi/v3/", ""),
        "/.well-known/openid-configuration" => ("/.well-known/openid-configuration", ""),
        "/openid/v1/jwks" => ("/openid/v1/jwks", ""),
        _ if under("/api") => ("/api", APISERVER),
        _ if under("/apis") => ("/apis", APISERVER),
        _ => return None,
    })
}

/// A resource path's parts, borrowed (the layout `RequestInfo::parse` reads).
#[derive(Debug, Default, PartialEq, Eq)]
struct ResourcePath<'a> {
    group: &'a str,
    version: &'a str,
    namespace: &'a str,
    resource: &'a str,
    name: &'a str,
    subresource: &'a str,
    watch: bool,
}

fn parse_resource_path(path: &str) -> Option<ResourcePath<'_>> {
    let mut it = path.strip_prefix('/')?.split('/');
    let mut p = ResourcePath::default();
    match it.next()? {
        "api" => {}
        "apis" => p.group = it.next()?,
        _ => return None,
    }
    p.version = it.next()?;
    let mut parts: [&str; 6] = [""; 6];
    let mut n = 0;
    for s in it {
        if n == parts.len() || s.is_empty() {
            return None;
        }
        parts[n] = s;
        n += 1;
    }
    if p.version.is_empty() || n == 0 || (path.starts_with("/apis/") && p.group.is_empty()) {
        return None;
    }
    let mut rest = &parts[..n];
    if rest[0] == "watch" && rest.len() > 1 {
        p.watch = true;
        rest = &rest[1..];
    }
    if rest[0] == "namespaces" && rest.len() > 1 {
        p.namespace = rest[1];
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        } else {
            p.resource = "namespaces";
            p.name = rest[1];
            p.subresource = rest.get(2).copied().unwrap_or("");
            return (rest.len() <= 3).then_some(p);
        }
    }
    match *rest {
        [resource] => p.resource = resource,
        [resource, name] => (p.resource, p.name) = (resource, name),
        [resource, name, sub] => (p.resource, p.name, p.subresource) = (resource, name, sub),
        _ => return None,
    }
    Some(p)
}

/// The series of one label set (without the code): its histograms and its counters by code.
/// Made once per label set and never freed (label sets are few and bounded: served types
/// times verbs), so requests hold plain references and never touch a reference count.
#[derive(Debug)]
struct Series {
    labels: LatencyLabels,
    latency: Histogram,
    /// Response sizes are recorded for GET and LIST only, as kube-apiserver does.
    size: Option<Histogram>,
    /// Open watches.
    longrunning: Option<Gauge>,
    /// The counters of the usual codes, read without a lock.
    common: [OnceLock<Counter>; COMMON_CODES.len()],
    others: Mutex<Vec<(u16, &'static Counter)>>,
}

/// The codes whose counters a series keeps in `Series::common`.
const COMMON_CODES: [u16; 10] = [200, 201, 404, 409, 422, 403, 401, 410, 400, 500];

impl Series {
    fn counter(&self, code: u16, family: &Family<RequestLabels, Counter>) -> &Counter {
        let make = || {
            let l = &self.labels;
            family.get_or_create_owned(&RequestLabels {
                verb: l.verb.clone(),
                dry_run: l.dry_run.clone(),
                group: l.group.clone(),
                version: l.version.clone(),
                resource: l.resource.clone(),
                subresource: l.subresource.clone(),
                scope: l.scope.clone(),
                component: l.component.clone(),
                code: code.to_string(),
            })
        };
        if let Some(i) = COMMON_CODES.iter().position(|c| *c == code) {
            return self.common[i].get_or_init(make);
        }
        let mut others = self.others.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, counter)) = others.iter().find(|(c, _)| *c == code) {
            return counter;
        }
        let counter: &'static Counter = Box::leak(Box::new(make()));
        others.push((code, counter));
        counter
    }
}

/// A multiply-rotate hash eight bytes at a time (FxHash's), for the per-thread series cache:
/// its keys are short and this process' own, so no keyed hash is needed.
#[derive(Default)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let word = u64::from_le_bytes(c.try_into().unwrap_or_default());
            h = (h.rotate_left(5) ^ word).wrapping_mul(K);
        }
        for b in chunks.remainder() {
            h = (h.rotate_left(5) ^ u64::from(*b)).wrapping_mul(K);
        }
        self.0 = h;
    }
}

type FxMap<V> = HashMap<String, V, std::hash::BuildHasherDefault<Fx>>;

/// Tells one [`Metrics`] from another in the per-thread cache.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Authentication and authorization outcomes, resolved once.
#[derive(Debug)]
struct AuthMetrics {
    /// success, failure, error.
    authn_attempts: [Counter; 3],
    authn_latency: [Histogram; 3],
    /// allowed, denied, error.
    authz_attempts: [Counter; 3],
    authz_latency: [Histogram; 3],
    /// `apiserver_authorization_decisions_total`: RBAC allowed, RBAC denied, AlwaysAllow
    /// allowed.
    decisions: [Counter; 3],
}

/// The metrics of one server: what the frontend records per request, plus whatever the server
/// composition registers (storage latency), encoded together at `/metrics`.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    latencies: HistogramFamily<LatencyLabels>,
    sizes: HistogramFamily<RouteLabels>,
    longrunning: Family<RouteLabels, Gauge>,
    inflight_read_only: Gauge,
    inflight_mutating: Gauge,
    auth: AuthMetrics,
    /// Series by their label values, each followed by `\x1f` (see `series`); each thread
    /// keeps a copy of what it used, keyed by `id` and the same values.
    series: Mutex<HashMap<String, &'static Series>>,
    /// This instance's number and `\x1f`, the start of its keys in the per-thread cache.
    id: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Requests answered, by verb, dry run, group, version, resource, subresource, scope, \
             component and HTTP status code",
            requests.clone(),
        );
        let latencies: HistogramFamily<LatencyLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "apiserver_request_duration_seconds",
            "Time to answer a request in seconds (for a watch, how long it was open), by verb, \
             dry run, group, version, resource, subresource, scope and component",
            latencies.clone(),
        );
        let sizes: HistogramFamily<RouteLabels> = Family::new_with_constructor(size_histogram);
        registry.register(
            "apiserver_response_sizes",
            "Size in bytes of the answers to GET and LIST requests, by verb, group, version, \
             resource, subresource, scope and component",
            sizes.clone(),
        );
        let longrunning = Family::<RouteLabels, Gauge>::default();
        registry.register(
            "apiserver_longrunning_requests",
            "Watches open now, by verb, group, version, resource, subresource, scope and \
             component",
            longrunning.clone(),
        );
        let inflight = Family::<[(&'static str, &'static str); 1], Gauge>::default();
        registry.register(
            "apiserver_current_inflight_requests",
            "Number of requests this apiserver is serving now per request kind (watches not \
             counted)",
            inflight.clone(),
        );
        let inflight_read_only = inflight.get_or_create_owned(&[("request_kind", "readOnly")]);
        let inflight_mutating = inflight.get_or_create_owned(&[("request_kind", "mutating")]);

        let authn_attempts = Family::<ResultLabel, Counter>::default();
        registry.register(
            "authentication_attempts",
            "Requests authenticated, by result: success, failure (401) or error",
            Untyped(authn_attempts.clone()),
        );
        let authn_latency: HistogramFamily<ResultLabel> =
            Family::new_with_constructor(auth_histogram);
        registry.register(
            "authentication_duration_seconds",
            "Time to authenticate a request in seconds, by result",
            authn_latency.clone(),
        );
        let authz_attempts = Family::<ResultLabel, Counter>::default();
        registry.register(
            "authorization_attempts",
            "Authorization checks of requests, by result: allowed, denied or error",
            authz_attempts.clone(),
        );
        let authz_latency: HistogramFamily<ResultLabel> =
            Family::new_with_constructor(auth_histogram);
        registry.register(
            "authorization_duration_seconds",
            "Time to authorize a request in seconds, by result",
            authz_latency.clone(),
        );
        let decisions = Family::<[(&'static str, &'static str); 3], Counter>::default();
        registry.register(
            "apiserver_authorization_decisions",
            "Decisions on requests, by the deciding authorizer's type and name and by decision",
            decisions.clone(),
        );
        let result = |r: &'static str| [("result", r)];
        let authn = ["success", "failure", "error"];
        let authz = ["allowed", "denied", "error"];
        let auth = AuthMetrics {
            authn_attempts: authn.map(|r| authn_attempts.get_or_create_owned(&result(r))),
            authn_latency: authn.map(|r| authn_latency.get_or_create_owned(&result(r))),
            authz_attempts: authz.map(|r| authz_attempts.get_or_create_owned(&result(r))),
            authz_latency: authz.map(|r| authz_latency.get_or_create_owned(&result(r))),
            decisions: [
                ("RBAC", "rbac", "allowed"),
                ("RBAC", "rbac", "denied"),
                ("AlwaysAllow", "alwaysallow", "allowed"),
            ]
            .map(|(t, n, d)| {
                decisions.get_or_create_owned(&[("type", t), ("name", n), ("decision", d)])
            }),
        };
        registry.register_collector(Box::new(ProcessCollector::new()));
        Self {
            registry: Mutex::new(registry),
            requests,
            latencies,
            sizes,
            longrunning,
            inflight_read_only,
            inflight_mutating,
            auth,
            series: Mutex::new(HashMap::new()),
            id: format!("{}\x1f", NEXT_ID.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// Adds metrics of another part of the server (its storage, say) to those `/metrics`
    /// shows.
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.registry.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Starts recording a request; [`Probe::finish`] records its response. `served` tells
    /// whether a resource path names a served type (asked once per new label set).
    pub(crate) fn start<'m>(
        &'m self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        served: impl FnOnce(&str, &str, &str) -> bool,
    ) -> Probe<'m> {
        let started = Instant::now();
        let Some((labels, kind)) = labels(method, path, query, headers) else {
            return Probe::new(self, started, None, Kind::ReadOnly);
        };
        let series = self.series(&labels, served);
        Probe::new(self, started, series, kind)
    }

    fn series(
        &self,
        l: &Labels<'_>,
        served: impl FnOnce(&str, &str, &str) -> bool,
    ) -> Option<&'static Series> {
        thread_local! {
            static KEY: RefCell<String> = const { RefCell::new(String::new()) };
            static SEEN: RefCell<FxMap<&'static Series>> = RefCell::new(FxMap::default());
        }
        let found = KEY.with(|key| {
            let mut key = key.borrow_mut();
            key.clear();
            key.push_str(&self.id);
            for part in [
                l.verb,
                l.dry_run,
                l.group,
                l.version,
                l.resource,
                l.subresource,
                l.scope,
                l.component,
            ] {
                key.push_str(part);
                key.push('\x1f');
            }
            SEEN.with(|seen| seen.borrow().get(key.as_str()).copied())
                .ok_or_else(|| key.clone())
        });
        let key = match found {
            Ok(series) => return Some(series),
            Err(key) => key,
        };
        let known = self
            .series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        let series = match known {
            Some(series) => series,
            None => {
                if l.resource_request && !served(l.group, l.version, l.resource) {
                    return None;
                }
                let series = self.make_series(l);
                *self
                    .series
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(key.clone())
                    .or_insert(series)
            }
        };
        SEEN.with(|seen| seen.borrow_mut().insert(key, series));
        Some(series)
    }

    fn make_series(&self, l: &Labels<'_>) -> &'static Series {
        let labels = LatencyLabels {
            verb: l.verb.into(),
            dry_run: l.dry_run.into(),
            group: l.group.into(),
            version: l.version.into(),
            resource: l.resource.into(),
            subresource: l.subresource.into(),
            scope: l.scope.into(),
            component: l.component.into(),
        };
        let route = RouteLabels {
            verb: l.verb.into(),
            group: l.group.into(),
            version: l.version.into(),
            resource: l.resource.into(),
            subresource: l.subresource.into(),
            scope: l.scope.into(),
            component: l.component.into(),
        };
        Box::leak(Box::new(Series {
            latency: self.latencies.get_or_create_owned(&labels),
            size: matches!(l.verb, "GET" | "LIST").then(|| self.sizes.get_or_create_owned(&route)),
            longrunning: (l.verb == "WATCH").then(|| self.longrunning.get_or_create_owned(&route)),
            labels,
            common: Default::default(),
            others: Mutex::new(Vec::new()),
        }))
    }

    /// Records the outcome of authenticating a request, begun at `started`; returns when it
    /// ended, where authorization (RBAC's cache catch-up and impersonation included) begins.
    pub(crate) fn authentication<T>(
        &self,
        outcome: &Result<T, Status>,
        started: Instant,
    ) -> Instant {
        let i = match outcome {
            Ok(_) => 0,
            Err(s) if s.code == 401 => 1,
            Err(_) => 2,
        };
        let now = Instant::now();
        self.auth.authn_attempts[i].inc();
        self.auth.authn_latency[i].observe((now - started).as_secs_f64());
        now
    }

    /// Records an authorization decision, begun at `started` (`rbac`: RBAC decided; else
    /// everything is allowed).
    pub(crate) fn authorization(&self, outcome: &Result<(), Status>, started: Instant, rbac: bool) {
        let i = match outcome {
            Ok(()) => 0,
            Err(s) if s.code == 403 => 1,
            Err(_) => 2,
        };
        self.auth.authz_attempts[i].inc();
        self.auth.authz_latency[i].observe(started.elapsed().as_secs_f64());
        match (rbac, i) {
            (true, 0 | 1) => self.auth.decisions[i].inc(),
            (false, 0) => self.auth.decisions[2].inc(),
            _ => {}
        }
    }

    /// The Prometheus text exposition of every metric, with `extra` (figures read at scrape
    /// time) after the registered ones.
    pub fn encode(&self, extra: Option<Box<dyn Collector>>) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        drop(registry);
        if let Some(extra) = extra {
            let mut more = Registry::default();
            more.register_collector(extra);
            if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &more) {
                tracing::warn!(error = %e, "encoding metrics");
            }
        }
        out
    }
}

/// One request being recorded: counted in flight until it is dropped; `finish` records it.
pub(crate) struct Probe<'m> {
    metrics: &'m Metrics,
    started: Instant,
    series: Option<&'static Series>,
    inflight: Option<&'m Gauge>,
}

impl<'m> Probe<'m> {
    fn new(
        metrics: &'m Metrics,
        started: Instant,
        series: Option<&'static Series>,
        kind: Kind,
    ) -> Self {
        let inflight = match kind {
            Kind::ReadOnly => Some(&metrics.inflight_read_only),
            Kind::Mutating => Some(&metrics.inflight_mutating),
            Kind::LongRunning => None,
        };
        if let Some(g) = inflight {
            g.inc();
        }
        Self {
            metrics,
            started,
            series,
            inflight,
        }
    }

    /// Records the response (a watch when its stream ends) and hands it back.
    pub(crate) fn finish(self, resp: Response<Body>) -> Response<Body> {
        let Some(series) = self.series else {
            return resp;
        };
        let code = resp.status().as_u16();
        let counter = series.counter(code, &self.metrics.requests);
        if let (Some(open), true) = (&series.longrunning, resp.status().is_success()) {
            open.inc();
            let watch = Watch {
                started: self.started,
                series,
                code,
                family: self.metrics.requests.clone(),
            };
            return resp.map(|inner| with_guard(inner, watch));
        }
        counter.inc();
        series.latency.observe(self.started.elapsed().as_secs_f64());
        if let Some(sizes) = &series.size {
            match resp.body().size_hint().exact() {
                Some(n) => sizes.observe(n as f64),
                // Sent a chunk at a time (a Table or pretty list): counted as it goes out.
                None => return resp.map(|inner| counted(inner, |n| sizes.observe(n as f64))),
            }
        }
        resp
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.inflight {
            g.dec();
        }
    }
}

/// An open watch: counted as long-running until its response body is dropped, then recorded
/// with the watch's whole duration (as kube-apiserver records a watch when it ends).
struct Watch {
    started: Instant,
    series: &'static Series,
    code: u16,
    family: Family<RequestLabels, Counter>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.series.counter(self.code, &self.family).inc();
        self.series
            .latency
            .observe(self.started.elapsed().as_secs_f64());
        if let Some(open) = &self.series.longrunning {
            open.dec();
        }
    }
}

/// Encodes a metric as untyped: kube-apiserver's `authentication_attempts` is a counter whose
/// name has no `_total`, which the client library appends to every counter it encodes.
#[derive(Debug)]
struct Untyped<M>(M);

impl<M: EncodeMetric> EncodeMetric for Untyped<M> {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// The figures of the registry's watch caches and types, read at scrape time: kube-apiserver's
/// `apiserver_storage_objects`, `apiserver_registered_watchers` and
/// `apiserver_watch_events_total`, and Strata's own `strata_watch_cache_*`.
#[derive(Debug)]
pub(crate) struct CacheCollector(pub Arc<strata_registry::Registry>);

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let caches = self.0.cache_metrics();
        // Several caches may share a resource (the versions of a custom resource): one count.
        let mut objects: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &caches {
            let n = objects.entry(m.resource.as_str()).or_default();
            *n = (*n).max(m.objects);
        }
        let mut e = encoder.encode_descriptor(
            "apiserver_storage_objects",
            "Objects stored per resource, as this server's watch cache holds them now.",
            None,
            MetricType::Gauge,
        )?;
        for (resource, n) in objects {
            ConstGauge::new(n as i64).encode(e.encode_family(&[("resource", resource)])?)?;
        }

        let types = self.0.types();
        let by_kind: Vec<_> = types
            .iter()
            .map(|t| {
                let m = t.cache.metrics();
                let labels = [
                    ("group", t.info.group.clone()),
                    ("version", t.info.version.clone()),
                    ("kind", t.info.kind.clone()),
                ];
                (labels, m.watchers, m.events_dispatched)
            })
            .collect();
        let mut e = encoder.encode_descriptor(
            "apiserver_registered_watchers",
            "Watchers open now per group, version and kind.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, watchers, _) in &by_kind {
            ConstGauge::new(*watchers as i64).encode(e.encode_family(labels)?)?;
        }
        let mut e = encoder.encode_descriptor(
            "apiserver_watch_events",
            "Events handed to watchers per group, version and kind.",
            None,
            MetricType::Counter,
        )?;
        for (labels, _, events) in &by_kind {
            ConstCounter::new(*events).encode(e.encode_family(labels)?)?;
        }

        let labels = |m: &strata_registry::CacheMetrics| {
            let (resource, group) = m.resource.split_once('.').unwrap_or((&m.resource, ""));
            [
                ("group", group.to_string()),
                ("resource", resource.to_string()),
            ]
        };
        let families: [(&str, &str, MetricType); 5] = [
            (
                "strata_watch_cache_objects",
                "Objects held by the watch cache.",
                MetricType::Gauge,
            ),
            (
                "strata_watch_cache_window_events",
                "Events in the watch cache's window.",
                MetricType::Gauge,
            ),
            (
                "strata_watch_cache_watchers",
                "Open watchers.",
                MetricType::Gauge,
            ),
            (
                "strata_watch_cache_events_dispatched",
                "Events handed to watchers.",
                MetricType::Counter,
            ),
            (
                "strata_watch_cache_watchers_overflowed",
                "Watchers closed for falling behind.",
                MetricType::Counter,
            ),
        ];
        for (i, (name, help, kind)) in families.into_iter().enumerate() {
            let mut e = encoder.encode_descriptor(name, help, None, kind)?;
            for m in &caches {
                let set = labels(m);
                let family = e.encode_family(&set)?;
                match i {
                    0 => ConstGauge::new(m.objects as i64).encode(family)?,
                    1 => ConstGauge::new(m.window_events as i64).encode(family)?,
                    2 => ConstGauge::new(m.watchers as i64).encode(family)?,
                    3 => ConstCounter::new(m.events_dispatched).encode(family)?,
                    _ => ConstCounter::new(m.watchers_overflowed).encode(family)?,
                }
            }
        }
        let mut e = encoder.encode_descriptor(
            "strata_watch_cache_events_encoded",
            "Object versions encoded by the watch cache, per encoding.",
            None,
            MetricType::Counter,
        )?;
        for m in &caches {
            for (encoding, n) in &m.encodes {
                let [group, resource] = labels(m);
                let set = [group, resource, ("encoding", encoding.clone())];
                ConstCounter::new(*n).encode(e.encode_family(&set)?)?;
            }
        }
        let kept = self.0.kept_encodings();
        gauge(
            &mut encoder,
            "strata_watch_cache_kept_encoding_bytes",
            "Bytes of encodings other than JSON kept on cached objects.",
            kept.bytes() as f64,
        )?;
        gauge(
            &mut encoder,
            "strata_watch_cache_kept_encoding_limit_bytes",
            "The most bytes of encodings other than JSON the caches keep.",
            kept.limit() as f64,
        )?;
        let e = encoder.encode_descriptor(
            "strata_watch_cache_kept_encodings_dropped",
            "Kept encodings dropped to stay within the limit.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(kept.evicted()).encode(e)?;
        Ok(())
    }
}

/// The process' CPU time, memory, open files and start time, read from `/proc` at each scrape
/// (Linux; elsewhere only the start time is reported).
#[derive(Debug)]
struct ProcessCollector {
    start_time: f64,
}

/// `USER_HZ`, the unit of the times in `/proc/<pid>/stat`: 100 on every Linux architecture in
/// use; reading it with `sysconf` is not worth `unsafe`.
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

impl ProcessCollector {
    fn new() -> Self {
        // Boot time plus the start tick in /proc/self/stat; without /proc, now (the metrics
        // are made as the server starts).
        let start_time = process_start().unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        });
        Self { start_time }
    }
}

/// The fields of `/proc/self/stat` after the command name (which may contain spaces).
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

fn process_start() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // starttime is field 22 of the line, the 20th after the command name.
    let ticks: f64 = stat_fields(&stat).get(19)?.parse().ok()?;
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(boot + ticks / CLOCK_TICKS_PER_SEC)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> std::fmt::Result {
    let e = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(e)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let f = stat_fields(&stat);
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
            // utime and stime are fields 14 and 15 of the line; vsize is 23.
            if let (Some(user), Some(system)) = (num(11), num(12)) {
                let e = encoder.encode_descriptor(
                    "process_cpu_seconds",
                    "CPU time the process has used, user and system, in seconds.",
                    None,
                    MetricType::Counter,
                )?;
                ConstCounter::new((user + system) / CLOCK_TICKS_PER_SEC).encode(e)?;
            }
            if let Some(v) = num(20) {
                gauge(
                    &mut encoder,
                    "process_virtual_memory_bytes",
                    "The process' virtual memory size in bytes.",
                    v,
                )?;
            }
        }
        if let Some(rss) = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| status_kb(&s, "VmRSS"))
        {
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "The process' resident set size in bytes.",
                rss,
            )?;
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            let open = dir.count() as f64;
            gauge(
                &mut encoder,
                "process_open_fds",
                "File descriptors the process has open.",
                open,
            )?;
        }
        if let Some(max) = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|s| max_open_files(&s))
        {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Most file descriptors the process may have open (its soft limit).",
                max,
            )?;
        }
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch.",
            self.start_time,
        )
    }
}

/// A `kB` field of `/proc/<pid>/status`, in bytes.
fn status_kb(status: &str, name: &str) -> Option<f64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(':')?;
        let kb: f64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024.0)
    })
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(method: Method, path: &str, query: &str) -> (String, String, String, String) {
        let mut h = HeaderMap::new();
        if method == Method::PATCH && query == "apply" {
            h.insert(
                header::CONTENT_TYPE,
                "application/apply-patch+yaml".parse().unwrap(),
            );
        }
        let (l, _) = labels(&method, path, Some(query), &h).unwrap();
        (
            l.verb.into(),
            l.scope.into(),
            format!("{}/{}/{}/{}", l.group, l.version, l.resource, l.subresource),
            l.dry_run.into(),
        )
    }

    fn s(a: &str, b: &str, c: &str, d: &str) -> (String, String, String, String) {
        (a.into(), b.into(), c.into(), d.into())
    }

    #[test]
    fn verbs_and_scopes_as_kube_apiserver_reports_them() {
        let cm = "/api/v1/namespaces/d/configmaps";
        assert_eq!(
            l(Method::GET, cm, ""),
            s("LIST", "namespace", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::GET, "/api/v1/configmaps", "watch=1"),
            s("WATCH", "cluster", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::GET, "/api/v1/watch/namespaces/d/configmaps/x", ""),
            s("WATCH", "resource", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::GET, cm, "watch=false"),
            s("LIST", "namespace", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::GET, &format!("{cm}/x"), ""),
            s("GET", "resource", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::POST, cm, "dryRun=All"),
            s("POST", "resource", "/v1/configmaps/", "All")
        );
        assert_eq!(
            l(Method::POST, cm, "dryRun=all"),
            s("POST", "resource", "/v1/configmaps/", "invalid")
        );
        assert_eq!(
            l(Method::DELETE, cm, ""),
            s("DELETE", "namespace", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::PATCH, &format!("{cm}/x"), "apply"),
            s("APPLY", "resource", "/v1/configmaps/", "")
        );
        assert_eq!(
            l(Method::PUT, "/api/v1/namespaces/d/finalize", ""),
            s("PUT", "resource", "/v1/namespaces/finalize", "")
        );
        assert_eq!(
            l(Method::GET, "/apis/apps.example.com/v1/widgets", ""),
            s("LIST", "cluster", "apps.example.com/v1/widgets/", "")
        );
        assert_eq!(
            l(
                Method::POST,
                "/api/v1/namespaces/d/serviceaccounts/a/token",
                ""
            ),
            s("POST", "resource", "/v1/serviceaccounts/token", "")
        );
        let h = HeaderMap::new();
        let (r, _) = labels(&Method::GET, "/readyz/etcd", None, &h).unwrap();
        assert_eq!((r.subresource, r.component), ("/readyz", ""));
        let (r, _) = labels(&Method::GET, "/apis/apps", None, &h).unwrap();
        assert_eq!((r.subresource, r.component), ("/apis", "apiserver"));
        assert!(labels(&Method::GET, "/nowhere", None, &h).is_none());
        assert!(labels(&Method::GET, "/healthzfoo", None, &h).is_none());
    }

    #[test]
    fn requests_are_counted_once_per_label_set() {
        let m = Metrics::new();
        let h = HeaderMap::new();
        for code in [200, 200, 404] {
            let p = m.start(
                &Method::GET,
                "/api/v1/namespaces/d/configmaps/x",
                None,
                &h,
                |_, _, _| true,
            );
            let mut resp = Response::new(crate::respond::full("{}"));
            *resp.status_mut() = http::StatusCode::from_u16(code).unwrap();
            p.finish(resp);
        }
        let p = m.start(&Method::GET, "/api/v1/nothings", None, &h, |_, _, _| false);
        p.finish(Response::new(crate::respond::full("")));
        let text = m.encode(None);
        let line = |code: &str| {
            format!(
                "apiserver_request_total{{verb=\"GET\",dry_run=\"\",group=\"\",version=\"v1\",\
                 resource=\"configmaps\",subresource=\"\",scope=\"resource\",\
                 component=\"apiserver\",code=\"{code}\"}}"
            )
        };
        assert!(text.contains(&format!("{} 2\n", line("200"))), "{text}");
        assert!(text.contains(&format!("{} 1\n", line("404"))), "{text}");
        assert!(!text.contains("nothings"), "{text}");
        assert!(text.contains("apiserver_response_sizes_bucket{verb=\"GET\""));
        assert!(text.contains("apiserver_current_inflight_requests{request_kind=\"readOnly\"} 0"));
        assert_eq!(m.series.lock().unwrap().len(), 1);
    }
}
