//! The health endpoints, answered as kube-apiserver answers them, with its check names. `/livez`
//! says the process serves: `ping` (it answers HTTP) and `log` (logging is not blocked); it never
//! touches storage, so a storage outage does not get the process restarted. `/readyz` adds the
//! storage check (`etcd` on etcd, `storage` on the embedded engine: a consistent read of the
//! revision with a short deadline), `informer-sync` (the watch caches and controllers that load
//! state before serving have done so) and `shutdown` (the server was not told to stop), so a
//! replica whose etcd is unreachable, or that is draining, leaves a load balancer's rotation.
//! The older `/healthz` has `ping`, `log` and the storage check. Each endpoint takes `?verbose`
//! (list every check) and `?exclude=<check>`, and serves one path per check (`/readyz/etcd`).
//!
//! A failing endpoint or check answers 503 Service Unavailable where kube-apiserver answers
//! 500 (docs/compatibility.md): the issue that asked for these checks wants load balancers and
//! probes to see "not available now", which is what 503 means.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use http::{header, HeaderValue, Response, StatusCode};

use crate::query::Query;
use crate::respond::{full, Body};
use crate::Frontend;

/// How long the storage check waits for storage to answer before it fails.
pub(crate) const STORAGE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The status of a failing endpoint or check.
const FAILED: u16 = 503;

/// One named check of a health endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// The process answers HTTP.
    Ping,
    /// The log's output was flushed recently ([`LogProbe`]).
    Log,
    /// Storage answers a consistent read of its revision within [`STORAGE_CHECK_TIMEOUT`].
    Storage,
    /// Every part registered with [`Frontend::with_informer`] has loaded its state.
    InformerSync,
    /// The server is not shutting down (`/readyz` only: a server told to stop leaves load
    /// balancers' rotation while it finishes, `--shutdown-delay-duration`).
    Shutdown,
}

impl Check {
    fn name(self, fe: &Frontend) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Log => "log",
            Check::Storage => fe.config.storage_check,
            Check::InformerSync => "informer-sync",
            Check::Shutdown => "shutdown",
        }
    }

    /// Runs the check: `Err` says why it failed (for the log and the single-check path).
    async fn run(self, fe: &Frontend) -> Result<(), String> {
        match self {
            Check::Ping => Ok(()),
            Check::Log => fe.health.log.check(),
            Check::Shutdown => {
                if fe.shutting_down.load(Ordering::SeqCst) {
                    Err("the server is shutting down".into())
                } else {
                    Ok(())
                }
            }
            Check::InformerSync => {
                let waiting: Vec<&str> = fe
                    .health
                    .informers
                    .iter()
                    .filter(|(_, synced)| !synced())
                    .map(|(name, _)| name.as_str())
                    .collect();
                if waiting.is_empty() {
                    Ok(())
                } else {
                    // kube-apiserver's wording, with Go's rendering of a list.
                    Err(format!(
                        "{} informers not started yet: [{}]",
                        waiting.len(),
                        waiting.join(" ")
                    ))
                }
            }
            Check::Storage => {
                let store = fe.registry.store();
                match tokio::time::timeout(STORAGE_CHECK_TIMEOUT, store.consistent_revision()).await
                {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!(
                        "storage did not answer within {STORAGE_CHECK_TIMEOUT:?}"
                    )),
                }
            }
        }
    }
}

/// Whether a part of the server has loaded its state (for `informer-sync`).
pub(crate) type Synced = Arc<dyn Fn() -> bool + Send + Sync>;

/// What the checks other than storage and shutdown read.
pub(crate) struct Health {
    /// The parts `informer-sync` waits for, by name.
    pub(crate) informers: Vec<(String, Synced)>,
    pub(crate) log: LogProbe,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            informers: Vec::new(),
            log: LogProbe::stderr(),
        }
    }
}

/// The `log` check, as kube-apiserver's: once the check first runs, a thread of its own
/// flushes the log's output every `interval` and notes when it got through; logging counts as
/// blocked when that was more than `stale` ago. The server logs to stderr, whose lock a
/// thread stuck writing a log line holds (a full pipe nobody reads), so the flush waits
/// behind it and the check fails instead of the server hanging unnoticed.
pub(crate) struct LogProbe {
    state: Arc<ProbeState>,
    started: Once,
    flush: Arc<dyn Fn() + Send + Sync>,
}

struct ProbeState {
    /// When the probe was made, the origin of `flushed`.
    origin: Instant,
    /// Milliseconds from `origin` to the end of the last flush.
    flushed: AtomicU64,
    interval: Duration,
    stale: Duration,
}

impl LogProbe {
    /// How often kube-apiserver's check flushes the log.
    const INTERVAL: Duration = Duration::from_secs(60);
    /// How old the last flush may be before kube-apiserver's check fails.
    const STALE: Duration = Duration::from_secs(120);

    /// The probe of the server's log on stderr, with kube-apiserver's periods.
    fn stderr() -> Self {
        Self::new(Self::INTERVAL, Self::STALE, || {
            use std::io::Write;
            let _ = std::io::stderr().lock().flush();
        })
    }

    fn new(interval: Duration, stale: Duration, flush: impl Fn() + Send + Sync + 'static) -> Self {
        Self {
            state: Arc::new(ProbeState {
                origin: Instant::now(),
                flushed: AtomicU64::new(0),
                interval,
                stale,
            }),
            started: Once::new(),
            flush: Arc::new(flush),
        }
    }

    fn check(&self) -> Result<(), String> {
        self.started.call_once(|| {
            let (state, flush) = (self.state.clone(), self.flush.clone());
            state.note_flushed();
            let spawned =
                std::thread::Builder::new()
                    .name("log-probe".into())
                    .spawn(move || loop {
                        flush();
                        state.note_flushed();
                        std::thread::sleep(state.interval);
                    });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the log check's thread");
            }
        });
        let since = self
            .state
            .origin
            .elapsed()
            .saturating_sub(Duration::from_millis(
                self.state.flushed.load(Ordering::SeqCst),
            ));
        if since < self.state.stale {
            Ok(())
        } else {
            Err("logging blocked".into())
        }
    }
}

impl ProbeState {
    fn note_flushed(&self) {
        let at = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.flushed.store(at, Ordering::SeqCst);
    }
}

/// The checks of an endpoint (`livez`, `readyz` or `healthz`), in the order they are listed.
fn checks_of(endpoint: &str) -> &'static [Check] {
    match endpoint {
        "livez" => &[Check::Ping, Check::Log],
        "readyz" => &[
            Check::Ping,
            Check::Log,
            Check::Storage,
            Check::InformerSync,
            Check::Shutdown,
        ],
        _ => &[Check::Ping, Check::Log, Check::Storage],
    }
}

/// A plain-text answer with the headers Kubernetes' health handlers send.
fn text(code: u16, body: String) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// Answers `path` if it is a health endpoint (`/livez`, `/readyz`, `/healthz`, or one of their
/// checks below them); `None` for any other path.
pub(super) async fn answer(fe: &Frontend, path: &str, query: &Query) -> Option<Response<Body>> {
    let trimmed = path.strip_prefix('/')?;
    let (endpoint, single) = match trimmed.split_once('/') {
        Some((endpoint, check)) => (endpoint, Some(check)),
        None => (trimmed, None),
    };
    if !matches!(endpoint, "livez" | "readyz" | "healthz") {
        return None;
    }
    let checks = checks_of(endpoint);
    if let Some(wanted) = single {
        // One check by name: `ok`, or the reason it failed.
        let check = checks.iter().find(|c| c.name(fe) == wanted)?;
        return Some(match check.run(fe).await {
            Ok(()) => text(200, "ok".into()),
            Err(e) => {
                tracing::warn!(check = wanted, error = %e, "{endpoint} check failed");
                text(FAILED, format!("internal server error: {e}\n"))
            }
        });
    }
    // As kube-apiserver: a set of names, each excluding the check it names; the ones that name
    // none are listed, sorted, in a warning.
    let mut excluded: BTreeSet<&str> = query.all("exclude").into_iter().collect();
    let mut listing = String::new();
    let mut failed = Vec::new();
    for check in checks {
        let name = check.name(fe);
        if excluded.remove(name) {
            listing.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match check.run(fe).await {
            Ok(()) => listing.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                // The reason stays in the log: the endpoint is open to anyone.
                tracing::warn!(check = name, error = %e, "{endpoint} check failed");
                listing.push_str(&format!("[-]{name} failed: reason withheld\n"));
                failed.push(name);
            }
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        listing.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            quoted.join(",")
        ));
    }
    Some(if !failed.is_empty() {
        // A failure always lists every check.
        text(FAILED, format!("{listing}{endpoint} check failed\n"))
    } else if query.has("verbose") {
        text(200, format!("{listing}{endpoint} check passed\n"))
    } else {
        text(200, "ok".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrontendConfig;
    use std::sync::atomic::AtomicBool;
    use strata_registry::Registry;

    fn frontend() -> Frontend {
        let registry = Registry::with_builtin_types(
            Arc::new(strata_store::MemoryStore::new()),
            Default::default(),
        );
        Frontend::new(Arc::new(registry), FrontendConfig::default())
    }

    async fn get(fe: &Frontend, path_and_query: &str) -> (u16, String) {
        use http_body_util::BodyExt;
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let resp = answer(fe, path, &Query::parse(query))
            .await
            .expect("a health path");
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn informer_sync_waits_for_every_registered_part() {
        let loaded = Arc::new(AtomicBool::new(false));
        let flag = loaded.clone();
        let fe = frontend()
            .with_informer("watch-cache", || true)
            .with_informer("customresourcedefinitions", move || {
                flag.load(Ordering::SeqCst)
            });
        let (code, body) = get(&fe, "/readyz").await;
        assert_eq!(code, 503);
        assert_eq!(
            body,
            "[+]ping ok\n[+]log ok\n[+]storage ok\n[-]informer-sync failed: reason withheld\n\
             [+]shutdown ok\nreadyz check failed\n"
        );
        assert_eq!(
            get(&fe, "/readyz/informer-sync").await,
            (
                503,
                "internal server error: 1 informers not started yet: [customresourcedefinitions]\n"
                    .into()
            )
        );
        // Liveness does not wait for it; excluding it makes the server ready.
        assert_eq!(get(&fe, "/livez").await, (200, "ok".into()));
        assert_eq!(
            get(&fe, "/readyz?exclude=informer-sync").await,
            (200, "ok".into())
        );
        loaded.store(true, Ordering::SeqCst);
        assert_eq!(get(&fe, "/readyz").await, (200, "ok".into()));
        assert_eq!(get(&fe, "/readyz/informer-sync").await, (200, "ok".into()));
    }

    #[tokio::test]
    async fn unknown_exclusions_are_reported_once_and_sorted() {
        let fe = frontend();
        let (code, body) = get(
            &fe,
            "/healthz?verbose&exclude=zeta&exclude=log&exclude=alpha&exclude=zeta",
        )
        .await;
        assert_eq!(code, 200);
        assert_eq!(
            body,
            "[+]ping ok\n[+]log excluded: ok\n[+]storage ok\n\
             warn: some health checks cannot be excluded: no matches for \"alpha\",\"zeta\"\n\
             healthz check passed\n"
        );
    }

    #[test]
    fn the_log_check_fails_while_the_log_is_blocked() {
        // The probe's flush waits on this lock as it would on a stderr stuck in a write.
        let output = Arc::new(std::sync::Mutex::new(()));
        let held = output.clone();
        let probe = LogProbe::new(
            Duration::from_millis(10),
            Duration::from_millis(200),
            move || drop(held.lock().unwrap()),
        );
        assert_eq!(probe.check(), Ok(()));
        let blocked = output.lock().unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while probe.check().is_ok() {
            assert!(Instant::now() < until, "the check never failed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(probe.check(), Err("logging blocked".into()));
        drop(blocked);
        while probe.check().is_err() {
            assert!(Instant::now() < until, "the check never recovered");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
