//! The list benchmark of `cargo xtask bench`: full lists of many ServiceAccounts, unchunked and
//! in `limit=500` pages, with their time and the server's resident memory. It is not a
//! correctness test of paging, though it does check that every walk sees every object.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::{Method, StatusCode};

use super::procfs::{self, PeakSampler};
use super::{create_namespace, mib, seconds, start_strata, NAMESPACE};
use crate::{load, step, Result};

/// Concurrent clients that fill the collection.
pub const CREATE_CLIENTS: usize = 64;
/// Page size of the chunked walk.
pub const PAGE: usize = 500;
/// Each walk runs this many times; the table shows the median time.
pub const RUNS: usize = 3;
/// Pause between filling the collection and listing it, so the store's background work
/// (memtable flushes) does not land in the list figures.
const SETTLE: Duration = Duration::from_secs(2);

/// The size the targets are about.
pub const TARGET_OBJECTS: usize = 100_000;
/// The chunked walk of [`TARGET_OBJECTS`] grows the server's resident memory by less than
/// this many times the stored data.
const TARGET_GROWTH: f64 = 2.0;

/// What one collection size measured.
pub struct ListResult {
    objects: usize,
    create_time: Duration,
    /// The items' JSON as the server sent them, summed: "the size of the stored data".
    data_bytes: usize,
    rss_empty: u64,
    rss_created: u64,
    /// Measured first, so the unchunked list's allocations cannot hide its growth.
    chunked: Walks,
    unchunked: Walks,
}

/// Repeated full walks of the collection with one page size.
struct Walks {
    times: Vec<Duration>,
    requests: usize,
    response_bytes: usize,
    /// Resident memory just before the first walk.
    rss_before: u64,
    /// Highest resident memory seen during any of the walks.
    rss_peak: u64,
    /// Busy time of the machine during the walks, less the server's and ours: a large value
    /// means other processes disturbed the run.
    other_cpu: Duration,
}

impl Walks {
    fn median(&self) -> Duration {
        let mut times = self.times.clone();
        times.sort_unstable();
        times.get(times.len() / 2).copied().unwrap_or_default()
    }

    fn growth(&self) -> u64 {
        self.rss_peak.saturating_sub(self.rss_before)
    }
}

/// Runs the benchmark for each size in `sizes`, each against a fresh server in `scratch`.
pub async fn run(binary: &Path, scratch: &Path, sizes: &[usize]) -> Result<Vec<ListResult>> {
    let mut results = Vec::new();
    for &objects in sizes {
        let mut strata = start_strata(binary, &scratch.join(format!("lists-{objects}"))).await?;
        let (addr, pid) = (strata.addr, strata.pid());
        create_namespace(addr, NAMESPACE).await?;
        let rss_empty = procfs::rss(pid)?;

        step(&format!(
            "lists: creating {objects} ServiceAccounts with {CREATE_CLIENTS} clients"
        ));
        let started = Instant::now();
        let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
        create_many(addr, CREATE_CLIENTS, objects, &path, item_body).await?;
        let create_time = started.elapsed();
        eprintln!(
            "{:.1} s, {:.0} creates/s",
            create_time.as_secs_f64(),
            objects as f64 / create_time.as_secs_f64()
        );
        tokio::time::sleep(SETTLE).await;
        strata.ensure_running()?;
        let rss_created = procfs::rss(pid)?;

        let (chunked, data_bytes) = walks(addr, pid, objects, Some(PAGE)).await?;
        strata.ensure_running()?;
        let (unchunked, _) = walks(addr, pid, objects, None).await?;
        strata.ensure_running()?;
        results.push(ListResult {
            objects,
            create_time,
            data_bytes,
            rss_empty,
            rss_created,
            chunked,
            unchunked,
        });
    }
    Ok(results)
}

/// Creates objects `0..count` by POSTing `body(i)` to `path`, `clients` requests at a time,
/// each client on its own keep-alive connection. Fails on the first answer that is not 201.
async fn create_many(
    addr: SocketAddr,
    clients: usize,
    count: usize,
    path: &str,
    body: fn(usize) -> Bytes,
) -> Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (next, path) = (Arc::clone(&next), path.to_string());
            tokio::spawn(async move {
                let mut conn = load::connect(addr).await?;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return Ok(());
                    }
                    let (status, answer) =
                        load::request_on(&mut conn, addr, Method::POST, &path, Some(body(i)))
                            .await?;
                    if status != StatusCode::CREATED {
                        return Err(format!(
                            "creating object {i}: expected 201, got {status}: {}",
                            String::from_utf8_lossy(&answer[..answer.len().min(300)])
                        )
                        .into());
                    }
                }
            })
        })
        .collect();
    let mut first_error = None;
    for task in tasks {
        let outcome: Result<()> = task.await.unwrap_or_else(|e| Err(e.to_string().into()));
        if let Err(e) = outcome {
            // Stop the others early: they would fail the same way.
            next.store(count, Ordering::Relaxed);
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// A ServiceAccount of a realistic size: a name and two labels.
fn item_body(i: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"apiVersion":"v1","kind":"ServiceAccount","metadata":{{"name":"sa-{i:07}","labels":{{"app.kubernetes.io/name":"bench","app.kubernetes.io/instance":"lists-{}"}}}}}}"#,
        i % 100
    ))
}

/// [`RUNS`] full walks; also returns the items' JSON size from the first.
async fn walks(
    addr: SocketAddr,
    pid: u32,
    objects: usize,
    limit: Option<usize>,
) -> Result<(Walks, usize)> {
    let what = match limit {
        Some(limit) => format!("limit={limit} walk"),
        None => "unchunked list".to_string(),
    };
    step(&format!("lists: {objects} objects, {what} × {RUNS}"));
    let rss_before = procfs::rss(pid)?;
    let mut out = Walks {
        times: Vec::new(),
        requests: 0,
        response_bytes: 0,
        rss_before,
        rss_peak: rss_before,
        other_cpu: Duration::ZERO,
    };
    let mut data_bytes = 0;
    let ours = || -> Result<Duration> {
        Ok(procfs::cpu_time(pid)? + procfs::cpu_time(std::process::id())?)
    };
    let (busy_start, ours_start) = (procfs::machine_busy()?, ours()?);
    for _ in 0..RUNS {
        let sampler = PeakSampler::start(pid)?;
        let walk = walk(addr, limit).await;
        let peak = sampler.finish();
        let walk = walk?;
        // The namespace also holds the ServiceAccount controller's `default`.
        if walk.items != objects + 1 {
            return Err(format!(
                "{what}: saw {} items, expected {objects} and the namespace's default",
                walk.items
            )
            .into());
        }
        eprintln!(
            "{:.3} s, {} request(s), {}, peak RSS {}",
            walk.elapsed.as_secs_f64(),
            walk.requests,
            mib(walk.response_bytes as u64),
            mib(peak)
        );
        out.times.push(walk.elapsed);
        out.requests = walk.requests;
        out.response_bytes = walk.response_bytes;
        out.rss_peak = out.rss_peak.max(peak);
        data_bytes = walk.item_bytes;
    }
    let busy = procfs::machine_busy()?.saturating_sub(busy_start);
    out.other_cpu = busy.saturating_sub(ours()?.saturating_sub(ours_start));
    Ok((out, data_bytes))
}

struct Walk {
    elapsed: Duration,
    requests: usize,
    response_bytes: usize,
    items: usize,
    item_bytes: usize,
}

/// Lists the whole collection on one connection, following `continue` when `limit` is set.
/// The clock stops when the last body has been read.
async fn walk(addr: SocketAddr, limit: Option<usize>) -> Result<Walk> {
    let base = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
    let mut conn = load::connect(addr).await?;
    let mut out = Walk {
        elapsed: Duration::ZERO,
        requests: 0,
        response_bytes: 0,
        items: 0,
        item_bytes: 0,
    };
    let mut token = String::new();
    let started = Instant::now();
    loop {
        let path = match limit {
            None => base.clone(),
            Some(limit) if token.is_empty() => format!("{base}?limit={limit}"),
            Some(limit) => format!("{base}?limit={limit}&continue={}", query_escape(&token)),
        };
        let (status, body) = load::request_on(&mut conn, addr, Method::GET, &path, None).await?;
        out.elapsed = started.elapsed();
        out.requests += 1;
        if status != StatusCode::OK {
            return Err(format!(
                "GET {path}: expected 200, got {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )
            .into());
        }
        out.response_bytes += body.len();
        let page = scan_list(&body).map_err(|e| format!("GET {path}: {e}"))?;
        out.items += page.items;
        out.item_bytes += page.item_bytes;
        if limit.is_none() || page.continue_token.is_empty() {
            return Ok(out);
        }
        token = page.continue_token;
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a query value.
fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// What the paging loop needs from a list body.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ListScan {
    pub(super) resource_version: String,
    continue_token: String,
    pub(super) items: usize,
    /// The items' JSON text, summed.
    pub(super) item_bytes: usize,
}

/// Reads a list body without building a document tree: the top-level `metadata.continue` and
/// `metadata.resourceVersion`, and the number and total JSON size of `items`. Everything else
/// is skipped, though the structure is checked as far as skipping needs.
pub(super) fn scan_list(body: &[u8]) -> Result<ListScan, String> {
    let mut p = Scanner { s: body, i: 0 };
    let mut scan = ListScan::default();
    p.expect(b'{')?;
    if p.peek() == Some(b'}') {
        return Ok(scan);
    }
    loop {
        let key = p.string()?;
        p.expect(b':')?;
        match key {
            b"metadata" if p.peek() == Some(b'{') => {
                p.expect(b'{')?;
                if p.peek() == Some(b'}') {
                    p.i += 1;
                } else {
                    loop {
                        let key = p.string()?;
                        p.expect(b':')?;
                        match key {
                            b"continue" => scan.continue_token = p.string_value()?,
                            b"resourceVersion" => scan.resource_version = p.string_value()?,
                            _ => p.skip_value()?,
                        }
                        if p.comma_or(b'}')? {
                            break;
                        }
                    }
                }
            }
            b"items" if p.peek() == Some(b'[') => {
                p.expect(b'[')?;
                if p.peek() == Some(b']') {
                    p.i += 1;
                } else {
                    loop {
                        p.skip_ws();
                        let start = p.i;
                        p.skip_value()?;
                        scan.items += 1;
                        scan.item_bytes += p.i - start;
                        if p.comma_or(b']')? {
                            break;
                        }
                    }
                }
            }
            _ => p.skip_value()?,
        }
        if p.comma_or(b'}')? {
            return Ok(scan);
        }
    }
}

/// A cursor over JSON text that can skip values without decoding them.
struct Scanner<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn skip_ws(&mut self) {
        while self
            .s
            .get(self.i)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.i += 1;
        }
    }

    /// The next byte that is not whitespace, without consuming it.
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn error(&self, what: &str) -> String {
        format!("malformed list JSON at byte {}: {what}", self.i)
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() == Some(byte) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", char::from(byte))))
        }
    }

    /// Consumes `,` (false: more follows) or `close` (true: the container ended).
    fn comma_or(&mut self, close: u8) -> Result<bool, String> {
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(false)
            }
            Some(b) if b == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(self.error(&format!("expected ',' or '{}'", char::from(close)))),
        }
    }

    /// A string's raw text between the quotes, escapes left as they are.
    fn string(&mut self) -> Result<&'a [u8], String> {
        self.expect(b'"')?;
        let start = self.i;
        while let Some(&b) = self.s.get(self.i) {
            match b {
                b'"' => {
                    self.i += 1;
                    return Ok(&self.s[start..self.i - 1]);
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
        Err(self.error("unterminated string"))
    }

    /// A string value, decoded.
    fn string_value(&mut self) -> Result<String, String> {
        self.skip_ws();
        let start = self.i;
        let raw = self.string()?;
        if raw.contains(&b'\\') {
            serde_json::from_slice(&self.s[start..self.i]).map_err(|e| e.to_string())
        } else {
            String::from_utf8(raw.to_vec()).map_err(|e| e.to_string())
        }
    }

    fn skip_value(&mut self) -> Result<(), String> {
        match self.peek() {
            Some(b'"') => self.string().map(|_| ()),
            Some(b'{' | b'[') => self.skip_container(),
            Some(_) => {
                // A number, true, false or null: everything up to the next delimiter.
                let start = self.i;
                while self.s.get(self.i).is_some_and(|b| {
                    !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    self.i += 1;
                }
                if self.i == start {
                    Err(self.error("expected a value"))
                } else {
                    Ok(())
                }
            }
            None => Err(self.error("unexpected end")),
        }
    }

    /// Skips a whole object or array, counting brackets outside strings.
    fn skip_container(&mut self) -> Result<(), String> {
        let mut depth = 0usize;
        while let Some(&b) = self.s.get(self.i) {
            match b {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.i += 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
        Err(self.error("unterminated object or array"))
    }
}

/// The set-up table: how each collection was filled.
pub fn setup_table(results: &[ListResult]) -> String {
    let mut out = format!(
        "| objects | create ({CREATE_CLIENTS} clients) | creates/s | stored data (item JSON) | \
         server RSS empty | after create |\n|---:|---:|---:|---:|---:|---:|\n"
    );
    for r in results {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {} | {} |",
            r.objects,
            seconds(r.create_time),
            r.objects as f64 / r.create_time.as_secs_f64().max(f64::EPSILON),
            mib(r.data_bytes as u64),
            mib(r.rss_empty),
            mib(r.rss_created),
        );
    }
    out
}

/// The main table: one row per collection size and page size.
pub fn table(results: &[ListResult]) -> String {
    let mut out = format!(
        "| objects | request | requests | time (median of {RUNS}) | items/s | response bytes | \
         RSS before | peak RSS | growth | growth ÷ data | other CPU |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for r in results {
        for (label, walks) in [
            (format!("`limit={PAGE}`"), &r.chunked),
            ("unchunked".to_string(), &r.unchunked),
        ] {
            let median = walks.median();
            let _ = writeln!(
                out,
                "| {} | {label} | {} | {} | {:.0} | {} | {} | {} | {} | {:.2}× | {:.1} s |",
                r.objects,
                walks.requests,
                seconds(median),
                r.objects as f64 / median.as_secs_f64().max(f64::EPSILON),
                mib(walks.response_bytes as u64),
                mib(walks.rss_before),
                mib(walks.rss_peak),
                mib(walks.growth()),
                growth_ratio(walks, r.data_bytes),
                walks.other_cpu.as_secs_f64(),
            );
        }
    }
    out
}

fn growth_ratio(walks: &Walks, data_bytes: usize) -> f64 {
    walks.growth() as f64 / (data_bytes as f64).max(1.0)
}

/// The verdict on the list target.
pub fn verdicts(results: &[ListResult]) -> Vec<(String, bool)> {
    let wanted = format!(
        "{TARGET_OBJECTS} objects in `limit={PAGE}` pages, server RSS growth < \
         {TARGET_GROWTH}× the stored data"
    );
    let verdict = match results.iter().find(|r| r.objects == TARGET_OBJECTS) {
        None => (format!("{wanted}: **not measured**"), false),
        Some(r) => {
            let ratio = growth_ratio(&r.chunked, r.data_bytes);
            let pass = ratio < TARGET_GROWTH;
            (
                format!(
                    "{wanted}: **{}** ({ratio:.2}×: {} over {} of data)",
                    if pass { "PASS" } else { "FAIL" },
                    mib(r.chunked.growth()),
                    mib(r.data_bytes as u64)
                ),
                pass,
            )
        }
    };
    vec![verdict]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_metadata_and_items_are_found() {
        let body = br#"{"kind":"ServiceAccountList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ","remainingItemCount":3},"items":[{"metadata":{"name":"a","labels":{"x":"}]\"{"}}},{"metadata":{"name":"b"}}]}"#;
        let scan = scan_list(body).unwrap();
        assert_eq!(scan.resource_version, "42");
        assert_eq!(scan.continue_token, "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ");
        assert_eq!(scan.items, 2);
        let first = r#"{"metadata":{"name":"a","labels":{"x":"}]\"{"}}}"#;
        let second = r#"{"metadata":{"name":"b"}}"#;
        assert_eq!(scan.item_bytes, first.len() + second.len());
    }

    #[test]
    fn list_scan_ignores_lookalikes_and_order() {
        // Items first, a `continue` key inside an item, whitespace everywhere, escapes.
        let body = br#" { "items" : [ {"metadata":{"continue":"no"}} , 7, "s", null ] ,
            "metadata" : { "selfLink" : "", "continue" : "a\/b" , "resourceVersion":"9" } } "#;
        let scan = scan_list(body).unwrap();
        assert_eq!(scan.continue_token, "a/b");
        assert_eq!(scan.resource_version, "9");
        assert_eq!(scan.items, 4);

        let empty = scan_list(br#"{"metadata":{},"items":[]}"#).unwrap();
        assert_eq!(empty, ListScan::default());
        assert_eq!(scan_list(b"{}").unwrap(), ListScan::default());
    }

    #[test]
    fn malformed_lists_are_errors() {
        for body in [
            &br#"{"items":[{"a":1}"#[..],
            br#"{"items":[{"a":"1}]}"#,
            br#"{"metadata":{"continue":}}"#,
            br#"[]"#,
            b"",
        ] {
            assert!(
                scan_list(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(query_escape("eyJ2Ijo-_.~9"), "eyJ2Ijo-_.~9");
        assert_eq!(query_escape("a+b/c=&d e"), "a%2Bb%2Fc%3D%26d%20e");
        assert_eq!(query_escape("é"), "%C3%A9");
    }

    #[test]
    fn item_bodies_are_json_with_labels() {
        let value: serde_json::Value = serde_json::from_slice(&item_body(1234)).unwrap();
        assert_eq!(value["metadata"]["name"], "sa-0001234");
        assert_eq!(
            value["metadata"]["labels"]["app.kubernetes.io/instance"],
            "lists-34"
        );
    }
}
