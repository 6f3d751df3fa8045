//! The list-format benchmark of `cargo xtask bench`: one collection of 10,000 ServiceAccounts
//! listed whole over HTTP in each response format (JSON, YAML, protobuf, CBOR, and a Table as
//! kubectl asks for one), uncompressed, from one client. It measures what a client waits for
//! and receives, and checks that each answer is the format asked for.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};

use super::{median, start_strata_with};
use crate::load::{self, Connection};
use crate::{step, Result};

/// The section of `docs/benchmarks.md` this part rewrites.
pub const SECTION: &str = "List formats";
/// Objects in the collection.
pub const OBJECTS: usize = 10_000;
/// Full lists per format; the table shows the median.
pub const RUNS: usize = 5;
/// Concurrent clients that fill the collection.
const CREATE_CLIENTS: usize = 32;
const NAMESPACE: &str = "default";

/// The formats: name, `Accept` value and the answer's media type.
const FORMATS: [(&str, &str, &str); 5] = [
    ("JSON", "application/json", "application/json"),
    ("YAML", "application/yaml", "application/yaml"),
    (
        "protobuf",
        "application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf",
    ),
    ("CBOR", "application/cbor", "application/cbor"),
    (
        "Table",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/json",
    ),
];

/// What one format measured.
pub struct FormatResult {
    name: &'static str,
    times: Vec<Duration>,
    bytes: usize,
}

impl FormatResult {
    fn median(&self) -> Duration {
        median(&self.times)
    }
}

fn list_request(addr: SocketAddr, accept: &str) -> Result<Request<Full<Bytes>>> {
    Ok(Request::builder()
        .method(Method::GET)
        .uri(format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts"))
        .header(HOST, addr.to_string())
        .header(ACCEPT, accept)
        .header(ACCEPT_ENCODING, "identity")
        .body(Full::new(Bytes::new()))?)
}

/// Fills the collection with [`OBJECTS`] ServiceAccounts, each with labels, an annotation and
/// secret references, like objects in use.
async fn fill(addr: SocketAddr) -> Result<()> {
    super::create_service_accounts(addr, NAMESPACE, OBJECTS, CREATE_CLIENTS, |i| {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": format!("sa-{i:05}"),
                "labels": {"app": "bench", "shard": (i % 16).to_string()},
                "annotations": {"bench.strata.dev/owner": format!("team-{}", i % 7)},
            },
            "secrets": [{"name": format!("token-{i}")}],
            "imagePullSecrets": [{"name": "registry"}],
        })
    })
    .await
}

/// Lists the collection [`RUNS`] times in one format on `conn`, checking every answer.
async fn measure(
    conn: &mut Connection,
    addr: SocketAddr,
    name: &'static str,
    accept: &str,
    media_type: &str,
) -> Result<FormatResult> {
    let mut times = Vec::with_capacity(RUNS);
    let mut bytes = 0;
    for _ in 0..RUNS {
        let request = list_request(addr, accept)?;
        let started = Instant::now();
        let (status, headers, body) = load::send_full(conn, request).await?;
        times.push(started.elapsed());
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if status != StatusCode::OK || !content_type.starts_with(media_type) {
            return Err(format!(
                "{name} list: {status}, Content-Type {content_type:?}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )
            .into());
        }
        let member = match name {
            "JSON" => "items",
            "Table" => "rows",
            _ => "",
        };
        if !member.is_empty() {
            let list: serde_json::Value = serde_json::from_slice(&body)?;
            let items = list[member].as_array().map_or(0, Vec::len);
            // The namespace also holds the ServiceAccount controller's `default`.
            if items != OBJECTS + 1 || (name == "Table" && list["kind"] != "Table") {
                return Err(format!(
                    "{name} list: {items} {member}, expected {OBJECTS} and the namespace's default"
                )
                .into());
            }
        }
        bytes = body.len();
    }
    Ok(FormatResult { name, times, bytes })
}

/// Starts a server with CBOR on, fills it and lists it in every format.
pub async fn run(binary: &Path, scratch: &Path) -> Result<Vec<FormatResult>> {
    let mut strata = start_strata_with(
        binary,
        &scratch.join("formats"),
        &["--feature-gates", "CBORServingAndStorage=true"],
    )
    .await?;
    let addr = strata.addr;
    step(&format!("formats: creating {OBJECTS} ServiceAccounts"));
    fill(addr).await?;
    let mut conn = load::connect(addr).await?;
    // One list first, so the cache's per-object encodings exist for every format equally.
    for (_, accept, _) in FORMATS {
        load::send_full(&mut conn, list_request(addr, accept)?).await?;
    }
    let mut results = Vec::new();
    for (name, accept, media_type) in FORMATS {
        step(&format!("formats: {RUNS} lists of {OBJECTS} as {name}"));
        results.push(measure(&mut conn, addr, name, accept, media_type).await?);
        strata.ensure_running()?;
    }
    Ok(results)
}

/// The table: per format, the median time of a full list, its size, throughput and the ratio
/// to JSON.
pub fn table(results: &[FormatResult]) -> String {
    let json = results
        .iter()
        .find(|r| r.name == "JSON")
        .map(FormatResult::median);
    let mut out = String::from(
        "| format | median list time | response bytes | MB/s | time vs JSON |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for r in results {
        let t = r.median();
        let mbps = r.bytes as f64 / 1e6 / t.as_secs_f64().max(1e-9);
        let ratio = json.map_or(String::from("–"), |j| {
            format!("{:.2}×", t.as_secs_f64() / j.as_secs_f64().max(1e-9))
        });
        let _ = writeln!(
            out,
            "| {} | {:.1} ms | {} | {mbps:.0} | {ratio} |",
            r.name,
            t.as_secs_f64() * 1e3,
            r.bytes
        );
    }
    out
}

/// The section for `docs/benchmarks.md`.
pub fn section(header: &str, table: &str) -> String {
    format!(
        "## {SECTION}\n\nOne collection of {OBJECTS} ServiceAccounts (labels, an annotation and \
         secret references each) listed whole, {RUNS} times per format, by one client on one \
         keep-alive connection with `Accept-Encoding: identity`; the server runs with \
         `CBORServingAndStorage=true`. The Table is asked for as kubectl asks \
         (`application/json;as=Table;v=v1;g=meta.k8s.io`: name, secrets and age columns, each \
         row with the object's metadata). Each answer is checked to be 200 in the format asked \
         for (and, for JSON and the Table, to hold every item). Times are the client's, from \
         request to last byte.\n\n{header}\n{table}"
    )
}
