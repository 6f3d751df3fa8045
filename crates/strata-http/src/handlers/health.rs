//! The health endpoints, answered as kube-apiserver answers them. `/livez` says the process
//! serves (its one check, `ping`, never touches storage, so a storage outage does not get the
//! process restarted); `/readyz` and the older `/healthz` also ask storage for its current
//! revision with a short deadline, so a replica whose etcd is unreachable leaves a load
//! balancer's rotation until it is back. Each endpoint takes `?verbose` (list every check) and
//! `?exclude=<check>`, and serves one path per check (`/readyz/ping`, `/readyz/etcd`).

use std::time::Duration;

use http::{header, HeaderValue, Response, StatusCode};

use crate::query::Query;
use crate::respond::{full, Body};
use crate::Frontend;

/// How long the storage check waits for storage to answer before it fails.
pub(crate) const STORAGE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// One named check of a health endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// The process answers HTTP.
    Ping,
    /// Storage answers a consistent read of its revision within [`STORAGE_CHECK_TIMEOUT`].
    Storage,
    /// The server is not shutting down (`/readyz` only: a server told to stop leaves load
    /// balancers' rotation while it finishes, `--shutdown-delay-duration`).
    Shutdown,
}

impl Check {
    fn name(self, fe: &Frontend) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Storage => fe.config.storage_check,
            Check::Shutdown => "shutdown",
        }
    }

    /// Runs the check: `Err` says why it failed (for the log and the single-check path).
    async fn run(self, fe: &Frontend) -> Result<(), String> {
        match self {
            Check::Ping => Ok(()),
            Check::Shutdown => {
                if fe.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
                    Err("the server is shutting down".into())
                } else {
                    Ok(())
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

/// The checks of an endpoint (`livez`, `readyz` or `healthz`), in the order they are listed.
fn checks_of(endpoint: &str) -> &'static [Check] {
    match endpoint {
        "livez" => &[Check::Ping],
        "readyz" => &[Check::Ping, Check::Storage, Check::Shutdown],
        _ => &[Check::Ping, Check::Storage],
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
                text(500, format!("internal server error: {e}\n"))
            }
        });
    }
    let mut excluded: Vec<&str> = query
        .all("exclude")
        .into_iter()
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let mut listing = String::new();
    let mut failed = Vec::new();
    for check in checks {
        let name = check.name(fe);
        if let Some(at) = excluded.iter().position(|e| *e == name) {
            excluded.remove(at);
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
        text(500, format!("{listing}{endpoint} check failed\n"))
    } else if query.has("verbose") {
        text(200, format!("{listing}{endpoint} check passed\n"))
    } else {
        text(200, "ok".into())
    })
}
