//! The request-metrics benchmark of `cargo xtask bench --only metrics`: what recording every
//! request in `/metrics` costs get throughput. Two servers run side by side, one as shipped and
//! one started with `STRATA_REQUEST_METRICS=off` (no request, authentication, authorization or
//! storage latency recording), each holding the same ServiceAccount; 64 clients get it by name
//! from one server at a time, in rounds that alternate between the two.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hyper::{Method, StatusCode};

use super::crd::{add, measure_scenario, service_account};
use super::{free_addr, latency, wait_ready, ChildGuard, Strata, WARMUP};
use crate::load::{self, Outcome, Scenario, Workload};
use crate::{step, Result};

/// The section of `docs/benchmarks.md` this part rewrites.
pub const SECTION: &str = "Request metrics cost";
/// Concurrent clients of every measurement.
pub const CLIENTS: usize = 64;
/// Measurements of each server. Each round measures both, the one measured first alternating
/// from round to round, so that drift in the machine's load falls on both alike.
pub const ROUNDS: usize = 6;
/// The target: with its metrics, the server answers at least this share of the gets
/// it answers without (their cost under 3%).
const TARGET: f64 = 0.97;

const NAMESPACE: &str = "default";
/// The ServiceAccount every client reads.
const NAME: &str = "bench-get";

fn path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{NAME}")
}

/// Which of the two servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// As shipped: every request recorded.
    On,
    /// `STRATA_REQUEST_METRICS=off`.
    Off,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::On => "get ServiceAccount, metrics on",
            Mode::Off => "get ServiceAccount, metrics off",
        }
    }

    fn env(self) -> &'static str {
        match self {
            Mode::On => "on",
            Mode::Off => "off",
        }
    }
}

/// What one server measured over all its rounds.
pub struct Row {
    mode: Mode,
    outcome: Outcome,
    /// Requests per second of each round, in order.
    rounds: Vec<f64>,
    /// The server's CPU time within the measured windows.
    server_cpu: Duration,
    /// The machine's busy time within the measured windows less the server's.
    rest_cpu: Duration,
}

impl Row {
    fn cpu_per_request(&self) -> Option<Duration> {
        let ok = u32::try_from(self.outcome.ok).ok().filter(|n| *n > 0)?;
        Some(self.server_cpu / ok)
    }

    fn cores(&self, used: Duration) -> f64 {
        used.as_secs_f64() / self.outcome.measured.as_secs_f64().max(f64::EPSILON)
    }
}

/// Everything one run measured: the server with metrics, then the one without.
pub struct Results {
    rows: [Row; 2],
    /// Bytes of the get answer.
    answer_bytes: usize,
}

/// Starts `strata serve` on RocksDB (plain HTTP, anonymous, AlwaysAllow, as the other parts)
/// with `STRATA_REQUEST_METRICS` set for `mode`, and waits until it is ready.
async fn start(binary: &Path, dir: &Path, mode: Mode) -> Result<Strata> {
    let addr = free_addr()?;
    let mut cmd = super::serve_command(binary, addr, dir);
    cmd.env("STRATA_REQUEST_METRICS", mode.env());
    let mut child = ChildGuard::spawn("strata", cmd, &dir.with_extension("log"))?;
    wait_ready(&mut child, addr, "/readyz", Duration::from_secs(60)).await?;
    Ok(Strata { child, addr })
}

/// Creates the ServiceAccount the clients read; returns the size of its get answer.
async fn seed(addr: SocketAddr) -> Result<usize> {
    let collection = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
    let body = service_account(NAME).to_string();
    let (status, answer) = load::request_once(addr, Method::POST, &collection, Some(body)).await?;
    if status != StatusCode::CREATED {
        return Err(format!(
            "creating {collection}/{NAME}: expected 201, got {status}: {}",
            String::from_utf8_lossy(&answer)
        )
        .into());
    }
    let (status, answer) = load::request_once(addr, Method::GET, &path(), None).await?;
    if status != StatusCode::OK {
        return Err(format!("getting {}: expected 200, got {status}", path()).into());
    }
    Ok(answer.len())
}

/// Checks that each server records requests as its mode says: after the seeding requests the
/// server with metrics has counted some, the one without none.
async fn check_mode(addr: SocketAddr, mode: Mode) -> Result<()> {
    let (status, body) = load::request_once(addr, Method::GET, "/metrics", None).await?;
    if status != StatusCode::OK {
        return Err(format!("GET /metrics answered {status}").into());
    }
    let text = String::from_utf8_lossy(&body);
    let counted = text
        .lines()
        .any(|l| l.starts_with("apiserver_request_total{"));
    if counted != (mode == Mode::On) {
        return Err(format!(
            "the server started with STRATA_REQUEST_METRICS={} {} requests: is the binary \
             older than the variable?",
            mode.env(),
            if counted { "counts" } else { "does not count" }
        )
        .into());
    }
    Ok(())
}

/// Starts both servers in `scratch`, stores the ServiceAccount in each, then measures them in
/// turn, [`ROUNDS`] times each, each time for `measure` after [`WARMUP`].
pub async fn run(binary: &Path, scratch: &Path, measure: Duration) -> Result<Results> {
    let mut servers = Vec::new();
    let mut answer_bytes = 0;
    for mode in [Mode::On, Mode::Off] {
        let server = start(
            binary,
            &scratch.join(format!("metrics-{}", mode.env())),
            mode,
        )
        .await?;
        answer_bytes = seed(server.addr).await?;
        check_mode(server.addr, mode).await?;
        servers.push(server);
    }
    let mut rows = [Mode::On, Mode::Off].map(|mode| Row {
        mode,
        outcome: Outcome::default(),
        rounds: Vec::new(),
        server_cpu: Duration::ZERO,
        rest_cpu: Duration::ZERO,
    });
    let mut next_client = 0;
    for round in 1..=ROUNDS {
        // On first in odd rounds, off first in even ones.
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let (row, server) = (&mut rows[i], &mut servers[i]);
            step(&format!(
                "metrics: {}, {CLIENTS} clients, round {round}/{ROUNDS}: {WARMUP:?} warm-up + \
                 {measure:?}",
                row.mode.label()
            ));
            let scenario = Scenario {
                addr: server.addr,
                clients: CLIENTS,
                first_client: next_client,
                workload: Workload::Get { path: path() },
                expect: StatusCode::OK,
                warmup: WARMUP,
                measure,
                access: load::Access::default(),
                http2_connections: 0,
            };
            next_client += CLIENTS;
            let (outcome, cpu, rest) = measure_scenario(&scenario, server.pid()).await?;
            eprintln!(
                "{:.0} requests/s, {} error(s)",
                outcome.rps(),
                outcome.error_count()
            );
            row.rounds.push(outcome.rps());
            add(&mut row.outcome, outcome);
            row.server_cpu += cpu;
            row.rest_cpu += rest;
            server.ensure_running()?;
        }
    }
    for row in &mut rows {
        row.outcome.latencies_ns.sort_unstable();
    }
    Ok(Results { rows, answer_bytes })
}

fn on(results: &Results) -> &Row {
    &results.rows[0]
}

fn off(results: &Results) -> &Row {
    &results.rows[1]
}

/// The table: each server's rate, latency, errors and CPU, then the ratios on/off.
pub fn table(results: &Results) -> String {
    let mut out = String::from(
        "| scenario | clients | requests/s | p50 | p99 | errors | server CPU per request | \
         server CPU | rest of machine | requests/s of each round |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in &results.rows {
        let rounds: Vec<String> = r.rounds.iter().map(|x| format!("{x:.0}")).collect();
        let _ = writeln!(
            out,
            "| {} | {CLIENTS} | {:.0} | {} | {} | {} | {} | {:.2} cores | {:.2} cores | {} |",
            r.mode.label(),
            r.outcome.rps(),
            latency(r.outcome.percentile(50.0)),
            latency(r.outcome.percentile(99.0)),
            r.outcome.error_count(),
            r.cpu_per_request()
                .map_or("–".into(), |d| format!("{:.2} µs", d.as_secs_f64() * 1e6)),
            r.cores(r.server_cpu),
            r.cores(r.rest_cpu),
            rounds.join(", "),
        );
    }
    let (on, off) = (on(results), off(results));
    let rate = (off.outcome.rps() > 0.0).then(|| on.outcome.rps() / off.outcome.rps());
    let cpu = match (on.cpu_per_request(), off.cpu_per_request()) {
        (Some(a), Some(b)) if !b.is_zero() => Some((a.as_secs_f64() / b.as_secs_f64(), a, b)),
        _ => None,
    };
    let _ = write!(
        out,
        "\nWith metrics against without: requests/s {}; server CPU per request {}.\n",
        rate.map_or("–".into(), |r| format!("{:.1}%", r * 100.0)),
        cpu.map_or("–".into(), |(r, a, b)| format!(
            "{:.1}% ({:+.2} µs a request)",
            r * 100.0,
            (a.as_secs_f64() - b.as_secs_f64()) * 1e6
        )),
    );
    let pairs = round_ratios(results);
    if !pairs.is_empty() {
        let shown: Vec<String> = pairs.iter().map(|r| format!("{:.1}%", r * 100.0)).collect();
        let _ = writeln!(
            out,
            "Requests/s with against without, round by round (the two measured back to back): \
             {}; median {:.1}%.",
            shown.join(", "),
            median(&pairs) * 100.0
        );
    }
    out
}

/// Each round's rate with metrics over its rate without: the two were measured one right after
/// the other, so a change in the machine's load between rounds cancels out.
fn round_ratios(results: &Results) -> Vec<f64> {
    let (on, off) = (on(results), off(results));
    on.rounds
        .iter()
        .zip(&off.rounds)
        .filter(|(_, off)| **off > 0.0)
        .map(|(on, off)| on / off)
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Problems worth a line: errors, with a sample answer.
pub fn problems(results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    for r in &results.rows {
        for (kind, (count, sample)) in &r.outcome.errors {
            out.push(format!(
                "{}: {count} × {kind} `{}`",
                r.mode.label(),
                sample.replace('`', "'")
            ));
        }
    }
    out
}

/// The target: the metrics cost under 3% of get throughput at 64 clients. Errors on
/// either server fail it whatever the rates.
pub fn verdicts(results: &Results) -> Vec<(String, bool)> {
    let (on, off) = (on(results), off(results));
    let wanted = format!(
        "{} ≥ {:.0}% of {}, {CLIENTS} clients (the metrics cost under {:.0}%)",
        on.mode.label(),
        TARGET * 100.0,
        off.mode.label(),
        (1.0 - TARGET) * 100.0
    );
    if off.outcome.rps() <= 0.0 {
        return vec![(format!("{wanted}: **FAIL** (not measured)"), false)];
    }
    let ratio = on.outcome.rps() / off.outcome.rps();
    let errors = on.outcome.error_count() + off.outcome.error_count();
    let pass = ratio >= TARGET && errors == 0;
    let verdict = if pass { "PASS" } else { "FAIL" };
    let note = if errors > 0 {
        format!(", {errors} errors")
    } else {
        String::new()
    };
    vec![(
        format!("{wanted}: **{verdict}** ({:.1}%{note})", ratio * 100.0),
        pass,
    )]
}

/// The section for `docs/benchmarks.md`.
pub fn section(header: &str, results: &Results, measure: Duration) -> String {
    let mut out = format!("## {SECTION}\n\n{header}");
    let _ = write!(
        out,
        "\nTwo fresh `strata serve --insecure-http --anonymous-auth=true \
         --authorization-mode=AlwaysAllow` on RocksDB, side by side: one as shipped, one \
         started with `STRATA_REQUEST_METRICS=off`, which skips recording requests in the \
         request, authentication and authorization metrics and timing storage calls (see \
         [What recording costs](operations.md#what-recording-costs)). Each holds the same \
         ServiceAccount, `{NAMESPACE}/{NAME}` ({bytes} bytes per get answer), which {CLIENTS} \
         keep-alive HTTP/1.1 clients get by name, from one server at a time while the other \
         idles. {ROUNDS} rounds, each measuring both servers for {seconds} s after {warmup} s of \
         warm-up, the server measured first alternating from round to round; a row sums its \
         rounds. Only requests that start after a warm-up and end within its window count. CPU \
         columns are busy cores within the measured windows: the server's, and the rest of the \
         machine (the load generator, and anything else running). Server and load generator \
         share the machine's cores, so a round's rate moves with whatever else runs (a build \
         starting halfway through a run moves it by more than the 3% the target is about): \
         compare the spread of the rounds with that difference. The round-by-round ratios \
         compare two windows a few seconds apart, and their median is the figure least moved \
         by such a change; the verdict is on the totals.\n\n",
        bytes = results.answer_bytes,
        seconds = measure.as_secs(),
        warmup = WARMUP.as_secs(),
    );
    out.push_str(&table(results));
    let problems = problems(results);
    if !problems.is_empty() {
        out.push_str("\nErrors:\n\n");
        for line in problems {
            let _ = writeln!(out, "- {line}");
        }
    }
    out.push_str("\nTarget:\n\n");
    for (line, _) in verdicts(results) {
        let _ = writeln!(out, "- {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: Mode, ok: u64, cpu_ms: u64, errors: u64) -> Row {
        let mut outcome = Outcome {
            ok,
            measured: Duration::from_secs(1),
            ..Outcome::default()
        };
        if errors > 0 {
            outcome
                .errors
                .insert("HTTP 500".into(), (errors, "oops".into()));
        }
        Row {
            mode,
            outcome,
            rounds: vec![ok as f64],
            server_cpu: Duration::from_millis(cpu_ms),
            rest_cpu: Duration::ZERO,
        }
    }

    fn results(on: u64, off: u64, errors: u64) -> Results {
        Results {
            rows: [
                row(Mode::On, on, 1030, errors),
                row(Mode::Off, off, 1000, 0),
            ],
            answer_bytes: 1600,
        }
    }

    #[test]
    fn the_target_is_97_percent_of_the_rate_without_metrics() {
        let pass = verdicts(&results(9700, 10_000, 0));
        assert!(pass[0].1, "{pass:?}");
        assert!(pass[0].0.contains("**PASS** (97.0%)"), "{}", pass[0].0);
        let fail = verdicts(&results(9699, 10_000, 0));
        assert!(
            !fail[0].1 && fail[0].0.contains("**FAIL** (97.0%)"),
            "{fail:?}"
        );
        let errors = verdicts(&results(10_000, 10_000, 2));
        assert!(
            !errors[0].1 && errors[0].0.contains("2 errors"),
            "{errors:?}"
        );
        let none = verdicts(&results(10_000, 0, 0));
        assert!(!none[0].1 && none[0].0.contains("not measured"), "{none:?}");
    }

    #[test]
    fn table_has_both_servers_and_their_ratios() {
        let t = table(&results(9800, 10_000, 0));
        assert!(
            t.contains(&format!("| {} | 64 | 9800 |", Mode::On.label())),
            "{t}"
        );
        assert!(
            t.contains(&format!("| {} | 64 | 10000 |", Mode::Off.label())),
            "{t}"
        );
        // 1030 ms over 9800 requests against 1000 ms over 10 000.
        assert!(t.contains("requests/s 98.0%"), "{t}");
        assert!(t.contains("per request 105.1% (+5.10 µs a request)"), "{t}");
        assert!(t.contains("round by round"), "{t}");
    }

    #[test]
    fn rounds_are_compared_pairwise() {
        let mut r = results(0, 0, 0);
        r.rows[0].rounds = vec![90.0, 200.0, 99.0, 50.0];
        r.rows[1].rounds = vec![100.0, 200.0, 100.0, 100.0];
        assert_eq!(round_ratios(&r), [0.9, 1.0, 0.99, 0.5]);
        // The median of 0.5, 0.9, 0.99 and 1.
        assert!((median(&round_ratios(&r)) - 0.945).abs() < 1e-9);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        let t = table(&r);
        assert!(
            t.contains("90.0%, 100.0%, 99.0%, 50.0%; median 94.5%."),
            "{t}"
        );
    }
}
