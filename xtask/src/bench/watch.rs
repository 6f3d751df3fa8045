//! The watch fan-out benchmark of `cargo xtask bench`: many watchers on one collection, each on
//! its own HTTP/1.1 connection, while writers create objects that carry their send time. It
//! measures delivery, not the watch protocol's guarantees (ordering, resumption), which are
//! the tests' job.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, StatusCode};
use tokio::sync::{mpsc, watch, Semaphore};

use super::lists::scan_list;
use super::procfs::{self, PeakSampler};
use super::{create_namespace, latency, mib, start_strata, NAMESPACE};
use crate::{load, step, Result};

/// The annotation that carries an object's send time: nanoseconds since the run's epoch, an
/// `Instant` shared by writers and watchers (all in this process, so one monotonic clock).
const SENT_AT: &str = "bench/sent-at-ns";
/// Writers of both runs; the paced run needs only a few, but a slow create must not hold up
/// the schedule.
pub const WRITERS: usize = 16;
/// Watch requests being set up at once.
const OPENING: usize = 50;
/// How long opening all watchers may take.
const OPEN_LIMIT: Duration = Duration::from_secs(120);
/// After the writers stop, delivery may stall this long before the rest counts as lost.
pub const DRAIN_IDLE: Duration = Duration::from_secs(10);

/// The target: at this many watchers and this create rate, p99 delivery latency stays below
/// [`TARGET_P99`] and nothing is lost.
pub const TARGET_WATCHERS: usize = 1000;
pub const TARGET_RATE: u64 = 500;
const TARGET_P99: Duration = Duration::from_millis(100);
/// Issue 18's delivery target for the paced runs, over HTTP/1.1 and HTTP/2 alike.
const SHARP_P99: Duration = Duration::from_millis(50);
/// The paced run counts only if the writers reached this fraction of the asked rate.
const RATE_SLACK: f64 = 0.95;

/// Scale of the fan-out runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub watchers: usize,
    /// Creates per second in the paced run.
    pub rate: u64,
    /// Length of each run's write phase.
    pub seconds: u64,
}

/// How writers send.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// Creates scheduled evenly at this many per second, shared by all writers.
    Rate(u64),
    /// Each writer sends its next create as soon as the last one is answered.
    FullSpeed,
}

/// How watchers reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Each watcher on its own HTTP/1.1 connection.
    Http1,
    /// Watches multiplexed over HTTP/2 connections (h2c, prior knowledge), [`H2_STREAMS`] to a
    /// connection, as client-go and kube-rs open them: a new connection once one is full.
    Http2,
}

/// Watches per HTTP/2 connection: the server's default stream limit (Go's 250).
pub const H2_STREAMS: usize = 250;

/// What one run measured.
pub struct FanOut {
    pace: Pace,
    transport: Transport,
    watchers: usize,
    /// Creates answered 201: the events every watcher should see.
    created: u64,
    create_errors: u64,
    create_error_sample: String,
    /// From the first create sent to the last answered.
    write_window: Duration,
    create_latency: Histogram,
    delivered: u64,
    lost: u64,
    /// Events beyond `created` on some watcher: duplicates.
    extra: u64,
    /// From the first create sent to the last event received.
    delivery_window: Duration,
    latency: Histogram,
    /// Watchers whose stream failed or ended early, with the first reason seen.
    broken_watchers: usize,
    broken_sample: String,
    /// ERROR events and ADDED-less lines carrying our annotation.
    odd_events: u64,
    odd_sample: String,
    rss_idle: u64,
    rss_peak: u64,
    server_cpu: Duration,
    client_cpu: Duration,
    /// The machine's busy time less the server's and the client's: other processes, and the
    /// kernel's work for no process in particular. A large share means a disturbed run.
    other_cpu: Duration,
}

impl FanOut {
    fn create_rate(&self) -> f64 {
        self.created as f64 / self.write_window.as_secs_f64().max(f64::EPSILON)
    }

    fn delivered_rate(&self) -> f64 {
        self.delivered as f64 / self.delivery_window.as_secs_f64().max(f64::EPSILON)
    }

    fn label(&self) -> String {
        let pace = match self.pace {
            Pace::Rate(rate) => format!("paced, {rate}/s"),
            Pace::FullSpeed => format!("full speed, {WRITERS} writers"),
        };
        match self.transport {
            Transport::Http1 => pace,
            Transport::Http2 => format!(
                "{pace}, HTTP/2 ({} connections)",
                self.watchers.div_ceil(H2_STREAMS)
            ),
        }
    }
}

/// The paced run, the full-speed run, and the paced run again with the watches multiplexed
/// over HTTP/2, each against a fresh server in `scratch`.
pub async fn run(binary: &Path, scratch: &Path, plan: Plan) -> Result<Vec<FanOut>> {
    raise_open_files_limit(plan.watchers)?;
    let mut results = Vec::new();
    let runs = [
        (Pace::Rate(plan.rate), Transport::Http1),
        (Pace::FullSpeed, Transport::Http1),
        (Pace::Rate(plan.rate), Transport::Http2),
    ];
    for (n, (pace, transport)) in runs.into_iter().enumerate() {
        let mut strata = start_strata(binary, &scratch.join(format!("watch-{n}"))).await?;
        let outcome = fan_out(strata.addr, strata.pid(), plan, pace, transport).await;
        strata.ensure_running()?;
        results.push(outcome?);
    }
    Ok(results)
}

/// Each watcher holds a connection on both sides of loopback, and the server is our child and
/// inherits our limits: raise the soft limit on open files to the hard one. Stable Rust has no
/// `setrlimit`, the workspace forbids `unsafe` (so no raw `libc` call), and the small `rlimit`
/// crate wraps exactly this one call safely.
pub fn raise_open_files_limit(watchers: usize) -> Result<()> {
    let wanted = watchers as u64 + 512;
    let limit = rlimit::increase_nofile_limit(u64::MAX)
        .map_err(|e| format!("raising the open-files limit: {e}"))?;
    if limit < wanted {
        return Err(format!(
            "{watchers} watchers need about {wanted} open files, but the hard limit is {limit}; \
             raise it (ulimit -Hn) or pass a smaller --watchers"
        )
        .into());
    }
    Ok(())
}

pub async fn fan_out(
    addr: SocketAddr,
    pid: u32,
    plan: Plan,
    pace: Pace,
    transport: Transport,
) -> Result<FanOut> {
    create_namespace(addr, NAMESPACE).await?;
    let collection = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
    let (status, body) =
        load::request_once(addr, Method::GET, &format!("{collection}?limit=1"), None).await?;
    if status != StatusCode::OK {
        return Err(format!("listing {collection}: {status}").into());
    }
    let rv = scan_list(&body)?.resource_version;
    let watch_path = format!(
        "{collection}?watch=1&resourceVersion={rv}&timeoutSeconds={}",
        plan.seconds + 600
    );

    let epoch = Instant::now();
    let (stop_tx, stop_rx) = watch::channel(false);
    let delivered = Arc::new(AtomicU64::new(0));
    step(&format!(
        "watch: opening {} watchers on {watch_path} ({transport:?})",
        plan.watchers
    ));
    let watchers = open_watchers(
        addr,
        transport,
        &watch_path,
        plan.watchers,
        epoch,
        &stop_rx,
        &delivered,
    )
    .await
    .inspect_err(|_| {
        // Stops the watchers already open.
        let _ = stop_tx.send(true);
    })?;
    // Let the server finish whatever it does per new watcher before the clock starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = procfs::rss(pid)?;

    step(&format!(
        "watch: {} watchers, writers {} for {} s",
        plan.watchers,
        match pace {
            Pace::Rate(rate) => format!("paced at {rate} creates/s"),
            Pace::FullSpeed => format!("at full speed ({WRITERS})"),
        },
        plan.seconds
    ));
    let sampler = PeakSampler::start(pid)?;
    let server_cpu_start = procfs::cpu_time(pid)?;
    let client_cpu_start = procfs::cpu_time(std::process::id())?;
    let busy_start = procfs::machine_busy()?;
    // The writers get a thread and runtime of their own. On the watchers' runtime a create's
    // request would wait to be written (by its connection's task) behind the thousand watcher
    // tasks a delivery wakes in this process, and that wait would count as delivery latency.
    let writes = {
        let seconds = Duration::from_secs(plan.seconds);
        tokio::task::spawn_blocking(move || -> Result<Writes> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(runtime.block_on(write(addr, &collection, pace, seconds, epoch)))
        })
        .await
        .map_err(|e| format!("writer thread failed: {e}"))??
    };
    let expected = writes.created * plan.watchers as u64;
    drain(&delivered, expected).await;
    let server_cpu = procfs::cpu_time(pid)?.saturating_sub(server_cpu_start);
    let client_cpu = procfs::cpu_time(std::process::id())?.saturating_sub(client_cpu_start);
    let other_cpu = procfs::machine_busy()?
        .saturating_sub(busy_start)
        .saturating_sub(server_cpu + client_cpu);
    let rss_peak = sampler.finish();
    let _ = stop_tx.send(true);

    let mut result = FanOut {
        pace,
        transport,
        watchers: plan.watchers,
        created: writes.created,
        create_errors: writes.errors,
        create_error_sample: writes.error_sample,
        write_window: Duration::from_nanos(writes.last_done_ns.saturating_sub(writes.first_ns)),
        create_latency: writes.latency,
        delivered: 0,
        lost: 0,
        extra: 0,
        delivery_window: Duration::ZERO,
        latency: Histogram::default(),
        broken_watchers: 0,
        broken_sample: String::new(),
        odd_events: 0,
        odd_sample: String::new(),
        rss_idle,
        rss_peak,
        server_cpu,
        client_cpu,
        other_cpu,
    };
    let mut last_ns = 0;
    for task in watchers {
        let w = task
            .await
            .map_err(|e| format!("watcher task failed: {e}"))?;
        result.delivered += w.received;
        result.lost += writes.created.saturating_sub(w.received);
        result.extra += w.received.saturating_sub(writes.created);
        result.latency.merge(&w.latency);
        last_ns = last_ns.max(w.last_ns);
        if let Some(reason) = w.broken {
            result.broken_watchers += 1;
            if result.broken_sample.is_empty() {
                result.broken_sample = reason;
            }
        }
        result.odd_events += w.odd;
        if result.odd_sample.is_empty() {
            result.odd_sample = w.odd_sample;
        }
    }
    result.delivery_window = Duration::from_nanos(last_ns.saturating_sub(writes.first_ns));
    eprintln!(
        "created {} ({:.0}/s, {} errors); delivered {} ({:.0}/s), lost {}, p50 {} p99 {} max {}; \
         server CPU {:.1} s, client CPU {:.1} s, other CPU {:.1} s",
        result.created,
        result.create_rate(),
        result.create_errors,
        result.delivered,
        result.delivered_rate(),
        result.lost,
        latency(result.latency.percentile(50.0)),
        latency(result.latency.percentile(99.0)),
        latency(result.latency.max()),
        server_cpu.as_secs_f64(),
        client_cpu.as_secs_f64(),
        other_cpu.as_secs_f64(),
    );
    Ok(result)
}

type WatcherTask = tokio::task::JoinHandle<Watcher>;

/// Opens `count` watchers, [`OPENING`] at a time, each on its own connection. Returns once all
/// answered 200; fails with the server's answer if any did not.
async fn open_watchers(
    addr: SocketAddr,
    transport: Transport,
    path: &str,
    count: usize,
    epoch: Instant,
    stop: &watch::Receiver<bool>,
    delivered: &Arc<AtomicU64>,
) -> Result<Vec<WatcherTask>> {
    let gate = Arc::new(Semaphore::new(OPENING));
    let (opened_tx, mut opened_rx) = mpsc::channel::<Result<(), String>>(count.max(1));
    let mut h2 = Vec::new();
    if transport == Transport::Http2 {
        for _ in 0..count.div_ceil(H2_STREAMS) {
            h2.push(load::connect_h2(addr).await?);
        }
    }
    let tasks: Vec<WatcherTask> = (0..count)
        .map(|i| {
            let (gate, opened, stop) = (Arc::clone(&gate), opened_tx.clone(), stop.clone());
            let (path, delivered) = (path.to_string(), Arc::clone(delivered));
            let shared = h2.get(i / H2_STREAMS).cloned();
            tokio::spawn(async move {
                let permit = gate.acquire_owned().await;
                let body = match shared {
                    Some(sender) => open_watch_h2(addr, sender, &path).await,
                    None => open_watch(addr, &path)
                        .await
                        .map(|(conn, body)| (Held::Http1(conn), body)),
                };
                drop(permit);
                match body {
                    Ok((_conn, body)) => {
                        let _ = opened.send(Ok(())).await;
                        drop(opened);
                        read_events(body, epoch, stop, &delivered).await
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e.to_string())).await;
                        Watcher::broken(e.to_string())
                    }
                }
            })
        })
        .collect();
    drop(opened_tx);
    let deadline = tokio::time::Instant::now() + OPEN_LIMIT;
    for n in 0..count {
        match tokio::time::timeout_at(deadline, opened_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(format!("opening watcher {n}: {e}").into()),
            Ok(None) => return Err("a watcher task ended while opening".into()),
            Err(_) => {
                return Err(format!(
                    "only {n} of {count} watchers answered within {OPEN_LIMIT:?} (does the \
                     server send the response head before the first event?)"
                )
                .into())
            }
        }
    }
    Ok(tasks)
}

/// What keeps a watcher's connection open while its body is read.
enum Held {
    Http1(#[allow(dead_code)] load::Connection),
    Http2(#[allow(dead_code)] H2Sender),
}

type H2Sender = load::H2Connection;

/// Sends one watch request as a new stream of a shared HTTP/2 connection and waits for the
/// response head.
async fn open_watch_h2(
    addr: SocketAddr,
    mut sender: H2Sender,
    path: &str,
) -> Result<(Held, Incoming)> {
    sender.ready().await?;
    let mut request = load::json_request(addr, Method::GET, path, None)?;
    *request.uri_mut() = format!("http://{addr}{path}").parse()?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    if status != StatusCode::OK {
        return Err(format!("GET {path} over HTTP/2: expected 200, got {status}").into());
    }
    Ok((Held::Http2(sender), response.into_body()))
}

/// Sends one watch request on a new connection and waits for the response head. The sender
/// comes back with the body: the connection must outlive neither.
async fn open_watch(addr: SocketAddr, path: &str) -> Result<(load::Connection, Incoming)> {
    let mut conn = load::connect(addr).await?;
    conn.ready().await?;
    let request = load::json_request(addr, Method::GET, path, None)?;
    let response = conn.send_request(request).await?;
    let status = response.status();
    if status != StatusCode::OK {
        let body = tokio::time::timeout(Duration::from_secs(5), response.into_body().collect())
            .await
            .ok()
            .and_then(|b| b.ok())
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(format!(
            "GET {path}: expected 200, got {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )
        .into());
    }
    Ok((conn, response.into_body()))
}

/// What one watcher saw.
#[derive(Default)]
struct Watcher {
    received: u64,
    latency: Histogram,
    /// When the last event arrived, in nanoseconds since the epoch.
    last_ns: u64,
    broken: Option<String>,
    odd: u64,
    odd_sample: String,
}

impl Watcher {
    fn broken(reason: String) -> Watcher {
        Watcher {
            broken: Some(reason),
            ..Watcher::default()
        }
    }
}

/// Reads newline-delimited watch events until told to stop. Latency is measured from the send
/// time in the object to the arrival of the body frame that completes its line.
async fn read_events(
    mut body: Incoming,
    epoch: Instant,
    mut stop: watch::Receiver<bool>,
    delivered: &AtomicU64,
) -> Watcher {
    let mut out = Watcher::default();
    let mut lines = LineBuffer::default();
    loop {
        let frame = tokio::select! {
            biased;
            _ = stop.changed() => return out,
            frame = body.frame() => frame,
        };
        let data = match frame {
            None => {
                out.broken = Some("the server ended the stream".into());
                return out;
            }
            Some(Err(e)) => {
                out.broken = Some(format!("reading the stream: {e}"));
                return out;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue, // trailers
            },
        };
        let now_ns = nanos_since(epoch);
        let before = out.received;
        lines.push(&data, |line| match parse_event(line) {
            Event::Added(sent_ns) => {
                out.received += 1;
                out.latency.record(now_ns.saturating_sub(sent_ns) / 1000);
            }
            Event::Other => {}
            Event::Odd => {
                out.odd += 1;
                if out.odd_sample.is_empty() {
                    out.odd_sample = String::from_utf8_lossy(&line[..line.len().min(300)]).into();
                }
            }
        });
        if out.received > before {
            out.last_ns = now_ns;
            delivered.fetch_add(out.received - before, Ordering::Relaxed);
        }
    }
}

fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Waits until `expected` events have been delivered, or until delivery stalls.
async fn drain(delivered: &AtomicU64, expected: u64) {
    let mut last = delivered.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    loop {
        let now = delivered.load(Ordering::Relaxed);
        if now >= expected {
            return;
        }
        if now != last {
            last = now;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= DRAIN_IDLE {
            eprintln!("delivery stalled at {now} of {expected} events");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the writers did.
#[derive(Default)]
struct Writes {
    created: u64,
    errors: u64,
    error_sample: String,
    latency: Histogram,
    first_ns: u64,
    last_done_ns: u64,
}

/// Creates objects for `seconds`, each annotated with its send time.
async fn write(
    addr: SocketAddr,
    collection: &str,
    pace: Pace,
    seconds: Duration,
    epoch: Instant,
) -> Writes {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let first_ns = nanos_since(epoch);
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (next, collection) = (Arc::clone(&next), collection.to_string());
            tokio::spawn(async move {
                let mut out = Writes::default();
                let mut conn = None;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    match pace {
                        Pace::Rate(rate) => {
                            let at = Duration::from_nanos(i * 1_000_000_000 / rate.max(1));
                            if at >= seconds {
                                break;
                            }
                            tokio::time::sleep_until((start + at).into()).await;
                        }
                        Pace::FullSpeed if start.elapsed() >= seconds => break,
                        Pace::FullSpeed => {}
                    }
                    create_one(addr, &collection, &mut conn, i, epoch, &mut out).await;
                }
                out
            })
        })
        .collect();
    let mut total = Writes {
        first_ns,
        ..Writes::default()
    };
    for task in tasks {
        match task.await {
            Ok(w) => {
                total.created += w.created;
                total.errors += w.errors;
                if total.error_sample.is_empty() {
                    total.error_sample = w.error_sample;
                }
                total.latency.merge(&w.latency);
                total.last_done_ns = total.last_done_ns.max(w.last_done_ns);
            }
            Err(e) => {
                total.errors += 1;
                total.error_sample = format!("writer task failed: {e}");
            }
        }
    }
    total
}

async fn create_one(
    addr: SocketAddr,
    collection: &str,
    conn: &mut Option<load::Connection>,
    i: u64,
    epoch: Instant,
    out: &mut Writes,
) {
    let sender = match conn {
        Some(sender) => sender,
        None => match load::connect(addr).await {
            Ok(sender) => conn.insert(sender),
            Err(e) => {
                out.errors += 1;
                out.error_sample = format!("connect: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                return;
            }
        },
    };
    let sent_ns = nanos_since(epoch);
    let body = event_body(i, sent_ns);
    let result = load::request_on(sender, addr, Method::POST, collection, Some(body)).await;
    let done_ns = nanos_since(epoch);
    match result {
        Ok((StatusCode::CREATED, _)) => {
            out.created += 1;
            out.latency.record((done_ns - sent_ns) / 1000);
            out.last_done_ns = done_ns;
        }
        Ok((status, body)) => {
            out.errors += 1;
            out.error_sample = format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            );
        }
        Err(e) => {
            out.errors += 1;
            out.error_sample = e.to_string();
            *conn = None;
        }
    }
}

/// A ServiceAccount like the list benchmark's, with its send time.
fn event_body(i: u64, sent_ns: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"apiVersion":"v1","kind":"ServiceAccount","metadata":{{"name":"ev-{i:08}","labels":{{"app.kubernetes.io/name":"bench","app.kubernetes.io/instance":"watch"}},"annotations":{{"{SENT_AT}":"{sent_ns}"}}}}}}"#
    ))
}

/// Splits a byte stream into lines, whatever the frame boundaries. Complete lines inside one
/// frame are handed out in place; only a line split across frames is copied.
#[derive(Default)]
struct LineBuffer {
    partial: Vec<u8>,
}

impl LineBuffer {
    /// Calls `each` for every line that `chunk` completes, without its `\n`; empty lines are
    /// skipped.
    fn push(&mut self, chunk: &[u8], mut each: impl FnMut(&[u8])) {
        let mut rest = chunk;
        if !self.partial.is_empty() {
            let Some(end) = find_byte(rest, b'\n') else {
                self.partial.extend_from_slice(rest);
                return;
            };
            self.partial.extend_from_slice(&rest[..end]);
            each(&self.partial);
            self.partial.clear();
            rest = &rest[end + 1..];
        }
        while let Some(end) = find_byte(rest, b'\n') {
            if end > 0 {
                each(&rest[..end]);
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
    }
}

/// The first `byte` in `haystack`, eight bytes at a time. Every delivered event passes through
/// here twice, and std's own fast byte search is not public.
fn find_byte(haystack: &[u8], byte: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * u64::from(byte);
    let mut chunks = haystack.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        // `chunks_exact(8)` yields only 8-byte slices.
        let word = u64::from_le_bytes(chunk.try_into().unwrap()) ^ pattern;
        // A zero byte in `word` is a match. This sets the high bit of the lowest zero byte
        // exactly; borrows can only add false marks above it.
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return Some(offset + (zeros.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == byte)
        .map(|i| offset + i)
}

/// The first `needle` in `haystack`, found by looking for its byte at `anchor` first: choosing
/// a byte that is rare in the haystack keeps false starts few.
fn find(haystack: &[u8], needle: &[u8], anchor: usize) -> Option<usize> {
    let &key = needle.get(anchor)?;
    let mut from = anchor;
    while let Some(at) = haystack.get(from..).and_then(|rest| find_byte(rest, key)) {
        let start = from + at - anchor;
        if haystack[start..].starts_with(needle) {
            return Some(start);
        }
        from += at + 1;
    }
    None
}

/// One watch event line, as far as the benchmark cares.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// An ADDED event of one of our objects, with its send time.
    Added(u64),
    /// Something without our annotation (a BOOKMARK, say).
    Other,
    /// An ERROR event, or our object in an event that is not ADDED.
    Odd,
}

/// [`SENT_AT`] as a key in compact JSON. Its `/` (at [`SENT_AT_ANCHOR`]) is rare in an event,
/// unlike `"`, so the search looks for that first.
const SENT_AT_KEY: &[u8] = b"\"bench/sent-at-ns\":\"";
const SENT_AT_ANCHOR: usize = 6;

/// Classifies a line by looking for a few byte patterns instead of decoding it: decoding every
/// event on every watcher would cost the client more CPU than the server spends sending it.
fn parse_event(line: &[u8]) -> Event {
    const ADDED: &[u8] = br#""type":"ADDED""#;
    let Some(at) = find(line, SENT_AT_KEY, SENT_AT_ANCHOR) else {
        return if find(line, br#""type":"ERROR""#, 0).is_some() {
            Event::Odd
        } else {
            Event::Other
        };
    };
    let digits = &line[at + SENT_AT_KEY.len()..];
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    let sent = std::str::from_utf8(&digits[..end])
        .ok()
        .and_then(|d| d.parse().ok());
    // The server writes `type` first; look further only if it did not.
    let added = line.starts_with(b"{\"type\":\"ADDED\"") || find(line, ADDED, 0).is_some();
    match sent {
        Some(sent) if added && digits.get(end) == Some(&b'"') => Event::Added(sent),
        _ => Event::Odd,
    }
}

/// Latencies in microseconds, in log-linear buckets: exact below 128 µs, then 64 buckets per
/// power of two, so a reported percentile is at most 1/64 (1.6%) above the true value.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const SUB_BITS: u32 = 6;
const EXACT: u64 = 2 << SUB_BITS;

impl Histogram {
    fn index(value: u64) -> usize {
        if value < EXACT {
            return value as usize;
        }
        let exp = 63 - value.leading_zeros();
        let shift = exp - SUB_BITS;
        let top = value >> shift; // 64..=127
        EXACT as usize + (exp - SUB_BITS - 1) as usize * (1 << SUB_BITS) + (top as usize - 64)
    }

    /// The largest value that lands in bucket `index`.
    fn upper(index: usize) -> u64 {
        let index = index as u64;
        if index < EXACT {
            return index;
        }
        let over = index - EXACT;
        let shift = over / (1 << SUB_BITS) + 1;
        let top = over % (1 << SUB_BITS) + 64;
        ((top + 1) << shift) - 1
    }

    pub fn record(&mut self, value: u64) {
        let index = Self::index(value);
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += 1;
        self.total += 1;
        self.max = self.max.max(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The nearest-rank percentile `p` (0–100), rounded up to its bucket's top.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Duration::from_micros(Self::upper(index).min(self.max)));
            }
        }
        Some(Duration::from_micros(self.max))
    }

    pub fn max(&self) -> Option<Duration> {
        (self.total > 0).then(|| Duration::from_micros(self.max))
    }
}

pub fn table(results: &[FanOut]) -> String {
    let mut out = String::from(
        "| writers | watchers | events | creates/s | create p99 | delivered/s | p50 | p99 | max \
         | lost | server CPU | client CPU | other CPU | server RSS idle → peak |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {} | {:.0} | {} | {} | {} | {} | {:.1} s | {:.1} s | {:.1} s | {} → {} |",
            r.label(),
            r.watchers,
            r.created,
            r.create_rate(),
            latency(r.create_latency.percentile(99.0)),
            r.delivered_rate(),
            latency(r.latency.percentile(50.0)),
            latency(r.latency.percentile(99.0)),
            latency(r.latency.max()),
            r.lost,
            r.server_cpu.as_secs_f64(),
            r.client_cpu.as_secs_f64(),
            r.other_cpu.as_secs_f64(),
            mib(r.rss_idle),
            mib(r.rss_peak),
        );
    }
    out
}

/// Problems worth a line under the table: failed creates, broken streams, odd events.
pub fn problems(results: &[FanOut]) -> Vec<String> {
    let mut out = Vec::new();
    for r in results {
        let run = r.label();
        if r.create_errors > 0 {
            out.push(format!(
                "{run}: {} create(s) failed, e.g. `{}`",
                r.create_errors,
                r.create_error_sample.replace('`', "'")
            ));
        }
        if r.broken_watchers > 0 {
            out.push(format!(
                "{run}: {} watcher stream(s) failed, e.g. `{}`",
                r.broken_watchers,
                r.broken_sample.replace('`', "'")
            ));
        }
        if r.odd_events > 0 {
            out.push(format!(
                "{run}: {} unexpected event(s), e.g. `{}`",
                r.odd_events,
                r.odd_sample.replace('`', "'")
            ));
        }
        if r.extra > 0 {
            out.push(format!("{run}: {} duplicate event(s)", r.extra));
        }
    }
    out
}

pub fn verdicts(results: &[FanOut]) -> Vec<(String, bool)> {
    let wanted = format!(
        "fan-out p99 < {} ms at {TARGET_WATCHERS} watchers × {TARGET_RATE} events/s, none lost",
        TARGET_P99.as_millis()
    );
    let paced = results
        .iter()
        .find(|r| matches!(r.pace, Pace::Rate(_)) && r.created > 0);
    let verdict = match paced {
        None => (format!("{wanted}: **FAIL** (not measured)"), false),
        Some(r) => {
            let rate = match r.pace {
                Pace::Rate(rate) => rate,
                Pace::FullSpeed => 0,
            };
            let p99 = r.latency.percentile(99.0).unwrap_or(Duration::MAX);
            let at_scale = r.watchers == TARGET_WATCHERS && rate == TARGET_RATE;
            let kept_pace = r.create_rate() >= RATE_SLACK * rate as f64;
            let pass = at_scale && kept_pace && r.lost == 0 && p99 < TARGET_P99;
            let mut note = format!("p99 {}, {} lost", latency(Some(p99)), r.lost);
            if !kept_pace {
                let _ = write!(note, ", writers reached only {:.0}/s", r.create_rate());
            }
            if !at_scale {
                let _ = write!(
                    note,
                    "; measured at {} watchers × {rate}/s, not at the target scale",
                    r.watchers
                );
            }
            (
                format!(
                    "{wanted}: **{}** ({note})",
                    if pass { "PASS" } else { "FAIL" }
                ),
                pass,
            )
        }
    };
    let mut out = vec![verdict];
    // Issue 18's sharper target, for every paced run: either transport.
    let sharp = format!(
        "fan-out p99 < {} ms at {TARGET_WATCHERS} watchers, paced, none lost",
        SHARP_P99.as_millis()
    );
    for r in results.iter().filter(|r| matches!(r.pace, Pace::Rate(_))) {
        let p99 = r.latency.percentile(99.0).unwrap_or(Duration::MAX);
        let pass = r.watchers == TARGET_WATCHERS && r.lost == 0 && r.created > 0 && p99 < SHARP_P99;
        out.push((
            format!(
                "{sharp} ({}): **{}** (p99 {}, {} lost)",
                r.label(),
                if pass { "PASS" } else { "FAIL" },
                latency(Some(p99)),
                r.lost
            ),
            pass,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll};

    use hyper::body::Frame;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;

    /// A response body fed through a channel: a watch stream, or one chunk and the end.
    struct ChannelBody(mpsc::UnboundedReceiver<Bytes>);

    impl hyper::body::Body for ChannelBody {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    /// Just enough of an API server for the fan-out client: namespaces and creates answer 201,
    /// a list is empty, and every create goes to every watcher as an ADDED line, split in two
    /// chunks so lines cross frame boundaries.
    async fn fake_server(
        request: Request<Incoming>,
        watchers: Arc<Mutex<Vec<mpsc::UnboundedSender<Bytes>>>>,
    ) -> Result<Response<ChannelBody>, Infallible> {
        let (tx, rx) = mpsc::unbounded_channel();
        let query = request.uri().query().unwrap_or("").to_string();
        let status = match *request.method() {
            Method::GET if query.contains("watch=1") => {
                watchers.lock().unwrap().push(tx);
                return Ok(Response::new(ChannelBody(rx)));
            }
            Method::GET => {
                let _ = tx.send(Bytes::from_static(
                    br#"{"kind":"ServiceAccountList","metadata":{"resourceVersion":"1"},"items":[]}"#,
                ));
                StatusCode::OK
            }
            _ => {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let line = format!(
                    r#"{{"type":"ADDED","object":{}}}
"#,
                    String::from_utf8_lossy(&body)
                );
                let (head, tail) = line.as_bytes().split_at(line.len() / 2);
                if !body.is_empty() {
                    for watcher in watchers.lock().unwrap().iter() {
                        let _ = watcher.send(Bytes::copy_from_slice(head));
                        let _ = watcher.send(Bytes::copy_from_slice(tail));
                    }
                }
                let _ = tx.send(body);
                StatusCode::CREATED
            }
        };
        let mut response = Response::new(ChannelBody(rx));
        *response.status_mut() = status;
        Ok(response)
    }

    /// The whole client side against the fake server: every event reaches every watcher, and
    /// latencies and rates are recorded. No figures are checked; the machine is shared.
    #[test]
    fn fan_out_counts_every_delivery() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let watchers = Arc::new(Mutex::new(Vec::new()));
            tokio::spawn(async move {
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    let watchers = Arc::clone(&watchers);
                    let service = hyper::service::service_fn(move |request| {
                        fake_server(request, Arc::clone(&watchers))
                    });
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service),
                    );
                }
            });
            let plan = Plan {
                watchers: 20,
                rate: 100,
                seconds: 1,
            };
            let pid = std::process::id();
            for pace in [Pace::Rate(plan.rate), Pace::FullSpeed] {
                let r = fan_out(addr, pid, plan, pace, Transport::Http1)
                    .await
                    .unwrap();
                assert!(r.created > 0);
                assert_eq!(r.create_errors, 0, "{}", r.create_error_sample);
                assert_eq!(r.delivered, r.created * 20);
                assert_eq!((r.lost, r.extra, r.odd_events), (0, 0, 0));
                assert_eq!(r.broken_watchers, 0, "{}", r.broken_sample);
                assert_eq!(r.latency.total, r.delivered);
                assert_eq!(r.create_latency.total, r.created);
                assert!(r.delivered_rate() > 0.0 && r.create_rate() > 0.0);
                if matches!(pace, Pace::Rate(_)) {
                    assert_eq!(r.created, 100, "the paced run sends rate × seconds creates");
                }
            }
        });
    }

    fn lines_of(chunks: &[&[u8]]) -> Vec<String> {
        let mut buffer = LineBuffer::default();
        let mut out = Vec::new();
        for chunk in chunks {
            buffer.push(chunk, |line| {
                out.push(String::from_utf8(line.to_vec()).unwrap());
            });
        }
        out
    }

    #[test]
    fn lines_are_split_across_frames() {
        assert_eq!(lines_of(&[b"a\nb\n"]), ["a", "b"]);
        assert_eq!(lines_of(&[b"ab", b"c\nd", b"", b"e", b"\n"]), ["abc", "de"]);
        assert_eq!(lines_of(&[b"a", b"b", b"c"]), Vec::<String>::new());
        assert_eq!(lines_of(&[b"\n\nx\n", b"\ny\n\n"]), ["x", "y"]);
        assert_eq!(lines_of(&[b"x\ny", b"\n"]), ["x", "y"]);
    }

    #[test]
    fn events_are_classified_without_decoding() {
        let body = event_body(7, 123_456_789);
        let object = std::str::from_utf8(&body).unwrap();
        let added = format!(r#"{{"type":"ADDED","object":{object}}}"#);
        assert_eq!(parse_event(added.as_bytes()), Event::Added(123_456_789));
        let reordered = format!(r#"{{"object":{object},"type":"ADDED"}}"#);
        assert_eq!(parse_event(reordered.as_bytes()), Event::Added(123_456_789));
        let modified = format!(r#"{{"type":"MODIFIED","object":{object}}}"#);
        assert_eq!(parse_event(modified.as_bytes()), Event::Odd);
        let error = br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
        assert_eq!(parse_event(error), Event::Odd);
        let bookmark = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#;
        assert_eq!(parse_event(bookmark), Event::Other);
        let truncated =
            br#"{"type":"ADDED","object":{"metadata":{"annotations":{"bench/sent-at-ns":"12"#;
        assert_eq!(parse_event(truncated), Event::Odd);
    }

    #[test]
    fn sent_at_key_matches_the_annotation() {
        assert_eq!(SENT_AT_KEY, format!("\"{SENT_AT}\":\"").as_bytes());
        assert_eq!(SENT_AT_KEY[SENT_AT_ANCHOR], b'/');
    }

    #[test]
    fn byte_search_agrees_with_the_obvious_one() {
        // Every length up to 40 and every position of zero, one or two matches, with bytes
        // that differ from the target in one bit (0x0a vs 0x0b, 0x8a) to tempt the bit trick.
        for len in 0..40 {
            for first in 0..=len {
                for second in first..=len {
                    let mut hay: Vec<u8> =
                        (0..len).map(|i| [b'a', 0x0b, 0x8a, 0x09][i % 4]).collect();
                    for at in [first, second] {
                        if at < len {
                            hay[at] = b'\n';
                        }
                    }
                    let obvious = hay.iter().position(|&b| b == b'\n');
                    assert_eq!(find_byte(&hay, b'\n'), obvious, "{hay:?}");
                }
            }
        }
        assert_eq!(find_byte(&[0u8; 17], 0), Some(0));
        assert_eq!(find_byte(&[0xffu8; 17], 0xff), Some(0));
    }

    #[test]
    fn substring_search() {
        for anchor in 0..3 {
            assert_eq!(find(b"abcabd", b"abd", anchor), Some(3));
            assert_eq!(find(b"abdabd", b"abd", anchor), Some(0));
            assert_eq!(find(b"abcab", b"abd", anchor), None);
            assert_eq!(find(b"ab", b"abc", anchor), None);
            assert_eq!(find(b"xbdabd", b"abd", anchor), Some(3));
        }
        assert_eq!(find(b"xyz", b"", 0), None);
        assert_eq!(find(b"xyz", b"y", 1), None);
    }

    #[test]
    fn histogram_buckets_are_contiguous_and_tight() {
        for value in (0..5000).chain([1 << 20, (1 << 20) + 12_345, u64::from(u32::MAX)]) {
            let index = Histogram::index(value);
            assert!(Histogram::upper(index) >= value, "{value}");
            if index > 0 {
                assert!(Histogram::upper(index - 1) < value, "{value}");
            }
            assert!(Histogram::upper(index) - value <= value / 64, "{value}");
        }
    }

    #[test]
    fn histogram_percentiles() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(50.0), None);
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), Some(Duration::from_micros(50)));
        assert_eq!(h.percentile(99.0), Some(Duration::from_micros(99)));
        assert_eq!(h.percentile(0.0), Some(Duration::from_micros(1)));

        let mut other = Histogram::default();
        for _ in 0..100 {
            other.record(80_000);
        }
        h.merge(&other);
        assert_eq!(h.max(), Some(Duration::from_micros(80_000)));
        let p99 = h.percentile(99.0).unwrap().as_micros() as u64;
        assert!((80_000..=80_000 + 80_000 / 64).contains(&p99), "{p99}");
        assert_eq!(h.percentile(25.0), Some(Duration::from_micros(50)));
    }
}
